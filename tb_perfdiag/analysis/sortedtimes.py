"""A sorted column of picosecond times in four bytes a value where the times are dense.

A host thread's timeline holds a boundary per start and end of its events: 40 M of them
(305 MB as int64) for the 20 M-event launch loop of a 40 M-event trace, through the gap
loop and in the server's cache after it.  Over a span of seconds the boundaries come
microseconds apart, so each one is its low 32 bits (``low``) and the high part it shares
with its neighbours: one per run of equal high parts (``high``, where the run starts in
``at``), i.e. one per 4.3 ms of the thread.  Read as the int64 column was: by position
(``[]``) and by ``search`` (``np.searchsorted``).
"""
from __future__ import annotations

import numpy as np

from ..trace.extension import native_fn

_BLOCK = 1 << 20
# columns shorter than this stay plain int64: their bytes are few either way
_COMPACT_FROM = 1 << 20
# values per run of one high part, on average, below which the runs outweigh the saving
_RUN_FROM = 64


class SortedTimes:
    __slots__ = ("v0", "high", "at", "low", "n")

    def __init__(self, v0: int, high: np.ndarray, at: np.ndarray, low: np.ndarray):
        self.v0 = int(v0)          # the first time: every value is v0 + high << 32 + low
        self.high = high           # int64, rising: each run's high part
        self.at = at               # int64, len(high) + 1: where each run starts, then n
        self.low = low             # uint32 per value
        self.n = int(low.shape[0])

    @classmethod
    def of(cls, a: np.ndarray, least: int | None = None):
        """``a`` (int64, ascending) so held where it has at least ``least`` values
        (``_COMPACT_FROM``) and its runs of equal high parts are long (``_RUN_FROM``
        values each on average at the least), else ``a`` itself."""
        n = a.shape[0]
        if n < max(_COMPACT_FROM if least is None else least, 1) or a.dtype != np.int64:
            return a
        v0 = int(a[0])
        low = np.empty(n, np.uint32)
        highs, starts = [], []
        prev = None
        for i in range(0, n, _BLOCK):
            d = a[i:i + _BLOCK] - v0
            if int(d[0]) < 0 or (d[1:] < d[:-1]).any():
                return a                       # not sorted: no runs to speak of
            np.copyto(low[i:i + _BLOCK], d & 0xFFFFFFFF, casting="unsafe")
            h = d >> 32
            new = np.flatnonzero(h[1:] != h[:-1]) + 1
            if prev is None or int(h[0]) != prev:
                new = np.concatenate(([0], new))
            highs.append(h[new])
            starts.append(new + i)
            prev = int(h[-1])
            # a run per few values: the high parts would outweigh what the low ones save
            if sum(x.shape[0] for x in highs) * _RUN_FROM > i + d.shape[0]:
                return a
        high = np.concatenate(highs)
        at = np.append(np.concatenate(starts), n).astype(np.int64)
        return cls(v0, high.astype(np.int64), at, low)

    def __len__(self) -> int:
        return self.n

    @property
    def shape(self) -> tuple:
        return (self.n,)

    @property
    def dtype(self):
        return np.dtype(np.int64)

    @property
    def nbytes(self) -> int:
        return int(self.low.nbytes + self.high.nbytes + self.at.nbytes)

    def _values(self, k: np.ndarray) -> np.ndarray:
        run = np.searchsorted(self.at, k, side="right") - 1
        return self.v0 + (self.high[run] << 32) + self.low[k].astype(np.int64)

    def _range(self, lo: int, hi: int) -> np.ndarray:
        """Values lo..hi−1: the low parts, then each run's high part added in place."""
        out = self.low[lo:hi].astype(np.int64)
        r0 = int(np.searchsorted(self.at, lo, side="right")) - 1
        r1 = int(np.searchsorted(self.at, hi, side="left"))
        for r in range(max(r0, 0), r1):
            a, b = max(int(self.at[r]), lo), min(int(self.at[r + 1]), hi)
            out[a - lo:b - lo] += self.v0 + (int(self.high[r]) << 32)
        return out

    def __getitem__(self, k):
        if isinstance(k, slice):
            start, stop, step = k.indices(self.n)
            if step == 1:
                return self._range(start, max(stop, start))
            return self._values(np.arange(start, stop, step))
        if np.isscalar(k) or (isinstance(k, np.ndarray) and k.ndim == 0):
            i = int(k)
            if not -self.n <= i < self.n:
                raise IndexError(f"index {i} out of range for {self.n} times")
            return np.int64(self._values(np.array([i % self.n]))[0])
        k = np.asarray(k)
        if k.dtype == bool:
            return self._values(np.flatnonzero(k))
        if k.size and (int(k.min()) < -self.n or int(k.max()) >= self.n):
            raise IndexError(f"index out of range for {self.n} times")
        return self._values(np.where(k < 0, k + self.n, k).astype(np.intp, copy=False))

    def search(self, t, side: str = "left") -> np.ndarray:
        """``np.searchsorted(self, t, side)``: the run of each key's high part, then its
        low part among the run's."""
        t = np.asarray(t, np.int64)
        scalar = t.ndim == 0
        keys = np.ascontiguousarray(t.reshape(-1))
        fn = native_fn("split_search")
        if fn is not None:
            got = np.frombuffer(fn(self.high, self.at, self.low, self.v0, keys,
                                   side == "right"), np.int64)
        else:
            got = self._search_numpy(keys, side)
        return got[0] if scalar else got.reshape(t.shape)

    def _search_numpy(self, keys: np.ndarray, side: str) -> np.ndarray:
        out = np.zeros(keys.shape[0], np.int64)
        above = keys >= self.v0                  # below the first time: position 0
        # key − v0 in unsigned arithmetic: no overflow for keys far past the times
        d = keys[above].astype(np.uint64) - np.uint64(self.v0 & 0xFFFFFFFFFFFFFFFF)
        th = (d >> np.uint64(32)).astype(np.int64)
        tl = (d & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        run = np.searchsorted(self.high, th, side="left")
        exact = run < self.high.shape[0]
        exact[exact] = self.high[run[exact]] == th[exact]
        pos = self.at[run]                        # past every run of a lower high part
        for r in np.unique(run[exact]).tolist():
            sel = np.flatnonzero(exact & (run == r))
            lo, hi = int(self.at[r]), int(self.at[r + 1])
            pos[sel] = lo + np.searchsorted(self.low[lo:hi], tl[sel], side=side)
        out[above] = pos
        return out


def search(a, t, side: str = "left"):
    """``np.searchsorted(a, t, side)`` for a plain column or a ``SortedTimes``."""
    if isinstance(a, SortedTimes):
        return a.search(t, side)
    return np.searchsorted(a, t, side=side)
