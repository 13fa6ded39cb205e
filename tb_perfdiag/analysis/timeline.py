"""Timeline lanes for a time window, sized for a canvas of ``width`` pixels.

A lane with few events in view sends them one by one; a crowded lane sends one bin
per pixel with the share of the bin covered and the op covering most of it, so the
page draws 100k+ events as cheaply as a few hundred.  Annotation lanes show, per
device, which user annotation the running device ops belong to.
"""
from __future__ import annotations

import numpy as np

from ..trace.build import distinct
from ..trace.model import Trace, TrackKind
from . import annotations as ann_mod
from .intervals import union

MAX_EVENTS_PER_LANE = 1500


def _ns(x) -> list:
    return np.rint(np.asarray(x, np.float64) / 1000).astype(np.int64).tolist()


def lanes(trace: Trace, lo_ps: int, hi_ps: int, width: int, origin: np.ndarray,
          max_depth: int = 6) -> dict:
    width = int(max(16, min(width, 4000)))
    hi_ps = max(hi_ps, lo_ps + 1)
    in_view = (trace.ts < hi_ps) & (trace.end > lo_ps) & (trace.depth < max_depth)
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
            lane["events"] = [[a, d, nid(n), int(k)] for a, d, n, k in zip(
                _ns(trace.ts[ev]), _ns(trace.dur[ev]), trace.name[ev].tolist(),
                trace.depth[ev].tolist())]
        else:
            lane["bins"] = _bins(trace, ev, edges, nid)
        out_tracks.append(lane)
    out_tracks.extend(_annotation_lanes(trace, lo_ps, hi_ps, origin, label_id))
    return {"start_ns": int(lo_ps // 1000), "end_ns": int(hi_ps // 1000), "width": width,
            "names": list(names), "lanes": out_tracks}


def _bins(trace: Trace, ev: np.ndarray, edges: np.ndarray, nid) -> dict:
    """Per pixel: covered share (top level ops only, so nesting is not double counted)
    and the name of the op that starts the most time in it."""
    top = ev[trace.depth[ev] == trace.depth[ev].min()]
    us, ue = union(trace.ts[top], trace.end_of(top))
    from .intervals import covered
    cov = covered(us, ue, edges[:-1], edges[1:])
    share = np.round(cov / np.maximum(np.diff(edges), 1), 3)
    # dominant op per bin: the longest top-level op overlapping the bin's centre
    mid = (edges[:-1] + edges[1:]) // 2
    o = top[np.argsort(trace.ts[top], kind="stable")]
    k = np.searchsorted(trace.ts[o], mid, side="right") - 1
    hit = (k >= 0) & (trace.end_of(o[np.maximum(k, 0)]) > mid)
    name = np.where(hit, trace.name[o[np.maximum(k, 0)]], -1)
    name_ids = [nid(int(x)) if x >= 0 else -1 for x in name.tolist()]
    return {"share": share.tolist(), "name": name_ids}


def _annotation_lanes(trace: Trace, lo_ps: int, hi_ps: int, origin: np.ndarray,
                      label_id) -> list:
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
                events.append([s // 1000, (e - s) // 1000, label_id(label), 0])
            if len(events) >= MAX_EVENTS_PER_LANE:
                break
        out.append({"id": f"ann-{d}", "label": f"{trace.devices[d].name} · annotations",
                    "group": "annotations", "kind": "annotation", "device": d,
                    "events_total": len(events), "in_view": len(events), "events": events})
    return out
