"""FLOPs and bytes of one PyTorch op from its recorded shapes (``Input Dims``), types
(``Input type``) and scalar arguments (``Concrete Inputs``).

Each formula takes one distinct (op name, shapes, types, scalars) — never an event — and
says what it knows: ``Cost(flops, bytes, matmul, dtype)`` or None where the op has no
formula or its shapes do not say enough.  Conventions: a multiply-add is 2 FLOPs
(torchvision's GMACs × 2); a convolution's and a GEMM's gradients with respect to the
input and to the weight each cost what the forward did; attention's backward is 2.5×
its forward (five matmuls for two), a causal mask keeps the unmasked pairs (PyTorch's
top-left alignment).  Elementwise ops and reductions move bytes and do no matmul work:
their FLOPs are 0 and their bytes the inputs read plus one output of the largest
input's size (reductions: their inputs).
"""
from __future__ import annotations

import math
from typing import NamedTuple

# the ``Input type`` texts PyTorch writes, to (DTYPES name, bytes per element)
_TYPES = {
    "float": ("fp32", 4), "double": ("fp64", 8), "c10::Half": ("fp16", 2),
    "c10::BFloat16": ("bf16", 2), "c10::Float8_e4m3fn": ("fp8", 1),
    "c10::Float8_e5m2": ("fp8", 1), "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1), "c10::Float4_e2m1fn_x2": ("mxfp4", 1),
    "signed char": ("int8", 1),
    "unsigned char": ("int8", 1), "long int": ("", 8), "int": ("", 4), "bool": ("", 1),
    "short int": ("", 2), "c10::complex<float>": ("", 8),
}


class Cost(NamedTuple):
    flops: float
    bytes: float
    matmul: bool
    dtype: str           # DTYPES name of the op's floating inputs ("" unknown)


def _prod(xs) -> int:
    return int(math.prod(int(x) for x in xs))


def _is_shape(d) -> bool:
    return isinstance(d, list) and all(isinstance(x, int) for x in d)


# block scales: E8M0 ones make an 8- or 4-bit operand an MX format; FP8 (E4M3) ones on
# 4-bit elements are NVFP4's
_MX_SCALE, _FP8_SCALE = "c10::Float8_e8m0fnu", "c10::Float8_e4m3fn"
_NARROW = ("nvfp4", "mxfp4", "mxfp6", "mxfp8", "fp8")


def dtype_of(types) -> tuple[str, int]:
    """(DTYPES name, element size) of an op's matmul format: its narrowest float operand
    where one is 8 bits or fewer (an FP8 GEMM's scales are fp32; an MXFP4 GEMM's
    activations bf16), else its first floating input type (("", 0) when the trace has
    no types)."""
    ts = [t for t in types or () if isinstance(t, str)]
    got = [_TYPES[t] for t in ts if t in _TYPES and _TYPES[t][0]]
    narrow = [g for g in got if g[0] in _NARROW]
    if narrow:
        name, size = min(narrow, key=lambda g: _NARROW.index(g[0]))
        if name == "mxfp4" and _FP8_SCALE in ts and _MX_SCALE not in ts:
            name = "nvfp4"
        elif name == "fp8" and _MX_SCALE in ts:
            name = "mxfp8"
        return name, size
    return got[0] if got else ("", 0)


def _flag(concrete, i: int):
    """A bool scalar argument of ``Concrete Inputs`` (None where not recorded)."""
    if not concrete or i >= len(concrete):
        return None
    v = concrete[i]
    if v in ("True", "true", "1", True):
        return True
    if v in ("False", "false", "0", False):
        return False
    return None


def _mask(concrete, i: int, n: int):
    """An output mask (``[True, False, True]``, as text) of ``Concrete Inputs``."""
    if not concrete or i >= len(concrete) or not isinstance(concrete[i], str):
        return None
    bits = [b.strip().lower() for b in concrete[i].strip("[]()").split(",") if b.strip()]
    if len(bits) < n or any(b not in ("true", "false", "1", "0") for b in bits[:n]):
        return None
    return [b in ("true", "1") for b in bits[:n]]


def _ints(concrete, i: int):
    """An int-list scalar argument of ``Concrete Inputs`` (``[2, 2]``), or None."""
    if not concrete or i >= len(concrete) or not isinstance(concrete[i], str):
        return None
    try:
        return [int(x) for x in concrete[i].strip("[]()").split(",") if x.strip()]
    except ValueError:
        return None


def _bytes(shapes, size: int) -> float:
    return float(sum(_prod(s) for s in shapes if _is_shape(s)) * size)


# ---- GEMMs -------------------------------------------------------------------------

def _gemm(m: int, k: int, n: int, batch: int, shapes, size, dt) -> Cost:
    return Cost(2.0 * batch * m * k * n, float((batch * (m * k + k * n + m * n)) * size),
                True, dt)


def mm(dims, size, dt):
    a, b = dims[0], dims[1]
    if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        return None
    return _gemm(a[0], a[1], b[1], 1, dims, size, dt)


def addmm(dims, size, dt):            # (bias, a, b); _scaled_mm's (a, b) come through mm
    return mm(dims[1:3], size, dt)


def bmm(dims, size, dt):
    a, b = dims[0], dims[1]
    if len(a) != 3 or len(b) != 3 or a[0] != b[0] or a[2] != b[1]:
        return None
    return _gemm(a[1], a[2], b[2], a[0], dims, size, dt)


def baddbmm(dims, size, dt):
    return bmm(dims[1:3], size, dt)


def matmul(dims, size, dt):
    a, b = list(dims[0]), list(dims[1])
    if not a or not b:
        return None
    if len(a) == 1:
        a = [1] + a
    if len(b) == 1:
        b = b + [1]
    if a[-1] != b[-2]:
        return None
    ba, bb = a[:-2], b[:-2]
    n = max(len(ba), len(bb))
    ba, bb = [1] * (n - len(ba)) + ba, [1] * (n - len(bb)) + bb
    batch = _prod(max(x, y) for x, y in zip(ba, bb))
    return _gemm(a[-2], a[-1], b[-1], batch, dims, size, dt)


def linear(dims, size, dt):           # (input [..., K], weight [N, K], bias)
    x, w = dims[0], dims[1]
    if len(w) != 2 or not x or x[-1] != w[1]:
        return None
    return _gemm(_prod(x[:-1]), w[1], w[0], 1, dims, size, dt)


# ---- convolutions ------------------------------------------------------------------

def conv_flops(out_numel: int, weight) -> float:
    """2 × outputs × (input channels per group × kernel size): one output's MACs."""
    return 2.0 * out_numel * _prod(weight[1:])


def conv_out_shape(x, w, stride, padding, dilation) -> list | None:
    """A convolution's output shape from its scalar arguments (None where unknown)."""
    nsp = len(x) - 2
    if stride is None or padding is None:
        return None
    dilation = dilation or [1]
    def at(v, i):
        return v[i] if len(v) > i else v[0]
    out = [x[0], w[0]]
    for i in range(nsp):
        k = w[2 + i]
        o = (x[2 + i] + 2 * at(padding, i) - at(dilation, i) * (k - 1) - 1) // at(stride, i) + 1
        if o <= 0:
            return None
        out.append(o)
    return out


def conv_forward(x, w, out, size, dt, transposed=False) -> Cost | None:
    """``out``: the output shape (None: unknown, no figure)."""
    if not _is_shape(x) or not _is_shape(w) or len(w) < 3 or len(x) != len(w):
        return None
    if transposed:
        # a transposed convolution's MACs are its input's count × the weight's
        # output channels per group × kernel size (weight [Cin, Cout/g, k…])
        fl = 2.0 * _prod(x) * _prod(w[1:])
        o = out or []
    else:
        if out is None:
            return None
        fl = conv_flops(_prod(out), w)
        o = out
    return Cost(fl, float((_prod(x) + _prod(w) + _prod(o)) * size), True, dt)


def conv_backward(x, grad_out, w, mask, size, dt) -> Cost | None:
    """``mask``: (input grad, weight grad) computed."""
    if not (_is_shape(x) and _is_shape(grad_out) and _is_shape(w)) or len(w) < 3:
        return None
    one = conv_flops(_prod(grad_out), w)
    n = int(bool(mask[0])) + int(bool(mask[1]))
    by = (_prod(grad_out) + _prod(w) + _prod(x)) + (_prod(x) if mask[0] else 0) + \
        (_prod(w) if mask[1] else 0)
    return Cost(one * n, float(by * size), True, dt)


# ---- attention ---------------------------------------------------------------------

def causal_fraction(lq: int, lk: int) -> float:
    """Share of the (query, key) pairs a top-left causal mask keeps."""
    if lq <= 0 or lk <= 0:
        return 1.0
    full = min(lq, lk)
    kept = full * (full + 1) // 2 + max(0, lq - lk) * lk
    return kept / float(lq * lk)


def attention(q, k, v, causal, backward: bool, layout_blhe: bool, size, dt):
    """SDPA: QKᵀ and PV, 2·B·H·L·S·(E + Ev) FLOPs forward; 2.5× that backward."""
    if not (_is_shape(q) and _is_shape(k) and _is_shape(v)) or len(q) < 3:
        return None
    if layout_blhe:                   # [B, L, H, E] (the flash/efficient kernels' own)
        if len(q) != 4 or len(k) != 4:
            return None               # packed variable-length batches: lengths unknown
        b, lq, h, e = q
        lk, ev = k[1], v[-1]
    else:                             # [B, H, L, E] (or [.., L, E])
        lq, e = q[-2], q[-1]
        lk, ev = k[-2], v[-1]
        b, h = _prod(q[:-2]), 1
    fl = 2.0 * b * h * lq * lk * (e + ev)
    if causal:
        fl *= causal_fraction(lq, lk)
    if backward:
        fl *= 2.5
    by = (_prod(q) + _prod(k) + _prod(v) + _prod(q[:-1]) * ev) * size
    return Cost(fl, float(by * (2 if backward else 1)), True, dt)


# ---- elementwise and reductions ----------------------------------------------------

def elementwise(dims, size, dt):
    shapes = [d for d in dims if _is_shape(d) and d]
    if not shapes or not size:
        return None
    return Cost(0.0, float((sum(_prod(s) for s in shapes) + max(_prod(s) for s in shapes))
                           * size), False, dt)


def copy(dims, size, dt):
    """``copy_(self, src)``: ``src`` read, ``self`` written (never read, as ``add_``'s
    is): their bytes once each."""
    shapes = [d for d in dims[:2] if _is_shape(d)]
    if len(shapes) < 2 or not size:
        return None
    return Cost(0.0, float((_prod(shapes[0]) + _prod(shapes[1])) * size), False, dt)


def fill(dims, size, dt):
    """``fill_``, ``zero_``: ``self`` written, nothing read."""
    if not dims or not _is_shape(dims[0]) or not size:
        return None
    return Cost(0.0, float(_prod(dims[0]) * size), False, dt)


def compiled_kernel(dims, types):
    """An Inductor-generated Triton kernel (``triton_poi_``/``triton_red_``/``triton_per_``,
    the host op PyTorch records for its launch, with the compiled graph's buffers as
    inputs): each tensor argument read or written once, at its own element size; no
    matmul work.  None where no argument has a shape and a type."""
    by, dt = 0, ""
    for i, d in enumerate(dims or ()):
        t = types[i] if types and i < len(types) else None
        got = _TYPES.get(t) if isinstance(t, str) else None
        if got and _is_shape(d) and d:
            by += _prod(d) * got[1]
            dt = dt or got[0]
    return Cost(0.0, float(by), False, dt) if by else None


# elementwise ops whose first input is only written: their own byte rules
WRITE_ONLY = {"aten::copy_": copy, "aten::fill_": fill, "aten::zero_": fill}


def reduction(dims, size, dt):
    shapes = [d for d in dims if _is_shape(d) and d]
    if not shapes or not size:
        return None
    return Cost(0.0, float(sum(_prod(s) for s in shapes) * size), False, dt)


ELEMENTWISE = frozenset(f"aten::{n}" for n in (
    "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "relu", "relu_",
    "threshold_backward", "sigmoid", "sigmoid_backward", "tanh", "tanh_backward", "gelu",
    "gelu_backward", "silu", "silu_backward", "exp", "log", "sqrt", "rsqrt", "pow",
    "neg", "where", "copy_", "fill_", "zero_", "clamp", "clamp_min", "clamp_", "addcmul_",
    "addcdiv_", "lerp_", "masked_fill", "masked_fill_", "dropout", "native_dropout",
    "batch_norm", "native_batch_norm", "cudnn_batch_norm", "cudnn_batch_norm_backward",
    "native_batch_norm_backward", "miopen_batch_norm", "miopen_batch_norm_backward",
    "layer_norm", "native_layer_norm", "native_layer_norm_backward", "group_norm",
    "native_group_norm", "softmax", "_softmax", "_softmax_backward_data", "log_softmax",
    "_log_softmax", "_log_softmax_backward_data", "hardtanh", "leaky_relu", "_to_copy",
    "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "avg_pool2d",
    "adaptive_avg_pool2d", "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward",
    "_foreach_add_", "_foreach_mul_", "_foreach_addcmul_", "_foreach_addcdiv_",
    "_fused_adam_", "_fused_adamw_", "embedding", "embedding_dense_backward", "cat")) | {
    # inference engines' own normalisation ops (vLLM, AMD's aiter): bytes, as layer_norm's
    "aten::rms_norm", "aten::_fused_rms_norm", "_C::rms_norm", "_C::fused_add_rms_norm",
    "vllm::rocm_aiter_rms_norm", "vllm::rocm_aiter_rmsnorm2d_fwd_with_add", "aiter::rms_norm",
    "aiter::rmsnorm2d_fwd_with_add", "aiter::rmsnorm2d_fwd_with_add_ck"}
REDUCTION = frozenset(f"aten::{n}" for n in (
    "sum", "mean", "amax", "amin", "max", "min", "norm", "linalg_vector_norm", "argmax",
    "nll_loss_forward", "nll_loss", "nll_loss_backward", "cross_entropy_loss"))
