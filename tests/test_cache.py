"""A diagnosis is computed once per file identity and options, also under concurrency,
and a second open (even by a new process) comes from the disk cache."""
from __future__ import annotations

import os
import shutil
import threading
import time

from tb_perfdiag.cache import DiagnosisCache
from tb_perfdiag.discovery import Catalog
from tb_perfdiag.service import DiagnosisService

from conftest import TESTDATA, call


def _logdir(tmp_path):
    ld = tmp_path / "ld"
    shutil.copytree(os.path.join(TESTDATA, "captures", "jax_cpu"), ld / "jax")
    return ld


def _query(svc):
    run = next(iter(svc.catalog.runs().values()))
    return {"run": run.name, "host": run.sources[0].host}


def test_concurrent_requests_compute_once(tmp_path):
    svc = DiagnosisService(Catalog(str(_logdir(tmp_path))),
                           DiagnosisCache(disk_dir=str(tmp_path / "cache")))
    q = _query(svc)
    results = []
    threads = [threading.Thread(target=lambda: results.append(call(svc, "diagnosis", q)))
               for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 12 and all(r[0] == 200 for r in results)
    assert svc.cache.computations == 1
    assert len({r[1]["gaps_total"] for r in results}) == 1


def test_second_open_comes_from_disk_and_options_are_keys(tmp_path):
    ld = _logdir(tmp_path)
    cache_dir = tmp_path / "cache"
    first = DiagnosisService(Catalog(str(ld)), DiagnosisCache(disk_dir=str(cache_dir)))
    q = _query(first)
    call(first, "diagnosis", q)
    assert first.cache.computations == 1
    second = DiagnosisService(Catalog(str(ld)), DiagnosisCache(disk_dir=str(cache_dir)))
    t = time.perf_counter()
    call(second, "diagnosis", q)
    assert second.cache.computations == 0 and time.perf_counter() - t < 2
    call(second, "diagnosis", {**q, "threshold_us": "50"})
    assert second.cache.computations == 1
    # nothing written into the logdir
    assert not [f for _, _, fs in os.walk(ld) for f in fs if f.endswith(".json.gz")]


def test_changed_file_is_recomputed(tmp_path):
    ld = _logdir(tmp_path)
    svc = DiagnosisService(Catalog(str(ld), ttl=0), DiagnosisCache(disk_dir=None))
    q = _query(svc)
    call(svc, "diagnosis", q)
    src = svc.catalog.find(q["run"], q["host"])
    os.utime(src.path, (time.time() + 5, time.time() + 5))
    call(svc, "diagnosis", q)
    assert svc.cache.computations == 2


def test_memory_bound(tmp_path):
    c = DiagnosisCache(memory_bytes=1000, disk_dir=None)
    for i in range(50):
        c.get_or_compute(i, lambda i=i: {"x": "y" * 100, "i": i})
    assert c._size <= 1000 and len(c._mem) < 50
