"""Rough edges a new user hit (issue 26): an unreachable scheduler is one line, progress
in a log is a few lines, one-time costs are totals, figures over several devices are per
device, gap links read as durations and steps, and the pod generator checks its indices."""
from __future__ import annotations

import io
import os
import re
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import ROOT, TESTDATA
import tb_perfdiag
from tb_perfdiag.cli import PodProgress
from tb_perfdiag.render.json import diagnosis_json, gap_records

CAPTURES = os.path.join(TESTDATA, "captures")
SYN = os.path.join(TESTDATA, "synthetic", "logdir")
CLI = os.path.join(os.path.dirname(sys.executable), "tb-perfdiag")
GEN = os.path.join(TESTDATA, "generators", "synthetic.py")


def _profiles(folder):
    out = []
    for dirpath, _, files in os.walk(folder):
        out += [os.path.join(dirpath, f) for f in files
                if f.endswith((".xplane.pb", ".pt.trace.json", ".pt.trace.json.gz"))]
    return sorted(out)


@pytest.fixture(scope="module")
def small_pod(tmp_path_factory):
    d = tmp_path_factory.mktemp("pod")
    subprocess.run([sys.executable, GEN, "--pod", str(d / "pod"), "--hosts", "4",
                    "--events", "2000"], check=True, capture_output=True)
    return d


# ---- 1. an unreachable scheduler ---------------------------------------------------------
def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                         # nothing listens there now
    return port


def test_unreachable_scheduler_is_one_line_naming_it_and_exit_3(small_pod):
    addr = f"tcp://127.0.0.1:{_closed_port()}"
    t0 = time.monotonic()
    p = subprocess.run([CLI, "diagnose", str(small_pod), "--scheduler", addr,
                        "--connect-timeout", "2", "--results", str(small_pod / "store")],
                       capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    assert p.returncode == 3, p.stderr
    assert p.stdout == ""                                  # no table of error rows
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    errors = [x for x in lines if x.startswith("tb-perfdiag: error:")]
    assert len(errors) == 1, p.stderr
    assert addr in errors[0] and "check" in errors[0] and "2 s" in errors[0]
    assert "ERROR" not in p.stderr and "\r" not in p.stderr
    assert took < 60, took          # Dask's own 30 s connect timeout is not what applies


def test_connect_timeout_is_validated():
    p = subprocess.run([CLI, "diagnose", ".", "--scheduler", "tcp://127.0.0.1:1",
                        "--connect-timeout", "nan"], capture_output=True, text=True)
    assert p.returncode == 2 and "connect-timeout" in p.stderr


# ---- 2. progress in a pipe ---------------------------------------------------------------
class _Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


def _poll(progress, total, polls_per_host=3):
    """What a pod job does: a call every second, whether a host finished or not."""
    progress("run", 0, total)
    for done in range(1, total + 1):
        for _ in range(polls_per_host):
            progress("run", done, total)


@pytest.mark.parametrize("total, most", [(16, 11), (4, 5), (1000, 11)])
def test_progress_in_a_pipe_is_a_line_per_tenth_without_carriage_returns(total, most):
    s = _Stream(tty=False)
    _poll(PodProgress(s), total)
    out = s.getvalue()
    assert "\r" not in out
    lines = out.splitlines()
    assert 2 <= len(lines) <= most, lines
    assert len(set(lines)) == len(lines)                   # never the same line twice
    assert lines[-1] == f"run: {total}/{total} hosts"


def test_progress_on_a_terminal_rewrites_one_line():
    s = _Stream(tty=True)
    _poll(PodProgress(s), 16)
    out = s.getvalue()
    assert out.count("\r") == 17 and out.count("\n") == 1 and "\\x0d" not in out


# ---- 3. one-time costs are totals --------------------------------------------------------
def _all_findings():
    paths = _profiles(CAPTURES) + _profiles(SYN)
    return [(p, tb_perfdiag.diagnose(p)) for p in paths]


@pytest.fixture(scope="module")
def reports():
    return _all_findings()


def test_one_time_compilation_is_a_total_with_its_share_of_the_capture(reports):
    seen = 0
    for path, rep in reports:
        doc = diagnosis_json(rep.diagnosis, 0, 0)
        for f in doc["findings"]:
            if f["kind"] in ("compilation", "graph_capture"):
                seen += 1
                assert "per step" not in f["title"], (path, f["title"])
                assert " in total" in f["title"] and "of the capture" in f["title"], f["title"]
                assert f["one_time"] is True and 0 < f["capture_share"] <= 1
                pct = float(re.search(r"\(([\d.]+)% of the capture\)", f["title"]).group(1))
                assert abs(pct / 100 - f["capture_share"]) < 0.01
            elif f.get("one_time"):
                # a cost paid only in the steps that compile or stall (never the typical
                # step) is said once, with those steps, not spread over every step
                assert f["time_lost_ns_per_step"] == 0 and "per step" not in f["title"], f
                assert " once, in step" in f["title"], f["title"]
    assert seen, "no one-time compilation among the bundled traces: the check checked nothing"


def test_recompilation_is_a_rate_or_said_in_its_steps(reports):
    """A recompilation in the typical steps costs per step; one only in the steps that
    compile or stall is their cost, said once with those steps (issue 63: never a per-step
    figure above the step)."""
    rec = [f for _, rep in reports for f in diagnosis_json(rep.diagnosis, 0, 0)["findings"]
           if f["kind"] == "recompilation"]
    assert rec
    for f in rec:
        if f["time_lost_ns_per_step"]:
            assert "per step" in f["title"], f["title"]
        else:
            assert " once, in step" in f["title"] and "per step" not in f["title"], f["title"]


# ---- 4. one cause over several devices is said per device --------------------------------
def test_a_cause_over_two_devices_is_said_per_device_never_added_up(reports):
    many = 0
    for path, rep in reports:
        diag = rep.diagnosis
        for f in diag.findings:
            rows = np.asarray(f.gaps, np.int64)
            if rows.size == 0 or "cause" not in f.extra:
                continue
            devs = np.unique(diag.gaps.device[rows])
            if devs.size < 2:
                assert "in total" in f.detail or "gap(s)" not in f.detail
                continue
            many += 1
            ci = f.extra["cause"]
            ci = ci if isinstance(ci, int) else tb_perfdiag.analysis.causes.ALL.index(ci)
            per = [int(np.rint(diag.gaps.shares[rows][diag.gaps.device[rows] == d, ci] / 1000)
                       .sum()) for d in devs]
            assert "in total" not in f.detail, f.detail
            assert f"on {devs.size} devices" in f.detail
            total = sum(per)
            # the added-up figure must not appear as the figure of the cause
            if max(per) < 0.9 * total:
                from tb_perfdiag.analysis.findings.common import _fmt
                assert f"takes {_fmt(total)}" not in f.detail, f.detail
    assert many, "no finding spans two devices in the bundled traces"


def test_two_tpus_h2d_reads_on_each_of_2_devices():
    rep = tb_perfdiag.diagnose(_profiles(os.path.join(SYN, "xla_tpu_two_devices"))[0])
    h2d = [f for f in rep.diagnosis.findings if f.kind.value == "h2d_transfer"]
    assert h2d
    # 19.8 ms on each TPU, not "39.6 ms in total"
    assert any(re.search(r"on 2 devices; host→device transfer takes 19\.\d ms of them on each "
                         r"device", f.detail) for f in h2d), [f.detail for f in h2d]


# ---- 5. gap links a user can read --------------------------------------------------------
def test_finding_evidence_names_gaps_by_duration_and_step(reports):
    checked = 0
    for path, rep in reports:
        diag = rep.diagnosis
        doc = diagnosis_json(diag, 0, 0)
        recs = {g["id"]: g for g in gap_records(diag, list(range(len(diag.gaps))))}
        for f in doc["findings"]:
            ev = f["evidence"]
            assert [r["id"] for r in ev["gap_refs"]] == ev["gaps"]
            for r in ev["gap_refs"]:
                g = recs[r["id"]]
                assert r["duration_ns"] == g["duration_ns"] and r["step"] == g["step"]
                assert r["device"] == diag.devices.name[g["device"]]
                checked += 1
    assert checked


def test_text_report_names_gaps_by_duration_and_step():
    path = _profiles(os.path.join(SYN, "kineto_data_loading"))[0]
    p = subprocess.run([CLI, "diagnose", path], capture_output=True, text=True, check=True)
    gaps = [x for x in p.stdout.splitlines() if x.startswith("   - ")]
    assert gaps
    for line in gaps:
        assert re.match(r"   - [\d.]+ (ms|µs|s) (in step \d+|before the first step) \(gap \d+-\d+\)",
                        line), line


# ---- 6. the pod generator checks its indices ---------------------------------------------
def test_pod_generator_defaults_to_a_straggler_that_exists(tmp_path):
    p = subprocess.run([sys.executable, GEN, "--pod", str(tmp_path / "p"), "--hosts", "16",
                        "--events", "1000"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert len(list((tmp_path / "p").rglob("*.xplane.pb"))) == 16
    assert "stragglers ['host04']" in p.stdout


@pytest.mark.parametrize("args, word", [(["--stragglers", "17"], "0 to 15"),
                                        (["--stragglers", "x"], "indices"),
                                        (["--hosts", "0"], "at least one")])
def test_pod_generator_refuses_indices_out_of_range(tmp_path, args, word):
    base = ["--hosts", "16"] if "--hosts" not in args else []
    p = subprocess.run([sys.executable, GEN, "--pod", str(tmp_path / "p"), "--events", "1000",
                        *base, *args], capture_output=True, text=True)
    assert p.returncode == 2 and word in p.stderr and "Traceback" not in p.stderr


def test_demo_logdir_help_lays_out_nothing(tmp_path):
    """``scripts/demo_logdir.py --help`` prints its usage; it once laid the demo out in a
    folder named ``--help``.  An unknown option is a usage error."""
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "scripts", "demo_logdir.py")
    ok = subprocess.run([sys.executable, script, "--help"], cwd=tmp_path,
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "DEST" in ok.stderr
    bad = subprocess.run([sys.executable, script, "--logdir"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert os.listdir(tmp_path) == []
