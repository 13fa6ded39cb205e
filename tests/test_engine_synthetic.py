"""Ground truth: every injected gap is found with its cause and waited-for host op, and
per-step duty cycle equals the constructed value."""
from __future__ import annotations

import json
import os

import pytest

import tb_perfdiag

from conftest import TESTDATA

MANIFEST = os.path.join(TESTDATA, "synthetic", "MANIFEST.json")
ENTRIES = json.load(open(MANIFEST))["files"] if os.path.exists(MANIFEST) else []


@pytest.fixture(scope="module")
def diagnoses():
    cache = {}

    def get(entry):
        if entry["name"] not in cache:
            path = os.path.join(TESTDATA, "synthetic", entry["path"])
            cache[entry["name"]] = tb_perfdiag.diagnose(path).to_json()
        return cache[entry["name"]]
    return get


def _by_name(d):
    return {dev["name"]: dev for dev in d["devices"]}


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["name"])
def test_every_injected_gap_found_with_cause_and_waited_for(entry, diagnoses):
    d = diagnoses(entry)
    devs = _by_name(d)
    found = {(g["device"], g["start_ns"], g["end_ns"]): g for g in d["gaps"]}
    # besides the injected gaps only the steps' idle before a device's first op or after
    # its last (the lead-in to its first kernel, the host's work after its last)
    edges = {(dv["id"], dv["steps_window"]["start_ns"], dv["start_ns"]) for dv in d["devices"]} | \
        {(dv["id"], dv["end_ns"], dv["steps_window"]["end_ns"]) for dv in d["devices"]}
    injected = {(devs[w["device"]]["id"], w["start_ns"], w["end_ns"]) for w in entry["gaps"]}
    assert set(found) - injected <= edges, set(found) - injected
    for want in entry["gaps"]:
        key = (devs[want["device"]]["id"], want["start_ns"], want["end_ns"])
        assert key in found, f"gap {want} not found"
        got = found[key]
        assert got["cause"] == want["cause"], (want, got["evidence"])
        assert got["step"] == want["step"]
        wf = want.get("waited_for")
        if wf:
            assert got["waited_for"] is not None, want
            assert got["waited_for"]["name"] == wf["name"]
            # the waited-for op's enclosing chain ends with the expected enclosing ops
            chain = got["waited_for"]["chain"][:-1]
            assert chain[-len(wf["enclosing"]):] == wf["enclosing"][-len(chain):] or \
                wf["enclosing"][-1] in chain, (chain, wf["enclosing"])
        cu = want.get("culprit")
        if cu:
            assert got["culprit"] is not None and got["culprit"]["name"] == cu["name"], \
                (want, got["culprit"])


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["name"])
def test_duty_cycle_per_step_and_whole_trace(entry, diagnoses):
    d = diagnoses(entry)
    devs = _by_name(d)
    steps = {s["id"]: s for s in d["steps"]}
    assert sorted(steps) == [s["id"] for s in entry["steps"]]
    for want in entry["steps"]:
        got = steps[want["id"]]
        for dev_name, value in want["duty_cycle"].items():
            g = got["devices"][str(devs[dev_name]["id"])]
            lo, hi = want["windows"][dev_name]
            assert (g["start_ns"], g["end_ns"]) == (lo, hi), (want["id"], dev_name)
            assert g["busy_ns"] == want["busy_ns"][dev_name]
            assert g["duty_cycle"] == pytest.approx(value, abs=1e-6)
    for dev_name, w in entry["whole_trace"].items():
        assert devs[dev_name]["duty_cycle"] == pytest.approx(w["duty_cycle"], abs=1e-6)
        assert devs[dev_name]["busy_ns"] == w["busy_ns"]
        assert devs[dev_name]["start_ns"] == w["first_activity_ns"]


def test_findings_name_the_injected_problems(diagnoses):
    by = {e["name"]: e for e in ENTRIES}
    if not by:
        pytest.skip("no synthetic manifest")
    kinds = lambda n: {f["kind"] for f in diagnoses(by[n])["findings"]}  # noqa: E731
    assert "host_sync" in kinds("kineto_sync_nonzero")
    sync = [f for f in diagnoses(by["kineto_sync_nonzero"])["findings"] if f["kind"] == "host_sync"]
    assert "torch.nonzero" in sync[0]["title"] and "torch.where" in sync[0]["fix"]
    # one finding per culprit: the recurring sync says so instead of a second finding
    assert " in 5 of 5 steps" in sync[0]["title"]
    assert "input_bound" in kinds("kineto_data_loading")
    assert "h2d_transfer" in kinds("kineto_h2d_copy")
    assert "launch_bound" in kinds("kineto_launch_bound")
    rec = [f for f in diagnoses(by["xla_gpu_recompile"])["findings"] if f["kind"] == "recompilation"]
    assert rec and rec[0]["compile_steps"] == [0, 3]
    two = kinds("xla_tpu_two_devices")
    assert "collective_wait" in two and "device_skew" in two


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.get("annotation_device_time")],
                         ids=lambda e: e["name"])
def test_annotation_device_time(entry, diagnoses):
    """Device time per annotation and step equals the constructed sum of op durations."""
    d = diagnoses(entry)
    by_name = {}
    for a in sorted(d["annotations"], key=lambda a: a["depth"]):
        by_name.setdefault(a["name"], a)
    for step, names in entry["annotation_device_time"].items():
        for name, want in names.items():
            assert name in by_name, (name, sorted(by_name))
            got = by_name[name]["per_step"].get(step, {"inclusive_ns": 0})["inclusive_ns"]
            assert got == pytest.approx(want["sum_ns"], abs=2), (step, name)
