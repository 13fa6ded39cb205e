"""The user annotations' paths on host events: the innermost annotation enclosing each event,
an annotation's path (the names enclosing it, outermost first), and the paths a CUDA/HIP
graph's replayed kernels take from the annotations around their launch at capture."""
from __future__ import annotations

import numpy as np

from ...trace.build import distinct, parent_down, unique_inverse, unique_rows
from ...trace.classify import frame_name
from ...trace.model import EventKind as K, Trace, isin_few


def _captured_paths(trace: Trace, ops: np.ndarray, pid: np.ndarray, paths: list,
                    intern) -> None:
    """Kernels replayed from a CUDA/HIP graph take, below the annotations around the
    graph's launch, those that enclosed their launch while the graph was captured
    (``graphs.graph_match``: the capture trace's own user annotations, as names; none of
    its events is copied)."""
    from ..efficiency.graphs import graph_match
    m = graph_match(trace)
    if m is None or not m.matched or not ops.size:
        return
    ok = m.launch >= 0
    ev, src, launch = m.event[ok], m.source[ok], m.launch[ok]
    order = np.argsort(ops, kind="stable")
    so = ops[order]
    k = np.minimum(np.searchsorted(so, ev), so.shape[0] - 1)
    hit = so[k] == ev
    rows, src, launch = order[k[hit]], src[hit], launch[hit]
    # the capture's paths apart: alone they are no path of this trace's device time
    cpaths: list = []
    cindex: dict = {}

    def cintern(p):
        i = cindex.get(p)
        if i is None:
            i = cindex[p] = len(cpaths)
            cpaths.append(p)
        return i
    for s in np.unique(src).tolist():
        sel = src == s
        cap = m.captures[s].trace or trace
        ann = nearest_annotation(cap)
        a = ann[launch[sel]]
        u, inv = unique_inverse(a)
        mapped = np.full(u.shape[0], -1, np.int32)
        mapped[u >= 0] = _annotation_paths(cap, ann, u[u >= 0], cintern)
        cp = mapped[inv.reshape(-1)]
        r = rows[sel][cp >= 0]
        cp = cp[cp >= 0]
        if not r.size:
            continue
        # one joined path per distinct (the replay's path, the capture's path)
        keys = np.stack((pid[r].astype(np.int64), cp.astype(np.int64)), axis=1)
        ku, kinv = unique_rows(keys)
        joined = [intern((paths[e] if e >= 0 else ()) + cpaths[c]) for e, c in ku.tolist()]
        pid[r] = np.asarray(joined, np.int32)[kinv.reshape(-1)]


def is_annotation(trace: Trace) -> np.ndarray:
    return isin_few(trace.kind, (K.ANNOTATION, K.DATA)) & \
        (trace.track_kind[trace.track] == 0)


def nearest_annotation(trace: Trace) -> np.ndarray:
    """For every event, the innermost user annotation enclosing it (itself included)."""
    ann = np.full(trace.n_events, -1, np.int32)
    own = np.flatnonzero(is_annotation(trace))
    ann[own] = own
    del own
    if parent_down("parent_down_index", trace, ann):
        return ann
    for idx, p in trace.nested_levels():
        take = ann[idx] < 0
        ann[idx[take]] = ann[p[take]]
    return ann


def _annotation_paths(trace: Trace, ann: np.ndarray, u: np.ndarray, intern) -> np.ndarray:
    """``intern`` of each annotation event's path (the names of the user annotations
    enclosing it, itself included, outermost first) for the events ``u``, worked out once per
    distinct (enclosing path, name) a nesting level at a time: a step's annotations are
    events of their own, and a 20 M-event trace had 196 k of them on 3 k paths."""
    if u.size == 0:
        return np.zeros(0, np.int32)
    parent = trace.parent

    def enclosing(x):                   # the innermost annotation around x, itself not
        p = parent[x]
        return np.where(p >= 0, ann[np.maximum(p, 0)], -1)
    nodes, cur = [u], u
    while True:
        cur = enclosing(cur)
        cur = distinct(cur[cur >= 0])
        if cur.size == 0:
            break
        nodes.append(cur)
    nodes = distinct(np.concatenate(nodes))
    up = enclosing(nodes)
    at = np.searchsorted(nodes, np.maximum(up, 0))        # every annotation's own row
    level = np.zeros(nodes.shape[0], np.int32)
    while True:                          # depth in the annotations' own nesting
        new = np.where(up >= 0, level[at] + 1, 0)
        if (new == level).all():
            break
        level = new
    pid = np.full(nodes.shape[0], -1, np.int64)
    paths: dict = {-1: ()}
    for d in range(int(level.max()) + 1):
        rows = np.flatnonzero(level == d)
        keys = np.stack((np.where(up[rows] >= 0, pid[at[rows]], -1),
                         trace.name[nodes[rows]].astype(np.int64)), axis=1)
        ku, kinv = unique_rows(keys)
        ids = []
        for base, name in ku.tolist():
            path = paths[base] + (frame_name(trace.strings[name]),)
            i = intern(path)
            paths[i] = path
            ids.append(i)
        pid[rows] = np.asarray(ids, np.int64)[kinv]
    return pid[np.searchsorted(nodes, u)].astype(np.int32)


def _graph_kernel_paths(trace: Trace, ops: np.ndarray, pid: np.ndarray, paths: list,
                        intern) -> None:
    """Kernels a CUDA graph replayed that carry their own annotation (torch ≥ 2.15's
    ``torch.cuda.graph(enable_annotations=True)``, the reader's ``graph_annotation``
    stat) take it below the annotations they have: the scope they were captured in, named
    on the kernel itself."""
    st = trace.stats.get("graph_annotation")
    if st is None or not ops.size:
        return
    import json
    v, has = st.lookup(ops)
    if not np.any(has):
        return
    rows = np.flatnonzero(has)
    vals = np.asarray(v, np.int64)[rows]
    u, inv = unique_inverse(vals)
    names = []
    for x in u.tolist():
        try:
            s = json.loads(trace.strings[int(x)])
        except ValueError:
            s = None
        names.append(s if isinstance(s, str) and s else None)
    keys = np.stack((pid[rows].astype(np.int64), inv.reshape(-1).astype(np.int64)), axis=1)
    ku, kinv = unique_rows(keys)
    joined = [intern((paths[e] if e >= 0 else ()) + (names[n],)) if names[n] else e
              for e, n in ku.tolist()]
    pid[rows] = np.asarray(joined, np.int32)[kinv.reshape(-1)]
