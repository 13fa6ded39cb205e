"""Turns a reader's raw columns into a sorted, nested ``Trace``.

Readers append events in file order; this module sorts them by (track, start,
longer first), remaps stats and links to the new order, and derives nesting
depth and parent with array operations only.
"""
from __future__ import annotations

import threading
from collections import deque
from contextlib import nullcontext

import numpy as np

from .model import (Coded, Device, Stat, Trace, TrackKind, coded_if_few, narrowest_int,
                    spread_if_dense)
from ..beside import Beside, side_by_side
from .extension import native_fn
from .strings import Strings

# stats whose values name something (a launch, a program, a run, a flow): compared and
# joined, never added, so they are held as int32 where every value fits (the correlation
# ids of a 40 M-event trace: 153 MB less in the model)
ID_STATS = frozenset(("correlation_id", "correlation", "external_id", "program_id", "run_id",
                      "group_id"))


def small_ids(x: np.ndarray):
    """``(k, u, shifted)`` when the integer ids ``x`` are small enough for a table over
    their range (names, metadata ids, event indices: no sort): ``u`` the sorted distinct
    table positions, ``k`` each element's position (``x``, or ``x + 1`` when −1 occurs
    and ``shifted``); else None."""
    x = np.asarray(x)
    if x.size and x.dtype.kind in "iu":
        lo, hi = int(x.min()), int(x.max())
        # a table over the id range when it costs no more than a few columns of x
        # (event indices of a 40 M-event trace: a 20 M-row sort would take seconds)
        if lo >= -1 and (hi < (1 << 24) and hi < 8 * x.size + 1024
                         or hi < 2**31 - 2 and hi < 4 * x.size + 1024):
            # −1 ("none") is common in id columns: shift it into the table
            k = x.astype(np.int64) + 1 if lo < 0 else x
            present = np.zeros(hi + 2, bool)
            present[k] = True
            return k, np.flatnonzero(present), lo < 0
    return None


def unique_inverse(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(x, return_inverse=True)`` for integer ids; O(n) with a lookup table
    when the ids are small non-negative numbers (names, metadata ids), which avoids the
    sort ``np.unique`` does."""
    x = np.asarray(x)
    small = small_ids(x)
    if small is not None:
        k, u, shifted = small
        lut = np.empty(int(u[-1]) + 1, np.int32 if u.shape[0] < 2**31 else np.int64)
        lut[u] = np.arange(u.shape[0])
        return (u - 1 if shifted else u).astype(x.dtype), lut[k].astype(np.int64)
    u, inv = np.unique(x, return_inverse=True)
    return u, inv.reshape(-1)


def map_distinct(x: np.ndarray, of) -> np.ndarray:
    """``of(u)[inv]`` for ``u, inv = unique_inverse(x)``: ``of`` (an array over the
    distinct values, in sorted order) taken for every element.  Small ids go through a
    table over their range, with no inverse index (an int64 column the size of ``x``,
    then a gather through it: 20 M ops, 0.4 s)."""
    x = np.asarray(x)
    small = small_ids(x)
    if small is not None:
        k, u, shifted = small
        vals = np.asarray(of((u - 1 if shifted else u).astype(x.dtype)))
        lut = np.empty(int(u[-1]) + 1, vals.dtype)
        lut[u] = vals
        return lut[k]
    u, inv = unique_inverse(x)
    return np.asarray(of(u))[inv]


def unique_first(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(x, return_index=True)`` (the distinct values and where each first
    occurs) through ``unique_inverse``'s table: no sort of ``x`` (20 M event indices:
    0.4 s)."""
    u, inv = unique_inverse(x)
    first = np.empty(u.shape[0], np.int64)
    # a later write to the same place wins: written backwards, the first occurrence stays
    first[inv[::-1]] = np.arange(inv.shape[0] - 1, -1, -1)
    return u, first


def distinct(x) -> np.ndarray:
    """``np.unique(x)`` (sorted distinct values) for integer columns.  numpy 2's plain
    ``np.unique`` hashes integers and is ~100× slower than a sort on 350 k int64 ids."""
    x = np.asarray(x).reshape(-1)
    if x.size == 0:
        return x.copy()
    if x.dtype.kind not in "iu":
        return np.unique(x)
    s = np.sort(x)
    keep = np.empty(s.shape[0], bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


class StringTable:
    """Interns strings so names and string stats are int32 columns."""

    def __init__(self):
        self.strings: list[str] = []
        self._index: dict[str, int] = {}

    def intern(self, s: str) -> int:
        i = self._index.get(s)
        if i is None:
            i = self._index[s] = len(self.strings)
            self.strings.append(s)
        return i

    def intern_many(self, values) -> np.ndarray:
        index, strings = self._index, self.strings
        for v in dict.fromkeys(values):          # distinct values, in order, at C speed
            if v not in index:
                index[v] = len(strings)
                strings.append(v)
        return np.fromiter(map(index.__getitem__, values), np.int32, len(values))

    def freeze(self) -> Strings:
        """The strings, compact (``Strings``), and the table emptied: its list is cleared
        in place, so that an alias a reader kept (a name classifier) frees them too.
        Nothing may intern after."""
        out = Strings(self.strings)
        self.strings.clear()
        self._index.clear()
        return out


class Tracks:
    def __init__(self):
        self.kind: list[int] = []
        self.device: list[int] = []
        self.name: list[str] = []
        self.label: list[str] = []
        self.group: list[str] = []

    def add(self, kind: TrackKind, device: int, name: str, label: str, group: str) -> int:
        self.kind.append(int(kind))
        self.device.append(device)
        self.name.append(name)
        self.label.append(label)
        self.group.append(group)
        return len(self.kind) - 1


def sort_order(x: np.ndarray, n: int) -> np.ndarray:
    """``np.argsort(x, kind="stable")`` for values in [0, n): where they are distinct and
    not far fewer than n, by placing each at its value and reading the places in order
    (a stat's events moved into the model's order: the sort of each stat's column was
    half of a Kineto trace's assembly)."""
    m = x.shape[0]
    if m < 2 or m * 8 < n or m >= 2**31 - 1:
        return np.argsort(x, kind="stable")
    at = np.full(n, -1, np.int32)
    at[x] = np.arange(m, dtype=np.int32)
    o = at[at >= 0]
    if o.shape[0] != m:          # a value twice: the stable sort keeps their order
        return np.argsort(x, kind="stable")
    return o


def unique_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(keys, axis=0, return_inverse=True) for int64 rows, via one lexsort
    (np.unique with axis=0 sorts a structured view and is many times slower)."""
    if keys.shape[0] == 0:
        return keys, np.zeros(0, np.int64)
    o = np.lexsort(keys.T[::-1])
    k = keys[o]
    new = np.empty(k.shape[0], bool)
    new[0] = True
    new[1:] = (k[1:] != k[:-1]).any(axis=1)
    group = np.cumsum(new) - 1
    inv = np.empty(k.shape[0], np.int64)
    inv[o] = group
    return k[new], inv


def nest(track: np.ndarray, ts: np.ndarray, dur: np.ndarray,
         idx_dtype=np.int64) -> tuple[np.ndarray, np.ndarray]:
    """Depth and parent (``idx_dtype``) of events sorted by (track, ts, -dur):
    ``nest_arrays``, done in one C pass when the native extension is built (a tenth of
    the time on 2 M events).  The C pass reads the durations and writes int32 parents
    itself: an end column and int64 parents cost 610 MB at 40 M events."""
    fn = _native_nest()
    if fn is None or ts.shape[0] == 0:
        depth, parent = nest_arrays(track, ts, ts + dur)
        return depth, parent.astype(idx_dtype, copy=False)
    wide = np.dtype(idx_dtype) != np.int32
    d, p = fn(np.ascontiguousarray(track, np.int32), np.ascontiguousarray(ts, np.int64),
              np.ascontiguousarray(dur, np.int64), wide)
    return np.frombuffer(d, np.int16), np.frombuffer(p, np.int64 if wide else np.int32)


def _native_nest():
    return native_fn("nest_sorted")


def parent_down(name: str, trace, *columns) -> bool:
    """Run the extension's ``name`` (``parent_down_index`` / ``parent_down_bucket``) over
    the trace's parents: the values flow from each event to those it encloses in one pass
    instead of ``Trace.nested_levels``' level by level.  False (nothing written) where it
    cannot: extension not built, int64 parents."""
    fn = native_fn(name)
    if fn is None or trace.parent.dtype != np.int32 or trace.n_events == 0:
        return False
    try:
        fn(trace.parent, *columns)
    except ValueError:
        return False            # a parent after its event: the levels give the answer
    return True


def nest_arrays(track: np.ndarray, ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depth and parent of events sorted by (track, ts, -dur).

    An event's parent is the deepest event of its track still open at its start
    (end > ts): the latest earlier event still open, which is what a stack walk sees —
    also when an annotation starts inside a Python frame and outlives it, its later
    children belong to it, not to the frame that already ended.  depth = depth(parent)+1.
    The latest open earlier event is found for all events at once by binary lifting over
    block maxima of the ends.
    """
    n = ts.shape[0]
    depth = np.zeros(n, dtype=np.int32)
    parent = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return depth.astype(np.int16), parent
    bounds = np.flatnonzero(np.diff(track)) + 1
    starts = np.concatenate(([0], bounds))
    stops = np.concatenate((bounds, [n]))
    nested = [np.arange(a, b) for a, b in zip(starts, stops)
              if not (ts[a + 1:b] >= end[a:b - 1]).all()]   # a device stream: all depth 0
    if not nested:
        return depth.astype(np.int16), parent
    pool = np.concatenate(nested)
    t, e, tr = ts[pool], end[pool], track[pool]
    m = pool.shape[0]
    first = np.searchsorted(tr, tr, side="left")        # start of each event's track
    levels = [e]
    while (1 << len(levels)) <= m:
        prev, h = levels[-1], 1 << (len(levels) - 1)
        cur = prev.copy()
        np.maximum(prev[:m - h], prev[h:], out=cur[:m - h])
        levels.append(cur)                                # max of end[j : j + 2^k]
    pos = np.arange(m)
    for k in range(len(levels) - 1, -1, -1):
        cand = pos - (1 << k)
        ok = cand >= first
        ok[ok] = levels[k][cand[ok]] <= t[ok]             # nothing open in that block
        pos = np.where(ok, cand, pos)
    del levels
    j = pos - 1
    has = (j >= first) & (e[np.maximum(j, 0)] > t)
    par = np.where(has, j, -1)
    d = np.zeros(m, np.int32)
    cur = par
    while (cur >= 0).any():
        d += cur >= 0
        cur = np.where(cur >= 0, par[np.maximum(cur, 0)], -1)
    parent[pool] = np.where(par >= 0, pool[np.maximum(par, 0)], -1)
    depth[pool] = np.minimum(d, 32767)
    return depth.astype(np.int16), parent


def event_order(track: np.ndarray, ts: np.ndarray, dur: np.ndarray,
                none_if_sorted: bool = False) -> np.ndarray | None:
    """Permutation sorting events by (track, ts, -dur); with ``none_if_sorted`` None where
    the C pass finds them in that order already (no permutation of them all).

    Equivalent to ``np.lexsort((-dur, ts, track))`` but much faster on real traces:
    events arrive in long time-ordered runs (one line/thread at a time), which the
    stable merge sort exploits, and the few exact ties are resolved separately."""
    n = ts.shape[0]
    if n == 0:
        return np.zeros(0, np.int64)
    fn = native_fn("event_order")
    if fn is not None and track.dtype == np.int32 and ts.dtype == dur.dtype == np.int64 \
            and int(track.min()) >= 0:
        # a counting sort by track and a check of each track's run (most need no sort)
        got = fn(np.ascontiguousarray(track), np.ascontiguousarray(ts),
                 np.ascontiguousarray(dur), int(track.max()) + 1, none_if_sorted)
        return None if got is None else np.frombuffer(got, np.int64)
    o = np.argsort(ts, kind="stable")
    tr = track[o]
    small = tr.astype(np.int16) if track.max(initial=0) < 32767 else tr
    o = o[np.argsort(small, kind="stable")]          # radix sort for int16 keys
    t2, s2 = track[o], ts[o]
    tie = (t2[1:] == t2[:-1]) & (s2[1:] == s2[:-1])
    if tie.any():
        in_tie = np.zeros(n, bool)
        in_tie[1:] |= tie
        in_tie[:-1] |= tie
        pos = np.flatnonzero(in_tie)
        group = np.cumsum(np.concatenate(([True], ~tie)))[pos]
        sub = np.lexsort((-dur[o[pos]], group))
        o[pos] = o[pos][sub]
    return o


def assemble(path: str, fmt: str, strings: StringTable | Strings, tracks: Tracks,
             devices: list[Device],
             events: dict, stats: dict, links: tuple, metadata: dict, warnings: list,
             origin_ps: int | None = None) -> Trace:
    """Sort raw event columns and build the Trace.

    ``events`` holds the raw columns ``ts`` (absolute or file-relative int64 ps),
    ``dur``, ``track``, ``name`` and ``kind``; ``stats`` maps a stat name to (raw event
    indices, values, is_string); ``links`` is (src, dst, kind) in raw indices.  Both
    dicts are emptied on the way, so each raw column is freed once its sorted copy
    exists (the caller must not keep references to them).  The model's stats come
    compacted (``compact_stats``).
    """
    # before the columns are moved, where the reader has not done it already: the list's
    # strings sit in pools that the reader's temporaries left a third full (207 MB for
    # 63 MB of strings at 40 M events)
    frozen = strings if isinstance(strings, Strings) else strings.freeze()
    narrow_id_stats(stats)
    ts = np.asarray(events.pop("ts"), dtype=np.int64)
    dur = np.asarray(events.pop("dur"), dtype=np.int64)
    neg = dur < 0
    if neg.any():
        warnings.append(f"{int(neg.sum())} events with negative duration were given zero length")
        dur = np.where(neg, 0, dur)
    if origin_ps is None:
        origin_ps = int(ts.min()) if ts.size else 0
    if origin_ps:
        # in place where the column is the reader's own (a fresh copy faulted in 17 MB of
        # new pages at 2 M events: 35-50 ms, a tenth of a TPU capture's read)
        if ts.flags.writeable and ts.flags.owndata:
            ts -= origin_ps
        else:
            ts = ts - origin_ps
    track = np.asarray(events.pop("track"), np.int32)
    # event indices held in the model (parents, stat events, links) are int32
    idx_dtype = np.int32 if ts.shape[0] < 2**31 - 1 else np.int64
    order = event_order(track, ts, dur, none_if_sorted=True)
    name = np.asarray(events.pop("name"), np.int32)
    kind = np.asarray(events.pop("kind"), np.int8)
    if order is None or (order.shape[0] > 1 and (order[1:] > order[:-1]).all()):
        # a rising permutation is the identity: the reader's order is the model's (one
        # line after another, each in time order), and nothing needs moving.  The model
        # owns its columns (analyses write some, as the sorted copies allowed)
        inverse = None
        ts, dur, track, name, kind = (a if _owned(a) else a.copy()
                                      for a in (ts, dur, track, name, kind))
    else:
        # new index of each raw event, in the model's index type (half the memory at 40 M)
        inverse = np.empty(order.shape[0], idx_dtype)
        inverse[order] = np.arange(order.shape[0], dtype=idx_dtype)
    n = ts.shape[0]
    # the stats' events are moved, and the stats compacted, on the second core while the
    # columns are moved and nested here, then on both (mostly numpy, which lets go of the
    # GIL: 0.7 s of stats and 0.45 s of columns in the 20 M-event Kineto trace's build).
    # One after the other, the compaction comes last, once the raw columns are gone (see
    # ``compact_stats``)
    side = inverse is not None and side_by_side(n)
    shared = _StatWork(stats, inverse, idx_dtype, n) if side else None
    with Beside(shared.run) if side else nullcontext() as job:
        if inverse is not None:
            # one column at a time, so that each raw column goes before the next copy
            ts = ts[order]
            dur = dur[order]
            track = track[order]
            name = name[order]
            kind = kind[order]
        del order
        depth, parent = nest(track, ts, dur, idx_dtype)
        if depth.size and int(depth.max()) <= np.iinfo(np.int8).max:
            depth = depth.astype(np.int8)   # nearly every trace nests under 128 deep: 38 MB at 40 M
        # the track of each event as narrow as the tracks' count allows (a few dozen threads
        # and streams: int8, 114 MB fewer than int32 at 40 M events, from here to the end)
        track = track.astype(narrowest_int(len(tracks.kind)), copy=False)
        if job is not None:
            shared.run()
            job.result()
            out_stats = shared.stats()
        else:
            out_stats = _moved_stats(stats, inverse, idx_dtype, n)

    src, dst, lkind = links
    src, dst = np.asarray(src), np.asarray(dst)
    trace = Trace(
        path=path, format=fmt, origin_ps=int(origin_ps), strings=frozen,
        track_kind=np.asarray(tracks.kind, np.int8),
        track_device=np.asarray(tracks.device, np.int32),
        track_name=tracks.name, track_label=tracks.label, track_group=tracks.group,
        devices=devices, ts=ts, dur=dur, track=track, name=name, kind=kind,
        depth=depth, parent=parent, stats=out_stats,
        link_src=_moved(inverse, src, idx_dtype),
        link_dst=_moved(inverse, dst, idx_dtype),
        link_kind=np.asarray(lkind, np.int8),
        metadata=metadata, warnings=warnings,
    )
    if job is None:
        compact_stats(trace.stats, n)
    return trace


class _StatWork:
    """``assemble``'s stats moved and compacted by two threads: the stats on the same
    events are one piece of work (they share the moved events), the one on the most
    events first, whichever thread is free taking the next."""

    def __init__(self, stats: dict, inverse: np.ndarray, idx_dtype, n: int):
        self._raw, self._inverse, self._idx_dtype, self._n = stats, inverse, idx_dtype, n
        self._order = list(stats)
        self._lock = threading.Lock()
        self._done: dict = {}
        groups, firsts = [], []
        for sname, (idx, _, _) in stats.items():
            idx = np.asarray(idx)
            at = next((g for g, f in zip(groups, firsts) if _same_events(f, idx)), None)
            if at is None:
                groups.append([sname])
                firsts.append(idx)
            else:
                at.append(sname)
        size = {id(g): f.shape[0] for g, f in zip(groups, firsts)}
        self._groups = deque(sorted(groups, key=lambda g: -size[id(g)]))

    def run(self) -> None:
        while True:
            with self._lock:
                if not self._groups:
                    return
                names = self._groups.popleft()
                # out of the caller's dict: each raw column is freed once moved
                part = {sname: self._raw.pop(sname) for sname in names}
            out = _moved_stats(part, self._inverse, self._idx_dtype, self._n)
            del part
            compact_stats(out, self._n)
            with self._lock:
                self._done.update(out)

    def stats(self) -> dict:
        """The model's stats, in the order they were given."""
        return {sname: self._done[sname] for sname in self._order if sname in self._done}


def _same_events(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two stats' raw event columns are the same events (one array, or equal)."""
    return a is b or (a.shape == b.shape and np.array_equal(a, b))


def _moved_stats(stats: dict, inverse: np.ndarray | None, idx_dtype, n: int) -> dict:
    """``assemble``'s stats ({name: (raw idx, values, is_string)}, emptied on the way)
    as ``Stat``s on the model's event indices (``inverse``: the new index of each raw
    event, None where the events did not move)."""
    out_stats = {}
    # consumed as remapped: the raw stat columns are freed one by one, not all at the end.
    # Stats on the same events (the HLO op's module, scope, type, source…) share one
    # int32 event column.
    remapped: list = []          # (raw idx, sorted new idx, order or None)
    # a value column reordered once: a coded stat's codes are its key stat's values
    # (``Coded``), and stay one array in the model
    moved: dict = {}             # (id of raw values, id of order) → (raw, reordered)
    shared = {id(v.codes) for _, v, _ in stats.values() if isinstance(v, Coded)}

    def reordered(values, o):
        if o is None or id(values) not in shared:
            return values if o is None else values[o]
        key = (id(values), id(o))
        if key not in moved:
            moved[key] = (values, values[o])
        return moved[key][1]
    for sname in list(stats):
        idx, values, is_string = stats.pop(sname)
        idx = np.asarray(idx)
        if idx.size == 0:
            continue
        hit = next((r for r in remapped if _same_events(r[0], idx)), None)
        if hit is None:
            new = idx.astype(idx_dtype) if inverse is None else inverse[idx]
            o = None if (new[1:] >= new[:-1]).all() else sort_order(new, n)
            hit = (idx, new if o is None else new[o], o)
            remapped.append(hit)
        o = hit[2]
        if isinstance(values, Coded):
            values = Coded(reordered(values.codes, o), values.table)
        else:
            values = np.asarray(values)
            if sname in ID_STATS:
                values = _narrowed(values)
            values = reordered(values, o)
        out_stats[sname] = Stat(hit[1], values, is_string)
    del remapped, moved
    return out_stats


def narrow_id_stats(stats: dict) -> None:
    """The id stats of raw ``stats`` ({name: (events, values, is_string)}) as int32 where
    every value fits, in place.  Before the events are moved, not after: a correlation id
    on every event held as int64 through the moves was 305 MB at 40 M events, at the
    read's peak; the readers do it before they link by correlation id, ``assemble`` for
    those that have not."""
    for sname in ID_STATS & stats.keys():
        idx, values, is_string = stats[sname]
        if not isinstance(values, Coded):
            stats[sname] = (idx, _narrowed(np.asarray(values)), is_string)
        del values


def compact_stats(stats: dict, n: int) -> None:
    """Each of the model's ``stats`` ({name: Stat} over ``n`` events, in place) on nearly
    every event held as a column over them all (``Spread``: no event index), and each of
    few distinct values as narrow codes (``coded_if_few``).  The new form is made while
    the old is still held: done while the raw columns are moved, it adds to the read's
    peak (76 MB at 40 M events), so ``assemble`` does it there only beside the moves, on
    traces small enough to pair stages (``beside.side_by_side``)."""
    users: dict = {}
    for st in stats.values():
        users[id(st.events)] = users.get(id(st.events), 0) + 1
    for sname in list(stats):
        st = stats[sname]
        new = spread_if_dense(st, n, users[id(st.events)] > 1)
        stats[sname] = new if new is not st else coded_if_few(st)
        del st, new


def _narrowed(values: np.ndarray) -> np.ndarray:
    """Integer ids as int32 when all of them fit, else as they are."""
    if values.dtype.kind != "i" or values.itemsize <= 4 or not values.size:
        return values
    if int(values.min()) >= -2**31 and int(values.max()) < 2**31:
        return values.astype(np.int32)
    return values


def _owned(a: np.ndarray) -> bool:
    """A column the model may keep as it is: writable, and no view of another array
    (a scanner's buffer is fine)."""
    return a.flags.writeable and not isinstance(a.base, np.ndarray)


def _moved(inverse, idx: np.ndarray, idx_dtype) -> np.ndarray:
    """Raw event indices as model indices (``inverse`` None: the same)."""
    if not idx.size:
        return idx
    return (idx if inverse is None else inverse[idx]).astype(idx_dtype, copy=False)


def correlation_links(kind: np.ndarray, on_device: np.ndarray, idx: np.ndarray,
                      vals: np.ndarray, idx_dtype=np.int64):
    """Host runtime call → device activity carrying the same correlation id.

    ``idx``/``vals``: raw event indices and correlation values (int32 or int64 read as
    they are, else as int64); ``on_device``: per raw
    event, whether it sits on a device track.  The links' event indices are
    ``idx_dtype`` (int32 below 2**31 events: 160 MB less per 20 M links).
    """
    from .model import EventKind as K, LinkKind
    empty = (np.zeros(0, idx_dtype), np.zeros(0, idx_dtype), np.zeros(0, np.int8))
    if idx is None or len(idx) == 0:
        return empty
    idx = np.ascontiguousarray(idx)
    if idx.dtype not in (np.int32, np.int64):
        idx = idx.astype(np.int64)
    vals = np.ascontiguousarray(vals)
    if vals.dtype not in (np.int32, np.int64):
        vals = vals.astype(np.int64)
    fn = native_fn("corr_links")
    if fn is not None and idx.shape == vals.shape:
        bits = lambda kinds: sum(1 << int(k) for k in kinds)  # noqa: E731
        wide = np.dtype(idx_dtype) != np.int32
        got = fn(np.ascontiguousarray(kind, np.int8), np.ascontiguousarray(on_device, bool),
                 idx, vals, bits((K.LAUNCH, K.RUNTIME, K.SYNC)),
                 bits((K.KERNEL, K.MEMCPY, K.MEMSET)), wide, vals.dtype.itemsize)
        if got is not None:       # else the ids are no counter's: sorted below
            src, dst = (np.frombuffer(x, np.int64 if wide else np.int32) for x in got)
            return src, dst, np.full(src.shape[0], LinkKind.CORRELATION, np.int8)
    src, dst, lk = _sorted_correlation_links(kind, on_device, idx, vals)
    return src.astype(idx_dtype, copy=False), dst.astype(idx_dtype, copy=False), lk


def _sorted_correlation_links(kind, on_device, idx, vals):
    """numpy's ``correlation_links``: a table where the host ids are a counter's, else a
    sorted search."""
    from .model import EventKind as K, LinkKind
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int8))
    host_side = np.isin(kind[idx], (K.LAUNCH, K.RUNTIME, K.SYNC)) & ~on_device[idx]
    dev_side = on_device[idx] & np.isin(kind[idx], (K.KERNEL, K.MEMCPY, K.MEMSET))
    h_idx, h_val = idx[host_side], vals[host_side]
    d_idx, d_val = idx[dev_side], vals[dev_side]
    if h_idx.size == 0 or d_idx.size == 0:
        return empty
    lo, hi = int(h_val.min()), int(h_val.max())
    if lo >= 0 and hi < 8 * h_val.shape[0] + 1024 and \
            np.bincount(h_val, minlength=hi + 1).max() <= 1:
        # ids are small, dense and unique on the host side (a counter): a lookup table
        # instead of a sort
        lut = np.full(hi + 1, -1, np.int64)
        lut[h_val] = h_idx
        ok = (d_val >= 0) & (d_val <= hi)
        got = np.full(d_val.shape[0], -1, np.int64)
        got[ok] = lut[d_val[ok]]
        ok = got >= 0
        src, dst = got[ok], d_idx[ok]
        return src, dst, np.full(src.shape[0], LinkKind.CORRELATION, np.int8)
    o = np.argsort(h_val, kind="stable")
    h_idx, h_val = h_idx[o], h_val[o]
    pos = np.searchsorted(h_val, d_val)
    ok = pos < h_val.shape[0]
    ok[ok] &= h_val[pos[ok]] == d_val[ok]
    src = h_idx[pos[ok]]
    dst = d_idx[ok]
    return src, dst, np.full(src.shape[0], LinkKind.CORRELATION, np.int8)

