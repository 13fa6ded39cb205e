"""The cause model of GUIDE §4 ("The cause of a gap: a counterfactual split"), one rule per
test, each on a trace of a few events built in memory (``TraceBuilder``, Kineto flavour).

Every expected share is worked out by hand from §4 in the test's comment.  Notation: the
gap is [gs, ge); E the device op that ends it; L the host call that issued E; latency
the typical launch latency (10 µs, ``shares.LAUNCH_LATENCY_PS``).  Builder times are µs;
the GapTable's are ps (``US``).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import tb_perfdiag
from tb_perfdiag.analysis import causes as C
from tb_perfdiag.testing import TraceBuilder
from tb_perfdiag.trace import EventKind as K
from tb_perfdiag.trace import build as build_mod
from tb_perfdiag.trace.build import _native_nest

US = 1_000_000          # ps per µs
NS = 1_000              # ps per ns
CAUSE = {c: i for i, c in enumerate(C.ALL)}
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


# ---- helpers ----

def assert_shares_add_up(gaps) -> None:
    """Rule 11: every gap's shares are non-negative and add up to its length exactly."""
    assert gaps.shares.shape == (len(gaps), len(C.ALL))
    assert (gaps.shares >= 0).all()
    np.testing.assert_array_equal(gaps.shares.sum(axis=1), gaps.end - gaps.start)
    # the primary is the largest share
    np.testing.assert_array_equal(gaps.cause, np.argmax(gaps.shares, axis=1))


def diagnose(b: TraceBuilder):
    """(trace, report, gaps) of a built trace; the shares of every gap add up."""
    # the trace's clock starts at its earliest event: keep it at 0 so µs read as written
    assert min(e.ts for e in b.events) == 0
    trace = b.build()
    r = tb_perfdiag.diagnose(trace)
    assert_shares_add_up(r.gaps)
    return trace, r, r.gaps


def share(gaps, row: int, cause: str) -> int:
    return int(gaps.shares[row, CAUSE[cause]])


def primary(gaps, row: int = 0) -> str:
    return C.ALL[int(gaps.cause[row])]


def only_gap(gaps, start_us: float, end_us: float) -> int:
    """The row of the gap [start, end) (µs), the only one of the trace between two device
    ops (the lead-in before the device's first op and the tail after its last, gaps of
    their steps too, are judged in tests/test_arithmetic.py)."""
    inner = np.flatnonzero((gaps.prev_op >= 0) & (gaps.next_op >= 0))
    assert len(inner) == 1, [(int(s) / US, int(e) / US) for s, e in zip(gaps.start, gaps.end)]
    row = int(inner[0])
    assert (int(gaps.start[row]), int(gaps.end[row])) == (start_us * US, end_us * US)
    return row


def kernel(b, thread, stream, name, launch_at, start, dur, launch_dur=5):
    """A cudaLaunchKernel at ``launch_at`` (``launch_dur`` µs) enqueueing ``name``."""
    return b.launch(thread, "cudaLaunchKernel", launch_at, launch_dur,
                    kernel=b.kernel(stream, name, start, dur))


# ---- 1. a drained queue: a long sync, then a little host work ----

@pytest.mark.parametrize("sync_name", ["cudaStreamSynchronize", "cudaDeviceSynchronize"])
def test_long_sync_drains_the_queue_host_sync_earns_the_whole_gap(sync_name):
    # k1 runs [20, 2020); the host sits in the sync [20, 2030), then works 100 µs and
    # launches k2 (L [2130, 2135), k2 at 2140).  Gap [2020, 2140) = 120 µs.
    # 1. end(L) + latency = 2145 ≥ ge: no device-side wait, the rest is the whole gap.
    # 2. blocked while the device was busy: [20, 2020) = 2000 µs; blocked in the gap:
    #    [2020, 2030) = 10 µs → host_sync = min(120, 2000 + 10) = 120 µs: the whole gap.
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    kernel(b, main, s7, "k1", 0, 20, 2000)
    sync = b.op(main, sync_name, 20, 2010, cat="cuda_runtime")
    with b.op(main, "aten::add", 2035, 101):
        k2 = kernel(b, main, s7, "k2", 2130, 2140, 50)
    trace, r, g = diagnose(b)
    row = only_gap(g, 2020, 2140)
    assert primary(g) == C.HOST_SYNC
    assert share(g, row, C.HOST_SYNC) == 120 * US
    assert g.blocking[row] == sync.index and bool(g.drained[row])
    assert g.waited_for[row] == k2.index
    j = r.to_json()["gaps"][row]
    assert j["cause"] == C.HOST_SYNC and j["shares_ns"] == {C.HOST_SYNC: 120_000}
    assert j["tracelens"]["idle_type"] == C.SYNC_DRAIN
    assert j["blocking"]["name"] == sync_name and j["culprit"]["name"] == sync_name


def test_sync_that_blocked_briefly_earns_its_lead_not_the_gap():
    # k1 runs [20, 2020); the sync is entered 50 µs before k1 ends: [1970, 2030).  The
    # host then runs aten::copy_ [2035, 2137) with L [2130, 2136) inside; k2 at 2140.
    # Gap [2020, 2140) = 120 µs; end(L) + latency = 2146 ≥ ge: rest = the gap.
    # 2. host_sync = min(120, busy-blocked [1970, 2020) 50 + in-gap [2020, 2030) 10) = 60.
    # 3. remainder 60 µs by what the thread did after the sync: aten::copy_ self
    #    (host_compute) 96 µs, L 6 µs (launch_overhead), no event 8 µs (untraced),
    #    scaled to 60 → host_compute 52.4, untraced 4.4, launch 3.3: host_sync is primary.
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    kernel(b, main, s7, "k1", 0, 20, 2000)
    sync = b.op(main, "cudaStreamSynchronize", 1970, 60, cat="cuda_runtime")
    with b.op(main, "aten::copy_", 2035, 102):
        kernel(b, main, s7, "k2", 2130, 2140, 50, launch_dur=6)
    trace, r, g = diagnose(b)
    row = only_gap(g, 2020, 2140)
    assert primary(g) == C.HOST_SYNC
    # (the shares below are scaled and floored: their rounding residue, a few ps, goes to
    # the largest share)
    assert share(g, row, C.HOST_SYNC) == pytest.approx(60 * US, abs=NS)
    assert g.blocking[row] == sync.index and bool(g.drained[row])
    rest = 60 * US
    assert share(g, row, C.HOST_COMPUTE) == pytest.approx(rest * 96 / 110, abs=NS)
    assert share(g, row, C.LAUNCH_OVERHEAD) == pytest.approx(rest * 6 / 110, abs=NS)
    assert share(g, row, C.UNTRACED) == pytest.approx(rest * 8 / 110, abs=NS)
    assert r.to_json()["gaps"][row]["tracelens"]["idle_type"] == C.SYNC_DRAIN


def test_sync_entered_after_the_device_went_idle_earns_only_its_time_in_the_gap():
    # k1 runs [20, 120); the host computes until 200, then syncs [200, 230) on an idle
    # device, computes [230, 300) and launches k2 (L [300, 305), k2 at 310).
    # Gap [120, 310) = 190 µs, rest = the gap.  No sync is in flight at gs: host_sync =
    # its time in the gap, 30 µs.  Remainder 160 µs: aten ops 80 + 70 = 150 µs
    # host_compute, L 5 µs launch_overhead, [305, 310) 5 µs untraced — exactly 160.
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    kernel(b, main, s7, "k1", 0, 20, 100)
    b.op(main, "aten::nonzero", 15, 185)
    sync = b.op(main, "cudaStreamSynchronize", 200, 30, cat="cuda_runtime")
    b.op(main, "aten::mul", 230, 70)
    kernel(b, main, s7, "k2", 300, 310, 50)
    trace, r, g = diagnose(b)
    row = only_gap(g, 120, 310)
    assert share(g, row, C.HOST_SYNC) == 30 * US
    assert share(g, row, C.HOST_COMPUTE) == 150 * US
    assert share(g, row, C.LAUNCH_OVERHEAD) == 5 * US
    assert share(g, row, C.UNTRACED) == 5 * US
    assert primary(g) == C.HOST_COMPUTE
    assert g.blocking[row] == sync.index and not bool(g.drained[row])
    assert r.to_json()["gaps"][row]["tracelens"]["idle_type"] == C.STARVED


# ---- 2. a 12 µs sync before a long DataLoader fetch ----

def test_short_sync_before_a_long_dataloader_fetch_is_data_loading():
    # k1 runs [20, 1032); the sync [1020, 1035) blocked 12 µs with the device busy and
    # 3 µs in the gap.  Then the loader fetch [1040, 51040) (aten::div, aten::copy_
    # inside) and L [51050, 51055); k2 at 51060.  Gap [1032, 51060) = 50 028 µs.
    # 1. end(L) + latency = 51065 ≥ ge: rest = the gap.
    # 2. host_sync = min(50 028, 12 + 3) = 15 µs — not the gap.
    # 3. remainder 50 013 µs: the fetch 50 000 µs of data loading, L 5 µs launch,
    #    20 µs no event (untraced), scaled by 50 013 / 50 025 → data_loading ≈ 49 988 µs.
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    kernel(b, main, s7, "k1", 0, 20, 1012)
    sync = b.op(main, "cudaStreamSynchronize", 1020, 15, cat="cuda_runtime")
    with b.op(main, LOADER, 1040, 50_000, cat="user_annotation") as fetch:
        div = b.op(main, "aten::div", 1100, 20_000)
        b.op(main, "aten::copy_", 21_200, 29_800)
    kernel(b, main, s7, "k2", 51_050, 51_060, 50)
    trace, r, g = diagnose(b)
    row = only_gap(g, 1032, 51_060)
    assert trace.parent[div.index] == fetch.index
    assert primary(g) == C.DATA_LOADING
    assert share(g, row, C.HOST_SYNC) == 15 * US
    rest = (50_028 - 15) * US
    assert share(g, row, C.DATA_LOADING) == pytest.approx(rest * 50_000 / 50_025, abs=NS)
    assert share(g, row, C.LAUNCH_OVERHEAD) == pytest.approx(rest * 5 / 50_025, abs=NS)
    assert g.blocking[row] == sync.index
    j = r.to_json()["gaps"][row]
    assert j["cause"] == C.DATA_LOADING and j["shares_ns"][C.HOST_SYNC] == 15_000
    assert j["culprit"]["name"] in ("aten::copy_", LOADER)


# ---- 3. a kernel launched early behind a stream wait ----

@pytest.mark.parametrize("name,cause", [
    ("ampere_sgemm_128x64_nn", C.DEVICE_WAIT),
    ("ncclKernel_AllReduce_RING_LL_Sum_float", C.COLLECTIVE_WAIT)])
def test_kernel_launched_early_is_a_device_side_wait_even_during_a_sync(name, cause):
    # k1 runs [20, 1020) on stream 7.  E (stream 20, waiting on an event) was launched by
    # L [100, 105) and starts at 6020.  The host sits in a sync [200, 6030) meanwhile.
    # Gap [1020, 6020) = 5000 µs.  1. end(L) + latency = 115 ≤ gs: the device had E for
    # the whole gap: [max(1020, 115), 6020) = 5000 µs device-side wait; the rest is
    # empty, so the sync in flight earns nothing (the host waits *for* the device).
    b = TraceBuilder()
    main, s7, s20 = b.thread("python main"), b.stream(0, 7), b.stream(0, 20)
    kernel(b, main, s7, "k1", 0, 20, 1000)
    e = kernel(b, main, s20, name, 100, 6020, 500)
    b.op(main, "cudaStreamSynchronize", 200, 5830, cat="cuda_runtime")
    trace, r, g = diagnose(b)
    row = only_gap(g, 1020, 6020)
    assert primary(g) == cause
    assert share(g, row, cause) == 5000 * US
    assert share(g, row, C.HOST_SYNC) == 0
    assert g.waited_for[row] == e.index and g.culprit[row] == e.index
    j = r.to_json()["gaps"][row]
    assert j["shares_ns"] == {cause: 5_000_000}
    assert j["tracelens"]["idle_type"] == C.DEVICE_SIDE_WAIT


def test_device_side_wait_starts_a_launch_latency_after_the_issuing_call_returned():
    # k1 runs [20, 1020).  The host computes [1010, 2000) and L [2000, 2005) issues E on
    # stream 20, which waits on an event until 6000.  Gap [1020, 6000) = 4980 µs.
    # 1. device_wait = [max(1020, 2005 + 10), 6000) = 3985 µs.  The rest [1020, 2015) =
    #    995 µs: aten::mm self 980 (host_compute), L 5 (launch), 10 untraced.
    b = TraceBuilder()
    main, s7, s20 = b.thread("python main"), b.stream(0, 7), b.stream(0, 20)
    kernel(b, main, s7, "k1", 0, 20, 1000)
    b.op(main, "aten::mm", 1010, 990)
    kernel(b, main, s20, "k2", 2000, 6000, 100)
    trace, r, g = diagnose(b)
    row = only_gap(g, 1020, 6000)
    assert int(g.rest_end[row]) == 2015 * US
    assert share(g, row, C.DEVICE_WAIT) == 3985 * US
    assert share(g, row, C.HOST_COMPUTE) == 980 * US
    assert share(g, row, C.LAUNCH_OVERHEAD) == 5 * US
    assert share(g, row, C.UNTRACED) == 10 * US
    assert primary(g) == C.DEVICE_WAIT


# ---- 4. a free on the autograd thread ----

BACKWARD = ("torch/autograd/graph.py(966): _engine_run_backward",
            "<built-in method run_backward of torch._C._EngineBase object at 0x7f67a56c6ff0>")


def _backward(b, main, start, dur):
    """The main thread blocked in backward (the frames of a real 2.x trace) while the
    autograd thread runs it."""
    b.op(main, BACKWARD[0], start, dur, cat="python_function")
    return b.op(main, BACKWARD[1], start + 1, dur - 2, cat="python_function")


def test_free_on_the_autograd_thread_is_allocator_on_that_thread():
    # main: ProfilerStep#1 [0, 40000) › run_backward [100, 30100): blocked while the
    # autograd thread works.  autograd: L1 [150, 155) → k1 [160, 1160); cudaFree
    # [1200, 21200); L [21210, 21215) → k2 [21220, 21300).  Gap [1160, 21220) = 20 060 µs.
    # 1. end(L) + latency ≥ ge: rest = the gap.  2. no blocking call: host_sync 0.
    # 3. the thread that issued L is the autograd thread: cudaFree 20 000 µs allocator, L
    #    5 µs launch_overhead; the 55 µs it has no event are not more than that (see
    #    test_idle_of_the_issuing_thread_is_not_the_main_threads_backward_wait).
    b = TraceBuilder()
    main, ag, s7 = b.thread("python main"), b.thread("pt_autograd_0"), b.stream()
    b.step(main, 1, 0, 40_000)
    _backward(b, main, 100, 30_000)
    kernel(b, ag, s7, "k1", 150, 160, 1000)
    free = b.op(ag, "cudaFree", 1200, 20_000, cat="cuda_runtime")
    k2 = kernel(b, ag, s7, "k2", 21_210, 21_220, 80)
    trace, r, g = diagnose(b)
    row = only_gap(g, 1160, 21_220)
    assert trace.kind[free.index] == K.ALLOC
    assert primary(g) == C.ALLOCATOR
    assert share(g, row, C.ALLOCATOR) == 20_000 * US
    assert share(g, row, C.LAUNCH_OVERHEAD) == 5 * US
    assert share(g, row, C.HOST_SYNC) == 0
    assert g.thread[row] == trace.track[k2.index] == trace.track[free.index]
    assert g.thread[row] != trace.track[b.events[0].index]
    assert g.waited_for[row] == k2.index and g.culprit[row] == free.index
    j = r.to_json()["gaps"][row]
    assert j["analysed_thread"] == "pt_autograd_0"
    assert j["culprit"]["name"] == "cudaFree"


def test_main_thread_waiting_in_backward_follows_the_autograd_thread():
    # main: run_backward [100, 22000) while the autograd thread runs k1 (L1 [150, 155) →
    # [160, 1160)) and cudaFree [1200, 21200); back from backward, main issues L
    # [22010, 22015) → k2 at 22020.  Gap [1160, 22020) = 20 860 µs, rest = the gap.
    # 3. the issuing thread (main) was blocked in run_backward [1160, 22000): follow to the
    #    autograd thread, which did: no event 40 µs, cudaFree 20 000 µs, no event 800 µs.
    #    Then main's own no-event 10 + 5 µs and L 5 µs.  → allocator 20 000 µs (primary),
    #    untraced 855 µs, launch_overhead 5 µs; host_compute 0.
    b = TraceBuilder()
    main, ag, s7 = b.thread("python main"), b.thread("pt_autograd_0"), b.stream()
    b.step(main, 1, 0, 40_000)
    _backward(b, main, 100, 21_900)
    kernel(b, ag, s7, "k1", 150, 160, 1000)
    b.op(ag, "cudaFree", 1200, 20_000, cat="cuda_runtime")
    k2 = kernel(b, main, s7, "k2", 22_010, 22_020, 80)
    trace, r, g = diagnose(b)
    row = only_gap(g, 1160, 22_020)
    assert g.thread[row] == trace.track[k2.index]
    assert share(g, row, C.HOST_COMPUTE) == 0
    assert share(g, row, C.ALLOCATOR) == 20_000 * US
    assert primary(g) == C.ALLOCATOR


def test_idle_of_the_issuing_thread_is_not_the_main_threads_backward_wait():
    # main: run_backward [100, 30100).  autograd: L1 [150, 155) → k1 [160, 1160); no event
    # [1160, 6000); cudaFree [6000, 26000); L [26010, 26015) → k2 at 26020.
    # Gap [1160, 26020) = 24 860 µs, rest = the gap.  3. the issuing thread (autograd):
    # allocator 20 000 µs, launch_overhead 5 µs, no event 4840 + 10 + 5 = 4855 µs untraced
    # (the main thread was waiting for this one, not working): host_compute 0.
    b = TraceBuilder()
    main, ag, s7 = b.thread("python main"), b.thread("pt_autograd_0"), b.stream()
    b.step(main, 1, 0, 40_000)
    _backward(b, main, 100, 30_000)
    kernel(b, ag, s7, "k1", 150, 160, 1000)
    b.op(ag, "cudaFree", 6000, 20_000, cat="cuda_runtime")
    kernel(b, ag, s7, "k2", 26_010, 26_020, 80)
    trace, r, g = diagnose(b)
    row = only_gap(g, 1160, 26_020)
    assert primary(g) == C.ALLOCATOR
    assert share(g, row, C.HOST_COMPUTE) == 0
    assert share(g, row, C.UNTRACED) == 4855 * US


# ---- 5. an annotation that outlives its Python frame ----

@pytest.mark.parametrize("native", [True, False], ids=["native", "numpy"])
def test_annotation_outliving_its_frame_keeps_its_children(native, monkeypatch):
    # P: python frame [0, 10 ms); A: the loader annotation [5 ms, 40 ms) starts inside P
    # and outlives it; its ops aten::div [12, 25) ms and aten::copy_ [25, 38) ms run after
    # P ended, so their parent is A (the deepest open event), not P.  L1 [1, 6) µs →
    # k1 [10 µs, 1010 µs); L [40 010, 40 015) µs → k2 at 40 020 µs.
    # Gap [1010, 40 020) µs = 39 010 µs, rest = the gap (end(L) + latency ≥ ge):
    #   P's self time [1010, 5000)                        3990 µs host_compute
    #   A innermost [5000, 40 000) (its self + children) 35 000 µs data_loading
    #   L 5 µs launch, [40 000, 40 010) + [40 015, 40 020) 15 µs untraced.
    if native:
        if _native_nest() is None:
            pytest.skip("the native extension is not built")
    else:
        monkeypatch.setenv("TB_PERFDIAG_NO_NATIVE", "1")
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    frame = b.op(main, "train.py(42): train_loop", 0, 10_000, cat="python_function")
    kernel(b, main, s7, "k1", 1, 10, 1000)
    ann = b.op(main, LOADER, 5000, 35_000, cat="user_annotation")
    div = b.op(main, "aten::div", 12_000, 13_000)
    cp = b.op(main, "aten::copy_", 25_000, 13_000)
    kernel(b, main, s7, "k2", 40_010, 40_020, 100)
    trace, r, g = diagnose(b)
    assert trace.parent[ann.index] == frame.index
    assert trace.parent[div.index] == ann.index and trace.parent[cp.index] == ann.index
    row = only_gap(g, 1010, 40_020)
    assert primary(g) == C.DATA_LOADING
    assert share(g, row, C.DATA_LOADING) == 35_000 * US
    assert share(g, row, C.HOST_COMPUTE) == 3990 * US
    assert share(g, row, C.LAUNCH_OVERHEAD) == 5 * US
    assert share(g, row, C.UNTRACED) == 15 * US


def test_both_nesters_agree_on_an_annotation_outliving_its_frame(monkeypatch):
    # the same trace with one more frame around the annotation's start: the C nester and
    # the numpy one give the same parents, so the same shares
    if _native_nest() is None:
        pytest.skip("the native extension is not built")

    def build():
        b = TraceBuilder()
        main, s7 = b.thread("python main"), b.stream()
        b.op(main, "train.py(42): train_loop", 0, 10_000, cat="python_function")
        b.op(main, "train.py(43): <genexpr>", 4000, 3000, cat="python_function")
        kernel(b, main, s7, "k1", 1, 10, 1000)
        b.op(main, LOADER, 5000, 35_000, cat="user_annotation")
        b.op(main, "aten::div", 12_000, 13_000)
        b.op(main, "aten::copy_", 25_000, 13_000)
        kernel(b, main, s7, "k2", 40_010, 40_020, 100)
        trace = b.build()
        return trace, tb_perfdiag.diagnose(trace).gaps

    t_native, g_native = build()
    monkeypatch.setenv("TB_PERFDIAG_NO_NATIVE", "1")
    calls = []
    numpy_nest = build_mod.nest_arrays
    monkeypatch.setattr(build_mod, "nest_arrays", lambda *a: calls.append(1) or numpy_nest(*a))
    t_numpy, g_numpy = build()
    assert calls, "the numpy nester did not run"
    np.testing.assert_array_equal(t_native.parent, t_numpy.parent)
    np.testing.assert_array_equal(g_native.shares, g_numpy.shares)
    np.testing.assert_array_equal(g_native.cause, g_numpy.cause)


# ---- 6. a step annotation with no children ----

def test_step_self_time_is_untraced():
    # ProfilerStep#1 [0, 5000) holds only L1 [0, 5) → k1 [20, 120) and L [4980, 4985) →
    # k2 [4990, 5090).  Gap [120, 4990) = 4870 µs, rest = the gap.  The step's self time
    # [120, 4980) + [4985, 4990) = 4865 µs is untraced (advise Python stacks), L 5 µs launch.
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    step = b.step(main, 1, 0, 5000)
    kernel(b, main, s7, "k1", 0, 20, 100)
    kernel(b, main, s7, "k2", 4980, 4990, 100)
    trace, r, g = diagnose(b)
    row = only_gap(g, 120, 4990)
    assert primary(g) == C.UNTRACED
    assert share(g, row, C.UNTRACED) == 4865 * US
    assert share(g, row, C.LAUNCH_OVERHEAD) == 5 * US
    assert g.culprit[row] == step.index
    assert r.to_json()["gaps"][row]["culprit"]["name"] == "ProfilerStep#1"


# ---- 7. CUDA-graph capture ----

def test_capture_region_is_graph_capture():
    # ProfilerStep#1 [0, 3000): L1 [0, 5) → k1 [20, 120); cudaStreamBeginCapture
    # [200, 210), aten::mm [220, 2220) with a captured cudaLaunchKernel (no kernel runs),
    # cudaStreamEndCapture [2300, 2310); L [2400, 2405) → k2 [2410, 2500).
    # Gap [120, 2410) = 2290 µs, rest = the gap (end(L) + latency ≥ ge).  3. the thread
    # ran capture events — begin 10 + aten::mm (and the launch it captured) 2000 + end 10
    # = 2020 µs — all graph_capture; L 5 µs launch_overhead; the step's self time outside
    # the region, [120, 200) + [2310, 2400) + [2405, 2410) = 175 µs, untraced.  §4 does
    # not say whether the step's self time *between* the capture calls, [210, 220) +
    # [2220, 2300) = 90 µs, is capture ("inside CUDA-graph capture") or untraced ("self
    # time of a step annotation"), so only graph_capture ≥ 2020 µs is asserted.
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    b.step(main, 1, 0, 3000)
    kernel(b, main, s7, "k1", 0, 20, 100)
    begin = b.op(main, "cudaStreamBeginCapture", 200, 10, cat="cuda_runtime")
    with b.op(main, "aten::mm", 220, 2000):
        b.op(main, "cudaLaunchKernel", 1000, 5, cat="cuda_runtime")
    b.op(main, "cudaStreamEndCapture", 2300, 10, cat="cuda_runtime")
    kernel(b, main, s7, "k2", 2400, 2410, 90)
    trace, r, g = diagnose(b)
    row = only_gap(g, 120, 2410)
    assert trace.kind[begin.index] == K.GRAPH_CAPTURE
    assert primary(g) == C.GRAPH_CAPTURE
    # the capture events: begin 10 + aten::mm 2000 (with its launch) + end 10
    assert share(g, row, C.GRAPH_CAPTURE) >= 2020 * US
    assert share(g, row, C.GRAPH_CAPTURE) + share(g, row, C.UNTRACED) == 2285 * US
    assert share(g, row, C.LAUNCH_OVERHEAD) == 5 * US


def test_graph_instantiate_is_graph_capture():
    # L1 [0, 5) → k1 [20, 120); cudaGraphInstantiate [200, 2200); L [2300, 2305) → k2
    # at 2310.  Gap [120, 2310) = 2190 µs: instantiate 2000 graph_capture, L 5 launch,
    # 185 untraced (no event).
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    kernel(b, main, s7, "k1", 0, 20, 100)
    inst = b.op(main, "cudaGraphInstantiate", 200, 2000, cat="cuda_runtime")
    kernel(b, main, s7, "k2", 2300, 2310, 90)
    trace, r, g = diagnose(b)
    row = only_gap(g, 120, 2310)
    assert primary(g) == C.GRAPH_CAPTURE
    assert share(g, row, C.GRAPH_CAPTURE) == 2000 * US
    assert share(g, row, C.LAUNCH_OVERHEAD) == 5 * US
    assert share(g, row, C.UNTRACED) == 185 * US
    assert g.culprit[row] == inst.index


# ---- 8. short gaps are not forced to launch overhead ----

def test_short_gap_of_op_self_time_is_host_compute():
    # L1 [0, 5) → k1 [20, 30); aten::relu [25, 40) with L [37, 40) inside → k2 [40, 50).
    # Gap [30, 40) = 10 µs (above the 5 µs threshold), rest = the gap.  relu's self time
    # [30, 37) = 7 µs host_compute, L [37, 40) = 3 µs launch_overhead.
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    kernel(b, main, s7, "k1", 0, 20, 10)
    with b.op(main, "aten::relu", 25, 15) as relu:
        kernel(b, main, s7, "k2", 37, 40, 10, launch_dur=3)
    trace, r, g = diagnose(b)
    row = only_gap(g, 30, 40)
    assert primary(g, row) == C.HOST_COMPUTE
    assert share(g, row, C.HOST_COMPUTE) == 7 * US
    assert share(g, row, C.LAUNCH_OVERHEAD) == 3 * US
    assert g.culprit[row] == relu.index


# ---- 9. a device→host copy ----

def test_d2h_copy_that_blocked_while_the_device_was_busy_is_host_sync():
    # L1 [0, 5) → k1 [20, 1020).  cudaMemcpyAsync [30, 1025) issues "Memcpy DtoH" [1020,
    # 1022) and blocks until it is done.  Then aten::add [1030, 1106) with L [1100, 1105)
    # → k2 at 1110.  Gap [1022, 1110) = 88 µs, rest = the gap.
    # 2. the copy blocked while the device was busy: [30, 1022) = 992 µs, in the gap
    #    [1022, 1025) = 3 µs → host_sync = min(88, 995) = 88 µs: the whole gap.
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    kernel(b, main, s7, "k1", 0, 20, 1000)
    cpy = b.launch(main, "cudaMemcpyAsync", 30, 995,
                   kernel=b.memcpy(s7, "Memcpy DtoH (Device -> Pageable)", 1020, 2))
    with b.op(main, "aten::add", 1030, 76):
        kernel(b, main, s7, "k2", 1100, 1110, 50)
    trace, r, g = diagnose(b)
    row = only_gap(g, 1022, 1110)
    assert primary(g) == C.HOST_SYNC
    assert share(g, row, C.HOST_SYNC) == 88 * US
    assert g.blocking[row] == cpy.index and bool(g.drained[row])
    j = r.to_json()["gaps"][row]
    assert j["blocking"]["name"] == "cudaMemcpyAsync"
    assert j["tracelens"]["idle_type"] == C.SYNC_DRAIN


def test_d2h_copy_ending_the_gap_is_an_issue_not_a_sync():
    # L1 [0, 5) → k1 [20, 120); aten::nonzero [20, 200); then L = cudaMemcpyAsync
    # [200, 260) issues "Memcpy DtoH" E [205, 207) and blocks until it is done.
    # Gap [120, 205) = 85 µs, rest = the gap (end(L) + latency ≥ ge).
    # 2. L is the issue of E, not a sync: host_sync 0.  3. nonzero's self time [120, 200)
    #    = 80 µs host_compute; L's time in the gap [200, 205) = 5 µs launch_overhead.
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    kernel(b, main, s7, "k1", 0, 20, 100)
    b.op(main, "aten::nonzero", 20, 180)
    b.launch(main, "cudaMemcpyAsync", 200, 60,
             kernel=b.memcpy(s7, "Memcpy DtoH (Device -> Pageable)", 205, 2))
    kernel(b, main, s7, "k2", 270, 280, 10)
    trace, r, g = diagnose(b)
    row = int(np.flatnonzero(g.start == 120 * US)[0])
    assert int(g.end[row]) == 205 * US
    assert share(g, row, C.HOST_SYNC) == 0
    assert share(g, row, C.HOST_COMPUTE) == 80 * US
    assert share(g, row, C.LAUNCH_OVERHEAD) == 5 * US
    assert primary(g, row) == C.HOST_COMPUTE
    # The next gap [207, 280) = 73 µs, ended by k2 (L2 [270, 275)): the copy call stayed
    # blocked after its copy, so it is a sync for this gap: busy-blocked [205, 207) 2 µs +
    # in-gap [207, 260) 53 µs → host_sync = min(73, 55) = 55 µs.  Remainder 18 µs: L2 5
    # µs and 15 µs without an event, scaled by 18/20 → launch 4.5, untraced 13.5 µs.
    row = int(np.flatnonzero(g.start == 207 * US)[0])
    assert int(g.end[row]) == 280 * US
    assert share(g, row, C.HOST_SYNC) == 55 * US
    assert share(g, row, C.LAUNCH_OVERHEAD) == pytest.approx(4.5 * US, abs=NS)
    assert share(g, row, C.UNTRACED) == pytest.approx(13.5 * US, abs=NS)
    assert primary(g, row) == C.HOST_SYNC


def test_pageable_h2d_copy_that_blocked_while_the_device_was_busy_is_host_sync():
    # L1 [0, 5) → k1 [20, 1020).  cudaMemcpyAsync [30, 1030) copies pageable memory to the
    # device ("Memcpy HtoD (Pageable -> Device)" [1020, 1025)) and returns when it is done.
    # Then aten::add [1035, 1111) with L [1100, 1105) → k2 at 1110.
    # Gap [1025, 1110) = 85 µs, rest = the gap.  2. blocked while the device was busy
    # [30, 1025) 995 µs + in the gap [1025, 1030) 5 µs → host_sync = min(85, 1000) = 85 µs.
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    kernel(b, main, s7, "k1", 0, 20, 1000)
    cpy = b.launch(main, "cudaMemcpyAsync", 30, 1000,
                   kernel=b.memcpy(s7, "Memcpy HtoD (Pageable -> Device)", 1020, 5))
    with b.op(main, "aten::add", 1035, 76):
        kernel(b, main, s7, "k2", 1100, 1110, 50)
    trace, r, g = diagnose(b)
    row = only_gap(g, 1025, 1110)
    assert share(g, row, C.HOST_SYNC) == 85 * US
    assert primary(g) == C.HOST_SYNC and g.blocking[row] == cpy.index


# ---- 10. the device behind the host ----

def test_device_behind_the_host_is_device_wait_for_the_whole_gap():
    # L1 [0, 5) → k1 [20, 1020).  E = k2 [2000, 2100) has no host link.  The host had
    # already issued L3 [100, 105) → k3 [2100, 2200), which returned (105 ≤ ge − latency)
    # and starts after ge.  The host computes [200, 1900) meanwhile.
    # Gap [1020, 2000) = 980 µs: the device is behind the host, the whole gap device_wait.
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    kernel(b, main, s7, "k1", 0, 20, 1000)
    k2 = b.kernel(s7, "k2", 2000, 100)
    kernel(b, main, s7, "k3", 100, 2100, 100)
    b.op(main, "aten::mm", 200, 1700)
    trace, r, g = diagnose(b)
    row = only_gap(g, 1020, 2000)
    assert g.next_op[row] == k2.index and g.waited_for[row] == -1
    assert primary(g) == C.DEVICE_WAIT
    assert share(g, row, C.DEVICE_WAIT) == 980 * US
    assert r.to_json()["gaps"][row]["shares_ns"] == {C.DEVICE_WAIT: 980_000}


def test_host_line_innermost_op_skips_instant_events_and_ended_annotations():
    """The innermost op at each instant of a thread: a zero-length marker owns no time,
    and an annotation that outlives the frame it started in stays innermost after the
    frame ends."""
    from tb_perfdiag.analysis.attribution.hostline import build_hostlines, event_buckets
    b = TraceBuilder()
    main = b.thread("python main")
    outer = b.op(main, "outer", 0, 100)
    b.op(main, "marker", 50, 0)
    inner = b.op(main, "inner", 60, 10)
    frame = b.op(main, "frame", 200, 20, cat="python_function")
    ann = b.op(main, "record_param_comms", 210, 30, cat="user_annotation")
    t = b.build()
    line = build_hostlines(t, event_buckets(t, np.zeros(t.n_events, np.int8)),
                           [int(t.track[outer.index])])[int(t.track[outer.index])]
    at = lambda us: line.inner_at(int(t.ts[outer.index]) + int(us * 1e6))  # noqa: E731
    assert at(10) == outer.index
    assert at(55) == outer.index            # the marker at 50 µs lasts no time
    assert at(65) == inner.index
    assert at(75) == outer.index
    assert at(205) == frame.index
    assert at(215) == ann.index
    assert at(230) == ann.index             # the frame ended at 220 µs; the annotation goes on
    assert at(300) == -1


_HOST_NAMES = [("aten::mm", "cpu_op"), ("cudaLaunchKernel", "cuda_runtime"),
               ("cudaStreamSynchronize", "cuda_runtime"), ("cudaMalloc", "cuda_runtime"),
               ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation"),
               ("my_region", "user_annotation"), ("train.py(10): step", "python_function"),
               ("ThreadpoolListener::Record", "cpu_op"), ("aten::copy_", "cpu_op")]


def _random_thread(b, thread, rng, t0, t1, depth=0):
    """Random nested events in [t0, t1): siblings that touch or leave holes, instant
    events, idle markers, and annotations that outlive the frame they start in."""
    t = t0 + float(rng.integers(0, 3))
    while t < t1 - 1:
        dur = float(rng.choice([0, 1, 2, 5, 9, 20]))
        dur = min(dur, t1 - t)
        name, cat = _HOST_NAMES[int(rng.integers(0, len(_HOST_NAMES)))]
        b.op(thread, name, t, dur, cat if b.kineto else None)   # XSpace: kinds by name
        if dur >= 5 and depth < 4:
            _random_thread(b, thread, rng, t, t + dur, depth + 1)
        if dur >= 2 and rng.random() < 0.1:
            # starts inside this event and outlives it
            b.op(thread, "record_param_comms", t + dur - 1, float(rng.integers(2, 8)),
                 "user_annotation" if b.kineto else None)
        t += dur + float(rng.choice([0, 0, 1, 3]))


def _random_trace(seed: int, threads: int = 2):
    rng = np.random.default_rng(seed)
    b = TraceBuilder()
    for k in range(threads):
        _random_thread(b, b.thread(f"thread {k}"), rng, 0.0, 400.0)
    return b.build()


@pytest.mark.parametrize("seed", range(6))
def test_host_timeline_in_one_c_pass_is_the_numpy_one(seed, thinning):
    """The native timeline (``host_segments``) and the numpy one agree boundary by
    boundary: the innermost op, its bucket, and per bucket the segments, their
    cumulative time (every 8th of it where thinned, as the C pass writes it) and their
    total, on random nested threads."""
    from tb_perfdiag.analysis.attribution import hostline as H
    native = H._native_segments()
    if native is None:
        pytest.skip("the native extension is not built (setup.py build_ext)")
    t = _random_trace(seed)
    bk = H.event_buckets(t, np.zeros(t.n_events, np.int8))
    assert len(set(bk.tolist())) >= 5
    for lo, hi in t.track_slices(t.host_tracks()):
        want, got = H.track_segments(t, lo, hi, bk), native(t, lo, hi, bk)
        for w, g in zip(want[:3], got[:3]):
            np.testing.assert_array_equal(w, g)
            assert w.dtype == g.dtype
        assert len(want[3]) == len(got[3]) == len(H.BUCKETS)
        # the native pass makes no columns for the bucket with the most segments (the
        # first such), which HostLine leaves out; every other bucket's are numpy's
        busiest = int(np.argmax([w.shape[0] for w in want[3]]))
        assert [b for b, g in enumerate(got[3]) if g is None] == [busiest]
        assert [b for b, g in enumerate(got[4]) if g is None] == [busiest]
        thin = thinning == "thinned"
        assert got[6] == [b != busiest and thin for b in range(len(H.BUCKETS))]
        for b in range(len(H.BUCKETS)):
            if b == busiest:
                assert got[5][b] == 0
                continue
            assert got[5][b] == int(want[4][b][-1])
            for w, g in ((want[3][b], got[3][b]), (want[4][b][::8] if thin else want[4][b],
                                                    got[4][b])):
                np.testing.assert_array_equal(w, g)
                assert w.dtype == g.dtype
        # a line of the native pass is the line of numpy's columns
        a, z = H.HostLine(0, *got[:5], bucket_total=got[5], thinned=got[6]), H.HostLine(0, *want)
        assert a.thinned == z.thinned and a.bucket_total == z.bucket_total
        for x, y in zip(a.bucket_cum, z.bucket_cum):
            assert (x is None and y is None) or x.tolist() == y.tolist()


@pytest.mark.parametrize("seed", range(6))
def test_host_timeline_of_overlapping_events_in_c_is_the_numpy_one(seed, monkeypatch):
    """The C pass takes a timeline's ends in order from a heap of the events open at
    once, not from a sorted column: on threads whose events overlap at random (many open
    together, ends in any order, equal starts and ends, zero-length events) its
    boundaries, innermost ops and buckets are numpy's."""
    from tb_perfdiag.analysis.attribution import hostline as H
    native = H._native_segments()
    if native is None:
        pytest.skip("the native extension is not built (setup.py build_ext)")
    rng = np.random.default_rng(100 + seed)
    b = TraceBuilder()
    th = b.thread("busy")
    for _ in range(600):
        name, cat = _HOST_NAMES[int(rng.integers(0, len(_HOST_NAMES)))]
        b.op(th, name, float(rng.integers(0, 400)), float(rng.choice([0, 1, 3, 7, 40, 150])),
             cat)
    t = b.build()
    bk = H.event_buckets(t, np.zeros(t.n_events, np.int8))
    (lo, hi), = t.track_slices(t.host_tracks())
    want, got = H.track_segments(t, lo, hi, bk), native(t, lo, hi, bk)
    assert want[0].shape[0] > 300
    for w, g in zip(want[:3], got[:3]):
        np.testing.assert_array_equal(w, g)
    # starts out of order are refused by the C pass (never in a model): numpy's walk answers
    shuffled = SimpleNamespace(ts=t.ts[::-1].copy(), dur=t.dur, parent=t.parent, kind=t.kind)
    with pytest.raises(ValueError, match="out of order"):
        H.native_fn("host_segments")(shuffled.ts[lo:hi], t.dur[lo:hi],
                                     t.parent[lo:hi].astype(np.int32), bk[lo:hi].astype(np.int8),
                                     t.kind[lo:hi], lo, H.B_IDLE, 0, len(H.BUCKETS),
                                     H._THIN_ABOVE, H._THIN_EVERY)
    assert native(shuffled, lo, hi, bk) is None
    # where the C pass refuses a track, the line is numpy's walk
    seen = []
    monkeypatch.setattr(H, "_native_segments", lambda: lambda *a: None)
    monkeypatch.setattr(H, "track_segments", lambda *a: seen.append(a) or want)
    line = H.build_hostlines(t, bk, t.host_tracks())[int(t.host_tracks()[0])]
    assert len(seen) == 1 and line.seg_start is want[0]


@pytest.mark.parametrize("seed", range(6))
def test_top_self_ops_in_one_c_pass_are_the_numpy_ones(seed):
    """Per window, a thread's ops with the most self time (``detail.top_self_ops``): the
    C pass and the numpy one give the same rows, windows before, across and after the
    timeline, empty and overlapping ones included, with ties of time broken by op."""
    from tb_perfdiag.analysis.gaps import detail as DT
    from tb_perfdiag.analysis.attribution import hostline as H
    from tb_perfdiag.trace.build import native_fn
    if native_fn("top_self_ops") is None:
        pytest.skip("the native extension is not built (setup.py build_ext)")
    t = _random_trace(seed)
    bk = H.event_buckets(t, np.zeros(t.n_events, np.int8))
    lines = H.build_hostlines(t, bk, t.host_tracks())
    rng = np.random.default_rng(seed)
    lo, hi = int(t.ts.min()), int((t.ts + t.dur).max())
    a = rng.integers(lo - 10**7, hi + 10**7, 300)
    b = a + rng.integers(-10**6, 10**8, 300)
    a[:20] = lo - 10**6                     # one window over the whole timeline, twice
    b[:20] = hi + 10**6
    rows = 0
    for per in (1, 3, 8):
        for line in lines.values():
            want = DT._top_self_ops(line, a, b, per)
            got = DT.top_self_ops(line, a, b, per)
            for w, g in zip(want, got):
                np.testing.assert_array_equal(w, g)
                assert g.dtype == np.int64
            rows += got[0].shape[0]
            # at most ``per`` per window, most time first
            assert (np.bincount(got[0]) <= per).all() if got[0].size else True
    assert rows > 1000
    # equal times: the lower op first, in both
    line = next(iter(lines.values()))
    line2 = H.HostLine(line.track, np.array([0, 10, 20, 30, 40], np.int64),
                       np.array([7, 3, 9, 3, -1], np.int32), np.zeros(5, np.int8),
                       [np.zeros(0, np.int32)] * len(H.BUCKETS),
                       [np.zeros(1, np.int64)] * len(H.BUCKETS))
    for fn in (DT._top_self_ops, DT.top_self_ops):
        g, op, st = fn(line2, np.array([0, 5], np.int64), np.array([40, 40], np.int64), 2)
        assert g.tolist() == [0, 0, 1, 1]
        assert op.tolist() == [3, 7, 3, 9] and st.tolist() == [20, 10, 20, 10]


@pytest.mark.parametrize("seed", range(6))
def test_values_passed_down_in_one_pass_are_the_levels_ones(seed, monkeypatch):
    """Each event's bucket (inherited from the ops around it) and its innermost
    annotation, from the one pass in event order (C) and from the nesting levels
    (numpy), on random nested threads with annotations, data loading, syncs, allocations
    and idle markers."""
    from tb_perfdiag.analysis.device_time import annotations as A
    from tb_perfdiag.analysis.attribution import hostline as H
    from tb_perfdiag.trace.build import native_fn
    if native_fn("parent_down_bucket") is None:
        pytest.skip("the native extension is not built (setup.py build_ext)")
    t = _random_trace(seed)
    memcpy = np.zeros(t.n_events, np.int8)
    got_b, got_a = H.event_buckets(t, memcpy), A.nearest_annotation(t)
    monkeypatch.setenv("TB_PERFDIAG_NO_NATIVE", "1")
    want_b, want_a = H.event_buckets(t, memcpy), A.nearest_annotation(t)
    assert (t.depth >= 3).any() and (want_a >= 0).any() and (want_a < 0).any()
    np.testing.assert_array_equal(got_b, want_b)
    np.testing.assert_array_equal(got_a, want_a)


def _walked_path(t, e: int) -> tuple:
    """Names of the user annotations enclosing ``e`` (itself included), outermost
    first, by a walk up its parents."""
    from tb_perfdiag.trace import EventKind as EK
    names = []
    while e >= 0:
        if int(t.kind[e]) in (int(EK.ANNOTATION), int(EK.DATA)):
            names.append(t.strings[int(t.name[e])])
        e = int(t.parent[e])
    return tuple(names[::-1])


@pytest.mark.parametrize("seed", range(6))
def test_annotation_paths_level_by_level_are_each_walked_alone(seed):
    """The annotation paths behind the ops, worked out once per (enclosing path, name) a
    level at a time, are each annotation's own walk up its enclosing events."""
    from tb_perfdiag.analysis.device_time import annotations as A
    t = _random_trace(seed)
    ann = A.nearest_annotation(t)
    u = np.flatnonzero(A.is_annotation(t))
    paths, index = [], {}

    def intern(p):
        if p not in index:
            index[p] = len(paths)
            paths.append(p)
        return index[p]
    got = A._annotation_paths(t, ann, u, intern)
    want = [_walked_path(t, int(x)) for x in u.tolist()]
    assert max(len(w) for w in want) >= 3
    assert [paths[i] for i in got.tolist()] == want
    assert A._annotation_paths(t, ann, u[:0], intern).shape == (0,)   # no annotated op


@pytest.mark.parametrize("seed", range(6))
def test_entry_walk_in_c_is_the_numpy_one(seed, monkeypatch):
    """The flow that entered each host event's work, walked up its parents in C, equals
    the numpy walk: flows into nested events of other threads, thread-pool regions opened
    by a flow and closed again, events in no region."""
    from tb_perfdiag.analysis.attribution import links as AT
    from tb_perfdiag.trace.build import native_fn
    if native_fn("entry_walk") is None:
        pytest.skip("the native extension is not built (setup.py build_ext)")
    rng = np.random.default_rng(seed)
    b = TraceBuilder("xspace")
    py, ex = b.thread("python"), b.thread("executor")
    _random_thread(b, py, rng, 0.0, 400.0)
    t0 = 0.0
    while t0 < 380:
        rec = b.op(py, "Record", t0, 0)
        start = b.op(ex, AT.START_REGION, t0 + 1, 0)
        if rng.random() < 0.8:
            b.flow(rec, start)
        with b.op(ex, "thunk", t0 + 2, 10):
            inner = b.op(ex, "launch", t0 + 3, 2)
            b.op(ex, "enqueue", t0 + 3.5, 1)                  # its flow is its parent's
            if rng.random() < 0.3:
                b.flow(b.op(py, "Record", t0 + 0.5, 0), inner)
        b.op(ex, AT.STOP_REGION, t0 + 13, 0)
        b.op(ex, "outside", t0 + 14, 2)
        t0 += 20.0
    t = b.build()
    linked = AT.incoming_host_link(t)
    regions = AT.thread_regions(t, linked)
    assert regions
    ev = np.concatenate((np.flatnonzero(AT.host_side(t)), [-1]))
    got = AT.entry_of(t, linked, regions, ev)
    monkeypatch.setenv("TB_PERFDIAG_NO_NATIVE", "1")
    want = AT.entry_of(t, linked, regions, ev)
    assert (want >= 0).sum() > 10 and (want < 0).sum() > 10
    np.testing.assert_array_equal(got, want)


@pytest.fixture(params=["whole", "thinned"])
def thinning(request, monkeypatch):
    """Each bucket's running time kept whole, or (as for millions of segments) every
    8th segment's only, whatever the bucket's size."""
    from tb_perfdiag.analysis.attribution import hostline as H
    if request.param == "thinned":
        monkeypatch.setattr(H, "_THIN_ABOVE", 0)
    return request.param


def _random_line(seed, span=400.0):
    """(the rng, the host timeline of one random nested thread over ``span`` µs)."""
    from tb_perfdiag.analysis.attribution import hostline as H
    rng = np.random.default_rng(seed)
    b = TraceBuilder()
    _random_thread(b, b.thread("main"), rng, 0.0, span)
    t = b.build()
    bk = H.event_buckets(t, np.zeros(t.n_events, np.int8))
    tr = int(t.host_tracks()[0])
    return rng, H.build_hostlines(t, bk, [tr])[tr]


def test_a_thinned_line_holds_an_eighth_of_its_running_times(monkeypatch):
    """Thinned, each bucket keeps every 8th running time: a line's bytes (what the
    server's cache counts) fall by that, and its totals stay."""
    from tb_perfdiag.analysis.attribution import hostline as H
    _, whole = _random_line(1)
    monkeypatch.setattr(H, "_THIN_ABOVE", 0)
    _, thin = _random_line(1)
    saved = 0
    for b, c in enumerate(whole.bucket_cum):
        if c is not None:
            assert thin.bucket_cum[b].tolist() == c[::8].tolist()
            saved += c.nbytes - thin.bucket_cum[b].nbytes
    assert saved > 0 and whole.nbytes() - thin.nbytes() == saved
    assert thin._totals() == whole._totals() and thin.busy_ns() == whole.busy_ns()


@pytest.mark.parametrize("seed", range(4))
def test_time_except_some_buckets_is_time_by_bucket_summed_over_the_rest(seed, thinning):
    """``time_except`` (the busiest-thread scan's work per window) equals the windows'
    ``time_by_bucket`` summed over the buckets not skipped, for skip sets with and
    without the implicit bucket, windows before and after the thread and reversed."""
    from tb_perfdiag.analysis.attribution import hostline as H
    rng, line = _random_line(seed)
    s = line.seg_start
    a = rng.integers(int(s[0]) - 10**7, int(s[-1]) + 10**7, 300)
    z = a + rng.integers(-10**7, 10**8, 300)
    full = line.time_by_bucket(a, z)
    skips = [(H.B_IDLE, H.B_WAIT, H.B_SYNC), (line.implicit,), (line.implicit, H.B_SYNC),
             tuple(x for x in range(len(H.BUCKETS)) if x != line.implicit), ()]
    for skip in skips:
        keep = [x for x in range(len(H.BUCKETS)) if x not in skip]
        np.testing.assert_array_equal(line.time_except(a, z, skip), full[:, keep].sum(axis=1))


@pytest.mark.parametrize("seed", range(4))
def test_time_by_bucket_is_each_windows_segments_summed(seed, thinning):
    """A thread's time per bucket inside windows (the busiest bucket kept as no column of
    its own, read off the segments' span) equals the window's overlap with each segment
    summed by bucket, before the first event and after the last included."""
    from tb_perfdiag.analysis.attribution import hostline as H
    rng, line = _random_line(seed)
    assert line.bucket_segs[line.implicit] is None
    assert any(line.thinned) == (thinning == "thinned")
    s, kb = line.seg_start, line.seg_bucket
    ends = np.append(s[1:], np.iinfo(np.int64).max)
    a = rng.integers(int(s[0]) - 10**7, int(s[-1]) + 10**7, 200)
    z = a + rng.integers(0, 10**8, 200)
    got = line.time_by_bucket(a, z)
    for i in range(a.shape[0]):
        want = np.zeros(len(H.BUCKETS), np.int64)
        want[H.B_IDLE] += max(min(z[i], s[0]) - a[i], 0)
        ov = np.maximum(np.minimum(ends, z[i]) - np.maximum(s, a[i]), 0)
        np.add.at(want, kb, ov)
        np.testing.assert_array_equal(got[i], want)
    assert line.busy_ns() == sum(int(x) for j, x in enumerate(
        np.bincount(kb[:-1], weights=np.diff(s), minlength=len(H.BUCKETS)).astype(np.int64))
        if j != H.B_IDLE)

# ---- short gaps: read off the busy set, per step window and per device ----

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_short_gaps_per_step_and_device_match_a_count_of_the_holes(seed):
    """Gaps under the threshold are not kept: each step window's count and time of the
    ones starting in it, and each device's totals, are read off the busy set.  Checked
    against the holes of the ops' union counted one by one, on two GPUs whose kernels
    overlap, touch and leave holes on both sides of the threshold."""
    rng = np.random.default_rng(seed)
    b = TraceBuilder()
    main = b.thread("python main")
    streams = [(0, b.stream(gpu=0, stream=7)), (0, b.stream(gpu=0, stream=8)),
               (1, b.stream(gpu=1, stream=7))]
    for n in range(3):
        b.step(main, n + 1, n * 1000, 1000)
    ops = {0: [], 1: []}
    for gpu, s in streams:
        t = 5.0 + rng.integers(0, 20)
        while t < 2900:
            dur = float(rng.integers(1, 30))
            kernel(b, main, s, "k", max(t - 4, 0), t, dur, launch_dur=1)
            ops[gpu].append((t, t + dur))
            t += dur + float(rng.choice([0, 0, 1, 2, 4, 6, 12, 40]))
    trace, r, g = diagnose(b)
    threshold = r.threshold_us * US
    st = r.steps
    for gpu in (0, 1):
        dev = list(r.devices.name).index(f"GPU {gpu}")
        iv = sorted(ops[gpu])
        holes, end = [], iv[0][1]
        for s, e in iv[1:]:
            if s > end:
                holes.append((end * US, s * US))
            end = max(end, e)
        short = [(a, z) for a, z in holes if z - a < threshold]
        assert short and len(short) < len(holes), "the draw must have both kinds"
        assert r.devices.small_count[dev] == len(short)
        assert r.devices.small_total[dev] == sum(z - a for a, z in short)
        for k in range(len(st.ids)):
            wa, wz = int(st.win_start[k, dev]), int(st.win_end[k, dev])
            inside = [(a, z) for a, z in short if wa <= a < wz]
            assert st.small_count[k, dev] == len(inside)
            assert st.small_total[k, dev] == sum(z - a for a, z in inside)


@pytest.mark.parametrize("block", [1, 3, 7, 1 << 20])
def test_short_gaps_a_block_of_holes_at_a_time(block, monkeypatch):
    """The running counts behind ``short_gaps`` are taken a block of holes at a time:
    for any block size, windows before, over, inside and after the busy set (empty ones
    too, at both ends and on block boundaries) get the holes under the threshold that
    start in them, counted one by one."""
    from tb_perfdiag.analysis.gaps import busy as G
    real = G._short_before
    monkeypatch.setattr(G, "_short_before", lambda *a: real(*a, block=block))
    rng = np.random.default_rng(block)
    ln = rng.integers(1, 9, 40)
    hole = rng.choice([1, 2, 3, 10, 20], 39)
    us = np.concatenate(([0], np.cumsum(ln[:-1] + hole))).astype(np.int64)
    ue = us + ln
    thr = 10
    wb = np.sort(np.concatenate((rng.integers(-20, int(ue[-1]) + 20, 30), ue[[0, 7, 20]],
                                 [ue[-2], ue[-1]])))
    we = wb + rng.integers(0, 60, wb.shape[0])
    n, t, tn, tt = G.short_gaps(us, ue, thr, wb, we)
    hs, he = ue[:-1], us[1:]
    short = (he - hs) < thr
    assert tn == short.sum() and tt == (he - hs)[short].sum() and 0 < tn < 39
    for i in range(wb.shape[0]):
        inside = short & (hs >= wb[i]) & (hs < we[i])
        assert n[i] == inside.sum() and t[i] == (he - hs)[inside].sum()


def test_scattering_in_time_order_matches_the_sort():
    """Ops already in time order skip the (group, time) sort: runs, blocks and neighbour
    pairs are those the sort gives.  An unscoped op (pid −1) at the end forces the sort;
    it counts for nothing, so the answers must agree."""
    from tb_perfdiag.analysis.device_time.annotations import _scattering
    rng = np.random.default_rng(7)
    paths = [("a",), ("a", "b"), ("a", "c"), ("d",), ("d", "e", "f")]
    prefix = {}
    for p in paths:
        for k in range(1, len(p) + 1):
            prefix.setdefault(p[:k], len(prefix))
    for rising_groups, rising_ts in ((True, True), (False, True), (False, False)):
        n = 5000
        ts = np.cumsum(rng.integers(0, 3, n)).astype(np.int64)      # ties included
        if not rising_ts:          # two streams' ops, each in time order, one after other
            ts = np.concatenate((ts[0::2], ts[1::2]))
        group = np.sort(rng.integers(0, 6, n)) if rising_groups else rng.integers(0, 6, n)
        pid = rng.integers(0, len(paths), n).astype(np.int32)
        fast = _scattering(paths, prefix, len(prefix), pid, [group.astype(np.int64)], ts)
        slow = _scattering(paths, prefix, len(prefix), np.append(pid, np.int32(-1)),
                           [np.append(group, 0).astype(np.int64)], np.append(ts, 0))
        # the starts read through the ops' event indices, in a longer column
        ops = np.arange(n) * 3 + 1
        wide = np.full(3 * n + 2, -5, np.int64)
        wide[ops] = ts
        via = _scattering(paths, prefix, len(prefix), pid, [group.astype(np.int64)], wide, ops)
        for other in (slow, via):
            assert fast[0].tolist() == other[0].tolist()
            assert fast[1].tolist() == other[1].tolist()
            assert sorted(map(tuple, fast[2].tolist())) == sorted(map(tuple, other[2].tolist()))
        assert fast[0].sum() > len(prefix)       # runs were split: the case is not trivial


@pytest.mark.parametrize("block", [1, 5, 1 << 20])
def test_op_groups_key_device_step_and_run(block, monkeypatch):
    """The ops' (device, step, program run) groups are written a block at a time as one
    key (int32 where every key fits): two ops share a key exactly when they share all
    three, with and without runs, and through the numbered pairs where the runs are too
    far apart to fold in."""
    from tb_perfdiag.analysis.device_time import annotations as A
    monkeypatch.setattr(A, "_BLOCK", block)
    rng = np.random.default_rng(block)
    n, n_steps = 60, 3
    trace = SimpleNamespace(track=rng.integers(0, 4, 100).astype(np.int32),
                            track_device=np.array([0, 1, 1, 2], np.int32),
                            devices=[0, 1, 2])
    ops = np.sort(rng.choice(100, n, replace=False))
    st = rng.integers(0, n_steps + 1, n).astype(np.int32)
    dev = trace.track_device[trace.track[ops]]
    # keys as int32 where all fit (runs near int32's top folded in from their least),
    # int64 past that, numbered pairs past 62 bits
    for run, width in ((None, np.int32), (rng.integers(7, 10, n).astype(np.int64), np.int32),
                       (rng.integers(2**31 - 9, 2**31 - 1, n).astype(np.int64), np.int32),
                       (rng.choice(np.array([0, 2**30], np.int64), n), np.int64),
                       (rng.choice(np.array([-2**61, 0, 2**61], np.int64), n), np.int64)):
        got = A._op_groups(trace, ops, st, n_steps, run)
        assert got.shape == (n,) and got.dtype == width
        want = list(zip(dev.tolist(), st.tolist(), [0] * n if run is None else run.tolist()))
        for i in range(n):
            for j in range(n):
                assert (got[i] == got[j]) == (want[i] == want[j])


@pytest.mark.parametrize("rel", [
    "kineto_launch_bound/worker0.1795400183000.pt.trace.json",
    "xla_gpu_recompile/plugins/profile/2026_11_22_06_00_00/synthhost.xplane.pb"])
def test_device_time_by_annotation_does_not_depend_on_the_block(rel, monkeypatch):
    """The per-(path, step) sums go a block of ops at a time; blocks of 7 ops (scoped
    and unscoped ops mixed within and across them) give the table one block gives."""
    import os
    from tb_perfdiag.analysis.device_time import annotations as ann
    path = os.path.join(os.path.dirname(__file__), "..", "testdata", "synthetic", "logdir", rel)
    whole = tb_perfdiag.diagnose(path).annotations
    monkeypatch.setattr(ann, "_BLOCK", 7)
    cut = tb_perfdiag.diagnose(path).annotations
    assert whole.unscoped_ops and len(whole.paths)          # both kinds of op are there
    for f in ("paths", "inclusive", "exclusive", "ops", "per_step_inclusive",
              "per_step_exclusive", "unscoped", "unscoped_ops", "unscoped_per_step",
              "scattered", "device_runs"):
        a, b = getattr(whole, f), getattr(cut, f)
        assert (np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b), f


@pytest.mark.parametrize("seed", range(4))
def test_a_line_with_split_boundaries_answers_as_the_plain_one(seed, monkeypatch, thinning):
    """A thread's timeline whose boundaries are held split (``SortedTimes``, as a long
    line's are) answers every question as the same line held plain: time per bucket and
    except some, pieces and segments of windows, the op at a time, totals, and the top
    self-time ops in C (windows in groups of any size) and in numpy."""
    from tb_perfdiag.analysis.gaps import detail as DT
    from tb_perfdiag.analysis import sortedtimes as S
    from tb_perfdiag.analysis.attribution import hostline as H
    rng, plain = _random_line(seed, 20_000.0)            # 20 ms: runs of 4.3 ms each
    monkeypatch.setattr(S, "_COMPACT_FROM", 0)
    monkeypatch.setattr(S, "_RUN_FROM", 0)
    _, split = _random_line(seed, 20_000.0)
    assert isinstance(split.seg_start, S.SortedTimes) and split.seg_start.high.shape[0] > 1
    assert not isinstance(plain.seg_start, S.SortedTimes)
    s = plain.seg_start
    a = rng.integers(int(s[0]) - 10**9, int(s[-1]) + 10**9, 400)
    z = a + rng.integers(-10**6, 10**11, 400)
    np.testing.assert_array_equal(split.time_by_bucket(a, z), plain.time_by_bucket(a, z))
    for skip in [(H.B_IDLE, H.B_WAIT, H.B_SYNC), (plain.implicit,), ()]:
        np.testing.assert_array_equal(split.time_except(a, z, skip),
                                      plain.time_except(a, z, skip))
    for x, y in zip(split.pieces(a, np.maximum(a, z)), plain.pieces(a, np.maximum(a, z))):
        np.testing.assert_array_equal(x, y)
    for i in range(0, 400, 37):
        for x, y in zip(split.segments(int(a[i]), int(z[i])),
                        plain.segments(int(a[i]), int(z[i]))):
            np.testing.assert_array_equal(x, y)
        assert split.inner_at(int(a[i])) == plain.inner_at(int(a[i]))
    assert split._totals() == plain._totals() and split.busy_ns() == plain.busy_ns()
    for per, decode in ((1, 1 << 20), (3, 1 << 20), (3, 40)):
        # windows taken a group at a time, whose boundaries are made plain for each call
        monkeypatch.setattr(DT, "_DECODE", decode)
        want = DT._top_self_ops(plain, a, z, per)
        for got in (DT.top_self_ops(split, a, z, per), DT._top_self_ops(split, a, z, per)):
            for w, g in zip(want, got):
                np.testing.assert_array_equal(w, g)
        # windows inside the line only (the boundaries read start past its first), one
        # window, and none
        n = len(s)
        inner_a = rng.integers(int(s[n // 3]), int(s[n // 2]), 50)
        inner_z = inner_a + rng.integers(0, int(s[-1]) - int(s[n // 2]), 50)
        short_z = inner_a + rng.integers(1, 3 * 10**6, 50)          # a few segments each
        for wa, wz in ((inner_a, inner_z), (inner_a, short_z), (a[5:6], z[5:6]),
                       (inner_a[:1], short_z[:1])):
            for w, g in zip(DT._top_self_ops(plain, wa, wz, per),
                            DT.top_self_ops(split, wa, wz, per)):
                np.testing.assert_array_equal(w, g)
        assert all(x.shape == (0,) for x in DT.top_self_ops(split, a[:0], z[:0], per))
