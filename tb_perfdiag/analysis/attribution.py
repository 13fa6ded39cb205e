"""Which host op put each device op on the device.

In order of trust: a direct link to the op (CUDA correlation, XLA flow); a link to
one of its enclosing events on its own line (XLA:CPU thunks run under an executor
that received the flow); the latest host "execute" call started before it (module
runs).  The result is ``origin[e]`` for every event (−1 where unknown) and how it was
found.
"""
from __future__ import annotations

import numpy as np

from ..trace.model import EventKind as K, TrackKind, Trace

VIA_NONE, VIA_LINK, VIA_ANCESTOR_LINK, VIA_EXECUTE = range(4)
VIA_NAMES = {VIA_NONE: "none", VIA_LINK: "correlation/flow link",
             VIA_ANCESTOR_LINK: "flow into the enclosing executor",
             VIA_EXECUTE: "latest program execution before it"}


def host_side(trace: Trace) -> np.ndarray:
    return trace.track_kind[trace.track] == TrackKind.HOST


def incoming_host_link(trace: Trace) -> np.ndarray:
    """For each event, the host event linking into it (latest-starting if several)."""
    src_of = np.full(trace.n_events, -1, np.int64)
    if trace.link_src.size == 0:
        return src_of
    host = host_side(trace)
    ok = host[trace.link_src]
    src, dst = trace.link_src[ok], trace.link_dst[ok]
    o = np.argsort(trace.ts[src], kind="stable")
    src_of[dst[o]] = src[o]
    return src_of


def origins(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    origin = incoming_host_link(trace)
    via = np.where(origin >= 0, VIA_LINK, VIA_NONE).astype(np.int8)
    device_ev = ~host_side(trace)
    # XLA:CPU ops sit on the same thread as the executor that received the flow
    linked = incoming_host_link_any(trace)
    need = np.flatnonzero(device_ev & (origin < 0))
    cur = trace.parent[need].copy()
    for _ in range(64):
        live = cur >= 0
        if not live.any():
            break
        hit = live & (linked[np.maximum(cur, 0)] >= 0)
        origin[need[hit]] = linked[cur[hit]]
        via[need[hit]] = VIA_ANCESTOR_LINK
        cur = np.where(hit | ~live, -1, trace.parent[np.maximum(cur, 0)])
    # TPU/GPU XLA: the flow goes to the module run (XLA Modules line) the op ran in
    need = np.flatnonzero(device_ev & (origin < 0) & trace.is_device_activity())
    if need.size:
        mod_tracks = [t for t, nm in enumerate(trace.track_name)
                      if nm == "XLA Modules" and trace.track_kind[t] == TrackKind.DEVICE]
        for t in mod_tracks:
            mods = np.flatnonzero((trace.track == t) & (linked >= 0))
            if not mods.size:
                continue
            d = trace.track_device[t]
            sel = need[trace.track_device[trace.track[need]] == d]
            k = np.searchsorted(trace.ts[mods], trace.ts[sel], side="right") - 1
            ok = k >= 0
            m = mods[np.maximum(k, 0)]
            ok &= trace.end_of(m) >= trace.end_of(sel)
            origin[sel[ok]] = linked[m[ok]]
            via[sel[ok]] = VIA_LINK
    # module runs: the latest host execute call that started before the op
    need = np.flatnonzero(device_ev & (origin < 0) & trace.is_device_activity())
    ex = np.flatnonzero((trace.kind == K.EXECUTE) & host_side(trace))
    if need.size and ex.size:
        # outermost executes only: nested executor layers name the same run
        ex = ex[~np.isin(trace.parent[ex], ex)]
        o = np.argsort(trace.ts[ex], kind="stable")
        ex = ex[o]
        k = np.searchsorted(trace.ts[ex], trace.ts[need], side="right") - 1
        ok = k >= 0
        origin[need[ok]] = ex[k[ok]]
        via[need[ok]] = VIA_EXECUTE
    # an origin on a helper thread (executor) is itself launched from the user's
    # thread: follow its own links one hop so steps resolve on the stepping thread
    return origin, via


def incoming_host_link_any(trace: Trace) -> np.ndarray:
    """Host→host flows too (XLA: python Record → executor thread)."""
    src_of = np.full(trace.n_events, -1, np.int64)
    if trace.link_src.size:
        o = np.argsort(trace.ts[trace.link_src], kind="stable")
        src_of[trace.link_dst[o]] = trace.link_src[o]
    return src_of


def root_origin(trace: Trace, origin: np.ndarray, max_hops: int = 8) -> np.ndarray:
    """Follow origins back across threads (executor → the thread that asked for it)."""
    linked = incoming_host_link_any(trace)
    out = origin.copy()
    idx = np.flatnonzero(out >= 0)
    cur = out[idx]
    for _ in range(max_hops):
        # climb to the outermost ancestor that received a link
        nxt = np.full(cur.shape, -1, np.int64)
        walk = cur.copy()
        for _d in range(64):
            live = walk >= 0
            if not live.any():
                break
            hit = live & (linked[np.maximum(walk, 0)] >= 0) & (nxt < 0)
            nxt[hit] = linked[walk[hit]]
            walk = np.where(live, trace.parent[np.maximum(walk, 0)], -1)
        moved = (nxt >= 0) & (nxt != cur)
        if not moved.any():
            break
        cur = np.where(moved, nxt, cur)
    out[idx] = cur
    return out
