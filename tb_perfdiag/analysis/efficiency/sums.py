"""Per-op cost figures folded, once, into the small sums the efficiency table reads.

Runs where the analysis still holds its device ops and the step that launched each
(the ``costs`` stage of ``diagnosis.STAGES``, right after the device-op table): the per-op columns of
``op_costs`` are bincounted into per device, per (launching step, device) and per
device-op-table row sums and dropped; nothing per op is kept.  A step's FLOPs are those
of the ops it *launched*, wherever they ran (the duty cycle's rule), not of the ops that
overlap its window in time.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..result import DeviceOpTable, OpClass
from .opcosts import ONCHIP_RW, distinct_rows

# the dtype names of ``costs.DTYPES`` where that module is not there yet (tests of the
# arithmetic build their own cost columns)
_DTYPES = ("unknown", "fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4",
           "mxfp8", "mxfp6", "mxfp4", "nvfp4")


def dtype_names() -> tuple:
    try:
        from .costs import DTYPES
        return tuple(DTYPES)
    except ImportError:
        return _DTYPES


@dataclass
class CostSums:
    """Sums over the ops (float64: FLOPs pass 2**53; times are for fractions)."""

    n_dev: int
    n_steps: int
    flops: np.ndarray           # (n_dev,) model FLOPs, cost-model figures
    flops_est: np.ndarray       # (n_dev,) estimated ones
    hw_flops: np.ndarray        # (n_dev,)
    bytes: np.ndarray           # (n_dev,) all memory spaces
    hbm_bytes: np.ndarray       # (n_dev,) the HBM bytes the ops' breakdowns list, all
                                # bytes where no op lists any (xprof's program level)
    onchip_bytes: np.ndarray    # (n_dev,) on chip (CMEM, VMEM) where split
    split: np.ndarray           # (n_dev,) ops whose bytes are split by memory space
    listed: np.ndarray          # (n_dev,) of those, ops whose breakdown lists an access
    onchip_rw: np.ndarray       # (n_dev, 4) on-chip bytes per ``ONCHIP_RW`` where split
    op_time: np.ndarray         # (n_dev,) ps summed durations
    known_time: np.ndarray      # (n_dev,) ps of ops with a figure
    mm_time: np.ndarray         # (n_dev,) ps of matmul-class compute ops
    comp_time: np.ndarray       # (n_dev,) ps of compute ops
    dtype_flops: np.ndarray     # (n_dev, n_dtypes) matmul-class FLOPs per dtype
    dtype_all: np.ndarray       # (n_dev, n_dtypes) all FLOPs per dtype
    step_flops: np.ndarray      # (n_steps, n_dev) model FLOPs launched (estimated included)
    step_known: np.ndarray      # (n_steps, n_dev) ops with a figure launched (count)
    step_mm_time: np.ndarray    # (n_steps, n_dev) ps
    step_comp_time: np.ndarray  # (n_steps, n_dev) ps
    row_flops: np.ndarray       # per device-op-table row: model FLOPs (estimated included)
    row_hw: np.ndarray
    row_bytes: np.ndarray
    row_hbm_bytes: np.ndarray   # per row, each op's HBM bytes as xprof's per-op roofline
                                # counts them: those listed, all where it lists none
    row_split: np.ndarray
    row_onchip_rw: np.ndarray   # (n_rows, 4) as ``onchip_rw``
    row_mm_flops: np.ndarray    # FLOPs of its matmul-class ops
    row_known_time: np.ndarray  # ps
    row_fp32_mm_time: np.ndarray  # ps of its fp32 matmul-class ops (on TF32 cores too)
    row_dtype_mm: np.ndarray    # (n_rows, n_dtypes) matmul-class FLOPs per format
    row_dtype_time: np.ndarray  # (n_rows, n_dtypes) ps of matmul-class ops per format
    source: str
    missing: str


def _bc(key, n, w=None) -> np.ndarray:
    return np.bincount(key, weights=w, minlength=n)[:n].astype(np.float64, copy=False) \
        if key.size else np.zeros(n, np.float64)


BLOCK = 1 << 20              # ops folded at a time: the temporaries stay a few tens of MB


_FIGURES = ("flops", "hw_flops", "bytes", "estimated", "matmul", "dtype", "known")
# optional: None where a cost table has none
_SPLIT = ("hbm_bytes", "onchip_bytes") + tuple(f"{k}_bytes" for k in ONCHIP_RW)


def fold(costs, op_dev: np.ndarray, op_step: np.ndarray, op_row: np.ndarray, dur: np.ndarray,
         table: DeviceOpTable, n_dev: int, n_steps: int) -> CostSums:
    """``costs``: an ``OpCosts`` of the ops (one row each, in order), or a function
    giving that of ops ``a`` to ``b`` (made a block at a time); ``op_dev``, ``op_step``
    (−1 none), ``op_row`` (their device-op-table row) and ``dur`` (ps) of the same ops.
    Folded a block of ops at a time (a float column per op at 40 M events is 320 MB);
    costs held per distinct op (``OpCosts.code``) are folded per distinct (row, op)."""
    n = int(np.asarray(op_row).shape[0])
    whole = None if callable(costs) else costs
    got, source, missing = None, "", ""
    for a in range(0, max(n, 1), BLOCK):
        b = min(a + BLOCK, n)
        part_costs = costs(a, b) if whole is None else whole
        code = getattr(part_costs, "code", None)
        lo, hi = (0, b - a) if whole is None else (a, b)
        if code is not None:
            figs = {c: np.asarray(part_costs.held(c)) for c in _FIGURES}
            figs.update({c: _optional(part_costs, c, held=True) for c in _SPLIT})
            code = code[lo:hi]
        else:
            figs = {c: np.asarray(getattr(part_costs, c))[lo:hi] for c in _FIGURES}
            # as held (per event here): a source with no split holds None, and no NaN
            # column per event is made for it
            split = {c: _optional(part_costs, c, held=True) for c in _SPLIT}
            figs.update({c: None if v is None else v[lo:hi] for c, v in split.items()})
        source = source or str(getattr(part_costs, "source", "") or "")
        missing = missing or str(getattr(part_costs, "missing", "") or "")
        part = _fold_block(figs, code, op_dev[a:b], op_step[a:b], op_row[a:b], dur[a:b],
                           table, n_dev, n_steps)
        del part_costs, figs
        got = part if got is None else {k: got[k] + v for k, v in part.items()}
    # a device's HBM bytes: those its ops' breakdowns list, all its bytes where none lists
    # any (xprof combines the ops' breakdowns, and reads a program with none as all HBM)
    hbm_listed = got.pop("hbm_listed")
    got["hbm_bytes"] = np.where(got["listed"] > 0, hbm_listed, got["bytes"])
    return CostSums(n_dev, n_steps, **got, source=source, missing=missing)


# ops on each side of a block whose costs are found with it: an XLA op run as several
# kernels back to back (``hlo_costs._run_sizes``) is then seen whole at a block's edge
RUN_PAD = 64


def _optional(costs, name: str, held: bool = False) -> np.ndarray | None:
    """An optional figure of ``costs`` (None where it has none: a source with no
    memory-space split, or the arithmetic tests' own columns)."""
    try:
        v = costs.held(name) if held and hasattr(costs, "held") else getattr(costs, name, None)
    except (AttributeError, KeyError):
        v = None
    return None if v is None else np.asarray(v)


def _pairs(row: np.ndarray, code: np.ndarray, n_codes: int):
    """(each op's pair, each pair's row and op code) of the distinct (row, op code) pairs
    of a block.  A device-op-table row holds ops of one name on one device, so an op's
    code nearly always gives its row: then the pairs are the codes themselves."""
    row_of = np.full(n_codes, -1, np.intp)
    row_of[code] = row
    if (row_of[code] == row).all():
        # codes with no op here sum nothing (their counts are 0): any row will do
        return code, np.maximum(row_of, 0), np.arange(n_codes)
    rows, pair = distinct_rows(row, code)
    return pair, rows[:, 0].astype(np.intp), rows[:, 1].astype(np.intp)


def _fold_block(c: dict, code, op_dev, op_step, op_row, dur, table, n_dev: int,
                n_steps: int) -> dict:
    """``fold``'s sums over one block of ops (``c``: its cost figures, per op, or per
    distinct op with ``code`` each op's).  Each op is counted into its row and its
    (step, device) cell; a device's sums are its rows' (a row is one device's group), so
    no pass over the ops is made per device."""
    names = dtype_names()
    n_dt = len(names)
    n_rows = len(table)
    row = np.asarray(op_row, np.intp)
    d = np.asarray(dur, np.float64)
    op_dev, op_step = np.asarray(op_dev), np.asarray(op_step)
    r_ok = row >= 0
    if not r_ok.all():                        # an op in no row counts nowhere
        keep = np.flatnonzero(r_ok)
        row, d, op_dev, op_step = row[keep], d[keep], op_dev[keep], op_step[keep]
        if code is None:
            c = {k: None if v is None else np.asarray(v)[keep] for k, v in c.items()}
        else:
            code = np.asarray(code)[keep]
    # the unit the figures are per: an op, or a distinct (row, op) of ops held per op,
    # with its count of ops and their summed time
    if code is None:
        pair, p_row, cnt, p_dur = None, row, 1.0, d
        fig = np.asarray
    else:
        n_codes = int(np.asarray(c["flops"]).shape[0])
        pair, p_row, p_code = _pairs(row, np.asarray(code, np.intp), n_codes)
        n_p = int(p_row.shape[0])
        cnt, p_dur = _bc(pair, n_p), _bc(pair, n_p, d)
        fig = lambda x: np.asarray(x)[p_code]  # noqa: E731
    # the figures zeroed where unknown, NaN (none expected) zeroed in place
    known = fig(c["known"]).astype(bool, copy=False)
    est = fig(c["estimated"]).astype(bool, copy=False) & known

    def figure(x):
        out = np.where(known, fig(x).astype(np.float64, copy=False), 0.0)
        return np.nan_to_num(out, copy=False)
    fl, hw, by = figure(c["flops"]), figure(c["hw_flops"]), figure(c["bytes"])
    hw = np.where(hw > 0, hw, fl)
    # HBM bytes as xprof's roofline counts an op's: those its breakdown lists, all of its
    # bytes where it lists none or has none (its rule for an op without a breakdown).
    # XLA lists positive byte counts only, so an op lists some where its listed bytes
    # add up to more than 0.  ``sp`` marks the ops with a breakdown, ``ls`` those listing
    if c.get("hbm_bytes") is None:
        sp = ls = np.zeros(known.shape[0], bool)
        hb = onc = hbm = None
    else:
        hb = fig(c["hbm_bytes"]).astype(np.float64, copy=False)
        sp = known & np.isfinite(hb)
        hb = np.where(sp, hb, 0.0)
        onc = np.zeros(known.shape[0]) if c.get("onchip_bytes") is None else \
            np.nan_to_num(np.where(sp, fig(c["onchip_bytes"]).astype(np.float64), 0.0))
        ls = sp & (hb + onc > 0)
        hbm = np.where(ls, hb, by)
    r_klass = np.asarray(table.klass, np.int8)
    r_compute = r_klass == OpClass.COMPUTE
    compute = r_compute[p_row] if n_rows else np.zeros(p_row.shape[0], bool)
    mm = fig(c["matmul"]).astype(bool, copy=False) & compute
    dt = np.clip(fig(c["dtype"]).astype(np.intp), 0, n_dt - 1)
    fp32 = names.index("fp32") if "fp32" in names else -1
    tf32 = names.index("tf32") if "tf32" in names else -1
    # a unit's sums: its figure times its count of ops, its ops' time
    fl_n, hw_n, by_n = fl * cnt, hw * cnt, by * cnt
    mm_d = np.where(mm, p_dur, 0.0)
    mm_fl = np.where(mm, fl_n, 0.0)
    # per row
    r_est = _bc(p_row, n_rows, np.where(est, fl_n, 0.0))
    r_fl = _bc(p_row, n_rows, fl_n)
    r_hw, r_by, r_d = _bc(p_row, n_rows, hw_n), _bc(p_row, n_rows, by_n), _bc(p_row, n_rows, p_dur)
    # the split's sums: no pass over the ops where the costs carry no split (a Kineto
    # trace's are per op): the roofline's HBM bytes are then all the bytes
    r_rw = np.zeros((n_rows, len(ONCHIP_RW)))
    if not sp.any():
        r_hbm, r_onc, r_hbm_ls, r_sp, r_ls = r_by.copy(), *(np.zeros(n_rows) for _ in range(4))
    else:
        r_hbm, r_onc = _bc(p_row, n_rows, hbm * cnt), _bc(p_row, n_rows, onc * cnt)
        r_hbm_ls = _bc(p_row, n_rows, hb * cnt)
        r_sp = _bc(p_row, n_rows, np.where(sp, cnt, 0.0))
        r_ls = _bc(p_row, n_rows, np.where(ls, cnt, 0.0))
        # the on-chip bytes per (space, direction): a bincount per pair over the ops
        for j, k in enumerate(ONCHIP_RW):
            v = c.get(f"{k}_bytes")
            if v is not None:
                x = np.nan_to_num(np.where(sp, fig(v).astype(np.float64, copy=False), 0.0))
                r_rw[:, j] = _bc(p_row, n_rows, x * cnt)
    r_known = _bc(p_row, n_rows, np.where(known, p_dur, 0.0))
    r_mm_d, r_mm_fl = _bc(p_row, n_rows, mm_d), _bc(p_row, n_rows, mm_fl)
    # fp32 tensors, on fp32 units or TF32 tensor cores: both would run faster in 16 bits
    r_fp32 = _bc(p_row, n_rows, np.where((dt == fp32) | (dt == tf32), mm_d, 0.0))
    rdt = p_row * n_dt + dt
    r_dt_mm = _bc(rdt, n_rows * n_dt, mm_fl).reshape(n_rows, n_dt)
    r_dt_all = _bc(rdt, n_rows * n_dt, fl_n).reshape(n_rows, n_dt)
    # per device, from its rows
    rdev = np.asarray(table.device, np.int64)
    per = lambda x: _bc(rdev, n_dev, x)  # noqa: E731
    dev_dt = lambda x: np.stack([per(x[:, k]) for k in range(x.shape[1])], axis=1) \
        if n_rows else np.zeros((n_dev, x.shape[1]))  # noqa: E731
    # per (launching step, device): each op its unit's figure
    st = np.asarray(op_step, np.intp)
    in_step = np.flatnonzero(st >= 0) if st.size and st.min() < 0 else slice(None)
    sk = st[in_step] * n_dev + np.asarray(op_dev, np.intp)[in_step]
    unit = in_step if pair is None else pair[in_step]
    d_in = d[in_step]
    nsd, shape = n_steps * n_dev, (n_steps, n_dev)
    return dict(
        flops=per(r_fl - r_est), flops_est=per(r_est), hw_flops=per(r_hw), bytes=per(r_by),
        hbm_listed=per(r_hbm_ls), onchip_bytes=per(r_onc), split=per(r_sp),
        listed=per(r_ls), onchip_rw=dev_dt(r_rw),
        op_time=per(r_d), known_time=per(r_known), mm_time=per(r_mm_d),
        comp_time=per(np.where(r_compute, r_d, 0.0)),
        dtype_flops=dev_dt(r_dt_mm), dtype_all=dev_dt(r_dt_all),
        step_flops=_bc(sk, nsd, fl[unit]).reshape(shape),
        step_known=_bc(sk, nsd, known[unit].astype(np.float64)).reshape(shape),
        step_mm_time=_bc(sk, nsd, np.where(mm[unit], d_in, 0.0)).reshape(shape),
        step_comp_time=_bc(sk, nsd, np.where(compute[unit], d_in, 0.0)).reshape(shape),
        row_flops=r_fl, row_hw=r_hw, row_bytes=r_by, row_hbm_bytes=r_hbm, row_split=r_sp,
        row_onchip_rw=r_rw,
        row_mm_flops=r_mm_fl,
        row_known_time=r_known, row_fp32_mm_time=r_fp32, row_dtype_mm=r_dt_mm,
        row_dtype_time=_bc(rdt, n_rows * n_dt, mm_d).reshape(n_rows, n_dt))


def costs_ahead(trace, ops: np.ndarray):
    """The costs of ``ops`` (the analysis' device ops), found before the device-op table
    says which it keeps: for an XSpace, where each op's figure is its own (a Kineto
    kernel's share of its host op depends on the kernels given beside it); None
    otherwise, or where the cost model is not installed."""
    if trace.format != "xspace" or not ops.size:
        return None
    try:
        from .costs import op_costs
    except ImportError:
        return None
    return op_costs(trace, ops)


def gather(trace, ops: np.ndarray, op_step: np.ndarray, n_steps: int, table: DeviceOpTable,
           op_rows, costs=None) -> CostSums | None:
    """The cost sums of the analysis' device ops (``op_rows``: the device-op table's
    (ops it kept, their rows), taken from the list; ``costs``: those of every one of
    ``ops`` where ``costs_ahead`` found them); None where the cost model is not installed
    or there are no ops."""
    try:
        from .costs import op_costs
    except ImportError:
        return None
    if not op_rows or not ops.size:
        return None
    kept, row = op_rows.pop()
    at = None
    if kept.shape[0] != ops.shape[0]:          # ops on no device are in no row
        at = np.searchsorted(ops, kept)
        op_step = op_step[at]
    if costs is None and trace.format == "xspace" and kept.shape[0] > BLOCK:
        # a block of ops at a time, with a margin each side: the lookups of 40 M ops at
        # once held GBs (each op's figure is its own but for a run of kernels)
        def costs(a: int, b: int):
            lo, hi = max(a - RUN_PAD, 0), min(b + RUN_PAD, kept.shape[0])
            return op_costs(trace, kept[lo:hi]).take(np.arange(a - lo, b - lo))
    elif costs is None:
        costs = op_costs(trace, kept)
    elif at is not None:
        costs = costs.take(at)
    dev = trace.track_device[trace.track[kept]]
    return fold(costs, dev, op_step, row, trace.dur[kept], table, len(trace.devices), n_steps)
