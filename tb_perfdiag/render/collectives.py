"""A run's collective join (``analysis.collectives.Join``) as one host sees it: the JSON of
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

from ..analysis.collectives import DEVICE_COMPUTE, Join, clock_origin_ps
from ..analysis.compare import peer_wait_cells
from ..analysis.device_ops import fold_kernel_name
from ..analysis.result import Diagnosis

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


def host_json(j: Join, host: str, diag: Diagnosis | None, figs: dict,
              steps: int | None = None) -> dict:
    """The Collectives card of ``host`` (``figs``: ``collectives.host_figures`` of the run,
    every host's; ``diag``: the host's own diagnosis, for its device ids and windows)."""
    cols = _cols(j, host)
    n_i = len(j)
    present = j.present[:, cols]
    mine = present.any(axis=1)
    host_of = np.array([p.host for p in j.participants], np.int64)
    last_host = [j.hosts[int(host_of[int(p)])] for p in j.last.tolist()]
    wait = _mean_over(j.wait[:, cols], present)
    transfer = _mean_over(j.transfer[:, cols], present)
    step_of = np.where(present, j.step[:, cols], -1).max(axis=1) if cols.size else \
        np.full(n_i, -1)
    n_steps = steps if steps else max(len(np.unique(step_of[step_of >= 0])), 1)
    f = figs.get(host) or {}
    ops = []
    for kind in sorted(set(j.kinds[i] for i in np.flatnonzero(mine).tolist())):
        rows = np.flatnonzero(mine & (np.array(j.kinds) == kind))
        w, t = float(wait[rows].sum()), float(transfer[rows].sum())
        who: dict = {}
        last_count: dict = {}
        for i in rows.tolist():
            last_count[last_host[i]] = last_count.get(last_host[i], 0) + 1
            if wait[i] > 0 and last_host[i] != host:
                who[last_host[i]] = who.get(last_host[i], 0.0) + float(wait[i])
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
            "waited_for": [{"host": k, "wait_ns": int(round(v))} for k, v in
                           sorted(who.items(), key=lambda x: -x[1])[:WAITED_FOR]],
            "last_arrivers": dict(sorted(last_count.items(), key=lambda x: -x[1])),
            "arrived_last": last_count.get(host, 0),
            "steps": [{"step": s, "wait_ns": int(round(per_step[s]))} for s in worst],
        })
    ops.sort(key=lambda o: (-o["wait_ns"], o["op"]))
    devices = _devices(j, cols, diag)
    groups = _groups(j, cols, diag)
    cells = peer_wait_cells(j, host, diag) if diag is not None else None
    by_step = {}
    ids = {d["id"] for d in devices if d["id"] is not None}
    if cells is not None:
        for s in range(cells.shape[0]):
            row = {str(d): int(round(cells[s, d] / 1000)) for d in sorted(ids)}
            if row:
                by_step[str(int(diag.steps.ids[s]))] = row
    stragglers = [{"host": h, "cause": x.get("straggler_cause"), "culprit": x.get("culprit"),
                   "last_arrivals": x.get("last_arrivals"),
                   "caused_wait_per_step_ns": x.get("caused_wait_per_step_ns"),
                   "late_steps": x.get("late_steps") or [],
                   "intermittent": bool(x.get("intermittent"))}
                  for h, x in figs.items() if x.get("straggler")]
    stragglers.sort(key=lambda s: -(s["caused_wait_per_step_ns"] or 0))
    lat = j.lateness[:, cols]
    mine_last = np.array([last_host[i] == host for i in range(n_i)], bool) & mine
    return {
        "state": "joined", "host": host, "hosts": len(j.hosts),
        "participants": len(j.participants), "run_instances": n_i,
        "instances": int(mine.sum()), "steps": n_steps,
        "peer_wait_ns": f.get("peer_wait_ns"), "peer_wait_total_ns": f.get("peer_wait_total_ns"),
        "transfer_total_ns": int(round(float(transfer[mine].sum()))),
        "last_arrivals": int(mine_last.sum()),
        "lateness_ns": int(round(float(np.median(lat[mine_last].max(axis=1)))))
        if mine_last.any() and cols.size else None,
        "caused_wait_per_step_ns": f.get("caused_wait_per_step_ns"),
        "straggler": bool(f.get("straggler")), "straggler_cause": f.get("straggler_cause"),
        "culprit": f.get("culprit"), "late_steps": f.get("late_steps") or [],
        "clock": (j.offsets_ns or {}).get(host), "clock_noisy": bool(j.noisy),
        "unmatched": [u for u in j.unmatched if u.get("host") in (None, host)],
        "stragglers": stragglers, "ops": ops, "devices": devices, "groups": groups,
        "step_peer_wait_ns": by_step, "note": NOTE,
    }


def _device_id(diag: Diagnosis | None, name: str):
    if diag is None:
        return None
    names = list(diag.devices.name)
    return names.index(name) if name in names else None


def _devices(j: Join, cols: np.ndarray, diag: Diagnosis | None) -> list:
    """Per participating device: its peer wait and transfer over the capture, the duty
    points the wait is (of its busy window), and whom and where it waited most."""
    host_of = np.array([p.host for p in j.participants], np.int64)
    out = []
    for c in cols.tolist():
        pr = j.present[:, c]
        w = np.where(pr, j.wait[:, c], 0)
        who: dict = {}
        at: dict = {}
        for i in np.flatnonzero(w > 0).tolist():
            h = j.hosts[int(host_of[int(j.last[i])])]
            who[h] = who.get(h, 0) + int(w[i])
            at[j.kinds[i]] = at.get(j.kinds[i], 0) + int(w[i])
        name = j.participants[c].device
        d = _device_id(diag, name)
        window = None
        if d is not None and diag.devices.ops[d] and diag.devices.hi[d] > diag.devices.lo[d]:
            window = (int(diag.devices.hi[d]) - int(diag.devices.lo[d])) // 1000
        total = int(w.sum())
        out.append({
            "id": d, "name": name, "instances": int(pr.sum()), "wait_ns": total,
            "transfer_ns": int(np.where(pr, j.transfer[:, c], 0).sum()),
            "window_ns": window,
            "wait_points": 100.0 * total / window if window else None,
            "waited_for": max(who, key=who.get) if who else None,
            "waited_at": max(at, key=at.get) if at else None})
    return out


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
