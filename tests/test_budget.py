"""What one request may cost: work admitted within one memory budget and a few lanes,
kept values (loaded traces, built answers) at their measured size, a value many ask for
at once made once; and the service built on it: one read of a file for every option,
route and client, answers built once, a file that cannot be read not read again."""
from __future__ import annotations

import os
import shutil
import threading
import time

import numpy as np
import pytest

from conftest import TESTDATA, call
from tb_perfdiag.budget import Budget, Store, measure
from tb_perfdiag.cache import DiagnosisCache
from tb_perfdiag.discovery import Catalog
from tb_perfdiag.errors import Unavailable
from tb_perfdiag.params import parse
from tb_perfdiag.service import Body, DiagnosisService

KINETO = os.path.join(TESTDATA, "synthetic", "logdir", "kineto_launch_bound",
                      "worker0.1795400183000.pt.trace.json")
MB = 1_000_000


# ---- measure ----

def test_measure_counts_each_buffer_once():
    a = np.zeros(1_000_000, np.int64)                 # 8 MB
    views = [a[::2], a[10:], a.reshape(1000, 1000)]
    holder = {"a": a, "views": views, "names": ["x" * 1000] * 3 + ["y" * 1000]}
    size = measure(holder)
    assert 8 * MB + 2000 <= size < 8 * MB + 20_000
    assert measure(np.frombuffer(b"z" * MB, np.uint8)) >= MB


# ---- Store ----

def test_store_makes_a_value_once_for_everyone_asking():
    store = Store(10 * MB, sizer=len)
    made, gate = [], threading.Event()

    def make():
        made.append(1)
        gate.wait(5)
        return b"v" * 1000
    out = []
    threads = [threading.Thread(target=lambda: out.append(store.get_or_make("k", make)))
               for _ in range(12)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    gate.set()
    for t in threads:
        t.join(10)
    assert len(made) == 1 and len(out) == 12 and all(v is out[0] for v in out)


def test_store_failure_reaches_every_waiter_and_is_not_kept():
    store = Store(10 * MB, sizer=len)
    gate = threading.Event()

    def make():
        gate.wait(5)
        raise ValueError("bad file")
    errors = []

    def ask():
        try:
            store.get_or_make("k", make)
        except ValueError as e:
            errors.append(e)
    threads = [threading.Thread(target=ask) for _ in range(5)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    gate.set()
    for t in threads:
        t.join(10)
    assert len(errors) == 5 and len(store) == 0
    assert store.get_or_make("k", lambda: b"ok") == b"ok"     # asked again: made again


def test_store_keeps_capacity_and_never_drops_a_value_in_use():
    store = Store(3000, sizer=len)
    with store.use("held", lambda: b"h" * 2000):
        for i in range(10):
            store.get_or_make(i, lambda: b"x" * 1000)
        assert store.get_or_make("held", lambda: b"other") == b"h" * 2000
        assert store.size <= 3000 + 1000          # over only by what is in use
    assert store.size <= 3000
    newest = Store(1000, sizer=len, keep_newest=True)
    newest.get_or_make("big", lambda: b"b" * 5000)
    assert len(newest) == 1                       # too large, but the newest stays
    newest.get_or_make("small", lambda: b"s" * 10)
    assert len(newest) == 1 and newest.size == 10


# ---- Budget ----

def test_budget_bounds_memory_and_lanes():
    budget = Budget(100 * MB, {"work": 2, "answer": 3}, queue_s=30)
    peak = {"bytes": 0, "work": 0, "answer": 0}
    now = {"bytes": 0, "work": 0, "answer": 0}
    lock = threading.Lock()

    def job(nbytes, lane):
        with budget.admit(nbytes, lane):
            with lock:
                now["bytes"] += nbytes
                now[lane] += 1
                for k in peak:
                    peak[k] = max(peak[k], now[k])
            time.sleep(0.02)
            with lock:
                now["bytes"] -= nbytes
                now[lane] -= 1
    jobs = [(30 * MB, "work"), (45 * MB, "answer"), (10 * MB, "answer")] * 10
    threads = [threading.Thread(target=job, args=j) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert peak["bytes"] <= 100 * MB and peak["work"] <= 2 and peak["answer"] <= 3
    assert budget.snapshot()["reserved_bytes"] == 0 and budget.admitted == 30
    # work larger than the whole budget still runs, alone
    with budget.admit(500 * MB, "work"):
        assert budget.snapshot()["reserved_bytes"] == 500 * MB


def test_budget_wait_ends_in_a_clear_503():
    budget = Budget(10 * MB, {"work": 1, "answer": 1}, queue_s=0.3)
    with budget.admit(1 * MB, "work"):
        with pytest.raises(Unavailable) as e:
            with budget.admit(1 * MB, "work", what="analysis"):
                pass
    assert e.value.status == 503 and "busy" in e.value.message
    assert e.value.body()["retry_after_s"] > 0 and budget.refused == 1


def test_large_work_is_not_starved_by_a_stream_of_small():
    budget = Budget(10 * MB, {"work": 2, "answer": 4}, queue_s=15)
    stop = threading.Event()

    def stream(offset):
        time.sleep(offset)
        while not stop.is_set():
            with budget.admit(1 * MB, "answer"):
                time.sleep(0.1)
    threads = [threading.Thread(target=stream, args=(i * 0.025,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    started = time.monotonic()
    try:
        with budget.admit(50 * MB, "work"):       # larger than the budget: runs alone
            waited = time.monotonic() - started
            assert budget.snapshot()["running"]["answer"] == 0
    finally:
        stop.set()
        for t in threads:
            t.join(5)
    assert waited < budget.FAIR_S + 1.5, waited


def test_budget_drops_kept_values_for_waiting_work_but_not_values_in_use():
    budget = Budget(10 * MB, {"work": 2, "answer": 2}, queue_s=5)
    cheap, dear = Store(10 * MB, sizer=len), Store(10 * MB, sizer=len)
    budget.add_store(cheap)
    budget.add_store(dear, patience_s=0.2)
    cheap.get_or_make("answer", lambda: b"a" * (3 * MB))
    dear.get_or_make("trace", lambda: b"t" * (4 * MB))
    with dear.use("pinned", lambda: b"p" * (2 * MB)):
        with budget.admit(1 * MB, "work"):          # something under way
            with budget.admit(3 * MB, "work"):      # fits once the cheap answer is gone
                assert len(cheap) == 0 and len(dear) == 2
            started = time.monotonic()
            with budget.admit(6 * MB, "work"):      # needs the unused trace: waits first
                assert time.monotonic() - started >= 0.2
                assert list(dear._entries) == ["pinned"]


# ---- the service on it ----

def _service(tmp_path, **kw):
    ld = tmp_path / "ld" / "r"
    ld.mkdir(parents=True)
    shutil.copy(KINETO, ld / "w0.1700000000000.pt.trace.json")
    return DiagnosisService(Catalog(str(tmp_path / "ld")), DiagnosisCache(disk_dir=None), **kw)


def test_distinct_options_at_once_share_one_read_and_stay_in_their_lane(tmp_path, monkeypatch):
    svc = _service(tmp_path, analyses=2)
    running, peak, lock = [0], [0], threading.Lock()
    import tb_perfdiag.service as service_mod
    real = service_mod.analyse

    def counted(trace, opt, progress):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            time.sleep(0.05)
            return real(trace, opt, progress)
        finally:
            with lock:
                running[0] -= 1
    monkeypatch.setattr(service_mod, "analyse", counted)
    out = []
    threads = [threading.Thread(target=lambda i=i: out.append(call(
        svc, "diagnosis", {"run": "r", "host": "w0", "threshold_us": str(5 + i)})))
        for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(out) == 12 and {s for s, _ in out} == {200}
    for status, body in out:
        th = body["options"]["threshold_us"]
        assert all(g["duration_ns"] >= th * 1000 for g in body["gaps"])
    assert svc.loads == 1 and svc.cache.computations == 12 and peak[0] <= 2


def test_large_answers_are_built_once_per_parameters(tmp_path):
    svc = _service(tmp_path)
    q = {"run": "r", "host": "w0", "with_events": "1"}
    first = svc.response("overlay", parse("overlay", q))
    again = svc.response("overlay", parse("overlay", q))
    assert isinstance(first, Body) and again is first
    assert first.json() == call(svc, "overlay", q)[1]
    other = svc.response("overlay", parse("overlay", {**q, "start_us": "5"}))
    assert other is not first
    assert svc.responses.made == 2 and svc.loads == 1
    t1 = svc.response("timeline", parse("timeline", {"run": "r", "host": "w0"}))
    assert svc.response("timeline", parse("timeline", {"run": "r", "host": "w0"})) is t1


def test_changed_file_gets_new_answers(tmp_path):
    svc = _service(tmp_path)
    q = parse("diagnosis", {"run": "r", "host": "w0"})
    first = svc.response("diagnosis", q)
    path = svc.catalog.find("r", "w0").path
    os.utime(path, (time.time() + 10, time.time() + 10))
    assert svc.response("diagnosis", q) is not first and svc.loads == 2


def test_an_unreadable_file_is_not_read_again_until_it_changes(tmp_path):
    svc = _service(tmp_path)
    path = svc.catalog.find("r", "w0").path
    good = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(b'{"traceEvents": [')
    for th in ("5", "6", "7"):
        status, body = call(svc, "diagnosis", {"run": "r", "host": "w0", "threshold_us": th})
        assert status == 422 and body["file"] == "w0.1700000000000.pt.trace.json"
    status, _ = call(svc, "timeline", {"run": "r", "host": "w0"})
    assert status == 422 and svc.loads == 1
    with open(path, "wb") as f:
        f.write(good)
    os.utime(path, (time.time() + 10, time.time() + 10))
    assert call(svc, "diagnosis", {"run": "r", "host": "w0"})[0] == 200 and svc.loads == 2


def test_status_reports_the_budget(tmp_path):
    svc = _service(tmp_path, memory_mb=64, traces_mb=16)
    call(svc, "diagnosis", {"run": "r", "host": "w0"})
    st = svc.status()
    assert st["memory"]["budget_bytes"] == 64 * MB and st["traces_limit_bytes"] == 16 * MB
    assert 0 < st["traces_bytes"] <= 16 * MB and st["memory"]["reserved_bytes"] == 0
