"""A run's captures from the listing (``discovery``), in time order: what the trend reads.

* **XSpace**: every Profile-plugin session (``<tb_run>/plugins/profile/<session>/``) is a
  run of the listing; the trend's run is the TensorBoard run holding them (``<tb_run>``,
  ``.`` for sessions at the logdir's root), and a session's name (``YYYY_MM_DD_HH_MM_SS``,
  UTC) is its start.  Naming one session names its TensorBoard run.
* **PyTorch**: a worker's spans (``<worker>.<time>.pt.trace.json``, one per
  ``schedule(…, repeat=N)`` cycle) started at the time in their names (else the files'
  modification times); with several workers, the k-th span of each is the k-th capture.
"""
from __future__ import annotations

import calendar
import os
import re
import time
from dataclasses import dataclass

from .discovery import Run

_SESSION = re.compile(r"^(\d{4})_(\d{2})_(\d{2})_(\d{2})_(\d{2})_(\d{2})$")
ROOT = "."


@dataclass
class CaptureFiles:
    session: str
    start: float | None        # s since the epoch
    run: str                   # the listing's run holding the files
    sources: list              # [discovery.Source], one per host


def session_time(name: str) -> float | None:
    """Seconds since the epoch a Profile-plugin session name gives (UTC), else None."""
    m = _SESSION.match(name)
    if not m:
        return None
    try:
        return float(calendar.timegm(time.struct_time(tuple(int(x) for x in m.groups())
                                                      + (0, 0, 0))))
    except (ValueError, OverflowError):
        return None


def _group(name: str) -> str:
    return name.rsplit("/", 1)[0] if "/" in name else ROOT


def _session(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def trend_run(runs: dict, name: str) -> str | None:
    """The trend's run that ``name`` names (a PyTorch run, a TensorBoard run holding
    sessions, or one of its sessions), None when none."""
    r = runs.get(name)
    if r is not None:
        return _group(name) if r.layout == "profile" else name
    if any(r.layout == "profile" and _group(n) == name for n, r in runs.items()):
        return name
    return None


def captures(runs: dict, name: str) -> list:
    """[CaptureFiles] of the trend's run ``name`` (``trend_run``'s answer), time order."""
    r = runs.get(name)
    if r is not None and r.layout == "pytorch":
        return _spans(r)
    out = []
    for n, r in runs.items():
        if r.layout != "profile" or _group(n) != name:
            continue
        srcs = sorted(r.sources, key=lambda s: s.host)
        start = session_time(_session(n))
        if start is None:
            start = min((s.mtime for s in srcs if s.mtime), default=None)
        out.append(CaptureFiles(_session(n), start, n, srcs))
    return sorted(out, key=lambda c: (c.start is None, c.start or 0.0, c.session))


def _spans(r: Run) -> list:
    per_worker: dict = {}
    for s in sorted(r.sources, key=lambda s: s.order_key):
        per_worker.setdefault(s.host, []).append(s)
    n = max((len(v) for v in per_worker.values()), default=0)
    out = []
    for k in range(n):
        srcs = [v[k] for _, v in sorted(per_worker.items()) if k < len(v)]
        first = srcs[0]
        start = first.captured if first.captured is not None else (first.mtime or None)
        out.append(CaptureFiles(first.span or first.host, start, r.name, srcs))
    return out


def trend_runs(runs: dict) -> list:
    """Every trend run of the listing, sorted."""
    return sorted({trend_run(runs, n) for n in runs})


def run_folder(runs: dict, name: str) -> str | None:
    """The folder holding the trend run ``name`` (where its sibling ``perfdiag`` run goes):
    a PyTorch run's folder, or the TensorBoard run folder above ``plugins/profile``; None
    for a remote one (a URL)."""
    caps = captures(runs, name)
    src = next((s for c in caps for s in c.sources), None)
    if src is None or "://" in str(src.path):
        return None
    up = 1 if runs[caps[0].run].layout == "pytorch" else 4
    path = str(src.path)
    for _ in range(up):
        path = os.path.dirname(path)
    return path
