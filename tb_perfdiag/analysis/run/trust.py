"""Whether a capture's numbers can be trusted (GUIDE §4, "A run over time"), and why not.

A capture is trusted only when it was read whole, its device planes carry device events,
most of its steps have device work, its graph replays are fully recorded, and the
profiler's own overhead is a small share of it.  Each problem is typed (``Problem``); the
renderer says it in words.

The profiler's overhead is estimated, not measured: the profiler's own start and stop
calls (their host time, ``steps.startup.profiler_cost``, kept in the diagnosis' ``source``) plus ``PYTHON_EVENT_COST_PS`` per
Python-tracer event (Kineto's tracer costs about a microsecond per call it records), as
a share of the capture's span.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..steps.capture_notes import GRAPHS_UNDER_RECORDED
from ..result import Diagnosis

# the capture notes that say a graph replay is under-recorded: launches with no kernel
# (steps.capture_notes), replays with fewer kernels than their capture or recorded as one
# activity (efficiency.graphs.under_recorded_notes)
UNDER_RECORDED = (GRAPHS_UNDER_RECORDED,
                  "recorded fewer device events than their capture launched",
                  "were recorded as one device activity each")
MOST_STEPS = 0.5                 # over this share of steps without device work: flagged
MAX_OVERHEAD_SHARE = 0.10        # over this share of the capture in the profiler: flagged
PYTHON_EVENT_COST_PS = 1_000_000  # 1 µs per Python-tracer event recorded

EMPTY, UNREADABLE, NO_DEVICE_EVENTS, STEPS_WITHOUT_DEVICE, GRAPHS, OVERHEAD = (
    "empty", "unreadable", "no_device_events", "steps_without_device", "graphs_under_recorded",
    "profiler_overhead")


@dataclass
class Problem:
    kind: str                  # one of the names above
    figures: dict = field(default_factory=dict)   # numbers and names its sentence says


def unread(size: int, reason: str) -> list:
    """The problem of a capture that could not be read (``reason``: the reader's)."""
    if size == 0:
        return [Problem(EMPTY)]
    return [Problem(UNREADABLE, {"reason": reason})]


def problems(diag: Diagnosis) -> list:
    """[Problem] of a capture that was read, most consequential first."""
    out = []
    D, S = diag.devices, diag.steps
    planes = list(diag.source.get("devices") or [])
    if planes and not (D.ops > 0).any():
        out.append(Problem(NO_DEVICE_EVENTS, {"planes": len(planes)}))
    on = np.flatnonzero(D.ops > 0)
    if on.size and len(S) and S.source != "whole_trace":
        none = int((~(S.busy[:, on] > 0).any(axis=1)).sum())
        if none > MOST_STEPS * len(S):
            out.append(Problem(STEPS_WITHOUT_DEVICE, {"steps": none, "of": len(S)}))
    for note in (w for w in diag.warnings if any(p in w for p in UNDER_RECORDED)):
        out.append(Problem(GRAPHS, {"note": note}))
    span = diag.source.get("span_ns") or [0, 0]
    span_ps = max(int(span[1]) - int(span[0]), 0) * 1000
    cost = diag.source.get("profiler") or {}
    calls, py = int(cost.get("calls_ps", 0)), int(cost.get("python_events", 0))
    cost = calls + py * PYTHON_EVENT_COST_PS
    if span_ps and cost > MAX_OVERHEAD_SHARE * span_ps:
        out.append(Problem(OVERHEAD, {"share": cost / span_ps, "calls_ps": calls,
                                      "python_events": py}))
    return out
