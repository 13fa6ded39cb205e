"""FLOPs and bytes of XLA ops from the HLO of their program (``/host:metadata``'s Hlo
Protos, kept as bytes by the XSpace reader), where the ops carry no cost figures of
their own (GPU XSpaces, XLA:CPU).

XLA's cost rules (``HloCostAnalysis``), the parts that carry the work:
- ``dot``: 2 × output elements × the contracting dimensions' product;
- ``convolution``: 2 × batch × input features per group × output features × the
  (kernel tap, output position) pairs of each spatial dimension that read the input
  (taps in the padding do no work); without a window, 2 × output elements × kernel
  spatial product × input features per group;
- elementwise arithmetic: 1 per output element; ``reduce``: input elements − output
  elements (each output element's inputs less one, as xprof counts it too);
- ``fusion``: the sum of its fused instructions' FLOPs; its bytes are its operands' and
  its output's (what the fused kernel reads and writes), as for any other op.
Custom calls are opaque to that model: cuBLAS GEMMs, cuDNN convolutions (forward and
both gradients) and cuDNN fused attention (``__cudnn$fmha…``, forward and backward) are
estimated from their shapes (``OpCosts.estimated``); others have no figure (``known``
false, their targets named in ``missing``).
"""
from __future__ import annotations

import math
import re

import numpy as np
from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError

from ...trace.hlo import message_class
from ...trace.extension import native_fn
from ...trace.model import Trace, lookup_together
from .opcosts import DTYPES, UNKNOWN_DTYPE, OpCosts, distinct_rows, per_trace


def _classes():
    F = descriptor_pb2.FieldDescriptorProto
    M, I64, I32, S, B = F.TYPE_MESSAGE, F.TYPE_INT64, F.TYPE_INT32, F.TYPE_STRING, F.TYPE_BYTES
    spec = {
        "HloProto": [("hlo_module", 1, M, "HloModuleProto", False)],
        "HloModuleProto": [("computations", 3, M, "HloComputationProto", True)],
        "HloComputationProto": [("name", 1, S, None, False),
                                ("instructions", 2, M, "HloInstructionProto", True),
                                ("id", 5, I64, None, False)],
        "HloInstructionProto": [
            ("name", 1, S, None, False), ("opcode", 2, S, None, False),
            ("shape", 3, M, "ShapeProto", False), ("window", 15, M, "Window", False),
            ("convolution_dimension_numbers", 16, M, "ConvDims", False),
            ("custom_call_target", 28, S, None, False),
            ("dot_dimension_numbers", 30, M, "DotDims", False),
            ("id", 35, I64, None, False), ("operand_ids", 36, I64, None, True),
            ("called_computation_ids", 38, I64, None, True),
            ("backend_config", 43, B, None, False),
            ("feature_group_count", 50, I64, None, False),
            ("batch_group_count", 58, I64, None, False)],
        "ShapeProto": [("element_type", 2, I32, None, False),
                       ("dimensions", 3, I64, None, True),
                       ("tuple_shapes", 4, M, "ShapeProto", True)],
        "Window": [("dimensions", 1, M, "WindowDimension", True)],
        "WindowDimension": [("size", 1, I64, None, False), ("stride", 2, I64, None, False),
                            ("padding_low", 3, I64, None, False),
                            ("padding_high", 4, I64, None, False),
                            ("window_dilation", 5, I64, None, False),
                            ("base_dilation", 6, I64, None, False)],
        "ConvDims": [("kernel_input_feature_dimension", 3, I64, None, False),
                     ("kernel_output_feature_dimension", 4, I64, None, False),
                     ("kernel_spatial_dimensions", 6, I64, None, True),
                     ("input_batch_dimension", 7, I64, None, False),
                     ("input_feature_dimension", 8, I64, None, False),
                     ("output_batch_dimension", 9, I64, None, False),
                     ("output_feature_dimension", 10, I64, None, False),
                     ("input_spatial_dimensions", 11, I64, None, True),
                     ("output_spatial_dimensions", 12, I64, None, True)],
        "DotDims": [("lhs_contracting_dimensions", 1, I64, None, True),
                    ("rhs_contracting_dimensions", 2, I64, None, True),
                    ("lhs_batch_dimensions", 3, I64, None, True),
                    ("rhs_batch_dimensions", 4, I64, None, True)],
    }
    return message_class("tb_perfdiag.hlocost", spec, "HloProto")


HloProto = _classes()

# xla.PrimitiveType → (bytes per element, DTYPES name)
_PRIMITIVE = {1: (1, ""), 2: (1, "int8"), 3: (2, ""), 4: (4, ""), 5: (8, ""), 6: (1, "int8"),
              7: (2, ""), 8: (4, ""), 9: (8, ""), 10: (2, "fp16"), 11: (4, "fp32"),
              12: (8, "fp64"), 15: (8, ""), 16: (2, "bf16"), 18: (16, ""), 19: (1, "fp8"),
              20: (1, "fp8"), 23: (1, "fp8"), 24: (1, "fp8"), 25: (1, "fp8"), 28: (1, "fp8")}
# one FLOP per output element (XLA counts transcendentals apart: not here)
_ELEMENTWISE = frozenset((
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "negate", "abs",
    "compare", "select", "and", "or", "xor", "not", "remainder", "clamp", "sign", "floor",
    "ceil", "round-nearest-afz", "round-nearest-even"))
# the opcodes whose figure reads their operands
_WITH_OPERANDS = frozenset(("dot", "convolution", "custom-call", "reduce"))
_GEMM_TARGET = re.compile(r"gemm|matmul", re.I)
_CONV_TARGET = re.compile(r"cudnn\$convForward|cudnn\$convBiasActivationForward", re.I)
# cuDNN's gradients: the dimension numbers and window are the forward convolution's,
# whose output is the backward-input call's operand 0 (dY, kernel operand 1) and the
# backward-filter call's operand 1 (dY, kernel its result)
_CONV_BWD_INPUT_TARGET = re.compile(r"cudnn\$convBackwardInput", re.I)
_CONV_BWD_FILTER_TARGET = re.compile(r"cudnn\$convBackwardFilter", re.I)
# cuDNN fused multi-head attention, as XLA's fMHA rewriter spells its targets
# (``__cudnn$fmhaSoftmax``, ``…ScaleBiasSoftmaxDropout``, ``…Backward``, ``…F8``; early
# XLA wrote ``__cudnn$fhma…``)
_FMHA_TARGET = re.compile(r"cudnn\$f(mh|hm)a", re.I)


def _elements(shape) -> int:
    if len(shape.tuple_shapes):
        return 0
    return math.prod(shape.dimensions)


def _bytes(shape) -> int:
    if len(shape.tuple_shapes):
        return sum(_bytes(s) for s in shape.tuple_shapes)
    return _elements(shape) * _PRIMITIVE.get(shape.element_type, (0, ""))[0]


def _array(shape):
    """The first array of a (tuple) shape: a custom call's result beside its workspace."""
    while len(shape.tuple_shapes):
        shape = shape.tuple_shapes[0]
    return shape


class _Module:
    """Per instruction name, on first ask: (flops, bytes, matmul, dtype index, estimated,
    opaque custom-call target).  Only the instructions that ran are costed (a fusion's
    fused ones through it): costing all 30 k instructions of a module was 0.7 s."""

    def __init__(self, raw: bytes):
        self._at: dict = {}             # name → (instruction, its computation's by-id map)
        self._got: dict = {}
        self._comps: dict = {}
        self._flops_of: dict = {}
        self._nbytes: dict = {}         # instruction id → its shape's bytes
        try:
            msg = HloProto.FromString(raw)
        except DecodeError:
            return
        self.msg = msg
        self._comps = {c.id: c for c in msg.hlo_module.computations}
        self._by_id: dict = {}          # computation id → {instruction id: instruction}
        for cid, c in self._comps.items():
            for ins in c.instructions:
                self._at[ins.name] = (ins, cid)

    @classmethod
    def parsed(cls, raw: bytes) -> "_Module":
        """The module parsed, its instructions not indexed by name (``_NativeModule``
        reads the few it needs by position)."""
        self = cls.__new__(cls)
        self._at, self._got, self._flops_of, self._nbytes, self._by_id = {}, {}, {}, {}, {}
        try:
            self.msg = HloProto.FromString(raw)
        except DecodeError:
            self.msg, self._comps = None, {}
            return self
        self._comps = {c.id: c for c in self.msg.hlo_module.computations}
        return self

    def _instructions(self, cid: int) -> dict:
        got = self._by_id.get(cid)
        if got is None:
            got = self._by_id[cid] = {i.id: i for i in self._comps[cid].instructions}
        return got

    def get(self, name: str):
        got = self._got.get(name)
        if got is not None or name not in self._at:
            return got
        ins, cid = self._at[name]
        by_id = self._instructions(cid)
        fl, mm, dt, est = self._flops(ins, by_id)
        nb = self._nbytes
        by = 0
        for i in (ins.id, *ins.operand_ids):     # each shape's bytes counted once a module
            b = nb.get(i)
            if b is None:
                o = by_id.get(i)
                b = nb[i] = _bytes(o.shape) if o is not None else 0
            by += b
        # a custom call with no estimate has no figure (not 0 FLOPs): its time is the
        # busy time without one, its target what to name
        opaque = ins.custom_call_target if ins.opcode == "custom-call" and not est else ""
        got = self._got[name] = (fl, float(by), mm, dt, est, opaque)
        return got

    def _computation_flops(self, cid: int):
        got = self._flops_of.get(cid)
        if got is not None:
            return got
        self._flops_of[cid] = (0.0, False, UNKNOWN_DTYPE)      # a cycle counts nothing
        c = self._comps.get(cid)
        fl, mm, dt = 0.0, False, UNKNOWN_DTYPE
        if c is not None:
            by_id = self._instructions(cid)
            for ins in c.instructions:
                f, m, d, _ = self._flops(ins, by_id)
                fl += f
                if m and not mm:
                    mm, dt = True, d
        self._flops_of[cid] = (fl, mm, dt)
        return self._flops_of[cid]

    def _flops(self, ins, by_id):
        """(flops, matmul, dtype index, estimated) of one instruction."""
        op = ins.opcode
        if op in _ELEMENTWISE:
            return float(_elements(ins.shape)), False, UNKNOWN_DTYPE, False
        if op not in _WITH_OPERANDS:
            if op == "fusion" and len(ins.called_computation_ids):
                fl, mm, dt = self._computation_flops(ins.called_computation_ids[0])
                return fl, mm, dt, False
            return 0.0, False, UNKNOWN_DTYPE, False
        ops = [by_id[o] for o in ins.operand_ids if o in by_id]
        out = _elements(ins.shape)
        if op == "dot" and len(ops) >= 2:
            lhs = list(ops[0].shape.dimensions)
            contracting = ins.dot_dimension_numbers.lhs_contracting_dimensions
            k = int(np.prod([lhs[d] for d in contracting if d < len(lhs)], dtype=np.int64))
            return 2.0 * out * k, True, _dtype(ops[0].shape), False
        if op == "convolution" and len(ops) >= 2:
            return (_conv_flops(ins, ops, out, fwd=(ops[0].shape, ops[1].shape, ins.shape)),
                    True, _dtype(ops[0].shape), False)
        if op == "custom-call" and len(ops) >= 2:
            target = ins.custom_call_target
            res = _array(ins.shape)
            if _FMHA_TARGET.search(target):
                fl = _fmha_flops(target, ops, ins.backend_config)
                if fl is not None:
                    return fl, True, _dtype(ops[0].shape), True
                return 0.0, False, UNKNOWN_DTYPE, False
            if _GEMM_TARGET.search(target):
                lhs = list(ops[0].shape.dimensions)
                dims = list(res.dimensions)
                if len(lhs) >= 2 and len(dims) >= 2:
                    # the contracting side of the lhs: the one the result does not keep
                    k = lhs[-1] if lhs[-2] == dims[-2] else lhs[-2]
                    return 2.0 * _elements(res) * k, True, _dtype(ops[0].shape), True
            # the forward's (input, kernel, output) shapes: a gradient does as many
            # multiplies as its forward, over the same valid taps
            if _CONV_TARGET.search(target):
                return (_conv_flops(ins, ops, _elements(res),
                                    fwd=(ops[0].shape, ops[1].shape, res)),
                        True, _dtype(ops[0].shape), True)
            if _CONV_BWD_INPUT_TARGET.search(target):
                return (_conv_flops(ins, ops, _elements(ops[0].shape),
                                    fwd=(res, ops[1].shape, ops[0].shape)), True,
                        _dtype(ops[0].shape), True)
            if _CONV_BWD_FILTER_TARGET.search(target):
                return (_conv_flops(ins, ops, _elements(ops[1].shape), kernel=res,
                                    fwd=(ops[0].shape, res, ops[1].shape)), True,
                        _dtype(ops[0].shape), True)
            return 0.0, False, UNKNOWN_DTYPE, False
        if op == "reduce" and ops:
            # XLA's rule (and xprof's): each output element takes (its inputs − 1) additions
            return (float(max(_elements(ops[0].shape) - _elements(_array(ins.shape)), 0)),
                    False, UNKNOWN_DTYPE, False)
        return 0.0, False, UNKNOWN_DTYPE, False


class _NativeModule:
    """``_Module``'s figures for every instruction at once, from the native walk of the
    proto (``_native.hlo_instructions``): bytes, elementwise and reduce FLOPs, fusions
    as their computations' sums, by array passes; the rules that read more of an
    instruction (dot, convolution, custom call) through upb, for those alone."""

    def __init__(self, raw: bytes, walk):
        c = walk(raw, _ELEMENT_SIZES)
        n = c["n"]
        i32 = lambda k: np.frombuffer(c[k], np.int32)  # noqa: E731
        i64 = lambda k: np.frombuffer(c[k], np.int64)  # noqa: E731
        comp, pos, etype = i32("comp"), i32("pos"), i32("etype")
        ids, called, elements = i64("id"), i64("called"), i64("elements")
        own, op_off, op_ids, comp_id = i64("nbytes"), i64("op_off"), i64("op_ids"), \
            i64("comp_id")
        self.row = {name: k for k, name in enumerate(c["names"])}
        opcodes = c["opcodes"]
        # each operand as the row of its instruction in the consumer's computation
        n_op = np.diff(op_off) if n else np.zeros(0, np.int64)
        consumer = np.repeat(np.arange(n), n_op)
        u = np.unique(ids)
        rank = np.searchsorted(u, ids)
        key = comp.astype(np.int64) * max(n, 1) + rank
        o = np.argsort(key, kind="stable")
        r_op = np.minimum(np.searchsorted(u, op_ids), max(u.shape[0] - 1, 0))
        ok = (u.shape[0] > 0) & (u[r_op] == op_ids) if op_ids.size else np.zeros(0, bool)
        k_op = comp[consumer].astype(np.int64) * max(n, 1) + r_op
        at = np.minimum(np.searchsorted(key[o], k_op), max(n - 1, 0))
        ok &= key[o][at] == k_op if n else ok
        operand = np.where(ok, o[at] if n else 0, -1)
        by = own.astype(np.float64) + np.bincount(
            consumer[ok], weights=own[operand[ok]].astype(np.float64), minlength=n)[:n]
        # FLOPs: elementwise and reduce by array passes, the rest by their rules
        op_code = {o_: j for j, o_ in enumerate(sorted(set(opcodes)))}
        code = np.array([op_code[o_] for o_ in opcodes], np.int32) if n else \
            np.zeros(0, np.int32)
        names = sorted(op_code, key=op_code.get)
        is_ew = np.isin(code, [op_code[x] for x in _ELEMENTWISE if x in op_code])
        fl = np.where(is_ew, elements, 0).astype(np.float64)
        first = np.full(n, -1, np.int64)
        has = n_op > 0
        first[has] = operand[op_off[:-1][has]] if n else first[has]
        red = (code == op_code.get("reduce", -1)) & (first >= 0)
        # XLA's rule (and xprof's): each output element takes (its inputs − 1) additions
        fl[red] = np.maximum(elements[first[red]] - elements[red], 0)
        mm = np.zeros(n, bool)
        dt = np.full(n, UNKNOWN_DTYPE, np.int8)
        est = np.zeros(n, bool)
        self.opaque = np.full(n, "", object)
        ruled = np.flatnonzero(np.isin(code, [op_code[x] for x in ("dot", "convolution",
                                                                   "custom-call")
                                              if x in op_code]))
        if ruled.size:
            mod = _Module.parsed(raw)
            comps = mod.msg.hlo_module.computations if mod.msg is not None else []
            for k in ruled.tolist():        # one per matmul-class instruction, not per op
                ci = int(comp[k])
                ins = comps[ci].instructions[int(pos[k])]
                f, m, d, e = mod._flops(ins, mod._instructions(comps[ci].id))
                fl[k], mm[k], dt[k], est[k] = f, m, d, e
                if ins.opcode == "custom-call" and not e:
                    self.opaque[k] = ins.custom_call_target
        # a fusion: its computation's sums (fusions within fusions: a pass per level)
        fus = np.flatnonzero((code == op_code.get("fusion", -1)) & (called >= 0))
        n_c = comp_id.shape[0]
        if fus.size and n_c:
            # the called computation's index (its place in the proto, as ``comp``)
            by_cid = np.argsort(comp_id, kind="stable")
            j = by_cid[np.minimum(np.searchsorted(comp_id[by_cid], called[fus]), n_c - 1)]
            target = np.where(comp_id[j] == called[fus], j, -1)
            ok_t, tgt = target >= 0, np.maximum(target, 0)
            first_mm = np.empty(n_c, np.int64)
            for _ in range(16):
                c_fl = np.bincount(comp, weights=fl, minlength=n_c)[:n_c]
                first_mm[:] = n             # the computation's first matmul-class row
                mmk = np.flatnonzero(mm)
                np.minimum.at(first_mm, comp[mmk], mmk)
                new_fl = np.where(ok_t, c_fl[tgt], 0.0)
                got = first_mm[tgt]
                new_mm = ok_t & (got < n)
                new_dt = np.where(new_mm, dt[np.minimum(got, n - 1)], UNKNOWN_DTYPE)
                if (np.array_equal(new_fl, fl[fus]) and np.array_equal(new_mm, mm[fus])
                        and np.array_equal(new_dt, dt[fus])):
                    break
                fl[fus], mm[fus], dt[fus] = new_fl, new_mm, new_dt
        self.fl, self.by, self.mm, self.dt, self.est = fl, by, mm, dt, est

    def get(self, name: str):
        k = self.row.get(name)
        if k is None:
            return None
        return (float(self.fl[k]), float(self.by[k]), bool(self.mm[k]), int(self.dt[k]),
                bool(self.est[k]), self.opaque[k])

    def rows_of(self, strings, ids: np.ndarray) -> np.ndarray:
        """The instruction row of each of ``ids`` (string ids of ``strings``, the trace's;
        −1 where none): through a table over the string ids, each name read once for
        all the blocks of ops a large trace is costed in."""
        lut = getattr(self, "_lut", None)
        if lut is None or lut.shape[0] < len(strings):
            self._lut = lut = np.full(len(strings), -2, np.int64)   # −2: not looked at yet
        r = lut[ids]
        new = np.unique(ids[r == -2])
        if new.size:
            lut[new] = [self.row.get(nm, -1) for nm in strings.take(new)]
            r = lut[ids]
        return r


# bytes per element by xla.PrimitiveType, as the native walk reads them
_ELEMENT_SIZES = bytes(min(_PRIMITIVE.get(t, (0, ""))[0], 255) for t in range(64))


def _module_of(raw: bytes):
    """The costs of one module's instructions: the native walk where the extension is
    there, else upb, instruction by instruction."""
    walk = native_fn("hlo_instructions")
    if walk is not None:
        try:
            return _NativeModule(raw, walk)
        except ValueError:              # a proto the walk refuses: upb says what it can
            pass
    return _Module(raw)


def _dtype(shape) -> int:
    name = _PRIMITIVE.get(shape.element_type, (0, ""))[1]
    return DTYPES.index(name) if name else UNKNOWN_DTYPE


def _valid_taps(k: int, o: int, n: int, w) -> int:
    """XLA's count of (kernel tap, output position) pairs of one spatial dimension that
    read the input: taps in the padding or in a base dilation's holes do no work
    (``HloCostAnalysis::HandleConvolution``)."""
    stride, wdil, bdil = max(w.stride, 1), max(w.window_dilation, 1), max(w.base_dilation, 1)
    u = np.arange(o, dtype=np.int64)[:, None] * stride - w.padding_low + \
        np.arange(k, dtype=np.int64)[None, :] * wdil
    at = u // bdil
    return int(np.count_nonzero((u % bdil == 0) & (at >= 0) & (at < n)))


def _xla_conv_flops(ins, fwd) -> float | None:
    """2 × batch (per batch group) × input features per group × output features × the
    valid taps of every spatial dimension, from the forward's (input, kernel, output)
    shapes; None where the dimension numbers or window do not say enough."""
    dn, win = ins.convolution_dimension_numbers, list(ins.window.dimensions)
    lhs, kern, out = (list(_array(x).dimensions) for x in fwd)
    sp = (list(dn.input_spatial_dimensions), list(dn.kernel_spatial_dimensions),
          list(dn.output_spatial_dimensions))
    n_sp = len(sp[1])
    if not (len(sp[0]) == len(sp[2]) == n_sp == len(win)) or not n_sp:
        return None
    idx = [dn.input_batch_dimension, dn.kernel_input_feature_dimension,
           dn.output_feature_dimension]
    if any(d >= len(x) for d, x in zip(idx, (lhs, kern, out))) or \
            any(d >= len(x) for i, x in zip(sp, (lhs, kern, out)) for d in i):
        return None
    taps = 1
    for a, b, c, w in zip(*sp, win):
        taps *= _valid_taps(kern[b], out[c], lhs[a], w)
    batch = lhs[dn.input_batch_dimension] // max(ins.batch_group_count, 1)
    return 2.0 * batch * kern[dn.kernel_input_feature_dimension] * \
        out[dn.output_feature_dimension] * taps


def _conv_flops(ins, ops, out: int, kernel=None, fwd=None) -> float:
    """XLA's rule where the instruction carries its window and dimension numbers
    (``_xla_conv_flops``); else 2 × the forward's outputs × kernel spatial size × input
    features per group, the kernel operand 1 unless given (a backward-filter call's
    result)."""
    got = _xla_conv_flops(ins, fwd) if fwd is not None else None
    if got is not None:
        return got
    kern = list((kernel if kernel is not None else ops[1].shape).dimensions)
    dn = ins.convolution_dimension_numbers
    spatial = [kern[d] for d in dn.kernel_spatial_dimensions if d < len(kern)]
    cin = kern[dn.kernel_input_feature_dimension] if dn.kernel_input_feature_dimension < \
        len(kern) else 1
    return 2.0 * out * float(np.prod(spatial, dtype=np.int64) if spatial else 1) * cin


def _fmha_config(raw: bytes) -> dict:
    """The ``CudnnfMHABackendConfig`` of a custom call's backend config (JSON text: a
    ``GpuBackendConfig`` holding it, or, in older XLA, the config itself); {} where none."""
    import json
    try:
        cfg = json.loads(raw.decode("utf-8")) if raw else {}
    except (UnicodeDecodeError, ValueError):
        return {}
    if not isinstance(cfg, dict):
        return {}
    inner = cfg.get("cudnn_fmha_backend_config", cfg.get("cudnnFmhaBackendConfig"))
    return inner if isinstance(inner, dict) else cfg


def _ints(v) -> list:
    try:
        return [int(x) for x in (v or [])]          # proto JSON writes int64 as text
    except (TypeError, ValueError):
        return []


def _fmha_flops(target: str, ops, backend_config: bytes) -> float | None:
    """cuDNN fused attention from its operands Q, K, V (the first three, forward and
    backward): QKᵀ and PV, 2·B·H·Sq·Skv·(D + Dv) forward; backward 2.5× (dQ, dK, dV and
    the recomputed S); a causal mask keeps its pairs (top-left, as PyTorch's).

    B·H are Q's batch dimensions as the config's dot dimension numbers say (forward
    ``bmm1``'s lhs, backward ``bmm1_grad_gemm1``'s rhs; else all but the last two); D is
    Q's contracting (else last) dimension; Sq, Skv and Dv follow from the operands' sizes,
    whatever the order of K's dimensions (XLA may pass it transposed)."""
    from .torch_formulas import causal_fraction
    if len(ops) < 3:
        return None
    q, k, v = (list(o.shape.dimensions) for o in ops[:3])
    if len(q) < 3 or not k or not v:
        return None
    cfg = _fmha_config(backend_config)
    bwd = "backward" in target.lower()
    bd, cd = [], []
    fwd_dn = cfg.get("bmm1_dot_dimension_numbers")
    if isinstance(fwd_dn, dict):
        bd = _ints(fwd_dn.get("lhs_batch_dimensions"))
        cd = _ints(fwd_dn.get("lhs_contracting_dimensions"))
    if not bd:
        for key in ("bmm1_grad_gemm1_dot_dimension_numbers",
                    "bmm1_grad_gemm2_dot_dimension_numbers"):
            dn = cfg.get(key)
            if isinstance(dn, dict) and _ints(dn.get("rhs_batch_dimensions")):
                bd = _ints(dn.get("rhs_batch_dimensions"))
                break
    if not bd or any(d >= len(q) for d in bd) or len(bd) != len(q) - 2:
        bd = list(range(len(q) - 2))
    rest = [i for i in range(len(q)) if i not in bd]
    di = cd[0] if len(cd) == 1 and cd[0] in rest else rest[-1]
    bh = int(np.prod([q[i] for i in bd], dtype=np.int64))
    d = q[di]
    nq, nk, nv = (int(np.prod(x, dtype=np.int64)) for x in (q, k, v))
    if bh <= 0 or d <= 0 or nk % (bh * d):
        return None
    sq, skv = nq // (bh * d), nk // (bh * d)
    if skv <= 0 or nv % (bh * skv):
        return None
    dv = nv // (bh * skv)
    fl = 2.0 * bh * sq * skv * (d + dv)
    mask = str(cfg.get("mask_type", "")).upper()
    # CAUSAL = 2, PADDING_CAUSAL = 3 where the enum is written as a number
    if "CAUSAL" in mask or mask in ("2", "3") or cfg.get("is_causal_mask") in (True, "true"):
        fl *= causal_fraction(sq, skv)
    return fl * (2.5 if bwd else 1.0)


_MODULE_NAME = re.compile(r"^(.*)\((-?\d+)\)$")


def _run_sizes(trace: Trace, events: np.ndarray, key: np.ndarray) -> np.ndarray | None:
    """Per event, the number of kernels of the run it is in, which share its HLO op's
    figure (None where every event is a run of its own).  On a GPU one op (a cuDNN
    convolution, a split-K GEMM) may run as several kernels back to back on its stream,
    each naming the op: a run of consecutive kernels of one op on one track shares one
    figure.  An XLA:CPU or TPU op event is one run of the op."""
    dev = trace.track_device[trace.track[events]]
    gpu = np.array([d.kind == "gpu" for d in trace.devices], bool)
    on = np.flatnonzero(gpu[dev]) if gpu.any() else np.zeros(0, np.int64)
    if not on.size:
        return None
    ev = events[on]
    # track, then time order: the events' own order, where they come sorted
    o = on if (ev[1:] >= ev[:-1]).all() else on[np.argsort(ev, kind="stable")]
    trk, k = trace.track[events[o]], key[o]
    start = np.ones(o.shape[0], bool)
    start[1:] = (trk[1:] != trk[:-1]) | (k[1:] != k[:-1])
    run = np.cumsum(start) - 1
    size = np.bincount(run)
    if size.max() <= 1:
        return None
    out = np.ones(events.shape[0], np.int32)
    out[o] = size[run]
    return out


def from_hlo(trace: Trace, events: np.ndarray) -> OpCosts | None:
    """Costs of the ops from their programs' HLO; None where the capture has none."""
    protos = trace.metadata.get("hlo_protos")
    op = trace.stats.get("hlo_op")
    if not protos or op is None or events.shape[0] == 0:
        return None
    by_program, by_module = {}, {}
    for name, raw in protos.items():
        m = _MODULE_NAME.match(name)
        mod, prog = (m.group(1), int(m.group(2))) if m else (name, None)
        if prog is not None:
            by_program[prog % (1 << 64)] = raw
        by_module.setdefault(mod, raw)
    # the op's program, module and name (their stats share the ops' events: one search)
    cols = [np.full(events.shape[0], -1, np.int64) if got is None else
            np.where(got[1], got[0], -1)
            for got in lookup_together([trace.stats.get("program_id"),
                                        trace.stats.get("hlo_module"), op], events)]
    uniq, inv = distinct_rows(*cols)
    del cols
    modules = per_trace(trace, "hlo_modules", lambda _t: {})    # parsed once per trace
    nk = uniq.shape[0]
    fl, by = np.zeros(nk), np.zeros(nk)
    mm, est, known = np.zeros(nk, bool), np.zeros(nk, bool), np.zeros(nk, bool)
    dt = np.full(nk, UNKNOWN_DTYPE, np.int8)
    opaque: set = set()
    # per module (a few per trace): its ops' figures
    mods, of_mod = distinct_rows(uniq[:, 0], uniq[:, 1])
    for j, (pg, mc) in enumerate(mods.tolist()):
        raw = by_program.get(pg % (1 << 64)) if pg != -1 else None
        if raw is None and mc >= 0:
            raw = by_module.get(trace.strings[mc])
        if raw is None:
            continue
        mod = modules.get(id(raw))
        if mod is None:
            mod = modules[id(raw)] = _module_of(raw)
        ks = np.flatnonzero((of_mod == j) & (uniq[:, 2] >= 0))
        if isinstance(mod, _NativeModule):
            r = mod.rows_of(trace.strings, uniq[ks, 2])
            hit = r >= 0
            ks, r = ks[hit], r[hit]
            fl[ks], by[ks], mm[ks], est[ks] = mod.fl[r], mod.by[r], mod.mm[r], mod.est[r]
            tg = mod.opaque[r]
            costed = tg == ""
            opaque.update(tg[~costed].tolist())
            dt[ks[costed]] = mod.dt[r[costed]]
            known[ks[costed]] = True
            continue
        for k, name in zip(ks.tolist(), trace.strings.take(uniq[ks, 2])):   # per op, not event
            got = mod.get(name)
            if got is None:
                continue
            fl[k], by[k], mm[k], d, est[k], target = got
            if target:
                opaque.add(target)
                continue
            dt[k] = d
            known[k] = True
    if not known.any() and not opaque:
        return None
    # held per distinct (op, kernels in its run): a run's kernels share the op's figure
    size = _run_sizes(trace, events, inv)
    if size is not None:
        rows, inv = distinct_rows(inv, size)
        k, per = rows[:, 0], 1.0 / rows[:, 1]
        fl, by, mm, est, known, dt = fl[k] * per, by[k] * per, mm[k], est[k], known[k], dt[k]
    # a custom call's figure from its shapes stays in ``flops``, flagged ``estimated``:
    # callers keep it apart from the cost model's
    return OpCosts(events, fl, fl.copy(), by, est, mm,
                   np.where(mm, dt, UNKNOWN_DTYPE).astype(np.int8), known,
                   "hlo", _missing(known, opaque), code=inv.reshape(-1))


def _missing(known: np.ndarray, opaque: set) -> str:
    if known.all():
        return ""
    if not opaque:
        return "some ops are in no HLO proto of the capture"
    names = sorted(opaque)
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return ("some ops are custom calls opaque to XLA's cost model with no estimate from "
            "their shapes: " + ", ".join(names[:3]) + more)
