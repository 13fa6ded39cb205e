"""Peer wait at collectives in a real TensorBoard and headless Chromium (issue 47): the
Hosts view's peer-wait, last-arrival and lateness columns, a host's Collectives card (per
op: instances, wait, transfer, whom it waited for, links to the step and the straggler's
page), the duty cycle said with its peer-wait points, the step bars with peer wait as its
own part, and the "Device time by op" collective rows split into wait and transfer."""
from __future__ import annotations

import os
import shutil
import urllib.parse

import pytest

from conftest import TensorBoard, shared_path
from test_browser import browser, page, plugin_frame  # noqa: F401 (fixtures)
from test_collectives_faces import DLRM, STEPS, write_run

LOADED = "() => (document.getElementById('perfdiag-root')?.dataset.loaded || '')"
ENV = {"TB_PERFDIAG_WORKERS": "2", "TB_PERFDIAG_WORKER_MEMORY_MB": "1024",
       "TB_PERFDIAG_DASK_SCHEDULER": ""}


def open_host(pg, tb, run, host, step=""):
    pg.goto(tb.url + f"/#perfdiag&p.perfdiag.run={urllib.parse.quote(run)}"
            f"&p.perfdiag.host={urllib.parse.quote(host)}" + (f"&p.perfdiag.step={step}" if step else ""))
    frame = plugin_frame(pg, 60)
    frame.wait_for_function(f"(h) => ({LOADED})().includes('|' + h + '|') && ({LOADED})().endsWith('|ok')",
                            arg=host, timeout=120000)
    frame.wait_for_function("() => ['joined', 'alone', 'none', 'other_span', 'error']"
                            ".includes(document.getElementById('perfdiag-root')?.dataset.collectives)",
                            timeout=180000)
    return frame


def card(frame):
    return frame.evaluate("""() => ({
        state: document.getElementById('perfdiag-root').dataset.collectives,
        hidden: document.getElementById('pd-collectives').hidden,
        rows: [...document.querySelectorAll('#pd-coll-table tbody tr')].map(r => ({
            op: r.dataset.op, cells: [...r.children].map(c => c.textContent)})),
        straggler: document.getElementById('pd-coll-straggler')?.textContent || '',
        duty: [...document.querySelectorAll('.pd-duty-wait')].map(e => e.textContent),
        legend: [...document.querySelectorAll('.pd-legend-item')].map(e => e.dataset.cause),
        peerRects: [...document.querySelectorAll('#pd-steps .step-bar rect')]
            .filter(r => r.getAttribute('fill') === '#5254a3').length,
        bars: document.querySelectorAll('#pd-steps .step-bar').length,
        split: [...document.querySelectorAll('#pd-device-ops-table .dop-split')].map(e => e.textContent),
        note: document.getElementById('pd-coll-note')?.textContent || '',
    })""")


@pytest.fixture(scope="module")
def tb_ranks(tmp_path_factory, artifacts_dir):
    ld = tmp_path_factory.mktemp("ranks")
    write_run(ld / "slow", 4, 2, 600)
    write_run(ld / "fixed", 4, None, 0)
    write_run(ld / "single", 1, None, 0)
    tb = TensorBoard(ld, extra_env=ENV)
    yield tb
    tb.stop()


def test_a_hosts_page_shows_whom_it_waits_for(page, tb_ranks, artifacts_dir):  # noqa: F811
    pg = page
    frame = open_host(pg, tb_ranks, "slow", "rank0")
    c = card(frame)
    assert c["state"] == "joined" and not c["hidden"]
    (row,) = c["rows"]
    op, inst, wait, per_step, transfer, share, who, last, steps = row["cells"]
    assert row["op"] == "all-reduce" and inst == str(STEPS)
    assert wait == "4.80 ms" and per_step == "600 µs"           # 8 steps × 600 µs
    assert who.startswith("rank2 4.80 ms") and last == f"rank2 ×{STEPS}"
    assert "The run's straggler: rank2" in c["straggler"] and "600 µs per step" in c["straggler"]
    assert c["duty"] and "waiting for rank2 at all-reduce" in c["duty"][0]
    assert "peer_wait" in c["legend"] and c["peerRects"] == c["bars"] == STEPS
    assert any("peer wait 4.80 ms" in x for x in c["split"])    # the NCCL row, split
    title = frame.eval_on_selector('#pd-steps .step-bar[data-step="3"] title', "e => e.textContent")
    assert "30 points of it waiting for peers at collectives" in title            # 600 of 2000 µs
    assert "waiting for the last participant): 600 µs" in title
    assert "4.80 ms of busy time over the capture waiting for peers" in frame.inner_text("#pd-gap-peer-wait")
    frame.eval_on_selector("#pd-collectives", "e => e.scrollIntoView()")
    pg.screenshot(path=os.path.join(artifacts_dir, "collectives-host.png"))
    # a step link opens that step; the straggler's link opens its page
    frame.click('#pd-coll-table .pd-coll-step[data-step="3"]')
    frame.wait_for_function(f"() => ({LOADED})().endsWith('|3|ok')", timeout=60000)
    assert "p.perfdiag.step=3" in pg.url
    frame.wait_for_selector("#pd-gap-peer-wait")
    assert "600 µs of busy time in step 3" in frame.inner_text("#pd-gap-peer-wait")
    frame.click("#pd-coll-straggler .pd-coll-straggler-link")
    frame.wait_for_function(f"() => ({LOADED})().startsWith('slow|rank2|')", timeout=60000)
    frame.wait_for_function("() => document.getElementById('perfdiag-root')?.dataset.collectives === 'joined'",
                            timeout=60000)
    c2 = card(frame)
    assert "This host is the run's straggler" in c2["straggler"]
    assert c2["rows"][0]["cells"][2] == "none" and c2["duty"] == []   # it never waits
    assert pg.console_log.unexpected() == []


def test_the_hosts_view_has_peer_wait_last_arrivals_and_lateness(page, tb_ranks, artifacts_dir):  # noqa: F811
    pg = page
    pg.goto(tb_ranks.url + "/#perfdiag&p.perfdiag.run=slow&p.perfdiag.host=*")
    frame = plugin_frame(pg, 60)
    frame.wait_for_selector(".pd-compare[data-complete]", timeout=180000)
    rows = frame.evaluate("""() => Object.fromEntries([...document.querySelectorAll('.pd-compare-row')].map(r =>
        [r.dataset.host, {wait: r.querySelector('.pd-peer-wait')?.textContent,
                          last: r.querySelector('.pd-last-arrivals')?.textContent,
                          late: r.querySelector('.pd-lateness')?.textContent,
                          straggler: r.classList.contains('straggler')}]))""")
    assert rows["rank2"]["straggler"] and not any(v["straggler"] for k, v in rows.items() if k != "rank2")
    assert rows["rank2"]["last"] == f"{STEPS} of {STEPS}" and rows["rank0"]["last"] == f"0 of {STEPS}"
    assert rows["rank0"]["wait"].startswith("600 µs") and "for rank2" in rows["rank0"]["wait"]
    assert rows["rank2"]["wait"].startswith("none")     # the straggler waits for no one
    assert frame.locator(".pd-compare-row").first.get_attribute("data-host") == "rank2"   # straggler first
    line = frame.inner_text("#pd-pod-collectives")
    assert f"{STEPS} collective instances" in line and "Last to arrive: rank2" in line
    pg.screenshot(path=os.path.join(artifacts_dir, "collectives-hosts.png"))
    frame.click('.pd-sort[data-sort="peer_wait"]')                  # most waiting first
    frame.wait_for_function("() => document.querySelector('.pd-compare-row')?.dataset.host !== 'rank2'")
    assert pg.console_log.unexpected() == []


def test_compare_shows_peer_wait_before_and_after(page, tb_ranks, artifacts_dir):  # noqa: F811
    pg = page
    pg.goto(tb_ranks.url + "/#perfdiag&p.perfdiag.run=fixed&p.perfdiag.host=rank0"
            "&p.perfdiag.base_run=slow&p.perfdiag.base_host=rank0")
    frame = plugin_frame(pg, 60)
    frame.wait_for_function(f"() => ({LOADED})().endsWith('|compare-ok')", timeout=180000)
    cells = frame.evaluate("""() => [...document.querySelectorAll('tr[data-row="peer_wait"]')][0]
        ? [...document.querySelector('tr[data-row="peer_wait"]').children].map(c => [c.textContent, c.className]) : null""")
    assert cells is not None
    label, before, after, delta, share = cells
    assert label[0] == "of it: peer wait at collectives" and before[0] == "600 µs" and after[0] == "0 ns"
    assert delta[0] == "−600 µs" and "pd-better" in delta[1]
    # the duty cycle fell by the peer wait: no loss of work, so judged without it (not red)
    stat = frame.inner_text('#pd-cmp-summary .pd-stat-label[data-device="GPU 0"]')
    assert "peer wait left out 17% → 17%" in stat
    assert "pd-worse" not in frame.get_attribute('#pd-cmp-summary .pd-stat-label[data-device="GPU 0"]', "class")
    assert frame.inner_text('tr[data-row="work_duty"] td:nth-child(2)') == "17%"
    hl = frame.inner_text("#pd-cmp-highlights")
    assert "peer wait at collectives per typical step 600 µs → 0 ns" in hl
    # the before run's bars draw its peer wait
    assert frame.evaluate("""() => [...document.querySelectorAll('#pd-cmp-chart-before .step-bar rect')]
        .filter(r => r.getAttribute('fill') === '#5254a3').length""") == STEPS
    pg.screenshot(path=os.path.join(artifacts_dir, "collectives-compare.png"))
    assert pg.console_log.unexpected() == []


def test_one_file_alone_says_why_there_is_no_peer_wait(page, tb_ranks):  # noqa: F811
    frame = open_host(page, tb_ranks, "single", "rank0")
    c = card(frame)
    assert c["state"] == "alone" and not c["hidden"]
    assert "cannot be told from the transfer" in c["note"]
    assert frame.locator("#pd-coll-alone tbody tr").count() == 1
    assert any("cannot be told apart" in x for x in c["split"])
    assert c["duty"] == [] and "peer_wait" not in c["legend"]


def test_dlrm_eight_ranks_wait_for_worker7(page, tmp_path, artifacts_dir):  # noqa: F811
    src = shared_path(*DLRM)
    ld = tmp_path / "ld"
    shutil.copytree(src, ld / "dlrm")
    tb = TensorBoard(ld, extra_env=ENV)
    try:
        pg = page
        pg.goto(tb.url + "/#perfdiag")
        frame = plugin_frame(pg, 60)
        frame.wait_for_selector(".pd-compare[data-complete]", timeout=180000)   # 8 hosts: the pod view
        assert frame.locator(".pd-compare-row").first.get_attribute("data-host") == "worker7_step_12"
        assert frame.locator(".pd-compare-row.straggler").count() == 1
        w1 = frame.inner_text('.pd-compare-row[data-host="worker1_step_12"] .pd-peer-wait')
        assert w1.startswith("11.1 ms") and "worker7_step_12" in w1
        pg.screenshot(path=os.path.join(artifacts_dir, "collectives-dlrm-hosts.png"))
        frame.click('.pd-compare-row[data-host="worker1_step_12"]')
        frame.wait_for_function("() => document.getElementById('perfdiag-root')?.dataset.collectives === 'joined'",
                                timeout=120000)
        c = card(frame)
        ops = {r["op"]: r["cells"] for r in c["rows"]}
        assert set(ops) == {"send-recv", "all-reduce"}
        assert ops["send-recv"][6].startswith("worker7_step_12")
        assert "The run's straggler: worker7_step_12" in c["straggler"]
        # issue 56: the saving of fixing it alone (its lead over the next-to-last arrival),
        # who is last then, and why it was late from what explains it
        assert "fixing it alone saves ≈ 1.31 ms per step" in c["straggler"]
        assert "then worker5_step_12 is last" in c["straggler"]
        assert "its step began" in c["straggler"] and "untraced" not in c["straggler"]
        assert "59 points of it waiting for worker7_step_12" in c["duty"][0]
        assert pg.console_log.unexpected() == []
    finally:
        tb.stop()


def test_one_process_with_two_tpus_says_which_device_waited_for_which(page, tb_demo, artifacts_dir):  # noqa: F811
    """Issue 56: the devices of one process share its clock; TPU 0 idles before each
    all-reduce it already had while TPU 1 still computes: the card names that, as the
    finding does, with no word of clocks that cannot be aligned."""
    from test_browser import run_named
    run = run_named(tb_demo, "xla_tpu_two_devices")
    frame = open_host(page, tb_demo, run["run"], run["hosts"][0]["name"])
    c = card(frame)
    assert c["state"] == "joined" and not c["hidden"]
    assert "Between this process's devices: TPU 1 arrived last to 5 of 5 instances" in c["straggler"]
    assert "TPU 0 waited for it" in c["straggler"] and "collective wait" in c["straggler"]
    (row,) = c["rows"]
    who, last = row["cells"][6], row["cells"][7]
    assert who.startswith("TPU 1") and last == "TPU 1 ×5"
    text = frame.inner_text("#pd-collectives")
    assert "could not be aligned" not in text and "one clock (devices of one process)" in text
    assert "instances TPU 1 arrived last to" in text
    # the card's wait is the finding's: TPU 0's ~1.7 ms a step, the mean over two devices
    assert "idle before the ops, already queued (collective wait)" in text
    assert frame.inner_text("#pd-coll-peer-wait").endswith("µs")    # ≈ 834 µs, not "0 ns"
    frame.eval_on_selector("#pd-collectives", "e => e.scrollIntoView()")
    page.screenshot(path=os.path.join(artifacts_dir, "collectives-two-tpus.png"))
    assert page.console_log.unexpected() == []
