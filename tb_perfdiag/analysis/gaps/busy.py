"""Device idle gaps: the busy set of a device, the gaps in it, and the threads whose
work the gaps are judged by.  Their causes are split in ``shares.py``."""
from __future__ import annotations

import numpy as np

from ...trace.model import EventKind as K, Trace, isin_few, track_counts


def device_busy(trace: Trace, device: int, kernels_only: bool, threshold_ps: int):
    """(the device's ops, its busy set's starts and ends, its gaps of at least the
    threshold as ``find_gaps`` gives them, or None where they are still to be found)."""
    from ..intervals import union_of_runs
    # each track's ops come sorted by start: the runs are the tracks' shares of ``ev``
    ev = trace.activity_of(device, kernels_only=kernels_only)
    starts = [lo for lo, _ in trace.track_slices(np.flatnonzero(trace.track_device == device))]
    bounds = np.searchsorted(ev, starts + [trace.n_events])
    return (ev, *union_of_runs(trace.ts, trace.dur, ev, bounds, threshold_ps))


def find_gaps(trace: Trace, device: int, ops: np.ndarray, us: np.ndarray, ue: np.ndarray,
              threshold_ps: int):
    """The idle intervals ≥ threshold between the device's first and last activity:
    (starts, ends, prev_op, next_op).  The shorter ones are the busy set's other holes,
    counted per window by ``short_gaps`` without a copy of them."""
    if us.size < 2:
        z = np.zeros(0, np.int64)
        return z, z, z, z
    gs, ge = ue[:-1], us[1:]
    big = (ge - gs) >= threshold_ps
    # the op that ends each gap: the earliest-starting op at ge; the op before: the op
    # whose end is the gap start.  One sort order and its sorted times at a time (20 M
    # ops: 160 MB each, the peak of a large trace's analysis)
    n = ops.shape[0]
    t = trace.ts[ops]
    order = np.argsort(t, kind="stable")
    t = t[order]
    nxt = ops[order[np.minimum(np.searchsorted(t, ge[big], side="left"), n - 1)]]
    del t, order
    t = trace.end_of(ops)
    order = np.argsort(t, kind="stable")
    t = t[order]
    prev = ops[order[np.maximum(np.searchsorted(t, gs[big], side="right") - 1, 0)]]
    del t, order
    return gs[big], ge[big], prev, nxt


def short_gaps(us: np.ndarray, ue: np.ndarray, threshold_ps: int, wb: np.ndarray,
               we: np.ndarray):
    """Per window [wb, we) (sorted starts): how many idle intervals under the threshold
    start in it and their time; then the same over the whole device.  Read off the busy
    set (its hole i is [ue[i], us[i + 1])): a device of 20 M ops has as many holes, and
    holding them cost 0.45 GB through the rest of the analysis."""
    n = max(us.shape[0] - 1, 0)
    if n == 0:
        z = np.zeros(wb.shape[0], np.int64)
        return z, z, 0, 0
    starts = ue[:-1]
    lo = np.searchsorted(starts, wb, side="left")
    hi = np.maximum(np.searchsorted(starts, we, side="left"), lo)
    cnt, tim = _short_before(us, ue, threshold_ps, np.concatenate((lo, hi, [n])))
    k = lo.shape[0]
    return cnt[k:2 * k] - cnt[:k], tim[k:2 * k] - tim[:k], int(cnt[-1]), int(tim[-1])


def _short_before(us: np.ndarray, ue: np.ndarray, threshold_ps: int, at: np.ndarray,
                  block: int = 1 << 20) -> tuple:
    """(count, time) of the holes under the threshold before each hole index in ``at``
    (0..n), a block of holes at a time: running columns over all 20 M holes of a large
    device (and their masks) were 0.25 GB at the analysis' peak."""
    n = us.shape[0] - 1
    order = np.argsort(at, kind="stable")
    where = at[order]
    cnt = np.zeros(at.shape[0], np.int64)
    tim = np.zeros(at.shape[0], np.int64)
    base_n = base_t = 0
    q = int(np.searchsorted(where, 0, side="right"))      # those at 0 have none before
    for a in range(0, n, block):
        b = min(a + block, n)
        length = us[a + 1:b + 1] - ue[a:b]
        length[length >= threshold_ps] = 0               # the holes are never empty
        run_t = np.cumsum(length)
        run_n = np.cumsum(length > 0)
        r = int(np.searchsorted(where, b, side="right"))
        p = where[q:r] - a - 1                          # the last hole before each, here
        cnt[order[q:r]] = base_n + run_n[p]
        tim[order[q:r]] = base_t + run_t[p]
        base_n += int(run_n[-1])
        base_t += int(run_t[-1])
        q = r
    return cnt, tim


def user_threads(trace: Trace, step_thread: int = -1) -> list:
    """The host threads the user's code runs on, main first: the thread of the step
    annotations, else the one with most user annotations, else the one with most
    Python frames."""
    host = trace.track_kind[trace.track] == 0
    out = [step_thread] if step_thread >= 0 else []
    for kinds in ((K.STEP,), (K.ANNOTATION, K.DATA), (K.PYTHON,)):
        sel = np.flatnonzero(host & isin_few(trace.kind, kinds))
        if sel.size:
            tr, cnt = track_counts(trace.track[sel])
            for t in tr[np.argsort(-cnt, kind="stable")].tolist():
                if t not in out:
                    out.append(int(t))
    return out
