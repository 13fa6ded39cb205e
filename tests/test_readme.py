"""The first page: README.md is short, its links lead somewhere, and the commands it shows
run as written right after ``bash scripts/demo.sh`` (on the logdir that script lays out)."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

from conftest import ROOT

README = os.path.join(ROOT, "README.md")
MAX_WORDS = 800


def _text() -> str:
    with open(README, encoding="utf-8") as f:
        return f.read()


def test_readme_is_a_first_page():
    words = len(_text().split())
    assert words <= MAX_WORDS, f"README.md has {words} words (at most {MAX_WORDS}): move " \
                               "reference into docs/"
    # what it promises to show: the two commands and a screenshot of the tab
    assert "    bash scripts/demo.sh" in _text() and "    bash scripts/test.sh" in _text()


def test_every_docs_link_exists():
    links = re.findall(r"\]\(((?:docs/|SECURITY)[^)#\s]*)", _text())
    assert any(x.endswith(".png") for x in links) and len(links) > 5
    for link in links:
        assert os.path.isfile(os.path.join(ROOT, link)), f"README.md links {link}, which is missing"
    # and the docs' links to each other
    docs = os.path.join(ROOT, "docs")
    for name in os.listdir(docs):
        if name.endswith(".md"):
            text = open(os.path.join(docs, name), encoding="utf-8").read()
            for link in re.findall(r"\]\(([\w.-]+\.md)", text):
                assert os.path.isfile(os.path.join(docs, link)), f"docs/{name} links {link}"


def test_the_readme_commands_run_as_written_after_the_demo(tmp_path):
    """Each ``.venv/bin/tb-perfdiag …`` line of README.md, on the logdir demo.sh writes
    (``.demo-logdir``, laid out here by the same script): it runs, and says what the
    README says it says (check fails its budgets: exit 1)."""
    demo = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "demo_logdir.py"),
                           str(tmp_path / ".demo-logdir")], capture_output=True, text=True)
    assert demo.returncode == 0, demo.stderr
    lines = [x.strip() for x in _text().splitlines() if x.startswith("    .venv/bin/tb-perfdiag ")]
    assert len(lines) >= 3
    outs = {}
    for line in lines:
        argv = shlex.split(line)[1:]
        r = subprocess.run([sys.executable, "-m", "tb_perfdiag.cli", *argv], cwd=str(tmp_path),
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == (1 if argv[0] == "check" else 0), (line, r.stderr[-2000:])
        assert "error" not in r.stderr, (line, r.stderr)
        outs[" ".join(argv[:2])] = r.stdout
    pod = outs["diagnose .demo-logdir/01b_real_jax_pod_straggler"]
    assert "1 straggler(s):" in pod and "\n  host2: " in pod
    assert "FAIL" in next(v for k, v in outs.items() if k.startswith("check"))
