"""Computed results keyed by file identity and options: a memory LRU in front of the
result store (``result_store``).  An entry of the store that does not decode is deleted
and its result computed again.

In memory: an LRU bounded by the bytes its values hold, measured by walking them
(numpy buffers, every list, tuple and string).  Two requests for the same key at once
compute it once (single flight).
"""
from __future__ import annotations

import hashlib
import logging
import os
import queue
import sys
import threading
from collections import OrderedDict

import numpy as np

from . import codec
from .analysis.result import Diagnosis
from .codec import CorruptEntry, Failure
from .render.pod import host_stats
# the store's names stay reachable here (``cache.ResultStore``, ``cache.encode_row``…)
from .result_store import (DEFAULT_STORE_MB, KINDS, LOW_WATER, STALE_TMP_S,  # noqa: F401
                           ResultStore, decode_row, default_cache_dir, default_location,
                           default_store_bytes, encode_row)

logger = logging.getLogger(__name__)

DEFAULT_MEMORY_BYTES = 256 * 1024 * 1024


def row_of(value) -> dict:
    """The summary row of a stored result (host and span are the caller's)."""
    if isinstance(value, Failure):
        return {"status": value.status, "error": value.reason}
    return host_stats(value)


# ------------------------------------------------------------------------------ memory
class DiagnosisCache:
    """Memory LRU + result store.  ``disk_dir``: "" the default store location, None no
    store, else a folder or URL."""

    def __init__(self, memory_bytes: int = DEFAULT_MEMORY_BYTES, disk_dir: str | None = "",
                 version: str = "", store_bytes: int | None = None):
        self.memory_bytes = memory_bytes
        loc = default_location() if disk_dir == "" else disk_dir
        self.store = ResultStore(loc, store_bytes) if loc else None
        self.disk_dir = self.store.location if self.store else None
        # a stored diagnosis is only as good as the code that made it: any change to the
        # package's source (or to the store format) is another key
        self.version = (version, code_fingerprint(), codec.FORMAT)
        self._mem: OrderedDict = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self._inflight: dict = {}
        self.computations = 0          # how many times compute() actually ran
        self._writer = None            # queue of (key, value) the background writer saves

    def digest(self, key) -> str:
        """The key's name in the store (and the Dask task's), the same in every process
        running this code."""
        return hashlib.sha256(repr((self.version, key)).encode()).hexdigest()[:32]

    _digest = digest

    def get_or_compute(self, key, compute, persist: bool = True, later: bool = False):
        """Value for ``key``; ``compute()`` runs at most once per key at a time.  With
        ``persist`` the store is asked first and the result written to it; with ``later``
        written by a background writer (``flush`` waits for it), so that a caller going
        through many files (a run's trend) does not wait for each write's fsync."""
        with self._lock:
            if key in self._mem:
                self._mem.move_to_end(key)
                return self._mem[key][0]
            ev = self._inflight.get(key)
            owner = ev is None
            if owner:
                ev = self._inflight[key] = [threading.Event(), None, None]
        if not owner:
            ev[0].wait()
            if ev[2] is not None:
                raise ev[2]
            return ev[1]
        try:
            value = self.load(key) if persist else None
            if value is None:
                self.computations += 1
                value = compute()
                if persist and later:
                    self._save_later(key, value)
                elif persist:
                    self.save(key, value)
            self._put(key, value)
            ev[1] = value
            return value
        except BaseException as e:
            ev[2] = e
            raise
        finally:
            ev[0].set()
            with self._lock:
                self._inflight.pop(key, None)

    def put(self, key, value) -> None:
        """Keep ``value`` in memory (only) under ``key``, within the budget."""
        self._put(key, value)

    def peek(self, key):
        """The value in memory, or None (no store read, no LRU move)."""
        with self._lock:
            hit = self._mem.get(key)
        return hit[0] if hit else None

    def has(self, key) -> bool:
        """Whether ``key`` is answered without computing (memory or store)."""
        with self._lock:
            if key in self._mem:
                return True
        return self.store is not None and self.store.has(self.digest(key))

    # ---- the store ----
    def load(self, key):
        """The stored result of ``key``, or None; a bad entry is dropped (and so
        computed again, never an error)."""
        if self.store is None:
            return None
        d = self.digest(key)
        blob = self.store.get(d)
        if blob is None:
            return None
        try:
            return codec.decode(blob, self.store.max_bytes * 16)
        except CorruptEntry as e:
            logger.warning("tb-perfdiag result store: entry %s dropped (%s)", d, e)
            self.store.drop(d)
            return None

    def save(self, key, value) -> None:
        if self.store is None or not isinstance(value, (Diagnosis, Failure)):
            return
        try:
            self.store.put(self.digest(key), codec.encode(value), row_of(value))
        except (TypeError, ValueError) as e:   # nothing may break the diagnosis
            logger.warning("tb-perfdiag result store: not stored (%s)", e)

    def _save_later(self, key, value) -> None:
        if self.store is None:
            return
        with self._lock:
            if self._writer is None:
                self._writer = queue.Queue()
                threading.Thread(target=self._write_queued, name="perfdiag-store-writer",
                                 daemon=True).start()
        self._writer.put((key, value))

    def _write_queued(self) -> None:
        while True:
            key, value = self._writer.get()
            try:
                self.save(key, value)
            except Exception as e:  # noqa: BLE001 - a write failing is a result not kept
                logger.warning("tb-perfdiag result store: not stored (%s)", e)
            finally:
                self._writer.task_done()

    def flush(self) -> None:
        """Waits until every write handed to the background writer is done."""
        if self._writer is not None:
            self._writer.join()

    def save_blob(self, key, blob: bytes, row: dict) -> None:
        """An encoded result computed elsewhere (a Dask worker that cannot reach the
        store): into the store, or without one into memory."""
        if self.store is not None:
            self.store.put(self.digest(key), blob, row)
            return
        try:
            self._put(key, codec.decode(blob))
        except CorruptEntry:
            pass

    def rows(self, keys) -> dict:
        """{key: summary row} for the keys answered without analysing: from the values
        in memory, else from the rows in the store (read in one batch)."""
        out, missing = {}, {}
        for k in keys:
            v = self.peek(k)
            if isinstance(v, (Diagnosis, Failure)):
                out[k] = row_of(v)
            else:
                missing[self.digest(k)] = k
        if missing and self.store is not None:
            for d, row in self.store.get_rows(missing).items():
                out[missing[d]] = row
        return out

    # ---- memory ----
    def _put(self, key, value) -> None:
        size = _size(value)
        with self._lock:
            if size > self.memory_bytes:
                return
            old = self._mem.pop(key, None)
            if old is not None:
                self._size -= old[1]
            self._mem[key] = (value, size)
            self._size += size
            while self._size > self.memory_bytes and self._mem:
                _, (_, s) = self._mem.popitem(last=False)
                self._size -= s


def resident_bytes(obj) -> int:
    """Bytes ``obj`` holds: every object reachable from it counted once (numpy buffers
    by their size, containers and strings by ``sys.getsizeof``)."""
    seen, total, stack = set(), 0, [obj]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, np.ndarray):
            total += sys.getsizeof(x)        # with its buffer when it owns one
            if x.base is not None:
                stack.append(x.base)
            continue
        total += sys.getsizeof(x)
        if isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, (list, tuple, set, frozenset)):
            stack.extend(x)
        elif hasattr(x, "__dict__") and not isinstance(x, type):
            stack.append(x.__dict__)
    return total


def _size(value) -> int:
    """Resident bytes of a cached value: typed results measured by walking them; other
    values (loaded traces) by their own ``nbytes()``."""
    if isinstance(value, (Diagnosis, Failure, dict, list, tuple)):
        return resident_bytes(value)
    if hasattr(value, "nbytes") and callable(value.nbytes):
        return int(value.nbytes())
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    return resident_bytes(value)


_FINGERPRINT = []


def code_fingerprint() -> str:
    """A hash of the package's Python sources (computed once per process)."""
    if not _FINGERPRINT:
        h = hashlib.sha256()
        root = os.path.dirname(os.path.abspath(__file__))
        for dirpath, dirs, files in sorted(os.walk(root)):
            dirs.sort()
            for f in sorted(files):
                if f.endswith(".py"):
                    with open(os.path.join(dirpath, f), "rb") as fh:
                        h.update(f.encode() + b"\0" + fh.read())
        _FINGERPRINT.append(h.hexdigest()[:16])
    return _FINGERPRINT[0]
