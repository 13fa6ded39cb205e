"""The table of device-op costs every source fills (``OpCosts``) and what the sources
share: the dtype codes, a per-trace memo and the distinct rows of integer columns.
Apart from ``costs`` so that the sources and the entry point that picks among them do
not import each other."""
from __future__ import annotations

import weakref

import numpy as np

from ...trace.model import Trace

# the dtypes a matmul-class op may run in; ``OpCosts.dtype`` indexes this ("" unknown)
# the low-precision formats (GUIDE §4 "Formats"): FP8 (e4m3, e5m2), the OCP MX formats
# (8-bit elements, 6-bit, 4-bit with shared E8M0 scales) and NVIDIA's NVFP4
DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp64", "mxfp8", "mxfp6", "mxfp4",
          "nvfp4", "")
UNKNOWN_DTYPE = DTYPES.index("")


FIGURES = ("flops", "hw_flops", "bytes", "estimated", "matmul", "dtype", "known")
# of ``bytes``, those XLA places in HBM and on chip (CMEM, VMEM), where the trace splits
# them by memory space (a TPU op's ``memory_access_breakdown``); NaN where it does not.
# The on-chip ones also per (memory space, direction): the roofs xprof judges an op by
ONCHIP_RW = ("cmem_read", "cmem_write", "vmem_read", "vmem_write")
SPLIT = ("hbm_bytes", "onchip_bytes") + tuple(f"{k}_bytes" for k in ONCHIP_RW)


class OpCosts:
    """The cost figures of device op events, one per event given, in the same order.

    ``flops``: float64 model FLOPs (0 where none); ``hw_flops``: hardware FLOPs
    (recomputation included; = flops when the trace does not tell them apart);
    ``bytes``: bytes accessed; ``estimated``: from the shapes of an op opaque to the cost
    model (a custom call), its FLOPs in ``flops`` but flagged, so that
    ``flops[~estimated]`` is the cost model's figure alone; ``matmul``: matmul class
    (dot, convolution, attention); ``dtype``: int8 into DTYPES, the dtype a matmul-class
    op ran in; ``known``: the op has a figure (0 FLOPs may be a figure);
    ``hbm_bytes``, ``onchip_bytes``: of ``bytes``, those in HBM and on chip where the
    trace splits them by memory space (NaN where not: the default);
    ``cmem_read_bytes`` … ``vmem_write_bytes``: the on-chip ones per space and direction.  ``source``:
    "xla_op_stats" | "hlo" | "kineto_flops_arg" | "shapes" | ""; ``missing``: why figures
    are absent ("" when every op has one).

    Where every figure is one per distinct op (XLA's cost stats), they are held per op
    and ``code`` gives each event's op: the fold into sums then works per distinct
    (row, op) and no float column per event is made (seven at 40 M events are 1.9 GB).
    A figure read by name is then made per event, on each read."""

    __slots__ = ("event", "code", "source", "missing", "_held")

    def __init__(self, event, flops, hw_flops, bytes, estimated, matmul, dtype, known,
                 source: str, missing: str, code: np.ndarray | None = None,
                 hbm_bytes: np.ndarray | None = None, onchip_bytes: np.ndarray | None = None,
                 cmem_read_bytes: np.ndarray | None = None,
                 cmem_write_bytes: np.ndarray | None = None,
                 vmem_read_bytes: np.ndarray | None = None,
                 vmem_write_bytes: np.ndarray | None = None):
        self.event = event
        self.code = code
        self.source, self.missing = source, missing
        self._held = dict(zip(FIGURES, (flops, hw_flops, bytes, estimated, matmul, dtype,
                                        known)))
        # no split is held as None (no NaN column per event at 20 M Kineto ops)
        self._held.update(zip(SPLIT, (hbm_bytes, onchip_bytes, cmem_read_bytes,
                                      cmem_write_bytes, vmem_read_bytes, vmem_write_bytes)))

    def held(self, name: str) -> np.ndarray | None:
        """A figure as held: per distinct op where ``code`` is set, else per event (None:
        a memory-space split the source does not have)."""
        return self._held[name]

    def _figure(name):  # noqa: N805 - builds the per-event properties below
        def get(self):
            v = self._held[name]
            if v is None:
                return np.full(self.event.shape[0], np.nan)
            return v if self.code is None else v[self.code]
        return property(get)

    flops, hw_flops, bytes = _figure("flops"), _figure("hw_flops"), _figure("bytes")
    estimated, matmul, dtype = _figure("estimated"), _figure("matmul"), _figure("dtype")
    known = _figure("known")
    hbm_bytes, onchip_bytes = _figure("hbm_bytes"), _figure("onchip_bytes")
    cmem_read_bytes, cmem_write_bytes = _figure("cmem_read_bytes"), _figure("cmem_write_bytes")
    vmem_read_bytes, vmem_write_bytes = _figure("vmem_read_bytes"), _figure("vmem_write_bytes")
    del _figure

    def __len__(self) -> int:
        return int(self.event.shape[0])

    def take(self, at: np.ndarray) -> "OpCosts":
        """The costs of the events at positions ``at`` (figures held per op stay so)."""
        if self.code is not None:
            held = self._held
        else:
            held = {k: None if v is None else np.asarray(v)[at] for k, v in self._held.items()}
        out = OpCosts.__new__(OpCosts)
        out.event, out.source, out.missing = self.event[at], self.source, self.missing
        out.code = None if self.code is None else self.code[at]
        out._held = dict(held)
        return out

    def dtype_name(self) -> str:
        """The dtype most of the matmul-class FLOPs ran in ("" where none is known)."""
        mm, dt, hw = self.matmul, self.dtype, self.hw_flops
        m = mm & (dt != UNKNOWN_DTYPE)
        if not m.any():
            return ""
        w = np.bincount(dt[m].astype(np.int64), weights=hw[m], minlength=len(DTYPES))
        if w.sum() <= 0:
            w = np.bincount(dt[m].astype(np.int64), minlength=len(DTYPES))
        return DTYPES[int(np.argmax(w))]


_MEMO: dict = {}        # (id(trace), key) → (weak reference to the trace, value)


def per_trace(trace: Trace, key: str, make):
    """``make(trace)``, made once per trace object and kept while the trace lives: the
    sources' per-op tables (a Kineto file's op args read again, an HLO module parsed)
    serve every device's call."""
    k = (id(trace), key)
    got = _MEMO.get(k)
    if got is not None and got[0]() is trace:
        return got[1]
    value = make(trace)
    _MEMO[k] = (weakref.ref(trace, lambda _r, k=k: _MEMO.pop(k, None)), value)
    return value


def distinct_rows(*cols) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct rows of the integer columns ``cols``, (k, n_cols) int64; each row's
    index into them): ``np.unique(axis=0)`` without its sort of rows (2.1 s over 480 k
    TPU ops).  Each column is coded to 0..m−1 (a mark table where its values span
    little, else a 1-D unique), the codes packed into one int64 key, the key coded."""
    n = cols[0].shape[0]
    codes, sizes, tables = [], [], []
    for c in cols:
        c = np.asarray(c)
        if n and c.dtype.kind in "iu" and int(c.min()) == int(c.max()):
            # one value (the program of a one-program capture): no code per row
            codes.append(None)
            sizes.append(1)
            tables.append(np.array([int(c[0])], np.int64))
            continue
        code, table = _code(np.asarray(c, np.int64))
        codes.append(code)
        sizes.append(max(table.shape[0], 1))
        tables.append(table)
    if float(np.prod(np.asarray(sizes, np.float64))) >= 2.0 ** 62:   # no room in a key
        rows, inv = np.unique(np.stack([np.asarray(c, np.int64) for c in cols], axis=1),
                              axis=0, return_inverse=True)
        return rows, inv.reshape(-1)
    varying = [k for k, code in enumerate(codes) if code is not None]
    if len(varying) <= 1:
        # the one varying column's codes are the rows' (0..m−1, ascending)
        m = tables[varying[0]].shape[0] if varying else (1 if n else 0)
        kcode = codes[varying[0]] if varying else np.zeros(n, np.int64)
        ktable = np.arange(m, dtype=np.int64)
    else:
        key = np.zeros(n, np.int64)
        for k in varying:
            key *= sizes[k]
            key += codes[k]
        kcode, ktable = _code(key)
        del key
    rows = np.empty((ktable.shape[0], len(cols)), np.int64)
    rest = ktable.copy()
    for j in range(len(cols) - 1, -1, -1):
        rows[:, j] = tables[j][rest % sizes[j]] if tables[j].shape[0] else -1
        rest //= sizes[j]
    return rows, kcode


def _code(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes 0..m−1, the m distinct values ascending) of an int64 column."""
    if not c.shape[0]:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    lo, hi = int(c.min()), int(c.max())
    if hi - lo <= max(4 * c.shape[0], 1 << 16):
        mark = np.zeros(hi - lo + 1, bool)
        mark[c - lo] = True
        table = np.flatnonzero(mark)
        lut = np.zeros(hi - lo + 1, np.int64)
        lut[table] = np.arange(table.shape[0])
        return lut[c - lo], table + lo
    table, inv = np.unique(c, return_inverse=True)
    return inv.reshape(-1).astype(np.int64), table


def empty(events: np.ndarray, source: str = "", missing: str = "") -> OpCosts:
    """Costs with no figure for any of ``events``: one op, no figure, for all of them."""
    z = np.zeros(1, np.float64)
    return OpCosts(np.asarray(events, np.int64), z, z, z, np.zeros(1, bool),
                   np.zeros(1, bool), np.full(1, UNKNOWN_DTYPE, np.int8),
                   np.zeros(1, bool), source, missing,
                   code=np.zeros(np.asarray(events).shape[0], np.int8))


def blank(events: np.ndarray, source: str = "") -> OpCosts:
    """Costs held per event, no figure yet: for a source to fill in place."""
    n = np.asarray(events).shape[0]
    z = np.zeros(n, np.float64)
    return OpCosts(np.asarray(events, np.int64), z, z.copy(), z.copy(), np.zeros(n, bool),
                   np.zeros(n, bool), np.full(n, UNKNOWN_DTYPE, np.int8),
                   np.zeros(n, bool), source, "")
