"""An Hlo Proto with what XLA records of a GPU program: every instruction's shape and
operands, each fusion's fused computation (a dot with its dimension numbers, the
elementwise and reduce ops), and the op_name/op_type/source metadata the annotation
scopes come from.  The synthetic PyTorch/XLA GPU run's ops are costed from it
(tb_perfdiag/analysis/efficiency/hlo_costs.py), as a real capture's are.

Wire format only (HloProto › hlo_module › computations › instructions, field numbers of
xla/service/hlo.proto); repeated ints packed, as protobuf writes them.
"""
from __future__ import annotations

from tb_perfdiag.testing.xspace import pb_int, pb_len, pb_str, varint

BF16, F32 = 16, 11          # xla.PrimitiveType


def _shape(dims, et) -> bytes:
    return pb_int(2, et) + (pb_len(3, b"".join(varint(d) for d in dims)) if dims else b"")


def _packed(num, values) -> bytes:
    return pb_len(num, b"".join(varint(v) for v in values)) if values else b""


class _Comp:
    """One computation's instructions, with ids unique in the module."""

    def __init__(self, mod, name):
        self.mod, self.name, self.id, self.ins = mod, name, mod.next_id(), []

    def add(self, name, opcode, dims, et=BF16, ops=(), called=(), dot=None, md=b""):
        iid = self.mod.next_id()
        body = (pb_str(1, name) + pb_str(2, opcode) + pb_len(3, _shape(dims, et)) +
                (pb_len(7, md) if md else b"") +
                (pb_len(30, _packed(1, dot[0]) + _packed(2, dot[1])) if dot else b"") +
                pb_int(35, iid) + _packed(36, ops) + _packed(38, called))
        self.ins.append(body)
        return iid

    def bytes(self) -> bytes:
        return pb_str(1, self.name) + b"".join(pb_len(2, i) for i in self.ins) + pb_int(5, self.id)


class _Module:
    def __init__(self, name):
        self.name, self._id, self.comps = name, 0, []

    def next_id(self) -> int:
        self._id += 1
        return self._id

    def comp(self, name) -> _Comp:
        c = _Comp(self, name)
        self.comps.append(c)
        return c

    def fused(self, kind, params, body):
        """A fused computation: ``params`` (dims, type) in, ``body(comp, param ids)``."""
        c = self.comp(f"fused_{kind}.{len(self.comps)}")
        ids = [c.add(f"param_{j}", "parameter", d, et) for j, (d, et) in enumerate(params)]
        body(c, ids)
        return c.id


def _md(op_type, op_name, line) -> bytes:
    md = b""
    if op_type:
        md += pb_str(1, op_type)
    if op_name:
        md += pb_str(2, op_name) + pb_str(3, "/workspace/train.py") + pb_int(4, line)
    return md


def mlp_program(module: str, ops, tokens: int, hidden: int) -> bytes:
    """The Hlo Proto of ``scenarios_xla.gpu_program``'s ops (hlo op, …, op_name, op_type
    in device order): a 4-layer bf16 MLP over ``tokens`` × ``hidden`` activations with
    AdamW on fp32 master weights."""
    m = _Module(module)
    main = m.comp("main.1")
    M, H = tokens, hidden
    act, mh = [M, H], [H, H]
    x = main.add("param.x", "parameter", act)
    w = [main.add(f"param.w{i}", "parameter", mh) for i in range(4)]
    bias = [main.add(f"param.b{i}", "parameter", [H]) for i in range(4)]
    state = [[main.add(f"param.{s}{i}", "parameter", mh, F32) for s in ("w32_", "m", "v")]
             for i in range(4)]
    labels = main.add("param.labels", "parameter", [M], F32)
    cur, grad = x, x

    def dot(c, p, lhs_c, rhs_c, dims):
        c.add("dot", "dot", dims, ops=p[:2], dot=([lhs_c], [rhs_c]))

    def elementwise(opcode, dims, et, n=1):
        """``n`` elementwise ops of ``dims`` on the first two parameters."""
        def body(c, p):
            for j in range(n):
                c.add(f"{opcode}.{j}", opcode, dims, et, ops=p[:2])
        return body

    for j, (hlo, _, _, _, _, op_name, op_type) in enumerate(ops):
        md = _md(op_type, op_name, 40 + j)
        layer = int(op_name.split("dense_")[1][0]) if "dense_" in op_name else 0
        if hlo.startswith("gemm_fusion_dot."):
            n = int(hlo.split(".")[1])
            if n < 40:           # forward: y = x · W
                f = m.fused("dot", [(act, BF16), (mh, BF16)],
                            lambda c, p: dot(c, p, 1, 0, act))
                cur = main.add(hlo, "fusion", act, ops=(cur, w[layer]), called=(f,), md=md)
            elif n < 50:         # dX = dY · Wᵀ
                f = m.fused("dot", [(act, BF16), (mh, BF16)],
                            lambda c, p: dot(c, p, 1, 1, act))
                grad = main.add(hlo, "fusion", act, ops=(grad, w[layer]), called=(f,), md=md)
            else:                # dW = Xᵀ · dY
                f = m.fused("dot", [(act, BF16), (act, BF16)],
                            lambda c, p: dot(c, p, 0, 0, mh))
                main.add(hlo, "fusion", mh, ops=(x, grad), called=(f,), md=md)
        elif hlo.startswith("loop_add_fusion."):        # bias + GELU's add
            f = m.fused("add", [(act, BF16), ([H], BF16)], elementwise("add", act, BF16))
            cur = main.add(hlo, "fusion", act, ops=(cur, bias[layer]), called=(f,), md=md)
        elif hlo.startswith("loop_multiply_fusion."):   # GELU's gradient
            f = m.fused("multiply", [(act, BF16), (act, BF16)], elementwise("multiply", act, BF16))
            grad = main.add(hlo, "fusion", act, ops=(grad, cur), called=(f,), md=md)
        elif hlo.startswith("input_reduce_fusion."):    # log-softmax's max / a bias grad
            out = [M] if "loss" in op_name else [H]
            f = m.fused("reduce", [(act, BF16)],
                        lambda c, p, out=out: c.add("reduce", "reduce", out, ops=p))
            main.add(hlo, "fusion", out, ops=(grad if "backward" in op_name else cur,),
                     called=(f,), md=md)
        elif hlo.startswith("loop_select_fusion."):     # the NLL's pick of the label
            f = m.fused("select", [([M], F32), ([M], F32)],
                        lambda c, p: c.add("select", "select", [M], F32, ops=p))
            grad = main.add(hlo, "fusion", [M], F32, ops=(labels, labels), called=(f,), md=md)
        elif hlo.startswith("copy."):
            grad = main.add(hlo, "copy", act, ops=(cur,), md=md)
        elif hlo.startswith("loop_adam_fusion."):       # AdamW: m, v, w updates (fp32)
            f = m.fused("adam", [(mh, F32), (mh, BF16), (mh, F32), (mh, F32)],
                        elementwise("add", mh, F32, n=6))
            main.add(hlo, "fusion", mh, F32, ops=(state[layer][0], w[layer],
                                                   state[layer][1], state[layer][2]),
                     called=(f,), md=md)
        else:
            raise ValueError(f"no HLO for {hlo}")
    mod = (pb_str(1, module) + pb_str(2, "main.1") +
           b"".join(pb_len(3, c.bytes()) for c in [main] + m.comps[1:]))
    return pb_len(1, mod)
