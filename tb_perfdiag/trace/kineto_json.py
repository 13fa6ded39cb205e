"""The reference Chrome-trace JSON scanner (``scan_python``, ``PythonStream``): the text
of a Kineto trace → the flat columns ``kineto.build`` reads, where the native scanner
is not built or refuses a file."""
from __future__ import annotations

import re

import numpy as np
import orjson

from .build import StringTable
from .chrome_meta import METADATA_KEYS, metadata_event
from .model import TraceError


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
    # a device event replayed from a CUDA graph: its graph and the graph node that ran it
    # (Kineto's libkineto/src/CuptiActivity.cpp, getGraphNodeMetadata: CUDA ≥ 12, kernels,
    # copies and sets; 0 for work launched one by one)
    "graph_id": ("graph id",),
    "graph_node_id": ("graph node id",),
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
    # a graph kernel's annotation: torch's torch.cuda._annotate_cuda_graph_trace writes
    # the ``mark_kernels`` scope (torch.cuda.graph(enable_annotations=True)) into the
    # args of each event with a nonzero "graph node id", a bare name under "name"; kept
    # on those events only (elsewhere "name" in args means other things)
    "graph_annotation": "name",
}


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


def scan_python(path: str, raw: bytes, chunk: int | None = None) -> dict:
    """Reference scanner: bytes → flat columns (see ``build`` for the contract), fed to
    ``PythonStream`` whole or ``chunk`` bytes at a time."""
    st = PythonStream(path)
    step = chunk or max(len(raw), 1)
    view = memoryview(raw)
    for at in range(0, len(raw), step):
        st.feed(bytes(view[at:at + step]))
    return st.finish()


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
                gn = a.get("graph node id")
                graphed = isinstance(gn, (int, float)) and not isinstance(gn, bool) and gn != 0
                for sname, key in STRING_STAT_ARGS.items():
                    v = a.get(key)
                    if sname == "graph_annotation":
                        if not (graphed and isinstance(v, str)):
                            continue
                    elif not (isinstance(v, list) or
                              (isinstance(v, str) and sname == "launch_kernel")):
                        continue
                    string_vals[sname][0].append(k)
                    string_vals[sname][1].append(stat_strings.intern(orjson.dumps(v).decode()))
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
