"""An XSpace plane's metadata (event and stat metadata, plane stats, XLA's cost figures
of its ops) as lookup arrays, and the rows of each plane's events."""
from __future__ import annotations

import re

import numpy as np
from google.protobuf.message import DecodeError

from .build import StringTable
from .model import TraceError, search
from .xplane_pb import MemoryAccessBreakdown, XPlane


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


def _profile_start_ps(planes) -> int | None:
    for _, pname, pm in planes:
        if pname == "Task Environment":
            for st in pm.msg.stats:
                if pm.stat_name.get(st.metadata_id) == "profile_start_time":
                    return int(st.uint64_value or st.int64_value) * 1000
    return None
