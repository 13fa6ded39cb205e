"""The sdist carries what its own tests read: built here, its file list must hold the
bundled traces, the scripts the tests run, the C sources and the pytest configuration —
every path below ROOT that a test names."""
from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import tarfile

from conftest import ROOT


def test_sdist_ships_what_its_tests_read(tmp_path):
    # egg-info and the tarball into tmp: nothing written into the checkout
    r = subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path),
                        "sdist", "-d", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    (tar,) = glob.glob(str(tmp_path / "*.tar.gz"))
    with tarfile.open(tar) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    tracked = subprocess.run(["git", "ls-files", "tests", "testdata", "scripts", "native"],
                             cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode == 0 and tracked.stdout:
        want = set(tracked.stdout.split())
    else:                                   # not a git checkout (an unpacked sdist itself)
        want = {os.path.relpath(p, ROOT) for d in ("tests", "testdata", "scripts", "native")
                for p in glob.glob(os.path.join(ROOT, d, "**", "*"), recursive=True)
                if os.path.isfile(p) and "__pycache__" not in p}
    missing = sorted(want - names)
    assert not missing, missing[:20]
    # and every top-level path a test joins to ROOT
    joined = set()
    for p in glob.glob(os.path.join(ROOT, "tests", "*.py")):
        joined |= set(re.findall(r'os\.path\.join\(ROOT, "([\w.-]+)"', open(p).read()))
    # made by the tests (their artifacts) or outside the project (the shared traces)
    joined -= {"..", "test-artifacts"}
    assert joined and all(any(n == j or n.startswith(j + "/") for n in names) for j in joined), \
        sorted(j for j in joined if not any(n == j or n.startswith(j + "/") for n in names))
    assert "pytest.ini" in names
