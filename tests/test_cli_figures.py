"""Every figure true and said once on the command line (issue 63): diagnose, check and
compare on the demo runs and a few real traces say no loss per step above the step, no
share over 100 %, no null/NaN, one value per figure across their faces; every
subcommand's error goes to stderr with its documented exit code."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import SHARED
from test_browser_story import _demo_order
from tb_perfdiag.testing import invariants as I
from tb_perfdiag.units import duration

REAL = [os.path.join(SHARED, *p) for p in (
    ("public", "xprof", "xprof", "convert", "test_xplanes", "tpu_inference_2.xplane.pb"),
    ("public", "tensorflow-profiler", "demo", "plugins", "profile", "GPU-multi-worker",
     "34.83.195.179_6003.xplane.pb"),
    ("public", "HolisticTraceAnalysis", "tests", "data", "mtia_trace_single_rank"))]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tb_perfdiag.cli", *args], capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    ld = tmp_path_factory.mktemp("cli-figures")
    return {n: str(ld / n) for n in _demo_order().build(str(ld))}


def _one_host(demo):
    return [p for n, p in demo.items() if "pod" not in n]


def _targets(demo):
    return _one_host(demo) + [p for p in REAL if os.path.exists(p)]


def test_diagnose_says_no_figure_a_reader_would_stop_at(demo):
    bad = {}
    for path in _targets(demo):
        r = _cli("diagnose", "--json", path)
        assert r.returncode == 0, (path, r.stderr)
        doc = json.loads(r.stdout)
        t = _cli("diagnose", path)
        probs = I.diagnosis(doc) + I.absurd(t.stdout)
        if doc.get("typical_step_ns"):
            probs += I.per_step_over_step(t.stdout, doc["typical_step_ns"])
        # the typical step the text says is the document's
        if doc.get("typical_step_ns") and f"typical step {duration(doc['typical_step_ns'])}" \
                not in t.stdout:
            probs.append(f"typical step {duration(doc['typical_step_ns'])} not said")
        if probs:
            bad[os.path.basename(path)] = probs
    assert not bad, bad


def test_the_one_time_losses_of_a_compiling_run_are_said_once(demo):
    """torch_xla: compiles in steps 0, 1, 5 and 9 of 12 (49.7 ms typical steps): its
    recompilation is paid once in the steps that compile, not 282 ms per step."""
    doc = json.loads(_cli("diagnose", "--json", demo["10_real_torch_xla_cpu"]).stdout)
    step = doc["typical_step_ns"]
    rec = [f for f in doc["findings"] if f["kind"] in ("recompilation", "compilation")]
    assert rec and all(f["time_lost_ns_per_step"] <= step for f in rec)
    assert any(f.get("one_time") for f in rec)
    dev = doc["devices"][0]
    assert dev["idle_per_step_ns"].get("compilation", 0) <= step
    assert dev["idle_once_ns"]["compilation"] > 10 * step


def test_check_says_the_loss_per_step_diagnose_says(demo):
    """One value per figure: check's idle per typical step is the diagnosis'."""
    path = demo["01_pytorch_gpu_input_bound"]
    doc = json.loads(_cli("diagnose", "--json", path).stdout)
    r = _cli("check", path, "--max-idle-cause", "data_loading=10%", "--json")
    assert r.returncode == 1
    checks = [c for p in json.loads(r.stdout)["profiles"] for c in p["checks"]]
    per = doc["devices"][0]["idle_per_step_ns"]["data_loading"]
    assert any(f"idle {duration(per)} per typical step" in c["message"] for c in checks), checks
    t = _cli("check", path, "--max-idle-cause", "data_loading=10%").stdout
    assert f"idle {duration(per)} per typical step" in t
    # the share is of the window it is of, said: never "of the step" beside another step
    assert "window per typical step" in t


def test_compare_says_a_recurring_loss_per_step_and_a_fixed_one_gone(demo):
    before, after = demo["01_pytorch_gpu_input_bound"], demo["03_pytorch_gpu_nonzero_sync"]
    r = _cli("compare", before, after)
    assert r.returncode == 0, r.stderr
    rows = [x for x in r.stdout.splitlines() if x.startswith("   - ") and "DataLoader" in x]
    assert rows and rows[0].split()[1] == "gone", rows
    back = _cli("compare", after, before).stdout
    grew = [x for x in back.splitlines() if x.startswith("   - ") and "DataLoader" in x]
    # a one-step loader before, one in every step after: a rate that grew, not "… once"
    assert grew and "once" not in grew[0].split("  ")[1] and "/step" in grew[0], grew
    assert not I.absurd(r.stdout, changes=True) and not I.absurd(back, changes=True)


def test_every_error_goes_to_stderr_with_its_exit_code(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [(("info", str(empty)), 3), (("diagnose", str(empty)), 3),
             (("check", str(empty), "--min-duty", "50%"), 3), (("compare", str(empty), str(empty)), 3),
             (("diagnose", str(tmp_path / "nope")), 3), (("check", str(tmp_path / "nope"), "--min-duty", "5%"), 3),
             (("diagnose", "--threshold-us", "nan", str(empty)), 2),
             (("check", str(empty)), 2), (("check", str(empty), "--min-duty", "abc"), 2)]
    for argv, code in cases:
        r = _cli(*argv)
        assert r.returncode == code, (argv, r.returncode, r.stderr)
        assert "error" in r.stderr and "Traceback" not in r.stderr, (argv, r.stderr)
        assert "error" not in r.stdout.lower() or argv[0] == "check", (argv, r.stdout)
