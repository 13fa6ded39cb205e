"""The join of collectives across participants (GUIDE §4 "waiting for peers is not work"),
on tables written here: matching, clock alignment, who is blamed and why, and the
participants that cannot be matched; and an XSpace built in memory whose all-reduce is
named ``psum.3`` (JAX), known only by its HLO opcode."""
from __future__ import annotations

import numpy as np
import pytest

from tb_perfdiag.analysis import causes as C
from tb_perfdiag.analysis.collectives import instances as coll
from tb_perfdiag.analysis.run import join as J, stragglers as ST
from tb_perfdiag.testing import TraceBuilder

MS = 1_000_000
N = 10
STEP = 40 * MS


def table(host, arrive, end, *, clock=None, origin=0, idle=None, busy_gap=0, key="psum.3",
          kind="all-reduce") -> coll.HostTable:
    """One host, one device, one collective a step: ``arrive``/``end`` in ns on its own
    clock (from ``origin``); ``idle``: {cause: ns per instance} in the span before each."""
    arrive, end = np.asarray(arrive, np.int64), np.asarray(end, np.int64)
    n = arrive.size
    span = np.r_[0, end[:-1]] + busy_gap
    idle_m = np.zeros((n, len(C.ALL)), np.int64)
    for c, v in (idle or {}).items():
        idle_m[:, C.ALL.index(c)] = np.broadcast_to(np.asarray(v, np.int64), n)
    z = np.zeros(n, np.int64)
    return coll.HostTable(host, origin, clock or host, ["CPU"], [key], [kind], ["load_batch"],
                          device=z, key=z, ordinal=np.arange(n), start=arrive, end=end,
                          step=np.arange(n), span_start=np.minimum(span, arrive), idle=idle_m,
                          culprit=np.where(np.asarray([sum(idle_m[i]) for i in range(n)]) > 0,
                                           0, -1), step_ids=list(range(n)))


def pod(late: dict, *, jitter=0.2 * MS, shift=None, seed=1, idle=None, busy=None):
    """Four hosts; ``late``: host → ns it arrives after the others each step (a list: per
    step); ``shift``: host → its clock's offset; ``busy``: host → extra busy time before
    the collective (device compute)."""
    rng = np.random.default_rng(seed)
    t0 = np.arange(N) * STEP + 5 * MS
    out = []
    for h in range(4):
        name = f"host{h}"
        d = np.broadcast_to(np.asarray(late.get(name, 0), np.int64), N)
        arrive = t0 + d + rng.integers(0, int(jitter) + 1, N)
        last = t0 + np.max([np.broadcast_to(np.asarray(v, np.int64), N)
                            for v in late.values()] + [np.zeros(N, np.int64)], axis=0)
        end = np.maximum(last + int(jitter) + 2 * MS, arrive + 2 * MS) + rng.integers(0, 50_000, N)
        s = (shift or {}).get(name, 0)
        out.append(table(name, arrive + s, end + s,
                         idle={c: d for c in [((idle or {}).get(name))] if c},
                         busy_gap=0))
    return out


def figures(tables):
    j = J.join(tables)
    assert j is not None
    return j, ST.host_figures(j, {t.host: N for t in tables})


def test_the_late_host_is_the_straggler_and_the_others_wait_for_it():
    j, f = figures(pod({"host2": 30 * MS}, idle={"host2": C.DATA_LOADING}))
    assert len(j) == N and not j.unmatched
    assert [h for h, x in f.items() if x["straggler"]] == ["host2"]
    assert f["host2"]["straggler_cause"] == C.DATA_LOADING
    assert f["host2"]["culprit"] == "load_batch"
    assert f["host2"]["last_arrivals"] == N and f["host2"]["peer_wait_ns"] == 0
    for h in ("host0", "host1", "host3"):
        assert 29.5 * MS <= f[h]["peer_wait_ns"] <= 30.5 * MS, (h, f[h])
        assert not f[h]["straggler"] and list(f[h]["waited_for"]) == ["host2"]


def test_a_shifted_clock_is_found_and_does_not_move_the_blame():
    shift = {"host1": 250 * MS}
    j, f = figures([dataclass_with_clock(t, "clock1" if t.host == "host1" else "clock0")
                    for t in pod({"host2": 30 * MS}, shift=shift, idle={"host2": C.DATA_LOADING})])
    off = j.offsets_ns
    assert abs(off["host1"]["estimated_ns"] - 250 * MS) < 1 * MS and off["host1"]["applied"]
    assert [h for h, x in f.items() if x["straggler"]] == ["host2"]
    assert f["host1"]["peer_wait_ns"] > 29 * MS


def dataclass_with_clock(t, clock):
    t.clock = clock
    return t


def test_no_one_consistently_last_flags_no_one():
    # arrivals within 1 ms at random: each instance has a last arriver, none a straggler
    j, f = figures(pod({}, jitter=1 * MS, seed=7))
    assert not any(x["straggler"] for x in f.values()), f
    assert sum(x["last_arrivals"] for x in f.values()) == N


def test_late_in_a_few_steps_is_an_intermittent_straggler():
    late = [0] * N
    for s in (2, 5, 8):
        late[s] = 25 * MS
    j, f = figures(pod({"host0": late}, jitter=0.5 * MS, idle={"host0": C.HOST_COMPUTE}))
    assert [h for h, x in f.items() if x["straggler"]] == ["host0"]
    assert f["host0"]["intermittent"] and f["host0"]["late_steps"] == [2, 5, 8]
    assert f["host0"]["straggler_cause"] == C.HOST_COMPUTE
    # the others' typical step waits little: the median step, not the mean
    assert f["host1"]["peer_wait_ns"] < 2 * MS < f["host1"]["peer_wait_total_ns"] / N


def test_late_with_no_idle_of_its_own_is_device_compute():
    # host3's device computes longer before each collective: no idle to blame
    tables = pod({"host3": 20 * MS})
    j, f = figures(tables)
    assert f["host3"]["straggler"] and f["host3"]["straggler_cause"] == J.DEVICE_COMPUTE


def test_arrivals_closer_than_the_clocks_can_be_aligned_blame_no_one():
    # four clocks whose ends disagree by ~3 ms: arrival differences of ~1 ms cannot be ordered
    rng = np.random.default_rng(3)
    ts = []
    t0 = np.arange(N) * STEP + 5 * MS
    for h in range(4):
        arrive = t0 + rng.integers(0, 1 * MS, N)
        end = t0 + 4 * MS + rng.integers(0, 6 * MS, N)
        ts.append(table(f"host{h}", arrive, end))
    j, f = figures(ts)
    assert j.noisy and j.resolution_ns > 0.3 * MS
    assert not any(x["straggler"] for x in f.values())


def test_a_participant_missing_an_instance_is_matched_on_the_rest_and_said():
    tables = pod({"host2": 30 * MS})
    t = tables[3]
    keep = np.arange(1, N)        # host3's capture starts after the first all-reduce
    tables[3] = table("host3", t.start[keep], t.end[keep])
    j = J.join(tables)
    assert len(j) == N - 1
    assert any(u.get("host") == "host3" and u["count"] == N - 1 for u in j.unmatched)
    # host3's first op is matched with the others' second: the ends agree there
    assert np.all(np.abs(j.end[:, 3] - np.median(j.end, axis=1)) < 1 * MS)


def test_one_participant_alone_is_no_join():
    assert J.join([pod({})[0]]) is None


@pytest.mark.parametrize("native", [True, False], ids=["native", "reference"])
def test_an_xla_all_reduce_named_psum_is_known_by_its_opcode(native, monkeypatch):
    if not native:
        monkeypatch.setenv("TB_PERFDIAG_NO_NATIVE", "1")
    import tb_perfdiag
    b = TraceBuilder("xspace")
    ops = b.line("/device:TPU:0", "XLA Ops")
    b.hlo_module("jit_step", 1, {"fusion.1": "jit(step)/dot",
                                 "psum.3": ("jit(step)/psum", "", "all-reduce")})
    from tb_perfdiag.testing.xspace import U64
    for s in range(3):
        # as XLA:CPU writes them: the instruction's name, its module and program as stats
        for name, at, dur in (("fusion.1", 100, 300), ("psum.3", 500, 200)):
            b.op(ops, name, at + 1000 * s, dur, stats={"hlo_op": name, "hlo_module": "jit_step",
                                                       "program_id": U64(1)})
    t = b.build()
    psum = [i for i in range(t.n_events) if t.strings[int(t.name[i])] == "psum.3"]
    assert [t.stat_str("hlo_collective", i) for i in psum] == ["all-reduce"] * 3
    d = tb_perfdiag.diagnose(t).diagnosis
    ct = d.collectives
    assert len(ct) == 3 and ct.keys == ["psum.3"] and ct.kinds == ["all-reduce"]
    # "Device time by op" counts it as a collective, not compute
    from tb_perfdiag.analysis.device_time.by_op import OpClass
    dop = d.device_ops
    assert int(dop.klass[dop.name.index("psum.3")]) == int(OpClass.COLLECTIVE)


def test_a_hosts_table_travels_through_its_pod_row_whole_and_small():
    """The join runs from the rows in the result store: a table comes back from its row
    as it went in, and a row with a table that is not one is no table (never an error)."""
    import json
    from tb_perfdiag.analysis.result import CollectiveTable
    t = pod({"host2": 30 * MS}, idle={"host2": C.DATA_LOADING})[2]
    ct = CollectiveTable(t.device.astype(np.int32), t.key.astype(np.int32),
                         t.ordinal.astype(np.int32), t.start * 1000, t.end * 1000,
                         t.step.astype(np.int32), t.span_start * 1000, t.idle * 1000,
                         t.culprit.astype(np.int32), t.keys, t.kinds, t.names, "host2")
    row = json.loads(json.dumps(coll.to_row(ct, 1_795_889_392_053_559_853_000, ["CPU"])))
    back = coll.from_row("host2", {"collectives_table": row, "step_ids": list(range(N))})
    for k in ("device", "key", "ordinal", "start", "end", "step", "span_start", "culprit", "idle"):
        assert np.array_equal(getattr(back, k), getattr(t, k)), k
    assert back.origin_ns == 1_795_889_392_053_559_853 and back.clock == "host2"
    assert len(json.dumps(row)) < 1024          # ten instances: a few hundred bytes
    for bad in ({**row, "packed": "!!"}, {**row, "n": N + 1}, {**row, "packed": 3}, "x"):
        assert coll.from_row("host2", {"collectives_table": bad}) is None


def _one_process(lead_ns: int, tie_jitter_ns: int) -> coll.HostTable:
    """One host, four devices of one process, one all-reduce a step: device 0 is ready
    ``lead_ns`` before the other three, which arrive within ``tie_jitter_ns`` of each other
    (their ends agree within 10 µs)."""
    rng = np.random.default_rng(5)
    t0 = np.arange(N) * STEP + 5 * MS
    rows = []
    for d in range(4):
        arrive = t0 + (0 if d == 0 else lead_ns + rng.integers(0, tie_jitter_ns + 1, N))
        # their ends agree to some µs: the clock tells apart no closer arrivals than that
        rows.append((np.full(N, d), arrive, t0 + lead_ns + 2 * MS + rng.integers(0, 10_000, N)))
    dev = np.concatenate([r[0] for r in rows])
    start = np.concatenate([r[1] for r in rows])
    end = np.concatenate([r[2] for r in rows])
    n = dev.size
    z = np.zeros(n, np.int64)
    return coll.HostTable("tpuhost", 0, "tpuhost", [f"TPU {d}" for d in range(4)], ["all-reduce"],
                          ["all-reduce"], [""], device=dev, key=z, ordinal=np.tile(np.arange(N), 4),
                          start=start, end=end, step=np.tile(np.arange(N), 4),
                          span_start=start - MS, idle=np.zeros((n, len(C.ALL)), np.int64),
                          culprit=np.full(n, -1), step_ids=list(range(N)))


def test_devices_arriving_together_are_waited_for_together_and_none_is_named_last():
    """The TPU sample's card said each device waited "mostly for TPU 2" beside "no participant
    is consistently the last": where the last arrivals are closer than the clock tells apart,
    no one of them is last, and the device ready before them waited for all of them."""
    from tb_perfdiag.analysis.run.view import RunView
    from tb_perfdiag.render.collectives import host_json
    j = J.join([_one_process(30 * MS, 2_000)])
    assert j is not None and not j.resolved.any()
    for i in range(len(j)):
        assert j.awaited(i, 0) == [1, 2, 3]
        assert all(j.awaited(i, c) == [] for c in (1, 2, 3))     # within the clock's margin
    card = host_json(RunView(j, ST.host_figures(j, {"tpuhost": N})), "tpuhost", None, N)
    tpu0 = next(d for d in card["devices"] if d["name"] == "TPU 0")
    assert tpu0["waited_for_together"] == ["TPU 1", "TPU 2", "TPU 3"]
    assert tpu0["waited_for_device"] is None and tpu0["waited_for"] is None
    assert all(not d["waited_for_device"] and not d["waited_for_together"]
               for d in card["devices"] if d["name"] != "TPU 0")
    assert {d["name"] for d in card["devices"]} == {f"TPU {d}" for d in range(4)}
    op = card["ops"][0]
    assert op["together"] == N and op["last_devices"] == {} and op["last_arrivers"] == {}
    assert op["waited_for"][0]["together"] == ["TPU 1", "TPU 2", "TPU 3"]
    assert card["device_last_arrivals"] == {} and card["last_arrivals"] == 0

    # one device 3 ms behind the rest is named, alone
    j = J.join([_late_one(_one_process(30 * MS, 2_000), device=2, by=3 * MS)])
    assert j.resolved.all()
    card = host_json(RunView(j, ST.host_figures(j, {"tpuhost": N})), "tpuhost", None, N)
    assert card["device_last_arrivals"] == {"TPU 2": N}
    assert all(d["waited_for_device"] == "TPU 2" for d in card["devices"] if d["name"] != "TPU 2")


def _late_one(t: coll.HostTable, device: int, by: int) -> coll.HostTable:
    import dataclasses
    start = t.start + np.where(t.device == device, by, 0)
    return dataclasses.replace(t, start=start, end=np.maximum(t.end, start + MS))
