"""Pure logic of the Diagnose page (URL state, formatting, step-chart layout), run in
headless Chromium: the ES modules are imported, as served by a real TensorBoard."""
from __future__ import annotations

import os

import pytest

from conftest import IN_CI

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def js(tb_demo):
    if not os.path.exists(CHROMIUM):
        if IN_CI:
            pytest.fail(f"{CHROMIUM} is required in CI")
        pytest.skip(f"{CHROMIUM} is absent (apt-get install chromium)")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        pg = b.new_page()
        errors = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.goto(tb_demo.url + "/data/plugin/perfdiag/version")
        base = tb_demo.url + "/data/plugin/perfdiag/"

        def run(body, arg=None):
            return pg.evaluate(
                "async ([base, body, arg]) => {"
                " const m = {};"
                " for (const n of ['state', 'format', 'steps_chart', 'timeline', 'api', 'annotations', 'compare', 'compare_runs', 'collectives', 'view_trend', 'trend_chart', 'headline'])"
                "   m[n] = await import(base + n + '.js');"
                " return await (new Function('m', 'arg', body))(m, arg); }",
                [base, body, arg])
        yield run
        assert errors == []
        b.close()


def test_state_round_trip(js):
    state = {"run": "torch_xla_cpu/2026 11&x=y", "host": "cpu#host", "span": "", "device": "0",
             "step": "5", "gap": "0-3420028685", "zoom": "100_200"}
    out = js("const h = m.state.encodeHash(arg, '#perfdiag&p.perfdiag.run=old&other=1');"
             " return [h, m.state.decodeHash(h)];", state)
    h, decoded = out
    assert h.startswith("#perfdiag&")
    assert "other=1" in h and "p.perfdiag.run=old" not in h
    assert decoded == {k: v for k, v in state.items() if v}
    assert js("return m.state.decodeHash('#scalars&p.other.run=x&p.perfdiag.bogus=1')") == {}
    assert js("return m.state.decodeHash('')") == {}


def test_format_ns(js):
    got = js("return [1234567, 999, 1500, 2.5e9, 0, null, 12345678].map(m.format.formatNs)")
    assert got == ["1.23 ms", "999 ns", "1.50 µs", "2.50 s", "0 ns", "–", "12.3 ms"]
    # the page and the Python faces write every duration alike (one unit rule)
    from test_units import CASES
    from tb_perfdiag.units import duration
    values = [ns for ns, _ in CASES if ns is not None and ns == ns] + [0.5, 2.5, 1e13, 99.95e6]
    assert js("return arg.map(m.format.formatNs)", values) == [duration(v) for v in values]
    assert js("return [0.0117, 0.5, 0, 0.0003].map(m.format.formatPct)") == ["1.2%", "50%", "0%", "<0.1%"]


def test_step_layout_and_aggregation(js):
    steps = [
        {"id": 0, "start_ns": 0, "end_ns": 100, "compile": {"count": 1}, "outlier": True,
         "devices": {"0": {"busy_ns": 10, "idle_ns": 90, "idle_by_cause_ns": {"compilation": 60, "data_loading": 20}}}},
        {"id": 1, "start_ns": 100, "end_ns": 125, "compile": {"count": 0},
         "devices": {"0": {"busy_ns": 20, "idle_ns": 5, "idle_by_cause_ns": {}}}},
    ]
    segs = js("return m.steps_chart.stepSegments(arg, 0)", steps[0])
    assert segs == [{"cause": "busy", "ns": 10}, {"cause": "compilation", "ns": 60},
                    {"cause": "data_loading", "ns": 20}, {"cause": "other_idle", "ns": 10}]
    bars = js("return m.steps_chart.layoutSteps(arg, 0, 200, 136, {top: 18, bottom: 18})", steps)
    assert [b["recompile"] for b in bars] == [True, False]
    # a step whose only compile is a function's first is not called a recompile
    assert bars[0]["compileWord"] == "compiles"
    again = dict(steps[0], compile={"count": 2, "recompiles": 1})
    assert js("return m.steps_chart.compileWord(arg)", again) == "recompiles"
    assert bars[0]["w"] < 100 and bars[1]["x"] > bars[0]["x"]
    # Tallest bar fills the plot (100 px); the other is sqrt(25/100) of it.
    h0 = sum(s["h"] for s in bars[0]["segments"])
    h1 = sum(s["h"] for s in bars[1]["segments"])
    assert abs(h0 - 100) < 1e-6 and abs(h1 - 50) < 1e-6
    # Segments stack upwards from the baseline without overlap.
    s0 = bars[0]["segments"]
    assert abs(s0[0]["y"] + s0[0]["h"] - 118) < 1e-6
    assert all(abs(a["y"] - (b["y"] + b["h"])) < 1e-6 for a, b in zip(s0, s0[1:]))


def test_timeline_zoom_and_api_base(js):
    v = js("return m.timeline.zoomView({start: 0, end: 1000000}, 500000, 0.5, {start: 0, end: 1000000})")
    assert v == {"start": 250000, "end": 750000}
    v = js("return m.timeline.panView({start: 0, end: 1000}, -500, {start: 0, end: 10000})")
    assert v == {"start": 0, "end": 1000}
    base = js("return [m.api.BASE.pathname, m.api.TB_ROOT.pathname]")
    assert base == ["/data/plugin/perfdiag/", "/"]


def test_annotation_tree_and_per_step(js):
    anns = [
        {"path": ["train"], "name": "train", "inclusive_ns": 100, "exclusive_ns": 0,
         "per_step": {"1": {"inclusive_ns": 60, "exclusive_ns": 0}}},
        {"path": ["train", "backward"], "name": "backward", "inclusive_ns": 30, "exclusive_ns": 30, "per_step": {}},
        {"path": ["train", "forward"], "name": "forward", "inclusive_ns": 70, "exclusive_ns": 70, "per_step": {}},
    ]
    tree = js("const t = m.annotations.buildTree(arg);"
              " return t.map(n => [n.key, n.children.map(c => c.key)]);", anns)
    assert tree == [["train", ["train/forward", "train/backward"]]]   # children by time, largest first
    assert js("return m.annotations.annTimes(arg, '1')", anns[0]) == {"inclusive_ns": 60, "exclusive_ns": 0}
    assert js("return m.annotations.annTimes(arg, '7')", anns[0]) == {"inclusive_ns": 0, "exclusive_ns": 0}
    assert js("return m.annotations.annTimes(arg, '')", anns[0]) == {"inclusive_ns": 100, "exclusive_ns": 0}


def test_host_summary(js):
    diag = {"devices": [{"name": "TPU 0", "duty_cycle": 0.5}],
            "steps": [{"start_ns": 0, "end_ns": 100}, {"start_ns": 100, "end_ns": 300}],
            "gaps": [{"duration_ns": 40, "cause": "host_sync", "cause_label": "Host sync"}],
            "findings": [{"title": "a", "time_lost_ns_per_step": 1}, {"title": "b", "time_lost_ns_per_step": 9}]}
    s = js("return m.compare.hostSummary(arg)", diag)
    assert s["avg_step_ns"] == 150 and s["steps"] == 2
    assert s["worst_gap"]["duration_ns"] == 40 and s["top_finding"]["title"] == "b"
    assert s["devices"] == [{"name": "TPU 0", "duty_cycle": 0.5}]


def test_lane_layout(js):
    data = {"lanes": [
        {"kind": "host", "label": "python", "device": -1, "events": [[0, 10, 0, 0], [1, 5, 0, 2]]},
        {"kind": "device", "label": "TPU 0 · ops", "device": 0, "bins": {"share": [1, 0], "name": [0, -1]}},
        {"kind": "annotation", "label": "TPU 0 · annotations", "device": 0, "events": []},
    ]}
    rows = js("return m.timeline.layoutLanes(arg, [{id: 0, name: 'TPU 0'}], {}).rows"
              ".map(r => [r.kind, r.label, r.y, r.h])", data)
    assert [r[0] for r in rows] == ["gaps", "device", "annotation", "host"]
    assert rows[0][1] == "TPU 0 · idle gaps"
    assert all(b[2] >= a[2] + a[3] for a, b in zip(rows, rows[1:]))   # no overlap
    assert rows[3][3] == 3 * 14   # host lane: depth 0..2 stacked


def test_compare_runs_logic(js):
    # lower step time and idle are better, higher duty is better; more busy time is neither
    got = js("return [['step', -5], ['step', 5], ['idle', -1], ['duty', 0.1], ['duty', -0.1],"
             " ['busy', 9], ['idle', 0]].map(([k, d]) => m.compare_runs.verdict(k, d))")
    assert got == ["better", "worse", "better", "better", "worse", "", ""]
    assert js("return [1200000, -350000, 0, null].map(m.compare_runs.signedNs)") == \
        ["+1.20 ms", "−350 µs", "0", "–"]
    assert js("return [0.132, -0.05, 0].map(m.compare_runs.signedPoints)") == \
        ["+13.2 points", "−5.0 points", "0"]
    runs = [{"run": "a", "hosts": [{"name": "h1", "spans": [{"name": "1"}, {"name": "2"}]}]},
            {"run": "b", "hosts": [{"name": "h2", "spans": [{"name": ""}]}]}]
    # another run: the one listed before the current, else the first other one
    assert js("return m.compare_runs.defaultBase(arg, {run: 'b', host: 'h2'})", runs) == \
        {"base_run": "a", "base_host": "h1", "base_span": ""}
    assert js("return m.compare_runs.defaultBase(arg, {run: 'a', host: 'h1'})", runs)["base_run"] == "b"
    # one run only: another span of the same host
    assert js("return m.compare_runs.defaultBase([arg[0]], {run: 'a', host: 'h1', span: '1'})", runs) == \
        {"base_run": "a", "base_host": "h1", "base_span": "2"}
    # the nearest comparable run: same layout, formats and host count — a PyTorch GPU run
    # is compared with the next PyTorch run, never with the JAX pod listed before it
    def run(name, layout, fmt, hosts, spans=("1",)):
        return {"run": name, "layout": layout, "hosts": [
            {"name": f"host{i}", "spans": [{"name": s, "format": fmt, "latest": s == spans[-1]}
                                            for s in spans]} for i in range(hosts)]}
    demo = [run("01_gpu", "pytorch", "kineto", 1), run("01b_pod", "profile_plugin", "xspace", 4),
            run("02_tpu", "profile_plugin", "xspace", 1), run("03_gpu", "pytorch", "kineto", 1),
            run("10_xla", "profile_plugin", "xspace", 1, ("1", "2", "3"))]
    pick = lambda state: js("return m.compare_runs.defaultBase(arg[0], arg[1])", [demo, state])  # noqa: E731
    assert pick({"run": "01_gpu", "host": "host0"})["base_run"] == "03_gpu"
    assert pick({"run": "03_gpu", "host": "host0"})["base_run"] == "01_gpu"
    assert pick({"run": "10_xla", "host": "host0"})["base_run"] == "02_tpu"
    # nothing comparable: another host of the pod
    assert pick({"run": "01b_pod", "host": "host0"}) == \
        {"base_run": "01b_pod", "base_host": "host1", "base_span": ""}
    # the only run of its kind with several captures: the one before the span shown
    alone = [demo[0], demo[4]]
    assert js("return m.compare_runs.defaultBase(arg[0], arg[1])", [alone, {"run": "10_xla", "host": "host0"}]) == \
        {"base_run": "10_xla", "base_host": "host0", "base_span": "2"}
    assert js("return m.compare_runs.defaultBase(arg[0], arg[1])",
              [alone, {"run": "10_xla", "host": "host0", "span": "2"}])["base_span"] == "1"
    # the picker of a run with one span: no span field, and no stray "null" text
    text = js("const d = document.createElement('div');"
              " m.compare_runs.renderPicker(d, arg, {run: '03_gpu', host: 'host0'}, {onCompare() {}, onCancel() {}});"
              " return [d.textContent, d.querySelectorAll('select').length]", demo)
    assert "null" not in text[0] and "undefined" not in text[0] and text[1] == 2
    rows = js("return m.compare_runs.deviceRows(arg).map(r => [r.key, r.metric, r.before, r.after])", {
        "before": {"window_ns": 10, "duty_cycle": 0.5, "busy_ns": 5, "short_gaps_ns": 1},
        "after": {"window_ns": 8, "duty_cycle": 0.75, "busy_ns": 6, "short_gaps_ns": 0},
        "causes": [{"cause": "data_loading", "before_ns": 4, "after_ns": 1,
                    "before_share": 0.4, "after_share": 0.125}]})
    assert rows == [["window", "step", 10, 8], ["duty", "duty", 0.5, 0.75], ["busy", "busy", 5, 6],
                    ["data_loading", "idle", 4, 1], ["short", "idle", 1, 0]]
    assert js("return m.compare_runs.deviceRows({before: null, after: {}, causes: []})") == []


def test_pod_page_label(js):
    assert js("return [m.compare.pageLabel(0, 50, 1000), m.compare.pageLabel(950, 50, 1000),"
              " m.compare.pageLabel(100, 0, 64)]") == [
        "Hosts 1–50 of 1000", "Hosts 951–1000 of 1000", "No host of 64 on this page"]
    assert js("return m.compare.HOSTS_PAGE") == 50
    assert [k for k, _ in js("return m.compare.SORTS")][:2] == ["straggler", "host"]


def test_many_steps_get_numbers_that_do_not_overlap(js):
    steps = [{"id": i, "start_ns": i * 1000, "end_ns": i * 1000 + 900,
              "devices": {"0": {"busy_ns": 500, "idle_ns": 400, "idle_by_cause_ns": {}}}}
             for i in range(105)]
    bars = js("return m.steps_chart.layoutSteps(arg, 0, 1100, 200)", steps)
    xs = [b["x"] for b in bars if b["labelled"]]
    assert 20 <= len(xs) < 105 and bars[0]["labelled"]
    assert min(b - a for a, b in zip(xs, xs[1:])) >= 30        # a step number's room
    few = js("return m.steps_chart.layoutSteps(arg.slice(0, 5), 0, 1100, 200)", steps)
    assert all(b["labelled"] and not b["narrow"] for b in few)
    # host-only steps (no device activity) are bars of their host time, not empty slots
    host = js("return m.steps_chart.layoutSteps(arg.slice(0, 3), 0, 600, 200, {hostOnly: true})", steps)
    assert all(b["segments"][0]["cause"] == "host_step" and b["total_ns"] == 900 for b in host)


def test_long_names_are_squeezed_word_by_word(js):
    got = js("return [m.format.squeeze('blocks on ' + 'x'.repeat(100000) + ' per step', 80, 2000),"
             " m.format.cut('abc', 5), m.format.cut('abcdefgh', 5)]")
    assert got[0].startswith("blocks on xxx") and got[0].endswith("… per step") and len(got[0]) < 100
    assert got[1:] == ["abc", "abcd…"]


def test_lane_text_names_the_thread_then_its_id(js):
    got = js("return ['thread 31337 (python)', 'tf_numa_-1_Eigen/-2230364228667159358', "
             "'CPU (XLA) · tf_data_private_threadpool/-42', 'GPU 0 · stream 7', 'python']"
             ".map(m.format.laneText)")
    assert got == ["python · 31337", "tf_numa_-1_Eigen · -2230364228667159358",
                   "CPU (XLA) · tf_data_private_threadpool/-42", "GPU 0 · stream 7", "python"]
    assert js("return [0, 1, 2].map((n) => m.format.plural(n, 'step'))") == \
        ["0 steps", "1 step", "2 steps"]


def test_every_cause_has_a_legend_entry_and_start_up_is_one(js):
    from tb_perfdiag.analysis import causes as C
    labels = js("return [m.format.CAUSE_LABELS, m.format.CAUSE_COLORS]")
    for c in C.ALL:
        assert c in labels[0] and c in labels[1], c
    assert labels[0]["startup"].startswith("Start-up")
    # no two causes share a colour
    colors = [labels[1][c] for c in C.ALL]
    assert len(set(colors)) == len(colors)


def test_a_one_time_finding_badge_has_no_rate_per_step(js):
    got = js("return [m.format.findingCost({one_time: true, time_lost_ns: 981e6,"
             " time_lost_ns_per_step: 0}),"
             " m.format.findingCost({once: {step: 0}, time_lost_ns: 2e6,"
             " time_lost_ns_per_step: 5e4}),"
             " m.format.findingCost({time_lost_ns: 3e6, time_lost_ns_per_step: 0,"
             " outside_steps_ns: 3e6}),"
             " m.format.findingCost({time_lost_ns: 4e6, time_lost_ns_per_step: 1e6})]")
    assert got[0].endswith("lost once") and "per step" not in got[0]
    assert got[1].endswith("lost once") and "per step" not in got[1]
    assert "outside the steps" in got[2] and "per step" not in got[2]
    assert got[3].endswith("lost per step")


def test_format_si_and_share_as_the_python_faces(js):
    # the MFU stat, the roofline's tooltips and the CLI write one figure alike
    from tb_perfdiag.render.efficiency import pct, si
    vals = [4.6654e12, 1.037e8, 9.9996e11, 918e12, 45.25e12, 15.7e12, 3.277e5, 5.0, 0.0]
    assert js("return arg.map((x) => m.format.formatSi(x, 'FLOP/s'))", vals) == \
        [si(v, "FLOP/s") for v in vals]
    fr = [0.2789, 0.0285, 0.000117, 0.000125, 4.79e-6, 0.0, 1.0, 0.4525, 0.0995]
    assert js("return arg.map(m.format.formatShare)", fr) == [pct(v) for v in fr]
    assert js("return m.format.peakSourceText('datasheet:V100 SXM2')") == "V100 SXM2 datasheet"


def test_duty_wait_text_says_nothing_of_a_wait_under_a_twentieth_of_a_point(js):
    coll = {"state": "joined", "devices": [
        {"id": 0, "wait_ns": 120, "wait_points": 0.004, "waited_for": "TPU 2", "waited_at": "all-reduce"},
        {"id": 1, "wait_ns": 9e6, "wait_points": 30.2, "waited_for": "TPU 2", "waited_at": "all-reduce"}]}
    got = js("return [0, 1].map((i) => m.collectives.dutyWaitText(arg, i))", coll)
    assert got == [None, "30 points of it waiting for TPU 2 at all-reduce"]


def test_trend_captures_from_the_run_list_and_the_selection_a_capture_opens(js):
    span = lambda n: {"name": n}  # noqa: E731
    runs = [
        {"run": "jax/2026_11_30_00_53_20", "layout": "profile", "hosts": [{"name": "h1", "spans": [span("")]}, {"name": "h2", "spans": [span("")]}]},
        {"run": "jax/2026_11_30_00_58_20", "layout": "profile", "hosts": [{"name": "h1", "spans": [span("")]}, {"name": "h2", "spans": [span("")]}]},
        {"run": "other/2026_11_30_00_53_20", "layout": "profile", "hosts": [{"name": "h1", "spans": [span("")]}]},
        {"run": "torch", "layout": "pytorch", "hosts": [{"name": "w0", "spans": [span("100"), span("200")]},
                                                        {"name": "w1", "spans": [span("101"), span("201")]}]},
    ]
    got = js("return ['jax/2026_11_30_00_58_20', 'other/2026_11_30_00_53_20', 'torch', 'nope']"
             ".map((n) => m.view_trend.trendCaptureCount(arg, n))", runs)
    assert got == [2, 1, 2, 0]
    sel = js("const f = m.view_trend.captureSelection; return ["
             " f(arg, 'jax/2026_11_30_00_53_20', 'h2', {session: '2026_11_30_00_58_20'}, 1),"
             " f(arg, 'torch', 'w1', {session: '200'}, 1),"      # the capture is named by w0's span
             " f(arg, 'torch', 'w1', {session: '999'}, 1),"      # not named: the host's own k-th
             " f(arg, 'jax/2026_11_30_00_53_20', 'h1', {session: 'gone'}, 0)]", runs)
    assert sel == [{"run": "jax/2026_11_30_00_58_20", "host": "h2", "span": ""},
                   {"run": "torch", "host": "w0", "span": "200"},
                   {"run": "torch", "host": "w1", "span": "201"}, None]


def test_trend_layout_leaves_a_flagged_capture_out_of_the_lines(js):
    ok = {"ok": True, "problems": []}
    doc = {"captures": [
        {"session": "a", "start_time": "2026-11-30T00:53:20Z", "step_time_ns": 3e6, "duty_cycle": 0.98, "mfu": None,
         "idle_by_cause": {"untraced": 0.01, "launch_overhead": 0.01}, "trust": ok},
        {"session": "b", "start_time": "2026-11-30T00:58:20Z", "step_time_ns": None, "duty_cycle": None, "mfu": None,
         "idle_by_cause": {}, "trust": {"ok": False, "problems": ["empty file (0 bytes): …"]}},
        {"session": "c", "start_time": "2026-12-01T00:03:20Z", "step_time_ns": 15e6, "duty_cycle": 0.2, "mfu": 0.1,
         "idle_by_cause": {"data_loading": 0.8, "untraced": 0.0}, "trust": ok}]}
    lay = js("return m.trend_chart.layoutTrend(arg, 1000)", doc)
    cols = lay["cols"]
    assert [c["c"]["session"] for c in cols] == ["a", "b", "c"]
    assert [c["x"] for c in cols] == sorted(c["x"] for c in cols)
    assert cols[1]["ok"] is False and cols[1]["step"] is None and cols[1]["duty"] is None
    assert cols[0]["step"] > cols[2]["step"]                 # SVG y: the slower capture higher
    assert cols[0]["mfu"] is None and cols[2]["mfu"] is not None
    assert [b["cause"] for b in cols[2]["bands"]] == ["data_loading"]   # a zero share draws nothing
    assert lay["stepTop"] >= 15e6 and lay["withDate"] is True
    assert js("return [m.trend_chart.stepRange({first_step: 11, steps: 6}), m.trend_chart.stepRange({first_step: null, steps: 0}),"
              " m.trend_chart.captureTime('2026-11-30T00:53:20Z', false), m.trend_chart.captureTime('2026-11-30T00:53:20Z', true)]") == \
        ["steps 11–16", "", "00:53:20", "11-30 00:53"]


def test_a_loss_per_step_names_the_devices_own_step_where_it_is_not_the_hosts(js):
    """Issue 63: "43 points idle (2.85 ms per step)" beside a 5.98 ms typical step read as
    47.7 %: the device's own step (6.57 ms: it runs behind the host) is named, so the points
    and the figure per step agree; where the two steps agree within 3 % nothing is added."""
    from tb_perfdiag.testing import invariants as I
    body = """const dev = (w) => ({ id: 0, ops: 5, duty_cycle: 0.56, step_window_ns: w,
                    steps_window: { window_ns: 5 * 6570000 },
                    idle_by_cause_ns: { data_loading: 14250000 },
                    idle_per_step_ns: { data_loading: 2850000 }, idle_once_ns: {} });
              return [m.headline.headline(dev(6570000), null, 5, { typicalNs: 5980000 }).text,
                      m.headline.headline(dev(6000000), null, 5, { typicalNs: 5980000 }).text,
                      m.headline.headline(dev(6570000), null, 5).text];"""
    own, near, unknown = js(body)
    assert own == "duty 56% — 43 points idle in data loading / input (2.85 ms of its 6.57 ms per step)"
    assert I.points_agree(own, 5.98e6) == [] and I.per_step_over_step(own, 5.98e6) == []
    assert near.endswith("(2.85 ms per step)") and unknown.endswith("(2.85 ms per step)")
    # the check says when the two disagree
    assert I.points_agree("duty 56% — 43 points idle in data loading / input (2.85 ms per step)",
                          5.98e6)


def test_a_once_part_that_is_a_trace_of_the_rate_is_not_said(js):
    """MTIA's headline read "3.62 s per step, 299 µs once": a part paid once under a
    thousandth of the loss per step is left unsaid; one of a tenth is said."""
    got = js("""return [[3.62e9, 299e3], [3.62e9, 362e6]].map(([per, once]) =>
                 m.headline.costText({ kind: 'host_compute', ns: per + once, per_step_ns: per, once_ns: once }));""")
    assert got == ["3.62 s per step", "3.62 s per step, 362 ms once"]
