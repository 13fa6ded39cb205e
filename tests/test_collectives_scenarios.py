"""Who everyone waits for, on real captures: the pod path (``tb-perfdiag diagnose RUN
--scheduler local --json``) on the 4-process JAX jobs of ``testdata/captures/jax_pod`` (one
XSpace per process, a gloo all-reduce every step), against each capture's ground truth in
``testdata/captures/MANIFEST.json``: the design its generator injected (who is slowed, how,
in which steps; a host clock shifted by a known amount) and what the capture shows, measured
by the generator from the raw XSpaces on the true clocks (testdata/generators/
capture_jax_pod.py: arrival = the all-reduce's start, peer wait = min(its duration, last
arrival − own arrival), GUIDE §4).

A reader cannot know the true clocks: it estimates each host's offset from the instances'
ends.  How close that estimate can get on a capture is in its truth too
(``clock_resolution_ns``: the spread of the §4 estimate's errors on the true clocks), and is
the only slack allowed below the 20 % of the issue's target.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, TESTDATA

CAPS = os.path.join(TESTDATA, "captures")
POD = os.path.join(CAPS, "jax_pod")
CLI = os.path.join(os.path.dirname(sys.executable), "tb-perfdiag")
MS = 1_000_000


def _truth() -> dict:
    with open(os.path.join(CAPS, "MANIFEST.json")) as f:
        for c in json.load(f)["captures"]:
            if c["name"] == "jax_pod":
                return c["ground_truth"]
    raise AssertionError("no jax_pod capture in testdata/captures/MANIFEST.json")


TRUTH = _truth()
SCENARIOS = sorted(TRUTH["scenarios"])
STEPS = TRUTH["num_steps"]
INJECTED = [s for s in SCENARIOS if TRUTH["scenarios"][s]["design"]["straggler"]]


@pytest.fixture(scope="module")
def pod(tmp_path_factory) -> dict:
    """{scenario: the run's pod summary}, from one CLI run over all scenarios, into a
    fresh result store (never the user's cache)."""
    store = tmp_path_factory.mktemp("results")
    r = subprocess.run([CLI, "diagnose", POD, "--scheduler", "local", "--json",
                        "--results", str(store)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    out = {}
    for run, summary in doc.items():
        out[run.split("/")[0]] = summary
    assert sorted(out) == SCENARIOS
    for sc, s in out.items():
        assert s["complete"] and s["failed"] == 0, (sc, s)
    return out


def _rows(summary) -> dict:
    return {h["host"]: h for h in summary["hosts"]}


def _slack_per_step(sc) -> float:
    """Below 20 %, a figure may miss the truth by what the capture's own clock evidence
    allows (never less than 0.5 ms a step)."""
    return max(0.5 * MS, TRUTH["scenarios"][sc]["measured"]["clock_resolution_ns"])


def _close(got, want, slack) -> bool:
    return abs(got - want) <= max(0.2 * want, slack)


@pytest.mark.parametrize("sc", SCENARIOS)
def test_every_hosts_peer_wait_is_the_measured_one(pod, sc):
    """Each host's peer wait over the capture and per typical step, within 20 % of what
    the capture shows on the true clocks: ~30 ms a step on each host that waits for a
    straggler, nothing on the straggler itself."""
    rows = _rows(pod[sc])
    truth = TRUTH["scenarios"][sc]["measured"]["hosts"]
    slack = _slack_per_step(sc)
    bad = []
    for host, t in truth.items():
        r = rows[host]
        if not _close(r["peer_wait_total_ns"], t["peer_wait_total_ns"], slack * STEPS):
            bad.append(f"{host} total {r['peer_wait_total_ns'] / MS:.1f} ms, "
                       f"truth {t['peer_wait_total_ns'] / MS:.1f} ms")
        if not _close(r["peer_wait_ns"], t["peer_wait_median_ns"], slack):
            bad.append(f"{host} per step {r['peer_wait_ns'] / MS:.2f} ms, "
                       f"truth {t['peer_wait_median_ns'] / MS:.2f} ms")
    assert not bad, f"{sc}: " + "; ".join(bad)


@pytest.mark.parametrize("sc", SCENARIOS)
def test_last_arrivals_are_counted(pod, sc):
    """Last arrivals within 1 of the truth, and within as many more as the capture has
    instances whose two latest arrivals lie closer than its clocks can be told apart."""
    m = TRUTH["scenarios"][sc]["measured"]
    res = m["clock_resolution_ns"]
    rows = _rows(pod[sc])
    for host, t in m["hosts"].items():
        h = int(host[4:])
        close = 0
        for inst in m["instances"]:
            arr = inst["arrival_ns"]
            order = sorted(range(len(arr)), key=arr.__getitem__)
            if h in order[-2:] and arr[order[-1]] - arr[order[-2]] <= res:
                close += 1
        assert abs(rows[host]["last_arrivals"] - t["last_arrivals"]) <= 1 + close, \
            (sc, host, rows[host]["last_arrivals"], t["last_arrivals"], close)


@pytest.mark.parametrize("sc", INJECTED)
def test_the_straggler_and_its_cause(pod, sc):
    """The host the others wait for, and why it was late: its input (data_loading), its
    own host work (host_compute), more device compute (device_compute); only that host."""
    design = TRUTH["scenarios"][sc]["design"]
    rows = _rows(pod[sc])
    flagged = sorted(h for h, r in rows.items() if r["straggler"])
    assert flagged == [design["straggler"]], (sc, flagged)
    assert rows[design["straggler"]]["straggler_cause"] == design["straggler_cause"], \
        (sc, rows[design["straggler"]])


@pytest.mark.parametrize("sc", SCENARIOS)
def test_a_host_that_only_waits_is_never_flagged(pod, sc):
    """Whoever arrived last to no instance only waited: never a straggler (the per-host
    analysis alone flags a straggler on 'none' from its own step time)."""
    m = TRUTH["scenarios"][sc]["measured"]
    rows = _rows(pod[sc])
    for host, t in m["hosts"].items():
        if t["last_arrivals"] == 0:
            assert not rows[host]["straggler"], (sc, host, rows[host])


def test_no_straggler_where_no_one_is_consistently_last(pod):
    """'none' injects nothing: four processes share the machine, so each step someone is a
    little late, but no one is consistently last.  Flagging someone is right only where the
    truth measures a host that is (last to at least 60 % of the instances)."""
    m = TRUTH["scenarios"]["none"]["measured"]
    allowed = {m["most_waited_for"]} if m["most_waited_for_consistently_last"] else set()
    flagged = {h for h, r in _rows(pod["none"]).items() if r["straggler"]}
    assert flagged <= allowed, (flagged, {h: t["last_arrivals"] for h, t in m["hosts"].items()})


def test_the_shifted_clock_is_found(pod):
    """host1's clock runs 250 ms ahead in clock_shifted: its offset is found to within a few
    ms of that, and with it aligned host2 (not host1) is the one everyone waits for."""
    design = TRUTH["scenarios"]["clock_shifted"]["design"]
    rows = _rows(pod["clock_shifted"])
    off = {h: r["clock_offset_ns"] for h, r in rows.items()}
    others = sorted(v for h, v in off.items() if h not in design["clock_shift_ns"])
    ref = others[len(others) // 2]
    for host, shift in design["clock_shift_ns"].items():
        assert abs((off[host] - ref) - shift) <= 3 * MS, (host, off, shift)
    for h, v in off.items():
        if h not in design["clock_shift_ns"]:
            assert abs(v - ref) <= 3 * MS, (h, off)
    assert not rows["host1"]["straggler"] and rows["host2"]["straggler"]


@pytest.mark.parametrize("sc", [s for s in SCENARIOS if s != "clock_shifted"])
def test_hosts_of_one_clock_get_offsets_within_a_few_ms(pod, sc):
    off = [r["clock_offset_ns"] for r in pod[sc]["hosts"]]
    assert max(off) - min(off) <= 3 * MS, (sc, off)


@pytest.mark.parametrize("sc", SCENARIOS)
def test_the_runs_collectives_are_the_matched_all_reduces(pod, sc):
    """One all-reduce a step on every host: all instances matched, none left over."""
    m = TRUTH["scenarios"][sc]["measured"]
    coll = pod[sc]["collectives"]
    assert coll and coll["instances"] == m["instances_matched"] == STEPS, (sc, coll)
    assert sum(op["count"] for op in coll["ops"].values()) == STEPS, coll
    assert list(coll["ops"]) == ["all-reduce"], coll       # psum.7, known by its HLO opcode


def test_every_runs_summary_follows_the_pod_schema(pod):
    import jsonschema
    with open(os.path.join(ROOT, "tb_perfdiag", "schema", "pod.schema.json")) as f:
        schema = json.load(f)
    for sc, s in pod.items():
        jsonschema.validate(s, schema)
        assert s["collectives"] and s["median_duty_without_wait"] < s["median_duty_cycle"], sc
