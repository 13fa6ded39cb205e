"""Device idle gaps: the busy set of a device, the gaps in it, and the threads whose
work the gaps are judged by.  Their causes are split in ``shares.py``."""
from __future__ import annotations

import numpy as np

from ..trace.model import EventKind as K, Trace


def device_busy(trace: Trace, device: int, kernels_only: bool):
    from .intervals import union
    # the device's tracks are slices of the event columns (sorted by track): no mask
    # over all events
    parts = []
    for lo, hi in trace.track_slices(np.flatnonzero(trace.track_device == device)):
        parts.append(lo + np.flatnonzero(trace.is_device_activity(kernels_only, lo, hi)))
    ev = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    del parts
    us, ue = union(trace.ts[ev], trace.end_of(ev))
    return ev, us, ue


def find_gaps(trace: Trace, device: int, ops: np.ndarray, us: np.ndarray, ue: np.ndarray,
              threshold_ps: int):
    """All idle intervals between the device's first and last activity; returns
    (starts, ends, prev_op, next_op) for those ≥ threshold and (starts, ends) of the rest."""
    if us.size < 2:
        z = np.zeros(0, np.int64)
        return z, z, z, z, z, z
    gs, ge = ue[:-1], us[1:]
    big = (ge - gs) >= threshold_ps
    # the op that ends each gap: the earliest-starting op at ge; the op before: the op
    # whose end is the gap start.  One sort order and its sorted times at a time (20 M
    # ops: 160 MB each, the peak of a large trace's analysis)
    n = ops.shape[0]
    t = trace.ts[ops]
    order = np.argsort(t, kind="stable")
    t = t[order]
    nxt = ops[order[np.minimum(np.searchsorted(t, ge[big], side="left"), n - 1)]]
    del t, order
    t = trace.end_of(ops)
    order = np.argsort(t, kind="stable")
    t = t[order]
    prev = ops[order[np.maximum(np.searchsorted(t, gs[big], side="right") - 1, 0)]]
    del t, order
    return gs[big], ge[big], prev, nxt, gs[~big], ge[~big]


def user_threads(trace: Trace, step_thread: int = -1) -> list:
    """The host threads the user's code runs on, main first: the thread of the step
    annotations, else the one with most user annotations, else the one with most
    Python frames."""
    host = trace.track_kind[trace.track] == 0
    out = [step_thread] if step_thread >= 0 else []
    for kinds in ((K.STEP,), (K.ANNOTATION, K.DATA), (K.PYTHON,)):
        sel = np.flatnonzero(host & np.isin(trace.kind, kinds))
        if sel.size:
            tr, cnt = np.unique(trace.track[sel], return_counts=True)
            for t in tr[np.argsort(-cnt, kind="stable")].tolist():
                if t not in out:
                    out.append(int(t))
    return out
