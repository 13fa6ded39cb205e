"""Steps from the backward passes (issue 45): when a PyTorch trace has neither step
annotations nor the training loop's DataLoader / optimizer calls, each backward pass ends
an iteration — the user's annotation around ``loss.backward()``, the Python frame of
``torch.autograd.backward``, else a burst of autograd engine calls during which the
user's thread starts nothing.  Each rule on a small trace built in memory, then on the
real traces in ../shared/traces (skipped when absent).

Builder times are µs, the JSON's ns.
"""
from __future__ import annotations

import glob
import os

import numpy as np
import pytest

import tb_perfdiag
from tb_perfdiag.analysis.steps.windows import find_steps
from tb_perfdiag.testing import TraceBuilder
from tb_perfdiag.trace import load
from tb_perfdiag.trace.model import EventKind as K, TrackKind

from test_arithmetic import check_arithmetic, launch

SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..",
                      "shared", "traces")
ENGINE = "autograd::engine::evaluate_function: "
PERIOD = 900


def backward_trace(n: int = 4, optimizer: bool = False, annotation: str | None = None,
                   cpu_node: bool = True) -> TraceBuilder:
    """n iterations at t = 900k.  The user's thread runs the forward (aten::linear at t,
    its gemm [t + 10, t + 150)), then blocks in backward() while the engine thread runs
    three calls at t + 200, t + 650, t + 710 (50 µs each, a backward kernel each): a
    400 µs pause inside a pass, longer than the 340 µs between passes (t + 760 to the
    next one's t + 1100).  ``cpu_node``: the user's thread runs a CPU node's engine call
    (AccumulateGrad, with an aten::add_ inside) in the pause; ``optimizer``: an
    Optimizer.step at [t + 770, t + 800); ``annotation``: a user annotation of that name
    around the backward [t + 190, t + 765)."""
    b = TraceBuilder()
    main, eng, s7 = b.thread("python main"), b.thread("pt_autograd_0"), b.stream()
    for k in range(n):
        t = PERIOD * k
        b.op(main, "aten::linear", t, 20)
        launch(b, main, s7, "gemm", t + 5, 5, t + 10, 140)
        if annotation:
            b.op(main, annotation, t + 190, 575, cat="user_annotation")
        for i, c in enumerate((200, 650, 710)):
            b.op(eng, ENGINE + f"Node{i}Backward0", t + c, 50)
            launch(b, eng, s7, f"bwd{i}", t + c + 5, 5, t + c + 10, 30)
        if cpu_node:
            b.op(main, ENGINE + "torch::autograd::AccumulateGrad", t + 400, 40)
            b.op(main, "aten::add_", t + 405, 20)
        if optimizer:
            b.op(main, "Optimizer.step#SGD.step", t + 770, 30, cat="user_annotation")
    return b


def diagnose(b: TraceBuilder) -> dict:
    return tb_perfdiag.diagnose(b.build()).to_json()


def test_a_backward_only_trace_has_a_step_per_backward_pass():
    d = diagnose(backward_trace(4))
    assert d["step_source"] == "backward_passes"
    assert d["step_marker"] == \
        "autograd::engine::evaluate_function bursts on pt_autograd_0", d["step_marker"]
    assert len(d["steps"]) == 4
    # each pass ends its iteration: step k ends with its pass's last engine call
    ends = [s["end_ns"] for s in d["steps"]]
    assert ends == [(PERIOD * k + 760) * 1000 for k in range(4)]
    assert d["steps"][0]["start_ns"] == 0
    assert [s["start_ns"] for s in d["steps"][1:]] == ends[:-1]
    check_arithmetic(d)
    assert all(" of 4 steps" in f["title"] for f in d["findings"]
               if f.get("cause") and "outside" not in f["title"] and not f.get("once"))


def test_a_pause_inside_a_pass_longer_than_the_space_between_passes_does_not_split_it():
    """No duration threshold: the 400 µs pause inside each pass is longer than the 340 µs
    between passes; what splits is the user's thread starting its own op."""
    steps = find_steps(backward_trace(3, cpu_node=False).build())
    assert steps.source == "backward_passes" and len(steps.ids) == 3


def test_the_users_thread_running_a_cpu_node_does_not_split_a_pass():
    t = backward_trace(3, cpu_node=True).build()
    steps = find_steps(t)
    assert len(steps.ids) == 3
    # and the user's thread is the step thread (main first for the split of gaps)
    assert t.track_name[steps.thread] == "python main"


def test_the_optimizer_beats_the_backward_passes():
    d = diagnose(backward_trace(4, optimizer=True))
    assert d["step_source"] == "training_loop"
    assert d["step_marker"] == "Optimizer.step#SGD.step"
    assert len(d["steps"]) == 4


def test_one_backward_pass_is_the_capture():
    d = diagnose(backward_trace(1))
    assert d["step_source"] == "whole_trace" and d["step_marker"] is None
    assert len(d["steps"]) == 1
    check_arithmetic(d)


@pytest.mark.parametrize("name", ["## backward ##", "backward", "Backward"])
def test_a_backward_annotation_ends_each_iteration(name):
    d = diagnose(backward_trace(3, annotation=name))
    assert d["step_source"] == "backward_passes" and d["step_marker"] == name
    assert [s["end_ns"] for s in d["steps"]] == [(PERIOD * k + 765) * 1000 for k in range(3)]
    check_arithmetic(d)


def test_a_name_that_only_contains_backward_is_no_marker():
    """Autograd nodes and kernels carry "backward" in their names: only a name that is
    the word alone marks a pass."""
    steps = find_steps(backward_trace(3, annotation="aten::threshold_backward").build())
    assert steps.marker.startswith("autograd::engine::evaluate_function")


def test_the_python_frame_of_autograd_backward_ends_each_iteration():
    """with_stack captures: Tensor.backward's frame around torch.autograd.backward's
    (the outer one counts), no engine thread (a CPU model: the user's thread runs the
    engine itself, inside the frames)."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    for k in range(3):
        t = 1000 * k
        b.op(main, "aten::linear", t, 20)
        launch(b, main, s7, "gemm", t + 5, 5, t + 10, 100)
        b.op(main, "torch/_tensor.py(626): backward", t + 200, 500, cat="python_function")
        b.op(main, "torch/autograd/__init__.py(347): backward", t + 210, 480,
             cat="python_function")
        b.op(main, ENGINE + "MmBackward0", t + 300, 100)
    steps = find_steps(b.build())
    assert steps.source == "backward_passes"
    assert steps.marker == "torch/_tensor.py(626): backward"
    assert steps.host_end.tolist() == [(1000 * k + 700) * 10**6 for k in range(3)]


def test_a_cpu_model_runs_its_passes_on_the_users_thread():
    """No frames, no engine thread: the engine's calls are the user's thread's own
    outermost ops, and its forward ops between them split the passes."""
    b = TraceBuilder()
    main = b.thread("python main")
    for k in range(3):
        t = 1000 * k
        b.op(main, "aten::linear", t, 100)
        b.op(main, "aten::relu", t + 120, 30)
        for c in (300, 420, 700):
            b.op(main, ENGINE + "AddmmBackward0", t + c, 80)
            b.op(main, "aten::mm", t + c + 10, 50)
    steps = find_steps(b.build())
    assert steps.source == "backward_passes" and len(steps.ids) == 3
    assert steps.host_end.tolist() == [(1000 * k + 780) * 10**6 for k in range(3)]


def test_every_step_launch_of_a_pass_belongs_to_its_step():
    d = tb_perfdiag.diagnose(backward_trace(3).build()).to_json()
    # per step: the forward gemm (140 µs) and three backward kernels (30 µs) it launched
    for s in d["steps"]:
        v = next(iter(s["devices"].values()))
        assert v["busy_ns"] == (140 + 3 * 30) * 1000, s["id"]


def test_the_text_and_the_json_say_which_marker_made_the_steps():
    r = tb_perfdiag.diagnose(backward_trace(3).build())
    assert "steps from backward_passes (autograd::engine::evaluate_function bursts on " \
        "pt_autograd_0)" in r.to_text()


# ---- the real traces ----

def _real(pattern: str) -> list:
    return sorted(glob.glob(os.path.join(SHARED, pattern), recursive=True))


def _engine_bursts(trace):
    """The backward passes a trace's engine calls make, whatever better marker it has."""
    from tb_perfdiag.analysis.steps.windows import _ENGINE, engine_bursts
    host = np.flatnonzero(trace.track_kind[trace.track] == TrackKind.HOST)
    names = np.unique(trace.name[host])
    eng = names[[bool(_ENGINE.search(trace.strings[int(x)])) for x in names.tolist()]]
    return engine_bursts(trace, host[np.isin(trace.name[host], eng)], eng)


KINETO = [p for p in _real("**/*.json.gz") + _real("**/*.pt.trace.json") + _real("**/*.json")
          if "xplane" not in p and "/cpu/jax/" not in p and "/cpu/torch_xla/" not in p
          and not p.endswith("_et.json.gz") and "tensorflow" not in p]


def test_real_engine_bursts_are_the_profiler_steps_that_ran_a_backward_pass():
    """On every real PyTorch trace with both ProfilerStep#N and autograd engine calls,
    the bursts are one per ProfilerStep that holds engine calls: the rule finds the
    iterations that the step annotations mark, on captures nobody tuned it for."""
    if not KINETO:
        pytest.skip("../shared/traces is absent")
    checked = 0
    for p in KINETO:
        try:
            t = load(p)
        except Exception:                    # not a trace (labels, HTA outputs)
            continue
        host = t.track_kind[t.track] == TrackKind.HOST
        st = np.flatnonzero(host & (t.kind == K.STEP))
        b = _engine_bursts(t)
        if st.size == 0 or b is None and not any(
                t.strings[int(x)].startswith("autograd::engine") for x in np.unique(t.name)):
            continue
        # ProfilerSteps (outermost) holding an engine call's start
        st = st[~np.isin(t.parent[st], st)]
        eng = np.flatnonzero(host & np.isin(t.name, [i for i, s in enumerate(t.strings)
                                                     if s.startswith("autograd::engine::")]))
        holding = sum(bool(((t.ts[eng] >= t.ts[s]) & (t.ts[eng] < t.ts[s] + t.dur[s])).any())
                      for s in st)
        got = 0 if b is None else len(b.ids)
        # one pass alone is no steps (None): the rule needs two
        assert got == (holding if holding > 1 else 0), (p, got, holding)
        checked += 1
    assert checked >= 10, checked


def test_linear_kineto_bursts_are_its_optimizer_iterations():
    """linear_kineto has 40 Optimizer.step calls (its steps) and 4320 engine calls: 40
    bursts, the k-th Optimizer.step (after pass k) in the window of pass k + 1, the last
    one after every pass."""
    paths = _real("public/param/et_replay/tests/inputs/linear_kineto.json.gz")
    if not paths:
        pytest.skip("../shared/traces is absent")
    t = load(paths[0])
    b = _engine_bursts(t)
    opt = find_steps(t)
    assert opt.source == "training_loop" and len(opt.ids) == 40
    assert b is not None and len(b.ids) == 40
    at = t.ts[opt.events]
    k = np.searchsorted(b.host_start, at, side="right") - 1
    k[at >= b.host_end[k]] = -1                   # after the last pass: in no window
    assert k.tolist() == list(range(1, 40)) + [-1], k.tolist()


def test_a_real_trace_without_step_annotations_steps_by_its_backward_passes():
    """HTA's with_gpu_user_annotation trace without its optimizer calls: its 5 backward
    passes (what find_steps falls back to when a loop has no DataLoader/optimizer)."""
    paths = _real("public/HolisticTraceAnalysis/tests/data/with_gpu_user_annotation/*.json.gz")
    if not paths:
        pytest.skip("../shared/traces is absent")
    t = load(paths[0])
    assert find_steps(t).source == "training_loop"
    b = _engine_bursts(t)
    assert b is not None and len(b.ids) == 5
    assert b.marker.startswith("autograd::engine::evaluate_function bursts on ")
