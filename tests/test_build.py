"""The array-only nesting and ordering agree with a plain stack walk and lexsort."""
from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tb_perfdiag.trace.build import event_order, nest, unique_inverse


@contextlib.contextmanager
def _numpy_only():
    """The numpy versions of what the extension does (hypothesis tests cannot take
    pytest's monkeypatch)."""
    old = os.environ.get("TB_PERFDIAG_NO_NATIVE")
    os.environ["TB_PERFDIAG_NO_NATIVE"] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ["TB_PERFDIAG_NO_NATIVE"]
        else:
            os.environ["TB_PERFDIAG_NO_NATIVE"] = old


def _nested_events(rng, n_tracks=3, flat_track=1):
    evs = []

    def gen(tr, a, b, d):
        t = a
        while t < b and len(evs) < 80:
            s = t + int(rng.integers(0, 3))
            e = min(s + int(rng.integers(0, 10)), b)
            if s > b:
                break
            evs.append((tr, s, e - s))
            if d < 4 and e - s > 1 and tr != flat_track:
                gen(tr, s, e, d + 1)
            t = e + int(rng.integers(0, 3))
    for tr in range(n_tracks):
        gen(tr, 0, 50, 0)
    evs = np.array(evs, np.int64)
    o = np.lexsort((-evs[:, 2], evs[:, 1], evs[:, 0]))
    return evs[o]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_nest_matches_stack_walk(seed):
    evs = _nested_events(np.random.default_rng(seed))
    track, ts, dur = evs[:, 0], evs[:, 1], evs[:, 2]
    depth, parent = nest(track, ts, dur)
    for i in range(len(ts)):
        # ancestors: earlier events on the track still open when i starts
        anc = [j for j in range(i) if track[j] == track[i] and ts[j] + dur[j] > ts[i]]
        assert depth[i] == len(anc)
        assert parent[i] == (anc[-1] if anc else -1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 30), st.integers(0, 6)),
                min_size=1, max_size=200))
def test_event_order_equals_lexsort(rows):
    """(track, ts, -dur), exact ties in input order: the C order (counting sort by track,
    a merge sort of the unsorted runs) and the numpy one are ``np.lexsort``'s."""
    from tb_perfdiag.trace import build as B
    a = np.array(rows, np.int64)
    tr, ts, du = a[:, 0].astype(np.int32), a[:, 1], a[:, 2]
    want = np.lexsort((-du, ts, tr))
    assert event_order(tr, ts, du).tolist() == want.tolist()
    with _numpy_only():
        assert event_order(tr, ts, du).tolist() == want.tolist()
    # asked for None where nothing moves: None exactly when the order is the identity
    got = event_order(tr, ts, du, none_if_sorted=True)
    identity = (want == np.arange(want.shape[0])).all()
    if B.native_fn("event_order") is not None:
        assert (got is None) == identity
    if got is not None:
        assert got.tolist() == want.tolist()
    # the same rows put in the model's order: nothing moves
    o_tr, o_ts, o_du = tr[want], ts[want], du[want]
    if B.native_fn("event_order") is not None:
        assert event_order(o_tr, o_ts, o_du, none_if_sorted=True) is None


def test_event_order_of_lines_in_time_order_with_a_few_out_of_place():
    """Long runs already in order (as readers emit lines) stay as they are; a run with
    events out of place, ties of start and of start and length, is sorted."""
    rng = np.random.default_rng(3)
    parts = []
    for t in (2, 0, 1):
        ts = np.sort(rng.integers(0, 10**6, 5000))
        parts.append((np.full(5000, t, np.int32), ts, rng.integers(0, 50, 5000)))
    tr, ts, du = (np.concatenate(x) for x in zip(*parts))
    ts[7000:7010] = ts[7000:7010][::-1]
    ts[12000:12004] = ts[12000]
    want = np.lexsort((-du, ts, tr))
    assert event_order(tr, ts, du).tolist() == want.tolist()


@given(st.lists(st.integers(-5, 3000), max_size=300))
def test_unique_inverse_equals_numpy(xs):
    x = np.array(xs, np.int64)
    u, inv = unique_inverse(x)
    nu, ninv = np.unique(x, return_inverse=True)
    assert (u == nu).all() and (inv == ninv.reshape(-1)).all()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 60), st.integers(0, 25)),
                min_size=1, max_size=300))
def test_native_nest_equals_array_nest(rows):
    """The C pass and the array algorithm agree on anything, partial overlaps and
    zero-length events included (the C pass is what runs when the extension is built)."""
    from tb_perfdiag.trace.build import _native_nest, nest_arrays
    fn = _native_nest()
    if fn is None:
        pytest.skip("native extension not built (or TB_PERFDIAG_NO_NATIVE set)")
    a = np.array(rows, np.int64)
    o = np.lexsort((-a[:, 2], a[:, 1], a[:, 0]))
    tr, ts, du = a[o, 0].astype(np.int32), a[o, 1], a[o, 2]
    d2, p2 = nest_arrays(tr, ts, ts + du)
    for dt in (np.int64, np.int32):
        # int32 parents are what the model keeps below 2**31 events
        d1, p1 = nest(tr, ts, du, dt)
        assert p1.dtype == dt
        assert d1.tolist() == d2.tolist() and p1.tolist() == p2.tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 40)), min_size=1, max_size=120),
       st.integers(0, 2**40))
def test_correlation_links_match_first_host_event(rows, offset):
    """Every device op links to the first host launch with its correlation id, whether the
    ids are a dense counter (lookup table) or sparse / repeated (sorted search)."""
    from tb_perfdiag.trace.build import correlation_links
    from tb_perfdiag.trace.model import EventKind as K
    on_dev = np.array([d == 1 for d, _ in rows])
    kind = np.where(on_dev, K.KERNEL, K.LAUNCH).astype(np.int8)
    ids = np.array([c for _, c in rows], np.int64) + (offset if offset % 2 else 0)
    idx = np.arange(len(rows))
    src, dst, _ = correlation_links(kind, on_dev, idx, ids)
    want = {}
    for i, (d, _) in enumerate(rows):
        if d == 1:
            hosts = [j for j, (dj, _) in enumerate(rows) if dj == 0 and ids[j] == ids[i]]
            if hosts:
                want[i] = hosts[0]
    assert dict(zip(dst.tolist(), src.tolist())) == want


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([np.int8, np.int16, np.int32, np.uint16]),
       st.lists(st.integers(-2**15, 2**15), max_size=40),
       st.lists(st.integers(-2**40, 2**40) | st.integers(-300, 300), max_size=20),
       st.sampled_from(["left", "right"]))
def test_search_answers_as_searchsorted_whatever_the_widths(dtype, hay, needles, side):
    """``model.search`` narrows the needles to the column's type only where they fit:
    the same answer as numpy's search for needles beyond the column's range too."""
    from tb_perfdiag.trace.model import search
    info = np.iinfo(dtype)
    a = np.sort(np.clip(np.array(hay, np.int64), info.min, info.max)).astype(dtype)
    v = np.array(needles, np.int64)
    assert np.array_equal(search(a, v, side), np.searchsorted(a, v, side=side))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 80), st.integers(0, 12)),
                max_size=300), st.integers(0, 3))
def test_union_of_runs_is_the_union(rows, n_other):
    """A device's busy set merged run by run (one run per track, each sorted by start) is
    the plain union of its ops: equal starts, touching, nested and empty intervals, empty
    runs, and events of the trace that are not the device's (``n_other`` before each)."""
    from tb_perfdiag.analysis import intervals as I
    if I._native_union() is None:
        pytest.skip("the native extension is not built (setup.py build_ext)")
    rows = sorted(rows, key=lambda r: (r[0], r[1], -r[2]))
    ts, dur, ev, bounds = [], [], [], [0]
    for run in range(6):
        for r in [r for r in rows if r[0] == run]:
            ts.extend([999] * n_other)
            dur.extend([1] * n_other)
            ev.append(len(ts))
            ts.append(r[1])
            dur.append(r[2])
        bounds.append(len(ev))
    ts, dur = np.array(ts, np.int64), np.array(dur, np.int64)
    ev, bounds = np.array(ev, np.int64), np.array(bounds, np.int64)
    want = I.union(ts[ev], ts[ev] + dur[ev])
    # the ops' indices as the model gives them (int32) and as int64: the same answers
    for idx in (ev, ev.astype(np.int32)):
        got = I.union_of_runs(ts, dur, idx, bounds)
        for w, g in zip(want, got):
            np.testing.assert_array_equal(w, g)
            assert g.dtype == np.int64
    # the gaps of at least a threshold found in the same merge are find_gaps' (ties of
    # start and of end included: the op before is the last in ev of those ending at the
    # gap, the op after the first of those starting at its end)
    from types import SimpleNamespace

    from tb_perfdiag.analysis.gaps.busy import find_gaps
    fake = SimpleNamespace(ts=ts, dur=dur, end_of=lambda i: ts[i] + dur[i])
    for thr in (0, 1, 3, 10):
        want_gaps = find_gaps(fake, 0, ev, *want, max(thr, 1))
        for idx in (ev, ev.astype(np.int32)):
            us, ue, big = I.union_of_runs(ts, dur, idx, bounds, thr)
            np.testing.assert_array_equal(us, want[0])
            assert big is not None          # found by the native merge, not the caller
            for w, g in zip(want_gaps, big):
                np.testing.assert_array_equal(w, g)
                assert g.dtype == np.int64


def test_union_of_runs_out_of_order_falls_back_to_the_union():
    """Runs that are not sorted by start as promised still give the union (the native
    merge refuses them and the general union answers)."""
    from tb_perfdiag.analysis import intervals as I
    ts = np.array([50, 10, 30, 0], np.int64)
    dur = np.array([5, 5, 30, 2], np.int64)
    ev = np.arange(4, dtype=np.int64)
    us, ue = I.union_of_runs(ts, dur, ev, np.array([0, 2, 4], np.int64))
    assert us.tolist() == [0, 10, 30] and ue.tolist() == [2, 15, 60]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([0, 5, 10**12]))
def test_correlation_links_in_c_are_the_numpy_ones(seed, offset):
    """Launch → device links by correlation id from the C table equal numpy's (its table
    for unique counter ids, its sort otherwise): repeated host ids (the first call wins),
    device ids no host call has, rows of other kinds, ids too sparse for a table."""
    from tb_perfdiag.trace import build as B
    from tb_perfdiag.trace.model import EventKind as K
    if B.native_fn("corr_links") is None:
        pytest.skip("the native extension is not built (setup.py build_ext)")
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    kind = rng.choice(np.array([K.LAUNCH, K.RUNTIME, K.SYNC, K.CPU_OP, K.KERNEL, K.MEMCPY,
                                K.MEMSET, K.OTHER], np.int8), n)
    on_device = rng.random(n) < 0.5
    idx = rng.choice(n, int(rng.integers(0, n + 1)), replace=False).astype(np.int64)
    vals = rng.integers(0, max(2, n // 2), idx.shape[0]).astype(np.int64) + offset
    with _numpy_only():
        want = B.correlation_links(kind, on_device, idx, vals)
    # the stat's int32 event indices and (where they fit) int32 ids read as they are,
    # int32 links made directly (the C table then holds int32 events)
    ids = [vals] + ([vals.astype(np.int32)] if offset < 2**31 else [])
    for vv in ids:
        for ix, dt in ((idx, np.int64), (idx.astype(np.int32), np.int32),
                       (idx.astype(np.int32), np.int64)):
            got = B.correlation_links(kind, on_device, ix, vv, dt)
            assert got[0].dtype == got[1].dtype == dt
            for w, g in zip(want, got):
                np.testing.assert_array_equal(w, g)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-128, 127), max_size=60),
       st.lists(st.integers(-128, 127), max_size=8))
def test_isin_few_is_numpys_isin(col, values):
    """The comparison-per-run membership test equals ``np.isin`` for any values:
    repeated, adjacent, none, at the int8 bounds."""
    from tb_perfdiag.trace.model import isin_few
    a = np.array(col, np.int8)
    got = isin_few(a, values)
    assert got.dtype == bool and got.tolist() == np.isin(a, values).tolist()


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(["left", "right"]),
       st.sampled_from([np.int32, np.int64]), st.sampled_from(["sorted", "runs", "any"]),
       st.booleans())
def test_search_in_c_is_numpys_searchsorted(seed, side, dtype, keys, column_sorted):
    """``search`` answers many keys in C over a sorted column: by one merge when the keys
    are sorted, by a binary search each when not, galloping on from the last answer in a
    rising run (repeated values, keys past both ends, an empty column); by numpy over a
    column out of order.  The same either way."""
    from tb_perfdiag.trace import build as B
    from tb_perfdiag.trace.model import search
    if B.native_fn("sorted_search") is None:
        pytest.skip("the native extension is not built (setup.py build_ext)")
    rng = np.random.default_rng(seed)
    hi = int(rng.integers(1, 20000))
    a = np.sort(rng.integers(-5, hi, int(rng.integers(0, 30000)))).astype(dtype)
    v = rng.integers(-10, hi + 10, int(rng.integers(4096, 9000))).astype(dtype)
    if keys == "sorted":
        v.sort()
    elif keys == "runs":     # rising runs of any length, each starting anywhere
        cuts = np.sort(rng.integers(0, v.size, int(rng.integers(1, 200))))
        for part in np.split(v, cuts):
            part.sort()
    if not column_sorted and a.size > 1:
        a[[0, -1]] = a[[-1, 0]]
        assume(a[0] != a[-1])
    got = search(a, v, side)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.searchsorted(a, v, side=side))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_assemble_keeps_a_sorted_input_as_it_is_and_agrees_with_a_shuffled_one(seed):
    """Events that already come in the model's order (the usual XSpace: one line after
    another, in time order) are kept without moving; the trace is the one the same
    events give in any other order: columns, nesting, stats, links."""
    from tb_perfdiag.trace.build import StringTable, Tracks, assemble
    from tb_perfdiag.trace.model import TrackKind
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 80))
    track = np.sort(rng.integers(0, 3, n)).astype(np.int32)
    ts = rng.integers(0, 50, n).astype(np.int64)
    dur = rng.integers(1, 20, n).astype(np.int64)
    o = np.lexsort((-dur, ts, track))
    track, ts, dur = track[o], ts[o], dur[o]
    keep = np.ones(n, bool)                 # (track, ts, dur) ties would order by input
    keep[1:] = (track[1:] != track[:-1]) | (ts[1:] != ts[:-1]) | (dur[1:] != dur[:-1])
    track, ts, dur = track[keep], ts[keep] + 1000, dur[keep]
    n = track.shape[0]
    name = rng.integers(0, 5, n).astype(np.int32)
    kind = rng.integers(0, 20, n).astype(np.int8)
    st_ev = np.flatnonzero(rng.random(n) < 0.5)
    st_val = rng.integers(0, 100, st_ev.shape[0])
    l_src, l_dst = rng.integers(0, n, 4), rng.integers(0, n, 4)

    def build(perm):
        tracks = Tracks()
        for t in range(3):
            tracks.add(TrackKind.HOST, -1, f"t{t}", f"t{t}", "g")
        strings = StringTable()
        for i in range(5):
            strings.intern(f"n{i}")
        inv = np.empty(n, np.int64)
        inv[perm] = np.arange(n)
        events = {"ts": ts[perm], "dur": dur[perm], "track": track[perm],
                  "name": name[perm], "kind": kind[perm]}
        stats = {"s": (np.sort(inv[st_ev]), st_val[np.argsort(inv[st_ev], kind="stable")],
                       False)}
        links = (inv[l_src], inv[l_dst], np.zeros(4, np.int8))
        return assemble("x", "kineto", strings, tracks, [], events, stats, links, {}, [])

    a = build(np.arange(n))
    b = build(rng.permutation(n))
    for col in ("ts", "dur", "track", "name", "kind", "depth", "parent", "link_src",
                "link_dst"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col))
    assert ("s" in a.stats) == ("s" in b.stats) == bool(st_ev.size)
    if st_ev.size:
        np.testing.assert_array_equal(a.stats["s"].events, b.stats["s"].events)
        np.testing.assert_array_equal(a.stats["s"].values, b.stats["s"].values)
    assert a.ts.flags.writeable and a.kind.flags.writeable


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-1, 50), max_size=200), st.booleans())
def test_unique_first_is_numpys_unique_with_index(values, big):
    """Distinct values and the index of each one's first occurrence, as ``np.unique``
    gives them, by the table for small ids and by the sort for large ones."""
    from tb_perfdiag.trace.build import unique_first
    x = np.array(values, np.int64) * (10**12 if big else 1)
    u, first = unique_first(x)
    wu, wfirst = np.unique(x, return_index=True)
    assert u.tolist() == wu.tolist() and first.tolist() == wfirst.tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-1, 50), max_size=200), st.booleans(),
       st.sampled_from([np.int32, np.int64]))
def test_map_distinct_is_a_function_of_the_distinct_values_taken_per_element(values, big,
                                                                             dtype):
    """``of`` is asked once, with the sorted distinct values, and its answer is taken
    for every element: through the table for small ids (−1 among them) and through the
    sort for large ones."""
    from tb_perfdiag.trace.build import map_distinct
    x = np.array(values, np.int64) * (10**6 if big else 1)
    x = x.astype(dtype)
    asked = []

    def of(u):
        asked.append(u.tolist())
        return u.astype(np.int64) * 7 - 3
    got = map_distinct(x, of)
    assert got.tolist() == [v * 7 - 3 for v in x.tolist()]
    if x.size:
        assert asked == [sorted(set(x.tolist()))]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=200))
def test_track_counts_is_numpys_unique_with_counts(values):
    from tb_perfdiag.trace.model import track_counts
    x = np.array(values, np.int32)
    tr, cnt = track_counts(x)
    wtr, wcnt = np.unique(x, return_counts=True)
    assert tr.tolist() == wtr.tolist() and cnt.tolist() == wcnt.tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 30),
                          st.one_of(st.integers(0, 50), st.integers(2**40, 2**62))),
                max_size=60))
def test_gap_detail_order_is_the_lexsort(rows):
    """Host ops per gap, most self time first, earlier op first at ties: the combined-key
    sort and the lexsort fallback (times too long for the key) give the lexsort's order."""
    from tb_perfdiag.analysis.gaps.detail import by_gap_then_most
    rows = sorted({(g, op): t for g, op, t in rows}.items())   # sorted by (gap, op)
    g = np.array([k[0] for k, _ in rows], np.int64)
    op = np.array([k[1] for k, _ in rows], np.int64)
    t = np.array([v for _, v in rows], np.int64)
    assert by_gap_then_most(g, t, op).tolist() == np.lexsort((op, -t, g)).tolist()


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 5000), st.floats(0.0, 1.0), st.booleans())
def test_sort_order_is_a_stable_argsort(seed, n, share, twice):
    """``sort_order`` (values placed at their value where they are distinct and dense)
    gives ``np.argsort(kind="stable")``: distinct values, a value twice, few values."""
    from tb_perfdiag.trace.build import sort_order
    rng = np.random.default_rng(seed)
    m = int(share * n)
    x = rng.permutation(n)[:m].astype(np.int32)
    if twice and m >= 2:
        x[int(rng.integers(0, m))] = x[int(rng.integers(0, m))]
    got = sort_order(x, n)
    np.testing.assert_array_equal(got, np.argsort(x, kind="stable"))


def test_assemble_reorders_a_coded_stat_with_its_key_column_once():
    """Events given out of the model's order: a stat held coded by another stat's values
    (``Coded``) is moved with them, and its codes stay the key stat's moved values (one
    array, not two), while every stat reads back per event as it was given."""
    from tb_perfdiag.trace.build import StringTable, Tracks, assemble
    from tb_perfdiag.trace.model import Coded, TrackKind
    rng = np.random.default_rng(3)
    n = 500
    tracks = Tracks()
    for t in range(3):
        tracks.add(TrackKind.HOST, -1, f"t{t}", f"t{t}", "p")
    strings = StringTable()
    ts = rng.permutation(n).astype(np.int64) * 10 + 1         # out of order
    events = {"ts": ts.copy(), "dur": np.full(n, 5, np.int64),
              "track": rng.integers(0, 3, n).astype(np.int32),
              "name": np.full(n, strings.intern("op"), np.int32), "kind": np.zeros(n, np.int8)}
    evs = np.sort(rng.choice(n, 300, replace=False))
    key = rng.integers(0, 20, evs.shape[0]).astype(np.int32)         # hlo_op-like ids
    table = np.arange(20, dtype=np.int32) * 3 + 100                  # one value per id
    other = rng.integers(0, 9, evs.shape[0]).astype(np.int64)
    stats = {"key": (evs, key, False), "scope": (evs, Coded(key, table), False),
             "other": (evs, other, False)}
    want = {name: dict(zip((ts[evs]).tolist(), vals.tolist()))
            for name, vals in (("key", key), ("scope", table[key]), ("other", other))}
    t = assemble("x", "xspace", strings, tracks, [], events, stats,
                 (np.zeros(0, np.int64),) * 2 + (np.zeros(0, np.int8),), {}, [], origin_ps=0)
    assert not (np.diff(t.stats["key"].events) < 0).any()
    assert t.stats["scope"].coded.codes is t.stats["key"].values
    for name, by_ts in want.items():
        s = t.stats[name]
        assert dict(zip(t.ts[s.events].tolist(), s.values.tolist())) == by_ts, name
        k = np.arange(s.events.shape[0])[::3]
        assert s.take(k).tolist() == s.values[k].tolist(), name


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_covered_read_a_block_at_a_time_is_the_whole_sum(seed):
    """The length of a busy set inside windows, with the set summed a block at a time (as
    for millions of intervals): equal to the whole running sum's answer and to a plain
    clip of every interval, for windows before, over, inside and after the set, empty and
    reversed ones, and scalar ends; and the set's total length likewise."""
    from tb_perfdiag.analysis import intervals as I
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    cuts = np.sort(rng.choice(np.arange(1, 4 * n + 2), 2 * n, replace=False))
    us, ue = cuts[0::2].astype(np.int64), cuts[1::2].astype(np.int64)
    a = rng.integers(-3, 4 * n + 5, int(rng.integers(0, 30)))
    b = a + rng.integers(-2, 2 * n + 3, a.shape[0])
    want = np.array([max(int(np.clip(ue, x, y).sum() - np.clip(us, x, y).sum()), 0)
                     for x, y in zip(a, b)], np.int64)
    whole = I.covered(us, ue, a, b)
    old = I._BLOCK
    try:
        I._BLOCK = int(rng.integers(1, 4))       # n > 2 blocks: the blocked sum
        blocked = I.covered(us, ue, a, b)
        scalar = I.covered(us, ue, 0, b)
        total = I.total_length(us, ue)
    finally:
        I._BLOCK = old
    assert whole.tolist() == want.tolist() and blocked.tolist() == want.tolist()
    assert total == I.total_length(us, ue) == int((ue - us).sum())
    assert scalar.tolist() == I.covered(us, ue, 0, b).tolist()


def test_a_spread_stat_reads_as_the_sparse_one():
    """A stat on more than three quarters of the events is held as a column over them all
    (``Spread``): its events, values, takes, lookups and dense column are the sparse
    stat's, in fewer bytes.  It stays sparse on fewer events, when another stat shares
    its events, when its values take the least of their type or are not integers, and
    when they are coded."""
    from tb_perfdiag.trace.model import Coded, Spread, Stat, spread_if_dense
    rng = np.random.default_rng(5)
    n = 1000
    ev = np.sort(rng.choice(n, 900, replace=False)).astype(np.int32)
    vals = rng.integers(-50, 10**9, 900).astype(np.int32)
    sparse = Stat(ev, vals)
    spread = spread_if_dense(sparse, n, False)
    assert isinstance(spread._held, Spread) and spread.nbytes() < sparse.nbytes()
    assert spread.events.dtype == np.int32
    np.testing.assert_array_equal(spread.events, ev)
    np.testing.assert_array_equal(spread.values, vals)
    k = rng.integers(0, 900, 50)
    np.testing.assert_array_equal(spread.take(k), vals[k])
    at = rng.integers(0, n, 300)
    for st in (sparse, spread):
        got, has = st.lookup(at)
        np.testing.assert_array_equal(has, np.isin(at, ev))
        np.testing.assert_array_equal(got[has], vals[np.searchsorted(ev, at[has])])
        for fill in (-1, 7):
            np.testing.assert_array_equal(st.dense(n, fill), sparse.dense(n, fill))
    least = vals.copy()
    least[3] = np.iinfo(np.int32).min                 # no value left to mark "none"
    for keep in (spread_if_dense(Stat(ev[:700], vals[:700]), n, False),       # too few
                 spread_if_dense(sparse, n, True),                             # shared
                 spread_if_dense(Stat(ev, least), n, False),
                 spread_if_dense(Stat(ev, vals.astype(np.float64)), n, False),
                 spread_if_dense(Stat(ev, Coded(np.zeros(900, np.int32),
                                                np.array([4]))), n, False)):
        assert not isinstance(keep._held, Spread)
    empty = Stat(np.zeros(0, np.int32), np.zeros(0, np.int64))
    got, has = empty.lookup(np.array([1, 2]))
    assert not has.any() and got.shape == (2,)
    # the analysis' per-op lookup reads a spread stat in place, with the sparse answers
    from tb_perfdiag.analysis.device_time.annotations import _lookup
    assert spread.spread and not sparse.spread
    np.testing.assert_array_equal(_lookup(spread, at), _lookup(sparse, at))


@pytest.mark.parametrize("span", [1000, 10**6])
def test_lookup_together_answers_as_each_lookup(span):
    """Stats looked up together answer as each's own lookup, whether they share their
    events (one search, by a table of positions where the range is short, by a search
    where it is wide) or not, coded, spread or absent."""
    from tb_perfdiag.trace.model import Coded, Stat, lookup_together, spread_if_dense
    rng = np.random.default_rng(11)
    ev = np.sort(rng.choice(span, 900, replace=False)).astype(np.int32)
    other = np.sort(rng.choice(span, 300, replace=False)).astype(np.int32)
    a = Stat(ev, rng.integers(0, 10**6, 900))
    b = Stat(ev, Coded(rng.integers(0, 4, 900).astype(np.uint8), np.array([5, 9, 2, 7])))
    c = Stat(other, rng.integers(0, 9, 300))
    # a stat on nearly every event, held spread (a column over the events)
    dense_ev = np.setdiff1d(np.arange(span), rng.choice(span, span // 10)).astype(np.int32)
    d = spread_if_dense(Stat(dense_ev, rng.integers(0, 50, dense_ev.shape[0])), span, False)
    assert d.spread
    at = np.concatenate([rng.choice(ev, 200), rng.integers(0, span, 200)])
    got = lookup_together([a, None, b, c, d], at)
    assert got[1] is None
    for st, (v, has) in zip((a, b, c, d), got[:1] + got[2:]):
        want_v, want_has = st.lookup(at)
        np.testing.assert_array_equal(has, want_has)
        np.testing.assert_array_equal(v[has], want_v[want_has])


@pytest.mark.parametrize("block", [1, 7, 1 << 20])
def test_a_stat_of_few_values_reads_as_the_plain_one(block, monkeypatch):
    """A stat of few distinct integer values (a program id, a stream) is held as one- or
    two-byte codes of its own into a table of them (``coded_if_few``): its events,
    values, takes, lookups, dense column and the analysis' per-op lookup are the plain
    stat's, in fewer bytes (counted: the codes are its own), whatever the block the codes
    are written by.  It stays plain with too many values, too wide a range, too few
    events or values that are not integers."""
    from tb_perfdiag.analysis.device_time.annotations import _lookup
    from tb_perfdiag.trace import model as M
    from tb_perfdiag.trace.model import Coded, Stat, coded_if_few
    monkeypatch.setattr(M, "_FEW_FROM", 100)
    monkeypatch.setattr(M, "_BLOCK", block)
    rng = np.random.default_rng(8)
    n = 5000
    ev = np.sort(rng.choice(n, 3000, replace=False)).astype(np.int32)
    at = rng.integers(0, n, 400)
    for vals, width in ((rng.choice([-1, 7, 2**40], 3000), 1),
                        (rng.integers(-300, 300, 3000).astype(np.int32), 2),
                        (rng.integers(10**6, 10**6 + 256, 3000), 1)):
        plain = Stat(ev, vals)
        few = coded_if_few(plain)
        assert isinstance(few._held, Coded) and few._held.own
        assert few._held.codes.itemsize == width
        assert few.nbytes() == ev.nbytes + few._held.codes.nbytes + few._held.table.nbytes
        assert few.nbytes() < plain.nbytes()
        np.testing.assert_array_equal(few.events, ev)
        np.testing.assert_array_equal(few.values, vals)
        assert few.values.dtype == vals.dtype
        k = rng.integers(0, 3000, 50)
        np.testing.assert_array_equal(few.take(k), vals[k])
        got, has = few.lookup(at)
        want, whas = plain.lookup(at)
        np.testing.assert_array_equal(has, whas)
        np.testing.assert_array_equal(got[has], want[whas])
        np.testing.assert_array_equal(few.dense(n, -5), plain.dense(n, -5))
        np.testing.assert_array_equal(_lookup(few, at), _lookup(plain, at))
    for keep in (Stat(ev, np.arange(3000) * 7000),                            # wide
                 Stat(ev, np.arange(3000) % 70000 + (np.arange(3000) // 3) * 66000),
                 Stat(ev[:99], np.zeros(99, np.int64)),                         # few events
                 Stat(ev, np.zeros(3000, np.float64))):
        assert coded_if_few(keep) is keep
    many = Stat(np.arange(70000, dtype=np.int32), np.arange(70000))             # > 65536
    assert coded_if_few(many) is many
    # a wide range: the sample finds the values, and a value it missed keeps it plain
    monkeypatch.setattr(M, "_SAMPLE", 30)
    wide = np.where(np.arange(3000) % 3, 2**40, -7)
    assert isinstance(coded_if_few(Stat(ev, wide))._held, Coded)
    wide[1501] = 5
    assert coded_if_few(Stat(ev, wide)).values is wide
    assert coded_if_few(Stat(ev, np.arange(3000) * 2**30)).values.shape == (3000,)


def test_the_read_holds_ids_narrow_before_moving_events():
    """``assemble`` narrows an id stat's int64 values before the events are moved (the
    reader's reference dropped), and the model's ids are the same numbers."""
    from tb_perfdiag.trace.build import StringTable, Tracks, assemble
    from tb_perfdiag.trace.model import TrackKind
    tracks = Tracks()
    tracks.add(TrackKind.HOST, -1, "t", "t", "p")
    strings = StringTable()
    strings.intern("x")
    ts = np.array([30, 10, 20], np.int64)
    wide = np.array([5, 6, 7], np.int64)
    stats = {"correlation_id": (np.array([0, 1, 2]), wide, False)}
    seen = []
    import tb_perfdiag.trace.build as B
    order = B.event_order

    def spy(*a, **k):
        seen.append(stats["correlation_id"][1].dtype)   # as the events are about to move
        return order(*a, **k)
    B.event_order = spy
    try:
        t = assemble("p", "kineto", strings, tracks, [],
                     {"ts": ts, "dur": np.ones(3, np.int64), "track": np.zeros(3, np.int32),
                      "name": np.zeros(3, np.int32), "kind": np.zeros(3, np.int8)},
                     stats, (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int8)),
                     {}, [], origin_ps=0)
    finally:
        B.event_order = order
    assert seen == [np.int32]
    assert t.stats["correlation_id"].values.tolist() == [6, 7, 5]


@pytest.mark.parametrize("block", [1, 3, 1 << 20])
def test_per_op_stat_lookup_a_block_at_a_time(block, monkeypatch):
    """``_lookup`` (a stat's value per op, −1 where none) takes the values a block of ops
    at a time: the same answers for any block, for plain and coded stats, with the
    search memo shared between stats of one event column."""
    from tb_perfdiag.analysis.device_time import annotations as A
    from tb_perfdiag.trace.model import Coded, Stat
    rng = np.random.default_rng(block)
    ev = np.sort(rng.choice(500, 200, replace=False)).astype(np.int32)
    plain = Stat(ev, rng.integers(0, 10**6, 200).astype(np.int64))
    codes = rng.integers(0, 4, 200).astype(np.int32)
    coded = Stat(ev, Coded(codes, np.array([7, 8, 9, 10], np.int32)))
    # the last op has a value (a block's end left unwritten would show there)
    ops = np.sort(np.append(rng.choice(int(ev[-1]), 119, replace=False), ev[-1]))
    want = {}
    for name, st in (("plain", plain), ("coded", coded)):
        v = np.full(500, -1, np.int64)
        v[ev] = st.values
        want[name] = v[ops]
    monkeypatch.setattr(A, "_BLOCK", block)
    memo: dict = {}
    for name, st in (("plain", plain), ("coded", coded)):
        got = A._lookup(st, ops, memo)
        assert got.tolist() == want[name].tolist(), name
    assert len(memo) == 1 and (want["plain"] >= 0).sum() > 20


def test_depth_is_one_byte_unless_a_track_nests_deeper_than_127():
    """The model's depth column is int8 for the usual nesting and int16 where an event
    sits deeper than 127, with the same depths either way (and the same nesting levels)."""
    from tb_perfdiag.testing import TraceBuilder
    for levels, dtype in ((128, np.int8), (129, np.int16)):
        b = TraceBuilder()
        th = b.thread("deep")
        ops = [b.op(th, f"f{i}", float(i), float(2000 - 2 * i)) for i in range(levels)]
        b.op(b.thread("flat"), "g", 0.0, 5.0)
        t = b.build()
        assert t.depth.dtype == dtype
        assert [int(t.depth[o.index]) for o in ops] == list(range(levels))
        got = [(idx.tolist(), p.tolist()) for idx, p in t.nested_levels()]
        assert [x for x, _ in got] == [[ops[i].index] for i in range(1, levels)]
        assert [p for _, p in got] == [[ops[i - 1].index] for i in range(1, levels)]


@pytest.mark.parametrize("n_lines, width", [(1, np.int8), (126, np.int8), (127, np.int16),
                                             (300, np.int16)])
def test_track_column_as_narrow_as_the_tracks(n_lines, width):
    """The model holds each event's track in the narrowest type that also holds the
    tracks' count (int8 up to 126 tracks, int16 past them): each track's events are
    still found by its slice."""
    from tb_perfdiag.testing.xspace import XSpaceWriter, load_xspace
    from tb_perfdiag.trace.model import narrowest_int as track_dtype
    w = XSpaceWriter()
    host = w.plane("/host:CPU", id=1)
    for i in range(n_lines):
        line = host.line(i + 1, f"thread {i}", timestamp_ns=0)
        for k in range(1 + i % 3):
            host.event(line, f"op{k}", offset_ps=k * 10_000, duration_ps=5_000)
    t = load_xspace(w)
    assert len(t.track_kind) == n_lines and t.track.dtype == width
    assert track_dtype(n_lines) == width
    bounds = t.track_bounds()
    assert bounds.tolist() == np.searchsorted(t.track.astype(np.int64),
                                              np.arange(n_lines + 1)).tolist()
    for tr, (lo, hi) in enumerate(t.track_slices(range(n_lines))):
        assert hi - lo == 1 + int(t.track_name[tr].split()[-1]) % 3
        assert (t.track[lo:hi] == tr).all()
    assert track_dtype(32766) == np.int16 and track_dtype(32767) == np.int32


def test_a_spread_stat_of_counted_ids_is_held_as_offsets():
    """Ids counted up along threads and streams (a correlation id on nearly every event)
    are held as a 16-bit offset per event from their block's least value; blocks whose
    values lie wider apart (a thread's last ids and the next stream's first, values at
    random) keep theirs.  Events, values, takes, lookups (any index type, negative
    ones) and the dense column read as the plain column does, in half its bytes."""
    from tb_perfdiag.trace import model as M
    from tb_perfdiag.trace.model import Spread, Stat, spread_if_dense
    rng = np.random.default_rng(11)
    n = 300_001                                  # not a whole number of blocks
    col = np.concatenate([5_000_000 + np.arange(120_000),         # a launch thread
                          np.arange(170_000) * 3,                 # a stream, gaps of 3
                          rng.integers(-2**31 + 1, 2**31 - 1, n - 290_000)]).astype(np.int32)
    absent = np.iinfo(np.int32).min
    col[rng.random(n) < 0.02] = absent
    col[4096 * 7:4096 * 8] = absent              # a block with no value at all
    ev = np.flatnonzero(col != absent).astype(np.int32)
    sparse = Stat(ev, col[ev])
    spread = spread_if_dense(sparse, n, False)
    held = spread._held
    assert isinstance(held, Spread) and held.column is None and held.codes.dtype == np.uint16
    assert 0 < held.wide.shape[0] <= 10          # the random tail and the seam
    assert spread.nbytes() < 0.6 * col.nbytes
    np.testing.assert_array_equal(spread.events, ev)
    np.testing.assert_array_equal(spread.values, col[ev])
    k = rng.integers(0, ev.shape[0], 5000)
    np.testing.assert_array_equal(spread.take(k), col[ev[k]])
    for at in (rng.integers(0, n, 7000), rng.integers(0, n, 7000).astype(np.int32),
               np.array([n - 1, 0, -1, -n]), np.arange(n)):
        got, has = spread.lookup(at)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(has, col[at] != absent)
        np.testing.assert_array_equal(got[has], col[at][has])
    for fill in (-1, 7):
        np.testing.assert_array_equal(spread.dense(n, fill), np.where(col == absent, fill, col))
    # random values everywhere: too many wide blocks to be worth coding, held plain
    noisy = rng.integers(-2**31 + 1, 2**31 - 1, n).astype(np.int32)
    plain = Spread(noisy, absent)
    assert plain.column is not None and plain.nbytes == noisy.nbytes
    np.testing.assert_array_equal(plain.at(np.arange(n)), noisy)
    # a column too short to code stays plain
    assert Spread(col[:M._FEW_FROM - 1], absent).column is not None


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([7, 4096, (1 << 22) - (1 << 12)]),
       st.sampled_from(["narrow", "wide", "negative"]), st.booleans())
def test_ops_by_group_then_time_is_the_lexsort(seed, block, times, through_ops):
    """The sort of ops by (group, start) that the scattering of annotations reads: one
    stable sort of a key holding both, made a block at a time (any block size), is
    ``np.lexsort``'s order (ties of both kept in op order), starts read through the
    ops' event indices or directly; and the lexsort itself where the two need more than
    62 bits."""
    from tb_perfdiag.analysis.device_time import annotations as A
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    group = rng.integers(0, int(rng.integers(1, 50)), n).astype(np.int64)
    span = {"narrow": 10**6, "wide": 2**60, "negative": 10**12}[times]
    lo = -span // 2 if times == "negative" else 0
    ts = rng.integers(lo, lo + span, 2 * n).astype(np.int64)
    ts[:20] = ts[0]                                     # equal starts
    ops = np.sort(rng.choice(2 * n, n, replace=False)) if through_ops else None
    starts = ts[ops] if through_ops else ts[:n]
    import unittest.mock
    with unittest.mock.patch.object(A, "_BLOCK", block):
        got = A._by_group_then_time(group, ts if through_ops else ts[:n], ops)
    assert got.tolist() == np.lexsort((starts, group)).tolist()
