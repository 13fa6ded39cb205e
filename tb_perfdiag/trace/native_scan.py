"""Thin wrapper over the optional C extension ``tb_perfdiag._native``.

``scan_xspace(buf)`` and ``scan_kineto(buf)`` return exactly what the reference
scanners ``xspace.scan_python`` and ``kineto.scan_python`` return (same keys, values
and dtypes), except that Kineto timestamps are always read exactly from the decimal
text (the reference does so only when they exceed 4e12 µs), and that a string stat's
text (``kineto.STRING_STAT_ARGS``) is the file's own less its blanks where the
reference writes orjson's: the same JSON value, and the same text but where the file
spells a string with escapes orjson does not use, or a number otherwise (``1E2``).
They raise ValueError for anything they do not accept; callers then fall back to the
reference scanner, which reports the problem precisely.

Both run without the GIL (other threads go on while a large file is decoded) and,
given ``progress`` (a ``tb_perfdiag.progress.Progress``), let it read how many bytes
they have scanned.

Importing this module raises ImportError when the extension is not built.
"""
from __future__ import annotations

import os
import re
from collections import deque

import numpy as np
import orjson

from .. import _native
from .chrome_meta import METADATA_KEYS, metadata_event
from .xspace_stats import STATS

_XSPACE_COLUMNS = {
    "ev_line": np.int32, "ev_meta": np.int64, "ev_offset_ps": np.int64,
    "ev_dur_ps": np.int64,
}
_KINETO_COLUMNS = {
    "name_ids": np.int32, "cat_ids": np.int32, "track_ids": np.int32,
    "ts_ps": np.int64, "dur_ps": np.int64,
}


def _counter(buf, progress):
    """A one-element int64 array the scanner publishes its position in, which the
    progress bar reads as the fraction of ``buf`` scanned."""
    if progress is None:
        return None
    done = np.zeros(1, np.int64)
    total = max(len(buf), 1)
    progress.follow(lambda: int(done[0]) / total)
    return done


# the guarded scan of a file mapping (POSIX; an extension built before it lacks it)
HAS_MAPPED = hasattr(_native, "scan_xspace_mapped") and os.name == "posix"


def scan_xspace(buf, progress=None, wanted=None) -> dict:
    """XSpace bytes → the columns of ``xspace.scan_python`` (``wanted``: the stats kept,
    by name; ``xspace_stats.STATS`` when None)."""
    return _xspace_columns(_native.scan_xspace(buf, _counter(buf, progress),
                                               _wanted(wanted)))


def scan_xspace_mapped(mapping, progress=None, wanted=None) -> dict:
    """``scan_xspace`` over a read-only file mapping (an ``mmap``): every string is
    copied out (the result holds no view of the mapping, which can be closed at once),
    the pages behind the scan are let go, and a file that shrinks under the scan raises
    OSError instead of ending the process with SIGBUS."""
    return _xspace_columns(_native.scan_xspace_mapped(mapping, _counter(mapping, progress),
                                                      _wanted(wanted)))


def _wanted(wanted) -> tuple:
    return STATS if wanted is None else tuple(wanted)


def _xspace_columns(raw: dict) -> dict:
    return {
        "planes": raw["planes"], "lines": raw["lines"],
        **{k: np.frombuffer(raw[k], dt) for k, dt in _XSPACE_COLUMNS.items()},
        "stats": {name: (np.frombuffer(ev, np.int32), np.frombuffer(val, np.int64),
                         np.frombuffer(kind, np.int8))
                  for name, (ev, val, kind) in raw["stats"].items()},
        "strings": raw["strings"],
        "hostnames": raw["hostnames"], "errors": raw["errors"], "warnings": raw["warnings"],
    }


def scan_kineto(buf, progress=None) -> dict:
    """Chrome-trace JSON bytes → the columns of ``kineto.scan_python``."""
    return _kineto_columns(_native.scan_kineto(buf, _counter(buf, progress)))


class KinetoStream:
    """``scan_kineto`` fed chunk by chunk: ``feed(chunk)`` as the text comes,
    ``finish()`` for the columns.  Only the unit being read (one event, one top-level
    member) outlives its chunk.  Raises ValueError as ``scan_kineto`` does."""

    def __init__(self):
        self._state = _native.kineto_stream()

    def feed(self, chunk) -> None:
        _native.kineto_feed(self._state, chunk, False)

    def feed_many(self, chunks, workers: int | None = None) -> None:
        """``feed`` of each chunk, with the text between two event starts (a ``{`` after
        a comma or opening a list) walked on ``workers`` threads ahead of the stream:
        each stretch is taken whole where the stream expects an event at its start with
        nothing pending, as if it had walked it (``kineto_absorb``), and fed as usual
        where not (the document's head and tail, a guess inside an event).  The answer
        is the one ``feed`` gives; the walk uses more cores."""
        from concurrent.futures import ThreadPoolExecutor   # only where a Kineto file is read
        workers = workers or _scan_workers()
        window = self.pending_chunks(workers)
        ahead: deque = deque()      # (walk of a stretch or None, the pieces of its text)
        spares: list = []           # parts absorbed, their contexts walked again
        carry = b""
        with ThreadPoolExecutor(workers, thread_name_prefix="tb-perfdiag-scan") as pool:
            try:
                for chunk in chunks:
                    # the seam (up to the chunk's first event start) is fed, the rest up
                    # to its last one walked ahead, in place
                    chunk = bytes(chunk)
                    first, last = _stretch(chunk)
                    view = memoryview(chunk)
                    if last <= first:
                        ahead.append((None, (carry, view[:last])))
                    else:
                        # one piece: the stream walks a unit cut by a chunk's end again
                        # only once it has twice its text, so a seam fed in two pieces
                        # would leave its event pending
                        ahead.append((None, (b"".join((carry, view[:first])),)))
                        spare = spares.pop() if spares else None
                        ahead.append((pool.submit(_native.kineto_part, chunk, first, last,
                                                  spare), (view[first:last],)))
                    carry = view[last:]
                    while ahead and (ahead[0][0] is None or len(ahead) > window):
                        self._take(*ahead.popleft(), spares)
                while ahead:
                    self._take(*ahead.popleft(), spares)
                if len(carry):
                    self.feed(carry)
            finally:
                for walk, _ in ahead:
                    if walk is not None:
                        walk.cancel()

    @staticmethod
    def pending_chunks(workers: int | None = None) -> int:
        """At most this many chunks have pieces pending in ``feed_many`` (seams to
        feed, stretches being walked) while it waits on the oldest walk: a reader may
        decode that far ahead without waiting on it (held to one chunk ahead, the
        gunzip stalled while the stretches were walked)."""
        return 2 * (workers or _scan_workers())

    def _take(self, walk, pieces, spares: list) -> None:
        part = walk.result() if walk is not None else None
        if part is not None and _native.kineto_absorb(self._state, part):
            spares.append(part)
            return
        for piece in pieces:
            if len(piece):
                self.feed(piece)

    def finish(self) -> dict:
        return _kineto_columns(_native.kineto_feed(self._state, b"", True))


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# an object that opens a list or follows a comma: where each event starts, whether the
# writer put it on a line of its own (libkineto: two spaces in), flush left or all on one
# line; a guess inside an event (a list of objects in its args) is walked again
_OPENS = re.compile(rb"[,\[][ \t\r\n]*\{")


def _stretch(chunk: bytes) -> tuple:
    """(first, last): the offsets of the first and the last ``{`` of ``chunk`` that opens
    a list or follows a comma; (0, 0) without one."""
    first = _first_open(chunk)
    if first is None:
        return 0, 0
    last = _last_open(chunk, first)
    if last is not None:
        return first, last
    span = 1 << 16
    while True:
        lo = max(first + 1, len(chunk) - span)
        found = None
        for found in _OPENS.finditer(chunk, lo):
            pass
        if found is not None:
            return first, found.end() - 1
        if lo == first + 1:
            return first, first
        span *= 4


_BLANKS = b" \t\r\n"
_OPENERS = b",["


def _opens(chunk: bytes, j: int, lo: int) -> bool:
    """Whether the ``{`` at ``j`` follows a ``,`` or ``[`` at ``lo`` or after it, with only
    blanks between.  The blanks are stripped a window at a time, each twice the last: a
    run of them costs about its length in C (walked byte by byte in Python, or by the
    pattern, a chunk of blanks took 26 ms: a 6 GB bomb of spaces 40 s)."""
    k, w = j, 64
    while k > lo:
        text = chunk[max(lo, k - w):k].rstrip(_BLANKS)
        if text:
            return text[-1] in _OPENERS
        k -= w
        w = min(2 * w, 1 << 20)
    return False


def _first_open(chunk: bytes, tries: int = 64):
    """The first ``{`` of ``chunk`` that an ``_OPENS`` match ends with, or None: found by
    ``find`` (memchr), braces that open no event (an args object) passed over; after
    ``tries`` of those the pattern reads on from the last one."""
    j = -1
    for _ in range(tries):
        j = chunk.find(b"{", j + 1)
        if j < 0:
            return None
        if _opens(chunk, j, 0):
            return j
    m = _OPENS.search(chunk, j + 1)
    return None if m is None else m.end() - 1


def _last_open(chunk: bytes, lo: int, tries: int = 64):
    """The last ``{`` of ``chunk`` that an ``_OPENS`` match ends with, ``lo`` the first
    (``_first_open``) or one after it, found
    from the end by ``rfind`` (the regex read 64 KB of each chunk byte by byte: a
    twentieth of the 20 M-event trace's scan, holding the GIL); None after ``tries``
    braces that open no event (a value's objects), for the regex to decide."""
    j = len(chunk)
    for _ in range(tries):
        j = chunk.rfind(b"{", lo, j)
        if j < 0:
            return None
        if j == lo or _opens(chunk, j, lo):
            return j
    return None


def _scan_workers() -> int:
    """Threads that walk stretches of a Kineto file: at least two (the stream waits
    on them), at most four."""
    return max(2, min(cores(), 4))


def walk_ahead() -> bool:
    """Whether ``feed_many`` pays: with a second core.  On this project's 2-core machine
    the 20 M-event trace's scan took 7 % less time from gzip (five alternated pairs,
    each faster; a tenth more CPU time) and 25-40 % less from plain JSON."""
    return cores() >= 2


def _kineto_columns(raw: dict) -> dict:
    process_name: dict = {}
    process_label: dict = {}
    thread_name: dict = {}
    # "M" events are few: the reference logic on each one, parsed by orjson
    try:
        for text in raw["m_events"]:
            metadata_event(orjson.loads(text), process_name, process_label, thread_name)
    except TypeError as e:   # an unhashable pid/tid: let the reference scanner decide
        raise ValueError(f"native Kineto scan: metadata event: {e}") from None
    stats = {name: (np.frombuffer(idx, np.int64), np.frombuffer(vals, np.int64))
             for name, (idx, vals) in raw["stats"].items()}
    string_stats = {name: (np.frombuffer(idx, np.int64), np.frombuffer(ids, np.int64))
                    for name, (idx, ids) in raw["string_stats"].items()}
    meta = raw["meta"]
    warnings = []
    if raw["bad"]:
        warnings.append(f"{raw['bad']} malformed events skipped (missing or non-numeric "
                        f"ts/dur/pid)")
    cols = {k: np.frombuffer(raw[k], dt) for k, dt in _KINETO_COLUMNS.items()}
    return {
        "n_raw": raw["n_raw"],
        "names": raw["names"], "name_ids": cols["name_ids"],
        "cats": raw["cats"], "cat_ids": cols["cat_ids"],
        "track_keys": raw["track_keys"], "track_ids": cols["track_ids"],
        "base_us": raw["base_us"], "ts_ps": cols["ts_ps"], "dur_ps": cols["dur_ps"],
        "stats": stats, "string_stats": string_stats, "stat_strings": raw["stat_strings"],
        "process_name": process_name, "process_label": process_label,
        "thread_name": thread_name,
        "metadata": {k: orjson.loads(meta[k]) for k in METADATA_KEYS if k in meta},
        "warnings": warnings,
    }
