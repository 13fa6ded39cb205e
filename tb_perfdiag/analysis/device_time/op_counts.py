"""Count and time of every op name, over the trace, the steps and the typical steps.

What a before/after comparison reads to say which ops changed (``cudaMemcpyAsync``
calls per step, a kernel's device time): host ops are counted with their inclusive
time, device ops (kernels, copies, sets) with their device time.  Each event belongs to
the step ``launching_steps`` gave it (device work: the step that launched it).  Step
markers, Python frames, user annotations (their device time is the annotation table's)
and idle markers are no ops.  Two C passes over the events where the extension is built
(a tenth of the time); else one ``bincount`` per column over fixed-size chunks of the
trace.  Either way no Python object per event, and temporaries bounded on 40 M-event
traces.
"""
from __future__ import annotations

import numpy as np

from ...trace.build import native_fn
from ...trace.model import DEVICE_ACTIVITY, EventKind as K, Trace, TrackKind
from ...trace.strings import take
from ..result import OpTable

_NOT_OPS = (K.STEP, K.PYTHON, K.ANNOTATION, K.IDLE, K.DEVICE_OTHER)
_CHUNK = 1 << 21


def op_table(trace: Trace, ev_step: np.ndarray, typical: np.ndarray) -> OpTable:
    """``ev_step``: step index of every event (−1 none); ``typical``: bool per step, the
    steps a typical step is averaged over."""
    typical = np.asarray(typical, bool)
    dev_kinds = np.zeros(256, bool)
    dev_kinds[list(DEVICE_ACTIVITY)] = True
    not_op = np.zeros(256, bool)
    not_op[list(_NOT_OPS)] = True
    on_device = trace.track_kind == TrackKind.DEVICE
    got = _native_counts(trace, ev_step, typical, dev_kinds, not_op, on_device)
    ids, cnt, tim, kind_of = got if got is not None else \
        _counts(trace, ev_step, typical, dev_kinds, not_op, on_device)
    names = take(trace.strings, ids[0].tolist()) + take(trace.strings, ids[1].tolist())
    device = np.concatenate([np.full(x.shape[0], side == 1) for side, x in enumerate(ids)])
    c = np.concatenate(cnt).reshape(-1, 3)
    t = np.concatenate(tim).reshape(-1, 3)
    return OpTable(names, device, np.concatenate(kind_of), c.sum(axis=1), t.sum(axis=1),
                   c[:, 1] + c[:, 2], t[:, 1] + t[:, 2], c[:, 2].copy(), t[:, 2].copy(),
                   int(typical.sum()), int(typical.shape[0]))


def _counts(trace: Trace, ev_step: np.ndarray, typical: np.ndarray, dev_kinds, not_op,
            on_device):
    """Per side (host ops, device ops): the names, and per name and cell its count, time
    and kind; in numpy, chunk by chunk."""
    n = trace.n_events

    def chunks():
        for lo in range(0, n, _CHUNK):
            hi = min(lo + _CHUNK, n)
            kind = trace.kind[lo:hi].view(np.uint8)      # table lookups need no copy
            dev_track = on_device[trace.track[lo:hi]]
            yield lo, hi, kind, (~(dev_track | not_op[kind]), dev_kinds[kind] & dev_track)

    # the names ops carry, numbered densely (string ids also number stat values)
    used = np.zeros((2, len(trace.strings)), bool)
    for lo, hi, _, masks in chunks():
        for side in (0, 1):
            used[side, trace.name[lo:hi][masks[side]]] = True
    ids = [np.flatnonzero(used[side]) for side in (0, 1)]
    dense = np.full((2, len(trace.strings)), -1, np.int32)
    for side in (0, 1):
        dense[side, ids[side]] = np.arange(ids[side].shape[0], dtype=np.int32)
    del used
    # per side and name, three cells: outside every step, in a step that is not typical,
    # in a typical step; one bincount of (name × 3 + cell) for the counts and one for the
    # times (ps weights are exact in float64 up to 2**53 ps, 2.5 h, per cell)
    cell_of = np.array([1, 2], np.int8)
    cnt = [np.zeros(3 * x.shape[0], np.int64) for x in ids]
    tim = [np.zeros(3 * x.shape[0], np.float64) for x in ids]
    kind_of = [np.zeros(x.shape[0], np.int8) for x in ids]
    for lo, hi, kind, masks in chunks():
        step = ev_step[lo:hi]
        cell = np.where(step >= 0, cell_of[typical[np.maximum(step, 0)].astype(np.intp)]
                        if typical.size else 1, 0)
        for side in (0, 1):
            m = masks[side]
            if not m.any():
                continue
            nm = dense[side, trace.name[lo:hi][m]]
            code = nm.astype(np.int64) * 3 + cell[m]
            k = cnt[side].shape[0]
            cnt[side] += np.bincount(code, minlength=k)
            tim[side] += np.bincount(code, weights=trace.dur[lo:hi][m], minlength=k)
            kind_of[side][nm] = kind[m].view(np.int8)
    return ids, cnt, [np.rint(x).astype(np.int64) for x in tim], kind_of


def _native_counts(trace: Trace, ev_step, typical, dev_kinds, not_op, on_device):
    """``_counts`` in two C passes over the events, or None without the extension."""
    fn = native_fn("op_counts")
    widths = (np.int8, np.int16, np.int32, np.int64)
    if fn is None or ev_step.dtype not in widths or trace.name.dtype != np.int32 \
            or trace.track.dtype not in widths:
        return None
    sides = fn(trace.name, trace.kind, np.ascontiguousarray(trace.track),
               np.ascontiguousarray(trace.dur, np.int64),
               np.ascontiguousarray(ev_step), np.ascontiguousarray(typical, bool),
               np.ascontiguousarray(on_device, bool), dev_kinds, not_op, len(trace.strings))
    ids, cnt, tim, kind_of = [], [], [], []
    for i, c, t, k in sides:
        ids.append(np.frombuffer(i, np.int32).astype(np.int64))
        cnt.append(np.frombuffer(c, np.int64))
        tim.append(np.frombuffer(t, np.int64))
        kind_of.append(np.frombuffer(k, np.int8))
    return ids, cnt, tim, kind_of
