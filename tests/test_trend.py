"""A run over time (issue 62): each capture's figures and trust, the changes beyond the
run's noise, the trend route/CLI/MCP faces, and the scalars TensorBoard reads back.

The runs come from our generator (testdata/generators/trend_runs.py): a PyTorch job with
one trace per ``repeat`` cycle and a JAX job on XLA:CPU with one Profile session per
capture, each with regressions injected in known captures and a 0-byte capture."""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import jsonschema
import numpy as np
import pytest

from conftest import ROOT, TESTDATA
from tb_perfdiag.analysis import Options, analyse
from tb_perfdiag.analysis import causes as C
from tb_perfdiag.analysis.run import trust as T
from tb_perfdiag.analysis.run.figures import CaptureFigures
from tb_perfdiag.analysis.run.trend import (MIN_POINTS_NOISE, MIN_RATIO_NOISE, Capture,
                                            regression_check, trend)
from tb_perfdiag.cache import DiagnosisCache
from tb_perfdiag.discovery import Catalog
from tb_perfdiag.params import parse
from tb_perfdiag.plugin import answer
from tb_perfdiag.render.scalars import points
from tb_perfdiag.service import DiagnosisService
from tb_perfdiag.testing.builder import TraceBuilder

SCHEMA = json.load(open(os.path.join(ROOT, "tb_perfdiag", "schema", "trend.schema.json")))
CAUSE = {c: i for i, c in enumerate(C.ALL)}


def _generator():
    sys.path.insert(0, os.path.join(TESTDATA, "generators"))
    try:
        import trend_runs
    finally:
        sys.path.pop(0)
    return trend_runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(logdir, truth: run → {session: injected}) of the two generated runs."""
    out = tmp_path_factory.mktemp("trend")
    return out, _generator().write_all(out)


def _service(logdir, store=None):
    return DiagnosisService(Catalog(str(logdir)), DiagnosisCache(disk_dir=store))


def _trend_doc(svc, **q):
    status, body = answer("trend", svc.trend_json, q)
    assert status == 200, body
    return body


# ---- the generated runs ----

@pytest.mark.parametrize("run", ["torch_repeat", "jax_cpu"])
def test_every_injected_regression_is_named_at_its_onset_and_recovery(runs, run):
    logdir, truth = runs
    doc = _trend_doc(_service(logdir), run=run)
    jsonschema.validate(doc, SCHEMA)
    injected = truth[run]
    sessions = [c["session"] for c in doc["captures"]]
    assert sessions == sorted(injected)          # time order (names are times here)
    trusted = [s for s in sessions if injected[s] != "empty"]
    expected = set()
    for k, s in enumerate(trusted):
        cause = injected[s]
        if cause in ("", "empty"):
            continue
        expected |= {(trusted[k - 1], s, cause, +1)}
        if k + 1 < len(trusted):
            expected |= {(s, trusted[k + 1], cause, -1)}
    got = set()
    for ch in doc["changes"]:
        top = max(ch["causes"], key=lambda c: abs(ch["causes"][c]))
        got.add((ch["from"], ch["to"], top, int(math.copysign(1, ch["causes"][top]))))
        assert top.replace("_", " ") in ch["summary"]
        assert (ch["step_time_ratio"] > 1) == (ch["causes"][top] > 0)
    assert got == expected          # and no change between the quiet captures


@pytest.mark.parametrize("run", ["torch_repeat", "jax_cpu"])
def test_the_zero_byte_capture_is_flagged_and_stops_nothing(runs, run):
    logdir, truth = runs
    doc = _trend_doc(_service(logdir), run=run)
    for c in doc["captures"]:
        empty = truth[run][c["session"]] == "empty"
        assert c["trust"]["ok"] is not empty
        if empty:
            assert "empty file (0 bytes)" in c["trust"]["problems"][0]
            assert c["step_time_ns"] is None
        else:
            assert c["step_time_ns"] > 0 and c["first_step"] is not None and c["steps"] == 6
            assert 0 < c["duty_cycle"] <= 1
    assert all(truth[run][ch["to"]] != "empty" and truth[run][ch["from"]] != "empty"
               for ch in doc["changes"])


def test_a_session_names_its_tensorboard_run_and_a_baseline_compares_every_capture(runs):
    logdir, truth = runs
    svc = _service(logdir)
    first = sorted(truth["jax_cpu"])[0]
    assert _trend_doc(svc, run=f"jax_cpu/{first}") == _trend_doc(svc, run="jax_cpu")
    doc = _trend_doc(svc, run="jax_cpu", baseline=first)
    assert doc["baseline"] == first
    slow = {s for s, k in truth["jax_cpu"].items() if k == "data_loading"}
    assert {ch["to"] for ch in doc["changes"]} == slow
    assert all(ch["from"] == first and ch["causes"]["data_loading"] > 50 for ch in doc["changes"])
    empty = next(s for s, k in truth["jax_cpu"].items() if k == "empty")
    assert answer("trend", svc.trend_json, {"run": "jax_cpu", "baseline": empty})[0] == 400
    assert answer("trend", svc.trend_json, {"run": "jax_cpu", "baseline": "nope"})[0] == 404
    assert answer("trend", svc.trend_json, {"run": "no_such_run"})[0] == 404


def test_each_capture_is_analysed_once(runs, tmp_path):
    logdir, truth = runs
    svc = _service(logdir, str(tmp_path / "store"))
    first = _trend_doc(svc, run="torch_repeat")
    # every file tried once (the 0-byte one fails at once, and is not tried again)
    assert svc.cache.computations == len(truth["torch_repeat"])
    assert _trend_doc(svc, run="torch_repeat") == first
    assert svc.cache.computations == len(truth["torch_repeat"])
    # another process on the same store analyses nothing (but tries the 0-byte file), once
    # the results are written (in the background: the trend did not wait for them)
    svc.cache.flush()
    other = _service(logdir, str(tmp_path / "store"))
    assert _trend_doc(other, run="torch_repeat") == first
    assert other.cache.computations == 1


def test_the_cli_prints_the_route_and_check_fails_on_a_slow_latest_capture(runs, tmp_path):
    logdir, truth = runs
    env = dict(os.environ, TB_PERFDIAG_RESULTS=str(tmp_path / "store"))

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "tb_perfdiag.cli", *args],
                              capture_output=True, text=True, env=env, timeout=300)
    r = cli("trend", str(logdir / "torch_repeat"), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == _trend_doc(_service(logdir), run="torch_repeat")
    assert cli("check", str(logdir / "torch_repeat"), "--trend", "--max-regression",
               "5%").returncode == 0
    # the slow capture again as the newest: the latest is 5× the median
    run = tmp_path / "late"
    shutil.copytree(logdir / "torch_repeat", run)
    slow = next(s for s, k in truth["torch_repeat"].items() if k == "data_loading")
    shutil.copy(run / f"trainer.{slow}.pt.trace.json", run / "trainer.1796009000000.pt.trace.json")
    r = cli("check", str(run), "--trend", "--max-regression", "5%")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL" in r.stdout and "1796009000000" in r.stdout
    assert cli("trend", str(logdir)).returncode == 2        # two runs: name one


def test_the_mcp_tool_answers_the_route(runs):
    from tb_perfdiag.agent_tools import Tools
    logdir, _ = runs
    svc = _service(logdir)
    assert Tools(svc).trend("jax_cpu") == _trend_doc(svc, run="jax_cpu")


# ---- a pod's captures: the straggler ----

def _pod_design() -> dict:
    with open(os.path.join(TESTDATA, "captures", "MANIFEST.json")) as f:
        caps = json.load(f)["captures"]
    pod = next(c for c in caps if c["name"] == "jax_pod")["ground_truth"]["scenarios"]
    return {k: v["design"].get("straggler") for k, v in pod.items()}


def test_a_pod_capture_names_the_host_the_others_wait_for():
    """The real 4-process JAX pods (gloo all-reduce): each capture's straggler is the host
    its design slows (None where none is), from the run's collective join."""
    from tb_perfdiag.pod import Engine
    svc = DiagnosisService(Catalog(os.path.join(TESTDATA, "captures", "jax_pod")),
                           DiagnosisCache(disk_dir=None), engine=Engine(processes=False))
    try:
        for scenario, host in _pod_design().items():
            (cap,) = _trend_doc(svc, run=scenario)["captures"]
            assert len(cap["hosts"]) == 4 and cap["straggler"] == host, (scenario, cap)
    finally:
        svc.close()


def test_without_collectives_a_pods_slow_host_is_its_straggler():
    from tb_perfdiag.analysis.run.trend import slow_host
    rows = [(f"h{i}", _fig(t), []) for i, t in enumerate((10, 10.2, 9.9, 12))]
    assert slow_host(rows) == "h3"
    assert slow_host(rows[:3]) is None and slow_host(rows[:1]) is None
    assert slow_host(rows[:3] + [("h3", None, [T.Problem(T.EMPTY)])]) is None


# ---- scalars ----

def test_scalars_read_back_by_tensorboard_agree_with_the_trend_and_never_duplicate(runs,
                                                                                  tmp_path):
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer
    from tensorboard.util import tensor_util
    logdir, truth = runs
    out = tmp_path / "scalars"
    env = dict(os.environ, TB_PERFDIAG_RESULTS=str(tmp_path / "store"))
    for _ in range(2):
        r = subprocess.run([sys.executable, "-m", "tb_perfdiag.cli", "scalars", str(logdir),
                            "--out", str(out)], capture_output=True, text=True, env=env,
                           timeout=300)
        assert r.returncode == 0, r.stderr
    assert "unchanged" in r.stdout
    m = EventMultiplexer().AddRunsFromDirectory(str(out))
    m.Reload()
    svc = _service(logdir)
    for run in truth:
        doc = _trend_doc(svc, run=run)
        ok = [c for c in doc["captures"] if c["trust"]["ok"]]
        name = f"{run}/perfdiag"
        tags = set(m.Runs()[name]["tensors"])
        assert {"perfdiag/step_time_ms", "perfdiag/duty_cycle"} | {
            f"perfdiag/idle/{c}" for c in C.ALL} <= tags
        got = {(e.step, e.wall_time): float(tensor_util.make_ndarray(e.tensor_proto))
               for e in m.Tensors(name, "perfdiag/step_time_ms")}
        assert len(got) == len(ok) == len(m.Tensors(name, "perfdiag/step_time_ms"))
        for c in ok:
            key = (c["first_step"], float(np.datetime64(c["start_time"][:-1]).astype(
                "datetime64[s]").astype(np.int64)))
            assert got[key] == pytest.approx(c["step_time_ns"] / 1e6, abs=1e-3)
        dl = {e.step: float(tensor_util.make_ndarray(e.tensor_proto))
              for e in m.Tensors(name, "perfdiag/idle/data_loading")}
        assert dl == {c["first_step"]: pytest.approx(c["idle_by_cause"]["data_loading"],
                                                     abs=1e-4) for c in ok}


def test_scalars_add_a_capture_that_lands_and_keep_one_file(runs, tmp_path):
    from tb_perfdiag import scalars
    logdir, _ = runs
    run = tmp_path / "live"
    shutil.copytree(logdir / "torch_repeat", run)
    folder = str(run / "perfdiag")
    svc = _service(tmp_path)
    n0 = len(points(svc.trend("live", Options())))
    assert scalars.write(folder, points(svc.trend("live", Options())))
    assert not scalars.write(folder, points(svc.trend("live", Options())))
    newest = sorted(p for p in os.listdir(run) if p.endswith(".json"))[-1]
    shutil.copy(run / newest, run / "trainer.1796009000000.pt.trace.json")
    svc.catalog.runs(refresh=True)
    pts = points(svc.trend("live", Options()))
    assert scalars.write(folder, pts)
    assert len(scalars.read_points(folder)) == len(pts) == n0 + n0 // 7
    assert len(os.listdir(folder)) == 1


# ---- the noise, on figures alone ----

def _fig(step_ms: float, data_loading: float = 0.0) -> CaptureFigures:
    share = np.zeros(len(C.ALL))
    share[CAUSE["data_loading"]] = data_loading
    return CaptureFigures(step_ms * 1e9, 1, 10, "annotations", 0.9, None, share)


def _caps(figs) -> list:
    return [Capture(f"s{i:02d}", 1000.0 + i, ["h"], f) for i, f in enumerate(figs)]


def test_a_change_within_the_runs_own_spread_is_no_change():
    # a run whose captures swing ±3 % in step time and ±2 points of data loading
    swing = [(-1, 0, 1)[i % 3] for i in range(12)]
    quiet = [_fig(100 * (1 + 0.03 * w), 0.05 + 0.02 * w) for w in swing]
    t = trend("r", _caps(quiet))
    assert t.noise.ratio > MIN_RATIO_NOISE and t.noise.points[CAUSE["data_loading"]] > 4
    assert t.changes == []
    # +12 %, within the spread of a run that swings by 6 % between captures: not a change
    assert trend("r", _caps(quiet[:6] + [_fig(112, 0.05)] + quiet[6:])).changes == []
    # a minority of regressed captures does not move the noise, and each is a change
    figs = quiet[:4] + [_fig(300, 0.6)] + quiet[4:8] + [_fig(300, 0.6)] + quiet[8:]
    t2 = trend("r", _caps(figs))
    assert t2.noise.ratio == pytest.approx(t.noise.ratio, rel=0.5)
    assert {(c.before, c.after) for c in t2.changes} == {(3, 4), (4, 5), (8, 9), (9, 10)}


def test_few_captures_use_the_floors_and_untrusted_ones_are_left_out():
    caps = _caps([_fig(100), _fig(104, 0.01), _fig(200, 0.5)])
    caps[2].problems = [T.Problem(T.EMPTY)]
    t = trend("r", caps)
    assert t.noise.ratio == MIN_RATIO_NOISE and (t.noise.points == MIN_POINTS_NOISE).all()
    assert t.changes == []            # +4 %, +1 point: below the floors; the third is flagged
    assert regression_check(t, 0.05).ok and not regression_check(t, 0.01).ok
    assert regression_check(trend("r", caps[2:]), 0.05).value is None


# ---- trust, on traces built in memory ----

def _diag(b):
    return analyse(b.build(), Options())[0]


def _steps(b, n=4, busy=lambda k: True, extra=lambda b, m, k: None):
    m, s = b.thread("main"), b.stream()
    for k in range(n):
        with b.step(m, k, k * 1000, 900):
            if busy(k):
                b.launch(m, "cudaLaunchKernel", k * 1000 + 10, 5,
                         kernel=b.kernel(s, "gemm", k * 1000 + 20, 800))
            extra(b, m, k)
    return b


def test_a_well_recorded_capture_is_trusted():
    assert T.problems(_diag(_steps(TraceBuilder()))) == []


def test_most_steps_without_device_work_are_flagged():
    got = T.problems(_diag(_steps(TraceBuilder(), busy=lambda k: k == 0)))
    assert [(p.kind, p.figures) for p in got] == [(T.STEPS_WITHOUT_DEVICE, {"steps": 3, "of": 4})]
    assert T.problems(_diag(_steps(TraceBuilder(), busy=lambda k: k != 0))) == []


def test_device_planes_without_device_events_are_flagged():
    b = TraceBuilder("xspace")
    py = b.thread("python")
    b.stream()                     # the device's plane and line, with no event on it
    for k in range(3):
        b.step(py, k, k * 1000, 900)
        b.op(py, "PjitFunction(f)", k * 1000 + 10, 50)
    b.plane_stats["/device:GPU:0"] = {"devcap_core_count": 1}
    assert [p.kind for p in T.problems(_diag(b))] == [T.NO_DEVICE_EVENTS]


def test_graph_launches_without_their_kernels_are_flagged():
    def graph(b, m, k):
        b.op(m, "cudaGraphLaunch", k * 1000 + 400, 5, "cuda_runtime",
             args={"correlation": 9000 + k})
    assert [p.kind for p in T.problems(_diag(_steps(TraceBuilder(), extra=graph)))] == [T.GRAPHS]


@pytest.mark.parametrize("events, flagged", [(20, False), (200, True)])
def test_python_tracer_events_over_the_stated_share_are_flagged(events, flagged):
    def frames(b, m, k):
        for j in range(events):
            b.op(m, f"train.py({j}): f", k * 1000 + 50 + j * 4, 2, "python_function")
    got = T.problems(_diag(_steps(TraceBuilder(), extra=frames)))
    assert [p.kind for p in got] == ([T.OVERHEAD] if flagged else [])


def test_the_profilers_own_stop_over_the_stated_share_is_flagged():
    b = _steps(TraceBuilder())
    b.op(b.tracks[0], "torch/profiler/profiler.py(700): stop", 4000, 900, "python_function")
    got = T.problems(_diag(b))
    assert [p.kind for p in got] == [T.OVERHEAD] and got[0].figures["calls_ps"] == 900 * 10**6


# ---- a real JAX job on XLA:CPU, profiled 12 times (testdata/generators/capture_jax_trend.py) ----
# Its captures are not bundled (3 MB, a 0-byte file among them, and every test that walks
# testdata would read them): generate them with the jax venv of make_captures.sh and point
# TB_PERFDIAG_TREND_CAPTURES at the folder; skipped otherwise.

REAL = os.environ.get("TB_PERFDIAG_TREND_CAPTURES", "")


@pytest.mark.skipif(not os.path.isfile(os.path.join(REAL, "TREND_TRUTH.json")),
                    reason="no real trend captures (TB_PERFDIAG_TREND_CAPTURES unset: see "
                           "testdata/generators/capture_jax_trend.py)")
def test_a_real_jax_run_names_its_regressions_and_flags_its_empty_capture():
    with open(os.path.join(REAL, "TREND_TRUTH.json")) as f:
        truth = json.load(f)["captures"]
    parent, name = os.path.split(os.path.abspath(REAL.rstrip("/")))
    doc = _trend_doc(_service(parent), run=name)
    jsonschema.validate(doc, SCHEMA)
    assert [c["session"] for c in doc["captures"]] == sorted(truth)
    for c in doc["captures"]:
        t = truth[c["session"]]
        assert c["trust"]["ok"] is (t["injected"] != "empty"), c
        if t["injected"] != "empty":
            assert c["first_step"] == t["first_step"] and c["steps"] > 0
    trusted = [c["session"] for c in doc["captures"] if c["trust"]["ok"]]
    changes = {(ch["from"], ch["to"]): ch["causes"] for ch in doc["changes"]}
    for k, s in enumerate(trusted):
        cause = truth[s]["injected"]
        if cause in ("", "empty"):
            continue
        into, out = changes.get((trusted[k - 1], s), {}), changes.get((s, trusted[k + 1]), {})
        assert max(into, key=lambda c: into[c]) == cause and into[cause] > 30, (s, into)
        assert min(out, key=lambda c: out[c]) == cause and out[cause] < -30, (s, out)


def test_scalars_watch_adds_captures_as_they_land(runs, tmp_path):
    """``scalars --watch``: a round with nothing new leaves the file; a capture written
    between rounds is added (two rounds here)."""
    logdir, _ = runs
    run = tmp_path / "logdir" / "watched"
    shutil.copytree(logdir / "torch_repeat", run)
    env = dict(os.environ, TB_PERFDIAG_RESULTS=str(tmp_path / "store"))
    p = subprocess.Popen([sys.executable, "-m", "tb_perfdiag.cli", "scalars",
                          str(tmp_path / "logdir"), "--watch", "--interval", "3",
                          "--rounds", "2"], stdout=subprocess.PIPE, text=True, env=env)
    first = p.stdout.readline()
    newest = sorted(x for x in os.listdir(run) if x.endswith(".json"))[-1]
    shutil.copy(run / newest, run / "trainer.1796009000000.pt.trace.json")
    rest = p.stdout.read()
    assert p.wait(timeout=300) == 0
    tags = 2 + len(C.ALL)           # step time, duty cycle, idle by cause (no MFU here)
    assert f"7 trusted of 8 captures, {7 * tags} points written" in first
    assert f"8 trusted of 9 captures, {8 * tags} points written" in rest
    from tb_perfdiag import scalars
    assert len(scalars.read_points(str(run / "perfdiag"))) == 8 * tags


def test_a_truncated_capture_is_flagged_with_the_readers_reason(runs, tmp_path):
    logdir, truth = runs
    run = tmp_path / "cut"
    shutil.copytree(logdir / "torch_repeat", run)
    victim = sorted(s for s, k in truth["torch_repeat"].items() if k == "")[1]
    path = run / f"trainer.{victim}.pt.trace.json"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    doc = _trend_doc(_service(tmp_path), run="cut")
    bad = [c for c in doc["captures"] if not c["trust"]["ok"]]
    assert {c["session"] for c in bad} == {victim} | {
        s for s, k in truth["torch_repeat"].items() if k == "empty"}
    cut = next(c for c in bad if c["session"] == victim)
    assert cut["trust"]["problems"][0].startswith("unreadable or truncated: ")


def test_several_workers_the_kth_span_of_each_is_the_kth_capture(runs, tmp_path):
    logdir, truth = runs
    run = tmp_path / "ddp"
    shutil.copytree(logdir / "torch_repeat", run)
    for f in list(run.iterdir()):
        shutil.copy(f, run / f.name.replace("trainer.", "rank1."))
    doc = _trend_doc(_service(tmp_path), run="ddp")
    assert len(doc["captures"]) == len(truth["torch_repeat"])
    assert all(c["hosts"] == ["rank1", "trainer"] for c in doc["captures"])
    # the two workers are the same trace: no slow host; the join covers the latest spans only
    assert all(c["straggler"] is None for c in doc["captures"])
    assert len(doc["changes"]) == 4
