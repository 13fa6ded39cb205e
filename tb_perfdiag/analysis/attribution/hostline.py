"""What each host thread was doing, as a piecewise-constant timeline of its innermost op.

Every boundary of a nested event opens a segment: at an event's start the innermost
op becomes that event, at its end it returns to the event's parent.  Each segment
also carries a *bucket* — the gap cause the op stands for — so the time spent per
cause in any window is two ``searchsorted`` calls away, for all gaps at once.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...trace.build import native_fn, parent_down
from ...trace.model import EventKind as K, Trace, isin_few, search
from .. import causes as C
from ..sortedtimes import SortedTimes, search as t_search

# what a host op's own time stands for; an op's bucket decides the gap share its self
# time goes to (BUCKET_CAUSE).  Annotation self time is untraced, but it is not idle: the
# thread was inside user code the profiler did not break down.
BUCKETS = ("sync", "compile", "h2d", "data", "compute", "launch", "idle", "alloc",
           "capture", "runtime", "annotation", "wait", "startup")
(B_SYNC, B_COMPILE, B_H2D, B_DATA, B_COMPUTE, B_LAUNCH, B_IDLE, B_ALLOC, B_CAPTURE,
 B_RUNTIME, B_ANNOT, B_WAIT, B_STARTUP) = range(len(BUCKETS))
BUCKET_CAUSE = {B_SYNC: C.HOST_SYNC, B_COMPILE: C.COMPILATION, B_H2D: C.H2D_TRANSFER,
                B_DATA: C.DATA_LOADING, B_COMPUTE: C.HOST_COMPUTE, B_LAUNCH: C.LAUNCH_OVERHEAD,
                B_IDLE: C.UNTRACED, B_ALLOC: C.ALLOCATOR, B_CAPTURE: C.GRAPH_CAPTURE,
                B_RUNTIME: C.RUNTIME_CALL, B_ANNOT: C.UNTRACED, B_WAIT: C.UNTRACED,
                B_STARTUP: C.STARTUP}
# buckets an op passes to the ops it encloses (HLO passes under Compile are compile time,
# aten ops under the data loader are data loading, anything inside a graph capture is
# capture, event queries inside an allocation are the caching allocator's)
_INHERITED = (B_SYNC, B_COMPILE, B_H2D, B_DATA, B_CAPTURE, B_ALLOC)
# a bucket with more segments than this keeps its running time every _THIN_EVERY-th one
_THIN_ABOVE = 1 << 20
_THIN_EVERY = 8


def event_buckets(trace: Trace, launch_memcpy: np.ndarray,
                  startup: list = ()) -> np.ndarray:
    """Cause bucket of every event (host events meaningful; device ones unused).
    ``launch_memcpy``: per host call, the direction of the copy it issued (1 h2d, 2 d2h);
    ``startup``: (lo, hi) event ranges of start-up (``startup.startup_ranges``), whose
    events are start-up whatever else they are (checked before the other causes)."""
    b = _buckets(trace, launch_memcpy)
    for lo, hi in startup:
        b[lo:hi] = B_STARTUP
    return b


def _buckets(trace: Trace, launch_memcpy: np.ndarray) -> np.ndarray:
    k = trace.kind
    # one table lookup per event instead of a pass over all events per kind
    by_kind = np.full(256, B_COMPUTE, np.int8)
    for kinds, bucket in (((K.SYNC, K.TRANSFER_D2H), B_SYNC), ((K.COMPILE,), B_COMPILE),
                          ((K.TRANSFER_H2D,), B_H2D), ((K.DATA,), B_DATA),
                          ((K.LAUNCH,), B_LAUNCH), ((K.RUNTIME,), B_RUNTIME),
                          ((K.ALLOC,), B_ALLOC), ((K.GRAPH_CAPTURE,), B_CAPTURE),
                          ((K.ANNOTATION, K.STEP), B_ANNOT), ((K.WAIT,), B_WAIT),
                          ((K.IDLE,), B_IDLE)):
        by_kind[[int(x) for x in kinds]] = bucket
    b = by_kind[k.view(np.uint8)]
    # a memcpy call blocks like a sync when it copies to the host, and stages host data
    # when it copies to the device
    # int8s read as bools: numpy finds nonzero bools 15x faster
    copy = np.flatnonzero(launch_memcpy.view(bool) if launch_memcpy.itemsize == 1
                          else launch_memcpy)
    way = launch_memcpy[copy]
    keep = (k[copy] != K.IDLE) & ((way == 1) | (way == 2))
    b[copy[keep]] = np.where(way[keep] == 1, B_H2D, B_SYNC)
    _capture_regions(trace, b)
    # idle markers are idle only at the top of a thread; nested ones are transparent.  An
    # allocation passes its bucket down but takes its parent's (data loading, compile)
    inherited = np.zeros(256, bool)
    inherited[list(_INHERITED)] = True
    inherited_by = inherited.copy()
    inherited_by[B_ALLOC] = False
    specific = inherited_by[b.view(np.uint8)] | ((b == B_IDLE) & (trace.parent < 0))
    if parent_down("parent_down_bucket", trace, b, specific, inherited, B_IDLE):
        return b
    for idx, p in trace.nested_levels():
        inherit = ~specific[idx] & (inherited[b[p].view(np.uint8)] | (b[idx] == B_IDLE))
        b[idx[inherit]] = b[p[inherit]]
        specific[idx[inherit]] = True
    return b


def _capture_regions(trace: Trace, b: np.ndarray) -> None:
    """Everything a thread runs between a stream-capture begin and its end is capture."""
    cap = np.flatnonzero(trace.kind == K.GRAPH_CAPTURE)
    if cap.size == 0:
        return
    names = [trace.strings[i].lower() for i in trace.name[cap].tolist()]
    begins = [e for e, nm in zip(cap.tolist(), names) if "begincapture" in nm or "capture_begin" in nm]
    for e in begins:
        t = trace.track[e]
        lo, hi = trace.track_slices([t])[0]
        later = lo + np.flatnonzero(trace.ts[lo:hi] >= trace.ts[e])
        ends = [x for x in later.tolist() if "endcapture" in trace.strings[int(trace.name[x])]
                .lower() or "capture_end" in trace.strings[int(trace.name[x])].lower()]
        stop = trace.end_of(ends[0]) if ends else trace.end_of(e)
        inside = later[trace.ts[later] < stop]
        b[inside] = B_CAPTURE


def blocking_mask(trace: Trace, launch_memcpy: np.ndarray,
                  pageable: np.ndarray | None = None, startup: list = ()) -> np.ndarray:
    """Host calls that block until the device catches up: syncs, device→host transfers
    and copies, and copies from or to pageable memory (the host stages them itself).
    None inside start-up (``startup``: its event ranges): the profiler stopping
    synchronises, and that wait is its own."""
    out = isin_few(trace.kind, (K.SYNC, K.TRANSFER_D2H)) | \
        ((trace.kind == K.LAUNCH) & (launch_memcpy == 2))
    if pageable is not None and pageable.size:
        out[pageable[trace.kind[pageable] == K.LAUNCH]] = True
    for lo, hi in startup:
        out[lo:hi] = False
    return out


@dataclass
class HostLine:
    track: int
    seg_start: np.ndarray     # int64, sorted (a ``SortedTimes`` on long lines)
    seg_inner: np.ndarray     # int32 event index of the innermost op, -1 when idle
    seg_bucket: np.ndarray    # int8 bucket (B_IDLE when idle)
    # per bucket: the segments of that bucket and the time of that bucket before each of
    # them (one sparse column per bucket; a dense (n_seg, n_buckets) table costs 3.5×
    # the memory and its row-wise cumsum dominated the analysis of large traces).  The
    # bucket with the most segments has no column (None): its time is what the others
    # leave of the segments' span (a launch loop: half the segments, 0.25 GB at 40 M)
    bucket_segs: list
    bucket_cum: list
    # the thread's blocking calls: disjoint sorted intervals and the outermost call of each
    blocking: tuple = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    # given by the native pass, which thins as it writes; else found from whole columns
    bucket_total: list | None = None
    thinned: list | None = None

    def __post_init__(self):
        # the native pass leaves it out already (None); the reference makes them all
        missing = [b for b, x in enumerate(self.bucket_segs) if x is None]
        self.implicit = missing[0] if missing else \
            int(np.argmax([x.shape[0] for x in self.bucket_segs]))
        self.bucket_segs = list(self.bucket_segs)
        self.bucket_cum = list(self.bucket_cum)
        self.bucket_segs[self.implicit] = self.bucket_cum[self.implicit] = None
        if self.thinned is not None:
            self.bucket_total[self.implicit] = 0
            return
        # a bucket of millions of segments keeps its running time every _THIN_EVERY-th
        # segment only; the few between are summed off seg_start when asked (the launch
        # bucket of a 20 M-event thread: 150 MB fewer, held through the gap loop and by
        # the server after it)
        self.bucket_total = [int(c[-1]) if c is not None else 0 for c in self.bucket_cum]
        self.thinned = [False] * len(self.bucket_cum)
        for b, c in enumerate(self.bucket_cum):
            if c is not None and c.shape[0] > _THIN_ABOVE:
                self.bucket_cum[b] = c[::_THIN_EVERY].copy()
                self.thinned[b] = True

    def nbytes(self) -> int:
        cols = [self.seg_start, self.seg_inner, self.seg_bucket, *self.blocking]
        cols += [x for x in self.bucket_segs + self.bucket_cum if x is not None]
        return int(sum(x.nbytes for x in cols))

    def _cum_before(self, b: int, k32: np.ndarray) -> np.ndarray:
        """Per segment index k: bucket b's time in the segments before k."""
        segs = self.bucket_segs[b]
        j = np.searchsorted(segs, k32, side="left")
        cum = self.bucket_cum[b]
        if not self.thinned[b]:
            return cum[j]
        out = cum[j // _THIN_EVERY]
        first = j - j % _THIN_EVERY
        last = self.seg_start.shape[0] - 1
        for r in range(_THIN_EVERY - 1):
            i = first + r
            on = np.flatnonzero(i < j)
            if not on.size:
                break
            q = segs[i[on]].astype(np.int64)
            # the last segment lasts no time (as in the running time): it ends where it starts
            out[on] += self.seg_start[np.minimum(q + 1, last)] - self.seg_start[q]
        return out

    def _totals(self) -> list:
        """Each bucket's whole time (the segments' span shared out)."""
        out = list(self.bucket_total)
        out[self.implicit] = int(self.seg_start[-1] - self.seg_start[0]) - sum(out)
        return out

    def busy_ns(self) -> int:
        """Time spent in any bucket but idle."""
        return sum(x for i, x in enumerate(self._totals()) if i != B_IDLE)

    def time_by_bucket(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(len(a), n_buckets) time spent per bucket inside each window [a, b); time
        before the thread's first event is idle too."""
        a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        # both ends in one pass: a thread's lines are asked about a few windows at a time,
        # for each of hundreds of threads (numpy's per-call cost dominated)
        both = self._upto(np.concatenate((b, a)))
        out = both[:b.shape[0]] - both[b.shape[0]:]
        out[:, B_IDLE] += np.maximum(b - a, 0) - out.sum(axis=1)
        return out

    def time_except(self, a: np.ndarray, b: np.ndarray, skip) -> np.ndarray:
        """Per window [a, b): the time in buckets other than ``skip``, which is
        ``time_by_bucket`` summed over the others, read from the fewer buckets' columns
        (the busiest-thread scan asks every thread, window set by window set)."""
        a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        n = b.shape[0]
        got, span = self._except_upto(np.concatenate((b, a)), tuple(skip))
        out = got[:n] - got[n:]
        if B_IDLE not in skip:
            # idle holds what the segments do not: a window's time before the thread's
            # first event, as in time_by_bucket
            out += np.maximum(b - a, 0) - (span[:n] - span[n:])
        return out

    def _except_upto(self, t: np.ndarray, skip: tuple) -> tuple:
        """(time up to each t in buckets other than ``skip``, the thread's span up to
        it): the span less the skipped buckets' time, or, when the implicit bucket is
        skipped (it has no columns), the kept buckets' time."""
        k = t_search(self.seg_start, t, side="right") - 1
        on = k >= 0
        kk = np.maximum(k, 0)
        k32 = k.astype(np.int32)
        minus = self.implicit not in skip
        sum_of = skip if minus else [x for x in range(len(BUCKETS)) if x not in skip]
        out = np.zeros(t.shape[0], np.int64)
        for x in sum_of:
            if self.bucket_segs[x].shape[0]:
                out += self._cum_before(x, k32)
        # the part of segment k up to t
        summed = np.zeros(len(BUCKETS), bool)
        summed[list(sum_of)] = True
        part = on & summed[self.seg_bucket[kk]]
        out[part] += t[part] - self.seg_start[kk[part]]
        span = np.where(on, t - self.seg_start[0], 0)
        return (span - out if minus else out), span

    def _upto(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, np.int64)
        k = t_search(self.seg_start, t, side="right") - 1      # segment containing t
        out = np.zeros((t.shape[0], len(BUCKETS)), np.int64)
        # whole segments of each bucket before segment k (int32 like the bucket columns:
        # numpy would copy each column to the needles' width)
        k32 = k.astype(np.int32)
        for b in range(len(BUCKETS)):
            segs = self.bucket_segs[b]
            if b != self.implicit and segs.shape[0]:      # a bucket with no time: zeros
                out[:, b] = self._cum_before(b, k32)
        # the segments before k span seg_start[k] - seg_start[0]: the implicit bucket had
        # what the others did not
        rows = np.flatnonzero(k >= 0)
        kk = k[rows]
        out[rows, self.implicit] = self.seg_start[kk] - self.seg_start[0] - out[rows].sum(axis=1)
        # plus the part of segment k up to t (nothing before the first segment)
        out[rows, self.seg_bucket[kk]] += t[rows] - self.seg_start[kk]
        return out

    def inner_at(self, t: int) -> int:
        k = int(t_search(self.seg_start, t, side="right")) - 1
        return int(self.seg_inner[k]) if k >= 0 else -1

    def pieces(self, a: np.ndarray, b: np.ndarray) -> tuple:
        """(window index, segment index, start, end) of each segment's part inside each
        window [a, b), for all windows at once; a part may be empty (end ≤ start)."""
        starts = self.seg_start
        n_seg = starts.shape[0]
        lo = np.maximum(t_search(starts, a, side="right") - 1, 0)
        hi = t_search(starts, b, side="left")
        cnt = np.maximum(hi - lo, 0)
        gi = np.repeat(np.arange(a.shape[0]), cnt)
        k = lo[gi] + (np.arange(gi.shape[0]) - np.repeat(np.cumsum(cnt) - cnt, cnt))
        s = np.maximum(starts[k], a[gi])
        e = np.where(k + 1 < n_seg, starts[np.minimum(k + 1, n_seg - 1)],
                     np.iinfo(np.int64).max)
        return gi, k, s, np.minimum(e, b[gi])

    def segments(self, a: int, b: int):
        """(starts, ends, inner) of the segments clipped to [a, b)."""
        lo = max(int(t_search(self.seg_start, a, side="right")) - 1, 0)
        hi = int(t_search(self.seg_start, b, side="left"))
        s = self.seg_start[lo:hi]
        e = np.concatenate((self.seg_start[lo + 1:hi + 1], [np.iinfo(np.int64).max]))[:s.shape[0]]
        s = np.maximum(s, a)
        e = np.minimum(e, b)
        keep = e > s
        return s[keep], e[keep], self.seg_inner[lo:hi][keep]


def build_hostlines(trace: Trace, buckets: np.ndarray, tracks,
                    blocking: np.ndarray | None = None) -> dict:
    out = {}
    # events are sorted by track: each track is one slice
    bounds = trace.track_bounds()
    native = _native_segments()
    for t in tracks:
        lo, hi = int(bounds[t]), int(bounds[t + 1])
        if hi == lo:
            continue
        cols = native(trace, lo, hi, buckets) if native else None
        line = HostLine(int(t), *cols[:5], bucket_total=cols[5], thinned=cols[6]) if cols \
            else HostLine(int(t), *track_segments(trace, lo, hi, buckets))
        # a long line's boundaries in four bytes each (the 20 M-event thread of a 40 M-event
        # trace: 305 -> 153 MB, through the gap loop and in the server's cache)
        line.seg_start = SortedTimes.of(line.seg_start)
        if blocking is not None:
            line.blocking = _blocking_intervals(trace, lo, hi, blocking)
        out[int(t)] = line
    return out


def _native_segments():
    """``track_segments`` in one C pass, or None without the extension."""
    fn = native_fn("host_segments")
    if fn is None:
        return None

    def segments(trace: Trace, lo: int, hi: int, buckets: np.ndarray):
        # the pass finds the ends in order itself, from a heap of the open events; it
        # refuses starts out of order (the model sorts them), which numpy's walk takes
        # the running times of a large bucket are thinned as they are written
        try:
            times, inner, bucket, lists, totals = fn(
                np.ascontiguousarray(trace.ts[lo:hi]), np.ascontiguousarray(trace.dur[lo:hi]),
                np.ascontiguousarray(trace.parent[lo:hi], np.int32),
                np.ascontiguousarray(buckets[lo:hi], np.int8),
                np.ascontiguousarray(trace.kind[lo:hi], np.int8), lo, B_IDLE, int(K.IDLE),
                len(BUCKETS), _THIN_ABOVE, _THIN_EVERY)
        except ValueError:
            return None
        segs = [None if x is None else np.frombuffer(x, np.int32) for x in lists[0::2]]
        return (np.frombuffer(times, np.int64), np.frombuffer(inner, np.int32),
                np.frombuffer(bucket, np.int8), segs,
                [None if x is None else np.frombuffer(x, np.int64) for x in lists[1::2]],
                totals, [x is not None and x.shape[0] + 1 > _THIN_ABOVE for x in segs])
    return segments


def track_segments(trace: Trace, lo: int, hi: int, buckets: np.ndarray):
    """The timeline of the track whose events are [lo, hi): (boundaries, innermost op,
    bucket, per bucket its segments and their cumulative time), as ``HostLine`` holds
    them."""
    # at each boundary the innermost op is the deepest event open just after it: the
    # first ancestor-or-self of the last event started by then that has not ended
    # (an annotation that outlives the frame it started in stays innermost)
    starts = trace.ts[lo:hi]
    ends = trace.end_of(slice(lo, hi))
    # two sorted runs merged by the stable sort (np.unique would hash: 30x slower)
    times = np.concatenate((starts, np.sort(ends, kind="stable")))
    times.sort(kind="stable")
    first = np.ones(times.shape[0], bool)
    first[1:] = times[1:] != times[:-1]
    times = times[first]
    # the walk runs on this track's own columns (parents share the track): one
    # gather of the end instead of two over the whole trace per step
    cur = np.searchsorted(starts, times, side="right") - 1
    parent = trace.parent[lo:hi].astype(np.int64) - lo      # < 0: none
    # the first time at which an event is the last started is its own start: it is
    # open there unless it lasts no time; only the later times (ends of other events)
    # can find it ended (half the times: the walk took 2 s on a 20 M-event thread)
    again = np.empty(cur.shape[0], bool)
    again[0] = False
    np.equal(cur[1:], cur[:-1], out=again[1:])
    instant = np.flatnonzero(trace.dur[lo:hi] == 0)
    if instant.size:
        at = np.minimum(np.searchsorted(cur, instant, side="left"), cur.shape[0] - 1)
        again[at[cur[at] == instant]] = True
    live = np.flatnonzero(again & (cur >= 0))
    del again, instant
    while live.size:
        live = live[ends[cur[live]] <= times[live]]
        up = parent[cur[live]]
        cur[live] = up
        live = live[up >= 0]
    inner = np.where(cur >= 0, cur + lo, -1)
    del starts, ends, parent, cur
    bucket = np.where(inner >= 0, buckets[np.maximum(inner, 0)], B_IDLE).astype(np.int8)
    inner = np.where(bucket == B_IDLE, -1, inner)
    # a nested idle marker stands for its parent's work
    marker = (inner >= 0) & (trace.kind[np.maximum(inner, 0)] == K.IDLE)
    inner = np.where(marker, trace.parent[np.maximum(inner, 0)], inner)
    seg_len = np.diff(np.concatenate((times, [times[-1]])))
    by_bucket = np.argsort(bucket, kind="stable")
    edges = search(bucket[by_bucket], np.arange(len(BUCKETS) + 1))
    segs, cums = [], []
    for b in range(len(BUCKETS)):
        sel = by_bucket[edges[b]:edges[b + 1]].astype(np.int32)
        c = np.zeros(sel.shape[0] + 1, np.int64)
        np.cumsum(seg_len[sel], out=c[1:])
        segs.append(sel)
        cums.append(c)
    return times, inner.astype(np.int32), bucket, segs, cums


def _blocking_intervals(trace: Trace, lo: int, hi: int, blocking: np.ndarray) -> tuple:
    """(starts, ends, outermost event) of the union of a track's blocking calls."""
    ev = lo + np.flatnonzero(blocking[lo:hi])
    if ev.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    s, e = trace.ts[ev], trace.end_of(ev)          # sorted by start (track order)
    run_end = np.maximum.accumulate(e)
    new = np.ones(ev.shape[0], bool)
    new[1:] = s[1:] >= run_end[:-1]
    first = np.flatnonzero(new)
    last = np.concatenate((first[1:], [ev.shape[0]])) - 1
    return s[first], run_end[last], ev[first].astype(np.int64)
