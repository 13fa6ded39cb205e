"""tb_perfdiag.testing: traces built in memory, read by the real readers."""
from __future__ import annotations

import doctest

import numpy as np
import pytest

import tb_perfdiag
from tb_perfdiag import testing
from tb_perfdiag.testing import Ref, TraceBuilder, U64, XSpaceWriter, load_kineto, load_xspace
from tb_perfdiag.testing import builder, kineto, xspace
from tb_perfdiag.trace import EventKind as K, LinkKind, TrackKind

US = 1_000_000      # ps


def _links(trace, kind):
    sel = trace.link_kind == kind
    return set(zip(trace.link_src[sel].tolist(), trace.link_dst[sel].tolist()))


@pytest.mark.parametrize("module", [testing, builder, kineto, xspace])
def test_docstring_examples(module):
    res = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert res.attempted and not res.failed


def test_issue_example_reads_like_a_timeline():
    b = TraceBuilder()
    main = b.thread("python main")
    s7 = b.stream(gpu=0, stream=7)
    with b.op(main, "ProfilerStep#1", 0, 1000, cat="user_annotation") as step:
        k = b.launch(main, "cudaLaunchKernel", 10, 5, kernel=b.kernel(s7, "gemm", 20, 100))
        sync = b.op(main, "cudaStreamSynchronize", 20, 200, cat="cuda_runtime")
    t = b.build()
    assert t.n_events == 4
    assert [d.name for d in t.devices] == ["GPU 0"]
    assert t.track_label[t.track[k.kernel.index]] == "GPU 0 · stream 7"
    assert t.track_kind[t.track[k.index]] == TrackKind.HOST
    assert [K(t.kind[e.index]) for e in (step, k, sync, k.kernel)] == \
        [K.STEP, K.LAUNCH, K.SYNC, K.KERNEL]
    assert t.parent[k.index] == step.index and t.parent[sync.index] == step.index
    assert _links(t, LinkKind.CORRELATION) == {(k.index, k.kernel.index)}
    assert t.ts[k.kernel.index] == 20 * US and t.dur[sync.index] == 200 * US
    assert t.steps_hint() == [(1, step.index)]


def test_kineto_ten_events():
    b = TraceBuilder()
    main, loader = b.thread("python main"), b.thread("pt_data_worker")
    s7, s20 = b.stream(0, 7), b.stream(0, 20)
    step = b.step(main, 5, 0, 900)
    fwd = b.op(main, "forward", 10, 400, cat="user_annotation")
    mm = b.op(main, "aten::mm", 20, 50)
    py = b.op(main, "nn.Module: Linear", 15, 70, cat="python_function")
    gemm = b.kernel(s7, "ampere_sgemm_64x32", 40.5, 80.25, args={"grid": [8, 1, 1]})
    launch = b.launch(main, "cudaLaunchKernel", 30, 6.125, kernel=gemm)
    cp = b.memcpy(s20, "Memcpy HtoD (Pinned -> Device)", 130, 12, args={"bytes": 4096})
    cpy = b.launch(main, "cudaMemcpyAsync", 100, 8, kernel=cp)
    ms = b.launch(main, "cuMemsetD32Async", 110, 3, kernel=b.memset(s7, "Memset (Device)", 125, 2),
                  cat="cuda_driver")
    data = b.op(loader, "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 500, 300,
                cat="user_annotation")
    t = b.build()
    assert t.format == "kineto" and t.n_events == 11
    assert sorted(t.track_label) == ["GPU 0 · stream 20", "GPU 0 · stream 7", "pt_data_worker",
                                     "python main"]
    kinds = {e.name: K(t.kind[e.index]) for e in b.events}
    assert kinds == {"ProfilerStep#5": K.STEP, "forward": K.ANNOTATION, "aten::mm": K.CPU_OP,
                     "nn.Module: Linear": K.PYTHON, "ampere_sgemm_64x32": K.KERNEL,
                     "cudaLaunchKernel": K.LAUNCH, "Memcpy HtoD (Pinned -> Device)": K.MEMCPY,
                     "cudaMemcpyAsync": K.LAUNCH, "cuMemsetD32Async": K.LAUNCH,
                     "Memset (Device)": K.MEMSET, data.name: K.DATA}
    # nesting by time: step › forward › python frame › aten::mm › cudaLaunchKernel
    assert t.chain(launch.index) == [step.index, fwd.index, py.index, mm.index, launch.index]
    assert t.parent[data.index] == -1
    assert _links(t, LinkKind.CORRELATION) == {(launch.index, gemm.index),
                                                (cpy.index, cp.index),
                                                (ms.index, ms.kernel.index)}
    # µs floats keep their nanoseconds
    assert t.ts[gemm.index] == 40_500_000 and t.dur[gemm.index] == 80_250_000
    assert t.dur[launch.index] == 6_125_000
    # args: correlation shared, External id of the enclosing cpu_op on both sides
    corr = t.stat("correlation")
    assert corr[launch.index] == corr[gemm.index] == launch.corr
    ext = t.stat("external_id")
    assert ext[launch.index] == ext[gemm.index] == ext[mm.index] > 0
    assert t.stat("bytes")[cp.index] == 4096
    assert t.stat("stream")[cp.index] == 20
    assert t.stat_str("memcpy_kind", cp.index) == "h2d"


def test_load_kineto_from_plain_dicts():
    t = load_kineto([
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 7, "tid": 8, "ts": 100.5,
         "dur": 10, "args": {"External id": 3}},
        {"ph": "X", "cat": "kernel", "name": "add_kernel", "pid": 1, "tid": 7, "ts": 112,
         "dur": 4, "args": {"device": 1, "stream": 7, "correlation": 9}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 8,
         "ts": 105, "dur": 3, "args": {"correlation": 9}},
    ], distributedInfo={"rank": 3})
    assert t.metadata["distributedInfo"] == {"rank": 3}
    assert [d.name for d in t.devices] == ["GPU 1"]
    (src, dst), = _links(t, LinkKind.CORRELATION)
    assert (t.event_name(src), t.event_name(dst)) == ("cudaLaunchKernel", "add_kernel")
    assert t.ts.min() == 0 and t.origin_ps == 100_500_000


def test_xspace_gpu_ten_events():
    b = TraceBuilder("xspace")
    py, px = b.thread("python"), b.thread("tf_pytorchxla")
    s7 = b.stream(gpu=0, stream=7, name="Stream #7(Kernel)")
    s21 = b.stream(gpu=0, stream=21, name="Stream #21(MemcpyH2D)")
    b.plane_stats["/device:GPU:0"] = {"devcap_num_sms": U64(108)}
    b.hlo_module("SyncTensorsGraph.9", 2, {"fusion.1": ("train/forward/dense/dot", "dot")})
    step = b.step(py, 12, 0, 1000)
    data = b.op(py, "data_loading", 1, 18)
    rec = b.op(py, "ThreadpoolListener::Record", 50, 0)
    comp = b.op(py, "XLAGraphExecutor::Compile", 60, 300, stats={"graph_hash": "ab12"})
    start = b.op(px, "ThreadpoolListener::StartRegion", 400, 0)
    fid = b.flow(rec, start, type=15)
    exe = b.op(px, "PjRtComputationClient::ExecuteComputation", 405, 100)
    k = b.kernel(s7, "fusion_1", 430, 50, stats={"hlo_op": "fusion.1",
                                                  "hlo_module": Ref("SyncTensorsGraph.9"),
                                                  "program_id": 2},
                 metadata_stats={"hlo_category": "convolution fusion"})
    ln = b.launch(px, "cuLaunchKernel", 410, 4, kernel=k)
    h2d = b.launch(py, "cuMemcpyHtoDAsync", 20, 5, kernel=b.memcpy(s21, "MemcpyH2D", 26, 9))
    t = b.build()
    assert t.format == "xspace" and t.n_events == 10
    assert [d.name for d in t.devices] == ["GPU 0"]
    assert set(t.track_group) == {"/host:CPU", "/device:GPU:0"}
    assert t.track_label[t.track[k.index]] == "GPU 0 · Stream #7(Kernel)"
    kinds = {e.name: K(t.kind[e.index]) for e in b.events}
    assert kinds == {"train_step": K.STEP, "ThreadpoolListener::Record": K.IDLE,
                     "XLAGraphExecutor::Compile": K.COMPILE,
                     "ThreadpoolListener::StartRegion": K.IDLE,
                     "PjRtComputationClient::ExecuteComputation": K.EXECUTE,
                     "fusion_1": K.KERNEL, "cuLaunchKernel": K.LAUNCH,
                     "cuMemcpyHtoDAsync": K.LAUNCH, "MemcpyH2D": K.MEMCPY,
                     "data_loading": K.DATA}
    assert t.parent[data.index] == step.index
    assert t.parent[comp.index] == step.index and t.parent[ln.index] == exe.index
    assert _links(t, LinkKind.FLOW) == {(rec.index, start.index)}
    assert _links(t, LinkKind.CORRELATION) == {(ln.index, k.index), (h2d.index, h2d.kernel.index)}
    assert t.stat("_p")[rec.index] == t.stat("_c")[start.index] == fid
    assert t.stat("_pt")[rec.index] == 15
    assert t.steps_hint() == [(12, step.index)]
    assert t.stat("_r")[step.index] == 1
    assert t.stat_str("graph_hash", comp.index) == "ab12"
    assert t.stat_str("hlo_module", k.index) == "SyncTensorsGraph.9"
    # op metadata kept on the event's metadata is the event's too (GUIDE §3, issue 14)
    assert t.stat_str("hlo_category", k.index) == "convolution fusion"
    # the Hlo Proto on /host:metadata is joined on (hlo_module, program_id, hlo_op)
    assert t.stat_str("op_name", k.index) == "train/forward/dense/dot"
    assert t.stat_str("op_type", k.index) == "dot"
    assert t.stat("correlation_id")[ln.index] == t.stat("correlation_id")[k.index] == ln.corr


def test_xspace_tpu_lines_and_metadata_stats():
    b = TraceBuilder("xspace")
    py = b.thread("python")
    ops = b.line("/device:TPU:0", "XLA Ops")
    steps = b.line("/device:TPU:0", "Steps")
    mods = b.line("/device:TPU:0", "XLA Modules")
    ex = b.op(py, "TpuExecutable::Execute", 0, 20)
    mod = b.op(mods, "SyncTensorsGraph.3(3)", 25, 200)
    b.flow(ex, mod, type=12)
    st = b.op(steps, "7", 25, 220, stats={"step_num": 7})
    f1 = b.op(ops, "%fusion.1 = bf16[8]{0} fusion(...)", 30, 90, display="fusion.1",
              metadata_stats=[("hlo_category", "s", "convolution fusion")],
              stats=[("hlo_op", "s", "fusion.1"), ("run_id", "u", 42)])
    ar = b.op(ops, "all-reduce.5", 130, 80, stats={"hlo_op": "all-reduce.5", "run_id": 42})
    t = b.build()
    assert [d.name for d in t.devices] == ["TPU 0"]
    assert [K(t.kind[e.index]) for e in (ex, mod, st, f1, ar)] == \
        [K.EXECUTE, K.DEVICE_OTHER, K.STEP, K.KERNEL, K.KERNEL]
    assert t.track_kind[t.track[f1.index]] == TrackKind.DEVICE
    assert t.steps_hint() == [(7, st.index)]
    assert _links(t, LinkKind.FLOW) == {(ex.index, mod.index)}
    assert t.stat("run_id")[[f1.index, ar.index]].tolist() == [42, 42]
    assert t.stat_str("hlo_op", f1.index) == "fusion.1"


def test_xspace_writer_by_hand():
    w = XSpaceWriter()
    w.plane("Task Environment", stats=[("profile_start_time", "u", 1_700_000_000_000_000_000)])
    host = w.plane("/host:CPU")
    line = host.line(1, "python", timestamp_ns=5, display_name="python")
    host.event(line, "outer", 0, 10 * US)
    host.event(line, "inner", 2 * US, 3 * US, stats={"step_num": 1, "_r": 1})
    t = load_xspace(w, hostnames=["h0"])
    assert t.metadata["hostnames"] == ["h0"]
    assert t.metadata["profile_start_ps"] == 1_700_000_000_000_000_000_000
    inner = int(np.flatnonzero(t.name == t.strings.index("inner"))[0])
    assert t.event_name(t.parent[inner]) == "outer"
    assert t.dur[inner] == 3 * US and K(t.kind[inner]) == K.STEP
    assert load_xspace(w.to_bytes()).n_events == 2


def test_wrong_flavour_keywords_are_refused():
    with pytest.raises(ValueError, match="args, not stats"):
        TraceBuilder().op(TraceBuilder().thread("m"), "x", 0, 1, stats={"a": 1})
    xb = TraceBuilder("xspace")
    with pytest.raises(ValueError, match="stats, not args"):
        xb.op(xb.thread("m"), "x", 0, 1, args={"a": 1})
    with pytest.raises(ValueError, match="no planes"):
        TraceBuilder().line("/device:TPU:0", "XLA Ops")
    with pytest.raises(ValueError, match="exists already"):
        b = TraceBuilder()
        b.thread("m")
        b.thread("m")


def test_diagnose_a_built_trace():
    """A rule runs on ten events: the device idles from the end of the D2H copy until
    the host, back from cudaStreamSynchronize, launches the next kernel."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    step = b.step(main, 1, 0, 400)
    k1 = b.launch(main, "cudaLaunchKernel", 5, 5, kernel=b.kernel(s7, "k1", 12, 60))
    with b.op(main, "aten::_local_scalar_dense", 11, 68):
        d2h = b.launch(main, "cudaMemcpyAsync", 12, 4,
                       kernel=b.memcpy(s7, "Memcpy DtoH (Device -> Pageable)", 73, 2))
        sync = b.op(main, "cudaStreamSynchronize", 17, 60, cat="cuda_runtime")
    b.op(main, "aten::nonzero", 80, 100)
    k2 = b.launch(main, "cudaLaunchKernel", 190, 5, kernel=b.kernel(s7, "k2", 200, 50))
    t = b.build()
    assert t.n_events == 10
    gaps = tb_perfdiag.diagnose(t).gaps
    # the step's idle before its first kernel and after its last are gaps too (issue 45)
    assert sorted(zip(gaps.start.tolist(), gaps.end.tolist())) == [
        (0, 12 * US), (75 * US, 200 * US), (250 * US, 400 * US)]
    (i,) = [i for i in range(len(gaps)) if gaps.start[i] == 75 * US]
    assert gaps.next_op[i] == k2.kernel.index and gaps.waited_for[i] == k2.index
    assert gaps.prev_op[i] == d2h.kernel.index
    assert t.parent[sync.index] == t.parent[d2h.index] != step.index
    assert k1.kernel.index is not None
