"""Computed diagnoses keyed by file identity and options.

In memory: an LRU bounded by the total resident size of the cached values (a value's
``nbytes()`` when it has one: typed diagnoses and loaded traces).  On disk: pickled
typed diagnoses, gzipped, under the user's private cache folder (never inside the
logdir unless asked).  Two requests for the same key at once compute it once (single
flight).
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import pickle
import threading
from collections import OrderedDict

DEFAULT_MEMORY_BYTES = 256 * 1024 * 1024


def default_cache_dir() -> str:
    base = os.environ.get("TB_PERFDIAG_CACHE_DIR")
    if base:
        return base
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "tb-perfdiag")


class DiagnosisCache:
    def __init__(self, memory_bytes: int = DEFAULT_MEMORY_BYTES, disk_dir: str | None = "",
                 version: str = ""):
        self.memory_bytes = memory_bytes
        self.disk_dir = default_cache_dir() if disk_dir == "" else disk_dir
        # a pickled diagnosis is only as good as the code that made it: any change to the
        # package's source is another version
        self.version = (version, code_fingerprint())
        self._mem: OrderedDict = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self._inflight: dict = {}
        self.computations = 0          # how many times compute() actually ran

    def _digest(self, key) -> str:
        return hashlib.sha256(repr((self.version, key)).encode()).hexdigest()[:32]

    def get_or_compute(self, key, compute):
        """Value for ``key``; ``compute()`` runs at most once per key at a time."""
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
            value = self._load_disk(key)
            if value is None:
                self.computations += 1
                value = compute()
                self._store_disk(key, value)
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

    def has(self, key) -> bool:
        """Whether ``key`` is answered without computing (memory or disk)."""
        with self._lock:
            if key in self._mem:
                return True
        p = self._path(key)
        return bool(p) and os.path.exists(p)

    def _put(self, key, value) -> None:
        size = _size(value)
        with self._lock:
            if size > self.memory_bytes:
                return
            self._mem[key] = (value, size)
            self._size += size
            while self._size > self.memory_bytes and self._mem:
                _, (_, s) = self._mem.popitem(last=False)
                self._size -= s

    def _path(self, key) -> str | None:
        if not self.disk_dir:
            return None
        return os.path.join(self.disk_dir, self._digest(key) + ".pkl.gz")

    def _load_disk(self, key):
        p = self._path(key)
        if not p or not os.path.exists(p):
            return None
        if not _private(os.path.dirname(p)):
            return None   # a pickle someone else could have written is never loaded
        try:
            with gzip.open(p, "rb") as f:
                return pickle.load(f)
        except (OSError, ValueError, EOFError, pickle.UnpicklingError, AttributeError,
                ImportError, TypeError):
            return None   # an entry of another version or a torn write: computed again

    def _store_disk(self, key, value) -> None:
        p = self._path(key)
        if not p:
            return
        if not getattr(value, "persist", True):
            return
        try:
            # the cache holds pickles: only its owner may read or write it
            os.makedirs(os.path.dirname(p), mode=0o700, exist_ok=True)
            tmp = f"{p}.{os.getpid()}.{threading.get_ident()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb",
                                                          compresslevel=3) as f:
                pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, p)
        except (OSError, pickle.PicklingError):
            pass   # a read-only home must not break the diagnosis


def _size(value) -> int:
    """Resident bytes of a cached value, roughly."""
    if hasattr(value, "nbytes") and callable(value.nbytes):
        return int(value.nbytes())
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    return len(json.dumps(value, separators=(",", ":"), default=str))


def _private(folder: str) -> bool:
    """Whether only this user can write ``folder`` (POSIX; elsewhere: trusted)."""
    try:
        st = os.stat(folder)
    except OSError:
        return False
    if not hasattr(os, "getuid"):
        return True
    return st.st_uid == os.getuid() and not (st.st_mode & 0o022)


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
