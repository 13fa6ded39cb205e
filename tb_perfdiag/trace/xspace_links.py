"""An XSpace's stat columns (string values, what event metadata adds) and the links
between its events (flows, correlation ids)."""
from __future__ import annotations

import numpy as np

from .build import StringTable, correlation_links, map_distinct, unique_rows
from .model import LinkKind, TrackKind, search
from .xspace_planes import _size, _where
from .xspace_scan import ST_BYTES, ST_DOUBLE, ST_REF, ST_STR
from .xspace_stats import STATS, STR_STATS


def _event_stats(scan, ev_rows, ev_plane, planes, strings, scan_strings) -> dict:
    """{stat: (events, values, is_string)} of the scan's stat rows (taken out of
    ``scan``): string values as ids into ``strings``, doubles as their integer part."""
    parts = scan.pop("stats")
    stats = {}
    for sname in STATS:
        part = parts.pop(sname, None)
        if part is None:
            continue
        evs, raw, kinds = part
        del part
        if sname in STR_STATS:
            stats[sname] = (evs, _string_values(evs, raw, kinds, ev_rows, ev_plane, planes,
                                                strings, scan_strings), True)
        else:
            # double values are rare among the stats read: their bits sit in the values
            dbl = np.flatnonzero(kinds == ST_DOUBLE)
            if dbl.size:
                raw[dbl] = raw[dbl].view(np.float64).astype(np.int64)
            stats[sname] = (evs, raw, False)
    del parts
    return stats


def _with_correlation_links(links, stats, kind, tracks, track, n):
    """The flow links and those of host events to the device work they launched.  The
    correlation stat is held only here: assemble narrows its values, and a reference
    kept in ``build`` would keep them."""
    corr = stats.get("correlation_id")
    if corr is not None:
        on_device = np.asarray(tracks.kind, np.int8)[track] == TrackKind.DEVICE
        idx_dtype = np.int32 if n < 2**31 - 1 else np.int64
        c_links = correlation_links(kind, on_device, corr[0], corr[1], idx_dtype)
        del on_device
        # no copy of the correlation links where no flow precedes them
        links = tuple(np.concatenate([a, b], dtype=b.dtype) if a.size else b.astype(
            b.dtype, copy=False) for a, b in zip(links, c_links))
        del c_links
    return links


def _string_values(evs, raw, kinds, ev_rows, ev_plane, planes, strings,
                   scan_strings) -> np.ndarray:
    """A string stat's values as ids into ``strings``: a ref value names a stat metadata
    entry of its event's plane, whose name is the string; str/bytes values are ids into
    the scan's strings; no value is ""."""
    vals = np.empty(raw.shape[0], np.int32)
    # rows come in event order, events plane by plane: each plane's rows are one slice
    if ev_rows and isinstance(ev_rows[0], slice):
        at = search(evs, np.array([r.start for r in ev_rows] + [ev_rows[-1].stop]))
        plane_rows = [slice(int(at[pi]), int(at[pi + 1])) for pi in range(len(planes))]
    else:
        ref_plane = ev_plane[evs]
        plane_rows = [np.flatnonzero(ref_plane == pi) for pi in range(len(planes))]
    for pi, (_, _, pm) in enumerate(planes):
        rows = plane_rows[pi]
        if not _size(rows):
            continue
        is_ref = kinds[rows] == ST_REF
        if not is_ref.all():
            rows = _where(rows, kinds == ST_REF)
        if _size(rows):
            vals[rows] = map_distinct(raw[rows], lambda u, pm=pm: strings.intern_many(
                [pm.stat_name.get(x, "") for x in u.tolist()]))
    is_str = (kinds == ST_STR) | (kinds == ST_BYTES)
    if is_str.any():
        ssel = np.flatnonzero(is_str)
        vals[ssel] = map_distinct(raw[ssel], lambda u: strings.intern_many(
            [scan_strings[x].decode("utf-8", "replace") for x in u.tolist()]))
    other = ~(is_str | (kinds == ST_REF))
    if other.any():
        vals[other] = strings.intern("")
    return vals


def _merge_metadata_stats(stats: dict, md_stats: list, strings: StringTable) -> None:
    """Adds what the events' metadata says to ``stats``; a stat the event carries itself
    wins over its metadata's.  ``md_stats``: per plane (its events with metadata stats,
    their row in the metadata's stats, those stats).  Each stat takes every plane's
    values in one merge (one per plane copied the stat whole each time: a third of a
    TPU trace's build)."""
    added: dict = {}
    for evs, rows, cols in md_stats:
        for sname, (md_rows, vals, is_string) in cols.items():
            vals = strings.intern_many(vals) if is_string else np.asarray(vals, np.int64)
            # the value of each event: the stat's entry for its metadata row, if any
            at = np.full(max(int(rows.max()), int(md_rows.max())) + 1, -1, np.int64)
            at[md_rows] = np.arange(md_rows.shape[0])
            pos = at[rows]
            ok = pos >= 0
            if ok.any():
                added.setdefault(sname, (is_string, [], []))
                added[sname][1].append(evs[ok])
                added[sname][2].append(vals[pos[ok]])
    for sname, (is_string, es, vs) in added.items():
        e, v = (es[0], vs[0]) if len(es) == 1 else (np.concatenate(es), np.concatenate(vs))
        if e.shape[0] > 1 and not (e[1:] > e[:-1]).all():
            o = np.argsort(e, kind="stable")
            e, v = e[o], v[o]
        cur = stats.get(sname)
        if cur is not None:
            e0, v0, _ = cur
            e0, v0 = np.asarray(e0), np.asarray(v0)
            v = v.astype(v0.dtype)
            if e0.size:
                k = search(e0, e)
                own = e0[np.minimum(k, e0.shape[0] - 1)] == e
                e, v, k = e[~own], v[~own], k[~own]
                # both sorted: the new rows go in before the first larger event (a merge,
                # not a sort of both)
                e, v = np.insert(e0, k, e), np.insert(v0, k, v)
        stats[sname] = (e, v, is_string)


def _flow_links(stats, n):
    """Producer (_p, _pt) → consumer (_c, _ct) links."""
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int8))
    if "_p" not in stats or "_c" not in stats:
        return empty
    def keyed(idname, typename):
        evs, ids, _ = stats[idname]
        evs = np.asarray(evs)
        if typename not in stats:
            return evs, ids, np.zeros(evs.shape[0], np.int64)
        te, tv = np.asarray(stats[typename][0]), np.asarray(stats[typename][1], np.int64)
        if te.shape[0] > 1 and not (te[1:] >= te[:-1]).all():
            types = np.zeros(n, np.int64)
            types[te] = tv
            return evs, ids, types[evs]
        # each event's type row looked up (the last where an event has two, as an
        # assignment over all events would leave it), not a column over all events
        k = search(te, evs, side="right") - 1
        kk = np.maximum(k, 0)
        hit = (k >= 0) & (te[kk] == evs) if te.size else np.zeros(evs.shape[0], bool)
        return evs, ids, np.where(hit, tv[kk] if te.size else 0, 0)
    pe, pid_, pt = keyed("_p", "_pt")
    ce, cid, ct = keyed("_c", "_ct")
    # one producer per (type, id), the first; consumers may be many
    kinds = np.unique(pt)
    if kinds.shape[0] <= 64:
        # few flow types: per type, the producers' ids sorted once and each consumer's
        # looked up (a lexsort of every (type, id) row took twice as long)
        src = np.full(ce.shape[0], -1, np.int64)
        for t in kinds.tolist():
            ps = np.flatnonzero(pt == t)
            cs = np.flatnonzero(ct == t)
            if not cs.size:
                continue
            ids = pid_[ps]
            o = np.argsort(ids, kind="stable")     # stable: the first of equal ids first
            ids = ids[o]
            want = cid[cs]
            at = np.minimum(search(ids, want), ids.shape[0] - 1)
            hit = ids[at] == want
            src[cs[hit]] = pe[ps[o[at[hit]]]]
    else:
        allk, inv = unique_rows(np.concatenate([np.stack([pt, pid_], axis=1),
                                                np.stack([ct, cid], axis=1)]))
        pk, ck = inv[:pe.shape[0]], inv[pe.shape[0]:]
        producer = np.full(allk.shape[0], -1, np.int64)
        producer[pk[::-1]] = pe[::-1]
        src = producer[ck]
    ok = (src >= 0) & (src != ce)
    return src[ok], ce[ok], np.full(int(ok.sum()), LinkKind.FLOW, np.int8)
