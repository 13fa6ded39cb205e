"""The console command prints the same diagnosis the plugin serves."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import TESTDATA


def _run(*args):
    return subprocess.run([sys.executable, "-m", "tb_perfdiag.cli", *args], capture_output=True,
                          text=True, timeout=300)


def test_info_lists_tracks_and_steps():
    r = _run("info", os.path.join(TESTDATA, "captures", "torch_xla_cpu"))
    assert r.returncode == 0, r.stderr
    assert "CPU (XLA)" in r.stdout and "steps: 12 (0..11)" in r.stdout
    assert "python" in r.stdout


def test_diagnose_report_and_json():
    path = os.path.join(TESTDATA, "captures", "jax_cpu")
    r = _run("diagnose", path)
    assert r.returncode == 0, r.stderr
    assert "duty cycle" in r.stdout and "recompilation" in r.stdout.lower() and "fix:" in r.stdout
    j = _run("diagnose", path, "--json", "--threshold-us", "10")
    d = json.loads(j.stdout)
    assert d["schema_version"] == 1 and d["options"]["threshold_us"] == 10
    assert all(g["duration_ns"] >= 10_000 for g in d["gaps"])
    one = _run("diagnose", path, "--json", "--step", "5")
    assert {g["step"] for g in json.loads(one.stdout)["gaps"]} <= {5}


def test_bad_file_exit_code(tmp_path):
    p = tmp_path / "bad.pt.trace.json"
    p.write_text("{not json")
    r = _run("diagnose", str(p))
    assert r.returncode == 1 and "ERROR" in r.stdout and "JSON" in r.stdout
