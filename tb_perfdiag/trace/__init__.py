"""Readers that turn profiler files into the one columnar ``Trace`` model."""
from __future__ import annotations

from ..progress import NULL
from ..storage import is_blank, read_bytes
from . import kineto, xspace
from .model import Device, EventKind, LinkKind, Stat, Trace, TraceError, TrackKind

__all__ = ["load", "Trace", "TraceError", "EventKind", "TrackKind", "LinkKind", "Device", "Stat",
           "detect_format"]


def detect_format(path: str, head: bytes = b"") -> str | None:
    p = str(path)
    if p.endswith(".xplane.pb"):
        return "xspace"
    if p.endswith((".json", ".json.gz")):
        return "kineto"
    if head:
        stripped = head.lstrip()
        if stripped[:1] in (b"{", b"["):
            return "kineto"
        if xspace.looks_like(head):
            return "xspace"
    return None


def load(path: str, progress=NULL) -> Trace:
    """Read one trace file (local path or fsspec URL); ``progress`` (a
    ``tb_perfdiag.progress.Progress``) is moved through the reading phases.

    Raises ``TraceError`` (with ``.path`` and ``.reason``) for anything that is not a
    readable profiler trace; no other exception escapes for bad input.
    """
    progress.format(detect_format(path) or "")
    progress.phase("reading")
    raw = read_bytes(path, progress=progress)
    if is_blank(raw):
        raise TraceError(path, "empty file: the profiler wrote nothing (or is still writing)")
    fmt = detect_format(path, raw[:64])
    reader = {"xspace": xspace, "kineto": kineto}.get(fmt)
    try:
        if reader is not None:
            progress.format(fmt)
            progress.phase("scanning", f"{len(raw) / 1e6:.0f} MB")
            columns = reader.scan(path, raw, progress)
            del raw           # the decoded file is the largest thing alive: free it first
            progress.phase("building")
            return reader.build(path, columns, progress)
    except TraceError:
        raise
    except MemoryError:
        raise TraceError(path, "not enough memory to read this trace; see TB_PERFDIAG_MAX_FILE_MB "
                               "to refuse such files up front") from None
    except Exception as e:  # noqa: BLE001 - the documented contract: only TraceError escapes
        raise TraceError(path, f"unreadable trace ({type(e).__name__}: {e})") from None
    raise TraceError(path, "unknown format: expected an XSpace (.xplane.pb) or a PyTorch "
                           "profiler trace (.pt.trace.json[.gz])")
