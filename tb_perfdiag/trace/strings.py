"""A trace's interned strings held as one UTF-8 buffer and its offsets.

A list of a million short Python strings took 207 MB of the process at 40 M events for
63 MB of string objects: they were made among the scan's temporaries of the same sizes,
and once those were freed the allocator's pools stayed a third full, through the read's
peak and the analysis'.  One buffer and an offset column hold the same strings in 25 MB.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

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
        # the common case first, with no call of its own: a non-negative index (the
        # analyses look names up by the thousand)
        if not isinstance(i, slice) and i >= 0:
            at = self._at
            try:
                return self._data[at[i]:at[i + 1]].decode("utf-8", "surrogatepass")
            except IndexError:
                raise IndexError("string index out of range") from None
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step == 1:
                return list(self._span(start, max(start, stop)))
            return self.take(range(start, stop, step))
        i = i.__index__() + len(self)
        if i < 0:
            raise IndexError("string index out of range")
        return self[i]

    def take(self, ids) -> list:
        """The strings of ``ids`` (non-negative ints, any iterable), as a list."""
        at, data = self._at, self._data
        return [data[at[i]:at[i + 1]].decode("utf-8", "surrogatepass") for i in ids]

    def __iter__(self):
        return self._span(0, len(self))

    def _span(self, a: int, b: int):
        """The strings [a, b) in order: a block of the buffer decoded at once and cut
        where that is a cut of the text (ASCII), a third of the time of a decode each."""
        off = self._off
        for x in range(a, b, _BLOCK):
            y = min(x + _BLOCK, b)
            lo, hi = int(off[x]), int(off[y])
            chunk = self._data[lo:hi]
            if chunk.isascii():
                text = chunk.decode("ascii")
                cuts = (off[x:y + 1] - lo).tolist()
                yield from (text[p:q] for p, q in zip(cuts[:-1], cuts[1:]))
            else:
                yield from self.take(range(x, y))

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

    def joined(self, stop: int | None = None) -> str | None:
        """The first ``stop`` strings (all by default) joined by newlines, or None where
        one of them holds a newline (a search of the text could then cross strings)."""
        n = len(self) if stop is None else max(0, min(stop, len(self)))
        raw = self._data[:int(self._off[n])]
        if b"\n" in raw:
            return None
        buf = np.insert(np.frombuffer(raw, np.uint8), self._off[1:n].astype(np.intp), 10)
        return buf.tobytes().decode("utf-8", "surrogatepass")

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

    def ids_containing(self, sub: str) -> list:
        """The indices of the strings that contain ``sub``, ascending: searches of the
        buffer, from each hit on to the next string (no string decoded)."""
        enc = sub.encode("utf-8", "surrogatepass")
        data, off, out = self._data, self._off, []
        if not enc:
            return list(range(len(self)))
        pos = data.find(enc)
        while pos >= 0:
            k = int(np.searchsorted(off, pos, side="right")) - 1
            if pos + len(enc) <= off[k + 1]:
                out.append(k)
                pos = data.find(enc, int(off[k + 1]))
            else:
                pos = data.find(enc, pos + 1)
        return out

    def ids_starting(self, prefix: str) -> np.ndarray:
        """The indices of the strings that start with ``prefix``: its bytes compared at
        every string's start at once."""
        enc = prefix.encode("utf-8", "surrogatepass")
        off = self._off.astype(np.int64)
        ok = np.diff(off) >= len(enc)
        if not self._data or not enc:
            return np.flatnonzero(ok)
        buf = np.frombuffer(self._data, np.uint8)
        last = buf.shape[0] - 1
        for j, byte in enumerate(enc):
            ok &= buf[np.minimum(off[:-1] + j, last)] == byte
        return np.flatnonzero(ok)

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


def take(strings, ids) -> list:
    """``[strings[i] for i in ids]`` for a ``Strings`` or a list."""
    if isinstance(strings, Strings):
        return strings.take(ids)
    return list(map(strings.__getitem__, ids))


def joined(strings, stop: int | None = None) -> str | None:
    """``Strings.joined`` for a ``Strings`` or a list: the first ``stop`` strings joined
    by newlines (one search of them with ``re.MULTILINE``), None where one holds one."""
    if isinstance(strings, Strings):
        return strings.joined(stop)
    part = strings[:stop]
    return None if any("\n" in x for x in part) else "\n".join(part)


def contains_text(strings, sub: str) -> bool:
    """Whether any of ``strings`` (a ``Strings`` or a list) contains ``sub``."""
    if isinstance(strings, Strings):
        return strings.contains_text(sub)
    if not sub or "\n" in sub:
        return any(sub in s for s in strings)
    return sub in "\n".join(strings)
