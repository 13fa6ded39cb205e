"""Per-op cost figures folded, once, into the small sums the efficiency table reads.

Runs where the analysis still holds its device ops and the step that launched each
(``diagnosis._stages``, right after the device-op table): the per-op columns of
``op_costs`` are bincounted into per device, per (launching step, device) and per
device-op-table row sums and dropped; nothing per op is kept.  A step's FLOPs are those
of the ops it *launched*, wherever they ran (the duty cycle's rule), not of the ops that
overlap its window in time.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..result import DeviceOpTable, OpClass

# the dtype names of ``costs.DTYPES`` where that module is not there yet (tests of the
# arithmetic build their own cost columns)
_DTYPES = ("unknown", "fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4")


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
    bytes: np.ndarray           # (n_dev,)
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
    row_mm_flops: np.ndarray    # FLOPs of its matmul-class ops
    row_known_time: np.ndarray  # ps
    row_fp32_mm_time: np.ndarray  # ps of its fp32 matmul-class ops
    source: str
    missing: str


def _bc(key, n, w=None) -> np.ndarray:
    return np.bincount(key, weights=w, minlength=n)[:n].astype(np.float64, copy=False) \
        if key.size else np.zeros(n, np.float64)


BLOCK = 1 << 20              # ops folded at a time: the temporaries stay a few tens of MB


def fold(costs, op_dev: np.ndarray, op_step: np.ndarray, op_row: np.ndarray, dur: np.ndarray,
         table: DeviceOpTable, n_dev: int, n_steps: int) -> CostSums:
    """``costs``: an ``OpCosts`` of the ops (one row each, in order); ``op_dev``, ``op_step``
    (−1 none), ``op_row`` (their device-op-table row) and ``dur`` (ps) of the same ops.
    Folded a block of ops at a time (a float column per op at 40 M events is 320 MB)."""
    n = int(np.asarray(op_row).shape[0])
    cols = ("flops", "hw_flops", "bytes", "estimated", "matmul", "dtype", "known")
    got = None
    for a in range(0, max(n, 1), BLOCK):
        b = min(a + BLOCK, n)
        part = _fold_block({c: np.asarray(getattr(costs, c))[a:b] for c in cols},
                           op_dev[a:b], op_step[a:b], op_row[a:b], dur[a:b], table, n_dev, n_steps)
        got = part if got is None else {k: got[k] + v for k, v in part.items()}
    return CostSums(n_dev, n_steps, **got, source=str(getattr(costs, "source", "") or ""),
                    missing=str(getattr(costs, "missing", "") or ""))


def _fold_block(c: dict, op_dev, op_step, op_row, dur, table, n_dev: int, n_steps: int) -> dict:
    """``fold``'s sums over one block of ops (``c``: its cost columns).  Each op is counted
    into its row and its (step, device) cell; a device's sums are its rows' (a row is one
    device's group), so no pass over the ops is made per device."""
    names = dtype_names()
    n_dt = len(names)
    n_rows = len(table)
    # no copy of a column already of its type; the figures zeroed where unknown, NaN
    # (none expected) zeroed in place
    known = np.asarray(c["known"], bool)
    est = np.asarray(c["estimated"], bool) & known

    def figure(x):
        out = np.where(known, np.asarray(x, np.float64), 0.0)
        return np.nan_to_num(out, copy=False)
    fl, hw, by = figure(c["flops"]), figure(c["hw_flops"]), figure(c["bytes"])
    hw = np.where(hw > 0, hw, fl)
    row = np.asarray(op_row, np.intp)
    r_ok = row >= 0
    if not r_ok.all():                        # an op in no row counts nowhere
        keep = np.flatnonzero(r_ok)
        row, known, est, fl, hw, by = (x[keep] for x in (row, known, est, fl, hw, by))
        op_dev, op_step, dur = (np.asarray(x)[keep] for x in (op_dev, op_step, dur))
        c = {k: np.asarray(v)[keep] for k, v in c.items()}
    r_klass = np.asarray(table.klass, np.int8)
    r_compute = r_klass == OpClass.COMPUTE
    compute = r_compute[row] if n_rows else np.zeros(row.shape[0], bool)
    mm = np.asarray(c["matmul"], bool) & compute
    d = np.asarray(dur, np.float64)
    dt = np.clip(np.asarray(c["dtype"], np.intp), 0, n_dt - 1)
    fp32 = names.index("fp32") if "fp32" in names else -1
    mm_d = np.where(mm, d, 0.0)
    mm_fl = np.where(mm, fl, 0.0)
    # per row
    r_est = _bc(row, n_rows, np.where(est, fl, 0.0))
    r_fl = _bc(row, n_rows, fl)
    r_hw, r_by, r_d = _bc(row, n_rows, hw), _bc(row, n_rows, by), _bc(row, n_rows, d)
    r_known = _bc(row, n_rows, np.where(known, d, 0.0))
    r_mm_d, r_mm_fl = _bc(row, n_rows, mm_d), _bc(row, n_rows, mm_fl)
    r_fp32 = _bc(row, n_rows, np.where(dt == fp32, mm_d, 0.0))
    rdt = row * n_dt + dt
    r_dt_mm = _bc(rdt, n_rows * n_dt, mm_fl).reshape(n_rows, n_dt)
    r_dt_all = _bc(rdt, n_rows * n_dt, fl).reshape(n_rows, n_dt)
    # per device, from its rows
    rdev = np.asarray(table.device, np.int64)
    per = lambda x: _bc(rdev, n_dev, x)  # noqa: E731
    dev_dt = lambda x: np.stack([per(x[:, k]) for k in range(n_dt)], axis=1) if n_rows \
        else np.zeros((n_dev, n_dt))  # noqa: E731
    # per (launching step, device)
    st = np.asarray(op_step, np.intp)
    in_step = np.flatnonzero(st >= 0) if st.size and st.min() < 0 else slice(None)
    sk = st[in_step] * n_dev + np.asarray(op_dev, np.intp)[in_step]
    nsd, shape = n_steps * n_dev, (n_steps, n_dev)
    return dict(
        flops=per(r_fl - r_est), flops_est=per(r_est), hw_flops=per(r_hw), bytes=per(r_by),
        op_time=per(r_d), known_time=per(r_known), mm_time=per(r_mm_d),
        comp_time=per(np.where(r_compute, r_d, 0.0)),
        dtype_flops=dev_dt(r_dt_mm), dtype_all=dev_dt(r_dt_all),
        step_flops=_bc(sk, nsd, fl[in_step]).reshape(shape),
        step_known=_bc(sk, nsd, known[in_step].astype(np.float64)).reshape(shape),
        step_mm_time=_bc(sk, nsd, mm_d[in_step]).reshape(shape),
        step_comp_time=_bc(sk, nsd, np.where(compute, d, 0.0)[in_step]).reshape(shape),
        row_flops=r_fl, row_hw=r_hw, row_bytes=r_by, row_mm_flops=r_mm_fl,
        row_known_time=r_known, row_fp32_mm_time=r_fp32)


def gather(trace, ops: np.ndarray, op_step: np.ndarray, n_steps: int, table: DeviceOpTable,
           op_rows) -> CostSums | None:
    """The cost sums of the analysis' device ops (``op_rows``: the device-op table's
    (ops it kept, their rows), taken from the list); None where the cost model is not installed or there are
    no ops."""
    try:
        from .costs import op_costs
    except ImportError:
        return None
    if not op_rows or not ops.size:
        return None
    kept, row = op_rows.pop()
    if kept.shape[0] != ops.shape[0]:          # ops on no device are in no row
        at = np.searchsorted(ops, kept)
        op_step = op_step[at]
    costs = op_costs(trace, kept)
    dev = trace.track_device[trace.track[kept]]
    return fold(costs, dev, op_step, row, trace.dur[kept], table, len(trace.devices), n_steps)
