"""Each device's gaps, split by cause and counted per step window: the loop the analysis
runs over its devices.  Per device: its busy set (found beside the first stages where the
trace allows, else here), its step windows, its gaps with the steps' idle before its first
op and after its last, each gap's split (``shares.split``), and the window numbers (busy,
idle by cause, short gaps) — taken while the busy set is at hand, which is not kept.
The device time each step launched and the overlap of compute, copies and collectives
read the ops and the busy time alone: found on the second core meanwhile."""
from __future__ import annotations

from contextlib import nullcontext

import numpy as np

from ...beside import Beside
from ...trace.model import EventKind as K, Trace
from .. import causes as C
from ..device_time.by_op import fill_overlap
from ..intervals import covered, total_length, window_pairs
from ..result import DeviceTable, GapTable
from ..steps.windows import device_windows, gap_steps, launched_busy
from .busy import device_busy, find_gaps, short_gaps
from .shares import split


def _window_numbers(wb, we, us, ue, gt, n_causes):
    """Per step window of one device: busy time and idle time by cause (each gap's
    shares; a gap spanning a window boundary counts in each window for its overlap,
    shares in proportion)."""
    wb, we = np.asarray(wb, np.int64), np.asarray(we, np.int64)
    open_ = we > wb
    busy = np.where(open_, covered(us, ue, wb, np.maximum(we, wb)), 0)
    by_cause = np.zeros((wb.shape[0], n_causes), np.int64)
    if len(gt):
        gs, ge, sh = gt.start, gt.end, gt.shares
        g, w, ov, _ = window_pairs(wb, we, gs, ge)
        ov = np.where(open_[w], ov, 0)
        whole = ov == (ge - gs)[g]
        part = np.where(whole[:, None], sh[g],
                        np.rint(sh[g] * (ov / np.maximum(ge - gs, 1)[g])[:, None]).astype(np.int64))
        np.add.at(by_cause, w, part)
    return wb, we, busy, by_cause



def _step_events(trace: Trace, d: int) -> np.ndarray:
    """The step events on device ``d``'s tracks, read off each track's slice (a mask over
    every event and its track's device was 230 MB at 40 M events, at the analysis'
    peak)."""
    got = [lo + np.flatnonzero(trace.kind[lo:hi] == K.STEP) for lo, hi in
           trace.track_slices(np.flatnonzero(trace.track_device == d))]
    return np.concatenate(got) if got else np.zeros(0, np.int64)


def _first_min(values: np.ndarray, at: np.ndarray, block: int = 1 << 20) -> int:
    """``np.argmin(values[at])``, a block of ``at`` at a time (no gather of them all)."""
    best, pos = None, 0
    for i in range(0, at.shape[0], block):
        v = values[at[i:i + block]]
        j = int(np.argmin(v))
        if best is None or v[j] < best:
            best, pos = v[j], i + j
    return pos



def _edge_gaps(trace, ops, wb, we, lo, hi, gaps, threshold_ps):
    """The device's gaps with the steps' idle before its first op ([first window start,
    lo)) and after its last ([hi, last window end)) added in time order: (gs, ge, prev,
    nxt) with −1 for no op, and the edges under the threshold as (start, end) pairs.
    Each edge is cut at the windows' bounds: a device whose first op runs after the last
    step ends idles for the steps' span in them (not an 840 ms "gap in step 0" of a
    19.9 ms step), and from their end to that op after the last step."""
    gs, ge, prev, nxt = gaps
    open_ = we > wb
    if not open_.any():
        return gaps, []
    w_lo, w_hi = int(wb[open_].min()), int(we[open_].max())
    short, add = [], []
    pieces = []
    if lo > w_lo:
        first = int(ops[_first_min(trace.ts, ops)])
        pieces += [(w_lo, min(lo, w_hi), -1, first)] + \
            ([(w_hi, lo, -1, first)] if lo > w_hi else [])
    if w_hi > hi:
        last = int(ops[int(np.argmax(trace.end_of(ops)))])
        pieces += ([(hi, w_lo, last, -1)] if hi < w_lo else []) + \
            [(max(hi, w_lo), w_hi, last, -1)]
    for a, b, p, n in pieces:
        if b - a >= threshold_ps:
            add.append((a, b, p, n))
        else:
            short.append((a, b))
    if not add:
        return gaps, short
    a = np.array(add, np.int64)
    cat = [np.concatenate((np.asarray(x, np.int64), a[:, i])) for i, x in
           enumerate((gs, ge, prev, nxt))]
    o = np.argsort(cat[0], kind="stable")
    return tuple(c[o] for c in cat), short


def _add_short(wb, we, sm_n, sm_t, a, b) -> None:
    """Count a short edge [a, b) in the window it lies in (most of it)."""
    ov = np.maximum(np.minimum(we, b) - np.maximum(wb, a), 0)
    if ov.size and ov.max() > 0:
        k = int(np.argmax(ov))
        sm_n[k] += 1
        sm_t[k] += b - a


class _DeviceGaps:
    """One device's gaps in time order with their split (gathered, then sorted)."""

    def __init__(self, device, gs, ge, prev, nxt, wf, sp):
        self.device = np.full(gs.shape[0], device, np.int32)
        self.start, self.end, self.prev_op, self.next_op, self.waited_for = gs, ge, prev, nxt, wf
        self.cause, self.shares, self.rest_end = sp.primary, sp.shares, sp.rest_end
        self.thread, self.followed, self.blocking = sp.thread, sp.followed, sp.blocking
        self.drained, self.culprit = sp.drained, sp.culprit

    def __len__(self):
        return int(self.start.shape[0])


def _issuer(trace: Trace, origin, root, nxt, users, executors=()) -> np.ndarray:
    """The host call that issued each op: its direct origin (a launch), or, when that is
    on a runtime thread (an XLA executor), the user's dispatch it traces back to.
    ``executors``: the host threads that run XLA thread-pool regions."""
    wf = origin[nxt].astype(np.int64)
    r = root[nxt].astype(np.int64)
    if users:
        on_user = np.isin(trace.track[np.maximum(r, 0)], users) & (r >= 0)
        direct_user = np.isin(trace.track[np.maximum(wf, 0)], users) & (wf >= 0)
        # a kernel launch on an XLA executor thread (one that runs thread-pool regions)
        # issued the op itself: the user's dispatch only queued the program
        w = np.maximum(wf, 0)
        executor = (wf >= 0) & (trace.kind[w] == K.LAUNCH) & \
            np.isin(trace.track[w], executors)
        wf = np.where(on_user & ~direct_user & ~executor, r, wf)
    return wf


def gap_table(trace, steps, gaps_all, windows, via) -> GapTable:
    if not gaps_all or not sum(len(g) for g in gaps_all):
        return GapTable.empty(len(C.ALL))
    gap_step = []
    for g in gaps_all:
        # a gap is in the step whose window holds most of it (GUIDE §4: the window is the
        # step), else before the first step or after the last: the one place the gap
        # list, the findings, the step chart and the notes all name (``gap_steps``)
        if steps.source == "whole_trace" or not len(g):
            st = np.zeros(len(g), np.int32)
        else:                          # a device with gaps has ops, so windows
            wb, we = windows[int(g.device[0])][:2]
            st = gap_steps(wb, we, g.start, g.end)
        gap_step.append(st.astype(np.int32))
    cat = lambda name: np.concatenate([getattr(g, name) for g in gaps_all])  # noqa: E731
    start, end = cat("start"), cat("end")
    order = np.lexsort((start, -(end - start)))
    col = lambda name: cat(name)[order]  # noqa: E731
    nxt = col("next_op").astype(np.int64)
    start, end = start[order], end[order]
    blocking = col("blocking").astype(np.int64)
    b_track = trace.track[np.maximum(blocking, 0)]
    return GapTable(
        device=col("device").astype(np.int32), start=start, end=end,
        step=np.concatenate(gap_step)[order], prev_op=col("prev_op").astype(np.int64),
        next_op=nxt, waited_for=col("waited_for").astype(np.int64),
        found_via=via[np.maximum(nxt, 0)].astype(np.int8), cause=col("cause").astype(np.int8),
        shares=np.concatenate([g.shares for g in gaps_all])[order],
        rest_end=col("rest_end"), thread=col("thread").astype(np.int32),
        followed=col("followed").astype(np.int32), blocking=blocking,
        blocking_track=np.where(blocking >= 0, b_track, -1).astype(np.int32),
        drained=col("drained"), culprit=col("culprit").astype(np.int64))


def _launched_and_overlap(trace: Trace, steps, ev_step, device_ops, noncompute, d: int,
                          ops: np.ndarray, busy_t: int, kernels_only: bool):
    """Device ``d``'s launched time per step (None where the steps are not the host's,
    ``launched_busy``), and its rows' overlap filled in (``fill_overlap``)."""
    launched = None
    if steps.source in ("host_annotations", "modules", "training_loop", "backward_passes"):
        # per step, the device time it launched, wherever that ran (GUIDE §4); the
        # windows are cut so that it runs in them, which ``busy`` measures
        launched = launched_busy(trace.ts, None, None, steps.ids.shape[0], ops, trace.dur,
                                 event_step=ev_step)
    fill_overlap(trace, device_ops, noncompute, ev_step, d, ops, busy_t, launched, kernels_only)
    return launched


def device_gaps(trace, opt, threshold_ps, busy_sets, steps, ev_step, device_ops, noncompute,
                paired, origin, root, users, executors, ctx, get_next, progress) -> tuple:
    """(DeviceTable, [_DeviceGaps], {device: window numbers}, {device: launched time per
    step}) over every device of ``trace``."""
    n_dev, n_causes = len(trace.devices), len(C.ALL)
    cols = {k: np.zeros(n_dev, np.int64) for k in ("busy", "ops", "small_n", "small_t")}
    cols.update({k: np.full(n_dev, -1, np.int64) for k in ("lo", "hi", "win_lo", "win_hi")})
    dev_idle = np.zeros((n_dev, n_causes), np.int64)
    gaps_all, windows, launched = [], {}, {}
    for d, dev in enumerate(trace.devices):
        progress.stage(0.5 + 0.3 * d / max(n_dev, 1), f"gaps on {dev.name}")
        ops, us, ue, big = busy_sets.pop(d, None) or \
            device_busy(trace, d, opt.kernels_only, threshold_ps)
        if ops.size == 0:
            continue
        lo, hi, busy_t = int(us[0]), int(ue[-1]), total_length(us, ue)
        over = (trace, steps, ev_step, device_ops, noncompute, d, ops, busy_t, opt.kernels_only)
        with Beside(_launched_and_overlap, *over) if paired else nullcontext() as over_job:
            gt, windows[d], small = _one_device(
                trace, d, steps, ev_step, ops, us, ue, big, lo, hi, threshold_ps, n_causes,
                origin, root, users, executors, ctx, get_next)
            del us, ue, big
            got = over_job.result() if over_job is not None else _launched_and_overlap(*over)
        del over
        gaps_all.append(gt)
        if got is not None:
            launched[d] = got
        if len(gt):
            dev_idle[d] = gt.shares.sum(axis=0)
        cols["small_n"][d], cols["small_t"][d] = small
        cols["busy"][d], cols["lo"][d], cols["hi"][d], cols["ops"][d] = busy_t, lo, hi, ops.size
        wb, we = windows[d][:2]
        open_ = we > wb
        cols["win_lo"][d] = min(lo, int(wb[open_].min())) if open_.any() else lo
        cols["win_hi"][d] = max(hi, int(we[open_].max())) if open_.any() else hi
        del ops
    devices = DeviceTable([d.name for d in trace.devices], [d.kind for d in trace.devices],
                          cols["ops"], cols["busy"], cols["lo"], cols["hi"], dev_idle,
                          cols["small_n"], cols["small_t"], cols["win_lo"], cols["win_hi"])
    return devices, gaps_all, windows, launched


def _one_device(trace, d, steps, ev_step, ops, us, ue, big, lo, hi, threshold_ps, n_causes,
                origin, root, users, executors, ctx, get_next) -> tuple:
    """(its gaps with their split, its window numbers, (short gaps' count, time)) of
    device ``d``, whose ops and busy set are given."""
    own = steps.runs.get(d) if steps.source == "modules" else _step_events(trace, d)
    # the ops' steps and ends are read a block at a time, or in place (20 M ops:
    # 80 MB of steps and 160 MB of ends, at the peak of the analysis)
    wb, we = device_windows(steps, None, None, hi, own, trace, ops, event_step=ev_step)
    gs, ge, prev, nxt = big if big is not None else \
        find_gaps(trace, d, ops, us, ue, threshold_ps)
    del big
    # the steps' idle before the device's first op and after its last is idle like
    # any other (step 0 compiling or loading data; the host working on after the
    # device's last op): gaps of their own, split alike, or short ones
    (gs, ge, prev, nxt), edge_short = _edge_gaps(trace, ops, wb, we, lo, hi,
                                                 (gs, ge, prev, nxt), threshold_ps)
    # a gap with no op after it (the tail) is judged by its last op: no launch
    ends = np.where(nxt >= 0, nxt, prev)
    wf = np.where(nxt >= 0, _issuer(trace, origin, root, ends, users, executors), -1)
    sp = split(trace, gs, ge, ends, wf, ops, us, ue, ctx, users, get_next)
    # waited_for names the call that issued the op (a launch, an execute); the split
    # judges by the user's dispatch that call traces back to
    behind = np.where(nxt >= 0, origin[np.maximum(nxt, 0)], -1).astype(np.int64)
    gt = _DeviceGaps(d, gs, ge, prev, nxt, behind, sp)
    del behind
    wb, we, busy, by_cause = _window_numbers(wb, we, us, ue, gt, n_causes)
    sm_n, sm_t, small_n, small_t = short_gaps(us, ue, threshold_ps, wb, we)
    for a, b in edge_short:
        _add_short(wb, we, sm_n, sm_t, a, b)
        small_n += 1
        small_t += b - a
    return gt, (wb, we, busy, by_cause, sm_n, sm_t), (small_n, small_t)
