"""The Chrome-trace overlay: the diagnosis' tracks over the real events around a gap."""
from __future__ import annotations

import json

import pytest

import tb_perfdiag
from tb_perfdiag.render import chrome
from tb_perfdiag.testing import TraceBuilder


def _sync_then_compute(n_busy_threads: int = 0):
    """Step 1: a kernel, a stream sync that returns when it ends (0.1 ms), 0.25 ms of host
    compute deep in Python frames, then the launch of the kernel that ends the gap.
    ``n_busy_threads`` worker threads keep busy all along."""
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream(gpu=0, stream=7)
    ev = {}
    with b.step(main, 1, 0, 600):
        ev["k1"] = b.kernel(s7, "gemm_1", 10, 90)
        ev["l1"] = b.launch(main, "cudaLaunchKernel", 5, 3, kernel=ev["k1"])
        ev["sync"] = b.op(main, "cudaStreamSynchronize", 20, 82, cat="cuda_runtime")
        with b.op(main, "spawn_main", 110, 290, cat="python_function"):
            with b.op(main, "_bootstrap", 111, 288, cat="python_function"):
                ev["inner"] = b.op(main, "aten::nonzero", 120, 260)
        ev["k2"] = b.kernel(s7, "gemm_2", 410, 80)
        ev["l2"] = b.launch(main, "cudaLaunchKernel", 402, 4, kernel=ev["k2"])
    for i in range(n_busy_threads):
        t = b.thread(f"worker pool/{i}")
        b.op(t, f"busy_{i}", 0, 100 + 10 * i)
    return b, ev


@pytest.fixture(scope="module")
def report():
    b, ev = _sync_then_compute(n_busy_threads=20)
    return tb_perfdiag.diagnose(b.build()), ev


def _largest(report):
    """The largest gap between two device ops (not the lead-in to the first one)."""
    r = report.to_json(all_gaps=False)
    return next(g for g in r["gaps"] if g["prev_op"] and g["next_op"])


def test_overlay_around_a_gap_has_real_events_and_the_diagnosis(report):
    rep, ev = report
    gap = _largest(rep)
    ov = rep.to_chrome_trace(gap=gap["id"])
    json.dumps(ov)                               # plain JSON
    events = ov["traceEvents"]
    names = {e["name"] for e in events if e.get("ph") == "X"}
    # the real events of the window: both kernels, the sync, the op the host was in
    assert {"gemm_1", "gemm_2", "cudaStreamSynchronize", "aten::nonzero"} <= names
    # the gap slice carries its cause, shares and evidence
    g = next(e for e in events if e.get("cat") == "gap" and e["args"]["gap"] == gap["id"])
    assert g["args"]["cause"] == gap["cause"] and g["name"] == gap["cause_label"]
    assert g["args"]["shares"] and g["args"]["evidence"] == gap["evidence"]
    assert abs(g["ts"] * 1000 - gap["start_ns"]) <= 1 and abs(g["dur"] * 1000 - gap["duration_ns"]) <= 1
    # steps, the time anchor at the trace origin, the blocking call on the Syncs track
    assert any(e.get("cat") == "step" and e["name"] == "Step 1" for e in events)
    assert any(e.get("ph") == "i" and e["ts"] == 0 for e in events)
    syncs = [e for e in events if e.get("cat") == "blocking"]
    assert syncs and all(e.get("cname") == "terrible" for e in syncs)
    real_sync = [e for e in events if e.get("name") == "cudaStreamSynchronize" and e.get("cat") == "sync"]
    assert real_sync and real_sync[0]["cname"] == "terrible"


def test_waited_for_launch_to_device_op_is_a_bound_flow(report):
    rep, ev = report
    gap = _largest(rep)
    events = rep.to_chrome_trace(gap=gap["id"])["traceEvents"]
    out = [e for e in events if e.get("flow_out")]
    inn = [e for e in events if e.get("flow_in")]
    # (the lead-in to gemm_1 is a gap too: its launch has an arrow of its own)
    ops = [next(e for e in inn if e["bind_id"] == x["bind_id"]) for x in out
           if x["name"] == gap["waited_for"]["name"]]
    op = next(e for e in ops if e["name"] == gap["next_op"]["name"])
    launch = next(x for x in out if x["bind_id"] == op["bind_id"])
    assert op["name"] == gap["next_op"]["name"] == "gemm_2"
    # the op is on a device process, the launch on a host one
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert "device" in procs[op["pid"]] and procs[launch["pid"]].startswith("Host")


def test_host_threads_that_matter_first_and_bounded(report):
    rep, ev = report
    gap = _largest(rep)
    ov = rep.to_chrome_trace(gap=gap["id"])
    threads = [e["args"]["name"] for e in ov["traceEvents"] if e.get("name") == "thread_name"
               and e["pid"] >= chrome.PID_HOST]
    assert threads[0] == "python main"                     # the issuing thread
    assert len(threads) == chrome.MAX_HOST_THREADS
    assert ov["otherData"]["host_threads_left_out"] == 21 - chrome.MAX_HOST_THREADS
    # the busiest workers come before quieter ones
    workers = [int(t.split("/")[1]) for t in threads[1:]]
    assert workers == sorted(workers, reverse=True)


def test_view_holds_the_gap_the_launch_and_the_blocking_call(report):
    rep, ev = report
    d = rep.diagnosis
    row = 0
    window, view = chrome.gap_window(d, row)
    g = d.gaps
    assert window[0] <= view[0] <= g.start[row] and g.end[row] <= view[1] <= window[1]
    for e in (int(g.waited_for[row]), int(g.blocking[row])):
        r = int(d.refs.row([e])[0])
        assert view[0] <= d.refs.ts[r] and d.refs.ts[r] + d.refs.dur[r] <= view[1]
    v = chrome.viewer_json(d, row)
    assert v["view_ms"] == [view[0] / 1e9, view[1] / 1e9]
    assert "profile_view_ms" not in v                       # Kineto: no Profile session


def test_profile_viewer_times_are_offset_by_the_origin():
    b = TraceBuilder("xspace")
    py, s = b.thread("python"), b.stream(gpu=0, stream=7)
    with b.step(py, 3, 1000, 500):
        b.launch(py, "cuLaunchKernel", 1010, 4, kernel=b.kernel(s, "fusion_1", 1020, 50))
        b.launch(py, "cuLaunchKernel", 1300, 4, kernel=b.kernel(s, "fusion_2", 1310, 50))
    rep = tb_perfdiag.diagnose(b.build())
    d = rep.diagnosis
    assert len(d.gaps) and d.source["format"] == "xspace"
    v = chrome.viewer_json(d, 0)
    off = d.source["origin_ps"] / 1e9
    assert v["profile_view_ms"][0] == pytest.approx(v["view_ms"][0] + off)
    assert v["profile_view_ms"][1] == pytest.approx(v["view_ms"][1] + off)


def test_whole_overlay_without_events_lists_every_gap(report):
    rep, _ = report
    ov = rep.to_chrome_trace()
    gaps = [e for e in ov["traceEvents"] if e.get("cat") == "gap"]
    assert len(gaps) == len(rep.diagnosis.gaps)
    assert not any(e.get("pid", 0) >= chrome.PID_DEVICE for e in ov["traceEvents"])


def test_long_names_are_cut_with_the_full_name_in_args():
    b = TraceBuilder()
    long = "x" * 100_000
    main, s7 = b.thread(long), b.stream()
    with b.step(main, 1, 0, 300):
        b.launch(main, "cudaLaunchKernel", 1, 2, kernel=b.kernel(s7, "k1", 5, 10))
        b.op(main, long + "_op", 20, 200)
        b.launch(main, "cudaLaunchKernel", 240, 2, kernel=b.kernel(s7, "k2", 250, 10))
    rep = tb_perfdiag.diagnose(b.build())
    ov = rep.to_chrome_trace(gap=rep.to_json()["gaps"][0]["id"])
    text = json.dumps(ov)
    assert len(text) < 40_000
    op = next(e for e in ov["traceEvents"] if e.get("name", "").startswith("xxx") and e.get("ph") == "X")
    assert len(op["name"]) <= chrome.MAX_NAME and op["args"]["full name"].startswith("xxx")
    names = [e["args"]["name"] for e in ov["traceEvents"] if e.get("name") == "thread_name"]
    assert all(len(n) <= 120 for n in names)


def test_a_stat_on_nearly_every_event_reads_the_same_spread():
    """A stat on more than three quarters of the events (a correlation id: every launch
    and kernel here) is held as one column over all events; the overlay's details show
    each launch's and kernel's correlation id as before, and none on the step."""
    from tb_perfdiag.trace.model import Spread
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream(gpu=0, stream=7)
    pairs = []
    with b.step(main, 1, 0, 2000):
        for i in range(12):
            k = b.kernel(s7, f"gemm_{i}", 100 + 150 * i, 100)
            pairs.append((b.launch(main, "cudaLaunchKernel", 20 + 150 * i, 5, kernel=k), k))
    trace = b.build()
    st = trace.stats["correlation"]
    assert isinstance(st._held, Spread) and st.events.shape[0] == 24
    rep = tb_perfdiag.diagnose(trace)
    gap = _largest(rep)
    events = rep.to_chrome_trace(gap=gap["id"])["traceEvents"]
    corr = {e["name"]: e["args"].get("correlation") for e in events
            if e.get("ph") == "X" and e.get("cat") not in ("gap", "step", "blocking")}
    shown = [(launch.corr, k.name) for launch, k in pairs if k.name in corr]
    assert shown and all(corr[name] == c for c, name in shown)
    assert all(e["args"].get("correlation") is None for e in events
               if e.get("ph") == "X" and e["name"] == "ProfilerStep#1")
