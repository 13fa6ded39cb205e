"""TensorFlow traces diagnosed in TensorFlow's terms: tf.data is data loading whatever
dataset op is outermost, the gap names the pipeline's slowest stage, findings give
tf.data / tf.function advice, and the real captures of testdata/captures/tf_cpu agree
with the ground truth their generator wrote (testdata/generators/capture_tf.py)."""
from __future__ import annotations

import glob
import json
import os
import re

import pytest

import tb_perfdiag
from tb_perfdiag.analysis import causes as C
from tb_perfdiag.testing import TraceBuilder

from conftest import SHARED, TESTDATA

FOREIGN = re.compile(r"\btorch\b|torch\.|\bjax\b|DataLoader|torch_xla|\.item\(\)|"
                     r"block_until_ready", re.I)
TF_DATA_FIX = re.compile(r"num_parallel_calls=tf\.data\.AUTOTUNE|\.prefetch\(tf\.data\.AUTOTUNE\)")


# ---- rules on traces built in memory ----

def _pipeline_trace(outer: str, runtime_wait: bool = False):
    """Three steps on a GPU stream.  Each step: the user's thread waits 3 ms in
    ``IteratorGetNext › … › Iterator::Root › Iterator::<outer>`` while a tf.data pool
    thread runs ``ExecutorState::Process › PyFunc`` (2.88 ms), then launches a 1 ms
    kernel.  With ``runtime_wait`` the step then waits in XLA's own
    ``CpuExecutable::ExecuteAsyncOnStream › BlockUntilReady`` until the kernel is done."""
    b = TraceBuilder("xspace")
    py, pool, s7 = b.thread("python"), b.thread("tf_data_private_threadpool/77"), b.stream()
    t = 0
    for k in range(3):
        b.step(py, k, t, 4100, name="train")
        b.op(py, "EagerLocalExecute: IteratorGetNext", t, 3000)
        b.op(py, "IteratorGetNextOp::DoCompute", t + 1, 2998)
        b.op(py, "Iterator::Root", t + 2, 2996)
        b.op(py, f"Iterator::{outer}", t + 3, 2994)
        b.op(pool, "ExecutorState::Process", t + 10, 2980)
        b.op(pool, "PyFunc", t + 20, 2880)
        b.launch(py, "cuLaunchKernel", t + 3002, 5, kernel=b.kernel(s7, "fusion", t + 3010, 1000))
        if runtime_wait:
            b.op(py, "CpuExecutable::ExecuteAsyncOnStream", t + 3008, 1010)
            b.op(py, "BlockUntilReady", t + 3009, 1008)
        t += 4100
    return b.build()


@pytest.mark.parametrize("outer", ["ParallelMapV2", "Prefetch", "Map", "MapAndBatch",
                                   "FlatMap", "ParallelInterleaveV4"])
def test_tf_data_is_data_loading_whatever_op_is_outermost(outer):
    d = tb_perfdiag.diagnose(_pipeline_trace(outer)).to_json()
    assert d["source"]["framework"] == "tensorflow"
    big = [g for g in d["gaps"] if g["duration_ns"] >= 1_000_000]
    # between the steps, and step 0's lead-in to its first op (a gap of that step too)
    assert len(big) == 3 and sorted(g["step"] for g in big) == [0, 1, 2]
    assert all(g["cause"] == C.DATA_LOADING for g in big), [g["cause"] for g in big]
    # the gap names the stage that was slow, on the pool thread, not the waiting iterator
    assert all(g["culprit"]["name"] == "PyFunc" for g in big)
    top = d["findings"][0]
    assert top["kind"] == "input_bound"
    assert top["title"].startswith(f"{outer} › PyFunc: slowest tf.data stage (Python function)")
    assert "a batch" in top["title"]
    assert TF_DATA_FIX.search(top["fix"]) and "numpy_function" in top["fix"]


def test_xla_runtime_wait_is_no_user_read():
    """XLA:CPU's BlockUntilReady inside ExecuteAsyncOnStream waits for the runtime's own
    threads: no host_sync finding, no .numpy() advice; the gap stays data loading."""
    d = tb_perfdiag.diagnose(_pipeline_trace("Prefetch", runtime_wait=True)).to_json()
    assert not any(f["kind"] == "host_sync" for f in d["findings"])
    assert not any(".numpy()" in f["fix"] for f in d["findings"])
    big = [g for g in d["gaps"] if g["duration_ns"] >= 1_000_000]
    assert big and all(g["cause"] == C.DATA_LOADING for g in big)


def test_iterator_on_the_users_thread_without_pool_is_data_loading():
    """No tf.data thread in the trace (a synchronous pipeline): the iterator chain itself
    is the input pipeline."""
    b = TraceBuilder("xspace")
    py, s7 = b.thread("python"), b.stream()
    t = 0
    for k in range(3):
        b.step(py, k, t, 3100, name="train")
        b.op(py, "IteratorGetNextOp::DoCompute", t, 2000)
        b.op(py, "Iterator::Root", t + 1, 1998)
        b.op(py, "Iterator::ParallelMapV2", t + 2, 1996)
        b.op(py, "DecodePng", t + 5, 1900)
        b.launch(py, "cuLaunchKernel", t + 2002, 5, kernel=b.kernel(s7, "fusion", t + 2010, 1000))
        t += 3100
    d = tb_perfdiag.diagnose(b.build()).to_json()
    big = [g for g in d["gaps"] if g["duration_ns"] >= 1_000_000]
    assert big and all(g["cause"] == C.DATA_LOADING for g in big)


# ---- the real captures ----

def _tf_manifest():
    with open(os.path.join(TESTDATA, "captures", "MANIFEST.json")) as f:
        caps = {c["name"]: c for c in json.load(f)["captures"]}
    return caps["tf"]


TF = _tf_manifest()
CAPTURES = TF["ground_truth"]["captures"]


def _path(name):
    return os.path.join(TESTDATA, "captures", TF["folder"], CAPTURES[name]["file"])


_CACHE: dict = {}


def _diag(name):
    if name not in _CACHE:
        _CACHE[name] = tb_perfdiag.diagnose(_path(name)).to_json()
    return _CACHE[name]


def test_manifest_lists_every_capture_file():
    listed = {f["path"] for f in TF["files"]}
    on_disk = {os.path.relpath(p, os.path.join(TESTDATA, "captures"))
               for p in glob.glob(os.path.join(TESTDATA, "captures", TF["folder"], "**", "*"),
                                  recursive=True) if os.path.isfile(p)}
    assert listed == on_disk
    assert sum(f["bytes"] for f in TF["files"]) < 3_000_000


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_tf_capture_speaks_tensorflow(name):
    gt = CAPTURES[name]
    d = _diag(name)
    assert d["source"]["framework"] == "tensorflow"
    for f in d["findings"]:
        assert not FOREIGN.search(f["fix"]), (f["title"], f["fix"])
    if gt["step_annotation"]:
        assert d["step_source"] == "host_annotations"
        assert len(d["steps"]) == gt["num_steps"]
    else:
        assert d["step_source"] != "host_annotations"


# Keras' among them: its train function's get_next waits inside the function's runtime
INPUT_BOUND = sorted(n for n, g in CAPTURES.items() if g["input_bound"])


@pytest.mark.parametrize("name", INPUT_BOUND)
def test_input_bound_captures_blame_the_input_pipeline(name):
    d = _diag(name)
    big = [g for g in d["gaps"] if g["duration_ns"] >= 10_000_000]
    assert big
    assert all(g["cause"] == C.DATA_LOADING for g in big), [(g["cause"], g["duration_ns"])
                                                            for g in big]
    top = d["findings"][0]
    assert top["kind"] == "input_bound", top["title"]
    assert "slowest tf.data stage" in top["title"]
    assert TF_DATA_FIX.search(top["fix"]), top["fix"]
    # the stage named is the one the generator made slow
    stage = "PyFunc" if "PyFunc" in CAPTURES[name]["slow_stage"] else "Resize"
    assert stage in top["title"]


def test_parallel_map_and_prefetch_shrink_the_input_idle():
    def data_per_step(name):
        d = _diag(name)
        (dev,) = d["devices"]
        return dev["idle_by_cause_ns"].get(C.DATA_LOADING, 0) / len(d["steps"])
    assert data_per_step("input_parallel_prefetch") < 0.5 * data_per_step("input_bound")
    # what is left of the input idle is still named by its stage
    f = [x for x in _diag("input_parallel_prefetch")["findings"] if x["kind"] == "input_bound"]
    assert f and "PyFunc" in f[0]["title"]


def test_eager_loop_is_host_bound_with_tf_function_advice():
    gt = CAPTURES["eager_loop"]
    d = _diag("eager_loop")
    steady = [f for f in d["findings"] if f.get("top") and not f.get("one_time")]
    assert steady[0]["kind"] == "host_compute"
    assert "tf.function" in steady[0]["fix"] and "jit_compile=True" in steady[0]["fix"]
    # the retrace compiled in the step the generator observed, and only there
    comp = [s["id"] for s in d["steps"] if s["compile"]["count"] > 0]
    assert comp == gt["compile_steps"] == gt["observed_retrace_steps"]


# ---- folded findings name distinct places ----

def _all_traces():
    out = sorted(glob.glob(os.path.join(TESTDATA, "**", "*.xplane.pb"), recursive=True)
                 + glob.glob(os.path.join(TESTDATA, "**", "*.pt.trace.json*"), recursive=True))
    return out


def _shared_traces():
    if not os.path.isdir(SHARED):
        return []
    return sorted(glob.glob(os.path.join(SHARED, "**", "*.xplane.pb"), recursive=True)
                  + glob.glob(os.path.join(SHARED, "**", "*.pt.trace.json*"), recursive=True)
                  + glob.glob(os.path.join(SHARED, "public", "HolisticTraceAnalysis", "tests",
                                           "data", "**", "*.json.gz"), recursive=True))


def _places(title):
    m = re.search(r"largest: (.*?)( — |$)", title)
    return [p.strip() for p in m.group(1).split(";")] if m else []


def _check_distinct(path):
    try:
        d = tb_perfdiag.diagnose(path).to_json()
    except tb_perfdiag.TraceError:
        return                      # not a trace this project reads (edge-case fixtures)
    for f in d["findings"]:
        places = _places(f["title"])
        assert len(places) == len(set(places)), f["title"]


@pytest.mark.parametrize("path", _all_traces(), ids=lambda p: os.path.relpath(p, TESTDATA)[-60:])
def test_folded_findings_name_distinct_places(path):
    _check_distinct(path)


def test_folded_findings_name_distinct_places_on_shared_traces():
    paths = _shared_traces()
    if not paths:
        pytest.skip("../shared/traces is absent (a clone outside this workplace)")
    for p in sorted(set(paths)):
        _check_distinct(p)


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_waits_in_the_runtimes_queue_are_one_finding(name):
    """XLA:CPU's thunk executor makes the device wait on itself before many ops; one
    finding per op said the same non-actionable thing five times over.  Those without a
    frame of the user's code above them are one finding with their total."""
    d = _diag(name)
    waits = [f for f in d["findings"] if f["kind"] == "device_wait"
             and not (f.get("culprit") or {}).get("where")]
    queue = [f for f in waits if "runtime_queue" in f]
    assert len(queue) == (0 if name == "eager_loop" else 1)     # eager: no XLA executor
    assert not [f for f in waits if f["title"].count("waiting to run") and f not in queue
                and f.get("top")], [f["title"] for f in waits]
    for f in queue:
        q = f["runtime_queue"]
        assert q["op_count"] >= 2 and len(q["ops"]) == min(q["op_count"], 20)
        assert len(set(q["ops"])) == len(q["ops"])
        assert q["ops_ns"] == sorted(q["ops_ns"], reverse=True)
        assert f["title"].startswith("Work already queued on the device")
        # its time: the device-side wait of these gaps on the device, never more than the
        # device's idle in that cause, and at least its largest op's
        dev = next(x for x in d["devices"] if x["name"] == f["device"])
        assert q["ops_ns"][0] <= f["time_lost_ns"] <= dev["idle_by_cause_ns"]["device_wait"]


def test_multi_worker_steps_span_its_devices_and_findings_cost_the_devices_that_compute():
    """The public multi-worker trace: GPU 4 and GPU 6 run step 0 650 ms apart and GPU 1 only
    copies.  The step runs from the first device's start to the last one's end (not GPU 4's
    19.9 ms, beside which "devices run in turn" cost the whole step), and a finding's cost is
    that of a device that computes, not the copy-only GPU's idle."""
    from conftest import diagnosed, shared_path
    from tb_perfdiag.testing import invariants as I
    path = shared_path("public", "tensorflow-profiler", "demo", "plugins", "profile",
                       "GPU-multi-worker", "34.83.195.179_6003.xplane.pb")
    doc = diagnosed(path).to_json()
    step = doc["typical_step_ns"]
    assert 600e6 < step < 700e6, step
    assert I.diagnosis(doc) == []
    for f in doc["findings"]:
        assert f.get("device") != "GPU 1", f["title"]
        assert (f.get("time_lost_ns_per_step") or 0) < 0.5 * step, f["title"]
