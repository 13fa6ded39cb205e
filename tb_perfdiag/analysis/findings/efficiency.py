"""Findings when busy time is badly spent (GUIDE §4 "Efficiency"): what a device's busy
time achieves against its roofs, with the framework's fix and the time it would save at
a stated assumption.  Only on devices with FLOP figures; a saving never exceeds the busy
time it concerns (each is a part of the time of the op groups it names).

- fp32 matmuls on a device whose matrix units run a lower precision faster;
- matmul-class op groups far below their roofline (small or unaligned shapes);
- memory-bound elementwise kernels an eager framework runs one by one (fusion);
- attention computed as separate matmuls and a softmax (no fused kernel);
- busy time dominated by copies.
"""
from __future__ import annotations

import re

import numpy as np

from ...units import duration_ps
from ..attribution.culprits import JAX, PYTORCH, TENSORFLOW
from ..result import Bound, Finding, FindingKind as FK, OpClass, Overlap
from ..efficiency.torch_shapes import library_helper
from .fixes import fix_for

SHARE = 0.10              # of the device's busy time a finding's ops hold at least
SLOW = 0.10               # a matmul group under this share of its attainable roofline
SLOW_TARGET = 0.5         # …is assumed to reach this share once its shapes are fixed
FUSED_SAVING = 0.5        # fusing an elementwise chain: half its time (one read, one write)
ELEMENTWISE_SHARE = 0.20
COPY_SHARE = 0.5
FASTER = 1.5              # a lower-precision peak counts when this many times the fp32 one
_ATTN_FUSED = re.compile(r"flash|fmha|sdpa|scaled_dot_product|attention|mha|cudnn.*attn|"
                         r"fused_attn|xformers|splash|ragged_paged", re.I)
_SOFTMAX = re.compile(r"softmax", re.I)
# a log-softmax is a classifier's loss (cross-entropy), never attention's scores
_LOG_SOFTMAX = re.compile(r"log_?softmax", re.I)

def _fix(kind, fw: str) -> str:
    return fix_for(kind.value, "*", fw)


def fp32_fix(fw: str, alts) -> str:
    """The fix for fp32 matmuls, naming only the lower precisions the device's matrix
    units have (``alts``: "tf32", "bf16", "fp16"): TF32 where there is one (two lines,
    no numerics work), else bfloat16, else float16 with loss scaling — a V100 or T4 has
    float16 tensor cores only, so TF32 or bf16 advice would be wrong there."""
    tf32, bf16, fp16 = ("tf32" in alts), ("bf16" in alts), ("fp16" in alts)
    only16 = fp16 and not (tf32 or bf16)
    if fw == PYTORCH:
        if only16:
            return ("Let the matmuls use the tensor cores, which on this GPU take float16 only "
                    "(no TF32, no bfloat16): train under torch.autocast('cuda', "
                    "dtype=torch.float16) with torch.amp.GradScaler('cuda') scaling the loss "
                    "(scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()).")
        parts = []
        if tf32:
            parts.append("torch.set_float32_matmul_precision('high') and "
                         "torch.backends.cudnn.allow_tf32 = True (TF32 tensor cores, no other "
                         "change)")
        if bf16:
            parts.append("train under torch.autocast('cuda', dtype=torch.bfloat16)"
                         + (" for the full 16-bit peak" if tf32 else ""))
        elif fp16:
            parts.append("train under torch.autocast('cuda', dtype=torch.float16) with "
                         "torch.amp.GradScaler")
        if parts:
            # with no TF32 step left (already on, or none on the chip) the step is 16 bits
            return ("Let the matmuls use the tensor cores: " if tf32 else
                    "Run the matmuls in 16 bits: ") + ", or ".join(parts) + "."
    if fw == TENSORFLOW:
        if only16:
            return ("tf.keras.mixed_precision.set_global_policy('mixed_float16') (this GPU's "
                    "tensor cores take float16 only: no TF32, no bfloat16; Keras scales the "
                    "loss for you in model.fit).")
        parts = (["tf.config.experimental.enable_tensor_float_32_execution(True) (TF32)"]
                 if tf32 else [])
        if bf16 or fp16:
            parts.append(f"tf.keras.mixed_precision.set_global_policy("
                         f"'{'mixed_bfloat16' if bf16 else 'mixed_float16'}')")
        if parts:
            return "Run the matmuls on the tensor cores: " + ", or ".join(parts) + "."
    if fw == JAX:
        if only16:
            return ("Run the matmuls in float16 (this GPU's tensor cores take no TF32 or "
                    "bfloat16): keep parameters and activations in jnp.float16 and scale the "
                    "loss (e.g. jmp's DynamicLossScale).")
        parts = (["jax.default_matmul_precision('tensorfloat32') (TF32)"] if tf32 else [])
        if bf16:
            parts.append("keep parameters and activations in jnp.bfloat16")
        if parts:
            return "Run the matmuls in a lower precision: " + ", or ".join(parts) + "."
    names = {"tf32": "TF32", "bf16": "bfloat16", "fp16": "float16 (with loss scaling)"}
    have = [names[a] for a in ("tf32", "bf16", "fp16") if a in alts]
    return ("Run the matmuls in a lower precision the matrix units support"
            + (f" ({', '.join(have)})" if have else "") + ".")


def _ms(ps: float) -> str:
    # the one duration rule of every face (22.0 s, never "21,952.8 ms")
    return duration_ps(ps)


_COMPILED_ELEMENTWISE = (
    "The step already runs under torch.compile: these kernels are eager ones outside its "
    "compiled graphs. Find the graph breaks (TORCH_LOGS=graph_breaks, or "
    "torch._dynamo.explain(model)(inputs)) and remove them, compile the loss and the optimizer "
    "step too (or use torch.optim.AdamW(fused=True)), and try mode='max-autotune'.")


def findings(diag, fw: str, earlier=(), applied=frozenset()) -> list:
    """The efficiency findings of a diagnosis (``Finding``s, unsorted); ``earlier``: the
    findings already made (a device whose memcpys have their own finding gets no copy
    one); ``applied``: the fixes the trace already applies (``culprits.applied_fixes``:
    never offer torch.compile to a compiled step)."""
    E, T = getattr(diag, "efficiency", None), diag.device_ops
    if E is None or T is None or not len(T):
        return []
    D = diag.devices
    n_steps = max(len(diag.steps), 1)
    out = []

    S = diag.steps
    # the part of each device's busy time inside the steps: a saving per step is that
    # part of it, averaged over the steps
    inside = (S.busy.sum(axis=0) / np.maximum(D.busy, 1)).clip(0, 1) if len(S) else \
        np.ones(len(D))
    best = {}                 # kind → (saving ns, finding, devices alike)

    def add(kind, d, title, detail, saving_ps, assumption, rows, extra=None, fix=None):
        ns_ = int(round(saving_ps / 1000))
        if ns_ <= 0:
            return
        per = int(ns_ * float(inside[d]) / n_steps) if len(S) else ns_
        f = Finding(kind, title, detail + f" Saving at the stated assumption: {assumption}",
                    fix or _fix(kind, fw), "medium", ns_, per,
                    [int(x) for x in S.ids.tolist()] if len(S) else [],
                    np.zeros(0, np.int32),
                    extra={"device": D.name[d], "saving_assumption": assumption,
                           "op_groups": [T.name[r] for r in rows[:5]], **(extra or {})})
        if per < ns_ and len(S):
            f.extra["outside_steps_ns"] = int(ns_ * (1 - float(inside[d])))
        # one finding per kind: the device it costs most, naming the others alike
        had = best.get(kind)
        alike = (had[2] if had else []) + [D.name[d]]
        if had is None or ns_ > had[0]:
            best[kind] = (ns_, f, alike)
        else:
            best[kind] = (had[0], had[1], alike)

    flops = np.nan_to_num(E.flops) + np.nan_to_num(E.flops_estimated)
    for d in np.flatnonzero((D.ops > 0) & (flops > 0)).tolist():
        busy = float(D.busy[d])
        if busy <= 0:
            continue
        mine = np.flatnonzero(T.device == d)
        mine = mine[np.argsort(-T.time[mine], kind="stable")]
        t = T.time.astype(np.float64)
        name = D.name[d]
        _fp32_matmuls(add, E, d, mine, busy, name, fw)
        _slow_matmuls(add, E, T, d, mine, t, busy, name)
        _unfused_elementwise(add, E, T, d, mine, t, busy, name, fw, applied)
        _unfused_attention(add, E, T, d, mine, t, busy, name)
        _copy_bound(add, T, d, mine, t, busy, name, earlier)
    for _, f, alike in best.values():
        if len(alike) > 1:
            f.title += f" ({len(alike)} devices alike)"
            f.extra["devices"] = alike
        out.append(f)
    return out


def _fp32_matmuls(add, E, d, mine, busy, name, fw) -> None:
    """fp32 matmuls where a lower precision runs faster."""
    fast = float(E.fast_peak[d]) if d < len(E.fast_peak) else float("nan")
    pk = float(E.peak_flops[d])
    t32 = float(E.row_fp32_time[mine].sum())
    if np.isfinite(fast) and np.isfinite(pk) and fast >= FASTER * pk and t32 >= SHARE * busy:
        rows = mine[E.row_fp32_time[mine] > 0]
        # each group keeps its share of its roofline: in 16 bits its bytes halve (its
        # intensity doubles) and its roof rises to min(fast peak, intensity × bandwidth)
        # — a memory-bound GEMM gains what the bandwidth allows, not the peaks' ratio;
        # a group with no intensity (no bytes, or FLOPs unknown) the peaks' ratio
        bw = float(E.peak_bytes[d])
        inten = E.row_intensity[rows]
        att32 = np.minimum(pk, inten * bw)
        att16 = np.minimum(fast, 2 * inten * bw)
        ok = np.isfinite(att32) & np.isfinite(att16) & (att32 > 0) & np.isfinite(bw)
        ratio = np.where(ok, att32 / np.where(ok, att16, 1), pk / fast)
        kept = float((E.row_fp32_time[rows] * ratio).sum())
        keep = kept / t32
        # the peak the fp32 matmuls ran against: fp32, or TF32 where their kernels ran
        # on TF32 tensor cores (then the fix is the 16-bit step, TF32 being on)
        on = "TF32" if E.peak_dtype[d] == "tf32" else "fp32"
        add(FK.FP32_MATMUL, d,
            f"fp32 matmuls{' on TF32' if on == 'TF32' else ''} take {100 * t32 / busy:.0f}% "
            f"of {name}'s busy time: its {E.fast_dtype[d]} peak is {fast / pk:.0f}× the "
            f"{on} one",
            f"{_ms(t32)} of matmul-class ops ran in fp32"
            f"{' on TF32 tensor cores' if on == 'TF32' else ''} against a "
            f"{pk / 1e12:.3g} TFLOP/s {on} peak; in {E.fast_dtype[d]} the device peaks at "
            f"{fast / 1e12:.0f} TFLOP/s.",
            t32 * (1 - keep),
            f"the matmuls keep their share of the roofline in {E.fast_dtype[d]} (its "
            f"{fast / 1e12:.0f} TFLOP/s peak, their intensity doubled by half the bytes), so "
            f"memory-bound ones gain only what the bandwidth allows "
            f"({100 * (1 - keep):.0f}% of their time saved; an upper bound).", rows.tolist(),
            {"fp32_matmul_ns": int(t32 / 1000), "faster_dtype": E.fast_dtype[d]},
            fix=fp32_fix(fw, E.fast_dtypes[d] if d < len(E.fast_dtypes) else ()))


def _slow_matmuls(add, E, T, d, mine, t, busy, name) -> None:
    """Matmul groups far below their roofline."""
    slow = mine[E.row_matmul[mine] & (E.row_bound[mine] >= 0) &
                (np.nan_to_num(E.row_efficiency[mine], nan=1.0) < SLOW)]
    ts = float(t[slow].sum())
    if slow.size and ts >= SHARE * busy:
        att = E.row_attainable[slow]
        # the time of the group's ops with FLOP figures (its rate's time): the others'
        # FLOPs are unknown, so no saving is claimed on them
        fps = E.row_flops_per_s[slow]
        tk = np.where(fps > 0, E.row_hw_flops[slow] / np.where(fps > 0, fps, 1) * 1e12, t[slow])
        tk = np.minimum(tk, t[slow])
        need = np.where(att > 0, E.row_hw_flops[slow] / (SLOW_TARGET * att) * 1e12, tk)
        save = float(np.clip(tk - need, 0, None).sum())
        eff = float(np.nansum(E.row_efficiency[slow] * t[slow]) / ts)
        add(FK.SLOW_MATMUL, d,
            f"Matmuls run at {100 * eff:.1f}% of their roofline on {name} "
            f"({100 * ts / busy:.0f}% of its busy time)",
            f"{slow.size} matmul-class op groups ({_ms(ts)}) reach {100 * eff:.1f}% of the "
            f"FLOP/s their intensity allows; the largest: {T.name[slow[0]][:80]} "
            f"({_ms(t[slow[0]])}).",
            save, f"they reach {100 * SLOW_TARGET:.0f}% of their attainable roofline.",
            slow.tolist())


def _unfused_elementwise(add, E, T, d, mine, t, busy, name, fw, applied) -> None:
    """Memory-bound elementwise kernels run one by one (eager PyTorch)."""
    if fw == PYTORCH:
        ew = mine[(T.klass[mine] == OpClass.COMPUTE) & ~E.row_matmul[mine] &
                  (E.row_bound[mine] == Bound.MEMORY)]
        # a convolution's own transforms are not the model's elementwise chain
        ew = ew[~np.array([library_helper(T.name[r]) for r in ew.tolist()], bool)] \
            if ew.size else ew
        te = float(t[ew].sum())
        if ew.size >= 3 and te >= ELEMENTWISE_SHARE * busy:
            add(FK.UNFUSED_ELEMENTWISE, d,
                f"Memory-bound elementwise kernels take {100 * te / busy:.0f}% of {name}'s "
                f"busy time", f"{ew.size} op groups, {int(T.count[ew].sum())} kernels "
                f"({_ms(te)}) each read and write their tensors to memory; the largest: "
                f"{T.name[ew[0]][:80]} ({_ms(t[ew[0]])}).", te * FUSED_SAVING,
                f"fusion keeps the intermediates on chip: {100 * FUSED_SAVING:.0f}% of "
                f"their time.", ew.tolist(),
                fix=_COMPILED_ELEMENTWISE if "compiled" in applied else None)


def _unfused_attention(add, E, T, d, mine, t, busy, name) -> None:
    """Attention as matmuls and a softmax."""
    names = [T.name[r] for r in mine.tolist()]
    # the kernel's name is a group label (template arguments cut): its host op tells
    sm = mine[[bool(_SOFTMAX.search(x)) and not _LOG_SOFTMAX.search(x) and
               not _LOG_SOFTMAX.search(T.host_op[r] or "") for x, r in zip(names, mine.tolist())]] \
        if names else mine[:0]
    fused = any(_ATTN_FUSED.search(x) for x in names)
    if sm.size and not fused and E.row_matmul[mine].any():
        tsm = float(t[sm].sum())
        if tsm >= 0.02 * busy:
            add(FK.UNFUSED_ATTENTION, d,
                f"Attention without a fused kernel on {name}: softmax kernels take "
                f"{100 * tsm / busy:.0f}% of its busy time",
                f"{int(T.count[sm].sum())} softmax kernels ({_ms(tsm)}) run between "
                f"matmuls, and no fused attention kernel ran.", tsm,
                "a fused kernel keeps the scores on chip: the softmax kernels' time "
                "(the score matrix' round trips not counted).", sm.tolist())


def _copy_bound(add, T, d, mine, t, busy, name, earlier) -> None:
    """Copies that run with no compute beside them."""
    cp = mine[np.isin(T.klass[mine], (OpClass.MEMCPY, OpClass.MEMSET))]
    ov = T.overlap[d]
    exposed = float(ov[Overlap.COPIES_EXPOSED])
    said = any(f.kind == FK.EXCESSIVE_MEMCPY and f.extra.get("device") == name
               for f in earlier)
    if cp.size and exposed >= COPY_SHARE * busy and not said:
        add(FK.COPY_BOUND, d,
            f"Copies take {100 * exposed / busy:.0f}% of {name}'s busy time",
            f"{int(T.count[cp].sum())} copies in {cp.size} groups, the largest: "
            f"{T.name[cp[0]][:60]} ({_ms(t[cp[0]])}); {_ms(exposed)} of them ran with no "
            f"compute beside them.", exposed,
            "the copies are removed or hidden under compute: their time not under "
            "compute.", cp.tolist())


def detect(s) -> None:
    """(``common.Scope``; named loosely: common imports nothing of the detectors)"""
    s.made(findings(s.diag, s.fw, s.out, s.applied))
