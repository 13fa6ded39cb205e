"""A sorted column of times held as low parts and runs of high parts reads as the int64
column: by position and by search, in C and in numpy."""
from __future__ import annotations

import numpy as np
import pytest

from tb_perfdiag.analysis import sortedtimes as S
from tb_perfdiag.analysis.sortedtimes import SortedTimes


def _column(rng, n, v0, spread):
    a = np.sort(rng.integers(v0, v0 + spread, n))
    a[10:60] = a[10]                                  # repeated times
    return a.astype(np.int64)


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("v0, spread", [(0, 10**12), (-5 * 10**11, 10**13),
                                         (2**62, 10**12), (7, 2**31)])
def test_reads_as_the_int64_column(monkeypatch, native, v0, spread):
    """Searches (both sides; keys before, inside, on and past the times, at int64's
    ends), single positions (negative ones), index arrays and slices equal numpy's on
    the plain column; columns of one run and of many, starting below zero and near
    int64's top."""
    if not native:
        monkeypatch.setenv("TB_PERFDIAG_NO_NATIVE", "1")
    rng = np.random.default_rng(abs(v0) % 1000 + spread % 997)
    a = _column(rng, 200_000, v0, spread)
    st = SortedTimes.of(a, least=0)
    assert isinstance(st, SortedTimes) and len(st) == a.shape[0] and st.shape == a.shape
    assert st.nbytes < 0.6 * a.nbytes and st.dtype == np.int64
    lim = np.iinfo(np.int64)
    keys = np.concatenate([rng.integers(max(v0 - spread, lim.min), min(v0 + 2 * spread, lim.max),
                                        20_000), a[rng.integers(0, a.shape[0], 3000)],
                           a[rng.integers(0, a.shape[0], 3000)] + 1, [lim.min, lim.max, a[0],
                                                                      a[-1]]])
    for side in ("left", "right"):
        np.testing.assert_array_equal(st.search(keys, side), np.searchsorted(a, keys, side))
        assert st.search(int(a[500]), side) == np.searchsorted(a, a[500], side)
        np.testing.assert_array_equal(S.search(a, keys, side), np.searchsorted(a, keys, side))
    idx = rng.integers(-a.shape[0], a.shape[0], 5000)
    np.testing.assert_array_equal(st[idx], a[idx])
    np.testing.assert_array_equal(st[idx.astype(np.int32)], a[idx])
    assert st[0] == a[0] and st[-1] == a[-1] and st[12345] == a[12345]
    for sl in (slice(0, 100), slice(199_000, None), slice(5, 50_000, 7), slice(3, 3)):
        np.testing.assert_array_equal(st[sl], a[sl])
    with pytest.raises(IndexError):
        st[a.shape[0]]


def test_only_long_sorted_columns_of_long_runs_are_split():
    """Short columns, columns out of order, of another type, or with a run of high part
    per few values (times hours apart) stay as they are."""
    rng = np.random.default_rng(2)
    short = np.arange(10, dtype=np.int64)
    assert SortedTimes.of(short) is short                       # under _COMPACT_FROM
    unsorted = rng.integers(0, 10**12, 5000)
    assert SortedTimes.of(unsorted, least=0) is unsorted
    sparse = np.arange(5000, dtype=np.int64) * 2**33            # a run per value
    assert SortedTimes.of(sparse, least=0) is sparse
    floats = np.sort(rng.random(5000))
    assert SortedTimes.of(floats, least=0) is floats
    big = np.sort(rng.integers(0, 10**12, S._COMPACT_FROM))
    assert isinstance(SortedTimes.of(big), SortedTimes)
