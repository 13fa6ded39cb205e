"""The plugin's memory inside TensorBoard's process: one budget shared by the work under
way and by what is kept between requests.

TensorBoard answers every request in a thread of one process: memory one request takes,
another cannot have, and twenty requests that each load, analyse or render a large trace
at once take the whole server down.  So:

* ``Budget.admit`` lets work in (reading a trace, analysing it, building a large answer)
  by its estimated peak in bytes, and a bounded number at once in each lane (reads and
  analyses; answers): they hold Python's lock much of the time, and every thread that
  wants it makes every other one — TensorBoard's own requests included — wait longer.  Work
  waits — its progress says so — while what is under way plus what is kept would pass
  the budget, once the kept values nobody is using were dropped, least recently used
  first, to make room.  Work alone is always let in (one file is bounded by the file
  budget instead), so nothing waits for ever; a wait longer than ``queue_s`` ends in
  ``Unavailable`` (503: try again).
* ``Store`` keeps values (loaded traces, built answers) by key within a capacity, at
  their measured size (``measure``), never dropping one in use; a value many ask for at
  once is made once (single flight).  Its bytes count against the budget.
"""
from __future__ import annotations

import sys
import threading
import time
import types
from collections import OrderedDict
from contextlib import contextmanager

import numpy as np

from .errors import Unavailable
from .progress import NULL
from .trace.strings import Strings

MB = 1_000_000

_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
         types.MethodType)


def measure(value) -> int:
    """Bytes ``value`` holds, measured: every numpy buffer it reaches (through object
    attributes, dicts, lists and tuples) counted once at its base array's size, plus
    the Python objects themselves (``sys.getsizeof``: strings, containers)."""
    seen: set = set()
    buffers: set = set()
    total = 0
    stack = [value]
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, _SKIP):
            continue
        seen.add(id(o))
        if isinstance(o, np.ndarray):
            base = o
            while isinstance(base.base, np.ndarray):
                base = base.base
            if id(base) not in buffers:
                buffers.add(id(base))
                own = base.base     # a buffer numpy did not allocate (bytes, mmap…)
                total += base.nbytes if own is None else _buffer_size(own, base.nbytes)
            if o.dtype == object:
                stack.extend(o.ravel().tolist())
            continue
        total += sys.getsizeof(o)
        if isinstance(o, (str, bytes, bytearray, int, float, complex, bool, Strings)) \
                or o is None:      # a ``Strings``' size has its buffers
            continue
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
        else:
            d = getattr(o, "__dict__", None)
            if d is not None:
                stack.append(d)
            for cls in type(o).__mro__:
                for name in getattr(cls, "__slots__", ()):
                    if hasattr(o, name):
                        stack.append(getattr(o, name))
    return int(total)


def _buffer_size(obj, fallback: int) -> int:
    try:
        return memoryview(obj).nbytes
    except TypeError:
        return fallback


class Reservation:
    """Bytes admitted for one piece of work; ``resize`` corrects the estimate once the
    real figure is known (it does not wait: the work is already in)."""

    def __init__(self, budget, nbytes: int, lane: str):
        self._budget, self.nbytes, self.lane = budget, int(nbytes), lane

    def resize(self, nbytes: int) -> None:
        self._budget._resize(self, int(nbytes))


class _Waiter:
    __slots__ = ("lane", "nbytes", "since", "short", "granted", "wake")

    def __init__(self, lane: str, nbytes: int, since: float, lock):
        self.lane, self.nbytes, self.since = lane, nbytes, since
        self.short = None            # what it last lacked: "lane" or "memory"
        self.granted = False
        self.wake = threading.Condition(lock)   # its own: a release wakes only who it lets in


class Budget:
    """Admission of work by memory and lane.  A waiting request sleeps on a condition of
    its own and is let in by whoever frees what it needs (a release, a value dropped),
    oldest first — no thread wakes just to find it still does not fit, so a hundred
    waiting requests cost nothing while they wait."""

    # work that waited this long goes before later arrivals that would compete with it
    # (for its lane, or for memory), so large work is not starved by a stream of small
    FAIR_S = 2.0

    def __init__(self, total_bytes: int, lanes: dict | None = None, queue_s: float = 120.0):
        self.total = int(total_bytes)
        # at most this many at once per lane
        self.lanes = {k: max(1, int(v)) for k, v in (lanes or {"work": 2, "answer": 2}).items()}
        self.queue_s = float(queue_s)
        self._lock = threading.Lock()
        self._stores: list = []
        self._reserved = 0           # bytes admitted for work under way
        self._running = dict.fromkeys(self.lanes, 0)
        self._waiters: list = []     # oldest first
        # counters for /status and the tests
        self.admitted = 0
        self.waited = 0              # admissions that had to wait
        self.refused = 0             # waits that ran out (503)
        self.peak_accounted = 0      # most of (reserved + kept) seen

    def add_store(self, store, patience_s: float = 0.0) -> None:
        """Count ``store``'s bytes as kept; its unused values are dropped for waiting
        work that has waited ``patience_s`` (values dear to make: a loaded trace is not
        dropped for work that ends in a moment).  Cheaper stores first."""
        with self._lock:
            self._stores.append((patience_s, store))
            self._stores.sort(key=lambda ps: ps[0])
        store._on_free = self.wake

    def kept(self) -> int:
        return sum(s.size for _, s in self._stores)

    def wake(self) -> None:
        """Something was freed: let in the waiting work that fits now."""
        with self._lock:
            self._grant_locked()

    def _fits_locked(self, w: _Waiter, now: float) -> bool:
        for o in self._waiters:
            if o is w:
                break
            if now - o.since >= self.FAIR_S and (o.short == "memory" or
                                                 (o.short == "lane" and o.lane == w.lane)):
                return False                # an older one goes first
        if self._running[w.lane] >= self.lanes[w.lane]:
            w.short = "lane"
            return False
        alone = self._reserved == 0
        over = self._reserved + w.nbytes + self.kept() - self.total
        for patience, s in self._stores:    # drop kept values nobody is using
            if over <= 0 or (now - w.since < patience and not alone):
                break
            over -= s.evict(over)
        if over <= 0 or alone:              # alone: always let in
            return True
        w.short = "memory"
        return False

    def _take_locked(self, w: _Waiter) -> None:
        w.granted = True
        self._reserved += w.nbytes
        self._running[w.lane] += 1
        self.admitted += 1
        self.peak_accounted = max(self.peak_accounted, self._reserved + self.kept())

    def _grant_locked(self) -> None:
        now = time.monotonic()
        for w in list(self._waiters):
            if self._fits_locked(w, now):
                self._waiters.remove(w)
                self._take_locked(w)
                w.wake.notify()

    def _timeout(self, w: _Waiter, now: float, deadline: float) -> float:
        """How long ``w`` sleeps unless let in: until its deadline, or until it has
        waited long enough that kept values may be dropped for it."""
        t = deadline - now
        for patience, _ in self._stores:
            if w.short == "memory" and now - w.since < patience:
                t = min(t, w.since + patience - now + 0.01)
        return max(t, 0.0)

    @contextmanager
    def admit(self, nbytes: int, lane: str = "answer", what: str = "", progress=NULL):
        """Hold ``nbytes`` and a place in ``lane`` while the block runs."""
        now = time.monotonic()
        deadline = now + self.queue_s
        r = Reservation(self, max(0, int(nbytes)), lane)
        w = _Waiter(lane, r.nbytes, now, self._lock)
        with self._lock:
            if self._fits_locked(w, now):
                self._take_locked(w)
            else:
                self.waited += 1
                self._waiters.append(w)
                try:
                    while not w.granted:
                        now = time.monotonic()
                        if now >= deadline:
                            self.refused += 1
                            raise Unavailable(
                                f"the server is busy ({self._running['work']} analyses under "
                                f"way, {len(self._waiters) - 1} more waiting, "
                                f"{(self._reserved + self.kept()) / MB:.0f} of "
                                f"{self.total / MB:.0f} MB of TB_PERFDIAG_MEMORY_MB in use); "
                                f"try again in a moment", retry_after_s=5,
                                **({"waiting_for": what} if what else {}))
                        progress.phase("waiting", f"{self._running['work']} analyses under "
                                       f"way, {(self._reserved + self.kept()) / MB:.0f} of "
                                       f"{self.total / MB:.0f} MB in use")
                        w.wake.wait(self._timeout(w, now, deadline))
                        if not w.granted:
                            self._grant_locked()     # time passed: patience, deadline
                finally:
                    if not w.granted:
                        self._waiters.remove(w)
                        self._grant_locked()         # those behind it may go now
        try:
            yield r
        finally:
            with self._lock:
                self._reserved -= r.nbytes
                self._running[lane] -= 1
                self._grant_locked()

    def _resize(self, r: Reservation, nbytes: int) -> None:
        with self._lock:
            self._reserved += nbytes - r.nbytes
            r.nbytes = nbytes
            self.peak_accounted = max(self.peak_accounted, self._reserved + self.kept())

    def snapshot(self) -> dict:
        with self._lock:
            return {"budget_bytes": self.total, "reserved_bytes": self._reserved,
                    "kept_bytes": self.kept(), "lanes": dict(self.lanes),
                    "running": dict(self._running),
                    "waiting": len(self._waiters), "admitted": self.admitted,
                    "waited": self.waited, "refused": self.refused,
                    "peak_accounted_bytes": self.peak_accounted}


class _Entry:
    __slots__ = ("value", "size", "pins")

    def __init__(self, value, size: int, pins: int):
        self.value, self.size, self.pins = value, size, pins


class _Flight:
    __slots__ = ("done", "entry", "error", "waiters")

    def __init__(self):
        self.done = threading.Event()
        self.entry = None
        self.error = None
        self.waiters = 0


class Store:
    """Values by key, kept within ``capacity`` bytes of their measured size (values in
    use may pass it until they are released); least recently used out first.  With
    ``keep_newest`` the most recently used value stays even when it alone passes the
    capacity (a trace too large to keep beside others is still not read again for each
    request on it); the budget drops it when work needs the room."""

    def __init__(self, capacity: int, sizer=measure, keep_newest: bool = False):
        self.capacity = int(capacity)
        self.keep_newest = keep_newest
        self._sizer = sizer
        self._lock = threading.Lock()
        self._entries: OrderedDict = OrderedDict()
        self._flights: dict = {}
        self.size = 0
        self.made = 0                # values made (not found)
        self._on_free = None

    def __len__(self) -> int:
        return len(self._entries)

    @contextmanager
    def use(self, key, make):
        """The value for ``key``, made by ``make()`` once however many ask at once, and
        kept from being dropped while the block runs."""
        entry = self._pin(key, make)
        try:
            yield entry.value
        finally:
            self._unpin(entry)

    def get_or_make(self, key, make):
        """The value for ``key`` (made once), not held after the call."""
        with self.use(key, make) as value:
            return value

    def _pin(self, key, make) -> _Entry:
        with self._lock:
            e = self._entries.get(key)
            if e is not None:
                e.pins += 1
                self._entries.move_to_end(key)
                return e
            flight = self._flights.get(key)
            owner = flight is None
            if owner:
                flight = self._flights[key] = _Flight()
            else:
                flight.waiters += 1
        if not owner:
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return flight.entry
        try:
            value = make()
            size = self._sizer(value)
        except BaseException as err:
            with self._lock:
                del self._flights[key]
                flight.error = err
            flight.done.set()
            raise
        with self._lock:
            del self._flights[key]
            e = _Entry(value, size, 1 + flight.waiters)
            self._entries[key] = e
            self.size += size
            self.made += 1
            flight.entry = e
        flight.done.set()
        self._trim()
        return e

    def _unpin(self, entry: _Entry) -> None:
        with self._lock:
            entry.pins -= 1
        self._trim()

    def remeasure(self, key) -> None:
        """Measure the value for ``key`` again (it grew)."""
        with self._lock:
            e = self._entries.get(key)
            value = e.value if e is not None else None
        if value is None:
            return
        size = self._sizer(value)
        with self._lock:
            if self._entries.get(key) is e:
                self.size += size - e.size
                e.size = size
        self._trim()

    def evict(self, nbytes: int, keep_newest: bool = False) -> int:
        """Drop unused values, least recently used first, until ``nbytes`` are freed or
        none is left (but the newest, with ``keep_newest``); the bytes freed."""
        freed = 0
        with self._lock:
            keys = list(self._entries)
            for key in keys[:-1] if keep_newest else keys:
                if freed >= nbytes:
                    break
                e = self._entries[key]
                if e.pins == 0:
                    del self._entries[key]
                    self.size -= e.size
                    freed += e.size
        return freed

    def _trim(self) -> None:
        over = self.size - self.capacity
        freed = self.evict(over, self.keep_newest) if over > 0 else 0
        if self._on_free is not None:
            self._on_free()     # a release or a drop can let waiting work in
        return freed

    def snapshot(self) -> dict:
        with self._lock:
            return {"entries": len(self._entries), "bytes": self.size,
                    "capacity_bytes": self.capacity, "made": self.made,
                    "in_use": sum(e.pins > 0 for e in self._entries.values())}
