"""What the profiler said it lost, as capture notes in ``warnings`` (issue 45): records
CUPTI dropped and device tracing stopped before the capture's end, as libkineto logs
them in a PyTorch trace's top-level "WARNING"/"INFO" lists and as XLA's GPU tracer
reports them in XSpace.warnings.  Each marker on a small trace written in memory and read
by both readers of its format (the native scanner and the pure-Python one), then the real
traces (skipped when ../shared is absent).

Builder times are µs.
"""
from __future__ import annotations

import gzip
import os

import pytest

import tb_perfdiag
from tb_perfdiag.testing import TraceBuilder
from tb_perfdiag.trace import kineto, native_scan
from tb_perfdiag.trace.losses import kineto_losses, xspace_losses
from tb_perfdiag.testing.kineto import kineto_bytes

from test_arithmetic import check_arithmetic, launch

SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..",
                      "shared", "traces")

# libkineto's log lines, as it writes them into the trace
K_DROPPED = ("WARNING:2024-05-22 17:15:23 2910249:2910249 CuptiActivityApi.cpp:265] "
             "Dropped 1234 activity records")
K_LIMIT = ("WARNING:2024-05-22 17:15:23 2910249:2910251 CuptiActivityApi.cpp:212] Exceeded "
           "max GPU buffer count (33 >= 32) - terminating tracing")
K_COUNTS = ("INFO:2024-05-22 17:15:23 2910249:2910249 CuptiActivityProfiler.cpp:333] Record "
            "counts: Out-of-range = 4181, Blocklisted runtime = 37458, Invalid ext "
            "correlations = 0, CPU GPU out-of-order = 0, Unexpected CUDA events = 0, CUPTI "
            "stopped early? = {}")
X_DROPPED = ("Detected GPU events dropped on host-a: Profiler has collected 1000 driver "
             "events and 2000 device events. 25 events dropped because cupti activity buffer "
             "full; 5 events dropped because total device(activity) events reaches max.")

READERS = ["native", "python"]


@pytest.fixture(params=READERS)
def reader(request, monkeypatch):
    """Which scanner reads the file: the C one (when built) or the reference."""
    if request.param == "python":
        monkeypatch.setenv("TB_PERFDIAG_NO_NATIVE", "1")
    else:
        monkeypatch.delenv("TB_PERFDIAG_NO_NATIVE", raising=False)
        if kineto.native_scanner() is None:
            pytest.skip("native extension not built")
    return request.param


def steps_trace(fmt: str = "kineto", device_steps: int = 4) -> TraceBuilder:
    """4 steps of 1000 µs; each launches a 600 µs gemm, the first ``device_steps`` of
    them recorded on the device."""
    b = TraceBuilder(fmt)
    main, s7 = b.thread("python main"), b.stream()
    for k in range(4):
        t = 1000 * k
        b.step(main, k, t, 1000)
        if k < device_steps:
            launch(b, main, s7, "gemm", t + 100, 5, t + 110, 600)
        else:
            b.op(main, "cudaLaunchKernel", t + 100, 5, cat="cuda_runtime")
    return b


def notes(b: TraceBuilder) -> list:
    d = tb_perfdiag.diagnose(b.build()).to_json()
    check_arithmetic(d)
    return d["warnings"]


def test_dropped_activity_records_are_a_capture_note(reader):
    b = steps_trace()
    b.header = {"WARNING": [K_DROPPED, K_DROPPED.replace("1234", "766")],
                "INFO": [K_COUNTS.format(0)]}
    w = notes(b)
    lost = [n for n in w if n.startswith("the profiler dropped")]
    assert len(lost) == 1, w
    assert "2,000 records" in lost[0] and "idle may be overstated" in lost[0]
    assert w[0] == lost[0]          # first: it bends every figure


def test_tracing_stopped_early_is_a_capture_note_with_where_it_stopped(reader):
    b = steps_trace(device_steps=2)
    b.header = {"WARNING": [K_LIMIT], "INFO": [K_COUNTS.format(1)]}
    w = notes(b)
    stop = [n for n in w if n.startswith("the profiler stopped recording device activity")]
    assert len(stop) == 1, w
    # the second step's gemm ends at 1710 µs of the 4000 µs capture
    assert "(33 >= 32 buffers)" in stop[0]
    assert "no device op ends after 1.71 ms of the 4.00 ms capture" in stop[0], stop[0]
    assert not any(n.startswith("the profiler dropped") for n in w)
    # and the steps it left without device work say so too
    assert any("2 of 4 steps ran no device work" in n for n in w), w


def test_the_record_counts_line_alone_says_stopped_early(reader):
    b = steps_trace(device_steps=3)
    b.header = {"INFO": [K_COUNTS.format(1)]}
    stop = [n for n in notes(b) if "stopped recording device activity" in n]
    assert len(stop) == 1 and "buffers)" not in stop[0]


def test_a_clean_kineto_log_makes_no_note(reader):
    b = steps_trace()
    b.header = {"INFO": [K_COUNTS.format(0), "INFO:... Processed 127395 GPU records"],
                "WARNING": ["WARNING:... CPU trace is empty!"]}
    assert not any("profiler" in n for n in notes(b))


def test_xspace_dropped_events_are_a_capture_note_not_a_raw_warning(reader):
    b = steps_trace("xspace")
    b.space_warnings = [X_DROPPED, "something else the profiler said"]
    w = notes(b)
    lost = [n for n in w if n.startswith("the profiler dropped")]
    assert len(lost) == 1, w
    assert "30 records" in lost[0]
    assert "(cupti activity buffer full; total device(activity) events reaches max)" in lost[0]
    # said once, in the note's words; the profiler's other warnings as they were
    assert not any("Detected GPU events dropped" in n for n in w), w
    assert "profiler warning: something else the profiler said" in w


def test_both_kineto_scanners_carry_the_profilers_log_lines():
    if kineto.native_scanner() is None:
        pytest.skip("native extension not built")
    raw = kineto_bytes([{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}],
                       WARNING=[K_LIMIT, K_DROPPED], INFO=[K_COUNTS.format(1)])
    ref = kineto.scan_python("memory.json", raw)["metadata"]
    nat = native_scan.scan_kineto(raw)["metadata"]
    assert ref == nat
    assert nat["WARNING"] == [K_LIMIT, K_DROPPED] and nat["INFO"] == [K_COUNTS.format(1)]
    # and the trace keeps what they lost, not the log
    t = kineto.read("memory.json", raw)
    assert "INFO" not in t.metadata and "WARNING" not in t.metadata
    assert t.metadata["losses"] == {"dropped": 1234, "why": ["CUPTI activity buffer"],
                                    "stopped_early": True, "limit": "33 >= 32",
                                    "said": [K_LIMIT, K_DROPPED, K_COUNTS.format(1)]}


def test_parsers_ignore_what_is_no_loss():
    assert kineto_losses({"INFO": K_COUNTS.format(0), "WARNING": "Dropped 0 activity records"}) \
        is None
    assert kineto_losses({"INFO": {"not": "a list"}, "WARNING": [3, None]}) is None
    assert xspace_losses(["w1", "w2"]) == (None, ["w1", "w2"])
    got, rest = xspace_losses(["Detected GPU events dropped on h: Profiler has collected 1 "
                               "driver events and 2 device events."])
    assert got["dropped"] == 0 and got["said"] and rest == []


# ---- the real traces ----

def _kineto_files() -> list:
    out = []
    for root, _, files in os.walk(SHARED):
        out += [os.path.join(root, f) for f in files
                if f.endswith((".pt.trace.json", ".pt.trace.json.gz", ".json.gz"))]
    return sorted(out)


def test_real_kineto_logs_are_read_and_report_no_loss():
    """Seven real PyTorch traces carry libkineto's log (its "Record counts" line with
    "CUPTI stopped early? = 0"); both scanners read it and none reports a loss."""
    files = _kineto_files()
    if not files:
        pytest.skip("../shared/traces is absent")
    with_log = 0
    for p in files:
        with (gzip.open(p) if p.endswith(".gz") else open(p, "rb")) as f:
            raw = f.read()
        try:
            ref = kineto.scan_python(p, raw)["metadata"]
        except Exception:
            continue
        if kineto.native_scanner() is not None:
            assert native_scan.scan_kineto(raw)["metadata"] == ref, p
        if any("Record counts" in line for line in ref.get("INFO") or []):
            with_log += 1
            assert kineto_losses(ref) is None, p
    assert with_log >= 5, with_log
