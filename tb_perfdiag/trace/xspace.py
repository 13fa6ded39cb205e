"""Reader for XSpace (``*.xplane.pb``: JAX, PyTorch/XLA, TensorFlow) → ``Trace``.

Two stages: a *scan* turns the protobuf bytes into flat columns (the native
scanner when it is built, else the reference scanner below, which walks upb
messages), and ``build`` turns columns into the trace model.  Only plane
metadata (event/stat metadata maps, plane stats) is kept as protobuf messages.
"""
from __future__ import annotations

import os
import re
import struct

import numpy as np
from google.protobuf.message import DecodeError

from ..beside import Beside, side_by_side
from ..progress import NULL
from ..storage import read_bytes
from . import classify, pages
from .build import (StringTable, Tracks, assemble, correlation_links, map_distinct,
                    narrow_id_stats, small_ids, unique_inverse, unique_rows)
from .hlo import FIELDS as HLO_FIELDS, hlo_op_metadata
from .losses import xspace_losses
from .model import Coded, Device, EventKind as K, LinkKind, TraceError, TrackKind, search
from .xplane_pb import MemoryAccessBreakdown, XPlane, XSpace
from .xspace_stats import STATS, STR_STATS

# stat value kinds in scan columns
ST_NONE, ST_DOUBLE, ST_UINT, ST_INT, ST_STR, ST_BYTES, ST_REF = range(7)
_ONEOF_KIND = {"double_value": ST_DOUBLE, "uint64_value": ST_UINT, "int64_value": ST_INT,
               "str_value": ST_STR, "bytes_value": ST_BYTES, "ref_value": ST_REF}

_DEVICE_PLANE = re.compile(r"^/device:(GPU|TPU|CPU|[A-Za-z_]+):(\d+)")
# what an event's metadata may say about every event of that metadata (TPU ops keep their
# program id and scope there); per-event facts (correlation, flows, steps) never come from it
MD_INT_STATS = ("program_id",)
MD_STR_STATS = ("hlo_op", "hlo_module", "tf_op", "hlo_category", "source", "shape",
                "graph_hash")
# XLA's cost figures of an op (TPU planes keep them on the op's metadata): one row per
# metadata entry in ``Trace.metadata["xla_op_costs"]``, never a column over events
MD_COST_STATS = ("flops", "model_flops", "bytes_accessed")
# and its bytes per memory space (a serialized MemoryAccessBreakdown, TPU planes)
MD_BREAKDOWN_STAT = "memory_access_breakdown"
# xprof's PerformanceInfo.MemoryAccessed.MemorySpace and OpMetrics.MemoryAccessed.
# OperationType: the spaces and directions its roofline judges an op against
_HBM_SPACE, _CMEM_SPACE, _VMEM_SPACE = 1, 2, 3
_READ, _WRITE = 1, 2
# the on-chip (space, direction) pairs kept per op, in the order of ``ONCHIP_RW``
ONCHIP_RW = ("cmem_read", "cmem_write", "vmem_read", "vmem_write")
_ONCHIP_RW_KEY = {(_CMEM_SPACE, _READ): 0, (_CMEM_SPACE, _WRITE): 1, (_VMEM_SPACE, _READ): 2,
                  (_VMEM_SPACE, _WRITE): 3}
# an HLO instruction's metadata name: "%fusion.3 = f32[8]{0} fusion(…)"
_HLO_TEXT = re.compile(r"^%([^\s=]+) = ")
_HLO_OPERAND_TYPE = re.compile(r"^%[^\s=]+ = .*?[a-z-]+\(\s*([a-z][a-z0-9]*)\[")
_LUT_MAX = 1 << 22
_NAME_BLOCK = 1 << 20


def _double_bits(v: float) -> int:
    return struct.unpack("<q", struct.pack("<d", v))[0]


def scan_python(path: str, raw: bytes, wanted=STATS) -> dict:
    """Reference scanner: XSpace bytes → flat columns (contract documented in ``build``);
    of the stats only those named in ``wanted``."""
    space = XSpace()
    try:
        space.ParseFromString(raw)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise TraceError(path, f"not a valid XSpace protobuf ({e}); truncated or corrupt?") \
            from None
    planes, lines = [], []
    ev_line, ev_meta, ev_off, ev_dur = [], [], [], []
    rows = {name: ([], [], []) for name in wanted}     # events, values, kinds
    strings: dict = {}
    for pi, plane in enumerate(space.planes):
        code = {k: rows[m.name] for k, m in plane.stat_metadata.items() if m.name in rows}
        meta = XPlane()
        meta.CopyFrom(plane)
        meta.ClearField("lines")
        planes.append((plane.id, plane.name, meta.SerializeToString()))
        for line in plane.lines:
            li = len(lines)
            lines.append((pi, line.id, line.display_id, line.name, line.display_name,
                          line.timestamp_ns, line.duration_ps))
            for ev in line.events:
                e = len(ev_line)
                ev_line.append(li)
                ev_meta.append(ev.metadata_id)
                ev_off.append(ev.offset_ps)
                ev_dur.append(ev.duration_ps)
                for st in ev.stats:
                    out = code.get(st.metadata_id)
                    if out is None:
                        continue
                    which = st.WhichOneof("value")
                    k = _ONEOF_KIND.get(which, ST_NONE)
                    if k == ST_DOUBLE:
                        v = _double_bits(st.double_value)
                    elif k in (ST_STR, ST_BYTES):
                        v = st.str_value.encode() if k == ST_STR else st.bytes_value
                        v = strings.setdefault(v, len(strings))
                    else:
                        v = getattr(st, which) if which else 0
                        v = v if v < 2**63 else v - 2**64
                    out[0].append(e)
                    out[1].append(v)
                    out[2].append(k)
    if len(ev_line) > 2**31 - 1:
        raise TraceError(path, "more than 2**31 - 1 events: too many to read")
    return {
        "planes": planes, "lines": lines,
        "ev_line": np.asarray(ev_line, np.int32), "ev_meta": np.asarray(ev_meta, np.int64),
        "ev_offset_ps": np.asarray(ev_off, np.int64), "ev_dur_ps": np.asarray(ev_dur, np.int64),
        "stats": {name: (np.asarray(e, np.int32), np.asarray(v, np.int64),
                         np.asarray(k, np.int8))
                  for name, (e, v, k) in rows.items() if e},
        "strings": list(strings),
        "hostnames": list(space.hostnames), "errors": list(space.errors),
        "warnings": list(space.warnings),
    }


def looks_like(head: bytes) -> bool:
    # field 1 (planes), wire type 2 → tag byte 0x0a
    return head[:1] == b"\x0a"


def read(path: str, raw: bytes | None = None):
    return build(path, scan(path, read_bytes(path) if raw is None else raw))


def scan(path: str, raw: bytes, progress=None) -> dict:
    """File bytes → flat columns (native scanner when built, else the reference one);
    ``progress`` follows the native scanner's position."""
    if not raw:
        raise TraceError(path, "empty file (0 bytes): the profiler wrote nothing, or is still writing")
    cols = None
    try:
        if os.environ.get("TB_PERFDIAG_NO_NATIVE"):
            raise ImportError
        from . import native_scan  # the C scanner, built from native/ by setup.py; optional
    except ImportError:
        native_scan = None
    if native_scan is not None:
        try:
            cols = native_scan.scan_xspace(raw, progress)
        except ValueError:
            cols = None  # the reference scanner names the problem precisely
    if cols is None:
        cols = scan_python(path, raw)
    return cols


def mapped_scanner():
    """The native scanner's entry for a read-only file mapping
    (``native_scan.scan_xspace_mapped``), or None where there is none (extension not
    built, ``TB_PERFDIAG_NO_NATIVE``, not POSIX): the caller then reads the file."""
    if os.environ.get("TB_PERFDIAG_NO_NATIVE"):
        return None
    try:
        from . import native_scan
    except ImportError:
        return None
    return native_scan.scan_xspace_mapped if native_scan.HAS_MAPPED else None


class _PlaneMeta:
    """Event/stat metadata of one plane as lookup arrays.

    From the native scanner's tables (ids, names, shown names, {stat id: name}) when it
    made them: iterating 60 k protobuf map entries in Python costs ~0.1 s on a 2 M-event
    file; else from the parsed plane.  The parsed plane (``msg``) is made on first use
    (its stats, the Hlo Protos of /host:metadata).
    """

    def __init__(self, path: str, pname: str, meta_bytes: bytes, strings: StringTable,
                 tables=None):
        self._path, self._pname, self._bytes, self._msg = path, pname, meta_bytes, None
        if tables is None:
            meta = self.msg
            self.stat_name = {k: v.name for k, v in meta.stat_metadata.items()}
            # one pass over the map (a lookup per id into a protobuf map is slow)
            items = list(meta.event_metadata.items())
            ids = np.fromiter((k for k, _ in items), np.int64, len(items))
            raw = [m.name for _, m in items]
            shown = [m.display_name or r for (_, m), r in zip(items, raw)]
            self.md_stat_ids = [k for k, m in items if len(m.stats)]
        else:
            id_bytes, raw, shown, self.stat_name, *more = tables
            ids = np.frombuffer(id_bytes, np.int64)
            # scanners that do not say which entries have stats: look at every entry
            self.md_stat_ids = np.frombuffer(more[0], np.int64).tolist() if more else None
        o = np.argsort(ids, kind="stable")
        ids = ids[o]
        if ids.shape[0] > 1 and (ids[1:] == ids[:-1]).any():
            # a map keeps the last entry of a repeated key
            last = np.ones(ids.shape[0], bool)
            last[:-1] = ids[1:] != ids[:-1]
            o, ids = o[last], ids[last]
        self.ev_ids = ids
        self.ev_name_id = strings.intern_many([shown[i] for i in o.tolist()])

    @property
    def msg(self) -> XPlane:
        if self._msg is None:
            m = XPlane()
            try:
                m.ParseFromString(self._bytes)
            except DecodeError as e:
                raise TraceError(self._path, f"corrupt plane metadata in {self._pname!r}: "
                                             f"{e}") from None
            self._msg = m
        return self._msg

    def stat_id(self, name: str):
        return [k for k, v in self.stat_name.items() if v == name]

    def op_stats(self, device: bool):
        """The stats event metadata entries carry for all their events: (sorted metadata
        ids, {stat: (rows into those ids, values, is_string)}).  On a device plane an
        entry named by its HLO text (``%name = …``, TPU ops) also gives the ``hlo_op``."""
        ids = self.md_stat_ids
        meta = self.msg.event_metadata
        # (hlo_op, program_id, flops, model_flops, bytes_accessed, HBM bytes, on-chip
        # bytes, element type text)
        self.op_costs = []
        if ids is None:
            ids = [k for k, m in meta.items() if len(m.stats)]
        if not ids:
            return np.zeros(0, np.int64), {}
        ids = sorted(set(ids))
        cols: dict = {}
        for row, k in enumerate(ids):
            md = meta[k]
            got = {}
            for st in md.stats:
                sname = self.stat_name.get(st.metadata_id)
                if sname in MD_INT_STATS:
                    which = st.WhichOneof("value")
                    v = getattr(st, which) if which in ("int64_value", "uint64_value") else None
                    if which == "double_value":
                        v = int(st.double_value)
                    if v is not None:
                        got[sname] = v - 2**64 if v >= 2**63 else v
                elif sname in MD_STR_STATS:
                    which = st.WhichOneof("value")
                    if which == "str_value":
                        got[sname] = st.str_value
                    elif which == "ref_value":
                        got[sname] = self.stat_name.get(st.ref_value, "")
            if device and "hlo_op" not in got:
                m = _HLO_TEXT.match(md.name)
                if m:
                    got["hlo_op"] = m.group(1)
            if device:
                cost = _cost_of(md.stats, self.stat_name)
                if cost is not None and "hlo_op" in got:
                    # the element type the op computed in: its first operand's (a
                    # bf16 dot may write f32), else its result's
                    m = _HLO_OPERAND_TYPE.search(md.name) or _HLO_TEXT.match(md.name)
                    shape = (m.group(1) if m.re is _HLO_OPERAND_TYPE else
                             md.name[m.end():].split(" ", 1)[0]) if m else ""
                    self.op_costs.append((got["hlo_op"], got.get("program_id", -1), *cost,
                                          shape))
            for sname, v in got.items():
                rows, vals = cols.setdefault(sname, ([], []))
                rows.append(row)
                vals.append(v)
        out = {sname: (np.asarray(rows, np.int64), vals, sname in MD_STR_STATS)
               for sname, (rows, vals) in cols.items()}
        return np.asarray(ids, np.int64), out

    def plane_stats(self) -> dict:
        """The plane's own numeric and string stats (a device's peaks and properties:
        ``peak_teraflops_per_second``, ``clock_rate``, ``core_count``…)."""
        out = {}
        for st in self.msg.stats:
            sname = self.stat_name.get(st.metadata_id)
            which = st.WhichOneof("value")
            if sname and which in ("double_value", "int64_value", "uint64_value",
                                   "str_value"):
                out[sname] = getattr(st, which)
        return out

    def names_of(self, meta_ids: np.ndarray, strings: StringTable,
                 out: np.ndarray | None = None) -> np.ndarray:
        """The name id of each event's metadata (``<unknown>`` where the plane has none
        of that id), into ``out`` (int32) when given, a block of events at a time: the
        masks and gathers over a 20 M-event plane at once were 0.4 GB at the read's
        peak."""
        unknown = strings.intern("<unknown>")
        n = meta_ids.shape[0]
        if out is None:
            out = np.empty(n, np.int32)
        ids = self.ev_ids
        if not ids.shape[0]:
            out[:] = unknown
            return out
        lut = None
        if 0 <= ids[0] and ids[-1] < _LUT_MAX:
            # metadata ids are small dense integers: a lookup table beats a binary search
            lut = np.full(int(ids[-1]) + 1, unknown, np.int32)
            lut[ids] = self.ev_name_id
        for i in range(0, n, _NAME_BLOCK):
            m = meta_ids[i:i + _NAME_BLOCK]
            if lut is not None:
                ok = (m >= 0) & (m < lut.shape[0])
                got = lut[np.where(ok, m, 0)]
            else:
                pos = np.minimum(np.searchsorted(ids, m), ids.shape[0] - 1)
                ok = ids[pos] == m
                got = self.ev_name_id[pos]
            np.copyto(out[i:i + _NAME_BLOCK], np.where(ok, got, unknown), casting="unsafe")
        return out


def build(path: str, scan: dict, progress=NULL):
    """Scan columns → Trace.

    Scan contract: ``planes`` [(id, name, bytes of the plane without its lines[,
    (event metadata ids as int64 bytes, their names, shown names, {stat id: name})])],
    ``lines`` [(plane idx, id, display_id, name, display_name, timestamp_ns,
    duration_ps)], per event ``ev_line``/``ev_meta``/``ev_offset_ps``/``ev_dur_ps``, and
    ``stats``: {name in ``STATS``: (events int32, values int64, kinds int8)} of the stat
    rows whose metadata names it, in event order (a double's IEEE-754 bits for
    ST_DOUBLE; str/bytes values are ids into ``strings`` (bytes)).  ``scan`` is emptied
    on the way, so its columns are freed as soon as they are used.
    """
    losses, others = xspace_losses(scan["warnings"])
    warnings = [f"profiler error: {e}" for e in scan["errors"]] + \
               [f"profiler warning: {w}" for w in others]
    if not scan["planes"]:
        raise TraceError(path, "XSpace has no planes (an empty capture: the profiler "
                               "recorded nothing)")
    strings = StringTable()
    planes = _plane_metas(path, scan, strings)
    lines = scan["lines"]
    ev_line, ev_meta, ts, dur, ev_plane = _event_columns(scan, lines)
    n = ev_line.shape[0]
    scan_strings = scan["strings"]

    # ---- names ----
    progress.within(0.05, "event names")
    # scanners emit plane by plane, so each plane's events (and their stats) are one
    # contiguous slice; any other order falls back to index arrays
    ev_rows = _group(ev_plane, len(planes))
    name, md_stats = _event_names(planes, ev_rows, ev_meta, n, strings)
    del ev_meta

    # ---- stats: the scanner kept the rows of the stats in STATS, split by stat ----
    progress.within(0.15, "stats")
    pages.let_go()                  # string stats are interned as Python strings
    stats = _event_stats(scan, ev_rows, ev_plane, planes, strings, scan_strings)
    # the flows link events by the events' own stats, final now (no metadata carries
    # them): found on the second core while the metadata, lines and HLO stats are read
    flows = Beside(_flow_links, stats, n) if side_by_side(n) else None
    _merge_metadata_stats(stats, md_stats, strings)
    del md_stats

    # ---- tracks and kinds ----
    progress.within(0.4, "lines and devices")
    tracks, devices, kind, track = _tracks_and_kinds(planes, lines, ev_line, name, stats,
                                                     strings)
    del ev_plane
    hostnames = list(scan["hostnames"])
    scan.clear()
    # HLO metadata from /host:metadata joined on (module, program_id, hlo_op)
    progress.within(0.5, "HLO op metadata")
    pages.let_go()                  # the HLO protos' table is Python objects
    protos = _hlo_protos(planes)
    _join_hlo_metadata(planes, stats, strings, n, warnings, protos)
    # the last name is interned: the strings compact before the links and the event
    # order are made (see ``StringTable.freeze``)
    strings = strings.freeze()
    links = flows.result() if flows is not None else _flow_links(stats, n)
    del flows
    narrow_id_stats(stats)          # the correlation ids as int32 before they are linked
    links = _with_correlation_links(links, stats, kind, tracks, track, n)
    metadata = _trace_metadata(hostnames, losses, planes, devices, protos)
    del planes          # their metadata bytes and parsed protos (HLO protos: 50 MB at 40 M)
    events = {"ts": ts, "dur": dur, "track": track, "name": name, "kind": kind}
    del ts, dur, track, name, kind
    progress.within(0.7, "event order and nesting")
    trace = assemble(path, "xspace", strings, tracks, devices, events, stats, links, metadata,
                     warnings)
    _runtime_waits(trace)
    return trace


def _plane_metas(path: str, scan: dict, strings: StringTable) -> list:
    """[(plane id, plane name, ``_PlaneMeta``)] of the scan's planes."""
    planes = []
    for pid, pname, meta_bytes, *tables in scan["planes"]:
        planes.append((pid, pname, _PlaneMeta(path, pname, meta_bytes, strings,
                                              tables[0] if tables else None)))
    # the scanner's name lists (two strings per event metadata: 1 M at 40 M events) are
    # interned now
    scan["planes"] = None
    return planes


def _event_columns(scan: dict, lines: list):
    """(line, metadata id, start ps, duration ps, plane) of every event.  Columns are
    taken out of ``scan`` and dropped as soon as they are used: on a 40 M-event file
    each stat column is 0.4–0.8 GB."""
    ev_line = np.asarray(scan.pop("ev_line"), np.int32)
    n = ev_line.shape[0]
    ev_meta = np.asarray(scan.pop("ev_meta"), np.int64)
    if n and 0 <= int(ev_meta.min()) and int(ev_meta.max()) < 2**31:
        # metadata ids are small: int32 through the names and metadata stats (152 MB
        # fewer at 40 M events, under the read's high-water mark)
        ev_meta = ev_meta.astype(np.int32)
    line_plane = np.array([ln[0] for ln in lines], np.int32)
    line_ts_ps = np.array([ln[5] for ln in lines], np.int64) * 1000
    ts = line_ts_ps[ev_line] + np.asarray(scan.pop("ev_offset_ps"), np.int64) if n else \
        np.zeros(0, np.int64)
    dur = np.asarray(scan.pop("ev_dur_ps"), np.int64)
    ev_plane = line_plane[ev_line] if n else np.zeros(0, np.int32)
    return ev_line, ev_meta, ts, dur, ev_plane


def _event_names(planes, ev_rows, ev_meta, n, strings):
    """(the name id of every event, per plane (events with metadata stats, their row in
    the metadata's stats, those stats))."""
    name = np.empty(n, np.int32)
    md_stats = []           # (events, their row in the metadata's stats, those stats)
    for pi, (_, pname, pm) in enumerate(planes):
        sel = ev_rows[pi]
        if _size(sel):
            if isinstance(sel, slice):
                pm.names_of(ev_meta[sel], strings, out=name[sel])
            else:
                name[sel] = pm.names_of(ev_meta[sel], strings)
            md_ids, cols = pm.op_stats(bool(_DEVICE_PLANE.match(pname)))
            if cols:
                evs, rows = _events_of_metadata(sel, ev_meta[sel], md_ids)
                if evs.size:
                    md_stats.append((evs, rows, cols))
    return name, md_stats


def _event_stats(scan, ev_rows, ev_plane, planes, strings, scan_strings) -> dict:
    """{stat: (events, values, is_string)} of the scan's stat rows (taken out of
    ``scan``): string values as ids into ``strings``, doubles as their integer part."""
    parts = scan.pop("stats")
    stats = {}
    for sname in STATS:
        part = parts.pop(sname, None)
        if part is None:
            continue
        evs, raw, kinds = part
        del part
        if sname in STR_STATS:
            stats[sname] = (evs, _string_values(evs, raw, kinds, ev_rows, ev_plane, planes,
                                                strings, scan_strings), True)
        else:
            # double values are rare among the stats read: their bits sit in the values
            dbl = np.flatnonzero(kinds == ST_DOUBLE)
            if dbl.size:
                raw[dbl] = raw[dbl].view(np.float64).astype(np.int64)
            stats[sname] = (evs, raw, False)
    del parts
    return stats


def _tracks_and_kinds(planes, lines, ev_line, name, stats, strings):
    """(tracks, devices, kind of every event, track of every event): a track per line,
    a device per device plane (and "CPU (XLA)" where host threads ran HLO ops)."""
    n = ev_line.shape[0]
    tracks = Tracks()
    devices: list[Device] = []
    kind = np.zeros(n, np.int8)
    track = np.empty(n, np.int32)
    line_events = _group(ev_line, len(lines))
    # XLA:CPU runs HLO ops on host threads: they form a "CPU (XLA)" device only when no
    # device plane has activity.  Elsewhere HLO stats on a host event mark the runtime
    # call that launched the op (JAX on GPU/ROCm), never device work
    active = any(_size(line_events[li]) and _line_has_activity(planes[ln[0]][1], ln[3])
                 for li, ln in enumerate(lines))
    hlo_op = np.zeros(n, bool)
    if "hlo_op" in stats and not active:
        hlo_op[stats["hlo_op"][0]] = True
        if "correlation_id" in stats:
            hlo_op[stats["correlation_id"][0]] = False
    _line_tracks(planes, lines, line_events, hlo_op, name, strings, tracks, devices, kind,
                 track)
    del line_events, hlo_op
    _kinds_by_stats(stats, tracks, kind, track)
    return tracks, devices, kind, track


def _line_tracks(planes, lines, line_events, hlo_op, name, strings, tracks, devices, kind,
                 track) -> None:
    """Adds each line's track (and its plane's device) and sets its events' track and
    kind."""
    name_kind = _name_kinds(strings)
    cpu_device = -1
    for li, (pi, lid, _disp_id, lname, ldisp, _ts, _dur) in enumerate(lines):
        evs = line_events[li]
        _, pname, _ = planes[pi]
        label = ldisp or lname or str(lid)
        m = _DEVICE_PLANE.match(pname)
        if m:
            dev = _device_for(devices, pname, m)
            t = tracks.add(TrackKind.DEVICE, dev, lname, f"{devices[dev].name} · {label}", pname)
            track[evs] = t
            kind[evs] = _device_line_kind(devices[dev].kind, lname, name[evs], strings)
            continue
        if pname.startswith("/host:") or not pname.startswith("/"):
            # host threads; XLA:CPU executes HLO ops on worker threads: those become
            # the tracks of a "CPU (XLA)" device
            t = tracks.add(TrackKind.HOST, -1, lname, label, pname)
            track[evs] = t
            kind[evs] = name_kind[name[evs]]
            if classify.is_input_pipeline_thread(lname) and _size(evs):
                # tf.data's threads: their ops (PyFunc, decode, resize) are data loading
                ks = kind[evs]
                kind[evs] = np.where(np.isin(ks, _PIPELINE_WORK), np.int8(K.DATA), ks)
            ops = _where(evs, hlo_op)
            if ops.size:
                ops = ops[~np.isin(kind[ops], _RUNTIME_KINDS)]
            if ops.size:
                if cpu_device < 0:
                    cpu_device = len(devices)
                    devices.append(Device(cpu_device, "CPU (XLA)", "cpu", "host"))
                dt = tracks.add(TrackKind.DEVICE, cpu_device, lname,
                                f"CPU (XLA) · {label}", pname)
                track[ops] = dt
                kind[ops] = K.KERNEL


def _kinds_by_stats(stats, tracks, kind, track) -> None:
    """Host launches by correlation id and host steps by step number, whatever their
    names."""
    corr = stats.get("correlation_id")
    if corr is not None:
        # a host event the device answers to by correlation id is a launch, whatever its name
        e = np.asarray(corr[0])
        e = e[kind[e] == K.OTHER]
        kind[e[np.asarray(tracks.kind, np.int8)[track[e]] == TrackKind.HOST]] = K.LAUNCH
    step_num = stats.get("step_num")
    if step_num is not None:
        host = np.asarray(tracks.kind, np.int8)[track[step_num[0]]] == TrackKind.HOST
        kind[step_num[0][host]] = K.STEP


def _with_correlation_links(links, stats, kind, tracks, track, n):
    """The flow links and those of host events to the device work they launched.  The
    correlation stat is held only here: assemble narrows its values, and a reference
    kept in ``build`` would keep them."""
    corr = stats.get("correlation_id")
    if corr is not None:
        on_device = np.asarray(tracks.kind, np.int8)[track] == TrackKind.DEVICE
        idx_dtype = np.int32 if n < 2**31 - 1 else np.int64
        c_links = correlation_links(kind, on_device, corr[0], corr[1], idx_dtype)
        del on_device
        # no copy of the correlation links where no flow precedes them
        links = tuple(np.concatenate([a, b], dtype=b.dtype) if a.size else b.astype(
            b.dtype, copy=False) for a, b in zip(links, c_links))
        del c_links
    return links


def _trace_metadata(hostnames, losses, planes, devices, protos) -> dict:
    metadata = {"hostnames": hostnames}
    if losses:
        metadata["losses"] = losses
    origin = _profile_start_ps(planes)
    if origin is not None:
        metadata["profile_start_ps"] = origin
    # per device plane, its peaks and its ops' XLA cost figures (analysis.efficiency)
    metadata["device_planes"] = facts = _device_facts(planes, devices)
    if protos and not any("op_costs" in f for f in facts.values()):
        # where no op carries XLA's cost figures, the HLO is what they come from: its
        # bytes are kept (the planes are let go below), parsed only when asked
        metadata["hlo_protos"] = protos
    return metadata


def _string_values(evs, raw, kinds, ev_rows, ev_plane, planes, strings,
                   scan_strings) -> np.ndarray:
    """A string stat's values as ids into ``strings``: a ref value names a stat metadata
    entry of its event's plane, whose name is the string; str/bytes values are ids into
    the scan's strings; no value is ""."""
    vals = np.empty(raw.shape[0], np.int32)
    # rows come in event order, events plane by plane: each plane's rows are one slice
    if ev_rows and isinstance(ev_rows[0], slice):
        at = search(evs, np.array([r.start for r in ev_rows] + [ev_rows[-1].stop]))
        plane_rows = [slice(int(at[pi]), int(at[pi + 1])) for pi in range(len(planes))]
    else:
        ref_plane = ev_plane[evs]
        plane_rows = [np.flatnonzero(ref_plane == pi) for pi in range(len(planes))]
    for pi, (_, _, pm) in enumerate(planes):
        rows = plane_rows[pi]
        if not _size(rows):
            continue
        is_ref = kinds[rows] == ST_REF
        if not is_ref.all():
            rows = _where(rows, kinds == ST_REF)
        if _size(rows):
            vals[rows] = map_distinct(raw[rows], lambda u, pm=pm: strings.intern_many(
                [pm.stat_name.get(x, "") for x in u.tolist()]))
    is_str = (kinds == ST_STR) | (kinds == ST_BYTES)
    if is_str.any():
        ssel = np.flatnonzero(is_str)
        vals[ssel] = map_distinct(raw[ssel], lambda u: strings.intern_many(
            [scan_strings[x].decode("utf-8", "replace") for x in u.tolist()]))
    other = ~(is_str | (kinds == ST_REF))
    if other.any():
        vals[other] = strings.intern("")
    return vals


def _runtime_waits(trace) -> None:
    """A wait inside the XLA runtime's own execute call (TF's XlaLaunch on XLA:CPU runs
    the program synchronously: ``CpuExecutable::ExecuteAsyncOnStream › BlockUntilReady``)
    is the thread waiting for the runtime's worker threads to run the program, not a
    read in the user's code: it waits for another thread, like ``run_backward``."""
    sync = np.flatnonzero(trace.kind == K.SYNC)
    if sync.size == 0:
        return
    par = trace.parent[sync].astype(np.int64)
    sync, par = sync[par >= 0], par[par >= 0]
    u, inv = unique_inverse(trace.name[par])
    inside = np.array([bool(classify.is_runtime_execute(trace.strings[x])) for x in u.tolist()],
                      bool)[inv.reshape(-1)]
    trace.kind[sync[inside]] = K.WAIT


def _cost_of(stats, stat_name: dict):
    """(flops, model_flops, bytes_accessed, HBM bytes, on-chip bytes, CMEM read, CMEM
    write, VMEM read, VMEM write bytes) of an op's metadata stats (NaN where one is
    absent), None where it has none of the first three.  The last six are from its
    ``memory_access_breakdown`` (XLA's bytes per memory space and direction, as xprof's
    roofline reads them: space 1 is HBM, any other on chip); NaN where the op carries no
    breakdown, 0 where it lists no access there."""
    got = [np.nan] * 9
    found = False
    for st in stats:
        sname = stat_name.get(st.metadata_id)
        if sname in MD_COST_STATS:
            which = st.WhichOneof("value")
            if which in ("double_value", "int64_value", "uint64_value"):
                got[MD_COST_STATS.index(sname)] = float(getattr(st, which))
                found = True
        elif sname == MD_BREAKDOWN_STAT and st.WhichOneof("value") == "bytes_value":
            got[3:9] = _breakdown_bytes(st.bytes_value)
    return tuple(got) if found else None


def _breakdown_bytes(raw: bytes) -> tuple:
    """(HBM bytes (read and written), on-chip bytes (any other space), then CMEM read,
    CMEM write, VMEM read, VMEM write bytes) of a serialized ``MemoryAccessBreakdown``
    (NaN all where it does not parse).  One parse per op of a program, not per event."""
    m = MemoryAccessBreakdown()
    try:
        m.ParseFromString(raw)
    except DecodeError:
        return (np.nan,) * 6
    hbm = onchip = 0.0
    rw = [0.0] * len(ONCHIP_RW)
    for a in m.memory_accessed:
        if a.memory_space == _HBM_SPACE:
            hbm += a.bytes_accessed
            continue
        onchip += a.bytes_accessed
        k = _ONCHIP_RW_KEY.get((a.memory_space, a.operation_type))
        if k is not None:
            rw[k] += a.bytes_accessed
    return (hbm, onchip, *rw)


def _device_facts(planes, devices: list) -> dict:
    """{device index: {"plane_stats": {…}, "op_costs": (hlo_op list, program ids int64,
    flops, model_flops, bytes_accessed float64 (NaN: absent), result shape texts, HBM
    bytes, on-chip bytes (NaN: no breakdown), and the on-chip bytes per ``ONCHIP_RW``
    (n, 4))}} of the device planes."""
    out = {}
    for _, pname, pm in planes:
        m = _DEVICE_PLANE.match(pname)
        if not m:
            continue
        dev = next((d.index for d in devices if d.source_id == pname), None)
        if dev is None:
            continue
        facts = {"plane_stats": pm.plane_stats()}
        rows = getattr(pm, "op_costs", None)
        if rows:
            ops, prog, fl, mfl, by, hbm, onchip, *rw, shape = zip(*rows)
            facts["op_costs"] = (list(ops), np.asarray(prog, np.int64),
                                 np.asarray(fl, np.float64), np.asarray(mfl, np.float64),
                                 np.asarray(by, np.float64), list(shape),
                                 np.asarray(hbm, np.float64), np.asarray(onchip, np.float64),
                                 np.asarray(rw, np.float64).T.reshape(len(ops), len(ONCHIP_RW)))
        out[dev] = facts
    return out


def _events_of_metadata(sel, meta_ids: np.ndarray, md_ids: np.ndarray):
    """(events of a plane whose metadata id is one of ``md_ids`` (sorted), the row of
    their id in ``md_ids``)."""
    k = np.minimum(search(md_ids, meta_ids), md_ids.shape[0] - 1)
    hit = md_ids[k] == meta_ids
    evs = sel.start + np.flatnonzero(hit) if isinstance(sel, slice) else sel[hit]
    return evs, k[hit]


def _merge_metadata_stats(stats: dict, md_stats: list, strings: StringTable) -> None:
    """Adds what the events' metadata says to ``stats``; a stat the event carries itself
    wins over its metadata's.  ``md_stats``: per plane (its events with metadata stats,
    their row in the metadata's stats, those stats).  Each stat takes every plane's
    values in one merge (one per plane copied the stat whole each time: a third of a
    TPU trace's build)."""
    added: dict = {}
    for evs, rows, cols in md_stats:
        for sname, (md_rows, vals, is_string) in cols.items():
            vals = strings.intern_many(vals) if is_string else np.asarray(vals, np.int64)
            # the value of each event: the stat's entry for its metadata row, if any
            at = np.full(max(int(rows.max()), int(md_rows.max())) + 1, -1, np.int64)
            at[md_rows] = np.arange(md_rows.shape[0])
            pos = at[rows]
            ok = pos >= 0
            if ok.any():
                added.setdefault(sname, (is_string, [], []))
                added[sname][1].append(evs[ok])
                added[sname][2].append(vals[pos[ok]])
    for sname, (is_string, es, vs) in added.items():
        e, v = (es[0], vs[0]) if len(es) == 1 else (np.concatenate(es), np.concatenate(vs))
        if e.shape[0] > 1 and not (e[1:] > e[:-1]).all():
            o = np.argsort(e, kind="stable")
            e, v = e[o], v[o]
        cur = stats.get(sname)
        if cur is not None:
            e0, v0, _ = cur
            e0, v0 = np.asarray(e0), np.asarray(v0)
            v = v.astype(v0.dtype)
            if e0.size:
                k = search(e0, e)
                own = e0[np.minimum(k, e0.shape[0] - 1)] == e
                e, v, k = e[~own], v[~own], k[~own]
                # both sorted: the new rows go in before the first larger event (a merge,
                # not a sort of both)
                e, v = np.insert(e0, k, e), np.insert(v0, k, v)
        stats[sname] = (e, v, is_string)


def _group(keys: np.ndarray, n_groups: int) -> list:
    """Rows of each group: slices when ``keys`` is sorted (scanners emit plane by plane
    and line by line), else index arrays."""
    if keys.size == 0 or (keys[1:] >= keys[:-1]).all():
        b = search(keys, np.arange(n_groups + 1)).tolist()
        return [slice(b[g], b[g + 1]) for g in range(n_groups)]
    order = np.argsort(keys, kind="stable")
    b = np.searchsorted(keys[order], np.arange(n_groups + 1))
    return [order[b[g]:b[g + 1]] for g in range(n_groups)]


def _size(rows) -> int:
    return rows.stop - rows.start if isinstance(rows, slice) else int(rows.size)


def _where(rows, mask: np.ndarray) -> np.ndarray:
    """The rows of a group (slice or index array) where ``mask`` holds, as indices."""
    if isinstance(rows, slice):
        return rows.start + np.flatnonzero(mask[rows])
    return rows[mask[rows]]


def _device_for(devices: list, pname: str, m) -> int:
    for d in devices:
        if d.source_id == pname:
            return d.index
    word, num = m.group(1).upper(), m.group(2)
    d = Device(len(devices), f"{word} {num}", word.lower() if word in ("GPU", "TPU", "CPU")
               else "other", pname)
    devices.append(d)
    return d.index


_ACTIVITY_LINES = {"XLA Ops"}
_STEP_LINES = {"Steps"}
# host kinds of runtime API calls: launches and their kin, never device ops
_RUNTIME_KINDS = (K.LAUNCH, K.RUNTIME, K.SYNC, K.ALLOC, K.GRAPH_CAPTURE)
# what an input-pipeline thread's ops are unless their name says more (a sync, an idle mark)
_PIPELINE_WORK = np.array([K.OTHER, K.CPU_OP, K.PYTHON, K.EXECUTE, K.ANNOTATION], np.int8)
# device copies and fills by name: CUPTI's "MemcpyD2H"/"Memset", ROCm's "CopyDeviceToHost",
# "CopyDeviceToDevice", "FillBuffer"
_COPY = re.compile(r"memcpy|^copy(host|device|peer)to(host|device|peer)", re.I)
_FILL = re.compile(r"memset|^fillbuffer", re.I)


def _line_has_activity(pname: str, lname: str) -> bool:
    """Whether a line holds kernels/copies (``_device_line_kind``'s rule, by name)."""
    m = _DEVICE_PLANE.match(pname)
    if not m or lname in _STEP_LINES:
        return False
    if m.group(1).upper() == "GPU":
        return lname.startswith("Stream")
    return lname in _ACTIVITY_LINES


def _device_line_kind(dev_kind: str, lname: str, names: np.ndarray, strings) -> np.ndarray:
    if lname in _STEP_LINES:
        return np.full(names.shape, K.STEP, np.int8)
    if dev_kind == "gpu":
        if not lname.startswith("Stream"):
            return np.full(names.shape, K.DEVICE_OTHER, np.int8)
        u, inv = unique_inverse(names)
        ks = []
        for x in u.tolist():
            s = strings.strings[x]
            ks.append(K.MEMCPY if _COPY.search(s) else K.MEMSET if _FILL.search(s) else K.KERNEL)
        return np.asarray(ks, np.int8)[inv]
    if lname in _ACTIVITY_LINES:
        return np.full(names.shape, K.KERNEL, np.int8)
    return np.full(names.shape, K.DEVICE_OTHER, np.int8)


def _name_kinds(strings: StringTable):
    """A lookup name id → host EventKind.  Each distinct name is classified once for all
    lines: the threads of a long trace share their names, and classifying them again per
    line took an eighth of a TPU trace's build."""
    return _NameKinds(strings.strings)


class _NameKinds:
    # a module-level class holding the strings' list: a class made per call is a
    # reference cycle, which kept the string table's index (29 MB at 1 M names) alive
    # until the cyclic collector ran (never during an analysis)
    def __init__(self, names: list):
        self.names = names
        self.known = np.full(0, -1, np.int8)          # per string id; −1 not classified yet

    def __getitem__(self, ids):
        if not ids.size:
            return np.zeros(0, np.int8)
        top = int(ids.max()) + 1
        if top > self.known.shape[0]:
            self.known = np.concatenate((self.known, np.full(
                max(top, len(self.names)) - self.known.shape[0], -1, np.int8)))
        ks = self.known[ids]
        new = ks < 0
        if new.any():
            u = unique_inverse(ids[new])[0]
            self.known[u] = [classify.host_kind(self.names[x]) for x in u.tolist()]
            ks = self.known[ids]
        return ks


def _profile_start_ps(planes) -> int | None:
    for _, pname, pm in planes:
        if pname == "Task Environment":
            for st in pm.msg.stats:
                if pm.stat_name.get(st.metadata_id) == "profile_start_time":
                    return int(st.uint64_value or st.int64_value) * 1000
    return None


# HLO opcodes of collectives (and their async halves), as XLA names them
COLLECTIVE_OPCODES = frozenset(
    f"{op}{part}" for op in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                             "ragged-all-to-all", "collective-permute", "collective-broadcast")
    for part in ("", "-start", "-done"))


def _hlo_protos(planes) -> dict:
    """{``<module>(<program_id>)``: serialized HloProto} of /host:metadata: kept as bytes
    for the cost rules (``analysis.efficiency.hlo_costs``), parsed only when asked."""
    out = {}
    for _, pname, pm in planes:
        if pname != "/host:metadata":
            continue
        for md in pm.msg.event_metadata.values():
            for st in md.stats:
                if pm.stat_name.get(st.metadata_id) == "Hlo Proto" and st.bytes_value:
                    out[md.name] = st.bytes_value
    return out


def _join_hlo_metadata(planes, stats, strings, n, warnings, protos=None):
    if "hlo_op" not in stats:
        return
    table = {}
    for name, raw in (_hlo_protos(planes) if protos is None else protos).items():
        try:
            table.update(hlo_op_metadata(name, raw))
        except ValueError as e:
            warnings.append(f"unreadable Hlo Proto for {name}: {e}")
    if not table:
        return
    by_program: dict = {}
    evs, op_ids, _ = stats["hlo_op"]
    mod = stats.get("hlo_module")
    prog = stats.get("program_id")
    def at_ops(stat):
        """The stat's value on each HLO-op event (−1 where absent; int64, or the stat's
        own integer column where every HLO op has it), without a dense column over all
        events."""
        out = np.full(evs.shape[0], -1, np.int64)
        if stat is not None and stat[0].size:
            e, v = np.asarray(stat[0]), np.asarray(stat[1])
            if e is evs or (e.shape == evs.shape and np.array_equal(e, evs)):
                # the usual case: on every HLO op (the stat's own column, not a copy:
                # two of 160 MB at 40 M events, at the read's high-water mark)
                return v if v.dtype.kind in "iu" else v.astype(np.int64)
            o = np.argsort(e, kind="stable") if (e[1:] < e[:-1]).any() else None
            if o is not None:
                e, v = e[o], v[o]
            k = np.minimum(np.searchsorted(e, evs), e.shape[0] - 1)
            hit = e[k] == evs
            out[hit] = v[k[hit]]
        return out
    # join per distinct (module, program, op) key, then broadcast
    u, per_op = _distinct_keys(at_ops(mod), at_ops(prog), op_ids)
    empty = strings.intern("")
    names = strings.strings
    get = table.get
    none = ("",) * len(HLO_FIELDS)
    hits = []
    for m_id, p_id, o_id in u.tolist():
        m, o = names[m_id] if m_id >= 0 else "", names[o_id]
        p = p_id % (1 << 64)           # program ids are uint64; stat columns hold int64
        hit = get((m, p, o)) or get((m, None, o))
        if hit is None:
            # TPU ops name no module: their program id and instruction name find it
            if not by_program:
                by_program = {(p, o): v for (_, p, o), v in table.items() if p is not None}
            hit = by_program.get((p, o)) or none
        hits.append(hit)
    for c in ("op_name", "op_type", "source"):
        k = HLO_FIELDS.index(c)
        coded = per_op(strings.intern_many([h[k] for h in hits]))
        keep = (coded.table != empty)[coded.codes]
        if c in stats:
            # an event's own stat (``source`` on TPU ops' metadata) wins over the join
            e0, v0 = np.asarray(stats[c][0]), np.asarray(stats[c][1])
            keep &= ~np.isin(evs, e0)
            if keep.any():
                e = np.concatenate([e0, np.asarray(evs)[keep]])
                o = np.argsort(e, kind="stable")
                stats[c] = (e[o], np.concatenate([v0, coded.full()[keep]])[o], True)
            continue
        if keep.all():
            # the hlo_op events and, as codes, its values themselves: shared in the model
            stats[c] = (evs, coded, True)
        elif keep.any():
            stats[c] = (evs[keep], coded.full()[keep], True)
    # collectives by their HLO opcode (JAX names an all-reduce ``psum.7``), kept on those
    # ops only: a few an iteration, never a column over every op
    k = HLO_FIELDS.index("opcode")
    coll = [h[k] if h[k] in COLLECTIVE_OPCODES else "" for h in hits]
    if any(coll):
        coded = per_op(strings.intern_many(coll))
        keep = (coded.table != empty)[coded.codes]
        stats["hlo_collective"] = (evs[keep], coded.full()[keep], True)


def _distinct_keys(mod: np.ndarray, prog: np.ndarray, op: np.ndarray):
    """Distinct (module, program, op) rows, and a function that takes a value per row to
    the values of every event, held coded (``Coded``).  An HLO op name almost always
    belongs to one (module, program) in a trace: then the op's string id is the key,
    and the codes are the ``hlo_op`` column itself (a table over the ids: no index per
    event); only otherwise are all three columns sorted."""
    op = np.asarray(op)
    small = small_ids(op) if op.size and int(op.min()) >= 0 else None
    if small is not None:
        u_op = small[1]
        if mod.min() == mod.max() and prog.min() == prog.max():
            # one (module, program), the usual case: no check per event
            rows = np.stack([np.full(u_op.shape[0], mod[0]), np.full(u_op.shape[0], prog[0]),
                             u_op.astype(np.int64)], axis=1)
            return rows, lambda per_row: _through_table(u_op, per_row, op)
        u_op, inv = unique_inverse(op)
        # each op's module and program as any of its events has them: the key when every
        # event agrees
        m, p = np.empty(u_op.shape[0], np.int64), np.empty(u_op.shape[0], np.int64)
        m[inv], p[inv] = mod, prog
        if (m[inv] == mod).all() and (p[inv] == prog).all():
            rows = np.stack([m, p, u_op.astype(np.int64)], axis=1)
            return rows, lambda per_row: _through_table(u_op, per_row, op)
        del m, p
    u, inv = unique_rows(np.stack([mod, prog, op.astype(np.int64)], axis=1))
    codes = inv.astype(np.int32)
    return u, lambda per_row: Coded(codes, np.asarray(per_row))


def _through_table(ids: np.ndarray, per_id, x: np.ndarray) -> Coded:
    """``per_id`` (a value per sorted distinct id of ``x``) on every element of ``x``:
    ``x`` itself is the codes, into a table over the ids."""
    per_id = np.asarray(per_id)
    lut = np.zeros(int(ids[-1]) + 1 if ids.size else 0, per_id.dtype)
    lut[ids] = per_id
    return Coded(x, lut)


def _flow_links(stats, n):
    """Producer (_p, _pt) → consumer (_c, _ct) links."""
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int8))
    if "_p" not in stats or "_c" not in stats:
        return empty
    def keyed(idname, typename):
        evs, ids, _ = stats[idname]
        evs = np.asarray(evs)
        if typename not in stats:
            return evs, ids, np.zeros(evs.shape[0], np.int64)
        te, tv = np.asarray(stats[typename][0]), np.asarray(stats[typename][1], np.int64)
        if te.shape[0] > 1 and not (te[1:] >= te[:-1]).all():
            types = np.zeros(n, np.int64)
            types[te] = tv
            return evs, ids, types[evs]
        # each event's type row looked up (the last where an event has two, as an
        # assignment over all events would leave it), not a column over all events
        k = search(te, evs, side="right") - 1
        kk = np.maximum(k, 0)
        hit = (k >= 0) & (te[kk] == evs) if te.size else np.zeros(evs.shape[0], bool)
        return evs, ids, np.where(hit, tv[kk] if te.size else 0, 0)
    pe, pid_, pt = keyed("_p", "_pt")
    ce, cid, ct = keyed("_c", "_ct")
    # one producer per (type, id), the first; consumers may be many
    kinds = np.unique(pt)
    if kinds.shape[0] <= 64:
        # few flow types: per type, the producers' ids sorted once and each consumer's
        # looked up (a lexsort of every (type, id) row took twice as long)
        src = np.full(ce.shape[0], -1, np.int64)
        for t in kinds.tolist():
            ps = np.flatnonzero(pt == t)
            cs = np.flatnonzero(ct == t)
            if not cs.size:
                continue
            ids = pid_[ps]
            o = np.argsort(ids, kind="stable")     # stable: the first of equal ids first
            ids = ids[o]
            want = cid[cs]
            at = np.minimum(search(ids, want), ids.shape[0] - 1)
            hit = ids[at] == want
            src[cs[hit]] = pe[ps[o[at[hit]]]]
    else:
        allk, inv = unique_rows(np.concatenate([np.stack([pt, pid_], axis=1),
                                                np.stack([ct, cid], axis=1)]))
        pk, ck = inv[:pe.shape[0]], inv[pe.shape[0]:]
        producer = np.full(allk.shape[0], -1, np.int64)
        producer[pk[::-1]] = pe[::-1]
        src = producer[ck]
    ok = (src >= 0) & (src != ce)
    return src[ok], ce[ok], np.full(int(ok.sum()), LinkKind.FLOW, np.int8)


def raw_event_stats(path: str, line_name: str, index: int) -> dict:
    """Every stat of one event, read again from the file (for the rare detail view):
    the ``index``-th event of the first line named ``line_name``."""
    space = XSpace.FromString(read_bytes(path))
    for plane in space.planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            if line.name == line_name and 0 <= index < len(line.events):
                out = {}
                for st in line.events[index].stats:
                    which = st.WhichOneof("value")
                    v = getattr(st, which) if which else None
                    if which == "ref_value":
                        v = names.get(v, v)
                    elif isinstance(v, bytes):
                        v = f"<{len(v)} bytes>"
                    out[names.get(st.metadata_id, str(st.metadata_id))] = v
                return out
    return {}
