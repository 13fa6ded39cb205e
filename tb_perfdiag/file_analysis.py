"""One trace file read and analysed in one go (the API, the CLI, a Dask task).

The read and the analysis share one ``recycled_pages`` scope: the blocks the read
frees at its end (the scan's columns, the build's temporaries: 0.7 GB at 20 M Kineto
events) serve the analysis' arrays instead of being unmapped between the two and
faulted in anew.  The blocks kept never pass the read's own peak, the most the
analysis may keep anyway (``analysis.diagnosis.analyse``).  The server reads and
analyses under separate memory admissions, with a wait between them, and so does
not use this.
"""
from __future__ import annotations

from .analysis import Options, analyse
from .progress import NULL
from .graph_captures import load
from .trace.pages import recycled_pages


def read_and_analyse(path: str, options: Options | None = None, progress=NULL,
                     max_bytes: int | None = None, captures=None):
    """(Diagnosis, HostContext) of the trace file at ``path`` (``max_bytes``: see
    ``trace.load``; ``captures``: graph capture files, else those beside it).  Raises
    ``TraceError`` as ``load`` does."""
    with recycled_pages():
        return analyse(load(path, progress, max_bytes=max_bytes, captures=captures), options,
                       progress)
