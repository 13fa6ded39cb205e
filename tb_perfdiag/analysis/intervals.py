"""Vectorised interval algebra on int64 [start, end) arrays."""
from __future__ import annotations

import numpy as np

from ..trace.build import native_fn


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into sorted, disjoint [start, end) intervals (touching ones merge)."""
    if starts.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if (starts[1:] >= starts[:-1]).all():
        # a track's events come sorted: no order and no sorted copies (a device's busy set
        # on a 40 M-event trace: 0.5 GB less at the analysis' peak)
        s, e = starts, ends
    else:
        o = np.argsort(starts, kind="stable")
        s, e = starts[o], ends[o]
        del o
    run_end = np.maximum.accumulate(e)
    new = np.empty(s.shape[0], bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.concatenate((first[1:], [s.shape[0]])) - 1
    return s[first], run_end[last]


def union_of_runs(ts: np.ndarray, dur: np.ndarray, ev: np.ndarray, bounds: np.ndarray,
                  threshold: int | None = None):
    """``union`` of [ts, ts + dur) over the events ``ev``, whose runs
    ``ev[bounds[r]:bounds[r + 1]]`` are each sorted by start (a device's tracks): merged
    run by run in C where the extension is built, without the sorted copies of starts and
    ends ``union`` makes (1.4 GB on a device of 20 M ops).

    With a ``threshold``: (starts, ends, gaps), gaps being the holes of at least that
    length as (starts, ends, the op before, the op after) like ``gaps.find_gaps`` gives
    them, found in the same merge; None where the merge was not native (the caller
    finds them)."""
    fn = _native_union()
    if fn is not None and ts.dtype == dur.dtype == np.int64:
        # int32 indices as they are (a device's ops are held so through the gap loop)
        evc = np.ascontiguousarray(ev, np.int32 if ev.dtype == np.int32 else np.int64)
        try:
            got = fn(ts, dur, evc, np.ascontiguousarray(bounds, np.int64),
                     -1 if threshold is None else int(threshold), evc.dtype.itemsize)
        except ValueError:
            got = None         # runs not sorted as promised: the general union says the same
        if got is not None:
            us, ue = (np.frombuffer(x, np.int64) for x in got[:2])
            if threshold is None:
                return us, ue
            gs, ge, prev, nxt = (np.frombuffer(x, np.int64) for x in got[2:])
            return us, ue, (gs, ge, evc[prev].astype(np.int64), evc[nxt].astype(np.int64))
    us, ue = union(ts[ev], ts[ev] + dur[ev])
    return (us, ue) if threshold is None else (us, ue, None)


def _native_union():
    return native_fn("busy_union")


def covered(us: np.ndarray, ue: np.ndarray, a, b) -> np.ndarray:
    """Length of union ∩ [a, b) for disjoint sorted union (us, ue); a, b may be arrays."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    if us.size == 0:
        return np.zeros(np.broadcast(a, b).shape, np.int64)
    # intervals starting <= t for each end, with the part of the last one past t
    ka = np.searchsorted(us, a, side="right")
    kb = np.searchsorted(us, b, side="right")
    full = _lengths_before(us, ue, np.concatenate((kb.reshape(-1), ka.reshape(-1))))
    full_b, full_a = full[:kb.size].reshape(kb.shape), full[kb.size:].reshape(ka.shape)

    def upto(k, full, t):
        # covered length of (-inf, t)
        last = np.maximum(k - 1, 0)
        return full - np.where(k > 0, np.maximum(ue[last] - t, 0), 0)
    return np.maximum(upto(kb, full_b, b) - upto(ka, full_a, a), 0)


_BLOCK = 1 << 20


def total_length(us: np.ndarray, ue: np.ndarray) -> int:
    """The summed length of the intervals, a block at a time (``ue - us`` of a device's
    20 M-interval busy set was 116 MB, the peak of the gap loop)."""
    return sum(int((ue[i:i + _BLOCK] - us[i:i + _BLOCK]).sum())
               for i in range(0, us.shape[0], _BLOCK))


def _lengths_before(us: np.ndarray, ue: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Per k: the total length of intervals [0, k).  A busy set of millions of intervals
    is summed a block at a time for the few k asked (its whole running sum was 160 MB at
    20 M intervals, at the peak of the gap loop)."""
    n = us.shape[0]
    if n <= 2 * _BLOCK:
        cum = np.empty(n + 1, np.int64)
        cum[0] = 0
        np.subtract(ue, us, out=cum[1:])
        np.cumsum(cum[1:], out=cum[1:])
        return cum[k]
    order = np.argsort(k, kind="stable")
    ks = k[order]
    out = np.empty(k.shape[0], np.int64)
    run, pos = 0, 0
    for lo in range(0, n, _BLOCK):
        hi = min(lo + _BLOCK, n)
        c = np.cumsum(ue[lo:hi] - us[lo:hi])
        end = int(np.searchsorted(ks, hi, side="right"))
        kk = ks[pos:end]                  # lo <= kk <= hi (smaller ones were answered)
        out[order[pos:end]] = run + np.where(kk > lo, c[np.maximum(kk - lo - 1, 0)], 0)
        pos = end
        run += int(c[-1])
    return out


def complement(us: np.ndarray, ue: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Idle intervals of a disjoint sorted union inside [lo, hi)."""
    s = np.concatenate(([lo], ue))
    e = np.concatenate((us, [hi]))
    s = np.maximum(s, lo)
    e = np.minimum(e, hi)
    keep = e > s
    return s[keep], e[keep]


def clip_sum(starts: np.ndarray, ends: np.ndarray, wa: np.ndarray, wb: np.ndarray) -> np.ndarray:
    """For each window [wa, wb): total length of (disjoint, sorted) intervals inside it."""
    return covered(starts, ends, wa, wb)


def window_pairs(wb: np.ndarray, we: np.ndarray, gs: np.ndarray, ge: np.ndarray) -> tuple:
    """Every (interval, window) pair that may overlap, for intervals [gs, ge) against
    windows [wb, we) sorted by start: (interval row g, window w, their overlap ov, the
    pairs per interval cnt).  An interval's pairs are contiguous, its windows in order."""
    w0 = np.maximum(np.searchsorted(wb, gs, side="right") - 1, 0)
    w1 = np.maximum(np.searchsorted(wb, ge - 1, side="right") - 1, 0)
    cnt = w1 - w0 + 1
    g = np.repeat(np.arange(gs.shape[0]), cnt)
    w = w0[g] + (np.arange(g.shape[0]) - np.repeat(np.cumsum(cnt) - cnt, cnt))
    ov = np.maximum(np.minimum(ge[g], we[w]) - np.maximum(gs[g], wb[w]), 0)
    return g, w, ov, cnt
