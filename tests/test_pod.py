"""Pods on Dask: a real scheduler and two worker processes (started here as an operator
would) analyse a 64-host pod; the summary equals the one computed in this process, a
worker killed mid-run costs no row, a host over the workers' memory limit says so in its
row, and rows kept in the result store answer a second server without any analysis."""
from __future__ import annotations

import json
import os
import shutil
import signal
import time

import psutil
import pytest

from conftest import POD_STALL_US, DaskCluster, TensorBoard, call
import tb_perfdiag
from tb_perfdiag.analysis import Options
from tb_perfdiag.cache import DiagnosisCache
from tb_perfdiag.discovery import Catalog
from tb_perfdiag.pod import Engine
from tb_perfdiag.render.pod import pod_summary, summary_row
from tb_perfdiag.service import DiagnosisService
from tb_perfdiag.storage import file_identity


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = DaskCluster(tmp_path_factory.mktemp("dask"), workers=2, memory_limit="600MB")
    yield c
    c.stop()


@pytest.fixture(scope="module")
def in_process(pod_logdir):
    """The 64-host summary computed host by host in this process (no Dask, no store)."""
    logdir, _ = pod_logdir
    svc = DiagnosisService(Catalog(str(logdir)), DiagnosisCache(disk_dir=None))
    (run,) = svc.catalog.runs(refresh=True)
    rows = []
    for h in svc.catalog.runs()[run].hosts():
        src = svc.catalog.find(run, h)
        row = summary_row(src.host, src.span, tb_perfdiag.diagnose(src.path).diagnosis)
        rows.append(json.loads(json.dumps(row)))
    return run, pod_summary(rows)


def _service(logdir, store, cluster=None):
    return DiagnosisService(Catalog(str(logdir)), DiagnosisCache(disk_dir=str(store)),
                            engine=Engine(cluster.address) if cluster else None)


def _same_summary(body, want):
    strip = ("run", "complete", "analysed", "from_store", "engine", "elapsed_s",
             "hosts_limit", "hosts_offset", "sort")
    got = {k: v for k, v in body.items() if k not in strip}
    exp = {k: v for k, v in want.items() if k not in strip}
    assert got["hosts"] == exp["hosts"]
    assert got == exp


def test_a_cluster_of_threads_in_the_server_gives_the_same_summary(pod_logdir, in_process,
                                                                  tmp_path):
    """TB_PERFDIAG_POD_PROCESSES=0 (where a server may not start processes): the engine's
    own LocalCluster of threads analyses the pod, with the same summary."""
    logdir, _ = pod_logdir
    run, want = in_process
    engine = Engine(address="", processes=False)
    svc = DiagnosisService(Catalog(str(logdir)), DiagnosisCache(disk_dir=str(tmp_path / "s")),
                           engine=engine)
    try:
        deadline = time.monotonic() + 600
        while True:
            status, body = call(svc, "hosts", {"run": run})
            assert status == 200, body
            if body["complete"] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert body["complete"] and engine.error is None
        _same_summary(body, want)
    finally:
        svc.close()
        engine.close()


def test_64_host_pod_on_a_dask_cluster_equals_the_in_process_summary(
        cluster, pod_logdir, in_process, tmp_path):
    logdir, truth = pod_logdir
    run, want = in_process
    svc = _service(logdir, tmp_path / "store", cluster)
    try:
        seen = []
        while True:                              # the page polls the same way
            status, body = call(svc, "hosts", {"run": run})
            assert status == 200 and body["total"] == 64
            seen.append(body["done"])
            if body["complete"]:
                break
            time.sleep(0.2)
        assert seen == sorted(seen) and seen[-1] == 64
        _same_summary(body, want)
        assert [s["host"] for s in body["stragglers"]] == truth["stragglers"]
        for r in body["hosts"][:2]:
            assert r["straggler_cause"] == truth["straggler_cause"]
            assert 0.7 * POD_STALL_US * 1000 <= r["straggler_excess_ns"] <= 1.05 * POD_STALL_US * 1000
        # every host was a task on the cluster's two workers, none in this process
        assert body["analysed"] == 64 and svc.cache.computations == 0
        assert body["engine"]["workers"] == 2 and body["engine"]["address"] == cluster.address
        # drilling into a straggler reads its stored diagnosis: no analysis
        status, d = call(svc, "diagnosis", {"run": run, "host": truth["stragglers"][0],
                                            "gaps_limit": "100000"})
        assert status == 200 and svc.cache.computations == 0
        assert any(g["cause"] == "data_loading" for g in d["gaps"])
        # asking again, sorted another way and paged, starts nothing new
        status, page = call(svc, "hosts", {"run": run, "wait": "1", "sort": "duty_cycle",
                                           "hosts_offset": "0", "hosts_limit": "5"})
        assert status == 200 and len(page["hosts"]) == 5 and page["total"] == 64
        assert page["engine"]["tasks_submitted"] == 64
        duty = [r["duty_cycle"] for r in page["hosts"]]
        assert duty == sorted(duty)
    finally:
        svc.close()


def test_a_worker_killed_mid_run_costs_no_row(cluster, pod_logdir, in_process, tmp_path):
    logdir, _ = pod_logdir
    run, want = in_process
    svc = _service(logdir, tmp_path / "store", cluster)
    try:
        call(svc, "hosts", {"run": run})
        client = svc.engine.client()
        victim = None
        deadline = time.time() + 120
        while victim is None and time.time() < deadline:   # a worker in the middle of a host
            busy = {w: ks for w, ks in client.processing().items() if ks}
            if len(busy) == 2 and call(svc, "hosts", {"run": run})[1]["done"] >= 4:
                victim, keys = next(iter(busy.items()))
            time.sleep(0.05)
        assert victim, "no worker was busy"
        pid = client.run(os.getpid, workers=[victim])[victim]
        nanny = psutil.Process(pid).parent()
        nanny.kill()                                         # the whole worker, nanny included
        psutil.Process(pid).kill()
        status, body = call(svc, "hosts", {"run": run, "wait": "1"})
        assert status == 200 and body["complete"]
        assert all(r["status"] == 200 for r in body["hosts"]), \
            [r for r in body["hosts"] if r["status"] != 200][:2]
        _same_summary(body, want)
        assert body["analysed"] == 64
    finally:
        svc.close()
        cluster.add_worker()                                 # two workers again
        cluster.wait_for_workers(2)


def _write_hog(path, events: int):
    """A Kineto trace whose diagnosis peaks well past the workers' 600 MB (6 M kernels: 0.73
    GB on 2026-11-28; 4 M kernels, 0.53 GB since then, no longer did), 36 MB of gzip."""
    import gzip
    ev = b'{"ph":"X","cat":"kernel","name":"k","pid":1,"tid":7,"ts":%d,"dur":1,"args":{"correlation":%d}},'
    chunk = b"".join(ev % (i * 3, i) for i in range(10_000))
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(b'{"traceEvents":[')
        for _ in range(events // 10_000):
            f.write(chunk)
        f.write(b'{"ph":"X","cat":"kernel","name":"k","pid":1,"tid":7,"ts":1,"dur":1}]}')


def test_a_host_over_the_worker_memory_limit_says_so_and_nothing_else_fails(
        cluster, tmp_path):
    run = tmp_path / "ld" / "job"
    run.mkdir(parents=True)
    small = os.path.join(os.path.dirname(__file__), "..", "testdata", "synthetic", "logdir")
    kin = sorted(p for p in (os.path.join(d, f) for d, _, fs in os.walk(small) for f in fs)
                 if p.endswith(".pt.trace.json"))[:1]
    for i in range(5):
        shutil.copy(kin[0], run / f"worker{i}.1795400061000.pt.trace.json")
    _write_hog(run / "worker9.1795400061000.pt.trace.json.gz", 6_000_000)
    svc = _service(tmp_path / "ld", tmp_path / "store", cluster)
    try:
        status, body = call(svc, "hosts", {"run": "job", "wait": "1", "sort": "host"})
        rows = {r["host"]: r for r in body["hosts"]}
        assert status == 200 and body["complete"] and len(rows) == 6
        hog = rows["worker9"]
        assert hog["status"] == 413 and hog["reason"] == "worker_memory", hog
        assert "600 MB worker memory limit" in hog["error"]
        assert all(rows[f"worker{i}"]["status"] == 200 for i in range(5)), rows
        assert body["failed"] == 1
        # the memory verdict is not stored: a cluster with more memory gets to try
        assert len([f for f in os.listdir(tmp_path / "store") if f.endswith(".row")]) == 5
    finally:
        svc.close()
        cluster.wait_for_workers(2)


def test_dask_deduplicates_and_one_engine_serves_every_option(cluster, pod_logdir, tmp_path):
    """Ten summaries with different options share the server's one client (no new
    workers); a host being analysed for the summary is not analysed again for the page."""
    logdir, truth = pod_logdir
    svc = _service(logdir, tmp_path / "store", cluster)
    try:
        (run,) = svc.catalog.runs(refresh=True)
        for t in range(10):
            assert call(svc, "hosts", {"run": run, "threshold_us": str(5 + t)})[0] == 200
        host = truth["stragglers"][1]
        src = svc.catalog.find(run, host)
        digest = svc.cache.digest((file_identity(src.path), Options(threshold_us=14).key()))
        deadline = time.time() + 60
        while svc.engine.pending(digest) is None and not svc.cache.store.has(digest):
            assert time.time() < deadline
            time.sleep(0.01)
        status, _ = call(svc, "diagnosis", {"run": run, "host": host, "threshold_us": "14"})
        assert status == 200
        status, body = call(svc, "hosts", {"run": run, "threshold_us": "14", "wait": "1"})
        assert body["complete"] and body["engine"]["workers"] == 2
        # the page's request for that host waited for the task or read its stored result
        assert svc.cache.computations == 0
        assert len(svc._pods) <= 4                      # older jobs let go of their tasks
    finally:
        svc.close()


def test_pod_summary_at_scale_is_paged_and_sortable():
    """1,000 rows (no traces): stragglers named, pages and orders as asked."""
    import random
    rnd = random.Random(7)
    rows = []
    for i in range(1000):
        slow = i in (17, 400, 999)
        step = int((2e6 if slow else 1e6) * (1 + rnd.random() * 0.02))
        rows.append({"host": f"host{i}", "span": "", "status": 200, "duty_cycle": 0.9 - 0.3 * slow,
                     "typical_step_ns": step, "worst_gap": {"duration_ns": step // 10},
                     "step_idle_ns": {"data_loading": 900_000 if slow else 1000,
                                      "host_compute": 5000},
                     "idle_ns": 905_000 if slow else 6000,
                     "cause_shares": {"data_loading": 0.99 if slow else 0.2,
                                      "host_compute": 0.01 if slow else 0.8},
                     "top_cause": "data_loading" if slow else "host_compute"})
    rows.append({"host": "host1000", "span": "", "status": 422, "error": "bad file"})
    rows.append({"host": "host1001", "span": "", "status": "pending"})
    t = time.perf_counter()
    s = pod_summary([dict(r) for r in rows], "straggler", None, 0, 50)
    assert time.perf_counter() - t < 2
    assert [x["host"] for x in s["stragglers"]] == ["host17", "host400", "host999"]
    assert all(x["cause"] == "data_loading" for x in s["stragglers"])
    assert [r["host"] for r in s["hosts"][:3]] == ["host17", "host400", "host999"]
    assert len(s["hosts"]) == 50 and s["total"] == 1002 and s["done"] == 1001 and s["failed"] == 1
    assert s["causes"][0] == {"cause": "host_compute", "hosts_top_cause": 997,
                              "median_step_idle_ns": 5000}
    last = pod_summary([dict(r) for r in rows], "host", None, 1000, 50)["hosts"]
    assert [r["host"] for r in last] == ["host1000", "host1001"]
    by_step = pod_summary([dict(r) for r in rows], "typical_step", None, 0, 1002)["hosts"]
    assert [r["host"] for r in by_step[:3]] == ["host17", "host400", "host999"] or \
        {r["host"] for r in by_step[:3]} == {"host17", "host400", "host999"}
    assert [r["host"] for r in by_step[-2:]] == ["host1000", "host1001"]   # no value: last
    asc = pod_summary([dict(r) for r in rows], "typical_step", False, 0, 1002)["hosts"]
    assert asc[-3]["host"] in ("host17", "host400", "host999") and asc[-1]["host"] == "host1001"
    share = pod_summary([dict(r) for r in rows], "cause.data_loading", None, 0, 3)["hosts"]
    assert {r["host"] for r in share} == {"host17", "host400", "host999"}


def _descendants(pid):
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


@pytest.mark.parametrize("how", ["terminate", "kill"])
def test_no_worker_outlives_tensorboard(pod_logdir, tmp_path, how):
    """TensorBoard's own local cluster: after TensorBoard stops (or is killed), no
    worker process is left."""
    logdir, truth = pod_logdir
    small = tmp_path / "ld"
    src = next(p for p in logdir.rglob("host00.xplane.pb")).parent
    dst = small / "pod" / "plugins" / "profile" / src.name
    dst.mkdir(parents=True)
    for i in range(8):
        shutil.copy(src / f"host{i:02d}.xplane.pb", dst)
    tb = TensorBoard(small, extra_env={"TB_PERFDIAG_CACHE_DIR": str(tmp_path / "store"),
                                       "TB_PERFDIAG_WORKERS": "2",
                                       "TB_PERFDIAG_WORKER_MEMORY_MB": "1024",
                                       "TB_PERFDIAG_DASK_SCHEDULER": ""})
    try:
        status, _, body = tb.get(f"/data/plugin/perfdiag/hosts?run=pod/{src.name}&wait=1",
                                 timeout=180)
        assert status == 200 and body["complete"] and body["analysed"] == 8
        assert body["engine"]["workers"] == 2 and body["engine"]["scheduler"] == "local"
        kids = _descendants(tb.proc.pid)
        workers = [p for p in kids if "python" in p.name()]
        assert len(workers) >= 2
    finally:
        if how == "kill":
            tb.proc.send_signal(signal.SIGKILL)
            tb.proc.wait(10)
        else:
            tb.stop()
    gone, alive = psutil.wait_procs(kids, timeout=20)
    assert not alive, [(p.pid, p.cmdline()[:3]) for p in alive]


def test_cli_fills_the_store_from_the_cluster_and_a_server_opens_it_at_once(
        cluster, pod_logdir, in_process, tmp_path):
    """``tb-perfdiag diagnose LOGDIR --scheduler ADDRESS --results STORE``, then a
    server on the same store: the whole summary at the first call, nothing analysed."""
    import subprocess
    import sys
    logdir, truth = pod_logdir
    run, want = in_process
    store = tmp_path / "store"
    cli = os.path.join(os.path.dirname(sys.executable), "tb-perfdiag")
    p = subprocess.run([cli, "diagnose", str(logdir), "--scheduler", cluster.address,
                        "--results", str(store), "--json"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)[run]
    assert out["analysed"] == 64 and [s["host"] for s in out["stragglers"]] == truth["stragglers"]
    svc = _service(logdir, store)                   # its own (local) engine: never started
    try:
        status, body = call(svc, "hosts", {"run": run})
        assert status == 200 and body["complete"] and body["from_store"] == 64
        assert body["analysed"] == 0 and not body["engine"]["started"]
        _same_summary(body, want)
        status, _ = call(svc, "diagnosis", {"run": run, "host": truth["stragglers"][0]})
        assert status == 200 and svc.cache.computations == 0
    finally:
        svc.close()
    text = subprocess.run([cli, "diagnose", str(logdir), "--scheduler", cluster.address,
                           "--results", str(store)], capture_output=True, text=True,
                          timeout=300)
    assert text.returncode == 0 and "2 straggler(s)" in text.stdout
    assert f"  {truth['stragglers'][0]}: steps" in text.stdout

