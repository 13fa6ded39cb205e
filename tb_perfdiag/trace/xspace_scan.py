"""XSpace bytes → flat scan columns (the contract ``xspace.build`` documents): the
native scanner when it is built, else the reference scanner, which walks upb messages."""
from __future__ import annotations

import os
import struct

import numpy as np
from google.protobuf.message import DecodeError

from .model import TraceError
from .xplane_pb import XPlane, XSpace
from .xspace_stats import STATS


# stat value kinds in scan columns
ST_NONE, ST_DOUBLE, ST_UINT, ST_INT, ST_STR, ST_BYTES, ST_REF = range(7)
_ONEOF_KIND = {"double_value": ST_DOUBLE, "uint64_value": ST_UINT, "int64_value": ST_INT,
               "str_value": ST_STR, "bytes_value": ST_BYTES, "ref_value": ST_REF}


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
