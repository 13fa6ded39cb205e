"""CUDA/HIP graph replays aligned with their capture (GUIDE §4, "Graph replays").

Every kernel of a replay carries the correlation id of the one ``cudaGraphLaunch`` /
``hipGraphLaunch``: no host op launched it one by one, so no shapes reach it.  The
shapes were recorded while the graph was captured: each launch then is a runtime event
(``args.kernel`` = the kernel's name, the reader's ``launch_kernel`` stat) inside a
``…StreamBeginCapture`` … ``…StreamEndCapture`` window on its thread, under the ops
with ``Input Dims``, while no kernel runs.  A replay's device events, in order, are
matched with a capture's launches, in order, by kernel name (copies and memsets by
kind), skipping the capture launches that match none; a replayed event never matches
by time.  The capture may be another trace (vLLM's and SGLang's ``capture_traces/``,
``--capture``: ``Trace.captures``) or the execution trace's own capture windows.

Columnar: per replay the kernel names are integer codes (one code per distinct name
over the traces); identical replays (same code sequence) are aligned once.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ...trace.model import EventKind, LinkKind, Trace
from ..result import GraphSummary
from .opcosts import per_trace

GRAPH_LAUNCH = re.compile(r"^(cu|cuda|hip)GraphLaunch", re.I)
_BEGIN = re.compile(r"^(cu|cuda|hip)StreamBeginCapture", re.I)
_END = re.compile(r"^(cu|cuda|hip)StreamEndCapture", re.I)
_COPY_CALL = re.compile(r"^(cu|cuda|hip)\w*Memcpy", re.I)
_SET_CALL = re.compile(r"^(cu|cuda|hip)\w*Memset", re.I)
# the codes of copies and sets (kernel names are coded from 0 up)
COPY, SET, NONE = -2, -3, -4
# vLLM's step names give the batch the graph was captured for: execute_<T>_…
_STEP_TOKENS = re.compile(r"^execute_(\d+)_")


@dataclass
class Capture:
    """The launches recorded while graphs were captured, in one trace (columns over
    the launches, in capture order then time)."""

    trace: Trace | None         # None: the execution trace itself
    launch: np.ndarray          # int64 launch runtime events
    capture: np.ndarray         # int64 the capture (window) each is in
    name: np.ndarray            # int64 per launch: its ``names`` index (−1: a copy or set)
    kind: np.ndarray            # int8: 0 kernel, COPY, SET
    names: list                 # the distinct kernel names launched
    n_captures: int
    batch: np.ndarray = None    # per capture: the batch size it was captured for (−1)


@dataclass
class GraphMatch:
    """The device events replayed from graphs in an execution trace, and what each
    matched in a capture (columns over the replayed events, by replay then time)."""

    event: np.ndarray           # int64 device events replayed from a graph
    replay: np.ndarray          # int64 index of its replay
    graph_launch: np.ndarray    # per replay: the cudaGraphLaunch/hipGraphLaunch event
    source: np.ndarray          # int64 per event: index into ``captures`` (−1 none)
    launch: np.ndarray          # int64 per event: the capture's launch event (−1 none)
    captures: list = field(default_factory=list)   # the ``Capture``s searched
    # per replay: launches of its capture that no event matched (under-recorded when
    # the replay has fewer events than its capture: the trace did not see them)
    missing: np.ndarray = None
    one_activity: int = 0       # replays recorded with at most one device event
    by_event: np.ndarray = None  # the rows in event order (``captured_places``)
    places: dict = field(default_factory=dict)  # (source, launch) → CapturedPlace

    @property
    def total(self) -> int:
        return int(self.event.shape[0])

    @property
    def matched(self) -> int:
        return int((self.launch >= 0).sum())


def graph_launches(trace: Trace) -> np.ndarray:
    """The graph-launch runtime events of ``trace`` (ascending)."""
    launch = np.flatnonzero(trace.kind == EventKind.LAUNCH)
    return launch[names_matching(trace, trace.name[launch], GRAPH_LAUNCH)]


def names_matching(trace: Trace, names: np.ndarray, rx) -> np.ndarray:
    """Whether each name id of ``names`` matches ``rx``, decided once per distinct name
    through a table over the string ids (a unique's sort of 300 k launches: 150 ms)."""
    if not names.size:
        return np.zeros(0, bool)
    seen = np.zeros(len(trace.strings), bool)
    seen[names] = True
    hit = np.zeros(seen.shape[0], bool)
    for i in np.flatnonzero(seen).tolist():
        hit[i] = bool(rx.search(trace.strings[i]))
    return hit[names]


def replayed(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(device events replayed from graphs, each one's replay, each replay's launch):
    events by replay, then time."""
    gl = graph_launches(trace)
    z = np.zeros(0, np.int64)
    if not gl.size:
        return z, z, z
    corr = trace.link_kind == LinkKind.CORRELATION
    src, dst = trace.link_src[corr].astype(np.int64), trace.link_dst[corr].astype(np.int64)
    pos = np.minimum(np.searchsorted(gl, src), gl.shape[0] - 1)
    on = gl[pos] == src
    ev, rep = dst[on], pos[on]
    ok = np.isin(trace.kind[ev], (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET))
    ev, rep = ev[ok], rep[ok]
    o = np.lexsort((ev, trace.ts[ev], rep))
    return ev[o], rep[o], gl


def capture_launches(trace: Trace, batch_of_file: int = -1) -> Capture | None:
    """The launches inside the capture windows of ``trace`` (None where it has none)."""
    gc = np.flatnonzero(trace.kind == EventKind.GRAPH_CAPTURE)
    if not gc.size:
        return None
    nm = [trace.strings[i] for i in trace.name[gc].tolist()]
    begin = gc[np.array([bool(_BEGIN.search(s)) for s in nm], bool)]
    end = gc[np.array([bool(_END.search(s)) for s in nm], bool)]
    if not begin.size or not end.size:
        return None
    launches = np.flatnonzero(trace.kind == EventKind.LAUNCH)
    parts, caps, n_cap = [], [], 0
    for tr in np.unique(trace.track[begin]).tolist():
        b = begin[trace.track[begin] == tr]
        e = end[trace.track[end] == tr]
        lt = launches[trace.track[launches] == tr]
        bt, et, ltt = trace.ts[b], trace.ts[e], trace.ts[lt]
        # each begin's window ends at the first end after it
        j = np.searchsorted(et, bt, side="left")
        ok = j < et.shape[0]
        bt, wend = bt[ok], et[np.minimum(j[ok], max(et.shape[0] - 1, 0))]
        w = np.searchsorted(bt, ltt, side="right") - 1
        inside = (w >= 0) & (ltt <= wend[np.maximum(w, 0)])
        parts.append(lt[inside])
        caps.append(w[inside] + n_cap)
        n_cap += int(bt.shape[0])
    launch = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    cap = np.concatenate(caps) if caps else np.zeros(0, np.int64)
    o = np.lexsort((trace.ts[launch], cap))
    launch, cap = launch[o].astype(np.int64), cap[o].astype(np.int64)
    name, names = _launch_names(trace, launch)
    # a launch without a kernel name: a copy or a set by its call's name, else none of ours
    u, inv = np.unique(trace.name[launch], return_inverse=True)
    call = [trace.strings[i] for i in u.tolist()]
    by_call = np.array([COPY if _COPY_CALL.search(c) else SET if _SET_CALL.search(c) else NONE
                        for c in call], np.int8)
    kind = np.where(name >= 0, 0, by_call[inv.reshape(-1)] if u.size else NONE).astype(np.int8)
    keep = kind != NONE
    return Capture(trace, launch[keep], cap[keep], name[keep], kind[keep], names, n_cap,
                   np.full(n_cap, int(batch_of_file), np.int64))


def _launch_names(trace: Trace, launch: np.ndarray) -> tuple[np.ndarray, list]:
    """(each launch's index into the distinct kernel names its ``launch_kernel`` stat
    gives (a JSON string; −1 none), those names): parsed once per distinct text."""
    st = trace.stats.get("launch_kernel")
    out = np.full(launch.shape[0], -1, np.int64)
    if st is None or not launch.size:
        return out, []
    import json
    v, has = st.lookup(launch)
    v = np.where(has, np.asarray(v, np.int64), -1)
    u, inv = np.unique(v, return_inverse=True)
    names, code = [], np.full(u.shape[0], -1, np.int64)
    for j, x in enumerate(u.tolist()):
        if x < 0:
            continue
        try:
            s = json.loads(trace.strings[x])
        except ValueError:
            continue
        if isinstance(s, str) and s:
            code[j] = len(names)
            names.append(s)
    return code[inv.reshape(-1)], names


def graph_match(trace: Trace) -> GraphMatch | None:
    """The graph replays of ``trace`` aligned with the captures it has (its own capture
    windows and ``trace.captures``), once per trace; None without replays."""
    return per_trace(trace, "graph_match", _match)


def _match(trace: Trace) -> GraphMatch | None:
    ev, rep, gl = replayed(trace)
    if not gl.size:
        return None
    caps = []
    own = capture_launches(trace)
    if own is not None:
        own.trace = None            # the trace itself: the memo must not keep it alive
        caps.append(own)
    for c in getattr(trace, "captures", None) or ():
        got = capture_launches(c.trace, c.batch) if hasattr(c, "trace") else capture_launches(c)
        if got is not None:
            caps.append(got)
    n_rep = int(gl.shape[0])
    counts = np.bincount(rep, minlength=n_rep)
    out = GraphMatch(ev, rep, gl, np.full(ev.shape[0], -1, np.int64),
                     np.full(ev.shape[0], -1, np.int64), caps, np.zeros(n_rep, np.int64),
                     int((counts <= 1).sum()))
    if not caps or not ev.size:
        return out
    codes = _Codes()
    rep_code = _replay_codes(trace, ev, codes)
    cap_code = [np.where(c.kind == 0, np.array([codes.of(n) for n in c.names] + [0],
                                               np.int64)[c.name], c.kind.astype(np.int64))
                for c in caps]
    pool = _Pool(caps, cap_code)
    bounds = np.searchsorted(rep, np.arange(n_rep + 1))
    batch = _step_batch(trace, gl)
    done: dict = {}
    for r in range(n_rep):
        a, b = int(bounds[r]), int(bounds[r + 1])
        seq = rep_code[a:b]
        key = (seq.tobytes(), int(batch[r]))
        got = done.get(key)
        if got is None:
            got = done[key] = pool.best(seq, int(batch[r]))
        if got is None:
            continue
        src, pos, missing = got
        hit = pos >= 0
        out.source[a:b] = np.where(hit, src, -1)
        out.launch[a:b] = np.where(hit, caps[src].launch[np.maximum(pos, 0)], -1)
        out.missing[r] = missing
    return out


class _Codes:
    """One integer per distinct kernel name, over the traces."""

    def __init__(self):
        self.table: dict = {}

    def of(self, name: str) -> int:
        return self.table.setdefault(name, len(self.table))


def _replay_codes(trace: Trace, ev: np.ndarray, codes: _Codes) -> np.ndarray:
    """Per replayed event: its kernel name's code, COPY or SET."""
    u, inv = np.unique(trace.name[ev], return_inverse=True)
    table = np.array([codes.of(trace.strings[i]) for i in u.tolist()], np.int64)
    out = table[inv.reshape(-1)]
    k = trace.kind[ev]
    out[k == EventKind.MEMCPY] = COPY
    out[k == EventKind.MEMSET] = SET
    return out


def align(seq: np.ndarray, launches: np.ndarray) -> np.ndarray:
    """Each replayed event's position among a capture's ``launches`` (codes, in order):
    in order, equal codes, skipping launches that match none; −1 where the event
    matches none after the previous match (the launches stay where they were)."""
    out = np.full(seq.shape[0], -1, np.int64)
    where: dict = {}
    for c in np.unique(seq).tolist():
        where[c] = np.flatnonzero(launches == c)
    j = 0
    for i, c in enumerate(seq.tolist()):
        p = where[c]
        k = int(np.searchsorted(p, j))
        if k < p.shape[0]:
            out[i] = p[k]
            j = int(p[k]) + 1
    return out


class _Pool:
    """The captures' launch sequences, searched for the one a replay ran."""

    def __init__(self, caps: list, cap_code: list):
        self.seqs, self.src, self.batch = [], [], []
        for s, (c, code) in enumerate(zip(caps, cap_code)):
            b = np.searchsorted(c.capture, np.arange(c.n_captures + 1))
            for g in range(c.n_captures):
                self.seqs.append(code[b[g]:b[g + 1]])
                self.src.append((s, int(b[g])))
                self.batch.append(int(c.batch[g]) if c.batch is not None else -1)
        self.batch = np.asarray(self.batch, np.int64)
        self.length = np.array([x.shape[0] for x in self.seqs], np.int64)
        # launches per (capture, code): a replay's cover of each capture in one step
        allc = np.concatenate(self.seqs) if self.seqs else np.zeros(0, np.int64)
        self.vals = np.unique(allc)
        cap = np.repeat(np.arange(len(self.seqs)), self.length)
        col = np.searchsorted(self.vals, allc)
        self.count = np.zeros((len(self.seqs), max(self.vals.shape[0], 1)), np.int32)
        np.add.at(self.count, (cap, col), 1)

    def best(self, seq: np.ndarray, batch: int):
        """(capture source, each event's position in its launches, launches left
        unmatched) of the capture matching most of ``seq``; None where none matches."""
        if not self.seqs or not self.vals.size:   # captures with no launch we can name
            return None
        vals, cnt = np.unique(seq, return_counts=True)
        col = np.minimum(np.searchsorted(self.vals, vals), self.vals.shape[0] - 1)
        there = self.vals[col] == vals
        cover = np.minimum(self.count[:, col[there]], cnt[there]).sum(axis=1)
        if not cover.max() > 0:
            return None
        # the most covered, then those captured for the step's batch, then the shortest
        order = np.lexsort((self.length, -(self.batch == batch).astype(np.int64), -cover))
        best = None
        for g in order[:4].tolist():
            if cover[g] == 0:
                break
            pos = align(seq, self.seqs[g])
            n = int((pos >= 0).sum())
            if best is None or n > best[0]:
                best = (n, g, pos)
            if n == seq.shape[0]:
                break
        n, g, pos = best
        if n == 0:
            return None
        s, first = self.src[g]
        return s, np.where(pos >= 0, pos + first, -1), int(self.length[g]) - n


def _step_batch(trace: Trace, gl: np.ndarray) -> np.ndarray:
    """Per graph launch: the padded batch vLLM's step name around it gives (−1 none)."""
    out = np.full(gl.shape[0], -1, np.int64)
    ann = np.flatnonzero(trace.kind == EventKind.ANNOTATION)
    if not ann.size:
        return out
    names = [trace.strings[i] for i in trace.name[ann].tolist()]
    tok = np.array([int(m.group(1)) if (m := _STEP_TOKENS.match(s)) else -1 for s in names])
    ann, tok = ann[tok >= 0], tok[tok >= 0]
    if not ann.size:
        return out
    o = np.argsort(trace.ts[ann], kind="stable")
    ann, tok = ann[o], tok[o]
    s = trace.ts[ann]
    e = s + trace.dur[ann]
    k = np.searchsorted(s, trace.ts[gl], side="right") - 1
    ok = (k >= 0) & (trace.ts[gl] <= e[np.maximum(k, 0)])
    out[ok] = tok[k[ok]]
    return out


def summary(trace: Trace, n_dev: int) -> GraphSummary | None:
    """The per-device counts of ``graph_match`` (None where the trace replays no graph
    with device events)."""
    m = graph_match(trace)
    if m is None or not m.total:
        return None
    dev = trace.track_device[trace.track[m.event]].astype(np.int64)
    ok = (dev >= 0) & (dev < n_dev)
    z = lambda w=None: np.bincount(dev[ok], weights=w, minlength=n_dev)[:n_dev].astype(np.int64)  # noqa: E731
    # a replay's device: its first event's
    first = np.flatnonzero(np.r_[True, m.replay[1:] != m.replay[:-1]])
    rdev, rrep = dev[first], m.replay[first]
    rok = (rdev >= 0) & (rdev < n_dev)
    reps = np.bincount(rdev[rok], minlength=n_dev)[:n_dev].astype(np.int64)
    unrec = np.bincount(rdev[rok], weights=m.missing[rrep[rok]],
                        minlength=n_dev)[:n_dev].astype(np.int64)
    return GraphSummary(z((m.launch >= 0)[ok].astype(np.float64)), z(), reps, unrec,
                        len(getattr(trace, "captures", None) or ()),
                        sum(c.n_captures for c in m.captures))


def under_recorded_notes(trace: Trace) -> list:
    """Capture notes on replays the trace recorded in part: fewer device events than
    their capture launched, or one activity for a whole graph."""
    m = graph_match(trace)
    if m is None or not m.total:
        return []
    out = []
    cnt = np.bincount(m.replay, minlength=m.graph_launch.shape[0])
    short = np.flatnonzero(m.missing > 0)
    if short.size:
        out.append(f"{short.size} of {int((cnt > 0).sum())} graph replays recorded fewer device "
                   f"events than their capture launched ({int(m.missing[short].sum())} launches "
                   f"in all): device work the trace did not see; the duty cycle and MFU are "
                   f"lower bounds, and the idle around those replays is not the host's")
    # without a capture to count against: replays of one activity each are whole graphs
    one = int((cnt == 1).sum())
    if one and one == int((cnt > 0).sum()) and not m.captures:
        out.append(f"{one} graph replays were recorded as one device activity each: their "
                   f"kernels are not seen one by one (record the graph's capture, or profile "
                   f"with per-kernel graph tracing), and the figures inside them are unknown")
    if not m.captures:
        out.append(f"{int((cnt > 0).sum())} graph replays ({m.total} device events) have no "
                   f"capture to take their ops' shapes from: their kernels carry no cost "
                   f"figure (write the capture's trace beside this one in capture_traces/, or "
                   f"name it with --capture)")
    return out


def replay_host_ops(trace: Trace, ops: np.ndarray) -> tuple[np.ndarray, np.ndarray, list]:
    """(positions in ``ops``, name ids, names only the capture holds) of the ops replayed
    from a graph: the framework op that launched each while the graph was captured, else
    the graph launch itself ("hipGraphLaunch").  An id below ``len(trace.strings)`` is the
    trace's own string; id ``len(trace.strings) + j`` the j-th name only the capture
    trace holds (``Strings`` is immutable: the names ride beside it)."""
    z = np.zeros(0, np.int64)
    m = graph_match(trace)
    if m is None or not m.total or not ops.size:
        return z, z, []
    order = np.argsort(m.event, kind="stable")
    sev = m.event[order]
    ops = np.asarray(ops, np.int64)
    k = np.minimum(np.searchsorted(sev, ops), sev.shape[0] - 1)
    pos = np.flatnonzero(sev[k] == ops)
    at = order[k[pos]]
    launch_name = trace.name[m.graph_launch[m.replay[at]]].astype(np.int64)
    names = [_captured_op(m, s, ln) if ln >= 0 else "" for s, ln in
             zip(m.source[at].tolist(), m.launch[at].tolist())]
    want = set(names) - {""}
    index: dict = {}
    if want:
        for i, s in enumerate(trace.strings):   # the trace's own id of each name it holds
            if s in want and s not in index:
                index[s] = i
    extra = sorted(want - set(index))
    n = len(trace.strings)
    index.update((s, n + j) for j, s in enumerate(extra))
    ids = np.array([index.get(s, -1) for s in names], np.int64) if names else z
    return pos, np.where(ids >= 0, ids, launch_name), extra


def _captured_op(m: GraphMatch, src: int, event: int) -> str:
    """The name of the framework op around a capture's launch ("" none; "" for the
    trace's own capture windows, whose ops the climb from the launch finds anyway)."""
    t = m.captures[src].trace
    if t is None:
        return ""
    cur = int(t.parent[event])
    for _ in range(64):
        if cur < 0:
            break
        if t.kind[cur] == EventKind.CPU_OP:
            return t.strings[int(t.name[cur])]
        cur = int(t.parent[cur])
    return ""


@dataclass(frozen=True)
class CapturedPlace:
    """Where a replayed kernel was launched while its graph was captured: the capture's
    call chain of the launch (names, outermost first, the launch call last), the innermost
    framework op in it ("" none) and the user annotations in it (outermost first)."""

    chain: tuple
    op: str
    annotations: tuple


_MAX_DEPTH = 512                # a chain deeper than this is a broken parent column


def captured_places(trace: Trace, events: np.ndarray) -> tuple[np.ndarray, list]:
    """(positions in ``events``, their ``CapturedPlace``s) of the events replayed from a
    graph and matched to a capture's launch; each distinct launch's chain is walked once
    (a capture holds a few thousand launches, whatever the replays)."""
    z = np.zeros(0, np.int64)
    m = graph_match(trace)
    if m is None or not m.matched or not len(events):
        return z, []
    ev = np.asarray(events, np.int64)
    if m.by_event is None:          # asked once per finding: the sort is kept
        m.by_event = np.argsort(m.event, kind="stable")
    order = m.by_event
    sev = m.event[order]
    k = np.minimum(np.searchsorted(sev, ev), sev.shape[0] - 1)
    pos = np.flatnonzero(sev[k] == ev)
    at = order[k[pos]]
    keep = m.launch[at] >= 0
    pos, at = pos[keep], at[keep]
    out = []
    for s, ln in zip(m.source[at].tolist(), m.launch[at].tolist()):
        got = m.places.get((s, ln))
        if got is None:
            got = m.places[(s, ln)] = _place(m.captures[s].trace or trace, ln)
        out.append(got)
    return pos, out


def _place(t: Trace, launch: int) -> CapturedPlace:
    from ...trace.classify import frame_name
    names, kinds = [], []
    cur = int(launch)
    while cur >= 0 and len(names) < _MAX_DEPTH:
        names.append(t.strings[int(t.name[cur])])
        kinds.append(int(t.kind[cur]))
        cur = int(t.parent[cur])
    names.reverse()
    kinds.reverse()
    op = next((n for n, k in zip(reversed(names), reversed(kinds))
               if k == EventKind.CPU_OP), "")
    ann = tuple(frame_name(n) for n, k in zip(names, kinds)
                if k in (EventKind.ANNOTATION, EventKind.DATA))
    return CapturedPlace(tuple(names), op, ann)
