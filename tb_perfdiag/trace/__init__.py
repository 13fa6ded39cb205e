"""Readers that turn profiler files into the one columnar ``Trace`` model."""
from __future__ import annotations

from contextlib import contextmanager

from .pages import heap_pad, recycled_pages
from ..progress import NULL
from ..storage import GZIP_MAGIC, OpenFile, is_blank, open_file
from . import kineto, xspace
from .model import Device, EventKind, LinkKind, Stat, Trace, TraceError, TrackKind

__all__ = ["load", "load_open", "Trace", "TraceError", "EventKind", "TrackKind", "LinkKind", "Device", "Stat",
           "detect_format", "PERFETTO_NOT_READ"]


PFTRACE = ".pftrace"
PERFETTO_NOT_READ = ("a Perfetto protobuf trace (what PyTorch's export_chrome_trace writes "
                     "to a .pftrace in recent versions): a format not read yet; save the "
                     "trace as Chrome JSON instead (prof.export_chrome_trace(\"trace.json\") "
                     "or tensorboard_trace_handler)")


def detect_format(path: str, head: bytes = b"") -> str | None:
    """"xspace", "kineto", "perfetto" (known, not read) or None, from the name, else
    the first decoded bytes ``head``.  A ``.pftrace`` holds Kineto JSON from some PyTorch
    versions and Perfetto protobuf from later ones: only its content tells."""
    p = str(path)
    if p.endswith(".xplane.pb"):
        return "xspace"
    if p.endswith((".json", ".json.gz")):
        return "kineto"
    if p.endswith((PFTRACE, PFTRACE + ".gz")):
        if not head:
            return None
        return "kineto" if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b"[") else "perfetto"
    if head:
        stripped = head.lstrip()
        if stripped[:1] in (b"{", b"["):
            return "kineto"
        if xspace.looks_like(head):
            return "xspace"
    return None


def load(path: str, progress=NULL, root: str | None = None,
         max_bytes: int | None = None) -> Trace:
    """Read one trace file (local path or fsspec URL); ``progress`` (a
    ``tb_perfdiag.progress.Progress``) is moved through the reading phases.  ``root``
    and ``max_bytes``: the guard's (``storage.open_file``): the logdir below which no
    link is followed, the budget in bytes on disk and decoded.

    Raises ``TraceError`` (with ``.path`` and ``.reason``) for anything that is not a
    readable profiler trace; no other exception escapes for bad input.
    """
    with open_file(path, root, max_bytes) as f:
        return load_open(f, progress)


def load_open(f: OpenFile, progress=NULL, expect: int | None = None) -> Trace:
    """``load`` of a file already opened through the guard (``storage.open_file``);
    ``expect``: see ``OpenFile.read`` (a Kineto trace is streamed: it needs none)."""
    with recycled_pages() as scope:
        trace = _load_open(f, progress, expect)
    trace.read_peak = scope.peak
    return trace


def _load_open(f: OpenFile, progress, expect: int | None) -> Trace:
    path = f.path
    fmt = detect_format(path) or _sniff(f)
    if fmt == "perfetto":
        raise TraceError(path, PERFETTO_NOT_READ)
    progress.format(fmt or "")
    progress.phase("reading")
    if fmt == "kineto":
        with _only_trace_errors(path):
            return _stream_kineto(f, progress)
    if fmt == "xspace" and f.head(64)[:2] != GZIP_MAGIC:
        trace = _load_mapped(f, progress)
        if trace is not None:
            return trace
    held = [f.read(progress, expect)]
    return _parse(path, held, progress)


def _sniff(f: OpenFile) -> str | None:
    """The format a file's first decoded bytes tell, for a name that does not."""
    chunks = f.chunks()
    try:
        head = next(chunks, b"")
    finally:
        chunks.close()
    return None if is_blank(head) else detect_format(f.path, head[:64])


# malloc's pad while a Kineto trace is streamed (``pages.heap_pad``): 64 MB left the 20 M-
# event trace's read with 120-130 K page faults instead of 230-300 K, and 1.6-2 s of
# system time instead of 2-3.6 s
STREAM_HEAP_PAD = 64 << 20


def _stream_kineto(f: OpenFile, progress) -> Trace:
    """A Kineto trace decoded and scanned chunk by chunk (``kineto.scan_file``)."""
    progress.phase("scanning", f"{f.size / 1e6:.0f} MB"
                   + (" of gzip, decompressed as it is read" if f.compressed else ""))
    # the gunzip's chunks and the walked stretches' columns come and go by the thousand
    with heap_pad(STREAM_HEAP_PAD):
        columns = kineto.scan_file(f, progress)
    progress.phase("building")
    return kineto.build(f.path, columns, progress)


def _load_mapped(f: OpenFile, progress) -> Trace | None:
    """An XSpace scanned where it lies: the file is mapped read-only and the native
    scanner reads the mapping, so its bytes are page cache, never a copy in this process
    (a 1.4 GB file costs the scan about 32 MB of resident pages).  None where the file
    cannot be mapped or the native scanner refuses it: the caller reads it instead (the
    reference scanner names a malformed file's problem precisely)."""
    scan = xspace.mapped_scanner()
    mapping = f.mapped() if scan is not None else None
    if mapping is None:
        return None
    path = f.path
    try:
        progress.format("xspace")
        progress.phase("scanning", f"{len(mapping) / 1e6:.0f} MB")
        with _only_trace_errors(path):
            try:
                columns = scan(mapping, progress)
            except ValueError:
                return None
            except OSError as e:      # the file shrank under the scan (SIGBUS, caught)
                raise TraceError(path, f"cannot read: {e}") from None
    finally:
        # the columns hold copies: nothing keeps a view (close() would raise BufferError)
        mapping.close()
    progress.phase("building")
    with _only_trace_errors(path):
        return xspace.build(path, columns, progress)


@contextmanager
def _only_trace_errors(path: str):
    """The readers' contract: only ``TraceError`` escapes for bad input."""
    try:
        yield
    except TraceError:
        raise
    except MemoryError:
        raise TraceError(path, "not enough memory to read this trace; see TB_PERFDIAG_MAX_FILE_MB "
                               "to refuse such files up front") from None
    except Exception as e:  # noqa: BLE001 - the documented contract: only TraceError escapes
        raise TraceError(path, f"unreadable trace ({type(e).__name__}: {e})") from None


def _parse(path: str, held: list, progress) -> Trace:
    """The ``Trace`` in a file's decoded bytes, handed over in a one-item list so that
    they are freed as soon as they are scanned (no caller's frame keeps them)."""
    raw = held.pop()
    if is_blank(raw):
        raise TraceError(path, "empty file: the profiler wrote nothing (or is still writing)")
    fmt = detect_format(path, raw[:64])
    if fmt == "perfetto":
        raise TraceError(path, PERFETTO_NOT_READ)
    reader = {"xspace": xspace, "kineto": kineto}.get(fmt)
    if reader is not None:
        with _only_trace_errors(path):
            progress.format(fmt)
            progress.phase("scanning", f"{len(raw) / 1e6:.0f} MB")
            columns = reader.scan(path, raw, progress)
            del raw           # the decoded file is the largest thing alive: free it first
            progress.phase("building")
            return reader.build(path, columns, progress)
    raise TraceError(path, "unknown format: expected an XSpace (.xplane.pb) or a PyTorch "
                           "profiler trace (.pt.trace.json[.gz])")
