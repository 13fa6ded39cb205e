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


# ---- the result store (issue 19, item 5) and file identity (item 4) ----
import gzip  # noqa: E402
import stat  # noqa: E402

import pytest  # noqa: E402

from tb_perfdiag import codec  # noqa: E402
from tb_perfdiag.cache import ResultStore  # noqa: E402

KINETO = os.path.join(TESTDATA, "synthetic", "logdir")


def _kineto(name):
    d = os.path.join(KINETO, name)
    return os.path.join(d, next(f for f in os.listdir(d) if f.endswith(".pt.trace.json")))


def _one_host_logdir(tmp_path, src=None):
    ld = tmp_path / "ld"
    (ld / "job").mkdir(parents=True)
    dst = ld / "job" / "worker0.1795400061000.pt.trace.json"
    shutil.copy(src or _kineto("kineto_data_loading"), dst)
    return ld, dst


def _store_files(folder):
    return sorted(f for f in os.listdir(folder) if not f.startswith("."))


def test_store_is_bounded_and_evicts_the_least_recently_used(tmp_path):
    """50 thresholds on one trace: the store stays under its bound, the entries used
    last stay, the oldest go (reading an entry makes it recent)."""
    ld, _ = _one_host_logdir(tmp_path)
    store = tmp_path / "store"
    one = len(codec.encode(DiagnosisService(Catalog(str(ld)), DiagnosisCache(disk_dir=None))
                           ._diagnosis(_params(ld, threshold_us="1"))))   # the largest
    bound = 12 * one
    cache = DiagnosisCache(disk_dir=str(store), store_bytes=bound)
    svc = DiagnosisService(Catalog(str(ld)), cache)
    q = _query(svc)
    first = {**q, "threshold_us": "1"}
    for i in range(50):
        assert call(svc, "diagnosis", {**q, "threshold_us": str(1 + i)})[0] == 200
        if i % 5 == 4:      # keep the first one in use
            assert cache.load(_key(svc, first)) is not None
        size = sum(os.path.getsize(store / f) for f in os.listdir(store))
        assert size <= bound, (i, size, bound)
    assert cache.store.evicted > 0
    assert cache.load(_key(svc, first)) is not None               # used: kept
    assert cache.load(_key(svc, {**q, "threshold_us": "2"})) is None   # oldest unused: gone
    assert cache.load(_key(svc, {**q, "threshold_us": "50"})) is not None


def _params(ld, **extra):
    from tb_perfdiag.params import parse
    svc = DiagnosisService(Catalog(str(ld)), DiagnosisCache(disk_dir=None))
    return parse("diagnosis", {**_query(svc), **extra})


def _key(svc, q):
    from tb_perfdiag.params import parse
    from tb_perfdiag.storage import file_identity
    p = parse("diagnosis", q)
    return (file_identity(svc._source(p).path), svc._options(p).key())


def test_store_is_private(tmp_path):
    ld, _ = _one_host_logdir(tmp_path)
    store = tmp_path / "store"
    store.mkdir(mode=0o755)
    os.chmod(store, 0o755)                        # an old cache folder others could read
    svc = DiagnosisService(Catalog(str(ld)), DiagnosisCache(disk_dir=str(store)))
    assert call(svc, "diagnosis", _query(svc))[0] == 200
    assert stat.S_IMODE(os.stat(store).st_mode) == 0o700
    files = _store_files(store)
    assert {f.rsplit(".", 1)[1] for f in files} == {"diag", "row"}
    for f in files:
        assert stat.S_IMODE(os.stat(store / f).st_mode) == 0o600
    # a folder that is a link, or someone else's, is not used (and nothing breaks)
    os.symlink(store, tmp_path / "link")
    svc2 = DiagnosisService(Catalog(str(ld)), DiagnosisCache(disk_dir=str(tmp_path / "link")))
    assert svc2.cache.store.usable() and call(svc2, "diagnosis", _query(svc2))[0] == 200
    assert svc2.cache.computations == 1
    if os.getuid() == 0:
        other = tmp_path / "other"
        other.mkdir(mode=0o700)
        os.chown(other, 65534, 65534)
        svc3 = DiagnosisService(Catalog(str(ld)), DiagnosisCache(disk_dir=str(other)))
        assert "another user" in svc3.cache.store.usable()
        assert call(svc3, "diagnosis", _query(svc3))[0] == 200 and not os.listdir(other)


def test_a_failed_write_leaves_no_partial_entry(tmp_path, monkeypatch):
    """The disk fills up (or the process dies) in the middle of a write: no entry and no
    temporary file is left; the answer is still right."""
    import errno
    ld, _ = _one_host_logdir(tmp_path)
    store = tmp_path / "store"
    svc = DiagnosisService(Catalog(str(ld)), DiagnosisCache(disk_dir=str(store)))

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    with monkeypatch.context() as m:
        m.setattr(os, "fsync", full)
        status, body = call(svc, "diagnosis", _query(svc))
    assert status == 200 and body["gaps_total"] > 0
    assert os.listdir(store) == []
    # a writer killed mid-write leaves at most its private temporary file, which a later
    # trim removes once stale; never a torn entry under the real name
    import subprocess
    import sys
    code = (f"import os, sys; sys.path.insert(0, {os.path.dirname(os.path.dirname(__file__))!r});"
            "from tb_perfdiag.cache import ResultStore;"
            "os.fsync = lambda fd: os.kill(os.getpid(), 9);"
            f"ResultStore({str(store)!r}).put('d' * 32, b'x' * 100000, {{'status': 200}})")
    p = subprocess.run([sys.executable, "-c", code])
    assert p.returncode == -9
    left = os.listdir(store)
    assert all(f.endswith(".tmp") and f.startswith(".") for f in left), left
    monkeypatch.setattr("tb_perfdiag.result_store.STALE_TMP_S", 0)
    ResultStore(str(store)).trim()
    assert os.listdir(store) == []


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "empty", "wrong_type",
                                    "row"])
def test_a_bad_entry_is_recomputed_not_an_error(tmp_path, damage):
    ld, _ = _one_host_logdir(tmp_path)
    store = tmp_path / "store"
    first = DiagnosisService(Catalog(str(ld)), DiagnosisCache(disk_dir=str(store)))
    q = _query(first)
    status, want = call(first, "diagnosis", q)
    (diag,) = [store / f for f in os.listdir(store) if f.endswith(".diag")]
    (row,) = [store / f for f in os.listdir(store) if f.endswith(".row")]
    raw = diag.read_bytes()
    if damage == "flip":
        diag.write_bytes(raw[:len(raw) // 2] + bytes([raw[len(raw) // 2] ^ 0xFF]) + raw[len(raw) // 2 + 1:])
    elif damage == "truncate":
        diag.write_bytes(raw[: len(raw) // 2])
    elif damage == "garbage":
        diag.write_bytes(os.urandom(5000))
    elif damage == "empty":
        diag.write_bytes(b"")
    elif damage == "wrong_type":
        # well-formed, but a field holds what its declaration forbids
        import json as _json
        payload = codec._zlib.decompress(raw[len(codec.MAGIC):])
        n = int.from_bytes(payload[:8], "little")
        head = _json.loads(payload[8:8 + n])
        head["v"]["f"]["gaps"]["f"]["start"] = "oops"
        h2 = _json.dumps(head).encode()
        diag.write_bytes(codec.MAGIC + gzip.zlib.compress(len(h2).to_bytes(8, "little") + h2
                                                          + payload[8 + n:]))
    else:
        row.write_bytes(b'{"status": "nope"')
    second = DiagnosisService(Catalog(str(ld)), DiagnosisCache(disk_dir=str(store)))
    if damage == "row":
        status, body = call(second, "hosts", {"run": q["run"], "wait": "1"})
        second.close()
        assert status == 200 and body["hosts"][0]["status"] == 200
        assert body["analysed"] == 1 and second.cache.store.dropped == 1
        return
    status, body = call(second, "diagnosis", q)
    assert status == 200 and body == want
    assert second.cache.computations == 1 and second.cache.store.dropped == 1
    third = DiagnosisService(Catalog(str(ld)), DiagnosisCache(disk_dir=str(store)))
    assert call(third, "diagnosis", q)[1] == want and third.cache.computations == 0


def test_a_file_replaced_by_one_of_the_same_size_and_mtime_is_diagnosed_anew(tmp_path):
    """Two different traces padded to one size, the second given the first's mtime:
    the identity still changes (inode/ctime and the content at its ends), also across a
    restart on the same store, and the diagnosis is the new file's."""
    a, b = _kineto("kineto_data_loading"), _kineto("kineto_launch_bound")
    ra, rb = open(a, "rb").read(), open(b, "rb").read()
    size = max(len(ra), len(rb))
    ld, dst = _one_host_logdir(tmp_path)
    dst.write_bytes(ra + b" " * (size - len(ra)))
    st = os.stat(dst)
    store = str(tmp_path / "store")
    svc = DiagnosisService(Catalog(str(ld), ttl=0), DiagnosisCache(disk_dir=store))
    q = _query(svc)
    _, before = call(svc, "diagnosis", q)
    # replaced in place: same size, same mtime (ns)
    with open(dst, "r+b") as f:
        f.write(rb + b" " * (size - len(rb)))
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(dst).st_size == st.st_size and os.stat(dst).st_mtime_ns == st.st_mtime_ns
    restarted = DiagnosisService(Catalog(str(ld), ttl=0), DiagnosisCache(disk_dir=store))
    _, after = call(restarted, "diagnosis", q)
    assert restarted.cache.computations == 1
    fresh = DiagnosisService(Catalog(str(ld), ttl=0), DiagnosisCache(disk_dir=None))
    assert after == call(fresh, "diagnosis", q)[1] and after != before
    _, again = call(svc, "diagnosis", q)            # the server that saw the old file
    assert again == after                            # (read from the shared store)


def test_memory_tier_holds_what_it_measures(tmp_path):
    """The memory LRU's budget is what its values really hold (tracemalloc), not an
    estimate that lets it use several times more."""
    import tracemalloc
    ld = tmp_path / "ld"
    for i, name in enumerate(sorted(os.listdir(KINETO))):
        if name.startswith("kineto"):
            (ld / f"r{i}").mkdir(parents=True)
            shutil.copy(_kineto(name), ld / f"r{i}" / "w.1795400061000.pt.trace.json")
    from tb_perfdiag.analysis import Options, diagnose_trace
    from tb_perfdiag.trace import load
    cache = DiagnosisCache(memory_bytes=10**9, disk_dir=None)
    paths = sorted(str(p) for p in ld.rglob("*.json"))
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for th in (1, 5, 20, 100):
        for p in paths:
            cache.get_or_compute((p, th), lambda p=p, th=th: diagnose_trace(load(p), Options(threshold_us=th)))
    import gc
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert cache._size >= 0.8 * held, (cache._size, held)
    assert cache._size <= 1.5 * held, (cache._size, held)


def test_fsspec_store(tmp_path):
    """The same store on an fsspec filesystem (memory://): entries, rows in one batch,
    a bad entry dropped, the bound kept by write time."""
    import fsspec
    url = f"memory://perfdiag-{os.getpid()}-{time.time_ns()}"
    st = ResultStore(url, max_bytes=50_000)
    assert st.shared and not st.usable()
    blob = codec.encode(codec.Failure("f", "bad"))
    assert st.put("a" * 32, blob, {"status": 422, "error": "bad"})
    assert st.get_rows(["a" * 32, "b" * 32]) == {"a" * 32: {"status": 422, "error": "bad"}}
    assert codec.decode(st.get("a" * 32)) == codec.Failure("f", "bad")
    fs = fsspec.filesystem("memory")
    fs.pipe_file(url.split("://")[1] + "/" + "c" * 32 + ".row", b"not json")
    assert st.get_rows(["c" * 32]) == {} and st.dropped == 1
    for i in range(40):
        st.put(f"{i:032d}", os.urandom(3000), {"status": 200})
        time.sleep(0.002)
    assert st.trim() <= 50_000 and st.evicted > 0
    assert st.get(f"{39:032d}") is not None and st.get(f"{0:032d}") is None


def test_the_old_disk_caches_pickles_are_never_loaded_and_go(tmp_path):
    """Entries of the former pickle cache in the same folder are not read (a pickle runs
    code) and are deleted when the store is next listed."""
    import pickle
    store = tmp_path / "store"
    store.mkdir(mode=0o700)
    with gzip.open(store / ("a" * 32 + ".pkl.gz"), "wb") as f:
        pickle.dump({"x": 1}, f)
    ld, _ = _one_host_logdir(tmp_path)
    svc = DiagnosisService(Catalog(str(ld)), DiagnosisCache(disk_dir=str(store)))
    assert call(svc, "diagnosis", _query(svc))[0] == 200 and svc.cache.computations == 1
    svc.cache.store.trim()
    assert not [f for f in os.listdir(store) if f.endswith(".pkl.gz")]
