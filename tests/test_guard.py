"""Every byte read from a logdir goes through one guarded path: regular files only, no
link followed below the logdir, sizes checked on the open file, decompression capped by
the budget in bytes out.  What was listed and what is read are checked apart: each
attack here changes the logdir *after* the listing."""
from __future__ import annotations

import gzip
import os
import shutil
import time

import pytest

from conftest import TESTDATA, call
from tb_perfdiag import storage
from tb_perfdiag.cache import DiagnosisCache
from tb_perfdiag.discovery import Catalog, scan_logdir
from tb_perfdiag.errors import FileGone, StorageError, TraceError, TraceTooLarge
from tb_perfdiag.service import DiagnosisService

try:
    from tb_perfdiag.trace import native_scan
except ImportError:             # the extension is not built
    native_scan = None

KINETO = os.path.join(TESTDATA, "synthetic", "logdir", "kineto_launch_bound",
                      "worker0.1795400183000.pt.trace.json")

posix_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX file types")


def _logdir(tmp_path, runs=("a", "b")):
    ld = tmp_path / "ld"
    for r in runs:
        (ld / r).mkdir(parents=True)
        shutil.copy(KINETO, ld / r / "w0.1700000000000.pt.trace.json")
    return ld


def _service(ld, **kw):
    return DiagnosisService(Catalog(str(ld), ttl=3600), DiagnosisCache(disk_dir=None), **kw)


# ---- the listing ----

@posix_only
def test_listing_holds_regular_files_only(tmp_path):
    ld = _logdir(tmp_path, ["ok"])
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(KINETO, outside / "w9.1.pt.trace.json")
    (ld / "pipe").mkdir()
    os.mkfifo(ld / "pipe" / "w0.1.pt.trace.json")
    (ld / "links").mkdir()
    os.symlink(outside / "w9.1.pt.trace.json", ld / "links" / "w1.1.pt.trace.json")
    os.symlink(ld / "ok" / "w0.1700000000000.pt.trace.json", ld / "links" / "w2.1.pt.trace.json")
    os.symlink("/dev/zero", ld / "links" / "w3.1.pt.trace.json")
    os.symlink(outside, ld / "linkdir")              # a folder reached through a link
    started = time.monotonic()
    skipped = []
    runs = scan_logdir(str(ld), skipped)
    assert time.monotonic() - started < 5            # the pipe was never opened
    # links are followed and read where they lead (a file linked from outside confined
    # to the folder holding it, a linked folder to itself); a link to a device is not
    assert sorted(runs) == ["linkdir", "links", "ok"]
    assert [(s.host, str(s.path), s.path.root) for s in runs["links"].sources] == [
        ("w1", os.path.realpath(outside / "w9.1.pt.trace.json"), os.path.realpath(outside)),
        ("w2", os.path.realpath(ld / "ok" / "w0.1700000000000.pt.trace.json"),
         os.path.realpath(ld))]
    assert [(s.host, s.path.root) for s in runs["linkdir"].sources] == [
        ("w9", os.path.realpath(outside))]
    why = {s.path: s.reason for s in skipped}
    assert "character device, not a regular file" in why["links/w3.1.pt.trace.json"]
    assert "named pipe" in why["pipe/w0.1.pt.trace.json"]
    assert set(why) == {"links/w3.1.pt.trace.json", "pipe/w0.1.pt.trace.json"}


@posix_only
def test_runs_and_files_linked_in_from_elsewhere_are_read(tmp_path):
    """``ln -s ~/traces/run1 logdir/run1`` and a trace file linked into a run folder: both
    listed and read (as TensorBoard and the Profile plugin read them), a folder linked
    twice walked once, a loop and a link to / not followed; requests still name only what
    the listing found, and a file of a linked folder swapped for a link after the listing
    is refused like any other."""
    ld = tmp_path / "ld"
    ld.mkdir()
    traces = tmp_path / "traces"
    (traces / "run1").mkdir(parents=True)
    shutil.copy(KINETO, traces / "run1" / "w0.1700000000000.pt.trace.json")
    shutil.copy(KINETO, traces / "one.1700000000000.pt.trace.json")
    secret = tmp_path / "secret.pt.trace.json"
    shutil.copy(KINETO, secret)
    os.symlink(traces / "run1", ld / "run1")
    os.symlink(traces / "run1", ld / "zz_again")         # the same folder a second time
    (ld / "run2").mkdir()
    os.symlink(traces / "one.1700000000000.pt.trace.json",
               ld / "run2" / "w1.1700000000000.pt.trace.json")
    os.symlink(ld, ld / "run1_loop")                      # a loop
    os.symlink("/", ld / "everything")                    # a folder holding the logdir
    os.symlink(tmp_path / "gone", ld / "run2" / "w2.1.pt.trace.json")   # broken
    skipped = []
    runs = scan_logdir(str(ld), skipped)
    assert sorted(runs) == ["run1", "run2"]                # the folder linked twice: once
    assert [s.host for s in runs["run1"].sources] == ["w0"]
    assert [s.host for s in runs["run2"].sources] == ["w1"]
    why = {s.path: s.reason for s in skipped}
    assert "a loop, not followed" in why["run1_loop"] and "a loop" in why["everything"]
    assert "broken" in why["run2/w2.1.pt.trace.json"]
    svc = _service(ld)
    for run, host in (("run1", "w0"), ("run2", "w1")):
        status, body = call(svc, "diagnosis", {"run": run, "host": host})
        assert status == 200 and body["devices"], (run, body)
    # a request names a listed run and host, never a path, linked or not
    for params in ({"run": "../secret.pt.trace.json"}, {"run": "run2", "host": "../../secret"},
                   {"run": str(secret)}):
        status, body = call(svc, "diagnosis", params)
        assert status in (400, 404), (params, status, body)
    # the linked folder's file swapped for a link after the listing: refused, unread
    fresh = _service(ld)
    src = fresh.catalog.find("run1", "w0")
    assert src.path.root == os.path.realpath(traces / "run1")
    os.unlink(src.path)
    os.symlink(secret, src.path)
    status, body = call(fresh, "diagnosis", {"run": "run1", "host": "w0"})
    assert status == 422 and "symbolic link" in body["error"]
    assert fresh.loads == 0


def test_the_cli_reads_linked_runs_and_files(tmp_path):
    """The CLI on a logdir holding a linked run and a linked trace file: both
    diagnosed, exit 0."""
    import subprocess
    import sys
    ld, elsewhere = tmp_path / "ld", tmp_path / "elsewhere"
    (elsewhere / "run1").mkdir(parents=True)
    shutil.copy(KINETO, elsewhere / "run1" / "w0.1700000000000.pt.trace.json")
    shutil.copy(KINETO, elsewhere / "w1.1700000000000.pt.trace.json")
    (ld / "run2").mkdir(parents=True)
    os.symlink(elsewhere / "run1", ld / "run1")
    os.symlink(elsewhere / "w1.1700000000000.pt.trace.json",
               ld / "run2" / "w1.1700000000000.pt.trace.json")
    r = subprocess.run([sys.executable, "-m", "tb_perfdiag.cli", "diagnose", str(ld)],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONSAFEPATH": "1"})
    assert r.returncode == 0, r.stderr
    assert "== run1 · w0" in r.stdout and "== run2 · w1" in r.stdout


def test_logdir_given_through_a_symlink_shows_its_runs(tmp_path):
    ld = _logdir(tmp_path)
    link = tmp_path / "latest"
    os.symlink(ld, link)
    svc = _service(link)
    assert sorted(svc.catalog.runs()) == ["a", "b"]
    src = svc.catalog.find("a", "w0")
    assert src.path.root == os.path.realpath(ld)
    status, body = call(svc, "diagnosis", {"run": "a", "host": "w0"})
    assert status == 200 and body["devices"]


# ---- reads after the listing ----

@posix_only
def test_symlink_swapped_in_after_the_listing_is_not_followed(tmp_path):
    ld = _logdir(tmp_path)
    secret = tmp_path / "secret"
    secret.mkdir()
    shutil.copy(KINETO, secret / "other.pt.trace.json")
    svc = _service(ld)
    assert svc.catalog.find("a", "w0") is not None      # listed as a regular file
    f = ld / "a" / "w0.1700000000000.pt.trace.json"
    f.unlink()
    os.symlink(secret / "other.pt.trace.json", f)
    status, body = call(svc, "diagnosis", {"run": "a", "host": "w0"})
    assert status == 422 and "symbolic link" in body["error"]
    assert svc.loads == 0                                # nothing outside was read


@posix_only
def test_folder_swapped_for_a_link_after_the_listing_is_not_followed(tmp_path):
    ld = _logdir(tmp_path)
    secret = tmp_path / "secret"
    secret.mkdir()
    shutil.copy(KINETO, secret / "w0.1700000000000.pt.trace.json")
    svc = _service(ld)
    assert svc.catalog.find("b", "w0") is not None
    shutil.rmtree(ld / "b")
    os.symlink(secret, ld / "b")
    status, body = call(svc, "diagnosis", {"run": "b", "host": "w0"})
    assert status == 422 and "after the logdir was listed): not followed" in body["error"]


@posix_only
def test_link_to_dev_zero_and_named_pipe_after_the_listing(tmp_path):
    ld = _logdir(tmp_path)
    svc = _service(ld)
    assert svc.catalog.find("a", "w0") and svc.catalog.find("b", "w0")
    a = ld / "a" / "w0.1700000000000.pt.trace.json"
    a.unlink()
    os.symlink("/dev/zero", a)
    b = ld / "b" / "w0.1700000000000.pt.trace.json"
    b.unlink()
    os.mkfifo(b)                                         # no writer: a read would block
    started = time.monotonic()
    status, body = call(svc, "diagnosis", {"run": "a", "host": "w0"})
    assert status == 422 and "symbolic link" in body["error"]
    status, body = call(svc, "diagnosis", {"run": "b", "host": "w0"})
    assert status == 422 and "named pipe" in body["error"]
    assert time.monotonic() - started < 5
    # even where links are followed (a path a person typed) a device is not read
    with pytest.raises(TraceError, match="character device"):
        storage.read_bytes(str(a))


def test_file_grown_after_the_listing_is_refused_on_the_open_file(tmp_path):
    ld = _logdir(tmp_path, ["a"])
    svc = _service(ld, max_file_mb=1)
    src = svc.catalog.find("a", "w0")
    assert src.size < 1e6                                 # the listing saw a small file
    with open(src.path, "ab") as f:
        f.write(b" " * 2_000_000)
    status, body = call(svc, "diagnosis", {"run": "a", "host": "w0"})
    assert status == 413 and "TB_PERFDIAG_MAX_FILE_MB" in body["error"]
    assert body["file"] == "w0.1700000000000.pt.trace.json"


@pytest.mark.parametrize("head,filler", [
    (b"", b"\0"),                                   # zeros: not JSON from the first byte
    (b'{"traceEvents": [', b" "),                   # JSON as far as it goes: spaces
], ids=["zeros", "spaces"])
def test_gzip_bomb_is_capped_in_bytes_out(tmp_path, head, filler):
    ld = _logdir(tmp_path, ["ok"])
    (ld / "bomb").mkdir()
    _gzip_of(ld / "bomb" / "w0.1.pt.trace.json.gz", head, filler, 64)   # 64 MB out
    assert os.path.getsize(ld / "bomb" / "w0.1.pt.trace.json.gz") < 1e6
    svc = _service(ld, max_file_mb=8)
    status, body = call(svc, "diagnosis", {"run": "bomb", "host": "w0"})
    assert status == 413 and "decompresses to more than the 8 MB budget" in body["error"]
    assert body["file"] == "w0.1.pt.trace.json.gz"
    # the same file is not decompressed again for other options
    status, _ = call(svc, "diagnosis", {"run": "bomb", "host": "w0", "threshold_us": "50"})
    assert status == 413 and svc.loads == 1
    status, body = call(svc, "diagnosis", {"run": "ok", "host": "w0"})   # the others go on
    assert status == 200 and body["gaps_total"] > 0, body


def test_gzip_within_budget_reads_whole(tmp_path):
    p = tmp_path / "w.pt.trace.json.gz"
    raw = open(KINETO, "rb").read()
    p.write_bytes(gzip.compress(raw))
    assert storage.read_bytes(str(p), max_bytes=len(raw)) == raw
    with pytest.raises(TraceTooLarge):
        storage.read_bytes(str(p), max_bytes=len(raw) - 1)
    with storage.open_file(str(p)) as f:
        assert f.decoded_size_hint() == len(raw)          # what the gzip trailer says
    trailer_lies = gzip.compress(raw)[:-4] + (10).to_bytes(4, "little")
    p.write_bytes(trailer_lies)                           # a hint only: the cap holds
    with pytest.raises(TraceError, match="corrupt gzip"):
        storage.read_bytes(str(p), max_bytes=len(raw) + 10)


def test_file_deleted_after_the_listing_is_a_clear_404(tmp_path):
    ld = _logdir(tmp_path, ["a"])
    svc = _service(ld)
    src = svc.catalog.find("a", "w0")
    os.unlink(src.path)
    for route in ("diagnosis", "timeline", "overlay", "progress"):
        status, body = call(svc, route, {"run": "a", "host": "w0"})
        assert status == 404 and "disappeared" in body["error"], (route, body)
    with pytest.raises(FileGone):
        storage.read_bytes(src.path)


def test_paths_outside_the_root_are_not_read(tmp_path):
    ld = _logdir(tmp_path, ["a"])
    with pytest.raises(TraceError, match="outside the logdir"):
        storage.read_bytes(KINETO, root=str(ld))


def test_links_are_followed_for_a_path_a_person_typed(tmp_path):
    link = tmp_path / "latest.pt.trace.json"
    os.symlink(KINETO, link)
    assert storage.read_bytes(str(link)) == open(KINETO, "rb").read()


def test_url_without_its_backend_is_one_clear_line(monkeypatch):
    # s3fs is a test dependency (the result-store tests): hidden here as if not installed
    import sys
    monkeypatch.setitem(sys.modules, "s3fs", None)
    with pytest.raises(StorageError) as e:
        storage.read_bytes("s3://bucket/run/w0.1.pt.trace.json")
    msg = str(e.value)
    assert "s3://" in msg and "s3fs" in msg and "\n" not in msg
    with pytest.raises(StorageError, match="nosuchproto"):
        storage.read_bytes("nosuchproto://x/y.pt.trace.json")


def test_corrupt_gzip_names_the_problem(tmp_path):
    p = tmp_path / "w.pt.trace.json.gz"
    good = gzip.compress(open(KINETO, "rb").read())
    p.write_bytes(good[: len(good) // 2])
    with pytest.raises(TraceError, match="truncated"):
        storage.read_bytes(str(p), max_bytes=10**8)
    p.write_bytes(good[:20] + bytes(200))
    with pytest.raises(TraceError, match="corrupt gzip"):
        storage.read_bytes(str(p), max_bytes=10**8)


@posix_only
def test_listed_paths_stay_confined_wherever_they_go(tmp_path):
    """A pod's hosts are read in worker processes from the listed path alone: the path
    carries its logdir root there, so a link swapped in after the listing is refused in
    the worker too."""
    import glob
    import pickle
    xla = glob.glob(os.path.join(TESTDATA, "synthetic", "logdir", "xla_tpu_data_loading",
                                 "plugins", "profile", "*", "*.xplane.pb"))[0]
    run = tmp_path / "ld" / "pod" / "plugins" / "profile" / "r1"
    run.mkdir(parents=True)
    for h in ("host0", "host1", "host2"):
        shutil.copy(xla, run / f"{h}.xplane.pb")
    outside = tmp_path / "outside.xplane.pb"
    shutil.copy(xla, outside)
    svc = _service(tmp_path / "ld")
    src = svc.catalog.find("pod/r1", "host1")
    again = pickle.loads(pickle.dumps(src.path))
    assert again == src.path and again.root == src.path.root
    os.unlink(src.path)
    os.symlink(outside, src.path)
    status, body = call(svc, "hosts", {"run": "pod/r1", "wait": "1"})
    assert status == 200
    rows = {r["host"]: r for r in body["hosts"]}
    assert rows["host0"]["status"] == 200 and rows["host2"]["status"] == 200
    assert rows["host1"]["status"] == 422 and "symbolic link" in rows["host1"]["error"]


def test_a_gzip_trailer_that_lies_is_read_within_what_was_reserved(tmp_path):
    """A whole read reserves memory from a gzip's trailer, which a hostile file can fake
    (and which wraps past 4 GiB): it stops at that figure.  A Kineto trace is streamed,
    so its memory does not follow the trailer: the lie is found (corrupt gzip) in one
    read."""
    ld = tmp_path / "ld" / "r"
    ld.mkdir(parents=True)
    raw = open(KINETO, "rb").read()
    packed = gzip.compress(raw)
    claim = len(packed) + 1000                  # plausible: more than the file, less than true
    lying = packed[:-4] + claim.to_bytes(4, "little")
    (ld / "w0.1.pt.trace.json.gz").write_bytes(lying)
    svc = _service(tmp_path / "ld", max_file_mb=10)
    with storage.open_file(svc.catalog.find("r", "w0").path) as f:
        with pytest.raises(storage.Underestimated):
            f.read(expect=f.decoded_size_hint())
    status, body = call(svc, "diagnosis", {"run": "r", "host": "w0"})
    assert status == 422 and "corrupt gzip" in body["error"]
    assert svc.loads == 1
    (ld / "w0.1.pt.trace.json.gz").write_bytes(gzip.compress(raw))
    os.utime(ld / "w0.1.pt.trace.json.gz", (time.time() + 10, time.time() + 10))
    assert call(svc, "diagnosis", {"run": "r", "host": "w0"})[0] == 200 and svc.loads == 2


# ---- Kineto read as a stream: the decoded text never exists whole ----

def _gzip_of(path, head: bytes, filler: bytes, out_mb: int, tail: bytes = b""):
    """``head``, then ``filler`` repeated to about ``out_mb`` MB, then ``tail``, gzipped
    a MB at a time."""
    block = filler * ((1 << 20) // len(filler))
    with gzip.open(path, "wb", compresslevel=6) as f:
        f.write(head)
        for _ in range(out_mb):
            f.write(block)
        f.write(tail)


def _peak_while(fn):
    import tracemalloc
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        try:
            out = fn()
        except Exception as e:  # noqa: BLE001 - returned to the test
            out = e
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("head,filler", [
    (b"", b"\0"),                                   # zeros: not JSON from the first byte
    (b'{"traceEvents": [', b" "),                   # whitespace inside the events list
    (b'{"traceEvents": [', b'{"ph": "i"}, '),       # events, on and on
])
@pytest.mark.parametrize("scanner", ["native", "reference"])
def test_a_bomb_stops_at_the_budget_having_held_only_chunks(tmp_path, monkeypatch, head, filler,
                                                            scanner):
    if scanner == "reference":
        monkeypatch.setenv("TB_PERFDIAG_NO_NATIVE", "1")
    p = tmp_path / "w0.1.pt.trace.json.gz"
    _gzip_of(p, head, filler, 160)
    out, peak = _peak_while(lambda: __import__("tb_perfdiag").load(str(p), max_bytes=128_000_000))
    assert isinstance(out, TraceTooLarge), out
    assert "decompresses to more than the 128 MB budget" in out.reason
    # what was held: a read block, a decoded chunk and those decoded ahead of it
    # (storage.read_ahead: 4 MB each; as many as the walk-ahead may hold pending where
    # the native scanner walks ahead), the scanner's unit and working set (the
    # reference's: index arrays and Python objects of a bounded run of events), whatever
    # the 128 MB out
    ahead = 1
    if scanner == "native" and native_scan is not None and native_scan.walk_ahead():
        ahead = native_scan.KinetoStream.pending_chunks()
    limit = (28e6 if scanner == "native" else 52e6) + (ahead - 1) * storage.DECODED_CHUNK
    assert peak < limit, f"peak {peak / 1e6:.1f} MB, limit {limit / 1e6:.1f} MB"


def test_plain_json_is_read_in_chunks(tmp_path, monkeypatch):
    """A plain .json is scanned a block at a time: no read asks for more than a block,
    and the memory held stays far below the file's size."""
    pad = "x" * 900
    events = ",".join(
        f'{{"ph": "X", "cat": "cpu_op", "name": "op{i % 7}", "pid": 1, "tid": 1, '
        f'"ts": {i * 10}, "dur": 5, "args": {{"pad": "{pad}"}}}}' for i in range(40_000))
    p = tmp_path / "w0.1.pt.trace.json"
    p.write_text('{"schemaVersion": 1, "traceEvents": [' + events + '], "displayTimeUnit": "ns"}')
    size = os.path.getsize(p)
    asked = []
    real_open = storage.open_file

    def spying_open(*a, **kw):
        f = real_open(*a, **kw)
        inner = f._f

        class Spy:
            def __getattr__(self, name):
                return getattr(inner, name)

            def read(self, n=-1):
                asked.append(n)
                return inner.read(n)
        f._f = Spy()
        return f
    monkeypatch.setattr(storage, "open_file", spying_open)
    import tb_perfdiag.trace as trace_mod
    monkeypatch.setattr(trace_mod, "open_file", spying_open)
    tr, peak = _peak_while(lambda: trace_mod.load(str(p)))
    assert not isinstance(tr, Exception), tr
    assert tr.n_events == 40_000
    assert asked and all(0 < n <= storage.READ_BLOCK for n in asked), asked[:5]
    assert size > 36e6 and peak < size / 3, f"peak {peak / 1e6:.1f} MB for {size / 1e6:.0f} MB"


def test_fsspec_file_is_streamed(tmp_path, monkeypatch):
    """A file behind an fsspec URL is read a block at a time too, and answers as the
    same file on disk."""
    import fsspec
    import tb_perfdiag
    raw = gzip.compress(open(KINETO, "rb").read())
    url = f"memory://stream24-{os.getpid()}/w0.1.pt.trace.json.gz"
    fs = fsspec.filesystem("memory")
    with fs.open(url, "wb") as f:
        f.write(raw)
    asked = []
    real = fs.open

    def spying(path, mode="rb", **kw):
        f = real(path, mode, **kw)
        read = f.read

        def spy(n=-1):
            asked.append(n)
            return read(n)
        f.read = spy
        return f
    monkeypatch.setattr(fs, "open", spying)
    try:
        remote = tb_perfdiag.load(url, max_bytes=50_000_000)
        # gzip decoded as a stream: a block at a time, never the whole at once
        assert asked and all(0 < n <= storage.READ_BLOCK for n in asked), asked[:5]
        local = tb_perfdiag.load(KINETO)
        assert remote.n_events == local.n_events
        assert (remote.ts == local.ts).all() and (remote.dur == local.dur).all()
        # over the budget: 413 at the budget, as for a local file
        with pytest.raises(TraceTooLarge):
            tb_perfdiag.load(url, max_bytes=len(raw) + 1000)
    finally:
        fs.rm(f"memory://stream24-{os.getpid()}", recursive=True)


def test_read_ahead_keeps_order_and_errors_and_stops_when_closed():
    """The gunzip thread hands chunks over in order, its error where it happened, and
    stops (closing its source) when the reader stops early."""
    import threading
    from tb_perfdiag.storage import read_ahead

    def numbers(n, fail_at=None):
        for i in range(n):
            if i == fail_at:
                raise TraceError("w.pt.trace.json.gz", f"corrupt gzip data at {i}")
            yield i

    assert list(read_ahead(numbers(50))) == list(range(50))
    got = []
    with pytest.raises(TraceError, match="corrupt gzip data at 7"):
        for x in read_ahead(numbers(50, fail_at=7)):
            got.append(x)
    assert got == list(range(7))

    closed = threading.Event()

    def endless():
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.set()

    it = read_ahead(endless())
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    it.close()
    assert closed.is_set()
    assert not any(t.name == "tb-perfdiag-read-ahead" for t in threading.enumerate())
