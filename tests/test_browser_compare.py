"""The "Compare with…" view in a real TensorBoard and headless Chromium: pick a run to
compare with, read what changed, and reopen the same comparison from its URL."""
from __future__ import annotations

import os

import pytest

from conftest import TensorBoard
from test_browser import Console, browser, page, plugin_frame  # noqa: F401 (fixtures)
from test_compare import training

LOADED = "() => (document.getElementById('perfdiag-root')?.dataset.loaded || '')"


def loaded(frame, suffix, timeout=90000):
    frame.wait_for_function(f"(s) => ({LOADED})().endsWith(s)", arg=suffix, timeout=timeout)


@pytest.fixture(scope="module")
def tb_pair(tmp_path_factory, artifacts_dir):
    """Two runs of one training loop: 'slow' fetches each batch for 3 ms on the main
    thread, 'fast' does not."""
    logdir = tmp_path_factory.mktemp("pair")
    for name, loader in (("slow", 3000), ("fast", 0)):
        d = logdir / name
        d.mkdir()
        (d / "worker0.1700000000000.pt.trace.json").write_bytes(training(loader).to_bytes())
    tb = TensorBoard(logdir)
    yield tb
    tb.stop()


def compare_state(frame):
    return frame.evaluate("""() => ({
        before: document.getElementById('pd-cmp-before').textContent,
        after: document.getElementById('pd-cmp-after').textContent,
        highlights: [...document.querySelectorAll('#pd-cmp-highlights li')].map(e => e.textContent),
        loading: document.querySelector('tr[data-row="data_loading"] .pd-delta')?.className || '',
        bars: ['before', 'after'].map(s => document.querySelectorAll(`#pd-cmp-chart-${s} .step-bar`).length),
        changes: [...document.querySelectorAll('#pd-cmp-findings tr[data-change]')].map(e => e.dataset.change),
    })""")


def test_compare_with_picker_and_the_url_that_restores_it(page, browser, tb_pair, artifacts_dir):  # noqa: F811
    pg = page
    pg.goto(tb_pair.url + "/#perfdiag&p.perfdiag.run=fast&p.perfdiag.host=worker0")
    frame = plugin_frame(pg, 60)
    loaded(frame, "|ok")
    frame.click("#pd-compare-with")
    frame.wait_for_selector("#pd-compare-picker")
    assert frame.eval_on_selector("#pd-base-run", "e => e.value") == "slow"   # another run
    frame.click("#pd-compare-go")
    loaded(frame, "|compare-ok")
    s = compare_state(frame)
    assert s["before"] == "slow · worker0 · 2023-11-14 22:13:20.000 UTC"
    assert s["after"] == "fast · worker0 · 2023-11-14 22:13:20.000 UTC"
    assert s["highlights"][0].startswith("typical step") and "−" in s["highlights"][0]
    assert any("data loading / input idle per typical step" in x for x in s["highlights"])
    assert "pd-better" in s["loading"]                # less data-loading idle: in green
    assert s["bars"] == [6, 6]                        # both runs' step charts
    assert "gone" in s["changes"]
    # one scale for both charts: the slow run's bars are the taller ones
    heights = frame.evaluate("""() => ['before', 'after'].map(s => Math.max(...[...document
        .querySelectorAll(`#pd-cmp-chart-${s} .step-bar rect:not(.step-hit)`)].map(r => +r.getAttribute('height'))))""")
    assert heights[0] > heights[1]
    url = pg.url
    assert "p.perfdiag.base_run=slow" in url and "p.perfdiag.base_host=worker0" in url
    pg.screenshot(path=os.path.join(artifacts_dir, "compare-runs.png"), full_page=True)

    # a teammate's link reopens the same comparison
    ctx2 = browser.new_context(viewport={"width": 1400, "height": 1100})
    try:
        p2 = ctx2.new_page()
        c2 = Console(p2)
        p2.goto(url)
        f2 = plugin_frame(p2, 60)
        loaded(f2, "|compare-ok")
        assert compare_state(f2) == s
        assert f2.eval_on_selector("#pd-run", "e => e.value") == "fast"
        p2.screenshot(path=os.path.join(artifacts_dir, "compare-runs-restored.png"), full_page=True)
        assert c2.unexpected() == []
    finally:
        ctx2.close()

    # swap: before and after change places, and so does the URL
    frame.click("#pd-compare-swap")
    loaded(frame, "|compare-ok")
    swapped = compare_state(frame)
    assert (swapped["before"], swapped["after"]) == (s["after"], s["before"])
    assert "new" in swapped["changes"] and "pd-worse" in swapped["loading"]
    assert "p.perfdiag.run=slow" in pg.url and "p.perfdiag.base_run=fast" in pg.url
    # a step of a chart opens that run at that step
    frame.click('#pd-cmp-chart-after .step-bar[data-step="2"]')
    loaded(frame, "|2|ok")
    assert frame.eval_on_selector("#pd-run", "e => e.value") == "slow"
    assert "base_run" not in pg.url and "p.perfdiag.step=2" in pg.url
    # back to a comparison, then closed: the diagnosis of the selected run
    frame.click("#pd-compare-with")
    frame.select_option("#pd-base-run", "fast")
    frame.click("#pd-compare-go")
    loaded(frame, "|compare-ok")
    frame.click("#pd-compare-close")
    loaded(frame, "|ok")
    assert "base_run" not in pg.url and frame.locator(".pd-summary").count() == 1
    assert pg.console_log.unexpected() == []


def test_compare_view_shows_an_unreadable_run(page, tb_pair, tmp_path):  # noqa: F811
    # the route's 404 for a run that is not there is shown, and the page stays usable
    pg = page
    pg.goto(tb_pair.url + "/#perfdiag&p.perfdiag.run=fast&p.perfdiag.host=worker0"
            "&p.perfdiag.base_run=gone&p.perfdiag.base_host=worker0")
    frame = plugin_frame(pg, 60)
    loaded(frame, "|compare-error")
    assert "no such base run" in frame.inner_text("#pd-compare-view .pd-error")
    frame.click("#pd-compare-close")
    loaded(frame, "|ok")
    assert [e for e in pg.console_log.unexpected() if "status of 404" not in e[1]] == []


@pytest.fixture(scope="module")
def tb_flops(tmp_path_factory):
    """The same loop three times: 'slow' and 'fast' profiled with shapes (FLOPs, an A100's
    peak), 'bare' without them (no FLOP figures); and 'pod', three hosts of them."""
    logdir = tmp_path_factory.mktemp("flops")
    for name, loader, shapes in (("slow", 3000, True), ("fast", 0, True), ("bare", 0, False)):
        d = logdir / name
        d.mkdir()
        (d / "worker0.1700000000000.pt.trace.json").write_bytes(
            training(loader, shapes=shapes).to_bytes())
    # a run of three hosts: one stalls on data loading, one has no shapes
    d = logdir / "pod"
    d.mkdir()
    for host, loader, shapes in (("hosta", 0, True), ("hostb", 3000, True), ("hostc", 0, False)):
        (d / f"{host}.1700000000000.pt.trace.json").write_bytes(
            training(loader, shapes=shapes).to_bytes())
    tb = TensorBoard(logdir)
    yield tb
    tb.stop()


def _open_compare(pg, tb, before, after):
    """The compare view of ``before`` → ``after`` and the /compare JSON the page read."""
    got = []
    pg.on("response", lambda r: got.append(r) if "/data/plugin/perfdiag/compare?" in r.url else None)
    pg.goto(tb.url + f"/#perfdiag&p.perfdiag.run={after}&p.perfdiag.host=worker0"
            f"&p.perfdiag.base_run={before}&p.perfdiag.base_host=worker0")
    frame = plugin_frame(pg, 60)
    loaded(frame, "|compare-ok")
    assert got and got[-1].ok
    return frame, got[-1].json()


def test_compare_shows_the_mfu_waterfall_before_and_after(page, tb_flops, artifacts_dir):  # noqa: F811
    pg = page
    frame, cj = _open_compare(pg, tb_flops, "slow", "fast")
    t = cj["devices"][0]["typical_step"]
    card = ".pd-cmp-efficiency"
    frame.wait_for_selector(card)
    # two bars, each the side's waterfall: one segment per part it has, as wide as its points
    bars = frame.evaluate("""() => ['before', 'after'].map(s => Object.fromEntries([...document
        .querySelectorAll(`.pd-cmp-wf-stack[data-side="${s}"] .pd-wf-part`)]
        .map(e => [e.dataset.part, parseFloat(e.style.width)])))""")
    for side, got in zip(("before", "after"), bars):
        want = {p: v for p, v in t[side]["waterfall"].items() if v > 0}
        assert got.keys() == want.keys()
        assert all(got[p] == pytest.approx(want[p], abs=1e-3) for p in want)
    # the single-run card's part colours: a cause's part is the cause's colour
    colours = frame.evaluate("""async () => {
        const m = await import(new URL('efficiency.js', document.baseURI).href);
        return [...document.querySelectorAll('.pd-cmp-wf-stack .pd-wf-part')].map(e => {
          const probe = document.createElement('span'); probe.style.background = m.partColor(e.dataset.part);
          return [e.style.background, probe.style.background]; }); }""")
    assert colours and all(a == b for a, b in colours)
    # the parts table: MFU first, then what moved ≥ 1 point by the size of the move, with
    # the JSON's before, after and Δ
    rows = frame.evaluate("""() => [...document.querySelectorAll('.pd-cmp-wf-table tbody tr')].map(r => ({
        part: r.dataset.part, delta: r.dataset.delta, cells: [...r.querySelectorAll('td')].map(c => c.textContent),
        cls: r.querySelector('.pd-delta').className}))""")
    moved = t["delta"]["waterfall_moved"]
    assert [r["part"] for r in rows] == [m["part"] for m in moved]
    assert rows[0]["part"] == "mfu" and rows[1]["part"] == "data_loading"
    for r, m in zip(rows, moved):
        assert float(r["delta"]) == m["delta"] == t["delta"]["waterfall"][m["part"]]
        before, after, change = r["cells"]
        assert float(before) == pytest.approx(m["before"], abs=0.05)
        assert float(after) == pytest.approx(m["after"], abs=0.05)
        shown = float(change.replace("−", "-").replace(" pts", ""))
        assert shown == pytest.approx(m["delta"], abs=0.05)
    assert "pd-better" in rows[0]["cls"] and "pd-better" in rows[1]["cls"]   # MFU up, idle down
    text = frame.inner_text(card)
    assert "achieved MFU" in text and "idle: Data loading / input" in text
    assert not any(w in text for w in ("NaN", "null", "undefined"))
    frame.locator(card).screenshot(path=os.path.join(artifacts_dir, "compare-waterfall.png"))
    # narrow: nothing wider than the window
    pg.set_viewport_size({"width": 900, "height": 1000})
    pg.wait_for_timeout(300)
    inner = frame.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert inner[0] <= inner[1] + 1, inner
    frame.locator(card).screenshot(path=os.path.join(artifacts_dir, "compare-waterfall-900.png"))
    assert pg.console_log.unexpected() == []


def test_compare_says_which_side_has_no_flops_and_why(page, tb_flops):  # noqa: F811
    frame, cj = _open_compare(page, tb_flops, "bare", "fast")
    t = cj["devices"][0]["typical_step"]
    assert t["before"]["waterfall"] is None and t["before"]["missing"]
    frame.wait_for_selector(".pd-cmp-wf-missing")
    assert frame.locator(".pd-cmp-wf-stack").count() == 0
    assert frame.locator(".pd-cmp-wf-table").count() == 0
    why = frame.inner_text('.pd-cmp-wf-missing [data-side="before"]')
    assert why == t["before"]["missing"] and "record_shapes=True" in why
    assert frame.locator('.pd-cmp-wf-missing [data-side="after"]').count() == 0
    text = frame.inner_text(".pd-cmp-wf-missing")
    assert "before" in text and "bare" in text
    assert not any(w in frame.inner_text("#pd-compare-view") for w in ("NaN", "null", "undefined"))
    assert page.console_log.unexpected() == []


def test_compare_hosts_has_an_mfu_column_that_sorts(page, tb_flops):  # noqa: F811
    pg = page
    pg.goto(tb_flops.url + "/#perfdiag&p.perfdiag.run=pod&p.perfdiag.host=hosta")
    frame = plugin_frame(pg, 60)
    loaded(frame, "|ok")
    frame.click("#pd-compare")
    frame.wait_for_selector(".pd-compare[data-complete]", timeout=120000)
    _, _, body = tb_flops.get("/data/plugin/perfdiag/hosts?run=pod")
    want = {r["host"]: r["mfu"] for r in body["hosts"]}
    lower = {r["host"]: r.get("mfu_lower_bound") for r in body["hosts"]}
    assert want["hosta"] > want["hostb"] > 0 and want["hostc"] is None
    got = dict(frame.locator(".pd-compare-row").evaluate_all(
        "els => els.map(e => [e.dataset.host, e.querySelector('.pd-mfu-cell').textContent])"))
    from tb_perfdiag.render.efficiency import pct  # the one share rule of every face
    assert got == {h: "–" if m is None else ("≥" if lower[h] else "") + pct(m)
                   for h, m in want.items()}
    assert "GPU 0: MFU" in frame.get_attribute('.pd-compare-row[data-host="hosta"] .pd-mfu-cell', "title")
    frame.click('.pd-sort[data-sort="mfu"]')                     # lowest first
    frame.wait_for_function("() => document.querySelector('th[aria-sort=ascending] [data-sort=mfu]')")
    frame.wait_for_function("() => document.querySelector('.pd-compare-row')?.dataset.host === 'hostb'")
    frame.click('.pd-sort[data-sort="mfu"]')                     # again: highest first
    frame.wait_for_function("() => document.querySelector('.pd-compare-row')?.dataset.host === 'hosta'")
    assert not any(w in frame.inner_text(".pd-compare") for w in ("NaN", "null", "undefined"))
    assert pg.console_log.unexpected() == []
