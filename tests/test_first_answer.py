"""The page's first answer (the /diagnosis route) stays small on any trace: a listed gap
carries its largest host ops and the gap route gives every one; above 500 steps the step
rows give way to bins and the steps route pages them; nothing the full answer had is lost."""
from __future__ import annotations

import json
import os

import jsonschema
import numpy as np
import pytest

import tb_perfdiag
from tb_perfdiag.cache import DiagnosisCache
from tb_perfdiag.discovery import Catalog, scan_logdir
from tb_perfdiag.params import parse
from tb_perfdiag.render.json import (
    HOST_OPS_SHOWN,
    STEP_ROWS,
    diagnosis_json,
    json_bytes,
    steps_json,
)
from tb_perfdiag.service import DiagnosisService
from tb_perfdiag.testing import TraceBuilder

from conftest import ROOT, TESTDATA

SCHEMA = json.load(open(os.path.join(ROOT, "tb_perfdiag", "schema", "diagnosis.schema.json")))
LIMIT = 2_000_000          # bytes of JSON: the first answer on any trace
DEMO_ROOTS = [os.path.join(TESTDATA, "captures"), os.path.join(TESTDATA, "synthetic", "logdir")]


def _runs():
    for root in DEMO_ROOTS:
        if not os.path.isdir(root):
            continue
        for run in scan_logdir(root).values():
            for src in sorted(run.sources, key=lambda s: (s.host, s.span)):
                yield root, run.name, src


@pytest.fixture(scope="module")
def services():
    return {root: DiagnosisService(Catalog(root), cache=DiagnosisCache(disk_dir=None))
            for root in DEMO_ROOTS if os.path.isdir(root)}


def test_every_demo_and_testdata_first_answer_is_at_most_2_mb(services):
    seen = 0
    for root, run, src in _runs():
        p = parse("diagnosis", {"run": run, "host": src.host, "span": src.span})
        doc = services[root].diagnosis_json(p)
        size = len(json_bytes(doc))
        assert size <= LIMIT, (run, src.host, size)
        jsonschema.validate(doc, SCHEMA)
        seen += 1
    assert seen >= 20       # the demo's runs and the testdata captures were all there


def test_the_gap_route_gives_every_host_op_the_full_answer_had(services):
    """On the testdata runs whose largest gaps hold more host ops than the list shows: the
    listed gap carries the first of them and how many there are; the gap route every one,
    as the full answer (CLI --full, the API) lists them."""
    cut = 0
    for root, run, src in _runs():
        svc = services[root]
        p = parse("diagnosis", {"run": run, "host": src.host, "span": src.span})
        light = svc.diagnosis_json(p)
        full = diagnosis_json(svc._diagnosis(p), 0, 200, None, paged=True)
        assert [g["id"] for g in light["gaps"]] == [g["id"] for g in full["gaps"]]
        for lg, fg in zip(light["gaps"], full["gaps"]):
            assert lg["host_ops_total"] == fg["host_ops_total"] == len(fg["host_ops"])
            assert lg["host_ops"] == fg["host_ops"][:HOST_OPS_SHOWN]
            if len(fg["host_ops"]) <= HOST_OPS_SHOWN:
                assert lg == fg
                continue
            cut += 1
            q = parse("gap", {"run": run, "host": src.host, "span": src.span, "id": lg["id"]})
            got = svc.gap_json(q)
            assert got["host_ops"] == fg["host_ops"] and got["host_ops_total"] == len(
                fg["host_ops"])
            # the listed ones are the largest by self time
            selfs = [o["self_ns"] for o in got["host_ops"]]
            assert min(o["self_ns"] for o in lg["host_ops"]) >= max(selfs[HOST_OPS_SHOWN:])
    assert cut > 0          # some gap had more host ops than the list carries


def many_steps(n: int = 650) -> TraceBuilder:
    """``n`` steps of 100 µs (every 50th 400 µs: an input stall), each launching one
    kernel; each step's host loads data first, so every step has a gap."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    t = 0
    for k in range(n):
        dur = 400 if k % 50 == 7 else 100
        b.step(main, k, t, dur)
        b.op(main, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t,
             dur - 40, cat="user_annotation")
        with b.op(main, "train", t + dur - 40, 30, cat="user_annotation"):
            b.launch(main, "cudaLaunchKernel", t + dur - 38, 3,
                     kernel=b.kernel(s7, "gemm", t + dur - 34, 30))
        t += dur
    return b


@pytest.fixture(scope="module")
def long_run():
    return tb_perfdiag.diagnose(many_steps().build())


def test_above_500_steps_the_first_answer_bins_them_and_lists_the_telling_rows(long_run):
    diag = long_run.diagnosis
    n = len(diag.steps)
    assert n == 650 > STEP_ROWS
    full = long_run.to_json()
    light = long_run.to_json(all_gaps=False)
    jsonschema.validate(light, SCHEMA)
    jsonschema.validate(full, SCHEMA)
    assert full["steps_total"] == light["steps_total"] == n and len(full["steps"]) == n
    by_id = {s["id"]: s for s in full["steps"]}
    # the rows listed are whole rows of the full answer: the slowest (the 13 stalls) and
    # the first and last steps among them
    listed = {s["id"]: s for s in light["steps"]}
    assert len(listed) < 100
    assert all(by_id[i] == s for i, s in listed.items())
    stalls = {k for k in range(n) if k % 50 == 7}
    assert stalls <= set(listed) and {0, n - 1} <= set(listed)
    # the bins cover every step once, in order, and say what their steps say
    bins = light["step_bins"]
    assert sum(b["steps"] for b in bins) == n and bins[0]["first"] == 0
    assert all(a["last"] + 1 == b["first"] for a, b in zip(bins, bins[1:]))
    for b in bins:
        rows = [by_id[i] for i in range(b["first"], b["last"] + 1)]
        t = [r["end_ns"] - r["start_ns"] for r in rows]
        assert (b["min_ns"], b["max_ns"]) == (min(t), max(t))
        assert b["mean_ns"] == pytest.approx(np.mean(t), abs=1)
        assert by_id[b["slowest"]]["end_ns"] - by_id[b["slowest"]]["start_ns"] == max(t)
        busy = np.mean([r["devices"]["0"]["busy_ns"] for r in rows])
        assert b["devices"]["0"]["busy_ns"] == pytest.approx(busy, abs=1)
    # the page's "average step time" from the bins is the rows' own
    mean = sum(b["mean_ns"] * b["steps"] for b in bins) / n
    assert mean == pytest.approx(np.mean([s["end_ns"] - s["start_ns"] for s in full["steps"]]),
                                 rel=1e-6)
    part = lambda d, *k: len(json_bytes({x: d.get(x) for x in k}))  # noqa: E731
    assert part(light, "steps", "step_bins", "annotations", "unscoped") < \
        part(full, "steps", "annotations", "unscoped") / 3
    # at or under 500 steps nothing changes but the totals
    small = tb_perfdiag.diagnose(many_steps(120).build())
    sj = small.to_json(all_gaps=False)
    assert sj["step_bins"] is None and len(sj["steps"]) == sj["steps_total"] == 120
    assert sj["steps"] == small.to_json()["steps"]


def test_a_step_beyond_the_listed_rows_comes_with_its_row_and_its_gaps(long_run):
    """The URL may name any step: its row comes with the answer, its gaps are the list."""
    light = long_run.to_json(all_gaps=False, step=301)
    assert 301 in {s["id"] for s in light["steps"]}
    assert light["gaps"] and all(g["step"] == 301 for g in light["gaps"])
    # per-step figures are those of the listed steps
    per = {k for a in light["annotations"] for k in a["per_step"]}
    assert "301" in per and per <= {str(s["id"]) for s in light["steps"]}
    plain = long_run.to_json(all_gaps=False)
    assert 301 not in {s["id"] for s in plain["steps"]}


def test_the_steps_route_pages_every_row(tmp_path):
    run = tmp_path / "long"
    run.mkdir()
    (run / "worker0.1.pt.trace.json").write_bytes(many_steps().to_bytes())
    svc = DiagnosisService(Catalog(str(tmp_path)), cache=DiagnosisCache(disk_dir=None))
    runs = list(scan_logdir(str(tmp_path)).values())
    src = runs[0].sources[0]
    base = {"run": runs[0].name, "host": src.host, "span": src.span}
    rows, offset = [], 0
    while True:
        page = svc.steps_json(parse("steps", {**base, "steps_offset": str(offset),
                                              "steps_limit": "200"}))
        assert page["steps_total"] == 650 and page["steps_offset"] == offset
        if not page["steps"]:
            break
        rows += page["steps"]
        offset += len(page["steps"])
    diag = svc._diagnosis(parse("diagnosis", base))
    assert rows == steps_json(diag)
    first = svc.diagnosis_json(parse("diagnosis", base))
    assert first["steps_total"] == 650 and first["step_bins"]
    # as served: gzipped once
    body = svc.response("steps", parse("steps", {**base, "steps_limit": "3"}))
    import gzip
    assert [s["id"] for s in json.loads(gzip.decompress(body.gz))["steps"]] == [0, 1, 2]


def test_cli_json_is_the_route_answer_and_full_keeps_every_host_op():
    import glob
    import subprocess
    import sys
    path = glob.glob(os.path.join(TESTDATA, "captures", "torch_xla_cpu", "**", "*.xplane.pb"),
                     recursive=True)[0]

    def cli(*extra):
        return json.loads(subprocess.run(
            [sys.executable, "-m", "tb_perfdiag.cli", "diagnose", path, "--json", *extra],
            capture_output=True, text=True, check=True).stdout)
    light, full = cli(), cli("--full")
    assert light["gaps"][0]["host_ops_total"] > HOST_OPS_SHOWN == len(light["gaps"][0]["host_ops"])
    assert all(len(g["host_ops"]) == g["host_ops_total"] for g in full["gaps"])
    assert [g["id"] for g in light["gaps"]] == [g["id"] for g in full["gaps"]]
    assert "step_bins" in light and "step_bins" not in full
    jsonschema.validate(full, SCHEMA)


def two_devices(b_gaps: int = 220, a_gaps: int = 30) -> TraceBuilder:
    """Two GPUs launched in lockstep every 200 µs: GPU 1 runs 100 µs kernels (``b_gaps``
    gaps of 100 µs), GPU 0 180 µs ones for the first ``a_gaps`` rounds (20 µs gaps) and
    back-to-back ones after: every gap of the all-devices first page is GPU 1's."""
    b = TraceBuilder()
    main = b.thread("python main")
    s0, s1 = b.stream(gpu=0), b.stream(gpu=1)
    t = 10
    for k in range(b_gaps):
        b.launch(main, "cudaLaunchKernel", t - 6, 3, kernel=b.kernel(s1, "gemm_b", t, 100))
        b.launch(main, "cudaLaunchKernel", t - 3, 2,
                 kernel=b.kernel(s0, "gemm_a", t, 180 if k < a_gaps else 200))
        t += 200
    return b


@pytest.fixture(scope="module")
def two_dev(tmp_path_factory):
    root = tmp_path_factory.mktemp("two_dev")
    (root / "two").mkdir()
    path = root / "two" / "worker0.1.pt.trace.json"
    path.write_bytes(two_devices().to_bytes())
    svc = DiagnosisService(Catalog(str(root)), cache=DiagnosisCache(disk_dir=None))
    run = next(iter(scan_logdir(str(root)).values()))
    src = run.sources[0]
    return svc, {"run": run.name, "host": src.host}, str(path)


def _device_named(doc, name):
    return next(d for d in doc["devices"] if d["name"] == name)


def test_the_device_parameter_lists_that_devices_gaps_and_their_count(two_dev):
    from conftest import call
    svc, base, _ = two_dev
    status, every = call(svc, "diagnosis", base)
    assert status == 200 and every["gaps_device"] is None
    a, b = _device_named(every, "GPU 0"), _device_named(every, "GPU 1")
    # the premise: the all-devices page is B's alone, A has gaps of its own
    assert len(every["gaps"]) == 200 and {g["device"] for g in every["gaps"]} == {b["id"]}
    assert a["gaps"] >= 30 and every["gaps_total"] == a["gaps"] + b["gaps"]
    status, doc = call(svc, "diagnosis", {**base, "device": str(a["id"])})
    assert status == 200
    jsonschema.validate(doc, SCHEMA)
    assert doc["gaps_device"] == a["id"] and doc["gaps_total"] == a["gaps"]
    assert len(doc["gaps"]) == a["gaps"] and {g["device"] for g in doc["gaps"]} == {a["id"]}
    durs = [g["duration_ns"] for g in doc["gaps"]]
    assert durs == sorted(durs, reverse=True) and durs[0] == 20_000
    # the page's "Load more": B's gaps page on past the first 200, and only B's
    status, more = call(svc, "diagnosis", {**base, "device": str(b["id"]), "gaps_offset": "200"})
    assert more["gaps_total"] == b["gaps"] and len(more["gaps"]) == b["gaps"] - 200
    assert {g["device"] for g in more["gaps"]} == {b["id"]}
    # the steps' figures are the device's own; devices, device ops (the page sets every
    # device's busy split side by side), findings are the host's
    assert doc["steps"] == [{**s, "devices": {str(a["id"]): s["devices"][str(a["id"])]}}
                            for s in every["steps"]]
    for k in ("devices", "device_ops", "findings", "hta"):
        assert doc[k] == every[k], k
    # MCP's gaps tool pages the same gaps
    from tb_perfdiag.agent_tools import Tools
    got = Tools(svc).gaps(base["run"], base["host"], device=a["id"], limit=1000,
                          max_bytes=1 << 20)
    assert [g["id"] for g in got["gaps"]] == [g["id"] for g in doc["gaps"]]


@pytest.mark.parametrize("value, says", [
    ("2", "no device 2"), ("99999", "no device 99999"), ("-1", "between 0"),
    ("GPU 0", "must be an integer"), ("0x1", "must be an integer"),
    ("../../etc/passwd", "must be an integer")])
def test_a_device_the_trace_does_not_have_is_a_clear_400(two_dev, value, says):
    from conftest import call
    svc, base, _ = two_dev
    status, body = call(svc, "diagnosis", {**base, "device": value})
    assert status == 400 and says in body["error"], body
    from tb_perfdiag.agent_tools import Tools
    from tb_perfdiag.errors import BadRequest
    if value.isdigit():
        with pytest.raises(BadRequest, match="no device"):
            Tools(svc).gaps(base["run"], base["host"], device=int(value))


def test_cli_json_device_is_the_routes_answer(two_dev):
    import subprocess
    import sys
    from conftest import call
    svc, base, path = two_dev

    def cli(*extra):
        p = subprocess.run([sys.executable, "-m", "tb_perfdiag.cli", "diagnose", path,
                            "--json", *extra], capture_output=True, text=True)
        return p.returncode, p.stdout, p.stderr
    for dev in ("0", "1"):
        rc, out, _ = cli("--device", dev)
        assert rc == 0
        got = json.loads(out)
        want = call(svc, "diagnosis", {**base, "device": dev})[1]
        got.pop("source"), want.pop("source")
        assert got == want
    rc, _, err = cli("--device", "5")
    assert rc == 2 and "no device 5" in err


def busy_capture(steps: int, names: int = 400, per_step: int = 40, gpus: int = 4,
                 depth: int = 40, long_name: int = 0) -> TraceBuilder:
    """``steps`` steps on ``gpus`` GPUs, each opening with a ``depth``-deep Python stack
    around a stream sync (``long_name``: a C++ op of that many characters in it), then
    ``per_step`` user annotations cycling through ``names`` names, one kernel each: every
    list of the diagnosis grows with it."""
    b = TraceBuilder()
    main = b.thread("python main")
    streams = [b.stream(gpu=g) for g in range(gpus)]
    t, k_name = 0, 0
    dur = per_step * 12 + 60
    for k in range(steps):
        b.step(main, k, t, dur)
        x = t + 2
        for d in range(depth):
            b.op(main, f"models/deep/module/path/layer_{d}.py({d}): forward_{d}",
                 x + d * 0.01, 40 - d * 0.02, cat="python_function")
        if long_name:
            b.op(main, "aten::" + "x" * long_name, x + depth * 0.01, 38 - depth * 0.02,
                 cat="cpu_op")
        b.op(main, "cudaStreamSynchronize", x + depth * 0.01 + 1, 30, cat="cuda_runtime")
        x = t + 50
        for j in range(per_step):
            with b.op(main, f"block{k_name % names}", x, 10, cat="user_annotation"):
                b.launch(main, "cudaLaunchKernel", x + 1, 3,
                         kernel=b.kernel(streams[j % gpus], "gemm", x + 5, 6))
            k_name += 1
            x += 12
        t += dur
    return b


@pytest.fixture(scope="module")
def busy_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("busy")
    (root / "busy").mkdir()
    (root / "busy" / "worker0.1.pt.trace.json").write_bytes(
        busy_capture(480, gpus=6, long_name=6000).to_bytes())
    svc = DiagnosisService(Catalog(str(root)), cache=DiagnosisCache(disk_dir=None))
    return svc, {"run": "busy", "host": "worker0"}


def test_every_list_of_the_first_answer_is_bounded_at_500_steps_and_under(busy_run):
    """480 steps (not binned by count) on 6 GPUs, 400 annotations in every step's figures,
    40-deep stacks with a 6,000-character op in every gap's host ops: the answer for the
    whole host and for each device stays within 2 MB, every cut list says its total, and
    what is cut comes from its route."""
    from conftest import call
    svc, base = busy_run
    full = diagnosis_json(svc._diagnosis(parse("diagnosis", base)), 0, 200, None, paged=True)
    assert len(json_bytes(full)) > 2 * LIMIT           # what the full answer weighs
    assert len(full["annotations"]) == 400 and len(full["steps"]) == 480
    for dev in (None, *range(6)):
        q = base if dev is None else {**base, "device": str(dev)}
        status, doc = call(svc, "diagnosis", q)
        assert status == 200
        jsonschema.validate(doc, SCHEMA)
        assert len(json_bytes(doc)) <= LIMIT, (dev, len(json_bytes(doc)))
        # 6 devices × 480 steps is over the figures a step chart lists: binned; one
        # device's are not
        assert (doc["step_bins"] is None) == (dev is not None)
        if dev is not None:
            assert all(set(s["devices"]) == {str(dev)} for s in doc["steps"])
        assert doc["annotations_total"] == 400 and len(doc["annotations"]) == 200
        assert all(a["per_step"] == {} for a in doc["annotations"])
        # a gap page of long names is cut by its size; the rest pages on
        assert 0 < len(doc["gaps"]) < 200 < doc["gaps_total"]
    status, doc = call(svc, "diagnosis", base)
    kept = {a["path"][-1]: a for a in doc["annotations"]}
    ranked = sorted(full["annotations"], key=lambda a: -a["inclusive_ns"])
    assert min(a["inclusive_ns"] for a in kept.values()) >= ranked[200]["inclusive_ns"]
    # a step's own answer carries that step's figures of every annotation listed
    status, one = call(svc, "diagnosis", {**base, "step": "10"})
    by = {a["path"][-1]: a for a in full["annotations"]}
    for a in one["annotations"]:
        assert a["per_step"] == ({"10": by[a["path"][-1]]["per_step"]["10"]}
                                 if "10" in by[a["path"][-1]]["per_step"] else {})
    assert any(a["per_step"] for a in one["annotations"])
    # chains keep their ends, the gap route every frame
    g = doc["gaps"][0]
    op = next(o for o in g["host_ops"] if len(o["chain"]) > 12)
    assert len(op["chain"]) == 13 and op["chain"][2].endswith("more frames")
    status, whole = call(svc, "gap", {**base, "id": g["id"]})
    assert whole["host_ops_total"] == g["host_ops_total"] == len(whole["host_ops"])
    deep = next(o for o in whole["host_ops"] if o["name"] == op["name"])
    assert deep["chain"][:2] == op["chain"][:2] and deep["chain"][-10:] == op["chain"][-10:]
    assert len(deep["chain"]) == len(deep["chain"][:2]) + int(op["chain"][2].split()[1]) + 10
    assert g["syncs_total"] == len(whole["syncs"]) >= len(g["syncs"])


def test_3000_steps_with_annotations_answer_within_2_mb(tmp_path):
    root = tmp_path
    (root / "long").mkdir()
    (root / "long" / "worker0.1.pt.trace.json").write_bytes(
        busy_capture(3000, names=300, per_step=8, depth=16).to_bytes())
    svc = DiagnosisService(Catalog(str(root)), cache=DiagnosisCache(disk_dir=None))
    from conftest import call
    base = {"run": "long", "host": "worker0"}
    for q in (base, {**base, "device": "1"}, {**base, "step": "2999"}):
        status, doc = call(svc, "diagnosis", q)
        assert status == 200 and len(json_bytes(doc)) <= LIMIT
        assert doc["steps_total"] == 3000 and len(doc["step_bins"]) <= 200
        assert doc["annotations_total"] == 300
        jsonschema.validate(doc, SCHEMA)
