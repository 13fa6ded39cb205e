"""DeviceOpTable → the ``device_ops`` JSON (page, CLI ``--json``) and terminal lines.

Per device, the top op groups by device time (whole trace, or the ops one step launched)
with the rest folded into one ``other`` row, the kernels shorter than the launch latency
as a group of their own, and the busy time split into compute, copies and collectives.
The key is ``device_ops``, not ``ops``: ``devices[].ops`` already counts ops and the
comparison's ``ops`` is the host-and-device op-count table.
"""
from __future__ import annotations

import numpy as np

from ..units import duration
from ..analysis.device_time.by_op import STEP_GROUPS
from ..analysis.result import Diagnosis, FindingKind, OpClass, Overlap
from . import efficiency as eff_json

TOP = 15
_CLASS = {int(c): c.name.lower() for c in OpClass}
DEFINITION = (
    "Device time by op: each device op of the busy set in one group per device — kernels by "
    "name with template arguments and parameters folded (foo<…>), copies by direction "
    "(Memcpy HtoD/DtoH/DtoD/PtoP), sets as Memset, XLA ops by their HLO instruction (hlo_op). "
    "Time is the sum of the group's op durations (streams may overlap, so groups can add up "
    "to more than the busy time); per step, the ops that step launched (its "
    f"{STEP_GROUPS} groups of most time per device, the rest summed as other). Host op: the "
    "framework op (aten::…, tf_op, the XLA program or JAX function) behind most of the "
    "group's time; annotation: the user annotation most of it ran under. Short kernels: "
    "GPU kernels shorter than the launch latency. Overlap: the busy union split into compute, "
    "copies (memcpy, memset, XLA async copies) not under compute, and collectives under "
    "neither; copies/collectives under compute are the parts that ran while compute ran.")


def _ns(ps) -> int:
    return int(np.rint(float(ps) / 1000))


def _viewer(diag: Diagnosis, ts: int, dur: int) -> dict:
    """Where a trace viewer opens on one op instance: the op with a margin (view, ms) and
    twice that as the window of events the overlay carries (µs, the overlay route's)."""
    pad = max(dur // 2, 20_000_000)                  # ≥ 20 µs each side
    lo, hi = max(ts - pad, 0), ts + dur + pad
    span = hi - lo
    out = {"window_us": [max(lo - span // 2, 0) / 1e6, (hi + span // 2) / 1e6],
           "view_ms": [lo / 1e9, hi / 1e9]}
    if diag.source.get("format") == "xspace":
        o = int(diag.source.get("origin_ps") or 0)
        out["profile_view_ms"] = [(lo + o) / 1e9, (hi + o) / 1e9]
    return out


def _overlap(v) -> dict:
    return {o.name.lower() + "_ns": _ns(v[o]) for o in Overlap}


def device_ops_json(diag: Diagnosis, step: int | None = None, top: int = TOP) -> dict | None:
    """The ``device_ops`` section; ``step`` (a step id) restricts it to the ops that step
    launched.  None for a result made before the table existed."""
    T = diag.device_ops
    if T is None:
        return None
    s_idx = None
    if step is not None:
        hit = np.flatnonzero(diag.steps.ids == step)
        s_idx = int(hit[0]) if hit.size else -1
    if s_idx is None:
        rows = np.arange(len(T))
        count, time = T.count, T.time
        lts, ldur, ltrack = T.longest_ts, T.longest_dur, T.longest_track
        ov_all = T.overlap
    else:
        rows = T.step_row[T.step == s_idx].astype(np.int64) if s_idx >= 0 else \
            np.zeros(0, np.int64)
        sel = np.flatnonzero(T.step == s_idx) if s_idx >= 0 else np.zeros(0, np.int64)
        count = np.zeros(len(T), np.int64)
        time = np.zeros(len(T), np.int64)
        lts, ldur = np.zeros(len(T), np.int64), np.zeros(len(T), np.int64)
        ltrack = np.zeros(len(T), np.int32)
        count[rows], time[rows] = T.step_count[sel], T.step_time[sel]
        lts[rows], ldur[rows] = T.step_longest_ts[sel], T.step_longest_dur[sel]
        ltrack[rows] = T.step_longest_track[sel]
        ov_all = T.step_overlap[s_idx] if s_idx >= 0 else np.zeros_like(T.overlap)
    launch_bound = next((i for i, f in enumerate(diag.findings)
                         if f.kind == FindingKind.LAUNCH_BOUND), None)
    step_ns = None
    if s_idx is not None and s_idx >= 0:
        step_ns = _ns(diag.steps.host_end[s_idx] - diag.steps.host_start[s_idx])
    labels = diag.track_labels
    out = []
    for d in range(len(diag.devices)):
        mine = rows[T.device[rows] == d]
        if not mine.size and not diag.devices.ops[d]:
            continue
        mine = mine[np.lexsort((mine, -time[mine]))]
        busy = int(ov_all[d, Overlap.BUSY])
        # a step's groups past the table's cut come summed (none in the whole-trace view)
        cut_g = cut_c = cut_t = 0
        if s_idx is not None and s_idx >= 0:
            cut_g, cut_c, cut_t = (int(x[s_idx, d]) for x in
                                   (T.step_rest, T.step_rest_count, T.step_rest_time))
        tot = int(time[mine].sum()) + cut_t

        def share(x, of):
            return float(x) / of if of else None
        ops = []
        for r in mine[:top].tolist():
            c, t = int(count[r]), int(time[r])
            ops.append({
                "name": T.name[r], "class": _CLASS[int(T.klass[r])],
                "category": T.category[r] or None,
                "calls": c, "total_ns": _ns(t), "mean_ns": _ns(t / max(c, 1)),
                "share_of_busy": share(t, busy),
                "share_of_step": share(_ns(t), step_ns),
                "short_calls": int(T.short_count[r]) if s_idx is None else None,
                "host_op": T.host_op[r] or None, "annotation": T.annotation[r] or None,
                "longest": {"start_ns": _ns(lts[r]), "duration_ns": _ns(ldur[r]),
                            "track": labels[int(ltrack[r])] if 0 <= int(ltrack[r]) < len(labels)
                            else None},
                "viewer": _viewer(diag, int(lts[r]), int(ldur[r])),
                "row": int(r), "roofline": eff_json.op_roofline(diag, r)})
        rest = mine[top:]
        other = None
        if rest.size or cut_g:
            t = int(time[rest].sum()) + cut_t
            other = {"groups": int(rest.size) + cut_g, "calls": int(count[rest].sum()) + cut_c,
                     "total_ns": _ns(t), "share_of_busy": share(t, busy)}
        if s_idx is None:
            sc, st = int(T.short_count_dev[d]), int(T.short_time_dev[d])
        elif s_idx >= 0:
            sc, st = int(T.step_short_count[s_idx, d]), int(T.step_short_time[s_idx, d])
        else:
            sc = st = 0
        # the groups the short kernels come from (whole trace), most short calls first
        all_mine = np.flatnonzero((T.device == d) & (T.short_count > 0))
        all_mine = all_mine[np.lexsort((all_mine, -T.short_count[all_mine]))][:3]
        groups = [{"name": T.name[r], "calls": int(T.short_count[r]),
                   "total_ns": _ns(T.short_time[r]), "host_op": T.host_op[r] or None,
                   "annotation": T.annotation[r] or None} for r in all_mine.tolist()]
        out.append({
            "device": d, "name": diag.devices.name[d], "busy_ns": _ns(busy),
            "ops_total_ns": _ns(tot), "groups": int(mine.size) + cut_g, "ops": ops,
            "other": other,
            "short_kernels": {"calls": sc, "total_ns": _ns(st), "share_of_busy": share(st, busy),
                              "finding": launch_bound if sc else None,
                              "groups": groups if sc else []},
            "overlap": _overlap(ov_all[d]),
            "roofline": eff_json.roofline_json(diag, d)})
    return {"step": step, "step_ns": step_ns, "top": top, "latency_ns": _ns(T.latency_ps),
            "definition": DEFINITION, "devices": out}


def text_lines(diag: Diagnosis, top: int = 8, step: int | None = None) -> list:
    """The terminal report's 'device time by op' lines (of the ops ``step`` launched)."""
    doc = device_ops_json(diag, step, top=top)
    if not doc:
        return []
    L = []
    for dv in doc["devices"]:
        if not dv["ops"]:
            continue
        ov = dv["overlap"]
        where = f" in step {doc['step']}" if doc["step"] is not None else ""
        L.append(f"device time by op{where}, {dv['name']} (busy {_ms(dv['busy_ns'])}; compute "
                 f"{_ms(ov['compute_ns'])}, copies {_ms(ov['copies_ns'])} "
                 f"({_ms(ov['copies_under_compute_ns'])} under compute), collectives "
                 f"{_ms(ov['collectives_ns'])} ({_ms(ov['collectives_under_compute_ns'])} "
                 f"under compute)):")
        for o in dv["ops"]:
            who = " · ".join(x for x in (o["host_op"], o["annotation"]) if x)
            L.append(f"  {_ms(o['total_ns']):>10} {_pct(o['share_of_busy']):>5} "
                     f"{o['calls']:>8} calls  {o['name'][:70]}" + (f"  ({who[:60]})" if who else ""))
        if dv["other"]:
            o = dv["other"]
            L.append(f"  {_ms(o['total_ns']):>10} {_pct(o['share_of_busy']):>5} "
                     f"{o['calls']:>8} calls  other ({o['groups']} groups)")
        sk = dv["short_kernels"]
        if sk["calls"]:
            most = sk["groups"][0] if sk["groups"] else None
            L.append(f"  kernels shorter than the {doc['latency_ns'] // 1000} µs launch latency: "
                     f"{sk['calls']} calls, {_ms(sk['total_ns'])} ({_pct(sk['share_of_busy'])} of busy)"
                     + (f", most of them {most['name'][:60]} ({most['calls']} calls"
                        + (f", {most['host_op'][:40]}" if most["host_op"] else "") + ")"
                        if most else ""))
    return L


_ms = duration             # the one unit rule (units.py)


def _pct(x) -> str:
    return "" if x is None else f"{100 * x:.0f}%"
