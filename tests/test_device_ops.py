"""Device time by op: groups, launching steps, short kernels, the compute/copies/collectives
overlap, the device_ops JSON and text, and the sums on real traces."""
from __future__ import annotations

import json
import os

import jsonschema
import numpy as np
import pytest

import tb_perfdiag
from tb_perfdiag import codec
from tb_perfdiag.analysis.device_time.by_op import fold_kernel_name
from tb_perfdiag.analysis.diagnosis import diagnose_trace
from tb_perfdiag.analysis.intervals import union
from tb_perfdiag.analysis.result import OpClass, Overlap
from tb_perfdiag.render.device_ops import device_ops_json, text_lines
from tb_perfdiag.render.json import diagnosis_json
from tb_perfdiag.testing import TraceBuilder

from conftest import ROOT, TESTDATA, shared_files

SCHEMA = json.load(open(os.path.join(ROOT, "tb_perfdiag", "schema", "diagnosis.schema.json")))
US = 1_000_000          # ps


@pytest.mark.parametrize("name,folded", [
    ("void gemm_kernel<float, 128>(float*, int)", "gemm_kernel<…>"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
     "(anonymous namespace)::TensorListMetadata<4>, float>(T1, T2)",
     "at::native::multi_tensor_apply_kernel<…>"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
     "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
     "at::detail::Array<char*, 3>)", "at::native::vectorized_elementwise_kernel<…>"),
    ("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, float>(Params<int>)",
     "internal::gemvx::kernel<…>"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4>(Params)",
     "cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4>"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
     "ncclKernel_AllReduce_RING_LL_Sum_float"),
    ("volta_sgemm_128x64_nn", "volta_sgemm_128x64_nn"),
    ("triton_poi_fused_add_0", "triton_poi_fused_add_0"),
])
def test_kernel_names_fold_template_arguments(name, folded):
    assert fold_kernel_name(name) == folded


def _kineto_trace(relu_us=4):
    """Two steps.  Step 1 launches two instantiations of one template (200 and 100 µs)
    under aten::mm / aten::add in record_function 'forward', an H2D and a D2H copy, a
    memset and an NCCL all-reduce on stream 13 that overlaps the first kernel by 50 µs;
    step 2 launches 3 kernels of 4 µs (shorter than the launch latency) that run after
    step 2's host window has ended, and one more copy under the first kernel."""
    b = TraceBuilder()
    main = b.thread("python main")
    s7, s13 = b.stream(gpu=0, stream=7), b.stream(gpu=0, stream=13)
    with b.step(main, 1, 0, 1000):
        with b.op(main, "forward", 1, 60, cat="user_annotation"):
            with b.op(main, "aten::mm", 5, 30):
                k1 = b.kernel(s7, "void gemm_kernel<float, 128>(float*, int)", 100, 200)
                b.launch(main, "cudaLaunchKernel", 10, 5, kernel=k1)
            with b.op(main, "aten::add", 40, 20):
                k2 = b.kernel(s7, "void gemm_kernel<double, 64>(double*, int)", 300, 100)
                b.launch(main, "cudaLaunchKernel", 45, 5, kernel=k2)
        with b.op(main, "aten::copy_", 62, 20):
            c1 = b.memcpy(s7, "Memcpy HtoD (Pageable -> Device)", 400, 50)
            b.launch(main, "cudaMemcpyAsync", 64, 5, kernel=c1)
        c2 = b.memcpy(s7, "Memcpy DtoH (Device -> Pinned)", 450, 20)
        b.launch(main, "cudaMemcpyAsync", 84, 5, kernel=c2)
        m = b.memset(s7, "Memset (Device)", 470, 4)
        b.launch(main, "cudaMemsetAsync", 90, 2, kernel=m)
        with b.op(main, "nccl:all_reduce", 93, 10):
            n = b.kernel(s13, "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned "
                              "long, ncclWork*)", 250, 100)
            b.launch(main, "cudaLaunchKernel", 95, 5, kernel=n)
        c3 = b.memcpy(s13, "Memcpy DtoD (Device -> Device)", 120, 30)
        b.launch(main, "cudaMemcpyAsync", 105, 5, kernel=c3)
    with b.step(main, 2, 1000, 100):
        with b.op(main, "aten::relu", 1010, 60):
            for i in range(3):
                k = b.kernel(s7, "void relu_kernel<float>(float*)", 1200 + 50 * i, relu_us)
                b.launch(main, "cudaLaunchKernel", 1015 + 15 * i, 5, kernel=k)
    return b.build()


@pytest.fixture(scope="module")
def kineto_diag():
    return diagnose_trace(_kineto_trace())


def _rows(T, device=0):
    return {T.name[i]: i for i in range(len(T)) if T.device[i] == device}


def test_groups_calls_times_and_launchers(kineto_diag):
    T = kineto_diag.device_ops
    r = _rows(T)
    assert set(r) == {"gemm_kernel<…>", "ncclKernel_AllReduce_RING_LL_Sum_float",
                      "Memcpy HtoD (pageable)", "Memcpy DtoH", "Memcpy DtoD", "Memset",
                      "relu_kernel<…>"}
    g = r["gemm_kernel<…>"]
    assert (T.count[g], T.time[g]) == (2, 300 * US)
    assert T.host_op[g] == "aten::mm"                    # most of its time (200 of 300 µs)
    assert T.annotation[g] == "forward"
    assert (T.longest_ts[g], T.longest_dur[g]) == (100 * US, 200 * US)
    assert T.klass[g] == OpClass.COMPUTE
    nc = r["ncclKernel_AllReduce_RING_LL_Sum_float"]
    assert T.klass[nc] == OpClass.COLLECTIVE and T.host_op[nc] == "nccl:all_reduce"
    assert T.host_op[r["Memcpy HtoD (pageable)"]] == "aten::copy_"
    assert T.klass[r["Memset"]] == OpClass.MEMSET and T.time[r["Memset"]] == 4 * US
    relu = r["relu_kernel<…>"]
    assert (T.count[relu], T.time[relu], T.short_count[relu]) == (3, 12 * US, 3)
    assert (T.short_count_dev[0], T.short_time_dev[0]) == (3, 12 * US)
    # rows by device time, most first
    assert list(T.time[[r[n] for n in T.name]]) == sorted(T.time, reverse=True)


def test_overlap_splits_the_busy_union(kineto_diag):
    T, D = kineto_diag.device_ops, kineto_diag.devices
    ov = dict(zip([o.name for o in Overlap], T.overlap[0].tolist()))
    # compute: [100, 400) and 3 × 4 µs; copies [120,150) [400,474); nccl [250, 350)
    assert ov["BUSY"] == D.busy[0] == (374 + 12) * US
    assert ov["COMPUTE"] == (300 + 12) * US
    assert ov["COPIES"] == (30 + 74) * US and ov["COPIES_UNDER_COMPUTE"] == 30 * US
    assert ov["COLLECTIVES"] == 100 * US and ov["COLLECTIVES_UNDER_COMPUTE"] == 100 * US
    assert ov["COPIES_EXPOSED"] == 74 * US and ov["COLLECTIVES_EXPOSED"] == 0
    assert ov["COMPUTE"] + ov["COPIES_EXPOSED"] + ov["COLLECTIVES_EXPOSED"] == ov["BUSY"]


def test_per_step_by_the_launching_step(kineto_diag):
    d = kineto_diag
    T = d.device_ops
    r = _rows(T)
    s2 = int(np.flatnonzero(d.steps.ids == 2)[0])
    cells = T.step == s2
    assert [T.name[i] for i in T.step_row[cells]] == ["relu_kernel<…>"]
    assert T.step_time[cells].tolist() == [12 * US]
    # the relu kernels ran after step 2's host window, yet belong to it
    assert T.step_overlap[s2, 0, Overlap.BUSY] == 12 * US
    assert T.step_short_count[s2, 0] == 3
    s1 = int(np.flatnonzero(d.steps.ids == 1)[0])
    assert T.step_overlap[s1, 0, Overlap.BUSY] == 374 * US
    assert T.step_time[(T.step == s1) & (T.step_row == r["gemm_kernel<…>"])].tolist() == [300 * US]
    if d.steps.launched is not None:
        assert T.step_overlap[:, 0, Overlap.BUSY].tolist() == d.steps.launched[:, 0].tolist()


def test_json_top_other_step_and_schema(kineto_diag):
    d = kineto_diag
    doc = device_ops_json(d, top=3)
    (dev,) = doc["devices"]
    assert [o["name"] for o in dev["ops"]] == ["gemm_kernel<…>", "ncclKernel_AllReduce_RING_LL_Sum_float",
                                               "Memcpy HtoD (pageable)"]
    assert dev["other"]["groups"] == 4
    assert sum(o["total_ns"] for o in dev["ops"]) + dev["other"]["total_ns"] == dev["ops_total_ns"]
    g = dev["ops"][0]
    assert (g["calls"], g["total_ns"], g["mean_ns"]) == (2, 300_000, 150_000)
    assert g["share_of_busy"] == pytest.approx(300 / 386)
    assert g["viewer"]["view_ms"][0] <= 0.1 <= 0.3 <= g["viewer"]["view_ms"][1]
    assert dev["short_kernels"]["calls"] == 3
    assert dev["short_kernels"]["groups"][0]["name"] == "relu_kernel<…>"
    step = device_ops_json(d, step=2)
    (sd,) = step["devices"]
    assert [o["name"] for o in sd["ops"]] == ["relu_kernel<…>"]
    assert sd["ops"][0]["share_of_step"] == pytest.approx(12 / 100)
    assert sd["overlap"]["busy_ns"] == 12_000 and step["step_ns"] == 100_000
    for s in (None, 1, 2):
        jsonschema.validate(diagnosis_json(d, step=s), SCHEMA)
    text = "\n".join(text_lines(d))
    assert "gemm_kernel<…>" in text and "shorter than the 10 µs launch latency: 3 calls" in text


def test_a_step_keeps_its_first_groups_and_sums_the_rest(kineto_diag, monkeypatch):
    """Per (step, device) the table keeps only the groups with the most time: a step's
    view lists them and counts the others in "other", and lists the same as the whole
    table where it shows no more than were kept; compare's typical step is unchanged."""
    from tb_perfdiag.analysis.device_time import by_op as D
    from tb_perfdiag.analysis.compare.diff import match_device_ops
    monkeypatch.setattr(D, "STEP_GROUPS", 2)
    cut = diagnose_trace(_kineto_trace())
    T = cut.device_ops
    s1 = int(np.flatnonzero(cut.steps.ids == 1)[0])
    # step 1: gemm 300, nccl 100, HtoD 50, DtoD 30, DtoH 20, memset 4 µs
    assert sorted(T.name[i] for i in T.step_row[T.step == s1]) == [
        "gemm_kernel<…>", "ncclKernel_AllReduce_RING_LL_Sum_float"]
    assert (T.step_rest[s1, 0], T.step_rest_count[s1, 0], T.step_rest_time[s1, 0]) == \
        (4, 4, 104 * US)
    (dev,) = device_ops_json(cut, step=1)["devices"]
    (full,) = device_ops_json(kineto_diag, step=1)["devices"]
    assert [o["name"] for o in dev["ops"]] == [o["name"] for o in full["ops"][:2]]
    assert dev["other"] == {"groups": 4, "calls": 4, "total_ns": 104_000,
                            "share_of_busy": pytest.approx(104 / 374)}
    assert (dev["groups"], dev["ops_total_ns"]) == (full["groups"], full["ops_total_ns"])
    for step in (1, 2, None):
        assert device_ops_json(cut, step=step, top=2) == \
            device_ops_json(kineto_diag, step=step, top=2)
    assert match_device_ops(cut, cut) == match_device_ops(kineto_diag, kineto_diag)


def test_xspace_gpu_copies_by_details_and_xla_ops_by_hlo_op():
    b = TraceBuilder("xspace")
    py = b.thread("python")
    s = b.stream(gpu=0, stream=7)
    with b.step(py, 1, 0, 500):
        for i, (t, hlo) in enumerate([(100, "fusion.1"), (150, "fusion.1"), (200, "dot.2")]):
            k = b.kernel(s, "loop_add_fusion" if hlo != "dot.2" else "sm90_gemm",
                         t, 20, stats={"hlo_op": hlo, "hlo_module": "jit_train_step",
                                       "tf_op": "jit(train_step)/add"})
            b.launch(py, "cuLaunchKernel", 10 + 10 * i, 5, kernel=k)
        c = b.memcpy(s, "MemcpyH2D", 300, 30,
                     stats=[("memcpy_details", "s", "kind_src:pinned kind_dst:device size:8")])
        b.launch(py, "cuMemcpyHtoDAsync", 50, 5, kernel=c)
        c2 = b.memcpy(s, "Memcpy", 340, 10,
                      stats=[("memcpy_details", "s", "kind_src:device kind_dst:pageable size:8")])
        b.launch(py, "cuMemcpyDtoHAsync", 60, 5, kernel=c2)
    d = diagnose_trace(b.build())
    T = d.device_ops
    r = _rows(T)
    assert set(r) == {"fusion.1", "dot.2", "Memcpy HtoD", "Memcpy DtoH (pageable)"}
    assert (T.count[r["fusion.1"]], T.time[r["fusion.1"]]) == (2, 40 * US)
    assert T.host_op[r["fusion.1"]] == "jit(train_step)/add"
    assert T.overlap[0, Overlap.COPIES] == 40 * US
    jsonschema.validate(diagnosis_json(d), SCHEMA)


def test_result_store_round_trip_and_old_results(kineto_diag):
    back = codec.decode(codec.encode(kineto_diag))
    a, b = kineto_diag.device_ops, back.device_ops
    assert a.name == b.name and a.host_op == b.host_op
    for f in ("time", "count", "step_time", "overlap", "step_overlap", "longest"):
        assert np.array_equal(getattr(a, f), getattr(b, f))
    assert device_ops_json(back, step=2) == device_ops_json(kineto_diag, step=2)
    # a result written before the table existed loads with None and renders null
    kineto_diag_old = codec.decode(codec.encode(kineto_diag))
    kineto_diag_old.device_ops = None
    old = codec.decode(codec.encode(kineto_diag_old))
    assert old.device_ops is None
    doc = diagnosis_json(old)
    assert doc["device_ops"] is None
    jsonschema.validate(doc, SCHEMA)


def test_launch_bound_demo_names_its_tiny_kernels():
    d = os.path.join(TESTDATA, "synthetic", "logdir", "kineto_launch_bound")
    f = os.path.join(d, sorted(x for x in os.listdir(d) if x.endswith(".json"))[0])
    diag = tb_perfdiag.diagnose(f)
    (dev,) = device_ops_json(diag)["devices"]
    sk = dev["short_kernels"]
    # the launch-bound story: many kernels under the launch latency, named by the kernel,
    # the op that launched them and the user's scope, with a link to the finding
    top = sk["groups"][0]
    assert top["name"] == "at::native::reduce_kernel<…>"
    assert top["host_op"] == "aten::linalg_vector_norm" and top["annotation"] == "clip_gradients"
    assert top["calls"] >= 0.9 * sk["calls"] and sk["calls"] >= 100
    assert sk["finding"] is not None
    assert diag.findings[sk["finding"]].kind.value == "launch_bound"


def _full(trace, d, dv, mine):
    """The overlap rows of device ``dv`` from every op (the reference computation)."""
    from tb_perfdiag.analysis.device_time.by_op import _labels, overlap
    from tb_perfdiag.analysis.steps.windows import find_steps, launching_steps
    from tb_perfdiag.analysis.attribution.links import incoming_host_link, origins, root_origin
    label, _, klass = _labels(trace, mine, trace.kind[mine], {})
    kl = klass[label]
    linked = incoming_host_link(trace)
    origin, _ = origins(trace, linked)
    steps = find_steps(trace)
    st = launching_steps(trace, steps, root_origin(trace, origin, linked=linked))[mine]
    n = len(d.steps)
    ts, end = trace.ts[mine], trace.end_of(mine)
    whole = overlap(ts, end, kl, np.zeros(mine.shape[0], np.int64), 1)
    per = overlap(ts, end, kl, np.where(st >= 0, st, n).astype(np.int64), n + 1)[:n]
    return whole, per


def _real():
    picks = ("df_index_resolver", "tpu_inference_2", "nccl_data", "rank0", "resnet50_num_workers_0",
             "localhost", "vm.xplane")
    return [f for f in shared_files((".json.gz", ".xplane.pb")) if any(p in f for p in picks)][:10]


@pytest.mark.skipif(not _real(), reason="no real traces under ../shared/traces")
@pytest.mark.parametrize("path", _real() or ["none"], ids=os.path.basename)
def test_real_traces_add_up(path):
    from tb_perfdiag.trace import load
    trace = load(path)
    d = diagnose_trace(trace)
    T = d.device_ops
    dev_ops = np.flatnonzero(trace.is_device_activity())
    on = trace.track_device[trace.track[dev_ops]]
    for dv in range(len(d.devices)):
        mine = dev_ops[on == dv]
        if not mine.size:
            continue
        rows = T.device == dv
        assert T.count[rows].sum() == mine.size
        assert T.time[rows].sum() == pytest.approx(int(trace.dur[mine].sum()), abs=len(T))
        ov = T.overlap[dv]
        assert ov[Overlap.BUSY] == d.devices.busy[dv]
        assert ov[Overlap.COMPUTE] + ov[Overlap.COPIES_EXPOSED] + \
            ov[Overlap.COLLECTIVES_EXPOSED] == ov[Overlap.BUSY]
        assert ov[Overlap.COPIES_UNDER_COMPUTE] <= ov[Overlap.COPIES]
        assert ov[Overlap.COLLECTIVES_UNDER_COMPUTE] <= ov[Overlap.COLLECTIVES]
        s, e = union(trace.ts[mine], trace.end_of(mine))
        if int((e - s).sum()) == int(trace.dur[mine].sum()):
            # no two ops of the device overlap: its ops add up to its busy time (1 µs)
            assert abs(int(T.time[rows].sum()) - int(d.devices.busy[dv])) <= US
        # the same figures as from every op of the device (not only the windows around
        # its copies and collectives)
        from tb_perfdiag.analysis.device_time.by_op import overlap
        full = _full(trace, d, dv, mine)
        assert T.overlap[dv].tolist() == full[0][0].tolist()
        assert T.step_overlap[:, dv].tolist() == full[1].tolist()
        # per launching step the same split holds
        so = T.step_overlap[:, dv]
        assert (so[:, Overlap.COMPUTE] + so[:, Overlap.COPIES_EXPOSED] +
                so[:, Overlap.COLLECTIVES_EXPOSED] == so[:, Overlap.BUSY]).all()
    jsonschema.validate(diagnosis_json(d), SCHEMA)


def test_compare_uses_the_same_grouping(kineto_diag):
    from tb_perfdiag.analysis.compare.diff import compare
    from tb_perfdiag.render.compare import comparison_json
    after = diagnose_trace(_kineto_trace(relu_us=40))
    cmp = compare(kineto_diag, after)
    top = cmp.device_ops[0]
    # two steps, both typical: per typical step 6 → 60 µs of relu_kernel<…> (all its
    # instantiations as one group), 1.5 calls
    assert (top.name, top.before, top.after) == ("relu_kernel<…>", 6 * US, 60 * US)
    assert top.calls_before == top.calls_after == 1.5
    doc = comparison_json(cmp)
    assert doc["device_ops"]["by_device_time"][0]["delta_ns"] == 54_000
    assert [r["name"] for r in doc["device_ops"]["by_device_time"]] == ["relu_kernel<…>"]
    schema = json.load(open(os.path.join(ROOT, "tb_perfdiag", "schema", "comparison.schema.json")))
    jsonschema.validate(json.loads(json.dumps(doc, default=float)), schema)


def test_host_op_is_the_one_behind_most_time_not_the_longest_instance():
    b = TraceBuilder()
    main = b.thread("python main")
    s7 = b.stream(gpu=0, stream=7)
    with b.step(main, 1, 0, 2000):
        with b.op(main, "aten::mul", 1, 10):
            k = b.kernel(s7, "void elementwise_kernel<float>(int)", 100, 50)     # the longest
            b.launch(main, "cudaLaunchKernel", 2, 5, kernel=k)
        for i in range(3):
            with b.op(main, "aten::add", 20 + 20 * i, 10):
                k = b.kernel(s7, "void elementwise_kernel<double>(int)", 200 + 100 * i, 40)
                b.launch(main, "cudaLaunchKernel", 22 + 20 * i, 5, kernel=k)
    T = diagnose_trace(b.build()).device_ops
    (r,) = range(len(T))
    assert T.name[r] == "elementwise_kernel<…>" and T.count[r] == 4
    assert T.longest_dur[r] == 50 * US
    assert T.host_op[r] == "aten::add"              # 120 µs against aten::mul's 50 µs


def test_a_trace_without_device_ops_has_an_empty_table():
    b = TraceBuilder()
    main = b.thread("python main")
    with b.step(main, 1, 0, 100):
        b.op(main, "aten::mm", 5, 30)
    d = diagnose_trace(b.build())
    assert len(d.device_ops) == 0
    doc = diagnosis_json(d)
    assert doc["device_ops"]["devices"] == []
    jsonschema.validate(doc, SCHEMA)


def test_cells_native_and_numpy_agree(monkeypatch):
    """The extension's one pass and the numpy fallback give the same cells and rows:
    each op's cell, per cell its step, group, count, time and earliest longest op, per row
    the same folded over its cells (unused rows empty) and over the typical steps' cells,
    short ops per row and per (step, device); with a cut, the same cells kept per
    (step, device) and the same rest."""
    from tb_perfdiag.analysis.device_time import by_op as D
    if getattr(D._native, "op_cells", None) is None:
        pytest.skip("native extension not built")
    rng = np.random.default_rng(7)
    n, n_lab, n_dev, n_steps = 50_000, 40, 3, 24
    label = rng.integers(0, n_lab, n).astype(np.int32)
    step = rng.integers(-1, n_steps, n).astype(np.int32)      # −1: launched by no step
    dev = rng.integers(0, n_dev, n).astype(np.int32)
    crowd = np.arange(n) % 7 == 0                               # a crowded cell
    label[crowd], step[crowd], dev[crowd] = 11, 0, 0
    label[label == 5] = 6                                       # an unused row (5)
    dur = rng.integers(0, 40, n).astype(np.int64)   # ties: the earliest longest op wins
    short = dur < 10
    typical = rng.random(n_steps) < 0.7

    def both(*args):
        monkeypatch.delenv("TB_PERFDIAG_NO_NATIVE", raising=False)
        native = D._cells(*args)
        monkeypatch.setenv("TB_PERFDIAG_NO_NATIVE", "1")
        ref = D._cells(*args)
        for what in D._Cells._fields:
            a, b = getattr(native, what), getattr(ref, what)
            assert a.dtype == b.dtype and np.array_equal(a, b), what
        return native
    got = both(label, step, dev, dur, short, typical, n_steps, n_dev, n_lab, 0)
    # the steps as the analysis holds them (int8 where few, int16): the same cells
    for narrow in (np.int8, np.int16):
        other = both(label, step.astype(narrow), dev, dur, short, typical, n_steps, n_dev,
                     n_lab, 0)
        for what in D._Cells._fields:
            assert np.array_equal(getattr(other, what), getattr(got, what)), what
    assert not got.sd_rest.any()
    assert got.r_count[5] == 0 and got.r_pos[5] == -1
    # the figures themselves, on one row, one cell and one (step, device)
    row = (dev == 2) & (label == 6)
    dl = 2 * n_lab + 6
    assert got.r_count[dl] == row.sum() and got.r_time[dl] == dur[row].sum()
    assert got.r_pos[dl] == np.flatnonzero(row & (dur == dur[row].max()))[0]
    none = (step < 0) & row                                    # the cell of no step
    c = np.flatnonzero((got.step == n_steps) & (got.dl == dl))
    assert c.size == 1 and got.count[c[0]] == none.sum() and got.time[c[0]] == dur[none].sum()
    sd = (step == 3) & (dev == 2) & short
    assert got.sd_short[3 * n_dev + 2] == sd.sum()
    assert got.sd_short_time[3 * n_dev + 2] == dur[sd].sum()
    typ = row & (step >= 0) & typical[step]
    assert got.r_typ_count[dl] == typ.sum() and got.r_typ_time[dl] == dur[typ].sum()
    # the cut: per (step, device) the 3 cells of most time (then of the row with most
    # time, then the lower group) are kept, the others summed; the rows do not change
    cut = both(label, step, dev, dur, short, typical, n_steps, n_dev, n_lab, 3)
    for f in ("r_count", "r_time", "r_pos", "r_typ_count", "r_typ_time", "sd_short"):
        assert np.array_equal(getattr(cut, f), getattr(got, f)), f
    sd_all = got.step * n_dev + got.dl // n_lab
    sd_cut = cut.step * n_dev + cut.dl // n_lab
    n_sd = (n_steps + 1) * n_dev
    groups = np.bincount(sd_all, minlength=n_sd)
    assert np.array_equal(np.bincount(sd_cut, minlength=n_sd), np.minimum(groups, 3))
    assert np.array_equal(cut.sd_rest, groups - np.minimum(groups, 3))
    for f, w in (("sd_rest_count", "count"), ("sd_rest_time", "time")):
        want = np.bincount(sd_all, getattr(got, w), n_sd) - \
            np.bincount(sd_cut, getattr(cut, w), n_sd)
        assert np.array_equal(getattr(cut, f), want.astype(np.int64)), f
    for k in np.unique(sd_all).tolist():
        mine = np.flatnonzero(sd_all == k)
        view = mine[np.lexsort((got.dl[mine], -got.r_time[got.dl[mine]], -got.time[mine]))]
        assert sorted(got.dl[view[:3]].tolist()) == cut.dl[sd_cut == k].tolist()
    # many groups in a step: the native pass first cuts them by the times of every 5th
    # group; when those are the only long ones, that cut leaves too few and every group
    # is weighed
    lab = np.arange(2000, dtype=np.int32)
    for d in (rng.integers(0, 10**6, 2000), np.where(lab % 5 == 0, 10**6 + lab, 1)):
        got = both(lab, np.zeros(2000, np.int32), None, d.astype(np.int64),
                   np.zeros(2000, bool), np.ones(1, bool), 1, 1, 2000, 100)
        assert got.dl.size == 100 and got.sd_rest.tolist() == [1900, 0]
    # one device (no device column), one op per cell
    one = np.arange(10, dtype=np.int32)
    got = both(one % 5, one // 5, None, one.astype(np.int64) * 3, one > 5, np.ones(1, bool),
               1, 1, 5, 1000)
    assert np.array_equal(got.pos, one) and np.array_equal(got.time, one * 3)
    assert got.r_pos.tolist() == [5, 6, 7, 8, 9] and got.sd_short.tolist() == [0, 4]
    assert got.r_typ_count.tolist() == [1] * 5 and got.r_typ_time.tolist() == [0, 3, 6, 9, 12]
    # out of range is refused, not read past
    with pytest.raises(ValueError):
        D._native.op_cells(one, one, b"", one.astype(np.int64), one > 5, b"\x01", 1, 1, 5, 0)
    with pytest.raises(ValueError):                 # narrow steps out of range alike
        D._native.op_cells(one, one.astype(np.int8), b"", one.astype(np.int64), one > 5,
                           b"\x01", 1, 1, 5, 0)
    with pytest.raises(ValueError):                 # steps of no width the pass reads
        D._native.op_cells(one, np.zeros(30, np.uint8), b"", one.astype(np.int64), one > 5,
                           b"\x01", 1, 1, 5, 0)


@pytest.mark.parametrize("copies", [1, 40])       # a few matches, and many
def test_op_classes_of_labels(copies):
    """Copies and sets count only where their name starts the label; collectives
    anywhere in it, in any case."""
    from tb_perfdiag.analysis.device_time import by_op as D
    C = D.OpClass
    labels = ["fusion.1", "xMemcpy HtoD", "my_copy-start", "Memset", "Memset2",
              "ncclDevKernel_AllReduce_Sum<…>", "all-gather.3", "copy-start.12", "copy-done",
              "copy-start.x"] + [f"Memcpy HtoD {i}" for i in range(copies)]
    want = [C.COMPUTE, C.COMPUTE, C.COMPUTE, C.MEMSET, C.COMPUTE, C.COLLECTIVE, C.COLLECTIVE,
            C.MEMCPY, C.MEMCPY, C.COMPUTE] + [C.MEMCPY] * copies
    assert D._classes(labels).tolist() == [int(c) for c in want]


@pytest.mark.parametrize("far", [0, 10**18])
def test_overlap_per_key_is_each_key_alone(far):
    """The per-key overlap (keys laid end to end, or in chunks of keys when their extents
    add up past 2**62) equals each key's ops taken alone."""
    from tb_perfdiag.analysis.device_time.by_op import overlap
    rng = np.random.default_rng(11)
    n, n_keys = 4000, 37
    key = rng.integers(0, n_keys, n)
    key[key == 5] = 6                                        # a key with no ops
    starts = rng.integers(0, 10**9, n) + key * 10**6
    # far: five keys each spread over 10**18 ps, together past 2**62
    starts[(key >= 1) & (key <= 5) & (np.arange(n) % 2 == 0)] += far
    ends = starts + rng.integers(0, 10**6, n)
    klass = rng.integers(0, 4, n).astype(np.int8)
    got = overlap(starts, ends, klass, key, n_keys)
    for k in range(n_keys):
        m = key == k
        alone = overlap(starts[m], ends[m], klass[m], np.zeros(int(m.sum()), np.int64), 1)[0]
        assert got[k].tolist() == alone.tolist(), k


def _union_length(s, e) -> int:
    """The union length of intervals, the plain way."""
    total, reach = 0, None
    for a, b in sorted(zip(s.tolist(), e.tolist())):
        if reach is None or a > reach:
            total += b - a
            reach = b
        elif b > reach:
            total += b - reach
            reach = b
    return total


@pytest.mark.parametrize("mix", ["all", "no copies", "no collectives", "compute only",
                                 "no compute"])
def test_overlap_unions_in_c_are_each_class_set_unioned_alone(mix, monkeypatch):
    """The six unions per key behind the overlap split (all ops, compute, copies,
    collectives, compute with copies, compute with collectives) in one C pass equal
    numpy's passes and a plain union of each set; nested, touching and empty ops."""
    from tb_perfdiag.analysis.device_time import by_op as D
    from tb_perfdiag.trace.build import native_fn
    if native_fn("overlap_unions") is None:
        pytest.skip("the native extension is not built (setup.py build_ext)")
    C = D.OpClass
    rng = np.random.default_rng(len(mix))
    n, n_keys = 3000, 23
    key = rng.integers(0, n_keys, n)
    starts = rng.integers(0, 10**7, n) + key * 10**8
    ends = starts + rng.integers(0, 10**5, n) * (rng.random(n) < 0.95)   # some empty
    klass = rng.integers(0, 4, n).astype(np.int8)
    drop = {"no copies": (C.MEMCPY, C.MEMSET), "no collectives": (C.COLLECTIVE,),
            "compute only": (C.MEMCPY, C.MEMSET, C.COLLECTIVE),
            "no compute": (C.COMPUTE,)}.get(mix, ())
    klass[np.isin(klass, [int(c) for c in drop])] = \
        int(C.MEMSET) if mix == "no compute" else int(C.COMPUTE)
    got = D.overlap(starts, ends, klass, key, n_keys)
    monkeypatch.setenv("TB_PERFDIAG_NO_NATIVE", "1")
    want = D.overlap(starts, ends, klass, key, n_keys)
    np.testing.assert_array_equal(got, want)
    sets = {D.Overlap.BUSY: (0, 1, 2, 3), D.Overlap.COMPUTE: (0,), D.Overlap.COPIES: (2, 3),
            D.Overlap.COLLECTIVES: (1,)}
    for k in range(n_keys):
        m = key == k
        for col, classes in sets.items():
            sel = m & np.isin(klass, classes)
            assert got[k, col] == _union_length(starts[sel], ends[sel]), (k, col)
        cm = _union_length(starts[m & np.isin(klass, (0, 2, 3))], ends[m & np.isin(klass, (0, 2, 3))])
        assert got[k, D.Overlap.COPIES_EXPOSED] == cm - got[k, D.Overlap.COMPUTE]


def test_track_ends_searched_and_checked_without_a_column_of_them(monkeypatch):
    """The overlap's windows are read off a serial track's ends without a column of them:
    the binary search over the probed ends is ``np.searchsorted`` of the ends for keys
    before, on, between and past them (equal ends and zero-length ops included), and the
    block-wise order check is numpy's, also where the ends fall across a block boundary."""
    from types import SimpleNamespace
    from tb_perfdiag.analysis.device_time import by_op as D
    rng = np.random.default_rng(11)
    monkeypatch.setattr(D, "_BLOCK", 3)
    for m in (1, 2, 5, 9, 40):
        dur = rng.integers(0, 4, m).astype(np.int64)
        ts = np.cumsum(rng.integers(0, 5, m)).astype(np.int64) + 7
        ts = np.maximum(ts, np.r_[0, np.maximum.accumulate(ts + dur)[:-1]] - dur)
        pad = 4                                    # other tracks' events around the slice
        tr = SimpleNamespace(ts=np.r_[np.full(pad, 99), ts, np.full(pad, -5)],
                             dur=np.r_[np.zeros(pad, np.int64), dur, np.zeros(pad, np.int64)])
        en = ts + dur
        assert (en[1:] >= en[:-1]).all()
        keys = np.r_[en, en - 1, en + 1, ts, -1, en.max() + 9].astype(np.int64)
        got = D._search_ends(tr, pad, pad + m, keys)
        assert got.tolist() == np.searchsorted(en, keys, side="right").tolist()
        assert D._ends_sorted(tr, pad, pad + m)
        if m > 1:
            for j in range(1, m):                  # one end falls: every place of it
                bad = SimpleNamespace(ts=tr.ts.copy(), dur=tr.dur.copy())
                bad.dur[pad + j] = 0
                bad.ts[pad + j] = en[j - 1] - 1 - bad.dur[pad + j]
                want = bool(((bad.ts + bad.dur)[pad + 1:pad + m] >=
                             (bad.ts + bad.dur)[pad:pad + m - 1]).all())
                assert D._ends_sorted(bad, pad, pad + m) == want
    assert D._search_ends(tr, pad, pad, np.array([3], np.int64)).tolist() == [0]


@pytest.mark.parametrize("block", [1, 7, 1 << 20])
def test_dominant_key_per_row_read_a_block_of_ops_at_a_time(block, monkeypatch):
    """Each row's key with the most weight (its longest instance's where all its ops
    share that key; ties to the lower key, none where no weight), found reading the ops
    a block at a time: the same for every block size, and as counted op by op; rows
    with no ops keep their own key."""
    from tb_perfdiag.analysis.device_time import by_op as DO
    monkeypatch.setattr(DO, "_BLOCK", block)
    rng = np.random.default_rng(block)
    n_rows, n = 12, 300
    row = rng.integers(0, n_rows - 1, n).astype(np.int32)       # the last row has no ops
    key = rng.integers(-1, 5, n).astype(np.int32)
    key[row < 4] = 3                                           # rows that all share a key
    weight = rng.integers(0, 50, n).astype(np.int64)
    own = rng.integers(-1, 5, n_rows).astype(np.int32)
    own[:4] = 3
    # a row whose ops share its own key but the very last op, heavier and of another key
    # (seen only by the last block)
    row[row == 10] = 9
    row[-3:] = 10
    key[-3:] = [2, 2, 4]
    weight[-3:] = [5, 5, 40]
    own[10] = 2
    got = DO._dominant(row, key, weight, n_rows, own)
    assert got[10] == 4
    for r in range(n_rows):
        mine = row == r
        if not mine.any() or (key[mine] == own[r]).all():
            assert got[r] == own[r]
            continue
        ks = sorted(set(key[mine].tolist()))
        tot = [int(weight[mine & (key == k)].sum()) for k in ks]
        want = ks[int(np.argmax(tot))] if max(tot) > 0 else -1
        assert got[r] == want, r
