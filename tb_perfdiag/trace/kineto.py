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

import numpy as np
import orjson

from ..progress import NULL
from ..storage import is_blank, read_bytes
from . import classify
from .build import StringTable, Tracks, assemble, correlation_links, distinct, unique_inverse
from .chrome_meta import METADATA_KEYS, metadata_event
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
}


def looks_like(head: bytes) -> bool:
    return b"traceEvents" in head


def _drop_events(scan: dict, keep: np.ndarray) -> dict:
    """The scan without the events where ``keep`` is False (stats re-indexed)."""
    out = dict(scan)
    for k in ("name_ids", "cat_ids", "track_ids", "ts_ps", "dur_ps", "src_index"):
        out[k] = np.asarray(scan[k])[keep]
    new_index = np.cumsum(keep) - 1
    stats = {}
    for sname, (idx, vals) in scan["stats"].items():
        idx = np.asarray(idx, np.int64)
        ok = keep[idx]
        stats[sname] = (new_index[idx[ok]], np.asarray(vals)[ok])
    out["stats"] = stats
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


def _exact_ts_ps(raw: bytes, positions: np.ndarray, approx_us: np.ndarray, base_us: int,
                 warnings: list, sane: np.ndarray) -> np.ndarray | None:
    """Exact timestamps in ps after ``base_us`` from the file text, or None if the text
    cannot be matched to the events."""
    texts = _TS_TEXT.findall(raw)
    if positions.size and (len(texts) <= int(positions.max())):
        warnings.append("timestamps could not be matched to their text; "
                        "kept float precision (about 0.25 µs)")
        return None
    out = np.zeros(positions.shape[0], dtype=np.int64)
    base_ps = base_us * 1_000_000
    for k, (p, ok) in enumerate(zip(positions.tolist(), sane.tolist())):
        if not ok:
            continue
        t = texts[p]
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
    return build(path, scan(path, read_bytes(path) if raw is None else raw))


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


def native_scanner():
    try:
        if os.environ.get("TB_PERFDIAG_NO_NATIVE"):
            return None
        from . import native_scan  # the C scanner, built from native/ by setup.py; optional
    except ImportError:
        return None
    return native_scan


def scan_python(path: str, raw: bytes) -> dict:
    """Reference scanner: bytes → flat columns (see ``build`` for the contract)."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise TraceError(path, f"not valid JSON ({e}); truncated or still being written?") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        hint = ""
        if isinstance(doc, dict) and "nodes" in doc and "schema" in doc:
            hint = " (this looks like a Chakra execution trace)"
        elif isinstance(doc, list):
            hint = " (a JSON list: a memory snapshot or a bare event list)"
        raise TraceError(path, "not a PyTorch profiler trace: no 'traceEvents' list" + hint)
    events = doc["traceEvents"]
    warnings: list[str] = []
    names = StringTable()
    cats = StringTable()
    name_ids: list = []
    cat_ids: list = []
    track_index: dict = {}
    track_ids: list = []
    ts_us: list = []
    dur_us: list = []
    ts_pos: list = []            # index among events that have a "ts" key
    src_index: list = []
    stat_vals = {k: ([], []) for k in STAT_ARGS}
    process_name: dict = {}
    process_label: dict = {}
    thread_name: dict = {}
    bad = 0
    n_ts = 0
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            bad += 1
            continue
        has_ts = "ts" in e
        ph = e.get("ph")
        if ph != "X":
            if ph == "M":
                metadata_event(e, process_name, process_label, thread_name)
            n_ts += has_ts
            continue
        ts = e.get("ts")
        dur = e.get("dur", 0)
        pid = e.get("pid")
        tid = e.get("tid")
        if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)) or \
                isinstance(ts, bool) or isinstance(dur, bool) or \
                isinstance(pid, (dict, list)) or isinstance(tid, (dict, list)):
            bad += 1
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
        ts_pos.append(n_ts)
        src_index.append(i)
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
    if bad:
        warnings.append(f"{bad} malformed events skipped (missing or non-numeric ts/dur/pid)")
    n = len(name_ids)
    approx = np.asarray(ts_us, dtype=np.float64)
    # events whose time is absurd next to the rest (clock garbage, 1e30) cannot be placed;
    # they are marked and dropped by ``build`` with a warning instead of wrapping around
    dur_us_arr = np.asarray(dur_us, dtype=np.float64)
    sane = np.isfinite(approx) & np.isfinite(dur_us_arr) & (np.abs(dur_us_arr) < _MAX_SPAN_US)
    if n and sane.any():
        sane &= np.abs(approx - np.median(approx[sane])) < _MAX_SPAN_US
    dur_ps = np.where(sane, np.rint(np.where(sane, dur_us_arr, 0) * 1e6), 0).astype(np.int64)
    base_us = int(np.floor(approx[sane].min())) if n and sane.any() else 0
    approx = np.where(sane, approx, base_us)
    ts_rel = None
    if n and float(np.abs(approx).max()) > _FLOAT_EXACT_LIMIT_US:
        ts_rel = _exact_ts_ps(raw, np.asarray(ts_pos, dtype=np.int64), approx, base_us, warnings,
                              sane)
    if ts_rel is None:
        ts_rel = np.rint((approx - base_us) * 1e6).astype(np.int64)
    ts_rel[~sane] = OUT_OF_RANGE
    stats = {}
    for sname, (idx, vals) in stat_vals.items():
        if idx:
            arr = np.asarray(vals)
            if arr.dtype.kind == "f":
                arr = np.rint(arr)
            stats[sname] = (np.asarray(idx, np.int64), arr.astype(np.int64))
    return {
        "n_raw": len(events),
        "names": names.strings, "name_ids": np.asarray(name_ids, np.int32),
        "cats": cats.strings, "cat_ids": np.asarray(cat_ids, np.int32),
        "track_keys": list(track_index), "track_ids": np.asarray(track_ids, np.int32),
        "base_us": base_us, "ts_ps": ts_rel, "dur_ps": dur_ps,
        "src_index": np.asarray(src_index, np.int64),
        "stats": stats,
        "process_name": process_name, "process_label": process_label,
        "thread_name": thread_name,
        "metadata": {k: doc[k] for k in METADATA_KEYS if k in doc},
        "warnings": warnings,
    }


def build(path: str, scan: dict, progress=NULL):
    """Scan columns → Trace.

    The scan holds: interned ``names``/``cats`` with per-event ``name_ids``/``cat_ids``;
    ``track_keys`` (distinct (pid, tid)) with per-event ``track_ids``; ``ts_ps`` (int64,
    ps after ``base_us``), ``dur_ps``; ``src_index`` (position in traceEvents);
    ``stats`` {name: (event idx, int64 values)}; process/thread name maps; ``metadata``.
    """
    warnings = list(scan["warnings"])
    n = int(scan["name_ids"].shape[0])
    if n == 0 and scan["n_raw"] == 0:
        raise TraceError(path, "trace has no events")
    strings = StringTable()
    name_ids = np.asarray(scan["name_ids"], np.int32)
    for s_ in scan["names"]:
        strings.intern(s_)
    names = strings.strings
    cat_names = scan["cats"]
    cat_ids = np.asarray(scan["cat_ids"], np.int32)
    ts_rel = np.asarray(scan["ts_ps"], np.int64)
    dur_ps = np.asarray(scan["dur_ps"], np.int64)
    base_us = int(scan["base_us"])
    bad = ts_rel == OUT_OF_RANGE
    if bad.any():
        warnings.append(f"{int(bad.sum())} events with timestamps or durations far outside the "
                        "trace (corrupt clock values) were skipped")
        scan = _drop_events(scan, ~bad)
        n = int(scan["name_ids"].shape[0])
        ts_rel, dur_ps = scan["ts_ps"], scan["dur_ps"]
        name_ids = np.asarray(scan["name_ids"], np.int32)
        cat_ids = np.asarray(scan["cat_ids"], np.int32)
    process_name = scan["process_name"]
    process_label = scan["process_label"]
    thread_name = scan["thread_name"]
    # relative to the earliest event; the absolute origin stays a Python int (epoch ps
    # overflow int64)
    shift = int(ts_rel.min()) if n else 0
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
    cat_is_device = np.array([c in DEVICE_ACTIVITY_CATS or c in DEVICE_OTHER_CATS
                              for c in cat_names] + [False], dtype=bool)
    ev_device_cat = cat_is_device[cat_ids] if n else np.zeros(0, bool)

    # ---- tracks: decided per distinct (pid, tid), then broadcast ----
    progress.within(0.25, "threads and devices")
    track_keys = scan["track_keys"]
    track_ids = np.asarray(scan["track_ids"], np.int32)
    raw_stats = scan["stats"]
    dev_arg = raw_stats.get("device")
    dev_of_event = np.full(n, np.iinfo(np.int64).min, np.int64)
    if dev_arg is not None:
        dev_of_event[dev_arg[0]] = dev_arg[1]
    first_dev_ev = np.full(len(track_keys), -1, np.int64)
    dev_evs = np.flatnonzero(ev_device_cat)
    if dev_evs.size:
        first_dev_ev[track_ids[dev_evs[::-1]]] = dev_evs[::-1]   # earliest wins
    tracks = Tracks()
    devices: list[Device] = []
    device_by_id: dict = {}
    remap = np.empty(len(track_keys), np.int32)
    for k, (pid, tid) in enumerate(track_keys):
        ev = int(first_dev_ev[k])
        if ev >= 0:
            dev_id = int(dev_of_event[ev]) if dev_of_event[ev] != np.iinfo(np.int64).min else pid
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

    # ---- stats ----
    progress.within(0.4, "launches and steps")
    stats = {sname: (idx, vals, False) for sname, (idx, vals) in raw_stats.items()}
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
    stats["source_index"] = (np.arange(n, dtype=np.int64),
                             np.asarray(scan["src_index"], np.int64), False)

    corr = stats.get("correlation")
    links = correlation_links(kind, ev_device_cat, corr[0] if corr else None,
                              corr[1] if corr else None)
    metadata = dict(scan["metadata"])
    metadata["process_names"] = {str(k): v for k, v in process_name.items()}
    events = {"ts": ts_rel, "dur": dur_ps, "track": track, "name": name_ids, "kind": kind}
    del ts_rel, dur_ps, track, name_ids, kind
    progress.within(0.6, "event order and nesting")
    trace = assemble(path, "kineto", strings, tracks, devices, events, stats, links, metadata,
                     warnings, origin_ps=0)
    trace.origin_ps = origin
    return trace
