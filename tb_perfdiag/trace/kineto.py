"""Reader for PyTorch profiler (Kineto) Chrome-trace JSON → ``Trace``.

Handles the current categories (``cpu_op``, ``cuda_runtime``, ``kernel``, …), the
2021 ones (``Operator``, ``Runtime``, ``Kernel``, ``Memcpy``), AMD ``hip*`` names and
MTIA.  Timestamps are microseconds with up to nanosecond decimals; float64 cannot
hold epoch microseconds to the nanosecond, so when they are that large the exact
decimal text of every ``"ts"`` is re-read from the file.
"""
from __future__ import annotations

import os
import re
from contextlib import nullcontext

import numpy as np
import orjson

from ..beside import Beside, side_by_side
from ..progress import NULL
from ..storage import is_blank, read_ahead
from . import classify
from .build import (StringTable, Tracks, assemble, correlation_links, distinct,
                    narrow_id_stats, unique_inverse)
from .chrome_meta import METADATA_KEYS, metadata_event
from .losses import kineto_losses
from .model import Device, EventKind as K, TraceError, TrackKind

DEVICE_ACTIVITY_CATS = {
    "kernel": K.KERNEL, "gpu_memcpy": K.MEMCPY, "gpu_memset": K.MEMSET,
    "Kernel": K.KERNEL, "Memcpy": K.MEMCPY, "Memset": K.MEMSET,
    "mtia_ccp_events": K.KERNEL,
}
DEVICE_OTHER_CATS = {"gpu_user_annotation": K.DEVICE_OTHER, "cuda_sync": K.SYNC}
_DEVICE_LABEL = re.compile(r"^(GPU|MTIA|TPU|XPU|HPU)\s*(\d+)", re.I)
_TS_TEXT = re.compile(rb'"ts"\s*:\s*(-?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)')
# events further than this from the trace's median time are unplaceable (11.5 days)
_MAX_SPAN_US = 1e12
OUT_OF_RANGE = np.iinfo(np.int64).min
# float64 keeps 1 ns at most up to 2**52 ns ≈ 4.5e12 µs
_FLOAT_EXACT_LIMIT_US = 4.0e12

STAT_ARGS = {
    "correlation": ("correlation",),
    "external_id": ("External id", "external id"),
    "device": ("device",),
    "stream": ("stream",),
    "bytes": ("bytes",),
    "flops": ("flops",),        # with_flops=True: the profiler's count of a matmul-class op
}
# string stats: the JSON text of an op's array arg (record_shapes=True), interned so that
# the thousands of ops of one shape share one id; the cost model parses each distinct
# text once (``analysis.efficiency.torch_shapes``)
STRING_STAT_ARGS = {
    "input_dims": "Input Dims",
    "input_type": "Input type",
    "concrete_inputs": "Concrete Inputs",
    # a launch's kernel name (ROCm's runtime events carry it): while a CUDA/HIP graph is
    # captured no kernel runs, and the launch alone names what the graph will replay
    "launch_kernel": "kernel",
}


def looks_like(head: bytes) -> bool:
    return b"traceEvents" in head


def _drop_events(scan: dict, keep: np.ndarray) -> dict:
    """The scan without the events where ``keep`` is False (stats re-indexed)."""
    out = dict(scan)
    for k in ("name_ids", "cat_ids", "track_ids", "ts_ps", "dur_ps"):
        out[k] = np.asarray(scan[k])[keep]
    new_index = np.cumsum(keep) - 1
    for key in ("stats", "string_stats"):
        stats = {}
        for sname, (idx, vals) in scan.get(key, {}).items():
            idx = np.asarray(idx, np.int64)
            ok = keep[idx]
            stats[sname] = (new_index[idx[ok]], np.asarray(vals)[ok])
        out[key] = stats
    return out


def _plausible(scan: dict) -> bool:
    """A native scan is used only when its times fit the model; the reference scanner
    handles (and reports) corrupt clock values."""
    ts, dur = np.asarray(scan["ts_ps"]), np.asarray(scan["dur_ps"])
    placed = ts != OUT_OF_RANGE          # events it already marked as unplaceable
    ts, dur = ts[placed], dur[placed]
    if ts.size == 0:
        return True
    return bool(ts.min() >= 0 and ts.max() < 2 ** 62 and dur.min() > -2 ** 62
                and dur.max() < 2 ** 62)


def _exact_ts_ps(texts: list | None, approx_us: np.ndarray, base_us: int,
                 warnings: list, sane: np.ndarray) -> np.ndarray | None:
    """Exact timestamps in ps after ``base_us`` from each event's "ts" text, or None if
    the text could not be matched to the events."""
    if texts is None:
        warnings.append("timestamps could not be matched to their text; "
                        "kept float precision (about 0.25 µs)")
        return None
    out = np.zeros(len(texts), dtype=np.int64)
    base_ps = base_us * 1_000_000
    for k, (t, ok) in enumerate(zip(texts, sane.tolist())):
        if not ok:
            continue
        if b"e" in t or b"E" in t:
            out[k] = int(round((float(t) - base_us) * 1e6))
            continue
        whole, _, frac = t.partition(b".")
        neg = whole.startswith(b"-")
        v = abs(int(whole)) * 1_000_000 + int((frac + b"000000")[:6] or b"0")
        out[k] = (-v if neg else v) - base_ps
    if not np.allclose(out / 1e6, approx_us - base_us, rtol=0, atol=2.0):
        warnings.append("timestamp text disagrees with parsed values; kept float precision")
        return None
    return out


def read(path: str, raw: bytes | None = None):
    if raw is None:
        from ..storage import open_file
        with open_file(path) as f:
            return build(path, scan_file(f))
    return build(path, scan(path, raw))


def scan(path: str, raw: bytes, progress=None) -> dict:
    """File bytes → flat columns (native scanner when built, else the reference one);
    ``progress`` follows the native scanner's position."""
    if is_blank(raw):
        raise TraceError(path, "empty file")
    cols = None
    native = native_scanner()
    if native is not None:
        try:
            cols = native.scan_kineto(raw, progress)
        except ValueError:
            cols = None  # let the reference scanner name the problem precisely
        if cols is not None and not _plausible(cols):
            cols = None
    if cols is None:
        cols = scan_python(path, raw)
    return cols


def scan_file(f, progress=NULL) -> dict:
    """The columns of a file opened through the guard (``storage.OpenFile``), its text
    decoded and scanned chunk by chunk: only a chunk and the event it cuts are held,
    and the size budget counts the decoded bytes as they come (``TraceTooLarge`` at the
    budget).

    The native scanner reads first; where it refuses, the reference scanner reads the
    file again and names the problem.  A problem found before the end is reported
    only once the rest is decoded: a file over the budget, or a broken gzip, is that
    first (as when the file was decoded whole before it was scanned)."""
    path = f.path
    native = native_scanner()
    if native is not None:
        try:
            cols = _scan_stream(path, f, native.KinetoStream(), ValueError, progress)
        except ValueError:
            cols = None
        if cols is not None and _plausible(cols):
            return cols
    return _scan_stream(path, f, PythonStream(path), TraceError, progress)


def _scan_stream(path, f, scanner, refusal, progress):
    """``scanner`` fed the file's chunks.  Its refusal (``refusal``) ends the read at
    once when it is the native scanner's (the reference reads again); the reference's
    own is raised once the rest is decoded, holding none of it: a file over the budget
    or a broken gzip is reported as that first."""
    blank = True
    many = hasattr(scanner, "feed_many") and native_scanner().walk_ahead()
    chunks = f.chunks(progress)
    if f.compressed:
        # walked ahead, the stream waits on the oldest stretch while the others are
        # walked: the gunzip runs on, as far ahead as stretches may be pending
        chunks = read_ahead(chunks, scanner.pending_chunks() if many else 1)

    def seen(chunks):
        nonlocal blank
        for chunk in chunks:
            if blank:
                blank = is_blank(chunk)
            yield chunk
    try:
        if many:
            scanner.feed_many(seen(chunks))
        else:
            for chunk in seen(chunks):
                scanner.feed(chunk)
        if blank:
            raise TraceError(path, "empty file: the profiler wrote nothing (or is still "
                                   "writing)")
        return scanner.finish()
    except refusal as e:
        if refusal is TraceError:
            if blank:
                e = TraceError(path, "empty file: the profiler wrote nothing (or is still "
                                     "writing)")
            for _ in chunks:
                pass
        raise e
    finally:
        chunks.close()


def native_scanner():
    try:
        if os.environ.get("TB_PERFDIAG_NO_NATIVE"):
            return None
        from . import native_scan  # the C scanner, built from native/ by setup.py; optional
    except ImportError:
        return None
    return native_scan


def scan_python(path: str, raw: bytes, chunk: int | None = None) -> dict:
    """Reference scanner: bytes → flat columns (see ``build`` for the contract), fed to
    ``PythonStream`` whole or ``chunk`` bytes at a time."""
    st = PythonStream(path)
    step = chunk or max(len(raw), 1)
    view = memoryview(raw)
    for at in range(0, len(raw), step):
        st.feed(bytes(view[at:at + step]))
    return st.finish()


# ---- the reference scanner, fed chunk by chunk ----
#
# The text is cut into units that orjson parses whole: a top-level member of the
# document, or a run of traceEvents elements.  Where units end is found from the
# structural characters outside strings (vectorised over each buffer); what is left
# after the last whole unit waits for the next chunk.  orjson decides every unit's
# validity, wrapped so that its nesting depth is the depth it has in the document.

_STRUCTURAL = np.zeros(256, bool)
_STRUCTURAL[list(b"{}[],:")] = True
_DEPTH_STEP = np.zeros(256, np.int64)
_DEPTH_STEP[list(b"{[")] = 1
_DEPTH_STEP[list(b"}]")] = -1
_KEY = re.compile(rb'"((?:[^"\\]|\\.)*)"[ \t\r\n]*:[ \t\r\n]*', re.S)
_VALUE_START = frozenset(b'{["-0123456789tfn')
_WS = b" \t\r\n"
_EVENTS_DEPTH = 2   # inside the document's object, inside its traceEvents array
_BATCH = 1 << 19    # text of the elements parsed at once
_PIECE = 1 << 20    # text walked at once


def _structure(buf: bytes, depth0: int):
    """(positions, characters, depth before each) of the structural characters outside
    strings, for ``buf`` starting outside any string at depth ``depth0``."""
    b = np.frombuffer(buf, np.uint8)
    q = np.flatnonzero(b == 34)
    if q.size:
        cand = q[q > 0]
        cand = cand[b[cand - 1] == 92]
        escaped = [x for x in cand.tolist() if _backslashes_before(buf, x) % 2 == 1]
        if escaped:
            q = np.setdiff1d(q, np.asarray(escaped, np.int64))
    pos = np.flatnonzero(_STRUCTURAL[b])
    pos = pos[(np.searchsorted(q, pos) & 1) == 0]
    ch = b[pos]
    step = _DEPTH_STEP[ch]
    before = depth0 + np.cumsum(step) - step
    return pos, ch, before


def _backslashes_before(buf: bytes, x: int) -> int:
    j = x - 1
    while j >= 0 and buf[j] == 0x5C:
        j -= 1
    return x - 1 - j


_NON_WS = re.compile(rb"[^ \t\r\n]")


def _non_blank(buf: bytes, pos: int) -> int:
    """Where the first byte at or after ``pos`` that is no JSON blank lies, or -1.  The
    pattern reads the usual few blanks; a longer run is stripped a window at a time, each
    twice the last, by a table (the pattern read a chunk of nothing but blanks at 160
    MB/s, ``bytes.lstrip`` at 120: a gzip of spaces a file budget long took the
    reference minutes)."""
    m = _NON_WS.search(buf, pos, pos + 64)
    if m is not None:
        return m.start()
    text = np.frombuffer(buf, np.uint8)
    k, w = pos + 64, 1 << 12
    while k < len(text):
        seg = text[k:k + w]
        if not (seg == 0x20).all():         # spaces alone: compared, not looked up
            blank = _IS_BLANK[seg]
            i = int(blank.argmin())
            if not blank[i]:
                return k + i
        k += w
        w = min(2 * w, 1 << 22)
    return -1


_IS_BLANK = np.zeros(256, bool)
_IS_BLANK[list(_WS)] = True


class PythonStream:
    """``scan_python``'s state between chunks: ``feed(chunk)``, then ``finish()``."""

    def __init__(self, path: str):
        self.path = path
        self._held: list = []        # chunks not yet walked
        self._held_len = 0
        self._retry_at = 0
        self._stage = "begin"        # begin, members, after, events, list, tail, scalar
        self._first = True           # at the first member / element
        self._keys: set = set()
        self._events_list = False    # the (last) traceEvents member is a list
        self._list_doc = False
        self.metadata: dict = {}
        self._reset_events()

    def _reset_events(self):
        # a later traceEvents list replaces an earlier one (orjson keeps the last key)
        self.warnings: list = []
        self.names, self.cats = StringTable(), StringTable()
        self.name_ids, self.cat_ids, self.track_ids = [], [], []
        self.track_index: dict = {}
        self.ts_us, self.dur_us, self.ts_text = [], [], []
        self.stat_vals = {k: ([], []) for k in STAT_ARGS}
        self.stat_strings = StringTable()
        self.string_vals = {k: ([], []) for k in STRING_STAT_ARGS}
        self.process_name, self.process_label, self.thread_name = {}, {}, {}
        self.bad = 0
        self.n_raw = 0

    def _invalid(self, detail) -> TraceError:
        return TraceError(self.path, f"not valid JSON ({detail}); truncated or still being "
                                     f"written?")

    def _loads(self, text: bytes):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError as e:
            raise self._invalid(e) from None

    def feed(self, chunk: bytes, final: bool = False) -> None:
        if len(chunk) > _PIECE:   # the walk's index arrays are several times its text
            view = memoryview(chunk)
            for at in range(0, len(chunk), _PIECE):
                self.feed(bytes(view[at:at + _PIECE]), final and at + _PIECE >= len(chunk))
            return
        if chunk:
            self._held.append(bytes(chunk))
            self._held_len += len(chunk)
        if not final and self._held_len < self._retry_at:
            return      # a unit longer than a chunk: walked again once its text doubled
        buf = b"".join(self._held)
        self._held.clear()
        rest = self._walk(buf, final)
        if self._stage != "scalar":
            rest = rest.lstrip(_WS)
        self._held = [rest] if rest else []
        self._held_len = len(rest)
        self._retry_at = 2 * len(rest)

    def _walk(self, buf: bytes, final: bool) -> bytes:
        """Consumes the whole units at the start of ``buf``; returns the rest."""
        n = len(buf)
        pos = 0
        depth0 = {"begin": 0, "members": 1, "after": 1, "events": _EVENTS_DEPTH, "list": 1,
                  "tail": 0, "scalar": 0}[self._stage]
        spos = sch = sbefore = None
        while True:
            stage = self._stage
            if stage == "scalar":
                return buf[pos:]
            p = _non_blank(buf, pos)
            if p < 0:
                return b""
            if stage == "tail":
                raise self._invalid(f"unexpected content after the document at byte {p}")
            if stage == "begin":
                c = buf[p]
                if c == 0x7B:
                    self._stage, self._first, pos = "members", True, p + 1
                elif c == 0x5B:
                    self._stage, self._first, pos = "list", True, p + 1
                    self._list_doc = True
                elif c in _VALUE_START or c == 0x22:
                    self._stage, pos = "scalar", p
                else:
                    raise self._invalid(f"unexpected character at byte {p}")
                continue
            if stage == "after":      # the traceEvents list closed: ',' or '}' next
                if buf[p] not in b",}":
                    raise self._invalid(f"expected ',' or '}}' at byte {p}")
                self._stage = "members" if buf[p] == 0x2C else "tail"
                pos = p + 1
                continue
            if spos is None:
                spos, sch, sbefore = _structure(buf, depth0)
            if stage == "members":
                if self._first and buf[p] == 0x7D:
                    self._stage, pos = "tail", p + 1
                    continue
                m = _KEY.match(buf, p)
                if m is not None and m.end() < n and buf[m.end()] == 0x5B:
                    key = self._loads(b'"' + m.group(1) + b'"')
                    if key == "traceEvents":
                        if self._events_list:
                            self._reset_events()
                        self._keys.add(key)
                        self._events_list = True
                        self._stage, self._first, pos = "events", True, m.end() + 1
                        continue
                k = np.searchsorted(spos, p)
                ends = np.flatnonzero((sbefore[k:] == 1) & ((sch[k:] == 0x2C) | (sch[k:] == 0x7D)))
                if not ends.size:
                    return buf[p:]
                e = int(spos[k + ends[0]])
                member = buf[p:e]
                if not member.strip(_WS):
                    raise self._invalid(f"expected a member at byte {p}")
                obj = self._loads(b"{" + member + b"}")
                for key, v in obj.items():
                    self._keys.add(key)
                    if key == "traceEvents":
                        self._events_list = False
                    if key in METADATA_KEYS:
                        self.metadata[key] = v
                self._first = False
                if buf[e] == 0x7D:
                    self._stage = "tail"
                pos = e + 1
                continue
            # events (or the elements of a document that is a list)
            level = _EVENTS_DEPTH if stage == "events" else 1
            if buf[p] not in _VALUE_START and buf[p] != 0x22 and not (
                    self._first and buf[p] == 0x5D):
                raise self._invalid(f"expected a value at byte {p}")
            k = np.searchsorted(spos, p)
            at = np.flatnonzero((sbefore[k:] == level) & ((sch[k:] == 0x2C) | (sch[k:] == 0x5D)))
            if not at.size:
                return buf[p:]
            seps = k + at
            closing = np.flatnonzero(sch[seps] == 0x5D)
            if closing.size:
                seps = seps[:closing[0] + 1]
            # a run of elements as Python objects is many times its text: a bounded run
            j = max(int(np.searchsorted(spos[seps], p + _BATCH, "right")) - 1, 0)
            end = int(spos[seps[j]])
            closed = bool(sch[seps[j]] == 0x5D)
            batch = buf[p:end]
            if batch.strip(_WS):
                items = self._loads(b"[[" + batch + b"]]")[0]
                if stage == "events":
                    self._events(items, batch)
                self._first = False
            elif not (closed and self._first):
                raise self._invalid(f"expected a value at byte {end}")
            pos = end + 1
            if closed:
                self._stage = "after" if stage == "events" else "tail"
                self._first = False

    def _events(self, events: list, text: bytes) -> None:
        """The reference's per-event logic on a run of traceEvents elements."""
        names, cats = self.names, self.cats
        name_ids, cat_ids, track_ids = self.name_ids, self.cat_ids, self.track_ids
        track_index, stat_vals = self.track_index, self.stat_vals
        string_vals, stat_strings = self.string_vals, self.stat_strings
        ts_us, dur_us = self.ts_us, self.dur_us
        kept_pos: list = []      # index of each kept event among those with a "ts" key
        n_ts = 0
        i = self.n_raw
        for e in events:
            i += 1
            if not isinstance(e, dict):
                self.bad += 1
                continue
            has_ts = "ts" in e
            ph = e.get("ph")
            if ph != "X":
                if ph == "M":
                    metadata_event(e, self.process_name, self.process_label, self.thread_name)
                n_ts += has_ts
                continue
            ts = e.get("ts")
            dur = e.get("dur", 0)
            pid = e.get("pid")
            tid = e.get("tid")
            if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)) or \
                    isinstance(ts, bool) or isinstance(dur, bool) or \
                    isinstance(pid, (dict, list)) or isinstance(tid, (dict, list)):
                self.bad += 1
                n_ts += has_ts
                continue
            cat = e.get("cat") or ""
            if cat == "Trace" or isinstance(pid, str) and pid in ("Spans", "Traces"):
                n_ts += 1
                continue
            k = len(name_ids)
            nm = e.get("name")
            name_ids.append(names.intern(nm if isinstance(nm, str) else str(nm)))
            cat_ids.append(cats.intern(cat if isinstance(cat, str) else str(cat)))
            key = (pid, tid)
            t = track_index.get(key)
            if t is None:
                t = track_index[key] = len(track_index)
            track_ids.append(t)
            ts_us.append(ts)
            dur_us.append(dur)
            kept_pos.append(n_ts)
            n_ts += 1
            a = e.get("args")
            if a and isinstance(a, dict):
                for sname, keys in STAT_ARGS.items():
                    for key in keys:
                        v = a.get(key)
                        if v is not None:
                            if isinstance(v, (int, float)) and not isinstance(v, bool):
                                stat_vals[sname][0].append(k)
                                stat_vals[sname][1].append(v)
                            break
                for sname, key in STRING_STAT_ARGS.items():
                    v = a.get(key)
                    if isinstance(v, list) or (isinstance(v, str) and sname == "launch_kernel"):
                        string_vals[sname][0].append(k)
                        string_vals[sname][1].append(stat_strings.intern(
                            orjson.dumps(v).decode()))
        self.n_raw = i
        # each kept event's "ts" text, for timestamps past float64's nanoseconds; a "ts"
        # found elsewhere (in args, escaped) leaves the texts unmatched
        if self.ts_text is not None:
            texts = _TS_TEXT.findall(text)
            if len(texts) == n_ts:
                self.ts_text.extend(texts[j] for j in kept_pos)
            else:
                self.ts_text = None

    def finish(self) -> dict:
        self.feed(b"", final=True)
        if self._stage == "scalar":
            doc = self._loads(b"".join(self._held))
            self._held = []
            raise TraceError(self.path, "not a PyTorch profiler trace: no 'traceEvents' list"
                             + (" (a JSON list: a memory snapshot or a bare event list)"
                                if isinstance(doc, list) else ""))
        if self._stage != "tail":
            raise self._invalid("unexpected end of data")
        if not self._events_list:
            hint = ""
            if "nodes" in self._keys and "schema" in self._keys:
                hint = " (this looks like a Chakra execution trace)"
            elif self._list_doc:
                hint = " (a JSON list: a memory snapshot or a bare event list)"
            raise TraceError(self.path, "not a PyTorch profiler trace: no 'traceEvents' list"
                             + hint)
        return self._columns()

    def _columns(self) -> dict:
        warnings = self.warnings
        if self.bad:
            warnings.append(f"{self.bad} malformed events skipped (missing or non-numeric "
                            f"ts/dur/pid)")
        n = len(self.name_ids)
        approx = np.asarray(self.ts_us, dtype=np.float64)
        # events whose time is absurd next to the rest (clock garbage, 1e30) cannot be
        # placed; they are marked and dropped by ``build`` with a warning instead of
        # wrapping around
        dur_us_arr = np.asarray(self.dur_us, dtype=np.float64)
        sane = np.isfinite(approx) & np.isfinite(dur_us_arr) & (np.abs(dur_us_arr) < _MAX_SPAN_US)
        if n and sane.any():
            sane &= np.abs(approx - np.median(approx[sane])) < _MAX_SPAN_US
        dur_ps = np.where(sane, np.rint(np.where(sane, dur_us_arr, 0) * 1e6), 0).astype(np.int64)
        base_us = int(np.floor(approx[sane].min())) if n and sane.any() else 0
        approx = np.where(sane, approx, base_us)
        ts_rel = None
        if n and float(np.abs(approx).max()) > _FLOAT_EXACT_LIMIT_US:
            ts_rel = _exact_ts_ps(self.ts_text, approx, base_us, warnings, sane)
        if ts_rel is None:
            ts_rel = np.rint((approx - base_us) * 1e6).astype(np.int64)
        ts_rel[~sane] = OUT_OF_RANGE
        stats = {}
        for sname, (idx, vals) in self.stat_vals.items():
            if idx:
                arr = np.asarray(vals)
                if arr.dtype.kind == "f":
                    arr = np.rint(arr)
                stats[sname] = (np.asarray(idx, np.int64), arr.astype(np.int64))
        string_stats = {sname: (np.asarray(idx, np.int64), np.asarray(ids, np.int64))
                        for sname, (idx, ids) in self.string_vals.items() if idx}
        return {
            "n_raw": self.n_raw,
            "names": self.names.strings, "name_ids": np.asarray(self.name_ids, np.int32),
            "cats": self.cats.strings, "cat_ids": np.asarray(self.cat_ids, np.int32),
            "track_keys": list(self.track_index),
            "track_ids": np.asarray(self.track_ids, np.int32),
            "base_us": base_us, "ts_ps": ts_rel, "dur_ps": dur_ps,
            "stats": stats, "string_stats": string_stats,
            "stat_strings": self.stat_strings.strings,
            "process_name": self.process_name, "process_label": self.process_label,
            "thread_name": self.thread_name,
            "metadata": {k: self.metadata[k] for k in METADATA_KEYS if k in self.metadata},
            "warnings": warnings,
        }


def _device_arg(dev_arg, first_ev: np.ndarray) -> list:
    """Per track, the ``device`` arg of its first device event (None where that event
    has none): looked up for the few first events, not spread over every event."""
    out = [None] * first_ev.shape[0]
    if dev_arg is None:
        return out
    idx, vals = np.asarray(dev_arg[0], np.int64), np.asarray(dev_arg[1], np.int64)
    if not (idx[1:] > idx[:-1]).all():         # the scanners write it in event order
        o = np.argsort(idx, kind="stable")
        idx, vals = idx[o], vals[o]
    for k, ev in enumerate(first_ev.tolist()):
        if ev >= 0:
            j = int(np.searchsorted(idx, ev))
            if j < idx.shape[0] and idx[j] == ev:
                out[k] = int(vals[j])
    return out


def build(path: str, scan: dict, progress=NULL):
    """Scan columns → Trace.

    The scan holds: interned ``names``/``cats`` with per-event ``name_ids``/``cat_ids``;
    ``track_keys`` (distinct (pid, tid)) with per-event ``track_ids``; ``ts_ps`` (int64,
    ps after ``base_us``), ``dur_ps``; ``stats`` {name: (event idx, int64 values)};
    ``string_stats`` {name: (event idx, int64 ids into ``stat_strings``)}, the texts;
    process/thread name maps; ``metadata``.  The per-event columns are popped from
    ``scan`` as they are used, so that each is freed once what replaces it exists (at
    20 M events every column is 80-160 MB).
    """
    warnings = list(scan["warnings"])
    n = int(scan["name_ids"].shape[0])
    if n == 0 and scan["n_raw"] == 0:
        raise TraceError(path, "trace has no events")
    strings = StringTable()
    name_ids = np.asarray(scan.pop("name_ids"), np.int32)
    for s_ in scan.pop("names"):      # the table holds them now (freed by its freeze)
        strings.intern(s_)
    names = strings.strings
    # the string stats' texts in the same table (ids of Trace.strings)
    text_ids = np.array([strings.intern(t) for t in scan.pop("stat_strings", ())], np.int32)
    string_stats = scan.pop("string_stats", {})
    for sname, (idx, ids) in string_stats.items():
        scan["stats"][sname] = (idx, text_ids[np.asarray(ids, np.int64)])
    cat_names = scan["cats"]
    cat_ids = np.asarray(scan.pop("cat_ids"), np.int32)
    ts_rel = np.asarray(scan.pop("ts_ps"), np.int64)
    dur_ps = np.asarray(scan.pop("dur_ps"), np.int64)
    base_us = int(scan["base_us"])
    bad = ts_rel == OUT_OF_RANGE
    if bad.any():
        warnings.append(f"{int(bad.sum())} events with timestamps or durations far outside the "
                        "trace (corrupt clock values) were skipped")
        scan = _drop_events(dict(scan, name_ids=name_ids, cat_ids=cat_ids, ts_ps=ts_rel,
                                 dur_ps=dur_ps, track_ids=scan.pop("track_ids")), ~bad)
        n = int(scan["name_ids"].shape[0])
        ts_rel, dur_ps = scan.pop("ts_ps"), scan.pop("dur_ps")
        name_ids = np.asarray(scan.pop("name_ids"), np.int32)
        cat_ids = np.asarray(scan.pop("cat_ids"), np.int32)
    del bad
    process_name = scan["process_name"]
    process_label = scan["process_label"]
    thread_name = scan["thread_name"]
    # relative to the earliest event; the absolute origin stays a Python int (epoch ps
    # overflow int64)
    shift = int(ts_rel.min()) if n else 0
    if shift and ts_rel.flags.writeable:
        ts_rel -= shift       # in place: the scan's column is this function's alone
    elif shift:
        ts_rel = ts_rel - shift
    origin = base_us * 1_000_000 + shift

    # ---- names and kinds, decided per distinct (name, category) ----
    progress.within(0.05, "names and kinds")
    n_cats = len(cat_names) + 1
    pair = name_ids.astype(np.int64) * n_cats + cat_ids
    uniq, inv = unique_inverse(pair)
    ukind = np.empty(uniq.shape[0], dtype=np.int8)
    for j, p in enumerate(uniq.tolist()):
        nm = names[p // n_cats]
        ct = cat_names[p % n_cats]
        if ct in DEVICE_ACTIVITY_CATS:
            ukind[j] = DEVICE_ACTIVITY_CATS[ct]
        elif ct in DEVICE_OTHER_CATS:
            ukind[j] = DEVICE_OTHER_CATS[ct]
        else:
            ukind[j] = classify.host_kind(nm, ct)
    kind = ukind[inv] if n else np.zeros(0, np.int8)
    del pair, inv
    cat_is_device = np.array([c in DEVICE_ACTIVITY_CATS or c in DEVICE_OTHER_CATS
                              for c in cat_names] + [False], dtype=bool)
    ev_device_cat = cat_is_device[cat_ids] if n else np.zeros(0, bool)
    del cat_ids

    # ---- tracks: decided per distinct (pid, tid), then broadcast ----
    progress.within(0.25, "threads and devices")
    track_keys = scan["track_keys"]
    track_ids = np.asarray(scan.pop("track_ids"), np.int32)
    raw_stats = scan.pop("stats")
    first_dev_ev = np.full(len(track_keys), -1, np.int64)
    dev_evs = np.flatnonzero(ev_device_cat)
    if dev_evs.size:
        first_dev_ev[track_ids[dev_evs[::-1]]] = dev_evs[::-1]   # earliest wins
    del dev_evs
    dev_of_track = _device_arg(raw_stats.get("device"), first_dev_ev)
    tracks = Tracks()
    devices: list[Device] = []
    device_by_id: dict = {}
    remap = np.empty(len(track_keys), np.int32)
    for k, (pid, tid) in enumerate(track_keys):
        if first_dev_ev[k] >= 0:
            dev_id = dev_of_track[k] if dev_of_track[k] is not None else pid
            d = device_by_id.get(dev_id)
            if d is None:
                label = process_label.get(pid, "") or process_label.get(dev_id, "")
                m = _DEVICE_LABEL.match(label)
                word = m.group(1).upper() if m else "GPU"
                disp = f"{word} {m.group(2)}" if m else f"GPU {dev_id}"
                d = device_by_id[dev_id] = len(devices)
                devices.append(Device(index=d, name=disp,
                                      kind={"GPU": "gpu", "MTIA": "mtia", "TPU": "tpu"}.get(
                                          word, "other"),
                                      source_id=str(dev_id)))
            stream = str(tid).replace("stream ", "")
            lbl = (f"{devices[d].name} · stream {stream}" if stream != "-1"
                   else f"{devices[d].name} · sync")
            remap[k] = tracks.add(TrackKind.DEVICE, d, f"stream {stream}", lbl,
                                  process_name.get(pid, devices[d].name))
        else:
            tname = thread_name.get((pid, tid)) or f"thread {tid}"
            remap[k] = tracks.add(TrackKind.HOST, -1, tname, tname,
                                  process_name.get(pid, f"process {pid}"))
    track = remap[track_ids] if n else np.zeros(0, np.int32)
    del track_ids

    # ---- stats ----
    progress.within(0.4, "launches and steps")
    stats = {sname: (idx, vals, sname in string_stats) for sname, (idx, vals) in
             raw_stats.items()}
    narrow_id_stats(stats)          # the correlation ids as int32 before they are linked
    corr = stats.get("correlation")
    link_args = (kind, ev_device_cat, corr[0] if corr else None, corr[1] if corr else None,
                 np.int32 if kind.shape[0] < 2**31 - 1 else np.int64)
    del ev_device_cat, corr     # assemble narrows its values: this reference would keep them
    # the links by correlation id are found on the second core while the steps and the
    # copies' kinds are found here
    with Beside(correlation_links, *link_args) if side_by_side(n) else nullcontext() as job:
        step_idx = np.flatnonzero(kind == K.STEP)
        if step_idx.size:
            step_names = {int(u): int(classify.STEP_NAME.match(names[u]).group(1))
                          for u in distinct(name_ids[step_idx]).tolist()}
            nums = np.array([step_names[int(u)] for u in name_ids[step_idx].tolist()], np.int64)
            stats["step_num"] = (step_idx, nums, False)
        mk_idx = np.flatnonzero(kind == K.MEMCPY)
        if mk_idx.size:
            u, inv_mk = unique_inverse(name_ids[mk_idx])
            mk = np.array([strings.intern(classify.memcpy_kind(names[x])) for x in u.tolist()],
                          np.int32)[inv_mk]
            stats["memcpy_kind"] = (mk_idx, mk, True)
        strings = strings.freeze()      # the last name is interned: see ``StringTable.freeze``
        del names
        links = job.result() if job is not None else correlation_links(*link_args)
    del link_args
    metadata = dict(scan["metadata"])
    # of libkineto's log lines, only what it lost
    losses = kineto_losses(metadata)
    for key in ("INFO", "WARNING"):
        metadata.pop(key, None)
    if losses:
        metadata["losses"] = losses
    metadata["process_names"] = {str(k): v for k, v in process_name.items()}
    events = {"ts": ts_rel, "dur": dur_ps, "track": track, "name": name_ids, "kind": kind}
    del ts_rel, dur_ps, track, name_ids, kind
    progress.within(0.6, "event order and nesting")
    trace = assemble(path, "kineto", strings, tracks, devices, events, stats, links, metadata,
                     warnings, origin_ps=0)
    trace.origin_ps = origin
    return trace
