"""What a newcomer meets first, outside the page: a folder whose profiles are not where
discovery looks (a bare XSpace, links, a .pftrace) says what it found and skipped and
why; links that stay inside the logdir are followed; the CLI and the routes say which
reader runs (native, or pure Python and how to get the native one)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import TESTDATA, call
from tb_perfdiag.cache import DiagnosisCache
from tb_perfdiag.discovery import Catalog, scan_logdir
from tb_perfdiag.service import DiagnosisService
from tb_perfdiag.trace import TraceError, load

KINETO = os.path.join(TESTDATA, "captures", "torch_cpu",
                      sorted(f for f in os.listdir(os.path.join(TESTDATA, "captures", "torch_cpu"))
                             if f.endswith(".json"))[0])
XPLANE = next(os.path.join(d, f) for d, _, fs in sorted(os.walk(os.path.join(
    TESTDATA, "synthetic", "logdir"))) for f in sorted(fs) if f.endswith(".xplane.pb"))
posix_only = pytest.mark.skipif(os.name != "posix", reason="links and O_NOFOLLOW are POSIX")
# a Perfetto protobuf trace: Trace{packet=1: TracePacket{timestamp=8: 1, …}}
PERFETTO = b"\x0a\x06\x40\x01\xc8\x01\x02\x00" + b"\x0a\x02\x40\x02" * 8


def _cli(*args):
    # the package this process imports, not a source tree in the working folder (an
    # unpacked sdist holds one, without the built extension)
    return subprocess.run([sys.executable, "-m", "tb_perfdiag.cli", *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONSAFEPATH": "1"})


def _logdir(tmp_path):
    """run_a: a trace; linked/: a link to it (inside); outside: a run folder linked in
    from outside the logdir (read, as TensorBoard reads it); bare/x.xplane.pb: outside
    the Profile layout; pf/: a .pftrace of Kineto JSON and one of Perfetto protobuf."""
    ld, ext = tmp_path / "ld", tmp_path / "elsewhere"
    (ld / "run_a").mkdir(parents=True)
    (ext / "r").mkdir(parents=True)
    shutil.copy(KINETO, ld / "run_a" / "w0.1700000000000.pt.trace.json")
    shutil.copy(KINETO, ext / "r" / "w5.1700000000000.pt.trace.json")
    (ld / "linked").mkdir()
    os.symlink(ld / "run_a" / "w0.1700000000000.pt.trace.json",
               ld / "linked" / "w1.1700000000001.pt.trace.json")
    (ld / "plugins_elsewhere").mkdir()
    os.symlink(ld / "run_a", ld / "plugins_elsewhere" / "same_run")   # a folder, inside
    os.symlink(ext / "r", ld / "outside")
    (ld / "bare").mkdir()
    shutil.copy(XPLANE, ld / "bare" / "x.xplane.pb")
    (ld / "pf").mkdir()
    shutil.copy(KINETO, ld / "pf" / "w2.pftrace")
    (ld / "pf" / "w3.pftrace").write_bytes(PERFETTO)
    return ld


@posix_only
def test_listing_follows_links_inside_and_says_what_it_skipped(tmp_path):
    ld = _logdir(tmp_path)
    skipped = []
    runs = scan_logdir(str(ld), skipped)
    assert sorted(runs) == ["linked", "outside", "pf", "run_a"]
    # a linked file is read where it is (no link below the root on the read path)
    (src,) = runs["linked"].sources
    assert src.host == "w1" and str(src.path) == os.path.realpath(
        ld / "run_a" / "w0.1700000000000.pt.trace.json")
    assert load(src.path).summary()["events"] > 0
    # a .pftrace holding Kineto JSON is a run; one holding Perfetto protobuf is said
    assert [s.host for s in runs["pf"].sources] == ["w2"]
    why = {s.path: s.reason for s in skipped}
    assert "Perfetto protobuf" in why["pf/w3.pftrace"] and "not read yet" in why["pf/w3.pftrace"]
    assert "plugins/profile" in why["bare/x.xplane.pb"]
    # a run linked in from elsewhere is read there, confined to the linked folder
    (out,) = runs["outside"].sources
    assert out.host == "w5" and out.path.root == os.path.realpath(tmp_path / "elsewhere" / "r")
    assert load(out.path).summary()["events"] > 0
    # the folder linked twice inside the logdir is listed once
    assert not any("same_run" in s.path for s in skipped)
    assert all(src.path.startswith(src.path.root) for r in runs.values()
               for src in r.sources)


@posix_only
def test_tensorboard_listing_says_what_it_skipped(tmp_path):
    ld = _logdir(tmp_path)
    cat = Catalog(str(ld))
    assert sorted(cat.runs()) == ["linked", "outside", "pf", "run_a"]
    paths = {s.path for s in cat.skipped()}
    assert {"bare/x.xplane.pb", "pf/w3.pftrace"} == paths
    svc = DiagnosisService(cat, DiagnosisCache(disk_dir=None))
    status, body = call(svc, "diagnosis", {"run": "linked", "host": "w1"})
    assert status == 200, body


def test_perfetto_protobuf_is_named_plainly(tmp_path):
    p = tmp_path / "x.pftrace"
    p.write_bytes(PERFETTO)
    with pytest.raises(TraceError, match="Perfetto protobuf trace.*not read yet"):
        load(str(p))
    r = _cli("info", str(p))
    assert r.returncode == 3 and "Perfetto protobuf" in r.stderr and r.stdout == ""
    shutil.copy(KINETO, tmp_path / "y.pftrace")       # the same JSON under that name
    assert load(str(tmp_path / "y.pftrace")).summary()["format"] == "kineto"


@posix_only
def test_cli_says_what_it_skipped(tmp_path):
    ld = _logdir(tmp_path)
    r = _cli("diagnose", str(ld))
    assert r.returncode == 0, r.stderr
    notes = [x for x in r.stderr.splitlines() if x.startswith("tb-perfdiag: note: skipped")]
    assert len(notes) == 2 and any("plugins/profile" in x for x in notes)
    assert "linked · w1" in r.stdout and "pf · w2" in r.stdout and "outside · w5" in r.stdout
    # nothing readable: the error names what was found instead
    only = tmp_path / "only"
    (only / "x").mkdir(parents=True)
    shutil.copy(XPLANE, only / "x" / "host.xplane.pb")
    r = _cli("diagnose", str(only))
    assert r.returncode == 3 and r.stdout == ""
    (line,) = r.stderr.strip().splitlines()
    assert "no profiles found" in line and "x/host.xplane.pb" in line and "plugins/profile" in line


_NO_NATIVE = ("import sys; sys.modules['tb_perfdiag._native'] = None; "
              "from tb_perfdiag.cli import main; sys.exit(main(sys.argv[1:]))")


def test_which_reader_runs_is_said():
    native = pytest.importorskip("tb_perfdiag._native")
    assert native
    r = _cli("--version")
    assert r.returncode == 0 and "reader: native" in r.stdout
    assert "reader: native" in _cli("info", KINETO).stdout
    # the extension not built (its import fails): every place says so, and how to fix it
    for args in (["--version"], ["info", KINETO]):
        r = subprocess.run([sys.executable, "-c", _NO_NATIVE, *args], capture_output=True,
                           text=True, timeout=300, env={**os.environ, "PYTHONSAFEPATH": "1"})
        assert r.returncode == 0, r.stderr
        assert "reader: pure Python" in r.stdout and "C compiler" in r.stdout
    svc = DiagnosisService(Catalog(os.path.dirname(KINETO)), DiagnosisCache(disk_dir=None))
    assert svc.status()["reader"] == "native"
