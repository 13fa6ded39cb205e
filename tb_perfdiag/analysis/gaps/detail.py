"""What the host threads did during gaps: the blocking call in flight at each gap's
start (every gap), and the ops with the most self time inside a gap (the gaps a page
shows, or one asked for)."""
from __future__ import annotations

import numpy as np

from ...trace.extension import native_fn
from ...trace.model import Trace
from ..result import HostOps
from ..sortedtimes import SortedTimes

HOST_OPS_PER_THREAD = 8
PROBE_BEFORE_PS = 1000               # a blocking call that returned just before the gap


def _on_line(line, a: np.ndarray) -> np.ndarray:
    """Per time: the thread's blocking call in flight then, or one that returned within
    ``PROBE_BEFORE_PS`` before it (−1)."""
    bs, be, bev = line.blocking
    if bs.size == 0:
        return np.full(a.shape[0], -1, np.int64)
    k = np.searchsorted(bs, a, side="right") - 1
    kk = np.maximum(k, 0)
    return np.where((k >= 0) & (be[kk] > a - PROBE_BEFORE_PS), bev[kk], -1)


def by_gap_then_most(g: np.ndarray, t: np.ndarray, op: np.ndarray) -> np.ndarray:
    """The order ``np.lexsort((op, -t, g))`` (by gap, then most time, then op) for rows
    that come sorted by (gap, op): one stable sort of a combined key where gap and time
    fit 63 bits, else the lexsort."""
    if g.shape[0] == 0:
        return np.zeros(0, np.intp)
    low = 63 - int(g.max()).bit_length()           # bits left for the time
    if int(g.min()) >= 0 and 0 <= int(t.min()) and int(t.max()) < 1 << low:
        return np.argsort(g.astype(np.int64) << low | ((1 << low) - 1 - t), kind="stable")
    return np.lexsort((op, -t, g))


def top_self_ops(line, a: np.ndarray, b: np.ndarray, per: int = HOST_OPS_PER_THREAD):
    """(window, op, self time) of the ``per`` ops with the most self time on one thread
    inside each window [a, b), by window, then most time, then the lower op: in one C
    pass, else ``_top_self_ops``."""
    fn = native_fn("top_self_ops")
    if fn is None:
        return _top_self_ops(line, a, b, per)
    if isinstance(line.seg_start, SortedTimes):
        return _top_self_ops_split(fn, line, np.asarray(a, np.int64), np.asarray(b, np.int64),
                                   per)
    got = fn(np.ascontiguousarray(line.seg_start, np.int64),
             np.ascontiguousarray(line.seg_inner, np.int32), np.ascontiguousarray(a, np.int64),
             np.ascontiguousarray(b, np.int64), int(per))
    return tuple(np.frombuffer(x, np.int64) for x in got)


# boundaries of a split timeline made plain for one C call, at most (unless one window
# alone reaches further)
_DECODE = 1 << 20


def _top_self_ops_split(fn, line, a: np.ndarray, b: np.ndarray, per: int):
    """``top_self_ops`` on a line whose boundaries are held split: the windows in groups
    by start, each group's boundaries made plain (from the segment holding its first start
    to the first boundary at or past its last end), a C call per group; its rows put
    back in window order (each window's rows are the C pass's, whatever the group).  The
    200 gaps of a 40 M-event trace reach across the whole thread: its boundaries made
    plain at once were 305 MB."""
    st, inner = line.seg_start, line.seg_inner
    if not a.size:
        z = np.zeros(0, np.int64)
        return z, z.copy(), z.copy()
    lo = np.maximum(st.search(a, "right") - 1, 0)
    hi = np.minimum(np.maximum(st.search(b, "left") + 1, lo), len(st))
    order = np.argsort(lo, kind="stable")
    parts = []
    i = 0
    while i < order.shape[0]:
        g_lo, g_hi, j = int(lo[order[i]]), int(hi[order[i]]), i + 1
        while j < order.shape[0] and max(g_hi, int(hi[order[j]])) - g_lo <= _DECODE:
            g_hi = max(g_hi, int(hi[order[j]]))
            j += 1
        w = order[i:j]
        got = fn(st[g_lo:g_hi], np.ascontiguousarray(inner[g_lo:g_hi], np.int32),
                 np.ascontiguousarray(a[w]), np.ascontiguousarray(b[w]), int(per))
        gw, op, t = (np.frombuffer(x, np.int64) for x in got)
        parts.append((w[gw], op, t))
        i = j
    win, op, t = (np.concatenate(x) for x in zip(*parts))
    o = np.argsort(win, kind="stable")
    return win[o].astype(np.int64), op[o], t[o]


def _top_self_ops(line, a: np.ndarray, b: np.ndarray, per: int):
    """``top_self_ops`` by numpy (the C pass's reference)."""
    gi, k, s, e = line.pieces(a, b)
    inner = line.seg_inner[k]
    keep = (e > s) & (inner >= 0)
    gi, inner, ln = gi[keep], inner[keep], (e - s)[keep]
    if not gi.size:
        return gi.astype(np.int64), inner.astype(np.int64), ln
    # self time per (gap, op), then each gap's largest (ties: earlier op first); one sort
    # of a combined key (gaps and events both fit 31 bits)
    o = np.argsort(gi.astype(np.int64) << 31 | inner, kind="stable")
    gi, inner, ln = gi[o], inner[o], ln[o]
    first = np.ones(gi.shape[0], bool)
    first[1:] = (gi[1:] != gi[:-1]) | (inner[1:] != inner[:-1])
    at = np.flatnonzero(first)
    g_u, op_u, self_u = gi[at], inner[at], np.add.reduceat(ln, at)
    o = by_gap_then_most(g_u, self_u, op_u)
    g_u, op_u, self_u = g_u[o], op_u[o], self_u[o]
    gfirst = np.searchsorted(g_u, g_u, side="left")
    top = (np.arange(g_u.shape[0]) - gfirst) < per
    return g_u[top].astype(np.int64), op_u[top].astype(np.int64), self_u[top]


def host_ops(trace: Trace, lines: dict, rows: np.ndarray,
             a: np.ndarray, b: np.ndarray) -> HostOps:
    """Per gap row in ``rows`` (window [a, b)): each thread's ops by self time inside the
    window (the largest few per thread) and the blocking calls in flight at its start."""
    n = rows.shape[0]
    parts_g, parts_t, parts_e, parts_s = [], [], [], []
    syncs = [[] for _ in range(n)]
    for t, line in lines.items():
        g_u, op_u, self_u = top_self_ops(line, a, b)
        if g_u.size:
            parts_g.append(g_u)
            parts_e.append(op_u)
            parts_s.append(self_u)
            parts_t.append(np.full(g_u.shape[0], t, np.int32))
        got = _on_line(line, a)
        for gg in np.flatnonzero(got >= 0).tolist():
            syncs[gg].append((int(t), int(got[gg])))
    cat = (lambda p, dt: np.concatenate(p).astype(dt) if p else np.zeros(0, dt))
    g, tr, ev, st = cat(parts_g, np.int64), cat(parts_t, np.int32), cat(parts_e, np.int64), \
        cat(parts_s, np.int64)
    # per gap, most self time first (rounded to ns as shown; threads in track order at ties)
    o = np.lexsort((-np.rint(st / 1000), g))
    return HostOps(rows[g[o]].astype(np.int32), tr[o], ev[o], st[o], syncs,
                   rows.astype(np.int32))
