"""Pods: a 64-host run is summarised host by host in worker processes, stragglers named
with their cause, and drilling into a host afterwards needs no new analysis."""
from __future__ import annotations

import time

from conftest import POD_STALL_US, TensorBoard, call
from tb_perfdiag import pod as pod_mod
from tb_perfdiag.cache import DiagnosisCache
from tb_perfdiag.discovery import Catalog
from tb_perfdiag.service import DiagnosisService


def _run_name(svc):
    (name,) = svc.catalog.runs(refresh=True)
    return name


def test_64_hosts_summary_names_the_injected_stragglers(pod_logdir):
    logdir, truth = pod_logdir
    svc = DiagnosisService(Catalog(str(logdir)), DiagnosisCache(disk_dir=None))
    run = _run_name(svc)
    seen = []
    while True:                                   # the page polls the same way
        status, body = call(svc, "hosts", {"run": run})
        assert status == 200 and body["total"] == 64
        seen.append(body["done"])
        if body["complete"]:
            break
        time.sleep(0.2)
    assert seen == sorted(seen) and seen[-1] == 64
    assert body["processes"] == (body["workers"] > 1)
    rows = body["hosts"]
    assert [r["host"] for r in rows] == truth["hosts"]
    assert all(r["status"] == 200 for r in rows), [r for r in rows if r["status"] != 200][:2]
    flagged = [r for r in rows if r["straggler"]]
    assert [r["host"] for r in flagged] == truth["stragglers"]
    for r in flagged:
        assert r["straggler_cause"] == truth["straggler_cause"]
        # the device queue hides part of the stall behind the previous step's kernels
        assert 0.7 * POD_STALL_US * 1000 <= r["straggler_excess_ns"] <= 1.05 * POD_STALL_US * 1000
        assert r["typical_step_ns"] > 2 * body["median_step_ns"]
        assert "data loading" in r["straggler_reason"]
    # every host's whole diagnosis came back from the workers into the cache
    assert svc.cache.computations == 64
    status, d = call(svc, "diagnosis", {"run": run, "host": truth["stragglers"][0],
                                        "gaps_limit": "100000"})
    assert status == 200 and svc.cache.computations == 64
    assert any(g["cause"] == "data_loading" for g in d["gaps"])
    # asking again (the page reopened) starts nothing new
    status, again = call(svc, "hosts", {"run": run, "wait": "1"})
    assert again["complete"] and svc.cache.computations == 64


def test_hosts_in_threads_give_the_same_rows(pod_logdir, monkeypatch):
    """TB_PERFDIAG_POD_PROCESSES=0 (or a machine without processes) runs hosts in threads."""
    logdir, truth = pod_logdir
    monkeypatch.setattr(pod_mod, "USE_PROCESSES", False)
    svc = DiagnosisService(Catalog(str(logdir)), DiagnosisCache(disk_dir=None))
    status, body = call(svc, "hosts", {"run": _run_name(svc), "wait": "1"})
    assert status == 200 and body["processes"] is False and body["complete"]
    assert [r["host"] for r in body["hosts"] if r["straggler"]] == truth["stragglers"]


def test_workers_fit_the_memory_budget(monkeypatch):
    monkeypatch.setattr(pod_mod, "MEMORY_BUDGET_MB", 4096.0)
    monkeypatch.setattr(pod_mod, "MAX_WORKERS", 4)
    assert pod_mod.workers_for([1e6] * 64, cpus=16) == 4          # small files: the cap
    assert pod_mod.workers_for([1e6] * 64, cpus=2) == 2           # …or the cores
    # 8× a 200 MB file + a worker's own 150 MB = 1750 MB: two fit in 4 GB
    assert pod_mod.workers_for([1e6, 200e6], cpus=16) == 2
    assert pod_mod.workers_for([2e9], cpus=16) == 1               # always at least one


def test_a_broken_host_is_one_row_not_the_summary(pod_logdir, tmp_path):
    import shutil
    logdir, truth = pod_logdir
    shutil.copytree(logdir / "pod", tmp_path / "pod")
    victim = next((tmp_path / "pod").rglob("host05.xplane.pb"))
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 3])
    svc = DiagnosisService(Catalog(str(tmp_path)), DiagnosisCache(disk_dir=None))
    status, body = call(svc, "hosts", {"run": _run_name(svc), "wait": "1"})
    rows = {r["host"]: r for r in body["hosts"]}
    assert rows["host05"]["status"] == 422, rows["host05"]
    assert rows["host05"]["error"], rows["host05"]
    assert sum(r["status"] == 200 for r in body["hosts"]) == 63
    assert [h for h, r in rows.items() if r.get("straggler")] == truth["stragglers"]


def test_hosts_route_over_http(pod_logdir, tmp_path):
    logdir, truth = pod_logdir
    tb = TensorBoard(logdir, extra_env={"TB_PERFDIAG_CACHE_DIR": str(tmp_path / "cache")})
    try:
        _, _, runs = tb.get("/data/plugin/perfdiag/runs")
        (run,) = [r["run"] for r in runs["runs"]]
        status, _, body = tb.get(f"/data/plugin/perfdiag/hosts?run={run}&wait=1", timeout=300)
        assert status == 200 and body["complete"] and body["total"] == 64
        assert [r["host"] for r in body["hosts"] if r["straggler"]] == truth["stragglers"]
        status, _, st = tb.get("/data/plugin/perfdiag/status")
        assert st["analyses"] == 64
        status, _, d = tb.get(f"/data/plugin/perfdiag/diagnosis?run={run}&host=host40")
        assert status == 200 and tb.get("/data/plugin/perfdiag/status")[2]["analyses"] == 64
        status, _, err = tb.get("/data/plugin/perfdiag/hosts?run=nope")
        assert status == 404 and "no such run" in err["error"]
    finally:
        tb.stop()
