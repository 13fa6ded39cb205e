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

from ..beside import Beside, side_by_side
from ..progress import NULL
from ..storage import is_blank, read_ahead
from . import classify
from .build import (StringTable, Tracks, assemble, correlation_links, distinct,
                    narrow_id_stats, unique_inverse)
# the reference scanner's names stay reachable here (``kineto.scan_python``…)
from .kineto_json import (OUT_OF_RANGE, STAT_ARGS, STRING_STAT_ARGS,  # noqa: F401
                          _FLOAT_EXACT_LIMIT_US, PythonStream, scan_python)
from .losses import kineto_losses
from .model import Device, EventKind as K, TraceError, TrackKind

DEVICE_ACTIVITY_CATS = {
    "kernel": K.KERNEL, "gpu_memcpy": K.MEMCPY, "gpu_memset": K.MEMSET,
    "Kernel": K.KERNEL, "Memcpy": K.MEMCPY, "Memset": K.MEMSET,
    "mtia_ccp_events": K.KERNEL,
}
DEVICE_OTHER_CATS = {"gpu_user_annotation": K.DEVICE_OTHER, "cuda_sync": K.SYNC}
_DEVICE_LABEL = re.compile(r"^(GPU|MTIA|TPU|XPU|HPU)\s*(\d+)", re.I)


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


# ---- the reference scanner, fed chunk by chunk ----
#
# The text is cut into units that orjson parses whole: a top-level member of the
# document, or a run of traceEvents elements.  Where units end is found from the
# structural characters outside strings (vectorised over each buffer); what is left
# after the last whole unit waits for the next chunk.  orjson decides every unit's
# validity, wrapped so that its nesting depth is the depth it has in the document.


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
    kind = _event_kinds(names, cat_names, name_ids, cat_ids, n)
    cat_is_device = np.array([c in DEVICE_ACTIVITY_CATS or c in DEVICE_OTHER_CATS
                              for c in cat_names] + [False], dtype=bool)
    ev_device_cat = cat_is_device[cat_ids] if n else np.zeros(0, bool)
    del cat_ids

    # ---- tracks: decided per distinct (pid, tid), then broadcast ----
    progress.within(0.25, "threads and devices")
    track_keys = scan["track_keys"]
    track_ids = np.asarray(scan.pop("track_ids"), np.int32)
    raw_stats = scan.pop("stats")
    tracks, devices, remap = _tracks(track_keys, track_ids, ev_device_cat,
                                     raw_stats.get("device"), process_name, process_label,
                                     thread_name)
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
        _step_and_copy_stats(kind, name_ids, names, strings, stats)
        strings = strings.freeze()      # the last name is interned: see ``StringTable.freeze``
        del names
        links = job.result() if job is not None else correlation_links(*link_args)
    del link_args
    metadata = _trace_metadata(scan["metadata"], process_name)
    events = {"ts": ts_rel, "dur": dur_ps, "track": track, "name": name_ids, "kind": kind}
    del ts_rel, dur_ps, track, name_ids, kind
    progress.within(0.6, "event order and nesting")
    trace = assemble(path, "kineto", strings, tracks, devices, events, stats, links, metadata,
                     warnings, origin_ps=0)
    trace.origin_ps = origin
    return trace


def _event_kinds(names, cat_names, name_ids, cat_ids, n) -> np.ndarray:
    """Each event's kind, decided per distinct (name, category)."""
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
    return kind


def _tracks(track_keys, track_ids, ev_device_cat, dev_arg, process_name, process_label,
            thread_name):
    """(tracks, devices, the track of each distinct (pid, tid)): a (pid, tid) with device
    activity is a device stream, of the device its args or its process name."""
    first_dev_ev = np.full(len(track_keys), -1, np.int64)
    dev_evs = np.flatnonzero(ev_device_cat)
    if dev_evs.size:
        first_dev_ev[track_ids[dev_evs[::-1]]] = dev_evs[::-1]   # earliest wins
    del dev_evs
    dev_of_track = _device_arg(dev_arg, first_dev_ev)
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
    return tracks, devices, remap


def _step_and_copy_stats(kind, name_ids, names, strings, stats) -> None:
    """Adds each step's number (from its name) and each copy's direction to ``stats``."""
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


def _trace_metadata(scan_metadata: dict, process_name: dict) -> dict:
    metadata = dict(scan_metadata)
    # of libkineto's log lines, only what it lost
    losses = kineto_losses(metadata)
    for key in ("INFO", "WARNING"):
        metadata.pop(key, None)
    if losses:
        metadata["losses"] = losses
    metadata["process_names"] = {str(k): v for k, v in process_name.items()}
    return metadata
