"""MFU where matmul formats mix (GUIDE §4 "Formats"): each format's matmul-class FLOPs
against the peak of that format on the device, so FP8 GEMMs beside bf16 attention are
not all judged against one of the two peaks.

The device's MFU is then Σ_f FLOPs_f ÷ peak_f over the window: the time the work would
take at each format's peak, over the window.  Its peak, for the waterfall and the
roofline of the device, is the one rate that gives the same figure: total FLOPs ÷
Σ_f FLOPs_f ÷ peak_f.  FLOPs in no matmul format (non-matmul ops, unknown formats) count
against the device's headline peak.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .sums import CostSums, dtype_names

# a format holding less than this share of a device's matmul FLOPs does not make it mixed
MIXED_SHARE = 0.01
# the formats whose presence makes a mix: the 8-bit and narrower ones.  fp32 beside TF32
# (cuDNN picking per kernel) or bf16 beside fp32 keep the one headline peak of the dtype
# with most FLOPs, the figure the fp32 advice and earlier diagnoses are read against
LOW_PRECISION = frozenset(("fp8", "int8", "mxfp8", "mxfp6", "mxfp4", "nvfp4"))


@dataclass
class FormatSplit:
    names: tuple                # the format names (``sums.dtype_names()``)
    flops: np.ndarray           # (n_dev, n_formats) matmul-class FLOPs
    time: np.ndarray            # (n_dev, n_formats) ps of matmul-class ops
    peak: np.ndarray            # (n_dev, n_formats) FLOP/s the format runs at, NaN unknown
    peak_dtype: list            # per device, per format: the format it runs at ("bf16"
                                # for MXFP4 on a part with no MXFP4 units)
    effective_peak: np.ndarray  # (n_dev,) the one peak giving the mixed MFU, NaN: unmixed
    label: list                 # per device: "fp8+bf16" where mixed, "" otherwise
    row_peak: np.ndarray        # per device-op-table row: its own format's peak, NaN none


def split(trace, sums: CostSums, active, pf, dts, row_dev, override_tflops=None) -> FormatSplit:
    """The per-format figures of each active device, its effective peak where formats of
    different peaks, one of them LOW_PRECISION, each hold ≥ MIXED_SHARE of its matmul
    FLOPs, and each op-table row's peak on such a device (its main format's).  ``pf``/``dts``: the devices' headline peaks and dtypes."""
    names = dtype_names()
    n, k = sums.n_dev, len(names)
    rdm, rdt = sums.row_dtype_mm, sums.row_dtype_time
    flops, time = np.zeros((n, k)), np.zeros((n, k))
    if rdm.shape[0]:
        np.add.at(flops, row_dev, rdm)
        np.add.at(time, row_dev, rdt)
    peak = np.full((n, k), np.nan)
    pdt = [[""] * k for _ in range(n)]
    eff, label = np.full(n, np.nan), [""] * n
    try:
        from .peaks import device_peak
    except ImportError:
        device_peak = None
    for d in np.flatnonzero(active).tolist():
        for j in np.flatnonzero(flops[d] > 0).tolist():
            if override_tflops is not None or device_peak is None or not names[j] or \
                    names[j] == "unknown":
                peak[d, j], pdt[d][j] = pf[d], dts[d]
                continue
            p = device_peak(trace, d, names[j])
            peak[d, j] = p.flops_per_s if p.flops_per_s else np.nan
            pdt[d][j] = p.dtype
        eff[d], label[d] = _effective(flops[d], time[d], peak[d], names, sums, d, pf[d])
    row_peak = np.full(rdm.shape[0], np.nan)
    if rdm.shape[0]:
        # a group on a mixed device against its own format's peak; elsewhere the device's
        main = np.argmax(rdm, axis=1)
        has = (rdm[np.arange(rdm.shape[0]), main] > 0) & np.isfinite(eff[row_dev])
        row_peak = np.where(has, peak[row_dev, main], np.nan)
    return FormatSplit(names, flops, time, peak, pdt, eff, label, row_peak)


def _effective(flops, time, peak, names, sums: CostSums, d: int, headline: float):
    """(effective peak, label: the formats by matmul time, most first) of one device:
    NaN and "" unless formats of different known peaks mix."""
    tot = flops.sum()
    if not tot > 0 or not np.isfinite(headline):
        return np.nan, ""
    big = np.flatnonzero(flops >= MIXED_SHARE * tot)
    known = [j for j in big if np.isfinite(peak[j])]
    if len(known) < 2 or len({float(peak[j]) for j in known}) < 2 or len(known) < len(big) \
            or not any(names[j] in LOW_PRECISION for j in known):
        return np.nan, ""
    # all FLOPs (non-matmul and small formats too): each at its format's peak, the rest
    # at the headline's
    all_fl = float(sums.flops[d] + sums.flops_est[d])
    at = np.where(np.isfinite(peak), peak, headline)
    secs = float((flops / at).sum()) + max(all_fl - tot, 0.0) / headline
    order = sorted(known, key=lambda j: (-time[j], -flops[j]))
    return (all_fl / secs if secs > 0 else np.nan), "+".join(names[j] for j in order)
