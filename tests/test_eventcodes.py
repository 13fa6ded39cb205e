"""The sparse per-event codes the host context keeps (``analysis.eventcodes``)."""
import numpy as np
import pytest

from tb_perfdiag.analysis.eventcodes import EventCodes


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
