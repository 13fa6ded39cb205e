"""Per-event columns the analysis holds, in less than a number per event.

``EventCodes``: a small code that is zero for nearly all events (the direction of the
copy a memcpy moves, or that a runtime call issued), kept as the events that have one.
``HostContext`` holds two such columns through the analysis and in the server's cache
after it: as an int8 per event they were 76 MB at 40 M events, where a few thousand
events have a code.

``FewValues``: a column of event indices with few distinct values, as a byte or two per
event into them.
"""
from __future__ import annotations

import numpy as np

from ...trace.model import codes_over_range


class EventCodes:
    __slots__ = ("n", "events", "codes")

    def __init__(self, n: int, events: np.ndarray, codes: np.ndarray):
        self.n = int(n)
        self.events = events        # ascending event indices whose code is not 0
        self.codes = codes          # int8, their codes

    @classmethod
    def of(cls, column: np.ndarray) -> "EventCodes":
        """From a dense column (an int8 per event)."""
        # the bytes read as bools: numpy finds nonzero bools 15x faster than int8s
        ev = np.flatnonzero(column.view(bool) if column.dtype.itemsize == 1 else column)
        return cls(column.shape[0], ev, column[ev].astype(np.int8))

    def __getitem__(self, idx) -> np.ndarray:
        """The codes of the events ``idx`` (an index array or one index), 0 where none."""
        idx = np.asarray(idx)
        if idx.ndim == 0:
            return self[idx[None]][0]
        if idx.size and (int(idx.min()) < -self.n or int(idx.max()) >= self.n):
            raise IndexError(f"event index out of range for {self.n} events")
        idx = np.where(idx < 0, idx + self.n, idx)
        out = np.zeros(idx.shape, np.int8)
        if self.events.size:
            k = np.minimum(np.searchsorted(self.events, idx), self.events.shape[0] - 1)
            hit = self.events[k] == idx
            out[hit] = self.codes[k[hit]]
        return out

    def with_code(self) -> np.ndarray:
        """The events whose code is not 0, ascending."""
        return self.events

    def dense(self) -> np.ndarray:
        out = np.zeros(self.n, np.int8)
        out[self.events] = self.codes
        return out

    @property
    def nbytes(self) -> int:
        return int(self.events.nbytes + self.codes.nbytes)


class FewValues:
    """A column of event indices that takes few distinct values (the user's dispatch each
    op traces back to: a hundred of them over 40 M events), held as a one- or two-byte
    code per event into those values: read by ``[]`` as the column would be.  At 40 M
    events 38 MB where the int32 column is 152."""

    __slots__ = ("codes", "values")

    def __init__(self, codes: np.ndarray, values: np.ndarray):
        self.codes = codes          # uint8 / uint16 per event, into ``values``
        self.values = values        # the distinct values, ascending

    @classmethod
    def of(cls, column: np.ndarray):
        """``column`` (event indices, −1 none) so held where it has at most 65 536
        distinct values, else ``column`` itself."""
        n = column.shape[0]
        if n == 0 or column.dtype.kind not in "iu":
            return column
        lo, hi = int(column.min()), int(column.max())
        if lo < -1 or hi >= n:
            return column
        got = codes_over_range(column, lo, hi)
        return column if got is None else cls(*got)

    def __getitem__(self, idx) -> np.ndarray:
        return self.values[self.codes[idx]]

    def __len__(self) -> int:
        return int(self.codes.shape[0])

    @property
    def shape(self) -> tuple:
        return self.codes.shape

    @property
    def dtype(self):
        return self.values.dtype

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes + self.values.nbytes)
