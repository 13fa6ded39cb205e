"""Step windows, host and per device.

Source, in order: a device ``Steps`` line; step annotations on the host
(``ProfilerStep#N``, events with ``step_num``); module executions (device ``XLA
Modules`` lines); else the whole trace.  Device work runs late, so each device's
windows are cut where the device could start the step's work:
``b_k = max(host start of step k, end of the last device op launched by step k−1)``;
window k = [b_k, b_{k+1}), the last one ending at the later of its device work and
its host end.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..trace.model import EventKind as K, TrackKind, Trace

DEFINITION = ("Step windows come from, in order: a device Steps line, host step annotations "
              "(ProfilerStep#N, step_num), module executions, else the whole trace. Device "
              "ops belong to the step whose host code launched them (correlation ids, flows, "
              "program runs). On each device, step k's window starts when both the host has "
              "started step k and the device finished the work launched by step k-1, and "
              "lasts until step k+1's window starts.")


@dataclass
class StepTable:
    ids: np.ndarray            # step numbers
    host_start: np.ndarray     # int64 ps
    host_end: np.ndarray
    source: str                # "device_steps" | "host_annotations" | "modules" | "whole_trace"
    thread: int                # host track holding the step annotations (-1 if none)
    events: np.ndarray         # the step events (-1 for synthetic windows)


def find_steps(trace: Trace) -> StepTable:
    host = trace.track_kind[trace.track] == TrackKind.HOST
    dev_steps = np.flatnonzero((trace.kind == K.STEP) & ~host)
    if dev_steps.size:
        # one device's Steps line is enough to define windows (they are aligned)
        first_track = trace.track[dev_steps[0]]
        ev = dev_steps[trace.track[dev_steps] == first_track]
        return _table(trace, ev, "device_steps", -1)
    steps = np.flatnonzero((trace.kind == K.STEP) & host)
    if steps.size:
        # the thread with most step annotations; only outermost ones (nested re-entries)
        tr, cnt = np.unique(trace.track[steps], return_counts=True)
        t = int(tr[np.argmax(cnt)])
        ev = steps[trace.track[steps] == t]
        ev = ev[~np.isin(trace.parent[ev], ev)]
        return _table(trace, ev, "host_annotations", t)
    mods = np.flatnonzero((trace.kind == K.DEVICE_OTHER) & ~host)
    if mods.size:
        names = np.array([trace.track_name[t] for t in trace.track[mods]])
        mods = mods[names == "XLA Modules"]
        if mods.size:
            first_track = trace.track[mods[0]]
            ev = mods[trace.track[mods] == first_track]
            return _table(trace, ev, "modules", -1, numbered=True)
    if trace.n_events:
        lo, hi = int(trace.ts.min()), int(trace.end.max())
    else:
        lo = hi = 0
    return StepTable(np.array([0]), np.array([lo]), np.array([hi]), "whole_trace", -1,
                     np.array([-1]))


def _table(trace, ev, source, thread, numbered=False) -> StepTable:
    o = np.argsort(trace.ts[ev], kind="stable")
    ev = ev[o]
    num = trace.stat("step_num")[ev]
    if numbered or (num < 0).all():
        num = np.arange(ev.shape[0])
    else:
        # fill unnumbered ones after their predecessor
        for i in range(num.shape[0]):
            if num[i] < 0:
                num[i] = num[i - 1] + 1 if i else 0
    return StepTable(num.astype(np.int64), trace.ts[ev], trace.end_of(ev), source, thread, ev)


def step_of_time(steps: StepTable, t: np.ndarray) -> np.ndarray:
    """Index of the host step window containing each time, else the latest one before it
    (−1 before the first step)."""
    k = np.searchsorted(steps.host_start, t, side="right") - 1
    return k


def device_windows(steps: StepTable, op_step: np.ndarray, op_end: np.ndarray,
                   trace_end: int, own_steps: np.ndarray | None = None,
                   trace: Trace | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-device window bounds (len n_steps) given the step index of each device op.

    With a device Steps line, each device's windows are its own Steps events."""
    n = steps.ids.shape[0]
    if steps.source == "device_steps":
        if own_steps is not None and own_steps.shape[0] == n and trace is not None:
            o = np.argsort(trace.ts[own_steps], kind="stable")
            return trace.ts[own_steps[o]].copy(), trace.end_of(own_steps[o]).copy()
        return steps.host_start.copy(), steps.host_end.copy()
    if steps.source == "whole_trace":
        return steps.host_start.copy(), steps.host_end.copy()
    last_end = np.full(n, -1, np.int64)
    ok = op_step >= 0
    if ok.any():
        np.maximum.at(last_end, op_step[ok], op_end[ok])
    b = steps.host_start.copy()
    prev_end = np.maximum.accumulate(last_end)
    b[1:] = np.maximum(b[1:], prev_end[:-1])
    b = np.maximum.accumulate(b)
    e = np.empty(n, np.int64)
    e[:-1] = b[1:]
    e[-1] = max(int(last_end[-1]), int(steps.host_end[-1]))
    e = np.maximum(e, b)
    return b, e
