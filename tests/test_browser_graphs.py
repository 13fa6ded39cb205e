"""Choosing the capture a run's CUDA/HIP graph replays are aligned with, in a real
TensorBoard with Debian Chromium: the public vLLM piecewise trace (TraceLens, MIT) with its
capture recorded as another trace of the run (copied into a temporary logdir; skipped
without ../shared).  The efficiency card offers the capture, the choice goes into the URL
and the requests, and the replayed kernels' costed share rises; a gap before a replayed
kernel names the op that launched it while the graph was captured."""
from __future__ import annotations

import os
import shutil
import urllib.parse

import pytest

from conftest import TensorBoard, shared_path
from test_browser import (browser, open_diagnose, page, served_diagnosis,  # noqa: F401
                          wait_loaded)

VLLM = ("public", "TraceLens", "tests", "traces", "inference", "vllm_prefilldecode_piecewise")
CAPTURE = "vllm/capture.1.pt.trace.json.gz"


@pytest.fixture(scope="module")
def tb_vllm(tmp_path_factory, artifacts_dir):
    src = shared_path(*VLLM)
    folder = os.path.join(src, "capture_traces")
    cap = [f for f in os.listdir(folder) if f.endswith(".pt.trace.json.gz")]
    root = tmp_path_factory.mktemp("graphs_logdir")
    (root / "vllm").mkdir()
    # the guarded reader follows no link below the logdir: copies, in a temporary folder
    shutil.copy(os.path.join(src, "graph_execution.json.gz"),
                root / "vllm" / "host.1.pt.trace.json.gz")
    shutil.copy(os.path.join(folder, cap[0]), root / CAPTURE)
    tb = TensorBoard(root)
    yield tb
    tb.stop()


def _served(tb, **q):
    return served_diagnosis(tb, "vllm", "host", **q)


def _graphs(frame):
    return frame.eval_on_selector(".pd-graphs", "e => [e.dataset.matched, e.dataset.total]")


def test_choosing_the_capture_costs_the_replayed_kernels(page, tb_vllm):
    alone, aligned = _served(tb_vllm), _served(tb_vllm, capture=CAPTURE)
    assert alone["graph_captures"]["choices"] == [CAPTURE]
    busiest = lambda d: max(d["devices"], key=lambda x: x.get("busy_ns") or 0)  # noqa: E731
    e0, e1 = busiest(alone)["efficiency"], busiest(aligned)["efficiency"]
    total = e0["graph_kernels_total"]
    assert total > 0 and e0["graph_kernels_matched"] == 0
    assert e1["graph_kernels_matched"] == total and e1["flops"] > 5 * e0["flops"]
    frame = open_diagnose(page, tb_vllm, "&p.perfdiag.run=vllm&p.perfdiag.host=host")
    wait_loaded(frame, "vllm")
    frame.wait_for_selector("#pd-capture", timeout=30000)
    assert _graphs(frame) == ["0", str(total)]
    assert "0 of" in frame.inner_text(".pd-graphs")
    frame.select_option("#pd-capture", CAPTURE)
    frame.wait_for_function(
        "n => document.querySelector('.pd-graphs')?.dataset.matched === n", arg=str(total),
        timeout=60000)
    assert "p.perfdiag.capture=" + urllib.parse.quote(CAPTURE, safe="") in page.url
    assert frame.eval_on_selector("#pd-capture", "e => e.value") == CAPTURE
    # a gap before a replayed kernel: the op that launched it while the graph was captured
    gap = next(g for g in aligned["gaps"] if (g["next_op"] or {}).get("captured"))
    frame = open_diagnose(page, tb_vllm, "&p.perfdiag.run=vllm&p.perfdiag.host=host"
                          f"&p.perfdiag.capture={urllib.parse.quote(CAPTURE, safe='')}"
                          f"&p.perfdiag.gap={gap['id']}")
    frame.wait_for_selector(".pd-captured", timeout=60000)
    assert gap["next_op"]["captured"]["op"] in frame.inner_text(".pd-captured")
    # back to the captures beside the trace (none here): nothing matched again
    frame.select_option("#pd-capture", "")
    frame.wait_for_function("() => document.querySelector('.pd-graphs')?.dataset.matched === '0'",
                            timeout=60000)
    assert "p.perfdiag.capture" not in page.url
    assert page.console_log.unexpected() == []
