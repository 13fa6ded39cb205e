"""The efficiency table of a diagnosis: FLOPs, peak and MFU per device and per (step,
device), the MFU waterfall of each window and the roofline per op group (GUIDE §4).

MFU of a window = model FLOPs of the ops it launched ÷ (window × peak).  The windows
are the duty cycle's: a device's steps window (``DeviceTable.window``: its activity and
the step windows on it) and each step's window on it (``StepNumbers.win_start/end``),
with the FLOPs of the ops each step launched (``sums.CostSums.step_flops``).  The peak
is the device's dense peak for the dtype its matmul-class ops ran in (most of their
FLOPs), or the ``--peak-tflops`` override.
"""
from __future__ import annotations

import numpy as np

from .. import causes as C
from ..result import Bound, EfficiencyTable, OpClass, Overlap
from . import waterfall as W
from .roofline import roofline, utilisation
from .sums import CostSums, dtype_names

# the memory space of the bytes a roofline counts: HBM where the trace splits an op's
# bytes by memory space (TPU ops' memory_access_breakdown), all spaces where it does not
SPACE_HBM, SPACE_ALL = "hbm", "all"
# the share of op time (collectives left out) with no cost figure from which the MFU is
# said to be a lower bound ("≥ 1.3%"): below it the FLOPs left out cannot move the figure much
LOWER_BOUND_SHARE = 0.05
NO_FLOPS = ("its ops with a cost figure do no matmul work (elementwise, compiled "
            "kernels): they are costed in bytes, judged by bandwidth_utilisation")
NO_SHAPES = ("no op carries a cost figure: profile PyTorch with record_shapes=True "
             "(or with_flops=True)")


def peer_wait(coll, n_dev: int, n_steps: int):
    """(wait, duration) per device and per (step, device), ps: each collective instance
    that two or more devices of this trace share (same key and ordinal) waits, on each,
    min(its duration, the last arrival − its arrival).  Instances of one device alone
    wait for peers this trace does not hold: none counted."""
    z1, z2 = np.zeros(n_dev), np.zeros((n_steps, n_dev))
    if coll is None or not len(coll):
        return z1, z2.copy(), z1.copy(), z2.copy()
    dev = np.asarray(coll.device, np.int64)
    key = np.asarray(coll.key, np.int64) * (int(np.max(coll.ordinal, initial=0)) + 1) + \
        np.asarray(coll.ordinal, np.int64)
    u, inv = np.unique(key, return_inverse=True)
    inv = inv.reshape(-1)
    start, end = np.asarray(coll.start, np.int64), np.asarray(coll.end, np.int64)
    last = np.full(u.shape[0], np.iinfo(np.int64).min)
    np.maximum.at(last, inv, start)
    peers = np.zeros(u.shape[0], np.int64)
    # devices per instance (a device holds one op per key and ordinal)
    np.add.at(peers, inv, 1)
    dur = (end - start).astype(np.float64)
    wait = np.where(peers[inv] > 1, np.clip(np.minimum(dur, last[inv] - start), 0, None), 0.0)
    shared = peers[inv] > 1
    st = np.asarray(coll.step, np.int64)
    ins = (st >= 0) & (st < n_steps)
    sk = st[ins] * n_dev + dev[ins]
    bc = lambda k, n, w: np.bincount(k, weights=w, minlength=n)[:n]  # noqa: E731
    return (bc(dev, n_dev, wait), bc(sk, n_steps * n_dev, wait[ins]).reshape(n_steps, n_dev),
            bc(dev, n_dev, np.where(shared, dur, 0.0)),
            bc(sk, n_steps * n_dev, np.where(shared, dur, 0.0)[ins]).reshape(n_steps, n_dev))


def _frac(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.where(b > 0, a / np.where(b > 0, b, 1), 0.0)


def _peaks(trace, sums: CostSums, active, override_tflops):
    """Per device: (FLOP/s, bytes/s, dtype, source, model, why no peak); NaN unknown."""
    names = dtype_names()
    n = sums.n_dev
    pf, pb = np.full(n, np.nan), np.full(n, np.nan)
    dts, srcs, models, why, told = [""] * n, [""] * n, [""] * n, [""] * n, [""] * n
    fast, fast_dt, alts = np.full(n, np.nan), [""] * n, [()] * n
    try:
        from .peaks import device_peak
    except ImportError:
        device_peak = None
    for d in np.flatnonzero(active).tolist():
        # the dtype most of the matmul-class FLOPs ran in ("" none known)
        by = sums.dtype_flops[d] if sums.dtype_flops[d].any() else sums.dtype_all[d]
        dt = names[int(np.argmax(by))] if by.any() else ""
        dt = "" if dt == "unknown" else dt
        if not dt and trace.format == "kineto":
            dt = "fp32"          # no figure says: PyTorch's default dtype
        if device_peak is None:
            if override_tflops:
                pf[d], srcs[d], dts[d] = float(override_tflops) * 1e12, "option", dt
            continue
        p = device_peak(trace, d, dt, override_tflops=override_tflops)
        pf[d] = p.flops_per_s if p.flops_per_s else np.nan
        pb[d] = p.bytes_per_s if p.bytes_per_s else np.nan
        dts[d], srcs[d], models[d] = p.dtype or dt, p.source or "", p.device_model or ""
        why[d] = getattr(p, "missing", "") or ""
        told[d] = getattr(p, "identified_by", "") or ""
        # fp32 matmuls (on TF32 tensor cores too): what a lower precision would reach
        if dts[d] in ("fp32", "tf32") and sums.dtype_flops[d].any():
            # what the same matmuls could run at in a lower precision (TF32, bf16, fp16)
            for alt in ("tf32", "bf16", "fp16"):
                q = device_peak(trace, d, alt)
                if q.flops_per_s and q.dtype == alt and q.flops_per_s > np.nan_to_num(pf[d]):
                    alts[d] += (alt,)
                if q.flops_per_s and q.dtype == alt and not q.flops_per_s <= np.nan_to_num(fast[d]):
                    fast[d], fast_dt[d] = q.flops_per_s, alt
    return pf, pb, dts, srcs, (models, told), why, (fast, fast_dt, alts)


def _onchip_roofs(trace, active):
    """Per device: the on-chip roofs (n_dev, 4) bytes/s per ``ONCHIP_RW`` (NaN none) and
    which of them the share of the roofline counts (xprof: the CMEM ones where the
    device has CMEM, else the VMEM ones where it has a merged VMEM)."""
    n = active.shape[0]
    pk, counted = np.full((n, 4), np.nan), np.zeros((n, 4), bool)
    try:
        from .peaks import onchip_peaks
    except ImportError:
        return pk, counted
    for d in np.flatnonzero(active).tolist():
        p = onchip_peaks(trace, d)
        pk[d] = [np.nan if v is None else v for v in p.bytes_per_s]
        counted[d, :2] = p.has_cmem
        counted[d, 2:] = p.has_merged_vmem and not p.has_cmem
    return pk, counted


def _judged(r, u, flops, time_ps):
    """``roofline``'s figures with the bound, share and attainable rate of the resource
    that bounds each row among compute, HBM and the on-chip roofs (``utilisation``):
    (FLOP/s, bytes/s, intensity, attainable, efficiency, bound, utilisation, bound_by).
    With HBM alone the same as the ridge test (intensity below peak ÷ bandwidth is
    bytes/s ÷ bandwidth above FLOP/s ÷ peak)."""
    fps, bps, inten, _att, _eff, _bound = r
    util, bound_by, share = u
    bound = np.where(bound_by == 0, Bound.COMPUTE,
                     np.where(bound_by > 0, Bound.MEMORY, Bound.UNKNOWN)).astype(np.int8)
    known = bound_by >= 0
    eff = np.where(known, share, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        # the rate at the bounding roof: achieved ÷ share (xprof's optimal FLOP rate)
        rate = np.asarray(flops, np.float64) / (np.asarray(time_ps, np.float64) * 1e-12)
        att = np.where(known & (share > 0), rate / share, np.nan)
    return fps, bps, inten, att, eff, bound, util, bound_by


def _collective_gap(device_ops, sums: CostSums, n_dev: int) -> np.ndarray:
    """Per device, ps: the time of its collective op groups that has no cost figure."""
    out = np.zeros(n_dev)
    if device_ops is None or not len(device_ops) or sums.row_known_time.shape[0] != len(device_ops):
        return out
    c = np.asarray(device_ops.klass) == OpClass.COLLECTIVE
    gap = np.clip(np.asarray(device_ops.time, np.float64) - sums.row_known_time, 0, None)
    np.add.at(out, np.asarray(device_ops.device, np.int64)[c], gap[c])
    return out


def _largest_without(device_ops, sums: CostSums, d: int) -> str:
    """The op group of device ``d`` (no collective) with most time and no cost figure,
    with that time: what a reader looks at to know what the MFU leaves out."""
    if device_ops is None or not len(device_ops) or sums.row_known_time.shape[0] != len(device_ops):
        return ""
    gap = np.clip(np.asarray(device_ops.time, np.float64) - sums.row_known_time, 0, None)
    gap[(np.asarray(device_ops.device) != d) |
        (np.asarray(device_ops.klass) == OpClass.COLLECTIVE)] = 0
    r = int(np.argmax(gap)) if gap.size else 0
    if not gap.size or gap[r] <= 0:
        return ""
    from ...units import duration_ps
    return f"{device_ops.name[r][:80]} ({duration_ps(gap[r])})"


def _missing(sums, devices, device_ops, active, all_flops, coll_gap, pf, no_peak, models):
    """Per device: why a figure is absent (the share of op time with no cost figure, a
    peak unknown), and whether that share makes the MFU a lower bound."""
    n_dev = sums.n_dev
    missing = []
    lower = np.zeros(n_dev, bool)
    for d in range(n_dev):
        why = []
        # collectives (NCCL all-reduce, all-to-all) do no model FLOPs by definition: their
        # time is no figure the cost model lacks, so the share left out is of the rest
        base = sums.op_time[d] - coll_gap[d]
        if active[d] and not all_flops[d] > 0:
            # ops with figures that do no FLOPs (compiled elementwise kernels) are costed
            # in bytes: no MFU, their bandwidth says
            why.append(NO_FLOPS if sums.known_time[d] > 0 and sums.bytes[d] > 0
                       else sums.missing or NO_SHAPES)
        elif active[d] and sums.known_time[d] < base:
            gone = 1 - sums.known_time[d] / max(base, 1)
            lower[d] = gone >= LOWER_BOUND_SHARE
            if gone >= 0.005:
                top = _largest_without(device_ops, sums, d)
                why.append(f"{100 * gone:.1f}% of the op time"
                           + (" outside collectives" if coll_gap[d] > 0 else "")
                           + " has no cost figure: the MFU counts none of its FLOPs"
                           + (f" ({sums.missing})" if sums.missing else "")
                           + (f"; the largest: {top}" if top else ""))
        if active[d] and not np.isfinite(pf[d]):
            why.append(no_peak[d] or f"no peak known for {models[d] or devices.name[d]} "
                       f"(give the peak with --peak-tflops)")
        missing.append("; ".join(why))
    return missing, lower


def efficiency_table(trace, sums: CostSums | None, devices, steps, device_ops, coll,
                     peak_tflops: float | None = None) -> EfficiencyTable | None:
    """The diagnosis' ``EfficiencyTable`` (None without cost sums)."""
    if sums is None:
        return None
    n_dev, n_steps = sums.n_dev, sums.n_steps
    active = np.asarray(devices.ops, np.int64) > 0
    pf, pb, dts, srcs, (models, told), no_peak, (fast, fast_dt, alts) = \
        _peaks(trace, sums, active, peak_tflops)
    rd = np.asarray(device_ops.device, np.int64) if device_ops is not None else np.zeros(0, np.int64)
    fmt, pf, dts = _formats(trace, sums, active, pf, dts, rd, peak_tflops)
    all_flops = sums.flops + sums.flops_est
    coll_gap = _collective_gap(device_ops, sums, n_dev)
    missing, lower = _missing(sums, devices, device_ops, active, all_flops, coll_gap, pf,
                              no_peak, models)
    # ---- peer wait and the busy split, per device and per (step, device)
    w_d, w_sd, cd_d, cd_sd = peer_wait(coll, n_dev, n_steps)
    ov = device_ops.overlap if device_ops is not None else np.zeros((n_dev, len(Overlap)))
    sov = device_ops.step_overlap if device_ops is not None else \
        np.zeros((n_steps, n_dev, len(Overlap)))
    win = np.array([(lambda ab: ab[1] - ab[0])(devices.window(d)) if active[d] else 0
                    for d in range(n_dev)], np.float64)
    wf, mfu, cpts = W.points_and_collectives(win, devices.busy, devices.idle_by_cause, devices.small_total,
                       ov[:, Overlap.COMPUTE], ov[:, Overlap.COPIES_EXPOSED],
                       ov[:, Overlap.COLLECTIVES_EXPOSED], _frac(sums.mm_time, sums.comp_time),
                       _frac(w_d, cd_d), all_flops, pf)
    S = steps
    sw = np.clip(S.win_end - S.win_start, 0, None).reshape(-1).astype(np.float64)
    sf = sums.step_flops.reshape(-1)
    swf, smfu, scpts = W.points_and_collectives(sw, S.busy.reshape(-1), S.idle_by_cause.reshape(-1, len(C.ALL)),
                         S.small_total.reshape(-1),
                         sov[:, :, Overlap.COMPUTE].reshape(-1),
                         sov[:, :, Overlap.COPIES_EXPOSED].reshape(-1),
                         sov[:, :, Overlap.COLLECTIVES_EXPOSED].reshape(-1),
                         _frac(sums.step_mm_time, sums.step_comp_time).reshape(-1),
                         _frac(w_sd, cd_sd).reshape(-1), sf, np.tile(pf, n_steps))
    step_flops = np.where(sums.step_known > 0, sums.step_flops, np.nan)
    # ---- roofline per row and per device
    rt = np.asarray(device_ops.time, np.float64) if device_ops is not None else np.zeros(0)
    # a group's rates over the time of its ops that have a figure: the kernels of a group
    # with no figure (a GEMM inside a compiled graph, no shapes) did FLOPs the sums lack,
    # and dividing the others' FLOPs by their time too made a 47 %-of-peak GEMM read 4 %
    if sums.row_known_time.shape[0] == rt.shape[0]:
        rt = np.minimum(rt, sums.row_known_time)
    op_pk, counted = _onchip_roofs(trace, active)
    # bytes against the HBM bandwidth: those in HBM where the trace splits them by
    # memory space (as xprof's roofline does), all of them where it does not; the
    # on-chip ones against their own roofs (none known where there is no split)
    # each group against the peak of the format its matmuls ran in (FP8 GEMMs beside bf16
    # attention), the device's where it has none
    row_pf = np.where(np.isfinite(fmt.row_peak), fmt.row_peak, pf[rd]) if fmt else pf[rd]
    r = _judged(roofline(sums.row_hw, sums.row_hbm_bytes, rt, row_pf, pb[rd]),
                utilisation(sums.row_hw, sums.row_hbm_bytes,
                            np.where(sums.row_split[:, None] > 0, sums.row_onchip_rw, np.nan),
                            rt, row_pf, pb[rd], op_pk[rd], counted[rd]), sums.row_hw, rt)
    # the device's ops together over its window, idle included: xprof's program level
    dev_rw = np.where(sums.split[:, None] > 0, sums.onchip_rw, np.nan)
    dv = _judged(roofline(sums.hw_flops, sums.hbm_bytes, win, pf, pb),
                 utilisation(sums.hw_flops, sums.hbm_bytes, dev_rw, win, pf, pb, op_pk, counted),
                 sums.hw_flops, win)
    split = sums.split > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        ridge = pf / pb
    nan = lambda n: np.full(n, np.nan)  # noqa: E731
    return _with_graphs(trace, EfficiencyTable(
        parts=list(W.PARTS), flops=np.where(active, sums.flops, np.nan),
        flops_estimated=np.where(active, sums.flops_est, np.nan),
        hw_flops=np.where(active, sums.hw_flops, np.nan),
        bytes=np.where(active, sums.bytes, np.nan),
        hbm_bytes=np.where(active & split, sums.hbm_bytes, np.nan),
        onchip_bytes=np.where(active & split, sums.onchip_bytes, np.nan),
        bytes_space=[SPACE_HBM if sums.listed[d] > 0 else SPACE_ALL for d in range(n_dev)],
        op_time=sums.op_time.astype(np.int64), known_time=sums.known_time.astype(np.int64),
        flops_source=[sums.source if active[d] and all_flops[d] > 0 else "" for d in range(n_dev)],
        missing=missing, peak_flops=pf, peak_bytes=pb, peak_dtype=dts, peak_source=srcs,
        device_model=models, mfu=mfu, waterfall=wf, step_flops=step_flops,
        step_mfu=smfu.reshape(n_steps, n_dev),
        step_waterfall=swf.reshape(n_steps, n_dev, len(W.PARTS)).astype(np.float32),
        row_flops=sums.row_flops, row_hw_flops=sums.row_hw, row_bytes=sums.row_bytes,
        row_hbm_bytes=np.where(sums.row_split > 0, sums.row_hbm_bytes, np.nan),
        row_bytes_space=np.where(sums.row_split > 0, 1, 0).astype(np.int8),
        row_matmul=sums.row_mm_flops > 0.5 * sums.row_flops,
        row_flops_per_s=r[0], row_bytes_per_s=r[1], row_intensity=r[2],
        row_attainable=r[3], row_efficiency=r[4], row_bound=r[5],
        intensity=dv[2] if n_dev else nan(0), attainable=dv[3], roofline_efficiency=dv[4],
        bound=dv[5], ridge=ridge, row_fp32_time=sums.row_fp32_mm_time,
        fast_peak=fast, fast_dtype=fast_dt, fast_dtypes=alts, coll_points=cpts,
        step_coll_points=scpts.reshape(n_steps, n_dev).astype(np.float32),
        onchip_peak=op_pk, onchip_counted=counted, onchip_rw=dev_rw,
        utilisation=dv[6], bound_by=dv[7],
        row_onchip_rw=np.where(sums.row_split[:, None] > 0, sums.row_onchip_rw, np.nan),
        row_utilisation=r[6], row_bound_by=r[7],
        mfu_lower_bound=lower & np.isfinite(mfu), device_identified_by=told,
        **_format_fields(fmt, win), **_bandwidth(sums, win, pf, pb, rd, active)))


def _formats(trace, sums, active, pf, dts, rd, peak_tflops):
    """(``formats.split`` of the devices, their peaks, their dtypes): where formats of
    different peaks mix, each part against its own — the MFU and the device's roofline
    use the one peak that gives the same figure, the dtype reads "bf16+fp8".  No split
    where the sums carry none (tests' hand-made sums)."""
    if getattr(sums, "row_dtype_mm", None) is None or sums.row_dtype_mm.shape[0] != rd.shape[0]:
        return None, pf, dts
    from .formats import split
    fmt = split(trace, sums, active, pf, dts, rd, peak_tflops)
    pf = np.where(np.isfinite(fmt.effective_peak), fmt.effective_peak, pf)
    return fmt, pf, [fmt.label[d] or dts[d] for d in range(len(dts))]


def _bandwidth(sums, win, pf, pb, rd, active) -> dict:
    """Bandwidth utilisation per device (the roofline's bytes over its window at peak
    bandwidth) and whether its matmul-class groups together are memory-bound: their
    hardware FLOPs per byte below the ridge point (a decode step's GEMVs)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        util = np.where(active, sums.hbm_bytes / (win * 1e-12 * pb), np.nan)
        mm = sums.row_mm_flops > 0.5 * sums.row_flops
        n = active.shape[0]
        fl = np.bincount(rd[mm], weights=sums.row_hw[mm], minlength=n)[:n] if rd.size else \
            np.zeros(n)
        by = np.bincount(rd[mm], weights=sums.row_hbm_bytes[mm], minlength=n)[:n] if rd.size \
            else np.zeros(n)
        bound = (fl > 0) & (by > 0) & (fl / by < pf / pb)
    return dict(bandwidth_utilisation=np.where(np.isfinite(util), util, np.nan),
                matmul_memory_bound=bound & active)


def _format_fields(fmt, win) -> dict:
    """The EfficiencyTable's per-format columns: FLOPs, matmul time, the peak each runs
    at and its MFU part (FLOPs ÷ (window × that peak)) per (device, format)."""
    if fmt is None:
        return {}
    with np.errstate(divide="ignore", invalid="ignore"):
        part = fmt.flops / (win[:, None] * 1e-12 * fmt.peak)
    return dict(format_names=list(fmt.names), format_flops=fmt.flops, format_time=fmt.time,
                format_peak=fmt.peak, format_peak_dtype=fmt.peak_dtype,
                format_mfu=np.where(np.isfinite(part), part, np.nan))


def stage(trace, sums, diag, peak_tflops=None) -> EfficiencyTable | None:
    """``efficiency_table`` of what a diagnosis holds (its one call in the analysis)."""
    return efficiency_table(trace, sums, diag.devices, diag.steps, diag.device_ops,
                            diag.collectives, peak_tflops)


def _with_graphs(trace, table: EfficiencyTable) -> EfficiencyTable:
    """``table`` with its devices' graph replays (``graphs.summary``); a replay that did
    not record all its capture's launches makes the MFU a lower bound."""
    if trace.format != "kineto":
        return table
    from .graphs import summary
    g = table.graphs = summary(trace, len(table.flops))
    if g is not None and table.mfu_lower_bound.shape[0] == g.unrecorded.shape[0]:
        # device work a replay did not record did FLOPs the MFU cannot count
        table.mfu_lower_bound = table.mfu_lower_bound | ((g.unrecorded > 0) &
                                                         np.isfinite(table.mfu))
    return table


__all__ = ["efficiency_table", "peer_wait", "stage", "Bound"]
