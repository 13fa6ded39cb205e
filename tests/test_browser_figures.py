"""Every figure true and said once (issue 63), as a reader reads the page: each demo run and
a few real traces (the public TPU inference, TensorFlow multi-worker and MTIA traces)
opened by a link, their text checked against ``tb_perfdiag.testing.page_checks`` — no
null/NaN/undefined, no share over 100 %, no loss per step above the typical step, the
typical step the diagnosis', the headline on the device that computes and loses most, the
headline's peer wait the Collectives card's.  One TensorBoard and one tab for the module,
one page load per run."""
from __future__ import annotations

import os

import pytest

from conftest import SHARED, TensorBoard
from test_browser import Console, browser, plugin_frame  # noqa: F401 (fixtures)
from test_browser_story import _demo_order
from tb_perfdiag.testing import page_checks

REAL = {   # run name → folder of ../shared/traces (skipped where absent)
    "zz_tpu_inference": os.path.join(SHARED, "public", "xprof", "xprof", "convert", "test_xplanes"),
    "zz_tf_multi_worker": os.path.join(SHARED, "public", "tensorflow-profiler", "demo", "plugins",
                                       "profile", "GPU-multi-worker"),
    "zz_mtia_inference": os.path.join(SHARED, "public", "HolisticTraceAnalysis", "tests", "data",
                                      "mtia_inference_trace"),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(TensorBoard, {run folder: kind}) on the demo logdir with the real traces beside it."""
    mod = _demo_order()
    ld = tmp_path_factory.mktemp("figures") / "logdir"
    names = {n: "demo" for n in mod.build(str(ld))}
    for run, src in REAL.items():
        if not os.path.isdir(src):
            continue
        for f in os.listdir(src):
            if f.endswith(".xplane.pb"):      # XSpace runs keep their profile layout
                mod._place(os.path.join(src, f), os.path.join(str(ld), run, "plugins", "profile",
                                                              "capture", f))
            elif f.endswith((".json", ".json.gz")):
                mod._place(os.path.join(src, f), os.path.join(str(ld), run, f))
        names[run] = "real"
    tb = TensorBoard(ld)
    yield tb, names
    tb.stop()


@pytest.fixture(scope="module")
def pages(browser, server):  # noqa: F811
    """Each run read once: {folder: the page_checks reading}."""
    tb, names = server
    ctx = browser.new_context(viewport={"width": 1600, "height": 1000})
    pg = ctx.new_page()
    pg.console_log = Console(pg)
    listed = [x["run"] for x in tb.get("/data/plugin/perfdiag/runs")[2]["runs"]]
    out = {}
    for folder in names:
        run = next(r for r in listed if r == folder or r.startswith(folder + "/"))
        out[folder] = page_checks.open_run(pg, tb.url, run, lambda p: plugin_frame(p, 60))
    assert pg.console_log.unexpected() == []
    ctx.close()
    return out


def test_no_page_breaks_an_invariant(pages):
    bad = {run: page_checks.problems(p) for run, p in pages.items()}
    assert not any(bad.values()), {k: v for k, v in bad.items() if v}


def test_the_checks_read_what_they_check(pages):
    """The readings hold what the checks compare (a check on empty text cannot fail)."""
    hosts = [p for p in pages.values() if not p["pod"] and not p["error"]]
    assert len(hosts) >= 8
    for p in hosts:
        assert p["doc"] and p["typical"], p["run"]
    assert sum(bool(p["headline"]) for p in hosts) >= 6


def test_a_pod_opens_on_its_hosts_summary(pages):
    assert pages["01b_real_jax_pod_straggler"]["pod"]


def test_a_copy_only_gpu_is_not_the_headline(pages):
    """TF multi-worker: GPU 1 ran copies only; the page opens on a GPU that computes, and
    says no loss per step above its 19.9 ms step."""
    p = pages.get("zz_tf_multi_worker")
    if p is None:
        pytest.skip("../shared has no TensorFlow multi-worker trace")
    assert not p["headline"].startswith("GPU 1:"), p["headline"]
    assert "845 ms per step" not in p["text"]


def test_one_time_losses_are_said_once(pages):
    """torch_xla on CPU: its compilation (6.5 s over 12 steps of a 49.7 ms typical step) is
    paid once, never "544 ms per step"."""
    p = pages["10_real_torch_xla_cpu"]
    assert "once" in p["headline"], p["headline"]
    assert "544 ms per step" not in p["text"]


def test_an_op_faster_than_its_roof_has_no_share(pages):
    p = pages.get("zz_tpu_inference")
    if p is None:
        pytest.skip("../shared has no TPU inference trace")
    rows = [o for d in p["doc"]["device_ops"]["devices"] for o in d["ops"]]
    over = [o for o in rows if (o.get("roofline") or {}).get("above_roof")]
    assert over and all(o["roofline"]["efficiency"] is None for o in over)
    rows = [x for x in p["text"].splitlines() if x.startswith("copy-start")]
    assert rows and "moves its bytes outside its own time" in rows[0] and "HBM ·" not in rows[0]
