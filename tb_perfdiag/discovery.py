"""Logdir → profile runs → hosts/workers → files, for local and fsspec logdirs.

Two layouts (GUIDE §2):
- Profile plugin: ``<logdir>/<tb_run…>/plugins/profile/<run>/<host>.xplane.pb``; the
  run is named ``<run>`` when tb_run is the logdir root, else ``<tb_run>/<run>``.
- PyTorch: any folder holding ``<worker>.<time>.pt.trace.json[.gz]``; several files of
  one worker are several capture windows ("spans").

Requests never name files: they name (run, host, span), which are looked up in the
listing made here, so no request parameter can reach outside the logdir.
"""
from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, field

from .storage import filesystem

XPLANE_SUFFIX = ".xplane.pb"
PT_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")
_WORKER_SPAN = re.compile(r"^(?P<worker>.+?)\.(?P<span>\d+)$")


@dataclass
class Source:
    host: str                 # XSpace host or PyTorch worker
    span: str                 # PyTorch capture window ("" for XSpace)
    path: str                 # absolute path or URL
    format: str               # "xspace" | "kineto"
    size: int = 0
    mtime: float = 0.0


@dataclass
class Run:
    name: str
    layout: str               # "profile" | "pytorch"
    sources: list = field(default_factory=list)

    def hosts(self) -> list:
        return sorted({s.host for s in self.sources})

    def to_json(self) -> dict:
        hosts = {}
        for s in sorted(self.sources, key=lambda s: (s.host, s.span)):
            h = hosts.setdefault(s.host, {"name": s.host, "spans": []})
            h["spans"].append({"name": s.span, "format": s.format, "size": s.size,
                               "file": os.path.basename(s.path)})
        return {"run": self.name, "layout": self.layout, "hosts": list(hosts.values())}


def _split_pt_name(filename: str) -> tuple[str, str]:
    base = filename
    for suf in PT_SUFFIXES:
        if base.endswith(suf):
            base = base[: -len(suf)]
            break
    m = _WORKER_SPAN.match(base)
    if m:
        return m.group("worker"), m.group("span")
    return base, ""


def _walk(logdir: str):
    """Yield (relative dir parts, filename, size, mtime) for every file under logdir."""
    fs, root = filesystem(logdir)
    if fs is None:
        root = os.path.abspath(root)
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames.sort()
            rel = os.path.relpath(dirpath, root)
            parts = () if rel == "." else tuple(rel.split(os.sep))
            for fn in filenames:
                if not (fn.endswith(XPLANE_SUFFIX) or fn.endswith(PT_SUFFIXES)):
                    continue
                full = os.path.join(dirpath, fn)
                try:
                    st = os.stat(full)          # follows a file symlink: check it stays inside
                    real = os.path.realpath(full)
                except OSError:
                    continue
                if not (real == root or real.startswith(root.rstrip(os.sep) + os.sep)):
                    continue
                yield parts, fn, full, st.st_size, st.st_mtime
        return
    root = root.rstrip("/")
    proto = logdir.split("://", 1)[0]
    try:
        found = fs.find(root, withdirs=False, detail=True)
    except (FileNotFoundError, OSError):
        return
    for p, info in sorted(found.items()):
        rel = p[len(root):].lstrip("/")
        parts = tuple(rel.split("/"))
        fn = parts[-1]
        if not (fn.endswith(XPLANE_SUFFIX) or fn.endswith(PT_SUFFIXES)):
            continue
        url = p if "://" in p else f"{proto}://{p}" if not p.startswith("/") or proto != "memory" \
            else f"memory://{p}"
        mtime = info.get("mtime") or info.get("created") or 0
        try:
            mtime = float(mtime)
        except (TypeError, ValueError):
            mtime = 0.0
        yield parts[:-1], fn, url, int(info.get("size") or 0), mtime


def scan_logdir(logdir: str) -> dict:
    """{run name: Run} for everything under ``logdir``."""
    runs: dict[str, Run] = {}
    root_name = os.path.basename(str(logdir).rstrip("/")) or str(logdir)
    for parts, fn, full, size, mtime in _walk(logdir):
        if fn.endswith(XPLANE_SUFFIX):
            # …/<tb_run…>/plugins/profile/<run>/<host>.xplane.pb
            if len(parts) < 3 or parts[-3:-1] != ("plugins", "profile"):
                continue
            tb_run = "/".join(parts[:-3])
            name = f"{tb_run}/{parts[-1]}" if tb_run else parts[-1]
            run = runs.setdefault(name, Run(name, "profile"))
            run.sources.append(Source(fn[: -len(XPLANE_SUFFIX)], "", full, "xspace", size, mtime))
        else:
            name = "/".join(parts) if parts else root_name
            run = runs.setdefault(name, Run(name, "pytorch"))
            worker, span = _split_pt_name(fn)
            run.sources.append(Source(worker, span, full, "kineto", size, mtime))
    return dict(sorted(runs.items()))


class Catalog:
    """The logdir's runs, re-listed at most every ``ttl`` seconds so profiles written
    while TensorBoard runs appear without a restart."""

    def __init__(self, logdir: str, ttl: float = 5.0):
        self.logdir = logdir
        self.ttl = ttl
        self._lock = threading.Lock()
        self._runs: dict = {}
        self._at = -1e18

    def runs(self, refresh: bool = False) -> dict:
        with self._lock:
            now = time.monotonic()
            if refresh or now - self._at > self.ttl:
                self._runs = scan_logdir(self.logdir) if self.logdir else {}
                self._at = now
            return self._runs

    def find(self, run: str, host: str, span: str | None = None) -> Source | None:
        r = self.runs().get(run)
        if r is None:
            r = self.runs(refresh=True).get(run)
        if r is None:
            return None
        matches = [s for s in r.sources if s.host == host and (span is None or s.span == span)]
        if not matches:
            return None
        # newest span by default
        return max(matches, key=lambda s: (s.span.isdigit() and int(s.span) or 0, s.span))

    def has_profiles(self) -> bool:
        return bool(self.runs())


def runs_json(runs: dict) -> list:
    return [r.to_json() for r in runs.values()]


__all__ = ["Catalog", "Run", "Source", "scan_logdir", "runs_json"]
