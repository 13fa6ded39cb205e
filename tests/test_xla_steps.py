"""XLA steps, attribution, compilations and transfers on XSpaces built in memory (GUIDE §4
"Window", "Launching step"): one test per rule, each on a timeline a real capture shows.

Times are µs; the builder's XSpace keeps picoseconds."""
from __future__ import annotations

import numpy as np
import pytest

import tb_perfdiag
from tb_perfdiag.analysis.attribution.links import VIA_REGION, origins, root_origin, run_dispatch
from tb_perfdiag.analysis.steps.windows import find_steps, launched_busy, launching_steps
from tb_perfdiag.testing import TraceBuilder

US = 1_000_000      # ps
MS = 1000.0         # µs


def _steps_json(trace):
    return tb_perfdiag.diagnose(trace).to_json()


def _launched(j, step_id, dev="0"):
    s = next(s for s in j["steps"] if s["id"] == step_id)
    return s["devices"][dev]["busy_ns"], s["devices"][dev]["launched_ns"]


# ---- launching step: flows into worker-thread regions -----------------------------------

def _torch_xla_like():
    """Two torch_xla steps.  Step 0 compiles, then StepMarker's Record hands the graph to
    tf_pytorchxla, whose ExecuteComputation hands it to the PjRt client thread; that
    thread's Record opens a region on an Eigen worker.  The flows end at StartRegion
    markers, *siblings* of the executors that run the ops, and the ops run while the host
    is already in step 1."""
    b = TraceBuilder("xspace")
    py, px = b.thread("python"), b.thread("tf_pytorchxla")
    pj, eig = b.thread("tf_XLAPjRtCpuClient"), b.thread("tf_XLAEigen")
    b.step(py, 0, 0, 100)
    with b.op(py, "StepMarker", 10, 88):
        b.op(py, "XLAGraphExecutor::Compile", 11, 60)
        rec0 = b.op(py, "ThreadpoolListener::Record", 90, 0)
    b.step(py, 1, 100, 100)
    with b.op(py, "StepMarker", 180, 15):
        rec1 = b.op(py, "ThreadpoolListener::Record", 190, 0)
    # step 0's graph: tf_pytorchxla → PjRt client → Eigen worker, all late
    s0 = b.op(px, "ThreadpoolListener::StartRegion", 95, 0)
    b.flow(rec0, s0, type=15)
    with b.op(px, "PjRtComputationClient::ExecuteComputation", 96, 4):
        r_px = b.op(px, "ThreadpoolListener::Record", 97, 0)
    b.op(px, "ThreadpoolListener::StopRegion", 101, 0)
    s1 = b.op(pj, "ThreadpoolListener::StartRegion", 110, 0)
    b.flow(r_px, s1, type=15)
    with b.op(pj, "ThunkExecutor::Execute", 111, 60):
        op_a = b.op(pj, "fusion.1", 112, 20, stats={"hlo_op": "fusion.1",
                                                     "hlo_module": "SyncTensorsGraph.7"})
        r_pj = b.op(pj, "ThreadpoolListener::Record", 133, 0)
    b.op(pj, "ThreadpoolListener::StopRegion", 172, 0)
    s2 = b.op(eig, "ThreadpoolListener::StartRegion", 135, 0)
    b.flow(r_pj, s2, type=15)
    with b.op(eig, "ThunkExecutor::Execute", 136, 30):
        op_b = b.op(eig, "dot.2", 137, 25, stats={"hlo_op": "dot.2",
                                                  "hlo_module": "SyncTensorsGraph.7"})
    # an op on the worker outside any executor, still inside the region
    op_c = b.op(eig, "copy.3", 167, 3, stats={"hlo_op": "copy.3",
                                               "hlo_module": "SyncTensorsGraph.7"})
    b.op(eig, "ThreadpoolListener::StopRegion", 171, 0)
    # step 1's graph runs right away on the PjRt client thread
    s3 = b.op(pj, "ThreadpoolListener::StartRegion", 191, 0)
    b.flow(rec1, s3, type=15)
    with b.op(pj, "ThunkExecutor::Execute", 192, 5):
        op_d = b.op(pj, "fusion.1", 193, 3, stats={"hlo_op": "fusion.1",
                                                    "hlo_module": "SyncTensorsGraph.7"})
    return b, (rec0, rec1), (op_a, op_b, op_c, op_d)


def test_start_region_flow_reaches_the_dispatching_record():
    b, (rec0, rec1), ops = _torch_xla_like()
    t = b.build()
    origin, via = origins(t)
    root = root_origin(t, origin)
    idx = [o.index for o in ops]
    assert (via[idx] == VIA_REGION).all()
    assert root[idx].tolist() == [rec0.index] * 3 + [rec1.index]


def test_root_origin_refuses_an_origin_below_none():
    """−1 is the one "none": another negative origin is refused, not read as a slot past
    the events (an assert would be gone under python -O)."""
    import pytest
    b, _, _ = _torch_xla_like()
    t = b.build()
    origin, _ = origins(t)
    bad = origin.copy()
    bad[int(np.flatnonzero(bad >= 0)[0])] = -2
    with pytest.raises(ValueError, match="below -1"):
        root_origin(t, bad)


def test_work_is_charged_to_the_step_that_launched_it():
    b, _, (op_a, op_b, op_c, op_d) = _torch_xla_like()
    t = b.build()
    steps = find_steps(t)
    st = launching_steps(t, steps, root_origin(t, origins(t)[0]))
    assert st[[op_a.index, op_b.index, op_c.index, op_d.index]].tolist() == [0, 0, 0, 1]
    j = _steps_json(t)
    # step 0 launched fusion.1, dot.2 and copy.3 (112–132, 137–162, 167–170 µs) though
    # they ran during step 1's host window
    assert _launched(j, 0) == (48_000, 48_000)
    assert _launched(j, 1) == (3_000, 3_000)


def test_step0_idle_before_the_first_op_has_a_cause():
    b, _, _ = _torch_xla_like()
    j = _steps_json(b.build())
    s0 = j["steps"][0]["devices"]["0"]
    # 112 µs before fusion.1: 60 µs compiling; the rest of the wait is explained too
    assert s0["idle_by_cause_ns"]["compilation"] == 60_000
    assert sum(s0["idle_by_cause_ns"].values()) >= 112_000


# ---- launching step: JAX run order -----------------------------------------------------

def test_queued_jax_runs_pair_with_dispatches_by_order():
    """JAX dispatches asynchronously: each step's PjitFunction(train_step) returns at
    once, its run waits for the previous one, so run k executes during step k+1 (and run
    2 after the last step).  There are no flows: the k-th run (ops by run_id, in start
    order) is the k-th call."""
    b = TraceBuilder("xspace")
    py, pj = b.thread("python"), b.thread("tf_XLAPjRtCpuClient")
    calls = []
    for k in range(3):
        b.step(py, k, k * 100, 100, name="train")
        with b.op(py, "PjitFunction(train_step)", k * 100 + 50, 5) as c:
            b.op(py, "PjitFunction(train_step)", k * 100 + 50, 5)
        calls.append(c)
    ops = []
    for k in range(3):
        t0 = 60 + k * 100 + 50          # 50 µs behind its dispatch: in the next step
        with b.op(pj, "ThunkExecutor::Execute", t0, 40 + k):
            ops.append([b.op(pj, f"fusion.{i}", t0 + 1 + 10 * i, 8 + (k == 0) * i,
                             stats={"hlo_op": f"fusion.{i}", "hlo_module": "jit_train_step",
                                    "run_id": 1000 - 7 * k, "program_id": 3})
                        for i in range(3)])
    t = b.build()
    ev, who = run_dispatch(t, find_steps(t).thread)
    got = dict(zip(ev.tolist(), who.tolist()))
    for k in range(3):
        assert {got[o.index] for o in ops[k]} == {calls[k].index}
    j = _steps_json(t)
    # step 0 launched 8 + 9 + 10 µs although nothing ran in its host window
    assert [_launched(j, k)[1] for k in range(3)] == [27_000, 24_000, 24_000]


# ---- steps from repeated program runs (TPU, no Steps line, no step annotations) ----------

def test_hundred_runs_after_setup_modules_are_hundred_steps():
    b = TraceBuilder("xspace")
    main = b.thread("main")
    mods, xops = b.line("/device:TPU:0", "XLA Modules"), b.line("/device:TPU:0", "XLA Ops")
    t = 0.0
    setup = [("jit_convert_element_type(11)", 5), ("jit_broadcast_in_dim(12)", 40)] + \
        [("jit__psum(13)", 300)] * 3
    for name, dur in setup:
        b.op(mods, name, t, dur)
        b.op(xops, "%all-reduce.1 = f32[8]{0} all-reduce(...)", t + 1, dur - 2,
             stats={"hlo_op": "all-reduce.1"})
        t += dur + 1000
    b.op(main, "backend_compile", t - 900, 500)
    runs = []
    for k in range(100):
        runs.append(b.op(mods, "jit_f(99)", t, 700))
        b.op(xops, "%fusion.2 = f32[8]{0} fusion(...)", t + 1, 650, stats={"hlo_op": "fusion.2"})
        t += 700 + (30 if k % 10 else 200)
    trace = b.build()
    j = _steps_json(trace)
    assert j["step_source"] == "modules"
    assert [s["id"] for s in j["steps"]] == list(range(100))
    # run k's window lasts until run k+1 starts; its device time is its own run's
    s3 = j["steps"][3]["devices"]["0"]
    assert (s3["start_ns"], s3["end_ns"]) == (trace.ts[runs[3].index] // 1000,
                                               trace.ts[runs[4].index] // 1000)
    assert s3["busy_ns"] == s3["launched_ns"] == 650_000
    # the compile before the first run belongs to no step, and is no recompilation
    assert [(c["step"], c["recompile"]) for c in j["compilations"]] == [(None, False)]


def test_one_program_run_once_is_no_step_table():
    b = TraceBuilder("xspace")
    mods, xops = b.line("/device:TPU:0", "XLA Modules"), b.line("/device:TPU:0", "XLA Ops")
    b.op(mods, "jit_a(1)", 0, 100)
    b.op(xops, "fusion.1", 1, 90, stats={"hlo_op": "fusion.1"})
    b.op(mods, "jit_b(2)", 200, 100)
    b.op(xops, "fusion.2", 201, 90, stats={"hlo_op": "fusion.2"})
    assert find_steps(b.build()).source == "whole_trace"


# ---- compilations ----------------------------------------------------------------------

def test_new_function_is_a_first_compile_and_the_same_one_again_a_recompile():
    b = TraceBuilder("xspace")
    py, pool = b.thread("python"), b.thread("tf_PjRtCompilerThreadPool")
    cpu = b.thread("tf_XLAPjRtCpuClient")

    def step(k, fn, compile_us, run_id):
        t0 = k * 10 * MS
        b.step(py, k, t0, 10 * MS, name="train")
        with b.op(py, f"PjitFunction({fn})", t0 + 100, 8 * MS):
            if compile_us:
                with b.op(py, "$pxla.py:1209 compile", t0 + 200, compile_us + 20):
                    with b.op(py, "backend_compile_and_load", t0 + 210, compile_us) as c:
                        b.op(py, "RunHloPasses", t0 + 220, 0)     # a zero-length pass
                        rec = b.op(py, "ThreadpoolListener::Record", t0 + 230, 0)
                start = b.op(pool, "ThreadpoolListener::StartRegion", t0 + 240, 0)
                b.flow(rec, start, type=15)
                b.op(pool, "PjRtCpuClient::Compile", t0 + 250, compile_us - 100)
        with b.op(cpu, "ThunkExecutor::Execute", t0 + 9 * MS, 50):
            b.op(cpu, "fusion.1", t0 + 9 * MS + 1, 40,
                 stats={"hlo_op": "fusion.1", "hlo_module": f"jit_{fn}", "run_id": run_id})
        return c if compile_us else None

    c0 = step(0, "train_step", 3000, 1)
    step(1, "train_step", 0, 2)
    c2 = step(2, "eval_step", 2000, 3)      # a new function: a first compile
    c3 = step(3, "train_step", 2500, 4)     # new shapes for train_step: a recompile
    b.op(py, "$<frozen importlib._bootstrap_external>:727 _compile_bytecode", 45 * MS, 500)
    t = b.build()
    j = _steps_json(t)
    got = [(c["step"], c["function"], c["recompile"], c["duration_ns"]) for c in j["compilations"]]
    assert got == [(0, "jit_train_step", False, 3_000_000), (2, "jit_eval_step", False, 2_000_000),
                   (3, "jit_train_step", True, 2_500_000)]
    # the outermost compile itself: not the Python frame around it, not the pool's piece
    assert [(c["event"], c["start_ns"]) for c in j["compilations"]] == \
        [("backend_compile_and_load", t.ts[c.index] // 1000) for c in (c0, c2, c3)]
    assert [s["compile"]["count"] for s in j["steps"]] == [1, 0, 1, 1]


def test_a_capture_after_warmup_knows_a_recompile_by_earlier_runs():
    """The capture starts after the first compile: the function ran before the compile
    in step 1, so that compile is a recompilation."""
    b = TraceBuilder("xspace")
    py, cpu = b.thread("python"), b.thread("tf_XLAPjRtCpuClient")
    for k in range(2):
        t0 = k * 10 * MS
        b.step(py, k, t0, 10 * MS)
        if k:
            b.op(py, "XLAGraphExecutor::Compile", t0 + 100, 5 * MS)
        with b.op(py, "StepMarker", t0 + 6 * MS, 10):
            rec = b.op(py, "ThreadpoolListener::Record", t0 + 6 * MS + 1, 0)
        start = b.op(cpu, "ThreadpoolListener::StartRegion", t0 + 6 * MS + 5, 0)
        b.flow(rec, start, type=15)
        with b.op(cpu, "ThunkExecutor::Execute", t0 + 6 * MS + 10, 50):
            b.op(cpu, "fusion.1", t0 + 6 * MS + 11, 40,
                 stats={"hlo_op": "fusion.1", "hlo_module": "SyncTensorsGraph.9"})
    j = _steps_json(b.build())
    assert [(c["step"], c["function"], c["recompile"]) for c in j["compilations"]] == \
        [(1, "SyncTensorsGraph.9", True)]


# ---- transfers -------------------------------------------------------------------------

def test_a_device_to_host_read_seen_on_three_threads_counts_once():
    """The TPU runtime shows one read on the user's thread (np.asarray › ToLiteral), a
    worker (TransferFromDevice) and an event thread (…=>IssueEvent=>Done).  The user's
    thread is the one the programs were launched from."""
    b = TraceBuilder("xspace")
    main, tasks = b.thread("main"), b.thread("pjrt-tpu-tasks")
    fd = b.thread("EventFDAsyncWorker")
    mods, ops = b.line("/device:TPU:0", "XLA Modules"), b.line("/device:TPU:0", "XLA Ops")
    ex = b.op(main, "TfrtTpuLoadedExecutable::Execute", 0, 1)
    b.flow(ex, b.op(mods, "jit_f(1)", 0, 50), type=12)
    b.op(ops, "fusion.1", 0, 50, stats={"hlo_op": "fusion.1"})
    with b.op(main, "np.asarray(jax.Array)", 60, 400):
        b.op(main, "TfrtTpuBuffer::ToLiteral", 61, 398)
    b.op(tasks, "tpu::System::TransferFromDevice", 70, 300)
    b.op(fd, "tpu::System::TransferFromDevice=>IssueEvent=>Done", 380, 10)
    # a prefetch starts a copy but blocks nobody
    with b.op(main, "ArrayImpl.copy_to_host_async", 500, 30):
        b.op(main, "TfrtTpuBuffer::ToLiteral", 501, 28)
    with b.op(main, "np.asarray(jax.Array)", 540, 3):          # already on the host
        pass
    b.op(main, "TfrtTpuClient::BufferFromHostBuffer::TfrtTpuBuffer", 600, 20)
    b.op(ops, "fusion.2", 700, 50, stats={"hlo_op": "fusion.2"})
    j = _steps_json(b.build())
    got = [(x["direction"], x["start_ns"], x["duration_ns"]) for x in j["transfers"]]
    assert got == [("d2h", 60_000, 400_000), ("d2h", 540_000, 3_000), ("h2d", 600_000, 20_000)]


# ---- the cause of a gap when the runtime enqueues the program ----------------------------

def test_launch_to_enqueue_is_runtime_time_staging_inputs_then_device_wait():
    """TPU: the user's TfrtTpuLoadedExecutable::Execute returns only once the runtime has
    prepared the program (loading it, staging inputs on its worker threads) and a queue
    thread enqueued it.  That time is not launch overhead: the part a worker spends in
    H2D Dispatch is h2d_transfer, the rest device-side."""
    b = TraceBuilder("xspace")
    main, tasks, queue = b.thread("main"), b.thread("pjrt-tpu-tasks"), b.thread("tfrt-queue")
    mods, xops = b.line("/device:TPU:0", "XLA Modules"), b.line("/device:TPU:0", "XLA Ops")
    b.op(mods, "jit_g(1)", 0, 100)
    b.op(xops, "fusion.0", 1, 98, stats={"hlo_op": "fusion.0"})
    with b.op(main, "PjitFunction(f)", 300, 5000):
        b.op(main, "backend_compile", 310, 1000)
        ex = b.op(main, "TfrtTpuLoadedExecutable::Execute", 2000, 3200)
    b.op(tasks, "H2D Dispatch", 2100, 800)
    enq = b.op(queue, "DoEnqueueProgram", 5190, 5)
    b.flow(ex, enq, type=5)
    mod = b.op(mods, "jit_f(2)", 5200, 100)
    b.flow(enq, mod, type=12)
    b.op(xops, "fusion.1", 5201, 90, stats={"hlo_op": "fusion.1"})
    t = b.build()
    r = tb_perfdiag.diagnose(t)
    g = next(g for g in r.to_json()["gaps"] if g["start_ns"] == 99_000)
    assert g["cause"] == "device_wait"
    assert g["shares_ns"]["h2d_transfer"] == 800_000
    assert g["shares_ns"]["device_wait"] == 5201_000 - 2000_000 - 800_000
    assert g["shares_ns"]["compilation"] == 1_000_000
    assert "launch_overhead" not in g["shares_ns"]


# ---- helpers ---------------------------------------------------------------------------

def test_launched_busy_is_a_union_per_step():
    s = np.array([0, 5, 20, 3, 4, 100], np.int64)
    e = np.array([10, 12, 30, 8, 9, 101], np.int64)
    k = np.array([1, 1, 1, 0, 0, -1])
    # step 0: [3, 9) = 6; step 1: [0, 12) + [20, 30) = 22; the op of no step is dropped
    assert launched_busy(s, e, k, 3).tolist() == [6, 22, 0]


def test_a_kernel_launch_on_an_executor_thread_stays_the_issuing_call():
    """JAX on GPU: the python Record only queues the program; the executor thread (which
    runs thread-pool regions) launches each kernel.  A gap the executor spent working
    before its launch is host time, not a device-side wait after the Record — though the
    Record still decides the step."""
    b = TraceBuilder("xspace")
    py, ex = b.thread("python"), b.thread("tf_XLAPjRtGpuClient")
    s7 = b.stream(gpu=0, stream=7)
    b.step(py, 0, 0, 400)
    rec = b.op(py, "ThreadpoolListener::Record", 10, 0)
    start = b.op(ex, "ThreadpoolListener::StartRegion", 12, 0)
    b.flow(rec, start, type=15)
    with b.op(ex, "ThunkExecutor::Execute", 13, 300):
        k1 = b.launch(ex, "cuLaunchKernel", 14, 2, kernel=b.kernel(s7, "fusion_1", 18, 2))
        b.op(ex, "BuildCommandBuffer", 20, 250)
        k2 = b.launch(ex, "cuLaunchKernel", 290, 4, kernel=b.kernel(s7, "fusion_2", 300, 20))
    t = b.build()
    j = _steps_json(t)
    g = next(g for g in j["gaps"] if g["start_ns"] == 20_000)
    assert g["waited_for"]["name"] == "cuLaunchKernel"
    assert g["cause"] == "host_compute" and g["shares_ns"].get("device_wait", 0) < 10_000
    root = root_origin(t, origins(t)[0])
    assert root[k2.kernel.index] == rec.index and root[k1.kernel.index] == rec.index


# ---- totals are per device -------------------------------------------------------------

def test_idle_totals_are_per_device_not_summed_over_devices():
    """Four TPUs idle together for the same 1 ms: the trace lost 1 ms per device, not 4."""
    from tb_perfdiag.render.pod import summary_row
    b = TraceBuilder("xspace")
    main = b.thread("main")
    b.op(main, "data_loading", 120, 950)
    for d in range(4):
        mods = b.line(f"/device:TPU:{d}", "XLA Modules")
        xops = b.line(f"/device:TPU:{d}", "XLA Ops")
        for k in range(2):
            b.op(mods, "jit_f(1)", k * 1100, 100)
            b.op(xops, "fusion.1", k * 1100, 100, stats={"hlo_op": "fusion.1"})
    r = tb_perfdiag.diagnose(b.build())
    j = r.to_json()
    assert len(j["devices"]) == 4 and len(j["gaps"]) == 4
    assert sum(j["hta"].values()) == 1_000_000
    row = summary_row("h", "", r.diagnosis)
    assert sum(row["step_idle_ns"].values()) == 1_000_000


def test_an_event_with_two_incoming_flows_takes_the_latest_starting_source():
    from tb_perfdiag.analysis.attribution.links import incoming_host_link, incoming_host_link_any
    from tb_perfdiag.testing import TraceBuilder
    b = TraceBuilder("xspace")
    py, other, ex = b.thread("python"), b.thread("other"), b.thread("executor")
    late = b.op(py, "Record", 5, 1)
    early = b.op(other, "Record", 0, 1)
    both = b.op(ex, "StartRegion", 10, 0)
    one = b.op(ex, "StartRegion", 20, 0)
    b.flow(late, both)                    # written first, starts later: it wins
    b.flow(early, both)
    b.flow(early, one)
    t = b.build()
    for linked in (incoming_host_link(t), incoming_host_link_any(t)):
        assert int(linked[both.index]) == late.index
        assert int(linked[one.index]) == early.index
        assert int(linked[late.index]) == -1
    # one flow per event: the same answer without the sort
    b = TraceBuilder("xspace")
    py, ex = b.thread("python"), b.thread("executor")
    src, dst = b.op(py, "Record", 5, 1), b.op(ex, "StartRegion", 10, 0)
    b.flow(src, dst)
    t = b.build()
    assert int(incoming_host_link(t)[dst.index]) == src.index


def test_launched_busy_equals_each_steps_own_union_at_any_scale():
    """Steps' ops overlap in time, come in any order, and clocks may be near the end of
    int64 (picoseconds since the epoch): each step's total is still the union of its own
    ops, with no interval counted in another step's."""
    from tb_perfdiag.analysis.intervals import union
    rng = np.random.default_rng(7)
    for scale, base, m in ((1, 0, 5000), (10**6, 0, 5000), (10**14, 10**18, 5000),
                           (1, 2**62, 5000), (1, 0, 700_000)):   # the last: in blocks
        n = 40
        s = base + rng.integers(0, 1000, m).astype(np.int64) * scale
        e = s + rng.integers(0, 80, m).astype(np.int64) * scale
        k = rng.integers(-1, n, m)
        want = [int((lambda u: (u[1] - u[0]).sum())(union(s[k == j], e[k == j])))
                for j in range(n)]
        assert launched_busy(s, e, k, n).tolist() == want, scale
        # the starts of every event with the ops' indices: gathered a block at a time
        at = rng.permutation(3 * m)[:m]
        every = np.full(3 * m, -1, np.int64)          # not the ops: never read
        every[at] = s
        assert launched_busy(every, e, k, n, at).tolist() == want, scale
        # and their ends from every event's start and duration, with no column of ends
        length = np.full(3 * m, -1, np.int64)
        length[at] = e - s
        assert launched_busy(every, None, k, n, at, length).tolist() == want, scale
        # and their steps from every event's, read at the ops (int32 indices, as the
        # model's), with no column of the ops' steps
        ev_step = np.full(3 * m, n + 5, np.int32)     # not the ops': out of range if read
        ev_step[at] = k
        got = launched_busy(every, None, None, n, at.astype(np.int32), length,
                            event_step=ev_step)
        assert got.tolist() == want, scale


def test_order_by_step_in_c_is_numpys_stable_sort(monkeypatch):
    """The ops by step (none first), stable, and where each step's ops end: the C
    counting sort equals numpy's stable argsort and counts, for int8 to int64 steps,
    steps with no ops, all ops of no step, and no ops; a step out of range is refused."""
    from tb_perfdiag.analysis.steps.windows import order_by_step
    from tb_perfdiag.trace.extension import native_fn
    if native_fn("order_by_step") is None:
        import pytest
        pytest.skip("the native extension is not built (setup.py build_ext)")
    rng = np.random.default_rng(3)
    cases = [(rng.integers(-1, n, m), n) for n, m in ((1, 50), (7, 1000), (300, 20_000))]
    cases += [(np.full(30, -1), 4), (np.zeros(0, np.int64), 5), (np.array([2, 0, 2, 1]), 0 + 3)]
    for step, n in cases:
        for dt in (np.int8, np.int16, np.int32, np.int64):
            if np.iinfo(dt).max < n + 9:      # the analysis narrows steps only so far
                continue
            st = step.astype(dt)
            o, b = order_by_step(st, n)
            assert o.dtype == np.int32 and b.shape == (n + 1,)
            monkeypatch.setenv("TB_PERFDIAG_NO_NATIVE", "1")
            wo, wb = order_by_step(st, n)
            monkeypatch.delenv("TB_PERFDIAG_NO_NATIVE")
            assert o.tolist() == wo.tolist() and b.tolist() == wb.tolist()
            assert o.tolist() == np.argsort(st, kind="stable").tolist()
            # the same steps read through event indices into a longer column of every
            # event's step (int32 and int64 indices; the other events' out of range)
            at = np.sort(rng.choice(3 * st.shape[0] + 1, st.shape[0], replace=False))
            every = np.full(3 * st.shape[0] + 1, n + 9, dt)
            every[at] = st
            for at_dt in (np.int32, np.int64):
                io, ib = order_by_step(every, n, at.astype(at_dt))
                assert io.tolist() == o.tolist() and ib.tolist() == b.tolist()
                monkeypatch.setenv("TB_PERFDIAG_NO_NATIVE", "1")
                ro, rb = order_by_step(every, n, at.astype(at_dt))
                monkeypatch.delenv("TB_PERFDIAG_NO_NATIVE")
                assert ro.tolist() == o.tolist() and rb.tolist() == b.tolist()
    import pytest
    for bad in ([0, 3], [-2, 0]):
        with pytest.raises(ValueError):
            order_by_step(np.array(bad, np.int32), 3)
    for at in ([0, 2], [-1], [5]):                # an event past the steps' column
        with pytest.raises(ValueError):
            order_by_step(np.array([0, 1], np.int32), 3, np.array(at, np.int32))


def test_steps_by_dispatch_in_c_are_numpys(monkeypatch):
    """Each event's step by the start of the event that dispatched it (or its own, where
    it has none or is told to use its own), in one C pass galloping from the last answer,
    equals numpy's gathers and search: events in rising runs and out of order, windows
    with equal starts, times on a window's start, before the first and after the last."""
    import types
    from tb_perfdiag.analysis.steps import windows as S
    from tb_perfdiag.trace.build import native_fn
    if native_fn("steps_of_events") is None:
        pytest.skip("the native extension is not built (setup.py build_ext)")
    rng = np.random.default_rng(3)
    n = 20000
    ts = np.concatenate([np.sort(rng.integers(-10**6, 10**9, n // 4)) for _ in range(4)])
    moved = rng.choice(n, n // 20, replace=False)            # some out of order
    ts[moved] = rng.integers(-10**6, 2 * 10**9, moved.shape[0])
    # the answer is as narrow as the steps allow: int8 up to 126 windows, int16 past them
    for n_win, narrow in ((126, np.int8), (127, np.int16), (300, np.int16)):
        host_start = np.sort(rng.integers(0, 10**9, n_win))
        host_start[10:14] = host_start[10]                       # equal starts
        ts_w = ts.copy()
        at = rng.choice(n, n // 10, replace=False)               # times on a window's start
        ts_w[at] = rng.choice(host_start, at.shape[0])
        steps = types.SimpleNamespace(host_start=host_start)
        trace = types.SimpleNamespace(ts=ts_w)
        for dtype in (np.int32, np.int64):
            who = np.where(rng.random(n) < 0.3, rng.integers(0, n, n), -1).astype(dtype)
            for own in (None, rng.random(n) < 0.2):
                got = S.steps_by_dispatch(trace, steps, who, own)
                use = who >= 0 if own is None else (who >= 0) & ~own
                want = np.searchsorted(host_start, np.where(use, ts_w[np.maximum(who, 0)],
                                                            ts_w), side="right") - 1
                np.testing.assert_array_equal(got, want)
                assert got.dtype == narrow and (got == -1).any() and (got == n_win - 1).any()
        monkeypatch.setenv("TB_PERFDIAG_NO_NATIVE", "1")
        plain = S.steps_by_dispatch(trace, steps, who, own)
        np.testing.assert_array_equal(plain, got)
        assert plain.dtype == narrow
        monkeypatch.delenv("TB_PERFDIAG_NO_NATIVE")
    # an answer's width too narrow for the windows is refused, not wrapped
    fn = native_fn("steps_of_events")
    hs = np.arange(200, dtype=np.int64)
    with pytest.raises(ValueError):
        fn(np.zeros(3, np.int64), np.full(3, -1, np.int32), 4, b"", hs, 1)
    assert np.frombuffer(fn(np.full(3, 150, np.int64), np.full(3, -1, np.int32), 4, b"", hs,
                            2), np.int16).tolist() == [150] * 3


def _testdata_traces() -> list:
    """Every XSpace and Kineto trace under testdata (captures and synthetic)."""
    import glob
    import os
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return sorted(glob.glob(os.path.join(here, "testdata", "**", "*.xplane.pb"), recursive=True)
                  + glob.glob(os.path.join(here, "testdata", "**", "*.pt.trace.json*"),
                              recursive=True))


def test_columns_read_a_block_at_a_time_are_the_whole_columns(monkeypatch):
    """What the analysis reads a block at a time instead of over a column of all events:
    the trace's last end, the host events meeting a condition, each device's step events
    and the first op of least start are the whole-column answers, on every trace of
    testdata, blocks of 7 events."""
    from tb_perfdiag.analysis.gaps import per_device as Dg
    from tb_perfdiag.trace import model as M
    from tb_perfdiag.trace.model import EventKind, TrackKind
    monkeypatch.setattr(M, "_BLOCK", 7)
    files = _testdata_traces()
    steps_seen = 0
    for path in files:
        t = tb_perfdiag.load(path)
        if not t.n_events:
            continue
        assert t.last_end() == int(np.max(t.ts + t.dur)), path
        host = t.track_kind[t.track] == TrackKind.HOST
        for want_mask, pred in (
                (t.dur > 0, lambda lo, hi: t.dur[lo:hi] > 0),
                (t.kind == EventKind.LAUNCH, lambda lo, hi: t.kind[lo:hi] == EventKind.LAUNCH)):
            np.testing.assert_array_equal(t.host_events_where(pred),
                                          np.flatnonzero(want_mask & host))
        dev = t.track_device[t.track]
        for d in range(len(t.devices)):
            want = np.flatnonzero((t.kind == EventKind.STEP) & (dev == d))
            np.testing.assert_array_equal(Dg._step_events(t, d), want)
            steps_seen += int(want.size > 0)
            ops = t.activity_of(d)
            if ops.size:
                for at in (ops, ops[::-1]):      # ties: the first in ``at``, as argmin
                    assert Dg._first_min(t.ts, at, 7) == int(np.argmin(t.ts[at]))
    v = np.random.default_rng(5).integers(0, 4, 5000)
    for at in (np.arange(5000), np.arange(5000)[::-1]):
        assert Dg._first_min(v, at, 7) == int(np.argmin(v[at]))
    assert steps_seen >= 1
    assert len(files) >= 10


def test_a_devices_activity_read_from_its_tracks_is_the_mask_over_all_events():
    """``Trace.activity_of(d)``: the events of device d's activity, read track by track,
    are the mask over all events, on every capture and synthetic trace of testdata whose
    device tracks hold any, with and without host tracks of the device."""
    from tb_perfdiag.trace.model import TrackKind
    files = _testdata_traces()
    seen = 0
    for path in files:
        t = tb_perfdiag.load(path)
        dev = t.track_device[t.track]
        host = t.track_kind[t.track] == TrackKind.HOST
        act = t.is_device_activity()
        for d in range(len(t.devices)):
            got = t.activity_of(d)
            np.testing.assert_array_equal(got, np.flatnonzero((dev == d) & act))
            np.testing.assert_array_equal(t.activity_of(d, host_tracks=False),
                                          np.flatnonzero((dev == d) & act & ~host))
            seen += int(got.size > 0)
    assert seen >= 5


def test_device_windows_read_the_ops_steps_in_place():
    """Host-annotated steps' device windows from every event's step read at the ops
    (``event_step``) are the windows from a column of the ops' steps: ops of no step,
    steps with no ops, ends past the next step's start."""
    from types import SimpleNamespace

    from tb_perfdiag.analysis.steps import windows as S
    rng = np.random.default_rng(11)
    n_steps, m = 6, 400
    steps = S.StepTable(np.arange(n_steps), np.arange(n_steps, dtype=np.int64) * 1000,
                        np.arange(n_steps, dtype=np.int64) * 1000 + 900, "host_annotations",
                        0, np.arange(n_steps))
    ts = rng.integers(0, 7000, 3 * m).astype(np.int64)
    dur = rng.integers(0, 1500, 3 * m).astype(np.int64)
    trace = SimpleNamespace(ts=ts, dur=dur, end_of=lambda i: ts[i] + dur[i])
    ops = np.sort(rng.choice(3 * m, m, replace=False)).astype(np.int32)
    ev_step = np.full(3 * m, n_steps + 7, np.int32)     # not the ops': out of range
    ev_step[ops] = np.where(rng.random(m) < 0.1, -1, rng.choice([0, 1, 2, 4, 5], m))
    want = S.device_windows(steps, ev_step[ops], None, 9000, None, trace, ops)
    got = S.device_windows(steps, None, None, 9000, None, trace, ops, event_step=ev_step)
    for w, g in zip(want, got):
        assert w.tolist() == g.tolist()
    assert want[0].tolist() != steps.host_start.tolist()    # the ops' ends moved them


def test_first_op_of_each_dispatch_read_a_block_at_a_time(monkeypatch):
    """Each distinct user-thread origin of device work and its first device op (what
    the compilation table pairs with programs), found a block of events at a time
    (blocks of 7 and of 1 M), are one pass's over all device ops, on every trace of
    testdata with device work."""
    from tb_perfdiag.analysis.steps import usercalls as U
    from tb_perfdiag.analysis.attribution.links import host_side, origins, root_origin
    from tb_perfdiag.trace.build import unique_first
    checked = 0
    for path in _testdata_traces():
        t = tb_perfdiag.load(path)
        if not t.n_events:
            continue
        root = root_origin(t, origins(t)[0])
        dev = np.flatnonzero(t.is_device_activity() & ~host_side(t))
        dev = dev[root[dev] >= 0]
        r = root[dev].astype(np.int64)
        first = unique_first(r)[1]
        for block in (7, 1 << 20):
            monkeypatch.setattr(U, "_BLOCK", block)
            ops, launches = U.first_op_of_origins(t, root)
            assert ops.tolist() == dev[first].tolist(), path
            assert launches.tolist() == r[first].tolist(), path
        checked += first.size > 1
    assert checked >= 3
