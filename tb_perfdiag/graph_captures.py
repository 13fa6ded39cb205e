"""The traces recorded while a run's CUDA/HIP graphs were captured, found beside its
file and read through the same guard (GUIDE §4, "Graph replays").

vLLM and SGLang write them into ``capture_traces/`` beside the execution trace, with
``execution_details.json`` (``file``, ``batch_size``, ``mode``); a capture file may also
be named (``--capture PATH``, the route's ``capture``).  A capture file is just another
Kineto trace: it is read by the Kineto reader, under the same logdir root and byte
budget as the trace it belongs to, and only where that trace replays graphs.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

from .progress import NULL
from .storage import filesystem, read_bytes
from .trace import Trace, TraceError, load as read_trace

FOLDER = "capture_traces"
DETAILS = "execution_details.json"
_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")
# the details file is small; a larger one is no details file
_DETAILS_MAX = 1 << 20


@dataclass
class CaptureFile:
    trace: Trace
    path: str
    batch: int = -1             # the batch size the graphs were captured for (−1 unknown)
    mode: str = ""              # vLLM's FULL or PIECEWISE


def has_graph_launches(trace: Trace) -> bool:
    """Whether a Kineto trace launches CUDA/HIP graphs (names decided per distinct name)."""
    if trace.format != "kineto":
        return False
    from .analysis.efficiency.graphs import graph_launches
    return bool(graph_launches(trace).size)


def beside(path: str, root: str | None = None, max_bytes: int | None = None) -> list:
    """(capture file path, batch size, mode) of the ``capture_traces/`` folder beside
    ``path``: those ``execution_details.json`` lists, else every trace file in it."""
    folder = os.path.join(os.path.dirname(str(path)), FOLDER)
    fs, inner = filesystem(folder)
    try:
        names = sorted(os.path.basename(str(p).rstrip("/")) for p in
                       (os.listdir(inner) if fs is None else fs.ls(inner, detail=False)))
    except (OSError, ValueError):
        return []
    if DETAILS in names:
        try:
            rows = json.loads(read_bytes(os.path.join(folder, DETAILS), _DETAILS_MAX, root=root))
        except (TraceError, OSError, ValueError):
            rows = None
        if isinstance(rows, list):
            out = []
            for r in rows:
                f = r.get("file") if isinstance(r, dict) else None
                # a name in the folder, never a path out of it
                if isinstance(f, str) and f in names and "/" not in f and f not in (".", ".."):
                    b = r.get("batch_size")
                    out.append((os.path.join(folder, f), int(b) if isinstance(b, int) else -1,
                                str(r.get("mode") or "")))
            if out:
                return out
    return [(os.path.join(folder, n), -1, "") for n in names
            if n.endswith(_SUFFIXES) and n != DETAILS]


def beside_identity(path: str) -> tuple:
    """What the ``capture_traces/`` folder beside ``path`` holds, as (name, size, mtime,
    inode or the store's token) per entry, sorted; () without the folder.  Part of a
    result's key (``keyed``): a capture written, replaced or removed after a diagnosis
    is another diagnosis.  One listing, no file read."""
    folder = os.path.join(os.path.dirname(str(path)), FOLDER)
    try:
        fs, inner = filesystem(folder)
        if fs is None:
            with os.scandir(inner) as it:
                rows = []
                for e in it:
                    st = e.stat(follow_symlinks=False)
                    rows.append((e.name, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns))
        else:
            rows = [(os.path.basename(str(d.get("name", "")).rstrip("/")), d.get("size"),
                     str(d.get("mtime") or d.get("updated") or d.get("LastModified") or ""),
                     str(d.get("generation") or d.get("ETag") or d.get("etag") or ""))
                    for d in fs.ls(inner, detail=True)]
    except (OSError, ValueError, TraceError):
        return ()
    return tuple(sorted(rows))


def keyed(ident, path: str):
    """A file's identity as results are keyed by it: with what the capture folder beside
    it holds where it has one (the identity alone where not, as before)."""
    b = beside_identity(path)
    return (ident, ("beside",) + b) if b else ident


def attach(trace: Trace, path: str, root: str | None = None, max_bytes: int | None = None,
           named=None, progress=NULL) -> Trace:
    """``trace`` with ``trace.captures`` read: the files ``named`` (paths), else those
    beside ``path``; only where it replays graphs.  A capture file that cannot be read
    is a warning on the trace, never an error."""
    if not has_graph_launches(trace):
        return trace
    files = [(p, -1, "") for p in named] if named else beside(path, root, max_bytes)
    got = []
    for p, batch, mode in files:
        try:
            # read without moving the trace's own progress back to "reading"
            got.append(CaptureFile(read_trace(p, NULL, root=root, max_bytes=max_bytes),
                                   p, batch, mode))
        except TraceError as e:
            trace.warnings.append(f"graph capture {os.path.basename(p)} not read: {e.reason}")
    trace.captures = got
    return trace


def load(path: str, progress=NULL, root: str | None = None, max_bytes: int | None = None,
         captures=None) -> Trace:
    """``trace.load`` of ``path`` with its graph captures attached (``attach``)."""
    return attach(read_trace(path, progress, root=root, max_bytes=max_bytes), path, root,
                  max_bytes, captures, progress)


def choices(path: str, root: str, others=()) -> list:
    """The capture files a page or an assistant may name for ``path`` (the route's
    ``capture``): those beside it in ``capture_traces/``, then ``others`` (the run's other
    Kineto files), as '/'-separated paths relative to ``root`` (the logdir); one listing,
    no file read.  A file outside ``root`` is never offered."""
    out: list = []
    for p in [p for p, _, _ in beside(path, root)] + [o for o in others if o != path]:
        r = _relative(str(p), str(root))
        if r and r not in out:
            out.append(r)
    return out


def _relative(path: str, root: str) -> str | None:
    base = root.rstrip("/" + os.sep)
    if not path.startswith(base + "/") and not path.startswith(base + os.sep):
        return None
    rel = path[len(base) + 1:].replace(os.sep, "/")
    return rel if rel and ".." not in rel.split("/") else None
