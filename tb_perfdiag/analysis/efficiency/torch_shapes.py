"""PyTorch FLOPs and bytes: the ``flops`` arg of a ``with_flops=True`` profile, else the
shapes of the host op (``torch_formulas``), carried to the kernels the op launched.

The reader keeps an op's ``Input Dims``, ``Input type`` and ``Concrete Inputs`` as
string stats (one interned JSON text per distinct value) and its ``flops``: each
distinct (name, shapes, types, scalars, what its neighbours tell) is parsed and costed
once, and the figures broadcast to the ops.  An op's figure belongs to the
outermost costed op around it (``aten::conv2d`` over ``aten::cudnn_convolution``: one
count), and is split over the kernels launched inside that op (``_to_kernels``): a
matmul op's FLOPs over its matrix kernels by duration, a convolution backward's two
gradients each over the kernels computing it; bytes over all of its kernels.

What a 2021 trace leaves out, inferred from neighbours, never guessed:
- a forward convolution's output shape (its stride and padding are not recorded): the
  next op of the same parent that takes an ``[N, C_out, …]`` tensor, else the
  ``grad_output`` of a backward with the same input and weight shapes;
- a backward's output mask: its ``*_backward_input`` / ``*_backward_weight`` children.
Activation checkpointing: a forward-only op (``conv2d``, ``linear``, SDPA…) inside an
autograd backward node is the recomputation: hardware FLOPs, not model FLOPs.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

from ...trace.model import EventKind, LinkKind, Trace, TrackKind, lookup_together
from . import ragged, torch_formulas as F
from .opcosts import DTYPES, UNKNOWN_DTYPE, OpCosts, blank, distinct_rows, empty, per_trace

NO_SHAPES = "profile with record_shapes=True: the trace's ops carry no shapes"

_GEMM = {"aten::mm": F.mm, "aten::addmm": F.addmm, "aten::_addmm_activation": F.addmm,
         "aten::bmm": F.bmm, "aten::baddbmm": F.baddbmm, "aten::matmul": F.matmul,
         "aten::linear": F.linear, "aten::_scaled_mm": F.mm}
# forward convolutions: (stride, padding, dilation) positions in Concrete Inputs,
# transposed position (or True for a transposed op, False for one that never is)
_CONV = {
    **{f"aten::conv{d}d": (3, 4, 5, False) for d in (1, 2, 3)},
    **{f"aten::conv_transpose{d}d": (3, 4, 7, True) for d in (1, 2, 3)},
    "aten::convolution": (3, 4, 5, 6), "aten::_convolution": (3, 4, 5, 6),
    "aten::_convolution_mode": (3, None, 5, False),
    "aten::cudnn_convolution": (3, 2, 4, False),
    "aten::cudnn_convolution_relu": (4, 5, 6, False),
    "aten::cudnn_convolution_add_relu": (6, 7, 8, False),
    "aten::cudnn_convolution_transpose": (4, 2, 5, True),
    "aten::miopen_convolution": (4, 3, 5, False),
    "aten::miopen_depthwise_convolution": (4, 3, 5, False),
    "aten::miopen_convolution_transpose": (5, 3, 6, True),
    "aten::mkldnn_convolution": (4, 3, 5, False),
    "aten::_slow_conv2d_forward": (4, 5, None, False),
    "aten::thnn_conv2d": (4, 5, None, False),
}
# backward convolutions: (input, grad_output, weight) positions in Input Dims, the
# output mask's position in Concrete Inputs, transposed position (or False)
_CONV_BWD = {
    "aten::convolution_backward": (1, 0, 2, 10, 7),
    "aten::cudnn_convolution_backward": (0, 1, 2, 10, False),
    "aten::miopen_convolution_backward": (0, 1, 2, 9, False),
    "aten::mkldnn_convolution_backward": (0, 1, 2, 7, False),
    "aten::_slow_conv2d_backward": (1, 0, 2, 6, False),
    "aten::cudnn_convolution_transpose_backward": (0, 1, 2, 10, True),
    "aten::miopen_convolution_transpose_backward": (0, 1, 2, 10, True),
    # only the input's gradient / only the weight's
    "aten::cudnn_convolution_backward_input": (None, 1, 2, "input", False),
    "aten::miopen_convolution_backward_input": (None, 1, 2, "input", False),
}
# attention: (q, k, v positions, causal position (or "mask:<pos>" for a mask type),
# backward, [B, L, H, E] layout)
_ATTN = {
    "aten::scaled_dot_product_attention": (0, 1, 2, 5, False, False),
    "aten::_scaled_dot_product_flash_attention": (0, 1, 2, 4, False, False),
    "aten::_scaled_dot_product_flash_attention_for_cpu": (0, 1, 2, 4, False, False),
    "aten::_scaled_dot_product_efficient_attention": (0, 1, 2, 6, False, False),
    "aten::_scaled_dot_product_cudnn_attention": (0, 1, 2, 6, False, False),
    "aten::_scaled_dot_product_flash_attention_backward": (1, 2, 3, 11, True, False),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": (1, 2, 3, 7, True, False),
    "aten::_scaled_dot_product_efficient_attention_backward": (1, 2, 3, 11, True, False),
    "aten::_scaled_dot_product_cudnn_attention_backward": (1, 2, 3, 14, True, False),
    "aten::_flash_attention_forward": (0, 1, 2, 8, False, True),
    "aten::_flash_attention_backward": (1, 2, 3, 11, True, True),
    "aten::_efficient_attention_forward": (0, 1, 2, "mask:9", False, True),
    "aten::_efficient_attention_backward": (1, 2, 3, "mask:14", True, True),
}
# forward-only ops: inside an autograd backward node they are a checkpoint's recompute
_FORWARD_ONLY = ({f"aten::conv{d}d" for d in (1, 2, 3)} |
                 {"aten::linear", "aten::matmul", "aten::scaled_dot_product_attention"})
_BACKWARD_NODE = re.compile(r"(Backward\d*$)|(^autograd::engine::evaluate_function)")
_CONV_BWD_CHILDREN = tuple(f"aten::{lib}_convolution_backward_{w}" for lib in
                           ("cudnn", "miopen") for w in ("input", "weight"))
_CHILD_INPUT = re.compile(r"_backward_input$")
_CHILD_WEIGHT = re.compile(r"_backward_weight$")

# a matmul kernel's dtype from its name, where the op has no ``Input type``
_KERNEL_DTYPE = (
    # the narrowest format a kernel names is its matmul's (``bf16xbf16xmxfp4``: MXFP4
    # weights; a part with no MXFP4 units runs it at the format it converts to, ``peaks``)
    (re.compile(r"nvfp4|nvf4", re.I), "nvfp4"),
    (re.compile(r"mxfp4|mx_?e2m1|mxf4|_fp4|fp4_|f4e2m1|e2m1", re.I), "mxfp4"),
    (re.compile(r"mxfp6|mx_?e[23]m[23]|mxf6|_fp6|fp6_|f6e[23]m[23]", re.I), "mxfp6"),
    (re.compile(r"mxfp8|mx_?e4m3|mx_?e5m2|mxf8", re.I), "mxfp8"),
    (re.compile(r"e4m3|e5m2|fp8", re.I), "fp8"),
    (re.compile(r"bf16|bfloat16", re.I), "bf16"),
    # before tf32: an fp16 GEMM with fp32 accumulation is an "s16816"/"s1688" tile too
    (re.compile(r"h884|h1688|h16816|hgemm|__half|\bhalf\b|half_t|fp16|_f16_|f16f16|c10::Half",
                re.I), "fp16"),
    (re.compile(r"tf32|tfloat32|s1688|xmma.*f32f32_tf32", re.I), "tf32"),
    (re.compile(r"i8816|imma|int8|s8s8|_i8", re.I), "int8"),
    (re.compile(r"dgemm|<double|double,|\bd884|fp64", re.I), "fp64"),
    (re.compile(r"sgemm|<float|float,|float>|\bfloat\b|f32", re.I), "fp32"),
)
_KERNEL_SIZE = {"nvfp4": 0.5, "mxfp4": 0.5, "mxfp6": 0.75, "mxfp8": 1, "fp8": 1, "bf16": 2, "tf32": 4, "int8": 1, "fp16": 2, "fp64": 8, "fp32": 4}


# the ops with a formula and a backward convolution's children: only ops of these names
# tell a backward's output mask (``*_backward_input`` / ``*_backward_weight``)
_KNOWN = set(_GEMM) | set(_CONV) | set(_CONV_BWD) | set(_ATTN) | F.ELEMENTWISE | \
    F.REDUCTION | set(_CONV_BWD_CHILDREN)


class _Ops:
    """The host ops with shapes or a count (columns over them, events ascending): the
    reader's string stats ``input_dims``, ``input_type``, ``concrete_inputs`` (ids of
    one interned JSON text per distinct value, −1: none) and its ``flops`` stat."""

    def __init__(self, trace: Trace):
        dims, fl = trace.stats.get("input_dims"), trace.stats.get("flops")
        got = [st.events for st in (dims, fl) if st is not None]
        ev = np.unique(np.concatenate(got).astype(np.int64)) if got else np.zeros(0, np.int64)
        self.event = ev[trace.track_kind[trace.track[ev]] == TrackKind.HOST]
        self.n = int(self.event.shape[0])
        self.name = trace.name[self.event].astype(np.int64)
        # the shape stats share one events column: one search for them all
        got = lookup_together([trace.stats.get(s) for s in
                               ("input_dims", "input_type", "concrete_inputs")] + [fl],
                              self.event)
        self.dims, self.types, self.conc = (
            np.full(self.n, -1, np.int64) if g is None else
            np.where(g[1], g[0].astype(np.int64), -1) for g in got[:3])
        self.flops_arg = np.full(self.n, np.nan)
        if got[3] is not None:
            v, has = got[3]
            self.flops_arg[has] = v[has]

    def names_in(self, trace: Trace, test) -> np.ndarray:
        """Whether each op's name passes ``test`` (a str → bool), decided per name."""
        u, inv = np.unique(self.name, return_inverse=True)
        hit = np.array([bool(test(trace.strings[i])) for i in u.tolist()], bool)
        return hit[inv.reshape(-1)] if u.size else np.zeros(0, bool)


def _parsed(trace: Trace, ids) -> dict:
    """Each distinct text id's JSON value (parsed once: −1 and an unparsable text are
    [], as an op without the arg)."""
    try:
        from orjson import loads
    except ImportError:                  # pragma: no cover - orjson is a dependency
        from json import loads
    out = {-1: []}
    for i in np.unique(np.concatenate([np.asarray(x, np.int64) for x in ids])).tolist():
        if i >= 0:
            try:
                v = loads(trace.strings[i])
            except ValueError:
                v = []
            out[i] = v if isinstance(v, list) else []
    return out


def _sibling_after(trace: Trace, ev: np.ndarray) -> np.ndarray:
    """The next event with the same parent on the same track after each of ``ev``
    (sorted), among ``ev`` (−1 where none)."""
    par = trace.parent[ev].astype(np.int64)
    trk = trace.track[ev].astype(np.int64)
    key = np.stack([trk, par, ev], axis=1)
    o = np.lexsort((key[:, 2], key[:, 1], key[:, 0]))
    nxt = np.full(ev.shape[0], -1, np.int64)
    same = (trk[o][1:] == trk[o][:-1]) & (par[o][1:] == par[o][:-1])
    nxt[o[:-1][same]] = o[1:][same]
    return nxt


def _ancestor_rows(trace: Trace, ev: np.ndarray, rows_of: np.ndarray, want: np.ndarray,
                   outermost: bool) -> np.ndarray:
    """For each event of ``ev``: the row (index into the sorted ``rows_of`` events) of
    its innermost (or outermost) ancestor, itself included, whose row has ``want``;
    −1 where none.  Depth-many vector steps."""
    out = np.full(ev.shape[0], -1, np.int64)
    cur = ev.astype(np.int64)
    live = np.arange(ev.shape[0])
    for _ in range(256):
        if not live.size:
            break
        pos = np.minimum(np.searchsorted(rows_of, cur), max(rows_of.shape[0] - 1, 0))
        hit = (rows_of.shape[0] > 0) & (rows_of[pos] == cur)
        hit &= want[pos]
        if outermost:
            out[live[hit]] = pos[hit]
        else:
            first = hit & (out[live] < 0)
            out[live[first]] = pos[first]
        cur = trace.parent[cur].astype(np.int64)
        ok = cur >= 0
        live, cur = live[ok], cur[ok]
    return out


def from_torch(trace: Trace, events: np.ndarray) -> OpCosts:
    events = np.asarray(events, np.int64)
    h = per_trace(trace, "torch_host_costs", host_costs)
    if isinstance(h, str):
        return empty(events, "", h)
    if not h.has.any():             # shapes, but of no op with a cost formula
        return empty(events, "", NO_SHAPES)
    return _to_kernels(trace, events, h)


@dataclass
class HostCosts:
    """Per host op with shapes (its trace event, ascending): its figures."""

    event: np.ndarray               # int64
    name: np.ndarray                # int64: the op's name (Trace.strings)
    has: np.ndarray                 # bool: a formula (or the profiler's count) gave one
    flops_shapes: np.ndarray        # float64: the shape formula's (NaN: none)
    flops_arg: np.ndarray           # float64: the profiler's ``flops`` arg (NaN: none)
    flops_shapes_or_arg: np.ndarray  # float64: the arg for matmul ops, else the formula
    bytes: np.ndarray               # float64 (elements where ``elems``)
    elems: np.ndarray               # bool: no ``Input type``: bytes count elements
    matmul: np.ndarray              # bool
    dtype: np.ndarray               # int8 into DTYPES
    recompute: np.ndarray           # bool: a checkpoint's recomputed forward op
    source: str
    # a convolution backward's share of its FLOPs that is the input's gradient (the
    # rest the weight's; NaN: not a backward): which of its kernels take which part
    input_part: np.ndarray = None   # float64
    # the spatial dims a Winograd algorithm tiles (a 2-D 3×3 convolution's output, or its
    # backward's grad_output; 0: not such a convolution): its kernels' hardware count
    tile_hw: np.ndarray = None      # (n, 2) int64
    # whether the op is a convolution backward's input/weight child (2021 traces): the
    # kernels launched inside one compute that part
    child_part: np.ndarray = None   # int8: 1 input, 2 weight, 0 neither

    def outermost(self, trace: Trace) -> np.ndarray:
        """Whether each op with a figure has no ancestor with one (the op that counts)."""
        up = trace.parent[self.event].astype(np.int64)
        ok = up >= 0
        anc = np.full(self.event.shape[0], -1, np.int64)
        if ok.any():
            anc[ok] = _ancestor_rows(trace, up[ok], self.event, self.has, outermost=True)
        return self.has & (anc < 0)


def host_costs(trace: Trace):
    """The figures of the trace's host ops with shapes (``HostCosts``), or why there
    are none (a str).  Columns over the ops; each distinct (name, shapes, types,
    scalars, what its neighbours tell) is parsed and costed once."""
    ops = _Ops(trace)
    if ops.n == 0:
        return NO_SHAPES
    n, ev = ops.n, ops.event
    is_conv = ops.names_in(trace, _CONV.__contains__)
    is_bwd = ops.names_in(trace, _CONV_BWD.__contains__)

    # the output mask of backward convolutions from their children
    mask_in = np.zeros(n, bool)
    mask_w = np.zeros(n, bool)
    kid_in = ops.names_in(trace, lambda s: s in _KNOWN and _CHILD_INPUT.search(s))
    kid_w = ops.names_in(trace, lambda s: s in _KNOWN and _CHILD_WEIGHT.search(s))
    kids = np.flatnonzero(kid_in | kid_w)
    if kids.size:
        par = trace.parent[ev[kids]].astype(np.int64)
        pos = np.minimum(np.searchsorted(ev, par), n - 1)
        ok = ev[pos] == par
        inp = kid_in[kids]
        mask_in[pos[ok & inp]] = True
        mask_w[pos[ok & ~inp]] = True

    # a forward convolution's output shape may be its next sibling's input: that op's
    # shapes are part of the convolution's key
    nxt_dims = np.full(n, -1, np.int64)
    conv_rows = np.flatnonzero(is_conv)
    if conv_rows.size:
        j = _sibling_after(trace, ev)[conv_rows]
        ok = j >= 0
        ok[ok] = ~is_conv[j[ok]]                 # a convolution takes no output
        nxt_dims[conv_rows[ok]] = ops.dims[j[ok]]

    # recomputation: forward-only ops under an autograd backward node
    node = np.flatnonzero([("ackward" in s or s.startswith("autograd::")) and
                           bool(_BACKWARD_NODE.search(s)) for s in trace.strings])
    recompute = np.zeros(n, bool)
    fwd_only = np.flatnonzero(ops.names_in(trace, _FORWARD_ONLY.__contains__))
    if node.size and fwd_only.size:
        cur = trace.parent[ev[fwd_only]].astype(np.int64)
        live = np.arange(fwd_only.shape[0])
        for _ in range(256):
            if not live.size:
                break
            hit = np.isin(trace.name[cur], node)
            recompute[fwd_only[live[hit]]] = True
            cur = trace.parent[cur[~hit]].astype(np.int64)
            live = live[~hit]
            ok = cur >= 0
            live, cur = live[ok], cur[ok]

    # one figure per distinct (name, shapes, types, scalars, next op's shapes, mask)
    keys, inv = distinct_rows(ops.name, ops.dims, ops.types, ops.conc, nxt_dims,
                              mask_in, mask_w)
    val = _parsed(trace, (keys[:, 1], keys[:, 2], keys[:, 3], keys[:, 4]))
    names = [trace.strings[i] for i in keys[:, 0].tolist()]
    bwd_out = _backward_outputs(names, keys[:, 1].tolist(), val)
    cost = [None] * keys.shape[0]
    elems = np.zeros(keys.shape[0], bool)
    part = np.full(keys.shape[0], np.nan)
    tile = np.zeros((keys.shape[0], 2), np.int64)
    for k, (_, di, ti, ci, ni, mi, mw) in enumerate(keys.tolist()):
        dims, conc = val[di], val[ci]
        out_shape = _conv_output(names[k], dims, conc, val[ni], bwd_out) \
            if names[k] in _CONV else None
        kid = (bool(mi), bool(mw)) if mi or mw else None
        cost[k], elems[k] = _cost(names[k], dims, val[ti], conc, out_shape, kid)
        part[k], tile[k] = _parts(names[k], dims, conc, out_shape, kid)
    elems, part, tile = elems[inv], part[inv], tile[inv]
    has = np.array([c is not None for c in cost], bool)[inv]
    op_fl = np.array([c.flops if c is not None else 0.0 for c in cost])[inv]
    op_by = np.array([c.bytes if c is not None else 0.0 for c in cost])[inv]
    op_mm = np.array([c.matmul if c is not None else False for c in cost], bool)[inv]
    op_dt = np.array([DTYPES.index(c.dtype) if c is not None and c.dtype else
                      UNKNOWN_DTYPE for c in cost], np.int8)[inv]
    # attention over a ragged batch: the sums its step's name gives (vLLM)
    ragged.apply(trace, ev, ops.name, ops.dims, ops.types, lambda i: _parsed(trace, ([i],))[i],
                 has, op_fl, op_by, op_mm, op_dt, DTYPES)
    shape_fl = np.where(has, op_fl, np.nan)
    # the profiler's own count wins where it gave one, for the matmul-class ops it
    # counts (elementwise ops' counts are not matmul work: bytes only)
    flops_arg = ops.flops_arg
    use_arg = ~np.isnan(flops_arg) & op_mm
    op_fl = np.where(use_arg, flops_arg, op_fl)
    arg_only = ~np.isnan(flops_arg) & ~has & (flops_arg > 0) & \
        ops.names_in(trace, lambda s: s in _GEMM or s in _CONV)
    op_fl = np.where(arg_only, flops_arg, op_fl)
    op_mm |= arg_only
    has |= arg_only
    child = np.zeros(n, np.int8)
    if kids.size:
        child[kids] = np.where(inp, 1, 2)
    return HostCosts(ev, ops.name, has, shape_fl, flops_arg, op_fl, op_by, elems, op_mm, op_dt,
                     recompute,
                     "kineto_flops_arg" if use_arg.any() or arg_only.any() else "shapes",
                     np.where(has, part, np.nan), tile, child)


def _bwd_mask(name, conc, kid_mask):
    """A backward convolution's output mask (input grad, weight grad): its scalar, else
    its children's, else both."""
    mi = _CONV_BWD[name][3]
    if mi == "input":
        return (True, False)
    m = F._mask(conc, mi, 2)
    return m if m is not None else (kid_mask if kid_mask is not None else (True, True))


def _parts(name, dims, conc, out_shape, kid_mask):
    """(the input gradient's share of a backward's FLOPs (NaN: not a backward), the
    spatial dims a Winograd algorithm would tile ((0, 0): not a 2-D 3×3 convolution))."""
    part, tile = np.nan, (0, 0)
    try:
        if name in _CONV_BWD:
            m = _bwd_mask(name, conc, kid_mask)
            n = int(bool(m[0])) + int(bool(m[1]))
            part = int(bool(m[0])) / n if n else np.nan
            gi, wi = _CONV_BWD[name][1:3]
            y = dims[gi] if gi < len(dims) else None
            w = dims[wi] if wi < len(dims) else None
        elif name in _CONV:
            y, w = out_shape, dims[1] if len(dims) > 1 else None
        else:
            return part, tile
        if F._is_shape(y) and F._is_shape(w) and len(y) == 4 and len(w) == 4 and \
                w[2:] == [3, 3]:
            tile = (y[2], y[3])
    except (TypeError, ValueError, IndexError):
        pass
    return part, tile


def _backward_outputs(names: list, dims_ids: list, val: dict) -> dict:
    """(repr of input shape, repr of weight shape) → the grad_output shape of the
    backward convolutions with those shapes (False where two disagree)."""
    out: dict = {}
    for nm, di in dict.fromkeys(zip(names, dims_ids)):
        if nm not in _CONV_BWD:
            continue
        xi, gi, wi = _CONV_BWD[nm][:3]
        d = val[di]
        if xi is None or max(xi, gi, wi) >= len(d):
            continue
        k = (repr(d[xi]), repr(d[wi]))
        g = d[gi]
        if out.setdefault(k, g) != g:
            out[k] = False               # two outputs for one key: ambiguous
    return out


def _conv_output(name, dims, conc, next_dims, bwd_out):
    """A forward convolution's output shape: from its scalars, else the next sibling's
    ``[N, C_out, …]`` input, else a backward's grad_output for the same (input, weight)
    shapes; None where none says."""
    d = dims
    if len(d) < 2 or not F._is_shape(d[0]) or not F._is_shape(d[1]) or not d[1]:
        return None
    x, w = d[0], d[1]
    st, pd, dl, _tr = _CONV[name]
    got = F.conv_out_shape(x, w, F._ints(conc, st) if st is not None else None,
                           F._ints(conc, pd) if pd is not None else None,
                           F._ints(conc, dl) if dl is not None else None)
    if got is None and next_dims and F._is_shape(next_dims[0]):
        y = next_dims[0]
        if len(y) == len(x) and y[0] == x[0] and y[1] == w[0]:
            got = list(y)
    if got is None:
        g = bwd_out.get((repr(x), repr(w)))
        if g:
            got = list(g)
    return got


# Inductor's generated kernels: pointwise, reduction, persistent reduction
_COMPILED_KERNEL = re.compile(r"^triton_(poi|red|per)_")


def _cost(name, dims, types, conc, out_shape, kid_mask):
    """(Cost or None, whether its bytes count elements: the op has no ``Input type``,
    the kernels' element size is applied later)."""
    if _COMPILED_KERNEL.match(name):
        return F.compiled_kernel(dims, types), False
    dt, size = F.dtype_of(types)
    return _formula(name, dims, conc, out_shape, kid_mask, dt, size or 1), not size


def _formula(name, dims, conc, out_shape, kid_mask, dt, size):
    f = _GEMM.get(name)
    try:
        if f is not None:
            return f(dims, size, dt) if len(dims) >= 2 and all(
                F._is_shape(d) for d in dims[:3] if d is not None) else None
        if name in _CONV:
            if len(dims) < 2:
                return None
            tr = _CONV[name][3]
            if not isinstance(tr, bool):
                tr = bool(F._flag(conc, tr))
            return F.conv_forward(dims[0], dims[1], out_shape, size, dt, tr)
        if name in _CONV_BWD:
            xi, gi, wi, _mi, tr = _CONV_BWD[name]
            if max(gi, wi) >= len(dims):
                return None
            mask = _bwd_mask(name, conc, kid_mask)
            x = dims[xi] if xi is not None and xi < len(dims) else []
            if not isinstance(tr, bool):
                tr = bool(F._flag(conc, tr))
            if tr:
                # a transposed convolution's gradients cost its forward: input's count
                c = F.conv_forward(dims[gi], dims[wi], None, size, dt, True)
                if c is None:
                    return None
                return F.Cost(c.flops * (int(bool(mask[0])) + int(bool(mask[1]))), c.bytes,
                              True, dt)
            return F.conv_backward(x if F._is_shape(x) else [], dims[gi], dims[wi], mask,
                                   size, dt)
        if name in _ATTN:
            qi, ki, vi, ci, bwd, blhe = _ATTN[name]
            if max(qi, ki, vi) >= len(dims):
                return None
            if isinstance(ci, str):           # xformers' mask type: 1, 2 causal
                mt = F._ints(conc, int(ci.split(":")[1]))
                causal = bool(mt and mt[0] in (1, 2))
            else:
                causal = bool(F._flag(conc, ci))
            return F.attention(dims[qi], dims[ki], dims[vi], causal, bwd, blhe, size, dt)
        if name in F.WRITE_ONLY:
            return F.WRITE_ONLY[name](dims, size, dt)
        if name in F.ELEMENTWISE:
            return F.elementwise(dims, size, dt)
        if name in F.REDUCTION:
            return F.reduction(dims, size, dt)
    except (TypeError, ValueError, IndexError):
        return None                           # shapes of a form the formula does not take
    return None


_MATMUL_KERNEL = re.compile(
    r"gemm|gemv|matmul|conv|xmma|cutlass|cublas|wgrad|dgrad|fprop|winograd|fft|"
    r"flash|fmha|attention|attn|mma|cudnn|miopen|igemm|hipblas|rocblas|ck_|Cijk_", re.I)
# kernels of a convolution or GEMM that do no matrix work: layout and Winograd/FFT
# transforms, im2col, offset tables, a β-scaling or split-K reduction.  They take the
# op's bytes by their time, none of its FLOPs (a short GEMM beside a long transform
# would take the transform's share and run above the peak)
_NOT_MATMUL_KERNEL = re.compile(
    r"Offsets|nchwTo|nhwcTo|ToNchw|ToNhwc|transpose(?!.*(gemm|mma|conv))|"
    r"scalePackedTensor|im2col|col2im|ReduceSplitK|"
    r"generateWinogradTiles|winograd(Forward|Wgrad|Backward)(Data|Filter|Output|Delta)|"
    r"fft\w*(r2c|c2r)|flip_?filter|splitKreduce|reduce_?kernel|convertTensor|"
    r"tensorTransform|set_?kernel|fill_?kernel|memset", re.I)
# which gradient a convolution backward's kernel computes, where its name says
_DGRAD_KERNEL = re.compile(r"dgrad|bwd_?data|backward_?data|BackwardData", re.I)
_WGRAD_KERNEL = re.compile(r"wgrad|bwd_?filter|backward_?filter|BackwardFilter|bwd_?weight",
                           re.I)
# the output tile of a Winograd algorithm F(m×m, 3×3) its kernels' names tell
# (cuDNN's non-fused ``winograd…4x4`` kernels); a fused kernel's name does not tell it
# (``volta_scudnn_winograd_128x128_…_tile148t``): F(2×2, 3×3), the smallest saving a
# Winograd algorithm makes, so that its hardware count is an upper bound
_WINOGRAD = re.compile(r"winograd", re.I)
_WINOGRAD_TILE = re.compile(r"(?<![0-9])([246])x\1(?![0-9])")


def library_helper(name: str) -> bool:
    """Whether a kernel is a GEMM or convolution library's own non-matrix step (a cuDNN
    layout or Winograd transform, an offset table): work a compiler's fusion of the
    model's elementwise ops does not remove."""
    return bool(_MATMUL_KERNEL.search(name)) and bool(_NOT_MATMUL_KERNEL.search(name))


@functools.lru_cache(maxsize=8192)
def _name_facts(s: str) -> tuple:
    """What a kernel's name tells, once per distinct name (the regexes over long template
    names were most of the split's time): (matrix work, gradient part (1 input, 2
    weight, 0 unknown), Winograd output tile (0: not one), DTYPES index, element bytes)."""
    mm = bool(_MATMUL_KERNEL.search(s)) and not _NOT_MATMUL_KERNEL.search(s)
    w, d = bool(_WGRAD_KERNEL.search(s)), bool(_DGRAD_KERNEL.search(s))
    part = 2 if w and not d else 1 if d and not w else 0
    tile = 0
    if _WINOGRAD.search(s):
        m = _WINOGRAD_TILE.search(s)
        tile = int(m.group(1)) if m else 2
    dt, sz = UNKNOWN_DTYPE, 0
    for rx, name in _KERNEL_DTYPE:
        if rx.search(s):
            dt, sz = DTYPES.index(name), _KERNEL_SIZE[name]
            break
    return mm, part, tile, dt, sz


class _KernelNames:
    """The facts of each kernel's name (columns over the kernels given)."""

    def __init__(self, trace: Trace, kern: np.ndarray):
        u, inv = np.unique(trace.name[kern], return_inverse=True)
        inv = inv.reshape(-1)
        facts = [_name_facts(trace.strings[i]) for i in u.tolist()]
        cols = list(zip(*facts)) if facts else [()] * 5
        self.matmul = np.array(cols[0], bool)[inv] if facts else np.zeros(0, bool)
        self.part = np.array(cols[1], np.int8)[inv] if facts else np.zeros(0, np.int8)
        self.tile = np.array(cols[2], np.int64)[inv] if facts else np.zeros(0, np.int64)
        self.dtype = np.array(cols[3], np.int8)[inv] if facts else np.zeros(0, np.int8)
        self.size = np.array(cols[4], np.float64)[inv] if facts else np.zeros(0)


def launches_of(trace: Trace, events: np.ndarray) -> np.ndarray:
    """The runtime call that launched each device event (correlation links; −1 none)."""
    corr = trace.link_kind == LinkKind.CORRELATION
    src, dst = trace.link_src[corr].astype(np.int64), trace.link_dst[corr].astype(np.int64)
    o = np.argsort(dst, kind="stable")
    src, dst = src[o], dst[o]
    pos = np.minimum(np.searchsorted(dst, events), max(dst.shape[0] - 1, 0))
    linked = (dst.shape[0] > 0) & (dst[pos] == events)
    return np.where(linked, src[pos] if dst.shape[0] else -1, -1)


def _to_kernels(trace, events, h: HostCosts, launch=None, op_trace=None, instance=None):
    """Each device event's share of the outermost costed op that launched it.
    ``launch``: each event's launch, in ``op_trace`` (the trace ``h`` is of: a graph's
    capture, where the launches of a replay were recorded), by default its correlated
    runtime call in ``trace``; ``instance``: each event's replay, so that an op's
    figure is split over the kernels of one replay of it (None: one instance)."""
    op_ev, has, op_fl, op_by, elems = h.event, h.has, h.flops_shapes_or_arg, h.bytes, h.elems
    op_mm, op_dt, recompute = h.matmul, h.dtype, h.recompute
    out = blank(events, h.source)
    if not events.size:
        return out
    op_trace = trace if op_trace is None else op_trace
    if launch is None:
        launch = launches_of(trace, events)
    row = np.full(events.shape[0], -1, np.int64)
    ok = np.flatnonzero(launch >= 0)
    if ok.size:
        row[ok] = _ancestor_rows(op_trace, launch[ok], op_ev, has, outermost=True)
    hit = np.flatnonzero(row >= 0)
    if not hit.size:
        out.missing = NO_SHAPES if not has.any() else \
            "no device op was launched inside a host op with a cost formula"
        return out
    r = row[hit]
    kev = events[hit]
    # the unit a figure is split over: an op, or an op in one replay of its graph
    if instance is None:
        g, n_g, op_of = r, op_ev.shape[0], None
    else:
        keys, g = distinct_rows(np.asarray(instance, np.int64)[hit], r)
        n_g, op_of = keys.shape[0], keys[:, 1]
    kdur = trace.dur[kev].astype(np.float64)
    # a copy or fill the op launched (a workspace memset) takes none of its figure while
    # the op has a kernel
    is_kernel = trace.kind[kev] == EventKind.KERNEL
    has_kernel = np.bincount(g, weights=is_kernel, minlength=n_g) > 0
    takes_bytes = is_kernel | ~has_kernel[g]
    # a matmul-class op's FLOPs go to its GEMM/convolution/attention kernels where it
    # launched any (not to the bias add, the transforms or the copy beside them)
    kn = _KernelNames(trace, kev)
    mm_kernel = is_kernel & op_mm[r] & kn.matmul
    has_mm = np.bincount(g, weights=mm_kernel, minlength=n_g) > 0
    takes = takes_bytes & (mm_kernel | ~has_mm[g])
    # a convolution backward's parts: the input's gradient to the kernels computing it,
    # the weight's to theirs — known from the child op (``*_backward_input``) the kernel
    # was launched in, else from the kernel's name; by time over all its matmul kernels
    # where some kernel's part is unknown or a part has none
    frac_in = h.input_part[r] if h.input_part is not None else np.full(r.shape[0], np.nan)
    part = _kernel_parts(op_trace, launch[hit], h, kn.part, np.isfinite(frac_in))
    split = np.isfinite(frac_in) & mm_kernel
    n_mm = np.bincount(g, weights=mm_kernel, minlength=n_g)
    n_in = np.bincount(g, weights=split & (part == 1), minlength=n_g)
    n_w = np.bincount(g, weights=split & (part == 2), minlength=n_g)
    ip = h.input_part if h.input_part is not None else None
    if ip is not None and op_of is not None:
        ip = ip[op_of]
    fi_g = np.where(np.isfinite(ip), ip, 0.0) if ip is not None else np.zeros(n_g)
    by_part = (n_mm > 0) & (n_in + n_w == n_mm) & ((fi_g <= 0) | (n_in > 0)) & \
        ((fi_g >= 1) | (n_w > 0))
    if ip is not None:
        by_part &= np.isfinite(ip)
    kp = np.where(by_part[g], part, 0)
    group = g * 3 + kp                      # (op, part): the unit a figure is split over
    fl_share = _shares(group, takes, kdur, 3 * n_g)
    fi = fi_g[g]
    fl_share *= np.where(kp == 1, fi, np.where(kp == 2, 1.0 - fi, 1.0))
    fl = op_fl[r] * fl_share
    # a Winograd convolution does fewer multiplies than its direct count (the model
    # FLOPs): its kernels' hardware count is the tiled one
    hw = fl * _winograd_factor(kn.tile, group, h.tile_hw, r, 3 * n_g)
    out.hw_flops[hit] = hw
    out.flops[hit] = np.where(recompute[r], 0.0, fl)
    out.matmul[hit] = op_mm[r] & is_kernel & takes
    out.known[hit] = True
    kdt, ksz = kn.dtype, kn.size
    dt = np.where(op_dt[r] != UNKNOWN_DTYPE, op_dt[r], kdt)
    # an fp32 op whose kernel runs TF32 tensor cores (cuDNN's default on Ampere+)
    tf32 = DTYPES.index("tf32")
    dt = np.where((dt == DTYPES.index("fp32")) & (kdt == tf32), tf32, dt)
    out.dtype[hit] = np.where(out.matmul[hit], dt, UNKNOWN_DTYPE)
    # bytes: the formula's over every kernel of the op by time (a transform moves the
    # tensors too), at the kernels' element size where the op had no types (none where
    # neither says: a kernel name without its type)
    by_share = _shares(g, takes_bytes, kdur, n_g)
    out.bytes[hit] = op_by[r] * np.where(elems[r], ksz, 1.0) * by_share
    _copy_bytes(trace, events, out)
    _unknown_gemms(trace, events, out)
    out.missing = "" if out.known.all() else \
        "some device ops were launched by no host op with shapes and a cost formula"
    return out


# a GEMM or convolution kernel by its name alone, for kernels no costed op launched: the
# library spellings only (not "cudnn", whose batch-norm kernels do no matrix work)
_GEMM_KERNEL = re.compile(
    r"gemm|gemv|xmma|cutlass|Cijk_|wgrad|dgrad|fprop|convolve|winograd|flash_?(fwd|bwd|attn)|"
    r"fmha", re.I)


def _unknown_gemms(trace: Trace, events: np.ndarray, out: OpCosts) -> None:
    """Kernels with no figure whose names say GEMM or convolution (inside a compiled
    graph, or under an op without shapes) are still matrix work: flagged ``matmul`` with
    no FLOPs, so the MFU waterfall counts their time among the matmul-class ops (below
    peak: their FLOPs are unknown) instead of as busy time with no matmul work."""
    rest = np.flatnonzero(~out.known & (trace.kind[events] == EventKind.KERNEL))
    if not rest.size:
        return
    u, inv = np.unique(trace.name[events[rest]], return_inverse=True)
    gemm = np.array([bool(_GEMM_KERNEL.search(trace.strings[i]))
                     and not _NOT_MATMUL_KERNEL.search(trace.strings[i]) for i in u.tolist()],
                    bool)
    inv = inv.reshape(-1)
    out.matmul[rest] = gemm[inv]
    # the precision its name says (volta_sgemm: fp32), so fp32 GEMMs in a compiled graph
    # count toward the fp32-matmul finding too
    dt = np.array([_name_facts(trace.strings[i])[3] for i in u.tolist()], np.int8)
    out.dtype[rest] = np.where(gemm[inv], dt[inv], UNKNOWN_DTYPE)


def _shares(group: np.ndarray, takes: np.ndarray, dur: np.ndarray, n: int) -> np.ndarray:
    """Each row's share of its group's figure: by duration among the rows that take
    one (evenly where all of them last 0)."""
    d = np.where(takes, dur, 0.0)
    tot = np.bincount(group, weights=d, minlength=n)[group]
    cnt = np.bincount(group, weights=takes, minlength=n)[group]
    return np.where(tot > 0, d / np.where(tot > 0, tot, 1.0), takes / np.maximum(cnt, 1.0))


def _kernel_parts(trace, launch, h: HostCosts, by_name, want) -> np.ndarray:
    """Which gradient each kernel computes (1 input, 2 weight, 0 unknown): the
    innermost ``*_backward_input``/``*_backward_weight`` op around its launch, else its
    name (``by_name``); only for the kernels of a backward (``want``)."""
    part = np.where(want, by_name, 0).astype(np.int8)
    child = h.child_part
    w = np.flatnonzero(want)
    if child is not None and child.any() and w.size:
        c = _ancestor_rows(trace, launch[w], h.event, child > 0, outermost=False)
        part[w] = np.where(c >= 0, child[np.maximum(c, 0)], part[w])
    return part


def _winograd_factor(m, group, tile_hw, r, n) -> np.ndarray:
    """Hardware ÷ model FLOPs of each kernel: for a (op, part) whose kernels run a
    Winograd F(m×m, 3×3) (its transforms' or GEMM's names say so), the (m+2)² products
    per m×m output tile and (input, output) channel pair, over whole tiles, against the
    direct count's 9 per output: (m+2)²·⌈H/m⌉·⌈W/m⌉ ÷ (9·H·W); 1 elsewhere."""
    f = np.ones(m.shape[0])
    if tile_hw is None or not m.any():
        return f
    gm = np.zeros(n, np.int64)
    np.maximum.at(gm, group, m)
    m = gm[group]
    hh, ww = tile_hw[r, 0], tile_hw[r, 1]
    ok = (m > 0) & (hh > 0) & (ww > 0)
    ms = np.maximum(m, 1)
    tiles = -(-hh // ms) * -(-ww // ms)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.where(ok, (ms + 2.0) ** 2 * tiles / (9.0 * np.maximum(hh * ww, 1)), 1.0)
    return f


def _copy_bytes(trace: Trace, events: np.ndarray, out: OpCosts) -> None:
    """Copies and fills: the bytes they moved (Kineto's ``bytes`` arg), no FLOPs."""
    st = trace.stats.get("bytes")
    cp = np.flatnonzero(np.isin(trace.kind[events], (EventKind.MEMCPY, EventKind.MEMSET)))
    if st is None or not cp.size:
        return
    v, has = st.lookup(events[cp])
    out.bytes[cp[has]] = v[has].astype(np.float64)
    out.known[cp[has]] = True
