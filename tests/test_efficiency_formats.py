"""Low-precision formats (GUIDE §4 "Formats"): FP8, MXFP8/6/4 and NVFP4 matmuls known
from op input types and kernel names, each against the peak of its format (the format it
is converted to where the part has no units for it), and the MFU split where they mix."""
from __future__ import annotations

import os

import pytest

import tb_perfdiag
from tb_perfdiag.analysis.diagnosis import diagnose_trace
from tb_perfdiag.analysis.efficiency.peaks import device_peak
from tb_perfdiag.analysis.efficiency.torch_formulas import dtype_of
from tb_perfdiag.analysis.efficiency.torch_shapes import _name_facts
from tb_perfdiag.analysis.efficiency.opcosts import DTYPES
from tb_perfdiag.render.json import diagnosis_json
from tb_perfdiag.testing.kineto import A100, kineto_bytes, load_kineto

E4M3, E8M0 = "c10::Float8_e4m3fn", "c10::Float8_e8m0fnu"
FP4 = "c10::Float4_e2m1fn_x2"


@pytest.mark.parametrize("types, want", [
    ([E4M3, E4M3, "float", "float"], "fp8"),                       # _scaled_mm, fp32 scales
    (["c10::Float8_e5m2", E4M3, "float", "float"], "fp8"),
    ([E4M3, E4M3, E8M0, E8M0], "mxfp8"),                           # MX: E8M0 block scales
    ([FP4, FP4, E8M0, E8M0], "mxfp4"),
    ([FP4, FP4, E4M3, E4M3], "nvfp4"),                             # NVFP4: E4M3 scales
    (["c10::BFloat16", FP4, E8M0], "mxfp4"),                       # bf16 × MXFP4 weights
    (["c10::BFloat16", "c10::BFloat16"], "bf16"),
    (["c10::BFloat16", "unsigned char"], "bf16"),                  # a mask is no format
])
def test_format_from_input_types(types, want):
    assert dtype_of(types)[0] == want


@pytest.mark.parametrize("kernel, want", [
    ("_matmul_ogs_NNT_bf16xbf16xmxfp4_128x128x128x1_swiglu", "mxfp4"),
    ("sm100_xmma_gemm_nvfp4_e2m1_ue4m3_128x256", "nvfp4"),
    ("Cijk_Alik_Bljk_F8NBS_BH_MT256x256_MxE4m3", "mxfp8"),
    ("gemm_mxfp6_e3m2_kernel", "mxfp6"),
    ("sm90_xmma_gemm_e4m3e4m3_bf16_f32_tn_n_tilesize128x128x128", "fp8"),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8", "bf16"),
])
def test_format_from_kernel_names(kernel, want):
    _, _, _, dt, _ = _name_facts(kernel)
    assert DTYPES[dt] == want


MI300X = {"id": 0, "name": "", "totalGlobalMem": 206141652992, "computeMajor": 9,
          "computeMinor": 4, "warpSize": 64, "numSms": 304}
H100 = dict(A100, name="NVIDIA H100 80GB HBM3", computeMajor=9, numSms=132)


def _one_kernel(props):
    ev = [{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1.0,
           "dur": 1.0, "args": {"device": 0, "stream": 7, "correlation": 1}}]
    return load_kineto(ev, deviceProperties=[props])


@pytest.mark.parametrize("props, fmt, tflops, runs_as", [
    (MI300X, "fp8", 2614.9, "fp8"),
    (MI300X, "mxfp4", 1307.4, "bf16"),          # no MXFP4 units: dequantised to bf16
    (dict(MI300X, name="AMD Instinct MI355X", computeMinor=5, numSms=256), "mxfp4", 10066.3,
     "mxfp4"),
    (dict(A100, name="NVIDIA B200"), "nvfp4", 9000, "nvfp4"),
    (dict(A100, name="NVIDIA B200"), "mxfp8", 4500, "mxfp8"),
    (H100, "mxfp8", 1978.9, "fp8"),             # Hopper: MXFP8 runs as FP8
    (H100, "nvfp4", 989.4, "bf16"),
    (A100, "fp8", 312, "bf16"),                 # Ampere has no FP8 units
])
def test_peak_of_each_format_with_its_datasheet(props, fmt, tflops, runs_as):
    p = device_peak(_one_kernel(props), 0, fmt)
    assert p.flops_per_s == pytest.approx(tflops * 1e12) and p.dtype == runs_as
    assert p.source.startswith("datasheet:")
    assert p.converted_from == ("" if runs_as == fmt else fmt)


def _mixed(tmp_path):
    """On an H100: an FP8 GEMM and a bf16 GEMM of the same FLOPs."""
    ev, t = [], 0
    for k, (types, kern) in enumerate((([E4M3, E4M3, "float", "float"],
                                         "sm90_xmma_gemm_e4m3e4m3_bf16_f32_tn"),
                                        (["c10::BFloat16", "c10::BFloat16"],
                                         "sm90_xmma_gemm_bf16bf16_bf16_f32_tn"))):
        for i in range(20):
            ext, corr = 1 + 100 * k + i, 1 + 100 * k + i
            ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::_scaled_mm" if k == 0 else
                       "aten::mm", "pid": 1, "tid": 1, "ts": t, "dur": 4,
                       "args": {"External id": ext, "Input Dims": [[4096, 4096], [4096, 4096]]
                                + ([[], []] if k == 0 else []), "Input type": types}})
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                       "tid": 1, "ts": t + 1, "dur": 1,
                       "args": {"correlation": corr, "External id": ext}})
            ev.append({"ph": "X", "cat": "kernel", "name": kern, "pid": 0, "tid": 7,
                       "ts": t + 2, "dur": 200 if k == 0 else 300,
                       "args": {"device": 0, "stream": 7, "correlation": corr}})
            t += 310
    p = os.path.join(str(tmp_path), "w.pt.trace.json")
    with open(p, "wb") as f:
        f.write(kineto_bytes(ev, deviceProperties=[H100]))
    return diagnose_trace(tb_perfdiag.load(p))


def test_mixed_formats_each_against_its_own_peak(tmp_path):
    d = _mixed(tmp_path)
    e = diagnosis_json(d)["devices"][0]["efficiency"]
    fmts = {f["format"]: f for f in e["formats"]}
    assert set(fmts) == {"fp8", "bf16"} and e["peak_dtype"] == "bf16+fp8"     # by matmul time
    assert fmts["fp8"]["peak_flops_per_s"] == pytest.approx(1978.9e12)
    assert fmts["bf16"]["peak_flops_per_s"] == pytest.approx(989.4e12)
    one = 20 * 2 * 4096 ** 3
    assert fmts["fp8"]["flops"] == fmts["bf16"]["flops"] == one
    # the parts add up to the MFU; the fp8 half counts half as much time at peak
    assert e["mfu"] == pytest.approx(fmts["fp8"]["mfu"] + fmts["bf16"]["mfu"], rel=1e-6)
    assert fmts["bf16"]["mfu"] == pytest.approx(2 * fmts["fp8"]["mfu"], rel=1e-3)
    # the one peak giving that MFU lies between the two
    assert 989.4e12 < e["peak_flops_per_s"] < 1978.9e12


def test_one_format_is_not_mixed(tmp_path):
    """FP8 GEMMs alone: the FP8 peak, no split label."""
    ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::_scaled_mm", "pid": 1, "tid": 1,
           "ts": 0, "dur": 4, "args": {"External id": 1, "Input Dims": [[64, 64], [64, 64], [],
                                                                       []],
                                       "Input type": [E4M3, E4M3, "float", "float"]}},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
           "ts": 1, "dur": 1, "args": {"correlation": 1, "External id": 1}},
          {"ph": "X", "cat": "kernel", "name": "sm90_gemm_e4m3", "pid": 0, "tid": 7, "ts": 2,
           "dur": 5, "args": {"device": 0, "stream": 7, "correlation": 1}}]
    e = diagnosis_json(diagnose_trace(load_kineto(ev, deviceProperties=[H100])))
    e = e["devices"][0]["efficiency"]
    assert e["peak_dtype"] == "fp8" and e["peak_flops_per_s"] == pytest.approx(1978.9e12)
    assert [f["format"] for f in e["formats"]] == ["fp8"]


def _decode(tmp_path, n=40):
    """On an H100: bf16 GEMVs (one token × 4096 × 4096), as a decode step runs them."""
    ev, t = [], 0
    for i in range(n):
        ev += [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t,
                "dur": 4, "args": {"External id": i + 1, "Input Dims": [[1, 4096], [4096, 4096]],
                                   "Input type": ["c10::BFloat16", "c10::BFloat16"]}},
               {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                "tid": 1, "ts": t + 1, "dur": 1,
                "args": {"correlation": i + 1, "External id": i + 1}},
               {"ph": "X", "cat": "kernel", "name": "gemv2T_kernel_bf16", "pid": 0, "tid": 7,
                "ts": t + 2, "dur": 10, "args": {"device": 0, "stream": 7,
                                                  "correlation": i + 1}}]
        t += 12
    return diagnose_trace(load_kineto(ev, deviceProperties=[H100]))


def test_memory_bound_matmuls_give_bandwidth_beside_mfu(tmp_path):
    from tb_perfdiag.render.efficiency import text_lines
    from tb_perfdiag.render.pod import summary_row
    d = _decode(tmp_path)
    e = diagnosis_json(d)["devices"][0]["efficiency"]
    assert e["matmul_memory_bound"] is True
    a, b = d.devices.window(0)
    want = e["hbm_bytes"] if e["hbm_bytes"] is not None else e["bytes"]
    assert e["bandwidth_utilisation"] == pytest.approx(want / ((b - a) * 1e-12 * 3.35e12))
    assert 0 < e["bandwidth_utilisation"] < 1
    assert "bandwidth" in "\n".join(text_lines(d)) and "memory-bound" in "\n".join(text_lines(d))
    row = summary_row("h", "", d)
    assert row["bandwidth_utilisation"] == pytest.approx(e["bandwidth_utilisation"])


def test_compute_bound_matmuls_give_no_bandwidth_headline(tmp_path):
    e = diagnosis_json(_mixed(tmp_path))["devices"][0]["efficiency"]
    assert e["matmul_memory_bound"] is False and e["bandwidth_utilisation"] is not None


def test_compare_across_parts_names_each_sides_peak():
    """The H100 and MI300X twins: each side's MFU against its own part's peak, and the
    comparison says which parts they are."""
    from conftest import shared_path
    from tb_perfdiag.cli import main as cli
    import contextlib
    import io
    root = ("public", "TraceLens", "tests", "traces")
    a = shared_path(*root, "h100", "gaunernst_bert-small-uncased__1016001.json.gz")
    b = shared_path(*root, "mi300", "gaunernst_bert-small-uncased__1016001.json.gz")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli(["compare", a, b])
    assert "peaks: NVIDIA H100 80GB HBM3 bf16 → AMD Instinct MI300X VF bf16" in out.getvalue()
