"""Computed results keyed by file identity and options: a memory LRU in front of the
result store.

The **result store** holds, per (file identity, options), the typed diagnosis (``.diag``,
written by ``codec``: no pickle) and the host's summary row (``.row``, JSON) the pod
summary is made of, so a summary of 1,000 hosts reads 1,000 small rows and no trace.  It
is a local folder (default ``$TB_PERFDIAG_CACHE_DIR``, else ``~/.cache/tb-perfdiag``) or
any fsspec URL (``TB_PERFDIAG_RESULTS=gs://bucket/perfdiag``) that TensorBoards, the CLI
and Dask workers share.  It is bounded (``TB_PERFDIAG_RESULTS_MB``): past the bound the
least recently used diagnoses go first (local folders: reads refresh an entry; object
stores: by write time), rows only when rows alone exceed it.  A local folder is private
(0700, entries 0600; a folder someone else owns is not used) and written atomically (a
private temporary file, fsync, rename: a full disk or a killed process leaves the old
entry or none, never part of one).  An entry that does not decode is deleted and its
result computed again.

In memory: an LRU bounded by the bytes its values hold, measured by walking them
(numpy buffers, every list, tuple and string).  Two requests for the same key at once
compute it once (single flight).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import stat
import sys
import threading
import time
import uuid
from collections import OrderedDict

import numpy as np

from . import codec
from .analysis.result import Diagnosis
from .codec import CorruptEntry, Failure
from .render.pod import host_stats

logger = logging.getLogger(__name__)

DEFAULT_MEMORY_BYTES = 256 * 1024 * 1024
DEFAULT_STORE_MB = 2048.0
LOW_WATER = 0.9            # a trim leaves the store at this share of its bound
STALE_TMP_S = 15 * 60      # a temporary file this old belongs to a writer that died
KINDS = (".diag", ".row")


def default_location() -> str:
    """``TB_PERFDIAG_RESULTS`` (folder or URL), else ``TB_PERFDIAG_CACHE_DIR``, else the
    user's cache folder."""
    for var in ("TB_PERFDIAG_RESULTS", "TB_PERFDIAG_CACHE_DIR"):
        if os.environ.get(var):
            return os.environ[var]
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "tb-perfdiag")


def default_cache_dir() -> str:       # the name older callers use
    return default_location()


def default_store_bytes() -> int:
    try:
        mb = float(os.environ.get("TB_PERFDIAG_RESULTS_MB", DEFAULT_STORE_MB))
    except ValueError:
        mb = DEFAULT_STORE_MB
    return int(max(mb, 1.0) * 1e6)


# ---------------------------------------------------------------------------- backends
class _Folder:
    """A private local folder."""

    shared = False

    def __init__(self, path: str):
        self.root = os.path.abspath(os.path.expanduser(path))
        self._checked = None          # None: not yet; else why it cannot be used ("" ok)

    def usable(self) -> str:
        """'' when the folder is ours and private (made so if needed), else why not."""
        if self._checked is None:
            self._checked = self._make_private()
            if self._checked:
                logger.warning("tb-perfdiag result store %s not used: %s", self.root,
                               self._checked)
        return self._checked

    def _make_private(self) -> str:
        try:
            os.makedirs(os.path.dirname(self.root), exist_ok=True)
            try:
                os.mkdir(self.root, 0o700)
            except FileExistsError:
                pass
            st = os.lstat(self.root)
        except OSError as e:
            return f"cannot create it ({e.strerror or e})"
        if not stat.S_ISDIR(st.st_mode):
            return "not a folder (a link or a file)"
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            return "owned by another user"
        if st.st_mode & 0o077:
            try:
                os.chmod(self.root, 0o700)
            except OSError as e:
                return f"cannot make it private ({e.strerror or e})"
        return ""

    def _path(self, name: str) -> str:
        return os.path.join(self.root, name)

    def read(self, name: str, limit: int) -> bytes | None:
        if self.usable():
            return None
        try:
            fd = os.open(self._path(name), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                         | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
                return b""            # not an entry: dropped by the caller
            data = f.read(limit + 1)
            try:
                os.utime(fd)          # recently used: evicted last
            except OSError:
                pass
        return data

    def read_many(self, names, limit: int) -> dict:
        out = {}
        for n in names:
            b = self.read(n, limit)
            if b is not None:
                out[n] = b
        return out

    def exists(self, name: str) -> bool:
        return not self.usable() and os.path.isfile(self._path(name))

    def write(self, name: str, data: bytes) -> bool:
        if self.usable():
            return False
        tmp = self._path(f".{name}.{uuid.uuid4().hex}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                         | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError:
            return False
        try:
            with os.fdopen(fd, "wb") as f:
                view = memoryview(data)
                while view:
                    view = view[f.write(view):]
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._path(name))
            return True
        except OSError as e:
            logger.warning("tb-perfdiag result store: cannot write %s (%s)", name,
                           e.strerror or e)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False

    def delete(self, name: str) -> None:
        try:
            os.unlink(self._path(name))
        except OSError:
            pass

    def entries(self) -> list:
        """(name, bytes, last use) of every entry; stale temporary files are removed."""
        if self.usable():
            return []
        out, now = [], time.time()
        try:
            with os.scandir(self.root) as it:
                for e in it:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if not stat.S_ISREG(st.st_mode):
                        continue
                    if e.name.endswith(".tmp"):
                        if now - st.st_mtime > STALE_TMP_S:
                            self.delete(e.name)
                        continue
                    if e.name.endswith(".pkl.gz"):   # the old disk cache's pickles:
                        self.delete(e.name)          # never read, so never kept
                        continue
                    if e.name.endswith(KINDS):
                        out.append((e.name, st.st_size, st.st_mtime))
        except OSError:
            return []
        return out


class _Fsspec:
    """An fsspec URL (gs://, s3://, abfs://, memory://…): each object is written whole
    by one PUT, so readers see the old entry or the new one."""

    shared = True

    def __init__(self, url: str):
        import fsspec
        self.url = url
        self.fs, root = fsspec.core.url_to_fs(url)
        self.root = root.rstrip("/")

    def usable(self) -> str:
        return ""

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def read(self, name: str, limit: int) -> bytes | None:
        try:
            return self.fs.cat_file(self._path(name))
        except (FileNotFoundError, KeyError):
            return None
        except OSError as e:
            logger.warning("tb-perfdiag result store: cannot read %s (%s)", name, e)
            return None

    def read_many(self, names, limit: int) -> dict:
        names = list(names)
        if not names:
            return {}
        paths = {self._path(n): n for n in names}
        try:
            got = self.fs.cat(list(paths), on_error="omit")
        except (FileNotFoundError, OSError) as e:
            logger.warning("tb-perfdiag result store: cannot read rows (%s)", e)
            return {}
        out = {}
        for p, data in got.items():
            n = paths.get(p) or paths.get(p.split("://", 1)[-1])
            if n is not None and isinstance(data, bytes):
                out[n] = data
        return out

    def exists(self, name: str) -> bool:
        try:
            return bool(self.fs.exists(self._path(name)))
        except OSError:
            return False

    def write(self, name: str, data: bytes) -> bool:
        try:
            self.fs.pipe_file(self._path(name), data)
            return True
        except OSError as e:
            logger.warning("tb-perfdiag result store: cannot write %s (%s)", name, e)
            return False

    def delete(self, name: str) -> None:
        try:
            self.fs.rm_file(self._path(name))
        except (FileNotFoundError, OSError):
            pass

    def entries(self) -> list:
        try:
            self.fs.invalidate_cache(self.root)
            found = self.fs.find(self.root, detail=True)
        except (FileNotFoundError, OSError):
            return []
        out = []
        for p, info in found.items():
            name = p.rsplit("/", 1)[-1]
            if name.endswith(KINDS):
                out.append((name, int(info.get("size") or 0), _timestamp(info)))
        return out


def _timestamp(info: dict) -> float:
    for k in ("mtime", "LastModified", "updated", "last_modified", "created"):
        v = info.get(k)
        if v is None:
            continue
        if hasattr(v, "timestamp"):
            return float(v.timestamp())
        try:
            return float(v)
        except (TypeError, ValueError):
            try:
                import datetime
                return datetime.datetime.fromisoformat(str(v).replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return 0.0


# ------------------------------------------------------------------------------- store
class ResultStore:
    """Typed diagnoses and summary rows by key digest, in a folder or at an fsspec URL,
    bounded to ``max_bytes`` (``evict=False``: a writer that leaves the bound to others,
    as Dask workers do)."""

    def __init__(self, location: str, max_bytes: int | None = None, evict: bool = True):
        self.location = str(location)
        self.max_bytes = int(max_bytes if max_bytes is not None else default_store_bytes())
        self.evict = evict
        loc = self.location
        if loc.startswith("file://"):
            loc = loc[len("file://"):]
        self._backend = _Fsspec(loc) if "://" in loc else _Folder(loc)
        self._lock = threading.Lock()
        self._trim_lock = threading.Lock()
        self._known = None            # bytes in the store at the last listing
        self._written = 0             # bytes written since
        self.reads = self.writes = self.dropped = self.evicted = 0

    @property
    def shared(self) -> bool:
        """Whether processes on other machines can reach it (an fsspec URL)."""
        return self._backend.shared

    def usable(self) -> str:
        return self._backend.usable()

    # ---- entries ----
    def get(self, digest: str, kind: str = ".diag") -> bytes | None:
        data = self._backend.read(digest + kind, self.max_bytes)
        if data is not None:
            self.reads += 1
        return data

    def get_rows(self, digests) -> dict:
        """{digest: row} for the digests that have a valid row; bad rows are dropped."""
        names = {d + ".row": d for d in digests}
        out = {}
        for name, data in self._backend.read_many(list(names), 1 << 20).items():
            row = decode_row(data)
            if row is None:
                self.drop(names[name])
            else:
                out[names[name]] = row
        self.reads += len(out)
        return out

    def has(self, digest: str) -> bool:
        return self._backend.exists(digest + ".diag")

    def put(self, digest: str, blob: bytes, row: dict | None) -> bool:
        """The diagnosis and its row; False when the store did not take the diagnosis
        (a diagnosis over a tenth of the bound is not kept; its row still is)."""
        written, ok = 0, False
        if len(blob) <= self.max_bytes * (1 - LOW_WATER):
            ok = self._backend.write(digest + ".diag", blob)
            written += len(blob) if ok else 0
        if row is not None:
            r = encode_row(row)
            if self._backend.write(digest + ".row", r):
                written += len(r)
        if ok:
            self.writes += 1
        if written:
            self._account(written)
        return ok

    def put_row(self, digest: str, row: dict) -> bool:
        r = encode_row(row)
        ok = self._backend.write(digest + ".row", r)
        if ok:
            self._account(len(r))
        return ok

    def drop(self, digest: str) -> None:
        """Removes a bad entry (both kinds): it is computed again."""
        self.dropped += 1
        for k in KINDS:
            self._backend.delete(digest + k)

    # ---- the bound ----
    def _account(self, n: int) -> None:
        with self._lock:
            self._written += n
            due = self._known is None or self._known + self._written > self.max_bytes
        if due and self.evict:
            self.trim()

    def trim(self) -> int:
        """Evicts least recently used entries down to the low-water mark once over the
        bound (diagnoses before rows); returns the bytes in the store."""
        if not self._trim_lock.acquire(blocking=False):
            return self._known or 0    # another thread is at it
        try:
            entries = self._backend.entries()
            total = sum(e[1] for e in entries)
            if total > self.max_bytes:
                goal = self.max_bytes * LOW_WATER
                # diagnoses first, oldest first; rows only when they alone are too many
                order = sorted(entries, key=lambda e: (e[0].endswith(".row"), e[2]))
                for name, size, _ in order:
                    if total <= goal:
                        break
                    self._backend.delete(name)
                    total -= size
                    self.evicted += 1
            with self._lock:
                self._known, self._written = total, 0
            return total
        finally:
            self._trim_lock.release()

    def usage(self) -> dict:
        entries = self._backend.entries()
        return {"location": self.location, "bytes": sum(e[1] for e in entries),
                "entries": sum(e[0].endswith(".diag") for e in entries),
                "limit_bytes": self.max_bytes, "shared": self.shared,
                "unusable": self.usable() or None}


def encode_row(row: dict) -> bytes:
    return json.dumps(row, separators=(",", ":"), allow_nan=False).encode()


def decode_row(data: bytes):
    try:
        row = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(row, dict) or not isinstance(row.get("status"), int):
        return None
    return row


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
