"""The synthetic traces (testdata/synthetic, written by testdata/generators/synthetic.py)
load, and the trace model agrees with the ground truth in MANIFEST.json: device event
counts, the busy set's idle intervals (every listed gap and no other, to the nanosecond)
and the whole-trace duty cycles.  This checks the readers and the model only; the
diagnosis engine's causes are checked elsewhere against the same manifest."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import tb_perfdiag
from tb_perfdiag.analysis import causes
from tb_perfdiag.trace import EventKind, TrackKind

from conftest import TESTDATA

SYNTH = os.path.join(TESTDATA, "synthetic")
MANIFEST = os.path.join(SYNTH, "MANIFEST.json")
ACTIVITY = (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET)


def _manifest():
    with open(MANIFEST) as f:
        return json.load(f)


def _entries():
    if not os.path.exists(MANIFEST):
        return []
    return _manifest()["files"]


ENTRIES = _entries()


@pytest.fixture(scope="module")
def loaded():
    cache = {}

    def get(entry):
        if entry["path"] not in cache:
            cache[entry["path"]] = tb_perfdiag.load(os.path.join(SYNTH, entry["path"]))
        return cache[entry["path"]]
    return get


def _busy(trace, device: int) -> np.ndarray:
    """Union of the device's activity intervals, as (n, 2) int64 ps."""
    sel = np.isin(trace.kind, ACTIVITY) & (trace.track_device[trace.track] == device) & \
        (trace.track_kind[trace.track] == TrackKind.DEVICE)
    s = trace.ts[sel]
    e = s + trace.dur[sel]
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    if s.size == 0:
        return np.zeros((0, 2), np.int64)
    run_end = np.maximum.accumulate(e)
    new = np.ones(s.size, bool)
    new[1:] = s[1:] > run_end[:-1]
    starts = s[new]
    idx = np.flatnonzero(new)
    ends = np.maximum.reduceat(e, idx)
    ends = np.maximum.accumulate(ends)
    return np.stack([starts, ends], axis=1)


def _device_index(trace, name):
    for d in trace.devices:
        if d.name == name:
            return d.index
    raise AssertionError(f"device {name!r} not in {[d.name for d in trace.devices]}")


def test_manifest_present_and_well_formed():
    if not ENTRIES:
        pytest.skip("testdata/synthetic/MANIFEST.json absent: run "
                    "python testdata/generators/synthetic.py")
    m = _manifest()
    assert m["gap_threshold_ns"] == 5000
    assert set(m["definitions"]["causes"]) == set(causes.ALL)
    names = [e["name"] for e in ENTRIES]
    assert len(names) == len(set(names))
    total = 0
    for e in ENTRIES:
        p = os.path.join(SYNTH, e["path"])
        assert os.path.getsize(p) == e["bytes"]
        total += e["bytes"]
        assert e["gaps"], e["name"]
        for g in e["gaps"]:
            assert g["cause"] in causes.ALL
            assert g["end_ns"] - g["start_ns"] == g["duration_ns"] >= 5000
            assert g["waited_for"]["name"]
        for s in e["steps"]:
            for d, v in s["duty_cycle"].items():
                assert 0.0 <= v <= 1.0
    assert total < 3_000_000


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["name"] for e in ENTRIES])
def test_loads_with_expected_devices_and_counts(entry, loaded):
    tr = loaded(entry)
    assert tr.format == entry["format"]
    assert sorted(d.name for d in tr.devices) == sorted(d["name"] for d in entry["devices"])
    dev_of_ev = np.where(tr.track_kind[tr.track] == TrackKind.DEVICE,
                         tr.track_device[tr.track], -1)
    for d in entry["devices"]:
        i = _device_index(tr, d["name"])
        on = dev_of_ev == i
        assert int(on.sum()) == d["events"], d["name"]
        assert int((on & np.isin(tr.kind, ACTIVITY)).sum()) == d["activity_events"], d["name"]
        assert int((on & (tr.kind == EventKind.KERNEL)).sum()) == d["kernels"]
        assert int((on & (tr.kind == EventKind.MEMCPY)).sum()) == d["memcpy"]
        assert int((on & (tr.kind == EventKind.MEMSET)).sum()) == d["memset"]
    assert int(tr.ts.min()) == 0


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["name"] for e in ENTRIES])
def test_gaps_are_exactly_the_idle_intervals(entry, loaded):
    tr = loaded(entry)
    thr_ps = 5000 * 1000
    for d in entry["devices"]:
        i = _device_index(tr, d["name"])
        b = _busy(tr, i)
        idle_s, idle_e = b[:-1, 1], b[1:, 0]
        keep = idle_e - idle_s >= thr_ps
        found = sorted(zip((idle_s[keep] // 1000).tolist(), (idle_e[keep] // 1000).tolist()))
        assert np.all(idle_s[keep] % 1000 == 0) and np.all(idle_e[keep] % 1000 == 0)
        listed = sorted((g["start_ns"], g["end_ns"]) for g in entry["gaps"]
                        if g["device"] == d["name"])
        assert found == listed, (d["name"], set(found) ^ set(listed))
        w = entry["whole_trace"][d["name"]]
        assert int(b[0, 0]) == w["first_activity_ns"] * 1000
        assert int(b[-1, 1]) == w["last_activity_end_ns"] * 1000
        busy = int((b[:, 1] - b[:, 0]).sum())
        assert busy == w["busy_ns"] * 1000
        assert abs(busy / (b[-1, 1] - b[0, 0]) - w["duty_cycle"]) < 1e-6


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["name"] for e in ENTRIES])
def test_step_windows_busy_time(entry, loaded):
    """Busy time inside each listed step window, measured on the loaded trace."""
    tr = loaded(entry)
    for s in entry["steps"]:
        for dname, (a, z) in s["windows"].items():
            b = _busy(tr, _device_index(tr, dname))
            lo, hi = a * 1000, z * 1000
            inside = np.clip(np.minimum(b[:, 1], hi) - np.maximum(b[:, 0], lo), 0, None).sum()
            assert int(inside) == s["busy_ns"][dname] * 1000, (s["id"], dname)
            assert abs(inside / (hi - lo) - s["duty_cycle"][dname]) < 1e-6
