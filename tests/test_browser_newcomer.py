"""The tab as a newcomer first sees it: the demo logdir of scripts/demo.sh in Chromium at
1600×1000 (a laptop).  The gap list is on the first screen, a gap reads as a person names
it and marks its step, the TensorFlow run's findings and op table speak of what the user
can change, and the comparison of the demo pair leads with the new sync finding."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT, TensorBoard
from test_browser import Console, browser, plugin_frame  # noqa: F401 (fixtures)

LOADED = "() => (document.getElementById('perfdiag-root')?.dataset.loaded || '')"
SCREEN = {"width": 1600, "height": 1000}


@pytest.fixture(scope="module")
def tb_newcomer(tmp_path_factory, artifacts_dir):
    logdir = tmp_path_factory.mktemp("demo") / "logdir"
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "demo_logdir.py"), str(logdir)],
                   check=True, capture_output=True, timeout=300)
    tb = TensorBoard(logdir)
    yield tb
    tb.stop()


@pytest.fixture
def laptop(browser):  # noqa: F811
    ctx = browser.new_context(viewport=SCREEN)
    pg = ctx.new_page()
    pg.console_errors = Console(pg)
    yield pg
    ctx.close()


def _loaded(frame, prefix, timeout=90000):
    frame.wait_for_function(f"(p) => ({LOADED})().startsWith(p) && !({LOADED})().endsWith('|error')",
                            arg=prefix, timeout=timeout)


def test_first_screen_shows_the_gaps_and_a_gap_reads_in_words(laptop, tb_newcomer, artifacts_dir):
    laptop.goto(tb_newcomer.url + "/#perfdiag")
    frame = plugin_frame(laptop, 60)
    _loaded(frame, "01_pytorch_gpu_input_bound|")
    frame.wait_for_selector(".gap-row")
    # the first gap row lies inside the first screen of the whole page (iframe offset added)
    box = frame.locator(".gap-row").first.bounding_box()
    assert box is not None and box["y"] + box["height"] <= SCREEN["height"], box
    order = frame.evaluate("""() => [...document.querySelectorAll('.pd-body > *')]
        .filter((e) => !e.hidden).map((e) => e.getAttribute('aria-label') || e.id || e.className)""")
    assert order.index("Summary") < order.index("pd-card") < order.index("pd-columns"), order
    # the C reader is the normal case: no "reader: native" jargon beside the title
    assert frame.locator("#pd-reader").count() == 0
    # a gap: its title in words, its step marked in the chart
    first = frame.locator(".gap-row").first
    step = first.locator(".gap-step").inner_text().replace("step ", "")
    first.click()
    frame.wait_for_selector("#pd-detail-title")
    title = frame.inner_text("#pd-detail-title")
    assert title.endswith(f"idle in step {step} on GPU 0") and ("ms" in title or "µs" in title), title
    marked = frame.eval_on_selector_all(".step-bar.gap-marked", "bs => bs.map(b => b.dataset.step)")
    assert marked == [step]
    detail = frame.inner_text("#pd-detail")
    assert "TraceLens terms" not in detail and "In short:" in detail
    prev = frame.locator(".pd-neighbour-op .pd-op-name").first
    assert "(" not in prev.inner_text() and prev.get_attribute("title")
    legend = frame.eval_on_selector_all(".pd-device-ops .pd-legend-item", "es => es.map(e => e.textContent)")
    assert legend == ["compute"]          # no copies or collectives in this run
    laptop.screenshot(path=os.path.join(artifacts_dir, "newcomer-gap.png"))
    assert laptop.console_errors.unexpected() == []


def test_tensorflow_run_speaks_of_what_the_user_can_change(laptop, tb_newcomer, artifacts_dir):
    laptop.goto(tb_newcomer.url + "/#perfdiag")
    frame = plugin_frame(laptop, 60)
    _loaded(frame, "01_pytorch_gpu_input_bound|")
    run = frame.eval_on_selector_all("#pd-run option", "os => os.map(o => o.value)")
    tf = next(r for r in run if r.startswith("12_real_tf"))
    frame.select_option("#pd-run", tf)
    _loaded(frame, tf + "|", 180000)
    titles = frame.eval_on_selector_all(".pd-finding b", "bs => bs.map(b => b.textContent)")
    assert sum("waiting to run" in t for t in titles) <= 1, titles
    assert any(t.startswith("Work already queued on the device") for t in titles), titles
    heads = frame.eval_on_selector_all("#pd-device-ops-table th", "ts => ts.map(t => t.textContent)")
    assert "Host op" not in heads and frame.locator("#pd-ops-one-host").count() == 1
    labels = frame.evaluate("() => JSON.parse(document.getElementById('pd-timeline').dataset.lanes || '[]')")
    assert labels, "no lanes"
    laptop.screenshot(path=os.path.join(artifacts_dir, "newcomer-tf.png"))


def test_demo_pair_comparison_leads_with_the_sync_finding(laptop, tb_newcomer, artifacts_dir):
    laptop.goto(tb_newcomer.url + "/#perfdiag&p.perfdiag.run=03_pytorch_gpu_nonzero_sync"
                "&p.perfdiag.host=worker0&p.perfdiag.base_run=01_pytorch_gpu_input_bound"
                "&p.perfdiag.base_host=worker0")
    frame = plugin_frame(laptop, 60)
    _loaded(frame, "03_pytorch_gpu_nonzero_sync|worker0||compare-ok")
    first = frame.inner_text("#pd-cmp-highlights li:first-child")
    assert first.startswith("new finding:") and "nonzero" in first, first
    names = frame.eval_on_selector_all("#pd-cmp-op-groups .pd-op-name", "es => es.map(e => e.firstChild.textContent)")
    assert names and len(names) == len(set(names))
    assert not any(n.startswith("void ") or "(" in n.split("<")[0] for n in names), names
    laptop.screenshot(path=os.path.join(artifacts_dir, "newcomer-compare.png"))


def test_logdir_without_readable_profiles_says_what_it_found(browser, tmp_path, artifacts_dir):  # noqa: F811
    """A bare XSpace (not under plugins/profile/) and a broken link: the tab says it
    found them and why it did not read them."""
    import glob
    import shutil
    logdir = tmp_path / "ld"
    (logdir / "exp").mkdir(parents=True)
    xplane = sorted(glob.glob(os.path.join(ROOT, "testdata", "synthetic", "logdir", "*", "plugins",
                                           "profile", "*", "*.xplane.pb")))[0]
    shutil.copy(xplane, logdir / "exp" / "host.xplane.pb")
    if hasattr(os, "symlink"):
        os.symlink(tmp_path / "gone", logdir / "exp" / "linked.pt.trace.json")
    tb = TensorBoard(logdir)
    try:
        ctx = browser.new_context(viewport=SCREEN)
        pg = ctx.new_page()
        pg.goto(tb.url + "/data/plugin_entry.html?name=perfdiag")
        pg.wait_for_selector("#pd-skipped", timeout=30000)
        text = pg.inner_text("#pd-skipped")
        assert "exp/host.xplane.pb" in text and "plugins/profile" in text
        if hasattr(os, "symlink"):
            assert "linked.pt.trace.json" in text and "broken" in text
        pg.screenshot(path=os.path.join(artifacts_dir, "newcomer-skipped.png"))
        ctx.close()
    finally:
        tb.stop()
