"""The analysis' declared pipeline: every input made earlier and not yet freed, every field
of the Diagnosis made exactly once, side stages giving what the serial path gives."""
from __future__ import annotations

import dataclasses
import os

import pytest

from conftest import ROOT
import json

from tb_perfdiag import diagnose, load
from tb_perfdiag.analysis import diagnosis as D
from tb_perfdiag.analysis import pipeline as P
from tb_perfdiag.analysis.result import Diagnosis

GIVEN = ("trace", "opt", "progress", "threshold_ps", "paired")


def test_the_analysis_pipeline_is_sound():
    P.check(D.STAGES, GIVEN, tuple(D.RESULT.values()) + ("ctx",))


def test_every_field_of_the_diagnosis_is_made_once_by_one_stage():
    fields = [f.name for f in dataclasses.fields(Diagnosis)]
    assert sorted(D.RESULT) == sorted(fields)
    makers = [n for s in D.STAGES for n in s.makes]
    assert len(makers) == len(set(makers))
    for value in D.RESULT.values():
        assert makers.count(value) == 1, value


def _s(name, needs=(), makes=(), **kw):
    return P.Stage(name, lambda **k: None, needs, makes, **kw)


@pytest.mark.parametrize("stages, says", [
    ([_s("a", ("x",), ("y",))], "needs x, made by no earlier stage"),
    ([_s("a", (), ("x",), frees=("x",)), _s("b", ("x",), ("y",))], "freed before it"),
    ([_s("a", (), ("x",)), _s("b", (), ("x",))], "x made twice"),
    ([_s("a", (), ("x",)), _s("b", ("y",), ("z",), beside=True, start_after="a"),
      _s("c", (), ("y",))], "needs y, made by no earlier stage"),
    ([_s("a", (), ("x",)), _s("c", (), ("y",)),
      _s("b", ("y",), ("z",), beside=True, start_after="a")], "starts before c makes y"),
    ([_s("a", (), ("x",)), _s("b", (), ("y",), beside=True, start_after="later")],
     "not an earlier stage"),
    ([_s("a", (), ("x",), frees=("w",))], "frees w, which is not held"),
])
def test_check_names_what_is_wrong(stages, says):
    with pytest.raises(P.PipelineError, match=says):
        P.check(stages, (), ())


def test_a_result_that_is_freed_is_refused():
    with pytest.raises(P.PipelineError, match="not held at the end"):
        P.check([_s("a", (), ("x",), frees=("x",))], (), ("x",))


class _Progress:
    def __init__(self):
        self.told = []

    def stage(self, at, what):
        self.told.append((at, what))


def test_the_runner_frees_starts_beside_and_tells_progress():
    from contextlib import ExitStack
    seen = {}

    def side(x):
        seen["side_x"] = x
        return x * 10

    stages = [
        P.Stage("a", lambda: 2, (), ("x",), progress=(0.1, "a")),
        P.Stage("side", side, ("x",), ("s",), beside=True, start_after="a",
                serial=lambda x: -1, frees=("x",)),
        P.Stage("b", lambda x: x + 1, ("x",), ("y",), progress=(0.5, "b")),
        P.Stage("wait", lambda **k: None, (), ("n",)),
    ]
    # the side stage is waited for (unpaired: runs) at its own place, after b; what it
    # reads may be freed only there
    stages = [stages[0], stages[2], stages[1], stages[3]]
    P.check(stages, (), ("y", "s"))
    with pytest.raises(P.PipelineError, match="freed before it"):
        P.check([stages[0], P.Stage("b", stages[1].run, ("x",), ("y",), frees=("x",)),
                 stages[2]], (), ())
    for paired, s in ((True, 20), (False, -1)):
        prog = _Progress()
        with ExitStack() as beside:
            v = P.run(stages, {}, paired, prog, beside)
        assert v["s"] == s and v["y"] == 3 and "x" not in v
        assert seen.pop("side_x", 2) == 2
        assert prog.told == [(0.1, "a"), (0.5, "b")]


@pytest.mark.parametrize("rel", [
    "testdata/synthetic/logdir/kineto_sync_nonzero/worker0.1795400000000.pt.trace.json",
    "testdata/synthetic/logdir/xla_tpu_two_devices",
])
def test_side_stages_give_what_the_serial_path_gives(rel, monkeypatch):
    path = os.path.join(ROOT, rel)
    if os.path.isdir(path):
        path = next(os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs
                    if f.endswith(".xplane.pb"))
    assert D.host_side_beside(load(path))          # small: its side stages run beside
    paired = json.dumps(diagnose(path).to_json(), sort_keys=True)
    monkeypatch.setattr(D, "host_side_beside", lambda trace: False)
    serial = json.dumps(diagnose(path).to_json(), sort_keys=True)
    assert paired == serial
