"""The name table of the events a diagnosis cites (see ``result.EventRefs``)."""
from __future__ import annotations

import numpy as np

from ..trace.build import unique_rows
from ..trace.model import Trace
from .result import EventRefs


def _stat_ids(trace: Trace, key: str, events: np.ndarray) -> np.ndarray:
    st = trace.stats.get(key)
    if st is None or events.size == 0 or not st.is_string or st.events.size == 0:
        return np.full(events.shape[0], -1, np.int64)
    k = np.minimum(np.searchsorted(st.events, events), st.events.shape[0] - 1)
    return np.where(st.events[k] == events, st.values[k].astype(np.int64), -1)


def event_refs(trace: Trace, events) -> EventRefs:
    ev = np.unique(np.concatenate([np.asarray(e, np.int64).reshape(-1) for e in events])
                   if events else np.zeros(0, np.int64))
    ev = ev[ev >= 0]
    # the ancestors' names as rows of a matrix: one chain per distinct row
    cols, cur = [], ev
    while cur.size and (cur >= 0).any():
        cols.append(np.where(cur >= 0, trace.name[np.maximum(cur, 0)], -1))
        cur = np.where(cur >= 0, trace.parent[np.maximum(cur, 0)], -1)
    local: dict = {}
    strings: list = []

    def sid(x: int) -> int:
        i = local.get(x)
        if i is None:
            i = local[x] = len(strings)
            strings.append(trace.strings[x])
        return i

    if cols:
        rows = np.stack(cols[::-1], axis=1).astype(np.int64)
        u, inv = unique_rows(rows)
        made = [tuple(sid(x) for x in r if x >= 0) for r in u.tolist()]
        chain = [made[i] for i in inv.reshape(-1).tolist()]
    else:
        chain = []
    remap = (lambda a: np.array([sid(x) if x >= 0 else -1 for x in a.tolist()], np.int32))
    return EventRefs(
        event=ev, name=remap(trace.name[ev].astype(np.int64)),
        track=trace.track[ev].astype(np.int32), ts=trace.ts[ev].copy(),
        dur=trace.dur[ev].copy(), kind=trace.kind[ev].copy(),
        hlo_op=remap(_stat_ids(trace, "hlo_op", ev)),
        annotation=remap(np.where(_stat_ids(trace, "op_name", ev) >= 0,
                                  _stat_ids(trace, "op_name", ev),
                                  _stat_ids(trace, "tf_op", ev))),
        chain=chain, strings=strings)
