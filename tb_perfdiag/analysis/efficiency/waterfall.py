"""The MFU waterfall: a window's time at peak, in points that add up to 100.

For a window of ``W`` ps on one device, ``W × peak`` FLOPs could have been done.  The
points say where they went, in the order a reader peels them off:

- idle, by cause (the gaps' split, ``idle_by_cause``, and the gaps under the threshold:
  ``small_gaps``), scaled to the window's idle ``W − busy`` so that they are exactly it;
- ``peer_wait``: the part of the collectives not hidden under compute spent waiting for
  the last peer to arrive (known where the peers are devices of the same trace; where
  they are other files of a run, ``with_peer_wait`` splits the collectives' points again
  with the run's join);
- ``no_matmul_work``: busy time in ops that do no matmul work — elementwise kernels and
  fusions, copies, the collectives' transfer;
- ``matmul_below_peak``: the busy time of matmul-class ops less what their FLOPs would
  take at peak;
- ``mfu``: the model FLOPs done ÷ (W × peak).

The busy time is the busy union (overlapping streams counted once): compute's share of it
is split between matmul-class and other ops by their summed durations, copies and
collectives count where not under compute (``Overlap``).  FLOPs of ops that are no
matmul (an XLA fusion's adds) count in ``mfu``; the shortfall is then never negative and
the other busy and idle parts are scaled, together, to ``100 − mfu`` — when the figures
are consistent the scale is 1.
"""
from __future__ import annotations

import numpy as np

from .. import causes as C

SMALL, PEER, NO_MM, SHORT, MFU = "small_gaps", "peer_wait", "no_matmul_work", \
    "matmul_below_peak", "mfu"
PARTS = (*C.ALL, SMALL, PEER, NO_MM, SHORT, MFU)
N_CAUSES = len(C.ALL)


def points(window, busy, idle_by_cause, small, compute, copies_x, coll_x, mm_frac,
           wait_frac, flops, peak):
    """(points (n, len(PARTS)), mfu (n,)) of ``n`` windows: ``points_and_collectives``
    without the collectives' points."""
    pts, mfu, _ = points_and_collectives(window, busy, idle_by_cause, small, compute,
                                         copies_x, coll_x, mm_frac, wait_frac, flops, peak)
    return pts, mfu


def points_and_collectives(window, busy, idle_by_cause, small, compute, copies_x, coll_x,
                           mm_frac, wait_frac, flops, peak):
    """(points (n, len(PARTS)), mfu (n,), collectives (n,)) of ``n`` windows, vectorised;
    NaN rows where the window is empty, there is no peak or no FLOPs.  ``collectives``:
    the points the exposed collectives take, their peer wait and their transfer together
    (what ``with_peer_wait`` splits again).

    ``window``, ``busy``, ``small``: ps; ``idle_by_cause``: (n, n_causes) ps;
    ``compute``, ``copies_x``, ``coll_x``: the busy union's compute part and the copies'
    and collectives' exposed parts (any unit: they are proportions of ``busy``);
    ``mm_frac``: matmul-class ops' share of the compute time; ``wait_frac``: the exposed
    collectives' share spent waiting for peers; ``flops``: model FLOPs; ``peak``: FLOP/s."""
    f64 = lambda x: np.asarray(x, np.float64)  # noqa: E731
    W, B = f64(window), f64(busy)
    n = W.shape[0]
    ok = (W > 0) & np.isfinite(f64(peak)) & (f64(peak) > 0) & (f64(flops) > 0)
    Ws = np.where(ok, W, 1.0)
    B = np.clip(B, 0, Ws)
    idle = Ws - B
    raw = np.concatenate([f64(idle_by_cause).reshape(n, N_CAUSES), f64(small)[:, None]], axis=1)
    raw = np.clip(raw, 0, None)
    tot = raw.sum(axis=1)
    # the idle split scaled to the idle; with no split at all it counts as short gaps
    idle_parts = np.where(tot[:, None] > 0, raw * (idle / np.maximum(tot, 1))[:, None], 0.0)
    idle_parts[:, -1] += np.where(tot > 0, 0.0, idle)
    cu, cp, cx = (np.clip(f64(x), 0, None) for x in (compute, copies_x, coll_x))
    sb = cu + cp + cx
    none = sb <= 0                    # no split of the busy time: all of it compute
    scale = np.where(none, 0.0, B / np.where(none, 1, sb))
    cu = np.where(none, B, cu * scale)
    cp, cx = cp * scale, cx * scale
    mf = np.clip(np.nan_to_num(f64(mm_frac)), 0, 1)
    wf = np.clip(np.nan_to_num(f64(wait_frac)), 0, 1)
    peer = cx * wf
    no_mm = cx * (1 - wf) + cp + cu * (1 - mf)
    mm = cu * mf
    mfu = np.where(ok, f64(flops) / (Ws * 1e-12 * np.where(ok, f64(peak), 1.0)), np.nan)
    at_peak = np.nan_to_num(mfu) * Ws                 # ps the FLOPs take at peak
    short = np.clip(mm - at_peak, 0, None)
    others = np.concatenate([idle_parts, peer[:, None], no_mm[:, None], short[:, None]], axis=1)
    rest = np.clip(Ws - at_peak, 0, None)
    o_tot = others.sum(axis=1)
    others *= np.where(o_tot > 0, rest / np.maximum(o_tot, 1e-300), 0.0)[:, None]
    pts = np.concatenate([others, at_peak[:, None]], axis=1) * (100.0 / Ws)[:, None]
    pts[~ok] = np.nan
    # the collectives' exposed time, scaled as the rest: peer wait plus their transfer
    coll = cx * np.where(o_tot > 0, rest / np.maximum(o_tot, 1e-300), 0.0) * (100.0 / Ws)
    coll[~ok] = np.nan
    return pts, mfu, coll


_PEER, _NO_MM = PARTS.index(PEER), PARTS.index(NO_MM)


def with_peer_wait(rows, coll, wait_frac):
    """Waterfall ``rows`` (n, len(PARTS)) with their collectives' points ``coll`` (n,)
    split again at ``wait_frac`` (n,): ``peer_wait`` = coll × wait_frac, the rest of the
    collectives back in ``no_matmul_work``.  Rows whose ``wait_frac`` is NaN are kept.

    The same as ``points`` given that wait fraction: the two parts are scaled by one
    factor and their sum does not depend on it, so nothing else moves and the row still
    adds up to 100."""
    out = np.array(rows, np.float64, copy=True)
    c = np.asarray(coll, np.float64)
    wf = np.asarray(wait_frac, np.float64)
    ok = np.isfinite(wf) & np.isfinite(c) & np.isfinite(out).all(axis=1)
    peer = c * np.clip(np.nan_to_num(wf), 0, 1)
    both = out[:, _PEER] + out[:, _NO_MM]
    out[ok, _PEER] = peer[ok]
    # never below zero: the collectives are part of these two parts (round-off aside)
    out[ok, _NO_MM] = np.clip(both[ok] - peer[ok], 0, None)
    return out


def as_dict(row, keep_zero: bool = False, digits: int = 4) -> dict | None:
    """{part: points} of one waterfall row (None when absent), rounded to ``digits``; the
    idle causes with no time left out unless ``keep_zero``."""
    row = np.asarray(row, np.float64)
    if not row.size or not np.isfinite(row).all():
        return None
    fixed = set(PARTS[N_CAUSES:])
    return {p: round(float(v), digits) for p, v in zip(PARTS, row.tolist())
            if keep_zero or v > 0 or p in fixed}
