"""Timeline lanes show what a host thread was doing: its innermost ops first."""
from __future__ import annotations

from tb_perfdiag.analysis.diagnosis import host_context
from tb_perfdiag.analysis.timeline import MAX_EVENTS_PER_LANE, lanes
from tb_perfdiag.testing import TraceBuilder


def _deep_thread(depth: int = 30):
    b = TraceBuilder()
    main, s7 = b.thread("python main"), b.stream()
    b.kernel(s7, "k", 0, 10)
    for d in range(depth):                       # spawn_main › _bootstrap › … frames
        b.op(main, f"frame_{d}", d, 1000 - 2 * d, cat="python_function")
    b.op(main, "aten::nonzero", 100, 50)
    b.op(main, "cudaStreamSynchronize", 110, 30, cat="cuda_runtime")
    b.op(main, "aten::item", 300, 20)
    return b.build()


def _host_lane(tl):
    return next(x for x in tl["lanes"] if x["kind"] == "host")


def test_host_lane_rows_count_from_the_innermost_op():
    t = _deep_thread()
    tl = lanes(t, 0, int(t.end.max()), 1200, host_context(t).origin)
    lane = _host_lane(tl)
    names = tl["names"]
    row = {names[e[2]]: e[3] for e in lane["events"]}
    # every frame is sent (no depth cut), and rows start at what the thread was doing
    assert len(lane["events"]) == 33
    assert row["cudaStreamSynchronize"] == 0 and row["aten::item"] == 0
    assert row["aten::nonzero"] == 1
    assert row["frame_29"] == 2 and row["frame_0"] == 31       # the outermost frame last


def test_crowded_lane_bins_name_the_innermost_op():
    b = TraceBuilder()
    main = b.thread("python main")
    b.kernel(b.stream(), "k", 0, 10)
    with b.op(main, "spawn_main", 0, 10_000, cat="python_function"):
        for i in range(MAX_EVENTS_PER_LANE + 10):
            b.op(main, f"op_{i % 3}", 1 + i * 6, 5)
    t = b.build()
    tl = lanes(t, 0, int(t.end.max()), 400, host_context(t).origin)
    lane = _host_lane(tl)
    assert "bins" in lane
    named = {tl["names"][n] for n in lane["bins"]["name"] if n >= 0}
    assert named and named <= {"op_0", "op_1", "op_2", "spawn_main"}
    assert named & {"op_0", "op_1", "op_2"}
