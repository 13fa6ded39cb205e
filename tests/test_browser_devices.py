"""The gap list of a multi-device capture in a real TensorBoard with Debian Chromium: the
page asks for the device it shows, so a device whose gaps are all smaller than another
device's still lists its own, and switching devices asks again."""
from __future__ import annotations

import pytest

from conftest import TensorBoard
from test_browser import (browser, open_diagnose, page, served_diagnosis,  # noqa: F401
                          wait_loaded)
from test_first_answer import two_devices


@pytest.fixture(scope="module")
def tb_two(tmp_path_factory, artifacts_dir):
    root = tmp_path_factory.mktemp("two_dev_logdir")
    (root / "two").mkdir()
    (root / "two" / "worker0.1.pt.trace.json").write_bytes(two_devices().to_bytes())
    tb = TensorBoard(root)
    yield tb
    tb.stop()


def _served(tb, **q):
    return served_diagnosis(tb, "two", "worker0", **q)


def _rows(frame) -> list:
    return frame.eval_on_selector_all("#pd-gaps .gap-row", "els => els.map(e => e.dataset.gap)")


def _wait_rows_of(frame, device: int, n: int):
    frame.wait_for_function(
        "([dev, n]) => { const r = [...document.querySelectorAll('#pd-gaps .gap-row')];"
        " return r.length === n && r.every(e => e.dataset.gap.startsWith(dev + '-')); }",
        arg=[str(device), n], timeout=60000)


def test_each_device_lists_its_own_gaps_though_the_largest_are_all_on_one(page, tb_two):
    every = _served(tb_two)
    devs = {d["name"]: d for d in every["devices"]}
    a, b = devs["GPU 0"], devs["GPU 1"]
    # the premise: the all-devices first page is B's alone
    assert {g["device"] for g in every["gaps"]} == {b["id"]} and 0 < a["gaps"] < 200 < b["gaps"]
    want_a = [g["id"] for g in _served(tb_two, device=a["id"])["gaps"]]
    frame = open_diagnose(page, tb_two, f"&p.perfdiag.run=two&p.perfdiag.device={a['id']}")
    wait_loaded(frame, "two")
    _wait_rows_of(frame, a["id"], a["gaps"])
    assert _rows(frame) == want_a
    assert f"({a['gaps']} total" in frame.inner_text(".pd-gaps-card h2")
    assert frame.locator("#pd-more").count() == 0
    # B: its 200 largest, then the rest of its own on "Load more"
    frame.select_option("#pd-device", str(b["id"]))
    _wait_rows_of(frame, b["id"], 200)
    assert f"Load more ({b['gaps'] - 200} left)" in frame.inner_text("#pd-more")
    frame.click("#pd-more")
    _wait_rows_of(frame, b["id"], b["gaps"])
    assert f"p.perfdiag.device={b['id']}" in page.url
    # and back: A's list again, the URL saying so
    frame.select_option("#pd-device", str(a["id"]))
    _wait_rows_of(frame, a["id"], a["gaps"])
    assert f"p.perfdiag.device={a['id']}" in page.url
    # a click on a row opens that gap of A
    frame.click(f'#pd-gaps .gap-row[data-gap="{want_a[0]}"]')
    frame.wait_for_selector("#pd-detail-title", timeout=30000)
    assert "on GPU 0" in frame.inner_text("#pd-detail-title")
    assert page.console_log.unexpected() == []


def test_without_a_device_in_the_url_the_shown_device_lists_its_own(page, tb_two):
    frame = open_diagnose(page, tb_two, "&p.perfdiag.run=two")
    wait_loaded(frame, "two")
    shown = int(frame.eval_on_selector("#pd-device", "e => e.value"))
    n = next(d["gaps"] for d in _served(tb_two)["devices"] if d["id"] == shown)
    _wait_rows_of(frame, shown, min(n, 200))
    assert f"p.perfdiag.device={shown}" in page.url


def test_a_device_the_capture_lacks_in_the_url_falls_back_to_its_default(page, tb_two):
    frame = open_diagnose(page, tb_two, "&p.perfdiag.run=two&p.perfdiag.device=7")
    wait_loaded(frame, "two")
    shown = int(frame.eval_on_selector("#pd-device", "e => e.value"))
    assert shown in (0, 1)
    n = next(d["gaps"] for d in _served(tb_two)["devices"] if d["id"] == shown)
    _wait_rows_of(frame, shown, min(n, 200))
    # the refused first ask is the one console error
    assert [e for e in page.console_log.unexpected() if "status of 400" not in e[1]] == []


def test_a_gap_of_another_device_opens_with_that_devices_list(page, tb_two):
    every = _served(tb_two)
    devs = {d["name"]: d for d in every["devices"]}
    a, b = devs["GPU 0"], devs["GPU 1"]
    gap = every["gaps"][0]                       # B's largest
    frame = open_diagnose(page, tb_two, f"&p.perfdiag.run=two&p.perfdiag.device={a['id']}"
                                        f"&p.perfdiag.gap={gap['id']}")
    _wait_rows_of(frame, b["id"], 200)
    frame.wait_for_selector(f'#pd-gaps .gap-row.selected[data-gap="{gap["id"]}"]')
    assert "on GPU 1" in frame.inner_text("#pd-detail-title")
    assert frame.eval_on_selector("#pd-device", "e => e.value") == str(b["id"])
    assert page.console_log.unexpected() == []
