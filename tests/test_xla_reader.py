"""The XSpace reader's device and scope rules (GUIDE §3–§4, issue 14), each on a small
XSpace built in memory: real devices only, launches stay launches, op metadata read from
the event's metadata too, TPU ops joined to the Hlo Proto, scattered scopes, the unscoped
share and JAX's transformation wrappers."""
from __future__ import annotations

import numpy as np
import pytest

import tb_perfdiag
from tb_perfdiag.analysis.device_time.annotations import _scope_parts, user_scope
from tb_perfdiag.testing import Ref, TraceBuilder, U64
from tb_perfdiag.trace import EventKind as K, LinkKind, TrackKind
from tb_perfdiag.trace import xspace
from tb_perfdiag.trace.classify import memcpy_kind

PROGRAM = 12190760917235803885      # a real TPU program id: above 2**63


def _links(trace, kind):
    sel = trace.link_kind == kind
    return set(zip(trace.link_src[sel].tolist(), trace.link_dst[sel].tolist()))


def _annotations(trace):
    d = tb_perfdiag.diagnose(trace).to_json()
    return {"/".join(a["path"]): a for a in d["annotations"]}, d


# ---- real devices only ------------------------------------------------------------------

def _jax_gpu():
    """JAX on GPU: HLO stats on the runtime calls that launch the kernels."""
    b = TraceBuilder("xspace")
    thr = b.thread("tf_pjrt_gpu_client")
    s = b.stream(gpu=0, stream=7)
    k1 = b.kernel(s, "loop_fusion", 30, 40, stats={"hlo_op": "fusion.1",
                                                    "hlo_module": Ref("jit_step")})
    k2 = b.kernel(s, "gemm", 80, 60, stats={"hlo_op": "dot.2", "hlo_module": Ref("jit_step")})
    hlo = {"hlo_op": "fusion.1", "hlo_module": Ref("jit_step"), "program_id": 3}
    l1 = b.launch(thr, "cuLaunchKernel", 10, 5, kernel=k1, stats=hlo)
    # a launch under a name that is no runtime API: its correlation id makes it one
    l2 = b.launch(thr, "dot.2", 20, 5, kernel=k2, stats=dict(hlo, hlo_op="dot.2"))
    # runtime calls with HLO stats and no device op of their own in this trace
    ms = b.op(thr, "cuMemsetD32Async", 27, 2, stats=dict(hlo, hlo_op="memset.3"))
    hip = b.op(thr, "hipModuleLaunchKernel", 29, 1, stats=dict(hlo, hlo_op="fusion.4"))
    return b, b.build(), (k1, k2, l1, l2, ms, hip)


def test_launch_calls_with_hlo_stats_beside_a_gpu_plane_are_launches():
    _, t, (k1, k2, l1, l2, ms, hip) = _jax_gpu()
    assert [d.name for d in t.devices] == ["GPU 0"]          # no "CPU (XLA)" beside it
    for e in (l1, l2, ms, hip):
        assert t.track_kind[t.track[e.index]] == TrackKind.HOST
    assert [K(t.kind[e.index]) for e in (l1, l2, ms, hip)] == [K.LAUNCH] * 4
    assert _links(t, LinkKind.CORRELATION) == {(l1.index, k1.index), (l2.index, k2.index)}
    d = tb_perfdiag.diagnose(t).to_json()
    assert [x["name"] for x in d["devices"] if x["busy_ns"]] == ["GPU 0"]
    assert d["devices"][0]["busy_ns"] == 100_000


def test_xla_cpu_ops_form_a_device_only_without_device_activity():
    b = TraceBuilder("xspace")
    eigen = b.thread("tf_XLAEigen/1")
    op = b.op(eigen, "fusion.1", 10, 20, stats={"hlo_op": "fusion.1",
                                                 "hlo_module": Ref("jit_step"), "program_id": 1})
    # a GPU plane with no kernel, copy or set: not a device with activity
    idle = b.line("/device:GPU:0", "Launch Stats")
    b.op(idle, "stats", 0, 5)
    t = b.build()
    assert "CPU (XLA)" in [d.name for d in t.devices]
    assert K(t.kind[op.index]) == K.KERNEL
    assert t.devices[t.track_device[t.track[op.index]]].name == "CPU (XLA)"
    # the same op beside a GPU stream that ran something is host work
    s = b.stream(gpu=0, stream=7)
    b.kernel(s, "gemm", 40, 10)
    t = b.build()
    assert [d.name for d in t.devices] == ["GPU 0"]
    assert t.track_kind[t.track[op.index]] == TrackKind.HOST


def test_device_copies_and_fills_by_their_rocm_names():
    b = TraceBuilder("xspace")
    s = b.stream(gpu=0, stream=3, name="Stream #3")
    cp = b.op(s, "CopyDeviceToDevice", 0, 10)
    h2d = b.op(s, "CopyHostToDevice", 20, 10)
    fill = b.op(s, "FillBuffer", 40, 2)
    k = b.op(s, "KernelExecution", 50, 5)
    t = b.build()
    assert [K(t.kind[e.index]) for e in (cp, h2d, fill, k)] == \
        [K.MEMCPY, K.MEMCPY, K.MEMSET, K.KERNEL]
    assert [memcpy_kind(n) for n in ("CopyDeviceToDevice", "CopyHostToDevice",
                                     "CopyDeviceToHost", "MemcpyD2D")] == \
        ["d2d", "h2d", "d2h", "d2d"]


# ---- op metadata in the event metadata -----------------------------------------------

def test_tf_op_kept_only_in_the_event_metadata_is_read():
    b = TraceBuilder("xspace")
    s = b.stream(gpu=0, stream=7)
    md = {"tf_op": "model/dense/MatMul:MatMul", "program_id": 5}
    k1 = b.kernel(s, "gemm", 0, 30, metadata_stats=md)
    k2 = b.kernel(s, "gemm", 40, 10)                 # same metadata: same stats
    own = b.kernel(s, "gemm_own", 60, 10, stats={"tf_op": "model/head/MatMul:MatMul"},
                   metadata_stats={"tf_op": "model/other/MatMul:MatMul"})
    t = b.build()
    assert t.stat_str("tf_op", k1.index) == t.stat_str("tf_op", k2.index) == \
        "model/dense/MatMul:MatMul"
    assert t.stat_str("program_id", k1.index) == 5
    assert t.stat_str("tf_op", own.index) == "model/head/MatMul:MatMul"   # the event's wins
    ann, d = _annotations(t)
    assert ann["model/dense"]["inclusive_ns"] == 40_000 and ann["model/dense"]["ops"] == 2
    assert ann["model/head"]["ops"] == 1 and "model/other" not in ann
    assert d["unscoped"] == {"device_ns": 0, "ops": 0, "per_step": {}}


def _tpu(program=PROGRAM):
    b = TraceBuilder("xspace")
    ops = b.line("/device:TPU:0", "XLA Ops")
    b.hlo_module("jit_f", program, {"add.3": "jit(f)/jit(main)/add", "copy.1": ""})
    md = {"program_id": U64(program), "hlo_category": "loop fusion"}
    add = b.op(ops, "%add.3 = f32[8]{0} add(f32[8]{0} %p0, f32[8]{0} %p1)", 10, 50,
               display="add.3", metadata_stats=md)
    cp = b.op(ops, "%copy.1 = f32[8]{0} copy(f32[8]{0} %p0)", 70, 20, display="copy.1",
              metadata_stats=md)
    add2 = b.op(ops, "%add.3 = f32[8]{0} add(f32[8]{0} %p0, f32[8]{0} %p1)", 100, 50,
                display="add.3", metadata_stats=md)
    return b, (add, cp, add2)


@pytest.mark.parametrize("native", [True, False], ids=["native", "reference"])
def test_tpu_ops_join_the_hlo_proto_by_program_id_and_instruction_name(native, monkeypatch):
    if not native:
        monkeypatch.setenv("TB_PERFDIAG_NO_NATIVE", "1")
    b, (add, cp, add2) = _tpu()
    t = b.build()
    assert [d.name for d in t.devices] == ["TPU 0"]
    # the instruction name comes from the metadata's HLO text, the program from its stats
    assert t.stat_str("hlo_op", add.index) == "add.3" and t.stat_str("hlo_op", cp.index) == "copy.1"
    assert int(t.stat("program_id")[add.index]) % 2**64 == PROGRAM
    assert t.stat_str("op_name", add.index) == t.stat_str("op_name", add2.index) == \
        "jit(f)/jit(main)/add"
    assert t.stat_str("op_name", cp.index) is None
    ann, d = _annotations(t)
    assert sorted(ann) == ["jit(f)", "jit(f)/jit(main)"]
    assert ann["jit(f)/jit(main)"]["inclusive_ns"] == 100_000 and ann["jit(f)"]["ops"] == 2
    assert d["unscoped"]["device_ns"] == 20_000 and d["unscoped"]["ops"] == 1


def test_native_scanner_names_the_metadata_entries_with_stats():
    native_scan = pytest.importorskip("tb_perfdiag.trace.native_scan")
    b, _ = _tpu()
    raw = b.to_bytes()
    nat = native_scan.scan_xspace(raw)
    ref = xspace.scan_python("memory", raw)
    tpu = [p for p in nat["planes"] if p[1] == "/device:TPU:0"][0]
    ids, names, shown, stat_names, with_stats = tpu[3]
    by_id = dict(zip(np.frombuffer(ids, np.int64).tolist(), names))
    assert sorted(by_id[i] [:8] for i in np.frombuffer(with_stats, np.int64).tolist()) == \
        ["%add.3 =", "%copy.1 "]
    a, r = xspace.build("m", nat), xspace.build("m", ref)
    for s in ("hlo_op", "op_name", "program_id", "hlo_category"):
        assert np.array_equal(a.stats[s].events, r.stats[s].events), s
        if a.stats[s].is_string:
            assert [a.strings[v] for v in a.stats[s].values.tolist()] == \
                [r.strings[v] for v in r.stats[s].values.tolist()], s
        else:
            assert np.array_equal(a.stats[s].values, r.stats[s].values), s


# ---- scopes: scattered, unscoped, wrappers -------------------------------------------

def test_scattered_only_when_a_sibling_interleaves_within_a_step():
    b = TraceBuilder()
    main, s = b.thread("python main"), b.stream(gpu=0, stream=7)
    t0 = 0
    for step in (1, 2):
        b.op(main, f"ProfilerStep#{step}", t0, 1000, cat="user_annotation")
        b.op(main, "forward", t0 + 10, 500, cat="user_annotation")
        # layer "a" runs twice with "b" between them: a's kernels interleave with b's
        for name, at in (("a", 20), ("b", 120), ("a", 220)):
            b.op(main, name, t0 + at, 90, cat="user_annotation")
            b.launch(main, "cudaLaunchKernel", t0 + at + 10, 5,
                     kernel=b.kernel(s, f"k_{name}", t0 + at + 20, 30))
        # "c" and "d" follow each other: siblings, but never interleaved
        for name, at in (("c", 320), ("d", 420)):
            b.op(main, name, t0 + at, 90, cat="user_annotation")
            b.launch(main, "cudaLaunchKernel", t0 + at + 10, 5,
                     kernel=b.kernel(s, f"k_{name}", t0 + at + 20, 30))
        b.op(main, "optimizer", t0 + 600, 300, cat="user_annotation")
        b.launch(main, "cudaLaunchKernel", t0 + 610, 5, kernel=b.kernel(s, "adam", t0 + 620, 30))
        t0 += 1000
    ann, _ = _annotations(b.build())
    assert ann["forward/a"]["scattered"] and ann["forward/a"]["device_runs"] == 4
    assert ann["forward/a"]["interleaved_with"] == ["forward/b"]
    # b sits between two runs of a, but all of b is one run: b is not scattered
    for p in ("forward", "optimizer", "forward/b", "forward/c", "forward/d"):
        assert not ann[p]["scattered"], p
    # roots alternate from step to step: each step is one block
    assert ann["forward"]["device_runs"] == 2


def _xla_cpu(op_names):
    """XLA:CPU ops (no device plane) with the given op_name metadata, 10 µs each."""
    b = TraceBuilder("xspace")
    eigen = b.thread("tf_XLAEigen/1")
    b.hlo_module("SyncTensorsGraph.3", 3, {f"op.{i}": nm for i, nm in enumerate(op_names)})
    ops = [b.op(eigen, f"op.{i}", 10 + 20 * i, 10,
                stats={"hlo_op": f"op.{i}", "hlo_module": Ref("SyncTensorsGraph.3"),
                       "program_id": 3})
           for i in range(len(op_names))]
    return b, ops


def test_torch_xla_ir_op_names_end_the_user_scope_and_bare_ops_are_unscoped():
    b, ops = _xla_cpu(["train_step.1/forward.2/aten__add.5/aten__add",
                       "train_step.1/forward.2/aten__mm",
                       "aten__mm",                              # backward: bare op names
                       "aten__mul.3/aten__mul",
                       "train_step.1/optimizer.4/aten__add.14/aten__add",
                       ""])
    # a host annotation around the dispatch says nothing about an HLO op's scope
    py = b.thread("python")
    b.op(py, "backward", 0, 200)
    ann, d = _annotations(b.build())
    assert sorted(ann) == ["train_step", "train_step/forward", "train_step/optimizer"]
    assert ann["train_step/forward"]["ops"] == 2 and ann["train_step"]["ops"] == 3
    assert ann["train_step/forward"]["inclusive_ns"] == 20_000
    assert d["unscoped"]["device_ns"] == 30_000 and d["unscoped"]["ops"] == 3
    assert [_scope_parts(n) for n in ("train_step.1/forward.2/aten__add.5/aten__add",
                                      "xla__update_slice.2/xla__update_slice")] == \
        [("train_step", "forward"), ()]


def test_jax_transformation_wrappers_map_back_to_the_users_scope():
    b, _ = _xla_cpu(["jit(train_step)/backward/jvp(forward)/dense_0/dot_general",
                     "jit(train_step)/backward/transpose(jvp(forward))/dense_0/dot_general",
                     "jit(train_step)/backward/transpose(backward)/jvp(forward)/mul",
                     "jit(train_step)/optimizer/sub"])
    ann, d = _annotations(b.build())
    # the paths stay as the compiler wrote them; each row names the user's scope
    assert ann["jit(train_step)/backward/transpose(jvp(forward))"]["user_scope"] == "forward"
    assert ann["jit(train_step)/backward/transpose(backward)"]["user_scope"] == "backward"
    assert ann["jit(train_step)"]["user_scope"] == "jit(train_step)"
    scopes = {s["name"]: s for s in d["user_scopes"]}
    assert set(scopes) == {"backward", "forward", "dense_0", "optimizer"}
    # an op under transpose(backward)/jvp(forward) counts once for each name
    assert scopes["forward"]["ops"] == 3 and scopes["forward"]["device_ns"] == 30_000
    assert scopes["backward"]["ops"] == 3 and scopes["dense_0"]["ops"] == 2
    assert user_scope("transpose(jvp(forward))") == "forward"
    assert user_scope("jit(relu)") == "jit(relu)"


# ---- string stats: ref values name a stat metadata entry of their own plane ------------

@pytest.mark.parametrize("scanner", ["reference", "native"])
def test_string_stat_values_resolve_per_plane_and_kind(scanner):
    """A string stat's value is a ref (the name of a stat metadata entry of the event's
    own plane: the same id names different strings on two planes), a str, bytes, or no
    value (""); a ref to an id the plane does not name is "" too.  Stats whose metadata
    names no stat the model reads are not kept."""
    from tb_perfdiag.trace.xplane_pb import XSpace
    space = XSpace()
    want = []
    for pname, ref_name in (("/device:GPU:0", "fusion.1"), ("/host:CPU", "MyOp")):
        plane = space.planes.add(id=len(space.planes), name=pname)
        plane.event_metadata[1].name = "ev"
        plane.stat_metadata[3].name = "hlo_op" if pname.startswith("/device") else "tf_op"
        plane.stat_metadata[5000].name = "kernel_details"      # not read by the model
        plane.stat_metadata[7].name = ref_name
        line = plane.lines.add(id=1, name="Stream #1" if pname.startswith("/device") else "t")
        values = [dict(ref_value=7), dict(str_value="dot.4"), dict(bytes_value=b"copy.9"),
                  {}, dict(ref_value=99)]
        for k, v in enumerate(values):
            ev = line.events.add(metadata_id=1, offset_ps=1000 * k, duration_ps=500)
            ev.stats.add(metadata_id=3, **v)
            ev.stats.add(metadata_id=5000, str_value="long text")
        want.append((plane.stat_metadata[3].name, [ref_name, "dot.4", "copy.9", "", ""]))
    raw = space.SerializeToString()
    if scanner == "native":
        native_scan = pytest.importorskip("tb_perfdiag.trace.native_scan")
        cols = native_scan.scan_xspace(raw)
    else:
        cols = xspace.scan_python("memory", raw)
    assert list(cols["stats"]) == ["hlo_op", "tf_op"]
    assert b"long text" not in cols["strings"]
    t = xspace.build("memory", cols)
    for stat, names in want:
        s = t.stats[stat]
        assert [t.strings[v] for v in s.values.tolist()] == names, stat
        assert [t.strings[int(t.name[e])] for e in s.events.tolist()] == ["ev"] * 5
    assert "kernel_details" not in t.stats


_JOINS = {
    "name in two modules": [("jit_a", 1, "fusion.1", "a/dense"), ("jit_b", 2, "fusion.1", "b/dense"),
                            ("jit_a", 1, "dot.2", "a/head"), ("jit_a", 1, "fusion.1", "a/dense")],
    "two programs of a module": [("jit_a", 1, "fusion.1", "a/dense"),
                                 ("jit_a", 5, "fusion.1", "a5/dense")],
    "names apart": [("jit_a", 1, "fusion.1", "a/dense"), ("jit_b", 2, "fusion.9", "b9/dense"),
                    ("jit_a", 1, "dot.2", "a/head")],
    "one module and program": [("jit_a", 1, "dot.2", "a/head"), ("jit_a", 1, "fusion.1", "a/dense"),
                               ("jit_a", 1, "dot.2", "a/head")],
    "module without a proto": [("jit_c", 3, "fusion.1", None), ("jit_a", 1, "fusion.1", "a/dense")],
}


@pytest.mark.parametrize("case", list(_JOINS))
def test_ops_join_the_hlo_proto_of_their_own_module_and_program(case):
    """Each device op takes the op metadata of the instruction of its own module and
    program: one instruction name in two modules (or two programs of one module) names
    two instructions; ops of a module with no Hlo Proto get none."""
    b = TraceBuilder("xspace")
    s = b.stream(gpu=0, stream=7)
    b.hlo_module("jit_a", 1, {"fusion.1": "a/dense", "dot.2": "a/head"})
    b.hlo_module("jit_b", 2, {"fusion.1": "b/dense", "fusion.9": "b9/dense"})
    b.hlo_module("jit_a", 5, {"fusion.1": "a5/dense"})
    runs = _JOINS[case]
    ks = [b.kernel(s, f"k{i}", 10 + 100 * i, 50,
                   stats={"hlo_op": op, "hlo_module": Ref(m), "program_id": p})
          for i, (m, p, op, _) in enumerate(runs)]
    t = b.build()
    assert [t.stat_str("op_name", k.index) for k in ks] == [want for *_, want in runs]


@pytest.mark.parametrize("case", ["one module and program", "names apart",
                                  "name in two modules"])
def test_joined_op_metadata_is_held_coded_by_the_hlo_op_column(case):
    """The op metadata a join gives every op (scope, type, source) is one value per op:
    it is held as a table over the ``hlo_op`` column, whose values are its codes (one
    array in the model, reordered with the events when the model sorts them) where an
    op's name tells its module and program; else the codes number the distinct (module,
    program, op) keys.  Either way it reads back the same whole, per row and per event."""
    from tb_perfdiag.trace.model import Coded
    b = TraceBuilder("xspace")
    s1, s2 = b.stream(gpu=0, stream=7), b.stream(gpu=0, stream=9)
    b.hlo_module("jit_a", 1, {"fusion.1": "a/dense", "dot.2": "a/head"})
    b.hlo_module("jit_b", 2, {"fusion.1": "b/dense", "fusion.9": "b9/dense"})
    runs = _JOINS[case]
    # ops written late first and on two streams: the model reorders its events
    ks = [b.kernel(s1 if i % 2 else s2, f"k{i}", 1000 - 100 * i, 50,
                   stats={"hlo_op": op, "hlo_module": Ref(m), "program_id": p})
          for i, (m, p, op, _) in enumerate(runs)]
    t = b.build()
    st, hlo = t.stats["op_name"], t.stats["hlo_op"]
    assert isinstance(st.coded, Coded)
    assert (st.coded.codes is hlo.values) == (case != "name in two modules")
    assert st.events is hlo.events
    assert [t.stat_str("op_name", k.index) for k in ks] == [want for *_, want in runs]
    names = [t.strings[v] for v in st.values.tolist()]
    assert [t.strings[v] for v in st.take(np.arange(st.events.shape[0])[::-1]).tolist()] == \
        names[::-1]
    by_event = dict(zip(st.events.tolist(), names))
    assert [by_event[k.index] for k in ks] == [want for *_, want in runs]
    dense = t.stat("op_name")
    assert [t.strings[dense[k.index]] for k in ks] == [want for *_, want in runs]


@pytest.mark.parametrize("order", ["sorted", "shuffled", "planes reversed"])
def test_metadata_stats_merge_into_the_events_own(order):
    """What an event's metadata says fills in the events that do not carry the stat
    themselves, in event order (before, between and after the own rows), from every
    plane at once whatever order the planes come in; an event's own value wins; a stat
    no event carries comes from the metadata alone, strings interned."""
    from tb_perfdiag.trace.build import StringTable
    evs = np.array([1, 5, 7, 10, 12], np.int64)
    rows = np.array([0, 1, 0, 2, 1], np.int64)           # each event's metadata row
    if order == "shuffled":
        o = np.array([4, 0, 3, 2, 1])              # 12 before 10: both after 9
        evs, rows = evs[o], rows[o]
    stats = {"program_id": (np.array([2, 5, 9], np.int64), np.array([20, 50, 90], np.int64),
                            False)}
    cols = {"program_id": (np.array([0, 1, 2], np.int64), [100, 101, 102], False),
            "tf_op": (np.array([1, 2], np.int64), ["b", "c"], True)}
    # two planes: events 1, 5, 7 and 10, 12, each with its own metadata rows
    planes = [(evs[:3], rows[:3], cols), (evs[3:], rows[3:], cols)]
    if order == "planes reversed":
        planes = planes[::-1]
    strings = StringTable()
    xspace._merge_metadata_stats(stats, planes, strings)
    e, v, is_string = stats["program_id"]
    got = dict(zip(np.asarray(e).tolist(), np.asarray(v).tolist()))
    assert np.asarray(e).tolist() == [1, 2, 5, 7, 9, 10, 12] and not is_string
    assert got == {1: 100, 2: 20, 5: 50, 7: 100, 9: 90, 10: 102, 12: 101}
    e, v, is_string = stats["tf_op"]
    got = {ev: strings.strings[x] for ev, x in zip(np.asarray(e).tolist(), v.tolist())}
    want = {ev: {1: "b", 2: "c"}[r] for ev, r in zip(evs.tolist(), rows.tolist()) if r}
    assert sorted(got) == np.asarray(e).tolist() and got == want and is_string


@pytest.mark.parametrize("n_types", [3, 90])
@pytest.mark.parametrize("type_rows", ["sorted", "shuffled"])
def test_flow_links_join_each_consumer_to_the_first_producer_of_its_type_and_id(n_types,
                                                                               type_rows):
    """Producer (``_p``, ``_pt``) → consumer (``_c``, ``_ct``) links: a consumer links to
    the first producer with its (type, id), never to itself; ids span the whole int64
    range; events with no type stat are type 0, an event with two the last.  Few types
    are joined per type, many by one sort of the (type, id) rows; type rows in event
    order are looked up, others spread over the events: all agree with a dict."""
    rng = np.random.default_rng(n_types)
    n = 4000
    ev = rng.permutation(n)
    pe, ce = np.sort(ev[:900]), np.sort(ev[800:2200])          # 100 events do both
    ids = rng.integers(-2**63, 2**63 - 1, 50, dtype=np.int64)
    pid, cid = ids[rng.integers(0, 50, pe.size)], ids[rng.integers(0, 50, ce.size)]
    typed_p, typed_c = pe[rng.random(pe.size) < 0.8], ce[rng.random(ce.size) < 0.8]
    typed_p = np.sort(np.concatenate([typed_p, typed_p[::7]]))     # some typed twice
    ptype = rng.integers(0, n_types, typed_p.size)
    ctype = rng.integers(0, n_types, typed_c.size)
    if type_rows == "shuffled":
        o = rng.permutation(typed_c.size)
        typed_c, ctype = typed_c[o], ctype[o]
    stats = {"_p": (pe, pid, False), "_c": (ce, cid, False),
             "_pt": (typed_p, ptype, False), "_ct": (typed_c, ctype, False)}
    src, dst, kind = xspace._flow_links(stats, n)
    type_of_p = dict(zip(typed_p.tolist(), ptype.tolist()))
    type_of_c = dict(zip(typed_c.tolist(), ctype.tolist()))
    first = {}
    for e, i in zip(pe.tolist(), pid.tolist()):
        first.setdefault((type_of_p.get(e, 0), i), e)
    want = [(first[k], c) for c, i in zip(ce.tolist(), cid.tolist())
            for k in [(type_of_c.get(c, 0), i)] if k in first and first[k] != c]
    assert len(want) > 100
    assert list(zip(src.tolist(), dst.tolist())) == want
    assert (kind == LinkKind.FLOW).all()


@pytest.mark.parametrize("lut_max, block", [(1 << 22, 1 << 20), (1 << 22, 2), (0, 3)])
def test_event_names_by_table_or_search_in_blocks(monkeypatch, lut_max, block):
    """Each event's name from its metadata id, by a table over the ids or a search of
    them, a block of events at a time (any block size): the names, and ``<unknown>``
    for an id the plane has no metadata of, are the same either way."""
    from tb_perfdiag.testing.xspace import XSpaceWriter, load_xspace
    monkeypatch.setattr(xspace, "_LUT_MAX", lut_max)
    monkeypatch.setattr(xspace, "_NAME_BLOCK", block)
    w = XSpaceWriter()
    host = w.plane("/host:CPU", id=1)
    line = host.line(1, "python", timestamp_ns=0)
    want = []
    for i in range(9):
        nm = f"op{i % 4}"
        host.event(line, nm, offset_ps=i * 10_000, duration_ps=5_000)
        want.append(nm)
    line.events[4].metadata_id = 77                    # no such metadata
    want[4] = "<unknown>"
    t = load_xspace(w)
    got = [t.event_name(e) for e in np.argsort(t.ts, kind="stable").tolist()]
    assert got == want
