"""One step a gap (issue 56, item 5): every gap lies in the one step whose window holds most
of it, or before the first step / after the last, and the gap list, the findings (their
cited gaps, "once in step N", the steps they count, the part "outside every step"), the
capture notes and the text report name the same place.  Small traces built in memory,
then the TPU inference capture and the TF GPU demo run in ../shared/traces (skipped when
absent).

Builder times are µs, the JSON's ns.
"""
from __future__ import annotations

import glob
import os
import re

import numpy as np
import pytest

import tb_perfdiag
from tb_perfdiag.analysis.steps.windows import AFTER_LAST, BEFORE_FIRST, gap_steps, in_step_part
from tb_perfdiag.render.text import report
from tb_perfdiag.testing import TraceBuilder

SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..",
                      "shared", "traces")


def launch(b, thread, stream, name, at, dur, start, kdur):
    return b.launch(thread, "cudaLaunchKernel", at, dur, kernel=b.kernel(stream, name, start, kdur))


def diagnose(b):
    return tb_perfdiag.diagnose(b.build()).to_json(all_gaps=True)


def place(g: dict) -> object:
    """A gap's place as the JSON says it: its step id, or where it lies outside them."""
    return g["step"] if g["step"] is not None else g["outside"]   # set only then


def check_one_place(d: dict) -> None:
    """Every finding that cites a gap names it where the gap list does, says "once in
    step N" only of a step its gaps on that device lie in, and counts no cost per step
    for gaps in no step."""
    gaps = {g["id"]: g for g in d["gaps"]}
    for g in d["gaps"]:
        assert (g["step"] is None) != (g.get("outside") is None), g
    for f in d["findings"]:
        refs = f["evidence"].get("gap_refs") or []
        cited = [gaps[r["id"]] for r in refs if r["id"] in gaps]
        for r in refs:
            if r["id"] in gaps:
                assert (r["step"], r.get("outside")) == (gaps[r["id"]]["step"],
                                                         gaps[r["id"]].get("outside")), (f["title"], r)
        in_steps = {g["step"] for g in cited if g["step"] is not None}
        if not f.get("cause") or not cited:
            continue
        assert in_steps <= set(f["steps"]), (f["title"], f["steps"], in_steps)
        # every gap cited (the evidence holds the largest few): the steps are theirs
        n = re.match(r"(\d+) gap\(s\)", f["detail"])
        if n and int(n.group(1)) == len(cited):
            assert set(f["steps"]) == in_steps, (f["title"], f["steps"], in_steps)
            if not in_steps:
                assert f["time_lost_ns_per_step"] == 0 and "once" not in f, f["title"]
                assert " in step " not in f["title"], f["title"]
            if f.get("once"):
                assert f["once"]["step"] in in_steps, (f["title"], in_steps)
            for k in re.findall(r"once, [^,]* in step (\d+)", f["title"]):
                assert int(k) in in_steps, (f["title"], in_steps)


# ---- the rule on windows alone ----

def test_the_window_holding_most_of_a_gap_is_its_step():
    wb, we = np.array([100, 200, 300]), np.array([200, 300, 400])
    gs = np.array([0, 10, 150, 180, 250, 390, 395, 450, 90])
    ge = np.array([50, 101, 160, 220, 350, 500, 405, 460, 110])
    got = gap_steps(wb, we, gs, ge).tolist()
    assert got == [BEFORE_FIRST,       # all before the first window
                   BEFORE_FIRST,       # 90 before, 1 in window 0: before the first step
                   0,                  # inside window 0
                   1,                  # 20 in window 0, 20 in window 1: the later
                   2,                  # 50 / 50 in windows 1 and 2: the later
                   AFTER_LAST,         # 10 in window 2, 100 after
                   2,                  # 5 in window 2, 5 after: the step keeps it
                   AFTER_LAST,         # all after
                   0]                  # 10 before, 10 in window 0: the step keeps it
    inside = in_step_part(wb, we, gs, ge, np.array(got)).tolist()
    assert inside == [0, 0, 10, 40, 100, 0, 5, 0, 10]


def test_windows_out_of_order_and_closed_ones_are_read_by_time():
    """Windows given out of time order (a device Steps line read as it came), and a closed
    window (no time): the steps are still the windows' own indices."""
    wb, we = np.array([300, 100, 250]), np.array([400, 200, 250])
    gs, ge = np.array([120, 310, 210]), np.array([180, 330, 240])
    got = gap_steps(wb, we, gs, ge).tolist()
    assert got[0] == 1 and got[1] == 0
    assert got[2] == 0                 # in the hole between the windows: the next one


# ---- in memory: before the first step, after the last, across two ----

def before_trace() -> TraceBuilder:
    """A warm-up kernel [0, 10); 3 steps of 200 µs at t = 5000 + 200k, each L [t, t + 5)
    → k [t + 10, t + 190).  The gap [10, 5010): 4990 µs before step 0, 10 µs in it."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    launch(b, main, s7, "warmup", 0, 0.5, 0, 10)
    b.op(main, "time.sleep", 20, 4970, cat="cpu_op")
    for k in range(3):
        t = 5000 + 200 * k
        b.step(main, k, t, 200)
        launch(b, main, s7, "gemm", t, 5, t + 10, 180)
    return b


def test_a_gap_mostly_before_the_first_step_lies_before_it():
    d = diagnose(before_trace())
    check_one_place(d)
    g = next(g for g in d["gaps"] if g["start_ns"] == 10_000)
    assert g["step"] is None and g["outside"] == "before_first_step"
    f = next(f for f in d["findings"] if g["id"] in f["evidence"]["gaps"])
    assert f["time_lost_ns_per_step"] == 0 and "once" not in f
    assert "outside every step" in f["title"] and "in step 0" not in f["title"]
    assert any("lie before the first step" in w for w in d["warnings"]), d["warnings"]
    r = report("x", tb_perfdiag.diagnose(before_trace().build()), 5)
    assert "before the first step (gap 0-10000)" in r, r


def after_trace() -> TraceBuilder:
    """A TPU with a Steps line: 3 steps of 200 µs at t = 200k, each with an op [t + 10,
    t + 190); after them one more op at [5010, 5020) (a step's windows are its Steps
    events: the work a host step launches late lies beyond them): the gap [590, 5010) is
    10 µs in step 2 and 4410 µs after it."""
    b = TraceBuilder("xspace")
    ops, steps = b.line("/device:TPU:0", "XLA Ops"), b.line("/device:TPU:0", "Steps")
    for k in range(3):
        t = 200 * k
        b.op(steps, str(k), t, 200, stats={"step_num": k})
        b.op(ops, "fusion.1", t + 10, 180, stats={"hlo_op": "fusion.1"})
    b.op(ops, "fusion.2", 5010, 10, stats={"hlo_op": "fusion.2"})
    return b


def test_a_gap_mostly_after_the_last_step_lies_after_it():
    d = diagnose(after_trace())
    check_one_place(d)
    g = next(g for g in d["gaps"] if g["end_ns"] == 5_010_000)
    assert g["step"] is None and g["outside"] == "after_last_step"
    f = next(f for f in d["findings"] if g["id"] in f["evidence"]["gaps"])
    # its whole 4420 µs outside every step (the 10 µs in step 2's window too); per step
    # only the steps' own 20 + 20 + 10 µs gaps
    assert f["outside_steps_ns"] == 4_420_000 and "outside every step" in f["title"]
    assert f["time_lost_ns_per_step"] == 50_000 // 3
    assert f["evidence"]["gap_refs"][f["evidence"]["gaps"].index(g["id"])]["outside"] == \
        "after_last_step"
    assert any("lie after the last step" in w for w in d["warnings"]), d["warnings"]
    r = report("x", tb_perfdiag.diagnose(after_trace().build()), 5)
    assert f"after the last step (gap {g['id']})" in r, r


def across_trace() -> TraceBuilder:
    """3 steps of 1000 µs at t = 1000k.  Step 0: L [0, 5) → k [10, 100), then the host
    computes (aten::mul) [100, 1000); steps 1, 2: L [t, t + 5) → k [t + 10, t + 990).  The
    gap [100, 1010) is 900 µs in step 0 and 10 µs in step 1 (it waited for step 1's
    kernel): it is step 0's; [1990, 2010) is 10 and 10: the later step's."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    for k in range(3):
        t = 1000 * k
        b.step(main, k, t, 1000)
        launch(b, main, s7, "gemm", t, 5, t + 10, 90 if k == 0 else 980)
    b.op(main, "aten::mul", 100, 899)
    return b


def test_a_gap_across_two_steps_is_the_one_holding_most_of_it():
    d = diagnose(across_trace())
    check_one_place(d)
    by_start = {g["start_ns"]: g for g in d["gaps"]}
    assert by_start[100_000]["step"] == 0
    assert by_start[1_990_000]["step"] == 2
    f = next(f for f in d["findings"] if by_start[100_000]["id"] in f["evidence"]["gaps"])
    assert f["once"]["step"] == 0 and "once, 899 µs in step 0" in f["title"], f["title"]
    # the step chart counts the gap in each window for its part (busy + idle = window)
    s0, s1 = (d["steps"][k]["devices"]["0"] for k in (0, 1))
    assert sum(s0["idle_by_cause_ns"].values()) >= 900_000
    assert sum(s1["idle_by_cause_ns"].values()) < 100_000


def test_a_device_active_only_before_the_steps_idles_through_them():
    """Two devices: GPU 1 copies at [10, 50) (launched at 0, by no step); then 3 steps of
    100 µs at t = 500 + 100k in which GPU 0 computes.  GPU 1's idle up to the steps lies
    before the first step, and its idle in the steps is the steps' 300 µs (the last of
    three equal parts: the later step) — not one 750 µs gap "in step 2"."""
    b = TraceBuilder()
    main, g0, g1 = b.thread("python main"), b.stream(gpu=0), b.stream(gpu=1)
    b.launch(main, "cudaMemcpyAsync", 0, 5,
             kernel=b.memcpy(g1, "Memcpy DtoH (Device -> Pinned)", 10, 40))
    for k in range(3):
        t = 500 + 100 * k
        b.step(main, k, t, 100)
        launch(b, main, g0, "gemm", t, 5, t + 10, 80)
    d = diagnose(b)
    check_one_place(d)
    gpu1 = next(dv["id"] for dv in d["devices"] if dv["name"] == "GPU 1")
    on1 = sorted((g for g in d["gaps"] if g["device"] == gpu1), key=lambda g: g["start_ns"])
    assert [(g["start_ns"], g["end_ns"], place(g)) for g in on1] == \
        [(50_000, 500_000, "before_first_step"), (500_000, 800_000, 2)]
    assert all(d["steps"][k]["devices"][str(gpu1)]["idle_ns"] == 100_000 for k in range(3))


# ---- the real traces ----

def _real(pattern: str) -> list:
    return sorted(glob.glob(os.path.join(SHARED, pattern), recursive=True))


def test_tpu_inference_wait_before_step_0_lies_before_it():
    """tpu_inference_2: the 5.5 s wait runs 13.47 → 19.02 s; step 0's window starts 330 ns
    before it ends.  The gap list, its finding and the device→host reads all say it lies
    before the first step."""
    paths = _real("public/xprof/**/tpu_inference_2.xplane.pb")
    if not paths:
        pytest.skip("../shared/traces is absent")
    diag = tb_perfdiag.diagnose(paths[0])
    d = diag.to_json(all_gaps=True)
    check_one_place(d)
    big = d["gaps"][0]
    assert big["duration_ns"] > 5_000_000_000 and big["outside"] == "before_first_step"
    f = next(f for f in d["findings"] if big["id"] in f["evidence"]["gaps"])
    assert "in step 0" not in f["title"] and "outside every step" in f["title"], f["title"]
    sync = next(f for f in d["findings"] if f["kind"] == "host_sync")
    assert "in step 0" not in sync["title"] and "in 0 step(s)" in sync["detail"]
    assert not sync["steps"]
    assert "before the first step" in report("x", diag, 5)


def test_tf_gpu_demo_gaps_fit_their_step():
    """The TF GPU demo run: one step of 19.865 ms; GPU 1 copies only, after it.  No gap
    "in step 0" is longer than the step, and GPU 1's idle in the step is the step."""
    paths = _real("public/tensorflow-profiler/demo/**/*.xplane.pb")
    if not paths:
        pytest.skip("../shared/traces is absent")
    diag = tb_perfdiag.diagnose(paths[0])
    d = diag.to_json(all_gaps=True)
    check_one_place(d)
    step = d["steps"][0]
    # its duty over the window that reaches from the step to its copies says so
    assert "GPU 1: duty cycle 0.0% over its 1 step(s) and its work outside them" in \
        report("x", diag, 5)
    for g in d["gaps"]:
        if g["step"] is not None:
            w = step["devices"][str(g["device"])]
            assert g["duration_ns"] <= w["end_ns"] - w["start_ns"], g
    gpu1 = [dv for dv in d["devices"] if dv["name"] == "GPU 1"][0]
    in_step = [g for g in d["gaps"] if g["device"] == gpu1["id"] and g["step"] == 0]
    assert sum(g["duration_ns"] for g in in_step) == \
        step["devices"][str(gpu1["id"])]["idle_ns"]


@pytest.mark.parametrize("pattern", ["public/HolisticTraceAnalysis/**/df_index_resolver.json.gz",
                                     "public/**/linear_kineto.json.gz"])
def test_real_findings_name_their_gaps_steps(pattern):
    """PyTorch captures with many steps: each finding's gaps, steps and "once" agree with
    the gap list."""
    paths = _real(pattern)
    if not paths:
        pytest.skip("../shared/traces is absent")
    check_one_place(tb_perfdiag.diagnose(paths[0]).to_json(all_gaps=True))


def test_a_step_runs_from_the_first_device_starting_it_to_the_last_finishing_it():
    """Two devices with Steps lines of their own, one running each step 600 µs after the other
    (the public TensorFlow multi-worker trace ran step 0 650 ms apart on GPU 4 and GPU 6):
    a step is the job's, from the first device's start to the last one's end, not the first
    line's 100 µs; each device keeps its own window."""
    b = TraceBuilder("xspace")
    for gpu, late in ((0, 0), (1, 600)):
        ops = b.line(f"/device:TPU:{gpu}", "XLA Ops")
        steps = b.line(f"/device:TPU:{gpu}", "Steps")
        for k in range(3):
            t = 1000 * k + late
            b.op(steps, str(k), t, 100, stats={"step_num": k})
            b.op(ops, "fusion.1", t + 10, 80, stats={"hlo_op": "fusion.1"})
    d = diagnose(b)
    assert d["step_source"] == "device_steps"
    assert [s["end_ns"] - s["start_ns"] for s in d["steps"]] == [700_000] * 3
    assert d["typical_step_ns"] == 700_000
    for s in d["steps"]:
        assert s["devices"]["0"]["end_ns"] - s["devices"]["0"]["start_ns"] == 100_000
        assert s["devices"]["1"]["end_ns"] - s["devices"]["1"]["start_ns"] == 100_000
    from tb_perfdiag.testing import invariants as I
    assert I.diagnosis(d) == []
