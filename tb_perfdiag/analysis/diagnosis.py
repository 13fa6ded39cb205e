"""``diagnose(trace) → Diagnosis``: steps, duty cycle, gaps, annotations, findings.

Pure functions of the trace model; the result is plain JSON-ready data.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..trace.classify import memcpy_kind
from ..trace.model import EventKind as K, Trace, TrackKind
from . import annotations as ann_mod
from . import causes as C
from . import findings as find_mod
from .attribution import VIA_NAMES, origins, root_origin
from .gaps import classify_gaps, device_busy, find_gaps
from .hostline import B_COMPILE, build_hostlines, event_buckets
from .intervals import covered
from .steps import DEFINITION as STEP_DEFINITION, device_windows, find_steps, step_of_time

SCHEMA_VERSION = 1
DEFAULT_THRESHOLD_US = 5.0
DETAIL_LIMIT = 2000           # gaps with full host-op detail (largest first)
HOST_OPS_PER_THREAD = 8

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
    step: int | None = None          # restrict gaps/steps output to one step

    def key(self) -> tuple:
        return (float(self.threshold_us), bool(self.kernels_only))


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
        return asdict(self)


def _ns(ps) -> int:
    return int(round(int(ps) / 1000))


def _chain_names(trace: Trace, e: int) -> list:
    return [trace.strings[int(trace.name[i])] for i in trace.chain(e)]


def _op_json(trace: Trace, e: int) -> dict | None:
    if e < 0:
        return None
    return {"name": trace.event_name(e), "start_ns": _ns(trace.ts[e]),
            "duration_ns": _ns(trace.dur[e]), "hlo_op": trace.stat_str("hlo_op", e),
            "annotation": trace.stat_str("op_name", e) or trace.stat_str("tf_op", e),
            "track": trace.track_label[int(trace.track[e])]}


def diagnose_trace(trace: Trace, options: Options | None = None) -> Diagnosis:
    opt = options or Options()
    threshold_ps = int(round(opt.threshold_us * 1e6))
    n = trace.n_events
    warnings = list(trace.warnings)

    mk_names = {}
    mk = trace.stats.get("memcpy_kind")
    memcpy_of = np.zeros(n, np.int8)           # 1 h2d, 2 d2h on device memcpy events
    if mk is not None:
        code = {"h2d": 1, "d2h": 2}
        vals = np.array([code.get(trace.strings[v], 0) for v in mk.values.tolist()], np.int8)
        memcpy_of[mk.events] = vals
    else:
        mem = np.flatnonzero(trace.kind == K.MEMCPY)
        for e in mem.tolist():
            nm = trace.event_name(e)
            mk_names.setdefault(nm, {"h2d": 1, "d2h": 2}.get(memcpy_kind(nm), 0))
            memcpy_of[e] = mk_names[nm]
    origin, via = origins(trace)
    # runtime memcpy calls inherit the direction of the copy they issued
    launch_memcpy = np.zeros(n, np.int8)
    dev_mem = np.flatnonzero((memcpy_of > 0) & (origin >= 0))
    launch_memcpy[origin[dev_mem]] = memcpy_of[dev_mem]
    buckets = event_buckets(trace, launch_memcpy)
    lines = build_hostlines(trace, buckets, trace.host_tracks())

    steps = find_steps(trace)
    root = root_origin(trace, origin)
    # the step an op belongs to: the step in which its host origin ran
    origin_t = np.where(root >= 0, trace.ts[np.maximum(root, 0)], trace.ts)
    ev_step = step_of_time(steps, origin_t)
    if steps.source == "device_steps":
        ev_step = step_of_time(steps, trace.ts)

    devices_out, steps_dev, gaps_all = [], [], []
    small_by_dev = {}
    for d, dev in enumerate(trace.devices):
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
        gt = classify_gaps(trace, d, gs, ge, prev, nxt, origin, lines, steps.thread, memcpy_of)
        gaps_all.append(gt)
        small_by_dev[d] = (ss, se)
        wb, we = device_windows(steps, ev_step[ops], trace.end[ops], hi)
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
    steps_out = []
    # outermost compilations only (HLO passes inside one are part of it)
    compile_ev = np.flatnonzero(trace.kind == K.COMPILE)
    par = trace.parent[compile_ev]
    compile_ev = compile_ev[(par < 0) | (buckets[np.maximum(par, 0)] != B_COMPILE)]
    if steps.thread >= 0 and (trace.track[compile_ev] == steps.thread).any():
        # the user's thread asks for compilations; worker threads run their pieces
        compile_ev = compile_ev[trace.track[compile_ev] == steps.thread]
    compile_step = step_of_time(steps, trace.ts[compile_ev]) if compile_ev.size else compile_ev
    for s in range(steps.ids.shape[0]):
        per_dev = {}
        for d, sd in enumerate(steps_dev):
            if sd is None:
                continue
            wb, we, us, ue, gt = sd
            a, b = int(wb[s]), int(we[s])
            w = max(b - a, 0)
            busy = int(covered(us, ue, a, b)) if w else 0
            # gaps spanning a window boundary count in each window for their overlap
            ov = np.maximum(np.minimum(gt.end, b) - np.maximum(gt.start, a), 0) \
                if len(gt) else np.zeros(0, np.int64)
            by_cause = {}
            for i, c in enumerate(C.ALL):
                sel = (ov > 0) & (gt.cause == i)
                if sel.any():
                    by_cause[c] = _ns(ov[sel].sum())
            ss, se = small_by_dev[d]
            sm = (ss >= a) & (ss < b)
            per_dev[str(d)] = {"duty_cycle": busy / w if w else None, "start_ns": _ns(a),
                               "end_ns": _ns(b), "busy_ns": _ns(busy), "idle_ns": _ns(w - busy),
                               "idle_by_cause_ns": by_cause,
                               "small_gaps": {"count": int(sm.sum()),
                                              "total_ns": _ns((se[sm] - ss[sm]).sum())}}
        sel_c = compile_ev[compile_step == s] if compile_ev.size else compile_ev
        steps_out.append({
            "id": int(steps.ids[s]), "start_ns": _ns(steps.host_start[s]),
            "end_ns": _ns(steps.host_end[s]), "devices": per_dev,
            "compile": {"count": int(sel_c.size), "total_ns": _ns(trace.dur[sel_c].sum())},
        })
    _mark_outliers(steps_out)

    # ---- gaps, largest first ----
    gaps_out = []
    if gaps_all:
        dev = np.concatenate([g.device for g in gaps_all])
        order_keys = np.concatenate([g.duration for g in gaps_all])
        flat = [(gi, i) for gi, g in enumerate(gaps_all) for i in range(len(g))]
        order = np.argsort(-order_keys, kind="stable")
        for rank, k in enumerate(order.tolist()):
            gi, i = flat[k]
            g = gaps_all[gi]
            # a gap belongs to the step of the op it waited for (that step's host work
            # kept the device idle), else to the window it starts in
            s_idx = int(ev_step[g.next_op[i]]) if steps.source != "whole_trace" else 0
            if s_idx < 0:
                s_idx = int(step_of_time_window(steps_dev[int(dev[k])], int(g.start[i])))
            gaps_out.append(_gap_json(trace, g, i, rank, steps, s_idx, lines,
                                      detail=rank < DETAIL_LIMIT, via=via))
    # ids in time order are more stable to share than rank: id = device:start_ns
    hta = {"host_wait_ns": 0, "kernel_wait_ns": 0, "other_ns": 0}
    for g in gaps_out:
        hta[C.HTA[g["cause"]] + "_ns"] += g["duration_ns"]
    for d, (ss, se) in small_by_dev.items():
        hta["kernel_wait_ns"] += _ns((se - ss).sum())

    dev_ops = np.flatnonzero(trace.is_device_activity(opt.kernels_only))
    annotations = ann_mod.device_time(trace, dev_ops, ev_step[dev_ops], steps.ids, root,
                                      [d.name for d in trace.devices])
    diag = Diagnosis(
        schema_version=SCHEMA_VERSION,
        source={"path": trace.path, "format": trace.format, "events": n,
                "devices": [d.name for d in trace.devices], "origin_ps": trace.origin_ps,
                "hostnames": trace.metadata.get("hostnames", [])},
        options={"threshold_us": opt.threshold_us, "kernels_only": opt.kernels_only},
        definitions=DEFINITIONS, step_source=steps.source,
        devices=devices_out, steps=steps_out, gaps=gaps_out, annotations=annotations,
        findings=[], hta=hta, warnings=warnings)
    diag.findings = find_mod.findings(trace, diag, steps, compile_ev, compile_step)
    if not trace.devices or all(d["ops"] == 0 for d in devices_out):
        diag.warnings.append("no device activity in this trace: it shows host work only "
                             "(a CPU-only run, or the device was not profiled)")
    return diag


def step_of_time_window(sd, t: int) -> int:
    if sd is None:
        return -1
    wb, we = sd[0], sd[1]
    k = int(np.searchsorted(wb, t, side="right")) - 1
    return k


def _mark_outliers(steps_out: list) -> None:
    if len(steps_out) < 3:
        for s in steps_out:
            s["outlier"] = False
        return
    dur = np.array([s["end_ns"] - s["start_ns"] for s in steps_out], float)
    med = float(np.median(dur))
    for s, d in zip(steps_out, dur):
        s["outlier"] = bool(d > 1.5 * med or s["compile"]["count"] > 0)


def _gap_json(trace: Trace, g, i: int, rank: int, steps, s_idx: int, lines: dict,
              detail: bool, via) -> dict:
    a, b = int(g.start[i]), int(g.end[i])
    cause = C.ALL[int(g.cause[i])]
    wf = int(g.waited_for[i])
    out = {
        "id": f"{int(g.device[i])}-{_ns(a)}",
        "rank": rank,
        "device": int(g.device[i]),
        "step": int(steps.ids[s_idx]) if s_idx >= 0 else None,
        "start_ns": _ns(a), "end_ns": _ns(b), "duration_ns": _ns(b - a),
        "cause": cause, "cause_label": C.LABELS[cause], "hta_category": C.HTA[cause],
        "evidence": g.evidence[i],
        "host_time_by_cause_ns": {C.ALL[C.ALL.index(c)] if c in C.ALL else c: _ns(v)
                                  for c, v in zip(_bucket_names(), g.bucket_time[i].tolist())
                                  if v > 0},
        "analysed_thread": trace.track_label[int(g.thread[i])] if g.thread[i] >= 0 else None,
        "prev_op": _op_json(trace, int(g.prev_op[i])),
        "next_op": _op_json(trace, int(g.next_op[i])),
        "waited_for": None, "host_ops": [], "syncs": [], "detail": detail,
    }
    if wf >= 0:
        out["waited_for"] = {"name": trace.event_name(wf), "chain": _chain_names(trace, wf),
                             "thread": trace.track_label[int(trace.track[wf])],
                             "start_ns": _ns(trace.ts[wf]), "duration_ns": _ns(trace.dur[wf]),
                             "found_via": VIA_NAMES.get(int(via[int(g.next_op[i])]), "link")}
    if not detail:
        return out
    host_ops, syncs = [], []
    for t, line in lines.items():
        s, e, inner = line.segments(a, b)
        if s.size == 0:
            continue
        ok = inner >= 0
        if not ok.any():
            continue
        u, inv = np.unique(inner[ok], return_inverse=True)
        self_t = np.bincount(inv.reshape(-1), weights=(e - s)[ok])
        top = np.argsort(-self_t)[:HOST_OPS_PER_THREAD]
        for j in top.tolist():
            ev = int(u[j])
            host_ops.append({"thread": trace.track_label[t], "name": trace.event_name(ev),
                             "chain": _chain_names(trace, ev), "self_ns": _ns(self_t[j]),
                             "start_ns": _ns(trace.ts[ev]), "duration_ns": _ns(trace.dur[ev]),
                             "kind": K(int(trace.kind[ev])).name.lower()})
        # blocking calls in flight at (or just before) the gap start
        for probe in (a, a - 1000):
            ev = line.inner_at(probe)
            while ev >= 0:
                if trace.kind[ev] in (K.SYNC, K.TRANSFER_D2H) or \
                        (trace.kind[ev] == K.LAUNCH and "memcpy" in trace.event_name(ev).lower()
                         and trace.dur[ev] > 20_000_000):
                    syncs.append({"thread": trace.track_label[t], "name": trace.event_name(ev),
                                  "chain": _chain_names(trace, ev),
                                  "start_ns": _ns(trace.ts[ev]),
                                  "end_ns": _ns(trace.ts[ev] + trace.dur[ev])})
                    break
                ev = int(trace.parent[ev])
            if syncs and syncs[-1]["thread"] == trace.track_label[t]:
                break
    host_ops.sort(key=lambda h: -h["self_ns"])
    out["host_ops"] = host_ops
    out["syncs"] = syncs
    return out


def _bucket_names():
    from .hostline import BUCKETS
    return BUCKETS
