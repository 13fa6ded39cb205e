"""Fixes that fit the trace (issue 56, item 6): a fix the trace already applies is not
offered (torch.compile under CompiledFunction, num_workers>0 with worker processes,
pin_memory with pinned copies, jit for a jitted program), the next step is; titles fold
names at frame boundaries, never mid-word; a one-time cost prints no per-step figure on
any face.  Builder times are µs."""
from __future__ import annotations

import re

import tb_perfdiag
from tb_perfdiag.analysis.attribution.culprits import applied_fixes
from tb_perfdiag.analysis.findings.common import _short
from tb_perfdiag.render.text import report as text_report
from tb_perfdiag.testing import TraceBuilder

from conftest import shared_path

LOADER = "enumerate(DataLoader)#_{}DataLoaderIter.__next__"


def launch(b, thread, stream, name, at, dur, start, kdur, api="cudaLaunchKernel"):
    return b.launch(thread, api, at, dur, kernel=b.kernel(stream, name, start, kdur))


def findings(b: TraceBuilder) -> list:
    return tb_perfdiag.diagnose(b.build()).to_json()["findings"]


def host_work_trace(wrapper: str | None) -> TraceBuilder:
    """3 steps of 4000 µs: gemm launched at t, then 2 ms of aten::mul self time on the
    host (under ``wrapper``, AOTAutograd's CompiledFunction, when given) before relu's
    launch: a host-compute gap each step."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    for k in range(3):
        t = 4000 * k
        b.step(main, k, t, 4000)
        launch(b, main, s7, "gemm", t, 3, t + 4, 100)
        if wrapper:
            b.op(main, wrapper, t + 100, 2100)
        b.op(main, "aten::mul", t + 110, 2000)
        launch(b, main, s7, "relu", t + 2230, 5, t + 2240, 1700)
    return b


def test_a_compiled_step_is_offered_cuda_graphs_not_torch_compile():
    plain = [f for f in findings(host_work_trace(None)) if f["kind"] == "host_compute"]
    assert plain and "torch.compile or CUDA graphs" in plain[0]["fix"]
    fs = [f for f in findings(host_work_trace("CompiledFunction")) if f["kind"] == "host_compute"]
    assert fs
    for f in fs:
        assert "cut per-op overhead with torch.compile" not in f["fix"]
        assert "already runs under torch.compile" in f["fix"]
        assert "reduce-overhead" in f["fix"] and "graph breaks" in f["fix"]


def loader_trace(kind: str) -> TraceBuilder:
    """3 steps: each fetches its batch for 2 ms (the DataLoader's __next__, of the
    ``kind`` iterator) between two kernels: a data-loading gap each step."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    for k in range(3):
        t = 4000 * k
        b.step(main, k, t, 4000)
        launch(b, main, s7, "gemm", t, 3, t + 4, 100)
        b.op(main, LOADER.format(kind), t + 110, 2000, cat="user_annotation")
        launch(b, main, s7, "relu", t + 2230, 5, t + 2240, 1700)
    return b


def test_a_loader_with_worker_processes_is_not_told_to_use_workers():
    fs = [f for f in findings(loader_trace("MultiProcessing")) if f["kind"] == "input_bound"]
    assert fs
    for f in fs:
        assert "num_workers>0" not in f["fix"]
        assert "already loads in worker processes" in f["fix"]
    # the main-thread loader is still told to use workers
    single = [f for f in findings(loader_trace("SingleProcess")) if f["kind"] == "input_bound"]
    assert single and "num_workers>0" in single[0]["fix"]


def h2d_trace(copy: str) -> TraceBuilder:
    """3 steps: the host stages a host→device copy (its call 2000 µs) between gemm and
    relu; ``copy`` names the device copy (pinned or pageable memory)."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    for k in range(3):
        t = 4000 * k
        b.step(main, k, t, 4000)
        launch(b, main, s7, "gemm", t, 3, t + 4, 100)
        b.op(main, "aten::copy_", t + 202, 2006)
        b.launch(main, "cudaMemcpyAsync", t + 205, 2000,
                 kernel=b.memcpy(s7, copy, t + 2200, 5))
        launch(b, main, s7, "relu", t + 2230, 5, t + 2240, 1764)
    return b


def test_pinned_copies_are_not_told_to_pin_memory():
    trace = h2d_trace("Memcpy HtoD (Pinned -> Device)").build()
    assert "pinned" in applied_fixes(trace)
    fs = [f for f in tb_perfdiag.diagnose(trace).to_json()["findings"]
          if f["kind"] == "h2d_transfer"]
    assert fs
    for f in fs:
        assert "pin_memory" not in f["fix"] and "already from pinned memory" in f["fix"]
        assert "non_blocking=True" in f["fix"]
    pageable = h2d_trace("Memcpy HtoD (Pageable -> Device)").build()
    assert "pinned" not in applied_fixes(pageable)


def jax_trace() -> TraceBuilder:
    """JAX on a GPU, 3 steps of 4000 µs: the jitted step's dispatch
    ``PjitFunction(train_step)`` launches its kernel, then 2 ms of the user's Python
    (``$train.py:30 log_metrics``) before the next step's dispatch."""
    b = TraceBuilder("xspace")
    py = b.thread("python")
    s = b.stream(gpu=0, stream=7)
    for k in range(3):
        t = 4000 * k
        b.step(py, k, t, 4000)
        b.op(py, "PjitFunction(train_step)", t + 1, 100)
        launch(b, py, s, "fusion.1", t + 10, 5, t + 20, 900, api="cuLaunchKernel")
        b.op(py, "$train.py:30 log_metrics", t + 200, 3000)
    return b


def test_a_jitted_jax_step_is_not_told_to_jit_the_step():
    trace = jax_trace().build()
    assert "jitted" in applied_fixes(trace)
    fs = [f for f in tb_perfdiag.diagnose(trace).to_json()["findings"]
          if f["kind"] in ("host_compute", "launch_bound")]
    assert fs
    for f in fs:
        assert "jit the whole step" not in f["fix"] and "already jitted" in f["fix"]


def test_names_fold_at_frame_boundaries():
    name = "autograd::engine::evaluate_function: CompiledFunctionBackward"
    got = _short(name)
    assert got == "…engine::evaluate_function: CompiledFunctionBackward"
    assert _short("aten::mm") == "aten::mm"
    word = "x" * 70                      # one long word: whole, never cut inside
    assert _short(word) == word
    # a template argument is still folded as the op table folds it
    assert _short("cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>") \
        == "cutlass::Kernel<cutlass_80_tensorop_s168…>"


def test_a_one_step_cost_prints_no_rate_per_step_in_the_cli():
    """4 steps; step 0 frees memory for 590 µs before its kernel: said once, in the title
    and on the CLI's line, with no "/step" figure."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    for k in range(4):
        t = 1000 * k
        b.step(main, k, t, 1000)
        if k == 0:
            b.op(main, "cudaFree", 10, 590, cat="cuda_runtime")
        launch(b, main, s7, "gemm", t + 600, 5, t + 610, 380)
    diag = tb_perfdiag.diagnose(b.build())
    text = text_report("t", diag, top=20)
    line = next(x for x in text.splitlines() if x.startswith("   * ") and "once" in x)
    assert "/step" not in line and "per step" not in line


def test_df_index_resolver_is_offered_what_comes_after_torch_compile():
    d = tb_perfdiag.diagnose(shared_path(
        "public", "HolisticTraceAnalysis", "tests", "data", "df_index_resolver",
        "df_index_resolver.json.gz")).to_json(all_gaps=False)
    assert d["findings"]
    for f in d["findings"]:
        assert "cut per-op overhead with torch.compile" not in f["fix"], f["title"]
        # no name cut inside a word (a template's folded argument aside)
        assert not re.search(r"\w…", re.sub(r"<[^<>]*…>?", "<>", f["title"])), f["title"]
    hc = [f for f in d["findings"] if f["kind"] == "host_compute"]
    assert hc and all("reduce-overhead" in f["fix"] for f in hc)
