"""What each host thread was doing, as a piecewise-constant timeline of its innermost op.

Every boundary of a nested event opens a segment: at an event's start the innermost
op becomes that event, at its end it returns to the event's parent.  Each segment
also carries a *bucket* — the gap cause the op stands for — so the time spent per
cause in any window is two ``searchsorted`` calls away, for all gaps at once.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..trace.model import EventKind as K, Trace
from . import causes as C

BUCKETS = (C.HOST_SYNC, C.COMPILATION, C.H2D_TRANSFER, C.DATA_LOADING, C.HOST_COMPUTE,
           C.LAUNCH_OVERHEAD, C.UNTRACED)
B_SYNC, B_COMPILE, B_H2D, B_DATA, B_COMPUTE, B_LAUNCH, B_IDLE = range(len(BUCKETS))
# buckets an op passes to the ops it encloses (HLO passes under Compile are compile time,
# aten ops under the data loader are data loading)
_INHERITED = (B_SYNC, B_COMPILE, B_H2D, B_DATA)


def event_buckets(trace: Trace, memcpy_kind_of_launch: np.ndarray) -> np.ndarray:
    """Cause bucket of every event (host events meaningful; device ones unused)."""
    k = trace.kind
    b = np.full(trace.n_events, B_COMPUTE, np.int8)
    b[np.isin(k, (K.SYNC, K.TRANSFER_D2H))] = B_SYNC
    b[k == K.COMPILE] = B_COMPILE
    b[k == K.TRANSFER_H2D] = B_H2D
    b[k == K.DATA] = B_DATA
    b[np.isin(k, (K.LAUNCH, K.RUNTIME))] = B_LAUNCH
    # a memcpy runtime call blocks like a sync when it copies to the host, and is a
    # host→device transfer when it stages host data
    b[memcpy_kind_of_launch == 1] = B_H2D
    b[memcpy_kind_of_launch == 2] = B_SYNC
    b[k == K.IDLE] = B_IDLE
    # idle markers are idle only at the top of a thread; nested ones are transparent
    specific = np.isin(b, _INHERITED) | ((b == B_IDLE) & (trace.parent < 0))
    for idx, p in trace.nested_levels():
        inherit = ~specific[idx] & (np.isin(b[p], _INHERITED) | (b[idx] == B_IDLE))
        b[idx[inherit]] = b[p[inherit]]
        specific[idx[inherit]] = True
    return b


@dataclass
class HostLine:
    track: int
    seg_start: np.ndarray     # int64, sorted
    seg_inner: np.ndarray     # int32 event index of the innermost op, -1 when idle
    seg_bucket: np.ndarray    # int8 bucket (B_IDLE when idle)
    # per bucket: the segments of that bucket and the time of that bucket before each of
    # them (one sparse column per bucket; a dense (n_seg, n_buckets) table costs 3.5×
    # the memory and its row-wise cumsum dominated the analysis of large traces)
    bucket_segs: list
    bucket_cum: list

    def busy_ns(self) -> int:
        """Time spent in any bucket but idle."""
        return sum(int(c[-1]) for c in self.bucket_cum[:B_IDLE])

    def time_by_bucket(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(len(a), n_buckets) time spent per bucket inside each window [a, b)."""
        return self._upto(b) - self._upto(a)

    def _upto(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, np.int64)
        k = np.searchsorted(self.seg_start, t, side="right") - 1      # segment containing t
        out = np.zeros((t.shape[0], len(BUCKETS)), np.int64)
        # whole segments of each bucket before segment k
        for b in range(len(BUCKETS)):
            out[:, b] = self.bucket_cum[b][np.searchsorted(self.bucket_segs[b], k, side="left")]
        # plus the part of segment k up to t (nothing before the first segment)
        rows = np.flatnonzero(k >= 0)
        kk = k[rows]
        out[rows, self.seg_bucket[kk]] += t[rows] - self.seg_start[kk]
        return out

    def inner_at(self, t: int) -> int:
        k = int(np.searchsorted(self.seg_start, t, side="right")) - 1
        return int(self.seg_inner[k]) if k >= 0 else -1

    def segments(self, a: int, b: int):
        """(starts, ends, inner) of the segments clipped to [a, b)."""
        lo = max(int(np.searchsorted(self.seg_start, a, side="right")) - 1, 0)
        hi = int(np.searchsorted(self.seg_start, b, side="left"))
        s = self.seg_start[lo:hi]
        e = np.concatenate((self.seg_start[lo + 1:hi + 1], [np.iinfo(np.int64).max]))[:s.shape[0]]
        s = np.maximum(s, a)
        e = np.minimum(e, b)
        keep = e > s
        return s[keep], e[keep], self.seg_inner[lo:hi][keep]


def build_hostlines(trace: Trace, buckets: np.ndarray, tracks) -> dict:
    out = {}
    # events are sorted by track: each track is one slice
    bounds = np.searchsorted(trace.track, np.arange(len(trace.track_kind) + 1))
    for t in tracks:
        lo, hi = bounds[t], bounds[t + 1]
        if hi == lo:
            continue
        idx = np.arange(lo, hi)
        # boundaries: starts (→ event), ends (→ parent); ends sort before starts at ties,
        # and among starts at one instant the later (deeper) one wins.  Starts are already
        # in time order (events are sorted by track, ts): merge them with the sorted ends.
        starts = trace.ts[lo:hi]
        ends = trace.end_of(slice(lo, hi))
        e_order = np.argsort(ends, kind="stable")
        ends = ends[e_order]
        # a start goes after every end at or before its instant
        s_pos = np.arange(hi - lo) + np.searchsorted(ends, starts, side="right")
        times = np.empty(2 * (hi - lo), np.int64)
        inner = np.empty(2 * (hi - lo), np.int64)
        is_s = np.zeros(2 * (hi - lo), bool)
        is_s[s_pos] = True
        times[s_pos] = starts
        inner[s_pos] = idx
        times[~is_s] = ends
        inner[~is_s] = trace.parent[lo:hi][e_order]
        del e_order, ends, s_pos, is_s
        # collapse equal times: the last boundary at an instant defines the segment
        last = np.ones(times.shape[0], bool)
        last[:-1] = times[1:] != times[:-1]
        times, inner = times[last], inner[last]
        bucket = np.where(inner >= 0, buckets[np.maximum(inner, 0)], B_IDLE).astype(np.int8)
        inner = np.where(bucket == B_IDLE, -1, inner)
        # a nested idle marker stands for its parent's work
        marker = (inner >= 0) & (trace.kind[np.maximum(inner, 0)] == K.IDLE)
        inner = np.where(marker, trace.parent[np.maximum(inner, 0)], inner)
        seg_len = np.diff(np.concatenate((times, [times[-1]])))
        by_bucket = np.argsort(bucket, kind="stable")
        edges = np.searchsorted(bucket[by_bucket], np.arange(len(BUCKETS) + 1))
        segs, cums = [], []
        for b in range(len(BUCKETS)):
            sel = by_bucket[edges[b]:edges[b + 1]].astype(np.int32)
            c = np.zeros(sel.shape[0] + 1, np.int64)
            np.cumsum(seg_len[sel], out=c[1:])
            segs.append(sel)
            cums.append(c)
        out[int(t)] = HostLine(int(t), times, inner.astype(np.int32), bucket, segs, cums)
    return out
