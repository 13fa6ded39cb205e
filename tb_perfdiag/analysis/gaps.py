"""Device idle gaps, their primary cause, and what the host was doing meanwhile.

Cause of a gap [a, b) ended by device op E (GUIDE §4):
1. If the host op that put E on the device (its *waited-for* op) was issued long
   before the gap, the device was not waiting for the host: a collective wait when E
   is a collective, else a device-side dependency (reported as host_sync when a sync
   was in flight, untraced otherwise).
2. Else, if a blocking host call (stream/device sync, device→host copy, ``.item()``)
   was in flight when the device went idle, the sync drained the queue: host_sync.
3. Else the bucket (compile, host→device transfer, data loading, launch, compute,
   idle) that took most of the gap on the stepping/launching thread wins; short gaps
   mostly spent launching are launch overhead.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..trace.build import unique_inverse
from ..trace.classify import is_collective_kernel
from ..trace.model import EventKind as K, Trace
from . import causes as C
from .result import Rule
from .hostline import (B_COMPILE, B_COMPUTE, B_DATA, B_H2D, B_IDLE, B_LAUNCH, B_SYNC, BUCKETS,
                       HostLine)

LAUNCH_BOUND_MAX_PS = 50_000_000        # gaps shorter than 50 µs can be pure launch latency
ISSUED_EARLY_PS = 20_000_000            # a launch this long before the gap did not cause it
SYNC_LOOKBACK_PS = 2_000_000            # a sync that returned within 2 µs of the gap start


@dataclass
class DeviceGaps:
    """The gaps of one device in time order, with the rule that decided each cause."""

    device: np.ndarray        # int32
    start: np.ndarray         # int64 ps
    end: np.ndarray
    prev_op: np.ndarray       # event index of the device op before (−1)
    next_op: np.ndarray       # event index of the device op ending the gap (−1)
    waited_for: np.ndarray    # host event that issued next_op (−1)
    cause: np.ndarray         # int8 index into causes.ALL
    rule: np.ndarray          # int8 result.Rule
    lead: np.ndarray          # int64 ps: gap start − waited-for start
    rule_share: np.ndarray    # float64 share of the gap in the deciding bucket
    rule_bucket: np.ndarray   # int8 the deciding bucket
    thread: np.ndarray        # host track analysed for the cause (−1)
    bucket_time: np.ndarray   # (n, n_buckets) time per bucket on that thread

    @property
    def duration(self):
        return self.end - self.start

    def __len__(self):
        return int(self.start.shape[0])


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
    # whose end is the gap start
    o_start = ops[np.argsort(trace.ts[ops], kind="stable")]
    k = np.searchsorted(trace.ts[o_start], ge[big], side="left")
    nxt = o_start[np.minimum(k, o_start.shape[0] - 1)]
    ends = trace.end_of(ops)
    o_end = ops[np.argsort(ends, kind="stable")]
    k2 = np.searchsorted(trace.end_of(o_end), gs[big], side="right") - 1
    prev = o_end[np.maximum(k2, 0)]
    return gs[big], ge[big], prev, nxt, gs[~big], ge[~big]


def user_threads(trace: Trace) -> set:
    """The host thread(s) the user's code runs on: where step annotations live, else the
    thread with most user annotations."""
    host = trace.track_kind[trace.track] == 0
    for kinds in ((K.STEP,), (K.ANNOTATION, K.DATA)):
        sel = np.flatnonzero(host & np.isin(trace.kind, kinds))
        if sel.size:
            tr, cnt = np.unique(trace.track[sel], return_counts=True)
            return {int(tr[np.argmax(cnt)])}
    return set()


def classify_gaps(trace: Trace, device: int, gs, ge, prev, nxt, origin: np.ndarray,
                  lines: dict, step_thread: int, memcpy_kind: np.ndarray,
                  buckets: np.ndarray | None = None) -> DeviceGaps:
    n = gs.shape[0]
    wf = origin[nxt] if n else np.zeros(0, np.int64)
    cause = np.zeros(n, np.int8)
    thread = np.full(n, -1, np.int64)
    bucket_time = np.zeros((n, len(BUCKETS)), np.int64)
    if n == 0:
        z = np.zeros(0, np.int64)
        return DeviceGaps(np.zeros(0, np.int32), gs, ge, prev, nxt, wf, cause, z.astype(np.int8),
                          z, z.astype(np.float64), z.astype(np.int8), thread, bucket_time)
    dur = ge - gs
    wf_ok = wf >= 0
    wf_ts = np.where(wf_ok, trace.ts[np.maximum(wf, 0)], ge)
    wf_track = np.where(wf_ok, trace.track[np.maximum(wf, 0)], -1)
    u_names, inv_names = unique_inverse(trace.name[nxt])
    collective = np.array([is_collective_kernel(trace.strings[x]) for x in u_names.tolist()],
                          bool)[inv_names]
    next_is_h2d = (trace.kind[nxt] == K.MEMCPY) & (memcpy_kind[nxt] == 1)

    # time per bucket on the launching thread and on the stepping thread; keep the one
    # that was less idle (the launching thread of an XLA executor is mostly idle)
    candidates = []
    for t in set(wf_track[wf_ok].tolist()) | ({step_thread} if step_thread >= 0 else set()) \
            | user_threads(trace):
        if t in lines:
            candidates.append(t)
    if not candidates and lines:
        # no links and no steps: the busiest host thread
        candidates = [max(lines, key=lambda t: lines[t].busy_ns())]
    best_idle = np.full(n, np.iinfo(np.int64).max)
    for t in candidates:
        bt = lines[t].time_by_bucket(gs, ge)
        idle = dur - bt[:, :B_IDLE].sum(axis=1)
        prefer = (wf_track == t) * 1  # tie → launching thread
        better = (idle < best_idle) | ((idle == best_idle) & (prefer > 0))
        bt[:, B_IDLE] = idle
        bucket_time[better] = bt[better]
        best_idle = np.where(better, idle, best_idle)
        thread[better] = t
    if not candidates:
        bucket_time[:, B_IDLE] = dur

    # was a blocking call in flight as the device went idle?
    sync_at_start = np.zeros(n, bool)
    for t in candidates + [x for x in lines if x not in candidates]:
        w = lines[t].time_by_bucket(gs - SYNC_LOOKBACK_PS, gs + np.maximum(dur // 4, 1))
        sync_at_start |= w[:, B_SYNC] > 0
    # issued early = the call that put the op on the device had returned well before the
    # gap; a blocking call still running during the gap (a staged memcpy) is the cause
    wf_end = np.where(wf_ok, trace.end_of(np.maximum(wf, 0)), ge)
    issued_early = wf_ok & (wf_end < gs - ISSUED_EARLY_PS)
    # launch-bound: a short gap ended by a kernel no longer than the call that launched it
    wf_launch = wf_ok & (trace.kind[np.maximum(wf, 0)] == K.LAUNCH)
    wf_dur = np.where(wf_ok, trace.dur[np.maximum(wf, 0)], 0)
    tiny_kernel = (trace.dur[nxt] <= 2 * wf_dur) | (dur <= 2 * wf_dur)
    launch_bound = (dur < LAUNCH_BOUND_MAX_PS) & wf_launch & tiny_kernel & \
        (trace.kind[nxt] == K.KERNEL)

    bucket_cause = {B_SYNC: C.HOST_SYNC, B_COMPILE: C.COMPILATION, B_H2D: C.H2D_TRANSFER,
                    B_DATA: C.DATA_LOADING, B_COMPUTE: C.HOST_COMPUTE,
                    B_LAUNCH: C.LAUNCH_OVERHEAD, B_IDLE: C.UNTRACED}
    # the rules of the module docstring, as masks over all gaps at once
    dom = np.argmax(bucket_time, axis=1)
    share = bucket_time / np.maximum(dur, 1)[:, None]
    early_coll = issued_early & collective
    early_sync = issued_early & ~collective & sync_at_start
    early_other = issued_early & ~collective & ~sync_at_start
    late = ~issued_early
    drained = late & sync_at_start & ~np.isin(dom, (B_COMPILE, B_DATA)) & (
        share[:, B_SYNC] + share[:, B_COMPUTE] + share[:, B_LAUNCH] + share[:, B_IDLE] >= 0.5)
    staged = late & ~drained & next_is_h2d & (share[:, B_H2D] + share[:, B_LAUNCH] >= 0.3)
    rest = late & ~drained & ~staged
    b = dom.copy()
    b[rest & np.isin(dom, (B_COMPUTE, B_LAUNCH, B_IDLE)) & (
        launch_bound | ((dur < LAUNCH_BOUND_MAX_PS) & (share[:, B_LAUNCH] >= 0.3)))] = B_LAUNCH
    idx = {c: i for i, c in enumerate(C.ALL)}
    bucket_to_cause = np.array([idx[bucket_cause[k]] for k in range(len(BUCKETS))], np.int8)
    cause[:] = bucket_to_cause[b]
    cause[early_coll] = idx[C.COLLECTIVE_WAIT]
    cause[early_sync | drained] = idx[C.HOST_SYNC]
    cause[early_other] = idx[C.UNTRACED]
    cause[staged] = idx[C.H2D_TRANSFER]

    rule = np.full(n, Rule.HOST_BUCKET, np.int8)
    rule[early_coll] = Rule.COLLECTIVE_ISSUED_EARLY
    rule[early_sync] = Rule.ISSUED_EARLY_WITH_SYNC
    rule[early_other] = Rule.ISSUED_EARLY
    rule[drained] = Rule.DRAINED_BY_SYNC
    rule[staged] = Rule.STAGED_H2D
    lead = gs - wf_ts
    rule_share = share[np.arange(n), b]

    for i in np.flatnonzero(cause == idx[C.H2D_TRANSFER]).tolist():
        if buckets is not None and thread[i] in lines and \
                (not wf_ok[i] or buckets[wf[i]] != B_H2D):
            # the device waited for the transfer itself, not for the launch after it
            t_ev = _last_in_bucket(lines[int(thread[i])], int(gs[i]), int(ge[i]), B_H2D)
            while t_ev >= 0 and trace.parent[t_ev] >= 0 and buckets[trace.parent[t_ev]] == B_H2D:
                t_ev = int(trace.parent[t_ev])
            if t_ev >= 0:
                wf[i] = t_ev
    return DeviceGaps(np.full(n, device, np.int32), gs, ge, prev, nxt, wf, cause, rule, lead,
                      rule_share, b.astype(np.int8), thread, bucket_time)


def _last_in_bucket(line: HostLine, a: int, b: int, bucket: int) -> int:
    """The innermost op of the last segment in [a, b) spent in ``bucket`` (−1 if none)."""
    s, _, inner = line.segments(a, b)
    lo = max(int(np.searchsorted(line.seg_start, a, side="right")) - 1, 0)
    hi = int(np.searchsorted(line.seg_start, b, side="left"))
    bk = line.seg_bucket[lo:hi]
    keep = np.flatnonzero((bk == bucket) & (line.seg_inner[lo:hi] >= 0))
    return int(line.seg_inner[lo + keep[-1]]) if keep.size else -1
