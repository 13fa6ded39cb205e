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


def _bomb(path, out_mb: int):
    """A gzip of ``out_mb`` MB of zeros (about 1/1000 of that on disk), written in pieces."""
    chunk = b"\0" * (1 << 20)
    with gzip.open(path, "wb", compresslevel=9) as f:
        for _ in range(out_mb):
            f.write(chunk)


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
    runs = scan_logdir(str(ld))
    assert time.monotonic() - started < 5            # the pipe was never opened
    assert sorted(runs) == ["ok"]


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
    assert status == 422 and "links in the logdir are not followed" in body["error"]


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


def test_gzip_bomb_is_capped_in_bytes_out(tmp_path):
    ld = tmp_path / "ld" / "bomb"
    ld.mkdir(parents=True)
    _bomb(ld / "w0.1.pt.trace.json.gz", 64)               # 64 MB out of ~64 KB
    assert os.path.getsize(ld / "w0.1.pt.trace.json.gz") < 1e6
    svc = _service(tmp_path / "ld", max_file_mb=8)
    status, body = call(svc, "diagnosis", {"run": "bomb", "host": "w0"})
    assert status == 413 and "decompresses to more than the 8 MB budget" in body["error"]
    # the same file is not decompressed again for other options
    status, _ = call(svc, "diagnosis", {"run": "bomb", "host": "w0", "threshold_us": "50"})
    assert status == 413 and svc.loads == 1


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
    """The memory reserved for a gzip comes from its trailer's size, which a hostile file
    can fake (and which wraps past 4 GiB): decompression stops at that figure, and the
    file is read again only once room for the whole budget was made."""
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
    assert svc.loads == 2                       # stopped at the claim, then the budget's worth
    (ld / "w0.1.pt.trace.json.gz").write_bytes(gzip.compress(raw))
    os.utime(ld / "w0.1.pt.trace.json.gz", (time.time() + 10, time.time() + 10))
    assert call(svc, "diagnosis", {"run": "r", "host": "w0"})[0] == 200 and svc.loads == 3
