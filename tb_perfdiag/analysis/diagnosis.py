"""``diagnose(trace) → Diagnosis``: steps, duty cycle, gaps, annotations, findings.

Pure functions of the trace model; the result is plain JSON-ready data.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from dataclasses import dataclass, field, fields

import numpy as np

from ..progress import NULL
from ..trace.build import unique_inverse
from ..trace.classify import memcpy_kind
from ..trace.model import EventKind as K, Trace
from . import annotations as ann_mod
from . import causes as C
from . import findings as find_mod
from .attribution import origins, root_origin
from .gaps import classify_gaps, device_busy, find_gaps
from .gap_json import add_detail, gaps_json
from .hostline import B_COMPILE, build_hostlines, event_buckets
from .intervals import covered
from .steps import DEFINITION as STEP_DEFINITION, device_windows, find_steps, step_of_time

SCHEMA_VERSION = 1
DEFAULT_THRESHOLD_US = 5.0
DETAIL_LIMIT = 200            # gaps with host-op detail up front (largest first; the page
                              # lists 200 at a time, /gap computes the rest on demand)

DEFINITIONS = {
    "busy": "Busy set of a device: the union over all its streams/lines of kernels, memcpy and "
            "memset (kernels only when kernels_only is set). Overlapping streams count once.",
    "duty_cycle": "Duty cycle of a window = |busy ∩ window| / |window|, per device. The whole-"
                  "trace figure uses the window [first device activity start, last device "
                  "activity end].",
    "gap": "A gap is a maximal interval inside that window where the busy set is empty, at least "
           "the threshold long; shorter ones are counted and summed per step.",
    "steps": STEP_DEFINITION,
    "device_time": "Annotation device time is the sum of the durations of the device ops the "
                   "annotation caused (streams may overlap).",
    "waited_for": "The host op that issued the device op ending the gap (launch, transfer, "
                  "execute), found through correlation ids, flows or program runs.",
}


@dataclass
class Options:
    threshold_us: float = DEFAULT_THRESHOLD_US
    kernels_only: bool = False
    detail_limit: int = DETAIL_LIMIT  # largest gaps whose host ops are computed up front

    def key(self) -> tuple:
        return (float(self.threshold_us), bool(self.kernels_only), int(self.detail_limit))


@dataclass
class Diagnosis:
    schema_version: int
    source: dict
    options: dict
    definitions: dict
    step_source: str
    devices: list
    steps: list
    gaps: list
    annotations: list
    findings: list
    hta: dict
    warnings: list = field(default_factory=list)

    def to_json(self) -> dict:
        # the fields already hold plain JSON data; asdict() would deep-copy millions of
        # small objects for nothing
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _ns(ps) -> int:
    return int(round(int(ps) / 1000))


@contextmanager
def _no_cyclic_gc():
    """The diagnosis builds many small acyclic objects (gap records); the cyclic
    collector would rescan them again and again while they are being made."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _window_numbers(sd, small):
    """Per step window of one device: busy time, idle time by cause (gaps spanning a
    window boundary count in each window for their overlap) and the short gaps that start
    in it."""
    wb, we, us, ue, gt = sd
    wb, we = np.asarray(wb, np.int64), np.asarray(we, np.int64)
    open_ = we > wb
    busy = np.where(open_, covered(us, ue, wb, np.maximum(we, wb)), 0)
    by_cause = {}
    for i, c in enumerate(C.ALL):
        sel = np.flatnonzero(gt.cause == i) if len(gt) else np.zeros(0, np.int64)
        if sel.size:
            o = np.argsort(gt.start[sel], kind="stable")      # disjoint: sorted by start
            by_cause[c] = np.where(open_, covered(gt.start[sel][o], gt.end[sel][o], wb, we), 0)
    ss, se = small
    o = np.argsort(ss, kind="stable")
    ss, se = ss[o], se[o]
    cum = np.concatenate(([0], np.cumsum(se - ss)))
    lo = np.searchsorted(ss, wb, side="left")
    hi = np.maximum(np.searchsorted(ss, we, side="left"), lo)
    return wb, we, busy, by_cause, hi - lo, cum[hi] - cum[lo]


def diagnose_trace(trace: Trace, options: Options | None = None, progress=NULL) -> Diagnosis:
    """The whole diagnosis of one trace; ``progress`` is told which stage runs."""
    with _no_cyclic_gc():
        return _diagnose(trace, options, progress)


def _diagnose(trace: Trace, options: Options | None, progress) -> Diagnosis:
    opt = options or Options()
    progress.phase("analysing", "call chains")
    threshold_ps = int(round(opt.threshold_us * 1e6))
    n = trace.n_events
    warnings = list(trace.warnings)

    origin, via = origins(trace)
    origin = _small(origin)
    progress.within(0.08, "steps")
    steps = find_steps(trace)
    # per-event columns held through the analysis are int32 (event and step indices):
    # on a 40 M-event trace each int64 column would cost 320 MB
    root = _small(root_origin(trace, origin))
    # the step an op belongs to: the step in which its host origin ran
    if steps.source == "device_steps":
        ev_step = _small(step_of_time(steps, trace.ts))
    else:
        ev_step = _small(step_of_time(
            steps, np.where(root >= 0, trace.ts[np.maximum(root, 0)], trace.ts)))
    # device time per annotation first: its temporaries are the largest of the analysis,
    # and the host timelines built next are not needed for it
    progress.within(0.15, "device time by annotation")
    dev_ops = np.flatnonzero(trace.is_device_activity(opt.kernels_only))
    annotations = ann_mod.device_time(trace, dev_ops, ev_step[dev_ops], steps.ids, root,
                                      [d.name for d in trace.devices])
    del dev_ops
    progress.within(0.35, "host timelines")
    ctx = host_context(trace, origin, via)
    memcpy_of, buckets, lines = ctx["memcpy_of"], ctx["buckets"], ctx["lines"]

    devices_out, steps_dev, gaps_all = [], [], []
    small_by_dev = {}
    for d, dev in enumerate(trace.devices):
        progress.within(0.5 + 0.3 * d / max(len(trace.devices), 1), f"gaps on {dev.name}")
        ops, us, ue = device_busy(trace, d, opt.kernels_only)
        if ops.size == 0:
            devices_out.append({"id": d, "name": dev.name, "kind": dev.kind, "duty_cycle": None,
                                "busy_ns": 0, "window_ns": 0, "start_ns": None, "end_ns": None,
                                "ops": 0, "idle_by_cause_ns": {}})
            steps_dev.append(None)
            continue
        lo, hi = int(us[0]), int(ue[-1])
        busy = int((ue - us).sum())
        gs, ge, prev, nxt, ss, se = find_gaps(trace, d, ops, us, ue, threshold_ps)
        gt = classify_gaps(trace, d, gs, ge, prev, nxt, origin, lines, steps.thread, memcpy_of,
                           buckets)
        gaps_all.append(gt)
        small_by_dev[d] = (ss, se)
        own = np.flatnonzero((trace.kind == K.STEP) & (trace.track_device[trace.track] == d))
        wb, we = device_windows(steps, ev_step[ops], trace.end_of(ops), hi, own, trace)
        steps_dev.append((wb, we, us, ue, gt))
        idle_cause = np.bincount(gt.cause, weights=gt.duration, minlength=len(C.ALL)) \
            if len(gt) else np.zeros(len(C.ALL))
        devices_out.append({
            "id": d, "name": dev.name, "kind": dev.kind,
            "duty_cycle": busy / (hi - lo) if hi > lo else 1.0,
            "busy_ns": _ns(busy), "window_ns": _ns(hi - lo), "start_ns": _ns(lo),
            "end_ns": _ns(hi), "ops": int(ops.size),
            "idle_by_cause_ns": {c: _ns(idle_cause[i]) for i, c in enumerate(C.ALL)
                                 if idle_cause[i] > 0},
            "small_gaps": {"count": int(ss.size), "total_ns": _ns((se - ss).sum())},
        })

    # ---- steps ----
    progress.within(0.8, "per-step numbers")
    steps_out = []
    # outermost compilations only (HLO passes inside one are part of it)
    compile_ev = np.flatnonzero(trace.kind == K.COMPILE)
    par = trace.parent[compile_ev]
    compile_ev = compile_ev[(par < 0) | (buckets[np.maximum(par, 0)] != B_COMPILE)]
    if steps.thread >= 0 and (trace.track[compile_ev] == steps.thread).any():
        # the user's thread asks for compilations; worker threads run their pieces
        compile_ev = compile_ev[trace.track[compile_ev] == steps.thread]
    compile_step = step_of_time(steps, trace.ts[compile_ev]) if compile_ev.size else compile_ev
    # every window's numbers at once per device, then one dict per step
    per_window = {d: _window_numbers(sd, small_by_dev[d]) for d, sd in enumerate(steps_dev)
                  if sd is not None}
    n_steps = steps.ids.shape[0]
    c_count = np.bincount(compile_step[compile_step >= 0], minlength=n_steps) \
        if compile_ev.size else np.zeros(n_steps, np.int64)
    c_total = np.zeros(n_steps, np.int64)          # exact: float weights would round
    if compile_ev.size:
        np.add.at(c_total, compile_step[compile_step >= 0],
                  trace.dur[compile_ev][compile_step >= 0])
    for s in range(n_steps):
        per_dev = {}
        for d, (wb, we, busy, by_cause, sm_count, sm_total) in per_window.items():
            a, b = int(wb[s]), int(we[s])
            w = max(b - a, 0)
            bz = int(busy[s])
            per_dev[str(d)] = {"duty_cycle": bz / w if w else None, "start_ns": _ns(a),
                               "end_ns": _ns(b), "busy_ns": _ns(bz), "idle_ns": _ns(w - bz),
                               "idle_by_cause_ns": {c: _ns(v[s]) for c, v in by_cause.items()
                                                    if v[s] > 0},
                               "small_gaps": {"count": int(sm_count[s]),
                                              "total_ns": _ns(sm_total[s])}}
        steps_out.append({
            "id": int(steps.ids[s]), "start_ns": _ns(steps.host_start[s]),
            "end_ns": _ns(steps.host_end[s]), "devices": per_dev,
            "compile": {"count": int(c_count[s]), "total_ns": _ns(c_total[s])},
        })
    _mark_outliers(steps_out)

    # ---- gaps, largest first ----
    # a gap belongs to the step of the op it waited for (that step's host work kept the
    # device idle), else to the window it starts in
    progress.within(0.85, "host ops behind the gaps")
    gap_step = []
    for g in gaps_all:
        st = ev_step[g.next_op] if steps.source != "whole_trace" else np.zeros(len(g), np.int64)
        sd = steps_dev[int(g.device[0])] if len(g) else None
        if sd is not None:
            by_window = np.searchsorted(sd[0], g.start, side="right") - 1
            st = np.where(st >= 0, st, by_window)
        gap_step.append(st.astype(np.int64))
    gaps_out = gaps_json(trace, gaps_all, gap_step, steps.ids, via, lines, opt.detail_limit)
    # ids in time order are more stable to share than rank: id = device:start_ns
    hta = {"host_wait_ns": 0, "kernel_wait_ns": 0, "other_ns": 0}
    for g in gaps_out:
        hta[C.HTA[g["cause"]] + "_ns"] += g["duration_ns"]
    for d, (ss, se) in small_by_dev.items():
        hta["kernel_wait_ns"] += _ns((se - ss).sum())

    diag = Diagnosis(
        schema_version=SCHEMA_VERSION,
        source={"path": trace.path, "format": trace.format, "events": n,
                "devices": [d.name for d in trace.devices], "origin_ps": trace.origin_ps,
                "hostnames": trace.metadata.get("hostnames", [])},
        options={"threshold_us": opt.threshold_us, "kernels_only": opt.kernels_only},
        definitions=DEFINITIONS, step_source=steps.source,
        devices=devices_out, steps=steps_out, gaps=gaps_out, annotations=annotations,
        findings=[], hta=hta, warnings=warnings)
    progress.within(0.97, "findings")
    diag.findings = find_mod.findings(trace, diag, steps, compile_ev, compile_step)
    if not trace.devices or all(d["ops"] == 0 for d in devices_out):
        diag.warnings.append("no device activity in this trace: it shows host work only "
                             "(a CPU-only run, or the device was not profiled)")
    return diag


def _mark_outliers(steps_out: list) -> None:
    if len(steps_out) < 3:
        for s in steps_out:
            s["outlier"] = False
        return
    dur = np.array([s["end_ns"] - s["start_ns"] for s in steps_out], float)
    med = float(np.median(dur))
    for s, d in zip(steps_out, dur):
        s["outlier"] = bool(d > 1.5 * med or s["compile"]["count"] > 0)


def _small(a: np.ndarray) -> np.ndarray:
    """An index column as int32 (they all fit: events are counted in int32 elsewhere)."""
    return a.astype(np.int32) if a.shape[0] < 2**31 - 1 else a


def host_context(trace: Trace, origin: np.ndarray | None = None,
                 via: np.ndarray | None = None) -> dict:
    """What the host was doing: op origins, cause buckets and per-thread timelines
    (``origin``/``via``: the result of ``origins(trace)`` when already at hand)."""
    n = trace.n_events
    memcpy_of = np.zeros(n, np.int8)           # 1 h2d, 2 d2h on device memcpy events
    mk = trace.stats.get("memcpy_kind")
    code = {"h2d": 1, "d2h": 2}
    if mk is not None:
        vals = np.array([code.get(trace.strings[v], 0) for v in mk.values.tolist()], np.int8)
        memcpy_of[mk.events] = vals
    else:
        mem = np.flatnonzero(trace.kind == K.MEMCPY)
        u, inv = unique_inverse(trace.name[mem])
        kinds = np.array([code.get(memcpy_kind(trace.strings[x]), 0) for x in u.tolist()],
                         np.int8)
        memcpy_of[mem] = kinds[inv.reshape(-1)] if mem.size else 0
    if origin is None:
        origin, via = origins(trace)
        origin = _small(origin)
    # runtime memcpy calls inherit the direction of the copy they issued
    launch_memcpy = np.zeros(n, np.int8)
    dev_mem = np.flatnonzero((memcpy_of > 0) & (origin >= 0))
    launch_memcpy[origin[dev_mem]] = memcpy_of[dev_mem]
    buckets = event_buckets(trace, launch_memcpy)
    lines = build_hostlines(trace, buckets, trace.host_tracks())
    return {"memcpy_of": memcpy_of, "origin": origin, "via": via, "buckets": buckets,
            "lines": lines}


def gap_detail(trace: Trace, gap: dict, ctx: dict | None = None) -> dict:
    """Host-op detail for one gap record of a diagnosis of ``trace``."""
    ctx = ctx or host_context(trace)
    a = int(gap["start_ns"]) * 1000
    b = int(gap["end_ns"]) * 1000
    return add_detail(trace, dict(gap), a, b, ctx["lines"])
