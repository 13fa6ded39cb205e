"""Discovery: Kineto JSON under any name (by content), one span rule for every consumer,
spans named by capture time, and every logdir URL TensorBoard takes."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import TESTDATA, call
from tb_perfdiag.api import trace_files
from tb_perfdiag.cache import DiagnosisCache
from tb_perfdiag.discovery import Catalog, has_trace_events, scan_logdir, span_label, span_time
from tb_perfdiag.service import DiagnosisService
from tb_perfdiag.testing import TraceBuilder

SYN = os.path.join(TESTDATA, "synthetic", "logdir")


def _one(name):
    d = os.path.join(SYN, name)
    return os.path.join(d, sorted(f for f in os.listdir(d) if f.endswith(".json"))[0])


def _kineto_with_long_header(n_gpus: int = 16) -> bytes:
    """A Kineto trace whose traceEvents key comes after ~16 KB of deviceProperties, as
    HTA's cpu_only and 8-GPU traces have it."""
    doc = json.loads(open(_one("kineto_sync_nonzero"), "rb").read())
    props = [{"id": i, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85_000_000_000,
              "pad": "p" * 900} for i in range(n_gpus)]
    head = {"schemaVersion": 1, "deviceProperties": props}
    head.update((k, v) for k, v in doc.items() if k not in head)
    return json.dumps(head).encode()


def test_kineto_json_with_other_names_is_found_by_content(tmp_path):
    ld = tmp_path / "ld"
    (ld / "ranks").mkdir(parents=True)
    body = _kineto_with_long_header()
    assert body.index(b'"traceEvents"') > 15_000
    (ld / "ranks" / "rank-0.json.gz").write_bytes(gzip.compress(body))
    shutil.copy(_one("kineto_data_loading"), ld / "ranks" / "rank-1.json")   # export_chrome_trace
    # not traces: an execution trace, a config, a JSON array, a trace under the Profile plugin
    (ld / "ranks" / "model_et.json.gz").write_bytes(gzip.compress(b'{"schema": "1.0.1", "nodes": []}'))
    (ld / "ranks" / "config.json").write_text('{"lr": 0.1, "note": "traceEvents"}'[:20] + '"}')
    (ld / "ranks" / "list.json").write_text('[{"traceEvents": []}]')
    prof = ld / "jax" / "plugins" / "profile" / "2026_01_01_00_00_00"
    prof.mkdir(parents=True)
    (prof / "host.trace.json.gz").write_bytes(gzip.compress(body))
    runs = scan_logdir(str(ld))
    assert list(runs) == ["ranks"]
    assert sorted(s.host for s in runs["ranks"].sources) == ["rank-0", "rank-1"]
    # and they are analysed like any Kineto trace
    svc = DiagnosisService(Catalog(str(ld)), DiagnosisCache(disk_dir=None))
    status, body = call(svc, "diagnosis", {"run": "ranks", "host": "rank-0"})
    assert status == 200 and body["gaps_total"] > 0


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_named_pipe_named_json_does_not_block_the_listing(tmp_path):
    ld = tmp_path / "ld" / "run"
    ld.mkdir(parents=True)
    os.mkfifo(ld / "stuck.json")
    assert has_trace_events(str(ld / "stuck.json")) is False
    assert scan_logdir(str(tmp_path / "ld")) == {}


def test_span_names_are_capture_times():
    assert span_time("1795324137232776410") == pytest.approx(1795324137.232776410)   # ns
    assert span_time("1623143089861") == pytest.approx(1623143089.861)               # ms
    assert span_time("1700000000") == 1700000000.0                                    # s
    assert span_time("1102") is None and span_time("") is None and span_time("abc") is None


def _two_spans(dst, worker, older_src, newer_src, older, newer):
    os.makedirs(dst, exist_ok=True)
    shutil.copy(older_src, os.path.join(dst, f"{worker}.{older}.pt.trace.json"))
    shutil.copy(newer_src, os.path.join(dst, f"{worker}.{newer}.pt.trace.json"))


def test_one_span_rule_for_listing_api_and_pod_summary(tmp_path):
    """The latest capture by time, not by the larger number: a name in ms (2026) is later
    than one in ns (2025) though its number is far smaller."""
    ld = tmp_path / "ld"
    older, newer = "1750000000000000000", "1790000000000"      # ns (2025), ms (2026)
    for w in ("hosta", "hostb"):
        _two_spans(ld / "run", w, _one("kineto_sync_nonzero"), _one("kineto_data_loading"),
                   older, newer)
    cat = Catalog(str(ld))
    assert cat.find("run", "hosta").span == newer
    js = cat.runs()["run"].to_json()
    spans = js["hosts"][0]["spans"]
    assert [s["name"] for s in spans] == [older, newer]            # chronological
    assert [s["latest"] for s in spans] == [False, True]
    assert spans[1]["label"] == "2026-09-21 14:13:20.000 UTC"
    svc = DiagnosisService(cat, DiagnosisCache(disk_dir=None))
    _, api = call(svc, "diagnosis", {"run": "run", "host": "hosta"})
    _, pinned = call(svc, "diagnosis", {"run": "run", "host": "hosta", "span": newer})
    _, pod = call(svc, "hosts", {"run": "run", "wait": "1"})
    row = next(r for r in pod["hosts"] if r["host"] == "hosta")
    assert row["span"] == newer
    # the pod row's duty is the one the host page leads with: over the device's steps
    # window (its activity and the steps on it), where its idle by cause adds up
    assert api["devices"][0]["steps_window"]["duty_cycle"] == \
        pinned["devices"][0]["steps_window"]["duty_cycle"] == row["devices"][0]["duty_cycle"]
    assert api["devices"][0]["duty_cycle"] == pinned["devices"][0]["duty_cycle"]


def test_span_without_a_time_goes_by_modification_time(tmp_path):
    ld = tmp_path / "ld" / "run"
    ld.mkdir(parents=True)
    a, b = ld / "w.7.pt.trace.json", ld / "w.12.pt.trace.json"
    shutil.copy(_one("kineto_sync_nonzero"), a)
    shutil.copy(_one("kineto_data_loading"), b)
    os.utime(a, (2_000_000_000, 2_000_000_000))     # "7" was written last
    os.utime(b, (1_900_000_000, 1_900_000_000))
    src = Catalog(str(tmp_path / "ld")).find("run", "w")
    assert src.span == "7" and span_label(src).startswith("7 (written 2033-")


def test_cli_and_api_take_file_urls_and_fsspec_folders(tmp_path):
    import fsspec
    folder = os.path.join(TESTDATA, "captures", "torch_cpu")
    r = subprocess.run([sys.executable, "-m", "tb_perfdiag.cli", "info", "file://" + folder],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("format: kineto") == 2 and "2026-11-22 05:08:57" in r.stdout
    fs = fsspec.filesystem("memory")
    for f in os.listdir(folder):
        fs.pipe(f"/bucket16/logs/run1/{f}", open(os.path.join(folder, f), "rb").read())
    fs.pipe("/bucket16/logs/run2/rank-0.json.gz", gzip.compress(_kineto_with_long_header()))
    try:
        for url in ("memory://bucket16/logs", "memory://bucket16/logs/"):
            labels = [label for label, _ in trace_files(url)]
            assert len(labels) == 3 and labels[-1] == "run2 · rank-0", labels
        one = trace_files("memory://bucket16/logs/run2/rank-0.json.gz")
        assert one == [("rank-0.json.gz", "memory://bucket16/logs/run2/rank-0.json.gz")]
    finally:
        fs.rm("/bucket16", recursive=True)


def test_compare_and_check_take_folder_urls():
    a = "file://" + os.path.join(SYN, "kineto_data_loading")
    b = "file://" + os.path.join(SYN, "kineto_sync_nonzero")
    run = lambda *args: subprocess.run([sys.executable, "-m", "tb_perfdiag.cli", *args],  # noqa: E731
                                       capture_output=True, text=True, timeout=300)
    r = run("check", a, "--min-duty", "0.5")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout and "2026-11-23 02:14:21.000 UTC" in r.stdout
    r = run("compare", a, b)
    assert r.returncode == 0, r.stderr
