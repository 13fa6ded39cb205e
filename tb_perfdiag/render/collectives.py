"""A run's collective join (``analysis.run.join.Join``, through ``analysis.run.view.RunView``) as one host sees it: the JSON of
the host page's Collectives card, the per-step peer wait of its step bars, the wait and
transfer of its "Device time by op" collective groups, and the wait slices of the
trace-viewer overlay.

Peer wait is the part of a collective op spent waiting for the last participant to arrive
(GUIDE §4): min(op duration, last arrival − own arrival); the rest of the op is transfer.
A host's figure is the mean over its participating devices (device time is never summed
over devices); per device it is that device's own.
"""
from __future__ import annotations

import numpy as np

from ..analysis import causes as C
from ..analysis.collectives.instances import clock_origin_ps
from ..analysis.run.join import DEVICE_COMPUTE, SAME_CLOCK_NS, Join
from ..analysis.run.stragglers import LATE_START, NOT_IN_TRACE, per_step_median
from ..analysis.run.view import RunView
from ..analysis.device_time.by_op import fold_kernel_name
from ..analysis.result import Diagnosis
from ..units import duration
from .efficiency import run_json

WAITED_FOR = 5              # hosts named per op as the ones it waited for
MAX_STEPS_LISTED = 50       # steps listed per op (the most waited first)
CAUSE_DEVICE = DEVICE_COMPUTE

NOTE = ("Peer wait = min(op duration, last arrival − own arrival) per collective instance "
        "and device (GUIDE §4): busy time that would vanish if the last participant came on "
        "time; the rest of the op is transfer. Per host: the mean over its devices.")
ALONE_SHORT = ("no other participant's profile shares its collectives: the wait cannot be told "
               "from the transfer without them")
ALONE = ("Only this host's profile holds these collectives (the other participants were not "
         "captured or share no instance with it): the wait for peers cannot be told from the "
         "transfer without their profiles, so collective time is shown as it is, with how "
         "its instances' durations vary.")


def clocks_json(j) -> list:
    """The run's clocks: which hosts share each (and why), the offset used for it and
    how finely arrivals order on it."""
    return [{"hosts": [j.hosts[t] for t in ck["tables"]], "basis": ck["basis"],
             "offset_ns": ck["estimated_ns"] if ck["applied"] else 0,
             "estimated_ns": ck["estimated_ns"], "residual_ns": ck["residual_ns"],
             "applied": ck["applied"], "resolution_ns": ck["resolution_ns"]}
            for ck in j.clocks]


def clock_note(j) -> str:
    """How the participants' clocks were put on one, in one sentence a reader needs no
    glossary for."""
    cks = j.clocks or []
    if len(cks) <= 1:
        basis = cks[0]["basis"] if cks else ""
        why = {"one process": "devices of one process",
               "ends agree": "the instances' ends agree within "
                             f"{duration(SAME_CLOCK_NS)}"}.get(basis, basis)
        res = cks[0]["resolution_ns"] if cks else 0
        return (f"one clock ({why}), so no offset; arrivals closer than {duration(res)} (how "
                "closely the instances' ends agree) are not ordered")
    moved, kept = [], []
    for ck in cks:
        who = ", ".join(j.hosts[t] for t in ck["tables"][:3]) + (
            f" and {len(ck['tables']) - 3} more" if len(ck["tables"]) > 3 else "")
        if ck["applied"]:
            moved.append(f"{who} by {'+' if ck['estimated_ns'] >= 0 else '−'}"
                         f"{duration(abs(ck['estimated_ns']))} (give or take "
                         f"{duration(ck['residual_ns'])})")
        else:
            kept.append(who)
    said = [f"{', '.join(moved)} moved to match the instances' ends"] if moved else []
    if kept:
        said.append(f"{'; '.join(kept)} as recorded (no offset)")
    return f"{len(cks)} clocks: " + "; ".join(said)


def late_text(why: dict | None, culprit: str | None = None, participant: str = "participant") -> str:
    """Why a straggler was late, in words (``run.stragglers.why_late``): the idle cause
    only where it explains half of its lateness; else where the rest comes from.  Sums
    over the instances it was late to are said per instance."""
    if not why or not why.get("cause"):
        return "why it was late is not in the trace"
    c = why["cause"]
    n = max(int(why.get("instances") or 1), 1)
    each = f" before each of the {n} collectives it was late to" if n > 1 else ""
    ms = lambda v: duration(v or 0)   # noqa: E731  (the one unit rule)
    if c == LATE_START:
        ss = why.get("step_start_excess_ns")
        began = (f"its step began {ms(ss)} after the median {participant}'s" if ss and ss > 0
                 else f"its work before the collectives began {ms(why.get('start_excess_ns'))} "
                      f"after the median {participant}'s")
        if why.get("before_capture"):
            return (f"{began}: the lateness comes before the capture — profile from an "
                    "earlier step or capture the data loader")
        return f"{began}: the lateness comes before that step's first collective"
    if c == DEVICE_COMPUTE:
        return (f"its device computed {ms(why.get('busy_excess_ns', 0) / n)} more than the median "
                f"{participant}'s{each} (imbalance)")
    if c == NOT_IN_TRACE:
        return (f"its own idle and compute explain little of its {ms(why.get('lateness_ns', 0) / n)} "
                f"lateness{each}: the cause is not in the trace")
    return (f"late because of {c.replace('_', ' ')}" + (f" ({culprit})" if culprit else "")
            + f": {ms(why.get('idle_excess_ns', 0) / n)} more than the median {participant}'s{each}")


def _cols(j: Join, host: str) -> np.ndarray:
    if host not in j.hosts:
        return np.zeros(0, np.int64)
    h = j.hosts.index(host)
    return np.flatnonzero(np.array([p.host for p in j.participants], np.int64) == h)


def group_label(key: str) -> str:
    """The "Device time by op" group an instance key falls in (kernels folded as there)."""
    return fold_kernel_name(key)


def _mean_over(a: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Per row, the mean of ``a`` over the present cells (0 where none)."""
    n = present.sum(axis=1)
    return np.where(n > 0, (a * present).sum(axis=1) / np.maximum(n, 1), 0.0)


def host_json(view: RunView, host: str, diag: Diagnosis | None,
              steps: int | None = None) -> dict:
    """The Collectives card of ``host`` in its run's ``view`` (``diag``: the host's own
    diagnosis, for its device ids and windows)."""
    j, figs = view.join, view.figures
    cols = _cols(j, host)
    n_i = len(j)
    present = j.present[:, cols]
    mine = present.any(axis=1)
    host_of = np.array([p.host for p in j.participants], np.int64)
    last_host = [j.hosts[int(host_of[int(p)])] for p in j.last.tolist()]
    wait = _mean_over(j.wait[:, cols], present)
    idle_w = _idle_wait(j)
    iwait = _mean_over(idle_w[:, cols], present)
    transfer = _mean_over(j.transfer[:, cols], present)
    resolved = j.resolved if j.resolved is not None else np.ones(n_i, bool)
    # the last arriver as this host names it: another host by its name, one of its own
    # devices by the device's (devices of one process wait for each other too)
    last_label = [j.participants[int(p)].device if last_host[i] == host else last_host[i]
                  for i, p in enumerate(j.last.tolist())]
    step_of = np.where(present, j.step[:, cols], -1).max(axis=1) if cols.size else \
        np.full(n_i, -1)
    n_steps = steps if steps else max(len(np.unique(step_of[step_of >= 0])), 1)
    f = figs.get(host) or {}
    ops = _op_rows(j, host, cols, mine, present, wait, transfer, iwait, idle_w, resolved,
                   last_host, last_label, step_of, n_steps)
    ops.sort(key=lambda o: (-o["wait_ns"], o["op"]))
    devices = _devices(j, cols, diag, n_steps)
    groups = _groups(j, cols, diag)
    by_step = _step_peer_wait(view, host, diag, devices)
    stragglers = _stragglers(figs)
    lat = j.lateness[:, cols]
    mine_last = np.array([last_host[i] == host for i in range(n_i)], bool) & mine & resolved
    return {
        "state": "joined", "host": host, "hosts": len(j.hosts),
        "participants": len(j.participants), "run_instances": n_i,
        "instances": int(mine.sum()), "steps": n_steps,
        "peer_wait_ns": f.get("peer_wait_ns"), "peer_wait_total_ns": f.get("peer_wait_total_ns"),
        "idle_wait_ns": f.get("idle_wait_ns"), "idle_wait_total_ns": f.get("idle_wait_total_ns"),
        "saving_per_step_ns": f.get("saving_per_step_ns"),
        "transfer_total_ns": int(round(float(transfer[mine].sum()))),
        "last_arrivals": int(mine_last.sum()),
        "lateness_ns": int(round(float(np.median(lat[mine_last].max(axis=1)))))
        if mine_last.any() and cols.size else None,
        "caused_wait_per_step_ns": f.get("caused_wait_per_step_ns"),
        "straggler": bool(f.get("straggler")), "straggler_cause": f.get("straggler_cause"),
        "culprit": f.get("culprit"), "late_steps": f.get("late_steps") or [],
        "clock": (j.offsets_ns or {}).get(host), "clock_noisy": bool(j.noisy),
        "clocks": len(j.clocks), "clock_note": clock_note(j),
        "unresolved": int((~resolved[mine]).sum()),
        "device_last_arrivals": _count([last_label[i] for i in range(n_i)
                                        if mine[i] and last_host[i] == host and resolved[i]]),
        "unmatched": [u for u in j.unmatched if u.get("host") in (None, host)],
        "stragglers": stragglers, "ops": ops, "devices": devices, "groups": groups,
        "step_peer_wait_ns": by_step, "note": NOTE,
        # the MFU waterfall with this peer wait in it (the page's card shows it)
        "efficiency": run_json(diag, view.waterfall(host, diag)) if diag is not None else None,
    }


def _op_rows(j: Join, host: str, cols, mine, present, wait, transfer, iwait, idle_w,
             resolved, last_host, last_label, step_of, n_steps) -> list:
    """One row per collective kind of ``host``: its wait and transfer, whom it waited
    for, who arrived last, its worst steps."""
    ops = []
    for kind in sorted(set(j.kinds[i] for i in np.flatnonzero(mine).tolist())):
        rows = np.flatnonzero(mine & (np.array(j.kinds) == kind))
        w, t = float(wait[rows].sum()), float(transfer[rows].sum())
        who: dict = {}
        last_count: dict = {}
        for i in rows.tolist():
            # an instance whose last arrival the clocks cannot tell from the next names
            # no one last: it counts as "together"
            if resolved[i]:
                last_count[last_host[i]] = last_count.get(last_host[i], 0) + 1
            # whom its devices waited for, inside the op and idle before it
            for c in cols.tolist():
                w_c = float(j.wait[i, c] + idle_w[i, c]) if j.present[i, c] else 0.0
                k = _awaited_key(j, host, i, c) if w_c > 0 else ()
                if k:
                    who[k] = who.get(k, 0.0) + w_c / max(int(present[i].sum()), 1)
        per_step: dict = {}
        for i in rows.tolist():
            s = int(step_of[i])
            if s >= 0 and wait[i] > 0:
                per_step[s] = per_step.get(s, 0.0) + float(wait[i])
        worst = sorted(per_step, key=lambda s: -per_step[s])[:MAX_STEPS_LISTED]
        ops.append({
            "op": kind, "keys": sorted({j.keys[i] for i in rows.tolist()}),
            "instances": int(rows.size), "wait_ns": int(round(w)),
            "wait_per_step_ns": int(round(w / n_steps)), "transfer_ns": int(round(t)),
            "transfer_per_step_ns": int(round(t / n_steps)),
            "wait_share": w / (w + t) if w + t > 0 else None,
            "idle_wait_ns": int(round(float(iwait[rows].sum()))),
            "waited_for": [{**_awaited_json(k), "wait_ns": int(round(v))}
                           for k, v in sorted(who.items(), key=lambda x: -x[1])[:WAITED_FOR]],
            "last_devices": _count([last_label[i] for i in rows.tolist()
                                    if last_host[i] == host and resolved[i]]),
            "last_arrivers": dict(sorted(last_count.items(), key=lambda x: -x[1])),
            "arrived_last": last_count.get(host, 0),
            "together": int((~resolved[rows]).sum()),
            "steps": [{"step": s, "wait_ns": int(round(per_step[s]))} for s in worst],
        })
    return ops


def _step_peer_wait(view: RunView, host: str, diag, devices: list) -> dict:
    """{step id: {device id: peer wait ns}} of ``host`` ({} without its diagnosis)."""
    cells = view.peer_cells(host, diag)
    by_step = {}
    ids = {d["id"] for d in devices if d["id"] is not None}
    if cells is not None:
        for s in range(cells.shape[0]):
            row = {str(d): int(round(cells[s, d] / 1000)) for d in sorted(ids)}
            if row:
                by_step[str(int(diag.steps.ids[s]))] = row
    return by_step


def _stragglers(figs: dict) -> list:
    """The run's stragglers, the one that causes the most wait first."""
    stragglers = [{"host": h, "cause": x.get("straggler_cause"), "culprit": x.get("culprit"),
                   "last_arrivals": x.get("last_arrivals"),
                   "caused_wait_per_step_ns": x.get("caused_wait_per_step_ns"),
                   "saving_per_step_ns": x.get("saving_per_step_ns"),
                   "next_straggler": x.get("next_straggler"),
                   "next_saving_per_step_ns": x.get("next_saving_per_step_ns"),
                   "why": late_text(x.get("late_why"), x.get("culprit")),
                   "late_steps": x.get("late_steps") or [],
                   "intermittent": bool(x.get("intermittent"))}
                  for h, x in figs.items() if x.get("straggler")]
    stragglers.sort(key=lambda s: -(s["caused_wait_per_step_ns"] or 0))
    return stragglers


def _awaited_key(j: Join, host: str, i: int, c: int) -> tuple:
    """Whom participant ``c`` of ``host`` waited for at instance ``i``, as a sorted tuple
    of (host, device of ``host`` or None): one, several that arrived together, or ()."""
    h = j.hosts.index(host)
    return tuple(sorted({(j.hosts[j.participants[p].host],
                          j.participants[p].device if j.participants[p].host == h else None)
                         for p in j.awaited(i, c)}, key=lambda x: (x[0], x[1] or "")))


def _awaited_json(k: tuple) -> dict:
    """``{"host", "device"?}`` for one awaited participant (``device``: one of this host's
    own, devices of one process); several that arrived together are listed in
    ``together`` by their names (a device of this host by its own)."""
    if len(k) == 1:
        return {"host": k[0][0], **({"device": k[0][1]} if k[0][1] else {})}
    hosts = {x[0] for x in k}
    return {"host": next(iter(hosts)) if len(hosts) == 1 else None,
            "together": [d or hname for hname, d in k]}


def _count(xs: list) -> dict:
    out: dict = {}
    for x in xs:
        out[x] = out.get(x, 0) + 1
    return dict(sorted(out.items(), key=lambda x: -x[1]))


def _idle_wait(j: Join) -> np.ndarray:
    return j.idle_wait if j.idle_wait is not None else np.zeros_like(j.wait)


def _device_id(diag: Diagnosis | None, name: str):
    if diag is None:
        return None
    names = list(diag.devices.name)
    return names.index(name) if name in names else None


def _devices(j: Join, cols: np.ndarray, diag: Diagnosis | None, n_steps: int = 0) -> list:
    """Per participating device: its peer wait and transfer over the capture and per
    typical step (the host's figure, ``per_step_median``: what the headline says), the
    duty points the wait is (of its busy window), and whom and where it waited most."""
    host_of = np.array([p.host for p in j.participants], np.int64)
    iw_all = _idle_wait(j)
    out = []
    for c in cols.tolist():
        pr = j.present[:, c]
        w = np.where(pr, j.wait[:, c], 0)
        iw = np.where(pr, iw_all[:, c], 0)
        who: dict = {}
        at: dict = {}
        host = j.hosts[int(host_of[c])]
        for i in np.flatnonzero((w + iw) > 0).tolist():
            k = _awaited_key(j, host, i, c)
            if not k:
                continue
            who[k] = who.get(k, 0) + int(w[i] + iw[i])
            at[j.kinds[i]] = at.get(j.kinds[i], 0) + int(w[i] + iw[i])
        name = j.participants[c].device
        d = _device_id(diag, name)
        # the device's whole collective-wait idle (its "Idle time by cause" row), of which
        # ``idle_wait_ns`` is what came before the last participant was ready
        cw = (int(diag.devices.idle_by_cause[d, C.ALL.index(C.COLLECTIVE_WAIT)]) // 1000
              if d is not None else None)
        window = None
        if d is not None and diag.devices.ops[d] and diag.devices.hi[d] > diag.devices.lo[d]:
            window = (int(diag.devices.hi[d]) - int(diag.devices.lo[d])) // 1000
        total = int(w.sum())
        top = max(who, key=who.get) if who else None
        out.append({
            "id": d, "name": name, "instances": int(pr.sum()), "wait_ns": total,
            "idle_wait_ns": int(iw.sum()),
            "wait_per_step_ns": _round(per_step_median(np.where(pr, j.step[:, c], -1), w, n_steps)),
            "idle_wait_per_step_ns": _round(per_step_median(np.where(pr, j.step[:, c], -1), iw,
                                                            n_steps)),
            "transfer_ns": int(np.where(pr, j.transfer[:, c], 0).sum()),
            "window_ns": window,
            "wait_points": 100.0 * total / window if window else None,
            "collective_wait_idle_ns": cw,
            "waited_for": top[0][0] if top and len(top) == 1 and top[0][1] is None else None,
            "waited_for_device": top[0][1] if top and len(top) == 1 else None,
            # several participants ready within the clocks' margin of each other
            "waited_for_together": _awaited_json(top)["together"] if top and len(top) > 1
            else [],
            "waited_at": max(at, key=at.get) if at else None})
    return out


def _round(x) -> int | None:
    return None if x is None else int(round(x))


def _groups(j: Join, cols: np.ndarray, diag: Diagnosis | None) -> list:
    """Peer wait and transfer per device and "Device time by op" group (the whole
    capture): the collective rows of that table split in two."""
    acc: dict = {}
    for c in cols.tolist():
        d = _device_id(diag, j.participants[c].device)
        for i in np.flatnonzero(j.present[:, c]).tolist():
            k = (d, group_label(j.keys[i]))
            a = acc.setdefault(k, [0, 0, 0])
            a[0] += int(j.wait[i, c])
            a[1] += int(j.transfer[i, c])
            a[2] += 1
    return [{"device": d, "name": n, "wait_ns": a[0], "transfer_ns": a[1], "instances": a[2]}
            for (d, n), a in sorted(acc.items(), key=lambda x: (str(x[0][0]), -x[1][0]))]


def wait_slices(j: Join, host: str, diag: Diagnosis) -> list:
    """[(device row, start ps, wait ps, duration ps, op kind, last arriver)] on the host's
    own clock (trace ps from its origin): where each collective op of the host waited."""
    cols = _cols(j, host)
    if not cols.size:
        return []
    off = (j.offsets_ns or {}).get(host) or {}
    shift = int(off.get("estimated_ns") or 0) if off.get("applied") else 0
    origin_ns = clock_origin_ps(diag.source) // 1000
    host_of = np.array([p.host for p in j.participants], np.int64)
    out = []
    for c in cols.tolist():
        d = _device_id(diag, j.participants[c].device)
        if d is None:
            continue
        for i in np.flatnonzero(j.present[:, c]).tolist():
            local = int(j.arrival[i, c]) + shift + j.base_ns - origin_ns
            out.append((d, local * 1000, int(j.wait[i, c]) * 1000,
                        (int(j.end[i, c]) - int(j.arrival[i, c])) * 1000, j.kinds[i],
                        j.hosts[int(host_of[int(j.last[i])])]))
    return out


def alone_json(row: dict, failed: list = (), hosts: int = 1) -> dict:
    """A host whose collectives no other captured participant shares (GUIDE §4: the wait
    cannot be told from the transfer): their time and how instance durations vary;
    ``failed``: the run's rows that could not be analysed (they may be the peers)."""
    note = ALONE
    if failed:
        note += (f" {len(failed)} of the run's {hosts} hosts could not be analysed "
                 f"({failed[0].get('host')}: {failed[0].get('error') or failed[0].get('status')})"
                 ": their collectives could not be matched.")
    return {"state": "alone", "collective_ns": row.get("collective_ns"),
            "collective_total_ns": row.get("collective_total_ns"),
            "ops": [{"op": k, **v} for k, v in (row.get("collective_ops") or {}).items()],
            "failed_hosts": [r.get("host") for r in failed], "note": note}
