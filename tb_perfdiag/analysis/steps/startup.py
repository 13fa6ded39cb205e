"""Start-up (GUIDE §4): what every job pays once and its training loop does not.

* the profiler's own start and stop: ``jax.profiler.start_trace``/``stop_trace``,
  ``torch.profiler``'s ``start``/``stop`` and the profile's ``__enter__``/``__exit__``,
  ``tf.profiler.experimental.start``/``stop``, torch_xla's ``xp.trace``/``start_server``
  (their Python frames);
* CUDA/HIP context creation and lazy module loading: a runtime or driver call of the first
  iteration (before the first step ends) that takes far longer than the same call does
  later in the same process (``FAR`` times its median there, at least ``MIN_PS``); the
  process's first runtime call when nothing later compares with it;
* cuDNN/cuBLAS/MIOpen handle creation, and autotuning in the first iteration.

``startup_roots`` finds the outermost such events; everything they enclose on their
thread is start-up too (``hostline.event_buckets`` gives it the start-up bucket, over
whatever other bucket it had: a start-up share is never another cause's).  "Far longer"
is decided from the trace itself, never from a list of names alone.
"""
from __future__ import annotations

import re

import numpy as np

from ...trace.build import distinct
from ...trace.model import EventKind as K, TrackKind, Trace, isin_few

MIN_PS = 5_000_000_000          # 5 ms: shorter first calls are not worth a cause of their own
FAR = 50                        # times the same call's median later in the process
FIRST_ALONE_PS = 50_000_000_000  # the process's first call with nothing to compare: 50 ms

# runtime and driver calls (cudaFree, cuInit, hipInit, cudaLaunchKernel …)
_RUNTIME = re.compile(r"^(cuda|cu[A-Z]|hip[A-Z])")
_RT_KINDS = (K.RUNTIME, K.ALLOC, K.LAUNCH, K.SYNC, K.OTHER, K.CPU_OP)
# a blocking call's time is the device's, not start-up, unless it is the process's first
_BLOCKING_KINDS = (K.SYNC, K.TRANSFER_D2H)
# the profiler's own frames: a Kineto frame "path/profiler.py(123): stop", a JAX/TF one
# "$profiler.py:101 start_trace"; record_function (torch/autograd/profiler.py) is the
# user's annotation, not the profiler starting
_PROFILER_FRAME = re.compile(
    r"^(?:\$(?P<jfile>[^ :]*profiler(?:_v2)?\.py):\d+ |"
    r"(?P<kfile>[^()]*profiler(?:_v2)?\.py)\(\d+\): )(?P<func>[\w.<>]+)$")
_PROFILER_FUNCS = {"start_trace", "stop_trace", "start_server", "stop_server", "start",
                   "stop", "__enter__", "__exit__", "_transit_action", "_start_trace",
                   "_stop_trace", "export_chrome_trace", "_trace_ready"}
_HANDLE = re.compile(r"^(cudnnCreate|cublasCreate|cublasLtCreate|cusparseCreate|"
                     r"cusolverDnCreate|miopenCreate|hipblasCreate|hipblasLtCreate|"
                     r"rocblas_create_handle)\w*$")
_AUTOTUNE = re.compile(r"^(cudnnFind\w*|miopenFind\w*)$|autotun", re.I)
_NEEDLES = ("profiler", "Create", "create_handle", "Find", "utotun")

# what kind of start-up a culprit is, for the findings
PROFILER, RUNTIME, HANDLE, AUTOTUNE = "profiler", "runtime", "handle", "autotune"


def profiler_frame(name: str) -> bool:
    """Whether ``name`` is a Python frame of the profiler starting or stopping."""
    m = _PROFILER_FRAME.match(name)
    if not m or m.group("func") not in _PROFILER_FUNCS | {"trace"}:
        return False
    path = m.group("jfile") or m.group("kfile")
    if "autograd" in path:
        return False
    # "trace" is torch_xla's blocking xp.trace; JAX's trace() is a context manager whose
    # frames are its start_trace/stop_trace calls (and annotate_function's wrapper)
    return m.group("func") != "trace" or "torch_xla" in path


def kind_of(name: str) -> str:
    """The start-up family a name stands for ("" none by name: a runtime call is one by
    its duration)."""
    if profiler_frame(name):
        return PROFILER
    if _HANDLE.match(name):
        return HANDLE
    if _AUTOTUNE.search(name):
        return AUTOTUNE
    if _RUNTIME.match(name):
        return RUNTIME
    return ""


def family(chain: list) -> str:
    """The start-up family of a culprit from its chain of names (outermost first): the
    profiler's frame anywhere above it, else the innermost name that is one."""
    if any(profiler_frame(n) for n in chain):
        return PROFILER
    for n in reversed(chain):
        k = kind_of(n)
        if k:
            return k
    return ""


def _named_ids(trace: Trace) -> tuple:
    """(profiler frame ids, handle ids, autotune ids) among the trace's names: only the
    strings holding one of ``_NEEDLES`` are looked at."""
    S = trace.strings
    cand = set()
    if hasattr(S, "ids_containing"):
        for n in _NEEDLES:
            cand.update(S.ids_containing(n))
    else:
        cand = {i for i, s in enumerate(S) if any(n in s for n in _NEEDLES)}
    prof, handle, tune = [], [], []
    for i in sorted(cand):
        s = S[i]
        if profiler_frame(s):
            prof.append(i)
        elif _HANDLE.match(s):
            handle.append(i)
        elif _AUTOTUNE.search(s):
            tune.append(i)
    return prof, handle, tune


def first_step_end(steps) -> int | None:
    """End of the first of ``steps`` (a ``steps.StepTable``) in ps, None when the trace
    is one window: what "the first iteration" ends at."""
    if steps.source == "whole_trace" or not steps.host_end.shape[0]:
        return None
    return int(steps.host_end[0])


def _first_iteration_end(trace: Trace) -> int | None:
    from .windows import find_steps
    return first_step_end(find_steps(trace))


STEP_SHARE = 0.1                # start-up this share of the median step makes a step atypical


def steps_with_startup(trace: Trace, roots: np.ndarray, start: np.ndarray,
                       end: np.ndarray) -> np.ndarray:
    """bool per step window [start, end): start-up events take at least ``STEP_SHARE`` of
    the median step in it (such a step is no typical step; torch.profiler's few µs of
    ``_transit_action`` in every step leave every step typical)."""
    from ..intervals import covered, union
    start, end = np.asarray(start, np.int64), np.asarray(end, np.int64)
    if not start.size or not roots.size:
        return np.zeros(start.shape[0], bool)
    us, ue = union(trace.ts[roots].astype(np.int64), trace.end_of(roots).astype(np.int64))
    inside = covered(us, ue, start, np.maximum(end, start))
    return inside >= STEP_SHARE * float(np.median(end - start))


def _under_compile(trace: Trace, e: int) -> bool:
    p = int(trace.parent[e])
    while p >= 0:
        if trace.kind[p] == K.COMPILE:
            return True
        p = int(trace.parent[p])
    return False


_UNKNOWN = object()


def startup_roots(trace: Trace, first_end=_UNKNOWN) -> np.ndarray:
    """The outermost host events whose time is start-up, ascending (module docstring).
    ``first_end``: the end of the first step in ps, None for a trace that is one window
    (found from the trace's steps when not given, and only when needed)."""
    if trace.n_events == 0:
        return np.zeros(0, np.int64)
    prof, handle, tune = _named_ids(trace)
    roots = [_events_named(trace, prof), _events_named(trace, handle)]
    early_end = None if first_end is _UNKNOWN else first_end
    early_known = first_end is not _UNKNOWN

    def early():
        nonlocal early_end, early_known
        if not early_known:
            early_end, early_known = _first_iteration_end(trace), True
        return early_end

    t_ev = _events_named(trace, tune)
    if t_ev.size:
        end = early()
        if end is not None:
            t_ev = t_ev[trace.ts[t_ev] < end]
        # XLA autotunes inside its compiler: that is compilation's
        roots.append(np.asarray([e for e in t_ev.tolist() if not _under_compile(trace, e)],
                                np.int64))
    roots.append(_slow_runtime_calls(trace, early))
    out = distinct(np.concatenate(roots).astype(np.int64)) if roots else np.zeros(0, np.int64)
    return _outermost(trace, out)


def _slow_runtime_calls(trace: Trace, early) -> np.ndarray:
    """First-iteration runtime/driver calls far longer than the same call later in the
    process (context creation, lazy module loading)."""
    none = np.zeros(0, np.int64)
    long_ = np.flatnonzero(trace.dur >= MIN_PS)
    if long_.size == 0:
        return none
    long_ = long_[(trace.track_kind[trace.track[long_]] == TrackKind.HOST) &
                  isin_few(trace.kind[long_], _RT_KINDS + _BLOCKING_KINDS)]
    rt = [int(i) for i in distinct(trace.name[long_]).tolist()
          if _RUNTIME.match(trace.strings[int(i)])]
    if not rt:
        return none
    long_ = long_[np.isin(trace.name[long_], rt)]
    end = early()
    if end is not None:
        long_ = long_[trace.ts[long_] < end]
    if long_.size == 0:
        return none
    # per process (its host tracks): when its first runtime call came, and how long the
    # same calls take later.  Read a track block at a time, the later calls sampled: a
    # capture of 20 M launches holds no column over them all
    want = np.zeros(len(trace.strings), bool)
    want[_runtime_name_ids(trace)] = True
    tracks_of: dict = {}
    for t in np.flatnonzero(trace.track_kind == TrackKind.HOST).tolist():
        tracks_of.setdefault(trace.track_group[t], []).append(t)
    samples: dict = {}
    first_ts: dict = {}
    per_proc: dict = {}
    out = []
    for e in long_[np.argsort(trace.ts[long_], kind="stable")].tolist():
        proc = trace.track_group[int(trace.track[e])]
        # start-up comes first: the earliest long calls of a process are looked at
        per_proc[proc] = per_proc.get(proc, 0) + 1
        if per_proc[proc] > MAX_CANDIDATES:
            continue
        tracks = tracks_of[proc]
        if proc not in first_ts:
            first_ts[proc] = _first_call(trace, tracks, want)
        ts = int(trace.ts[e])
        first = ts <= first_ts[proc]
        # a sync or a copy waits for the device: its time is the device's, unless the
        # process had made no runtime call before it
        blocking = trace.kind[e] in _BLOCKING_KINDS or "emcpy" in trace.strings[
            int(trace.name[e])]
        if blocking and not first:
            continue
        # later: after the first iteration (one window: after this call)
        after = end if end is not None else ts + 1
        nid = int(trace.name[e])
        if (proc, nid) not in samples:
            same = np.zeros(len(trace.strings), bool)
            same[nid] = True
            samples[(proc, nid)] = _sample(trace, tracks, same)
        ref = _median_after(samples[(proc, nid)], after)
        if ref is None:
            if (proc, -1) not in samples:
                samples[(proc, -1)] = _sample(trace, tracks, want)
            ref = _median_after(samples[(proc, -1)], after)
        if ref is not None:
            if trace.dur[e] >= FAR * max(ref, 1.0):
                out.append(e)
        elif first and trace.dur[e] >= FIRST_ALONE_PS:
            out.append(e)
    return np.asarray(sorted(out), np.int64)


_BLOCK = 1 << 22
_SAMPLE = 1 << 16          # calls a median is taken over, about at most (evenly spaced)
MAX_CANDIDATES = 64        # long calls of a process looked at, its earliest first


def _first_call(trace: Trace, tracks: list, want: np.ndarray) -> int:
    """Start (ps) of the earliest event named in ``want`` on ``tracks`` (a track's
    events are in time order: its first such event is its earliest)."""
    best = np.iinfo(np.int64).max
    for lo, hi in trace.track_slices(tracks):
        for a in range(lo, hi, _BLOCK):
            b = min(a + _BLOCK, hi)
            hit = np.flatnonzero(want[trace.name[a:b]])
            if hit.size:
                best = min(best, int(trace.ts[a + hit[0]]))
                break
    return best


def _sample(trace: Trace, tracks: list, want: np.ndarray) -> tuple:
    """(starts, durations) of the events named in ``want`` on ``tracks``, evenly sampled
    to about ``_SAMPLE`` of them a block of events: read a block at a time (a capture of
    20 M launches holds no column over them all)."""
    parts = []
    for lo, hi in trace.track_slices(tracks):
        for a in range(lo, hi, _BLOCK):
            b = min(a + _BLOCK, hi)
            hit = a + np.flatnonzero(want[trace.name[a:b]])
            parts.append(hit[::max(hit.size // _SAMPLE, 1)])
    ev = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return trace.ts[ev].astype(np.int64), trace.dur[ev].astype(np.int64)


def _median_after(sample: tuple, after: int) -> float | None:
    """Median duration of the sampled calls that start at or after ``after``."""
    ts, dur = sample
    sel = dur[ts >= after]
    return float(np.median(sel)) if sel.size else None


def _events_named(trace: Trace, ids: list) -> np.ndarray:
    """Host events whose name is one of ``ids``: one gather of a table over the strings
    (``isin`` over tens of names would pass over the events once per run of ids)."""
    if not ids:
        return np.zeros(0, np.int64)
    want = np.zeros(len(trace.strings), bool)
    want[ids] = True
    ev = np.flatnonzero(want[trace.name])
    return ev[trace.track_kind[trace.track[ev]] == TrackKind.HOST]


def _runtime_name_ids(trace: Trace) -> list:
    """Ids of the names that are runtime or driver calls (``_RUNTIME``)."""
    S = trace.strings
    if hasattr(S, "ids_starting"):
        ids = set(S.ids_starting("cu")) | set(S.ids_starting("hip"))
    else:
        ids = {i for i, s in enumerate(S) if s.startswith(("cu", "hip"))}
    return sorted(i for i in ids if _RUNTIME.match(S[i]))


def _outermost(trace: Trace, ev: np.ndarray) -> np.ndarray:
    """``ev`` (ascending) without the events another of them encloses: their ancestors
    walked up a level at a time for all of them at once."""
    if ev.size < 2:
        return ev
    inner = np.zeros(ev.shape[0], bool)
    cur = trace.parent[ev].astype(np.int64)
    for _ in range(256):
        live = cur >= 0
        if not live.any():
            break
        k = np.minimum(np.searchsorted(ev, cur), ev.shape[0] - 1)
        inner |= live & (ev[k] == cur)
        cur = np.where(live & ~inner, trace.parent[np.maximum(cur, 0)], -1).astype(np.int64)
    return ev[~inner]


def startup_ranges(trace: Trace, roots: np.ndarray) -> list:
    """(lo, hi) event ranges of each root and what it encloses: events are sorted by
    (track, start), so the events a root encloses are those of its track that start after
    it and before its end (the deepest open event at their start is it or one of its
    own)."""
    if roots.size == 0:
        return []
    roots = np.asarray(roots, np.int64)
    bounds = trace.track_bounds()
    tr = trace.track[roots].astype(np.int64)
    his = np.empty(roots.shape[0], np.int64)
    for t in distinct(tr).tolist():
        sel = np.flatnonzero(tr == t)
        lo, hi = int(bounds[t]), int(bounds[t + 1])
        his[sel] = lo + np.searchsorted(trace.ts[lo:hi], trace.end_of(roots[sel]), side="left")
    his = np.maximum(his, roots + 1)
    return list(zip(roots.tolist(), his.tolist()))


def profiler_cost(trace: Trace) -> dict:
    """What the profiler itself put in a capture: its Python-tracer events (``python_events``)
    and the host time of its own start and stop calls (``calls_ps``: the outermost start
    frame's and the outermost stop frame's; their inner frames hold each other), for a
    run's trust (``analysis.run.trust``)."""
    py = trace.kind == K.PYTHON
    names = np.unique(trace.name[py]) if py.any() else np.zeros(0, np.int32)
    ours = [int(x) for x in names.tolist() if profiler_frame(trace.strings[int(x)])]
    start = stop = 0
    if ours:
        ev = np.flatnonzero(py)
        ev = ev[isin_few(trace.name[ev], ours)]
        for e in ev.tolist():
            name, d = trace.strings[int(trace.name[e])], int(trace.dur[e])
            if "stop" in name or "exit" in name:
                stop = max(stop, d)
            else:
                start = max(start, d)
    return {"python_events": int(np.count_nonzero(py)), "calls_ps": start + stop}
