"""No request and no file can take TensorBoard down (issue 19), against a real TensorBoard
with the plugin in a memory-limited process (RLIMIT_AS on the child, a small plugin
budget), scaled to a 2-core CI machine.

Each attack — concurrent diagnoses that differ only in their threshold, concurrent
timelines, concurrent exports with events, a warm burst, a gzip bomb, a named pipe, a
symlink swapped in after the listing, a link to /dev/zero, a file grown after the
listing, a file deleted mid-request, a flood of unknown run names — must leave
TensorBoard alive and answering ``/data/plugins_listing`` in under a second throughout,
give the attacking requests a clear error (never a 500, never a hang) and the others
correct answers; the logdir itself is given through a symlink.  At the end TensorBoard's
peak memory is within its idle size + the plugin's budget + ``MARGIN_MB``.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import TESTDATA, TensorBoard, gzip_bomb

BUDGET_MB = 256          # TB_PERFDIAG_MEMORY_MB: work under way + kept traces and answers
MAX_FILE_MB = 100        # TB_PERFDIAG_MAX_FILE_MB
# what TensorBoard may take beyond its idle size and the plugin's budget: request
# threads and their stacks, allocator slack, the diagnoses' own cache (small here)
MARGIN_MB = 160
ADDRESS_SPACE = 3 << 30  # RLIMIT_AS of the TensorBoard process
LISTING_S = 1.0          # /data/plugins_listing must answer within this, throughout
EVENTS = 150_000         # events of the large generated traces
API = "/data/plugin/perfdiag"

SMALL = os.path.join(TESTDATA, "synthetic", "logdir", "kineto_sync_nonzero",
                      "worker0.1795400000000.pt.trace.json")


def _proc_status(pid: int) -> dict:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


def _mb(field: str) -> float:
    return int(field.split()[0]) / 1024


_POLL = r"""
import sys, time, urllib.request
url = sys.argv[1]
while True:
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            r.read()
            status = r.status
    except Exception as e:
        status = type(e).__name__
    print(t0, time.monotonic() - t0, status, flush=True)
    time.sleep(0.2)
"""


class Watch:
    """Polls /data/plugins_listing every 0.2 s for the whole module, from a process of its
    own: in this one, fifty client threads parsing megabytes of JSON hold the GIL, and a
    poll timed here measured their contention, not TensorBoard's answer."""

    def __init__(self, tb):
        self.tb, self.samples = tb, []
        self._proc = subprocess.Popen([sys.executable, "-c", _POLL,
                                       tb.url + "/data/plugins_listing"],
                                      stdout=subprocess.PIPE, text=True)
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        for line in self._proc.stdout:
            t0, secs, status = line.split()
            self.samples.append((float(t0), float(secs),
                                 int(status) if status.isdigit() else status))

    def since(self, t0: float) -> list:
        # CLOCK_MONOTONIC is the machine's, so the poller's times compare with ours
        return [s for s in self.samples if s[0] >= t0]

    def stop(self):
        self._proc.terminate()
        self._proc.wait(10)
        self._t.join(10)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, artifacts_dir):
    if not sys.platform.startswith("linux"):
        pytest.skip("the memory limit and the file types used here are Linux's")
    sys.path.insert(0, os.path.join(TESTDATA, "generators"))
    try:
        import large
    finally:
        sys.path.pop(0)
    base = tmp_path_factory.mktemp("hostile")
    real = base / "real"
    large.write_large(real / "big" / "w0.1700000000000.pt.trace.json.gz", EVENTS, "kineto")
    large.write_large(real / "xla" / "plugins" / "profile" / "r1" / "host0.xplane.pb",
                      EVENTS, "xspace")
    for run in ("small", "swap", "zero", "pipe", "grow"):
        (real / run).mkdir(parents=True)
        shutil.copy(SMALL, real / run / "w0.1700000000000.pt.trace.json")
    (real / "gone").mkdir()
    shutil.copy(real / "big" / "w0.1700000000000.pt.trace.json.gz", real / "gone")
    (real / "bomb").mkdir()
    gzip_bomb(real / "bomb" / "w0.1700000000000.pt.trace.json.gz", 1024)   # 1 GiB out
    (real / "bomb_spaces").mkdir()     # JSON as far as it goes: only the budget stops it
    gzip_bomb(real / "bomb_spaces" / "w0.1700000000000.pt.trace.json.gz", 1024,
              b'{"traceEvents": [', b" ")
    (real / "fifo").mkdir()
    os.mkfifo(real / "fifo" / "w0.1700000000000.pt.trace.json")        # never listed
    for i in range(3000):                                   # a logdir with many runs
        d = real / "many" / f"run{i:04d}"
        d.mkdir(parents=True)
        (d / "w0.1.pt.trace.json").write_bytes(b'{"traceEvents": []}')
    outside = base / "outside"
    outside.mkdir()
    shutil.copy(SMALL, outside / "secret.pt.trace.json")
    logdir = base / "logdir"
    os.symlink(real, logdir)                                # the logdir through a symlink
    env = {"TB_PERFDIAG_MEMORY_MB": str(BUDGET_MB), "TB_PERFDIAG_TRACES_MB": "128",
           "TB_PERFDIAG_RESPONSES_MB": "32", "TB_PERFDIAG_MAX_FILE_MB": str(MAX_FILE_MB),
           "TB_PERFDIAG_ANALYSES": "2", "TB_PERFDIAG_ANSWERS": "2",
           "TB_PERFDIAG_QUEUE_S": "90", "MALLOC_ARENA_MAX": "2",
           "TB_PERFDIAG_CACHE_DIR": str(base / "cache"), "TB_PERFDIAG_POD_PROCESSES": "0"}
    import tb_perfdiag
    expected = tb_perfdiag.diagnose(SMALL).to_json(all_gaps=False, gaps_limit=20)
    tb = TensorBoard(logdir, extra_env=env, address_space_bytes=ADDRESS_SPACE)
    try:
        idle = _mb(_proc_status(tb.proc.pid)["VmRSS"])
        watch = Watch(tb)
        ns = type("Hostile", (), {})()
        ns.tb, ns.real, ns.outside, ns.watch, ns.idle_mb = tb, real, outside, watch, idle
        ns.expected_small = expected
        ns.log = []
        _bystander(ns)                 # its trace is read now, not during the attacks
    except BaseException:
        tb.stop()
        raise
    yield ns
    watch.stop()
    st = _proc_status(tb.proc.pid) if tb.proc.poll() is None else {}
    peak = _mb(st["VmHWM"]) if st else float("nan")
    lat = sorted(s[1] for s in watch.samples)
    report = [f"reliability: TensorBoard idle {idle:.0f} MB, peak {peak:.0f} MB "
              f"(bound {idle + BUDGET_MB + MARGIN_MB:.0f} = idle + {BUDGET_MB} budget + "
              f"{MARGIN_MB} margin); plugins_listing {len(lat)} polls, max "
              f"{lat[-1] if lat else float('nan'):.3f} s"] + ns.log
    with open(os.path.join(artifacts_dir, "reliability.txt"), "w") as f:
        f.write("\n".join(report) + "\n")
    print("\n".join(report))
    tb.stop()


def _get(h, path, timeout=120):
    """(status, JSON body, seconds) of one request, sent as a browser does (gzip welcome)."""
    t0 = time.monotonic()
    req = urllib.request.Request(h.tb.url + path, headers={"Accept-Encoding": "gzip"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw, enc = r.status, r.read(), r.headers.get("Content-Encoding")
    except urllib.error.HTTPError as e:
        status, raw, enc = e.code, e.read(), e.headers.get("Content-Encoding")
    if enc == "gzip":
        raw = gzip.decompress(raw)
    return status, json.loads(raw), time.monotonic() - t0


def _many(h, paths, workers=20, timeout=120):
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda p: _get(h, p, timeout), paths))


def _bystander(h):
    """A small run's diagnosis, which must stay correct whatever else is going on."""
    status, body, secs = _get(h, f"{API}/diagnosis?run=small&host=w0&gaps_limit=20")
    exp = h.expected_small
    assert status == 200, body
    assert body["gaps_total"] == exp["gaps_total"]
    assert [g["id"] for g in body["gaps"]] == [g["id"] for g in exp["gaps"]]
    assert body["devices"] == exp["devices"]
    return secs


def _healthy_since(h, t0, label):
    """TensorBoard alive, and every plugins_listing poll since ``t0`` fast and 200."""
    assert h.tb.proc.poll() is None, f"TensorBoard died during: {label}"
    samples = h.watch.since(t0)
    assert samples, "no plugins_listing poll during the attack"
    slow = [s for s in samples if s[2] != 200 or s[1] >= LISTING_S]
    worst = max(s[1] for s in samples)
    h.log.append(f"  {label}: plugins_listing {len(samples)} polls, max {worst:.3f} s")
    assert not slow, f"{label}: plugins_listing slow or failing: {slow[:5]}"


def _status(h):
    return _get(h, f"{API}/status")[1]


def _run_attack(h, label, fn):
    t0 = time.monotonic()
    stop = threading.Event()
    bystanders = []

    def keep_asking():
        while not stop.is_set():
            bystanders.append(_bystander(h))
            stop.wait(0.3)
    by = threading.Thread(target=keep_asking, daemon=True)
    by.start()
    try:
        out = fn()
    finally:
        stop.set()
        by.join(130)
    time.sleep(0.3)                  # one more listing poll after the attack
    _healthy_since(h, t0, label)
    assert bystanders, "the bystander never got an answer"
    h.log[-1] += f"; bystander answered {len(bystanders)}× correctly, max {max(bystanders):.2f} s"
    return out


def _no_server_errors(results):
    bad = [(s, b) for s, b, _ in results if s >= 500 and s != 503]
    assert not bad, bad[:3]


# ---- the attacks ----

def test_logdir_through_a_symlink_lists_its_runs(hostile):
    status, body, _ = _get(hostile, f"{API}/runs")
    names = {r["run"] for r in body["runs"]}
    assert status == 200 and {"big", "xla/r1", "small", "bomb", "gone"} <= names
    assert "fifo" not in names                              # a named pipe is no profile
    assert len([n for n in names if n.startswith("many/")]) == 3000


def test_distinct_threshold_diagnoses_at_once(hostile):
    h = hostile
    loads = _status(h)["trace_loads"]
    paths = [f"{API}/diagnosis?run=big&host=w0&gaps_limit=50&threshold_us={5 + i}"
             for i in range(20)]
    paths += [f"{API}/diagnosis?run=xla/r1&host=host0&gaps_limit=50&threshold_us={5 + i}"
              for i in range(10)]
    res = _run_attack(h, "30 diagnoses differing only in threshold_us",
                      lambda: _many(h, paths, workers=30))
    assert [s for s, _, _ in res] == [200] * 30, [(s, b) for s, b, _ in res if s != 200][:3]
    for status, body, _ in res:
        th = body["options"]["threshold_us"]
        assert all(g["duration_ns"] >= th * 1000 for g in body["gaps"])
    assert _status(h)["trace_loads"] - loads <= 2            # each file read once


def test_timelines_at_once(hostile):
    h = hostile
    loads = _status(h)["trace_loads"]
    paths = [f"{API}/timeline?run=big&host=w0&width=1200&start_ns={i * 1_000_000}"
             f"&end_ns={i * 1_000_000 + 80_000_000}" for i in range(20)]
    res = _run_attack(h, "20 timelines at once", lambda: _many(h, paths))
    assert {s for s, _, _ in res} == {200} and all(b["lanes"] for _, b, _ in res)
    assert _status(h)["trace_loads"] - loads <= 1


def test_exports_with_events_at_once(hostile):
    h = hostile
    loads = _status(h)["trace_loads"]
    paths = [f"{API}/overlay?run=big&host=w0&with_events=1&start_us={i * 2000}"
             f"&end_us={i * 2000 + 30000}" for i in range(20)]
    res = _run_attack(h, "20 exports with events at once", lambda: _many(h, paths))
    assert {s for s, _, _ in res} == {200}
    # the trace's own events: slices outside the Diagnosis process (pid 1)
    assert all(any(e.get("pid", 1) != 1 and e.get("ph") == "X" for e in b["traceEvents"])
               for _, b, _ in res)
    assert _status(h)["trace_loads"] - loads <= 1


def test_warm_burst(hostile):
    h = hostile
    kinds = [f"{API}/diagnosis?run=big&host=w0&gaps_limit=200",
             f"{API}/diagnosis?run=xla/r1&host=host0",
             f"{API}/timeline?run=big&host=w0&width=1200",
             f"{API}/overlay?run=big&host=w0&with_events=1",
             f"{API}/diagnosis?run=big&host=w0&gaps_limit=200&gaps_offset=200"]
    for k in kinds:                                         # warm
        assert _get(h, k)[0] == 200
    paths = [kinds[i % len(kinds)] for i in range(200)]
    res = _run_attack(h, "warm burst of 200 requests", lambda: _many(h, paths, workers=50))
    assert {s for s, _, _ in res} == {200}
    lat = sorted(t for _, _, t in res)
    h.log.append(f"  warm burst: p50 {lat[100]:.3f} s, p95 {lat[190]:.3f} s, max {lat[-1]:.3f} s")
    assert lat[190] < 10


@pytest.mark.parametrize("run,what", [("bomb", "zeros"), ("bomb_spaces", "'[' then spaces")])
def test_gzip_bomb(hostile, run, what):
    h = hostile
    paths = [f"{API}/diagnosis?run={run}&host=w0&threshold_us={5 + i}" for i in range(10)]
    paths += [f"{API}/timeline?run={run}&host=w0",
              f"{API}/overlay?run={run}&host=w0&with_events=1"]
    res = _run_attack(h, f"gzip bomb (1 MB → 1 GiB of {what})",
                      lambda: _many(h, paths, workers=12))
    for status, body, _ in res:
        assert status == 413, body
        assert "decompresses to more than" in body["error"] and "TB_PERFDIAG_MAX_FILE_MB" in body["error"]
        assert body["file"] == "w0.1700000000000.pt.trace.json.gz"


def test_named_pipe(hostile):
    h = hostile
    f = h.real / "pipe" / "w0.1700000000000.pt.trace.json"

    def attack():
        out = [_get(h, f"{API}/diagnosis?run=fifo&host=w0", timeout=30)]
        f.unlink()
        os.mkfifo(f)                                        # swapped in after the listing
        out += _many(h, [f"{API}/diagnosis?run=pipe&host=w0&threshold_us={5 + i}"
                         for i in range(5)] + [f"{API}/timeline?run=pipe&host=w0"], timeout=30)
        return out
    res = _run_attack(h, "named pipes", attack)
    assert res[0][0] == 404                                 # never listed
    for status, body, secs in res[1:]:
        assert status == 422 and "named pipe" in body["error"] and secs < 10


def test_symlink_swapped_after_listing_and_link_to_dev_zero(hostile):
    h = hostile
    swap = h.real / "swap" / "w0.1700000000000.pt.trace.json"
    zero = h.real / "zero" / "w0.1700000000000.pt.trace.json"

    def attack():
        swap.unlink()
        os.symlink(h.outside / "secret.pt.trace.json", swap)
        zero.unlink()
        os.symlink("/dev/zero", zero)
        return _many(h, [f"{API}/diagnosis?run=swap&host=w0", f"{API}/overlay?run=swap&host=w0",
                         f"{API}/diagnosis?run=zero&host=w0", f"{API}/timeline?run=zero&host=w0"])
    res = _run_attack(h, "symlinks swapped in after the listing", attack)
    for status, body, _ in res:
        assert status == 422 and "symbolic link" in body["error"], body


def test_file_grown_after_listing(hostile):
    h = hostile
    f = h.real / "grow" / "w0.1700000000000.pt.trace.json"

    def attack():
        with open(f, "r+b") as fh:
            fh.truncate((MAX_FILE_MB + 20) * 1_000_000)     # sparse: no disk used
        return _many(h, [f"{API}/diagnosis?run=grow&host=w0&threshold_us={5 + i}"
                         for i in range(5)])
    res = _run_attack(h, "file grown after the listing", attack)
    for status, body, _ in res:
        assert status == 413 and "TB_PERFDIAG_MAX_FILE_MB" in body["error"], body


def test_file_deleted_mid_request(hostile):
    h = hostile
    gone = h.real / "gone" / "w0.1700000000000.pt.trace.json.gz"    # never opened yet
    paths = [f"{API}/diagnosis?run=gone&host=w0&threshold_us={5 + i}" for i in range(15)]
    paths += [f"{API}/timeline?run=gone&host=w0&start_ns={i}" for i in range(15)]

    def attack():
        with ThreadPoolExecutor(30) as pool:
            futs = [pool.submit(_get, h, p, 60) for p in paths]
            time.sleep(0.05)
            os.unlink(gone)
            out = [fu.result() for fu in futs]
        return out + _many(h, [f"{API}/diagnosis?run=gone&host=w0&threshold_us=99",
                               f"{API}/timeline?run=gone&host=w0&start_ns=99"])
    res = _run_attack(h, "file deleted mid-request", attack)
    statuses = [s for s, _, _ in res]
    assert set(statuses) <= {200, 404, 422}, [(s, b) for s, b, _ in res if s not in (200, 404)][:3]
    for status, body, _ in res:
        if status != 200:
            assert body.get("error") and "Traceback" not in str(body)
    assert statuses[-2:] == [404, 404]          # once it is gone: a clear 404
    h.log.append(f"  file deleted mid-request: {statuses.count(200)} answered before, "
                 f"{statuses.count(404)} × 404, {statuses.count(422)} × 422")


def test_unknown_run_flood(hostile):
    h = hostile
    listings = _status(h)["listings"]
    paths = [f"{API}/diagnosis?run=nope-{uuid.uuid4().hex}&host=w0" for _ in range(100)]
    t0 = time.monotonic()
    res = _run_attack(h, "100 unknown run names on 3,000 runs",
                      lambda: _many(h, paths, workers=25, timeout=60))
    wall = time.monotonic() - t0
    assert {s for s, _, _ in res} == {404}
    assert all("no such run" in b["error"] for _, b, _ in res)
    # a listing at most every few seconds, whatever the number of unknown names
    assert _status(h)["listings"] - listings <= 2 + wall / 2


def test_peak_memory_within_the_budget(hostile):
    h = hostile
    st = _proc_status(h.tb.proc.pid)
    peak = _mb(st["VmHWM"])
    mem = _status(h)["memory"]
    h.log.append(f"  accounted peak {mem['peak_accounted_bytes'] / 1e6:.0f} MB of "
                 f"{mem['budget_bytes'] / 1e6:.0f}; waited {mem['waited']}, refused {mem['refused']}")
    assert mem["refused"] == 0
    assert peak <= h.idle_mb + BUDGET_MB + MARGIN_MB, (peak, h.idle_mb)
