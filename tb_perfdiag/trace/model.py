"""The one columnar trace model every reader produces and every analysis consumes.

Times are integer picoseconds relative to ``Trace.origin_ps`` (the earliest event of
the file), so XSpace's picosecond offsets and Kineto's nanosecond-resolution
microseconds both fit without loss.  Every per-event attribute is a numpy column;
nothing here holds a Python object per event.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from ..errors import TraceError  # noqa: F401 - lives below storage (which raises it too); re-exported
from .extension import native_fn


class TrackKind(enum.IntEnum):
    HOST = 0
    DEVICE = 1


class EventKind(enum.IntEnum):
    """What an event is, decided once by the reader so analyses never parse names."""

    OTHER = 0
    # device activity
    KERNEL = 1          # GPU kernel, TPU/XLA op
    MEMCPY = 2
    MEMSET = 3
    DEVICE_OTHER = 4    # device-side events that are not activity (module spans, annotations)
    # host activity
    CPU_OP = 10         # framework op (aten::*, XLA host-side work)
    ANNOTATION = 11     # user annotation: record_function, xp.Trace, TraceAnnotation
    STEP = 12           # a step annotation (ProfilerStep#N, StepTrace, step_num)
    PYTHON = 13         # python_function / python tracer frames
    LAUNCH = 14         # kernel launch / memcpy / memset runtime call that enqueues device work
    SYNC = 15           # host blocks until the device drains (stream/device/event synchronize)
    RUNTIME = 16        # other runtime/driver calls
    COMPILE = 17        # graph compilation
    TRANSFER_H2D = 18   # host-side host→device transfer call
    TRANSFER_D2H = 19   # host-side device→host transfer call
    EXECUTE = 20        # host-side "run this compiled program" call (XLA)
    DATA = 21           # data loading (DataLoader, user's data_loading annotation)
    COLLECTIVE = 22     # host-side collective call (c10d, NCCL)
    IDLE = 23           # markers a worker thread records while it has nothing to do
    ALLOC = 24          # device/pinned memory allocation or release (cudaMalloc, hipFree…)
    GRAPH_CAPTURE = 25  # CUDA/HIP graph capture or instantiation (a one-time cost)
    WAIT = 26           # a thread waiting for another thread's work (run_backward)


DEVICE_ACTIVITY = (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET)


class LinkKind(enum.IntEnum):
    CORRELATION = 0     # CUDA launch → kernel/memcpy (same correlation id)
    FLOW = 1            # XLA producer → consumer (_p/_pt → _c/_ct), Kineto ac2g flows
    MODULE_RUN = 2      # XLA execute call → device ops of that program run


@dataclass
class Device:
    index: int          # position in Trace.devices
    name: str           # "GPU 0", "TPU 3", "CPU (XLA)"
    kind: str           # "gpu" | "tpu" | "cpu" | "other"
    source_id: str = "" # the id the file used (plane name, Kineto pid)


@dataclass
class Coded:
    """Values held as ``table[codes]``: a stat that has one value per distinct key (the
    HLO op's scope, type and source, one per op) keeps the key column as its codes, so
    that stats of one key share it (three 76 MB columns fewer at 40 M events)."""

    codes: np.ndarray           # int32 per entry, into ``table`` (uint8/16 when ``own``)
    table: np.ndarray
    own: bool = False           # codes of its own (few values), not a key stat's values

    def take(self, k) -> np.ndarray:
        return self.table[self.codes[k]]

    def full(self) -> np.ndarray:
        return self.table[self.codes]


# events read a block at a time where a column over all of them is not needed
_BLOCK = 1 << 20
# events that share a base value in a coded ``Spread`` (a power of two dividing _BLOCK)
_SPREAD_BLOCK = 1 << 12
_SPREAD_CHUNK = 1 << 16         # events coded at a time (a multiple of _SPREAD_BLOCK)


class Spread:
    """Values held over all events, ``absent`` where an event has none: for a stat on
    nearly every event (a correlation id on 99.99 % of a 40 M-event trace is 305 MB as
    events and values, 152 MB as an int32 column).  Where the values of each block of
    ``_SPREAD_BLOCK`` events lie within 65 535 of each other (ids counted up along a
    thread or a stream), they are a 16-bit offset per event from their block's least
    value (76 MB); blocks wider than that (a thread's last ids and the next stream's
    first) keep their values as they are."""

    __slots__ = ("n", "absent", "dtype", "column", "codes", "bases", "wide_of", "wide")
    _NONE = 0xFFFF            # the code of an event without a value

    def __init__(self, column: np.ndarray, absent: int):
        self.n, self.absent, self.dtype = column.shape[0], int(absent), column.dtype
        self.column = column            # the plain column, or None when coded
        self.codes = self.bases = self.wide_of = self.wide = None
        self._code()

    def _code(self) -> None:
        col, b = self.column, _SPREAD_BLOCK
        n_blocks = -(-self.n // b)
        if self.n < _FEW_FROM or col.dtype.kind != "i":
            return
        bases = np.zeros(n_blocks, np.int64)
        wide = np.zeros(n_blocks, bool)
        # chunks of whole blocks, small: their temporaries came on top of the read's
        # columns (1 M events a chunk raised a 2 M-event read's peak by 20 MB)
        chunk = _SPREAD_CHUNK // b
        for i in range(0, n_blocks, chunk):
            part = col[i * b:(i + chunk) * b]
            k = -(-part.shape[0] // b)
            if part.shape[0] != k * b:                       # the last block, padded
                part = np.concatenate((part, np.full(k * b - part.shape[0], self.absent,
                                                     col.dtype)))
            part = part.reshape(k, b).astype(np.int64)
            has = part != self.absent
            lo = np.where(has, part, np.iinfo(np.int64).max).min(axis=1)
            hi = np.where(has, part, np.iinfo(np.int64).min).max(axis=1)
            lo = np.where(has.any(axis=1), lo, 0)
            bases[i:i + k] = lo
            wide[i:i + k] = has.any(axis=1) & (hi - lo >= self._NONE)
        wide_blocks = np.flatnonzero(wide)
        if wide_blocks.shape[0] * 8 > n_blocks:               # coding would save little
            return
        codes = np.empty(self.n, np.uint16)
        for i in range(0, self.n, _SPREAD_CHUNK):
            v = col[i:i + _SPREAD_CHUNK].astype(np.int64)
            c = v - np.repeat(bases[i // b:-(-(i + v.shape[0]) // b)], b)[:v.shape[0]]
            c[v == self.absent] = self._NONE
            np.copyto(codes[i:i + _SPREAD_CHUNK], c, casting="unsafe")
        self.wide_of = np.full(n_blocks, -1, np.int32)
        self.wide_of[wide_blocks] = np.arange(wide_blocks.shape[0], dtype=np.int32)
        rows = np.full((wide_blocks.shape[0], b), self.absent, col.dtype)
        for r, blk in enumerate(wide_blocks.tolist()):
            got = col[blk * b:(blk + 1) * b]
            rows[r, :got.shape[0]] = got
        self.codes, self.bases, self.wide = codes, bases, rows
        self.column = None

    def at(self, idx) -> np.ndarray:
        """The value of each event of ``idx`` (``absent`` where none)."""
        if self.column is not None:
            return self.column[idx]
        idx = np.asarray(idx)
        if idx.dtype.kind not in "iu":
            idx = np.arange(self.n)[idx]
        idx = np.where(idx < 0, idx + self.n, idx).astype(np.intp, copy=False)
        blk = idx // _SPREAD_BLOCK
        c = self.codes[idx]
        out = (self.bases[blk] + c).astype(self.dtype)
        out[c == self._NONE] = self.absent
        w = self.wide_of[blk]
        on = np.flatnonzero(w >= 0)
        if on.size:
            out[on] = self.wide[w[on], idx[on] % _SPREAD_BLOCK]
        return out

    def blocks(self):
        """(first event, values) of every event, a block of events at a time."""
        for i in range(0, self.n, _BLOCK):
            yield i, (self.column[i:i + _BLOCK] if self.column is not None else
                      self.at(np.arange(i, min(i + _BLOCK, self.n))))

    def events(self) -> np.ndarray:
        dt = np.int32 if self.n < 2**31 - 1 else np.int64
        parts = [(i + np.flatnonzero(v != self.absent)).astype(dt) for i, v in self.blocks()]
        return np.concatenate(parts) if parts else np.zeros(0, dt)

    def values(self) -> np.ndarray:
        parts = [v[v != self.absent] for _, v in self.blocks()]
        return np.concatenate(parts) if parts else np.zeros(0, self.dtype)

    @property
    def nbytes(self) -> int:
        if self.column is not None:
            return int(self.column.nbytes)
        return int(self.codes.nbytes + self.bases.nbytes + self.wide_of.nbytes +
                   self.wide.nbytes)


class Stat:
    """A sparse per-event column: ``values[k]`` belongs to event ``events[k]``."""

    __slots__ = ("_events", "is_string", "_held")

    def __init__(self, events: np.ndarray | None, values, is_string: bool = False):
        # int32 event indices (int64 past 2**31 events), ascending; None with ``Spread``
        self._events = events
        self._held = values         # int64 / float64 / int32 string ids, Coded or Spread
        self.is_string = is_string  # values index Trace.strings

    @property
    def events(self) -> np.ndarray:
        """The events that have a value (a new array when the values are spread)."""
        v = self._held
        return v.events() if isinstance(v, Spread) else self._events

    @property
    def values(self) -> np.ndarray:
        """All values (a new array when they are held coded or spread)."""
        v = self._held
        if isinstance(v, Spread):
            return v.values()
        return v.full() if isinstance(v, Coded) else v

    @property
    def coded(self) -> Coded | None:
        return self._held if isinstance(self._held, Coded) else None

    @property
    def spread(self) -> bool:
        """Held as a column over all events (``events`` is then made on each call)."""
        return isinstance(self._held, Spread)

    def take(self, k) -> np.ndarray:
        """``values[k]``, without all the values when they are held coded."""
        v = self._held
        if isinstance(v, Spread):
            return v.at(self.events[k])
        return v.take(k) if isinstance(v, Coded) else v[k]

    def lookup(self, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(values, has): the value of each event of ``at`` and whether it has one (the
        value there is meaningless where not)."""
        at = np.asarray(at)
        v = self._held
        if isinstance(v, Spread):
            got = v.at(at)
            return got, got != v.absent
        ev = self._events
        if ev.shape[0] == 0 or at.shape[0] == 0:
            # the values' type from an empty take (``values`` would expand coded ones)
            return np.zeros(at.shape[0], self.take(np.zeros(0, np.intp)).dtype
                            if ev.shape[0] else np.int64), np.zeros(at.shape[0], bool)
        k = np.minimum(np.searchsorted(ev, at), ev.shape[0] - 1)
        return self.take(k), ev[k] == at

    def nbytes(self) -> int:
        """Bytes of its own (a coded stat's codes are its key's)."""
        v = self._held
        if isinstance(v, Spread):
            return v.nbytes
        if isinstance(v, Coded):
            return self._events.nbytes + v.table.nbytes + (v.codes.nbytes if v.own else 0)
        return self._events.nbytes + v.nbytes

    def dense(self, n: int, fill=-1) -> np.ndarray:
        v = self._held
        if isinstance(v, Spread):
            out = np.empty(n, v.dtype if v.dtype.kind in "iuf" else np.int64)
            for i, got in v.blocks():
                out[i:i + got.shape[0]] = np.where(got == v.absent, fill, got)
            return out
        values = self.values
        dtype = values.dtype if values.dtype.kind in "iuf" else np.int64
        out = np.full(n, fill, dtype=dtype)
        out[self.events] = values
        return out


def lookup_together(stats, at: np.ndarray) -> list:
    """``[stat.lookup(at) for stat in stats]`` (None for a None stat), with one search of
    ``at`` for the stats that share their events column (an XSpace op's metadata stats:
    three searches of 480 k ops were two thirds of its cost lookup)."""
    at = np.asarray(at)
    out, found = [], {}
    for st in stats:
        if st is None:
            out.append(None)
            continue
        ev = st._events
        if isinstance(st._held, Spread) or ev is None or ev.shape[0] == 0 or at.shape[0] == 0:
            out.append(st.lookup(at))
            continue
        got = found.get(id(ev))
        if got is None or got[0] is not ev:
            got = found[id(ev)] = (ev, *_positions(ev, at))
        out.append((st.take(got[1]), got[2]))
    return out


def _positions(ev: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the position in ``ev`` (ascending) of each of ``at``, clipped; whether it is
    there).  Through a table of positions over ``at``'s range where that is not much
    longer than the two (2 ms against a search's 9 ms for 480 k ops of 2 M events); the
    table covers ``at``'s range alone, so that a block of ops costs its own span."""
    lo, hi = int(at.min()), int(at.max())
    i0, i1 = (int(x) for x in np.searchsorted(ev, [lo, hi + 1]))
    if hi - lo < 8 * (i1 - i0 + at.shape[0]) + 4096:
        wide = ev.shape[0] >= 2**31
        pos = np.full(hi - lo + 1, -1, np.int64 if wide else np.int32)
        pos[ev[i0:i1] - lo] = np.arange(i0, i1, dtype=pos.dtype)
        k = pos[at - lo]
        del pos
        has = k >= 0
        return np.maximum(k, 0), has
    k = np.minimum(np.searchsorted(ev, at), ev.shape[0] - 1)
    return k, ev[k] == at


def spread_if_dense(stat: Stat, n: int, shared: bool) -> Stat:
    """``stat`` held as a column over all ``n`` events (``Spread``) where it is on more
    than three quarters of them, its values are integers with a value they never take
    (the least of their type) and no other stat shares its events; else as it is."""
    v = stat._held
    ev = stat._events
    if shared or isinstance(v, (Coded, Spread)) or ev is None or ev.shape[0] * 4 <= n * 3 \
            or v.dtype.kind != "i":
        return stat
    absent = int(np.iinfo(v.dtype).min)
    if int(v.min()) == absent:
        return stat
    col = np.full(n, absent, v.dtype)
    col[ev] = v
    return Stat(None, Spread(col, absent), stat.is_string)


# a stat of fewer events is left as it is: its codes would save nothing worth a pass
_FEW_FROM = 1 << 16
# values sampled to find the few of a wide range
_SAMPLE = 4096


def codes_over_range(v: np.ndarray, lo: int, hi: int):
    """(a uint8/uint16 code per value, the distinct values ascending) of an integer column
    whose values lie in [lo, hi], found by a mark per value of the range, a block at a
    time; None past 65 536 distinct values."""
    present = np.zeros(hi - lo + 1, bool)
    for i in range(0, v.shape[0], _BLOCK):
        present[v[i:i + _BLOCK] - lo] = True
    u = np.flatnonzero(present)
    del present
    if u.shape[0] > 1 << 16:
        return None
    code_type = np.uint8 if u.shape[0] <= 1 << 8 else np.uint16
    lut = np.zeros(hi - lo + 1, code_type)
    lut[u] = np.arange(u.shape[0], dtype=code_type)
    codes = np.empty(v.shape[0], code_type)
    for i in range(0, v.shape[0], _BLOCK):
        codes[i:i + _BLOCK] = lut[v[i:i + _BLOCK] - lo]
    return codes, (u + lo).astype(v.dtype)


def narrowest_int(n: int) -> np.dtype:
    """The narrowest signed type holding 0..``n`` and −1 (a step or track index, "none",
    and ``n`` itself, which passes use for "none" and searches as a bound: a bound past
    the column's type would have numpy cast the whole column)."""
    for t in (np.int8, np.int16, np.int32):
        if n < np.iinfo(t).max:
            return np.dtype(t)
    return np.dtype(np.int64)


def coded_if_few(stat: Stat) -> Stat:
    """``stat`` held as one- or two-byte codes into a table of its distinct values
    (``Coded``, its own codes) where its values are integers of few distinct values: at
    most 65536 within a range of 2**24 (found by a table over the range), or at most
    256 anywhere (found in a sample, then checked on every value).  A program id or a
    module on every HLO op, a device or stream on every kernel: 76–152 MB each at 40 M
    events, 19 so.  Else as it is."""
    v = stat._held
    if isinstance(v, (Coded, Spread)) or v.dtype.kind not in "iu" or v.shape[0] < _FEW_FROM:
        return stat
    lo, hi = int(v.min()), int(v.max())
    if hi - lo < 1 << 24:
        got = codes_over_range(v, lo, hi)
        if got is None:
            return stat
        return Stat(stat._events, Coded(got[0], got[1], own=True), stat.is_string)
    table = np.unique(v[::max(1, v.shape[0] // _SAMPLE)])
    if table.shape[0] > 1 << 8:
        return stat
    codes = np.empty(v.shape[0], np.uint8)
    for i in range(0, v.shape[0], _BLOCK):
        block = v[i:i + _BLOCK]
        k = np.minimum(np.searchsorted(table, block), table.shape[0] - 1)
        if (table[k] != block).any():        # a value the sample missed
            return stat
        codes[i:i + _BLOCK] = k
    return Stat(stat._events, Coded(codes, table, own=True), stat.is_string)


def isin_few(kind: np.ndarray, kinds) -> np.ndarray:
    """``np.isin(kind, kinds)`` for an integer column and a few values (event kinds, name
    ids): a comparison per run of consecutive values.  ``np.isin`` took 0.16–0.4 s over
    a 40 M-event column, this 30 ms."""
    vals = sorted({int(k) for k in kinds})
    out = np.zeros(kind.shape, bool)
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        out |= (kind == vals[i]) if i == j else ((kind >= vals[i]) & (kind <= vals[j]))
        i = j + 1
    return out


def track_counts(tracks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(tracks, return_counts=True)`` for track ids (small, non-negative) by
    counting: the sort took 0.3 s over a 40 M-event trace's Python frames."""
    cnt = np.bincount(tracks) if tracks.size else np.zeros(0, np.int64)
    tr = np.flatnonzero(cnt)
    return tr, cnt[tr]


def search(a: np.ndarray, v, side: str = "left") -> np.ndarray:
    """``np.searchsorted(a, v, side)`` for an integer column narrower than ``v``: numpy
    would first cast all of ``a`` to ``v``'s type, a copy of the column at every call (an
    int32 track or event column searched for int64 values: 10 % of a TPU diagnosis).
    ``v`` is narrowed instead where its values fit."""
    v = np.asarray(v)
    if a.dtype != v.dtype and a.dtype.kind in "iu" and v.dtype.kind in "iu" and v.size:
        info = np.iinfo(a.dtype)
        if info.min <= v.min() and v.max() <= info.max:
            v = v.astype(a.dtype)
    if v.ndim == 1 and v.shape[0] >= 4096 and a.ndim == 1 and a.shape[0] <= 32 * v.shape[0] \
            and a.dtype == v.dtype and a.dtype in (np.int32, np.int64) \
            and a.flags.c_contiguous and v.flags.c_contiguous:
        # many keys: one merge of the two when the keys are sorted (ops searched in a
        # stat's events), else a branch-free binary search each (host events in steps)
        fn = native_fn("sorted_search")
        got = fn(a, v, a.dtype.itemsize, side == "right") if fn is not None else None
        if got is not None:
            return np.frombuffer(got, np.int64)
    return np.searchsorted(a, v, side=side)


@dataclass
class Trace:
    path: str
    format: str                         # "xspace" | "kineto"
    origin_ps: int                      # absolute time of t=0, ps since the Unix epoch when known
    strings: list                       # interned strings; names and string stats index this
    # tracks (one row per host thread or device stream/line)
    track_kind: np.ndarray              # int8 TrackKind
    track_device: np.ndarray            # int32 index into devices, -1 for host tracks
    track_name: list                    # raw name (thread name, "Stream #7", "XLA Ops")
    track_label: list                   # display name ("GPU 0 · stream 7", "python")
    track_group: list                   # process / plane the track belongs to
    devices: list                       # list[Device]
    # events, sorted by (track, ts, -dur)
    ts: np.ndarray                      # int64 ps
    dur: np.ndarray                     # int64 ps
    track: np.ndarray                   # int8, int16 past 126 tracks, int32 past 32766
    name: np.ndarray                    # int32 index into strings
    kind: np.ndarray                    # int8 EventKind
    depth: np.ndarray                   # int8 nesting depth on its track (0 = outermost;
                                        # int16 where some event is deeper than 127)
    parent: np.ndarray                  # int32 enclosing event on the same track, -1 if none
    stats: dict = field(default_factory=dict)   # name → Stat
    # links (src → dst event indices)
    link_src: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    link_dst: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    link_kind: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    metadata: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    # bytes the read had in numpy's and the extension's arrays at its peak (0: unknown):
    # the analysis may keep freed pages up to it (``trace.pages``)
    read_peak: int = 0
    # the traces recorded while its CUDA/HIP graphs were captured (``graph_captures``)
    captures: list = field(default_factory=list)

    # ---- conveniences (cheap, vectorised) ----
    @property
    def n_events(self) -> int:
        return int(self.ts.shape[0])

    @property
    def end(self) -> np.ndarray:
        """End of every event (a new array each time: prefer ``end_of`` for a subset)."""
        return self.ts + self.dur

    def end_of(self, idx) -> np.ndarray:
        """End of the events ``idx``, without an end column over all events."""
        return self.ts[idx] + self.dur[idx]

    def last_end(self) -> int:
        """The latest end of any event, a block at a time (an end column over all events
        was 305 MB at 40 M events, at the analysis' peak)."""
        if self.n_events == 0:
            raise ValueError("a trace with no events has no last end")
        return max(int((self.ts[i:i + _BLOCK] + self.dur[i:i + _BLOCK]).max())
                   for i in range(0, self.n_events, _BLOCK))

    def stat(self, name: str, fill=-1) -> np.ndarray:
        """Dense column of a stat (``fill`` where absent)."""
        s = self.stats.get(name)
        if s is None:
            return np.full(self.n_events, fill, dtype=np.int64)
        return s.dense(self.n_events, fill)

    def stat_str(self, name: str, event: int):
        s = self.stats.get(name)
        if s is None:
            return None
        got, has = s.lookup(np.array([event], np.int64))
        if has[0]:
            v = got[0]
            return self.strings[int(v)] if s.is_string else v.item()
        return None

    def event_name(self, i: int) -> str:
        return self.strings[int(self.name[i])]

    def device_tracks(self, device: int | None = None) -> np.ndarray:
        mask = self.track_kind == TrackKind.DEVICE
        if device is not None:
            mask &= self.track_device == device
        return np.flatnonzero(mask)

    def host_tracks(self) -> np.ndarray:
        return np.flatnonzero(self.track_kind == TrackKind.HOST)

    def host_events_where(self, pred) -> np.ndarray:
        """Indices (ascending) of the host events where ``pred(lo, hi)``, a mask over
        events [lo, hi), holds: asked a block of a host track at a time, so that no mask
        spans all events (five of them were 0.2 GB at 40 M events)."""
        return self._events_where(self.host_tracks(), pred, np.int64)

    def _events_where(self, tracks, pred, dtype) -> np.ndarray:
        """Indices (ascending, as ``dtype``) of the events of ``tracks`` where
        ``pred(lo, hi)``, a mask over events [lo, hi), holds: a block of a track at a
        time (no mask or int64 index over a whole track)."""
        parts = []
        for lo, hi in self.track_slices(tracks):
            for a in range(lo, hi, _BLOCK):
                got = np.flatnonzero(pred(a, min(a + _BLOCK, hi)))
                got += a
                parts.append(got.astype(dtype, copy=False))
        return np.concatenate(parts) if parts else np.zeros(0, dtype)

    def events_on_tracks(self, tracks) -> np.ndarray:
        return np.flatnonzero(np.isin(self.track, np.asarray(tracks)))

    def device_of_event(self) -> np.ndarray:
        return self.track_device[self.track]

    def is_device_activity(self, kernels_only: bool = False, lo: int = 0,
                           hi: int | None = None) -> np.ndarray:
        """Mask of device work (kernels, copies, sets) over events [lo, hi)."""
        kind = self.kind[lo:hi]
        if kernels_only:
            return kind == EventKind.KERNEL
        return isin_few(kind, DEVICE_ACTIVITY)

    def activity_of(self, device: int, host_tracks: bool = True,
                    kernels_only: bool = False) -> np.ndarray:
        """Indices (ascending) of a device's activity (kernels, copies, sets; kernels
        alone with ``kernels_only``), read from its tracks' slices: no mask over all
        events (a TPU trace's are three quarters host events).  ``host_tracks``: whether
        host tracks of the device count.  int32 below 2**31 events, like the model's
        other event indices (a device of 20 M ops: 80 MB fewer through the gap loop),
        found a block of a track at a time (no int64 index of a whole track)."""
        tracks = np.flatnonzero(self.track_device == device)
        if not host_tracks:
            tracks = tracks[self.track_kind[tracks] != TrackKind.HOST]
        return self._events_where(
            tracks, lambda a, b: self.is_device_activity(kernels_only, a, b),
            np.int32 if self.n_events < 2**31 - 1 else np.int64)

    def track_slices(self, tracks) -> list:
        """(lo, hi) event range of each track (events are sorted by track)."""
        t = np.asarray(tracks, np.int64)
        return list(zip(search(self.track, t, side="left").tolist(),
                        search(self.track, t, side="right").tolist()))

    def track_bounds(self) -> np.ndarray:
        """Each track's first event and, last, the number of events: events are sorted
        by track, so track t is events [bounds[t], bounds[t + 1])."""
        return search(self.track, np.arange(len(self.track_kind) + 1))

    def nested_levels(self):
        """(events, their parents) one nesting level at a time, outermost first: lets a
        value flow from every event to the events it encloses in depth-many array steps."""
        if self.n_events == 0:
            return
        # only the nested events, by depth (int8 or int16: a radix sort); level 0 has no parent
        nested = np.flatnonzero(self.depth > 0)
        if nested.size == 0:
            return
        d = self.depth[nested]
        by_depth = nested[np.argsort(d, kind="stable")]
        del nested
        bounds = search(np.sort(d), np.arange(int(d.max()) + 2))
        del d
        for d in range(1, bounds.shape[0] - 1):
            idx = by_depth[bounds[d]:bounds[d + 1]]
            p = self.parent[idx]
            ok = p >= 0
            yield idx[ok], p[ok]

    def chain(self, i: int) -> list:
        """Enclosing events of ``i``, outermost first, ending with ``i`` itself."""
        out = []
        while i >= 0:
            out.append(int(i))
            i = int(self.parent[i])
        return out[::-1]

    def steps_hint(self) -> list:
        """(step number, event index) of step-annotation events, in time order."""
        idx = np.flatnonzero(self.kind == EventKind.STEP)
        host = self.track_kind[self.track[idx]] == TrackKind.HOST
        if host.any():
            idx = idx[host]          # host step annotations; device Steps lines mirror them
        elif idx.size:
            idx = idx[self.track[idx] == self.track[idx[0]]]   # one device's Steps line
        if idx.size == 0:
            return []
        num = self.stat("step_num")[idx]
        order = np.argsort(self.ts[idx], kind="stable")
        return [(int(num[k]), int(idx[k])) for k in order]

    def summary(self) -> dict:
        counts = np.bincount(self.track, minlength=len(self.track_name)) if self.n_events else \
            np.zeros(len(self.track_name), np.int64)
        span = (int(self.ts.min()), int(self.end.max())) if self.n_events else (0, 0)
        return {
            "path": self.path,
            "format": self.format,
            "events": self.n_events,
            "span_ps": span,
            "devices": [d.name for d in self.devices],
            "tracks": [
                {"label": self.track_label[t], "kind": TrackKind(self.track_kind[t]).name.lower(),
                 "device": (self.devices[self.track_device[t]].name
                            if self.track_device[t] >= 0 else None),
                 "events": int(counts[t])}
                for t in range(len(self.track_name))
            ],
            "steps": [n for n, _ in self.steps_hint()],
            "warnings": list(self.warnings),
        }
