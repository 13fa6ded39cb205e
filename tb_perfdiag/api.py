"""``diagnose(path_or_trace) → Diagnosis`` and the JSON the plugin serves."""
from __future__ import annotations

import os

from .analysis import Diagnosis, Options, diagnose_trace
from .discovery import scan_logdir
from .trace import Trace, load


def diagnose(path_or_trace, **options) -> Diagnosis:
    """Diagnose one trace file (or an already loaded ``Trace``).

    Options: ``threshold_us`` (default 5), ``kernels_only`` (default False).
    """
    opt = Options(**options)
    trace = path_or_trace if isinstance(path_or_trace, Trace) else load(path_or_trace)
    return diagnose_trace(trace, opt)


def trace_files(path: str) -> list:
    """A file, or every profile file under a folder, as (label, path)."""
    if os.path.isfile(path) or "://" in str(path) and not str(path).endswith("/"):
        if os.path.isdir(path):
            pass
        else:
            return [(os.path.basename(str(path)), str(path))]
    out = []
    for run in scan_logdir(path).values():
        for s in sorted(run.sources, key=lambda s: (s.host, s.span)):
            label = f"{run.name} · {s.host}" + (f" · {s.span}" if s.span else "")
            out.append((label, s.path))
    return out
