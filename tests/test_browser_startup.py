"""Start-up on the page (issue 56): a capture whose first step creates the CUDA context
shows the start-up finding after the top findings with its total paid once (no rate per
step), start-up in the idle legend, and the duty over the steps leaving it out."""
from __future__ import annotations

import os

from conftest import TensorBoard
from test_browser import browser, open_diagnose, wait_loaded  # noqa: F401 (fixtures)
from test_startup import steps_trace


def test_the_page_shows_start_up_once_and_leaves_it_out_of_the_duty(browser, tmp_path,  # noqa: F811
                                                                    artifacts_dir):
    run = tmp_path / "ld" / "warmup" / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    b = steps_trace(("cudaFree", 300_000, "cuda_runtime"), later=("cudaFree", 20))
    (run / "host.pt.trace.json").write_bytes(b.to_bytes())
    tb = TensorBoard(tmp_path / "ld")
    try:
        ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
        pg = ctx.new_page()
        frame = open_diagnose(pg, tb)
        wait_loaded(frame, "warmup/plugins/profile/2026_01_01_00_00_00")
        frame.wait_for_selector(".pd-findings")
        findings = frame.inner_text(".pd-findings")
        assert "context creation" in findings and "lost once" in findings
        line = next(x for x in findings.splitlines() if "context creation" in x)
        assert "per step" not in line
        assert "Start-up" in frame.inner_text(".pd-idle")
        # the headline names start-up as the largest loss, paid once
        head = frame.inner_text("#pd-headline")
        assert "start-up" in head and "once" in head and "per step" not in head, head
        stats = frame.inner_text(".pd-stats")
        # the duty and the average step over the steps leave start-up out
        assert "duty cycle over the steps leaving out 300 ms of start-up" in stats
        assert "leaving out start-up in step 0" in stats
        pg.screenshot(path=os.path.join(artifacts_dir, "startup-page.png"))
        ctx.close()
    finally:
        tb.stop()
