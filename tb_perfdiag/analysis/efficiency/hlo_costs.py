"""FLOPs and bytes of XLA ops from the HLO of their program (``/host:metadata``'s Hlo
Protos, kept as bytes by the XSpace reader), where the ops carry no cost figures of
their own (GPU XSpaces, XLA:CPU).

XLA's cost rules (``HloCostAnalysis``), the parts that carry the work:
- ``dot``: 2 × output elements × the contracting dimensions' product;
- ``convolution``: 2 × output elements × kernel spatial product × input features per
  group (the kernel's input-feature dimension);
- elementwise arithmetic: 1 per output element; ``reduce``: 1 per input element;
- ``fusion``: the sum of its fused instructions' FLOPs; its bytes are its operands' and
  its output's (what the fused kernel reads and writes), as for any other op.
Custom calls are opaque to that model: cuBLAS GEMMs, cuDNN convolutions (forward and
both gradients) and cuDNN fused attention (``__cudnn$fmha…``, forward and backward) are
estimated from their shapes (``OpCosts.estimated``); others have no figure (``known``
false, their targets named in ``missing``).
"""
from __future__ import annotations

import re

import numpy as np
from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError

from ...trace.hlo import message_class
from ...trace.model import Trace
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
            ("feature_group_count", 50, I64, None, False)],
        "ShapeProto": [("element_type", 2, I32, None, False),
                       ("dimensions", 3, I64, None, True),
                       ("tuple_shapes", 4, M, "ShapeProto", True)],
        "Window": [("dimensions", 1, M, "WindowDimension", True)],
        "WindowDimension": [("size", 1, I64, None, False), ("stride", 2, I64, None, False)],
        "ConvDims": [("kernel_input_feature_dimension", 3, I64, None, False),
                     ("kernel_output_feature_dimension", 4, I64, None, False),
                     ("kernel_spatial_dimensions", 6, I64, None, True)],
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
    return int(np.prod(list(shape.dimensions), dtype=np.int64)) if len(shape.dimensions) \
        else 1


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
    """Per instruction name: (flops, bytes, matmul, dtype index, estimated)."""

    def __init__(self, raw: bytes):
        self.ops: dict = {}
        try:
            msg = HloProto.FromString(raw)
        except DecodeError:
            return
        comps = {c.id: c for c in msg.hlo_module.computations}
        self._comps = comps
        self._flops_of: dict = {}
        for c in comps.values():
            by_id = {i.id: i for i in c.instructions}
            for ins in c.instructions:
                fl, mm, dt, est = self._flops(ins, by_id)
                by = _bytes(ins.shape) + sum(_bytes(by_id[o].shape) for o in ins.operand_ids
                                             if o in by_id)
                # a custom call with no estimate has no figure (not 0 FLOPs): its time is
                # the busy time without one, its target what to name
                opaque = ins.custom_call_target if ins.opcode == "custom-call" and \
                    not est else ""
                self.ops[ins.name] = (fl, float(by), mm, dt, est, opaque)

    def _computation_flops(self, cid: int):
        got = self._flops_of.get(cid)
        if got is not None:
            return got
        self._flops_of[cid] = (0.0, False, UNKNOWN_DTYPE)      # a cycle counts nothing
        c = self._comps.get(cid)
        fl, mm, dt = 0.0, False, UNKNOWN_DTYPE
        if c is not None:
            by_id = {i.id: i for i in c.instructions}
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
        ops = [by_id[o] for o in ins.operand_ids if o in by_id]
        out = _elements(ins.shape)
        if op == "dot" and len(ops) >= 2:
            lhs = list(ops[0].shape.dimensions)
            contracting = ins.dot_dimension_numbers.lhs_contracting_dimensions
            k = int(np.prod([lhs[d] for d in contracting if d < len(lhs)], dtype=np.int64))
            return 2.0 * out * k, True, _dtype(ops[0].shape), False
        if op == "convolution" and len(ops) >= 2:
            return _conv_flops(ins, ops, out), True, _dtype(ops[0].shape), False
        if op == "fusion" and len(ins.called_computation_ids):
            fl, mm, dt = self._computation_flops(ins.called_computation_ids[0])
            return fl, mm, dt, False
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
            if _CONV_TARGET.search(target):
                return _conv_flops(ins, ops, _elements(res)), True, _dtype(ops[0].shape), True
            if _CONV_BWD_INPUT_TARGET.search(target):
                return (_conv_flops(ins, ops, _elements(ops[0].shape)), True,
                        _dtype(ops[0].shape), True)
            if _CONV_BWD_FILTER_TARGET.search(target):
                return (_conv_flops(ins, ops, _elements(ops[1].shape), kernel=res), True,
                        _dtype(ops[0].shape), True)
            return 0.0, False, UNKNOWN_DTYPE, False
        if op in _ELEMENTWISE:
            return float(out), False, UNKNOWN_DTYPE, False
        if op == "reduce" and ops:
            return float(_elements(ops[0].shape)), False, UNKNOWN_DTYPE, False
        return 0.0, False, UNKNOWN_DTYPE, False


def _dtype(shape) -> int:
    name = _PRIMITIVE.get(shape.element_type, (0, ""))[1]
    return DTYPES.index(name) if name else UNKNOWN_DTYPE


def _conv_flops(ins, ops, out: int, kernel=None) -> float:
    """2 × the forward's outputs × kernel spatial size × input features per group; the
    kernel is operand 1 unless given (a backward-filter call's result)."""
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


def _kernel_share(trace: Trace, events: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Each event's share of its HLO op's figure.  On a GPU one op (a cuDNN convolution,
    a split-K GEMM) may run as several kernels back to back on its stream, each naming
    the op: a run of consecutive kernels of one op on one track shares one figure.  An
    XLA:CPU or TPU op event is one run of the op (1)."""
    share = np.ones(events.shape[0])
    dev = trace.track_device[trace.track[events]]
    gpu = np.array([d.kind == "gpu" for d in trace.devices], bool)
    on = np.flatnonzero(gpu[dev]) if gpu.any() else np.zeros(0, np.int64)
    if not on.size:
        return share
    o = on[np.argsort(events[on], kind="stable")]           # track, then time order
    trk, k = trace.track[events[o]], key[o]
    start = np.ones(o.shape[0], bool)
    start[1:] = (trk[1:] != trk[:-1]) | (k[1:] != k[:-1])
    run = np.cumsum(start) - 1
    size = np.bincount(run).astype(np.float64)
    share[o] = 1.0 / size[run]
    return share


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
    op_id, has_op = op.lookup(events)
    prog_st, mod_st = trace.stats.get("program_id"), trace.stats.get("hlo_module")
    p = np.full(events.shape[0], -1, np.int64)
    if prog_st is not None:
        pv, hp = prog_st.lookup(events)
        p = np.where(hp, pv, -1).astype(np.int64)
    mcode = np.full(events.shape[0], -1, np.int64)
    if mod_st is not None:
        mv, hm = mod_st.lookup(events)
        mcode = np.where(hm, mv, -1).astype(np.int64)
    uniq, inv = distinct_rows(p, mcode, np.where(has_op, op_id, -1))
    modules = per_trace(trace, "hlo_modules", lambda _t: {})    # parsed once per trace
    nk = uniq.shape[0]
    fl, by = np.zeros(nk), np.zeros(nk)
    mm, est, known = np.zeros(nk, bool), np.zeros(nk, bool), np.zeros(nk, bool)
    dt = np.full(nk, UNKNOWN_DTYPE, np.int8)
    opaque: set = set()
    for k, (pg, mc, o) in enumerate(uniq.tolist()):      # one per distinct op, not event
        if o < 0:
            continue
        raw = by_program.get(pg % (1 << 64)) if pg != -1 else None
        if raw is None and mc >= 0:
            raw = by_module.get(trace.strings[mc])
        if raw is None:
            continue
        mod = modules.get(id(raw))
        if mod is None:
            mod = modules[id(raw)] = _Module(raw)
        got = mod.ops.get(trace.strings[o])
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
    share = _kernel_share(trace, events, inv)
    flops = fl[inv] * share
    # a custom call's figure from its shapes stays in ``flops``, flagged ``estimated``:
    # callers keep it apart from the cost model's
    return OpCosts(events, flops, flops.copy(), by[inv] * share, est[inv], mm[inv],
                   np.where(mm[inv], dt[inv], UNKNOWN_DTYPE).astype(np.int8), known[inv],
                   "hlo", _missing(known, opaque))


def _missing(known: np.ndarray, opaque: set) -> str:
    if known.all():
        return ""
    if not opaque:
        return "some ops are in no HLO proto of the capture"
    names = sorted(opaque)
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return ("some ops are custom calls opaque to XLA's cost model with no estimate from "
            "their shapes: " + ", ".join(names[:3]) + more)
