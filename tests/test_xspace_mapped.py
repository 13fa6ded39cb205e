"""A local XSpace is scanned where it lies (a read-only mapping), not copied into the
process: its bytes stay page cache, the mapping is gone once the trace is built, and a
file that shrinks under the scan is an error for that file, never a crash (SIGBUS).

Each measurement runs in a subprocess, so that a crash is a failed test, not a dead
test run, and the memory figures are that load's alone."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tb_perfdiag.testing.xspace import pb_int, pb_len, pb_str

try:
    from tb_perfdiag.trace import native_scan
except ImportError:  # the extension is optional; the reader then reads the file
    native_scan = None

pytestmark = [
    pytest.mark.skipif(native_scan is None or not native_scan.HAS_MAPPED,
                       reason="native scanner with the mapped entry not built (or not POSIX)"),
    pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc"),
]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _xspace(n_events: int, detail_bytes: int = 1000) -> bytes:
    """One GPU stream of ``n_events`` kernels, each with a long ``kernel_details`` string
    (the same one: interned once), so the file is large and its columns small."""
    detail = ("x" * detail_bytes).encode()
    stat = pb_len(4, pb_int(1, 7) + pb_len(5, detail))
    events = b"".join(pb_len(4, pb_int(1, 1) + pb_int(2, k * 2000 + 1) + pb_int(3, 1000) + stat)
                      for k in range(n_events))
    line = pb_int(1, 1) + pb_str(2, "Stream #7(Compute)") + pb_int(3, 1_000_000) + events
    ev_md = pb_len(4, pb_int(1, 1) + pb_len(2, pb_int(1, 1) + pb_str(2, "gemm_kernel")))
    st_md = pb_len(5, pb_int(1, 7) + pb_len(2, pb_int(1, 7) + pb_str(2, "kernel_details")))
    plane = pb_int(1, 1) + pb_str(2, "/device:GPU:0") + pb_len(3, line) + ev_md + st_md
    return pb_len(1, plane)


@pytest.fixture(scope="module")
def big_xspace(tmp_path_factory):
    """~120 MB, 115 k events."""
    path = tmp_path_factory.mktemp("mapped") / "big.xplane.pb"
    path.write_bytes(_xspace(115_000))
    return str(path)


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TB_PERFDIAG_NO_NATIVE", None)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, env=env, timeout=300)


def test_xspace_bytes_are_not_copied_into_the_process(big_xspace, tmp_path):
    small = tmp_path / "small.xplane.pb"
    small.write_bytes(_xspace(50))
    p = _run("""
        import json, sys
        import tb_perfdiag

        def status(key):
            for line in open("/proc/self/status"):
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024

        tb_perfdiag.load(sys.argv[2])            # imports and first-use costs
        try:                                     # peak RSS from here on
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass
        before = status("VmRSS")
        tr = tb_perfdiag.load(sys.argv[1])
        print(json.dumps({"growth": status("VmHWM") - before, "events": int(tr.n_events)}))
    """, big_xspace, str(small))
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    size = os.path.getsize(big_xspace)
    assert got["events"] == 115_000
    # a copy of the file alone would be `size`; columns of 115 k events are ~5 MB and
    # the pages mapped at once ~32 MB
    assert got["growth"] < size / 2, (got, size)


def test_the_mapping_is_released_once_the_trace_is_built(big_xspace):
    p = _run("""
        import sys
        import tb_perfdiag
        tr = tb_perfdiag.load(sys.argv[1])
        maps = open("/proc/self/maps").read()
        print("mapped" if sys.argv[1] in maps else "released", tr.n_events)
    """, big_xspace)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["released", "115000"]


def test_a_file_truncated_under_the_scan_is_an_error_not_a_crash(big_xspace, tmp_path):
    victim = tmp_path / "victim.xplane.pb"
    with open(big_xspace, "rb") as src, open(victim, "wb") as dst:
        dst.write(src.read())
    p = _run("""
        import os, sys
        import tb_perfdiag
        from tb_perfdiag import storage
        from tb_perfdiag.trace import TraceError

        mapped = storage.OpenFile.mapped

        def shrinking(self):
            # the file is cut short after it was mapped, before its pages are read
            m = mapped(self)
            os.truncate(self.path, 4096)
            return m

        storage.OpenFile.mapped = shrinking
        try:
            tb_perfdiag.load(sys.argv[1])
            print("loaded")
        except TraceError as e:
            print("TraceError:", e.reason)
        storage.OpenFile.mapped = mapped
        print("then", tb_perfdiag.load(sys.argv[2]).n_events)
    """, str(victim), big_xspace)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
    first, then = p.stdout.strip().splitlines()[-2:]
    assert first.startswith("TraceError:") and "shrank" in first, first
    assert then == "then 115000"


def test_a_sigbus_elsewhere_still_ends_the_process(tmp_path):
    """The guard answers only for the scan's own mapping: any other bus error goes to
    the handler that was there before (here the default: the process ends)."""
    f = tmp_path / "t.xplane.pb"
    f.write_bytes(_xspace(2000))
    p = _run("""
        import mmap, os, sys
        from tb_perfdiag.trace import native_scan
        fd = os.open(sys.argv[1], os.O_RDONLY)
        m = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        native_scan.scan_xspace_mapped(m)          # installs the guard's handler
        os.truncate(sys.argv[1], 0)
        print("reading", flush=True)
        m[len(m) - 1]
        print("survived", flush=True)
    """, str(f))
    assert p.stdout.split() == ["reading"]
    assert p.returncode == -signal.SIGBUS, (p.returncode, p.stderr[-500:])


def test_mapped_and_read_scans_agree(tmp_path):
    import mmap
    import numpy as np
    f = tmp_path / "t.xplane.pb"
    f.write_bytes(_xspace(3000, detail_bytes=50))
    raw = f.read_bytes()
    # the long string stat kept, so that its value is copied out of the mapping
    wanted = ("kernel_details",)
    a = native_scan.scan_xspace(raw, wanted=wanted)
    with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
        b = native_scan.scan_xspace_mapped(m, wanted=wanted)
        # the result holds no view of the mapping (closing it would raise BufferError)
    assert a.keys() == b.keys()
    assert b["strings"] == [b"x" * 50]
    assert list(a["stats"]) == list(b["stats"]) == ["kernel_details"]
    for x, y in zip(a["stats"]["kernel_details"], b["stats"]["kernel_details"]):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    assert b["stats"]["kernel_details"][0].shape == (3000,)
    for k in a:
        if isinstance(a[k], np.ndarray):
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k
        elif k != "stats":
            assert a[k] == b[k], k
