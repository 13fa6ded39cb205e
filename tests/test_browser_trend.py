"""The Trend view of a run (issue 62, item 5) in Chromium at 1600×1000, on the multi-capture
runs of our generator (testdata/generators/trend_runs.py: a PyTorch job with
schedule(repeat=N), a JAX job profiled every few minutes, each with injected regressions and
a 0-byte capture): the captures in time order, the 0-byte one greyed with its reason and
left out of the lines, the changes as sentences, a click on a capture opening it in the
Diagnose view, the view kept in the URL (a fresh tab opens on it), and no Trend view for a
run of one capture."""
from __future__ import annotations

import os
import shutil
import urllib.parse

import pytest

from conftest import TensorBoard
from test_browser import Console, browser, plugin_frame  # noqa: F401 (fixtures)
from test_trend import _generator

SCREEN = {"width": 1600, "height": 1000}
LOADED = ("([run, kind]) => { const d = document.getElementById('perfdiag-root')?.dataset.loaded || '';"
          " return d.startsWith(run + '|') && d.endsWith('|' + kind); }")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(TensorBoard, truth: run → {session: injected}); plus `single`, a run of one capture
    (one of torch_repeat's files alone)."""
    ld = tmp_path_factory.mktemp("trendpage") / "logdir"
    truth = _generator().write_all(ld)
    ms = next(s for s, k in sorted(truth["torch_repeat"].items()) if not k)
    os.makedirs(ld / "single")
    shutil.copy(ld / "torch_repeat" / f"trainer.{ms}.pt.trace.json", ld / "single" / f"trainer.{ms}.pt.trace.json")
    tb = TensorBoard(ld)
    yield tb, truth
    tb.stop()


@pytest.fixture(scope="module")
def ctx(browser, served):  # noqa: F811
    c = browser.new_context(viewport=SCREEN)
    yield c
    c.close()


def _open(ctx, tb, hash_extra, kind):
    pg = ctx.new_page()
    pg.console_log = Console(pg)
    pg.goto(tb.url + "/#perfdiag" + hash_extra)
    frame = plugin_frame(pg, 90)
    run = urllib.parse.unquote(hash_extra.split("p.perfdiag.run=")[1].split("&")[0])
    frame.wait_for_function(LOADED, arg=[run, kind], timeout=90000)
    return pg, frame


def _hash(pg):
    return urllib.parse.unquote(pg.evaluate("() => location.hash"))


def _rows(frame):
    return frame.eval_on_selector_all("#pd-trend-captures tbody tr", """rs => rs.map(r => ({
        session: r.dataset.session, flagged: r.classList.contains('pd-trend-flagged'), text: r.innerText,
        color: getComputedStyle(r.querySelector('td')).color,
        bg: getComputedStyle(r.querySelector('td')).backgroundColor }))""")


@pytest.mark.parametrize("run", ["torch_repeat", "jax_cpu"])
def test_the_trend_lists_captures_in_time_order_flags_the_empty_one_and_names_the_changes(ctx, served, run, artifacts_dir):
    tb, truth = served
    sessions = sorted(truth[run])            # ms since the epoch / YYYY_MM_DD_HH_MM_SS: time order
    page_run = run if run == "torch_repeat" else f"{run}/{sessions[0]}"
    pg, frame = _open(ctx, tb, f"&p.perfdiag.run={urllib.parse.quote(page_run)}", "ok")
    button = frame.locator("#pd-trend")
    assert button.inner_text() == f"Trend ({len(sessions)} captures)"
    button.click()
    frame.wait_for_function(LOADED, arg=[page_run, "trend-ok"], timeout=90000)
    assert "p.perfdiag.view=trend" in _hash(pg)

    rows = _rows(frame)
    assert [r["session"] for r in rows] == sessions
    cols = frame.eval_on_selector_all(".trend-capture", "gs => gs.map(g => [g.dataset.session, g.classList.contains('flagged')])")
    assert [c[0] for c in cols] == sessions
    empty = next(s for s, k in truth[run].items() if k == "empty")
    for r, (session, flagged) in zip(rows, cols):
        assert r["flagged"] == flagged == (session == empty), session
    bad = next(r for r in rows if r["session"] == empty)
    good = next(r for r in rows if r["session"] != empty)
    assert "Not trusted" in bad["text"] and "empty file (0 bytes)" in bad["text"]
    assert bad["color"] != good["color"] and bad["bg"] != good["bg"]          # greyed
    # the flagged capture has no point on the lines; every trusted one has one on each
    assert frame.locator(".trend-step-dot").count() == len(sessions) - 1
    assert frame.locator(".trend-duty-dot").count() == len(sessions) - 1

    changes = frame.eval_on_selector_all("#pd-trend-changes li", "ls => ls.map(l => [l.dataset.to, l.innerText])")
    for session, kind in truth[run].items():
        if kind in ("", "empty"):
            continue
        into = [t for to, t in changes if to == session]
        assert into and kind.replace("_", " ") + " +" in into[0], (session, kind, changes)
        assert into[0].startswith("step ") and " → " in into[0]
    pg.screenshot(path=os.path.join(artifacts_dir, f"trend-{run}.png"))
    assert pg.console_log.unexpected() == []
    pg.close()


def test_a_click_opens_the_capture_and_the_url_keeps_the_view(ctx, browser, served):  # noqa: F811
    tb, truth = served
    pg, frame = _open(ctx, tb, "&p.perfdiag.run=torch_repeat&p.perfdiag.view=trend", "trend-ok")
    trend_url = pg.url
    texts = [r["text"] for r in _rows(frame)]
    slow = next(s for s, k in truth["torch_repeat"].items() if k == "data_loading")
    frame.click(f".trend-capture[data-session='{slow}']")
    frame.wait_for_function(LOADED, arg=["torch_repeat", "ok"], timeout=90000)
    h = _hash(pg)
    assert f"p.perfdiag.span={slow}" in h and "view=trend" not in h
    assert frame.eval_on_selector("#pd-span", "s => s.value") == slow
    assert "Data loading" in frame.inner_text("#pd-headline") or "data loading" in frame.inner_text(".pd-summary").lower()
    # back to the trend, then a fresh context on the trend's URL draws the same view
    frame.click("#pd-trend")
    frame.wait_for_function(LOADED, arg=["torch_repeat", "trend-ok"], timeout=90000)
    # every capture against the first: the changes all start there, the URL keeps it
    first = sorted(truth["torch_repeat"])[0]
    frame.evaluate("() => { delete document.getElementById('perfdiag-root').dataset.loaded; }")
    frame.select_option("#pd-trend-baseline", first)
    frame.wait_for_function(LOADED, arg=["torch_repeat", "trend-ok"], timeout=90000)
    assert f"p.perfdiag.baseline={first}" in _hash(pg)
    froms = frame.eval_on_selector_all("#pd-trend-changes li", "ls => ls.map(l => l.dataset.from)")
    assert froms and set(froms) == {first}
    assert frame.locator(f"tr[data-session='{first}'] #pd-trend-baseline-mark").count() == 1
    trend_url = pg.url
    texts = [r["text"] for r in _rows(frame)]
    assert pg.console_log.unexpected() == []
    pg.close()
    fresh = browser.new_context(viewport=SCREEN)
    try:
        p2 = fresh.new_page()
        p2.console_log = Console(p2)
        p2.goto(trend_url)
        f2 = plugin_frame(p2, 90)
        f2.wait_for_function(LOADED, arg=["torch_repeat", "trend-ok"], timeout=90000)
        assert [r["text"] for r in _rows(f2)] == texts
        assert p2.console_log.unexpected() == []
    finally:
        fresh.close()


def test_a_run_of_one_capture_has_no_trend_view(ctx, served):
    tb, _ = served
    # a URL asking for its trend shows its diagnosis instead, and no Trend button
    pg, frame = _open(ctx, tb, "&p.perfdiag.run=single&p.perfdiag.view=trend", "ok")
    assert frame.locator("#pd-trend").count() == 0
    assert frame.locator("#pd-trend-chart").count() == 0
    assert "view=trend" not in _hash(pg)
    assert pg.console_log.unexpected() == []
    pg.close()


def test_a_baseline_the_run_does_not_have_falls_back_to_the_capture_before(ctx, served):
    tb, _ = served
    pg, frame = _open(ctx, tb, "&p.perfdiag.run=torch_repeat&p.perfdiag.view=trend&p.perfdiag.baseline=nope", "trend-ok")
    assert "baseline=" not in _hash(pg)
    assert frame.eval_on_selector("#pd-trend-baseline", "s => s.value") == ""
    assert frame.locator("#pd-trend-changes li").count() > 0
    assert pg.console_log.unexpected(allowed=("status of 404",)) == []
    pg.close()
