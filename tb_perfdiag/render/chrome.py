"""Diagnosis → Chrome trace JSON for the Profile plugin's trace viewer, Perfetto and
chrome://tracing: the diagnosis as tracks of its own, over the trace's real events.

``overlay(diag)`` is the diagnosis alone: per device a track with one slice per idle
gap, coloured by its primary cause, its shares and evidence in the slice's args; the
steps; the blocking calls behind host-sync shares.  ``overlay(diag, window, trace)``
adds the real events of a time window (around one gap: ``gap_window``): every device
stream/line, the host threads that matter (the one that issued the op ending the gap,
the one its idle time was followed to, the blocking call's, then the busiest), the user
annotations the device ran, sync calls marked in red, and for every gap in view an
arrow from the host call it waited for to the device op that ended it.

Times are the trace's: µs from its origin.  A marker at 0 pins the viewer's clock to it
(Catapult shifts the earliest event to 0), so a view range given in ms from the trace
origin opens at the same place the Diagnose page shows.
"""
from __future__ import annotations

import numpy as np

from ..analysis import causes as C
from ..analysis.result import Diagnosis
from ..analysis.steps.windows import AFTER_LAST
from ..trace.model import EventKind as K, Trace, TrackKind
from .json import _dur, gap_ids, gap_records, ns, ns_list

CAUSE_COLORS = {  # Chrome trace viewer reserved colour names
    C.HOST_SYNC: "terrible", C.COMPILATION: "bad", C.H2D_TRANSFER: "olive",
    C.DATA_LOADING: "yellow", C.HOST_COMPUTE: "rail_response", C.LAUNCH_OVERHEAD: "grey",
    C.COLLECTIVE_WAIT: "rail_animation", C.UNTRACED: "white",
    C.DEVICE_WAIT: "thread_state_iowait", C.ALLOCATOR: "rail_load",
    C.GRAPH_CAPTURE: "startup", C.RUNTIME_CALL: "generic_work", C.STARTUP: "startup",
}
MAX_EVENTS = 20000         # real events in one overlay (the longest kept beyond it)
MAX_HOST_THREADS = 12      # host threads shown around a gap (the ones that matter first)
MAX_FLOWS = 300            # waited-for arrows
MAX_SYNCS = 2000           # sync calls on the Syncs track
MAX_NAME = 1000            # longer event names (a 100 KB one) are cut; the full one in args
MAX_ARG = 4000             # longest string arg
SYNC_KINDS = (K.SYNC, K.TRANSFER_D2H)

PID_DIAGNOSIS, PID_DEVICE, PID_HOST = 1, 100, 10000
_KIND = {int(k): k.name.lower() for k in K}
_STAT_ARGS = ("correlation", "correlation_id", "external_id", "stream", "hlo_op",
              "hlo_module", "tf_op", "op_name", "program_id", "run_id", "step_num", "bytes",
              "source")


def cut(name: str, limit: int = MAX_NAME) -> str:
    name = str(name)
    return name if len(name) <= limit else name[:limit - 1] + "…"


def _us(ps) -> float:
    return int(ps) / 1e6


def gap_window(diag: Diagnosis, row: int) -> tuple:
    """(window, view) around gap ``row``, each (lo_ps, hi_ps): the view holds the gap, the
    host call that issued the op ending it and the blocking call behind its host-sync
    share, with a margin; the window (whose events the overlay carries) twice the view."""
    g, R = diag.gaps, diag.refs
    gs, ge = int(g.start[row]), int(g.end[row])
    lo, hi = gs, ge
    for e in (int(g.waited_for[row]), int(g.blocking[row])):
        r = int(R.row([e])[0]) if e >= 0 else -1
        if r >= 0:
            lo, hi = min(lo, int(R.ts[r])), max(hi, int(R.ts[r] + R.dur[r]))
    pad = max((hi - lo) // 4, 10_000_000)           # ≥ 10 µs each side
    view = (max(lo - pad, 0), hi + pad)
    span = view[1] - view[0]
    return (max(view[0] - span // 2, 0), view[1] + span // 2), view


def profile_time_ms(diag: Diagnosis, ps: int) -> float:
    """A trace time as the Profile plugin's trace viewer shows it for the same XSpace: ms
    from the profile's own zero, which is the trace origin's offset."""
    return (int(ps) + int(diag.source.get("origin_ps") or 0)) / 1e9


def viewer_json(diag: Diagnosis, row: int) -> dict:
    """Where the trace viewers should open on gap ``row`` (ms, as their URLs take them)."""
    window, view = gap_window(diag, row)
    out = {"window_ns": [ns(window[0]), ns(window[1])],
           "view_ms": [view[0] / 1e9, view[1] / 1e9]}
    if diag.source.get("format") == "xspace":
        out["profile_view_ms"] = [profile_time_ms(diag, view[0]), profile_time_ms(diag, view[1])]
    return out


# ---- the diagnosis' own tracks ----
def _gap_args(diag: Diagnosis, r: int, gid: str, evidence: str) -> dict:
    g, R = diag.gaps, diag.refs
    total = max(int(g.end[r] - g.start[r]), 1)
    sh = g.shares[r].tolist()
    shares = {C.LABELS[C.ALL[i]]: f"{_dur(sh[i])} ({100 * sh[i] / total:.0f}%)"
              for i in sorted(range(len(sh)), key=lambda i: -sh[i]) if sh[i] > 0}
    c = C.ALL[int(g.cause[r])]
    st = int(g.step[r])
    args = {"gap": gid, "cause": c, "primary cause": C.LABELS[c],
            "duration": _dur(total), "shares": shares,
            "evidence": cut(evidence, MAX_ARG),
            "step": int(diag.steps.ids[st]) if st >= 0 else None}
    if st < 0:                                   # in no step: where, as the gap list says
        args["outside"] = "after the last step" if st == AFTER_LAST else "before the first step"
    labels = diag.track_labels
    for key, col in (("waited for", g.waited_for), ("blocking call", g.blocking),
                     ("culprit", g.culprit)):
        e = int(col[r])
        if e >= 0:
            args[key] = cut(" › ".join(R.chain_of(e)), MAX_ARG)
    if int(g.thread[r]) >= 0:
        args["issuing thread"] = cut(labels[int(g.thread[r])])
    if int(g.followed[r]) >= 0:
        args["idle time followed to"] = cut(labels[int(g.followed[r])])
    return args


def _wait_tracks(diag: Diagnosis, waits: list, window: tuple | None) -> list:
    """Per device a track of the peer wait inside its collectives: one slice from each
    op's arrival to the last participant's (``render.collectives.wait_slices``), the
    part of the op that is waiting, not work (GUIDE §4)."""
    pid, base = PID_DIAGNOSIS, len(diag.devices) + 3
    lo, hi = window if window is not None else (-np.inf, np.inf)
    out, named = [], set()
    for d, start, wait, dur, kind, last in waits:
        if wait <= 0 or start >= hi or start + wait <= lo:
            continue
        if d not in named:
            named.add(d)
            out.extend(_thread(pid, base + d, f"{diag.devices.name[d]} peer wait at collectives",
                               base + d))
        out.append({"ph": "X", "cat": "peer_wait", "name": f"peer wait ({kind}) for {last}",
                    "pid": pid, "tid": base + d, "ts": start / 1e6, "dur": wait / 1e6,
                    "cname": "rail_idle",
                    "args": {"op": kind, "waited for": last, "peer wait": _dur(wait),
                             "op duration": _dur(dur), "transfer": _dur(dur - wait),
                             "definition": "min(op duration, last arrival − own arrival): "
                                           "busy time waiting for the last participant"}})
    return out


def _diagnosis_tracks(diag: Diagnosis, rows: np.ndarray) -> tuple:
    """(events, tid of each device's gap track) of the Diagnosis process: the gaps
    ``rows``, the steps, the blocking calls of those gaps."""
    D, g, R = diag.devices, diag.gaps, diag.refs
    pid = PID_DIAGNOSIS
    out = [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": "Diagnosis"}},
           {"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": -1}},
           {"ph": "M", "name": "process_labels", "pid": pid,
            "args": {"labels": "idle gaps by primary cause · steps · syncs (tb-perfdiag)"}}]
    gap_tid = {d: 1 + d for d in range(len(D))}
    steps_tid, syncs_tid = len(D) + 1, len(D) + 2
    for d in range(len(D)):
        out.extend(_thread(pid, gap_tid[d], f"{D.name[d]} idle gaps", d))
    out.extend(_thread(pid, steps_tid, "Steps", len(D)))
    out.extend(_thread(pid, syncs_tid, "Syncs (blocking calls)", len(D) + 1))
    # the clock's anchor: the trace origin
    out.append({"ph": "i", "s": "t", "name": "trace start", "pid": pid, "tid": steps_tid,
                "ts": 0, "cat": "marker"})
    ids = gap_ids(diag, rows)
    starts, durs = ns_list(g.start[rows]), ns_list(g.end[rows] - g.start[rows])
    evidence = gap_records(diag, rows, evidence_only=True)      # all at once: one pass
    blocking = {}
    for r, gid, s0, du, ev in zip(rows.tolist(), ids, starts, durs, evidence):
        c = C.ALL[int(g.cause[r])]
        out.append({"ph": "X", "cat": "gap", "name": C.LABELS[c], "pid": pid,
                    "tid": gap_tid[int(g.device[r])], "ts": s0 / 1000, "dur": du / 1000,
                    "cname": CAUSE_COLORS[c], "args": _gap_args(diag, r, gid, ev)})
        b = int(g.blocking[r])
        if b >= 0:
            blocking.setdefault(b, []).append(gid)
    S = diag.steps
    devs = np.flatnonzero(S.has_device).tolist()
    for s in range(len(S)):
        a, b = ns(S.host_start[s]), ns(S.host_end[s])
        args = {}
        for d in devs:
            w = max(int(S.win_end[s, d]) - int(S.win_start[s, d]), 0)
            args[f"{D.name[d]} duty cycle"] = round(int(S.busy[s, d]) / w, 4) if w else None
        out.append({"ph": "X", "cat": "step", "name": f"Step {int(S.ids[s])}", "pid": pid,
                    "tid": steps_tid, "ts": a / 1000, "dur": (b - a) / 1000, "args": args})
    for e, gids in blocking.items():
        r = int(R.row([e])[0])
        if r < 0:
            continue
        out.append({"ph": "X", "cat": "blocking", "name": cut(R.strings[int(R.name[r])]),
                    "pid": pid, "tid": syncs_tid, "ts": _us(R.ts[r]), "dur": _us(R.dur[r]),
                    "cname": "terrible",
                    "args": {"thread": cut(diag.track_labels[int(R.track[r])]),
                             "host sync behind gaps": ", ".join(gids[:20]),
                             "chain": cut(" › ".join(R.chain_of(e)), MAX_ARG)}})
    return out, set(blocking)


def _thread(pid: int, tid: int, name: str, sort: int) -> list:
    return [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
             "args": {"name": cut(name, 120)}},
            {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
             "args": {"sort_index": sort}}]


def overlay(diag: Diagnosis, window: tuple | None = None, trace: Trace | None = None,
            focus: int | None = None, annotations: list | None = None,
            limit: int = MAX_EVENTS, waits: list | None = None,
            waits_note: str | None = None) -> dict:
    """The Chrome trace of a diagnosis: its gaps (those overlapping ``window`` = (lo_ps,
    hi_ps) when given), steps and blocking calls; with ``trace``, the real events of the
    window (the whole trace when None) around gap row ``focus``, ``annotations`` (from
    ``analysis.timeline.annotation_spans``) and the waited-for arrows; ``waits``: the
    peer-wait part of each collective op (``render.collectives.wait_slices``), or
    ``waits_note`` saying why there is none."""
    g = diag.gaps
    rows = np.arange(len(g))
    if window is not None:
        rows = rows[(g.start < window[1]) & (g.end > window[0])]
    events, blocking = _diagnosis_tracks(diag, rows)
    events.extend(_wait_tracks(diag, waits or [], window))
    other = {"source": diag.source.get("path"), "tool": "tb-perfdiag"}
    if waits:
        other["peer_wait_slices"] = sum(1 for w in waits if w[2] > 0)
    elif waits_note:
        other["peer_wait"] = waits_note
    if trace is not None:
        lo, hi = window if window is not None else (-np.inf, np.inf)
        real, shown = _real_events(diag, trace, lo, hi, rows, focus, limit, blocking)
        events.extend(real)
        events.extend(_annotation_events(annotations or [], lo, hi))
        other.update(shown)
    if window is not None:
        other["window_ns"] = [ns(window[0]), ns(window[1])]
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other}


def _annotation_events(spans: list, lo, hi) -> list:
    """Per device, the user annotations its ops ran under: [(device, label, [(start_ps,
    dur_ps, name)])] as one track in that device's process."""
    out = []
    for k, (device, label, items) in enumerate(spans):
        pid, tid = PID_DEVICE + device, 1_000_000 + k
        out.extend(_thread(pid, tid, label, 10_000))
        for s, d, name in items:
            if s < hi and s + d > lo:
                out.append({"ph": "X", "cat": "annotation", "name": cut(name), "pid": pid,
                            "tid": tid, "ts": s / 1e6, "dur": d / 1e6,
                            "args": {"annotation": cut(name, MAX_ARG)}})
    return out


# ---- the trace's own events ----
def _host_threads(diag: Diagnosis, trace: Trace, sel: np.ndarray, rows: np.ndarray,
                  focus: int | None, lo, hi) -> tuple:
    """(host tracks to show, number left out): the threads the focused gap names first,
    then the threads of the other gaps in view, then the busiest in the window."""
    g = diag.gaps
    host = trace.track_kind[trace.track[sel]] == TrackKind.HOST
    present = np.unique(trace.track[sel[host]])
    must: list = []
    if focus is not None and focus >= 0:
        fr = np.array([focus])
        named = [g.thread[fr], g.followed[fr], g.blocking_track[fr]]
        for col in (g.waited_for, g.culprit, g.blocking):
            e = int(col[focus])
            if e >= 0:
                must.append(int(trace.track[e]))
        D = diag.detail
        named.append(D.track[D.gap == focus])
        must = [int(t) for a in named for t in np.asarray(a).tolist() if t >= 0] + must
    for col in (g.thread, g.blocking_track):
        must.extend(t for t in col[rows].tolist() if t >= 0)
    order, seen = [], set()
    for t in must:
        if t not in seen and trace.track_kind[t] == TrackKind.HOST:
            seen.add(t)
            order.append(t)
    # the rest by busy time in the window (top-level events, clipped)
    top = sel[host & (trace.depth[sel] == 0)] if sel.size else sel
    if top.size:
        a = np.maximum(trace.ts[top], int(max(lo, -2**62)))
        b = np.minimum(trace.end_of(top), int(min(hi, 2**62)))
        busy = np.bincount(trace.track[top], weights=np.maximum(b - a, 0).astype(np.float64),
                           minlength=len(trace.track_name))
        for t in np.argsort(-busy[present], kind="stable").tolist():
            t = int(present[t])
            if t not in seen:
                seen.add(t)
                order.append(t)
    keep = order[:MAX_HOST_THREADS]
    return keep, len(order) - len(keep)


def _real_events(diag: Diagnosis, trace: Trace, lo, hi, rows: np.ndarray,
                 focus: int | None, limit: int, blocking: set) -> tuple:
    """(Chrome events, what was shown) for the trace's events in [lo, hi)."""
    if trace.n_events == 0:
        return [], {"events_shown": 0}
    sel = np.flatnonzero((trace.ts < hi) & (trace.end > lo))
    keep_host, left_out = _host_threads(diag, trace, sel, rows, focus, lo, hi)
    on_device = trace.track_kind[trace.track[sel]] == TrackKind.DEVICE
    sel = sel[on_device | np.isin(trace.track[sel], np.asarray(keep_host, np.int64))]
    # the events the arrows and marks need, wherever they are
    g = diag.gaps
    flows = [(int(a), int(b)) for a, b in zip(g.waited_for[rows].tolist(),
                                               g.next_op[rows].tolist()) if a >= 0 and b >= 0]
    if focus is not None and focus >= 0 and g.waited_for[focus] >= 0 and g.next_op[focus] >= 0:
        flows.insert(0, (int(g.waited_for[focus]), int(g.next_op[focus])))
    flows = list(dict.fromkeys(flows))[:MAX_FLOWS]
    must = np.array(sorted({e for f in flows for e in f}), np.int64)
    must = must[np.isin(trace.track_kind[trace.track[must]], (TrackKind.DEVICE,)) |
                np.isin(trace.track[must], np.asarray(keep_host, np.int64))]
    total = sel.size
    if sel.size > limit:     # the longest events keep the structure (parents outlast children)
        sel = sel[np.argpartition(-trace.dur[sel], limit - 1)[:limit]]
    sel = np.union1d(sel, must)
    present = set(np.unique(trace.track[sel]).tolist())
    tracks = sorted(t for t in present if t not in keep_host) + \
        [t for t in keep_host if t in present]          # host threads by importance
    out = []
    # processes: one per device, one host process per group of host threads
    pid_of, tid_of = {}, {}
    groups = {}
    for t in tracks:
        d = int(trace.track_device[t])
        if trace.track_kind[t] == TrackKind.DEVICE and d >= 0:
            pid = PID_DEVICE + d
            if pid not in groups:
                groups[pid] = trace.devices[d].name
                out.append({"ph": "M", "name": "process_name", "pid": pid,
                            "args": {"name": f"{trace.devices[d].name} (device)"}})
                out.append({"ph": "M", "name": "process_sort_index", "pid": pid,
                            "args": {"sort_index": d}})
        else:
            grp = trace.track_group[t] or "host"
            key = ("host", grp)
            if key not in groups:
                groups[key] = PID_HOST + len([k for k in groups if isinstance(k, tuple)])
                pid_ = groups[key]
                out.append({"ph": "M", "name": "process_name", "pid": pid_,
                            "args": {"name": cut(f"Host {grp}", 120)}})
                out.append({"ph": "M", "name": "process_sort_index", "pid": pid_,
                            "args": {"sort_index": 1000 + pid_}})
            pid = groups[key]
        pid_of[t], tid_of[t] = pid, int(t) + 1
        rank = keep_host.index(t) if t in keep_host else int(t)
        out.extend(_thread(pid, int(t) + 1, trace.track_label[t], rank))
    if left_out:
        first_host = next((pid_of[t] for t in keep_host if t in pid_of), PID_HOST)
        out.append({"ph": "M", "name": "process_labels", "pid": first_host,
                    "args": {"labels": f"{left_out} quieter host thread(s) not shown; the "
                                       "Diagnose timeline and the Profile tab have them all"}})
    # per event: its kind and the stats worth reading in the viewer's details, as columns
    # (None where absent); names cut once per distinct name
    strings = trace.strings
    cols = []
    # a bulk export (no gap in focus) stays lean: names and times; around a gap, the
    # stats a reader of the details pane wants (correlation, stream, hlo_op…)
    for k in (_STAT_ARGS if focus is not None else ()):
        st = trace.stats.get(k)
        if st is None:
            continue
        vals, hit = st.lookup(sel)
        if not hit.any():
            continue
        vals = vals.tolist()
        if st.is_string:
            vals = [cut(strings[int(v)], MAX_ARG) if h else None for v, h in zip(vals, hit.tolist())]
        else:
            vals = [v if h else None for v, h in zip(vals, hit.tolist())]
        cols.append((k, vals))
    ts, dur = (trace.ts[sel] / 1e6).tolist(), (trace.dur[sel] / 1e6).tolist()
    trk, kind, name = trace.track[sel].tolist(), trace.kind[sel].tolist(), trace.name[sel].tolist()
    names = {n: strings[n] for n in set(name)}
    shown_name = {n: cut(t) for n, t in names.items()}
    # waited-for arrows, host call → the device op that ended the gap, bound to the two
    # slices themselves (one call can issue the ops ending several gaps: one arrow each)
    shown = set(sel.tolist())
    flow_out, flow_in = {}, {}
    for a, b in flows:
        if a in shown and b in shown:
            flow_out.setdefault(a, f"waited_for:{a}")
            flow_in[b] = flow_out[a]
    sync_kinds = {int(k) for k in SYNC_KINDS}
    for j, e in enumerate(sel.tolist()):
        kn = _KIND.get(kind[j], "other")       # the slice's category
        args = {}
        for k, vals in cols:
            v = vals[j]
            if v is not None:
                args[k] = v
        n = name[j]
        if len(names[n]) > MAX_NAME:
            args["full name"] = cut(names[n], MAX_ARG)
        t = trk[j]
        ev = {"ph": "X", "cat": kn, "name": shown_name[n], "pid": pid_of[t], "tid": tid_of[t],
              "ts": ts[j], "dur": dur[j]}
        if args:
            ev["args"] = args
        if kind[j] in sync_kinds:
            ev["cname"] = "terrible"
        if e in flow_out:
            ev.update(bind_id=flow_out[e], flow_out=True)
        elif e in flow_in:
            ev.update(bind_id=flow_in[e], flow_in=True)
        out.append(ev)
    # sync calls anywhere on the shown threads: also on the Diagnosis' Syncs track
    syncs = sel[np.isin(trace.kind[sel], SYNC_KINDS)][:MAX_SYNCS]
    for e in syncs.tolist():
        if e in blocking:             # already there, with the gaps it exposed
            continue
        out.append({"ph": "X", "cat": "blocking", "name": cut(trace.event_name(e)),
                    "pid": PID_DIAGNOSIS, "tid": len(diag.devices) + 2,
                    "ts": int(trace.ts[e]) / 1e6, "dur": int(trace.dur[e]) / 1e6,
                    "cname": "terrible",
                    "args": {"thread": cut(trace.track_label[int(trace.track[e])])}})
    return out, {"events_in_window": int(total), "events_shown": int(sel.size),
                 "waited_for_arrows": len(flow_in),
                 "host_threads_left_out": int(left_out)}
