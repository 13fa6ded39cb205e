"""Peer wait in the MFU waterfall when the peers are other files of the run (issue 55, item
3): each rank's waterfall, seen as part of its run, splits its exposed collective time into
``peer_wait`` (its wait for the last peer, from the run's collective join) and transfer
(``no_matmul_work``), and still adds up to 100 — the same figure in the /collectives JSON the
page's waterfall card reads, the pod rows and the CLI's run summary.

The run is written here: 4 ranks of one PyTorch job, one Kineto file and one A100 each; every
step an ``aten::mm`` with shapes (2·1024³ FLOPs) launches a 300 µs gemm, then an NCCL
all-reduce whose instances end together on every rank; rank 2 arrives 600 µs after the
others, so each other rank waits exactly 600 µs inside each all-reduce and the rest (40 µs)
is transfer.  Nothing overlaps the all-reduce, so all of it is exposed."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, shared_path
from tb_perfdiag.analysis import causes as C
from tb_perfdiag.analysis import Options, diagnose_trace
from tb_perfdiag.analysis.efficiency import waterfall as W
from tb_perfdiag.analysis.run.waterfalls import run_waterfall
from tb_perfdiag.cache import DiagnosisCache
from tb_perfdiag.discovery import Catalog
from tb_perfdiag.params import parse
from tb_perfdiag.analysis.run.view import run_view
from tb_perfdiag.render.pod import pod_summary, summary_row
from tb_perfdiag.service import DiagnosisService
from tb_perfdiag.testing import TraceBuilder
from tb_perfdiag.trace import load

STEPS, STEP_US, XFER_US, LATE_US, LATE = 6, 2000, 40, 600, 2
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
MM = 2 * 1024 ** 3
SCHEMA = json.load(open(os.path.join(ROOT, "tb_perfdiag", "schema", "collectives.schema.json")))
DLRM = ("public", "param", "et_replay", "tests", "inputs", "dlrm_kineto")


def rank_trace(rank: int) -> TraceBuilder:
    b = TraceBuilder()
    py = b.thread("python main")
    s = b.stream(gpu=rank, stream=7)
    for k in range(STEPS):
        t0 = k * STEP_US
        b.step(py, k, t0, STEP_US - 10)
        b.op(py, "aten::mm", t0 + 2, 10, args={"Input Dims": [[1024, 1024], [1024, 1024]],
                                               "Input type": ["float", "float"]})
        b.launch(py, "cudaLaunchKernel", t0 + 5, 4,
                 kernel=b.kernel(s, "volta_sgemm_128x64_nn", t0 + 10, 300))
        if rank == LATE:       # its host is busy in its input before it launches
            b.op(py, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0 + 20,
                 LATE_US)
        late = LATE_US if rank == LATE else 0
        arrive, done = t0 + 400 + late, t0 + 400 + LATE_US + XFER_US
        b.launch(py, "cudaLaunchKernel", arrive - 5, 4,
                 kernel=b.kernel(s, ALL_REDUCE, arrive, done - arrive))
    return b


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    ld = tmp_path_factory.mktemp("runpeer")
    os.makedirs(ld / "job")
    for r in range(4):
        with open(ld / "job" / f"rank{r}.1700000000000.pt.trace.json", "wb") as f:
            f.write(rank_trace(r).to_bytes())
    return ld


@pytest.fixture(scope="module")
def diags(run_dir):
    folder = run_dir / "job"
    return {f.split(".")[0]: diagnose_trace(load(str(folder / f)), Options())
            for f in sorted(os.listdir(folder))}


@pytest.fixture(scope="module")
def service(run_dir):
    svc = DiagnosisService(Catalog(str(run_dir)), DiagnosisCache(disk_dir=None))
    yield svc
    svc.close()


def _total(wf: dict) -> float:
    return sum(wf.values())


def test_resplitting_the_collectives_is_the_waterfall_at_that_wait_fraction():
    rng = np.random.default_rng(5)
    n = 40
    win = rng.uniform(1e6, 2e6, n)
    busy = win * rng.uniform(0.2, 1.0, n)
    idle = rng.uniform(0, 1e5, (n, len(C.ALL)))
    args = (win, busy, idle, rng.uniform(0, 1e4, n), rng.uniform(0, 5, n),
            rng.uniform(0, 1, n), rng.uniform(0, 3, n), rng.uniform(0, 1, n))
    flops, peak = win * rng.uniform(0.01, 0.5, n), np.full(n, 1e12)     # MFU under 1
    frac = rng.uniform(0, 1, n)
    own, _, coll = W.points_and_collectives(*args, rng.uniform(0, 1, n), flops, peak)
    want, _ = W.points(*args, frac, flops, peak)
    got = W.with_peer_wait(own, coll, frac)
    assert np.allclose(got, want, rtol=0, atol=1e-9)
    assert np.allclose(got.sum(axis=1), 100)
    # no fraction known: the row stands
    assert np.array_equal(W.with_peer_wait(own, coll, np.full(n, np.nan)), own)


def test_each_rank_waits_its_measured_wait_in_its_waterfall(diags):
    rows = [summary_row(h, "", d) for h, d in diags.items()]
    j = run_view(rows).join
    d0 = diags["rank0"]
    E = d0.efficiency
    assert E.flops[0] == STEPS * MM
    # alone, the file cannot tell wait from transfer: all of it in no_matmul_work
    own = dict(zip(W.PARTS, E.waterfall[0]))
    assert own[W.PEER] == 0
    rw = run_waterfall(d0, j, "rank0")
    assert rw.hosts == 4 and rw.joined[0] and rw.step_joined[:, 0].all()
    got = dict(zip(W.PARTS, rw.waterfall[0]))
    lo, hi = d0.devices.window(0)
    assert got[W.PEER] == pytest.approx(100 * STEPS * LATE_US * 1e6 / (hi - lo), abs=1e-6)
    assert got[W.NO_MM] + got[W.PEER] == pytest.approx(own[W.NO_MM], abs=1e-9)
    assert sum(got.values()) == pytest.approx(100, abs=1e-9)
    for k in range(STEPS):
        s = dict(zip(W.PARTS, rw.step_waterfall[k, 0]))
        w = d0.steps.win_end[k, 0] - d0.steps.win_start[k, 0]
        assert s[W.PEER] == pytest.approx(100 * LATE_US * 1e6 / w, abs=1e-3)
        assert sum(s.values()) == pytest.approx(100, abs=1e-3)
    # the late rank waits for no one
    late = run_waterfall(diags[f"rank{LATE}"], j, f"rank{LATE}")
    assert dict(zip(W.PARTS, late.waterfall[0]))[W.PEER] == 0


def test_the_collectives_route_and_the_pod_rows_give_the_same_waterfall(service, diags):
    import jsonschema
    body = service.collectives_json(parse("collectives", {"run": "job", "host": "rank0"}),
                                    wait=True)
    jsonschema.validate(body, SCHEMA)
    e = body["efficiency"]
    assert e["hosts"] == 4 and "4 files" in e["note"]
    wf = e["devices"]["0"]["waterfall"]
    lo, hi = diags["rank0"].devices.window(0)
    assert wf[W.PEER] == pytest.approx(100 * STEPS * LATE_US * 1e6 / (hi - lo), abs=1e-4)
    assert _total(wf) == pytest.approx(100, abs=1e-3)
    assert set(e["steps"]) == {str(k) for k in range(STEPS)}
    for k, by_dev in e["steps"].items():
        w = diags["rank0"].steps.win_end[int(k), 0] - diags["rank0"].steps.win_start[int(k), 0]
        assert by_dev["0"][W.PEER] == pytest.approx(100 * LATE_US * 1e6 / w, abs=0.006)
    # the pod summary's row of the same rank: the same figure
    summary = pod_summary([summary_row(h, "", d) for h, d in diags.items()])
    with open(os.path.join(ROOT, "tb_perfdiag", "schema", "pod.schema.json")) as f:
        jsonschema.validate(summary, json.load(f))
    row = next(r for r in summary["hosts"] if r["host"] == "rank0")
    assert row["devices"][0]["waterfall"] == wf
    assert row["waterfall_peer_wait_from"] == 4
    assert not any(k.startswith("_") for r in summary["hosts"] for k in r)
    late = next(r for r in summary["hosts"] if r["host"] == f"rank{LATE}")
    assert late["devices"][0]["waterfall"][W.PEER] == 0


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tb_perfdiag.cli", *args], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, PYTHONPATH=ROOT))


def test_the_cli_says_the_same_peer_wait_points(run_dir, diags, service):
    import jsonschema
    lo, hi = diags["rank0"].devices.window(0)
    pts = 100 * STEPS * LATE_US * 1e6 / (hi - lo)
    # the run's summary
    r = _cli("diagnose", str(run_dir / "job"))
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.strip().startswith("rank0") and "peer wait" in x)
    assert f"peer wait at collectives {pts:.1f}," in line
    # each file's report, under its own waterfall
    r = _cli("diagnose", str(run_dir / "job"), "--per-file")
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if "with the peer wait from the collectives of the run's 4 files" in x)
    assert f"peer wait at collectives {pts:.1f}," in line
    # the JSON: the file's own beside the run's, the /collectives figures
    r = _cli("diagnose", str(run_dir / "job"), "--json")
    assert r.returncode == 0, r.stderr
    docs = json.loads(r.stdout)
    with open(os.path.join(ROOT, "tb_perfdiag", "schema", "diagnosis.schema.json")) as f:
        schema = json.load(f)
    doc = next(v for k, v in docs.items() if "rank0" in k)
    jsonschema.validate(doc, schema)
    assert doc["devices"][0]["efficiency"]["waterfall"][W.PEER] == 0
    body = service.collectives_json(parse("collectives", {"run": "job", "host": "rank0"}),
                                    wait=True)
    assert doc["run_efficiency"] == body["efficiency"]


def test_dlrm_ranks_wait_inside_their_waterfall(tmp_path):
    """The real 8-rank DLRM (one V100 file per rank, shapes recorded): worker1 waits 11.1 ms
    of its 19.9 ms step for worker7 (../truth/collectives_dlrm.json); as part of the run its
    waterfall says so, and still adds up to 100."""
    src = shared_path(*DLRM)
    files = sorted(os.listdir(src))
    diags = {f.split(".")[0]: diagnose_trace(load(os.path.join(src, f)), Options()) for f in files}
    j = run_view([summary_row(h, "", d) for h, d in diags.items()]).join
    w1 = diags["worker1_step_12"]
    own = dict(zip(W.PARTS, w1.efficiency.waterfall[0]))
    rw = run_waterfall(w1, j, "worker1_step_12")
    got = dict(zip(W.PARTS, rw.waterfall[0]))
    assert own[W.PEER] == 0 and rw.hosts == 8
    assert sum(got.values()) == pytest.approx(100, abs=0.5)
    # most of its 11.1 ms of waiting is exposed: near 11.1 / 19.9 of the window
    assert 45 < got[W.PEER] <= 100 * 11.2 / 19.9
    assert got[W.PEER] + got[W.NO_MM] == pytest.approx(own[W.NO_MM], abs=1e-9)


def test_browser_waterfall_card_shows_the_runs_peer_wait(run_dir, diags, artifacts_dir):
    """The page's waterfall card of rank0, once the run's collectives are joined: the peer
    wait part is the /collectives figure, and the card says it comes from the run's 4 files."""
    pytest.importorskip("playwright.sync_api")
    from conftest import IN_CI, TensorBoard
    if not os.path.exists("/usr/bin/chromium"):
        if IN_CI:
            pytest.fail("/usr/bin/chromium is required in CI")
        pytest.skip("/usr/bin/chromium is absent (apt-get install chromium)")
    from playwright.sync_api import sync_playwright
    from test_browser_collectives import ENV, open_host
    lo, hi = diags["rank0"].devices.window(0)
    want = 100 * STEPS * LATE_US * 1e6 / (hi - lo)
    tb = TensorBoard(run_dir, extra_env=ENV)
    try:
        with sync_playwright() as p:
            br = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            pg = br.new_page()
            frame = open_host(pg, tb, "job", "rank0")
            frame.wait_for_selector("#pd-efficiency[data-peer-from='4']", timeout=60000)
            title = frame.get_attribute("#pd-waterfall .pd-wf-part[data-part='peer_wait']", "title")
            assert float(title.split(": ")[1].split(" ")[0]) == pytest.approx(want, abs=0.006)
            assert abs(float(frame.get_attribute("#pd-waterfall", "data-total")) - 100) <= 0.01
            assert "the run's 4 files" in frame.inner_text("#pd-efficiency")
            frame.locator("#pd-efficiency").screenshot(path=os.path.join(artifacts_dir, "mfu-waterfall-run.png"))
            # the late rank waits for no one: no peer wait part drawn
            frame = open_host(br.new_page(), tb, "job", f"rank{LATE}")
            frame.wait_for_selector("#pd-efficiency[data-peer-from='4']", timeout=60000)
            assert frame.locator("#pd-waterfall .pd-wf-part[data-part='peer_wait']").count() == 0
            br.close()
    finally:
        tb.stop()


def test_a_run_without_flop_figures_has_no_run_waterfall():
    """No shapes recorded: no waterfall, alone or as part of the run (null, not zeros)."""
    from test_collectives_faces import rank_trace as plain_rank
    from tb_perfdiag.render.efficiency import run_json
    ds = {f"rank{r}": diagnose_trace(plain_rank(r, LATE, LATE_US).build()) for r in range(4)}
    j = run_view([summary_row(h, "", d) for h, d in ds.items()]).join
    rw = run_waterfall(ds["rank0"], j, "rank0")
    assert rw is not None and rw.joined[0] and not np.isfinite(rw.waterfall[0]).any()
    assert run_json(ds["rank0"], rw) is None
    row = next(r for r in pod_summary([summary_row(h, "", d) for h, d in ds.items()])["hosts"]
               if r["host"] == "rank0")
    assert row["devices"][0]["waterfall"] is None


def test_compare_gives_the_runs_peer_wait_in_the_waterfall(service, diags, run_dir):
    """compare of a rank (the route and the CLI): its typical step's waterfall has the
    run's peer wait, as the page's card and the run summary."""
    from conftest import call
    st, body = call(service, "compare", {"run": "job", "host": "rank0", "base_run": "job",
                                         "base_host": f"rank{LATE}"})
    assert st == 200, body
    (dev,) = [d for d in body["devices"] if d.get("typical_step")]
    d0 = diags["rank0"]
    w = float((d0.steps.win_end[:, 0] - d0.steps.win_start[:, 0]).mean())
    after = dev["typical_step"]["after"]["waterfall"]
    assert after[W.PEER] == pytest.approx(100 * LATE_US * 1e6 / w, abs=0.01)
    assert dev["typical_step"]["before"]["waterfall"][W.PEER] == 0     # the late rank
    assert sum(after.values()) == pytest.approx(100, abs=0.01)
    # the CLI reads the run's peers from the folder (a file alone has none)
    folder = str(run_dir / "job")
    r = _cli("compare", folder, folder, "--host", "rank0", "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    (cdev,) = [d for d in got["devices"] if d.get("typical_step")]
    assert cdev["typical_step"]["after"]["waterfall"] == after


def test_peer_wait_source_in_words_for_one_file_and_many():
    """A run of one file (its devices' collectives joined) is not "the run's 1 files"."""
    from tb_perfdiag.render.efficiency import RUN_NOTE, run_files
    assert run_files(1) == "among this file's devices"
    assert run_files(8) == "of the run's 8 files (ranks or hosts)"
    assert "1 files" not in RUN_NOTE.format(files=run_files(1))
