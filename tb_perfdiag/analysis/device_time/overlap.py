"""How a device's compute, copies and collectives overlap: the union lengths per
device and per (step, device) (``overlap``), and the columns ``fill_overlap`` adds to a
``DeviceOpTable`` once the gap analysis has the busy figures."""
from __future__ import annotations

import numpy as np

from ...trace.extension import native_fn
from ...trace.model import DEVICE_ACTIVITY, EventKind as K, Trace, search
from ..result import DeviceOpTable, OpClass, Overlap


def _union_lengths(s: np.ndarray, e: np.ndarray, key: np.ndarray, n_keys: int) -> np.ndarray:
    """Per key, the length of the union of the intervals, given sorted by (key, start)
    and shifted so that no two keys' intervals touch: each interval adds what reaches
    past the intervals before it."""
    if not s.size:
        return np.zeros(n_keys, np.int64)
    reach = np.maximum.accumulate(e)
    add = np.empty_like(reach)
    add[0] = reach[0] - s[0]
    np.subtract(reach[1:], np.maximum(s[1:], reach[:-1]), out=add[1:])
    if n_keys == 1 or not key.size:
        return np.array([int(add.sum())], np.int64)
    return np.bincount(key, weights=add, minlength=n_keys).astype(np.int64)


def overlap(starts: np.ndarray, ends: np.ndarray, klass: np.ndarray, key: np.ndarray,
            n_keys: int) -> np.ndarray:
    """(n_keys, len(Overlap)) ps: the busy union per key and its split by op class."""
    out = np.zeros((n_keys, len(Overlap)), np.int64)
    if not starts.size:
        return out
    if n_keys > 1:
        # keys laid end to end, each from its own first start: one pass over thousands
        # of steps, where shifting every key by the whole trace's span takes one a key
        first = np.full(n_keys, np.iinfo(np.int64).max, np.int64)
        last = np.full(n_keys, np.iinfo(np.int64).min, np.int64)
        np.minimum.at(first, key, starts)
        np.maximum.at(last, key, ends)
        ext = np.where(last >= first, last - first + 1, 0)
        if int(ext.sum()) < 1 << 62:
            shift = (np.cumsum(ext) - ext - first)[key]
            _overlap_rows(out, starts + shift, ends + shift, klass, key)
            return out
    lo = int(starts.min())
    span = int(ends.max()) - lo + 1
    per = max((1 << 62) // span, 1)               # keys whose shifted times fit in int64
    for k0 in range(0, n_keys, per):
        n = min(per, n_keys - k0)
        sel = np.flatnonzero((key >= k0) & (key < k0 + per)) if n_keys > per else None
        if n == 1:                                 # one key: no shift
            s, e, kl = (starts, ends, klass) if sel is None else \
                (starts[sel], ends[sel], klass[sel])
            kk = np.zeros(0, np.int64)
        else:
            kk = (key if sel is None else key[sel]) - k0
            shift = kk.astype(np.int64) * span
            s = (starts if sel is None else starts[sel]) + shift
            e = (ends if sel is None else ends[sel]) + shift
            del shift
            kl = klass if sel is None else klass[sel]
        _overlap_rows(out[k0:k0 + n], s, e, kl, kk)
    return out


def _overlap_rows(blk: np.ndarray, s: np.ndarray, e: np.ndarray, kl: np.ndarray,
                  kk: np.ndarray) -> None:
    """``overlap``'s rows ``blk`` of the keys ``kk`` (empty: one key), their intervals
    shifted so that no two keys' touch."""
    n = blk.shape[0]
    o = np.argsort(s, kind="stable")              # runs already in order: cheap
    s, e, kl = s[o], e[o], kl[o]
    if kk.size:
        kk = kk[o]
    del o
    fn = native_fn("overlap_unions")
    if fn is not None:
        got = np.frombuffer(fn(s, e, np.ascontiguousarray(kl, np.int8),
                               np.ascontiguousarray(kk, np.int64) if kk.size else b"", n,
                               int(OpClass.COMPUTE), int(OpClass.COLLECTIVE),
                               int(OpClass.MEMCPY), int(OpClass.MEMSET)),
                            np.int64).reshape(n, 6)
        _overlap_columns(blk, *got.T)
        return
    busy = _union_lengths(s, e, kk, n)
    zero = np.zeros(n, np.int64)

    def u(mask):
        # a class that is every op or none needs no pass of its own; a large one is
        # the others as empty intervals (no gathers), a small one its own ops
        cnt = int(np.count_nonzero(mask))
        if not cnt:
            return zero
        if cnt == mask.shape[0]:
            return busy
        if 4 * cnt > mask.shape[0]:
            return _union_lengths(s, np.where(mask, e, s), kk, n)
        return _union_lengths(s[mask], e[mask], kk[mask] if kk.size else kk, n)
    c = kl == OpClass.COMPUTE
    m = (kl == OpClass.MEMCPY) | (kl == OpClass.MEMSET)
    x = kl == OpClass.COLLECTIVE
    u_comp, u_copy, u_coll = u(c), u(m), u(x)
    u_cm = u(c | m) if m.any() else u_comp
    u_cx = u(c | x) if x.any() else u_comp
    _overlap_columns(blk, busy, u_comp, u_copy, u_coll, u_cm, u_cx)


def _overlap_columns(blk, busy, u_comp, u_copy, u_coll, u_cm, u_cx) -> None:
    """The overlap rows from the six unions: all, compute, copies, collectives, compute
    with copies, compute with collectives."""
    blk[:, Overlap.BUSY] = busy
    blk[:, Overlap.COMPUTE] = u_comp
    blk[:, Overlap.COPIES] = u_copy
    blk[:, Overlap.COLLECTIVES] = u_coll
    blk[:, Overlap.COPIES_UNDER_COMPUTE] = u_comp + u_copy - u_cm
    blk[:, Overlap.COLLECTIVES_UNDER_COMPUTE] = u_comp + u_coll - u_cx
    # the exposed parts partition the busy union with compute
    blk[:, Overlap.COPIES_EXPOSED] = u_cm - u_comp
    blk[:, Overlap.COLLECTIVES_EXPOSED] = busy - u_cm


def _window_cover(trace: Trace, slices: list, nc: np.ndarray, a: np.ndarray, b: np.ndarray,
                  win_key: np.ndarray, step_of: np.ndarray | None,
                  kinds) -> np.ndarray:
    """Per window [a, b): the length of it covered by the device's compute ops (of the
    window's step when ``step_of`` is given, ``win_key`` being that step), read off the
    tracks' sorted ends: the device's tracks are serial (their ends are sorted).
    ``slices``: their event ranges (``Trace.track_slices``)."""
    if not a.size:
        return np.zeros(0, np.int64)
    parts_w, parts_e = [], []
    for lo, hi in slices:
        if hi <= lo:
            continue
        st = trace.ts[lo:hi]
        i0 = _search_ends(trace, lo, hi, a)
        i1 = np.maximum(np.searchsorted(st, b, side="left"), i0)
        n = i1 - i0
        w = np.repeat(np.arange(a.shape[0]), n)
        e = lo + i0[w] + (np.arange(w.shape[0]) - np.repeat(np.cumsum(n) - n, n))
        parts_w.append(w)
        parts_e.append(e)
    w = np.concatenate(parts_w) if parts_w else np.zeros(0, np.int64)
    e = np.concatenate(parts_e) if parts_e else np.zeros(0, np.int64)
    ok = np.isin(trace.kind[e], kinds) & ~np.isin(e, nc)
    if step_of is not None:
        ok &= step_of[e] == win_key[w]
    w, e = w[ok], e[ok]
    s = np.maximum(trace.ts[e], a[w])
    t = np.minimum(trace.end_of(e), b[w])
    keep = t > s
    w, s, t = w[keep], s[keep], t[keep]
    if not w.size:
        return np.zeros(a.shape[0], np.int64)
    # one union over all windows, each shifted apart from the others
    sh = w * (int((b - a).max()) + 1) - a[w]
    s, t = s + sh, t + sh
    o = np.argsort(s, kind="stable")
    return _union_lengths(s[o], t[o], w[o], a.shape[0])


_BLOCK = 1 << 20


def _ends_sorted(trace: Trace, lo: int, hi: int) -> bool:
    """Whether the ends of events [lo, hi) never fall, read a block at a time (a 20 M-op
    track's ends were 160 MB at the analysis' peak)."""
    prev = None
    for i in range(lo, hi, _BLOCK):
        j = min(i + _BLOCK, hi)
        en = trace.ts[i:j] + trace.dur[i:j]
        if (prev is not None and en[0] < prev) or not (en[1:] >= en[:-1]).all():
            return False
        prev = en[-1]
    return True


def _search_ends(trace: Trace, lo: int, hi: int, keys: np.ndarray) -> np.ndarray:
    """``np.searchsorted(ends, keys, side="right")`` over the sorted ends of events
    [lo, hi), without a column of them: one binary search for all keys, reading only the
    ends it probes."""
    m = hi - lo
    left = np.zeros(keys.shape[0], np.int64)
    right = np.full(keys.shape[0], m, np.int64)
    while True:
        on = left < right
        if not on.any():
            return left
        mid = (left + right) // 2
        at = lo + np.minimum(mid, m - 1)
        above = (trace.ts[at] + trace.dur[at]) > keys
        right = np.where(on & above, mid, right)
        left = np.where(on & ~above, mid + 1, left)


def fill_overlap(trace: Trace, table: DeviceOpTable, nc, op_step_all: np.ndarray, d: int,
                 ops: np.ndarray, busy: int, step_busy: np.ndarray | None,
                 kernels_only: bool) -> None:
    """Fills device ``d``'s rows of ``table.overlap`` (and of ``step_overlap`` when
    ``step_busy``, the union of the ops each step launched on it, is given) from its busy
    time, its busy set ``ops`` (ascending) and the few ops that are no compute: compute
    covers everything else, so only the windows of copies and collectives need a look at
    the compute ops around them.  A device whose tracks are not serial (TPU ops nest:
    a while loop holds its body's ops) gets the full computation."""
    if busy <= 0:
        return
    nc_ev, nc_cls, nc_step, nc_dev = nc
    mine = nc_dev == d
    ev, cls, stp = nc_ev[mine], nc_cls[mine], nc_step[mine]
    n_steps = table.step_overlap.shape[0]
    slices = trace.track_slices(np.flatnonzero(trace.track_device == d))
    # windows are read off each track's sorted ends
    serial = not ev.size or all(_ends_sorted(trace, lo, hi) for lo, hi in slices)
    if not serial or (step_busy is None and n_steps):
        # a track whose ends are not sorted, or steps by time (no launched union per
        # step): every op of the device
        _full_overlap(trace, table, d, ops, ev, cls, op_step_all, bool(n_steps))
        return
    kinds = (K.KERNEL,) if kernels_only else DEVICE_ACTIVITY
    table.overlap[d] = _overlap_from(trace, slices, ev, cls, np.zeros(ev.shape[0], np.int64),
                                     1, np.array([busy]), None, kinds)[0]
    if step_busy is not None:
        key = np.where(stp >= 0, stp, n_steps).astype(np.int64)
        bz = np.concatenate([np.maximum(step_busy, 0), [0]])
        table.step_overlap[:, d] = _overlap_from(trace, slices, ev, cls, key, n_steps + 1, bz,
                                                 op_step_all, kinds)[:n_steps]


def _overlap_from(trace, slices, ev, cls, key, n_keys, busy, step_of, kinds):
    """One device's overlap rows per key from its busy time per key and its ops that
    are no compute (``ev``, ``cls``, their ``key``); the device's tracks are serial."""
    out = np.zeros((n_keys, len(Overlap)), np.int64)
    out[:, Overlap.BUSY] = busy
    out[:, Overlap.COMPUTE] = busy
    if not ev.size:
        return out
    s, e = trace.ts[ev], trace.end_of(ev)
    exposed = {}
    for name, mask in (("nc", np.ones(ev.shape[0], bool)),
                       ("copy", (cls == OpClass.MEMCPY) | (cls == OpClass.MEMSET)),
                       ("coll", cls == OpClass.COLLECTIVE)):
        if not mask.any():
            exposed[name] = (np.zeros(n_keys, np.int64), np.zeros(n_keys, np.int64))
            continue
        o = np.lexsort((s[mask], key[mask]))
        ks, ss, es = key[mask][o], s[mask][o], e[mask][o]
        # the class's union per key, as windows (keys apart by a shift)
        lo = int(ss.min())
        span = int(es.max()) - lo + 1
        sh = ks * span - lo
        reach = np.maximum.accumulate(es + sh)
        new = np.ones(ss.shape[0], bool)
        new[1:] = (ss[1:] + sh[1:]) > reach[:-1]
        first = np.flatnonzero(new)
        last = np.r_[first[1:], ss.shape[0]] - 1
        a, wk = ss[first], ks[first]
        b = reach[last] - sh[first]
        cov = _window_cover(trace, slices, ev, a, b, wk, step_of, kinds)
        total = np.bincount(wk, weights=b - a, minlength=n_keys).astype(np.int64)
        under = np.bincount(wk, weights=cov, minlength=n_keys).astype(np.int64)
        exposed[name] = (total, total - under)
    nc_exp = exposed["nc"][1]
    comp = busy - nc_exp
    (copy_all, copy_exp), (coll_all, coll_exp) = exposed["copy"], exposed["coll"]
    out[:, Overlap.COMPUTE] = comp
    out[:, Overlap.COPIES] = copy_all
    out[:, Overlap.COLLECTIVES] = coll_all
    out[:, Overlap.COPIES_UNDER_COMPUTE] = copy_all - copy_exp
    out[:, Overlap.COLLECTIVES_UNDER_COMPUTE] = coll_all - coll_exp
    out[:, Overlap.COPIES_EXPOSED] = copy_exp
    out[:, Overlap.COLLECTIVES_EXPOSED] = busy - comp - copy_exp
    return out


def _full_overlap(trace, table, d, ops, nc_ev, nc_cls, op_step_all, per_step):
    """Device ``d``'s overlap rows from every op of its busy set ``ops`` (ascending);
    ``nc_ev``/``nc_cls``: its ops that are no compute, with their class."""
    kl = np.zeros(ops.shape[0], np.int8)
    k = search(ops, nc_ev)
    hit = (k < ops.shape[0]) & (ops[np.minimum(k, ops.shape[0] - 1)] == nc_ev)
    kl[k[hit]] = nc_cls[hit]
    ts, end = trace.ts[ops], trace.end_of(ops)
    table.overlap[d] = overlap(ts, end, kl, np.zeros(ops.shape[0], np.int64), 1)[0]
    if per_step:
        n_steps = table.step_overlap.shape[0]
        st = op_step_all[ops]
        key = np.where(st >= 0, st, n_steps).astype(np.int64)
        table.step_overlap[:, d] = overlap(ts, end, kl, key, n_steps + 1)[:n_steps]
