"""What the efficiency faces say to a performance engineer: numbers in units a reader can
use (never "0.00 TFLOP/s", "7.72e-05%" or "21,952.8 ms"), the peak's source in words, and
fixes that name only the precisions the device has (a V100 has no TF32 and no bf16
tensor cores)."""
from __future__ import annotations

import json

import re

import pytest

from tb_perfdiag.analysis.diagnosis import diagnose_trace
from tb_perfdiag.analysis.findings.efficiency import fp32_fix
from tb_perfdiag.analysis.attribution.culprits import JAX, PYTORCH, TENSORFLOW
from tb_perfdiag.analysis.result import FindingKind as FK
from tb_perfdiag.render.efficiency import pct, points, si, source_text, text_lines
from tb_perfdiag.render.json import diagnosis_json
from tb_perfdiag.render.text import report
from tb_perfdiag.testing.kineto import A100

from test_efficiency_torch import V100, _Trace


@pytest.mark.parametrize("x,unit,want", [
    (4.6654e12, "FLOP", "4.67 TFLOP"), (1.037e8, "FLOP", "104 MFLOP"),
    (3.277e5, "FLOP", "328 kFLOP"), (9.9996e11, "FLOP", "1.00 TFLOP"),
    (1.09e12, "FLOP/s", "1.09 TFLOP/s"), (1.2e10, "FLOP/s", "12.0 GFLOP/s"),
    (918e12, "FLOP/s", "918 TFLOP/s"), (5.0, "FLOP", "5.00 FLOP"), (None, "FLOP", "–"),
    (float("nan"), "FLOP", "–")])
def test_counts_and_rates_with_si_prefixes(x, unit, want):
    assert si(x, unit) == want


@pytest.mark.parametrize("frac,want", [
    (0.2789, "27.9%"), (0.0285, "2.85%"), (0.000117, "0.012%"), (4.79e-6, "<0.001%"),
    (7.72e-7, "<0.001%"), (0.0, "0%"), (1.0, "100.0%"), (None, "–"), (float("nan"), "–")])
def test_shares_never_zero_looking_or_exponents(frac, want):
    assert pct(frac) == want


def test_waterfall_points_and_peak_sources_in_words():
    assert points(27.88) == "27.9" and points(0.0117) == "0.012" and points(7.7e-5) == "<0.001"
    assert points(0.0) == "0"          # a peer wait of none is none, not "<0.001"
    assert source_text("datasheet:V100 SXM2") == "V100 SXM2 datasheet"
    assert source_text("trace") == "from the trace" and source_text("option") == "--peak-tflops"


_NUMBER_NOISE = re.compile(r"\d\.\d+e-\d|0\.00 TFLOP|0\.0 GFLOP|0\.00%|datasheet:|\d,\d{3}\.\d ms")


def _mm_trace(n=40, dims=((512, 512), (512, 512))):
    t = _Trace()
    for _ in range(n):
        t.op("aten::mm", [list(dims[0]), list(dims[1])], ["float", "float"],
             kernel="volta_sgemm_128x64_nn", durs=[50])
    return t


def test_a_small_capture_reads_in_plain_units(tmp_path):
    # 40 GEMMs of 2·512³ FLOPs each: 10.7 GFLOP on a V100 — a line with no "0.0 GFLOP",
    # no exponent, the datasheet named in words
    d = diagnose_trace(_mm_trace().load(tmp_path))
    lines = "\n".join(text_lines(d))
    assert "10.7 GFLOP" in lines and "V100 SXM2 datasheet" in lines
    assert not _NUMBER_NOISE.search(lines), lines
    assert not _NUMBER_NOISE.search(report("w", d, 8)), "the report's own lines"


def _fp32_finding(tmp_path, props):
    d = diagnose_trace(_mm_trace().load(tmp_path, props=(props,)))
    return {f.kind: f for f in d.findings}[FK.FP32_MATMUL]


def test_fp32_matmuls_on_a_v100_get_float16_advice_only(tmp_path):
    # a V100's tensor cores take float16 only: TF32 or bf16 advice would be wrong there
    f = _fp32_finding(tmp_path, V100)
    assert "torch.float16" in f.fix and "GradScaler" in f.fix
    assert "set_float32_matmul_precision" not in f.fix and "torch.bfloat16" not in f.fix
    assert "allow_tf32" not in f.fix and "FP16" not in f.title


def test_fp32_matmuls_on_an_a100_get_tf32_then_bf16(tmp_path):
    f = _fp32_finding(tmp_path, A100)
    assert "set_float32_matmul_precision('high')" in f.fix and "torch.bfloat16" in f.fix
    assert "GradScaler" not in f.fix


@pytest.mark.parametrize("fw,alts,want,never", [
    (TENSORFLOW, ("fp16",), "mixed_float16", ("bfloat16'", "tensor_float_32_execution(True)")),
    (TENSORFLOW, ("tf32", "bf16", "fp16"), "enable_tensor_float_32_execution", ()),
    (JAX, ("fp16",), "jnp.float16", ("jnp.bfloat16", "tensorfloat32'")),
    (JAX, ("tf32", "bf16", "fp16"), "tensorfloat32", ()),
    (PYTORCH, ("bf16", "fp16"), "torch.bfloat16", ("set_float32_matmul_precision",)),
    ("", ("fp16",), "float16", ("TF32", "bfloat16")),
])
def test_fp32_fix_names_what_the_device_has(fw, alts, want, never):
    fix = fp32_fix(fw, alts)
    assert want in fix and not any(x in fix for x in never), fix


def test_missing_share_leaves_collectives_out_and_names_the_largest(tmp_path):
    # 2000 µs of GEMMs with shapes, a 400 µs NCCL all-reduce (no model FLOPs by definition)
    # and a 100 µs kernel no formula covers: 100 of the 2100 µs outside collectives lack a
    # figure (4.8 %, not 20 %), and the line names that kernel
    t = _mm_trace()
    t.op("record_param_comms", kernel="ncclKernel_AllReduce_RING_LL_Sum_float", durs=[400])
    t.op("fbgemm::mystery_op", kernel="mystery_embedding_kernel", durs=[100])
    d = diagnose_trace(t.load(tmp_path))
    why = d.efficiency.missing[0]
    assert "4.8% of the op time outside collectives has no cost figure" in why, why
    assert "the largest: mystery_embedding_kernel (100 µs)" in why


def test_mfu_is_a_lower_bound_where_ops_lack_figures(tmp_path):
    # all GEMMs costed: the MFU is the MFU
    (tmp_path / "a").mkdir()
    d = diagnose_trace(_mm_trace().load(tmp_path / "a"))
    e = diagnosis_json(d)["devices"][0]["efficiency"]
    assert e["mfu_lower_bound"] is False and "MFU ≥" not in "\n".join(text_lines(d))
    # 400 µs of 2400 outside collectives have no formula: the MFU counts none of their
    # FLOPs, so it is a floor and every face says so
    t = _mm_trace()
    t.op("fbgemm::mystery_op", kernel="mystery_embedding_kernel", durs=[400])
    (tmp_path / "b").mkdir()
    d = diagnose_trace(t.load(tmp_path / "b"))
    e = diagnosis_json(d)["devices"][0]["efficiency"]
    assert e["mfu_lower_bound"] is True and e["mfu"] > 0
    assert f"MFU ≥{pct(e['mfu'])}" in "\n".join(text_lines(d))
    # the pod's row of this host, and its text table, say so too
    from tb_perfdiag.render.pod import pod_summary, summary_row, text_table
    row = json.loads(json.dumps(summary_row("h0", "", d)))
    assert row["mfu_lower_bound"] is True and row["devices"][0]["mfu_lower_bound"] is True
    assert f"≥{pct(row['mfu'])}" in text_table(pod_summary([row]))


def test_a_group_s_rate_is_over_its_ops_with_figures(tmp_path):
    # one kernel name, launched by 10 costed aten::mm (50 µs each) and by 30 calls of a
    # compiled graph that carries no shapes: the group's FLOP/s is the costed kernels'
    # FLOPs over their own 500 µs, not over all 2000 µs (which read 4× too slow and made
    # a "matmuls far below their roofline" finding of it)
    t = _mm_trace(n=10)
    for _ in range(30):
        t.op("CompiledFunction", kernel="volta_sgemm_128x64_nn", durs=[50])
    d = diagnose_trace(t.load(tmp_path))
    doc = diagnosis_json(d)
    row = next(r for r in doc["device_ops"]["devices"][0]["ops"]
               if r["name"].startswith("volta_sgemm_128x64_nn"))
    assert row["roofline"]["flops_per_s"] == pytest.approx(2 * 512 ** 3 / 50e-6, rel=1e-6)
    assert FK.SLOW_MATMUL not in {f.kind for f in d.findings}


def _xspace_without_costs(host_thread: str):
    from tb_perfdiag.testing.xspace import XSpaceWriter, load_xspace
    w = XSpaceWriter()
    gpu = w.plane("/device:GPU:0", id=1)
    ops = gpu.line(1, "Stream #7(Compute)", timestamp_ns=0)
    host = w.plane("/host:CPU", id=2)
    th = host.line(1, host_thread, timestamp_ns=0)
    for i in range(5):
        host.event(th, "ExecutorState::Process" if "tf" in host_thread else "work", i * 1_000_000, 500_000)
        gpu.event(ops, "volta_sgemm_128x64_nn", i * 1_000_000 + 600_000, 300_000)
    return load_xspace(w)


def test_a_tensorflow_capture_without_figures_says_how_to_get_them():
    # a TensorFlow graph run without XLA: its kernels carry no cost figure and no HLO is
    # recorded — the way to FLOPs is XLA, not "XLA cost figures" it never had
    d = diagnose_trace(_xspace_without_costs("tf_Compute/123"))
    assert "jit_compile=True" in d.efficiency.missing[0], d.efficiency.missing
    d = diagnose_trace(_xspace_without_costs("python"))
    assert "jit_compile" not in d.efficiency.missing[0]


def test_gemms_with_no_figure_are_matmul_time_in_the_waterfall(tmp_path):
    # 10 costed fp32 GEMMs and 30 of the same kernel inside a compiled graph (no shapes):
    # the 30 are matrix work whose FLOPs are unknown — the waterfall counts them among the
    # matmul-class ops (below peak), not as busy time with no matmul work, and the fp32
    # finding counts their time (the kernel's name says fp32)
    t = _mm_trace(n=10)
    for _ in range(30):
        t.op("CompiledFunction", kernel="volta_sgemm_128x64_nn", durs=[50])
    t.op("aten::relu", [[512, 512]], ["float"], kernel="vectorized_elementwise_kernel", durs=[50])
    d = diagnose_trace(t.load(tmp_path))
    wf = diagnosis_json(d)["devices"][0]["efficiency"]["waterfall"]
    # 2000 of the 2050 µs of kernels are GEMMs: "no matmul work" is the relu's 50 µs and
    # the launch gaps, not the compiled graph's 1500 µs
    assert wf["matmul_below_peak"] + wf["mfu"] > 3 * wf["no_matmul_work"], wf
    f = {x.kind: x for x in d.findings}[FK.FP32_MATMUL]
    assert f.extra["fp32_matmul_ns"] == pytest.approx(40 * 50_000, rel=0.01)


def test_memory_bound_fp32_gemms_gain_what_the_bandwidth_allows(tmp_path):
    # an outer-product-like GEMM (K = 8): ~4 FLOPs per byte, memory-bound in fp32 and in
    # fp16 alike on a V100 — half the bytes halve its time, the 8× peak ratio does not apply
    t = _mm_trace(n=40, dims=((4096, 8), (8, 4096)))
    d = diagnose_trace(t.load(tmp_path))
    f = {x.kind: x for x in d.findings}[FK.FP32_MATMUL]
    fp32 = f.extra["fp32_matmul_ns"]
    assert f.time_lost_ns == pytest.approx(0.5 * fp32, rel=0.02), (f.time_lost_ns, fp32)
    assert "50% of their time saved" in f.detail


_REAL = [
    ("public/kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
     "4.67 TFLOP, MFU 27.9% of 15.7 TFLOP/s fp32 (V100 SXM2 datasheet)"),
    ("public/xprof/xprof/convert/test_xplanes/tpu_inference_2.xplane.pb",
     "407 GFLOP, MFU <0.001% of 918 TFLOP/s bf16 (from the trace)"),
    ("public/HolisticTraceAnalysis/tests/data/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
     "GPU 2 (AMD Instinct MI250 (one die) or MI210): 328 kFLOP, MFU <0.001% of 45.3 TFLOP/s "
     "fp32 (MI250 datasheet, identified by gfx90a, 104 CUs, 64 GB)"),
    # ROCm's one deviceProperties entry is id 0; the kernels run on device 2
    ("public/TraceLens/tests/traces/mi300/Falconsai_nsfw_image_detection__1016002.json.gz",
     "GPU 2 (AMD Instinct MI300X VF): 141 GFLOP, MFU"),
    ("public/HolisticTraceAnalysis/tests/data/trace_diff/test/test.json.gz",
     "156 GFLOP, MFU ≥1.33% of 15.7 TFLOP/s fp32 (V100 SXM2 datasheet)"),
]


@pytest.mark.parametrize("rel,want", _REAL)
def test_real_traces_efficiency_lines_read_plainly(rel, want):
    import tb_perfdiag
    from conftest import shared_path
    d = diagnose_trace(tb_perfdiag.load(shared_path(*rel.split("/"))))
    lines = "\n".join(text_lines(d))
    assert want in lines, lines
    assert not _NUMBER_NOISE.search(lines) and "≥<" not in lines and "NaN" not in lines


def test_a_finding_names_its_largest_group_as_the_largest_not_most(tmp_path):
    # three elementwise groups of 40, 35 and 25 % of their time: the first is the largest,
    # not "most of it"
    t = _mm_trace(n=1)                      # a device with FLOPs: findings are made
    for kern, us in (("add_kernel", 40), ("mul_kernel", 35), ("exp_kernel", 25)):
        for _ in range(20):
            t.op("aten::add", [[1 << 20], [1 << 20]], ["float", "float"], kernel=kern, durs=[us])
    d = diagnose_trace(t.load(tmp_path))
    f = {x.kind: x for x in d.findings}[FK.UNFUSED_ELEMENTWISE]
    assert "the largest: add_kernel (800 µs)" in f.detail and "most of it" not in f.detail


def test_fp32_matmuls_already_on_tf32_are_told_the_16_bit_step(tmp_path):
    # fp32 tensors whose GEMMs run on an A100's TF32 tensor cores (cutlass s1688): TF32 is
    # on, so the finding is against the TF32 peak and its fix is bf16, not TF32 again
    t = _Trace()
    for _ in range(40):
        t.op("aten::mm", [[512, 512], [512, 512]], ["float", "float"],
             kernel="cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align1", durs=[50])
    d = diagnose_trace(t.load(tmp_path, props=(A100,)))
    f = {x.kind: x for x in d.findings}[FK.FP32_MATMUL]
    assert f.title.startswith("fp32 matmuls on TF32") and "2× the TF32 one" in f.title, f.title
    assert "torch.bfloat16" in f.fix and "set_float32_matmul_precision" not in f.fix, f.fix


def _elementwise_trace(compiled: bool):
    t = _mm_trace(n=1)
    for kern, us in (("add_kernel", 40), ("mul_kernel", 35), ("exp_kernel", 25)):
        for _ in range(20):
            t.op("aten::add", [[1 << 20], [1 << 20]], ["float", "float"], kernel=kern, durs=[us])
    if compiled:
        t.op("CompiledFunction", kernel="triton_poi_fused_add_0", durs=[5])
    return t


def test_a_compiled_step_is_not_told_to_compile_its_elementwise_kernels(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    eager = diagnose_trace(_elementwise_trace(False).load(tmp_path / "a"))
    comp = diagnose_trace(_elementwise_trace(True).load(tmp_path / "b"))
    fe = {x.kind: x for x in eager.findings}[FK.UNFUSED_ELEMENTWISE]
    fc = {x.kind: x for x in comp.findings}[FK.UNFUSED_ELEMENTWISE]
    assert "torch.compile(model)" in fe.fix
    assert "torch.compile(model)" not in fc.fix and "graph_breaks" in fc.fix, fc.fix
