"""Pods: a diagnosis → one host's summary row; the rows of a run → the pod summary
(stragglers against the median host, sorted and paged), computed from rows alone so
that 1,000 stored rows summarise a pod without loading any trace."""
from __future__ import annotations

import re

import numpy as np

from ..analysis import causes as C
from ..analysis.efficiency import waterfall as W
from ..analysis.collectives import instances as coll
from ..analysis.compare.diff import graph_counts
from ..analysis.run.peer_wait import join_wait
from ..analysis.run.view import RunView, run_view
from ..analysis.run.waterfalls import device_rows
from ..analysis.result import Diagnosis
from .collectives import clock_note, clocks_json, late_text
from .efficiency import part_label
from .json import gap_ids, ns, ns_list
from ..units import duration
from .efficiency import pct, points, run_files
from .text import safe as safe_text

SLOWER_STEP = 1.10          # straggler: typical step 10 % slower than the median host's…
LOWER_DUTY = 0.05           # …or duty cycle 5 points below it
TOP_CAUSES = 3              # cause shares kept per row
WATERFALL_PARTS = 5         # waterfall parts a host's text line names (and peer wait, MFU)

# sort keys of the summary table: (row → value or None, descending by default)
SORTS = {
    "straggler": None,
    "host": None,
    "duty_cycle": (lambda r: r.get("duty_cycle"), False),
    "mfu": (lambda r: r.get("mfu"), False),
    "typical_step": (lambda r: r.get("typical_step_ns"), True),
    "worst_gap": (lambda r: (r.get("worst_gap") or {}).get("duration_ns"), True),
    "idle": (lambda r: r.get("idle_ns"), True),
    "peer_wait": (lambda r: r.get("peer_wait_ns"), True),
    "last_arrivals": (lambda r: r.get("last_arrivals"), True),
}
SORT_CHOICES = tuple(SORTS) + tuple(f"cause.{c}" for c in C.ALL)


def _median(xs):
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else None


def host_stats(diag: Diagnosis) -> dict:
    """One host's row without its name: duty cycle per device and on average, typical
    step (``TYPICAL_STEP``), worst gap, top finding, idle time by cause per typical step and the
    largest causes' shares of the host's idle time."""
    S, D = diag.steps, diag.devices
    steps = (np.asarray(ns_list(S.host_end)) - np.asarray(ns_list(S.host_start))).tolist()
    # idle time of a typical step by cause: the median over steps, so a one-off (the
    # first step's compilation) does not hide what every step loses; per device (the
    # mean over devices), never summed over them
    n_dev = max(int(S.has_device.sum()), 1)
    cells = np.rint(S.idle_by_cause[:, S.has_device, :].sum(axis=1) / 1000 / n_dev
                    ).astype(np.int64)
    per_step = {c: cells[:, i].tolist() for i, c in enumerate(C.ALL) if cells[:, i].any()}
    # the duty cycle the host's page and ``diagnose`` lead with: busy over the window its
    # idle by cause adds up over (its steps and its work outside them), not its active
    # span alone (host0 read 97 % here, 95 % on its page)
    def _duty(d):
        a, b = D.window(d)
        return int(D.busy[d]) / (b - a) if b > a else 1.0
    duty_of = [_duty(d) if D.ops[d] else None for d in range(len(D))]
    duty = [x for x in duty_of if x is not None]
    worst = _worst_gap(diag)
    typical = {c: int(_median(v)) for c, v in per_step.items() if _median(v)}
    active = np.asarray([x is not None for x in duty_of], bool)
    n_act = max(int(active.sum()), 1)
    # the whole capture, per device with activity (the mean, never the sum): the window
    # its idle by cause adds up over (its activity and the step windows on it)
    cap_window = int(sum(D.window(d)[1] - D.window(d)[0] for d in np.flatnonzero(active).tolist())
                     / n_act / 1000) if active.any() else None
    cap_busy = int(D.busy[active].sum() / n_act / 1000) if active.any() else None
    cap_by_cause = D.idle_by_cause[active].sum(axis=0) / 1000 / n_act \
        if active.any() else np.zeros(len(C.ALL))
    typ_step, window, busy, by_cause = _typical_window(S, steps, cap_window, cap_busy,
                                                       cap_by_cause)
    idle = float(by_cause.sum())
    top = np.argsort(-by_cause, kind="stable")[:TOP_CAUSES]
    shares = {C.ALL[i]: round(float(by_cause[i]) / idle, 3) for i in top if idle > 0}
    shares = {c: v for c, v in shares.items() if v > 0}
    # MFU over each device's steps window (``EfficiencyTable``), the mean over the devices
    # that have one
    E = getattr(diag, "efficiency", None)
    mfu_of = [float(E.mfu[d]) if E is not None and d < len(E.mfu) and np.isfinite(E.mfu[d])
              else None for d in range(len(D))]
    mfus = [x for x in mfu_of if x is not None]
    # a lower bound where ops with no cost figure hold much of the op time (mfu.py)
    lower = [bool(E.mfu_lower_bound[d]) if E is not None and d < len(E.mfu_lower_bound)
             else False for d in range(len(D))]
    # where a device's matmuls are memory-bound (decode): its bandwidth utilisation
    bw_of = [float(E.bandwidth_utilisation[d])
             if E is not None and d < len(getattr(E, "matmul_memory_bound", ())) and
             E.matmul_memory_bound[d] and np.isfinite(E.bandwidth_utilisation[d]) else None
             for d in range(len(D))]
    bws = [x for x in bw_of if x is not None]
    graph_of = [graph_counts(E, d) for d in range(len(D))]
    graphed = [g for g in graph_of if g[1] is not None]
    out = {
        "status": 200,
        "devices": [{"name": D.name[d], "duty_cycle": duty_of[d], "mfu": mfu_of[d],
                     "mfu_lower_bound": lower[d] and mfu_of[d] is not None,
                     "bandwidth_utilisation": bw_of[d],
                     "graph_kernels_matched": graph_of[d][0],
                     "graph_kernels_total": graph_of[d][1],
                     "waterfall": _own_waterfall(E, d)}
                    for d in range(len(D))],
        "duty_cycle": sum(duty) / len(duty) if duty else None,
        "mfu": sum(mfus) / len(mfus) if mfus else None,
        "mfu_lower_bound": any(lw and m is not None for lw, m in zip(lower, mfu_of)),
        "bandwidth_utilisation": sum(bws) / len(bws) if bws else None,
        # over the devices that replay graphs: a pod's host with unmatched replays stands out
        "graph_kernels_matched": sum(g[0] for g in graphed) if graphed else None,
        "graph_kernels_total": sum(g[1] for g in graphed) if graphed else None,
        "steps": len(steps), "avg_step_ns": int(sum(steps) / len(steps)) if steps else None,
        # the one step time of every face (analysis.result.TYPICAL_STEP)
        "typical_step_ns": int(round(S.typical_step_ps() / 1000)) if steps else None,
        "worst_gap": worst,
        "top_finding": diag.findings[0].title if diag.findings else None,
        "step_idle_ns": typical,
        # one window: the typical step's (``typical_step_id``; the whole trace without
        # steps), per device with activity (the mean), its busy and idle time and the
        # largest causes' shares of that idle time
        "typical_step_id": typ_step,
        "window_ns": window,
        "busy_ns": busy,
        "idle_ns": int(round(idle)),
        "cause_shares": shares,
        "top_cause": next(iter(shares), None),
        # the whole capture's
        "capture_window_ns": cap_window,
        "capture_busy_ns": cap_busy,
        "capture_idle_ns": int(round(float(cap_by_cause.sum()))),
        # the duty cycle's window (first to last activity, mean over devices): peer wait
        # in duty points
        "duty_window_ns": int(sum(int(D.hi[d]) - int(D.lo[d]) for d in np.flatnonzero(active).tolist())
                              / n_act / 1000) if active.any() else None,
    }
    _add_join_fields(diag, E, out)
    return out


def _worst_gap(diag: Diagnosis):
    """The longest gap's id, length, cause and step (None without gaps)."""
    S, g = diag.steps, diag.gaps
    worst = None
    if len(g):
        st = int(g.step[0])
        worst = {"id": gap_ids(diag, [0])[0], "duration_ns": ns(g.end[0] - g.start[0]),
                 "cause": C.ALL[int(g.cause[0])],
                 "step": int(S.ids[st]) if st >= 0 else None}
    return worst


def _typical_window(S, steps: list, cap_window, cap_busy, cap_by_cause):
    """(typical step id, its window, busy time and idle by cause, per device with
    activity)."""
    # one window a row: the typical step's (the step of median length), its busy and idle
    # time from that same window; without steps the whole capture's
    typ_step, window, busy = None, cap_window, cap_busy
    by_cause = cap_by_cause
    dev_steps = np.flatnonzero(S.has_device) if len(S) else np.zeros(0, np.int64)
    if steps and dev_steps.size:
        k = int(np.argsort(np.asarray(steps), kind="stable")[(len(steps) - 1) // 2])
        typ_step = int(S.ids[k])
        window = int(round(float((S.win_end[k, dev_steps] - S.win_start[k, dev_steps]).mean())
                           / 1000))
        busy = int(round(float(S.busy[k, dev_steps].mean()) / 1000))
        by_cause = S.idle_by_cause[k, dev_steps, :].sum(axis=0) / 1000 / dev_steps.size
    return typ_step, window, busy, by_cause


def _add_join_fields(diag: Diagnosis, E, out: dict) -> None:
    """What the run's join across hosts needs, into ``out`` (dropped from the rows the
    summary returns)."""
    S, D = diag.steps, diag.devices
    ct = diag.collectives
    if ct is not None and len(ct) and E is not None and len(E.coll_points) == len(D):
        # each device's waterfall at full precision and its collectives' points: the
        # run's join splits them again (``apply_collectives``); dropped from the rows the
        # summary returns
        out["waterfall_split"] = [
            [float(x) for x in E.waterfall[d].tolist()] + [float(E.coll_points[d])]
            if np.isfinite(E.waterfall[d]).all() else None for d in range(len(D))]
    if ct is not None and len(ct):
        # the host's collectives, for the join across the run's hosts (``collectives``);
        # dropped from the rows the summary returns
        out["collectives_table"] = coll.to_row(ct, coll.clock_origin_ps(diag.source),
                                               list(D.name))
        out["step_ids"] = S.ids.tolist()
        # each step's host start on the table's clock (ns from its origin): where a late
        # arriver's step began against its peers'
        out["step_start_ns"] = (np.asarray(S.host_start, np.int64) // 1000).tolist()
        out.update(alone_figures(diag))


def _own_waterfall(E, d: int):
    """Device ``d``'s waterfall over its steps window (``devices[].efficiency.waterfall``
    of the diagnosis JSON), None without one."""
    if E is None or d >= len(E.mfu):
        return None
    return W.as_dict(E.waterfall[d])


def run_waterfalls(row: dict, j) -> bool:
    """The row's device waterfalls with its peer wait from the run's join ``j`` (the
    figures of the /collectives JSON's ``efficiency.devices``); whether the join covers
    the row's host."""
    split = row.get("waterfall_split")
    names = [x.get("name") for x in row.get("devices") or []]
    jw = join_wait(j, row["host"], names, row.get("step_ids") or []) if split else None
    if jw is None or len(split) != len(names):
        return False
    n_p = len(W.PARTS)
    have = [k for k, x in enumerate(split) if x is not None and len(x) == n_p + 1]
    if not have:
        return False
    m = np.array([split[k] for k in have], np.float64)
    rows, ok = device_rows(m[:, :n_p], m[:, n_p], jw.wait[have], jw.dur[have])
    for i, k in enumerate(have):
        if ok[i]:
            row["devices"][k]["waterfall"] = W.as_dict(rows[i])
    row["waterfall_peer_wait_from"] = int(jw.hosts)
    return True


def alone_figures(diag: Diagnosis) -> dict:
    """What one host's collectives say without its peers (GUIDE §4): their time per
    typical step and how the instances' durations vary, per op kind — the wait cannot be
    told from the transfer without the other participants' profiles."""
    ct, S = diag.collectives, diag.steps
    dur = (ct.end - ct.start) // 1000
    kinds = np.array([ct.kinds[k] for k in ct.key.tolist()], dtype=object)
    n_dev = max(np.unique(ct.device).size, 1)
    steps = max(len(S), 1)
    by_op = {}
    for k in sorted(set(kinds.tolist())):
        d = dur[kinds == k]
        by_op[k] = {"count": int(d.size), "total_ns": int(d.sum()),
                    "median_ns": int(np.median(d)), "min_ns": int(d.min()),
                    "max_ns": int(d.max()), "p90_ns": int(np.percentile(d, 90))}
    return {"collective_ns": int(dur.sum() / n_dev / steps),
            "collective_total_ns": int(dur.sum() / n_dev),
            "collective_ops": by_op}


def summary_row(host: str, span: str, diag: Diagnosis) -> dict:
    return {"host": host, "span": span, **host_stats(diag)}


def error_row(host: str, span: str, status: int, error: str, **extra) -> dict:
    return {"host": host, "span": span, "status": status, "error": error, **extra}


def apply_collectives(rows: list, view: RunView) -> dict | None:
    """Each row's peer wait, last arrivals and straggler verdict from the run's view;
    returns the run's ``collectives`` summary."""
    j = view.join
    if j is None:
        return None
    ok = [r for r in rows if r.get("status") == 200]
    figs = view.figures
    n = len(j)
    host_of_last = np.array([j.hosts[j.participants[int(p)].host] for p in j.last.tolist()],
                            dtype=object)
    for r in ok:
        f = figs.get(r["host"])
        if f is None:
            continue
        r.update({k: f[k] for k in ("peer_wait_ns", "peer_wait_total_ns", "idle_wait_ns",
                                    "idle_wait_total_ns", "last_arrivals",
                                    "caused_wait_ns", "caused_wait_per_step_ns",
                                    "saving_per_step_ns", "waited_for", "wait_by_op")})
        off = j.offsets_ns.get(r["host"]) or {}
        r["clock_offset_ns"] = int(off.get("estimated_ns") or 0)
        r["clock_offset_applied"] = bool(off.get("applied"))
        r["clock_shared_with"] = int(off.get("shared_with") or 0)
        mine = np.flatnonzero(host_of_last == r["host"])
        r["lateness_ns"] = int(np.median(j.lateness[mine, j.last[mine]])) if mine.size else None
        if r.get("duty_window_ns"):
            # both over the whole capture, in the duty cycle's window
            r["peer_wait_points"] = round(100 * f["peer_wait_total_ns"] / r["duty_window_ns"], 1)
        run_waterfalls(r, j)
        r["straggler"] = f["straggler"]
        r["straggler_cause"] = f["straggler_cause"]
        if f["straggler"]:
            r["straggler_excess_ns"] = f["caused_wait_per_step_ns"]
            r["straggler_steps"] = f["late_steps"]
            r["straggler_intermittent"] = f["intermittent"]
            r["straggler_culprit"] = f["culprit"]
            r["straggler_why"] = f["late_why"]
            r["next_straggler"] = f["next_straggler"]
            r["next_saving_per_step_ns"] = f["next_saving_per_step_ns"]
            r["straggler_reason"] = straggler_reason(f, n)
    last_by = {}
    ops = {}
    host_of = [p.host for p in j.participants]
    for i in range(n):
        k = j.kinds[i]
        o = ops.setdefault(k, {"count": 0, "wait_ns": 0.0, "transfer_ns": 0.0,
                               "last_arrivers": {}})
        o["count"] += 1
        o["wait_ns"] += float(j.wait[i].mean())
        o["transfer_ns"] += float(j.transfer[i].mean())
        who = j.hosts[host_of[int(j.last[i])]]
        o["last_arrivers"][who] = o["last_arrivers"].get(who, 0) + 1
        last_by[who] = last_by.get(who, 0) + 1
    for o in ops.values():
        o["wait_ns"], o["transfer_ns"] = int(round(o["wait_ns"])), int(round(o["transfer_ns"]))
    strag = [h for h, f in figs.items() if f["straggler"]]
    return {"instances": n, "participants": len(j.participants),
            "hosts": len(set(host_of)), "ops": ops,
            "last_arrivers": dict(sorted(last_by.items(), key=lambda x: -x[1])),
            "clock_offsets": j.offsets_ns, "clock_noisy": j.noisy,
            "clock_resolution_ns": j.resolution_ns,
            "clocks": clocks_json(j), "clock_note": clock_note(j),
            "unresolved": int((~j.resolved).sum()) if j.resolved is not None else 0,
            "unmatched": j.unmatched, "stragglers": strag,
            "note": ("peer wait = min(op duration, last arrival − own arrival) per "
                     "instance, per device (GUIDE §4); the rest of the op is transfer")
            + (f"; in {int((~j.resolved).sum())} of {n} instances the last arrival leads "
               f"the next by less than the clocks can be aligned ({duration(j.resolution_ns)}): no one is blamed for those" if j.noisy else "")}


def straggler_reason(f: dict, n: int) -> str:
    """A straggler's row reason: the wait it causes, what fixing it alone saves and who
    is last then, and why it was late."""
    nxt = (f"; then {f['next_straggler']} is last (fixing it too: "
           f"≈ {duration(f['next_saving_per_step_ns'])}/step more)"
           if f.get("next_straggler") else "")
    return (f"the others wait {duration(f['caused_wait_per_step_ns'])}/step for it at "
            f"collectives (last to arrive at {f['last_arrivals']} of {n}); fixing it alone "
            f"saves ≈ {duration(f['saving_per_step_ns'])}/step (its lead over the "
            f"next-to-last arrival){nxt}; {late_text(f.get('late_why'), f.get('culprit'))}"
            + (f", in {len(f['late_steps'])} step(s) only" if f["intermittent"] else ""))


def flag_stragglers(rows: list, by_collectives: bool = False) -> tuple:
    """Marks rows whose typical step is slow or whose duty cycle is low next to
    the median host, and names the cause of idle time that grew most; returns (median
    host's typical step ns, median duty cycle).  With ``by_collectives`` (the run's
    hosts share collectives: ``apply_collectives`` already judged them) the verdicts
    stand: the slow host is the one the others wait for, not the one that waits."""
    ok = [r for r in rows if r.get("status") == 200]
    med_step = _median([r["typical_step_ns"] for r in ok if r.get("typical_step_ns")])
    med_duty = _median([r["duty_cycle"] for r in ok])
    if by_collectives:
        for r in rows:
            r.setdefault("straggler", False)
            r.setdefault("straggler_reason", "")
        return med_step, med_duty
    causes = {c for r in ok for c in r.get("step_idle_ns", {})}
    med_idle = {c: _median([r.get("step_idle_ns", {}).get(c, 0) for r in ok]) for c in causes}
    for r in rows:
        if r.get("status") != 200:
            r["straggler"] = False
            continue
        why = []
        step = r.get("typical_step_ns")
        if med_step and step and step > SLOWER_STEP * med_step:
            why.append(f"steps {100 * (step / med_step - 1):.0f}% slower than the median host")
        if med_duty is not None and r.get("duty_cycle") is not None and \
                r["duty_cycle"] < med_duty - LOWER_DUTY:
            why.append(f"duty cycle {100 * (med_duty - r['duty_cycle']):.0f} points below "
                       "the median host")
        r["straggler"] = bool(why)
        # the cause whose idle time per step grew most over the median host's
        excess = {c: v - med_idle.get(c, 0) for c, v in r.get("step_idle_ns", {}).items()}
        worst = max(excess, key=excess.get, default=None)
        if why and worst is not None and excess[worst] > 0:
            r["straggler_cause"] = worst
            r["straggler_excess_ns"] = int(excess[worst])
            why.append(f"{worst.replace('_', ' ')} idle {duration(excess[worst])}/step "
                       "above the median host")
        r["straggler_reason"] = "; ".join(why)
    return med_step, med_duty


_DIGITS = re.compile(r"(\d+)")


def natural(name: str) -> tuple:
    """host2 before host10."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p)
                 for p in _DIGITS.split(name) if p)


def sort_rows(rows: list, by: str = "straggler", descending: bool | None = None) -> list:
    """Rows in table order.  ``straggler``: stragglers first (largest excess first), then
    the other analysed hosts, then failures and pending ones, each by name; a number
    column: hosts without a value (failed, pending) last whichever the direction;
    ``cause.X``: by cause X's share of the host's idle time."""
    name = lambda r: natural(r["host"])   # noqa: E731
    if by == "host":
        return sorted(rows, key=name, reverse=bool(descending))
    if by == "straggler" or by not in SORTS and not by.startswith("cause."):
        rank = lambda r: (0 if r.get("straggler") else 1 if r.get("status") == 200  # noqa: E731
                          else 2 if r.get("status") != "pending" else 3)
        return sorted(rows, key=lambda r: (rank(r), -(r.get("straggler_excess_ns") or 0),
                                           name(r)))
    if by.startswith("cause."):
        c = by[len("cause."):]
        value, default_desc = (lambda r: (r.get("cause_shares") or {}).get(c, 0.0)
                               if r.get("status") == 200 else None), True
    else:
        value, default_desc = SORTS[by]
    desc = default_desc if descending is None else descending
    have = [r for r in rows if value(r) is not None]
    rest = sorted((r for r in rows if value(r) is None), key=name)
    have.sort(key=name)
    have.sort(key=value, reverse=desc)       # stable: ties stay by name
    return have + rest


def pod_summary(rows: list, sort: str = "straggler", descending: bool | None = None,
                offset: int = 0, limit: int | None = None) -> dict:
    """The summary of a run's rows (flagged in place): counts, medians, every straggler
    with its reason, the pod's idle time by cause, and one page of the sorted rows."""
    collectives = apply_collectives(rows, run_view(rows))
    med_step, med_duty = flag_stragglers(rows, collectives is not None)
    for r in rows:          # the tables served the join; rows stay small
        r.pop("collectives_table", None)
        r.pop("step_ids", None)
        r.pop("step_start_ns", None)
        r.pop("waterfall_split", None)
    ok = [r for r in rows if r.get("status") == 200]
    stragglers = [{"host": r["host"], "reason": r.get("straggler_reason", ""),
                   "cause": r.get("straggler_cause"),
                   "excess_ns": r.get("straggler_excess_ns"),
                   "saving_per_step_ns": r.get("saving_per_step_ns") if collectives else None,
                   "next_straggler": r.get("next_straggler")}
                  for r in sort_rows([r for r in ok if r.get("straggler")])]
    top_counts, step_idle = {}, {}
    for r in ok:
        if r.get("top_cause"):
            top_counts[r["top_cause"]] = top_counts.get(r["top_cause"], 0) + 1
        for c, v in (r.get("step_idle_ns") or {}).items():
            step_idle.setdefault(c, []).append(v)
    by_cause = sorted(({"cause": c, "hosts_top_cause": top_counts.get(c, 0),
                        # hosts without this cause count as 0
                        "median_step_idle_ns": int(_median(
                            step_idle.get(c, []) + [0] * (len(ok) - len(step_idle.get(c, [])))) or 0)}
                       for c in set(top_counts) | set(step_idle)),
                      key=lambda x: (-x["hosts_top_cause"], -x["median_step_idle_ns"], x["cause"]))
    ordered = sort_rows(rows, sort, descending)
    end = len(ordered) if limit is None else offset + limit
    return {"hosts": ordered[offset:end], "hosts_offset": offset,
            "hosts_limit": limit, "sort": sort,
            "total": len(rows), "done": sum(r.get("status") != "pending" for r in rows),
            "failed": sum(r.get("status") not in (200, "pending") for r in rows),
            "median_step_ns": med_step, "median_duty_cycle": med_duty,
            # the duty cycle with the time spent waiting for peers left out (§4: not work)
            "median_duty_without_wait": _median([
                r["duty_cycle"] - r["peer_wait_points"] / 100 for r in ok
                if r.get("duty_cycle") is not None and r.get("peer_wait_points") is not None])
            if collectives else None,
            "stragglers": stragglers, "causes": by_cause, "collectives": collectives}


def text_table(summary: dict, top: int = 20) -> str:
    """The pod summary for a terminal: stragglers named, then the slowest hosts."""
    out = [f"{summary['done']} of {summary['total']} hosts"
           + (f", {summary['failed']} failed" if summary.get("failed") else "")
           + (f"; median host: typical step {duration(summary['median_step_ns'])}"
              if summary.get("median_step_ns") else "")
           + (f", duty cycle {100 * summary['median_duty_cycle']:.1f}%"
              if summary.get("median_duty_cycle") is not None else "")]
    cs = summary.get("collectives")
    if cs and summary.get("median_duty_without_wait") is not None and \
            summary.get("median_duty_cycle") is not None:
        out[-1] += (f" — {100 * (summary['median_duty_cycle'] - summary['median_duty_without_wait']):.1f}"
                    f" points of it waiting for peers at collectives: "
                    f"{100 * summary['median_duty_without_wait']:.1f}% doing work")
    st = summary.get("stragglers") or []
    out.append(f"{len(st)} straggler(s)" + (":" if st else ""))
    for s in st:
        line = f"  {safe_text(s['host'])}: {s['reason']}"
        out.append(line)
    if cs:
        out.append(f"collectives: {cs['instances']} instance(s) matched across "
                   f"{cs['hosts']} host(s)"
                   + "".join(f"; {k} ×{o['count']}" for k, o in cs["ops"].items())
                   + (f"; {cs['unresolved']} too close to order (the last two arrivals "
                      "within what the clocks can tell apart)" if cs.get("unresolved") else "")
                   + (f"; {safe_text(cs['clock_note'])}" if cs.get("clock_note") else ""))
    wait_cols = bool(cs)
    out.append(f"{'host':<24} {'duty':>6} {'MFU':>7} {'typical step':>13} {'worst gap':>11}"
               + (f" {'peer wait':>10} {'last':>5} {'late by':>9}" if wait_cols else "")
               + "  top causes")
    for r in summary["hosts"][:top]:
        if r.get("status") != 200:
            out.append(f"{safe_text(r['host']):<24} ERROR {safe_text(r.get('error', r.get('status')))}")
            continue
        wg = r.get("worst_gap") or {}
        shares = ", ".join(f"{c.replace('_', ' ')} {100 * v:.0f}%"
                           for c, v in (r.get("cause_shares") or {}).items())
        duty = f"{100 * r['duty_cycle']:.1f}%" if r.get("duty_cycle") is not None else "–"
        mfu = ("≥" if r.get("mfu_lower_bound") and not pct(r["mfu"]).startswith("<") else "") \
            + pct(r["mfu"]) if r.get("mfu") is not None else "–"
        if r.get("bandwidth_utilisation") is not None:
            # memory-bound matmuls (decode): the bandwidth reached, beside the MFU
            shares = f"bandwidth {pct(r['bandwidth_utilisation'])} (memory-bound matmuls)" + \
                (f"; {shares}" if shares else "")
        step = duration(r['typical_step_ns']) if r.get("typical_step_ns") else "–"
        gap = duration(wg['duration_ns']) if wg else "–"
        waits = ""
        if wait_cols:
            pw = r.get("peer_wait_ns")
            late = r.get("lateness_ns")
            waits = (f" {duration(pw):>10}"
                     f" {r.get('last_arrivals', '–')!s:>5}"
                     f" {(duration(late) if late else '–'):>9}")
        out.append(f"{safe_text(r['host']):<24} {duty:>6} {mfu:>7} {step:>13} {gap:>11}{waits}  {shares}")
    if len(summary["hosts"]) > top:
        out.append(f"… {len(summary['hosts']) - top} more (--json for all)")
    out += waterfall_lines(summary["hosts"][:top])
    return "\n".join(out)


def waterfall_lines(rows: list) -> list:
    """Per host and device with one, its MFU waterfall (points of its steps window at
    peak), largest parts first; peer wait from the run's join where the row has it."""
    lines = []
    for r in rows:
        for dv in r.get("devices") or []:
            wf = dv.get("waterfall")
            if not wf:
                continue
            # the largest parts, and always the peer wait and the MFU
            parts = sorted(wf.items(), key=lambda kv: -kv[1])
            keep = [kv for kv in parts if kv[1] >= 0.05][:WATERFALL_PARTS]
            keep += [kv for kv in parts if kv[0] in (W.PEER, W.MFU) and kv not in keep]
            lines.append(f"  {safe_text(r['host'])} {safe_text(dv.get('name') or '')}: " + ", ".join(
                f"{part_label(k)} {points(v)}" for k, v in keep))
    if not lines:
        return []
    n = max((r.get("waterfall_peer_wait_from") or 0 for r in rows), default=0)
    return [f"MFU waterfall per host and device (points of its steps window at peak"
            + (f"; peer wait from the collectives {run_files(n)}" if n else "")
            + "):"] + lines
