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
