"""Reader for XSpace (``*.xplane.pb``: JAX, PyTorch/XLA, TensorFlow) → ``Trace``.

Two stages: a *scan* turns the protobuf bytes into flat columns (the native
scanner when it is built, else the reference scanner of ``xspace_scan``, which
walks upb messages), and ``build`` turns columns into the trace model.  Only plane
metadata (event/stat metadata maps, plane stats) is kept as protobuf messages.
"""
from __future__ import annotations

import numpy as np

from ..beside import Beside, side_by_side
from ..progress import NULL
from ..storage import read_bytes
from . import classify, pages
from .build import StringTable, assemble, narrow_id_stats, unique_inverse
from .losses import xspace_losses
from .model import EventKind as K, TraceError
from .xplane_pb import XSpace
from .xspace_hlo import _hlo_protos, _join_hlo_metadata
from .xspace_lines import _tracks_and_kinds
from .xspace_links import _event_stats, _flow_links, _merge_metadata_stats, _with_correlation_links
from .xspace_planes import (_DEVICE_PLANE, _PlaneMeta, _device_facts, _events_of_metadata,
                            _group, _profile_start_ps, _size)
# the scan's names stay reachable here (``xspace.scan_python``, ``xspace.ST_UINT``…)
from .xspace_scan import (ST_BYTES, ST_DOUBLE, ST_INT, ST_NONE, ST_REF, ST_STR,  # noqa: F401
                          ST_UINT, mapped_scanner, scan, scan_python)
from .xspace_stats import STATS  # noqa: F401


def looks_like(head: bytes) -> bool:
    # field 1 (planes), wire type 2 → tag byte 0x0a
    return head[:1] == b"\x0a"


def read(path: str, raw: bytes | None = None):
    return build(path, scan(path, read_bytes(path) if raw is None else raw))


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
