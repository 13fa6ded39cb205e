"""Before and after: ``tb_perfdiag.compare`` on real before/after pairs names the change an
engineer would name, and its figures are the two diagnoses subtracted — recomputed here
from each diagnosis' own JSON (and, for op counts, from the traces themselves)."""
from __future__ import annotations

import json
import os

import jsonschema
import numpy as np
import pytest

import tb_perfdiag
from tb_perfdiag.analysis import causes as C
from tb_perfdiag.analysis.compare.diff import Change, compare as compare_diagnoses, finding_key
from tb_perfdiag.analysis.result import FindingKind
from tb_perfdiag.discovery import Catalog
from tb_perfdiag.service import DiagnosisService
from tb_perfdiag.testing import TraceBuilder
from tb_perfdiag.trace.model import LinkKind, TrackKind

from conftest import ROOT, TESTDATA, call, shared_path

SCHEMA = json.load(open(os.path.join(ROOT, "tb_perfdiag", "schema", "comparison.schema.json")))
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
SAMPLES = ("public", "kineto", "tb_plugin", "samples")


# ---- the pairs ----

def _newest(folder: str) -> str:
    """The newest span of a PyTorch run folder (as the CLI and the route pick it)."""
    files = sorted(f for f in os.listdir(folder) if f.endswith(".pt.trace.json.gz"))
    return os.path.join(folder, max(files, key=lambda f: int(f.split(".")[1])))


def _xspace(folder: str) -> str:
    for dirpath, _, files in os.walk(folder):
        for f in files:
            if f.endswith(".xplane.pb"):
                return os.path.join(dirpath, f)
    raise AssertionError(f"no XSpace under {folder}")


PAIRS = {
    "num_workers": lambda: (_newest(shared_path(*SAMPLES, "resnet50_num_workers_0")),
                            _newest(shared_path(*SAMPLES, "resnet50_num_workers_4"))),
    "trace_diff": lambda: tuple(shared_path("public", "HolisticTraceAnalysis", "tests", "data",
                                            "trace_diff", x, f"{x}.json.gz")
                                for x in ("control", "test")),
    "torch_xla": lambda: (_xspace(shared_path("cpu", "torch_xla", "full_run")),
                          _xspace(shared_path("cpu", "torch_xla", "steady_state"))),
}
_CACHE: dict = {}


def pair(name):
    """(before Report, after Report, CompareReport, its JSON) of a real pair, once."""
    if name not in _CACHE:
        a, b = PAIRS[name]()
        ra, rb = tb_perfdiag.diagnose(a), tb_perfdiag.diagnose(b)
        cmp = tb_perfdiag.compare(ra, rb)
        _CACHE[name] = (ra, rb, cmp, cmp.to_json())
    return _CACHE[name]


def highlight(cj, what, subject=None):
    return [h for h in cj["highlights"] if h["what"] == what
            and (subject is None or h["subject"] == subject)]


# ---- figures recomputed from each diagnosis' JSON ----

def typical_from_json(dj: dict, dev: str) -> dict:
    """Means over the typical steps (not flagged outlier; all when every step is) of one
    device's step figures, from the diagnosis JSON alone."""
    steps = dj["steps"]
    typ = [s for s in steps if not s["outlier"]] or steps
    k = len(typ)
    d = [s["devices"][dev] for s in typ]
    win = sum(max(x["end_ns"] - x["start_ns"], 0) for x in d)
    busy = sum(x["busy_ns"] for x in d)
    return {"step_ns": sum(s["end_ns"] - s["start_ns"] for s in typ) / k,
            "window_ns": win / k, "busy_ns": busy / k, "duty": busy / win if win else None,
            "short_ns": sum(x["small_gaps"]["total_ns"] for x in d) / k,
            "idle": {c: sum(x["idle_by_cause_ns"].get(c, 0) for x in d) / k for c in C.ALL},
            "ids": [s["id"] for s in typ]}


def check_subtraction(ra, rb, cj):
    """Every figure of the comparison against the two diagnoses' JSON, subtracted (the
    full answer: the first one carries no annotation's per-step figures)."""
    ja, jb = (r.to_json(all_gaps=False, gaps_limit=0, light=False) for r in (ra, rb))
    ns = 3          # each JSON step figure is rounded to the ns: a mean is off by ≤ 1 ns
    for p in cj["devices"]:
        ia = next(str(d["id"]) for d in ja["devices"] if d["name"] == p["before"])
        ib = next(str(d["id"]) for d in jb["devices"] if d["name"] == p["after"])
        fa, fb = typical_from_json(ja, ia), typical_from_json(jb, ib)
        t = p["typical_step"]
        assert t["before"]["steps"] == len(fa["ids"]) and t["after"]["steps"] == len(fb["ids"])
        for key, mine in (("window_ns", "window_ns"), ("busy_ns", "busy_ns"),
                          ("short_gaps_ns", "short_ns")):
            assert t["before"][key] == pytest.approx(fa[mine], abs=ns)
            assert t["after"][key] == pytest.approx(fb[mine], abs=ns)
        assert t["delta"]["busy_ns"] == pytest.approx(fb["busy_ns"] - fa["busy_ns"], abs=2 * ns)
        assert t["delta"]["window_ns"] == pytest.approx(fb["window_ns"] - fa["window_ns"],
                                                        abs=2 * ns)
        assert t["before"]["duty_cycle"] == pytest.approx(fa["duty"], abs=1e-6)
        assert t["delta"]["duty_cycle"] == pytest.approx(fb["duty"] - fa["duty"], abs=2e-6)
        rows = {r["cause"]: r for r in t["causes"]}
        for c in C.ALL:
            want = fb["idle"][c] - fa["idle"][c]
            if c in rows:
                assert rows[c]["before_ns"] == pytest.approx(fa["idle"][c], abs=ns)
                assert rows[c]["after_ns"] == pytest.approx(fb["idle"][c], abs=ns)
                assert rows[c]["delta_ns"] == pytest.approx(want, abs=2 * ns)
                if rows[c]["before_share"] is not None:
                    assert rows[c]["before_share"] == pytest.approx(
                        fa["idle"][c] / fa["window_ns"], abs=1e-6)
            else:
                assert abs(fa["idle"][c]) < 1 and abs(fb["idle"][c]) < 1
        # whole-trace duty cycle, as each diagnosis states it
        da = next(d for d in ja["devices"] if d["name"] == p["before"])
        db = next(d for d in jb["devices"] if d["name"] == p["after"])
        assert p["duty_cycle"]["before"] == pytest.approx(da["duty_cycle"])
        assert p["duty_cycle"]["delta"] == pytest.approx(db["duty_cycle"] - da["duty_cycle"])
    # typical step time
    dev_a = str(ja["devices"][0]["id"])
    sa = typical_from_json(ja, dev_a)["step_ns"] if ja["steps"] else 0
    sb = typical_from_json(jb, str(jb["devices"][0]["id"]))["step_ns"] if jb["steps"] else 0
    assert cj["step_time"]["before_ns"] == pytest.approx(sa, abs=ns)
    assert cj["step_time"]["delta_ns"] == pytest.approx(sb - sa, abs=2 * ns)
    # findings: each finding of either run once, with its own time per step
    by_title_a = {f["title"]: f for f in ja["findings"]}
    by_title_b = {f["title"]: f for f in jb["findings"]}
    seen_a = [f["before"]["title"] for f in cj["findings"] if f["before"]]
    seen_b = [f["after"]["title"] for f in cj["findings"] if f["after"]]
    assert sorted(seen_a) == sorted(by_title_a) and sorted(seen_b) == sorted(by_title_b)
    for f in cj["findings"]:
        pa = by_title_a[f["before"]["title"]]["time_lost_ns_per_step"] if f["before"] else 0
        pb = by_title_b[f["after"]["title"]]["time_lost_ns_per_step"] if f["after"] else 0
        assert (f["per_step_before_ns"], f["per_step_after_ns"], f["delta_ns"]) == (pa, pb, pb - pa)
        assert f["change"] == ("new" if not f["before"] else "gone" if not f["after"]
                               else f["change"])
    # annotations: device time per typical step from each annotation's per-step figures
    for r in cj["annotations"]:
        def per(dj):
            typ = typical_from_json(dj, str(dj["devices"][0]["id"]))["ids"]
            rows = [a for a in dj["annotations"] if a["path"] == r["path"]]
            return sum(a["per_step"].get(str(s), {}).get("inclusive_ns", 0)
                       for a in rows for s in typ) / len(typ)
        assert r["before_ns"] == pytest.approx(per(ja), abs=ns)
        assert r["after_ns"] == pytest.approx(per(jb), abs=ns)


def op_counts_from_trace(trace, dj, names) -> dict:
    """Calls per typical step of host ops, straight from the trace: an event belongs to the
    last step that started at or before it."""
    steps = dj["steps"]
    typ = {s["id"] for s in (([s for s in steps if not s["outlier"]]) or steps)}
    starts = np.array([s["start_ns"] * 1000 for s in steps])
    ids = [s["id"] for s in steps]
    host = trace.track_kind[trace.track] == TrackKind.HOST
    out = {}
    for name in names:
        sid = [i for i, x in enumerate(trace.strings) if x == name]
        idx = np.flatnonzero(np.isin(trace.name, sid) & host)
        k = np.searchsorted(starts, trace.ts[idx], side="right") - 1
        out[name] = sum(1 for x in k.tolist() if x >= 0 and ids[x] in typ) / len(typ)
    return out


# ---- real pairs: the change an engineer would name ----

def test_num_workers_data_loading_idle_falls_and_duty_rises():
    ra, rb, cmp, cj = pair("num_workers")
    assert jsonschema.validate(cj, SCHEMA) is None
    (p,) = cj["devices"]
    assert p["name"] == "GPU 0" and p["paired_by"] == "name"
    t = p["typical_step"]
    loading = next(r for r in t["causes"] if r["cause"] == C.DATA_LOADING)
    # the single-process loader's ~35 ms per step of data-loading idle is gone
    assert loading["before_ns"] > 20e6 and loading["after_ns"] < 0.1 * loading["before_ns"]
    assert t["causes"][0]["cause"] == C.DATA_LOADING            # the largest change
    assert t["delta"]["duty_cycle"] > 0.05                      # duty rises
    assert cj["step_time"]["delta_ns"] < 0                       # and the step is faster
    # the summary says so: what the change exposed (new and grown findings: the host time
    # that was hidden behind the loader) first, then the headline
    hl = [(h["what"], h["subject"]) for h in cj["highlights"]]
    rising = [x for x in hl if x[0] == "finding" and x[1] in ("new", "grew")]
    assert [w for w, _ in hl[len(rising):len(rising) + 2]] == ["step_time", "duty"]
    dl = highlight(cj, "idle_cause", C.DATA_LOADING)
    assert dl and dl[0]["after"] < dl[0]["before"] and "data loading" in dl[0]["text"]
    gone = [f for f in cj["findings"] if f["change"] == "gone"]
    assert any(f["kind"] == "input_bound" and "main thread" in f["culprit"] for f in gone)
    # the preprocessing ops left the main process with the loader
    by = {o["name"]: o for o in cj["ops"]["by_count"]}
    assert by["aten::copy_"]["count_after"] < 0.1 * by["aten::copy_"]["count_before"]
    (host,) = highlight(cj, "op_host_time")
    assert host["subject"] == LOADER and host["after"] == 0 and host["before"] > 20e6
    text = cmp.to_text()
    assert "data loading / input idle per typical step" in text and "gone" in text
    check_subtraction(ra, rb, cj)


def test_trace_diff_the_device_does_more_work_and_idles_less():
    ra, rb, cmp, cj = pair("trace_diff")
    assert jsonschema.validate(cj, SCHEMA) is None
    (p,) = cj["devices"]
    assert (p["before"], p["after"], p["paired_by"]) == ("GPU 3", "GPU 1", "order")
    assert any("GPU 3 (before) is compared with GPU 1 (after)" in w for w in cj["warnings"])
    t = p["typical_step"]
    # slower steps, yet busier device: the step grew by device work, not by idle
    assert cj["step_time"]["delta_ns"] > 0
    assert t["delta"]["busy_ns"] > 0.8 * cj["step_time"]["delta_ns"]
    assert t["delta"]["duty_cycle"] > 0.05
    hc = next(r for r in t["causes"] if r["cause"] == C.HOST_COMPUTE)
    assert hc["after_ns"] < 0.05 * hc["before_ns"]               # host-bound gaps gone
    # new and grown findings first (what to act on), then the headline, then by weight
    hl = [(h["what"], h["subject"]) for h in cj["highlights"]]
    rising = [x for x in hl if x[0] == "finding" and x[1] in ("new", "grew")]
    assert rising and hl[:len(rising)] == rising
    assert [w for w, _ in hl[len(rising):len(rising) + 3]] == ["step_time", "duty", "busy"]
    # the copies behind it: device→device copies and their cudaMemcpyAsync calls
    dt = {o["name"]: o for o in cj["ops"]["by_device_time"]}
    assert dt["Memcpy DtoD (Device -> Device)"]["time_delta_ns"] > 10e6
    cnt = {o["name"]: o for o in cj["ops"]["by_count"]}
    assert cnt["cudaMemcpyAsync"]["count_after"] > 10 * cnt["cudaMemcpyAsync"]["count_before"]
    assert any(f["change"] == "new" and f["kind"] == "excessive_memcpy" for f in cj["findings"])
    # the .item() sync points HTA's TraceDiff shows: they stop costing idle
    syncs = [f for f in cj["findings"] if f["kind"] == "host_sync" and "item" in f["culprit"]]
    assert syncs and all(f["change"] == "gone" for f in syncs)
    # …while the host blocks in them longer: the same 5 calls per step, 5× the host time
    item = {o["name"]: o for o in cj["ops"]["by_host_time"]}["aten::item"]
    assert item["count_before"] == item["count_after"] == 5
    assert item["time_after_ns"] > 5 * item["time_before_ns"] > 5e6
    check_subtraction(ra, rb, cj)
    counts = op_counts_from_trace(tb_perfdiag.load(PAIRS["trace_diff"]()[0]),
                                  ra.to_json(all_gaps=False, gaps_limit=0),
                                  ["cudaMemcpyAsync", "cudaLaunchKernel", "aten::copy_"])
    for name, v in counts.items():
        assert cnt[name]["count_before"] == pytest.approx(v)


def test_torch_xla_steady_state_drops_the_warm_up_compiles():
    ra, rb, cmp, cj = pair("torch_xla")
    assert jsonschema.validate(cj, SCHEMA) is None
    a, b = cj["before"], cj["after"]
    # full_run: 4 compiles in 12 steps (2 first compiles, 2 recompiles); steady_state: one
    # recompile in 10
    assert (a["compilations"]["count"], b["compilations"]["count"]) == (4, 1)
    assert b["compilations"]["per_step"] < a["compilations"]["per_step"]
    assert highlight(cj, "compilations")
    kinds = {(f["kind"], f["change"]) for f in cj["findings"]}
    assert ("compilation", "gone") in kinds            # the one-time compile is not captured
    assert ("recompilation", "shrank") in kinds
    # the steady steps themselves: the same program, about the same step time
    assert abs(cj["step_time"]["delta_pct"]) < 0.25
    (p,) = cj["devices"]
    assert p["name"] == "CPU (XLA)" and p["paired_by"] == "name"
    comp = [r for r in p["per_step"]["causes"] if r["cause"] == C.COMPILATION]
    assert comp and comp[0]["delta_ns"] < 0            # compilation idle per step falls
    check_subtraction(ra, rb, cj)


def test_compare_accepts_paths_traces_reports_and_diagnoses():
    a, b = PAIRS["num_workers"]()
    by_path = tb_perfdiag.compare(a, b).to_json(with_steps=False)
    ra = tb_perfdiag.diagnose(a)
    by_mix = tb_perfdiag.compare(ra.diagnosis, tb_perfdiag.load(b)).to_json(with_steps=False)
    assert by_path["devices"] == by_mix["devices"] and by_path["findings"] == by_mix["findings"]
    assert by_path["before"]["label"] == os.path.basename(a)
    same = tb_perfdiag.compare(ra, ra)
    assert same.highlights == [] and all(f.change == Change.SAME for f in same.findings)
    assert all(r["delta_ns"] == 0 for p in same.to_json()["devices"]
               for r in p["typical_step"]["causes"])


# ---- synthetic: no ../shared needed ----

MM = 1024          # with ``shapes``: each kernel is an fp32 (1024 × 1024) @ (1024 × 1024)


def training(loader_us: float, steps: int = 6, kernels: int = 8, kernel_us: float = 200,
             fmt: str = "kineto", shapes: bool = False) -> TraceBuilder:
    """A training loop: each step fetches a batch for ``loader_us`` on the main thread
    (nothing for the device to do meanwhile), then launches ``kernels`` back-to-back
    kernels; with ``shapes`` each launch is inside an ``aten::mm`` recorded with its shapes
    (``record_shapes=True``), so the kernels have FLOPs (2 × MM³ each) on the A100 the
    builder's header names."""
    b = TraceBuilder(fmt)
    main, s7 = b.thread("python main"), b.stream(gpu=0, stream=7)
    t = 0.0
    for n in range(steps):
        length = loader_us + kernels * kernel_us + 40
        with b.step(main, n, t, length):
            if loader_us:
                b.op(main, LOADER, t + 2, loader_us, cat="user_annotation")
            k0 = t + loader_us + 10
            for i in range(kernels):
                ts = k0 + i * kernel_us
                if shapes:
                    b.op(main, "aten::mm", ts - 1, 6, cat="cpu_op",
                         args={"Input Dims": [[MM, MM], [MM, MM]], "Input type": ["float", "float"]})
                b.launch(main, "cudaLaunchKernel", ts, 4,
                         kernel=b.kernel(s7, "gemm", ts + 8, kernel_us - 2))
        t += length
    return b


def test_removing_a_data_loading_stall_is_named():
    before = tb_perfdiag.diagnose(training(3000).build())
    after = tb_perfdiag.diagnose(training(0).build())
    cmp = tb_perfdiag.compare(before, after, labels=("slow", "fast"))
    cj = cmp.to_json()
    assert jsonschema.validate(cj, SCHEMA) is None
    (p,) = cj["devices"]
    dl = next(r for r in p["typical_step"]["causes"] if r["cause"] == C.DATA_LOADING)
    assert dl["before_ns"] == pytest.approx(3000e3, rel=0.02) and dl["after_ns"] == 0
    assert cj["step_time"]["delta_ns"] == pytest.approx(-3000e3, abs=1)
    assert p["typical_step"]["delta"]["duty_cycle"] > 0.2
    gone = [f for f in cmp.findings if f.change == Change.GONE]
    assert [f.kind for f in gone] == [FindingKind.INPUT_BOUND]
    assert [h.what for h in cmp.highlights][:3] == ["step_time", "duty", "idle_cause"]
    assert cmp.highlights[2].subject == C.DATA_LOADING
    check_subtraction(before, after, cj)
    # the other way round it is new, and grew is told from shrank
    back = tb_perfdiag.compare(after, before)
    assert [f.change for f in back.findings if f.kind == FindingKind.INPUT_BOUND] == [Change.NEW]
    more = tb_perfdiag.compare(before, tb_perfdiag.diagnose(training(6000).build()))
    assert [f.change for f in more.findings if f.kind == FindingKind.INPUT_BOUND] == [Change.GREW]


def test_ops_counted_per_typical_step_and_outliers_left_out():
    # 6 steps; the 4th also launches 40 extra kernels for 20 ms: an outlier step
    b = training(0)
    main = next(t for t in b.tracks if t.side == "host")
    s7 = next(t for t in b.tracks if t.side == "device")
    with b.step(main, 6, 20_000, 30_000):
        for i in range(40):
            ts = 20_010 + i * 700
            b.launch(main, "cudaLaunchKernel", ts, 4, kernel=b.kernel(s7, "big", ts + 8, 690))
    d = tb_perfdiag.diagnose(b.build()).diagnosis
    assert d.steps.outlier.tolist() == [False] * 6 + [True]
    O = d.ops
    row = {(n, bool(dv)): i for i, (n, dv) in enumerate(zip(O.name, O.device.tolist()))}
    launch = row[("cudaLaunchKernel", False)]
    assert (O.count[launch], O.typical_count[launch], O.typical_steps) == (88, 48, 6)
    gemm = row[("gemm", True)]
    assert O.typical_time[gemm] == 48 * 198 * 1_000_000       # ps
    big = row[("big", True)]
    assert (O.count[big], O.typical_count[big], O.step_count[big]) == (40, 0, 40)
    cmp = compare_diagnoses(d, tb_perfdiag.diagnose(training(0).build()).diagnosis)
    op = {(o.name, o.device): o for o in cmp.ops}
    assert op[("cudaLaunchKernel", False)].count_before == 8.0
    assert op[("big", True)].count_all_before == pytest.approx(40 / 7)
    assert op[("big", True)].count_after == 0


def test_devices_pair_by_name_then_order_and_finding_keys_drop_line_numbers():
    from tb_perfdiag.analysis.compare.diff import _norm
    assert _norm("train.py:88 log_metrics") == _norm("train.py:93 log_metrics")
    assert _norm("ProfilerStep#12") == _norm("ProfilerStep#3")
    assert _norm("fusion.12") == "fusion.N" and _norm("aten::conv2d") == "aten::conv2d"
    # a run moved from GPU 0 to GPU 2 still compares, with a warning
    b = TraceBuilder()
    main, s = b.thread("python main"), b.stream(gpu=2, stream=7)
    with b.step(main, 0, 0, 1000):
        b.launch(main, "cudaLaunchKernel", 10, 4, kernel=b.kernel(s, "gemm", 20, 500))
    with b.step(main, 1, 1000, 1000):
        b.launch(main, "cudaLaunchKernel", 1010, 4, kernel=b.kernel(s, "gemm", 1020, 500))
    a = tb_perfdiag.diagnose(training(100, steps=2).build()).diagnosis
    c = compare_diagnoses(a, tb_perfdiag.diagnose(b.build()).diagnosis)
    (p,) = c.devices
    assert (p.name_before, p.name_after, p.paired_by) == ("GPU 0", "GPU 2", "order")
    assert ("paired_by_order", ("GPU 0", "GPU 2")) in c.warnings
    for f in a.findings:
        assert finding_key(f)            # every finding has a key to match by


# ---- the route ----

def test_compare_route_and_its_errors(tmp_path):
    for name, loader in (("slow", 3000), ("fast", 0)):
        d = tmp_path / name
        d.mkdir()
        (d / "worker0.1700000000000.pt.trace.json").write_bytes(training(loader).to_bytes())
    svc = DiagnosisService(Catalog(str(tmp_path)))
    q = {"run": "fast", "host": "worker0", "base_run": "slow", "base_host": "worker0"}
    status, body = call(svc, "compare", q)
    assert status == 200, body
    assert jsonschema.validate(body, SCHEMA) is None
    assert (body["before"]["run"], body["after"]["run"]) == ("slow", "fast")
    assert body["before"]["label"] == "slow · worker0 · 2023-11-14 22:13:20.000 UTC"
    assert len(body["before"]["step_chart"]) == 6 and body["ops"]["limit"] == 15
    assert body["highlights"][0]["what"] == "step_time"
    # the same diagnoses as /diagnosis (cached: no second analysis)
    n = svc.cache.computations
    status, _ = call(svc, "diagnosis", {"run": "slow", "host": "worker0"})
    assert status == 200 and svc.cache.computations == n
    assert call(svc, "compare", {**q, "top": "3"})[1]["ops"]["limit"] == 3
    status, body = call(svc, "compare", {**q, "base_run": "nope"})
    assert status == 404 and body["base_run"] == "nope"
    status, body = call(svc, "compare", {k: v for k, v in q.items() if k != "base_host"})
    assert status == 400 and "base_host" in body["error"]
    assert call(svc, "compare", {**q, "top": "0"})[0] == 400
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "worker0.1.pt.trace.json").write_text("{not json")
    status, body = call(svc, "compare", {**q, "base_run": "bad"})
    assert status == 422 and body["file"] == "worker0.1.pt.trace.json"


_OP_TABLE_FILES = [
    "testdata/synthetic/logdir/kineto_launch_bound/worker0.1795400183000.pt.trace.json",
    "testdata/synthetic/logdir/xla_tpu_two_devices/plugins/profile/2026_11_22_06_01_00/synthhost.xplane.pb",
    "testdata/captures/torch_cpu/toyhost.1795324137232776410.pt.trace.json",
    "testdata/captures/tf_cpu/input_bound/plugins/profile/2026_11_25_02_04_04/cpuhost.xplane.pb",
]


@pytest.mark.parametrize("rel", _OP_TABLE_FILES)
@pytest.mark.parametrize("n_steps", [0, 1, 7])
@pytest.mark.parametrize("step_type", [np.int8, np.int16, np.int32])
def test_op_counts_in_c_are_the_numpy_ones(rel, n_steps, step_type):
    """The op table's counts and times per name and cell from the C pass equal the numpy
    chunks', host and device side, with events outside every step and steps both typical
    and not (and no steps at all), for each width the analysis holds steps in."""
    from pathlib import Path

    import tb_perfdiag.trace as T
    from tb_perfdiag.analysis.device_time import op_counts as O
    from tb_perfdiag.trace.model import DEVICE_ACTIVITY, TrackKind
    path = Path(__file__).resolve().parent.parent / rel
    t = T.load(str(path))
    rng = np.random.default_rng(n_steps)
    ev_step = rng.integers(-1, max(n_steps, 1), t.n_events).astype(step_type)
    if n_steps == 0:
        ev_step[:] = -1
    typical = rng.random(n_steps) < 0.6
    dev_kinds = np.zeros(256, bool)
    dev_kinds[list(DEVICE_ACTIVITY)] = True
    not_op = np.zeros(256, bool)
    not_op[list(O._NOT_OPS)] = True
    on_device = t.track_kind == TrackKind.DEVICE
    got = O._native_counts(t, ev_step, typical, dev_kinds, not_op, on_device)
    if got is None:
        pytest.skip("the native extension is not built (setup.py build_ext)")
    want = O._counts(t, ev_step, typical, dev_kinds, not_op, on_device)
    assert sum(x.shape[0] for x in want[0]) > 3
    for w_part, g_part in zip(want, got):
        for w, g in zip(w_part, g_part):
            np.testing.assert_array_equal(w, g)
    # the track column in each width the model holds it in (int8 here: few tracks)
    assert t.track.dtype == np.int8
    for width in (np.int16, np.int32):
        t.track = t.track.astype(width)
        got = O._native_counts(t, ev_step, typical, dev_kinds, not_op, on_device)
        for w_part, g_part in zip(want, got):
            for w, g in zip(w_part, g_part):
                np.testing.assert_array_equal(w, g)


def test_demo_pair_new_sync_finding_leads_the_highlights():
    """The demo's input-bound run against its torch.nonzero run: the new sync finding is
    the story and comes first, ahead of the headline and of the annotation that appeared
    with it; the op tables fold kernel names as the device-op table does."""
    syn = os.path.join(TESTDATA, "synthetic", "logdir")

    def one(name):
        d = os.path.join(syn, name)
        return os.path.join(d, next(f for f in sorted(os.listdir(d)) if ".pt.trace.json" in f))
    cmp = tb_perfdiag.compare(one("kineto_data_loading"), one("kineto_sync_nonzero"))
    cj = cmp.to_json()
    assert jsonschema.validate(cj, SCHEMA) is None
    first = cj["highlights"][0]
    assert (first["what"], first["subject"]) == ("finding", "new"), first
    assert "nonzero" in first["text"] and "blocks on the device" in first["text"]
    assert [h["what"] for h in cj["highlights"][1:3]] == ["step_time", "duty"]
    # the rest by the time they explain
    rest = [h for h in cmp.highlights[3:]]
    assert [h.weight for h in rest] == sorted((h.weight for h in rest), reverse=True)
    for o in cj["ops"]["by_device_time"] + cj["ops"]["by_count"]:
        if o["where"] == "device" and o["kind"] == "kernel":
            assert "(" not in o["label"] and not o["label"].startswith("void ")
    names = [r["name"] for r in cj["device_ops"]["by_device_time"]]
    assert len(names) == len(set(names)) and "at::native::multi_tensor_apply_kernel<…>" in names
    assert not any(h["text"].startswith("void ") for h in cj["highlights"])


def _loader_loop(stall_steps, stall_us: float, ops=(), steps: int = 6) -> TraceBuilder:
    """``training``'s loop with the DataLoader stalling only in ``stall_steps`` (inside
    it the host ops ``ops``, nested), the steps otherwise alike."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream(gpu=0, stream=7)
    t = 0.0
    for n in range(steps):
        load = stall_us if n in stall_steps else 0
        length = load + 8 * 200 + 40
        with b.step(main, n, t, length):
            if load:
                b.op(main, LOADER, t + 2, load, cat="user_annotation")
                for depth, name in enumerate(ops):
                    b.op(main, name, t + 3 + depth, load - 2 - 2 * depth)
            for i in range(8):
                ts = t + load + 10 + i * 200
                b.launch(main, "cudaLaunchKernel", ts, 4, kernel=b.kernel(s7, "gemm", ts + 8, 198))
        t += length
    return b


def test_one_culprit_is_one_row_whatever_its_steps_and_op_chain():
    """The DataLoader on the main thread stalls once (step 2) before and every step after,
    where its time now goes to aten::stack › aten::cat under it: one finding that grew,
    never "new" beside "gone"."""
    before = tb_perfdiag.diagnose(_loader_loop({2}, 300).build())
    after = tb_perfdiag.diagnose(_loader_loop(set(range(6)), 2000, ("aten::stack", "aten::cat")).build())
    fa = [f for f in before.diagnosis.findings if f.kind == FindingKind.INPUT_BOUND]
    fb = [f for f in after.diagnosis.findings if f.kind == FindingKind.INPUT_BOUND]
    assert len(fa) == len(fb) == 1
    # the culprit keys differ (the op chain below the user's place): matched by the place
    assert finding_key(fa[0]) != finding_key(fb[0])
    cmp = tb_perfdiag.compare(before, after)
    rows = [f for f in cmp.findings if f.kind == FindingKind.INPUT_BOUND]
    assert [f.change for f in rows] == [Change.GREW]
    assert rows[0].per_step_before > 0 and rows[0].per_step_after > rows[0].per_step_before
    back = tb_perfdiag.compare(after, before)
    assert [f.change for f in back.findings if f.kind == FindingKind.INPUT_BOUND] == [Change.SHRANK]
    # the loader's lines (another finding may fall below a top finding's share: gone)
    text = "\n".join(x for x in cmp.to_text().splitlines() if "DataLoader" in x)
    assert text and " new " not in text and " gone " not in text


def _written(tmp_path, name, **kw) -> str:
    p = os.path.join(str(tmp_path), f"{name}.pt.trace.json")
    with open(p, "wb") as f:
        f.write(training(**kw).to_bytes())
    return p


def test_the_waterfall_before_after_and_a_side_without_flops(tmp_path):
    # shapes are read from the file again: the traces are written, not built in memory
    slow, fast, bare = (tb_perfdiag.diagnose(_written(tmp_path, n, loader_us=u, shapes=s))
                        for n, u, s in (("slow", 3000, True), ("fast", 0, True), ("bare", 0, False)))
    cmp = tb_perfdiag.compare(slow, fast, labels=("slow", "fast"))
    cj = cmp.to_json()
    assert jsonschema.validate(cj, SCHEMA) is None
    t = cj["devices"][0]["typical_step"]
    a, b = t["before"], t["after"]
    assert a["missing"] is None and b["missing"] is None
    moved = t["delta"]["waterfall_moved"]
    # the achieved MFU first (in points: MFU × 100), then the parts that moved ≥ 1 point
    assert moved[0]["part"] == "mfu" and moved[0]["after"] == pytest.approx(100 * b["mfu"], abs=1e-3)
    rest = moved[1:]
    assert rest[0]["part"] == C.DATA_LOADING and rest[0]["after"] == 0      # the stall's share gone
    assert [abs(r["delta"]) for r in rest] == sorted((abs(r["delta"]) for r in rest), reverse=True)
    assert all(abs(r["delta"]) >= 1 for r in rest)
    for r in moved:                              # each side's figure, subtracted
        assert r["before"] == pytest.approx(a["waterfall"].get(r["part"], 0), abs=1e-4)
        assert r["after"] == pytest.approx(b["waterfall"].get(r["part"], 0), abs=1e-4)
        assert r["delta"] == pytest.approx(r["after"] - r["before"], abs=2e-4)
        assert r["delta"] == t["delta"]["waterfall"][r["part"]]
    small = {p for p, v in t["delta"]["waterfall"].items() if abs(v) < 1} - {"mfu"}
    assert not small & {r["part"] for r in moved}
    text = cmp.to_text()
    # the MFU's line (with its change), then the parts by the names the page gives them
    mfu_line = next(x for x in text.splitlines() if x.strip().startswith("MFU "))
    assert "points" in mfu_line
    assert "MFU waterfall, points of the step at peak:\n       idle: Data loading / input: " in text
    assert "waterfall: data_loading" not in text and "waterfall: mfu" not in text
    # a side without shapes: no waterfall, and why — in the JSON and in words
    cmp = tb_perfdiag.compare(bare, fast, labels=("bare", "fast"))
    cj = cmp.to_json()
    assert jsonschema.validate(cj, SCHEMA) is None
    t = cj["devices"][0]["typical_step"]
    assert t["before"]["waterfall"] is None and "record_shapes=True" in t["before"]["missing"]
    assert t["after"]["missing"] is None and t["delta"]["waterfall_moved"] is None
    assert "no MFU waterfall before: profile with record_shapes=True" in cmp.to_text()
