"""Timeline lanes for a time window, sized for a canvas of ``width`` pixels.

A lane with few events in view sends them one by one; a crowded lane sends one bin
per pixel with the share of the bin covered and the innermost op at its centre, so the
page draws 100k+ events as cheaply as a few hundred.  Host events come with their row
counted from the innermost: 0 for an op with nothing inside it in view, 1 for its
caller…, so a thread deep in Python frames (``spawn_main › _bootstrap › … › aten::nonzero``)
shows what it was doing, not the outermost frames.  Annotation lanes show, per device,
which user annotation the running device ops belong to.
"""
from __future__ import annotations

import numpy as np

from ..trace.build import distinct
from ..trace.model import Trace, TrackKind
from .device_time import annotations as ann_mod
from .intervals import union

MAX_EVENTS_PER_LANE = 1500


def _ns(x) -> list:
    return np.rint(np.asarray(x, np.float64) / 1000).astype(np.int64).tolist()


def lanes(trace: Trace, lo_ps: int, hi_ps: int, width: int, origin: np.ndarray) -> dict:
    width = int(max(16, min(width, 4000)))
    hi_ps = max(hi_ps, lo_ps + 1)
    in_view = (trace.ts < hi_ps) & (trace.end > lo_ps)
    names: dict = {}

    def label_id(s: str) -> int:
        if s not in names:
            names[s] = len(names)
        return names[s]

    def nid(i: int) -> int:
        return label_id(trace.strings[i])

    out_tracks = []
    order = sorted(range(len(trace.track_name)),
                   key=lambda t: (trace.track_kind[t] != TrackKind.DEVICE,
                                  int(trace.track_device[t]), trace.track_label[t]))
    edges = np.linspace(lo_ps, hi_ps, width + 1).astype(np.int64)
    for t in order:
        ev = np.flatnonzero(in_view & (trace.track == t))
        total = int((trace.track == t).sum())
        if total == 0:
            continue
        lane = {"id": t, "label": trace.track_label[t], "group": trace.track_group[t],
                "kind": "device" if trace.track_kind[t] == TrackKind.DEVICE else "host",
                "device": int(trace.track_device[t]), "events_total": total,
                "in_view": int(ev.size)}
        if ev.size <= MAX_EVENTS_PER_LANE:
            row = innermost_rows(trace, ev) if lane["kind"] == "host" else trace.depth[ev]
            lane["events"] = [[a, d, nid(n), int(k)] for a, d, n, k in zip(
                _ns(trace.ts[ev]), _ns(trace.dur[ev]), trace.name[ev].tolist(),
                row.tolist())]
        else:
            lane["bins"] = _bins(trace, ev, edges, nid)
        out_tracks.append(lane)
    out_tracks.extend(_annotation_lanes(trace, lo_ps, hi_ps, origin, label_id))
    return {"start_ns": int(lo_ps // 1000), "end_ns": int(hi_ps // 1000), "width": width,
            "names": list(names), "lanes": out_tracks}


def innermost_rows(trace: Trace, ev: np.ndarray) -> np.ndarray:
    """Row of each event of one track's ``ev`` (sorted indices) counted from the
    innermost: 0 when none of ``ev`` nests in it, else one more than its deepest child's."""
    row = np.zeros(ev.shape[0], np.int32)
    if ev.size == 0:
        return row
    depth = trace.depth[ev]
    parent = trace.parent[ev]
    pos = np.searchsorted(ev, parent)
    pos_ok = (parent >= 0) & (pos < ev.shape[0])
    pos_ok[pos_ok] &= ev[pos[pos_ok]] == parent[pos_ok]
    for d in range(int(depth.max()), 0, -1):       # children before their parents
        k = np.flatnonzero((depth == d) & pos_ok)
        if k.size:
            np.maximum.at(row, pos[k], row[k] + 1)
    return row


def _bins(trace: Trace, ev: np.ndarray, edges: np.ndarray, nid) -> dict:
    """Per pixel: covered share (top level ops only, so nesting is not double counted)
    and the name of the innermost op at the bin's centre."""
    depth = trace.depth[ev]
    top = ev[depth == depth.min()]
    us, ue = union(trace.ts[top], trace.end_of(top))
    from .intervals import covered
    cov = covered(us, ue, edges[:-1], edges[1:])
    share = np.round(cov / np.maximum(np.diff(edges), 1), 3)
    # events of one depth on one track never overlap: per depth, the one at each centre;
    # the deepest found wins
    mid = (edges[:-1] + edges[1:]) // 2
    name = np.full(mid.shape[0], -1, np.int64)
    for d in np.unique(depth).tolist():
        o = ev[depth == d]
        o = o[np.argsort(trace.ts[o], kind="stable")]
        k = np.searchsorted(trace.ts[o], mid, side="right") - 1
        hit = (k >= 0) & (trace.end_of(o[np.maximum(k, 0)]) > mid)
        name = np.where(hit, trace.name[o[np.maximum(k, 0)]], name)
    name_ids = [nid(int(x)) if x >= 0 else -1 for x in name.tolist()]
    return {"share": share.tolist(), "name": name_ids}


def annotation_spans(trace: Trace, lo_ps: int, hi_ps: int, origin: np.ndarray) -> list:
    """Per device, the user annotations its ops in [lo_ps, hi_ps) ran under, consecutive
    ops of one annotation merged: [(device, lane label, [(start_ps, dur_ps, name)])]."""
    names: list = []
    index: dict = {}

    def label_id(s: str) -> int:
        if s not in index:
            index[s] = len(names)
            names.append(s)
        return index[s]
    out = []
    for lane in _annotation_lanes(trace, lo_ps, hi_ps, origin, label_id, ps=True):
        out.append((lane["device"], lane["label"],
                    [(s, d, names[n]) for s, d, n, _ in lane["events"]]))
    return out


def _annotation_lanes(trace: Trace, lo_ps: int, hi_ps: int, origin: np.ndarray,
                      label_id, ps: bool = False) -> list:
    ops = np.flatnonzero(trace.is_device_activity() & (trace.ts < hi_ps) & (trace.end > lo_ps))
    if ops.size == 0:
        return []
    pid, paths = ann_mod.op_paths(trace, ops, origin)
    out = []
    for d in distinct(trace.track_device[trace.track[ops]]).tolist():
        sel = ops[trace.track_device[trace.track[ops]] == d]
        p = pid[trace.track_device[trace.track[ops]] == d]
        o = np.argsort(trace.ts[sel], kind="stable")
        sel, p = sel[o], p[o]
        if not (p >= 0).any():
            continue
        # merge consecutive ops of the same top-level annotation into one span
        top = np.array([hash(paths[x][:2]) if x >= 0 else 0 for x in p.tolist()], np.int64)
        change = np.concatenate(([True], top[1:] != top[:-1]))
        starts = np.flatnonzero(change)
        ends = np.concatenate((starts[1:], [sel.size])) - 1
        events = []
        for a, b in zip(starts.tolist(), ends.tolist()):
            if p[a] < 0:
                continue
            label = " / ".join(paths[p[a]][:2])
            s = int(trace.ts[sel[a]])
            e = int(trace.end_of(sel[a:b + 1]).max())
            if label:
                events.append([s, e - s, label_id(label), 0] if ps else
                              [s // 1000, (e - s) // 1000, label_id(label), 0])
            if len(events) >= MAX_EVENTS_PER_LANE:
                break
        out.append({"id": f"ann-{d}", "label": f"{trace.devices[d].name} · annotations",
                    "group": "annotations", "kind": "annotation", "device": d,
                    "events_total": len(events), "in_view": len(events), "events": events})
    return out
