"""MFU per step and device, the MFU waterfall, the roofline per op group and the findings
when busy time is badly spent (analysis.efficiency: mfu, waterfall, roofline, advice), on
traces built in memory with cost figures the test sets; the CLI's --min-mfu; one browser
check that the waterfall and the roofline render."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
import urllib.parse
from dataclasses import dataclass

import numpy as np
import pytest

import tb_perfdiag.analysis.efficiency as eff_pkg
from tb_perfdiag.analysis import causes as C
from tb_perfdiag.analysis.diagnosis import Options, diagnose_trace
from tb_perfdiag.analysis.efficiency import waterfall as W
from tb_perfdiag.analysis.efficiency.roofline import roofline
from tb_perfdiag.analysis.result import Bound, FindingKind as FK
from tb_perfdiag.render.json import diagnosis_json
from tb_perfdiag.testing.builder import TraceBuilder
from tb_perfdiag.testing.xspace import U64, XSpaceWriter, load_xspace

from conftest import shared_path

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp64", "")


@dataclass
class _Costs:
    event: np.ndarray
    flops: np.ndarray
    hw_flops: np.ndarray
    bytes: np.ndarray
    estimated: np.ndarray
    matmul: np.ndarray
    dtype: np.ndarray
    known: np.ndarray
    source: str
    missing: str


@dataclass
class _Peak:
    flops_per_s: float | None
    bytes_per_s: float | None
    dtype: str
    source: str
    device_model: str
    missing: str = ""


@pytest.fixture
def costs_by_name(monkeypatch):
    """Cost figures by kernel name ({name: (flops, bytes, matmul, dtype)}) and a 10 TFLOP/s
    fp32 (80 bf16) device with 1 TB/s, in place of the cost model and the peak table."""
    table = {}

    def op_costs(trace, events):
        names = [trace.strings[int(trace.name[e])] for e in events]
        row = [table.get(n) for n in names]
        f = np.array([r[0] if r else 0.0 for r in row], np.float64)
        return _Costs(np.asarray(events), f, f.copy(),
                      np.array([r[1] if r else 0.0 for r in row], np.float64),
                      np.zeros(len(row), bool), np.array([bool(r and r[2]) for r in row]),
                      np.array([DTYPES.index(r[3]) if r else 7 for r in row], np.int8),
                      np.array([r is not None for r in row]), "test", "")

    def device_peak(trace, device, dtype, override_tflops=None):
        tf = override_tflops or {"fp32": 10.0, "tf32": 10.0, "bf16": 80.0, "fp16": 80.0}.get(dtype or "bf16")
        return _Peak(tf * 1e12 if tf else None, 1e12, dtype or "bf16",
                     "option" if override_tflops else "test", "TestGPU")

    costs = types.ModuleType("tb_perfdiag.analysis.efficiency.costs")
    costs.op_costs, costs.DTYPES = op_costs, DTYPES
    peaks = types.ModuleType("tb_perfdiag.analysis.efficiency.peaks")
    peaks.device_peak = device_peak
    monkeypatch.setitem(sys.modules, costs.__name__, costs)
    monkeypatch.setitem(sys.modules, peaks.__name__, peaks)
    monkeypatch.setattr(eff_pkg, "costs", costs, raising=False)
    monkeypatch.setattr(eff_pkg, "peaks", peaks, raising=False)
    return table


def _steps_trace(steps=3, late_kernel=False):
    """Steps of 1000 µs: a 200 µs gemm and a 100 µs relu each, launched at the step's
    start; with ``late_kernel`` step 0 also launches a gemm that runs inside step 1's
    window (time overlap would give it to step 1)."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream(gpu=0, stream=7)
    for i in range(steps):
        t0 = i * 1000
        with b.step(main, i, t0, 1000):
            k = b.kernel(s7, "gemm", t0 + 300, 200)
            b.launch(main, "cudaLaunchKernel", t0 + 10, 5, kernel=k)
            k = b.kernel(s7, "relu", t0 + 500, 100)
            b.launch(main, "cudaLaunchKernel", t0 + 20, 5, kernel=k)
            if late_kernel and i == 0:
                k = b.kernel(s7, "late_gemm", 1700, 100)
                b.launch(main, "cudaLaunchKernel", t0 + 30, 5, kernel=k)
    return b.build()


def _sum(wf: dict) -> float:
    return sum(v for v in wf.values())


def test_waterfall_arithmetic_on_steps(costs_by_name):
    costs_by_name.update(gemm=(1e9, 1e6, True, "fp32"), relu=(0.0, 1e6, False, "fp32"))
    d = diagnose_trace(_steps_trace())
    E = d.efficiency
    # 3 GFLOP over the 3000 µs steps window at 10 TFLOP/s
    assert E.mfu[0] == pytest.approx(0.1)
    doc = diagnosis_json(d)
    wf = doc["devices"][0]["efficiency"]["waterfall"]
    assert _sum(wf) == pytest.approx(100, abs=0.01)
    assert wf["mfu"] == pytest.approx(10.0, abs=1e-3)
    # gemm busy 600 µs = 20 points, 10 of them at peak; relu 300 µs = 10 points no matmul
    assert wf["matmul_below_peak"] == pytest.approx(10.0, abs=1e-3)
    assert wf["no_matmul_work"] == pytest.approx(10.0, abs=1e-3)
    idle = sum(v for k, v in wf.items() if k in C.ALL or k == W.SMALL)
    assert idle == pytest.approx(70.0, abs=1e-3)          # 2100 of 3000 µs idle
    for s in doc["steps"]:
        sd = s["devices"]["0"]
        assert sd["flops"] == 1e9 and sd["mfu"] == pytest.approx(0.1)
        assert _sum(sd["waterfall"]) == pytest.approx(100, abs=0.01)


def test_step_flops_by_launching_step_not_time(costs_by_name):
    costs_by_name.update(gemm=(1e9, 1e6, True, "fp32"), late_gemm=(5e8, 1e6, True, "fp32"),
                         relu=(0.0, 1e6, False, "fp32"))
    d = diagnose_trace(_steps_trace(late_kernel=True))
    got = [s["devices"]["0"]["flops"] for s in diagnosis_json(d)["steps"]]
    # the late gemm ran in step 1's time but step 0 launched it
    assert got == [1.5e9, 1e9, 1e9]


def test_no_figures_no_mfu_and_says_why(costs_by_name):
    d = diagnose_trace(_steps_trace())
    e = diagnosis_json(d)["devices"][0]["efficiency"]
    assert e["mfu"] is None and e["waterfall"] is None and e["flops"] == 0
    assert e["missing"]
    assert not [f for f in d.findings if f.kind in (FK.FP32_MATMUL, FK.SLOW_MATMUL,
                                                       FK.UNFUSED_ELEMENTWISE, FK.COPY_BOUND)]


def test_peak_option_overrides_and_keys_the_cache(costs_by_name):
    costs_by_name.update(gemm=(1e9, 1e6, True, "fp32"))
    d = diagnose_trace(_steps_trace(), Options(peak_tflops=1.0))
    assert d.efficiency.peak_flops[0] == 1e12 and d.efficiency.peak_source[0] == "option"
    assert d.efficiency.mfu[0] == pytest.approx(1.0)
    assert Options(peak_tflops=1.0).key() != Options().key()


def test_waterfall_points_scale_and_clip():
    # busy split given in other units, idle split short of the idle: both scaled
    pts, mfu = W.points([1000.0], [400.0], np.array([[100.0] + [0] * (len(C.ALL) - 1)]),
                        [0.0], [2.0], [1.0], [1.0], [1.0], [0.5], [2e-9 * 1e12], [10e12])
    row = dict(zip(W.PARTS, pts[0]))
    assert sum(pts[0]) == pytest.approx(100)
    assert row[C.ALL[0]] == pytest.approx(60)                 # all the idle
    assert row["peer_wait"] == pytest.approx(5) and mfu[0] == pytest.approx(0.2)
    assert row["no_matmul_work"] == pytest.approx(15) and row["matmul_below_peak"] == pytest.approx(0)
    # FLOPs outside matmul ops (an XLA fusion): no negative shortfall, still 100
    pts, _ = W.points([1000.0], [1000.0], np.zeros((1, len(C.ALL))), [0.0], [1.0], [0.0],
                      [0.0], [0.1], [0.0], [5e-9 * 1e12], [10e12])
    assert (pts >= 0).all() and sum(pts[0]) == pytest.approx(100)
    # no peak: no waterfall
    pts, mfu = W.points([1000.0], [500.0], np.zeros((1, len(C.ALL))), [0.0], [1.0], [0], [0],
                        [1.0], [0.0], [1e9], [np.nan])
    assert np.isnan(pts).all() and np.isnan(mfu).all()


def test_roofline_on_both_sides_of_the_ridge():
    # ridge = 100 TFLOP/s ÷ 1 TB/s = 100 FLOP/byte
    fps, bps, inten, att, eff, bound = roofline(
        [1e12, 1e9, 0.0], [1e9, 1e9, 1e9], [20e9, 2e9, 1e9], 100e12, 1e12)
    assert bound.tolist() == [Bound.COMPUTE, Bound.MEMORY, Bound.MEMORY]
    assert inten[0] == 1000 and inten[1] == 1 and inten[2] == 0
    assert att[0] == 100e12 and att[1] == pytest.approx(1e12)
    assert eff[0] == pytest.approx(0.5)              # 50 TFLOP/s of 100
    assert eff[1] == pytest.approx(0.5)              # 0.5 TB/s of 1
    assert eff[2] == pytest.approx(1.0)              # bytes only: the bandwidth's share


def _gpu_trace(kernels):
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream(gpu=0, stream=7)
    for i in range(4):
        t0 = i * 1000
        with b.step(main, i, t0, 1000):
            t = t0 + 10
            for name, dur in kernels:
                k = b.kernel(s7, name, t, dur)
                b.launch(main, "cudaLaunchKernel", t0 + 1, 1, kernel=k)
                t += dur
    return b.build()


def _kinds(d):
    return {f.kind: f for f in d.findings}


def test_fp32_matmul_finding_and_its_saving_bound(costs_by_name):
    costs_by_name.update(sgemm=(2e9, 1e6, True, "fp32"), relu=(0.0, 1e6, False, "fp32"))
    d = diagnose_trace(_gpu_trace([("sgemm", 600), ("relu", 50)]))
    f = _kinds(d)[FK.FP32_MATMUL]
    # 8× faster in bf16: 7/8 of the fp32 matmuls' 2400 µs, never more than their time
    assert f.time_lost_ns == pytest.approx(2400e3 * 7 / 8, rel=1e-3)
    assert f.time_lost_ns <= 2400e3 and "autocast" in f.fix
    assert f.extra["saving_assumption"]
    # the same matmuls in bf16: no fp32 finding
    costs_by_name.update(sgemm=(2e9, 1e6, True, "bf16"))
    assert FK.FP32_MATMUL not in _kinds(diagnose_trace(_gpu_trace([("sgemm", 600), ("relu", 50)])))


def test_slow_matmul_elementwise_attention_findings(costs_by_name):
    costs_by_name.update(tiny_gemm=(1e6, 1e5, True, "bf16"), add_kernel=(0.0, 1e8, False, "bf16"),
                         mul_kernel=(0.0, 1e8, False, "bf16"), exp_kernel=(0.0, 1e8, False, "bf16"),
                         softmax_warp_forward=(0.0, 1e7, False, "bf16"))
    d = diagnose_trace(_gpu_trace([("tiny_gemm", 200), ("add_kernel", 150), ("mul_kernel", 150),
                                   ("exp_kernel", 150), ("softmax_warp_forward", 100)]))
    k = _kinds(d)
    for kind, time_ps in ((FK.SLOW_MATMUL, 800e6), (FK.UNFUSED_ELEMENTWISE, 1800e6),
                          (FK.UNFUSED_ATTENTION, 400e6)):
        assert kind in k, kind
        assert 0 < k[kind].time_lost_ns <= time_ps / 1000     # within the ops' own time
    assert "torch.compile" in k[FK.UNFUSED_ELEMENTWISE].fix
    assert "scaled_dot_product_attention" in k[FK.UNFUSED_ATTENTION].fix
    # a fused attention kernel in the trace: no attention finding
    costs_by_name.update(flash_fwd_kernel=(1e9, 1e6, True, "bf16"))
    d = diagnose_trace(_gpu_trace([("tiny_gemm", 200), ("softmax_warp_forward", 100),
                                   ("flash_fwd_kernel", 100)]))
    assert FK.UNFUSED_ATTENTION not in _kinds(d)
    # a CNN's cross-entropy (log-softmax kernels after the convolutions) is no attention
    # (the kernel's group label cuts the template arguments: its host op tells)
    log_sm = "cunn_SoftMaxForward<4, float, float, float, LogSoftMaxForwardEpilogue>"
    costs_by_name.update({log_sm: (0.0, 1e7, False, "bf16")})

    def cnn(host_op):
        b = TraceBuilder()
        main, s7 = b.thread("python main"), b.stream(gpu=0, stream=7)
        for i in range(4):
            t0 = i * 1000
            with b.step(main, i, t0, 1000):
                b.launch(main, "cudaLaunchKernel", t0 + 1, 1,
                         kernel=b.kernel(s7, "tiny_gemm", t0 + 10, 200))
                b.op(main, host_op, t0 + 3, 5)
                b.launch(main, "cudaLaunchKernel", t0 + 4, 1,
                         kernel=b.kernel(s7, log_sm, t0 + 210, 100))
        return diagnose_trace(b.build())
    assert FK.UNFUSED_ATTENTION not in _kinds(cnn("aten::_log_softmax"))
    assert FK.UNFUSED_ATTENTION in _kinds(cnn("aten::_softmax"))


TPU = ("public", "xprof", "xprof", "convert", "test_xplanes", "tpu_inference_2.xplane.pb")


def test_tpu_trace_copies_and_waterfall():
    path = shared_path(*TPU)
    if not os.path.exists(path):
        pytest.skip("../shared/traces is absent (the public TPU capture)")
    import tb_perfdiag
    d = tb_perfdiag.diagnose(tb_perfdiag.load(path))
    doc = d.to_json() if hasattr(d, "to_json") else diagnosis_json(d)
    for dev in doc["devices"]:
        e = dev["efficiency"]
        assert 0 < e["mfu"] <= 1 and abs(_sum(e["waterfall"]) - 100) <= 0.5
        assert e["roofline"]["bound"] == "memory"
    f = _kinds(d)[FK.COPY_BOUND]
    assert "donate_argnums" in f.fix and f.time_lost_ns <= max(int(x) for x in d.devices.busy) / 1000


def _tpu_logdir(root):
    """A TPU capture whose ops carry XLA cost figures and whose plane has its peak."""
    w = XSpaceWriter()
    tpu = w.plane("/device:TPU:0", id=1, stats=[("peak_teraflops_per_second", "d", 918.0),
                                                 ("peak_hbm_bw_gigabytes_per_second", "d", 1640.0),
                                                 ("device_type_string", "s", "TPU v6 Lite")])
    ops = tpu.line(1, "XLA Ops", timestamp_ns=0)
    md = lambda fl, by, cat: [("program_id", "u", U64(1)), ("hlo_category", "s", cat),  # noqa: E731
                              ("flops", "u", fl), ("model_flops", "u", fl), ("bytes_accessed", "u", by)]
    t = 0
    for _ in range(20):
        tpu.event(ops, "%convolution.3 = bf16[1024,1024]{1,0} convolution(bf16[1024,1024] %a, "
                       "bf16[1024,1024] %b)", t, 10_000_000, display="convolution.3",
                  md_stats=md(2 * 1024 ** 3, 6 * 1024 ** 2, "convolution"))
        tpu.event(ops, "%fusion.1 = bf16[1024,1024]{1,0} fusion(bf16[1024,1024] %p)", t + 12_000_000,
                  4_000_000, display="fusion.1", md_stats=md(1024 ** 2, 4 * 1024 ** 2, "loop fusion"))
        t += 20_000_000
    folder = os.path.join(root, "tpu_flops", "plugins", "profile", "2026_12_01_00_00_00")
    os.makedirs(folder)
    with open(os.path.join(folder, "tpuhost.xplane.pb"), "wb") as fh:
        fh.write(w.to_bytes())
    return load_xspace(w)


def test_tpu_in_memory_flops_reach_the_json(tmp_path):
    tr = _tpu_logdir(str(tmp_path))
    e = diagnosis_json(diagnose_trace(tr))["devices"][0]["efficiency"]
    assert e["flops"] == 20 * (2 * 1024 ** 3 + 1024 ** 2) and e["peak_flops_per_s"] == 918e12
    assert abs(_sum(e["waterfall"]) - 100) <= 0.5 and 0 < e["mfu"] <= 1


def test_check_min_mfu_exit_code(tmp_path):
    _tpu_logdir(str(tmp_path))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    cli = [sys.executable, "-m", "tb_perfdiag.cli", "check", str(tmp_path)]
    ok = subprocess.run(cli + ["--min-mfu", "0.0001%"], capture_output=True, text=True, env=env)
    bad = subprocess.run(cli + ["--min-mfu", "50%"], capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert bad.returncode == 1 and "MFU per typical step" in bad.stdout
    # its figures as every face writes them: "(42.9 GFLOP in 396 µs at 918 TFLOP/s, …"
    assert re.search(r"\(\d[\d.]* [kMGTP]?FLOP in \d[\d.]* (ns|µs|ms|s) at \d[\d.]* TFLOP/s",
                     bad.stdout), bad.stdout
    peak = subprocess.run(cli + ["--min-mfu", "50%", "--peak-tflops", "0.001"], capture_output=True,
                          text=True, env=env)
    assert peak.returncode == 1 and "MFU" in peak.stdout   # over 1: a peak far too low


def test_browser_waterfall_and_roofline(tmp_path, artifacts_dir):
    pytest.importorskip("playwright.sync_api")
    from conftest import IN_CI, TensorBoard
    if not os.path.exists("/usr/bin/chromium"):
        if IN_CI:
            pytest.fail("/usr/bin/chromium is required in CI")
        pytest.skip("/usr/bin/chromium is absent (apt-get install chromium)")
    from test_browser import open_diagnose, wait_loaded
    from playwright.sync_api import sync_playwright
    _tpu_logdir(str(tmp_path))
    tb = TensorBoard(tmp_path)
    try:
        with sync_playwright() as p:
            br = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            page = br.new_page()
            run = "tpu_flops/2026_12_01_00_00_00"
            frame = open_diagnose(page, tb, "&p.perfdiag.run=" + urllib.parse.quote(run))
            wait_loaded(frame, run)
            frame.wait_for_selector("#pd-waterfall")
            frame.wait_for_selector("#pd-roofline .pd-roof-point")
            total = float(frame.get_attribute("#pd-waterfall", "data-total"))
            assert abs(total - 100) <= 0.5
            text = frame.inner_text("#pd-efficiency") + frame.inner_text("#pd-roofline") + \
                frame.inner_text(".pd-stats")
            assert "NaN" not in text and "null" not in text and "undefined" not in text
            assert frame.locator(".pd-mfu-stat").count() == 1
            assert frame.locator("#pd-roofline .pd-roof-point").count() == 2
            # figures a reader can use: SI units, the peak's source in words, the flat roof
            # labelled, the achieved MFU in the legend however small its part
            assert "918 TFLOP/s bf16, from the trace" in frame.inner_text(".pd-mfu-stat")
            assert "peak 918 TFLOP/s bf16" in frame.text_content("#pd-roofline .pd-roof-peak")
            # the ridge's label and the peak's are drawn apart (they once sat on each other)
            boxes = frame.evaluate("() => ['.pd-roof-ridge', '.pd-roof-peak'].map((s) => {"
                                   " const b = document.querySelector('#pd-roofline ' + s).getBBox();"
                                   " return [b.x, b.y, b.x + b.width, b.y + b.height]; })")
            (a0, a1, a2, a3), (b0, b1, b2, b3) = boxes
            assert a2 <= b0 or b2 <= a0 or a3 <= b1 or b3 <= a1, boxes
            assert "achieved MFU" in frame.inner_text("#pd-efficiency .pd-wf-legend")
            tips = " ".join(frame.locator("#pd-roofline .pd-roof-point title").all_text_contents())
            assert "FLOP/s" in tips and not re.search(r"\de[+-]\d", tips + text), tips
            # the waterfall shown is the selection's: the step's, else the device's own
            got = frame.evaluate(
                "async () => { const m = await import(new URL('efficiency.js', document.baseURI).href);"
                " const d = {devices: [{id: 0, name: 'g', ops: 1, efficiency: {mfu: 0.1, waterfall: {mfu: 10}}}],"
                "  steps: [{id: 3, devices: {'0': {mfu: 0.5, waterfall: {mfu: 50}}}}]};"
                " return ['3', '', '9'].map((s) => { const w = m.shownWaterfall(d, 0, s); return [w.where, w.mfu]; }); }")
            assert got == [["step 3", 0.5], ["its steps window", 0.1], ["its steps window", 0.1]]
            frame.locator("#pd-efficiency").screenshot(path=os.path.join(artifacts_dir, "mfu-waterfall.png"))
            frame.locator("#pd-roofline").screenshot(path=os.path.join(artifacts_dir, "roofline.png"))
            br.close()
    finally:
        tb.stop()


def test_folding_in_blocks_changes_nothing(costs_by_name, monkeypatch):
    from tb_perfdiag.analysis.efficiency import sums
    costs_by_name.update(gemm=(1e9, 1e6, True, "fp32"), relu=(3.0, 1e6, False, "bf16"))
    whole = diagnose_trace(_steps_trace()).efficiency
    monkeypatch.setattr(sums, "BLOCK", 2)
    blocks = diagnose_trace(_steps_trace()).efficiency
    for name in ("flops", "bytes", "mfu", "waterfall", "step_flops", "row_flops", "row_bound"):
        np.testing.assert_array_equal(getattr(whole, name), getattr(blocks, name))


def _two_gpu_trace():
    """Two GPUs running kernels of the same names (gemm, relu) over three steps."""
    b = TraceBuilder()
    main = b.thread("python main")
    streams = [b.stream(gpu=0, stream=7), b.stream(gpu=1, stream=7)]
    for i in range(3):
        t0 = i * 1000
        with b.step(main, i, t0, 1000):
            for g, s in enumerate(streams):
                k = b.kernel(s, "gemm", t0 + 300 + 10 * g, 200 + 50 * g)
                b.launch(main, "cudaLaunchKernel", t0 + 10 + g, 1, kernel=k)
                k = b.kernel(s, "relu", t0 + 600, 100)
                b.launch(main, "cudaLaunchKernel", t0 + 20 + g, 1, kernel=k)
    return b.build()


@pytest.mark.parametrize("block", [1 << 20, 3])
def test_costs_held_per_distinct_op_fold_as_per_op(costs_by_name, monkeypatch, block):
    """Figures held once per distinct op (XLA's cost stats) and a code per op give the
    same sums as the same figures per op, whether an op's code gives its row (the
    gemm on each GPU its own code) or not (one code for every gemm, on both GPUs)."""
    from tb_perfdiag.analysis.efficiency import sums
    from tb_perfdiag.analysis.efficiency.opcosts import OpCosts
    costs_by_name.update(gemm=(1e9, 1e6, True, "bf16"), relu=(3.0, 2e6, False, "fp32"))
    per_op = sys.modules["tb_perfdiag.analysis.efficiency.costs"].op_costs
    monkeypatch.setattr(sums, "BLOCK", block)
    flat = diagnose_trace(_two_gpu_trace()).efficiency

    for by_device in (True, False):
        def keyed(trace, events, by_device=by_device):
            c = per_op(trace, events)
            key = trace.name[events].astype(np.int64) * 2
            if by_device:
                key += trace.track_device[trace.track[events]]
            u, first, code = np.unique(key, return_index=True, return_inverse=True)
            return OpCosts(c.event, *(np.asarray(getattr(c, f))[first] for f in
                                      ("flops", "hw_flops", "bytes", "estimated", "matmul",
                                       "dtype", "known")), c.source, c.missing,
                           code=code.reshape(-1))
        monkeypatch.setattr(sys.modules["tb_perfdiag.analysis.efficiency.costs"], "op_costs",
                            keyed)
        got = diagnose_trace(_two_gpu_trace()).efficiency
        for name in ("flops", "bytes", "mfu", "waterfall", "step_flops", "row_flops",
                     "row_bytes", "row_bound"):
            np.testing.assert_allclose(getattr(got, name), getattr(flat, name), rtol=1e-12,
                                       err_msg=f"{name}, by device: {by_device}")
    assert np.nansum(flat.flops) == 6 * (1e9 + 3.0)


def test_unknown_device_shows_achieved_rate_and_no_peak(costs_by_name, monkeypatch):
    costs_by_name.update(gemm=(1e9, 1e6, True, "fp32"))
    monkeypatch.setattr(sys.modules["tb_perfdiag.analysis.efficiency.peaks"], "device_peak",
                        lambda trace, d, dt, override_tflops=None: _Peak(
                            None, None, dt, "", "Mystery-9000", "'Mystery-9000' is not in the "
                            "datasheet table (give the peak with --peak-tflops)"))
    d = diagnose_trace(_steps_trace())
    e = diagnosis_json(d)["devices"][0]["efficiency"]
    assert e["mfu"] is None and e["waterfall"] is None and e["peak_flops_per_s"] is None
    assert e["achieved_flops_per_s"] == pytest.approx(3e9 / 3000e-6)
    assert "--peak-tflops" in e["missing"]
    from tb_perfdiag.render.efficiency import text_lines
    assert any("no peak known" in x for x in text_lines(d))


def test_a_convolution_s_transforms_are_not_an_elementwise_chain(costs_by_name):
    # cuDNN's Winograd transforms are memory-bound and move no matmul FLOPs, but
    # torch.compile does not fuse them away: not in the elementwise finding
    t = "void cudnn::winograd_nonfused::winogradForward{}4x4<float, float>"
    names = [t.format("Data"), t.format("Filter"), t.format("Output")]
    costs_by_name.update({n: (0.0, 1e8, False, "bf16") for n in names})
    costs_by_name.update(sgemm_bf16=(1e9, 1e6, True, "bf16"))
    d = diagnose_trace(_gpu_trace([(n, 150) for n in names] + [("sgemm_bf16", 200)]))
    assert FK.UNFUSED_ELEMENTWISE not in _kinds(d)
    costs_by_name.update(add_kernel=(0.0, 1e8, False, "bf16"),
                         mul_kernel=(0.0, 1e8, False, "bf16"),
                         exp_kernel=(0.0, 1e8, False, "bf16"))
    d = diagnose_trace(_gpu_trace([(n, 150) for n in names] + [("sgemm_bf16", 200)] +
                                  [(n, 150) for n in ("add_kernel", "mul_kernel", "exp_kernel")]))
    f = _kinds(d)[FK.UNFUSED_ELEMENTWISE]
    assert f.time_lost_ns <= 3 * 4 * 150e3 * 0.5 + 1      # the three real ones' half, no more


def test_a_rate_above_its_roof_has_no_share_and_no_bound():
    """An async copy-start moves its bytes between it and its copy-done: 536 GB over its
    own 181 ns would be 181,061,633 % of HBM. No share, no bound, and said so (issue 63)."""
    from tb_perfdiag.analysis.efficiency.roofline import UNKNOWN_RESOURCE, above_roof, utilisation
    nan4 = np.full((2, 4), np.nan)
    u, bound_by, share = utilisation([0.0, 0.0], [536e9, 1e6], nan4, [181e3, 1e9], 918e12,
                                     1.6e12, nan4, np.zeros((2, 4), bool))
    assert above_roof(u).tolist() == [True, False]
    assert np.isnan(share[0]) and bound_by[0] == UNKNOWN_RESOURCE
    assert 0 < share[1] <= 1 and bound_by[1] == 1
