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
    return np.bincount(key, weights=w, minlength=n)[:n].astype(np.float64) if key.size \
        else np.zeros(n, np.float64)


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
    """``fold``'s sums over one block of ops (``c``: its cost columns)."""
    names = dtype_names()
    n_dt = len(names)
    n_rows = len(table)
    known = c["known"].astype(bool)
    est = c["estimated"].astype(bool) & known
    fl = np.where(known, np.nan_to_num(c["flops"].astype(np.float64)), 0.0)
    hw = np.where(known, np.nan_to_num(c["hw_flops"].astype(np.float64)), 0.0)
    hw = np.where(hw > 0, hw, fl)
    by = np.where(known, np.nan_to_num(c["bytes"].astype(np.float64)), 0.0)
    row = np.asarray(op_row, np.int64)
    klass = np.asarray(table.klass, np.int8)[np.maximum(row, 0)] if n_rows else \
        np.zeros(row.shape[0], np.int8)
    compute = (klass == OpClass.COMPUTE) & (row >= 0)
    mm = c["matmul"].astype(bool) & compute
    dv = np.asarray(op_dev, np.int64)
    d = np.asarray(dur).astype(np.float64)
    dt = np.clip(c["dtype"].astype(np.int64), 0, n_dt - 1)
    fp32 = names.index("fp32") if "fp32" in names else -1
    st = np.asarray(op_step, np.int64)
    in_step = st >= 0
    sk = st[in_step] * n_dev + dv[in_step]
    nsd = n_steps * n_dev
    shape = (n_steps, n_dev)
    r_ok = row >= 0
    rk = row[r_ok]
    return dict(
        flops=_bc(dv, n_dev, np.where(est, 0.0, fl)), flops_est=_bc(dv, n_dev, np.where(est, fl, 0.0)),
        hw_flops=_bc(dv, n_dev, hw), bytes=_bc(dv, n_dev, by), op_time=_bc(dv, n_dev, d),
        known_time=_bc(dv, n_dev, np.where(known, d, 0.0)),
        mm_time=_bc(dv, n_dev, np.where(mm, d, 0.0)),
        comp_time=_bc(dv, n_dev, np.where(compute, d, 0.0)),
        dtype_flops=_bc(dv * n_dt + dt, n_dev * n_dt, np.where(mm, fl, 0.0)).reshape(n_dev, n_dt),
        dtype_all=_bc(dv * n_dt + dt, n_dev * n_dt, fl).reshape(n_dev, n_dt),
        step_flops=_bc(sk, nsd, fl[in_step]).reshape(shape),
        step_known=_bc(sk, nsd, known[in_step].astype(np.float64)).reshape(shape),
        step_mm_time=_bc(sk, nsd, np.where(mm, d, 0.0)[in_step]).reshape(shape),
        step_comp_time=_bc(sk, nsd, np.where(compute, d, 0.0)[in_step]).reshape(shape),
        row_flops=_bc(rk, n_rows, fl[r_ok]), row_hw=_bc(rk, n_rows, hw[r_ok]),
        row_bytes=_bc(rk, n_rows, by[r_ok]),
        row_mm_flops=_bc(rk, n_rows, np.where(mm, fl, 0.0)[r_ok]),
        row_known_time=_bc(rk, n_rows, np.where(known, d, 0.0)[r_ok]),
        row_fp32_mm_time=_bc(rk, n_rows, np.where(mm & (dt == fp32), d, 0.0)[r_ok]))


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
