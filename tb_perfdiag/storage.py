"""Every byte read from a trace file, local or behind an fsspec URL (gs://, s3://, memory://).

One guarded path, ``open_file`` (``read_bytes`` on top of it), for the server, the CLI
and the API:

* Only regular files.  A local file is opened with O_NONBLOCK (a named pipe cannot hold
  the open) and checked with ``fstat`` on the open descriptor: a pipe, device, socket or
  folder is refused whatever a listing said about that name.
* No symbolic links under a ``root`` (the folder the listing found the file in, resolved:
  the logdir, or the folder a link in it leads to): every folder below the root is opened
  with O_NOFOLLOW relative to the one above it, then the file with O_NOFOLLOW, so a link
  swapped in after the listing — for the file or for any folder on the way — is refused
  instead of followed.  Without a root (a path a person typed) links are followed, to a
  regular file only.
* Sizes come from the open file, never from a listing: ``max_bytes`` caps the bytes read
  *and* the bytes out of gzip decompression, so a file grown since it was listed, or a
  small gzip that expands to gigabytes, is refused when the budget is reached instead of
  costing the memory.
"""
from __future__ import annotations

import errno
import hashlib
import os
import queue
try:
    import mmap
except ImportError:  # pragma: no cover - every CPython on a desktop or server has it
    mmap = None
import stat
import threading
import time
import zlib

try:  # ISA-L's inflate is about 1.6× zlib's; same format, same errors
    from isal import isal_zlib as _fast_zlib
except ImportError:  # pragma: no cover - optional speed-up
    _fast_zlib = zlib

from .errors import FileGone, StorageError, TraceError, TraceTooLarge
from .progress import NULL

GZIP_MAGIC = b"\x1f\x8b"
MAX_FILE_MB_ENV = "TB_PERFDIAG_MAX_FILE_MB"

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)
# opening each folder relative to the one above needs openat(); elsewhere (Windows) the
# whole path is opened at once and only the final fstat check holds
_CONFINED = bool(_O_NOFOLLOW and _O_DIRECTORY) and os.open in os.supports_dir_fd


class ListedPath(str):
    """A path found by listing a logdir, carrying the logdir's resolved ``root``: read
    through ``open_file`` it is confined below that root wherever it is handed (a pod's
    worker process included: it survives pickling), without every caller passing the
    root along."""

    root: str

    def __new__(cls, path: str, root: str):
        self = super().__new__(cls, path)
        self.root = root
        return self

    def __reduce__(self):
        return ListedPath, (str(self), self.root)


def max_file_bytes() -> int:
    """The size budget of one file, on disk and decompressed (``TB_PERFDIAG_MAX_FILE_MB``,
    default 4096 MB)."""
    try:
        mb = float(os.environ.get(MAX_FILE_MB_ENV, "4096"))
    except ValueError:
        mb = 4096.0
    return int(mb * 1e6) if mb > 0 and mb == mb and mb != float("inf") else int(4096e6)


def over_budget(path: str, what: str, cap: int) -> TraceTooLarge:
    return TraceTooLarge(path, f"{what} more than the {cap / 1e6:.0f} MB budget for one file; "
                               f"raise it with the {MAX_FILE_MB_ENV} environment variable")


class _ReadCounter:
    """Bytes this process read from trace files (on disk, before gunzip): the reads, the
    sniffs, the identity hashes and the mappings handed to a scanner; what a route's
    "reads the file once" is measured by (``/status``'s ``trace_bytes_read``)."""

    def __init__(self):
        self._lock, self.total = threading.Lock(), 0

    def add(self, n: int) -> None:
        with self._lock:
            self.total += int(n)


TRACE_BYTES_READ = _ReadCounter()


class Underestimated(Exception):
    """A gzip decompresses to more than the caller expected (and reserved memory for):
    its trailer lied, or it passes 4 GiB, where the trailer's figure wraps."""


def is_remote(path: str) -> bool:
    return "://" in str(path) and not str(path).startswith("file://")


def filesystem(path: str):
    """(fsspec filesystem, path inside it) for a URL, or (None, path) for local paths.
    A URL whose protocol has no installed backend raises ``StorageError`` (one line:
    which package to install)."""
    if not is_remote(path):
        p = str(path)
        return None, p[len("file://"):] if p.startswith("file://") else p
    try:
        import fsspec  # only needed for remote logdirs
        fs, inner = fsspec.core.url_to_fs(str(path))
    except ImportError as e:
        raise StorageError(f"cannot read {_protocol(path)}:// paths: {e}") from None
    except ValueError as e:      # "Protocol not known: …"
        raise StorageError(f"cannot read {_protocol(path)}:// paths: {e}") from None
    return fs, inner


def _protocol(path) -> str:
    return str(path).split("://", 1)[0]


# a chunk of a streamed read: bytes of the file per read, decoded bytes per chunk out
READ_BLOCK = 1 << 20
DECODED_CHUNK = 4 << 20


class OpenFile:
    """A trace file opened through the guard.  ``size``: bytes on disk, from the open
    file; ``decoded_size_hint()``: what it should decode to (a gzip trailer's figure,
    which a hostile file can fake: decompression is capped all the same); ``read()``:
    the decoded bytes within ``max_bytes``; ``chunks()``: the same bytes a chunk at a
    time, never whole."""

    local = False          # a file of this machine, opened through the guard (mappable)

    def __init__(self, path: str, f, size: int, max_bytes: int | None):
        self.path, self._f, self.size, self.max_bytes = str(path), f, int(size), max_bytes

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        try:
            self._f.close()
        except OSError:
            pass

    def _pread(self, n: int, at: int) -> bytes:
        try:
            self._f.seek(at)
            got = self._f.read(n)
        except (OSError, ValueError):
            return b""
        TRACE_BYTES_READ.add(len(got))
        return got

    def head(self, n: int) -> bytes:
        """The file's first ``n`` bytes (fewer when it is shorter)."""
        return self._pread(n, 0)

    def mapped(self):
        """The file's bytes mapped read-only (an ``mmap``), or None where it cannot be
        mapped (a remote file, an empty one, a system without ``mmap``).  A mapping's
        pages are the page cache's, shared and reclaimable, not a copy in this process.

        Same guard as ``read``: the descriptor is the one ``open_file`` checked (a
        regular file reached without links), and the budget holds on its size now.  The
        caller closes the mapping when done.  A page read past the end of a file that
        shrank since it was mapped raises SIGBUS, which ends the process: only
        ``native_scan.scan_xspace_mapped``, which turns that into an error, reads it
        (anything else reads the file's bytes with ``head``/``read``)."""
        if not self.local or mmap is None:
            return None
        try:
            fd = self._f.fileno()
            st = os.fstat(fd)
        except (OSError, ValueError):
            return None
        if not stat.S_ISREG(st.st_mode) or st.st_size <= 0:
            return None
        if self.max_bytes is not None and st.st_size > self.max_bytes:
            raise over_budget(self.path, "the file holds", self.max_bytes)
        try:
            m = mmap.mmap(fd, st.st_size, access=mmap.ACCESS_READ)
        except (OSError, ValueError, OverflowError):
            return None          # a file system that cannot map: read it instead
        if hasattr(m, "madvise") and hasattr(mmap, "MADV_SEQUENTIAL"):
            m.madvise(mmap.MADV_SEQUENTIAL)      # read ahead; pages behind are let go
        TRACE_BYTES_READ.add(st.st_size)         # the scanner reads every page once
        return m

    @property
    def compressed(self) -> bool:
        return self._pread(2, 0) == GZIP_MAGIC

    def decoded_size_hint(self) -> int:
        """Bytes after decompression as the file claims them (its size when not gzip)."""
        if not self.compressed or self.size < 18:
            return self.size
        isize = int.from_bytes(self._pread(4, self.size - 4).ljust(4, b"\0"), "little")
        # the trailer holds the size mod 4 GiB: a figure below the compressed size wrapped
        return isize if isize >= self.size else isize + (1 << 32)

    def read(self, progress=NULL, expect: int | None = None) -> bytes:
        """The whole file, gunzipped when it is gzip, within ``max_bytes``; with
        ``expect`` a gzip that decodes to more raises ``Underestimated`` once that much
        is out (the caller makes room and reads again)."""
        cap = self.max_bytes
        try:
            self._f.seek(0)
            want = self.size if cap is None else min(self.size, cap)
            raw = self._f.read(want + 1)         # one allocation of the file's size
            TRACE_BYTES_READ.add(len(raw))
            if len(raw) > want:                  # grown since it was opened
                if cap is not None and len(raw) > cap:
                    raise over_budget(self.path, "the file holds", cap)
                rest = self._f.read(-1 if cap is None else cap + 1 - len(raw))
                TRACE_BYTES_READ.add(len(rest))
                raw += rest
                if cap is not None and len(raw) > cap:
                    raise over_budget(self.path, "the file holds", cap)
        except OSError as e:
            raise TraceError(self.path, f"cannot read: {e.strerror or e}") from None
        if raw[:2] == GZIP_MAGIC:
            return _gunzip(self.path, raw, cap, progress, expect)
        if self.path.endswith(".gz"):
            raise TraceError(self.path, "named .gz but is not gzip-compressed")
        return raw


    def chunks(self, progress=NULL, block: int = READ_BLOCK, chunk: int = DECODED_CHUNK):
        """The decoded bytes as ``read`` gives them, in chunks of at most ``chunk``
        bytes (gunzipped as they come when the file is gzip): what is held is one read
        block and one chunk.  The budget counts decoded bytes as they come: past
        ``max_bytes`` it raises ``TraceTooLarge`` there, whatever follows; a broken or
        cut gzip raises ``TraceError`` where it is found.  ``progress`` follows the
        share of the file read."""
        cap = self.max_bytes
        path = self.path
        total = max(self.size, 1)
        seen = [0]
        progress.follow(lambda: min(seen[0] / total, 1.0))
        try:
            self._f.seek(0)
        except (OSError, ValueError) as e:
            raise TraceError(path, f"cannot read: {e}") from None

        def blocks():
            while True:
                try:
                    b = self._f.read(block)
                except OSError as e:
                    raise TraceError(path, f"cannot read: {e.strerror or e}") from None
                if not b:
                    return
                TRACE_BYTES_READ.add(len(b))
                seen[0] += len(b)
                if cap is not None and seen[0] > cap:    # grown since it was opened
                    raise over_budget(path, "the file holds", cap)
                yield b

        src = blocks()
        head = next(src, b"")
        if head[:2] != GZIP_MAGIC:
            if path.endswith(".gz"):
                raise TraceError(path, "named .gz but is not gzip-compressed")
            for b in _chained(head, src):
                for at in range(0, len(b), chunk):
                    yield b[at:at + chunk] if len(b) > chunk else b
            return
        d = _fast_zlib.decompressobj(16 + zlib.MAX_WBITS)
        out_total = 0
        for b in _chained(head, src):
            while True:
                try:
                    out = d.decompress(b, chunk)
                except (zlib.error, _fast_zlib.error, EOFError, ValueError) as e:
                    raise TraceError(path, f"corrupt gzip data: {e}") from None
                b = d.unconsumed_tail
                if out:
                    out_total += len(out)
                    if cap is not None and out_total > cap:
                        raise over_budget(path, "the file decompresses to", cap)
                    yield out
                if d.eof:
                    return          # one member, as ``read``: what follows it is not read
                if not b and len(out) < chunk:
                    break           # this block is all out: the next one
        if not d.eof:
            raise TraceError(path, "truncated gzip stream (file cut short or still being "
                                   "written)")


def read_ahead(chunks, depth: int = 1):
    """``chunks`` (a generator) run in a thread of its own, up to ``depth`` items ahead
    of the caller: gunzip on one core while the scanner reads the previous chunk on
    another (both let go of the GIL; on the 20 M-event trace the gunzip is a sixth of
    the read).  Items and the exception that ends the generator come in their order;
    closing this generator stops the thread (and closes ``chunks``) before it returns."""
    q: queue.Queue = queue.Queue(depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def run():
        try:
            for x in chunks:
                if not put((None, x)):
                    return
            put((None, _END))
        except BaseException as e:  # noqa: BLE001 - handed to the reader, raised there
            put((e, None))
        finally:
            chunks.close()

    worker = threading.Thread(target=run, name="tb-perfdiag-read-ahead", daemon=True)
    worker.start()
    try:
        while True:
            err, x = q.get()
            if err is not None:
                raise err
            if x is _END:
                return
            yield x
    finally:
        stop.set()
        worker.join()


_END = object()


def _chained(first: bytes, rest):
    if first:
        yield first
    yield from rest


def _gunzip(path: str, raw: bytes, cap: int | None, progress, expect: int | None) -> bytes:
    progress.phase("decompressing", f"{len(raw) / 1e6:.0f} MB of gzip")
    # one call with an output cap: ISA-L's decompressor grows its output in place (peak
    # about the output's size, measured) and stops at limit + 1 bytes
    limit = cap if expect is None or (cap is not None and cap <= expect) else expect
    d = _fast_zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(raw, 0 if limit is None else limit + 1)
    except (zlib.error, _fast_zlib.error, EOFError, ValueError) as e:
        raise TraceError(path, f"corrupt gzip data: {e}") from None
    if cap is not None and len(out) > cap:
        raise over_budget(path, "the file decompresses to", cap)
    if limit is not None and len(out) > limit:
        raise Underestimated(path)
    if not d.eof:
        raise TraceError(path, "truncated gzip stream (file cut short or still being written)")
    return out


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def _open_fd(path: str, root: str | None) -> int:
    flags = os.O_RDONLY | _O_NONBLOCK | _O_CLOEXEC | _O_BINARY
    if not root or not _CONFINED:
        return os.open(path, flags)
    rel = os.path.relpath(path, root)
    parts = rel.split(os.sep)
    if os.path.isabs(rel) or parts[0] == os.pardir or rel == os.curdir:
        raise TraceError(path, "outside the logdir: not read")
    dfd = os.open(root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    try:
        for part in parts[:-1]:
            nfd = os.open(part, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=dfd)
            os.close(dfd)
            dfd = nfd
        return os.open(parts[-1], flags | _O_NOFOLLOW, dir_fd=dfd)
    finally:
        os.close(dfd)


def open_file(path: str, root: str | None = None, max_bytes: int | None = None) -> OpenFile:
    """Open one trace file through the guard (see the module's text); ``root``: the
    resolved logdir the file was listed under, no link below it is followed (by default
    the root a ``ListedPath`` carries);
    ``max_bytes``: the budget, on disk and decoded.  Raises ``FileGone`` when it is not
    there, ``TraceTooLarge`` over the budget, ``TraceError`` for anything else that
    cannot be read, ``StorageError`` for a URL with no backend."""
    if root is None:
        root = getattr(path, "root", None)
    fs, inner = filesystem(path)
    if fs is not None:
        return _open_remote(str(path), fs, inner, max_bytes)
    try:
        fd = _open_fd(inner, root)
    except FileNotFoundError:
        raise FileGone(path, "file not found (deleted or renamed since it was listed)") from None
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EMLINK):
            raise TraceError(path, "the file is a symbolic link put in its place after "
                                   "the logdir was listed: not followed") from None
        if e.errno == errno.ENOTDIR and root:
            raise TraceError(path, "a folder on its path is no longer a folder (a link or "
                                   "a file put in its place after the logdir was listed): "
                                   "not followed") from None
        raise TraceError(path, f"cannot open: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TraceError(path, f"the file is {_kind(st.st_mode)}, not a regular file: "
                                   f"not read")
        if max_bytes is not None and st.st_size > max_bytes:
            raise over_budget(path, "the file holds", max_bytes)
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    opened = OpenFile(path, f, st.st_size, max_bytes)
    opened.local = True
    return opened


def _open_remote(path: str, fs, inner: str, max_bytes: int | None) -> OpenFile:
    try:
        info = fs.info(inner)
        if info.get("type", "file") != "file":
            raise TraceError(path, f"the path is a {info.get('type')}, not a file: not read")
        size = int(info.get("size") or 0)
        if max_bytes is not None and size > max_bytes:
            raise over_budget(path, "the file holds", max_bytes)
        f = fs.open(inner, "rb")
    except FileNotFoundError:
        raise FileGone(path, "file not found (deleted or renamed since it was listed)") from None
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
    return OpenFile(path, f, size, max_bytes)


def read_bytes(path: str, max_bytes: int | None = None, progress=NULL,
               root: str | None = None) -> bytes:
    """Whole file through the guard, gunzipped when it is gzip (``open_file``)."""
    with open_file(path, root, max_bytes) as f:
        return f.read(progress)


def is_blank(raw: bytes) -> bool:
    """True for an empty or whitespace-only buffer, without copying a large one."""
    if not raw:
        return True
    if raw[:256].strip():
        return False
    return not raw.strip()


# Bytes hashed at each end of a file for its identity: a rewrite that keeps size, mtime,
# inode and ctime (the same clock tick) but changes either end is still caught.
IDENTITY_EDGE = 64 * 1024
# What an object store says about an object's content, best first: GCS's generation
# changes on every overwrite; an ETag or MD5/CRC is a hash of the content.
_CONTENT_TOKENS = ("generation", "md5Hash", "crc32c", "ETag", "etag", "content_md5",
                   "VersionId", "version_id")


def _edges(f, size: int) -> str:
    """sha256 of the size and the first and last ``IDENTITY_EDGE`` bytes."""
    h = hashlib.sha256(str(size).encode())

    def take(b: bytes) -> None:
        TRACE_BYTES_READ.add(len(b))
        h.update(b)
    take(f.read(IDENTITY_EDGE))
    if size > 2 * IDENTITY_EDGE:
        f.seek(size - IDENTITY_EDGE)
        take(f.read(IDENTITY_EDGE))
    elif size > IDENTITY_EDGE:
        take(f.read())
    return h.hexdigest()[:32]


# A local file's ends' hash, by all that its stat says: every route asks for the identity
# of the file it answers about (two or four times a request), and 128 KiB a time was a
# third of the file read again over a page's first requests (a 3 MB trace read 1.57
# times for a run, its timeline, a gap and two overlays).  Kept only once the file's
# ctime is older than the coarsest ctime tick (FAT's 2 s): any later write then moves
# ctime, so the tuple it is keyed by changes and the ends are hashed again; a hash made
# within a tick of a write is made again at the next request.
_EDGES: dict = {}
_EDGES_MAX = 4096
CTIME_SETTLED_NS = 2_000_000_000


def _local_edges(f, st, key: tuple) -> str:
    got = _EDGES.get(key)
    if got is not None:
        return got
    got = _edges(f, st.st_size)
    if time.time_ns() - max(st.st_ctime_ns, st.st_mtime_ns) > CTIME_SETTLED_NS:
        if len(_EDGES) >= _EDGES_MAX:
            _EDGES.clear()
        _EDGES[key] = got
    return got


def file_identity(path: str) -> tuple:
    """What a computed result is keyed by: a tuple that changes whenever the file's
    content does.

    Local files: (path, size, mtime ns, device, inode, ctime ns, hash of the size and the
    first and last 64 KiB), read from the opened file itself.  Any write, truncation,
    ``utime`` or rename-over moves ctime (which no user can set) or the inode, so a file
    replaced by one of the same size and mtime is another identity; the only change that
    keeps the tuple is a write of the same length, inside one tick of the filesystem's
    ctime clock, that leaves both 64 KiB ends alone.  Opened through ``open_file``: a
    named pipe or a link below the logdir is refused (``TraceError``), never waited on.

    fsspec URLs: (url, size, mtime, the store's content token: GCS generation, MD5/CRC,
    ETag or version id); without any of these, the hash of both ends is read instead.
    Raises ``OSError`` when the file is gone, ``TraceError`` when it is not a file."""
    fs, inner = filesystem(path)
    if fs is None:
        try:
            f = open_file(path)        # the guarded open: regular files, no links below root
        except FileGone:
            raise FileNotFoundError(path) from None
        with f:
            st = os.fstat(f._f.fileno())
            key = (os.path.abspath(inner), st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino,
                   st.st_ctime_ns)
            edges = _local_edges(f._f, st, key)
        return key + (edges,)
    info = fs.info(inner)
    if info.get("type", "file") != "file":
        raise TraceError(path, "is a directory, not a file")
    size = int(info.get("size") or 0)
    mtime = info.get("mtime") or info.get("updated") or info.get("LastModified") or \
        info.get("created")
    token = next((f"{k}={info[k]}" for k in _CONTENT_TOKENS if info.get(k)), None)
    if token is None:
        with fs.open(inner, "rb") as f:
            token = "edges=" + _edges(f, size)
    return (str(path), size, str(mtime), token)
