"""The **result store** holds, per (file identity, options), the typed diagnosis (``.diag``,
written by ``codec``: no pickle) and the host's summary row (``.row``, JSON) the pod
summary is made of, so a summary of 1,000 hosts reads 1,000 small rows and no trace.  It
is a local folder (default ``$TB_PERFDIAG_CACHE_DIR``, else ``~/.cache/tb-perfdiag``) or
any fsspec URL (``TB_PERFDIAG_RESULTS=gs://bucket/perfdiag``) that TensorBoards, the CLI
and Dask workers share.  It is bounded (``TB_PERFDIAG_RESULTS_MB``): past the bound the
least recently used diagnoses go first (local folders: reads refresh an entry; object
stores: by write time), rows only when rows alone exceed it.  A local folder is private
(0700, entries 0600; a folder someone else owns is not used) and written atomically (a
private temporary file, fsync, rename: a full disk or a killed process leaves the old
entry or none, never part of one).
"""
from __future__ import annotations

import json
import logging
import os
import stat
import threading
import time
import uuid

logger = logging.getLogger("tb_perfdiag.cache")


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
