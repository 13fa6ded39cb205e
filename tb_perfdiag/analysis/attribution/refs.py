"""The name table of the events a diagnosis cites (see ``result.EventRefs``)."""
from __future__ import annotations

import numpy as np

from ...trace.build import distinct, unique_rows
from ...trace.model import Trace, search
from ..result import EventRefs


def _stat_ids(trace: Trace, key: str, events: np.ndarray) -> np.ndarray:
    st = trace.stats.get(key)
    if st is None or events.size == 0 or not st.is_string or st.events.size == 0:
        return np.full(events.shape[0], -1, np.int64)
    k = np.minimum(search(st.events, events), st.events.shape[0] - 1)
    return np.where(st.events[k] == events, st.take(k).astype(np.int64), -1)


def event_refs(trace: Trace, events) -> EventRefs:
    ev = distinct(np.concatenate([np.asarray(e, np.int64).reshape(-1) for e in events])
                  if events else np.zeros(0, np.int64))
    ev = ev[ev >= 0]
    # the ancestors' names as rows of a matrix: one chain per distinct row
    cols, cur = [], ev
    while cur.size and (cur >= 0).any():
        cols.append(np.where(cur >= 0, trace.name[np.maximum(cur, 0)], -1))
        cur = np.where(cur >= 0, trace.parent[np.maximum(cur, 0)], -1)
    name = trace.name[ev].astype(np.int64)
    hlo = _stat_ids(trace, "hlo_op", ev)
    op_name = _stat_ids(trace, "op_name", ev)
    ann = np.where(op_name >= 0, op_name, _stat_ids(trace, "tf_op", ev))
    rows = np.stack(cols[::-1], axis=1).astype(np.int64) if cols \
        else np.zeros((0, 0), np.int64)
    u, inv = unique_rows(rows) if rows.size else (rows, np.zeros(0, np.int64))
    # the trace's string ids these events need, renumbered densely: the refs keep only
    # the strings they cite
    used = distinct(np.concatenate((u.reshape(-1), name, hlo, ann)))
    used = used[used >= 0]
    strings = [trace.strings[x] for x in used.tolist()]

    def remap(a: np.ndarray) -> np.ndarray:
        k = np.searchsorted(used, a)
        return np.where(a >= 0, k, -1).astype(np.int32)

    # a chain is padded on its outer side (a −1 stays −1 up the walk): its names are
    # the row past its padding
    r = remap(u)
    pad = (r < 0).sum(axis=1).tolist()
    made = [tuple(x[k:]) for x, k in zip(r.tolist(), pad)]
    chain = [made[i] for i in inv.reshape(-1).tolist()]
    out = EventRefs(
        event=ev, name=remap(name),
        track=trace.track[ev].astype(np.int32), ts=trace.ts[ev].copy(),
        dur=trace.dur[ev].copy(), kind=trace.kind[ev].copy(),
        hlo_op=remap(hlo), annotation=remap(ann),
        chain=chain, strings=strings)
    _captured(trace, out)
    _graph_annotations(trace, out)
    return out


def _graph_annotations(trace: Trace, R: EventRefs) -> None:
    """A cited kernel a CUDA graph replayed with its own annotation (torch ≥ 2.15's graph
    annotations, the reader's ``graph_annotation`` stat: JSON text) takes it where it has
    no other."""
    if "graph_annotation" not in trace.stats or not R.event.size:
        return
    import json
    gid = _stat_ids(trace, "graph_annotation", R.event)
    rows = np.flatnonzero((gid >= 0) & (R.annotation < 0))
    index: dict = {}
    for r in rows.tolist():
        try:
            s = json.loads(trace.strings[int(gid[r])])
        except ValueError:
            continue
        if isinstance(s, str) and s:
            if s not in index:
                index[s] = len(R.strings)
                R.strings.append(s)
            R.annotation[r] = index[s]


def _captured(trace: Trace, R: EventRefs) -> None:
    """The cited events replayed from a CUDA/HIP graph take the place their launch had
    while the graph was captured: its names join the refs' strings (the capture may be
    another trace)."""
    from ..efficiency.graphs import captured_places
    rows, places = captured_places(trace, R.event)
    if not rows.size:
        return
    index = {s: i for i, s in enumerate(R.strings)}

    def sid(s: str) -> int:
        i = index.get(s)
        if i is None:
            i = index[s] = len(R.strings)
            R.strings.append(s)
        return i
    R.captured_rows = rows.astype(np.int64)
    R.captured_chain = [tuple(sid(n) for n in p.chain) for p in places]
    R.captured_op = np.array([sid(p.op) if p.op else -1 for p in places], np.int32)
    R.captured_annotations = [tuple(sid(a) for a in p.annotations) for p in places]
