"""``diagnose(trace) → Diagnosis``: steps, duty cycle, gaps, annotations, findings.

Pure functions of the trace model; the result is typed (``result.py``) and rendered
elsewhere (``tb_perfdiag.render``).
"""
from __future__ import annotations

import gc
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from types import SimpleNamespace

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
from .gaps.busy import device_busy, find_gaps, user_threads
from .gaps.per_device import device_gaps, gap_table
from . import pipeline
from .attribution.hostline import blocking_mask, build_hostlines, event_buckets
from ..beside import side_by_side
from .attribution.culprits import framework
from .attribution.eventcodes import EventCodes, FewValues
from .attribution.refs import event_refs
from .device_time.op_counts import op_table
from .device_time.by_op import device_op_table
from .collectives.instances import collective_ops, collective_table
from .steps.startup import first_step_end, profiler_cost, startup_ranges, startup_roots, steps_with_startup
from .steps.capture_notes import capture_notes, outside_step_gaps, startup_note
from .gaps.tfdata import get_next_spans
from .result import Diagnosis, StepNumbers, typical_of
from .efficiency import mfu as eff_mod, sums as eff_sums
from .steps.windows import find_steps, launching_steps

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


def diagnose_trace(trace: Trace, options: Options | None = None, progress=NULL) -> Diagnosis:
    """The whole diagnosis of one trace; ``progress`` is told which stage runs."""
    return analyse(trace, options, progress)[0]


def analyse(trace: Trace, options: Options | None = None, progress=NULL):
    """(Diagnosis, HostContext): the diagnosis and what later requests on the same trace
    need from the analysis (kept by the server beside the result)."""
    mark = high_water()
    with no_cyclic_gc(), recycled_pages(room_under_high_water(trace.read_peak)):
        return _diagnose(trace, options or Options(), _Stages(progress, mark))


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


def _diagnose(trace: Trace, opt: Options, progress):
    progress.phase("analysing", "call chains")
    given = {"trace": trace, "opt": opt, "progress": progress,
             "threshold_ps": int(round(opt.threshold_us * 1e6)),
             "paired": host_side_beside(trace)}
    # the stages run beside this thread are waited for however the analysis ends
    with ExitStack() as beside:
        v = pipeline.run(STAGES, given, given["paired"], progress, beside)
    ctx = v["ctx"]
    return Diagnosis(**{f: v[k] for f, k in RESULT.items()}), ctx


# ---- the stages, in the order they run ----

def _links(trace):
    linked = incoming_host_link(trace)
    origin, via = origins(trace, linked)
    return linked, _small(origin), via


def _root(trace, origin, linked):
    # per-event columns held through the analysis are int32 event indices and steps as
    # narrow as their count allows: on a 40 M-event trace each int64 column costs 320 MB
    return _small(root_origin(trace, origin, linked=linked))


def _launching(trace, steps, root_event):
    # from here the root is read at ops and launches only: held as a code per event into
    # its few values (a hundred dispatches at 40 M events: 114 MB fewer from the device
    # time by annotation on)
    return launching_steps(trace, steps, root_event), FewValues.of(root_event)


def _device_op_list(trace, opt, ev_step, root, steps):
    dev_ops = np.flatnonzero(trace.is_device_activity(opt.kernels_only))
    coll_ops = collective_ops(trace, dev_ops)
    # the annotation path of each op, which both device-time tables read (each with its
    # own memo of stat lookups: they add to it)
    memo: dict = {}
    op_step = ev_step[dev_ops]
    pid, paths = ann_mod.op_paths(trace, dev_ops, root, memo) if dev_ops.size else (None, [])
    ann_args = (trace, dev_ops, op_step, steps.ids, root, (pid, paths, dict(memo)))
    return dev_ops, coll_ops, ev_step[coll_ops], op_step, memo, pid, paths, ann_args


def _annotations_then_costs(ann_args: tuple, dev_ops: np.ndarray):
    # the ops' cost figures after the device time by annotation on the same core, where
    # they are the ops' own (an XSpace's): the second core is free from there until the gaps
    return ann_mod.device_time(*ann_args), eff_sums.costs_ahead(ann_args[0], dev_ops)


def _annotations_alone(ann_args: tuple, dev_ops: np.ndarray):
    return ann_mod.device_time(*ann_args), None


def _compilations(trace, steps, root):
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
    return users, compilations, n_steps, compile_ev, compile_step, c_count, outlier


def _device_time_by_op(trace, dev_ops, op_step, n_steps, origin, pid, paths, memo, outlier):
    # its overlap columns come from the busy figures the gap analysis makes (below); its
    # per-step cells are cut, so it sums the typical steps (StepNumbers.typical) itself
    op_rows: list = []
    device_ops, noncompute = device_op_table(
        trace, dev_ops, op_step, n_steps, origin, pid, paths, memo,
        defer_overlap=True, typical=typical_of(outlier), op_rows=op_rows)
    return device_ops, noncompute, op_rows


def _costs(trace, dev_ops, op_step, n_steps, device_ops, op_rows, op_costs):
    # the ops' cost figures folded into per step, device and row sums (none kept per op),
    # once the device time by annotation beside is done: their per-op columns and its
    # temporaries never add up
    return eff_sums.gather(trace, dev_ops, op_step, n_steps, device_ops, op_rows, op_costs)


def _step_numbers(trace, steps, n_steps, compile_ev, compile_step, c_count, outlier, devices,
                  windows, launched):
    n_dev = len(trace.devices)
    c_total = np.zeros(n_steps, np.int64)          # exact: float weights would round
    if compile_ev.size:
        np.add.at(c_total, compile_step[compile_step >= 0],
                  trace.dur[compile_ev][compile_step >= 0])
    shape = (n_steps, n_dev)
    win_s, win_e = np.full(shape, -1, np.int64), np.full(shape, -1, np.int64)
    s_busy = np.zeros(shape, np.int64)
    s_launched = np.full(shape, -1, np.int64)
    s_idle = np.zeros((n_steps, n_dev, len(C.ALL)), np.int64)
    s_small_n, s_small_t = np.zeros(shape, np.int64), np.zeros(shape, np.int64)
    for d, (wb, we, busy, by_cause, sm_n, sm_t) in windows.items():
        if d in launched:
            s_launched[:, d] = launched[d]
        win_s[:, d], win_e[:, d], s_busy[:, d] = wb, we, busy
        s_idle[:, d, :], s_small_n[:, d], s_small_t[:, d] = by_cause, sm_n, sm_t
    return StepNumbers(steps.ids, steps.host_start, steps.host_end, steps.source,
                       devices.ops > 0, win_s, win_e, s_busy, s_idle, s_small_n,
                       s_small_t, c_count.astype(np.int64), c_total, outlier,
                       s_launched, steps.marker)


def _detail(trace, ctx, opt, gaps):
    m = min(max(int(opt.detail_limit), 0), len(gaps))
    rows = np.arange(m, dtype=np.int32)
    return host_ops(trace, ctx.lines, rows, gaps.start[:m], gaps.end[:m])


def _op_counts_and_notes(trace, ev_step, step_numbers, devices, origin, threshold_ps):
    # the op counts and the capture's notes read nothing of the gaps: found on the second
    # core while the gap table and its host ops are made here
    return (op_table(trace, ev_step, step_numbers.typical()),
            capture_notes(trace, devices, step_numbers, origin, threshold_ps))


def _source(trace, devices, gaps, steps, notes):
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
    warnings = list(trace.warnings)
    if not trace.devices or not (devices.ops > 0).any():
        warnings.append("no device activity in this trace: it shows host work only "
                        "(a CPU-only run, or the device was not profiled)")
    # the capture's notes, with where its gaps in no step lie (the start-up note goes
    # before them, once the findings are known)
    notes = notes + outside_step_gaps(devices, gaps.device, gaps.step, gaps.end - gaps.start,
                                      steps.source)
    return source, warnings, notes, int(devices.small_total.sum())


def _collectives(trace, coll_ops, coll_step, gaps, devices):
    return collective_table(trace, coll_ops, coll_step, gaps, devices.lo,
                            lambda e: trace.strings[int(trace.name[e])])


def _efficiency(trace, costs, devices, step_numbers, device_ops, collectives, opt):
    return eff_mod.efficiency_table(trace, costs, devices, step_numbers, device_ops,
                                    collectives, opt.peak_tflops)


def _findings(trace, steps, compile_ev, compile_step, ctx, **made):
    # the findings read the diagnosis as made so far: every field but its own and the
    # event names, its warnings without the start-up note they decide
    draft = SimpleNamespace(**{f: made[k] for f, k in RESULT.items() if k in made},
                            warnings=made["warnings"] + made["capture_notes"])
    return find_mod.findings(trace, draft, steps, compile_ev, compile_step, ctx)


def _warnings(devices, step_numbers, findings, warnings, capture_notes):
    note = startup_note(devices, step_numbers, [
        f.title.split(" — ")[0] for f in findings if f.kind.value == C.STARTUP])
    return warnings + ([note] if note else []) + capture_notes


def _refs(trace, gaps, detail, cited, compilations, transfers):
    sync_events = [e for per_gap in detail.syncs for _, e in per_gap]
    return event_refs(trace, [gaps.prev_op, gaps.next_op, gaps.waited_for, gaps.blocking,
                              gaps.culprit, detail.event, np.array(sync_events, np.int64),
                              cited, compilations.event, transfers.event])


def _given(trace, opt):
    return opt.threshold_us, opt.kernels_only, list(trace.track_label)


def _host_timelines(trace, origin, via, opt, threshold_ps, paired):
    return _host_side(trace, origin, via, opt.kernels_only, threshold_ps, paired)


# Diagnosis field → the value that fills it
RESULT = {"source": "source", "threshold_us": "threshold_us", "kernels_only": "kernels_only",
          "devices": "devices", "steps": "step_numbers", "gaps": "gaps", "detail": "detail",
          "annotations": "annotations", "findings": "findings", "small_total": "small_total",
          "warnings": "all_warnings", "refs": "refs", "track_labels": "track_labels",
          "compilations": "compilations", "transfers": "transfers", "ops": "ops",
          "device_ops": "device_ops", "collectives": "collectives",
          "efficiency": "efficiency"}
_DRAFT = tuple(k for f, k in RESULT.items() if f not in ("findings", "refs", "warnings")) + \
    ("warnings", "capture_notes")

S = pipeline.Stage
STAGES = [
    S("options", _given, ("trace", "opt"), ("threshold_us", "kernels_only", "track_labels")),
    S("call chains", _links, ("trace",), ("linked", "origin", "via")),
    S("steps", find_steps, ("trace",), ("steps",), progress=(0.08, "steps")),
    S("root", _root, ("trace", "origin", "linked"), ("root_event",), frees=("linked",)),
    S("launching steps", _launching, ("trace", "steps", "root_event"), ("ev_step", "root"),
      frees=("root_event",)),
    S("device ops", _device_op_list, ("trace", "opt", "ev_step", "root", "steps"),
      ("dev_ops", "coll_ops", "coll_step", "op_step", "memo", "pid", "paths", "ann_args"),
      progress=(0.15, "device time by annotation")),
    S("compilations", _compilations, ("trace", "steps", "root"),
      ("users", "compilations", "n_steps", "compile_ev", "compile_step", "c_count", "outlier")),
    S("device time by op", _device_time_by_op,
      ("trace", "dev_ops", "op_step", "n_steps", "origin", "pid", "paths", "memo", "outlier"),
      ("device_ops", "noncompute", "op_rows"), progress=(0.3, "device time by op")),
    # its temporaries are the largest of the analysis: beside the device time by op
    S("device time by annotation", _annotations_then_costs, ("ann_args", "dev_ops"),
      ("annotations", "op_costs"), beside=True, start_after="device ops",
      serial=_annotations_alone),
    S("costs", _costs,
      ("trace", "dev_ops", "op_step", "n_steps", "device_ops", "op_rows", "op_costs"),
      ("costs",), frees=("op_costs", "dev_ops", "op_step", "pid", "paths", "memo", "ann_args",
                         "op_rows")),
    # the host timelines and the devices' busy sets need only the trace and the origins:
    # beside the steps and both device-time tables, where the memory they hold allows
    S("host timelines", _host_timelines,
      ("trace", "origin", "via", "opt", "threshold_ps", "paired"),
      ("ctx", "executors", "get_next", "busy_sets"), progress=(0.35, "host timelines"),
      beside=True, start_after="call chains"),
    S("transfers", usercalls.transfers, ("trace", "steps", "users"), ("transfers",)),
    S("gaps", device_gaps,
      ("trace", "opt", "threshold_ps", "busy_sets", "steps", "ev_step", "device_ops",
       "noncompute", "paired", "origin", "root", "users", "executors", "ctx", "get_next",
       "progress"), ("devices", "gaps_all", "windows", "launched"), frees=("busy_sets",)),
    S("per-step numbers", _step_numbers,
      ("trace", "steps", "n_steps", "compile_ev", "compile_step", "c_count", "outlier",
       "devices", "windows", "launched"), ("step_numbers",),
      frees=("noncompute", "launched", "c_count", "outlier"),
      progress=(0.8, "per-step numbers")),
    S("gap table", gap_table, ("trace", "steps", "gaps_all", "windows", "via"), ("gaps",),
      frees=("gaps_all", "windows"), progress=(0.85, "host ops behind the gaps")),
    S("gap detail", _detail, ("trace", "ctx", "opt", "gaps"), ("detail",)),
    S("op counts and notes", _op_counts_and_notes,
      ("trace", "ev_step", "step_numbers", "devices", "origin", "threshold_ps"),
      ("ops", "notes"), progress=(0.97, "findings"), beside=True,
      start_after="per-step numbers"),
    S("source", _source, ("trace", "devices", "gaps", "steps", "notes"),
      ("source", "warnings", "capture_notes", "small_total"), frees=("notes",)),
    S("collectives", _collectives, ("trace", "coll_ops", "coll_step", "gaps", "devices"),
      ("collectives",), frees=("coll_ops", "coll_step")),
    S("efficiency", _efficiency,
      ("trace", "costs", "devices", "step_numbers", "device_ops", "collectives", "opt"),
      ("efficiency",), frees=("costs",)),
    S("findings", _findings,
      ("trace", "steps", "compile_ev", "compile_step", "ctx") + _DRAFT, ("findings", "cited")),
    S("warnings", _warnings, ("devices", "step_numbers", "findings", "warnings",
                              "capture_notes"), ("all_warnings",)),
    S("event names", _refs, ("trace", "gaps", "detail", "cited", "compilations", "transfers"),
      ("refs",)),
]


def _small(a: np.ndarray) -> np.ndarray:
    """An index column as int32 (they all fit: events are counted in int32 elsewhere)."""
    return a.astype(np.int32) if a.shape[0] < 2**31 - 1 else a


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
