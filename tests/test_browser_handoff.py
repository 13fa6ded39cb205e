"""The Diagnose page's hand-offs and robustness, in a real TensorBoard with Debian Chromium:
the trace viewer over the real trace, the Profile plugin's own viewer and tab, one span
for the summary and the host page, runs appearing on TensorBoard's reload, and pages that
fit the window whatever the trace (CPU only, 4 TPUs and 100+ threads, 100 KB names)."""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
import urllib.parse

import pytest

from conftest import ROOT, SHARED, TESTDATA, TensorBoard
from test_browser import (Console, browser, choose_run, open_diagnose, page,  # noqa: F401
                          plugin_frame, run_named, runs, timeline_model, wait_loaded,
                          wait_timeline_fetches)

SYN = os.path.join(TESTDATA, "synthetic", "logdir")
DLRM = os.path.join(SHARED, "public", "param", "et_replay", "tests", "inputs", "dlrm_kineto")
TPU4 = os.path.join(SHARED, "public", "xprof", "xprof", "convert", "test_xplanes",
                    "tpu_inference_2.xplane.pb")


def _syn_file(name):
    d = os.path.join(SYN, name)
    return os.path.join(d, sorted(f for f in os.listdir(d) if f.endswith(".json"))[0])


class Http:
    """Every HTTP error answer in a browser context (the browser's /favicon.ico aside)."""

    def __init__(self, ctx):
        self.errors = []
        ctx.on("response", lambda r: self.errors.append((r.status, r.url))
               if r.status >= 400 and not r.url.endswith("/favicon.ico") else None)


VIEWER_MODEL = """() => {
  const tv = document.querySelector('tf-trace-viewer');
  const m = tv && tv._traceViewer && tv._traceViewer.model;
  if (!m || !Object.keys(m.processes).length) return null;
  const procs = Object.values(m.processes).map(p => ({
    name: p.name,
    threads: Object.values(p.threads).map(t => ({
      name: t.name,
      slices: t.sliceGroup.slices.slice(0, 4000).map(s => ({title: s.title, start: s.start,
        end: s.start + s.duration, args: s.args && s.args.cause !== undefined ?
          {cause: s.args.cause, gap: s.args.gap} : null}))}))}));
  return {procs, flows: m.flowEvents.length, range: tv.currentViewportRange || null};
}"""


def viewer_model(pg, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = pg.evaluate(VIEWER_MODEL)
        if m:
            return m
        pg.wait_for_timeout(200)
    raise AssertionError("the trace viewer never built its model")


def _slices(model, proc_pred):
    return [(p["name"], t["name"], s) for p in model["procs"] if proc_pred(p["name"])
            for t in p["threads"] for s in t["slices"]]


def _largest_gap(tb, run):
    q = urllib.parse.urlencode({"run": run["run"], "host": run["hosts"][0]["name"],
                                "gaps_limit": 1})
    return tb.get("/data/plugin/perfdiag/diagnosis?" + q)[2]["gaps"][0]


def _open_gap(frame, gap_id):
    frame.click(f'.gap-row[data-gap="{gap_id}"]')
    frame.wait_for_selector(".pd-detail-cause", timeout=60000)
    frame.wait_for_selector("#pd-actions[data-profile]", timeout=30000)


@pytest.mark.parametrize("prefix,xspace", [("kineto_sync_nonzero", False),
                                           ("torch_xla_cpu", True)])
def test_trace_viewer_shows_the_trace_and_the_gap(page, tb_demo, artifacts_dir, prefix, xspace):
    http = Http(page.context)
    run = run_named(tb_demo, prefix)
    gap = _largest_gap(tb_demo, run)
    frame = open_diagnose(page, tb_demo, f"&p.perfdiag.run={urllib.parse.quote(run['run'])}")
    wait_loaded(frame, run["run"])
    _open_gap(frame, gap["id"])
    page.screenshot(path=os.path.join(artifacts_dir, f"handoff-{prefix}-gap.png"))
    href = frame.get_attribute("#pd-open-trace", "href")
    assert "trace_viewer_index.html" in href and "is_streaming=false" in href
    viewer = page.context.new_page()
    vcon = Console(viewer)
    viewer.set_viewport_size({"width": 1400, "height": 1000})
    viewer.goto(href)
    m = viewer_model(viewer)
    viewer.wait_for_timeout(1500)
    viewer.screenshot(path=os.path.join(artifacts_dir, f"trace-viewer-{prefix}.png"))
    # the real trace: the device op that ended the gap on a device process, the host
    # call it waited for on a host thread
    device = _slices(m, lambda n: "(device)" in n)
    host = _slices(m, lambda n: n.startswith("Host"))
    shown = lambda name, slices: any(s["title"][:250] == name[:250] for _, _, s in slices)  # noqa: E731
    assert shown(gap["next_op"]["name"], device)        # (names past 1000 characters are cut)
    assert shown(gap["waited_for"]["name"], host)
    assert len({s["title"] for _, _, s in device}) > 3 and len(host) > 10
    # the diagnosis: the gap slice with its cause, where the page says it is
    diag = _slices(m, lambda n: n == "Diagnosis")
    g = [s for _, t, s in diag if s["args"] and s["args"]["gap"] == gap["id"]]
    assert len(g) == 1 and g[0]["title"] == gap["cause_label"]
    assert g[0]["args"]["cause"] == gap["cause"]
    assert g[0]["start"] == pytest.approx(gap["start_ns"] / 1e6, abs=1e-3)
    assert any(t == "Steps" for _, t, _ in diag)
    assert m["flows"] >= 1                               # waited-for launch → device op
    r = m["range"]
    assert r["min"] <= gap["start_ns"] / 1e6 and gap["end_ns"] / 1e6 <= r["max"]
    assert [e for e in vcon.errors if e[0] == "pageerror"] == []
    if not xspace:
        # the Profile plugin does not list PyTorch runs: no button that lands on another
        assert frame.get_attribute("#pd-actions", "data-profile") == "none"
        assert frame.locator("#pd-open-profile, #pd-open-profile-viewer").count() == 0
    else:
        assert frame.get_attribute("#pd-actions", "data-profile") == "shown"
        href = frame.get_attribute("#pd-open-profile-viewer", "href")
        assert "is_streaming=true" in href
        data = urllib.parse.parse_qs(urllib.parse.urlparse(href).query)["trace_data_url"][0]
        dq = urllib.parse.parse_qs(urllib.parse.urlparse(data).query)
        assert dq == {"run": [run["run"]], "tag": ["trace_viewer@"], "host": [run["hosts"][0]["name"]]}
        pv = page.context.new_page()
        pv.set_viewport_size({"width": 1400, "height": 1000})
        pv.goto(href)
        pm = viewer_model(pv)
        pv.wait_for_timeout(1500)
        pv.screenshot(path=os.path.join(artifacts_dir, f"profile-viewer-{prefix}.png"))
        # the session's own events, opened at the gap (its clock: ms from the profile start)
        titles = {s["title"] for _, _, s in _slices(pm, lambda n: True)}
        assert gap["waited_for"]["name"] in titles
        _, _, g1 = tb_demo.get("/data/plugin/perfdiag/gap?" + urllib.parse.urlencode(
            {"run": run["run"], "host": run["hosts"][0]["name"], "id": gap["id"]}))
        want = g1["viewer"]["profile_view_ms"]
        assert pm["range"]["min"] == pytest.approx(want[0], abs=1e-3)
        assert pm["range"]["max"] == pytest.approx(want[1], abs=1e-3)
        assert page.console_log.unexpected() == []
        # the Profile tab, on this run and host (the Profile plugin's own page from here on:
        # offline it fails to fetch Google's chart loader, which is not this plugin's doing)
        ours = len(page.console_log.errors)
        frame.click("#pd-open-profile")
        page.wait_for_url("**#profile*", timeout=30000)
        deadline = time.time() + 60
        tool = None
        while time.time() < deadline and tool is None:
            tool = next((f for f in page.frames if "/data/plugin/profile/trace_viewer@" in f.url), None)
            page.wait_for_timeout(200)
        assert tool is not None, [f.url for f in page.frames]
        q = urllib.parse.parse_qs(urllib.parse.urlparse(tool.url).query)
        assert q["run"] == [run["run"]] and q["host"] == [run["hosts"][0]["name"]]
        page.wait_for_timeout(2000)
        page.screenshot(path=os.path.join(artifacts_dir, f"profile-tab-{prefix}.png"))
        theirs = page.console_log.errors[ours:]
        print("Profile tab console errors:", theirs)
        assert all("/perfdiag/" not in url and "/perfdiag/" not in text for _, text, url in theirs)
        del page.console_log.errors[ours:]
    assert http.errors == []
    assert page.console_log.unexpected() == []


def test_summary_row_and_host_page_show_the_same_span(browser, tmp_path, artifacts_dir):
    """Two hosts, two captures each (the older one input-bound, the latest one not): the
    summary table, the host page and the API all use the latest, and say so."""
    ld = tmp_path / "pair"
    for w in ("hosta", "hostb"):
        (ld / "job").mkdir(parents=True, exist_ok=True)
        shutil.copy(_syn_file("kineto_data_loading"), ld / "job" / f"{w}.1790000000000.pt.trace.json")
        shutil.copy(_syn_file("kineto_sync_nonzero"), ld / "job" / f"{w}.1790000600000.pt.trace.json")
    tb = TensorBoard(ld)
    try:
        ctx = browser.new_context(viewport={"width": 1400, "height": 1100})
        pg = ctx.new_page()
        con, http = Console(pg), Http(ctx)
        frame = open_diagnose(pg, tb)
        # two hosts: the run opens on its hosts summary (issue 63); hosta's page next
        frame.wait_for_selector(".pd-compare[data-complete]", timeout=120000)
        frame.select_option("#pd-host", "hosta")
        frame.wait_for_function("() => (document.getElementById('perfdiag-root')?.dataset"
                                ".loaded || '').startsWith('job|hosta')", timeout=120000)
        wait_loaded(frame, "job")
        assert frame.eval_on_selector("#pd-host", "e => e.value") == "hosta"
        assert frame.eval_on_selector("#pd-span", "e => e.value") == "1790000600000"
        span_text = frame.eval_on_selector("#pd-span", "e => e.selectedOptions[0].textContent")
        assert span_text == "2026-09-21 14:23:20.000 UTC (latest)"
        assert "latest of 2 captures" in frame.inner_text("#pd-span-note")
        rule = frame.get_attribute("#pd-span-note", "title")
        assert "latest" in rule and "pod summary" in rule
        duty_a = frame.inner_text(".pd-duty")
        _, _, api = tb.get("/data/plugin/perfdiag/diagnosis?run=job&host=hosta&gaps_limit=1")
        assert duty_a == f"{100 * api['devices'][0]['duty_cycle']:.0f}%"
        if frame.get_attribute("#pd-compare", "aria-expanded") != "true":
            frame.click("#pd-compare")     # (still open from the hosts summary it opened on)
        frame.wait_for_selector(".pd-compare[data-complete]", timeout=120000)
        row = frame.locator('.pd-compare-row[data-host="hosta"]')
        assert row.locator(".pd-capture").inner_text() == "2026-09-21 14:23:20.000 UTC"
        assert row.locator("td.pd-num").first.inner_text() == duty_a
        frame.locator(".pd-compare").screenshot(path=os.path.join(artifacts_dir, "span-summary.png"))
        row_b = frame.locator('.pd-compare-row[data-host="hostb"]')
        duty_b = row_b.locator("td.pd-num").first.inner_text()
        row_b.click()
        frame.wait_for_function("() => (document.getElementById('perfdiag-root')?.dataset.loaded || '').startsWith('job|hostb|')",
                                timeout=60000)
        assert frame.eval_on_selector("#pd-span", "e => e.value") == "1790000600000"
        assert frame.inner_text(".pd-duty") == duty_b
        pg.screenshot(path=os.path.join(artifacts_dir, "span-host-page.png"))
        assert http.errors == [] and con.unexpected() == []
        ctx.close()
    finally:
        tb.stop()


def _demo_layout(dest):
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    try:
        import demo_logdir
    finally:
        sys.path.pop(0)
    return demo_logdir.build(str(dest))


def test_demo_opens_on_its_most_telling_run_and_new_runs_appear_on_reload(browser, tmp_path,
                                                                           artifacts_dir):
    ld = tmp_path / "demo"
    names = _demo_layout(ld)
    assert names[0] == "01_pytorch_gpu_input_bound"
    tb = TensorBoard(ld)
    try:
        ctx = browser.new_context(viewport={"width": 1400, "height": 1100})
        pg = ctx.new_page()
        con, http = Console(pg), Http(ctx)
        frame = open_diagnose(pg, tb)
        frame.wait_for_function("() => document.getElementById('perfdiag-root')?.dataset.loaded",
                                timeout=60000)
        loaded = frame.evaluate("() => document.getElementById('perfdiag-root').dataset.loaded")
        assert loaded.startswith(names[0] + "|") and loaded.endswith("|ok")
        assert frame.locator("#pd-no-device").count() == 0
        assert "Data loading" in frame.inner_text(".pd-summary")
        pg.screenshot(path=os.path.join(artifacts_dir, "demo-first-screen.png"))
        # while the page is open: a new run, and a new capture of the open worker
        frame.evaluate("() => { window.__sameDocument = true; }")
        new_run = ld / "00_written_while_open"
        new_run.mkdir()
        shutil.copy(_syn_file("kineto_sync_nonzero"), new_run / "worker0.1795400900000.pt.trace.json")
        old = os.listdir(ld / names[0])[0]
        shutil.copy(_syn_file("kineto_h2d_copy"), ld / names[0] / "worker0.1795400999000.pt.trace.json")
        opts = lambda sel: frame.eval_on_selector_all(f"{sel} option", "els => els.map(e => e.value)")  # noqa: E731
        assert "00_written_while_open" not in opts("#pd-run")
        pg.click("button.reload-button")                 # TensorBoard's reload button
        frame.wait_for_function("() => [...document.querySelectorAll('#pd-run option')]"
                                ".some(o => o.value === '00_written_while_open')", timeout=30000)
        frame.wait_for_selector("#pd-span", timeout=10000)
        assert frame.evaluate("() => window.__sameDocument === true")   # no browser reload
        # the selection stays: same run, same capture as before, the new one listed as latest
        assert frame.eval_on_selector("#pd-run", "e => e.value") == names[0]
        assert frame.eval_on_selector("#pd-span", "e => e.value") == old.split(".")[1]
        assert opts("#pd-span") == [old.split(".")[1], "1795400999000"]
        assert frame.evaluate("() => document.getElementById('perfdiag-root').dataset.loaded") == loaded
        pg.screenshot(path=os.path.join(artifacts_dir, "live-run-after-reload.png"))
        assert http.errors == [] and con.unexpected() == []
        ctx.close()
    finally:
        tb.stop()


def _long_name_trace(path):
    from tb_perfdiag.testing import TraceBuilder
    b = TraceBuilder()
    long = "very_long_thread_name_" + "x" * 100_000
    main, s7 = b.thread(long), b.stream()
    with b.step(main, 1, 0, 600):
        b.launch(main, "cudaLaunchKernel", 1, 2, kernel=b.kernel(s7, "k1", 5, 10))
        b.op(main, "op_" + "y" * 100_000, 20, 300)
        b.launch(main, "cudaLaunchKernel", 340, 2, kernel=b.kernel(s7, "k_" + "z" * 100_000, 350, 100))
    path.write_bytes(b.to_bytes())


@pytest.fixture(scope="module")
def tb_pages(tmp_path_factory):
    ld = tmp_path_factory.mktemp("pages")
    shutil.copytree(os.path.join(TESTDATA, "captures", "torch_cpu"), ld / "cpu_only")
    (ld / "long_names").mkdir()
    _long_name_trace(ld / "long_names" / "w.1790000000000.pt.trace.json")
    if os.path.exists(TPU4):
        dst = ld / "tpu4" / "plugins" / "profile" / "2024_01_01_00_00_00"
        dst.mkdir(parents=True)
        shutil.copy(TPU4, dst / "tpuhost.xplane.pb")
    if os.path.isdir(DLRM):
        shutil.copytree(DLRM, ld / "dlrm8")
    tb = TensorBoard(ld)
    yield tb
    tb.stop()


def test_the_8_rank_hosts_table_fits_1600_px(browser, tb_pages, artifacts_dir):
    """Issue 63: the 8-rank DLRM hosts table was wider than 1,600 px (a capture column, the
    causes on one line): each host's capture is under its name, the causes wrap between
    their chips, and the table fits the card at 1,600 px."""
    if not os.path.isdir(DLRM):
        pytest.skip(f"real traces not available ({DLRM} is absent; they live in ../shared/traces)")
    name = run_named(tb_pages, "dlrm8")["run"]
    ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
    pg = ctx.new_page()
    frame = open_diagnose(pg, tb_pages, f"&p.perfdiag.run={urllib.parse.quote(name)}")
    frame.wait_for_selector(".pd-compare[data-complete]", timeout=240000)
    assert frame.locator(".pd-compare-row").count() == 8
    table, card = frame.evaluate("() => { const t = document.querySelector('.pd-compare-table');"
                                 " return [t.scrollWidth, t.parentElement.clientWidth]; }")
    assert table <= card + 1, (table, card)
    assert frame.locator(".pd-compare-row th .pd-capture").count() == 8
    _fits(pg, frame)
    pg.screenshot(path=os.path.join(artifacts_dir, "hosts-8-ranks-1600.png"))
    ctx.close()


def _fits(pg, frame):
    inner = frame.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    outer = pg.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert inner[0] <= inner[1] + 1, inner
    assert outer[0] <= outer[1] + 1, outer


def _full_screenshot(pg, frame, path):
    h = frame.evaluate("() => document.documentElement.scrollHeight")
    pg.set_viewport_size({"width": 1400, "height": min(h + 120, 8000)})
    pg.wait_for_timeout(600)
    pg.screenshot(path=path)
    pg.set_viewport_size({"width": 1400, "height": 1100})


@pytest.mark.parametrize("run", ["cpu_only", "tpu4", "long_names"])
def test_pages_fit_the_window(browser, tb_pages, artifacts_dir, run):
    if run == "tpu4" and not os.path.exists(TPU4):
        pytest.skip(f"real traces not available ({TPU4} is absent; they live in ../shared/traces)")
    name = run_named(tb_pages, run)["run"]
    ctx = browser.new_context(viewport={"width": 1400, "height": 1100})
    pg = ctx.new_page()
    con, http = Console(pg), Http(ctx)
    frame = open_diagnose(pg, tb_pages, f"&p.perfdiag.run={urllib.parse.quote(name)}")
    wait_loaded(frame, name)
    wait_timeline_fetches(frame, 1)
    if frame.locator(".gap-row").count():
        frame.locator(".gap-row").first.click()
        frame.wait_for_selector(".pd-detail-cause", timeout=60000)
    _fits(pg, frame)
    text = frame.inner_text("#perfdiag-root")
    assert "thread thread" not in text
    lanes = timeline_model(frame)["lanes"]
    if run == "cpu_only":
        assert "No device activity in this trace" in frame.inner_text("#pd-no-device")
        assert "0.00 ns" not in text and "window 1.00 ns" not in text
        host = [lane for lane in lanes if lane["kind"] == "host"]
        assert host and all(lane["n"] > 0 for lane in host)        # the host timeline
        assert frame.locator(".step-bar").count() == 3
        assert frame.locator(".step-bar rect[fill]").count() >= 3  # bars, not an empty chart
    if run == "tpu4":
        # 100 steps: numbers that do not overlap; 100+ host threads folded into pools
        boxes = sorted(frame.eval_on_selector_all(".step-label", "els => els.map(e => { const b = e.getBBox(); return [b.x, b.width]; })"))
        assert 10 < len(boxes) < 100
        assert all(a[0] + a[1] <= b[0] for a, b in zip(boxes, boxes[1:]))
        groups = [lane for lane in lanes if lane["kind"] == "hostgroup"]
        assert groups and len(lanes) < 60
        # the page's length does not grow with the 100 steps or the 100+ threads; the
        # efficiency cards (the waterfall, a roofline chart under the op table) add ~450 px
        assert frame.evaluate("() => document.documentElement.scrollHeight") < 5600
        # a pool opens on a click, thread by thread (once the lanes of the view are in)
        frame.wait_for_function(
            "() => { const m = window.__perfdiag.timeline.model();"
            " return m.fetched && m.fetched.start === m.view.start && m.fetched.end === m.view.end; }",
            timeout=30000)
        lanes = timeline_model(frame)["lanes"]
        groups = [lane for lane in lanes if lane["kind"] == "hostgroup"]
        before = len(lanes)
        frame.evaluate("() => document.getElementById('pd-timeline').scrollIntoView()")
        box = frame.locator("#pd-timeline canvas").bounding_box()
        pg.mouse.click(box["x"] + 20, box["y"] + groups[0]["y"] + groups[0]["h"] / 2)
        frame.wait_for_function("(n) => window.__perfdiag.timeline.model().lanes.length > n", arg=before)
        _fits(pg, frame)
    if run == "long_names":
        name_el = frame.locator(".pd-thread-name").first
        assert len(name_el.inner_text()) <= 121
        assert name_el.get_attribute("title").startswith("very_long_thread_name_xxx")
        assert len(frame.inner_text("#pd-detail")) < 20_000
        # cut, not wrapped over screens: the page is as tall as for short names
        assert frame.evaluate("() => document.documentElement.scrollHeight") < 4000
    _full_screenshot(pg, frame, os.path.join(artifacts_dir, f"page-fits-{run}.png"))
    assert http.errors == []
    assert con.unexpected() == []
    ctx.close()


def test_without_the_profile_plugin_the_gap_is_a_download_not_a_dead_link(page, tb_demo, artifacts_dir):
    """A TensorBoard without the Profile plugin (its runs route says so): no trace-viewer
    button leads to 'Not found'; the overlay of the gap is offered as a file instead."""
    def no_profile(route):
        res = route.fetch()
        body = res.json()
        body["profile_plugin"] = False
        route.fulfill(response=res, body=json.dumps(body))
    page.route("**/data/plugin/perfdiag/runs*", no_profile)
    http = Http(page.context)
    run = run_named(tb_demo, "torch_xla_cpu")
    gap = _largest_gap(tb_demo, run)
    frame = open_diagnose(page, tb_demo, f"&p.perfdiag.run={urllib.parse.quote(run['run'])}")
    wait_loaded(frame, run["run"])
    _open_gap(frame, gap["id"])
    assert frame.get_attribute("#pd-actions", "data-profile") == "none"
    assert frame.locator("#pd-open-trace, #pd-open-profile, #pd-open-profile-viewer").count() == 0
    href = frame.get_attribute("#pd-download-trace", "href")
    status, _, ov = tb_demo.get(href.split(tb_demo.url, 1)[-1])
    assert status == 200 and any(e.get("cat") == "gap" and e["args"]["gap"] == gap["id"]
                                 for e in ov["traceEvents"])
    frame.locator("#pd-detail").screenshot(path=os.path.join(artifacts_dir, "no-profile-plugin-download.png"))
    assert http.errors == [] and page.console_log.unexpected() == []


def test_runs_route_says_which_hand_offs_exist(tb_demo):
    _, _, body = tb_demo.get("/data/plugin/perfdiag/runs")
    assert body["profile_plugin"] is True            # an install dependency, loaded
    assert "latest" in body["span_rule"]
    status, headers, listed = tb_demo.get("/data/plugin/profile/runs")
    if isinstance(listed, bytes):                    # the Profile plugin gzips its answers
        import gzip
        listed = json.loads(gzip.decompress(listed) if listed[:2] == b"\x1f\x8b" else listed)
    ours = {r["run"] for r in body["runs"] if r["layout"] == "profile" and "broken" not in r["run"]}
    assert status == 200 and ours <= set(listed)     # the Profile plugin's names are ours
