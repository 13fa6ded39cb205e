"""An XSpace's lines → tracks, devices and event kinds: a track per line, a device per
device plane (and "CPU (XLA)" where host threads ran HLO ops)."""
from __future__ import annotations

import re

import numpy as np

from . import classify
from .build import StringTable, Tracks, unique_inverse
from .model import Device, EventKind as K, TrackKind
from .xspace_planes import _DEVICE_PLANE, _group, _size, _where


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
