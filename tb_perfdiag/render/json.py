"""Diagnosis → the JSON the page, the CLI and the API serve (schema_version 1).

Gaps are paged: a page renders only its own gap records.  A gap's host-op detail
comes from the diagnosis (the largest gaps) or from ``extra_detail`` (computed on
demand for one gap by the server)."""
from __future__ import annotations

import numpy as np

from ..analysis import causes as C
from ..analysis.attribution import VIA_NAMES
from ..analysis.result import Diagnosis, Direction, EventRefs, Finding, FindingKind, HostOps
from ..analysis.steps import DEFINITION as STEP_DEFINITION
from ..trace.model import EventKind as K

SCHEMA_VERSION = 1
MAX_EVIDENCE = 20
_KIND_NAMES = {int(k): k.name.lower() for k in K}

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
    "compilation": "One per outermost graph compilation with a duration on the user's threads "
                   "(XLAGraphExecutor::Compile, backend_compile_and_load…; passes and compiler "
                   "threads' pieces are part of it). A recompilation is the same function "
                   "compiled again (or compiled after it already ran); a first compile is a "
                   "one-time cost.",
    "transfer": "One per user-level host↔device transfer call on the user's threads (.item()'s "
                "TransferFromDevice, JAX's np.asarray(jax.Array)), however many runtime "
                "threads carry the copy.",
    "waited_for": "The host op that issued the device op ending the gap (launch, transfer, "
                  "execute), found through correlation ids, flows or program runs.",
    "causes": "Each gap is split into what would have to change to close it: device-side "
              "wait after the next op was issued (collective wait at a collective); host "
              "sync worth the lead over the device the blocking call destroyed; the rest by "
              "what the thread that issued the next op did (data loading, compilation, "
              "host→device staging, allocator, graph capture, launch calls, other runtime "
              "calls, host compute, untraced). The gap's cause is its largest share; idle "
              "time by cause adds up the shares.",
}


def ns(ps) -> int:
    """ps → ns as reported everywhere (half to even)."""
    return int(round(int(ps) / 1000))


def ns_list(ps) -> list:
    return np.rint(np.asarray(ps, np.float64) / 1000).astype(np.int64).tolist()


def gap_ids(diag: Diagnosis, rows) -> list:
    rows = np.asarray(rows, np.int64)
    return [f"{d}-{s}" for d, s in zip(diag.gaps.device[rows].tolist(),
                                       ns_list(diag.gaps.start[rows]))]


def gap_row(diag: Diagnosis, gap_id: str) -> int:
    """Row of the gap named ``device-start_ns`` (−1 when there is none)."""
    try:
        d, s = (int(x) for x in gap_id.split("-", 1))
    except ValueError:
        return -1
    g = diag.gaps
    hit = np.flatnonzero((g.device == d) & (np.rint(g.start / 1000).astype(np.int64) == s))
    return int(hit[0]) if hit.size else -1


def _dur(ps: float) -> str:
    ns_ = ps / 1000
    if ns_ >= 1e6:
        return f"{ns_ / 1e6:.1f} ms"
    if ns_ >= 1e3:
        return f"{ns_ / 1e3:.0f} µs" if ns_ >= 1e4 else f"{ns_ / 1e3:.1f} µs"
    return f"{ns_:.0f} ns"


def _short_chain(refs: EventRefs, e: int, frames: int = 3) -> str:
    chain = refs.chain_of(e)
    chain = [c for c in chain if not c.startswith("ProfilerStep#")] or chain
    return " › ".join(chain[-frames:])


def evidence_text(diag: Diagnosis, r: int) -> str:
    """The gap's split in words, largest share first: '48.0 ms data loading
    (DataLoader › aten::div), 12 µs exposed by cudaStreamSynchronize'."""
    g, refs = diag.gaps, diag.refs
    sh = g.shares[r]
    total = max(int(g.end[r] - g.start[r]), 1)
    order = [int(i) for i in np.argsort(-sh, kind="stable") if sh[i] > 0]
    keep = [i for i in order if sh[i] >= 0.01 * total][:4] or order[:1]
    parts = []
    for i in keep:
        c, t = C.ALL[i], _dur(float(sh[i]))
        if c == C.HOST_SYNC:
            b = int(g.blocking[r])
            parts.append(f"{t} exposed by {refs.name_of(b)}" if b >= 0 else f"{t} host sync")
        elif c in C.DEVICE_SIDE:
            nxt = refs.name_of(int(g.next_op[r]))
            w = int(g.waited_for[r])
            what = "waiting for peers at" if c == C.COLLECTIVE_WAIT else "device-side wait for"
            if w >= 0:
                rr = int(refs.row([w])[0])
                ret = int(refs.ts[rr]) + int(refs.dur[rr])
                how = f", issued by {refs.name_of(w)} {_dur(float(g.end[r] - ret))} before"
            else:
                how = " (no launch in the trace: the device was running behind the host)"
            parts.append(f"{t} {what} {nxt!r}{how}")
        else:
            label = C.LABELS[c].lower()
            cul = int(g.culprit[r]) if i == int(g.cause[r]) else -1
            parts.append(f"{t} {label}" + (f" ({_short_chain(refs, cul)})" if cul >= 0 else ""))
    return ", ".join(parts)


def tracelens(diag: Diagnosis, r: int) -> dict:
    """TraceLens' two axes: how the queue ran dry, and what the CPU did meanwhile."""
    g = diag.gaps
    sh = g.shares[r]
    dev = sum(int(sh[C.ALL.index(c)]) for c in C.DEVICE_SIDE)
    host = {c: int(sh[i]) for i, c in enumerate(C.ALL)
            if c not in C.DEVICE_SIDE and c != C.HOST_SYNC}
    if dev * 2 > int(g.end[r] - g.start[r]):
        idle = C.DEVICE_SIDE_WAIT
    else:
        idle = C.SYNC_DRAIN if bool(g.drained[r]) else C.STARVED
    cpu = max(host, key=host.get) if any(host.values()) else C.UNTRACED
    return {"idle_type": idle, "cpu": cpu}


class _Events:
    """Records of cited events, memoised (a device op ends one gap and starts the next)."""

    def __init__(self, refs: EventRefs, labels: list):
        self.refs, self.labels = refs, labels
        self._memo: dict = {}

    def chain(self, r: int) -> list:
        return [self.refs.strings[i] for i in self.refs.chain[r]]

    def op(self, e: int):
        if e < 0:
            return None
        got = self._memo.get(e)
        if got is None:
            R = self.refs
            r = int(R.row([e])[0])
            got = self._memo[e] = {
                "name": R.strings[int(R.name[r])], "start_ns": ns(R.ts[r]),
                "duration_ns": ns(R.dur[r]),
                "hlo_op": R.strings[int(R.hlo_op[r])] if R.hlo_op[r] >= 0 else None,
                "annotation": R.strings[int(R.annotation[r])] if R.annotation[r] >= 0 else None,
                "track": self.labels[int(R.track[r])]}
        return got

    def waited(self, e: int, via: int):
        if e < 0:
            return None
        R = self.refs
        r = int(R.row([e])[0])
        return {"name": R.strings[int(R.name[r])], "chain": self.chain(r),
                "thread": self.labels[int(R.track[r])], "start_ns": ns(R.ts[r]),
                "duration_ns": ns(R.dur[r]), "found_via": VIA_NAMES.get(via, "link")} \
            if via >= 0 else {"name": R.strings[int(R.name[r])], "chain": self.chain(r),
                              "thread": self.labels[int(R.track[r])], "start_ns": ns(R.ts[r]),
                              "duration_ns": ns(R.dur[r])}

    def host_op(self, t: int, e: int, self_ps: int, refs: EventRefs | None = None) -> dict:
        R = refs or self.refs
        r = int(R.row([e])[0])
        return {"thread": self.labels[t], "name": R.strings[int(R.name[r])],
                "chain": [R.strings[i] for i in R.chain[r]], "self_ns": ns(self_ps),
                "start_ns": ns(R.ts[r]), "duration_ns": ns(R.dur[r]),
                "kind": _KIND_NAMES.get(int(R.kind[r]), "other")}

    def sync(self, t: int, e: int, refs: EventRefs | None = None) -> dict:
        R = refs or self.refs
        r = int(R.row([e])[0])
        return {"thread": self.labels[t], "name": R.strings[int(R.name[r])],
                "chain": [R.strings[i] for i in R.chain[r]], "start_ns": ns(R.ts[r]),
                "end_ns": ns(int(R.ts[r]) + int(R.dur[r]))}


def _detail_of(diag: Diagnosis, detail: HostOps, refs: EventRefs, ev: _Events) -> dict:
    """gap row → (host_ops, syncs) records."""
    out = {}
    k0 = 0
    for j, r in enumerate(detail.rows.tolist()):
        k1 = k0
        while k1 < detail.gap.shape[0] and detail.gap[k1] == r:
            k1 += 1
        ops = [ev.host_op(int(t), int(e), int(s), refs) for t, e, s in zip(
            detail.track[k0:k1].tolist(), detail.event[k0:k1].tolist(),
            detail.self_time[k0:k1].tolist())]
        out[r] = (ops, [ev.sync(t, e, refs) for t, e in detail.syncs[j]])
        k0 = k1
    return out


def gap_records(diag: Diagnosis, rows, extra_detail=None) -> list:
    """One JSON record per gap row; ``extra_detail`` = (HostOps, EventRefs) of rows whose
    detail was computed on demand."""
    g = diag.gaps
    rows = np.asarray(rows, np.int64)
    ev = _Events(diag.refs, diag.track_labels)
    # the diagnosis' own detail covers a prefix of rows (the largest gaps)
    own = _detail_of(diag, diag.detail, diag.refs, ev) if diag.detail.rows.size else {}
    if extra_detail is not None:
        own.update(_detail_of(diag, extra_detail[0], extra_detail[1], ev))
    step_ids = diag.steps.ids
    out = []
    for r in rows.tolist():
        d, c = int(g.device[r]), C.ALL[int(g.cause[r])]
        s0, e0 = ns(g.start[r]), ns(g.end[r])
        st = int(g.step[r])
        det = own.get(r)
        t = int(g.thread[r])
        out.append({
            "id": f"{d}-{s0}", "rank": r, "device": d,
            "step": int(step_ids[st]) if st >= 0 else None,
            "start_ns": s0, "end_ns": e0, "duration_ns": ns(g.end[r] - g.start[r]),
            "cause": c, "cause_label": C.LABELS[c], "hta_category": C.HTA[c],
            "evidence": evidence_text(diag, r),
            "shares_ns": {c: v for c, v in zip(C.ALL, ns_list(g.shares[r])) if v > 0},
            "host_time_by_cause_ns": {c: v for c, v in zip(C.ALL, ns_list(g.shares[r]))
                                      if v > 0 and c not in C.DEVICE_SIDE},
            "tracelens": tracelens(diag, r),
            "blocking": ev.waited(int(g.blocking[r]), -1) if g.blocking[r] >= 0 else None,
            "culprit": ev.waited(int(g.culprit[r]), -1) if g.culprit[r] >= 0 else None,
            "analysed_thread": diag.track_labels[t] if t >= 0 else None,
            "followed_thread": diag.track_labels[int(g.followed[r])] if g.followed[r] >= 0
            else None,
            "prev_op": ev.op(int(g.prev_op[r])), "next_op": ev.op(int(g.next_op[r])),
            "waited_for": ev.waited(int(g.waited_for[r]), int(g.found_via[r])),
            "host_ops": det[0] if det else [], "syncs": det[1] if det else [],
            "detail": det is not None,
        })
    return out


def _by_cause(v) -> dict:
    return {c: ns(v[i]) for i, c in enumerate(C.ALL) if v[i] > 0}


def devices_json(diag: Diagnosis) -> list:
    D = diag.devices
    out = []
    for d in range(len(D)):
        if D.ops[d] == 0:
            out.append({"id": d, "name": D.name[d], "kind": D.kind[d], "duty_cycle": None,
                        "busy_ns": 0, "window_ns": 0, "start_ns": None, "end_ns": None,
                        "ops": 0, "idle_by_cause_ns": {}})
            continue
        lo, hi, busy = int(D.lo[d]), int(D.hi[d]), int(D.busy[d])
        out.append({"id": d, "name": D.name[d], "kind": D.kind[d],
                    "duty_cycle": busy / (hi - lo) if hi > lo else 1.0,
                    "busy_ns": ns(busy), "window_ns": ns(hi - lo), "start_ns": ns(lo),
                    "end_ns": ns(hi), "ops": int(D.ops[d]),
                    "idle_by_cause_ns": _by_cause(D.idle_by_cause[d]),
                    "small_gaps": {"count": int(D.small_count[d]),
                                   "total_ns": ns(D.small_total[d])}})
    return out


def steps_json(diag: Diagnosis) -> list:
    S = diag.steps
    devs = np.flatnonzero(S.has_device).tolist()
    out = []
    for s in range(len(S)):
        per_dev = {}
        for d in devs:
            a, b = int(S.win_start[s, d]), int(S.win_end[s, d])
            w = max(b - a, 0)
            bz = int(S.busy[s, d])
            lau = int(S.launched[s, d]) if S.launched is not None else -1
            per_dev[str(d)] = {"duty_cycle": bz / w if w else None, "start_ns": ns(a),
                               "end_ns": ns(b), "busy_ns": ns(bz), "idle_ns": ns(w - bz),
                               "launched_ns": ns(lau) if lau >= 0 else None,
                               "idle_by_cause_ns": _by_cause(S.idle_by_cause[s, d]),
                               "small_gaps": {"count": int(S.small_count[s, d]),
                                              "total_ns": ns(S.small_total[s, d])}}
        out.append({"id": int(S.ids[s]), "start_ns": ns(S.host_start[s]),
                    "end_ns": ns(S.host_end[s]), "devices": per_dev,
                    "compile": {"count": int(S.compile_count[s]),
                                "total_ns": ns(S.compile_total[s])},
                    "outlier": bool(S.outlier[s])})
    return out


def annotations_json(diag: Diagnosis) -> list:
    A = diag.annotations
    ids = diag.steps.ids.tolist()
    out = []
    for a, path in enumerate(A.paths):
        inc, exc = A.per_step_inclusive[a], A.per_step_exclusive[a]
        out.append({
            "path": list(path), "name": path[-1], "depth": len(path) - 1,
            "inclusive_ns": int(A.inclusive[a] // 1000),
            "exclusive_ns": int(A.exclusive[a] // 1000),
            "ops": int(A.ops[a]), "device_runs": int(A.device_runs[a]),
            "scattered": bool(A.scattered[a]),
            "interleaved_with": list(A.interleaved_with[a]),
            "user_scope": A.user_scope[a] if a < len(A.user_scope) else path[-1],
            "per_step": {str(int(ids[s])): {"inclusive_ns": int(inc[s] // 1000),
                                            "exclusive_ns": int(exc[s] // 1000)}
                         for s in np.flatnonzero(inc > 0).tolist()},
        })
    return out


def unscoped_json(diag: Diagnosis) -> dict:
    """Device time of the ops under no user scope (summed over devices, as the rows)."""
    A = diag.annotations
    ids = diag.steps.ids.tolist()
    per = np.asarray(A.unscoped_per_step)
    return {"device_ns": int(A.unscoped // 1000), "ops": int(A.unscoped_ops),
            "per_step": {str(int(ids[s])): int(per[s] // 1000)
                         for s in np.flatnonzero(per > 0).tolist() if s < len(ids)}}


def user_scopes_json(diag: Diagnosis) -> list:
    """Device time per user scope name over the whole tree (JAX's ``jvp(forward)`` and
    ``transpose(jvp(forward))`` count as ``forward``), largest first."""
    A = diag.annotations
    rows = [{"name": nm, "device_ns": int(A.scope_inclusive[i] // 1000),
             "ops": int(A.scope_ops[i])} for i, nm in enumerate(A.scope_names)]
    return sorted(rows, key=lambda r: (-r["device_ns"], r["name"]))


def _step_id(diag: Diagnosis, k: int):
    return int(diag.steps.ids[k]) if k >= 0 else None


def compilations_json(diag: Diagnosis) -> list:
    """One record per outermost compilation; ``recompile`` only when the same function
    was compiled before (a first compile is a one-time cost)."""
    T = diag.compilations
    if T is None:
        return []
    return [{"step": _step_id(diag, int(T.step[i])), "start_ns": ns(T.start[i]),
             "duration_ns": ns(T.duration[i]), "function": T.function[i] or None,
             "recompile": bool(T.recompile[i]),
             "event": diag.refs.name_of(int(T.event[i])) or None} for i in range(len(T))]


def transfers_json(diag: Diagnosis) -> list:
    """One record per user-level host↔device transfer call."""
    T = diag.transfers
    if T is None:
        return []
    return [{"step": _step_id(diag, int(T.step[i])), "start_ns": ns(T.start[i]),
             "duration_ns": ns(T.duration[i]),
             "direction": "d2h" if int(T.direction[i]) == Direction.D2H else "h2d",
             "event": diag.refs.name_of(int(T.event[i])) or None} for i in range(len(T))]


def finding_json(diag: Diagnosis, f: Finding) -> dict:
    rows = f.gaps[:MAX_EVIDENCE]
    if rows.size:
        ranges = [[s, e] for s, e in zip(ns_list(diag.gaps.start[rows]),
                                         ns_list(diag.gaps.end[rows]))]
    else:
        ranges = [list(r) for r in f.ranges]
    out = {"kind": f.kind.value, "title": f.title,
           "time_lost_ns_per_step": int(f.time_lost_ns_per_step),
           "time_lost_ns": int(f.time_lost_ns), "confidence": f.confidence,
           "steps": list(f.steps), "fix": f.fix, "detail": f.detail,
           "evidence": {"gaps": gap_ids(diag, rows), "ranges": ranges}}
    out.update(f.extra)
    if f.kind == FindingKind.D2H_TRANSFER:
        R = diag.refs
        rr = R.row(f.events)
        out["events"] = [{"name": R.strings[int(R.name[r])], "start_ns": int(R.ts[r] // 1000),
                          "duration_ns": int(R.dur[r] // 1000),
                          "chain": [R.strings[i] for i in R.chain[r]]} for r in rr.tolist()]
    return out


def hta_json(diag: Diagnosis) -> dict:
    """Idle time in HTA's categories per device (the mean over the devices with activity:
    idle summed over devices would outgrow the trace)."""
    out = {"host_wait_ns": 0, "kernel_wait_ns": 0, "other_ns": 0}
    dur = np.asarray(ns_list(diag.gaps.end - diag.gaps.start), np.int64)
    for i, c in enumerate(C.ALL):
        out[C.HTA[c] + "_ns"] += int(dur[diag.gaps.cause == i].sum())
    active = np.flatnonzero(diag.devices.ops > 0).tolist()
    for d in active:
        out["kernel_wait_ns"] += ns(diag.devices.small_total[d])
    return {k: int(round(v / max(len(active), 1))) for k, v in out.items()}


def diagnosis_json(diag: Diagnosis, gaps_offset: int = 0, gaps_limit: int | None = None,
                   step: int | None = None, paged: bool = False) -> dict:
    """The whole diagnosis; gaps ``[gaps_offset, +gaps_limit)`` of those of ``step`` (all
    steps when None).  ``paged`` adds gaps_total/offset/limit as the route does."""
    rows = np.arange(len(diag.gaps))
    if step is not None:
        ids = diag.steps.ids
        st = diag.gaps.step
        sid = np.where(st >= 0, ids[np.maximum(st, 0)] if ids.size else -1, -1)
        rows = rows[(st >= 0) & (sid == step)]
    total = int(rows.shape[0])
    end = None if gaps_limit is None else gaps_offset + gaps_limit
    page = rows[gaps_offset:end]
    out = {
        "schema_version": SCHEMA_VERSION, "source": dict(diag.source),
        "options": {"threshold_us": diag.threshold_us, "kernels_only": diag.kernels_only},
        "definitions": DEFINITIONS, "step_source": diag.steps.source,
        "devices": devices_json(diag), "steps": steps_json(diag),
        "gaps": gap_records(diag, page), "annotations": annotations_json(diag),
        "unscoped": unscoped_json(diag), "user_scopes": user_scopes_json(diag),
        "compilations": compilations_json(diag), "transfers": transfers_json(diag),
        "findings": [finding_json(diag, f) for f in diag.findings], "hta": hta_json(diag),
        "warnings": list(diag.warnings),
    }
    if paged:
        out.update(gaps_total=total, gaps_offset=gaps_offset,
                   gaps_limit=gaps_limit if gaps_limit is not None else total)
    return out
