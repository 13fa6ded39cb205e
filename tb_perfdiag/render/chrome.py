"""Diagnosis → Chrome trace JSON: a track per device with a slice per gap coloured by
cause, the step windows, and optionally the trace's own events around them.  Opens in
the Profile plugin's trace viewer, Perfetto and chrome://tracing."""
from __future__ import annotations

import numpy as np

from ..analysis import causes as C
from ..analysis.result import Diagnosis
from ..trace.model import Trace
from .json import evidence_text, gap_ids, ns, ns_list

CAUSE_COLORS = {  # Chrome trace viewer reserved colour names
    C.HOST_SYNC: "terrible", C.COMPILATION: "bad", C.H2D_TRANSFER: "olive",
    C.DATA_LOADING: "yellow", C.HOST_COMPUTE: "rail_response", C.LAUNCH_OVERHEAD: "grey",
    C.COLLECTIVE_WAIT: "rail_animation", C.UNTRACED: "white",
    C.DEVICE_WAIT: "thread_state_iowait", C.ALLOCATOR: "rail_load",
    C.GRAPH_CAPTURE: "startup", C.RUNTIME_CALL: "generic_work",
}
MAX_EVENTS = 20000


def overlay(diag: Diagnosis, events: list | None = None) -> dict:
    out = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "Diagnosis"}},
           {"ph": "M", "name": "process_sort_index", "pid": 1, "args": {"sort_index": -1}}]
    tid = 1
    D = diag.devices
    for d in range(len(D)):
        out.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tid + d,
                    "args": {"name": f"{D.name[d]} idle gaps"}})
    steps_tid = tid + len(D) + 1
    out.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": steps_tid,
                "args": {"name": "Steps"}})
    g = diag.gaps
    rows = np.arange(len(g))
    ids = gap_ids(diag, rows)
    starts, durs = ns_list(g.start), ns_list(g.end - g.start)
    for r, gid, s0, du in zip(rows.tolist(), ids, starts, durs):
        c = C.ALL[int(g.cause[r])]
        w = int(g.waited_for[r])
        out.append({"ph": "X", "cat": "gap", "name": C.LABELS[c], "pid": 1,
                    "tid": tid + int(g.device[r]), "ts": s0 / 1000, "dur": du / 1000,
                    "cname": CAUSE_COLORS[c],
                    "args": {"gap": gid, "cause": c, "evidence": evidence_text(diag, r),
                             "waited_for": " › ".join(diag.refs.chain_of(w)) if w >= 0 else ""}})
    S = diag.steps
    devs = np.flatnonzero(S.has_device).tolist()
    for s in range(len(S)):
        a, b = ns(S.host_start[s]), ns(S.host_end[s])
        args = {}
        for d in devs:
            w = max(int(S.win_end[s, d]) - int(S.win_start[s, d]), 0)
            args[f"{D.name[d]} duty cycle"] = int(S.busy[s, d]) / w if w else None
        out.append({"ph": "X", "cat": "step", "name": f"Step {int(S.ids[s])}", "pid": 1,
                    "tid": steps_tid, "ts": a / 1000, "dur": (b - a) / 1000, "args": args})
    if events:
        out.extend(events)
    return {"traceEvents": out, "displayTimeUnit": "ns",
            "otherData": {"source": diag.source["path"], "tool": "tb-perfdiag"}}


def trace_events(trace: Trace, lo_ps: float, hi_ps: float, limit: int = MAX_EVENTS) -> list:
    """The trace's own events overlapping [lo_ps, hi_ps), as Chrome trace slices."""
    sel = np.flatnonzero((trace.ts < hi_ps) & (trace.end > lo_ps))[:limit]
    out = []
    for t in np.unique(trace.track[sel]).tolist():
        out.append({"ph": "M", "name": "thread_name", "pid": 2, "tid": t,
                    "args": {"name": trace.track_label[t]}})
    out.append({"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "Trace"}})
    for e in sel.tolist():
        out.append({"ph": "X", "name": trace.event_name(e), "pid": 2,
                    "tid": int(trace.track[e]), "ts": int(trace.ts[e]) / 1e6,
                    "dur": int(trace.dur[e]) / 1e6})
    return out
