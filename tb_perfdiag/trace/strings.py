"""A trace's interned strings held as one UTF-8 buffer and its offsets.

A list of a million short Python strings took 207 MB of the process at 40 M events for
63 MB of string objects: they were made among the scan's temporaries of the same sizes,
and once those were freed the allocator's pools stayed a third full, through the read's
peak and the analysis'.  One buffer and an offset column hold the same strings in 25 MB.
"""
from __future__ import annotations

import codecs
from collections.abc import Sequence

import numpy as np

_DECODE = codecs.utf_8_decode
# strings are encoded a block at a time: no bytes object per string held all at once
_BLOCK = 1 << 16


class Strings(Sequence):
    """An immutable sequence of ``str``, indexed like the list it replaces.  Lone
    surrogates (a JSON trace's ``\\ud800``) survive the round trip."""

    __slots__ = ("_data", "_off", "_at")

    def __init__(self, items=()):
        parts, lens = [], [np.zeros(1, np.int64)]
        block: list = []
        for s in items:
            block.append(s)
            if len(block) == _BLOCK:
                self._encode(block, parts, lens)
                block = []
        if block:
            self._encode(block, parts, lens)
        off = np.concatenate(lens)
        np.cumsum(off, out=off)
        if off[-1] < 2**32:
            off = off.astype(np.uint32)
        self._set(b"".join(parts), off)

    @staticmethod
    def _encode(block, parts, lens):
        enc = [s.encode("utf-8", "surrogatepass") for s in block]
        lens.append(np.fromiter(map(len, enc), np.int64, len(enc)))
        parts.append(b"".join(enc))

    def _set(self, data: bytes, off: np.ndarray) -> None:
        self._data = data
        self._off = off
        self._at = memoryview(off)      # Python ints per index, faster than numpy scalars

    def __len__(self) -> int:
        return self._off.shape[0] - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._one(j) for j in range(*i.indices(len(self)))]
        i = i.__index__()
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("string index out of range")
        return self._one(i)

    def _one(self, i: int) -> str:
        at = self._at
        return _DECODE(self._data[at[i]:at[i + 1]], "surrogatepass")[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self._one(i)

    def __contains__(self, s) -> bool:
        return isinstance(s, str) and self._find(s) >= 0

    def index(self, s, start: int = 0, stop: int | None = None) -> int:
        i = self._find(s, start, len(self) if stop is None else stop) \
            if isinstance(s, str) else -1
        if i < 0:
            raise ValueError(f"{s!r} is not in the strings")
        return i

    def _find(self, s: str, start: int = 0, stop: int | None = None) -> int:
        """The first index in [start, stop) holding ``s``, −1 if none: a search of the
        buffer, each hit kept only where it starts and ends on the string's bounds."""
        n = len(self)
        start, stop, _ = slice(start, stop).indices(n)
        enc = s.encode("utf-8", "surrogatepass")
        data, off = self._data, self._off
        if not enc:
            hit = np.flatnonzero(off[start + 1:stop + 1] == off[start:stop])
            return int(hit[0]) + start if hit.size else -1
        pos = data.find(enc, int(off[start]), int(off[stop]))
        while pos >= 0:
            k = int(np.searchsorted(off, pos, side="right")) - 1
            if off[k] == pos and off[k + 1] == pos + len(enc):
                return k
            pos = data.find(enc, pos + 1, int(off[stop]))
        return -1

    def contains_text(self, sub: str) -> bool:
        """Whether any string contains ``sub`` (no separator ever matches: a match
        across two strings is checked against their bounds)."""
        enc = sub.encode("utf-8", "surrogatepass")
        if not enc:
            return len(self) > 0
        pos = self._data.find(enc)
        while pos >= 0:
            k = int(np.searchsorted(self._off, pos, side="right")) - 1
            if pos + len(enc) <= self._off[k + 1]:
                return True
            pos = self._data.find(enc, pos + 1)
        return False

    def __eq__(self, other) -> bool:
        if isinstance(other, Strings):
            return self._data == other._data and np.array_equal(self._off, other._off)
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        head = ", ".join(repr(s) for s in self[:3])
        return f"Strings([{head}{', …' if len(self) > 3 else ''}], n={len(self)})"

    def __sizeof__(self) -> int:
        # with its buffers: a cache sizes its values by ``sys.getsizeof`` of each object
        return object.__sizeof__(self) + len(self._data) + self._off.nbytes

    def __reduce__(self):
        return (_rebuilt, (self._data, self._off))

    def nbytes(self) -> int:
        return len(self._data) + self._off.nbytes


def _rebuilt(data: bytes, off: np.ndarray) -> Strings:
    s = Strings.__new__(Strings)
    s._set(data, off)
    return s


def strings_nbytes(strings) -> int:
    """Bytes ``strings`` (a ``Strings`` or a list) hold, roughly for a list."""
    if isinstance(strings, Strings):
        return strings.nbytes()
    return sum(len(x) + 50 for x in strings)


def contains_text(strings, sub: str) -> bool:
    """Whether any of ``strings`` (a ``Strings`` or a list) contains ``sub``."""
    if isinstance(strings, Strings):
        return strings.contains_text(sub)
    if not sub or "\n" in sub:
        return any(sub in s for s in strings)
    return sub in "\n".join(strings)
