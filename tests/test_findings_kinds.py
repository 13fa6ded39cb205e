"""One finding kind per test, each on a small trace built in memory (``TraceBuilder``)
whose expected finding follows from the rules by hand (GUIDE §4 "The cause of a gap" and
"Findings speak the user's framework"; issue 15).  tests/test_findings.py covers the
sync culprits, the main-thread DataLoader, the allocator and the device-side wait; this
file covers the other kinds and the rules every finding list keeps.

Builder times are µs; the JSON's are ns.  Notation as in tests/test_causes.py: a gap
[gs, ge) is ended by device op E, issued by host call L; latency = 10 µs.  A finding's
time is its family's share of the gaps it cites on the device they hit hardest;
``time_lost_ns_per_step`` is that over the number of steps (truncated to whole ns).
"""
from __future__ import annotations

import re

import pytest

import tb_perfdiag
from tb_perfdiag.testing import TraceBuilder

FOREIGN = {   # what a fix for this framework must never name
    "pytorch": re.compile(r"\bjax\b|jax\.|torch_xla|\bxm\.|MpDeviceLoader|tf\.data|"
                          r"tf\.function", re.I),
    "jax": re.compile(r"\btorch\b|torch\.|torch_xla|DataLoader|cuda\.", re.I),
    "tensorflow": re.compile(r"\btorch\b|torch\.|\bjax\b|jax\.", re.I),
}
# advice to start replaying CUDA graphs (wrong for a trace that replays them already)
GRAPH_ADVICE = re.compile(r"replay the step as a CUDA graph|torch\.cuda\.graphs|"
                          r"reduce-overhead|torch\.compile or CUDA graphs|use CUDA graphs", re.I)


# ---- helpers ----

def diagnose(b: TraceBuilder) -> dict:
    # the trace's clock starts at its earliest event: keep it at 0 so µs read as written
    assert min(e.ts for e in b.events) == 0
    return tb_perfdiag.diagnose(b.build()).to_json()


def of_kind(d: dict, kind: str) -> list:
    return [f for f in d["findings"] if f["kind"] == kind]


def only(d: dict, kind: str) -> dict:
    fs = of_kind(d, kind)
    assert len(fs) == 1, [(f["kind"], f["title"]) for f in d["findings"]]
    return fs[0]


def idle(d: dict, cause: str, device: str = "GPU 0") -> int:
    dev = next(x for x in d["devices"] if x["name"] == device)
    return dev["idle_by_cause_ns"].get(cause, 0)


def launch(b, thread, stream, name, at, dur, start, kdur, api="cudaLaunchKernel"):
    """``api`` on ``thread`` at [at, at + dur) enqueueing kernel ``name`` [start, +kdur)."""
    return b.launch(thread, api, at, dur, kernel=b.kernel(stream, name, start, kdur))


# ---- the traces (each builder's docstring holds its arithmetic) ----

def launch_bound_trace(graph_every: int = 0) -> TraceBuilder:
    """3 steps ProfilerStep#k [440k, 440k + 440); 60 launches in a row, 20 µs each:
    L_j [22j, 22j + 20) → 2 µs kernel [22j + 21, 22j + 23).  59 gaps
    [22j + 1, 22j + 21) of 20 µs: end(L_j) + latency = 22j + 30 ≥ ge, so the rest is the
    whole gap; in it the thread is in L_j for [22j + 1, 22j + 20) = 19 µs
    (launch_overhead) and in the step's self time 1 µs (untraced).
    And the lead-in to the first kernel [0, 21), a gap of step 0 too: L_0's 20 µs
    launch_overhead and 1 µs untraced.
    → launch_overhead 59 × 19 + 20 = 1141 µs (380 333 ns per step), untraced 60 µs.
    ``graph_every``: every n-th launch is a cudaGraphLaunch (the trace replays graphs)."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    for k in range(3):
        b.step(main, k, 440 * k, 440)
    for j in range(60):
        api = "cudaGraphLaunch" if graph_every and j % graph_every == 0 else "cudaLaunchKernel"
        launch(b, main, s7, "tiny", 22 * j, 20, 22 * j + 21, 2, api=api)
    return b


def host_compute_trace(graph: bool = False) -> TraceBuilder:
    """3 steps, t = 3000k: ProfilerStep#k [t, t + 3000); L1 [t, t + 3) → gemm
    [t + 4, t + 120); the user's frame train.py(10): step [t + 5, t + 2008) holds
    aten::mul [t + 110, t + 2000) and L2 [t + 2000, t + 2005) → relu [t + 2010, t + 3004)
    (which runs until the next step's gemm).  One gap per step, [t + 120, t + 2010) =
    1890 µs; end(L2) + latency = t + 2015 ≥ ge: the rest is the whole gap.  aten::mul self
    [t + 120, t + 2000) 1880 + the frame's self [t + 2005, t + 2008) 3 = 1883 µs
    host_compute; L2 5 µs launch; the step's self [t + 2008, t + 2010) 2 µs untraced.
    → host_compute 3 × 1883 = 5649 µs, 1 883 000 ns per step, in 3 of 3 steps.
    ``graph``: L1 is a cudaGraphLaunch (the trace replays a CUDA graph)."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    for k in range(3):
        t = 3000 * k
        b.step(main, k, t, 3000)
        launch(b, main, s7, "gemm", t, 3, t + 4, 116,
               api="cudaGraphLaunch" if graph else "cudaLaunchKernel")
        b.op(main, "train.py(10): step", t + 5, 2003, cat="python_function")
        b.op(main, "aten::mul", t + 110, 1890)
        launch(b, main, s7, "relu", t + 2000, 5, t + 2010, 994)
    return b


def untraced_trace() -> TraceBuilder:
    """3 steps, t = 5000k: ProfilerStep#k [t, t + 5000) holds only L1 [t, t + 3) → k1
    [t + 4, t + 120) and L2 [t + 4980, t + 4985) → k2 [t + 4990, t + 5004).  Gap
    [t + 120, t + 4990) = 4870 µs, the rest is the whole gap: the step's self time
    [t + 120, t + 4980) + [t + 4985, t + 4990) = 4865 µs untraced, L2 5 µs launch.
    → untraced 3 × 4865 = 14 595 µs, 4 865 000 ns per step."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    for k in range(3):
        t = 5000 * k
        b.step(main, k, t, 5000)
        launch(b, main, s7, "k1", t, 3, t + 4, 116)
        launch(b, main, s7, "k2", t + 4980, 5, t + 4990, 14)
    return b


COLL = "ncclKernel_AllReduce_RING_LL_Sum_float"


def collective_trace() -> TraceBuilder:
    """3 steps, t = 10 000k: L1 [t, t + 3) → gemm on stream 7 [t + 4, t + 1020).  The
    user's train.py(60): sync_grads [t + 90, t + 120) calls torch.distributed's all_reduce
    (a library frame) whose L2 [t + 100, t + 105) enqueues the NCCL kernel on stream 20;
    it runs [t + 6020, t + 10 004) (its peers were late).  The host syncs [t + 200,
    t + 9990).  Gap [t + 1020, t + 6020) = 5000 µs: end(L2) + latency = t + 115 ≤ gs, so
    the device had the collective for the whole gap: collective_wait 5000 µs; the rest is
    empty, the sync in flight earns nothing.  → collective_wait 15 000 µs, 5 ms per step."""
    b = TraceBuilder()
    main, s7, s20 = b.thread("python main"), b.stream(0, 7), b.stream(0, 20)
    for k in range(3):
        t = 10_000 * k
        b.step(main, k, t, 10_000)
        launch(b, main, s7, "gemm", t, 3, t + 4, 1016)
        b.op(main, "train.py(60): sync_grads", t + 90, 30, cat="python_function")
        b.op(main, "torch/distributed/distributed_c10d.py(2050): all_reduce", t + 95, 15,
             cat="python_function")
        launch(b, main, s20, COLL, t + 100, 5, t + 6020, 3984)
        b.op(main, "cudaStreamSynchronize", t + 200, 9790, cat="cuda_runtime")
    return b


def h2d_trace() -> TraceBuilder:
    """3 steps, t = 4000k: L1 [t, t + 3) → gemm [t + 4, t + 104).  The user's
    train.py(30): to_device [t + 150, t + 2220) › aten::to [t + 200, t + 2210) ›
    aten::_to_copy [t + 201, t + 2209) › aten::copy_ [t + 202, t + 2208) ›
    cudaMemcpyAsync [t + 205, t + 2205): the host stages pageable memory, and the copy
    "Memcpy HtoD (Pageable -> Device)" runs only at [t + 2200, t + 2205).  Then L2
    [t + 2230, t + 2235) → relu [t + 2240, t + 4004).
    Gap A [t + 104, t + 2200) = 2096 µs, ended by the copy; L is its issue, not a sync:
    L's time in it [t + 205, t + 2200) = 1995 µs h2d_transfer; the step's self 46 µs
    untraced; the frame's and the aten ops' self 50 + 1 + 1 + 3 = 55 µs host_compute.
    Gap B [t + 2205, t + 2240) = 35 µs: the copy call, in flight at gs, blocked while the
    device was busy (its own copy) 5 µs → host_sync 5 µs; the remaining 30 µs split
    between the ops' self time, the step's self time and L2.
    → h2d_transfer 3 × 1995 = 5985 µs (1 995 000 ns per step, 50 % of the 4 ms step);
    host_sync 15 µs, 5000 ns per step = 0.125 % of a step: not a top finding."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    for k in range(3):
        t = 4000 * k
        b.step(main, k, t, 4000)
        launch(b, main, s7, "gemm", t, 3, t + 4, 100)
        b.op(main, "train.py(30): to_device", t + 150, 2070, cat="python_function")
        b.op(main, "aten::to", t + 200, 2010)
        b.op(main, "aten::_to_copy", t + 201, 2008)
        b.op(main, "aten::copy_", t + 202, 2006)
        b.launch(main, "cudaMemcpyAsync", t + 205, 2000,
                 kernel=b.memcpy(s7, "Memcpy HtoD (Pageable -> Device)", t + 2200, 5))
        launch(b, main, s7, "relu", t + 2230, 5, t + 2240, 1764)
    return b


def runtime_call_trace() -> TraceBuilder:
    """3 steps, t = 4000k: L1 [t, t + 3) → gemm [t + 4, t + 120); cudaStreamCreateWithFlags
    [t + 120, t + 2120); L2 [t + 2130, t + 2135) → relu [t + 2140, t + 4004).  Gap
    [t + 120, t + 2140) = 2020 µs: the stream creation 2000 µs runtime_call, L2 5 µs
    launch, the step's self 15 µs untraced.  → runtime_call 6000 µs, 2 ms per step."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    for k in range(3):
        t = 4000 * k
        b.step(main, k, t, 4000)
        launch(b, main, s7, "gemm", t, 3, t + 4, 116)
        b.op(main, "cudaStreamCreateWithFlags", t + 120, 2000, cat="cuda_runtime")
        launch(b, main, s7, "relu", t + 2130, 5, t + 2140, 1864)
    return b


def graph_capture_trace() -> TraceBuilder:
    """One step (a warm-up that captures a CUDA graph): L1 [0, 3) → k1 [4, 120);
    cudaStreamBeginCapture [200, 210); aten::mm [220, 2220) with a captured launch (no
    kernel runs); cudaStreamEndCapture [2300, 2310); L2 [2400, 2405) → k2 [2410, 2500).
    Gap [120, 2410) = 2290 µs: the capture events begin 10 + aten::mm 2000 + end 10 =
    2020 µs graph_capture (tests/test_causes.py), L2 5 µs launch, the rest untraced."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    b.step(main, 0, 0, 3000)
    launch(b, main, s7, "k1", 0, 3, 4, 116)
    b.op(main, "cudaStreamBeginCapture", 200, 10, cat="cuda_runtime")
    b.op(main, "aten::mm", 220, 2000)
    b.op(main, "cudaLaunchKernel", 1000, 5, cat="cuda_runtime")
    b.op(main, "cudaStreamEndCapture", 2300, 10, cat="cuda_runtime")
    launch(b, main, s7, "k2", 2400, 5, 2410, 90)
    return b


def compile_trace(compile_steps=(0,)) -> TraceBuilder:
    """XSpace (JAX on a GPU).  3 steps train_step, t = 10 000k: L_A cuLaunchKernel
    [t, t + 3) → fusion_a [t + 4, t + 120); PjitFunction(train_step) [t + 150, lb + 6)
    with, in a compiling step, backend_compile_and_load [t + 200, t + 5200) and lb =
    t + 5300, else lb = t + 200; L_B [lb, lb + 5) → fusion_b [lb + 10, t + 10 004).
    A compiling step's gap [t + 120, t + 5310) = 5190 µs (end(L_B) + latency ≥ ge):
    compile 5000 µs, the step's self 30 + 4 µs untraced, Pjit's self 150 + 1 µs
    host_compute, L_B 5 µs launch.  Another step's gap [t + 120, t + 210) = 90 µs is host
    work (Pjit's self 51 µs) — under 1 % of the 10 ms step.
    → compilation 5000 µs per compiling step."""
    b = TraceBuilder("xspace")
    py, s7 = b.thread("python"), b.stream(gpu=0, stream=7)
    for k in range(3):
        t = 10_000 * k
        b.step(py, k, t, 10_000, name="train_step")
        launch(b, py, s7, "fusion_a", t, 3, t + 4, 116, api="cuLaunchKernel")
        compiles = k in compile_steps
        lb = t + 5300 if compiles else t + 200
        b.op(py, "PjitFunction(train_step)", t + 150, lb + 6 - (t + 150))
        if compiles:
            b.op(py, "backend_compile_and_load", t + 200, 5000)
        launch(b, py, s7, "fusion_b", lb, 5, lb + 10, t + 10_004 - (lb + 10),
               api="cuLaunchKernel")
    return b


def graph_building_trace() -> TraceBuilder:
    """XSpace (PyTorch/XLA on a GPU).  3 steps train_step, t = 4000k: L_A [t, t + 3) →
    fusion_a [t + 4, t + 120); StepMarker [t + 110, t + 2110) › SyncTensorsGraph
    [t + 111, t + 2101) traces and builds the graph; L_B [t + 2105, t + 2108) → fusion_b
    [t + 2110, t + 4004).  Gap [t + 120, t + 2110) = 1990 µs: SyncTensorsGraph's self
    1981 + StepMarker's self 4 + 2 = 1987 µs host work under StepMarker ›
    SyncTensorsGraph, L_B 3 µs launch.  → host_compute 3 × 1987 = 5961 µs, reported as
    graph building (1 987 000 ns per step)."""
    b = TraceBuilder("xspace")
    py, s7 = b.thread("python"), b.stream(gpu=0, stream=7)
    for k in range(3):
        t = 4000 * k
        b.step(py, k, t, 4000, name="train_step")
        launch(b, py, s7, "fusion_a", t, 3, t + 4, 116, api="cuLaunchKernel")
        b.op(py, "StepMarker", t + 110, 2000)
        b.op(py, "SyncTensorsGraph", t + 111, 1990)
        launch(b, py, s7, "fusion_b", t + 2105, 3, t + 2110, 1894, api="cuLaunchKernel")
    return b


def d2h_trace(hidden: bool = False) -> TraceBuilder:
    """3 steps, t = 3000k: L1 [t, t + 3) → gemm [t + 4, t + 2004).  The user's
    train.py(88): log_metrics [t + 10, t + 2210) › aten::item [t + 20, t + 2170) ›
    aten::_local_scalar_dense [t + 21, t + 2169) (a device→host read) › cudaMemcpyAsync
    [t + 30, t + 2020) → "Memcpy DtoH" [t + 2004, t + 2006), then cudaStreamSynchronize
    [t + 2021, t + 2026).  L2 [t + 2300, t + 2305) → relu [t + 2310, t + 3004).
    Gap [t + 2006, t + 2310) = 304 µs: the read, in flight at gs, blocked while the device
    was busy [t + 21, t + 2006) = 1985 µs, and in the gap 163 µs → host_sync = min(304,
    2148) = the whole gap.  → 3 reads in 3 steps; host_sync 912 µs (304 µs per step).
    ``hidden``: a kernel on stream 20 keeps the device busy [0, 9010): no gap at all, the
    3 reads exposed no idle."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    if hidden:
        b.kernel(b.stream(0, 20), "long_side_kernel", 0, 9010)
    for k in range(3):
        t = 3000 * k
        b.step(main, k, t, 3000)
        launch(b, main, s7, "gemm", t, 3, t + 4, 2000)
        b.op(main, "train.py(88): log_metrics", t + 10, 2200, cat="python_function")
        b.op(main, "aten::item", t + 20, 2150)
        b.op(main, "aten::_local_scalar_dense", t + 21, 2148)
        b.launch(main, "cudaMemcpyAsync", t + 30, 1990,
                 kernel=b.memcpy(s7, "Memcpy DtoH (Device -> Pageable)", t + 2004, 2))
        b.op(main, "cudaStreamSynchronize", t + 2021, 5, cat="cuda_runtime")
        launch(b, main, s7, "relu", t + 2300, 5, t + 2310, 694)
    return b


def memcpy_trace() -> TraceBuilder:
    """3 steps, t = 3000k: L1 [t, t + 3) → gemm [t + 4, t + 1504) (1500 µs); cudaMemcpyAsync
    [t + 10, t + 15) → "Memcpy HtoD (Pinned -> Device)" [t + 1504, t + 3004) (1500 µs).
    The device is busy [4, 9004) without a gap; copies are 4500 of its 9000 µs busy:
    50 %.  → excessive_memcpy, 4500 µs."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    for k in range(3):
        t = 3000 * k
        b.step(main, k, t, 3000)
        launch(b, main, s7, "gemm", t, 3, t + 4, 1500)
        b.launch(main, "cudaMemcpyAsync", t + 10, 5,
                 kernel=b.memcpy(s7, "Memcpy HtoD (Pinned -> Device)", t + 1504, 1500))
    return b


def two_gpu_trace(copy_only: bool = False) -> TraceBuilder:
    """3 steps, t = 4000k: GPU 0 runs gemm [t + 4, t + 1004) (1000 µs per step); GPU 1
    runs [t + 9, t + 3009) (3000 µs per step): a kernel, or with ``copy_only`` a
    host→device copy (a copy engine, not a computing device).  Busy 3000 vs 9000 µs:
    skew 6000 µs = 67 % of the busiest (> 5 %) → "GPU 1 does more work", 2 ms per step.
    Their active spans [4, 8004) and [9, 11 009) overlap 7995 µs (> 20 % of 11 000): they
    do not run in turn."""
    b = TraceBuilder()
    main, g0, g1 = b.thread("python main"), b.stream(gpu=0, stream=7), b.stream(gpu=1, stream=7)
    for k in range(3):
        t = 4000 * k
        b.step(main, k, t, 4000)
        launch(b, main, g0, "gemm", t, 3, t + 4, 1000)
        if copy_only:
            b.launch(main, "cudaMemcpyAsync", t + 5, 3,
                     kernel=b.memcpy(g1, "Memcpy HtoD (Pinned -> Device)", t + 9, 3000))
        else:
            launch(b, main, g1, "gemm", t + 5, 3, t + 9, 3000)
    return b


def two_gpu_untraced_trace() -> TraceBuilder:
    """The untraced step self time idles two GPUs at once.  3 steps, t = 5000k: L [t, t + 3)
    → GPU 0 k1 [t + 4, t + 120); L [t + 3, t + 6) → GPU 1 k1 [t + 7, t + 120);
    L2a [t + 4970, t + 4975) → GPU 0 k2 [t + 4990, t + 5004); L2b [t + 4980, t + 4985) →
    GPU 1 k2 [t + 4990, t + 5004).  Each GPU's gap is [t + 120, t + 4990) = 4870 µs.
    GPU 1: end(L2b) + latency ≥ ge, the rest is the gap: the step's self
    [t + 120, t + 4970) 4850 + 5 + 5 = 4860 µs untraced, the two launches 10 µs.
    GPU 0: end(L2a) + latency = t + 4985: device_wait 5 µs, rest [t + 120, t + 4985):
    untraced 4850 + 5 = 4855 µs, launches 10 µs.
    GPU 1's lead-in [0, 7) is a gap of step 0 too (GPU 0's [0, 4) is under the
    threshold): launches, and the step's self [6, 7) 1 µs untraced; launch overhead is its
    primary cause.
    → one culprit (the step annotation), 3 × 4860 = 14 580 µs on GPU 1, the device it
    hits hardest — not 14 580 + 14 565 µs summed over the two GPUs."""
    b = TraceBuilder()
    main, g0, g1 = b.thread("python main"), b.stream(gpu=0, stream=7), b.stream(gpu=1, stream=7)
    for k in range(3):
        t = 5000 * k
        b.step(main, k, t, 5000)
        launch(b, main, g0, "k1", t, 3, t + 4, 116)
        launch(b, main, g1, "k1", t + 3, 3, t + 7, 113)
        launch(b, main, g0, "k2", t + 4970, 5, t + 4990, 14)
        launch(b, main, g1, "k2", t + 4980, 5, t + 4990, 14)
    return b



def twin_culprits_trace() -> TraceBuilder:
    """Two culprits whose op chains differ only above their last two ops (no Python
    stacks): aten::conv2d › aten::convolution › aten::_convolution and
    aten::conv_transpose2d › aten::convolution › aten::_convolution.  3 steps,
    t = 4400k: L [t, t + 3) → k0 [t + 4, t + 120); for i = 0, 1, a = t + 120 + 2000i:
    the outer op [a, a + 1900) › aten::convolution [a + 1, a + 1899) ›
    aten::_convolution [a + 2, a + 1898) › L [a + 1890, a + 1895) → conv
    [a + 1900, …), which runs until the next gap.  Gaps [a, a + 1900): the ops' self time
    1895 µs host_compute, L 5 µs (end(L) + latency ≥ ge).  → two host_compute culprits of 3 × 1895 =
    5685 µs each (1.9 ms per step, in 3 of 3 steps)."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    for k in range(3):
        t = 4400 * k
        b.step(main, k, t, 4400)
        launch(b, main, s7, "k0", t, 3, t + 4, 116)
        for i, outer in enumerate(("aten::conv2d", "aten::conv_transpose2d")):
            a = t + 120 + 2000 * i
            b.op(main, outer, a, 1900)
            b.op(main, "aten::convolution", a + 1, 1898)
            b.op(main, "aten::_convolution", a + 2, 1896)
            launch(b, main, s7, "conv", a + 1890, 5, a + 1900, 100 if i == 0 else 384)
    return b

# JAX and TensorFlow on a GPU: one timeline, the framework's own names
JAX_NAMES = dict(step="train", data="$train.py:40 get_batch",
                 dispatch="PjitFunction(train_step)", compile="backend_compile_and_load",
                 read_frame="$train.py:20 log_loss", read="np.asarray(jax.Array)",
                 compute="$train.py:22 summarize", dispatch2="PjitFunction(update)")
TF_NAMES = dict(step="train", data="Iterator::Model::Prefetch::MapAndBatch",
                dispatch="__inference_train_step_512", compile="XlaCompile",
                read_frame="EagerExecute", read="cuStreamSynchronize",
                compute="ExecutorState::Process", dispatch2="__inference_update_77")


def framework_trace(names: dict) -> TraceBuilder:
    """XSpace, 3 steps; step k lasts 5620 µs (10 620 µs in step 1, which compiles) and
    starts at t = 0, 5620, 16 240; d = t + 3000 (+ 5000 in step 1):
      data [t, t + 3000) (the input pipeline); dispatch [t + 3000, d + 10) holding, in
      step 1, compile [t + 3002, t + 8002), and L1 [d + 2, d + 5) → fusion_1
      [d + 10, d + 1010); read_frame [d + 950, d + 1100) › read [d + 960, d + 1020) (a
      blocking read of the loss); compute [d + 1100, d + 2095) (host work); dispatch2
      [d + 2098, d + 2108) › L2 [d + 2100, d + 2105) → fusion_2 [d + 2110, d + 2610),
      which ends 10 µs before the next step starts.
    Gaps (the rest is always the whole gap: end(L) + latency ≥ ge):
      [d + 1010, d + 2110) = 1100 µs in every step: the read, in flight at gs, blocked
        50 µs while the device was busy and 10 µs in the gap → host_sync 60 µs; the other
        1040 µs split as the thread's 1090 µs of buckets scaled by 1040/1090: host work
        80 + 995 + 5 = 1080 µs (primary), the step's self 5 µs, L2 5 µs.
      step 0 → 1: [5610, 13 630) = 8020 µs: the step's self 10 µs, data 3000 µs, the
        dispatch's self 2 + 5 µs, compile 5000 µs (primary), L1 3 µs.
      step 1 → 2: [16 230, 19 250) = 3020 µs: the step's self 10 µs, data 3000 µs
        (primary), the dispatch's self 7 µs, L1 3 µs.
    Step 0's lead-in [0, 3010) before its first kernel is a gap of step 0 like any other:
    data 3000 µs (primary), the dispatch's self 7 µs, L1 3 µs.
    → findings: host_compute (3 gaps), host_sync (3 × 60 µs), a compilation (5000 µs)
    and input_bound (3000 µs in step 0's lead-in + 3000 µs)."""
    b = TraceBuilder("xspace")
    py, s7 = b.thread("python"), b.stream(gpu=0, stream=7)
    t = 0
    for k in range(3):
        comp = 5000 if k == 1 else 0
        length = 3000 + comp + 2620
        d = t + 3000 + comp
        b.step(py, k, t, length, name=names["step"])
        b.op(py, names["data"], t, 3000)
        b.op(py, names["dispatch"], t + 3000, d + 10 - (t + 3000))
        if comp:
            b.op(py, names["compile"], t + 3002, comp)
        launch(b, py, s7, "fusion_1", d + 2, 3, d + 10, 1000, api="cuLaunchKernel")
        b.op(py, names["read_frame"], d + 950, 150)
        b.op(py, names["read"], d + 960, 60)
        b.op(py, names["compute"], d + 1100, 995)
        b.op(py, names["dispatch2"], d + 2098, 10)
        launch(b, py, s7, "fusion_2", d + 2100, 5, d + 2110, 500, api="cuLaunchKernel")
        t += length
    return b


KINETO = {
    "launch_bound": launch_bound_trace, "launch_bound_graphs": lambda: launch_bound_trace(2),
    "host_compute": host_compute_trace, "host_compute_graphs": lambda: host_compute_trace(True),
    "untraced": untraced_trace, "collective_wait": collective_trace, "h2d": h2d_trace,
    "runtime_call": runtime_call_trace, "graph_capture": graph_capture_trace,
    "d2h": d2h_trace, "d2h_hidden": lambda: d2h_trace(True), "memcpy": memcpy_trace,
    "skew": two_gpu_trace, "copy_only_gpu": lambda: two_gpu_trace(True),
    "two_gpu_untraced": two_gpu_untraced_trace,
}
XSPACE = {
    "compilation": compile_trace, "recompilation": lambda: compile_trace((0, 2)),
    "graph_building": graph_building_trace, "jax": lambda: framework_trace(JAX_NAMES),
    "tensorflow": lambda: framework_trace(TF_NAMES),
}
ALL = {**KINETO, **XSPACE}



# ---- one test per kind ----

def test_launch_bound_many_tiny_kernels():
    d = diagnose(launch_bound_trace())
    assert idle(d, "launch_overhead") == 1_141_000 and idle(d, "untraced") == 60_000
    f = only(d, "launch_bound")
    assert f["cause"] == "launch_overhead"
    assert f["time_lost_ns"] == 1_141_000 and f["time_lost_ns_per_step"] == 380_333
    assert "cudaLaunchKernel" in f["title"] and "in 3 of 3 steps" in f["title"]
    assert f["top"] and f["share_of_step"] == pytest.approx(380_333 / 440_000)
    # it cites all 60 gaps (the JSON lists the first 20 of them)
    r = tb_perfdiag.diagnose(launch_bound_trace().build())
    (lb,) = [x for x in r.findings if x.kind.value == "launch_bound"]
    assert len(lb.gaps) == 60 and len(f["evidence"]["gaps"]) == 20
    # not yet replaying graphs: fusing and CUDA graphs are the advice
    assert "torch.compile" in f["fix"] and GRAPH_ADVICE.search(f["fix"])


def test_host_compute_names_the_user_frame_and_the_op():
    d = diagnose(host_compute_trace())
    f = only(d, "host_compute")
    assert f["title"].startswith("train.py:10 step"), f["title"]
    assert "aten::mul" in f["title"] and "in 3 of 3 steps" in f["title"]
    assert f["culprit"]["where"] == "train.py:10 step" and f["culprit"]["ops"] == ["aten::mul"]
    assert f["time_lost_ns"] == 5_649_000 == idle(d, "host_compute")
    assert f["time_lost_ns_per_step"] == 1_883_000
    assert f["steps"] == [0, 1, 2] and f["top"]
    assert "torch.compile" in f["fix"]


def test_untraced_step_self_time_asks_for_python_stacks():
    d = diagnose(untraced_trace())
    f = only(d, "untraced")
    assert f["time_lost_ns"] == 14_595_000 == idle(d, "untraced")
    assert f["time_lost_ns_per_step"] == 4_865_000
    assert "self time of the step annotation" in f["title"], f["title"]
    assert "ProfilerStep#" not in f["title"]            # no step number in a culprit
    assert "with_stack=True" in f["fix"] and "Python" in f["fix"]


def test_collective_wait_nccl_kernel_launched_long_before_it_runs():
    d = diagnose(collective_trace())
    f = only(d, "collective_wait")
    assert f["time_lost_ns"] == 15_000_000 == idle(d, "collective_wait")
    assert f["time_lost_ns_per_step"] == 5_000_000
    assert idle(d, "host_sync") == 0                    # the host waited *for* the device
    # the user's frame, not torch.distributed's, and the collective it waited to run
    assert f["title"].startswith("train.py:60 sync_grads"), f["title"]
    assert COLL in f["title"]
    assert "straggler" in f["fix"] and "ranks" in f["fix"]


def test_h2d_transfer_pageable_copy_staged_by_the_host():
    d = diagnose(h2d_trace())
    f = only(d, "h2d_transfer")
    assert f["time_lost_ns"] == 5_985_000 == idle(d, "h2d_transfer")
    assert f["time_lost_ns_per_step"] == 1_995_000 and f["top"]
    assert f["title"].startswith("train.py:30 to_device"), f["title"]
    assert "cudaMemcpyAsync" in f["title"]
    assert "pin_memory" in f["fix"] and "non_blocking=True" in f["fix"]
    # the copy call's 5 µs of blocking before gap B: 0.125 % of a step, not a top finding
    assert idle(d, "host_sync") == 15_000
    (s,) = of_kind(d, "host_sync")
    assert s["time_lost_ns_per_step"] == 5_000
    assert s["share_of_step"] == pytest.approx(5_000 / 4_000_000) and s["top"] is False


def test_runtime_call_stream_creation_between_launches():
    d = diagnose(runtime_call_trace())
    f = only(d, "runtime_call")
    assert f["time_lost_ns"] == 6_000_000 == idle(d, "runtime_call")
    assert f["time_lost_ns_per_step"] == 2_000_000
    assert "cudaStreamCreateWithFlags" in f["title"] and "in 3 of 3 steps" in f["title"]
    assert "create streams and events once" in f["fix"]


def test_graph_capture_is_called_one_time_warm_up():
    d = diagnose(graph_capture_trace())
    f = only(d, "graph_capture")
    assert f["time_lost_ns"] == 2_020_000 == idle(d, "graph_capture")
    assert "one-time" in f["title"]
    assert "one-time" in f["fix"] and "warm-up" in f["fix"] and "steady state" in f["fix"]


def test_first_compile_in_step_0_only_is_one_time_compilation():
    d = diagnose(compile_trace((0,)))
    assert d["source"]["framework"] == "jax"
    assert not of_kind(d, "recompilation")
    f = only(d, "compilation")
    assert f["time_lost_ns"] == 5_000_000 == idle(d, "compilation")
    # step 0 compiles, so it is no typical step: no rate over the typical steps, paid once
    assert f["time_lost_ns_per_step"] == 0 and f["outlier_steps_ns"] == 5_000_000
    assert "one-time" in f["title"] and "backend_compile_and_load" in f["title"]
    assert "one-time" in f["fix"] and "recompil" not in f["fix"].lower()
    assert [c["recompile"] for c in d["compilations"]] == [False]


def test_compile_again_in_step_2_is_recompilation():
    d = diagnose(compile_trace((0, 2)))
    f = only(d, "recompilation")
    assert [(c["step"], c["recompile"]) for c in d["compilations"]] == [(0, False), (2, True)]
    assert "recompilation" in f["title"] and "backend_compile_and_load" in f["title"]
    assert "jax.jit" in f["fix"] and not FOREIGN["jax"].search(f["fix"])


def test_recompilation_costs_only_the_compiles_after_the_first():
    d = diagnose(compile_trace((0, 2)))
    f = only(d, "recompilation")
    assert f["time_lost_ns"] == 5_000_000
    # step 2 compiles, so it is no typical step: its recompilation is paid once there,
    # not a rate over the typical steps (issue 63: never a "per step" above the step)
    assert f["time_lost_ns_per_step"] == 0 and f["outlier_steps_ns"] == 5_000_000
    assert f["one_time"] and f["top"] and "5.00 ms once, in step 2" in f["title"]
    assert len(f["evidence"]["gaps"]) == 1
    # step 0's compile, where reported, is a one-time compilation
    assert all(x["time_lost_ns"] == 5_000_000 for x in of_kind(d, "compilation"))


def test_graph_building_under_step_marker_on_torch_xla():
    d = diagnose(graph_building_trace())
    assert d["source"]["framework"] == "pytorch_xla"
    assert not of_kind(d, "host_compute")
    f = only(d, "graph_building")
    assert f["cause"] == "host_compute"
    assert f["time_lost_ns"] == 5_961_000 == idle(d, "host_compute")
    assert f["time_lost_ns_per_step"] == 1_987_000
    assert "StepMarker › SyncTensorsGraph" in f["title"] and "in 3 of 3 steps" in f["title"]
    assert "StepMarker" in f["fix"] and "torch_xla" in f["fix"]
    assert "CUDA graph" not in f["fix"] and "DataLoader(" not in f["fix"]


def test_d2h_reads_that_exposed_idle_are_counted_on_their_sync_finding():
    d = diagnose(d2h_trace())
    assert [(t["step"], t["direction"]) for t in d["transfers"]] == [
        (0, "d2h"), (1, "d2h"), (2, "d2h")]
    f = only(d, "host_sync")
    assert f["time_lost_ns"] == 912_000 == idle(d, "host_sync")
    assert f["title"].startswith("train.py:88 log_metrics") and ".item()" in f["title"]
    assert "3 device→host read(s) (aten::_local_scalar_dense) in 3 step(s)" in f["detail"]
    # no second finding for the same reads and the same gaps
    assert not of_kind(d, "d2h_transfer")


def test_d2h_reads_that_exposed_no_idle_are_counted_and_cost_nothing():
    d = diagnose(d2h_trace(hidden=True))
    assert d["gaps"] == []
    f = only(d, "d2h_transfer")
    assert f["title"].startswith("3 device→host read(s) (aten::_local_scalar_dense) in 3 step(s)")
    assert f["time_lost_ns"] == 0 and f["top"] is False
    assert [e["name"] for e in f["events"]] == ["aten::_local_scalar_dense"] * 3
    assert "every N steps" in f["fix"]


def test_excessive_memcpy_half_the_busy_time():
    d = diagnose(memcpy_trace())
    f = only(d, "excessive_memcpy")
    assert f["title"] == "Memory copies take 50% of GPU 0's busy time"
    assert f["time_lost_ns"] == 4_500_000
    assert "pinned memory" in f["fix"]


def test_device_skew_one_gpu_does_more_work():
    d = diagnose(two_gpu_trace())
    f = only(d, "device_skew")
    assert f["title"] == "Device skew: GPU 1 does more work"
    assert f["per_device_busy_ns"] == {"GPU 0": 3_000_000, "GPU 1": 9_000_000}
    assert f["time_lost_ns"] == 6_000_000 and f["time_lost_ns_per_step"] == 2_000_000
    assert not of_kind(d, "serialized_devices")


def test_copy_only_gpu_is_not_skewed_against_a_compute_gpu():
    d = diagnose(two_gpu_trace(copy_only=True))
    kinds = {f["kind"] for f in d["findings"]}
    assert not kinds & {"device_skew", "serialized_devices", "excessive_memcpy"}, kinds


def test_time_lost_is_per_device_not_summed_over_devices():
    d = diagnose(two_gpu_untraced_trace())
    assert idle(d, "untraced", "GPU 0") == 14_565_000
    assert idle(d, "untraced", "GPU 1") == 14_581_000
    f = only(d, "untraced")
    assert f["device"] == "GPU 1" and f["time_lost_ns"] == 14_580_000
    assert not of_kind(d, "device_skew")



def test_twin_culprits_get_titles_that_tell_them_apart():
    d = diagnose(twin_culprits_trace())
    fs = of_kind(d, "host_compute")
    assert [f["time_lost_ns"] for f in fs] == [5_685_000, 5_685_000]
    titles = [f["title"] for f in fs]
    assert not any(re.search(r" #\d+$", t) for t in titles), titles
    assert any("aten::conv2d" in t for t in titles), titles
    assert any("aten::conv_transpose2d" in t for t in titles), titles

# ---- CUDA-graph replays: no advice to start using them ----

@pytest.mark.parametrize("build,kind", [(launch_bound_trace, "launch_bound"),
                                        (host_compute_trace, "host_compute")])
def test_a_trace_replaying_cuda_graphs_is_not_told_to_use_them(build, kind):
    plain = of_kind(diagnose(build()), kind)
    assert plain and all(GRAPH_ADVICE.search(f["fix"]) for f in plain)     # the control
    replaying = of_kind(diagnose(build(2) if kind == "launch_bound" else build(True)), kind)
    assert replaying
    for f in replaying:
        assert not GRAPH_ADVICE.search(f["fix"]), f["fix"]
        assert "already" in f["fix"]


# ---- the framework of the trace ----

@pytest.mark.parametrize("names,fw", [(JAX_NAMES, "jax"), (TF_NAMES, "tensorflow")],
                         ids=["jax", "tensorflow"])
def test_xla_frameworks_get_their_own_fixes(names, fw):
    d = diagnose(framework_trace(names))
    assert d["source"]["framework"] == fw
    kinds = {f["kind"] for f in d["findings"]}
    assert {"host_compute", "host_sync", "input_bound"} <= kinds, kinds
    assert kinds & {"compilation", "recompilation"}, kinds
    assert idle(d, "host_sync") == 180_000 and idle(d, "compilation") == 5_000_000
    assert only(d, "host_sync")["time_lost_ns"] == 180_000
    assert only(d, "input_bound")["time_lost_ns"] == 6_000_000
    for f in d["findings"]:
        assert not FOREIGN[fw].search(f["fix"]), (f["kind"], f["fix"])
    if fw == "jax":
        assert "jax.Array" in only(d, "host_sync")["fix"]
    else:
        assert "tf.data" in only(d, "input_bound")["fix"]


def test_jax_findings_name_the_users_python_frame():
    d = diagnose(framework_trace(JAX_NAMES))
    s = only(d, "host_sync")
    assert s["culprit"]["where"] == "train.py:20 log_loss"
    assert s["title"].startswith("train.py:20 log_loss: np.asarray(jax.Array)"), s["title"]
    h = only(d, "host_compute")
    assert h["culprit"]["where"] == "train.py:22 summarize", h["title"]
    assert not any("$" in f["title"] for f in d["findings"])


@pytest.mark.parametrize("name", sorted(KINETO))
def test_kineto_fixes_never_name_another_framework(name):
    d = diagnose(KINETO[name]())
    assert d["source"]["framework"] == "pytorch"
    assert d["findings"]
    for f in d["findings"]:
        assert not FOREIGN["pytorch"].search(f["fix"]), (f["kind"], f["fix"])


# ---- rules every finding list keeps ----

@pytest.mark.parametrize("name", sorted(ALL))
def test_finding_list_rules(name):
    d = diagnose(ALL[name]())
    titles = [f["title"] for f in d["findings"]]
    assert len(titles) == len(set(titles)), titles
    assert not any(re.search(r" #\d+$", t) for t in titles), titles    # no numbered twins
    assert "recurring_gap" not in {f["kind"] for f in d["findings"]}
    # per device and cause family, the findings never claim more than its idle
    devs = {x["name"]: x for x in d["devices"]}
    claimed = {}
    for f in d["findings"]:
        if f.get("cause") and f.get("device"):
            key = (f["device"], f["cause"])
            claimed[key] = claimed.get(key, 0) + f["time_lost_ns"]
    for (dev, cause), ns in claimed.items():
        assert ns <= devs[dev]["idle_by_cause_ns"].get(cause, 0), (dev, cause, ns)
    # a finding under 1 % of a typical step is no top finding (and one above it is)
    for f in d["findings"]:
        if f["share_of_step"] is not None:
            # or as much over the steps, paid once in steps that compile or stall
            once = (f.get("outlier_steps_ns") or 0) >= \
                0.01 * d["typical_step_ns"] * len(d["steps"])
            assert f["top"] == ((f["time_lost_ns_per_step"] > 0 and f["share_of_step"] >= 0.01)
                                or once), \
                (f["title"], f["share_of_step"], f["top"])


@pytest.mark.parametrize("block", [1, 3, 1 << 20])
def test_per_device_kernels_and_collective_time_a_block_at_a_time(block, monkeypatch):
    """The multi-device finding counts each device's kernels and sums its collective
    kernels' time a block of events at a time: the same numbers as whole-column masks,
    for any block, with copies (no kernels, not collective) and host work beside."""
    import numpy as np
    from tb_perfdiag.analysis.findings import multi_device as F
    from tb_perfdiag.analysis.steps import capture_notes as N
    from tb_perfdiag.trace.classify import is_collective_kernel
    from tb_perfdiag.trace.model import EventKind as K
    monkeypatch.setattr(F, "_BLOCK", block)
    monkeypatch.setattr(N, "_BLOCK", block)
    rng = np.random.default_rng(3)
    b = TraceBuilder()
    py = b.thread("python")
    names = ["ncclDevKernel_AllReduce_Sum_f32_RING_LL", "volta_sgemm_128x64_nn",
             "ncclKernel_AllGather_RING_LL_Sum_int8_t", "elementwise_kernel"]
    for gpu in (0, 1):
        for stream in (7, 9):
            s = b.stream(gpu=gpu, stream=stream)
            t = 0.0
            for _ in range(int(rng.integers(5, 30))):
                t += float(rng.integers(1, 20))
                dur = float(rng.integers(1, 40))
                if rng.random() < 0.2:
                    b.memcpy(s, "Memcpy HtoD (Pageable -> Device)", t, dur)
                else:
                    b.kernel(s, names[int(rng.integers(0, 4))], t, dur)
                t += dur
    b.op(py, "aten::mm", 0.0, 10.0)
    t = b.build()
    dev = t.track_device[t.track]
    want = np.bincount(dev[(t.kind == K.KERNEL) & (dev >= 0)], minlength=len(t.devices))
    np.testing.assert_array_equal(N.kernels_per_device(t, len(t.devices)), want)
    act = t.is_device_activity()
    for d in range(len(t.devices)):
        ev = np.flatnonzero(act & (dev == d))
        coll = np.array([is_collective_kernel(t.strings[int(x)]) for x in t.name[ev]], bool)
        assert coll.any() and not coll.all()
        assert F._collective_ps(t, d) == int(t.dur[ev[coll]].sum())
