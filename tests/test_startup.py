"""Start-up is a cause of its own (GUIDE §4, issue 56): the profiler's own start and stop,
CUDA/HIP context creation and lazy module loading (a first-iteration runtime call far
longer than the same call later), library handles and first-iteration autotuning.  It is
checked before the other host-side causes, has its own findings (once, never per step),
a capture note, and the steady-state figures leave it out.  Builder times are µs."""
from __future__ import annotations

import pytest

import tb_perfdiag
from tb_perfdiag.analysis import causes as C
from tb_perfdiag.analysis.steps import startup
from tb_perfdiag.render.text import report as text_report
from tb_perfdiag.testing import TraceBuilder
from tb_perfdiag.trace.strings import Strings

from conftest import shared_path

STARTUP = C.ALL.index(C.STARTUP)


def launch(b, thread, stream, name, at, dur, start, kdur, api="cudaLaunchKernel"):
    return b.launch(thread, api, at, dur, kernel=b.kernel(stream, name, start, kdur))


def steps_trace(first: tuple, *, in_step: int = 0, later: tuple | None = None,
                n: int = 4) -> TraceBuilder:
    """``n`` steps of 1000 µs (step 0 longer by the first call's length); a runtime call
    ``first`` = (name, µs, cat) at the start of step ``in_step`` before its kernel; every
    other step calls ``later`` = (name, µs) first when given.  Each step then launches
    one 300 µs kernel."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    t = 0
    for k in range(n):
        long_ = k == in_step
        span = 1000 + (first[1] if long_ else 0)
        b.step(main, k, t, span)
        if long_:
            b.op(main, first[0], t + 10, first[1], cat=first[2])
        elif later:
            b.op(main, later[0], t + 10, later[1], cat="cuda_runtime")
        at = t + span - 400
        launch(b, main, s7, "gemm", at, 5, at + 10, 300)
        t += span
    return b


def report(b: TraceBuilder):
    trace = b.build()
    diag = tb_perfdiag.diagnose(trace)
    return trace, diag, diag.to_json()


def test_first_iteration_cudaFree_far_longer_than_later_is_context_creation():
    """Step 0 opens with a 300 ms cudaFree (the first CUDA call: the context); later
    steps free in 20 µs.  The gap before step 0's kernel is start-up, with a finding of
    its own said once, never the allocator's "never call empty_cache()"."""
    b = steps_trace(("cudaFree", 300_000, "cuda_runtime"), later=("cudaFree", 20))
    trace, diag, d = report(b)
    g = diag.gaps
    row = int(g.duration.argmax())
    assert C.ALL[int(g.cause[row])] == C.STARTUP
    assert g.shares[row, STARTUP] == 300_000 * 10**6
    assert trace.event_name(int(g.culprit[row])) == "cudaFree"
    f = next(f for f in d["findings"] if f["kind"] == "startup")
    assert "once" in f["title"] and "context creation" in f["title"]
    assert "/step" not in f["title"] and "per step" not in f["title"]
    assert f["time_lost_ns_per_step"] == 0 and f["one_time"] and f["once"]["step"] == 0
    assert f["time_lost_ns"] == 300_000_000
    assert "schedule(wait=1, warmup=1, active=3)" in f["fix"]
    assert not any(x["kind"] == "allocator" for x in d["findings"])
    assert "empty_cache" not in " ".join(x["fix"] for x in d["findings"])
    # steady state: step 0 is no typical step, the duty over the steps leaves it out
    assert d["steps"][0]["outlier"]
    assert d["startup_steps"] == [0] and d["steady_step_ns"] == 1_000_000
    sw = d["devices"][0]["steps_window"]
    assert sw["startup_ns"] == 300_000_000
    assert sw["steady_duty_cycle"] == pytest.approx(
        sw["busy_ns"] / (sw["window_ns"] - sw["startup_ns"]))
    assert sw["steady_duty_cycle"] > sw["duty_cycle"]
    # the whole-window figures show it as start-up, a row of the idle-by-cause arrays
    assert d["devices"][0]["idle_by_cause_ns"]["startup"] == 300_000_000
    assert d["steps"][0]["devices"]["0"]["idle_by_cause_ns"]["startup"] == 300_000_000
    assert diag.steps.idle_by_cause[0, 0, STARTUP] == 300_000 * 10**6
    note = next(w for w in d["warnings"] if w.startswith("start-up"))
    assert "300 ms" in note and "leave it out" in note
    # the CLI prints no rate per step for it
    text = text_report("t", diag, top=20)
    line = next(x for x in text.splitlines() if "context creation" in x and "*" in x)
    assert "/step" not in line


def test_a_long_cudaFree_later_in_the_run_is_the_allocator():
    """The same 300 ms cudaFree in step 2 (the loop, not its first iteration) is the
    allocator's: start-up is only what the first iteration pays."""
    b = steps_trace(("cudaFree", 300_000, "cuda_runtime"), in_step=2, later=("cudaFree", 20))
    _, diag, d = report(b)
    g = diag.gaps
    row = int(g.duration.argmax())
    assert C.ALL[int(g.cause[row])] == C.ALLOCATOR
    assert not any(f["kind"] == "startup" for f in d["findings"])
    assert "startup_ns" not in d["devices"][0]["steps_window"]


def test_a_first_call_only_a_few_times_its_later_length_is_not_start_up():
    """Step 0's cudaFree of 30 ms against 10 ms later: not "far longer" than its kind
    (the factor is decided against the trace's own later calls, never by name)."""
    b = steps_trace(("cudaFree", 30_000, "cuda_runtime"), later=("cudaFree", 10_000))
    _, diag, _ = report(b)
    assert not (diag.gaps.shares[:, STARTUP] > 0).any()


def test_first_call_of_a_single_window_capture_against_its_later_calls():
    """No steps (the alexnet shape): the process's first runtime call,
    cudaDeviceGetStreamPriorityRange of 500 ms, then ten more of 1 µs each: context
    creation, judged against the same call after it."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    b.op(main, "aten::empty_strided", 0, 500_020)
    b.op(main, "cudaDeviceGetStreamPriorityRange", 10, 500_000, cat="cuda_runtime")
    t = 500_100
    for k in range(10):
        b.op(main, "cudaDeviceGetStreamPriorityRange", t, 1, cat="cuda_runtime")
        launch(b, main, s7, "gemm", t + 5, 5, t + 15, 100)
        t += 200
    trace, diag, d = report(b)
    assert d["step_source"] == "whole_trace"
    row = int(diag.gaps.duration.argmax())
    assert C.ALL[int(diag.gaps.cause[row])] == C.STARTUP
    f = next(f for f in d["findings"] if f["kind"] == "startup")
    assert "cudaDeviceGetStreamPriorityRange" in f["title"] and "once" in f["title"]
    assert "per step" not in f["title"] and f["time_lost_ns_per_step"] == 0


def test_hip_init_is_hip_context_creation():
    b = steps_trace(("hipInit", 200_000, "cuda_runtime"), later=("hipGetDevice", 2))
    _, _, d = report(b)
    f = next(f for f in d["findings"] if f["kind"] == "startup")
    assert f["title"].startswith("HIP context creation") and "hipInit" in f["title"]


def test_library_handle_creation_is_start_up_by_name():
    """cudnnCreate has no later call to compare with: creating a library handle is
    start-up wherever the first iteration does it."""
    b = steps_trace(("cudnnCreate", 40_000, "cuda_runtime"), later=("cudaGetDevice", 2))
    _, diag, d = report(b)
    row = int(diag.gaps.duration.argmax())
    assert C.ALL[int(diag.gaps.cause[row])] == C.STARTUP
    f = next(f for f in d["findings"] if f["kind"] == "startup")
    assert f["startup"]["kind"] == "handle" and "cudnnCreate" in f["title"]


def test_a_sync_inside_the_profiler_is_start_up_not_host_sync():
    """torch.profiler's schedule switching to record (``_transit_action``) synchronises
    for 2 ms in step 1 while the device is idle: that wait is the profiler's own,
    checked before the sync rule."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    for k in range(4):
        t = 1000 * k + (2000 if k > 1 else 0)
        span = 3000 if k == 1 else 1000
        b.step(main, k, t, span)
        if k == 1:
            fr = b.op(main, "torch/profiler/profiler.py(700): _transit_action", t + 10, 2100,
                      cat="python_function")
            b.op(main, "cudaDeviceSynchronize", t + 20, 2000, cat="cuda_runtime")
            assert fr
        at = t + span - 400
        launch(b, main, s7, "gemm", at, 5, at + 10, 300)
    _, diag, d = report(b)
    row = int(diag.gaps.duration.argmax())
    assert C.ALL[int(diag.gaps.cause[row])] == C.STARTUP
    assert diag.gaps.shares[row, C.ALL.index(C.HOST_SYNC)] == 0
    f = next(f for f in d["findings"] if f["kind"] == "startup")
    assert f["startup"]["kind"] == "profiler" and "profiler" in f["title"]
    assert not any(x["kind"] == "host_sync" for x in d["findings"])


def jax_gpu_start_trace(start_ms: float = 9720.0) -> TraceBuilder:
    """The JAX GPU capture of issue 56: ``jax.profiler.start_trace`` takes 9.72 s on the
    Python thread (its frame ``$profiler.py:101 start_trace``), then a jitted step runs
    13 ms of device work."""
    b = TraceBuilder("xspace")
    py = b.thread("python")
    s = b.stream(gpu=0, stream=7)
    b.op(py, "$profiler.py:101 start_trace", 0, start_ms * 1000)
    t = start_ms * 1000 + 50
    b.op(py, "$train.py:20 main", t, 13_500)
    b.op(py, "PjitFunction(train_step)", t + 10, 13_400)
    for k in range(13):
        launch(b, py, s, f"fusion.{k}", t + 20 + k * 10, 5, t + 100 + k * 1000, 990,
               api="cuLaunchKernel")
    return b


def test_jax_profiler_start_trace_is_start_up_not_host_compute():
    """Issue 56's JAX GPU capture: 9.72 s of the 9.73 s capture is the profiler starting,
    not host work between launches, and its fix is never "jit the whole step"."""
    trace, diag, d = report(jax_gpu_start_trace())
    g = diag.gaps
    row = int(g.duration.argmax())
    assert g.duration[row] > 9_000_000 * 10**6
    assert C.ALL[int(g.cause[row])] == C.STARTUP
    assert g.shares[row, C.ALL.index(C.HOST_COMPUTE)] < 10**9      # < 1 ms of real host work
    f = next(f for f in d["findings"] if f["kind"] == "startup")
    assert "profiler" in f["title"].lower() and "once" in f["title"]
    assert "start_trace" in f["fix"] and "jit the whole step" not in f["fix"]
    assert not any(x.get("cause") == C.HOST_COMPUTE and x["time_lost_ns"] > 10**9
                   for x in d["findings"])
    note = next(w for w in d["warnings"] if w.startswith("start-up"))
    assert "(100%)" in note and "The profiler starting and stopping" in note


def test_compatibility_summaries_place_start_up():
    """HTA: the device waited for the host to get going (host_wait); TraceLens' CPU
    axis names it start-up."""
    _, diag, d = report(jax_gpu_start_trace())
    assert C.HTA[C.STARTUP] == "host_wait"
    gap = max(d["gaps"], key=lambda x: x["duration_ns"])
    assert gap["cause"] == "startup" and gap["hta_category"] == "host_wait"
    assert gap["tracelens"]["cpu"] == "startup"


@pytest.mark.parametrize("name,yes", [
    ("$profiler.py:101 start_trace", True), ("$profiler.py:271 stop_trace", True),
    ("torch/profiler/profiler.py(612): __exit__", True),
    ("torch/profiler/profiler.py(620): start", True),
    ("tensorflow/python/profiler/profiler_v2.py(101): start", True),
    ("torch_xla/debug/profiler.py(80): trace", True),
    ("torch_xla/debug/profiler.py(40): start_server", True),
    # record_function is the user's annotation; JAX's trace() frames are its start/stop
    # calls (and annotate_function's wrapper around user code)
    ("torch/autograd/profiler.py(700): __enter__", False),
    ("$profiler.py:506 trace", False), ("train.py(12): start", False),
    ("$profiler.py:101 step", False)])
def test_profiler_frames(name, yes):
    assert startup.profiler_frame(name) is yes


def test_strings_found_by_part_and_by_prefix():
    s = Strings(["cudaFree", "aten::mm", "cudnnCreate", "", "cuInit", "hipInit", "cu"])
    assert s.ids_containing("Create") == [2]
    assert s.ids_containing("cu") == [0, 2, 4, 6]
    assert s.ids_starting("cu").tolist() == [0, 2, 4, 6]
    assert s.ids_starting("hip").tolist() == [5]
    assert s.ids_starting("zzz").tolist() == []


# ---- real captures nobody tuned for ----

def _real(*parts):
    return tb_perfdiag.diagnose(shared_path(*parts))


def test_linear_kineto_first_step_cudaFree_is_start_up():
    diag = _real("public", "param", "et_replay", "tests", "inputs", "linear_kineto.json.gz")
    d = diag.to_json(all_gaps=False)
    g = diag.gaps
    row = int(g.duration.argmax())
    assert C.ALL[int(g.cause[row])] == C.STARTUP
    f = next(f for f in d["findings"] if f["kind"] == "startup")
    assert "cudaFree" in f["title"] and "once" in f["title"] and f["once"]["step"] == 0
    assert 975e6 < f["time_lost_ns"] < 990e6 and f["time_lost_ns_per_step"] == 0
    assert not any("empty_cache" in x["fix"] for x in d["findings"] if "cudaFree" in x["title"])
    assert any(w.startswith("start-up") for w in d["warnings"])
    assert d["devices"][0]["steps_window"]["startup_ns"] > 975e6


def test_alexnet_stream_priority_query_is_context_creation():
    """The first CUDA call of the alexnet benchmark, a 29.9 s
    cudaDeviceGetStreamPriorityRange, creates the context."""
    diag = _real("public", "HolisticTraceAnalysis", "tests", "data", "critical_path",
                 "alexnet", "benchmark_result_2869224_1695835535_trace.json.gz")
    g = diag.gaps
    row = int(g.duration.argmax())
    assert C.ALL[int(g.cause[row])] == C.STARTUP
    assert g.shares[row, STARTUP] > 29_900_000 * 10**6
    trace_name = diag.refs.name_of(int(g.culprit[row]))
    assert trace_name == "cudaDeviceGetStreamPriorityRange"
    d = diag.to_json(all_gaps=False)
    f = next(f for f in d["findings"] if f["kind"] == "startup")
    assert "cudaDeviceGetStreamPriorityRange" in f["title"]
    assert not any("cudaDeviceGetStreamPriorityRange" in x["title"] for x in d["findings"]
                   if x["kind"] == "allocator")


def test_the_profilers_transition_in_every_step_leaves_the_steps_typical():
    """torch.profiler's ``_transit_action`` runs at every prof.step(), a few µs each: its
    time is the profiler's own, yet no step becomes an outlier for it."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    for k in range(4):
        t = 1000 * k
        b.step(main, k, t, 1000)
        b.op(main, "torch/profiler/profiler.py(700): _transit_action", t + 1, 3,
             cat="python_function")
        launch(b, main, s7, "gemm", t + 600, 5, t + 610, 380)
    _, diag, d = report(b)
    assert not any(s["outlier"] for s in d["steps"])


def test_first_iteration_autotuning_is_start_up_but_a_compilers_is_compilation():
    """cudnnFindConvolutionForwardAlgorithm in step 0 (cudnn.benchmark trying algorithms)
    is start-up; an autotuner inside XLA's compile is the compilation's."""
    b = steps_trace(("cudnnFindConvolutionForwardAlgorithm", 40_000, "cuda_runtime"),
                    later=("cudaGetDevice", 2))
    _, diag, d = report(b)
    row = int(diag.gaps.duration.argmax())
    assert C.ALL[int(diag.gaps.cause[row])] == C.STARTUP
    f = next(f for f in d["findings"] if f["kind"] == "startup")
    assert f["startup"]["kind"] == "autotune" and f["title"].startswith("First-iteration")
    assert startup.kind_of("GemmAutotuner::Autotune") == startup.AUTOTUNE


def test_the_cli_checks_start_up_over_typical_steps_and_prints_it_once(tmp_path):
    """``check --max-idle-cause startup=1%`` passes on a capture whose first step creates
    the context (typical steps leave it out); ``diagnose`` says the duty over the steps
    without it and prints its finding with no rate per step."""
    import os
    import subprocess
    import sys
    path = tmp_path / "warm.pt.trace.json"
    path.write_bytes(steps_trace(("cudaFree", 300_000, "cuda_runtime"),
                                 later=("cudaFree", 20)).to_bytes())
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))] +
        [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    run = lambda *a: subprocess.run([sys.executable, "-m", "tb_perfdiag.cli", *a],  # noqa: E731
                                    capture_output=True, text=True, timeout=300, env=env)
    r = run("check", str(path), "--max-idle-cause", "startup=1%")
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "start-up" in r.stdout.lower()
    r = run("diagnose", str(path))
    assert r.returncode == 0, r.stderr
    assert "leaving out 300 ms of start-up" in r.stdout
    line = next(x for x in r.stdout.splitlines() if "context creation" in x and "* " in x)
    assert "once" in line and "/step" not in line
    assert "warning: start-up" in r.stdout
