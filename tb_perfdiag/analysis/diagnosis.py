"""``diagnose(trace) → Diagnosis``: steps, duty cycle, gaps, annotations, findings.

Pure functions of the trace model; the result is typed (``result.py``) and rendered
elsewhere (``tb_perfdiag.render``).
"""
from __future__ import annotations

import gc
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass

import numpy as np

from ..trace.pages import high_water, keep_under_high_water, recycled_pages, room_under_high_water
from ..progress import NULL
from ..trace.build import unique_inverse
from ..trace.classify import memcpy_kind
from ..trace.strings import strings_nbytes
from ..trace.model import EventKind as K, Trace
from .device_time import annotations as ann_mod
from . import causes as C
from .findings import detectors as find_mod
from .steps import usercalls
from .attribution.links import (
    dispatch_threads,
    incoming_host_link,
    origins,
    region_threads,
    root_origin,
)
from .gaps.detail import host_ops
from .gaps.busy import device_busy, find_gaps, short_gaps, user_threads
from .attribution.hostline import blocking_mask, build_hostlines, event_buckets
from .intervals import covered, total_length, window_pairs
from ..beside import Beside, side_by_side
from .attribution.culprits import framework
from .attribution.eventcodes import EventCodes, FewValues
from .attribution.refs import event_refs
from .device_time.op_counts import op_table
from .device_time.by_op import device_op_table, fill_overlap
from .collectives.instances import collective_ops, collective_table
from .gaps.shares import split
from .steps.startup import first_step_end, profiler_cost, startup_ranges, startup_roots, steps_with_startup
from .steps.capture_notes import capture_notes, outside_step_gaps, startup_note
from .gaps.tfdata import get_next_spans
from .result import DeviceTable, Diagnosis, GapTable, StepNumbers, typical_of
from .efficiency import mfu as eff_mod, sums as eff_sums
from .steps.windows import device_windows, find_steps, gap_steps, launched_busy, launching_steps

DEFAULT_THRESHOLD_US = 5.0
DETAIL_LIMIT = 200            # gaps with host-op detail up front (largest first; the page
                              # lists 200 at a time, /gap computes the rest on demand)

@dataclass
class Options:
    threshold_us: float = DEFAULT_THRESHOLD_US
    kernels_only: bool = False
    detail_limit: int = DETAIL_LIMIT  # largest gaps whose host ops are computed up front
    peak_tflops: float | None = None  # the peak MFU is taken against (None: the device's)

    def key(self) -> tuple:
        return (float(self.threshold_us), bool(self.kernels_only), int(self.detail_limit),
                float(self.peak_tflops) if self.peak_tflops else None)


@dataclass
class HostContext:
    """What later requests about the same trace need (gap detail, timeline, overlay with
    events): the trace itself and the host timelines built for the analysis."""

    trace: Trace
    origin: np.ndarray
    via: np.ndarray
    memcpy_of: EventCodes       # the copy's direction, 1 h2d, 2 d2h, on device memcpys
    launch_memcpy: EventCodes   # the same on the host calls that issued them
    lines: dict

    def nbytes(self) -> int:
        t = self.trace
        n = sum(getattr(t, f).nbytes for f in ("ts", "dur", "track", "name", "kind", "depth",
                                                "parent", "link_src", "link_dst", "link_kind"))
        n += sum(s.nbytes() for s in t.stats.values())
        n += strings_nbytes(t.strings)
        n += sum(a.nbytes for a in (self.origin, self.via, self.memcpy_of, self.launch_memcpy))
        n += sum(ln.nbytes() for ln in self.lines.values())
        return int(n)


@contextmanager
def no_cyclic_gc():
    """For code that makes many small acyclic objects (culprit descriptions, gap
    records): the cyclic collector would rescan them again and again meanwhile."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


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


def diagnose_trace(trace: Trace, options: Options | None = None, progress=NULL) -> Diagnosis:
    """The whole diagnosis of one trace; ``progress`` is told which stage runs."""
    return analyse(trace, options, progress)[0]


def analyse(trace: Trace, options: Options | None = None, progress=NULL):
    """(Diagnosis, HostContext): the diagnosis and what later requests on the same trace
    need from the analysis (kept by the server beside the result)."""
    mark = high_water()
    with no_cyclic_gc(), recycled_pages(room_under_high_water(trace.read_peak)):
        return _diagnose(trace, options or Options(), _Stages(progress, mark))


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


def _ns_round(ps) -> np.ndarray:
    """ps → ns as reported (half to even)."""
    return np.rint(np.asarray(ps, np.float64) / 1000).astype(np.int64)


class _Stages:
    """The caller's progress, told each stage; as each begins the kept pages are put
    under the high-water mark the analysis began under, less what the process grew
    outside the arrays since (its Python objects, malloc's heap: 0.1 GB at 40 M events,
    on top of pages kept up to the read's mark)."""

    def __init__(self, progress, mark: int):
        self.progress, self.mark = progress, mark

    def stage(self, at: float, what: str) -> None:
        keep_under_high_water(self.mark)
        self.progress.within(at, what)

    def __getattr__(self, name):
        return getattr(self.progress, name)


def _annotations_then_costs(ann_args: tuple, dev_ops: np.ndarray):
    return ann_mod.device_time(*ann_args), eff_sums.costs_ahead(ann_args[0], dev_ops)


def _diagnose(trace: Trace, opt: Options, progress):
    # the stages run beside this thread are waited for however the analysis ends
    with ExitStack() as beside:
        return _stages(trace, opt, progress, beside)


def _stages(trace: Trace, opt: Options, progress, beside: ExitStack):
    progress.phase("analysing", "call chains")
    threshold_ps = int(round(opt.threshold_us * 1e6))
    n_causes = len(C.ALL)
    warnings = list(trace.warnings)

    linked = incoming_host_link(trace)
    origin, via = origins(trace, linked)
    origin = _small(origin)
    # the host timelines and the devices' busy sets need only the trace and the origins:
    # found on the second core while the steps, the device time by annotation and by op
    # are found here, where the memory they hold on top of those stages' allows
    paired = host_side_beside(trace)
    host_side = (_host_side, trace, origin, via, opt.kernels_only, threshold_ps, paired)
    ctx_job = beside.enter_context(Beside(*host_side)) if paired else None
    progress.stage(0.08, "steps")
    steps = find_steps(trace)
    # per-event columns held through the analysis are int32 event indices and steps as
    # narrow as their count allows: on a 40 M-event trace each int64 column costs 320 MB
    root = _small(root_origin(trace, origin, linked=linked))
    del linked
    ev_step = launching_steps(trace, steps, root)
    # from here it is read at ops and launches only: held as a code per event into its
    # few values (a hundred dispatches at 40 M events: 114 MB fewer from the device time
    # by annotation on)
    root = FewValues.of(root)
    # device time per annotation first: its temporaries are the largest of the analysis,
    # and the host timelines built next are not needed for it
    progress.stage(0.15, "device time by annotation")
    dev_ops = np.flatnonzero(trace.is_device_activity(opt.kernels_only))
    coll_ops = collective_ops(trace, dev_ops)
    coll_step = ev_step[coll_ops]
    op_step = ev_step[dev_ops]
    # the annotation path of each op, which both tables read; then the device time by
    # annotation is found on the second core while the device time by op is found here
    # (each with its own memo of stat lookups: they add to it)
    memo: dict = {}
    pid, paths = ann_mod.op_paths(trace, dev_ops, root, memo) if dev_ops.size else (None, [])
    ann_args = (trace, dev_ops, op_step, steps.ids, root, (pid, paths, dict(memo)))
    # the ops' cost figures after it on the same core, where they are the ops' own (an
    # XSpace's): the second core is free from there until the gaps
    ann_job = beside.enter_context(Beside(_annotations_then_costs, ann_args, dev_ops)) \
        if paired else None
    users = user_threads(trace, steps.thread) or dispatch_threads(trace, root)
    compilations = usercalls.compilations(trace, steps, root, users)
    # the compilation table is the one count: per step, in findings and in the JSON
    n_steps = steps.ids.shape[0]
    compile_ev, compile_step = compilations.event, compilations.step.astype(np.int64)
    c_count = np.bincount(compile_step[compile_step >= 0], minlength=n_steps) \
        if compile_ev.size else np.zeros(n_steps, np.int64)
    host_ns = _ns_round(steps.host_end) - _ns_round(steps.host_start)
    if n_steps >= 3:
        outlier = (host_ns > 1.5 * float(np.median(host_ns))) | (c_count > 0)
    else:
        outlier = np.zeros(n_steps, bool)
    # a step with start-up in it (context creation, the profiler starting) is no typical
    # step: the steady state leaves it out
    if n_steps >= 2:
        outlier |= steps_with_startup(trace, startup_roots(trace, first_step_end(steps)),
                                      steps.host_start, steps.host_end)
    progress.stage(0.3, "device time by op")
    # its overlap columns come from the busy figures the gap analysis makes (below); its
    # per-step cells are cut, so it sums the typical steps (StepNumbers.typical) itself
    op_rows: list = []
    device_ops, noncompute = device_op_table(
        trace, dev_ops, op_step, n_steps, origin, pid, paths, memo,
        defer_overlap=True, typical=typical_of(outlier), op_rows=op_rows)
    annotations, op_costs = ann_job.result() if ann_job is not None else \
        (ann_mod.device_time(*ann_args), None)
    # the ops' cost figures folded into per step, device and row sums (none kept per op),
    # once the device time by annotation beside is done: their per-op columns and its
    # temporaries never add up
    costs = eff_sums.gather(trace, dev_ops, op_step, n_steps, device_ops, op_rows, op_costs)
    del op_costs
    del dev_ops, op_step, pid, paths, memo, ann_args
    progress.stage(0.35, "host timelines")
    ctx, executors, get_next, busy_sets = ctx_job.result() if ctx_job is not None else \
        host_side[0](*host_side[1:])
    transfers = usercalls.transfers(trace, steps, users)

    n_dev = len(trace.devices)
    dev_busy = np.zeros(n_dev, np.int64)
    dev_lo = np.full(n_dev, -1, np.int64)
    dev_hi = np.full(n_dev, -1, np.int64)
    dev_ops_n = np.zeros(n_dev, np.int64)
    dev_idle = np.zeros((n_dev, n_causes), np.int64)
    dev_small_n = np.zeros(n_dev, np.int64)
    dev_small_t = np.zeros(n_dev, np.int64)
    dev_win_lo = np.full(n_dev, -1, np.int64)     # its activity and its steps' windows
    dev_win_hi = np.full(n_dev, -1, np.int64)
    # per device: its step windows, and their numbers (busy, idle by cause, short gaps),
    # taken while its busy set is at hand: the busy set and its holes are not kept
    gaps_all, windows, launched = [], {}, {}
    for d, dev in enumerate(trace.devices):
        progress.stage(0.5 + 0.3 * d / max(n_dev, 1), f"gaps on {dev.name}")
        ops, us, ue, big = busy_sets.pop(d, None) or \
            device_busy(trace, d, opt.kernels_only, threshold_ps)
        if ops.size == 0:
            continue
        lo, hi, busy_t = int(us[0]), int(ue[-1]), total_length(us, ue)
        # the device time each step launched and the overlap of compute, copies and
        # collectives read the ops and the busy time alone: found on the second core
        # while the windows and the gaps are found here
        over = (trace, steps, ev_step, device_ops, noncompute, d, ops, busy_t, opt.kernels_only)
        with Beside(_launched_and_overlap, *over) if paired else nullcontext() as over_job:
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
            gaps_all.append(gt)
            wb, we, busy, by_cause = _window_numbers(wb, we, us, ue, gt, n_causes)
            sm_n, sm_t, dev_small_n[d], dev_small_t[d] = short_gaps(us, ue, threshold_ps, wb, we)
            for a, b in edge_short:
                _add_short(wb, we, sm_n, sm_t, a, b)
                dev_small_n[d] += 1
                dev_small_t[d] += b - a
            windows[d] = (wb, we, busy, by_cause, sm_n, sm_t)
            # the busy set's intervals are done with: what follows reads the ops (the
            # launched union's order of the ops by step came on top of them, 232 MB at the
            # analysis' peak at 40 M events)
            del us, ue
            got = over_job.result() if over_job is not None else _launched_and_overlap(*over)
        del over
        if got is not None:
            launched[d] = got
        if len(gt):
            dev_idle[d] = gt.shares.sum(axis=0)
        dev_busy[d], dev_lo[d], dev_hi[d], dev_ops_n[d] = busy_t, lo, hi, ops.size
        open_ = we > wb
        dev_win_lo[d] = min(lo, int(wb[open_].min())) if open_.any() else lo
        dev_win_hi[d] = max(hi, int(we[open_].max())) if open_.any() else hi
        del ops
    devices = DeviceTable([d.name for d in trace.devices], [d.kind for d in trace.devices],
                          dev_ops_n, dev_busy, dev_lo, dev_hi, dev_idle, dev_small_n, dev_small_t,
                          dev_win_lo, dev_win_hi)

    # ---- steps ----
    progress.stage(0.8, "per-step numbers")
    c_total = np.zeros(n_steps, np.int64)          # exact: float weights would round
    if compile_ev.size:
        np.add.at(c_total, compile_step[compile_step >= 0],
                  trace.dur[compile_ev][compile_step >= 0])
    shape = (n_steps, n_dev)
    win_s, win_e = np.full(shape, -1, np.int64), np.full(shape, -1, np.int64)
    s_busy = np.zeros(shape, np.int64)
    s_launched = np.full(shape, -1, np.int64)
    s_idle = np.zeros((n_steps, n_dev, n_causes), np.int64)
    s_small_n, s_small_t = np.zeros(shape, np.int64), np.zeros(shape, np.int64)
    for d, (wb, we, busy, by_cause, sm_n, sm_t) in windows.items():
        if d in launched:
            s_launched[:, d] = launched[d]
        win_s[:, d], win_e[:, d], s_busy[:, d] = wb, we, busy
        s_idle[:, d, :], s_small_n[:, d], s_small_t[:, d] = by_cause, sm_n, sm_t
    step_numbers = StepNumbers(steps.ids, steps.host_start, steps.host_end, steps.source,
                               dev_ops_n > 0, win_s, win_e, s_busy, s_idle, s_small_n,
                               s_small_t, c_count.astype(np.int64), c_total, outlier,
                               s_launched, steps.marker)
    del noncompute
    progress.stage(0.82, "op counts")
    # the op counts and the capture's notes read nothing of the gaps: found on the second
    # core while the gap table and its host ops are made here
    tail_job = beside.enter_context(Beside(_tail_side, trace, ev_step, step_numbers, devices,
                                           origin, threshold_ps)) if paired else None
    if tail_job is None:
        ops = op_table(trace, ev_step, step_numbers.typical())

    # ---- gaps, largest first ----
    progress.stage(0.85, "host ops behind the gaps")
    gaps = _gap_table(trace, steps, gaps_all, windows, via)
    m = min(max(int(opt.detail_limit), 0), len(gaps))
    rows = np.arange(m, dtype=np.int32)
    detail = host_ops(trace, ctx.lines, rows, gaps.start[:m], gaps.end[:m])

    progress.stage(0.97, "findings")
    small_total = int(dev_small_t.sum())
    source = {"path": trace.path, "format": trace.format, "events": trace.n_events,
              "devices": [d.name for d in trace.devices], "origin_ps": trace.origin_ps,
              **({"profile_start_ps": int(trace.metadata["profile_start_ps"])}
                 if trace.metadata.get("profile_start_ps") else {}),
              "hostnames": trace.metadata.get("hostnames", []),
              "framework": framework(trace),
              # the trace's extent, for pages with no device activity to frame
              "span_ns": [int(trace.ts.min()) // 1000 if trace.n_events else 0,
                          trace.last_end() // 1000 if trace.n_events else 0],
              # what the profiler itself cost: a run's trust reads it
              "profiler": profiler_cost(trace)}
    if not trace.devices or not (dev_ops_n > 0).any():
        warnings.append("no device activity in this trace: it shows host work only "
                        "(a CPU-only run, or the device was not profiled)")
    if tail_job is not None:
        ops, notes = tail_job.result()
    else:
        notes = capture_notes(trace, devices, step_numbers, origin, threshold_ps)
    # the capture's notes, with where its gaps in no step lie (the start-up note goes
    # before them, once the findings are known)
    notes = notes + outside_step_gaps(devices, gaps.device, gaps.step, gaps.end - gaps.start,
                                      steps.source)
    warnings += notes
    coll = collective_table(trace, coll_ops, coll_step, gaps, dev_lo,
                            lambda e: trace.strings[int(trace.name[e])])
    del coll_ops, coll_step
    diag = Diagnosis(source, opt.threshold_us, opt.kernels_only, devices, step_numbers, gaps,
                     detail, annotations, [], small_total, warnings, None,
                     list(trace.track_label), compilations, transfers, ops, device_ops,
                     coll)
    diag.efficiency = eff_mod.stage(trace, costs, diag, opt.peak_tflops)
    diag.findings, cited = find_mod.findings(trace, diag, steps, compile_ev, compile_step, ctx)
    note = startup_note(devices, step_numbers, [
        f.title.split(" — ")[0] for f in diag.findings if f.kind.value == C.STARTUP])
    if note:
        diag.warnings.insert(len(diag.warnings) - len(notes), note)
    sync_events = [e for per_gap in detail.syncs for _, e in per_gap]
    diag.refs = event_refs(trace, [gaps.prev_op, gaps.next_op, gaps.waited_for, gaps.blocking,
                                   gaps.culprit, detail.event, np.array(sync_events, np.int64),
                                   cited, compilations.event, transfers.event])
    return diag, ctx


def _tail_side(trace, ev_step, step_numbers, devices, origin, threshold_ps) -> tuple:
    """(op counts, the capture's notes): what the end of the analysis reads besides the
    gaps."""
    return (op_table(trace, ev_step, step_numbers.typical()),
            capture_notes(trace, devices, step_numbers, origin, threshold_ps))


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


def _gap_table(trace, steps, gaps_all, windows, via) -> GapTable:
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


def _small(a: np.ndarray) -> np.ndarray:
    """An index column as int32 (they all fit: events are counted in int32 elsewhere)."""
    return a.astype(np.int32) if a.shape[0] < 2**31 - 1 else a


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


def host_side_beside(trace: Trace) -> bool:
    """Whether stages of ``trace``'s analysis run side by side (the host side and the
    devices' busy sets beside the first stages, the device time by annotation beside the
    device time by op, each device's launched time and overlap beside its gaps, the op
    counts and notes beside the gap table): within ``beside.SIDE_MAX_BYTES``."""
    return side_by_side(trace.n_events)


def _host_side(trace: Trace, origin: np.ndarray, via: np.ndarray, kernels_only: bool,
               threshold_ps: int, busy_sets: bool) -> tuple:
    """What the analysis reads once the device time is found, of the trace and the
    origins alone: (host context, executor threads, tf.data get_next spans, {device:
    its ``device_busy`` with its gaps found} for every device when ``busy_sets``, else
    empty: the device loop finds each in turn)."""
    ctx = host_context(trace, origin, via)
    found = {}
    for d in range(len(trace.devices) if busy_sets else 0):
        ops, us, ue, big = device_busy(trace, d, kernels_only, threshold_ps)
        if ops.size and big is None:
            big = find_gaps(trace, d, ops, us, ue, threshold_ps)
        found[d] = (ops, us, ue, big)
    return ctx, region_threads(trace), get_next_spans(trace), found


def host_context(trace: Trace, origin: np.ndarray | None = None,
                 via: np.ndarray | None = None) -> HostContext:
    """What the host was doing: op origins, cause buckets and per-thread timelines
    (``origin``/``via``: the result of ``origins(trace)`` when already at hand)."""
    n = trace.n_events
    memcpy_of = np.zeros(n, np.int8)           # 1 h2d, 2 d2h on device memcpy events
    mk = trace.stats.get("memcpy_kind")
    code = {"h2d": 1, "d2h": 2}
    if mk is not None:
        u, inv = unique_inverse(mk.values)         # each distinct direction read once
        vals = np.array([code.get(trace.strings[v], 0) for v in u.tolist()], np.int8)
        memcpy_of[mk.events] = vals[inv.reshape(-1)] if u.size else 0
    else:
        mem = np.flatnonzero(trace.kind == K.MEMCPY)
        u, inv = unique_inverse(trace.name[mem])
        kinds = np.array([code.get(memcpy_kind(trace.strings[x]), 0) for x in u.tolist()],
                         np.int8)
        memcpy_of[mem] = kinds[inv.reshape(-1)] if mem.size else 0
    if origin is None:
        origin, via = origins(trace)
        origin = _small(origin)
    # runtime memcpy calls inherit the direction of the copy they issued, and whether the
    # host side was pageable memory
    launch_memcpy = np.zeros(n, np.int8)
    dev_mem = np.flatnonzero((memcpy_of > 0) & (origin >= 0))
    launch_memcpy[origin[dev_mem]] = memcpy_of[dev_mem]
    pageable = np.zeros(0, np.int64)          # the calls of copies from/to pageable memory
    if dev_mem.size:
        u, inv = unique_inverse(trace.name[dev_mem])
        pg = np.array(["pageable" in trace.strings[x].lower() for x in u.tolist()], bool)
        pageable = origin[dev_mem][pg[inv.reshape(-1)]].astype(np.int64)
    # start-up first: its events are start-up whatever else they are
    ranges = startup_ranges(trace, startup_roots(trace))
    buckets = event_buckets(trace, launch_memcpy, ranges)
    blocking = blocking_mask(trace, launch_memcpy, pageable, ranges)
    lines = build_hostlines(trace, buckets, trace.host_tracks(), blocking)
    del blocking, buckets
    return HostContext(trace, origin, via, EventCodes.of(memcpy_of),
                       EventCodes.of(launch_memcpy), lines)


def gap_detail(ctx: HostContext, diag: Diagnosis, row: int) -> tuple:
    """Host-op detail of one gap row, with the refs that name its events."""
    r = np.array([row], np.int32)
    d = host_ops(ctx.trace, ctx.lines, r, diag.gaps.start[r], diag.gaps.end[r])
    refs = event_refs(ctx.trace, [d.event, np.array([e for _, e in d.syncs[0]], np.int64)])
    return d, refs
