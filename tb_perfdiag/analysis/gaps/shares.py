"""The cause of a gap as a counterfactual split (GUIDE §4): what would have to change to
close it.

A gap [gs, ge) on a device is ended by device op E, issued by host call L (correlation,
flow or program run).  Its length is split into shares that add up to it:

1. Device-side wait.  If L returned more than the launch latency before ge, the device
   had E and did not run it: [max(gs, end(L) + latency), ge) is ``collective_wait`` when
   E is a collective, else ``device_wait``.  When E has no host link but the host had
   already issued work that starts after ge, the device is behind the host: the whole
   gap is ``device_wait``.
2. Sync.  In the host-side rest [gs, rest_end), the blocking calls of the thread that
   issued L (stream/device/event syncs, device→host and pageable copies, transfers from
   the device) earn ``host_sync`` = min(rest, the time the host was blocked in the call in
   flight at gs while the device was still busy + the time it was blocked inside the
   rest): the lead over the device the sync destroyed.  L itself is the issue, not a sync.
3. What the issuing thread did.  The remainder is split by the cause bucket of the
   innermost op of that thread over the rest (without its blocking time), scaled to the
   remainder; L's own time in the rest is ``launch_overhead`` (``h2d_transfer`` for a
   host→device copy).  Where the issuing thread has no event or waits for another
   thread (run_backward), the split follows the thread doing the work meanwhile: the
   user's main thread for a helper thread, the busiest other thread for the main one.

The primary cause is the largest share.  Everything here is vectorised per thread.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...trace.build import distinct, unique_inverse
from ...trace.classify import is_collective_kernel, is_input_pipeline_thread, is_pipeline_plumbing
from ...trace.model import EventKind as K, Trace
from .. import causes as C
from ..attribution.hostline import (
    B_ANNOT,
    B_DATA,
    B_H2D,
    B_IDLE,
    B_LAUNCH,
    B_STARTUP,
    B_SYNC,
    B_WAIT,
    BUCKET_CAUSE,
    BUCKETS,
    HostLine,
)
from ..intervals import covered, union
from ..sortedtimes import search as t_search

LAUNCH_LATENCY_PS = 10_000_000      # ≈10 µs from a launch call's return to the device start
PROBE_PS = 1_000_000                # a blocking call that returned within 1 µs of gs
N_CAUSES = len(C.ALL)
_CAUSE_INDEX = {c: i for i, c in enumerate(C.ALL)}
_BUCKET_TO_CAUSE = np.array([_CAUSE_INDEX[BUCKET_CAUSE[b]] for b in range(len(BUCKETS))],
                            np.int64)
DEVICE_WAIT = _CAUSE_INDEX[C.DEVICE_WAIT]
DATA_LOADING = _CAUSE_INDEX[C.DATA_LOADING]
COLLECTIVE_WAIT = _CAUSE_INDEX[C.COLLECTIVE_WAIT]
HOST_SYNC = _CAUSE_INDEX[C.HOST_SYNC]
H2D_TRANSFER = _CAUSE_INDEX[C.H2D_TRANSFER]
UNTRACED = _CAUSE_INDEX[C.UNTRACED]


@dataclass
class Split:
    shares: np.ndarray        # (n, n_causes) int64 ps, rows add up to the gap
    primary: np.ndarray       # int8 cause index
    thread: np.ndarray        # int32 host track analysed (−1)
    rest_end: np.ndarray      # int64 ps: where the host-side rest of the gap ends
    blocking: np.ndarray      # int64 event: the blocking call that earned host_sync (−1)
    drained: np.ndarray       # bool: a sync in flight as the device went idle drained it
    culprit: np.ndarray       # int64 event: the op with most self time in the primary share
    followed: np.ndarray      # int32 track the idle time was followed to (−1)


def device_behind(trace: Trace, device_ops: np.ndarray, origin: np.ndarray,
                  ge: np.ndarray) -> np.ndarray:
    """Per gap end: had the host already issued (and returned from) work for this device
    that starts at or after the gap end?"""
    linked = device_ops[origin[device_ops] >= 0]
    if linked.size == 0:
        return np.zeros(ge.shape[0], bool)
    src = origin[linked]
    ret = trace.end_of(src)
    o = np.argsort(ret, kind="stable")
    ret, op_start = ret[o], np.maximum.accumulate(trace.ts[linked][o])
    k = np.searchsorted(ret, ge - LAUNCH_LATENCY_PS, side="right") - 1
    return (k >= 0) & (op_start[np.maximum(k, 0)] >= ge)


def _top_op(line: HostLine, names: np.ndarray, a: np.ndarray, b: np.ndarray,
            bucket: np.ndarray) -> np.ndarray:
    """Per window [a, b): the op whose name has most self time in segments of ``bucket``
    (an op called many times counts all its calls), as its longest call there (−1)."""
    inner = line.seg_inner
    gi, k, s, e = line.pieces(a, b)
    keep = (e > s) & (inner[k] >= 0) & (line.seg_bucket[k] == bucket[gi])
    return _top_by_name(a.shape[0], gi[keep], inner[k][keep].astype(np.int64),
                        (e - s)[keep], names)


def _top_by_name(n: int, gi: np.ndarray, ev: np.ndarray, ln: np.ndarray,
                 names: np.ndarray) -> np.ndarray:
    """Per window (``gi``: the window of each piece of op ``ev``, ``ln`` long): the op
    whose name has most time, as its longest piece (−1 where the window has none)."""
    out = np.full(n, -1, np.int64)
    if gi.size == 0:
        return out
    nm = names[ev].astype(np.int64)
    o = np.lexsort((-ln, nm, gi))               # per (gap, name): its longest segment first
    gi, ev, ln, nm = gi[o], ev[o], ln[o], nm[o]
    first = np.ones(gi.shape[0], bool)
    first[1:] = (gi[1:] != gi[:-1]) | (nm[1:] != nm[:-1])
    at = np.flatnonzero(first)
    g_u, e_u, t_u = gi[at], ev[at], np.add.reduceat(ln, at)
    o = np.lexsort((e_u, -t_u, g_u))          # per gap: most time first, earlier op at ties
    g_u, e_u = g_u[o], e_u[o]
    lead = np.ones(g_u.shape[0], bool)
    lead[1:] = g_u[1:] != g_u[:-1]
    out[g_u[lead]] = e_u[lead]
    return out


def slowest_stage(trace: Trace, lines: dict, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per window [a, b): on the input-pipeline threads (tf.data's pools), the op whose
    name has most self time in the window, tf.data's plumbing (iterators, producer loops,
    the function executor) left out, as its longest piece there (−1 where none)."""
    parts = []
    for t, line in lines.items():
        if not is_input_pipeline_thread(trace.track_name[t]):
            continue
        gi, k, s, e = line.pieces(a, b)
        ev = line.seg_inner[k].astype(np.int64)
        keep = (e > s) & (ev >= 0) & (line.seg_bucket[k] == B_DATA)
        parts.append((gi[keep], ev[keep], (e - s)[keep]))
    if not parts:
        return np.full(a.shape[0], -1, np.int64)
    gi, ev, ln = (np.concatenate(x) for x in zip(*parts))
    u, inv = unique_inverse(trace.name[ev])
    work = np.array([not is_pipeline_plumbing(trace.strings[x]) for x in u.tolist()],
                    bool)[inv.reshape(-1)]
    return _top_by_name(a.shape[0], gi[work], ev[work], ln[work], trace.name)


def _idle_intervals(line: HostLine, a: np.ndarray, b: np.ndarray):
    """(window index, start, end) of the stretches of each window [a, b) in which the
    thread had nothing to do or waited for another thread."""
    starts = line.seg_start
    n_seg = starts.shape[0]
    gi, k, s, e = line.pieces(a, b)
    keep = (e > s) & np.isin(line.seg_bucket[k], (B_IDLE, B_WAIT))
    gi, s, e = gi[keep], s[keep], e[keep]
    # before the thread's first event
    pre = np.flatnonzero(a < (starts[0] if n_seg else np.iinfo(np.int64).max))
    if pre.size:
        pe = np.minimum(b[pre], starts[0]) if n_seg else b[pre]
        gi, s, e = (np.concatenate((gi, pre)), np.concatenate((s, a[pre])),
                    np.concatenate((e, pe)))
    return gi, s, e


def _busiest_other(lines: dict, t: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per window: the other thread with the most work in it (−1 if none worked)."""
    best = np.zeros(a.shape[0], np.int64)
    who = np.full(a.shape[0], -1, np.int64)
    for u, line in lines.items():
        if u == t:
            continue
        work = line.time_except(a, b, (B_IDLE, B_WAIT, B_SYNC))
        better = work > best
        best = np.where(better, work, best)
        who = np.where(better, u, who)
    return who


def _handed_off(trace: Trace, origin: np.ndarray, nxt: np.ndarray, wf: np.ndarray,
                ok: np.ndarray) -> np.ndarray:
    """Per gap: L (on a host thread) handed E's program to runtime threads that enqueued
    it (XLA's executors and TPU queues), rather than launching it itself."""
    o = origin[nxt].astype(np.int64)
    oo, w = np.maximum(o, 0), np.maximum(wf, 0)
    return ok & (o >= 0) & (trace.track[oo] != trace.track[w]) & (trace.kind[oo] != K.LAUNCH) \
        & (trace.track_kind[trace.track[oo]] == 0)


def _runtime_h2d(trace: Trace, user_threads: list):
    """Union of the host→device transfers runtime threads ran (the user's own transfer
    calls are judged on their thread)."""
    ev = np.flatnonzero(trace.kind == K.TRANSFER_H2D)
    ev = ev[(trace.track_kind[trace.track[ev]] == 0) & ~np.isin(trace.track[ev], user_threads)]
    return union(trace.ts[ev], trace.end_of(ev))


def split(trace: Trace, gs: np.ndarray, ge: np.ndarray, nxt: np.ndarray, wf: np.ndarray,
          device_ops: np.ndarray, us: np.ndarray, ue: np.ndarray, ctx,
          fallback_threads: list, get_next: tuple | None = None) -> Split:
    """The counterfactual split of each gap [gs, ge) of one device (module docstring).
    ``wf``: the host call that issued each gap's ending op (−1); ``us``/``ue``: the
    device's busy set; ``fallback_threads``: the user's threads, main first;
    ``get_next``: the union of tf.data get_next calls (``tfdata.get_next_spans``)."""
    n = gs.shape[0]
    shares = np.zeros((n, N_CAUSES), np.int64)
    thread = np.full(n, -1, np.int32)
    followed = np.full(n, -1, np.int32)
    blocking = np.full(n, -1, np.int64)
    culprit = np.full(n, -1, np.int64)
    drained = np.zeros(n, bool)
    if n == 0:
        return Split(shares, np.zeros(0, np.int8), thread, ge.copy(), blocking, drained,
                     culprit, followed)
    dur = ge - gs
    lines = ctx.lines
    ok = (wf >= 0)
    ok[ok] = trace.track_kind[trace.track[wf[ok]]] == 0
    w = np.maximum(wf, 0)
    l_start = np.where(ok, trace.ts[w], ge)
    l_end = np.where(ok, trace.end_of(w), ge)

    # 1. device-side wait
    rest_end = np.where(ok, np.clip(l_end + LAUNCH_LATENCY_PS, gs, ge), ge)
    behind = np.zeros(n, bool)
    if not ok.all():        # only gaps whose op has no launch need it (its temporaries are big)
        behind[~ok] = device_behind(trace, device_ops, ctx.origin, ge[~ok])
    rest_end[behind] = gs[behind]
    # XLA: L handed the program to runtime threads, which enqueued it (E's direct origin
    # is on another thread and is no launch call): from L's start the runtime had the
    # work.  Its threads staging inputs to the device is h2d_transfer, the rest device-side
    handoff = _handed_off(trace, ctx.origin, nxt, wf, ok)
    rest_end = np.where(handoff, np.clip(l_start, gs, ge), rest_end)
    staged = np.zeros(n, np.int64)
    if handoff.any():
        hs, he = _runtime_h2d(trace, fallback_threads)
        staged[handoff] = covered(hs, he, rest_end[handoff], ge[handoff])
    shares[:, H2D_TRANSFER] += staged
    u, inv = unique_inverse(trace.name[nxt])
    coll = np.array([is_collective_kernel(trace.strings[x]) for x in u.tolist()],
                    bool)[inv.reshape(-1)]
    wait = ge - rest_end - staged
    # TensorFlow: L dispatched a function (it is no launch call: Keras' train function)
    # and the function's get_next was still waiting for tf.data -- the runtime could
    # enqueue E only once its input existed, so that part of the wait is data loading
    fed = np.zeros(n, np.int64)
    if get_next is not None and get_next[0].size:
        cand = np.flatnonzero(ok & ~coll & (wait > 0) & (trace.kind[w] != K.LAUNCH))
        if cand.size:
            fed[cand] = np.minimum(covered(get_next[0], get_next[1], rest_end[cand],
                                           ge[cand]), wait[cand])
    shares[:, DATA_LOADING] += fed
    wait = wait - fed
    shares[:, DEVICE_WAIT] = np.where(coll, 0, wait)
    shares[:, COLLECTIVE_WAIT] = np.where(coll, wait, 0)
    rest = rest_end - gs

    # the thread that issued L, else the user's main thread, else the busiest one
    fallback = next((t for t in fallback_threads if t in lines), None)
    if fallback is None and lines:
        fallback = max(lines, key=lambda t: lines[t].busy_ns())
    l_track = np.where(ok, trace.track[w], -1)
    has_line = np.array([t in lines for t in l_track.tolist()], bool)
    thread[:] = np.where(ok & has_line, l_track, -1 if fallback is None else fallback)
    main = fallback_threads[0] if fallback_threads and fallback_threads[0] in lines else None

    # L's own time in the rest is its issue cost: launch overhead, or staging an H2D copy
    l_in = np.where(ok, np.maximum(np.minimum(l_end, rest_end) - np.maximum(l_start, gs), 0), 0)
    l_bucket = np.where(ctx.launch_memcpy[w] == 1, B_H2D, B_LAUNCH)

    for t in distinct(thread[(thread >= 0) & (rest > 0)]).tolist():
        line = lines[t]
        rows = np.flatnonzero((thread == t) & (rest > 0))
        a, b = gs[rows], rest_end[rows]
        bt = line.time_by_bucket(a, b)
        # move L's time out of whatever bucket its line segment had into its issue bucket
        lr = rows[l_in[rows] > 0]
        if lr.size:
            mid = np.maximum(trace.ts[w[lr]], gs[lr])
            own = line.seg_bucket[np.maximum(t_search(line.seg_start, mid, "right") - 1,
                                             0)]
            pos = np.searchsorted(rows, lr)
            take = np.minimum(l_in[lr], bt[pos, own])
            bt[pos, own] -= take
            # a launch that is start-up (a kernel's module loaded on its first launch)
            # stays start-up
            bt[pos, np.where(own == B_STARTUP, B_STARTUP, l_bucket[lr])] += take
        # 2. the sync: blocked while the device was busy (the call in flight at gs) plus
        # blocked inside the rest
        in_rest = bt[:, B_SYNC].copy()
        bs, be, bev = line.blocking
        if bs.size == 0:                       # one sentinel interval that never counts
            bs, be, bev = (np.array([np.iinfo(np.int64).min]),) * 2 + (np.array([-1]),)
        k = np.searchsorted(bs, a, side="right") - 1
        kk = np.maximum(k, 0)
        live = (k >= 0) & (be[kk] > a - PROBE_PS) & (bev[kk] != wf[rows]) & (bev[kk] >= 0)
        before = np.where(live, covered(us, ue, np.maximum(bs[kk], us[0]),
                                        np.maximum(np.minimum(be[kk], a), us[0])), 0)
        sync = np.minimum(rest[rows], before + in_rest)
        shares[rows, HOST_SYNC] = sync
        drained[rows] = live & (sync > 0)
        # the blocking call named for the gap: in flight at gs, else the first in the rest
        first_in = np.searchsorted(bs, a, side="left")
        fi = np.minimum(first_in, bs.shape[0] - 1)
        later = (first_in < bs.shape[0]) & (bs[fi] < b) & (bev[fi] >= 0)
        blocking[rows] = np.where(live, bev[kk], np.where(later, bev[fi], -1))
        # 3. the rest of the host side, by what the thread did.  Where it had nothing to
        # do or waited for another thread (run_backward), follow the thread doing the
        # work: the main thread for a helper thread, the busiest other thread for main
        bt[:, B_SYNC] = 0
        idle = bt[:, B_IDLE] + bt[:, B_WAIT]
        has_idle = idle > 0
        if has_idle.any():
            if main is not None and main != t:
                target = np.full(rows.shape[0], main, np.int64)
            else:
                target = _busiest_other(lines, t, a, b)
            gi, ia, ib = _idle_intervals(line, a, b)
            for f in distinct(target[has_idle & (target >= 0)]).tolist():
                sel = np.flatnonzero(has_idle & (target == f))
                pick = np.isin(gi, sel)
                # what the followed thread did exactly while this one had nothing to do
                mt = np.zeros((rows.shape[0], len(BUCKETS)), np.int64)
                np.add.at(mt, gi[pick], lines[f].time_by_bucket(ia[pick], ib[pick]))
                mt = mt[sel]
                # the followed thread waiting (a sync, another thread): nothing to see
                mt[:, B_IDLE] += mt[:, B_SYNC] + mt[:, B_WAIT]
                mt[:, B_SYNC] = mt[:, B_WAIT] = 0
                bt[sel, B_IDLE] = 0
                bt[sel, B_WAIT] = 0
                bt[sel] += mt
                followed[rows[sel]] = f
        remainder = rest[rows] - sync
        other = bt.sum(axis=1)
        scaled = np.where(other[:, None] > 0,
                          np.floor(bt * (remainder / np.maximum(other, 1))[:, None]), 0)
        scaled = scaled.astype(np.int64)
        scaled[other == 0, B_IDLE] = remainder[other == 0]
        np.add.at(shares, (np.repeat(rows, len(BUCKETS)),
                           np.tile(_BUCKET_TO_CAUSE, rows.shape[0])), scaled.reshape(-1))
    # a gap with no host thread to look at: the host side is untraced
    none = (thread < 0) & (rest > 0)
    shares[none, UNTRACED] += rest[none]
    # rounding: the shares add up to the gap exactly (the residue goes to the largest)
    resid = dur - shares.sum(axis=1)
    top = np.argmax(shares, axis=1)
    shares[np.arange(n), top] += resid
    primary = np.argmax(shares, axis=1).astype(np.int8)

    # the op behind the primary share: most self time in its bucket on the thread
    cause_bucket = {_CAUSE_INDEX[BUCKET_CAUSE[b]]: b for b in range(len(BUCKETS))
                    if b not in (B_IDLE,)}
    for t in distinct(thread[thread >= 0]).tolist():
        rows = np.flatnonzero(thread == t)
        pb = np.array([cause_bucket.get(int(c), -1) for c in primary[rows].tolist()], np.int64)
        pb[primary[rows] == HOST_SYNC] = B_SYNC
        pb[primary[rows] == UNTRACED] = B_ANNOT
        sel = pb >= 0
        if sel.any():
            r = rows[sel]
            culprit[r] = _top_op(lines[t], trace.name, gs[r],
                                 np.maximum(rest_end[r], gs[r] + 1), pb[sel])
            # idle time followed to the thread doing the work: the op may be there
            f_all = r[(culprit[r] < 0) & (followed[r] >= 0)]
            for ft in distinct(followed[f_all]).tolist():
                f = f_all[followed[f_all] == ft]
                pbf = pb[sel][np.searchsorted(r, f)]
                culprit[f] = _top_op(lines[ft], trace.name, gs[f],
                                     np.maximum(rest_end[f], gs[f] + 1), pbf)
    # an input pipeline on threads of its own (tf.data): the issuing thread only waits in
    # its iterators, so the op to name is the pipeline's slowest stage on those threads
    data_rows = np.flatnonzero(primary == DATA_LOADING)
    if data_rows.size:
        # where the input was awaited in the function's runtime, over the whole gap
        b = np.where(fed[data_rows] > 0, ge[data_rows], rest_end[data_rows])
        stage = slowest_stage(trace, lines, gs[data_rows], np.maximum(b, gs[data_rows] + 1))
        culprit[data_rows] = np.where(stage >= 0, stage, culprit[data_rows])
    blocking[shares[:, HOST_SYNC] == 0] = -1       # named only where it earned a share
    sync_rows = (primary == HOST_SYNC) & (blocking >= 0)
    culprit[sync_rows] = blocking[sync_rows]
    wait_rows = np.isin(primary, (DEVICE_WAIT, COLLECTIVE_WAIT))
    culprit[wait_rows] = np.where(ok[wait_rows], wf[wait_rows], -1)
    return Split(shares, primary, thread, rest_end, blocking, drained, culprit, followed)
