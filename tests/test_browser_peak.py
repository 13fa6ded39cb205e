"""The peak override on the page (issue 63 §6): the efficiency card's Peak TFLOP/s field is
the CLI's --peak-tflops.  Entering a peak asks every route again with ``peak_tflops``,
the MFU, its waterfall and the roofline are taken against it, the card says the peak is
the user's, and the URL keeps it: a pasted URL shows the same figures."""
from __future__ import annotations

import os
import urllib.parse

import pytest

from test_browser import Console, browser, choose_run, open_diagnose, page, run_named  # noqa: F401


def _diag(tb, run, peak=None):
    q = {"run": run["run"], "host": run["hosts"][0]["name"], "gaps_limit": 0}
    if peak:
        q["peak_tflops"] = peak
    status, _, body = tb.get("/data/plugin/perfdiag/diagnosis?" + urllib.parse.urlencode(q))
    assert status == 200, body
    return body


def _mfu_text(frame):
    return frame.inner_text(".pd-mfu-stat .pd-mfu")


def _pct(frac):
    """The page's share of an MFU (formatShare: one decimal from 10 %)."""
    return f"{100 * frac:.1f}%"


def test_a_peak_entered_changes_the_mfu_and_survives_a_pasted_url(page, browser, tb_demo,
                                                                   artifacts_dir):
    run = run_named(tb_demo, "kineto_data_loading")
    own, half = _diag(tb_demo, run), _diag(tb_demo, run, 156)
    e0, e1 = own["devices"][0]["efficiency"], half["devices"][0]["efficiency"]
    # the route takes the option: the same FLOPs against half the A100's bf16 peak
    assert e0["peak_flops_per_s"] == pytest.approx(312e12) and e0["peak_source"] != "option"
    assert e1["peak_flops_per_s"] == pytest.approx(156e12) and e1["peak_source"] == "option"
    assert e1["mfu"] == pytest.approx(2 * e0["mfu"], rel=1e-6)

    frame = open_diagnose(page, tb_demo)
    choose_run(frame, run["run"])
    frame.wait_for_selector("#pd-peak-form")
    assert _pct(e0["mfu"]) in _mfu_text(frame)
    assert "the peak you entered" not in frame.inner_text(".pd-mfu-stat")
    # the field offers the device's own peak as its hint
    assert frame.get_attribute("#pd-peak", "placeholder") == "312"
    frame.fill("#pd-peak", "156")
    frame.click("#pd-peak-apply")
    frame.wait_for_function("() => document.querySelector('.pd-mfu-stat')?.textContent"
                            ".includes('the peak you entered')", timeout=60000)
    assert _pct(e1["mfu"]) in _mfu_text(frame) and _mfu_text(frame) != _pct(e0["mfu"])
    assert "156 TFLOP/s" in frame.inner_text(".pd-mfu-stat")
    assert frame.get_attribute("#pd-peak-form", "data-peak") == "156"
    # the waterfall's achieved MFU is the new one's (points: MFU × 100)
    wf = frame.inner_text("#pd-waterfall")
    assert f"achieved MFU: {e1['waterfall']['mfu']:.1f} pts" in wf
    assert f"achieved MFU: {e0['waterfall']['mfu']:.1f} pts" not in wf
    # the roofline's flat roof is the peak entered
    frame.wait_for_selector(".pd-roof-peak", timeout=60000)
    assert frame.text_content(".pd-roof-peak").startswith("peak 156 TFLOP/s")
    url = page.url
    assert "p.perfdiag.peak=156" in url
    page.screenshot(path=os.path.join(artifacts_dir, "peak-override.png"))
    assert page.console_log.unexpected() == []

    # the URL pasted in a fresh context: the same peak, the same MFU, the field filled
    ctx = browser.new_context(viewport={"width": 1400, "height": 1100})
    try:
        pg = ctx.new_page()
        pg.console_log = Console(pg)
        pg.goto(url)
        from test_browser import plugin_frame
        fr = plugin_frame(pg)
        fr.wait_for_function("() => document.querySelector('.pd-mfu-stat')?.textContent"
                             ".includes('the peak you entered')", timeout=60000)
        assert _pct(e1["mfu"]) in _mfu_text(fr)
        assert fr.input_value("#pd-peak") == "156"
        # back to the device's own peak: the URL forgets it
        fr.click("#pd-peak-reset")
        fr.wait_for_function("() => { const t = document.querySelector('.pd-mfu-stat')?.textContent"
                             " || ''; return t.includes('datasheet') && !t.includes('entered'); }",
                             timeout=60000)
        assert _pct(e0["mfu"]) in _mfu_text(fr)
        assert "p.perfdiag.peak" not in pg.url
        assert pg.console_log.unexpected() == []
    finally:
        ctx.close()


def test_the_page_names_its_field_not_the_cli_flag(page, tb_demo):
    """No advice on the page sends the reader to a command-line flag the tab has no use
    for: the roofline's and the card's 'no peak' texts name the field."""
    run = run_named(tb_demo, "kineto_data_loading")
    frame = open_diagnose(page, tb_demo)
    choose_run(frame, run["run"])
    frame.wait_for_selector("#pd-peak-form")
    text = frame.inner_text("#perfdiag-root")
    assert "--peak-tflops" not in text.replace("the CLI's --peak-tflops", "")
    assert page.console_log.unexpected() == []
