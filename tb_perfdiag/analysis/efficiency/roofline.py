"""The roofline of op groups (GUIDE §4): intensity = FLOPs ÷ bytes, attainable =
min(peak, intensity × bandwidth), compute-bound at or above the ridge point (peak ÷
bandwidth), memory-bound below; efficiency = achieved ÷ attainable — as the Profile
plugin's ``get_roofline_model`` reports it for XSpace.  Achieved rates are over the
time given: an op group's summed op time (xprof's per-op self time), a device's window
idle included (xprof's program level: its total time counts the idle).  Hardware FLOPs are plotted:
the roofline is about what the chip did, recomputation included."""
from __future__ import annotations

import numpy as np

from ..result import Bound


def roofline(flops, bytes_, time_ps, peak, bandwidth):
    """(achieved FLOP/s, bytes/s, intensity, attainable, efficiency, bound) per row,
    vectorised; ``peak``/``bandwidth`` per row (NaN unknown).  NaN where a figure is
    absent; bound ``Bound.UNKNOWN`` without FLOPs, bytes or both roofs."""
    f = np.asarray(flops, np.float64)
    b = np.asarray(bytes_, np.float64)
    t = np.asarray(time_ps, np.float64) * 1e-12
    pk = np.asarray(peak, np.float64) * np.ones_like(f)
    bw = np.asarray(bandwidth, np.float64) * np.ones_like(f)
    with np.errstate(divide="ignore", invalid="ignore"):
        fps = np.where((t > 0) & (f > 0), f / t, np.nan)
        bps = np.where((t > 0) & (b > 0), b / t, np.nan)
        # an op counted by bytes alone (elementwise, copies) has intensity 0
        inten = np.where(b > 0, f / b, np.nan)
        att = np.where(np.isfinite(inten) & (pk > 0) & (bw > 0), np.minimum(pk, inten * bw),
                       np.nan)
        ridge = pk / bw
    bound = np.full(f.shape[0], Bound.UNKNOWN, np.int8)
    known = np.isfinite(inten) & np.isfinite(ridge) & (t > 0)
    bound[known & (inten >= ridge)] = Bound.COMPUTE
    bound[known & (inten < ridge)] = Bound.MEMORY
    with np.errstate(divide="ignore", invalid="ignore"):
        # achieved ÷ attainable: below the ridge that is the bandwidth's share used
        # (so an op with no FLOPs has one too), above it the peak's
        eff = np.where(bound == Bound.MEMORY, bps / bw,
                       np.where(bound == Bound.COMPUTE, fps / pk, np.nan))
    eff = np.where(np.isfinite(eff), eff, np.where(bound >= 0, 0.0, np.nan))
    return fps, bps, inten, att, eff, bound


# the resources xprof's roofline judges an op against, in its order (the first of equal
# utilisations wins: compute wins ties): ``EfficiencyTable.row_bound_by`` indexes this
RESOURCES = ("compute", "hbm", "cmem_read", "cmem_write", "vmem_read", "vmem_write")
UNKNOWN_RESOURCE = -1


def above_roof(u) -> np.ndarray:
    """Per row of utilisations (n, 6): a rate above its roof, which no op reaches: its
    own time does not hold its work (an async copy-start/copy-done moves its bytes
    between the two ops, so 536 GB over a 181 ns copy-start read 181,061,633 % of HBM),
    or the peak is too low.  Such a row has no share and no bound: a share is ≤ 100 %."""
    u = np.asarray(u, np.float64)
    if not u.size:
        return np.zeros(u.shape[0] if u.ndim else 0, bool)
    return (np.nan_to_num(u, nan=0.0) > 1.0).any(axis=-1)


def utilisation(flops, hbm_bytes, onchip_rw, time_ps, peak, bandwidth, onchip_peak,
                counted):
    """(utilisation (n, 6) per ``RESOURCES``, bound_by int8 (n,), share (n,)) per row, as
    xprof's ``SetRooflineMetrics`` and its roofline record judge an op: each resource's
    rate over its peak — FLOP/s over the compute peak, HBM bytes/s over the HBM
    bandwidth, and the on-chip bytes of each (space, direction) over that roof
    (``onchip_rw`` (n, 4) per ``opcosts.ONCHIP_RW``, NaN where the trace has no split;
    ``onchip_peak`` (n, 4) bytes/s, NaN none).  Bound by the largest (an on-chip roof
    only where the op moves bytes there); ``UNKNOWN_RESOURCE`` where none is above 0
    or either main roof is unknown, and where a rate is ``above_roof``.  The share of the roofline is the largest of the
    utilisations ``counted`` (n, 4) lets in beside compute and HBM: xprof counts the
    CMEM roofs where the device has CMEM, the VMEM roofs where it has a merged VMEM
    and no CMEM — so its share may leave out the roof its bound_by names."""
    f = np.asarray(flops, np.float64)
    n = f.shape[0]
    b = np.asarray(hbm_bytes, np.float64)
    t = np.asarray(time_ps, np.float64) * 1e-12
    pk = np.asarray(peak, np.float64) * np.ones(n)
    bw = np.asarray(bandwidth, np.float64) * np.ones(n)
    rw = np.asarray(onchip_rw, np.float64).reshape(n, -1)
    rp = np.asarray(onchip_peak, np.float64).reshape(n, -1)
    ok = (t > 0) & (pk > 0) & (bw > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.stack([f, b], axis=1) / np.where(ok, t, np.nan)[:, None]
        u = np.empty((n, len(RESOURCES)))
        u[:, 0] = rate[:, 0] / pk
        u[:, 1] = rate[:, 1] / bw
        u[:, 2:] = np.where(rp > 0, rw / np.where(ok, t, np.nan)[:, None] / rp, np.nan)
    u = np.where(ok[:, None], u, np.nan)
    ok = ok & ~above_roof(u)
    # an on-chip roof bounds an op only where it moves bytes there (xprof: "if bytes")
    judged = np.where(np.isfinite(u) & np.concatenate(
        [np.ones((n, 2), bool), np.nan_to_num(rw) > 0], axis=1), u, 0.0)
    top = np.argmax(judged, axis=1) if n else np.zeros(0, np.intp)
    bound_by = np.where(ok & (judged[np.arange(n), top] > 0), top,
                        UNKNOWN_RESOURCE).astype(np.int8)
    share_of = np.where(np.concatenate([np.ones((n, 2), bool), np.asarray(counted, bool)
                                        .reshape(n, -1)], axis=1), np.nan_to_num(u), 0.0)
    share = np.where(ok, share_of.max(axis=1, initial=0.0), np.nan)
    return u, bound_by, share
