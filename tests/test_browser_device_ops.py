"""The "Device time by op" section in a real TensorBoard with Debian Chromium: it renders
what the route serves for a Kineto run, XSpace GPU and TPU runs and an XLA:CPU run, a
step selection shows the ops that step launched, and an op opens the trace viewer on its
longest instance."""
from __future__ import annotations

import os
import urllib.parse

import pytest

from tb_perfdiag.analysis.device_time.by_op import fold_kernel_name
from test_browser import browser, open_diagnose, page, run_named, wait_loaded  # noqa: F401
from test_browser_handoff import Http, _slices, viewer_model


def _diag(tb, run, step=None):
    q = {"run": run["run"], "host": run["hosts"][0]["name"], "gaps_limit": 1}
    if step is not None:
        q["step"] = step
    status, _, body = tb.get("/data/plugin/perfdiag/diagnosis?" + urllib.parse.urlencode(q))
    assert status == 200
    return body


def _shown(frame):
    return frame.eval_on_selector_all("#pd-device-ops-table .dop-row:not(.dop-other)",
                                      "els => els.map(e => e.dataset.op)")


@pytest.mark.parametrize("prefix", ["kineto_launch_bound", "xla_gpu_recompile",
                                    "xla_tpu_two_devices", "torch_xla_cpu"])
def test_section_renders_and_a_step_filters_it(page, tb_demo, artifacts_dir, prefix):
    run = run_named(tb_demo, prefix)
    diag = _diag(tb_demo, run)
    frame = open_diagnose(page, tb_demo, f"&p.perfdiag.run={urllib.parse.quote(run['run'])}")
    wait_loaded(frame, run["run"])
    frame.wait_for_selector("#pd-device-ops-table")
    first = diag["device_ops"]["devices"][0]
    assert first["ops"], prefix
    assert _shown(frame) == [o["name"] for o in first["ops"]]
    # every device's busy split, one line each
    assert frame.locator(".dop-overlap").count() == len(diag["device_ops"]["devices"])
    total = frame.inner_text("#pd-device-ops-table .dop-row .dop-total")
    assert total.strip()
    frame.locator("#pd-device-ops-card").screenshot(
        path=os.path.join(artifacts_dir, f"device-ops-{prefix}.png"))
    # a step: the ops it launched, as the route serves them for that step
    steps = [s["id"] for s in diag["steps"]]
    step = steps[len(steps) // 2]
    frame.click(f'.step-bar[data-step="{step}"]')
    wait_loaded(frame, run["run"], step)
    want = _diag(tb_demo, run, step)["device_ops"]
    assert want["step"] == step
    assert _shown(frame) == [o["name"] for o in want["devices"][0]["ops"]]
    assert "launched by step" in frame.inner_text("#pd-device-ops-card h2")
    assert frame.locator("#pd-device-ops-table th", has_text="% step").count() == 1
    assert page.console_log.unexpected() == []


def test_launch_bound_run_names_its_tiny_kernels(page, tb_demo):
    run = run_named(tb_demo, "kineto_launch_bound")
    frame = open_diagnose(page, tb_demo, f"&p.perfdiag.run={urllib.parse.quote(run['run'])}")
    wait_loaded(frame, run["run"])
    note = frame.inner_text("#pd-short-kernels")
    assert "shorter than the 10.0 µs launch latency" in note
    assert "at::native::reduce_kernel<…>" in note and "aten::linalg_vector_norm" in note
    frame.click("#pd-short-finding")
    flashed = frame.eval_on_selector_all(".pd-finding.pd-flash", "els => els.map(e => e.innerText)")
    assert flashed and "launch" in flashed[0].lower()
    assert page.console_log.unexpected() == []


@pytest.mark.parametrize("prefix", ["kineto_sync_nonzero", "torch_xla_cpu"])
def test_an_op_opens_the_trace_viewer_at_its_longest_instance(page, tb_demo, artifacts_dir,
                                                              prefix):
    http = Http(page.context)
    run = run_named(tb_demo, prefix)
    frame = open_diagnose(page, tb_demo, f"&p.perfdiag.run={urllib.parse.quote(run['run'])}")
    wait_loaded(frame, run["run"])
    op = _diag(tb_demo, run)["device_ops"]["devices"][0]["ops"][0]
    link = frame.locator("#pd-device-ops-table .dop-open").first
    href = link.get_attribute("href")
    assert "trace_viewer_index.html" in href
    with page.context.expect_page() as info:
        link.click()
    viewer = info.value
    viewer.set_viewport_size({"width": 1400, "height": 1000})
    m = viewer_model(viewer)
    viewer.wait_for_timeout(1000)
    viewer.screenshot(path=os.path.join(artifacts_dir, f"device-ops-viewer-{prefix}.png"))
    start = op["longest"]["start_ns"] / 1e6
    hits = [s for _, _, s in _slices(m, lambda n: True)
            if abs(s["start"] - start) < 1e-3 and
            (s["title"] == op["name"] or fold_kernel_name(s["title"]) == op["name"])]
    assert hits, (op["name"], start)
    assert hits[0]["end"] - hits[0]["start"] == pytest.approx(op["longest"]["duration_ns"] / 1e6,
                                                              abs=1e-3)
    r = m["range"]
    assert r["min"] <= start and start + op["longest"]["duration_ns"] / 1e6 <= r["max"]
    assert http.errors == []
    assert page.console_log.unexpected() == []
