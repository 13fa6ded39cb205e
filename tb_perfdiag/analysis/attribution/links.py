"""Which host op put each device op on the device.

In order of trust: a direct link to the op (CUDA correlation, XLA flow); a link to
one of its enclosing events on its own line; on XLA:CPU, the flow into the executor
that ran the op on its worker thread, or into the thread *region* it ran in (XLA's
``ThreadpoolListener::StartRegion`` … ``StopRegion``: the producer links to the
region's start marker, a sibling of the work, not an ancestor); the latest host
"execute" call started before it (module runs).  The result is ``origin[e]`` for every
event (−1 where unknown) and how it was found.  ``root_origin`` follows those links
back across threads to the user's dispatch; ``run_dispatch`` pairs the k-th run of a
JAX program with the k-th call of its jitted function (JAX queues runs while the
previous one executes, so run order is the reliable pairing there).
"""
from __future__ import annotations

import re

import numpy as np

from ...trace.build import distinct, native_fn, unique_inverse
from ...trace.model import (
    DEVICE_ACTIVITY,
    EventKind as K,
    TrackKind,
    Trace,
    isin_few,
    search,
    track_counts,
)

VIA_NONE, VIA_LINK, VIA_ANCESTOR_LINK, VIA_EXECUTE, VIA_REGION = range(5)
VIA_NAMES = {VIA_NONE: "none", VIA_LINK: "correlation/flow link",
             VIA_ANCESTOR_LINK: "flow into the enclosing executor",
             VIA_EXECUTE: "latest program execution before it",
             VIA_REGION: "flow into the worker thread's region"}
START_REGION = "ThreadpoolListener::StartRegion"
STOP_REGION = "ThreadpoolListener::StopRegion"
_MAX_DEPTH = 64
_FINGERPRINT = re.compile(r"\(\d+\)$")


def _name_id(trace: Trace, name: str) -> int:
    """The string id of ``name`` (strings are interned once), −1 when absent."""
    try:
        return trace.strings.index(name)
    except ValueError:
        return -1


def _index_dtype(trace: Trace):
    """Event-index columns over all events are int32 while they fit (40 M events: 160 MB
    instead of 320 MB each)."""
    return np.int32 if trace.n_events < 2**31 - 1 else np.int64


def host_side(trace: Trace) -> np.ndarray:
    # events are sorted by track: one run per track (a gather per event costs 4× more)
    bounds = trace.track_bounds()
    return np.repeat(np.asarray(trace.track_kind) == TrackKind.HOST, np.diff(bounds))


def incoming_host_link(trace: Trace) -> np.ndarray:
    """For each event, the host event linking into it (latest-starting if several)."""
    src_of = np.full(trace.n_events, -1, _index_dtype(trace))
    if trace.link_src.size == 0:
        return src_of
    host = host_side(trace)
    ok = host[trace.link_src]
    src, dst = trace.link_src[ok], trace.link_dst[ok]
    return _last_by_start(trace, src_of, src, dst)


def _last_by_start(trace: Trace, src_of: np.ndarray, src: np.ndarray,
                   dst: np.ndarray) -> np.ndarray:
    """``src_of[dst] = src``, the latest-starting source winning where one event has
    several; the sort by start is skipped when no event has two (the usual case: one
    launch per kernel), which a write of positions and a read back tells."""
    pos = np.arange(dst.shape[0], dtype=src_of.dtype)
    src_of[dst] = pos
    if (src_of[dst] == pos).all():
        src_of[dst] = src
        return src_of
    src_of[dst] = -1
    o = np.argsort(trace.ts[src], kind="stable")
    src_of[dst[o]] = src[o]
    return src_of


def origins(trace: Trace, linked: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(origin, via) per event; ``linked``: ``incoming_host_link(trace)`` when at hand."""
    origin = incoming_host_link(trace) if linked is None else linked.copy()
    via = np.where(origin >= 0, np.int8(VIA_LINK), np.int8(VIA_NONE))
    device_ev = ~host_side(trace)
    device_act = device_ev & trace.is_device_activity()
    # XLA:CPU ops sit on the same thread as the executor that received the flow
    linked = incoming_host_link_any(trace)
    need = np.flatnonzero(device_ev & (origin < 0))
    cur = trace.parent[need]
    for _ in range(64):                 # up the ancestors of the events still looking
        live = cur >= 0
        need, cur = need[live], cur[live]
        if not need.size:
            break
        up = linked[cur]
        hit = up >= 0
        origin[need[hit]] = up[hit]
        via[need[hit]] = VIA_ANCESTOR_LINK
        need, cur = need[~hit], trace.parent[cur[~hit]]
    # TPU/GPU XLA: the flow goes to the module run (XLA Modules line) the op ran in
    need = np.flatnonzero(device_act & (origin < 0))
    if need.size:
        mod_tracks = [t for t, nm in enumerate(trace.track_name)
                      if nm == "XLA Modules" and trace.track_kind[t] == TrackKind.DEVICE]
        need_dev = trace.track_device[trace.track[need]] if mod_tracks else None
        for t in mod_tracks:
            lo, hi = trace.track_slices([t])[0]           # a track is a slice of events
            mods = lo + np.flatnonzero(linked[lo:hi] >= 0)
            if not mods.size:
                continue
            d = trace.track_device[t]
            sel = need[need_dev == d]
            k = search(trace.ts[mods], trace.ts[sel], side="right") - 1
            ok = k >= 0
            m = mods[np.maximum(k, 0)]
            ok &= trace.end_of(m) >= trace.end_of(sel)
            origin[sel[ok]] = linked[m[ok]]
            via[sel[ok]] = VIA_LINK
    # XLA:CPU: the op ran on a worker thread, inside an executor (or a region) that a
    # flow entered
    need = np.flatnonzero(device_act & (origin < 0))
    if need.size:
        src = worker_entry(trace, need)
        hit = src >= 0
        origin[need[hit]] = src[hit]
        via[need[hit]] = VIA_REGION
    # module runs: the latest host execute call that started before the op
    need = np.flatnonzero(device_act & (origin < 0))
    ex = np.flatnonzero((trace.kind == K.EXECUTE) & ~device_ev)
    if need.size and ex.size:
        # outermost executes only: nested executor layers name the same run
        ex = ex[~np.isin(trace.parent[ex], ex)]
        o = np.argsort(trace.ts[ex], kind="stable")
        ex = ex[o]
        k = search(trace.ts[ex], trace.ts[need], side="right") - 1
        ok = k >= 0
        origin[need[ok]] = ex[k[ok]]
        via[need[ok]] = VIA_EXECUTE
    return origin, via


def incoming_host_link_any(trace: Trace) -> np.ndarray:
    """Host→host flows too (XLA: python Record → executor thread)."""
    src_of = np.full(trace.n_events, -1, _index_dtype(trace))
    if trace.link_src.size:
        _last_by_start(trace, src_of, trace.link_src, trace.link_dst)
    return src_of


def root_origin(trace: Trace, origin: np.ndarray, max_hops: int = 32,
                linked: np.ndarray | None = None) -> np.ndarray:
    """Follow origins back across threads (executor → the thread that asked for it):
    from each host event, the flow into its nearest ancestor-or-self, else into the
    thread region it ran in, until no flow leads further.  (``linked``:
    ``incoming_host_link(trace)`` when at hand.)"""
    out = origin.copy()
    if trace.link_src.size == 0 or out.size == 0 or int(out.max()) < 0:
        return out
    # where a source leads depends on it alone: the walk runs once per distinct source,
    # found by a mark over the events, and its ends go back through a table over the
    # events a block at a time (an index of every op's origin and the walk's columns over
    # all of them held 1.4 GB at 40 M events)
    block = 1 << 22
    # "none" (−1) marks and reads a slot past the events: no mask per block; any other
    # negative value would read a wrong slot (checked even under python -O)
    if int(out.min()) < -1:
        raise ValueError("root_origin: an origin below -1, the one value for none")
    mark = np.zeros(out.shape[0] + 1, bool)
    for i in range(0, out.shape[0], block):
        mark[out[i:i + block]] = True
    mark[-1] = False
    # held in the model's index type (int32 below 2**31 events): half the memory
    src = np.flatnonzero(mark).astype(out.dtype)
    del mark
    live = host_side(trace)[src]
    if linked is None:
        linked = incoming_host_link(trace)
    regions = thread_regions(trace, linked)
    # the first hop, a block of sources at a time: nearly every source takes it
    cur = src.copy()
    for i in range(0, cur.shape[0], block):
        c, lv = cur[i:i + block], live[i:i + block]
        if lv.all():                    # host sources only (a launch per kernel): no gathers
            nxt = entry_of(trace, linked, regions, c)
            moved = (nxt >= 0) & (nxt != c)
            np.copyto(c, nxt, casting="unsafe", where=moved)
            lv[:] = moved
            continue
        sel = np.flatnonzero(lv)
        nxt = entry_of(trace, linked, regions, c[sel])
        moved = (nxt >= 0) & (nxt != c[sel])
        c[sel[moved]] = nxt[moved]
        lv[sel[~moved]] = False
    del nxt, moved
    # past the first hop the sources share few places (a run's dispatch): one walk each
    u, inv = unique_inverse(cur)
    del cur
    ulive = np.zeros(u.shape[0], bool)
    ulive[inv[live]] = True
    del live
    for _ in range(1, max_hops):
        sel = np.flatnonzero(ulive)
        if sel.size == 0:
            break
        nxt = entry_of(trace, linked, regions, u[sel])
        moved = (nxt >= 0) & (nxt != u[sel])
        u[sel[moved]] = nxt[moved]
        ulive[sel[~moved]] = False
    table = np.empty(out.shape[0] + 1, out.dtype)
    table[src] = u[inv]
    table[-1] = -1
    del src, u, inv
    for i in range(0, out.shape[0], block):
        o = out[i:i + block]
        np.take(table, o, out=o)
    return out


def dispatch_threads(trace: Trace, root: np.ndarray) -> list:
    """Host threads the device work traces back to, most device ops first (the user's
    dispatching thread when a trace has no annotation to say which it is)."""
    ops = np.flatnonzero(trace.is_device_activity() & ~host_side(trace))
    r = root[ops]
    r = r[r >= 0]
    if r.size == 0:
        return []
    tr, cnt = track_counts(trace.track[r])
    host = trace.track_kind[tr] == TrackKind.HOST
    tr, cnt = tr[host], cnt[host]
    return [int(t) for t in tr[np.argsort(-cnt, kind="stable")]]


def region_threads(trace: Trace) -> list:
    """Host threads that run XLA thread-pool regions (executor and worker threads)."""
    sid = _name_id(trace, START_REGION)
    if sid < 0:
        return []
    return distinct(trace.track[trace.name == sid]).astype(int).tolist()


def thread_regions(trace: Trace, linked: np.ndarray) -> dict:
    """Per host track with region markers: (marker times, the host event whose flow
    opened the region, −1 after a StopRegion or an unlinked start)."""
    out: dict = {}
    start_id, stop_id = _name_id(trace, START_REGION), _name_id(trace, STOP_REGION)
    ids = [i for i in (start_id, stop_id) if i >= 0]
    if start_id < 0:
        return out
    mk = np.flatnonzero(isin_few(trace.name, ids) & (trace.parent < 0) & host_side(trace))
    if mk.size == 0:
        return out
    src = np.where(trace.name[mk] == start_id, linked[mk], -1)
    tr = trace.track[mk]
    bounds = np.flatnonzero(np.diff(tr)) + 1
    for part, sp in zip(np.split(mk, bounds), np.split(src, bounds)):
        # events sort by (track, start, -duration): marker times are ascending
        out[int(trace.track[part[0]])] = (trace.ts[part], sp)
    return out


def region_source(regions: dict, tracks: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The flow source of the region open on each track at each time (−1 none)."""
    out = np.full(times.shape[0], -1, np.int64)
    if tracks.size == 0:
        return out
    # rows grouped by track once (a mask per track would scan every row per track)
    order = np.argsort(tracks, kind="stable")
    st = tracks[order]
    for t, reg in regions.items():
        lo, hi = np.searchsorted(st, [t, t + 1])
        if hi == lo:
            continue
        rows = order[lo:hi]
        k = np.searchsorted(reg[0], times[rows], side="right") - 1
        out[rows] = np.where(k >= 0, reg[1][np.maximum(k, 0)], -1)
    return out


def entry_of(trace: Trace, linked: np.ndarray, regions: dict, ev: np.ndarray,
             depth: int = 0) -> np.ndarray:
    """For host events: the host event whose flow entered the work they belong to: the
    flow into the nearest ancestor-or-self, else into the region their outermost
    ancestor ran in on their thread (−1 none)."""
    ev = np.asarray(ev, np.int64)
    fn = native_fn("entry_walk") if depth == 0 else None
    if fn is not None and linked.dtype == trace.parent.dtype == np.int32:
        # a Column's buffer: writable, no copy
        out = np.frombuffer(fn(np.ascontiguousarray(ev), linked, trace.parent, _MAX_DEPTH),
                            np.int64)
        top = np.flatnonzero(out <= -2)
        if top.size and regions:
            # many events share their outermost ancestor: one region lookup each
            x, inv = unique_inverse(-2 - out[top])
            out[top] = region_source(regions, trace.track[x], trace.ts[x])[inv]
        elif top.size:
            out[top] = -1
        return out
    out = np.full(ev.shape[0], -1, np.int64)
    live = np.flatnonzero(ev >= 0)
    if live.size == 0:
        return out
    cur = ev[live]
    src = linked[cur]
    out[live] = src
    miss = src < 0
    live, cur = live[miss], cur[miss]
    par = trace.parent[cur]
    top = par < 0
    if top.any() and regions:
        out[live[top]] = region_source(regions, trace.track[cur[top]], trace.ts[cur[top]])
    up = ~top
    if up.any() and depth < _MAX_DEPTH:
        # siblings share their ancestors' answer: one walk per distinct parent (a million
        # launches of a run hang under a hundred-odd thunks)
        u, inv = unique_inverse(par[up].astype(np.int64))
        out[live[up]] = entry_of(trace, linked, regions, u, depth + 1)[inv]
    return out


def host_twins(trace: Trace) -> dict:
    """Device track → the host thread it was split from (XLA:CPU: the HLO ops of a
    worker thread form a device track beside the thread's own events)."""
    host = {(g, n): t for t, (g, n) in enumerate(zip(trace.track_group, trace.track_name))
            if trace.track_kind[t] == TrackKind.HOST}
    out = {}
    for t in np.flatnonzero(trace.track_kind == TrackKind.DEVICE).tolist():
        h = host.get((trace.track_group[t], trace.track_name[t]))
        if h is not None:
            out[t] = h
    return out


def worker_entry(trace: Trace, ops: np.ndarray) -> np.ndarray:
    """XLA:CPU ops (on a device track split from a worker thread): the host event whose
    flow entered the executor that ran each op, or the region it ran in (−1 none)."""
    out = np.full(ops.shape[0], -1, np.int64)
    twins = host_twins(trace)
    if not twins or trace.link_src.size == 0:
        return out
    linked = incoming_host_link(trace)
    regions = thread_regions(trace, linked)
    op_track = trace.track[ops]
    for dt, ht in twins.items():
        rows = np.flatnonzero(op_track == dt)
        if rows.size == 0:
            continue
        lo, hi = trace.track_slices([ht])[0]
        q = trace.ts[ops[rows]]
        # the innermost event of the worker thread open at the op's start
        k = np.searchsorted(trace.ts[lo:hi], q, side="right") - 1 + lo
        enc = np.where(k >= lo, k, -1).astype(np.int64)
        for _ in range(_MAX_DEPTH):
            c = np.maximum(enc, 0)
            open_ = (enc < 0) | (trace.ts[c] + trace.dur[c] > q)
            if open_.all():
                break
            enc = np.where(open_, enc, trace.parent[c])
        got = entry_of(trace, linked, regions, enc)
        # no executor around it: the region open on the thread at that time
        bare = np.flatnonzero((enc < 0) & (got < 0))
        if bare.size and regions:
            got[bare] = region_source(regions, np.full(bare.size, ht), q[bare])
        out[rows] = got
    return out


def run_dispatch(trace: Trace, thread: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """(device ops, the call that dispatched each) for JAX program runs: the k-th run of
    a program on a device (ops grouped by ``run_id``, or an ``XLA Modules`` event) is
    paired with the k-th outermost ``PjitFunction(<name>)`` on the dispatching thread
    (``thread``, else the one with most such calls).  Programs whose run and call
    counts differ are left out."""
    none = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    runs = _program_runs(trace)
    if not runs:
        return none
    calls = _dispatch_calls(trace, {m for m, _, _, _ in runs}, thread)
    ev, who = [], []
    for module, starts, members, cuts in runs:
        d = calls.get(module)
        if d is None or d.shape[0] != starts.shape[0]:
            continue
        # the k-th run by start goes with the k-th call: members in that order
        order = np.argsort(starts, kind="stable")
        n = np.diff(cuts)[order]
        ev.append(members[_ranges(cuts[:-1][order], n)])
        who.append(np.repeat(d.astype(np.int64), n))
    if not ev:
        return none
    return np.concatenate(ev).astype(np.int64), np.concatenate(who)


def _ranges(lo: np.ndarray, n: np.ndarray) -> np.ndarray:
    """The ranges [lo[i], lo[i] + n[i]) one after the other, as one index array."""
    n = np.asarray(n, np.int64)
    total = int(n.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    ends = np.cumsum(n)
    return np.repeat(np.asarray(lo, np.int64) - (ends - n), n) + np.arange(total, dtype=np.int64)


def _add_runs(groups: dict, key, starts, members, cuts) -> None:
    """Appends runs (starts, members as one array cut at ``cuts``) to a group."""
    g = groups.get(key)
    if g is None:
        groups[key] = (starts, members, cuts)
        return
    s0, m0, c0 = g
    groups[key] = (np.concatenate([s0, starts]), np.concatenate([m0, members]),
                   np.concatenate([c0, cuts[1:] + c0[-1]]))


def _program_runs(trace: Trace) -> list:
    """(module name, run starts, the runs' device ops one run after the other, the cuts
    between runs) per (device, module): arrays, never a Python object per run (a long
    capture runs one program tens of thousands of times)."""
    groups: dict = {}
    rid, mod = trace.stats.get("run_id"), trace.stats.get("hlo_module")
    if rid is not None and mod is not None and mod.is_string:
        ev = np.intersect1d(rid.events, mod.events)
        # device activity off the host's tracks, asked of these events alone
        ev = ev[isin_few(trace.kind[ev], DEVICE_ACTIVITY) &
                (trace.track_kind[trace.track[ev]] != TrackKind.HOST)]
        if ev.size:
            r = rid.take(search(rid.events, ev)).astype(np.int64)
            m = mod.take(search(mod.events, ev)).astype(np.int64)
            d = trace.track_device[trace.track[ev]].astype(np.int64)
            key = np.stack([d, m, r], axis=1)
            u, inv = np.unique(key, axis=0, return_inverse=True)
            inv = inv.reshape(-1)
            first = np.full(u.shape[0], np.iinfo(np.int64).max, np.int64)
            np.minimum.at(first, inv, trace.ts[ev])
            o = np.argsort(inv, kind="stable")
            cuts = np.searchsorted(inv[o], np.arange(u.shape[0] + 1))
            members = ev[o]
            # runs sorted by (device, module, run): each (device, module) is a block
            new = np.ones(u.shape[0], bool)
            new[1:] = (u[1:, :2] != u[:-1, :2]).any(axis=1)
            b = np.flatnonzero(new).tolist() + [u.shape[0]]
            for j0, j1 in zip(b[:-1], b[1:]):
                c = cuts[j0:j1 + 1]
                _add_runs(groups, (int(u[j0, 0]), trace.strings[int(u[j0, 1])]),
                          first[j0:j1], members[c[0]:c[-1]], c - c[0])
    # TPU/GPU: each XLA Modules event is one run of its program on that device
    from_modules: dict = {}
    for t in np.flatnonzero(trace.track_kind == TrackKind.DEVICE).tolist():
        if trace.track_name[t] != "XLA Modules":
            continue
        d = int(trace.track_device[t])
        lo, hi = trace.track_slices([t])[0]
        if hi == lo:
            continue
        mods = np.arange(lo, hi)
        ops = trace.activity_of(d, host_tracks=False)
        ops = ops[np.argsort(trace.ts[ops], kind="stable")]
        a = search(trace.ts[ops], trace.ts[mods], side="left")
        b = search(trace.ts[ops], trace.end_of(mods), side="left")
        n = np.maximum(b - a, 0)
        # the program of each run: its name without the "(fingerprint)", in the order
        # the names first occur
        ids, inv = np.unique(trace.name[mods], return_inverse=True)
        names = [_FINGERPRINT.sub("", trace.strings[int(x)]) for x in ids.tolist()]
        distinct, name_of_id = np.unique(np.asarray(names, object), return_inverse=True) \
            if names else (np.zeros(0, object), np.zeros(0, np.int64))
        g = name_of_id.reshape(-1)[inv.reshape(-1)]
        first_at = np.full(len(distinct), mods.shape[0], np.int64)
        np.minimum.at(first_at, g, np.arange(mods.shape[0]))
        for k in np.argsort(first_at, kind="stable").tolist():
            sel = np.flatnonzero(g == k)
            cuts = np.zeros(sel.shape[0] + 1, np.int64)
            np.cumsum(n[sel], out=cuts[1:])
            _add_runs(from_modules, (d, str(distinct[k])), trace.ts[mods[sel]].astype(np.int64),
                      ops[_ranges(a[sel], n[sel])], cuts)
    for key, g in from_modules.items():
        groups.setdefault(key, g)
    return [(name, starts, members, cuts) for (_, name), (starts, members, cuts)
            in groups.items()]


def _dispatch_calls(trace: Trace, modules: set, thread: int) -> dict:
    """module → the outermost calls of its jitted function on one thread, in order."""
    want = {}
    for m in modules:
        for prefix, wrapper in (("jit_", "PjitFunction"), ("pmap_", "PmapFunction")):
            if m.startswith(prefix) and len(m) > len(prefix):
                want[f"{wrapper}({m[len(prefix):]})"] = m
    if not want:
        return {}
    ids = {i: want[n] for n in want if (i := _name_id(trace, n)) >= 0}
    if not ids:
        return {}
    # the names looked up in a table over the strings: one gather, where np.isin sorted
    wanted = np.zeros(len(trace.strings), bool)
    wanted[list(ids)] = True
    ev = np.flatnonzero(wanted[trace.name] & host_side(trace))
    p = trace.parent[ev]
    ev = ev[(p < 0) | (trace.name[np.maximum(p, 0)] != trace.name[ev])]
    out = {}
    for nid in distinct(trace.name[ev]).tolist():
        e = ev[trace.name[ev] == nid]
        tr, cnt = np.unique(trace.track[e], return_counts=True)
        t = thread if thread in tr.tolist() else int(tr[np.argmax(cnt)])
        e = e[trace.track[e] == t]
        out[ids[nid]] = e[np.argsort(trace.ts[e], kind="stable")]
    return out
