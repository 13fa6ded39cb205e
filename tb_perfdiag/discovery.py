"""Logdir → profile runs → hosts/workers → files, for local and fsspec logdirs.

Two layouts (GUIDE §2):
- Profile plugin: ``<logdir>/<tb_run…>/plugins/profile/<run>/<host>.xplane.pb``; the
  run is named ``<run>`` when tb_run is the logdir root, else ``<tb_run>/<run>``.
- PyTorch: any folder holding ``<worker>.<time>.pt.trace.json[.gz]``, or any other
  ``.json[.gz]`` whose top-level object has a ``traceEvents`` key near its start
  (``rank-0.json.gz``, ``export_chrome_trace`` output; found by content, each file read
  once); several files of one worker are several capture windows ("spans").

One span rule everywhere (pod summary, host page, API): a worker is analysed on its
latest capture unless a span is named — latest by the capture time in the file name
(``<worker>.<time>``, seconds to nanoseconds since the epoch), else by the file's
modification time.  Spans are shown by that capture time.

Requests never name files: they name (run, host, span), which are looked up in the
listing made here, so no request parameter reaches a file the listing did not find.
The listing holds regular files only, never a named pipe or device.  A symbolic link (to a file or
a folder: runs are often linked into a logdir, ``ln -s ~/traces/run1 logdir/run1``) is
followed as TensorBoard and the Profile plugin follow it: the run and host are named
where the link is, and the listing holds the resolved path with the folder its read is
confined to — the logdir's resolved root, or, for a link leading elsewhere, the linked
folder (a linked file: the folder holding it).  Folders are walked once however often
they are linked; a link to a folder holding it (a loop, ``/``) is not followed.  Each
file is later read relative to its folder without following any link
(``storage.open_file``), so a name swapped for a link after the listing is not read.

What looks like a profile but is not listed — an ``.xplane.pb`` outside the Profile
plugin's layout, a broken link or a loop, a pipe, a ``.pftrace`` holding Perfetto
protobuf — is kept with the reason (``scan_logdir(…, skipped=[])``), so that "no
profiles found" can say what was found instead.
"""
from __future__ import annotations

import os
import re
import stat
import threading
import time
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone

from .storage import GZIP_MAGIC, TRACE_BYTES_READ, ListedPath, filesystem, is_remote
from .trace import PERFETTO_NOT_READ

XPLANE_SUFFIX = ".xplane.pb"
PFTRACE_SUFFIX = ".pftrace"                 # Kineto JSON or Perfetto protobuf, by content
MAX_SKIPPED = 200                           # skipped files kept per listing
PT_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")
JSON_SUFFIXES = (".json", ".json.gz")       # other Kineto names, recognised by content
_WORKER_SPAN = re.compile(r"^(?P<worker>.+?)\.(?P<span>\d+)$")
SPAN_RULE = ("A worker with several captures (spans) is analysed on its latest one unless "
             "a span is chosen: latest by the capture time in the file name, else by the "
             "file's modification time. The pod summary, the host page and the API all use "
             "this rule.")


@dataclass
class Source:
    host: str                 # XSpace host or PyTorch worker
    span: str                 # PyTorch capture window ("" for XSpace)
    path: str                 # absolute path or URL
    format: str               # "xspace" | "kineto"
    size: int = 0
    mtime: float = 0.0

    @property
    def captured(self) -> float | None:
        """Capture time (s since the epoch) the span's name gives, None when it gives none."""
        return span_time(self.span)

    @property
    def order_key(self) -> tuple:
        """What "latest" means (SPAN_RULE): the capture time in the name, else the mtime."""
        t = self.captured
        return (t if t is not None else self.mtime or 0.0, self.span)


@dataclass
class Run:
    name: str
    layout: str               # "profile" | "pytorch"
    sources: list = field(default_factory=list)

    def hosts(self) -> list:
        return sorted({s.host for s in self.sources})

    def to_json(self) -> dict:
        hosts = {}
        for s in sorted(self.sources, key=lambda s: (s.host, s.order_key)):
            h = hosts.setdefault(s.host, {"name": s.host, "spans": []})
            h["spans"].append({"name": s.span, "label": span_label(s), "format": s.format,
                               "size": s.size, "file": os.path.basename(s.path),
                               "latest": False})
        for h in hosts.values():          # chronological; the rule's pick is the last
            h["spans"][-1]["latest"] = True
        return {"run": self.name, "layout": self.layout, "hosts": list(hosts.values())}


def span_time(span: str) -> float | None:
    """Seconds since the epoch from a span name holding a time in s, ms, µs or ns (a
    plausible one: 2001–2286); None for other names (a pid, a counter)."""
    if not span or not span.isdigit() or len(span) > 20:
        return None
    v = int(span)
    for scale in (1e9, 1e6, 1e3, 1.0):
        t = v / scale
        if 1e9 <= t < 1e10:
            return t
    return None


def span_label(src: Source) -> str:
    """How a span is shown: its capture time (UTC, to the millisecond), else the name and
    the file's modification time."""
    t = src.captured
    if t is not None:
        return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
    if src.mtime:
        when = datetime.fromtimestamp(src.mtime, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"{src.span} (written {when})" if src.span else f"written {when}"
    return src.span


def latest(sources) -> Source | None:
    """The span SPAN_RULE picks among one worker's sources."""
    return max(sources, key=lambda s: s.order_key, default=None)


def _split_pt_name(filename: str) -> tuple[str, str]:
    base = filename
    for suf in PT_SUFFIXES + (".json.gz", ".json", PFTRACE_SUFFIX):
        if base.endswith(suf):
            base = base[: -len(suf)]
            break
    m = _WORKER_SPAN.match(base)
    if m:
        return m.group("worker"), m.group("span")
    return base, ""


def resolve_root(logdir: str) -> str:
    """The logdir as listings and reads use it: a local one with its links resolved
    (a logdir given through a symlink is listed where it really is; below it no link is
    followed), a URL as it is."""
    fs, root = filesystem(logdir)
    return os.path.realpath(root) if fs is None else str(logdir)


def _candidate(fn: str) -> bool:
    return fn.endswith(XPLANE_SUFFIX) or fn.endswith(JSON_SUFFIXES) or fn.endswith(PFTRACE_SUFFIX)


@dataclass
class Skipped:
    """A file that looks like a profile but is not listed, and why (for "no profiles
    found" to say what was found)."""
    path: str                 # relative to the logdir
    reason: str

    def to_json(self) -> dict:
        return {"path": self.path, "reason": self.reason}


LAYOUT_XPLANE = ("an XSpace outside the Profile plugin's layout "
                 "<run>/plugins/profile/<session>/<host>.xplane.pb: not listed (move it "
                 "there, or pass the file itself to tb-perfdiag diagnose)")


def _skip(skipped, rel: str, reason: str) -> None:
    if skipped is not None and len(skipped) < MAX_SKIPPED:
        skipped.append(Skipped(rel, reason))


SNIFF_BYTES = 256 << 10        # compressed bytes read to recognise a Kineto JSON…
SNIFF_TEXT = 1 << 20           # …and decompressed text searched for its key
_SNIFF_KEY = b'"traceEvents"'
_sniffed: dict = {}            # (path, size, mtime) → bool: each file is read once
_SNIFF_CACHE_MAX = 50_000
_sniff_lock = threading.Lock()


def has_trace_events(path: str, size: int = -1, mtime: float = 0.0) -> bool:
    """Whether a ``.json[.gz]`` file is a Chrome/Kineto trace: a JSON object with a
    ``traceEvents`` key within its first megabyte of text.  Reads at most 256 KB of the
    file, once per (path, size, mtime); anything unreadable is not a trace."""
    key = (path, size, mtime)
    with _sniff_lock:
        got = _sniffed.get(key)
    if got is not None:
        return got
    got = _sniff(path)
    with _sniff_lock:
        if len(_sniffed) >= _SNIFF_CACHE_MAX:
            _sniffed.clear()
        _sniffed[key] = got
    return got


def _sniff(path: str) -> bool:
    try:
        fs, inner = filesystem(path)
        if fs is None:
            # never through a link swapped in since the listing, never blocking on a pipe
            fd = os.open(inner, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) |
                         getattr(os, "O_NONBLOCK", 0))
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    return False
                head = f.read(SNIFF_BYTES)
        else:
            with fs.open(inner, "rb") as f:
                head = f.read(SNIFF_BYTES)
    except (OSError, ValueError):
        return False
    TRACE_BYTES_READ.add(len(head))
    if head[:2] == GZIP_MAGIC:
        try:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, SNIFF_TEXT)
        except zlib.error:
            return False
    text = head[:SNIFF_TEXT].lstrip(b"\xef\xbb\xbf \t\r\n")
    return text[:1] == b"{" and _SNIFF_KEY in text


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _walk_local(root: str, skipped):
    """``_walk`` of a local root (resolved), each file with the folder its read is
    confined to.  A symbolic link is followed, once, as TensorBoard and the Profile plugin
    follow runs linked into a logdir: one leading inside the folder being walked is read
    where it leads; one leading elsewhere is read where it leads, confined to its target
    folder (a linked file: the folder holding it), so that nothing below that is reached
    through a link either.  A folder already walked (linked twice) is walked once; a link
    to a folder holding the one it is in (a loop, or ``/``) is not followed."""
    stack, seen = [((), root, root)], {root}
    while stack:
        parts, folder, within = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        sub = []
        for e in entries:
            rel = "/".join(parts + (e.name,))
            try:
                st = os.lstat(e.path)           # the name itself first
            except OSError:
                continue
            full, confined = e.path, within
            if stat.S_ISLNK(st.st_mode):
                target = os.path.realpath(e.path)
                try:
                    st = os.stat(target)
                except OSError:
                    if _candidate(e.name):
                        _skip(skipped, rel, "a symbolic link to nothing (broken): not read")
                    continue
                if stat.S_ISDIR(st.st_mode) and (_inside(folder, target) or
                                                 _inside(root, target)):
                    _skip(skipped, rel, f"a symbolic link to a folder holding it (to "
                                        f"{target}): a loop, not followed")
                    continue
                full = target                   # read where it is: no link on the way
                if not _inside(target, within):
                    confined = target if stat.S_ISDIR(st.st_mode) else os.path.dirname(target)
            if stat.S_ISDIR(st.st_mode):
                if full not in seen:            # a folder linked twice, or a cycle: once
                    seen.add(full)
                    sub.append((parts + (e.name,), full, confined))
                continue
            if not _candidate(e.name):
                continue
            if not stat.S_ISREG(st.st_mode):
                _skip(skipped, rel, f"{_kind(st.st_mode)}, not a regular file: not read")
                continue
            yield parts, e.name, full, st.st_size, st.st_mtime, confined
        stack.extend(reversed(sub))             # folders in name order


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _walk(logdir: str, skipped=None):
    """Yield (relative dir parts, filename, path to read, size, mtime, the folder its read
    is confined to — None for a URL) for every regular file under logdir (a local one
    given resolved: ``resolve_root``) whose name may be a profile's.  A link is followed
    (``_walk_local``: the path to read is then its resolved one); broken links, loops,
    named pipes and devices are skipped, and said in ``skipped``."""
    fs, root = filesystem(logdir)
    if fs is None:
        yield from _walk_local(os.path.abspath(root), skipped)
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
        if not _candidate(fn):
            continue
        url = p if "://" in p else f"{proto}://{p}" if not p.startswith("/") or proto != "memory" \
            else f"memory://{p}"
        mtime = info.get("mtime") or info.get("created") or 0
        try:
            mtime = float(mtime)
        except (TypeError, ValueError):
            mtime = 0.0
        yield parts[:-1], fn, url, int(info.get("size") or 0), mtime, None


def scan_logdir(logdir: str, skipped: list | None = None) -> dict:
    """{run name: Run} for everything under ``logdir``; what looks like a profile but is
    not listed is appended to ``skipped`` (``Skipped``) when given."""
    runs: dict[str, Run] = {}
    root_name = os.path.basename(str(logdir).rstrip("/")) or str(logdir)
    root = resolve_root(logdir)
    for parts, fn, full, size, mtime, within in _walk(root, skipped):
        if within is not None:          # read later confined below where it was found
            full = ListedPath(full, within)
        if fn.endswith(XPLANE_SUFFIX):
            # …/<tb_run…>/plugins/profile/<run>/<host>.xplane.pb
            if len(parts) < 3 or parts[-3:-1] != ("plugins", "profile"):
                _skip(skipped, "/".join(parts + (fn,)), LAYOUT_XPLANE)
                continue
            tb_run = "/".join(parts[:-3])
            name = f"{tb_run}/{parts[-1]}" if tb_run else parts[-1]
            run = runs.setdefault(name, Run(name, "profile"))
            run.sources.append(Source(fn[: -len(XPLANE_SUFFIX)], "", full, "xspace", size, mtime))
        else:
            if not fn.endswith(PT_SUFFIXES):
                # another name: a trace only by content, and never one of the Profile
                # plugin's folders (JAX's lossy <host>.trace.json.gz, the plugin's caches)
                if "profile" in parts and "plugins" in parts:
                    continue
                if not has_trace_events(full, size, mtime):
                    if fn.endswith(PFTRACE_SUFFIX):
                        _skip(skipped, "/".join(parts + (fn,)), PERFETTO_NOT_READ)
                    continue
            if parts and parts[-1] == "capture_traces":
                continue        # a graph capture: read with the trace beside its folder
            name = "/".join(parts) if parts else root_name
            run = runs.setdefault(name, Run(name, "pytorch"))
            worker, span = _split_pt_name(fn)
            run.sources.append(Source(worker, span, full, "kineto", size, mtime))
    return dict(sorted(runs.items()))


class Catalog:
    """The logdir's runs, listed again so that profiles written while TensorBoard runs
    appear without a restart — without ever making a request wait for a listing, which
    takes seconds on a large logdir, except the very first.

    * A listing older than ``ttl`` is renewed in the background; requests meanwhile get
      the one at hand.
    * ``runs(refresh=True)`` (the page's refresh, or a run name not in the listing: a
      run written since, a typo, or a flood of made-up names) waits, up to ``wait_s``,
      for a listing that started after it asked, shared by everyone asking; a new one
      starts at most every ``min_interval`` seconds.
    * Both intervals stretch to four times the last listing's duration, so listing a
      huge logdir never takes more than a fifth of the time.
    """

    def __init__(self, logdir: str, ttl: float = 5.0, min_interval: float = 2.0,
                 wait_s: float = 10.0):
        self.logdir = logdir
        self.ttl, self.min_interval, self.wait_s = ttl, min_interval, wait_s
        self._cv = threading.Condition()
        self._runs: dict = {}
        self._skipped: list = []     # what the last listing skipped, and why (Skipped)
        self._listed = False         # a listing has completed
        self._error = None           # why the last listing failed (None: it did not)
        self._scanning = False
        self._started = -1e18        # monotonic start of the newest listing
        self._duration = 0.0         # how long the last one took
        self.scans = 0               # listings made (for /status and the tests)

    def _start_locked(self) -> None:
        self._scanning, self._started = True, time.monotonic()
        threading.Thread(target=self._scan, name="perfdiag-listing", daemon=True).start()

    def _scan(self) -> None:
        t0 = time.monotonic()
        runs, error, skipped = None, None, []
        try:
            runs = scan_logdir(self.logdir, skipped) if self.logdir else {}
        except Exception as e:  # noqa: BLE001 - handed to whoever asks for the runs
            error = e
        with self._cv:
            if runs is not None:
                self._runs, self._listed, self._skipped = runs, True, skipped
            self._error = error
            self._duration = time.monotonic() - t0
            self._scanning = False
            self.scans += 1
            self._cv.notify_all()

    def _stretch(self, seconds: float) -> float:
        return max(seconds, 4 * self._duration)

    def _renew_locked(self, interval: float) -> None:
        """Start a listing unless one is under way or the last started under
        ``interval`` (stretched) seconds ago."""
        if not self._scanning and time.monotonic() - self._started >= self._stretch(interval):
            self._start_locked()

    def _fresh_locked(self) -> None:
        """Wait (up to ``wait_s``) for a listing that started after this call: the next
        one allowed (``min_interval`` after the last), shared by everyone waiting."""
        asked = time.monotonic()
        deadline = asked + self.wait_s
        while not (self._started >= asked and not self._scanning):
            now = time.monotonic()
            if now >= deadline:
                return
            if not self._scanning:
                ready = self._started + self._stretch(self.min_interval)
                if now >= ready:
                    self._start_locked()
                    continue
                self._cv.wait(min(ready, deadline) - now)
            else:
                self._cv.wait(deadline - now)

    def runs(self, refresh: bool = False) -> dict:
        """{run name: Run}; raises what the listing failed with (an unreadable logdir)
        as long as none has succeeded."""
        with self._cv:
            if not self._listed:
                # the first listing: everyone waits for it (a failed one is retried at
                # most every min_interval)
                self._renew_locked(0.0 if self._error is None else self.min_interval)
                self._cv.wait_for(lambda: not self._scanning, max(self.wait_s, 60.0))
            elif refresh:
                self._fresh_locked()
            else:
                self._renew_locked(self.ttl)
            if not self._listed and self._error is not None:
                raise self._error
            return self._runs

    def skipped(self) -> list:
        """[Skipped] of the last listing (never waits)."""
        with self._cv:
            return list(self._skipped)

    def listed(self) -> bool:
        """Whether a listing is at hand (never waits)."""
        with self._cv:
            return self._listed

    def find(self, run: str, host: str, span: str | None = None) -> Source | None:
        r = self.runs().get(run)
        if r is None:
            r = self.runs(refresh=True).get(run)
        if r is None:
            return None
        matches = [s for s in r.sources if s.host == host and (span is None or s.span == span)]
        return latest(matches)        # SPAN_RULE when no span is named

    def has_profiles(self, wait_s: float = 0.5) -> bool:
        """Whether the logdir holds profiles, for TensorBoard's plugin listing: never
        waits for a listing more than ``wait_s`` (until the first one is done the
        answer is yes, so the tab shows and says what it finds)."""
        with self._cv:
            if not self._listed:
                self._renew_locked(0.0 if self._error is None else self.min_interval)
                self._cv.wait_for(lambda: not self._scanning, wait_s)
                if not self._listed:
                    return self._error is None
        return bool(self.runs())


def runs_json(runs: dict) -> list:
    return [r.to_json() for r in runs.values()]


__all__ = ["Catalog", "Run", "Skipped", "Source", "SPAN_RULE", "has_trace_events", "latest",
           "scan_logdir", "runs_json", "span_label", "span_time"]
