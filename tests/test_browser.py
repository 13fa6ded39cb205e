"""End-to-end checks of the Diagnose page in a real TensorBoard with headless Chromium."""
from __future__ import annotations

import json
import os
import re
import time
import urllib.parse

import pytest

from conftest import IN_CI, TESTDATA

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def tb_own_noise(text, url):
    """Console errors that are not this plugin's: only the browser's automatic /favicon.ico
    request, which 404s when the plugin page is opened outside TensorBoard's shell."""
    return url.endswith("/favicon.ico") and "status of 404" in text


def _need_chromium():
    if not os.path.exists(CHROMIUM):
        if IN_CI:
            pytest.fail(f"{CHROMIUM} is required in CI (apt-get install chromium)")
        pytest.skip(f"{CHROMIUM} is absent (apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        if IN_CI:
            pytest.fail("playwright is required in CI")
        pytest.skip("playwright is not installed")


@pytest.fixture(scope="module")
def browser():
    _need_chromium()
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


def expected_broken_run_422(text, url):
    """Chromium logs every HTTP error response as a console error. The deliberately broken
    run answers /diagnosis (and /gap, /overlay) with 422 and the page shows that error: this
    one message is expected whenever the broken run is selected on purpose (it is never
    opened by default: the page picks a working run first)."""
    return ("status of 422" in text and "/data/plugin/perfdiag/" in url
            and "run=broken_run" in url)


class Console:
    """Collects console errors and page errors from every frame of a page."""

    def __init__(self, page):
        self.errors = []
        page.on("console", lambda m: self.errors.append(("console", m.text, m.location.get("url", "")))
                if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(("pageerror", str(e), "")))

    def unexpected(self, allowed=()):
        out = []
        for kind, text, url in self.errors:
            if any(a in text for a in allowed):
                continue
            if tb_own_noise(text, url):
                continue
            if expected_broken_run_422(text, url):
                continue
            out.append((kind, text, url))
        return out


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1100})
    pg = ctx.new_page()
    pg.console_log = Console(pg)
    yield pg
    ctx.close()


def manifest_compile_steps(folder):
    with open(os.path.join(TESTDATA, "captures", "MANIFEST.json")) as f:
        m = json.load(f)
    for c in m["captures"]:
        if c["folder"] == folder:
            return sorted(c["ground_truth"]["compile_steps"])
    raise AssertionError(f"{folder} not in MANIFEST.json")


def runs(tb):
    status, _, body = tb.get("/data/plugin/perfdiag/runs")
    assert status == 200
    return body["runs"]


def served_diagnosis(tb, run: str, host: str, **q) -> dict:
    """The /diagnosis answer of ``run``/``host`` (more query parameters in ``q``), 200."""
    status, _, body = tb.get("/data/plugin/perfdiag/diagnosis?" + urllib.parse.urlencode(
        {"run": run, "host": host, **q}))
    assert status == 200, body
    return body


def run_named(tb, prefix):
    for r in runs(tb):
        if r["run"] == prefix or r["run"].startswith(prefix + "/"):
            return r
    raise AssertionError(f"no run {prefix} in {[r['run'] for r in runs(tb)]}")


def plugin_frame(page, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        for f in page.frames:
            if "plugin_entry.html" in f.url and "name=perfdiag" in f.url:
                return f
        page.wait_for_timeout(100)
    raise AssertionError(f"Diagnose iframe never loaded; frames: {[f.url for f in page.frames]}")


def open_diagnose(page, tb, hash_extra=""):
    page.goto(tb.url + "/#perfdiag" + hash_extra)
    return plugin_frame(page)


def wait_loaded(frame, run, step=""):
    """Wait until the page finished loading the diagnosis of `run` (and `step`)."""
    frame.wait_for_function(
        "([run, step]) => { const d = document.getElementById('perfdiag-root')?.dataset.loaded;"
        " return !!d && d.startsWith(run + '|') && d.split('|')[2] === step; }",
        arg=[run, str(step)], timeout=60000)


def choose_run(frame, run):
    frame.wait_for_selector("#pd-run", timeout=30000)
    frame.select_option("#pd-run", run)
    wait_loaded(frame, run)


def open_xla_run(page, tb):
    """The torch_xla CPU capture: its run, its diagnosis as served (largest gap first),
    and the Diagnose frame showing it."""
    run = run_named(tb, "torch_xla_cpu")
    q = urllib.parse.urlencode({"run": run["run"], "host": run["hosts"][0]["name"],
                                "gaps_limit": 1})
    _, _, diag = tb.get("/data/plugin/perfdiag/diagnosis?" + q)
    frame = open_diagnose(page, tb)
    choose_run(frame, run["run"])
    return run, diag, frame


def test_tab_appears_and_recompiling_steps_marked(page, tb_demo, artifacts_dir):
    frame = open_diagnose(page, tb_demo)
    assert page.get_by_text("Diagnose", exact=False).first.is_visible()
    run = run_named(tb_demo, "torch_xla_cpu")
    choose_run(frame, run["run"])
    expected = manifest_compile_steps("torch_xla_cpu")
    marked = sorted(int(x) for x in frame.eval_on_selector_all(
        ".step-bar[data-recompile]", "els => els.map(e => e.dataset.step)"))
    assert marked == expected
    # the flag says whether a step compiled a function again or compiled it first
    q = urllib.parse.urlencode({"run": run["run"], "host": run["hosts"][0]["name"],
                                "gaps_limit": 1})
    _, _, diag = tb_demo.get("/data/plugin/perfdiag/diagnosis?" + q)
    want = {str(s["id"]): "recompiles" if s["compile"]["recompiles"] else "compiles"
            for s in diag["steps"] if s["compile"]["count"]}
    flags = dict(frame.eval_on_selector_all(
        ".step-bar[data-recompile]",
        "els => els.map(e => [e.dataset.step, e.querySelector('.step-flag')?.textContent])"))
    assert flags == want and "recompiles" in want.values() and "compiles" in want.values()
    # Summary: duty cycle with its definition, findings ordered by time lost per step.
    duty_title = frame.get_attribute(".pd-summary .pd-stat", "title")
    assert "Duty cycle" in duty_title
    assert frame.locator(".pd-finding").count() > 0
    # the recompilations (steps 5 and 9 of ten) are paid in their own steps: said once,
    # with those steps, after the per-step findings (issue 63: no per-step figure above
    # the typical step)
    texts = [t.lower() for t in frame.locator(".pd-finding").all_inner_texts()]
    rec = [t for t in texts if "recompilation" in t]
    assert rec and "once, in steps" in rec[0], texts
    page.screenshot(path=os.path.join(artifacts_dir, "diagnose-steps.png"))
    assert page.console_log.unexpected() == []


def test_largest_gap_detail_and_trace_viewer(page, tb_demo, artifacts_dir):
    run, diag, frame = open_xla_run(page, tb_demo)
    largest = diag["gaps"][0]
    first = frame.locator(".gap-row").first
    assert first.get_attribute("data-gap") == largest["id"]
    first.focus()
    # the list carries the gap's largest host ops; opening it asks the gap route for all
    assert len(largest["host_ops"]) == 5 < largest["host_ops_total"]
    with page.expect_response(lambda r: "/data/plugin/perfdiag/gap?" in r.url,
                              timeout=60000) as resp:
        page.keyboard.press("Enter")   # keyboard reachable
    full = resp.value.json()
    frame.wait_for_selector(".pd-detail-cause", timeout=30000)
    assert frame.inner_text(".pd-detail-cause") == largest["cause_label"]
    assert len(full["host_ops"]) == largest["host_ops_total"]
    # every one of them in the panel (the busiest threads open, the rest folded)
    shown = frame.eval_on_selector_all(".pd-hostop", "els => els.map(e => e.title)")
    chains = [" › ".join(o["chain"]) for o in full["host_ops"]]
    assert sorted(shown) == sorted(c if len(c) <= 2000 else c[:1999] + "…" for c in chains)
    assert "ThunkExecutor" in frame.inner_text(".pd-chain") or frame.inner_text(".pd-chain")
    page.screenshot(path=os.path.join(artifacts_dir, "diagnose-gap-detail.png"))

    href = frame.get_attribute("#pd-open-trace", "href")
    assert "trace_viewer_index.html" in href and "trace_data_url=" in href
    assert "view_start=" in href and "view_end=" in href
    viewer = page.context.new_page()
    viewer_console = Console(viewer)
    with viewer.expect_response(lambda r: "/data/plugin/perfdiag/overlay" in r.url, timeout=60000) as resp:
        viewer.goto(href)
    overlay = resp.value.json()
    gap_slices = [e for e in overlay["traceEvents"] if e.get("cat") == "gap"]
    lo, hi = overlay["otherData"]["window_ns"]      # the gaps of the window around it
    assert gap_slices and all(e["ts"] * 1000 < hi and (e["ts"] + e["dur"]) * 1000 > lo
                              for e in gap_slices)
    assert any(e["args"]["gap"] == largest["id"] for e in gap_slices)
    viewer.wait_for_timeout(3000)
    viewer.screenshot(path=os.path.join(artifacts_dir, "trace-viewer-overlay.png"))
    assert [e for e in viewer_console.errors if e[0] == "pageerror"] == []
    # The Export link downloads the same overlay.
    export = frame.get_attribute("#pd-export", "href")
    assert "/data/plugin/perfdiag/overlay?" in export
    whole = tb_demo.get(export.split(tb_demo.url, 1)[-1])[2]["traceEvents"]
    assert len([e for e in whole if e.get("cat") == "gap"]) == diag["gaps_total"]
    assert page.console_log.unexpected() == []


def test_finding_gap_links_read_as_duration_and_step_and_open_the_gap(page, tb_demo,
                                                                      artifacts_dir):
    """A finding cites its gaps as "35.2 ms in step 3", never as internal ids; the link
    still selects that gap."""
    run = run_named(tb_demo, "kineto_data_loading")
    frame = open_diagnose(page, tb_demo)
    choose_run(frame, run["run"])
    links = frame.locator(".pd-finding .pd-gap-link")
    assert links.count() > 0
    texts = links.evaluate_all("els => els.map(e => e.textContent)")
    for t in texts:
        assert re.fullmatch(r"[\d.]+ (ns|µs|ms|s) (in step \d+|before the first step|after the last step)( on .+)?", t), t
    gid = links.first.get_attribute("data-gap")
    assert re.fullmatch(r"\d+-\d+", gid)
    links.first.click()
    frame.wait_for_selector(f".gap-row.selected[data-gap='{gid}']", timeout=30000)
    page.screenshot(path=os.path.join(artifacts_dir, "finding-gap-links.png"))
    assert page.console_log.unexpected() == []


def test_deep_link_restores_selection_in_new_context(page, browser, tb_demo, artifacts_dir):
    run = run_named(tb_demo, "torch_xla_cpu")
    frame = open_diagnose(page, tb_demo)
    choose_run(frame, run["run"])
    frame.click('.step-bar[data-step="5"]')
    wait_loaded(frame, run["run"], 5)
    frame.wait_for_selector('.step-bar.selected[data-step="5"]', timeout=30000)
    frame.wait_for_selector("#pd-clear-step")
    row = frame.locator(".gap-row").first
    gap_id = row.get_attribute("data-gap")
    row.click()
    frame.wait_for_selector(".pd-detail-cause")
    url = page.url
    assert "p.perfdiag.step=5" in url and "p.perfdiag.gap=" in url

    ctx2 = browser.new_context(viewport={"width": 1400, "height": 1100})
    try:
        p2 = ctx2.new_page()
        c2 = Console(p2)
        p2.goto(url)
        f2 = plugin_frame(p2)
        f2.wait_for_selector('.step-bar.selected[data-step="5"]', timeout=60000)
        assert f2.eval_on_selector("#pd-run", "e => e.value") == run["run"]
        assert f2.eval_on_selector("#pd-host", "e => e.value") == run["hosts"][0]["name"]
        f2.wait_for_selector(f'.gap-row.selected[data-gap="{gap_id}"]')
        f2.wait_for_selector(".pd-detail-cause")
        assert f2.get_attribute("#pd-detail-title", "title") == f"gap {gap_id}"
        assert " idle in step 5 on " in f2.inner_text("#pd-detail-title")
        assert all(g.get_attribute("data-gap") for g in f2.locator(".gap-row").all())
        steps = f2.eval_on_selector_all(".gap-row .gap-step", "els => els.map(e => e.textContent)")
        assert steps and set(steps) == {"step 5"}
        p2.screenshot(path=os.path.join(artifacts_dir, "deep-link-restored.png"))
        assert c2.unexpected() == []
    finally:
        ctx2.close()
    assert page.console_log.unexpected() == []


def test_broken_run_shows_error_while_others_work(page, tb_demo, artifacts_dir):
    frame = open_diagnose(page, tb_demo)
    broken = run_named(tb_demo, "broken_run")
    choose_run(frame, broken["run"])
    frame.wait_for_selector(".pd-error", timeout=60000)
    text = frame.inner_text(".pd-error")
    assert "badhost.xplane.pb" in text
    page.screenshot(path=os.path.join(artifacts_dir, "broken-run-error.png"))
    for r in runs(tb_demo):
        if r["run"] == broken["run"]:
            continue
        choose_run(frame, r["run"])
        # a run of several hosts opens on its hosts summary (issue 63), the others on
        # their one host's page
        frame.wait_for_selector(".step-bar, .pd-compare[data-complete]", timeout=60000)
        assert frame.locator(".pd-error").count() == 0
    # The only console errors allowed: the browser's own note of the expected HTTP 422.
    assert page.console_log.unexpected() == []


def test_empty_logdir_shows_how_to(browser, tmp_path, artifacts_dir):
    from conftest import TensorBoard
    logdir = tmp_path / "empty"
    logdir.mkdir()
    tb = TensorBoard(logdir)
    try:
        ctx = browser.new_context(viewport={"width": 1400, "height": 1100})
        pg = ctx.new_page()
        con = Console(pg)
        pg.goto(tb.url + "/data/plugin_entry.html?name=perfdiag")
        pg.wait_for_selector(".pd-howto", timeout=30000)
        text = pg.inner_text(".pd-howto")
        for needle in ("tensorboard_trace_handler", "xp.start_trace", "xp.stop_trace", "jax.profiler.trace"):
            assert needle in text
        pg.screenshot(path=os.path.join(artifacts_dir, "empty-logdir-howto.png"))
        assert con.unexpected() == []
        ctx.close()
    finally:
        tb.stop()


def timeline_model(frame):
    return frame.evaluate("() => window.__perfdiag.timeline.model()")


def wait_timeline_fetches(frame, n, timeout=30000):
    frame.wait_for_function(
        "(n) => +(document.getElementById('pd-timeline')?.dataset.fetches || 0) >= n",
        arg=n, timeout=timeout)


def test_default_selection_is_a_working_run(page, tb_demo):
    frame = open_diagnose(page, tb_demo)
    frame.wait_for_function("() => document.getElementById('perfdiag-root')?.dataset.loaded",
                            timeout=60000)
    loaded = frame.evaluate("() => document.getElementById('perfdiag-root').dataset.loaded")
    assert loaded.endswith("|ok") and not loaded.startswith("broken_run")
    assert frame.eval_on_selector("#pd-run", "e => e.value") == loaded.split("|")[0]
    assert frame.locator(".pd-error").count() == 0
    # The broken run is never even asked for: no console error at all, not even the 422.
    assert [e for e in page.console_log.errors if "broken_run" in e[2]] == []
    assert page.console_log.unexpected() == []


def test_timeline_lanes_zoom_refetch_and_gap_click(page, tb_demo, artifacts_dir):
    run, diag, frame = open_xla_run(page, tb_demo)
    largest = diag["gaps"][0]
    wait_timeline_fetches(frame, 1)
    m = timeline_model(frame)
    kinds = {lane["kind"] for lane in m["lanes"]}
    assert {"gaps", "device", "host", "annotation"} <= kinds
    labels = json.loads(frame.get_attribute("#pd-timeline", "data-lanes"))
    assert any(x.startswith("annotation:") and x.endswith("· annotations") for x in labels)
    assert any(x == "host:python" for x in labels)
    # crowded host lanes come as per-pixel bins, the rest as events
    assert {lane["mode"] for lane in m["lanes"] if lane["kind"] == "host"} >= {"events", "bins"}
    assert "p.perfdiag.zoom" not in page.url
    # keyboard zoom: URL keeps the window, and the lanes are fetched again for it
    frame.focus("#pd-timeline canvas")
    page.keyboard.press("+")
    page.keyboard.press("+")
    page.keyboard.press("ArrowRight")
    wait_timeline_fetches(frame, 2)
    frame.wait_for_function(
        "() => { const m = window.__perfdiag.timeline.model();"
        " return m.fetched && m.fetched.start === m.view.start && m.fetched.end === m.view.end; }",
        timeout=30000)
    m2 = timeline_model(frame)
    assert m2["view"]["end"] - m2["view"]["start"] < (m["view"]["end"] - m["view"]["start"]) * 0.5
    assert f"p.perfdiag.zoom={m2['view']['start']}_{m2['view']['end']}" in page.url
    export = frame.get_attribute("#pd-export-events", "href")
    assert "with_events=1" in export and "start_us=" in export and "end_us=" in export
    # wheel zoom also refetches
    before = m2["fetches"]
    frame.locator("#pd-timeline canvas").scroll_into_view_if_needed()
    box = frame.locator("#pd-timeline canvas").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + 40)
    page.mouse.wheel(0, -300)
    wait_timeline_fetches(frame, before + 1)
    # zoom onto the largest gap without selecting it, then click it in the canvas
    pad = largest["duration_ns"] // 4
    frame.evaluate("([a, b]) => window.__perfdiag.timeline.setView({start: a, end: b})",
                   [largest["start_ns"] - pad, largest["end_ns"] + pad])
    strip = next(lane for lane in timeline_model(frame)["lanes"] if lane["kind"] == "gaps")
    x = box["x"] + m["gutter"] + m["plotWidth"] * 0.5
    page.mouse.click(x, box["y"] + strip["y"] + strip["h"] / 2)
    frame.wait_for_selector(f'.gap-row.selected[data-gap="{largest["id"]}"]', timeout=30000)
    frame.wait_for_selector(".pd-detail-cause", timeout=30000)
    assert f"p.perfdiag.gap={largest['id']}" in page.url
    wait_timeline_fetches(frame, before + 2)
    # the gap's detail (above the timeline) has grown: where the canvas is now
    frame.locator("#pd-timeline canvas").scroll_into_view_if_needed()
    box = frame.locator("#pd-timeline canvas").bounding_box()
    x = box["x"] + m["gutter"] + m["plotWidth"] * 0.5
    page.mouse.move(x + 3, box["y"] + strip["y"] + strip["h"] / 2)
    frame.wait_for_function(
        "() => { const t = document.querySelector('#pd-timeline .tooltip');"
        " return !t.hidden && t.textContent.includes('click to select'); }", timeout=10000)
    frame.locator("#pd-timeline").screenshot(path=os.path.join(artifacts_dir, "timeline-zoomed-gap.png"))
    assert page.console_log.unexpected() == []


def test_annotations_tree(page, tb_demo, artifacts_dir):
    run, diag, frame = open_xla_run(page, tb_demo)
    items = frame.locator("#pd-annotations [role=treeitem]")
    names = items.evaluate_all("els => els.map(e => e.dataset.name)")
    assert "forward" in names
    assert sorted(names) == sorted(a["name"] for a in diag["annotations"])
    scattered = {a["path"][-1] for a in diag["annotations"] if a["scattered"]}
    marked = set(frame.eval_on_selector_all("#pd-annotations [data-scattered] ", "els => els.map(e => e.dataset.name)"))
    assert scattered and marked == scattered
    fwd = next(a for a in diag["annotations"] if a["path"][-1] == "forward")
    badge = frame.get_attribute('[data-path="%s"] .ann-scattered' % "/".join(fwd["path"]), "title")
    assert all(x in badge for x in fwd["interleaved_with"])
    page.mouse.move(0, 0)
    frame.locator("#pd-annotations").screenshot(path=os.path.join(artifacts_dir, "annotations-tree.png"))
    # keyboard: first row focusable, Left collapses, Right expands
    root = items.first
    root.focus()
    page.keyboard.press("ArrowLeft")
    assert root.get_attribute("aria-expanded") == "false"
    assert frame.locator("#pd-annotations [role=treeitem]:not([hidden])").count() == 1
    page.keyboard.press("ArrowRight")
    assert frame.locator("#pd-annotations [role=treeitem]:not([hidden])").count() == len(names)
    # per selected step
    frame.click('.step-bar[data-step="2"]')
    wait_loaded(frame, run["run"], 2)
    incl = frame.inner_text('[data-path="%s"] .ann-incl' % "/".join(fwd["path"]))
    # a step's figures come with that step's answer
    q = urllib.parse.urlencode({"run": run["run"], "host": run["hosts"][0]["name"], "step": 2})
    step2 = tb_demo.get("/data/plugin/perfdiag/diagnosis?" + q)[2]
    assert all(set(a["per_step"]) <= {"2"} for a in step2["annotations"])
    from_api = next(a for a in step2["annotations"]
                    if a["path"] == fwd["path"])["per_step"]["2"]["inclusive_ns"]
    assert incl.split(" (")[0] == js_format_ns(from_api)
    assert page.console_log.unexpected() == []


def js_format_ns(ns):
    """The page's formatNs: the one unit rule of every face (tb_perfdiag.units)."""
    from tb_perfdiag.units import duration
    return duration(ns)


def test_compare_hosts(browser, tmp_path, artifacts_dir):
    import shutil
    from conftest import TensorBoard
    src_run = os.path.join(TESTDATA, "captures", "jax_cpu", "plugins", "profile")
    run_dir = sorted(os.listdir(src_run))[0]
    src = os.path.join(src_run, run_dir, "cpuhost.xplane.pb")
    dst = tmp_path / "multi" / "tworun" / "plugins" / "profile" / run_dir
    dst.mkdir(parents=True)
    for name in ("hosta", "hostb"):
        shutil.copy(src, dst / f"{name}.xplane.pb")
    tb = TensorBoard(tmp_path / "multi")
    try:
        ctx = browser.new_context(viewport={"width": 1400, "height": 1100})
        pg = ctx.new_page()
        con = Console(pg)
        frame = open_diagnose(pg, tb)
        # two hosts: the run opens on its hosts summary (issue 63); hosta's page is one
        # choice away
        frame.wait_for_selector(".pd-compare[data-complete]", timeout=60000)
        frame.select_option("#pd-host", "hosta")
        frame.wait_for_function("() => (document.getElementById('perfdiag-root')?.dataset.loaded || '').endsWith('|ok')",
                                timeout=60000)
        assert frame.eval_on_selector("#pd-host", "e => e.value") == "hosta"
        if frame.get_attribute("#pd-compare", "aria-expanded") != "true":
            frame.click("#pd-compare")     # (still open from the hosts summary it opened on)
        frame.wait_for_selector(".pd-compare[data-complete]", timeout=60000)
        rows = frame.locator(".pd-compare-row")
        assert rows.evaluate_all("els => els.map(e => e.dataset.host)") == ["hosta", "hostb"]
        text = frame.inner_text(".pd-compare-table")
        assert "duty cycle" in text.lower() and "Typical step" in text and "%" in text
        assert frame.locator(".pd-compare-row.selected").get_attribute("data-host") == "hosta"
        assert "Straggler" in text
        frame.locator(".pd-compare").screenshot(path=os.path.join(artifacts_dir, "compare-hosts.png"))
        frame.click('.pd-compare-row[data-host="hostb"]')
        frame.wait_for_function("() => (document.getElementById('perfdiag-root')?.dataset.loaded || '').includes('|hostb|')",
                                timeout=60000)
        assert frame.eval_on_selector("#pd-host", "e => e.value") == "hostb"
        assert frame.locator(".pd-compare-row.selected").get_attribute("data-host") == "hostb"
        assert "p.perfdiag.host=hostb" in pg.url
        assert con.unexpected() == []
        ctx.close()
    finally:
        tb.stop()


def test_dark_mode_follows_tensorboard(page, tb_demo, artifacts_dir):
    run = run_named(tb_demo, "torch_xla_cpu")
    frame = open_diagnose(page, tb_demo)
    choose_run(frame, run["run"])
    wait_timeline_fetches(frame, 1)
    page.evaluate("() => document.body.classList.add('dark-mode')")
    frame.wait_for_function("() => document.body.classList.contains('dark-mode')")
    bg = frame.evaluate("() => getComputedStyle(document.body).backgroundColor")
    fg = frame.evaluate("() => getComputedStyle(document.body).color")
    lum = lambda c: sum(int(x) for x in c[c.index('(') + 1:c.index(')')].split(',')[:3])
    assert lum(bg) < 200 and lum(fg) > 500
    frame.evaluate("() => document.getElementById('pd-timeline').scrollIntoView()")
    page.wait_for_timeout(200)
    page.screenshot(path=os.path.join(artifacts_dir, "dark-mode.png"))
    page.evaluate("() => document.body.classList.remove('dark-mode')")
    frame.wait_for_function("() => !document.body.classList.contains('dark-mode')")
    assert page.console_log.unexpected() == []


def test_pod_opens_on_the_host_summary_and_drills_into_a_straggler(page, pod_logdir, artifacts_dir):
    from conftest import TensorBoard
    logdir, truth = pod_logdir
    tb = TensorBoard(logdir, extra_env={"TB_PERFDIAG_WORKERS": "2", "TB_PERFDIAG_WORKER_MEMORY_MB": "1024",
                                        "TB_PERFDIAG_DASK_SCHEDULER": ""})
    try:
        run = runs(tb)[0]["run"]
        frame = open_diagnose(page, tb)
        frame.wait_for_function("() => (document.getElementById('perfdiag-root')?.dataset.loaded || '').endsWith('|pod')",
                                timeout=60000)
        assert frame.eval_on_selector("#pd-host", "e => e.value") == "*"
        assert "All 64 hosts" in frame.inner_text("#pd-host")
        assert "p.perfdiag.host=*" in page.url or "p.perfdiag.host=%2A" in page.url
        frame.wait_for_selector(".pd-compare[data-complete]", timeout=180000)
        order = frame.locator(".pd-compare-row").evaluate_all("els => els.map(e => e.dataset.host)")
        assert len(order) == 50 and order[:2] == truth["stragglers"]          # stragglers first, paged
        assert frame.inner_text(".pd-page-label") == "Hosts 1–50 of 64"
        marked = frame.locator(".pd-compare-row.straggler").evaluate_all("els => els.map(e => e.dataset.host)")
        assert marked == truth["stragglers"]
        callout = frame.inner_text(".pd-stragglers")
        assert callout.startswith("2 stragglers") and all(h in callout for h in truth["stragglers"])
        assert "Data loading" in callout
        assert "Median host: typical step" in frame.inner_text(".pd-compare")
        page.screenshot(path=os.path.join(artifacts_dir, "pod-64-hosts.png"))
        frame.click('.pd-sort[data-sort="host"]')
        frame.wait_for_function("() => document.querySelector('.pd-compare-row')?.dataset.host === 'host00'")
        frame.click('.pd-pager [data-page="next"]')
        frame.wait_for_function("() => document.querySelector('.pd-page-label')?.textContent === 'Hosts 51–64 of 64'")
        assert frame.locator(".pd-compare-row").first.get_attribute("data-host") == "host50"
        frame.click('.pd-sort[data-sort="typical_step"]')                      # slowest first
        frame.wait_for_function("(h) => document.querySelector('.pd-compare-row')?.dataset.host === h",
                                arg=truth["stragglers"][0])
        assert frame.inner_text(".pd-page-label") == "Hosts 1–50 of 64"
        frame.click(f'.pd-compare-row[data-host="{truth["stragglers"][0]}"]')
        frame.wait_for_function("(h) => (document.getElementById('perfdiag-root')?.dataset.loaded || '').includes('|' + h + '|')",
                                arg=truth["stragglers"][0], timeout=60000)
        assert frame.locator(".pd-compare").count() == 0           # the host's page takes the screen
        assert frame.locator("#pd-compare").is_visible()            # …and the table is one click away
        assert "Data loading" in frame.inner_text(".pd-summary")
        # a teammate's link to the summary opens the summary
        pg2 = page.context.new_page()
        f2 = open_diagnose(pg2, tb, f"&p.perfdiag.run={urllib.parse.quote(run)}&p.perfdiag.host=*")
        f2.wait_for_function("() => (document.getElementById('perfdiag-root')?.dataset.loaded || '').endsWith('|pod')",
                             timeout=60000)
        f2.wait_for_selector(".pd-compare[data-complete]", timeout=60000)
        assert page.console_log.unexpected() == []
    finally:
        tb.stop()


def test_a_thousand_host_pod_from_the_result_store(page, tmp_path, artifacts_dir):
    """1,000 hosts whose rows are in the result store (one real row, its numbers varied
    per host, three stragglers): the page opens the whole summary at once, without any
    analysis, in pages of 50, sortable by any column and by a cause's share."""
    import json as _json
    import shutil
    from conftest import TensorBoard
    from tb_perfdiag import __version__
    import tb_perfdiag
    from tb_perfdiag.analysis import Options
    from tb_perfdiag.cache import DiagnosisCache, encode_row
    from tb_perfdiag.render.pod import host_stats
    from tb_perfdiag.storage import file_identity
    src = os.path.join(TESTDATA, "synthetic", "logdir", "xla_tpu_data_loading")
    xp = next(os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs if f.endswith(".xplane.pb"))
    base = _json.loads(encode_row(host_stats(tb_perfdiag.diagnose(xp).diagnosis)))
    run = tmp_path / "ld" / "pod" / "plugins" / "profile" / "2026_11_23_10_00_00"
    run.mkdir(parents=True)
    store = tmp_path / "store"
    cache = DiagnosisCache(version=__version__, disk_dir=str(store))
    slow = {17: 2.0, 400: 1.6, 999: 1.3}
    for i in range(1000):
        p = run / f"host{i:04d}.xplane.pb"
        p.write_bytes(b"\x0a\x00" + i.to_bytes(4, "little"))        # never read: rows are stored
        row = dict(base, typical_step_ns=int(base["typical_step_ns"] * slow.get(i, 1 + (i % 7) / 100)),
                   duty_cycle=base["duty_cycle"] * (0.6 if i in slow else 1 - (i % 5) / 100),
                   step_idle_ns=dict(base["step_idle_ns"], data_loading=base["typical_step_ns"] if i in slow else 0),
                   cause_shares={"data_loading": 0.99} if i in slow else base["cause_shares"],
                   top_cause="data_loading" if i in slow else base["top_cause"])
        cache.store.put_row(cache.digest((file_identity(str(p)), Options().key())), row)
    tb = TensorBoard(tmp_path / "ld", extra_env={"TB_PERFDIAG_CACHE_DIR": str(store),
                                                 "TB_PERFDIAG_DASK_SCHEDULER": ""})
    try:
        frame = open_diagnose(page, tb)
        frame.wait_for_selector(".pd-compare[data-complete]", timeout=60000)
        assert "All 1000 hosts" in frame.inner_text("#pd-host")
        assert frame.inner_text(".pd-page-label") == "Hosts 1–50 of 1000"
        order = frame.locator(".pd-compare-row").evaluate_all("els => els.map(e => e.dataset.host)")
        assert order[:3] == ["host0017", "host0400", "host0999"] and len(order) == 50
        assert frame.inner_text(".pd-stragglers").startswith("3 stragglers")
        page.screenshot(path=os.path.join(artifacts_dir, "pod-1000-hosts.png"), full_page=True)
        frame.click('.pd-sort[data-sort="duty_cycle"]')                        # lowest first
        frame.wait_for_function("() => document.querySelector('th[aria-sort=ascending] [data-sort=duty_cycle]')")
        frame.wait_for_function("() => document.querySelector('.pd-compare-row')?.dataset.host === 'host0017'")
        frame.click('.pd-sort[data-sort="duty_cycle"]')                        # again: highest first
        frame.wait_for_function("() => document.querySelector('.pd-compare-row')?.dataset.host === 'host0000'")
        frame.select_option(".pd-cause-sort", "cause.data_loading")
        frame.wait_for_function("() => ['host0017','host0400','host0999'].includes(document.querySelector('.pd-compare-row')?.dataset.host)")
        for _ in range(3):
            frame.click('.pd-pager [data-page="next"]')
        frame.wait_for_function("() => document.querySelector('.pd-page-label')?.textContent === 'Hosts 151–200 of 1000'")
        _, _, st = tb.get("/data/plugin/perfdiag/status")
        assert st["analyses"] == 0 and not st["pod_engine"]["started"]
        assert page.console_log.unexpected() == []
    finally:
        tb.stop()


def test_progress_bar_while_the_server_analyses(page, tb_demo, artifacts_dir):
    """The page shows the server's phase and fraction while /diagnosis is pending. The
    server side of /progress is tested against a real analysis in test_progress.py; here
    the two routes are held so the browser is seen mid-analysis whatever the machine's speed."""
    run = run_named(tb_demo, "torch_xla_cpu")
    held = []
    page.route("**/data/plugin/perfdiag/diagnosis?*", lambda route: held.append(route))
    page.route("**/data/plugin/perfdiag/progress?*", lambda route: route.fulfill(
        status=200, content_type="application/json",
        body=json.dumps({"state": "running", "file": "x.xplane.pb", "phase": "scanning",
                         "text": "decoding events: 812 MB", "fraction": 0.37,
                         "elapsed_s": 4.2, "done": False})))
    frame = open_diagnose(page, tb_demo, f"&p.perfdiag.run={urllib.parse.quote(run['run'])}")
    frame.wait_for_selector(".pd-progress", timeout=30000)
    text = frame.inner_text(".pd-status")
    assert "decoding events: 812 MB" in text and "37 %" in text and "4.2 s" in text
    assert frame.eval_on_selector(".pd-progress progress", "e => e.value") == 37
    page.screenshot(path=os.path.join(artifacts_dir, "progress.png"))
    deadline = time.time() + 30
    while not held and time.time() < deadline:
        page.wait_for_timeout(50)
    page.unroute("**/data/plugin/perfdiag/progress?*")
    for r in held:
        r.continue_()
    wait_loaded(frame, run["run"])
    assert frame.locator(".pd-progress").count() == 0
    assert page.console_log.unexpected() == []


def test_thousands_of_steps_draw_as_bins_and_a_linked_step_still_opens(browser, tmp_path,
                                                                     artifacts_dir):
    """650 steps: the first answer bins them; a URL naming a step the answer does not list
    still filters the gaps by it and marks its bin; a click on a bin opens its slowest step."""
    from conftest import TensorBoard
    from test_first_answer import many_steps
    run_dir = tmp_path / "logdir" / "long_run"
    run_dir.mkdir(parents=True)
    (run_dir / "worker0.1700000000000.pt.trace.json").write_bytes(many_steps().to_bytes())
    tb = TensorBoard(tmp_path / "logdir")
    try:
        run = runs(tb)[0]
        host = run["hosts"][0]["name"]
        q = urllib.parse.urlencode({"run": run["run"], "host": host})
        _, _, first = tb.get("/data/plugin/perfdiag/diagnosis?" + q)
        assert first["steps_total"] == 650 and 301 not in {s["id"] for s in first["steps"]}
        ctx = browser.new_context(viewport={"width": 1400, "height": 1100})
        pg = ctx.new_page()
        con = Console(pg)
        pg.goto(tb.url + "/#perfdiag&" + urllib.parse.urlencode(
            {"p.perfdiag.run": run["run"], "p.perfdiag.host": host, "p.perfdiag.step": "301"}))
        frame = plugin_frame(pg)
        wait_loaded(frame, run["run"], 301)
        bars = frame.eval_on_selector_all(".step-bar", "els => els.map(e => [e.dataset.first, e.dataset.last])")
        assert len(bars) == len(first["step_bins"]) and all(a is not None for a, _ in bars)
        sel = frame.eval_on_selector_all(".step-bar.selected", "els => els.map(e => [+e.dataset.first, +e.dataset.last])")
        assert len(sel) == 1 and sel[0][0] <= 301 <= sel[0][1]
        steps = frame.eval_on_selector_all(".gap-row .gap-step", "els => els.map(e => e.textContent)")
        assert steps and set(steps) == {"step 301"}
        assert "650 steps" in frame.inner_text(".pd-summary")
        # a bin opens its slowest step (the stall in it)
        b = next(x for x in first["step_bins"] if x["first"] <= 7 <= x["last"])
        assert b["slowest"] == 7
        frame.click(f'.step-bar[data-first="{b["first"]}"]')
        wait_loaded(frame, run["run"], 7)
        steps = frame.eval_on_selector_all(".gap-row .gap-step", "els => els.map(e => e.textContent)")
        assert steps and set(steps) == {"step 7"}
        pg.screenshot(path=os.path.join(artifacts_dir, "diagnose-step-bins.png"))
        assert con.unexpected() == []
        ctx.close()
    finally:
        tb.stop()
