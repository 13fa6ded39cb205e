"""The peak override on the page (issue 63 §6): the efficiency card's Peak TFLOP/s field is
the CLI's --peak-tflops.  Entering a peak asks every route again with ``peak_tflops``,
the MFU, its waterfall and the roofline are taken against it, the card says the peak is
the user's, and the URL keeps it: a pasted URL shows the same figures."""
from __future__ import annotations

import json
import os
import urllib.parse

import pytest

from conftest import TESTDATA, TensorBoard
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


@pytest.fixture(scope="module")
def tb_no_peak(tmp_path_factory):
    """The demo's opening GPU run on a part no datasheet knows: FLOPs, no peak."""
    src = os.path.join(TESTDATA, "synthetic", "logdir", "kineto_data_loading")
    name = next(f for f in os.listdir(src) if f.endswith(".pt.trace.json"))
    with open(os.path.join(src, name)) as f:
        doc = json.load(f)
    doc["deviceProperties"][0].update(name="Acme Tensor X1", computeMajor=42, computeMinor=0,
                                      numSms=7)
    d = tmp_path_factory.mktemp("nopeak") / "acme"
    d.mkdir()
    (d / name).write_text(json.dumps(doc))
    tb = TensorBoard(d.parent)
    yield tb
    tb.stop()


def test_no_peak_known_the_page_points_at_its_field(page, tb_no_peak):
    """Where no peak is known the page's advice names its field, never the CLI flag, and
    the field gives the MFU, its waterfall and the roofline."""
    run = run_named(tb_no_peak, "acme")
    e = _diag(tb_no_peak, run)["devices"][0]["efficiency"]
    assert e["mfu"] is None and e["achieved_flops_per_s"] > 0 and "--peak-tflops" in e["missing"]
    frame = open_diagnose(page, tb_no_peak)
    choose_run(frame, run["run"])
    frame.wait_for_selector("#pd-peak-form")
    card = frame.inner_text("#pd-efficiency")
    assert "No peak known for this device" in card and "Peak TFLOP/s field" in card
    assert "no peak known" in frame.inner_text(".pd-mfu-stat")
    assert "Peak TFLOP/s field" in frame.inner_text("#pd-device-ops")     # the roofline's note
    text = frame.inner_text("#perfdiag-root").replace("(the CLI's --peak-tflops)", "")
    assert "--peak-tflops" not in text
    frame.fill("#pd-peak", "100")
    frame.click("#pd-peak-apply")
    frame.wait_for_selector("#pd-waterfall", timeout=60000)
    want = _diag(tb_no_peak, run, 100)["devices"][0]["efficiency"]["mfu"]
    assert want == pytest.approx(e["achieved_flops_per_s"] / 100e12, rel=1e-3)
    assert _pct(want) in _mfu_text(frame)
    # no bandwidth is known either: the roofline says so, not that the ops have no figures
    assert "No memory bandwidth known" in frame.inner_text(".pd-roof-none")
    assert page.console_log.unexpected() == []
