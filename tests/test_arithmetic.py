"""Figures that add up (issue 45): per step and device busy + idle = window and idle = its
causes + the short gaps, a step's idle before its device's first op and after its last
counted like any other gap; a finding never costs more per step than a step, time outside
every step said as such; steps from the training loop when nothing marks them; one-off
costs said once; capture notes in ``warnings``; readable titles.  Each rule on a small
trace built in memory, then on the real traces in ../shared/traces (skipped when absent).

Builder times are µs, the JSON's ns.
"""
from __future__ import annotations

import glob
import os
import re

import pytest

import tb_perfdiag
from tb_perfdiag.testing import TraceBuilder

SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..",
                      "shared", "traces")
TEMPLATE = re.compile(r"<[^<>…]{40,}")


def diagnose(b: TraceBuilder) -> dict:
    return tb_perfdiag.diagnose(b.build()).to_json()


def launch(b, thread, stream, name, at, dur, start, kdur, api="cudaLaunchKernel"):
    return b.launch(thread, api, at, dur, kernel=b.kernel(stream, name, start, kdur))


def check_arithmetic(d: dict) -> None:
    """The invariants a reader checks by eye (as ../shared/truth/invariants.py does)."""
    steps = d["steps"]
    longest = max((s["end_ns"] - s["start_ns"] for s in steps), default=0)
    for s in steps:
        for dev, v in s["devices"].items():
            win = v["end_ns"] - v["start_ns"]
            causes = sum(v["idle_by_cause_ns"].values())
            small = v["small_gaps"]["total_ns"]
            assert v["busy_ns"] + v["idle_ns"] == win, (s["id"], dev)
            assert abs(causes + small - v["idle_ns"]) <= max(1000, 0.01 * v["idle_ns"]), \
                (s["id"], dev, causes, small, v["idle_ns"])
    for dv in d["devices"]:
        if not dv["ops"]:
            continue
        sw = dv["steps_window"]
        assert sw["busy_ns"] + sw["idle_ns"] == sw["window_ns"]
        causes = sum(dv["idle_by_cause_ns"].values()) + dv["small_gaps"]["total_ns"]
        assert abs(causes - sw["idle_ns"]) <= max(1000, 0.01 * sw["idle_ns"]), dv["name"]
        assert sw["start_ns"] <= dv["start_ns"] and dv["end_ns"] <= sw["end_ns"]
    for f in d["findings"]:
        assert f["time_lost_ns_per_step"] <= longest * 1.001 or not longest, f["title"]
        assert len(f["title"]) <= 240 and not TEMPLATE.search(f["title"]), f["title"]


# ---- one arithmetic: the lead-in and the tail are gaps of their steps ----

def lead_and_tail_trace() -> TraceBuilder:
    """3 steps of 1000 µs at t = 1000k.  Step 0 loads data [0, 600) before its first
    launch; each step: L [t + 600, t + 605) → k [t + 610, t + 900) and, in the last step
    only, host work [2900, 3000) after the device's last kernel.  Gaps: the lead-in
    [0, 610): data 600 µs, L 5 µs launch, 5 µs the step's self (untraced); between steps
    [t + 900, t + 1610): data 600 …; the tail [2900, 3000): aten::mul 100 µs host compute."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    for k in range(3):
        t = 1000 * k
        b.step(main, k, t, 1000)
        b.op(main, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, 600,
             cat="user_annotation")
        launch(b, main, s7, "gemm", t + 600, 5, t + 610, 290)
    b.op(main, "aten::mul", 2900, 100)
    return b


def test_the_lead_in_and_the_tail_are_gaps_counted_everywhere():
    d = diagnose(lead_and_tail_trace())
    check_arithmetic(d)
    gaps = {(g["start_ns"], g["end_ns"]): g for g in d["gaps"]}
    lead, tail = gaps[(0, 610_000)], gaps[(2_900_000, 3_000_000)]
    assert lead["step"] == 0 and lead["cause"] == "data_loading"
    assert lead["shares_ns"]["data_loading"] == 600_000
    assert tail["step"] == 2 and tail["cause"] == "host_compute" and tail["next_op"] is None
    # step 0: its lead-in's 600 µs, and of the gap [900, 1610) that crosses into step 1
    # its 100 µs in step 0, shares in proportion (600 × 100 / 710)
    s0 = d["steps"][0]["devices"]["0"]
    assert s0["idle_by_cause_ns"]["data_loading"] == 600_000 + round(600_000 * 100 / 710)
    dev = d["devices"][0]
    # the duty cycle over the device's activity, and over the steps its idle adds up over
    assert (dev["start_ns"], dev["end_ns"]) == (610_000, 2_900_000)
    assert (dev["steps_window"]["start_ns"], dev["steps_window"]["end_ns"]) == (0, 3_000_000)
    assert dev["steps_window"]["duty_cycle"] == pytest.approx(870 / 3000)
    # the data-loading finding counts step 0's lead-in: 3 × 600 µs over 3 steps
    f = next(f for f in d["findings"] if f["kind"] == "input_bound")
    assert f["time_lost_ns"] == 1_800_000 and f["time_lost_ns_per_step"] == 600_000
    assert "600 µs per step on average (1.80 ms in 3 of 3 steps)" in f["title"]


def test_the_cli_states_which_window_a_duty_cycle_is_over(tmp_path):
    from tb_perfdiag.render.text import report
    r = report("x", tb_perfdiag.diagnose(lead_and_tail_trace().build()), 5)
    assert "duty cycle 29.0% over its 3 step(s)" in r and "over its active span" in r


# ---- time outside every step is not a cost per step ----

def outside_trace() -> TraceBuilder:
    """A warm-up kernel at [0, 10) long before the steps; 2 steps of 200 µs at t = 5000 +
    200k, each L [t, t + 5) → k [t + 10, t + 190).  The gap [10, 5010) lies outside every
    step but its last 10 µs (step 0 starts at 5000): 4990 µs outside."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    launch(b, main, s7, "warmup", 0, 0.5, 0, 10)
    b.op(main, "time.sleep", 20, 4970, cat="cpu_op")
    for k in range(2):
        t = 5000 + 200 * k
        b.step(main, k, t, 200)
        launch(b, main, s7, "gemm", t, 5, t + 10, 180)
    return b


def test_a_gap_before_every_step_is_time_outside_the_steps():
    d = diagnose(outside_trace())
    check_arithmetic(d)
    big = [f for f in d["findings"] if f.get("outside_steps_ns")]
    assert big, [f["title"] for f in d["findings"]]
    f = big[0]
    assert f["outside_steps_ns"] >= 4_900_000
    assert f["time_lost_ns_per_step"] <= 200_000
    assert "outside every step" in f["title"]
    assert any("outside every step" in w for w in d["warnings"]), d["warnings"]


# ---- steps from the training loop ----

def loop_trace(marker: str, n: int = 4, start: bool = False) -> TraceBuilder:
    """No ProfilerStep: n iterations of 1000 µs at t = 1000k, each forward L [t + 100,
    t + 105) → k [t + 110, t + 700), then the marker: at t (``start``) or at
    [t + 800, t + 950) (an optimizer step that ends the iteration)."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    for k in range(n):
        t = 1000 * k
        b.op(main, "aten::linear", t + 90, 20)
        launch(b, main, s7, "gemm", t + 100, 5, t + 110, 590)
        if start:
            b.op(main, marker, t, 80, cat="user_annotation")
        else:
            b.op(main, marker, t + 800, 150, cat="user_annotation")
    return b


@pytest.mark.parametrize("marker,start", [
    ("Optimizer.step#SGD.step", False),
    ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", True),
    ("Optimizer.zero_grad#SGD.zero_grad", True)])
def test_steps_from_the_training_loop_when_nothing_marks_them(marker, start):
    d = diagnose(loop_trace(marker, start=start))
    assert d["step_source"] == "training_loop" and d["step_marker"] == marker
    assert len(d["steps"]) == 4
    check_arithmetic(d)
    assert all(" of 4 steps" in f["title"] for f in d["findings"]
               if f.get("cause") and "outside" not in f["title"] and not f.get("once"))


def test_a_single_iteration_is_the_capture():
    d = diagnose(loop_trace("Optimizer.step#SGD.step", n=1))
    assert d["step_source"] == "whole_trace" and d["step_marker"] is None
    check_arithmetic(d)
    fs = [f for f in d["findings"] if f.get("cause")]
    assert fs and all(" capture" in f["title"] and "per step" not in f["title"] for f in fs)
    assert all(f.get("capture_share") for f in fs)


# ---- one-off costs ----

def test_a_cost_in_one_step_is_said_once():
    """4 steps of 1000 µs; step 0 frees memory [10, 600) before its kernel (a first-
    iteration autotune's cudaFree); every step L [t + 600, t + 605) → k [t + 610, t + 990)."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    for k in range(4):
        t = 1000 * k
        b.step(main, k, t, 1000)
        if k == 0:
            b.op(main, "cudaFree", 10, 590, cat="cuda_runtime")
        launch(b, main, s7, "gemm", t + 600, 5, t + 610, 380)
    d = diagnose(b)
    check_arithmetic(d)
    f = next(f for f in d["findings"] if f["kind"] == "allocator")
    assert f["once"] == {"step": 0, "ns": f["time_lost_ns"]}
    assert "once, 590 µs in step 0" in f["title"] and "per step" not in f["title"]


# ---- capture notes ----

def test_capture_notes_say_what_bends_the_figures():
    """3 steps of 1000 µs at t = 500 + 1000k.  GPU 1 only copies, before the first step
    (launched at 0: no step's work); GPU 0 computes in steps 0 and 2, nothing runs in
    step 1 but a cudaGraphLaunch whose kernels are not in the trace; step 2's kernel
    starts 50 µs before its launch call (clocks apart)."""
    b = TraceBuilder()
    main, g0, g1 = b.thread("python main"), b.stream(gpu=0), b.stream(gpu=1)
    b.launch(main, "cudaMemcpyAsync", 0, 5,
             kernel=b.memcpy(g1, "Memcpy DtoH (Device -> Pinned)", 10, 40))
    for k in range(3):
        b.step(main, k, 500 + 1000 * k, 1000)
    launch(b, main, g0, "gemm", 600, 5, 610, 500)
    b.op(main, "cudaGraphLaunch", 1700, 10, cat="cuda_runtime")
    launch(b, main, g0, "gemm", 2800, 5, 2750, 500)
    d = diagnose(b)
    w = "\n".join(d["warnings"])
    assert "GPU 1 ran only copies (1 memcpy/memset, no kernel)" in w
    assert "GPU 1: 40.0 µs of its 40.0 µs busy time ran outside every step" in w
    assert "1 of 3 steps ran no device work (step(s) 1)" in w
    assert "1 of 1 graph launches have no device work in the trace" in w
    assert "GPU 0: 1 of its 2 launched ops start before the host call" in w
    check_arithmetic(d)


def test_clock_notes_count_across_blocks(monkeypatch):
    """The clock note reads the ops a block at a time: the counts and the largest lead
    are those of all the ops, however the blocks cut them."""
    from tb_perfdiag.analysis.steps import capture_notes as notes
    b = TraceBuilder()
    main, g0 = b.thread("python main"), b.stream(gpu=0)
    b.step(main, 0, 0, 10_000)
    for k, lead in enumerate((0, 50, 0, 120, 30)):      # µs the kernel starts early
        t = 1000 + 1000 * k
        launch(b, main, g0, "gemm", t, 5, t - lead if lead else t + 10, 100)
    whole = [w for w in diagnose(b)["warnings"] if "launched ops start before" in w]
    monkeypatch.setattr(notes, "_BLOCK", 2)
    cut = [w for w in diagnose(b)["warnings"] if "launched ops start before" in w]
    assert whole == cut
    assert whole and "GPU 0: 3 of its 5 launched ops" in whole[0] and "120" in whole[0]


def test_a_clean_capture_has_no_notes():
    assert diagnose(lead_and_tail_trace())["warnings"] == []


# ---- readable titles ----

def test_titles_fold_templates_and_name_few_places():
    kernel = ("void Eigen::internal::EigenMetaKernel<Eigen::TensorEvaluator<Eigen::"
              "TensorAssignOp<Eigen::TensorMap<Eigen::Tensor<Eigen::half, 1, 1, long>, 16, "
              "Eigen::MakePointer>, Eigen::TensorConversionOp<Eigen::half, Eigen::TensorMap<"
              "Eigen::Tensor<float const, 1, 1, long>, 16, Eigen::MakePointer> const> const> "
              "const, Eigen::GpuDevice>, long>(Eigen::TensorEvaluator<…>, long)")
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    for k in range(3):
        t = 1000 * k
        b.step(main, k, t, 1000)
        launch(b, main, s7, "gemm", t, 5, t + 10, 100)
        # launched early, run late: a device-side wait named by the kernel it waited to run
        launch(b, main, s7, kernel, t + 20, 5, t + 700, 200)
    d = diagnose(b)
    check_arithmetic(d)
    titles = [f["title"] for f in d["findings"]]
    assert any("Eigen::internal::EigenMetaKernel<…>" in t for t in titles), titles


# ---- the real traces ----

def _real(pattern: str) -> list:
    return sorted(glob.glob(os.path.join(SHARED, pattern), recursive=True))


# a representative subset (the whole set: ../shared/truth/invariants.py): a one-step
# device-steps XSpace with a copy-only GPU, a trace with no step markers, whole-trace
# captures with idle after the device's last op, step-annotated multi-step and XLA
REAL = ["public/tensorflow-profiler/demo/**/*.xplane.pb",
        "public/param/et_replay/tests/inputs/linear_kineto.json.gz",
        "public/HolisticTraceAnalysis/tests/data/critical_path/simple_add/*.json.gz",
        "public/HolisticTraceAnalysis/tests/data/triton_example/*.json.gz",
        "public/HolisticTraceAnalysis/tests/data/mtia_inference_trace/*.json.gz",
        "public/param/et_replay/tests/inputs/dlrm_kineto/worker0*.json.gz",
        "public/kineto/tb_plugin/samples/resnet50_num_workers_4/*1623213129365*.json.gz",
        "cpu/torch_xla/steady_state/**/*.xplane.pb"]


@pytest.mark.parametrize("pattern", REAL)
def test_real_traces_add_up(pattern):
    paths = _real(pattern)
    if not paths:
        pytest.skip(f"../shared/traces has no {pattern}")
    check_arithmetic(tb_perfdiag.diagnose(paths[0]).to_json(all_gaps=False))


def test_linear_kineto_steps_are_its_optimizer_iterations():
    paths = _real("public/param/et_replay/tests/inputs/linear_kineto.json.gz")
    if not paths:
        pytest.skip("../shared/traces is absent")
    d = tb_perfdiag.diagnose(paths[0]).to_json(all_gaps=False)
    assert d["step_source"] == "training_loop" and d["step_marker"] == "Optimizer.step#SGD.step"
    assert len(d["steps"]) == 40
    recurring = [f for f in d["findings"] if f.get("cause") and not f.get("once")
                 and f["time_lost_ns_per_step"]]
    # said over the typical steps (the 40 less the 3 that stall: 0, 10 and 21), the
    # stalled steps' part once beside it
    n_typical = sum(1 for s in d["steps"] if not s.get("outlier"))
    assert n_typical == 37
    assert recurring and all(re.search(rf" in \d+ of {n_typical}\)", f["title"])
                             for f in recurring), [f["title"] for f in recurring]
    # the first iteration's 981 ms of cudaFree is the CUDA context being created: start-up,
    # said once, never the allocator's fix
    once = [f for f in d["findings"] if f["kind"] == "startup"]
    assert once and once[0]["once"]["step"] == 0 and "cudaFree" in once[0]["title"]
    assert not any("cudaFree" in f["title"] for f in d["findings"] if f["kind"] == "allocator")


def test_tf_gpu_capture_notes_its_copy_only_gpu_and_the_time_outside_its_step():
    paths = _real("public/tensorflow-profiler/demo/**/*.xplane.pb")
    if not paths:
        pytest.skip("../shared/traces is absent")
    d = tb_perfdiag.diagnose(paths[0]).to_json(all_gaps=False)
    check_arithmetic(d)
    w = "\n".join(d["warnings"])
    assert "GPU 1 ran only copies" in w and "outside every step" in w
    assert all(len(f["title"]) < 240 for f in d["findings"])


# ---- the CLI summarises a long step list ----

def test_the_cli_summarises_long_step_lists(tmp_path, capsys):
    """20 steps of 100 µs (step 7 of 400 µs: an outlier): the text names the median, the
    slowest steps and the outlier, not 20 lines; ``--steps all`` lists every step."""
    from tb_perfdiag.cli import main
    b = TraceBuilder()
    main_t, s7 = b.thread("python main"), b.stream()
    t = 0
    for k in range(20):
        n = 400 if k == 7 else 100
        b.step(main_t, k, t, n)
        launch(b, main_t, s7, "gemm", t, 5, t + 10, n - 20)
        t += n
    path = tmp_path / "w.1700000000000.pt.trace.json"
    path.write_bytes(b.to_bytes())
    assert main(["diagnose", str(path)]) == 0
    out = capsys.readouterr().out
    assert "steps: 20, median 100 µs; 1 outlier(s)" in out
    assert "step 7: 400 µs" in out and "(outlier)" in out
    assert out.count("     step ") <= 4
    assert main(["diagnose", str(path), "--steps", "all"]) == 0
    assert capsys.readouterr().out.count("     step ") == 20
