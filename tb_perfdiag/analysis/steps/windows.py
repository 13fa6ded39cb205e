"""Step windows, host and per device.

Source, in order: a device ``Steps`` line; step annotations on the host
(``ProfilerStep#N``, events with ``step_num``); repeated runs of one program (device
``XLA Modules`` lines: the k-th run of the dominant program is step k, one-off setup
programs are no steps); the training loop's iterations (``loop_iterations``): its
DataLoader / optimizer calls, else its backward passes; else the whole trace.  Device
work runs late, so each device's windows are cut where the device could start the
step's work:
``b_k = max(host start of step k, end of the last device op launched by step k−1)``;
window k = [b_k, b_{k+1}), the last one ending at the later of its device work and
its host end.  With program runs, window k of a device is [start of its k-th run,
start of the next), the last one ending with the run.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ...trace.extension import native_fn
from ...trace.model import EventKind as K, TrackKind, Trace, isin_few, narrowest_int, search
from ..attribution.links import run_dispatch
from ..intervals import covered, window_pairs

DEFINITION = ("Step windows come from, in order: a device Steps line, host step annotations "
              "(ProfilerStep#N, step_num), the repeated runs of the dominant program (run k "
              "is step k; one-off setup programs are no steps), the training loop's "
              "iterations (a DataLoader __next__ starts one, else an Optimizer.step ends one, "
              "else an Optimizer.zero_grad starts one), else the backward passes (a "
              "backward annotation or torch.autograd.backward frame ends one, else a "
              "burst of autograd engine calls that the user's thread starts nothing "
              "during), else the whole trace. Device ops belong to the step whose host "
              "code launched them (correlation ids, flows, program runs). On each device, "
              "step k's window starts when both the host has started step k and the device "
              "finished the work launched by step k-1, and lasts until step k+1's window "
              "starts.")


@dataclass
class StepTable:
    ids: np.ndarray            # step numbers
    host_start: np.ndarray     # int64 ps
    host_end: np.ndarray
    source: str                # "device_steps" | "host_annotations" | "modules" |
                               # "training_loop" | "backward_passes" | "whole_trace"
    thread: int                # host track holding the step annotations (-1 if none)
    events: np.ndarray         # the step events (-1 for synthetic windows)
    runs: dict = field(default_factory=dict)   # "modules": device → its runs, in order
    marker: str = ""           # "training_loop", "backward_passes": what marks the
                               # iterations


def unknown_step(ids: np.ndarray, step: int) -> str | None:
    """Why ``step`` names no step of a capture whose step ids are ``ids`` (None: it does)."""
    if step in ids:
        return None
    return f"no step {step} in this capture" + (
        f"; its steps are {ids.min()}–{ids.max()}" if ids.size else "; it has no steps")


def find_steps(trace: Trace) -> StepTable:
    host = trace.track_kind[trace.track] == TrackKind.HOST
    dev_steps = np.flatnonzero((trace.kind == K.STEP) & ~host)
    if dev_steps.size:
        # one device's Steps line numbers the steps; each step's window runs from the first
        # device starting it to the last finishing it (devices of a multi-worker TensorFlow
        # job ran step 0 650 ms apart: one device's line made a 19.9 ms step of it)
        first_track = trace.track[dev_steps[0]]
        ev = dev_steps[trace.track[dev_steps] == first_track]
        return _across_devices(trace, _table(trace, ev, "device_steps", -1), dev_steps)
    steps = np.flatnonzero((trace.kind == K.STEP) & host)
    if steps.size:
        # the thread with most step annotations; only outermost ones (nested re-entries)
        tr, cnt = np.unique(trace.track[steps], return_counts=True)
        t = int(tr[np.argmax(cnt)])
        ev = steps[trace.track[steps] == t]
        ev = ev[~np.isin(trace.parent[ev], ev)]
        return _table(trace, ev, "host_annotations", t)
    runs = program_runs(trace)
    if runs:
        first = runs[min(runs)]
        t = _table(trace, first, "modules", -1, numbered=True)
        # a run's step lasts until the next run starts
        t.host_end[:-1] = np.maximum(t.host_start[1:], t.host_start[:-1])
        t.runs = runs
        return t
    loop = loop_iterations(trace)
    if loop is not None:
        return loop
    if trace.n_events:
        lo, hi = int(trace.ts.min()), int(trace.end.max())
    else:
        lo = hi = 0
    return StepTable(np.array([0]), np.array([lo]), np.array([hi]), "whole_trace", -1,
                     np.array([-1]))


# the training loop's own calls, when nothing marks the steps: an iteration starts at the
# DataLoader's __next__, else ends with the optimizer's step, else starts at its
# zero_grad (which loops call before the forward or between it and the backward: the
# last resort)
_LOOP_MARKERS = ((re.compile(r"DataLoader.*__next__"), "start"),
                 (re.compile(r"^Optimizer\.step#"), "end"),
                 (re.compile(r"^Optimizer\.zero_grad#"), "start"))
# then the backward pass, once an iteration: the user's annotation around loss.backward()
# ("## backward ##", "backward"), else the Python frame of Tensor.backward /
# torch.autograd.backward (with_stack captures); either ends an iteration, the optimizer
# step after it falling in the next one
_BACKWARD_MARKERS = ((re.compile(r"^[#\s]*backward[#\s]*$", re.I), "end"),
                     (re.compile(r"^torch[/\\](?:_tensor|autograd[/\\]__init__)\.py\(\d+\): "
                                 r"backward$"), "end"))
# else the autograd engine's own calls, one burst of them per backward pass
_ENGINE = re.compile(r"^autograd::engine::evaluate_function\b")


def loop_iterations(trace: Trace) -> StepTable | None:
    """Steps from a training loop's repeated calls, or None: the first of
    ``_LOOP_MARKERS`` (``step_source`` "training_loop"), else of ``_BACKWARD_MARKERS``
    ("backward_passes") that repeats on one host thread, outermost calls only, else the
    bursts of autograd engine calls (``engine_bursts``, "backward_passes").  With start
    markers iteration k lasts from the k-th call's start to the next one's, the last until
    the end of the thread's outermost op that began in it; with end markers, from the end
    of the previous call (the thread's first outermost op for the first) to the end of the
    k-th."""
    host = np.flatnonzero((trace.track_kind[trace.track] == TrackKind.HOST) &
                          isin_few(trace.kind, (K.ANNOTATION, K.DATA, K.PYTHON, K.CPU_OP)))
    if host.size == 0:
        return None
    names, inv = np.unique(trace.name[host], return_inverse=True)
    inv = inv.reshape(-1)
    text = [trace.strings[int(x)] for x in names.tolist()]
    for markers, source in ((_LOOP_MARKERS, "training_loop"),
                            (_BACKWARD_MARKERS, "backward_passes")):
        for rx, edge in markers:
            hit = np.array([bool(rx.search(n)) for n in text], bool)
            if not hit.any():
                continue
            ev = host[hit[inv]]
            ev = ev[~np.isin(trace.parent[ev], ev)]          # outermost calls only
            tr, cnt = np.unique(trace.track[ev], return_counts=True)
            if cnt.max() < 2:
                continue
            t = int(tr[np.argmax(cnt)])
            ev = ev[trace.track[ev] == t]
            ev = ev[np.argsort(trace.ts[ev], kind="stable")]
            steps = _iterations(trace, t, ev, trace.ts[ev], trace.end_of(ev), edge, source)
            steps.marker = trace.strings[int(trace.name[ev[0]])]
            return steps
    engine = np.array([bool(_ENGINE.search(n)) for n in text], bool)
    return engine_bursts(trace, host[engine[inv]], names[engine])


def _iterations(trace: Trace, t: int, ev: np.ndarray, first: np.ndarray, last: np.ndarray,
                edge: str, source: str) -> StepTable:
    """The step table of iterations marked on host thread ``t`` by calls (or bursts of
    them) ``ev`` that begin at ``first`` and end at ``last``, in time order, at the
    iterations' starts (``edge`` "start") or ends ("end")."""
    # the thread's outermost ops bound the first and last iteration
    lo, hi = trace.track_slices([t])[0]
    top = lo + np.flatnonzero(trace.depth[lo:hi] == 0)
    if edge == "start":
        start = np.array(first, np.int64)
        end = np.empty_like(start)
        end[:-1] = start[1:]
        after = top[trace.ts[top] >= start[-1]]
        end[-1] = max(int(trace.end_of(after).max()) if after.size else 0, int(last[-1]))
    else:
        end = np.array(last, np.int64)
        start = np.empty_like(end)
        start[1:] = end[:-1]
        before = top[trace.ts[top] < end[0]]
        start[0] = min(int(trace.ts[before].min()), int(first[0])) if before.size else \
            int(first[0])
    return StepTable(np.arange(ev.shape[0], dtype=np.int64), start, end, source, t, ev)


def engine_bursts(trace: Trace, engine: np.ndarray, engine_names: np.ndarray
                  ) -> StepTable | None:
    """Backward passes from the autograd engine's calls (``engine``, host events named
    ``engine_names``), or None when fewer than two.  The thread with most of them runs the
    passes (a device's engine thread; the user's own on CPU); the user's thread is
    blocked in ``backward()`` for the whole of a pass, so consecutive calls belong to
    one pass unless the user's thread started an op of its own between them (the
    forward, the optimizer step).  No duration threshold: on the real traces a pass
    pauses up to 27 ms between calls (HTA's sampled_rank-0) while passes lie as little
    as 0.97 ms apart (with_gpu_user_annotation), yet the user's thread starts nothing in
    any pause and something in every space between passes."""
    if engine.size < 2:
        return None
    tr, cnt = np.unique(trace.track[engine], return_counts=True)
    et = int(tr[np.argmax(cnt)])
    e = engine[trace.track[engine] == et]                # in time order on its track
    reach = np.maximum.accumulate(trace.end_of(e))
    # re-entrant passes (checkpointing) nest engine calls: outermost ones only
    first = np.flatnonzero(np.r_[True, trace.ts[e[1:]] >= reach[:-1]])
    pause_s, pause_e = reach[first[1:] - 1], trace.ts[e[first[1:]]]
    u, u_ts = _user_calls(trace, engine_names)
    if u < 0:
        return None
    k0 = search(u_ts, pause_s, side="left")
    k1 = search(u_ts, pause_e, side="left")
    cut = np.flatnonzero(k1 > k0)                        # pauses the user acted in
    if cut.size == 0:
        return None
    # pass j: from the first call after cut j-1 to the reach before cut j
    begins = np.r_[first[0], first[cut + 1]]
    ends = np.r_[reach[first[cut + 1] - 1], reach[-1]]
    steps = _iterations(trace, u, e[begins], trace.ts[e[begins]], ends, "end",
                        "backward_passes")
    steps.marker = f"autograd::engine::evaluate_function bursts on {trace.track_label[et]}"
    return steps


def _user_calls(trace: Trace, engine_names: np.ndarray) -> tuple[int, np.ndarray]:
    """(thread, starts): the host thread with most events of its own — neither engine
    calls nor inside one, nor waits for another thread — and their starts in time order
    ((-1, empty) when no thread has any).  A loop over host threads, vectorised in each."""
    best, starts = -1, np.zeros(0, np.int64)
    for t in np.flatnonzero(trace.track_kind == TrackKind.HOST).tolist():
        lo, hi = trace.track_slices([t])[0]
        if hi - lo <= starts.shape[0]:
            continue
        ts = trace.ts[lo:hi]
        eng = np.isin(trace.name[lo:hi], engine_names)
        # inside an engine call: starts before the latest end of an earlier one
        reach = np.maximum.accumulate(np.where(eng, ts + trace.dur[lo:hi],
                                               np.iinfo(np.int64).min))
        inside = np.r_[False, ts[1:] < reach[:-1]]
        own = ~eng & ~inside & ~isin_few(trace.kind[lo:hi], (K.WAIT, K.IDLE))
        if own.sum() > starts.shape[0]:
            best, starts = t, ts[own]                    # sorted: the track is in time order
    return best, starts


def program_runs(trace: Trace) -> dict:
    """device → its runs of the dominant program (``XLA Modules`` events of the name run
    most often on the first device with modules, ties: most time), in time order; empty
    when no program ran twice.  Devices whose run count differs are left out (their
    windows follow the first device)."""
    mod_tracks = [t for t in np.flatnonzero(trace.track_kind == TrackKind.DEVICE).tolist()
                  if trace.track_name[t] == "XLA Modules"]
    per_dev = {}
    for t in mod_tracks:
        lo, hi = trace.track_slices([t])[0]
        if hi > lo:
            per_dev.setdefault(int(trace.track_device[t]), np.arange(lo, hi))
    if not per_dev:
        return {}
    ev = per_dev[min(per_dev)]
    names, inv, cnt = np.unique(trace.name[ev], return_inverse=True, return_counts=True)
    total = np.bincount(inv.reshape(-1), weights=trace.dur[ev].astype(np.float64))
    best = int(np.lexsort((-total, -cnt))[0])
    if cnt[best] < 2:
        return {}
    name = names[best]
    out = {}
    for d, e in per_dev.items():
        e = e[trace.name[e] == name]
        if e.shape[0] == cnt[best]:
            out[d] = e[np.argsort(trace.ts[e], kind="stable")]
    return out


def run_of_op(trace: Trace, runs: np.ndarray, ops: np.ndarray) -> np.ndarray:
    """Index of the run (events sorted by start, one device) each op ran inside (−1)."""
    k = search(trace.ts[runs], trace.ts[ops], side="right") - 1
    kk = np.maximum(k, 0)
    inside = (k >= 0) & (trace.ts[ops] < trace.end_of(runs[kk])) if runs.size else \
        np.zeros(ops.shape[0], bool)
    return np.where(inside, k, -1)


def _across_devices(trace, t: StepTable, dev_steps: np.ndarray) -> StepTable:
    """``t`` (one device's Steps line) with each window widened to every device's step of
    the same number (by ``step_num``; by position on lines without numbers)."""
    tracks = np.unique(trace.track[dev_steps])
    if tracks.size < 2:
        return t
    num = trace.stat("step_num")[dev_steps]
    if (num < 0).any():
        # unnumbered: the k-th step of each line is the k-th step of the first
        num = np.full(dev_steps.shape[0], -1, np.int64)
        for tr in tracks.tolist():
            on = np.flatnonzero(trace.track[dev_steps] == tr)
            on = on[np.argsort(trace.ts[dev_steps[on]], kind="stable")][:t.ids.size]
            num[on] = t.ids[:on.size]
    order = np.argsort(t.ids, kind="stable")
    pos = np.minimum(np.searchsorted(t.ids[order], num), t.ids.size - 1)
    at = order[pos]
    hit = t.ids[at] == num
    start, end = t.host_start.copy(), t.host_end.copy()
    np.minimum.at(start, at[hit], trace.ts[dev_steps[hit]])
    np.maximum.at(end, at[hit], trace.end_of(dev_steps[hit]))
    t.host_start, t.host_end = start, end
    return t


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


def launching_steps(trace: Trace, steps: StepTable, root: np.ndarray) -> np.ndarray:
    """Step index of every event (−1 none), as narrow as the steps allow
    (``narrowest_int``; int8 up to 126 steps: 38 MB at 40 M events where int32 is 152):
    device work belongs to the step whose host code dispatched it, never to the one it
    happens to run in.  The
    dispatch is the k-th call of a JAX program's function for its k-th run, else the
    user-thread origin found through links (``root``); with program-run steps, a device
    op belongs to the run it ran in (ops of setup programs to no step); with a device
    Steps line, to the step it ran in."""
    dt = narrowest_int(steps.ids.shape[0])
    if steps.source == "device_steps":
        out = np.empty(trace.n_events, dt)
        for i in range(0, trace.n_events, 1 << 20):       # no int64 column of them all
            out[i:i + (1 << 20)] = step_of_time(steps, trace.ts[i:i + (1 << 20)])
        return out
    who = root                        # int32 on large traces: no int64 copy of it
    ev, disp = run_dispatch(trace, steps.thread)
    if ev.size:
        who = root.copy()
        who[ev] = disp
    if steps.source != "modules":
        return steps_by_dispatch(trace, steps, who)
    # program-run steps: the host's events (and a run device's other lines) by the time of
    # their dispatch; other devices' events by their own time; then a run device's ops
    # by the run they ran in
    dev = trace.track_device[trace.track]
    in_runs = isin_few(dev, list(steps.runs))
    out = steps_by_dispatch(trace, steps, who, (dev >= 0) & ~in_runs)
    del who, in_runs
    for d, runs in steps.runs.items():
        ops = trace.activity_of(d)
        out[ops] = run_of_op(trace, runs, ops)
    return out


def steps_by_dispatch(trace: Trace, steps: StepTable, who: np.ndarray,
                      own: np.ndarray | None = None) -> np.ndarray:
    """Per event, ``step_of_time`` of the start of the event that dispatched it (``who``,
    −1 none), or of its own start where it has none or ``own`` says so, as
    ``narrowest_int``: in one C pass over the events, else by numpy."""
    fn = native_fn("steps_of_events")
    hs = np.ascontiguousarray(steps.host_start, np.int64)
    dt = narrowest_int(hs.shape[0])
    if fn is not None and who.dtype in (np.int32, np.int64) and who.flags.c_contiguous:
        try:
            got = fn(np.ascontiguousarray(trace.ts, np.int64), who, who.dtype.itemsize,
                     np.ascontiguousarray(own, bool) if own is not None else b"", hs,
                     dt.itemsize)
            return np.frombuffer(got, dt)
        except ValueError:          # windows out of order: numpy's answer, as before
            pass
    use = who >= 0 if own is None else (who >= 0) & ~own
    return step_of_time(steps, np.where(use, trace.ts[np.maximum(who, 0)], trace.ts)).astype(dt)


def order_by_step(step: np.ndarray, n_steps: int,
                  at: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(order, bounds): the ops by step, stable, those of no step (−1) first, and where
    the ops of no step, then of each step, end in that order (``n_steps`` + 1).  A
    counting sort in C into an int32 order (20 M ops: 80 MB, where numpy's stable argsort
    held an int64 order and as much scratch of its own); numpy's otherwise.  With ``at``
    (event indices), op i's step is ``step[at[i]]``, read in place."""
    fn = native_fn("order_by_step")
    if fn is not None and step.dtype in (np.int8, np.int16, np.int32, np.int64) and \
            (at is None or at.dtype in (np.int32, np.int64)):
        n = step.shape[0] if at is None else at.shape[0]
        extra = () if at is None else (np.ascontiguousarray(at), at.dtype.itemsize)
        o, b = fn(np.ascontiguousarray(step), step.dtype.itemsize, n_steps, *extra)
        return (np.frombuffer(o, np.int32 if n < 2**31 - 1 else np.int64),
                np.frombuffer(b, np.int64))
    if at is not None:
        step = step[at]
    # a radix sort where steps fit int16
    key = step.astype(np.int16) if n_steps < 2**15 - 1 else step
    o = np.argsort(key, kind="stable")
    del key
    # counted a block at a time
    counts = np.zeros(n_steps + 1, np.int64)
    for i in range(0, step.shape[0], 1 << 20):
        counts += np.bincount(step[i:i + (1 << 20)] + 1, minlength=n_steps + 1)
    return o, np.cumsum(counts)


def launched_busy(start: np.ndarray, end: np.ndarray | None, step: np.ndarray | None,
                  n_steps: int, at: np.ndarray | None = None,
                  length: np.ndarray | None = None,
                  event_step: np.ndarray | None = None) -> np.ndarray:
    """Per step: the union length of the device ops it launched (one device's ops with
    their step index, −1 none) — the device time a step launched, wherever it ran.
    ``start`` and ``end`` are the ops' starts and ends, or with ``at`` (the ops' event
    indices) ``start`` is the start of every event, and ``end`` is None and ``length``
    every event's duration: they are gathered a block at a time (a copy of the starts
    or ends of all 20 M ops of a device was the largest transient of the gap loop).
    ``event_step`` (with ``at``, in place of ``step``): the step of every event, read at
    the ops likewise.

    One ordering of the ops by step, then blocks of whole steps (about a million ops
    each: a whole-array union would hold half a dozen copies of the op columns, 1 GB at
    40 M events).  In a block every step's ops are moved onto a time axis of their own,
    ``step × span + (t − t0)``, so that one union of the block is the union of each step
    apart (no step's intervals reach the next one's) and a step's total is a difference
    of a running sum."""
    from ..intervals import union
    out = np.zeros(n_steps, np.int64)
    n_ops = step.shape[0] if event_step is None else at.shape[0]
    if n_steps == 0 or n_ops == 0:
        return out
    # the ops by step (those of no step first, then skipped), and where each step's ops end
    o, bounds = order_by_step(step, n_steps) if event_step is None else \
        order_by_step(event_step, n_steps, at)
    if int(bounds[0]) == n_ops:          # no op of any step
        return out

    # gathers through intp indices: numpy gathers through int32 ones (the order, a
    # device's ops) several times slower
    def ix(sel):
        return sel if isinstance(sel, slice) else sel.astype(np.intp, copy=False)

    def events(sel):
        return ix(at[ix(sel)])

    def steps_of(sel):
        return step[ix(sel)] if event_step is None else event_step[events(sel)]

    def starts(sel):
        return start[ix(sel)] if at is None else start[events(sel)]

    def ends(sel):
        if end is not None:
            return end[ix(sel)]
        ev = events(sel)
        return start[ev] + length[ev]
    blocks = [slice(i, i + (1 << 20)) for i in range(0, n_ops, 1 << 20)]
    # any t0 at or before every start and span past every op will do: all of the ops'
    t0 = min(int(starts(b).min()) for b in blocks)
    span = max(max(int(ends(b).max()) for b in blocks) - t0, 0) + 1
    per_block = (1 << 62) // span        # steps in a block, so that step × span fits
    k = 0
    while k < n_steps:
        if per_block == 0:               # absurd clock values: one step at a time
            k1 = k + 1
        else:
            # whole steps, ~2**18 ops, and few enough of them that step × span fits
            k1 = int(np.searchsorted(bounds, bounds[k] + (1 << 18), side="right")) - 1
            k1 = min(max(k1, k + 1), n_steps, k + per_block)
        sl = o[bounds[k]:bounds[k1]]
        if sl.size:
            if per_block == 0:
                us, ue = union(starts(sl), ends(sl))
                out[k] = int((ue - us).sum())
            else:
                shift = (steps_of(sl).astype(np.int64) - k) * span - t0
                us, ue = union(starts(sl) + shift, ends(sl) + shift)
                del shift
                cum = np.zeros(us.shape[0] + 1, np.int64)
                np.cumsum(ue - us, out=cum[1:])
                # the first merged interval of each step in the block
                first = np.searchsorted(us, np.arange(k1 - k + 1, dtype=np.int64) * span)
                out[k:k1] = cum[first[1:]] - cum[first[:-1]]
        k = k1
    return out


def step_of_time(steps: StepTable, t: np.ndarray) -> np.ndarray:
    """Index of the host step window containing each time, else the latest one before it
    (−1 before the first step)."""
    return search(steps.host_start, t, side="right") - 1


def device_windows(steps: StepTable, op_step: np.ndarray | None, op_end: np.ndarray | None,
                   trace_end: int, own_steps: np.ndarray | None = None,
                   trace: Trace | None = None,
                   ops: np.ndarray | None = None,
                   event_step: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-device window bounds (len n_steps) given the step index of each device op
    and its end (or, with ``op_end`` None, the ops' event indices ``ops`` in ``trace``:
    their ends are read a block at a time; with ``event_step`` in place of ``op_step``,
    their steps too, from every event's).

    With a device Steps line, each device's windows are its own Steps events; with
    program runs, [start of its run k, start of run k+1)."""
    n = steps.ids.shape[0]
    if steps.source == "modules":
        # ``own_steps``: this device's runs of the program
        if own_steps is None or own_steps.shape[0] != n or trace is None:
            return steps.host_start.copy(), steps.host_end.copy()
        own = own_steps
        b = trace.ts[own].copy()
        e = np.empty(n, np.int64)
        e[:-1] = b[1:]
        e[-1] = trace.end_of(own[-1:])[0]
        return b, np.maximum(e, b)
    if steps.source == "device_steps":
        if own_steps is not None and own_steps.shape[0] == n and trace is not None:
            o = np.argsort(trace.ts[own_steps], kind="stable")
            return trace.ts[own_steps[o]].copy(), trace.end_of(own_steps[o]).copy()
        return steps.host_start.copy(), steps.host_end.copy()
    if steps.source == "whole_trace":
        return steps.host_start.copy(), steps.host_end.copy()
    last_end = np.full(n, -1, np.int64)
    n_ops = op_step.shape[0] if event_step is None else ops.shape[0]
    for i in range(0, n_ops, 1 << 20):      # in blocks: no copy of all the ops
        # intp indices: numpy gathers through int32 ones several times slower
        at = ops[i:i + (1 << 20)].astype(np.intp, copy=False) if ops is not None else None
        st = op_step[i:i + (1 << 20)] if event_step is None else event_step[at]
        en = op_end[i:i + (1 << 20)] if op_end is not None else trace.end_of(at)
        ok = st >= 0
        np.maximum.at(last_end, st[ok], en[ok])
    b = steps.host_start.copy()
    prev_end = np.maximum.accumulate(last_end)
    b[1:] = np.maximum(b[1:], prev_end[:-1])
    b = np.maximum.accumulate(b)
    e = np.empty(n, np.int64)
    e[:-1] = b[1:]
    e[-1] = max(int(last_end[-1]), int(steps.host_end[-1]))
    e = np.maximum(e, b)
    return b, e


# a gap's place when it is in no step (GapTable.step): before the device's first step
# window, after its last one
BEFORE_FIRST, AFTER_LAST = -1, -2


def gap_steps(wb: np.ndarray, we: np.ndarray, gs: np.ndarray, ge: np.ndarray) -> np.ndarray:
    """The one step each gap [gs, ge) of a device belongs to, from that device's step
    windows [wb, we) (GUIDE §4: the window is the step): the window holding most of it;
    ``BEFORE_FIRST`` when more of it lies before the first window than in any one window,
    ``AFTER_LAST`` likewise after the last (a 5.5 s wait that ends 330 ns into step 0's
    window lies before step 0).  A tie goes to the later window, where the device resumes;
    a gap in a hole between two windows (a device Steps line with holes) to the next.
    int32 step indices."""
    gs, ge = np.asarray(gs, np.int64), np.asarray(ge, np.int64)
    out = np.full(gs.shape[0], BEFORE_FIRST, np.int32)
    open_ = np.flatnonzero(np.asarray(we) > np.asarray(wb))
    if not gs.size or not open_.size:
        return out
    at = open_[np.argsort(np.asarray(wb)[open_], kind="stable")]
    b, e = np.asarray(wb, np.int64)[at], np.asarray(we, np.int64)[at]
    g, w, ov, cnt = window_pairs(b, e, gs, ge)
    # per gap (its pairs are contiguous, windows in order), its largest overlap and the
    # last pair holding it (the later window on a tie): reductions, no sort
    starts = np.cumsum(cnt) - cnt
    best_ov = np.maximum.reduceat(ov, starts)
    pos = np.where(ov == best_ov[g], np.arange(g.shape[0]), -1)
    best_w = w[np.maximum.reduceat(pos, starts)]
    before = np.maximum(np.minimum(ge, b[0]) - gs, 0)
    after = np.maximum(ge - np.maximum(gs, e[-1]), 0)
    # no overlap, neither before nor after: a hole between windows, the next one's
    nxt = np.minimum(np.searchsorted(b, gs, side="right"), b.shape[0] - 1)
    step = np.where(best_ov > 0, at[best_w], at[nxt])
    step = np.where((before > best_ov) & (before >= after), BEFORE_FIRST, step)
    step = np.where((after > best_ov) & (after > before), AFTER_LAST, step)
    out[:] = step
    return out


def in_step_part(wb: np.ndarray, we: np.ndarray, gs: np.ndarray, ge: np.ndarray,
                 step: np.ndarray) -> np.ndarray:
    """ps of each gap inside the device's step windows, 0 for a gap in no step
    (``gap_steps``): the part a cost per step counts; the rest is outside every step."""
    gs, ge = np.asarray(gs, np.int64), np.asarray(ge, np.int64)
    keep = np.asarray(we) > np.asarray(wb)
    o = np.argsort(np.asarray(wb)[keep], kind="stable")
    inside = covered(np.asarray(wb, np.int64)[keep][o], np.asarray(we, np.int64)[keep][o],
                     gs, ge) if gs.size else np.zeros(0, np.int64)
    return np.where(np.asarray(step) >= 0, inside, 0)
