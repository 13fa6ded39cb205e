"""The sparse per-event codes the host context keeps (``analysis.eventcodes``)."""
import numpy as np
import pytest

from tb_perfdiag.analysis.attribution.eventcodes import EventCodes


@pytest.mark.parametrize("density", [0.0, 0.01, 0.5, 1.0])
def test_reads_as_the_dense_column(density):
    """Any index array (negative ones as numpy reads them, repeats, out of order, empty),
    a scalar index, the events with a code and the dense column all read as the int8
    column it was made from; it holds only the events with a code."""
    rng = np.random.default_rng(int(density * 100))
    n = 1000
    col = np.where(rng.random(n) < density, rng.integers(1, 3, n), 0).astype(np.int8)
    ec = EventCodes.of(col)
    assert ec.events.size == np.count_nonzero(col)
    idx = rng.integers(-n, n, 500)
    for at in (idx, idx[::-1].copy(), np.zeros(0, np.int64), np.arange(n)):
        got = ec[at]
        assert got.dtype == np.int8
        np.testing.assert_array_equal(got, col[at])
    for i in (0, n - 1, -1, int(np.flatnonzero(col)[0]) if col.any() else 5):
        assert int(ec[i]) == int(col[i])
    np.testing.assert_array_equal(ec.with_code(), np.flatnonzero(col))
    np.testing.assert_array_equal(ec.dense(), col)
    assert ec.nbytes == ec.events.nbytes + ec.codes.nbytes
    np.testing.assert_array_equal(ec[np.array([3, 7])] > 0, col[[3, 7]] > 0)


def test_an_index_past_the_events_is_refused_as_numpy_does():
    ec = EventCodes.of(np.array([0, 1, 0, 2], np.int8))
    for bad in (4, -5, np.array([0, 9])):
        with pytest.raises(IndexError):
            ec[bad]


@pytest.mark.parametrize("n_values, code_type", [(1, np.uint8), (100, np.uint8),
                                                  (256, np.uint8), (257, np.uint16),
                                                  (65536, np.uint16)])
def test_few_values_read_as_the_column(n_values, code_type):
    """An event-index column of few values (−1 among them) held as codes reads back as
    the column itself: index arrays of either width, one index, negative ones, slices;
    its bytes are the codes' and the values'."""
    from tb_perfdiag.analysis.attribution.eventcodes import FewValues
    rng = np.random.default_rng(n_values)
    n = 200_000
    pool = rng.choice(n, n_values, replace=False).astype(np.int32)
    pool[0] = -1
    col = pool[rng.integers(0, n_values, n)]
    col[:n_values] = pool                       # every value occurs
    f = FewValues.of(col)
    assert isinstance(f, FewValues) and f.codes.dtype == code_type
    assert len(f) == n and f.shape == col.shape and f.dtype == col.dtype
    assert f.nbytes == f.codes.nbytes + f.values.nbytes < col.nbytes
    idx = rng.integers(0, n, 5000)
    for at in (idx, idx.astype(np.int32), np.sort(idx), -1 - idx[:10]):
        np.testing.assert_array_equal(f[at], col[at])
    assert f[7] == col[7] and f[-1] == col[-1]
    np.testing.assert_array_equal(f[10:500:3], col[10:500:3])
    np.testing.assert_array_equal(f[np.arange(n)], col)


def test_few_values_only_where_few_and_in_range():
    """More than 65 536 values, a value below −1 or past the events, or an empty or
    float column: the column is kept as it is."""
    from tb_perfdiag.analysis.attribution.eventcodes import FewValues
    many = np.arange(70_000, dtype=np.int32)[::-1].copy()
    assert FewValues.of(many) is many
    for bad in (np.array([0, -2, 1], np.int32), np.array([0, 3, 1], np.int32),
                np.zeros(0, np.int32), np.zeros(3)):
        assert FewValues.of(bad) is bad
    # no −1 at all, and only −1
    f = FewValues.of(np.array([2, 2, 0], np.int64))
    assert f[np.arange(3)].tolist() == [2, 2, 0] and f.dtype == np.int64
    assert FewValues.of(np.full(4, -1, np.int32))[np.arange(4)].tolist() == [-1] * 4
