"""Diagnosis → the JSON the page, the CLI and the API serve (schema_version 1).

Gaps are paged: a page renders only its own gap records.  A gap's host-op detail
comes from the diagnosis (the largest gaps) or from ``extra_detail`` (computed on
demand for one gap by the server).

The page's first answer (``light``) stays small on any trace: a listed gap carries its
first ``HOST_OPS_SHOWN`` host ops (``host_ops_total`` says how many the ``gap`` route
gives), and above ``STEP_ROWS`` steps the rows give way to ``step_bins`` (per bin the
step times' spread and the mean split of a step) and the rows a reader looks for first,
the others coming from the ``steps`` route a page at a time."""
from __future__ import annotations

import numpy as np
import orjson

from ..units import duration_ps
from ..analysis import causes as C
from ..analysis.attribution.links import VIA_NAMES
from ..analysis.attribution.culprits import readable
from ..analysis.diagnosis import no_cyclic_gc
from ..analysis.device_time.by_op import fold_kernel_name
from ..analysis.steps.losses import device_losses, primary_device
from ..analysis.result import Diagnosis, Direction, EventRefs, Finding, FindingKind, HostOps
from ..analysis.steps.windows import AFTER_LAST, DEFINITION as STEP_DEFINITION
from ..trace.model import EventKind as K
from ..analysis.result import TYPICAL_STEP
from .device_ops import device_ops_json
from . import efficiency as eff_json

SCHEMA_VERSION = 1
MAX_EVIDENCE = 20
# a listed gap's host ops in the first answer (the most self time first): the panel opens
# on these; one gap of a busy host holds hundreds (324 on a TPU host: 78 KB a gap)
HOST_OPS_SHOWN = 5
# …and a chain's outermost and innermost frames (Python stacks run 100 frames deep); the
# frames between them are one "… N more frames" entry, the gap route gives them all
CHAIN_OUTER, CHAIN_INNER = 2, 10
# lists of the first answer that grow with the trace, cut to their largest (with a total)
ANNOTATIONS_SHOWN = 200      # annotation paths, by inclusive device time
SCOPES_SHOWN = 200           # user scope names, by device time
CALLS_SHOWN = 100            # compilations and transfers each, the longest (time order)
FINDINGS_SHOWN = 50          # findings, largest time lost first (as listed)
FINDING_STEPS_SHOWN = 100    # a finding's steps
WARNINGS_SHOWN = 50
# the gap page of the first answer within this many bytes of JSON: a page of gaps whose
# names and chains are long holds fewer, "Load more" pages on
GAPS_BYTES = 1_200_000
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
    "typical_step": TYPICAL_STEP,
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
    "mfu": eff_json.DEFINITION,
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


def _outside(st: int):
    """Where a gap in no step lies (``GapTable.step`` −1, −2), as the JSON says it."""
    return None if st >= 0 else ("after_last_step" if st == AFTER_LAST else "before_first_step")


def gap_refs(diag: Diagnosis, rows) -> list:
    """What a reader needs to pick a cited gap out ("8.6 ms in step 41 on TPU:1"), beside
    the id the page links with."""
    rows = np.asarray(rows, np.int64)
    g = diag.gaps
    ids = diag.steps.ids
    st = g.step[rows]
    steps = np.where(st >= 0, ids[np.maximum(st, 0)] if ids.size else -1, -1).tolist()
    names = diag.devices.name
    return [{"id": i, "duration_ns": d, "step": s if s >= 0 else None, "device": names[v],
             **({"outside": _outside(r)} if r < 0 else {})}
            for i, d, s, v, r in zip(gap_ids(diag, rows), ns_list(g.end[rows] - g.start[rows]),
                                     steps, g.device[rows].tolist(), st.tolist())]


def gap_row(diag: Diagnosis, gap_id: str) -> int:
    """Row of the gap named ``device-start_ns`` (−1 when there is none)."""
    try:
        d, s = (int(x) for x in gap_id.split("-", 1))
    except ValueError:
        return -1
    g = diag.gaps
    hit = np.flatnonzero((g.device == d) & (np.rint(g.start / 1000).astype(np.int64) == s))
    return int(hit[0]) if hit.size else -1


_dur = duration_ps         # the one unit rule (units.py)


def _typical_step_ns(diag: Diagnosis) -> int | None:
    """The step time the page and every face show (``TYPICAL_STEP``)."""
    t = diag.steps.typical_step_ps()
    return None if t is None else int(round(t / 1000))


def _short_chain(chain: list, frames: int = 3) -> str:
    chain = [c for c in chain if not c.startswith("ProfilerStep#")] or chain
    return " › ".join(chain[-frames:])


_SYNC_I = C.ALL.index(C.HOST_SYNC)
_DEVICE_I = tuple(C.ALL.index(c) for c in C.DEVICE_SIDE)
_COLL_I = C.ALL.index(C.COLLECTIVE_WAIT)
_LOWER = [C.LABELS[c].lower() for c in C.ALL]


def _evidence_parts(shares: np.ndarray, total: np.ndarray) -> list:
    """Per gap (rows of ``shares``, ns): the share columns its evidence names, largest
    first — those of at least 1 % of the gap, four at most, else the largest one."""
    n, m = shares.shape
    if n == 0:
        return []
    order = np.argsort(-shares, axis=1, kind="stable")        # ties: lower column first
    sh = np.take_along_axis(shares, order, axis=1)
    big = (sh > 0) & (sh >= 0.01 * np.asarray(total, np.float64)[:, None])
    big[:, 4:] = False
    # nothing big enough: the largest share alone
    lone = ~big.any(axis=1) & (sh[:, 0] > 0)
    big[lone, 0] = True
    cols = np.where(big, order, -1)
    return [[c for c in row if c >= 0] for row in cols[:, :4].tolist()]


def _evidence(sh: list, keep: list, cause: int, names: tuple, idle_first: bool) -> str:
    """The gap's split in words (``sh`` in ns, ``keep`` the columns to name; ``names``:
    next op, issuing call, blocking call, culprit chain, with None where there is none)."""
    nxt, wf, blk, cul = names
    parts = []
    for i in keep:
        t = _dur(sh[i] * 1000.0)
        if i == _SYNC_I:
            parts.append(f"{t} exposed by {blk}" if blk else f"{t} host sync")
        elif i in _DEVICE_I:
            what = "waiting for peers at" if i == _COLL_I else "device-side wait for"
            if wf is None:
                how = " (no launch in the trace: the device was running behind the host)"
            elif idle_first:
                how = f", issued by {wf} before the device went idle"
            else:
                how = f", issued by {wf}"
            parts.append(f"{t} {what} {nxt!r}{how}")
        else:
            parts.append(f"{t} {_LOWER[i]}" + (f" ({cul})" if cul and i == cause else ""))
    return ", ".join(parts)


def evidence_text(diag: Diagnosis, r: int) -> str:
    """Gap ``r``'s split in words: '48.0 ms data loading (DataLoader › aten::div), 12 µs
    exposed by cudaStreamSynchronize'."""
    return gap_records(diag, [r], evidence_only=True)[0]


def _tracelens(sh: list, total: int, drained: bool) -> dict:
    """TraceLens' two axes: how the queue ran dry, and what the CPU did meanwhile."""
    dev = sum(sh[i] for i in _DEVICE_I)
    idle = C.DEVICE_SIDE_WAIT if dev * 2 > total else (C.SYNC_DRAIN if drained else C.STARVED)
    host = [(v, i) for i, v in enumerate(sh) if i not in _DEVICE_I and i != _SYNC_I and v > 0]
    return {"idle_type": idle, "cpu": C.ALL[max(host)[1]] if host else C.UNTRACED}


def tracelens(diag: Diagnosis, r: int) -> dict:
    g = diag.gaps
    return _tracelens(ns_list(g.shares[r]), ns(g.end[r] - g.start[r]), bool(g.drained[r]))


class _Events:
    """Records of cited events, memoised (a device op ends one gap and starts the next);
    the refs' columns are read as Python lists once."""

    def __init__(self, refs: EventRefs, labels: list, chain_cap: bool = False):
        self.labels = labels
        self.chain_cap = chain_cap
        self._ops: dict = {}
        self._waited: dict = {}
        self._T = None
        self._tables: dict = {}
        self._chains: dict = {}
        self.refs = refs

    def _table(self, R: EventRefs):
        t = self._tables.get(id(R))
        if t is None:
            t = self._tables[id(R)] = (
                dict(zip(R.event.tolist(), range(R.event.shape[0]))),
                [R.strings[i] for i in R.name.tolist()], ns_list(R.ts), ns_list(R.dur),
                ns_list(R.ts + R.dur), R.track.tolist(), R.hlo_op.tolist(),
                R.annotation.tolist(), R.kind.tolist(), R)
        return t

    def _chain(self, T, r):
        """The chain's names; events with one chain share one (read-only) list."""
        R = T[-1]
        key = R.chain[r]
        got = self._chains.get(key)
        if got is None:
            # a chain reads like the op table: C++ signatures folded (the op's own name
            # stays whole beside it)
            if self.chain_cap and len(key) > CHAIN_OUTER + CHAIN_INNER + 1:
                cut = len(key) - CHAIN_OUTER - CHAIN_INNER
                got = [readable(R.strings[i]) for i in key[:CHAIN_OUTER]] + \
                    [f"… {cut} more frames"] + \
                    [readable(R.strings[i]) for i in key[-CHAIN_INNER:]]
                self._chains[key] = got
            else:
                got = self._chains[key] = [readable(R.strings[i]) for i in key]
        return got

    def op(self, e: int):
        if e < 0:
            return None
        got = self._ops.get(e)
        if got is None:
            T = self._own()
            r = T[0][e]
            hlo, ann, R = T[6][r], T[7][r], T[-1]
            got = self._ops[e] = {
                "name": T[1][r], "label": fold_kernel_name(T[1][r]),
                "start_ns": T[2][r], "duration_ns": T[3][r],
                "hlo_op": R.strings[hlo] if hlo >= 0 else None,
                "annotation": R.strings[ann] if ann >= 0 else None,
                "track": self.labels[T[5][r]]}
        return got

    def waited(self, e: int, via: int):
        if e < 0:
            return None
        key = e * 64 + via + 1                     # via: a small code, −1 none
        got = self._waited.get(key)
        if got is None:
            T = self._own()
            r = T[0][e]
            got = {"name": T[1][r], "chain": self._chain(T, r), "thread": self.labels[T[5][r]],
                   "start_ns": T[2][r], "duration_ns": T[3][r]}
            if via >= 0:
                got["found_via"] = VIA_NAMES.get(via, "link")
            self._waited[key] = got
        return got

    def _own(self):
        if self._T is None:
            self._T = self._table(self.refs)
        return self._T

    def host_op(self, t: int, e: int, self_ps: int, refs: EventRefs | None = None) -> dict:
        T = self._table(refs or self.refs)
        r = T[0][e]
        return {"thread": self.labels[t], "name": T[1][r], "chain": self._chain(T, r),
                "self_ns": ns(self_ps), "start_ns": T[2][r], "duration_ns": T[3][r],
                "kind": _KIND_NAMES.get(T[8][r], "other")}

    def sync(self, t: int, e: int, refs: EventRefs | None = None) -> dict:
        T = self._table(refs or self.refs)
        r = T[0][e]
        return {"thread": self.labels[t], "name": T[1][r], "chain": self._chain(T, r),
                "start_ns": T[2][r], "end_ns": T[4][r]}


def _detail_of(diag: Diagnosis, detail: HostOps, refs: EventRefs, ev: _Events,
               host_ops: int | None = None) -> dict:
    """gap row → (host_ops, syncs, how many host ops in all, how many syncs) records; the
    first ``host_ops`` host ops (most self time first) and syncs when given, else all."""
    out = {}
    # each row's host ops are the next run of equal values of ``detail.gap`` (a row with
    # none has no run): the runs' bounds found once, not by a step through every op
    g = np.asarray(detail.gap)
    cut = np.flatnonzero(g[1:] != g[:-1]) + 1 if g.shape[0] else np.zeros(0, np.int64)
    run_lo = [0] + cut.tolist() if g.shape[0] else []
    run_hi = run_lo[1:] + [g.shape[0]] if g.shape[0] else []
    run_val = g[run_lo].tolist() if g.shape[0] else []
    q = 0
    track, event, self_t = detail.track, detail.event, detail.self_time
    for j, r in enumerate(detail.rows.tolist()):
        if q < len(run_val) and run_val[q] == r:
            k0, k1 = run_lo[q], run_hi[q]
            q += 1
        else:
            k0 = k1 = run_lo[q] if q < len(run_lo) else g.shape[0]
        k2 = k1 if host_ops is None else min(k1, k0 + host_ops)
        ops = [ev.host_op(t, e, s, refs) for t, e, s in zip(
            track[k0:k2].tolist(), event[k0:k2].tolist(), self_t[k0:k2].tolist())]
        syncs = detail.syncs[j]
        out[r] = (ops, [ev.sync(t, e, refs) for t, e in (
            syncs if host_ops is None else syncs[:host_ops])], k1 - k0, len(syncs))
    return out


def gap_records(diag: Diagnosis, rows, extra_detail=None, evidence_only: bool = False,
                host_ops: int | None = None) -> list:
    """One JSON record per gap row; ``extra_detail`` = (HostOps, EventRefs) of rows whose
    detail was computed on demand; ``host_ops``: each gap's first that many host ops
    (all when None).  Columns are converted once for the whole page (a page can hold every
    gap of a trace: no numpy scalar per field)."""
    with no_cyclic_gc():
        return _gap_records(diag, rows, extra_detail, evidence_only, host_ops)


def _gap_records(diag: Diagnosis, rows, extra_detail, evidence_only: bool,
                 host_ops: int | None) -> list:
    g = diag.gaps
    rows = np.asarray(rows, np.int64)
    if rows.size == 0:
        return []
    R, labels = diag.refs, diag.track_labels
    strings = R.strings
    ev = _Events(R, labels, chain_cap=host_ops is not None)
    start, end = g.start[rows], g.end[rows]
    dur = ns_list(end - start)
    sh_ns = np.rint(g.shares[rows] / 1000).astype(np.int64)
    shares = sh_ns.tolist()
    cause = g.cause[rows].tolist()
    idle_first = (g.rest_end[rows] <= start).tolist()
    # names of the cited events, looked up once per column
    cols = {}
    for key in ("next_op", "waited_for", "blocking", "culprit", "prev_op"):
        rr = R.row(getattr(g, key)[rows])
        cols[key] = rr.tolist()
    name = lambda r: readable(strings[int(R.name[r])]) if r >= 0 else None  # noqa: E731
    chain_memo: dict = {}

    def short(r):
        if r < 0:
            return None
        c = chain_memo.get(r)
        if c is None:
            c = chain_memo[r] = _short_chain([readable(strings[i]) for i in R.chain[r]])
        return c

    keep = _evidence_parts(sh_ns, np.asarray(dur, np.int64))
    evid = [_evidence(sh, kp, c, (name(nx), name(wf), name(bk), short(cu)), fi)
            for sh, kp, c, nx, wf, bk, cu, fi in zip(
                shares, keep, cause, cols["next_op"], cols["waited_for"], cols["blocking"],
                cols["culprit"], idle_first)]
    # TraceLens' axes for the page at once
    sh_np = g.shares[rows]
    dev_side = sh_np[:, list(_DEVICE_I)].sum(axis=1)
    host_cols = [i for i in range(len(C.ALL)) if i not in _DEVICE_I and i != _SYNC_I]
    host = sh_np[:, host_cols]
    cpu = np.where(host.max(axis=1) > 0, np.array(host_cols)[np.argmax(host, axis=1)],
                   C.ALL.index(C.UNTRACED)).tolist()
    idle_type = np.where(dev_side * 2 > (end - start), 2, np.where(g.drained[rows], 0, 1)).tolist()
    kinds = (C.SYNC_DRAIN, C.STARVED, C.DEVICE_SIDE_WAIT)
    if evidence_only:
        return evid
    own = _detail_of(diag, diag.detail, R, ev, host_ops) if diag.detail.rows.size else {}
    if extra_detail is not None:
        own.update(_detail_of(diag, extra_detail[0], extra_detail[1], ev, host_ops))
    ids = diag.steps.ids
    st = g.step[rows]
    steps = np.where(st >= 0, ids[np.maximum(st, 0)] if ids.size else -1, -1).tolist()
    dev = g.device[rows].tolist()
    s0, e0 = ns_list(start), ns_list(end)
    thread, followed = g.thread[rows].tolist(), g.followed[rows].tolist()
    via = g.found_via[rows].tolist()
    raw = {k: getattr(g, k)[rows].tolist() for k in ("prev_op", "next_op", "waited_for",
                                                     "blocking", "culprit")}
    # every field as a column first; the records are made in one comprehension
    label = [C.LABELS[c] for c in C.ALL]
    hta = [C.HTA[c] for c in C.ALL]
    tl_memo: dict = {}

    def tracelens_of(it: int, cp: int) -> dict:
        got = tl_memo.get((it, cp))
        if got is None:
            got = tl_memo[(it, cp)] = {"idle_type": kinds[it], "cpu": C.ALL[cp]}
        return got

    rl = rows.tolist()
    names = C.ALL
    cols_out = (
        [f"{d}-{s}" for d, s in zip(dev, s0)], rl, dev,
        [x if x >= 0 else None for x in steps], [_outside(x) for x in st.tolist()],
        s0, e0, dur, cause, evid,
        [{names[i]: v for i, v in enumerate(sh) if v} for sh in shares],
        [tracelens_of(a, b) for a, b in zip(idle_type, cpu)],
        [ev.waited(b, -1) if b >= 0 else None for b in raw["blocking"]],
        [ev.waited(b, -1) if b >= 0 else None for b in raw["culprit"]],
        [labels[t] if t >= 0 else None for t in thread],
        [labels[t] if t >= 0 else None for t in followed],
        [ev.op(x) for x in raw["prev_op"]], [ev.op(x) for x in raw["next_op"]],
        [ev.waited(w, v) for w, v in zip(raw["waited_for"], via)],
        [own.get(r) for r in rl] if own else [None] * len(rl))
    return [{
        "id": i_, "rank": r, "device": d, "step": st_, **({"outside": out_} if out_ else {}),
        "start_ns": a, "end_ns": b,
        "duration_ns": du, "cause": names[c], "cause_label": label[c], "hta_category": hta[c],
        "evidence": evi, "shares_ns": sh, "tracelens": tl, "blocking": bl, "culprit": cu,
        "analysed_thread": at, "followed_thread": fo, "prev_op": po, "next_op": no,
        "waited_for": wf, "host_ops": det[0] if det else [],
        "host_ops_total": det[2] if det else 0, "syncs": det[1] if det else [],
        "syncs_total": det[3] if det else 0,
        "detail": det is not None,
    } for (i_, r, d, st_, out_, a, b, du, c, evi, sh, tl, bl, cu, at, fo, po, no, wf, det)
        in zip(*cols_out)]


def _by_cause(v) -> dict:
    out = {c: ns(v[i]) for i, c in enumerate(C.ALL) if v[i] > 0}
    return {c: x for c, x in out.items() if x > 0}


def devices_json(diag: Diagnosis) -> list:
    D = diag.devices
    # gaps above the threshold per device: what a device's own gap list pages through
    gaps = np.bincount(np.asarray(diag.gaps.device, np.int64), minlength=len(D)).tolist()
    L = device_losses(diag)
    out = []
    for d in range(len(D)):
        if D.ops[d] == 0:
            out.append({"id": d, "name": D.name[d], "kind": D.kind[d], "duty_cycle": None,
                        "busy_ns": 0, "window_ns": 0, "start_ns": None, "end_ns": None,
                        "ops": 0, "gaps": gaps[d], "idle_by_cause_ns": {}})
            continue
        lo, hi, busy = int(D.lo[d]), int(D.hi[d]), int(D.busy[d])
        out.append({"id": d, "name": D.name[d], "kind": D.kind[d],
                    "duty_cycle": busy / (hi - lo) if hi > lo else 1.0,
                    "busy_ns": ns(busy), "window_ns": ns(hi - lo), "start_ns": ns(lo),
                    "end_ns": ns(hi), "ops": int(D.ops[d]), "gaps": gaps[d],
                    "idle_by_cause_ns": _by_cause(D.idle_by_cause[d]),
                    # the one split of each loss every face says: per typical step, once
                    "idle_per_step_ns": _by_cause(L.per_step[d]),
                    "idle_once_ns": _by_cause(L.once[d]),
                    "small_gaps": {"count": int(D.small_count[d]),
                                   "total_ns": ns(D.small_total[d])},
                    "steps_window": _steps_window(D, d, busy,
                                                  diag.steps.source != "whole_trace",
                                                  diag.steps),
                    "efficiency": eff_json.device_json(diag, d)})
    return out


_STARTUP_I = C.ALL.index(C.STARTUP)


def _steps_window(D, d: int, busy: int, steps: bool = True, S=None) -> dict:
    """The window the device's idle by cause adds up over: its activity and the step
    windows on it (the duty cycle beside it is over its activity alone).  Over steps, the
    steady state leaves start-up out: ``steady_duty_cycle`` is busy over the window less
    its ``startup_ns``.  With the step numbers ``S``: ``past_steps`` when the device's
    work reaches outside the span of its step windows (the window is then more than the
    steps)."""
    a, b = D.window(d)
    w = max(b - a, 0)
    out = {"start_ns": ns(a), "end_ns": ns(b), "window_ns": ns(w), "busy_ns": ns(busy),
           "idle_ns": ns(w) - ns(busy), "duty_cycle": busy / w if w else None}
    st = int(D.idle_by_cause[d, _STARTUP_I]) if D.idle_by_cause.shape[1] > _STARTUP_I else 0
    if steps and st > 0 and w > st:
        out.update(startup_ns=ns(st), steady_duty_cycle=min(busy / (w - st), 1.0))
    if S is not None:
        wb, we = S.win_start[:, d], S.win_end[:, d]
        open_ = we > wb
        out["past_steps"] = steps and bool(open_.any()) and (
            int(D.lo[d]) < int(wb[open_].min()) or int(D.hi[d]) > int(we[open_].max()))
    return out


def _step_devices(diag: Diagnosis, devices=None) -> list:
    """The devices with step figures (of ``devices`` only, when given)."""
    devs = np.flatnonzero(diag.steps.has_device).tolist()
    return devs if devices is None else [d for d in devs if d in devices]


def _recompiles_per_step(diag: Diagnosis) -> np.ndarray:
    """Per step, how many of its compiles compiled a function again."""
    n, T = len(diag.steps), diag.compilations
    if T is None or not len(T):
        return np.zeros(n, np.int64)
    st = T.step[(T.step >= 0) & np.asarray(T.recompile, bool)]
    return np.bincount(st, minlength=n)[:n]


def steps_json(diag: Diagnosis, rows=None, devices=None) -> list:
    """One record per step (those of ``rows``, step indices in order, when given), with the
    figures of every device (of ``devices`` only, when given)."""
    S = diag.steps
    devs = _step_devices(diag, devices)
    again = _recompiles_per_step(diag)
    out = []
    for s in (range(len(S)) if rows is None else np.asarray(rows, np.int64).tolist()):
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
                                              "total_ns": ns(S.small_total[s, d])},
                               **eff_json.step_json(diag, s, d)}
        out.append({"id": int(S.ids[s]), "start_ns": ns(S.host_start[s]),
                    "end_ns": ns(S.host_end[s]), "devices": per_dev,
                    "compile": {"count": int(S.compile_count[s]),
                                "total_ns": ns(S.compile_total[s]),
                                "recompiles": int(again[s])},
                    "outlier": bool(S.outlier[s])})
    return out


# Above STEP_ROWS steps the first answer draws the chart from STEP_BINS bins of
# consecutive steps and lists only the rows a reader looks for first: the step asked for,
# the SLOWEST_STEPS slowest, the slowest MARKED_STEPS outliers and compiling steps, and
# the first and last step (the capture's bounds); the steps route serves the others.
STEP_ROWS = 500
STEP_CELLS = 2_000       # …or above this many step × device figures
STEP_BINS = 200
MIN_STEP_BINS = 20
SLOWEST_STEPS = 20
MARKED_STEPS = 50


def _step_ns(diag: Diagnosis) -> np.ndarray:
    S = diag.steps
    return np.asarray(ns_list(S.host_end), np.int64) - np.asarray(ns_list(S.host_start),
                                                                  np.int64)


def _mean_ns(total_ps: np.ndarray, count: np.ndarray, lists: bool = True):
    """``ns(total / count)`` of each element (the mean cut to whole ps, then rounded to ns
    half to even, as ``ns`` does one value)."""
    out = np.rint(np.trunc(total_ps / count) / 1000).astype(np.int64)
    return out.tolist() if lists else out


def step_bins_json(diag: Diagnosis, bins: int = STEP_BINS, devices=None) -> list:
    """The steps in ``bins`` runs of consecutive steps: per bin its steps' time (min,
    median, mean, max; the slowest step's id), how many are outliers or compile, and per
    device (of ``devices`` only, when given) the mean step's split (busy, idle by cause),
    which the chart draws as a bar."""
    S = diag.steps
    n = len(S)
    if n == 0:
        return []
    edges = np.unique(np.linspace(0, n, min(bins, n) + 1).astype(np.int64))
    lo, hi = edges[:-1], edges[1:]
    cnt = hi - lo
    dur = _step_ns(diag)
    ids = S.ids.astype(np.int64)
    again = _recompiles_per_step(diag)
    sums = lambda x: np.add.reduceat(np.asarray(x, np.int64), lo)  # noqa: E731
    outl, comp = sums(S.outlier.astype(np.int64)), sums(S.compile_count > 0)
    recomp = sums(again > 0)
    devs = _step_devices(diag, devices)
    per, mfu = {}, {}
    for d in devs:
        w = np.maximum(S.win_end[:, d] - S.win_start[:, d], 0)
        bz, ww = sums(S.busy[:, d]), sums(w)
        ib = np.add.reduceat(S.idle_by_cause[:, d, :], lo, axis=0)
        duty = (bz / np.maximum(ww, 1)).tolist()
        mfu[d] = eff_json.bin_mfu(diag, d, lo, ww)
        per[d] = ((ww > 0).tolist(), duty, _mean_ns(bz, cnt), _mean_ns(ww - bz, cnt),
                  [{C.ALL[i]: v for i, v in zip(np.flatnonzero(m).tolist(), r[m].tolist())}
                   for m, r in zip(ib > 0, _mean_ns(ib, cnt[:, None], lists=False))])
    # each bin's figures at once (Python per bin only to write its record): the steps
    # sorted within their bins give the medians, the first of each bin's largest its
    # slowest step
    dur = np.asarray(dur, np.int64)
    nb = lo.shape[0]
    bin_of = np.repeat(np.arange(nb), cnt)
    srt = dur[np.lexsort((dur, bin_of))]
    mid = (srt[lo + (cnt - 1) // 2].astype(np.float64) + srt[lo + cnt // 2]) / 2
    top = np.maximum.reduceat(dur, lo)
    at_top = np.flatnonzero(dur == top[bin_of])
    first_top = at_top[np.unique(bin_of[at_top], return_index=True)[1]]
    cols = zip(lo.tolist(), hi.tolist(), cnt.tolist(), np.minimum.reduceat(dur, lo).tolist(),
               mid.astype(np.int64).tolist(), np.add.reduceat(dur, lo).tolist(), top.tolist(),
               ids[first_top].tolist(), ns_list(S.host_start[lo]), ns_list(S.host_end[hi - 1]),
               ids[lo].tolist(), ids[hi - 1].tolist(), outl.tolist(), comp.tolist(),
               recomp.tolist())
    out = []
    for k, (a, b, c, mn, med, tot, mx, slow, st, en, first, last, no, nc, nr) in enumerate(cols):
        devices = {}
        for d in devs:
            has, duty, busy, idle, by_cause = per[d]
            devices[str(d)] = {"duty_cycle": duty[k] if has[k] else None,
                               "busy_ns": busy[k], "idle_ns": idle[k],
                               "idle_by_cause_ns": by_cause[k],
                               "mfu": mfu[d][k] if mfu[d] is not None else None}
        out.append({"first": first, "last": last, "steps": c, "start_ns": st, "end_ns": en,
                    "min_ns": mn, "median_ns": med, "mean_ns": int(round(tot / c)),
                    "max_ns": mx, "slowest": slow, "outliers": no, "compiling": nc,
                    "recompiling": nr, "devices": devices})
    return out


def step_rows_shown(diag: Diagnosis, step: int | None = None) -> np.ndarray:
    """Indices of the step rows the first answer lists when the steps are binned."""
    S = diag.steps
    n = len(S)
    dur = _step_ns(diag)
    by_time = np.argsort(-dur, kind="stable")
    marked = np.flatnonzero(np.asarray(S.outlier, bool) | (S.compile_count > 0))
    marked = marked[np.argsort(-dur[marked], kind="stable")][:MARKED_STEPS]
    keep = [by_time[:SLOWEST_STEPS], marked, np.array([0, n - 1], np.int64)]
    if step is not None:
        keep.append(np.flatnonzero(S.ids == step))
    return np.unique(np.concatenate([np.asarray(k, np.int64) for k in keep]))


def steps_page(diag: Diagnosis, offset: int, limit: int) -> dict:
    """Step rows ``[offset, offset + limit)``, with how many there are in all."""
    n = len(diag.steps)
    rows = np.arange(min(offset, n), min(offset + limit, n))
    return {"steps": steps_json(diag, rows), "steps_total": n, "steps_offset": offset,
            "steps_limit": limit}


def _of_steps(present: np.ndarray, steps) -> np.ndarray:
    """Step indices where ``present`` holds, only those of ``steps`` (indices) when given."""
    got = np.flatnonzero(present)
    return got if steps is None else np.intersect1d(got, steps)


def annotations_json(diag: Diagnosis, steps=None) -> list:
    """Per annotation path its device time, per step too (only the step indices ``steps``
    when given)."""
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
                         for s in _of_steps(inc > 0, steps).tolist()},
        })
    return out


def unscoped_json(diag: Diagnosis, steps=None) -> dict:
    """Device time of the ops under no user scope (summed over devices, as the rows); per
    step only for the step indices ``steps`` when given."""
    A = diag.annotations
    ids = diag.steps.ids.tolist()
    per = np.asarray(A.unscoped_per_step)
    return {"device_ns": int(A.unscoped // 1000), "ops": int(A.unscoped_ops),
            "per_step": {str(int(ids[s])): int(per[s] // 1000)
                         for s in _of_steps(per > 0, steps).tolist() if s < len(ids)}}


def user_scopes_json(diag: Diagnosis) -> list:
    """Device time per user scope name over the whole tree (JAX's ``jvp(forward)`` and
    ``transpose(jvp(forward))`` count as ``forward``), largest first."""
    A = diag.annotations
    rows = [{"name": nm, "device_ns": int(A.scope_inclusive[i] // 1000),
             "ops": int(A.scope_ops[i])} for i, nm in enumerate(A.scope_names)]
    return sorted(rows, key=lambda r: (-r["device_ns"], r["name"]))


def _step_id(diag: Diagnosis, k: int):
    return int(diag.steps.ids[k]) if k >= 0 else None


def _in_steps(step_col: np.ndarray, steps) -> list:
    """Rows of a per-call table: all, or (``steps`` given) those outside any step or in one
    of the step indices ``steps``."""
    if steps is None:
        return list(range(step_col.shape[0]))
    return np.flatnonzero((step_col < 0) | np.isin(step_col, steps)).tolist()


def compilations_json(diag: Diagnosis, steps=None) -> list:
    """One record per outermost compilation (those outside steps or in the step indices
    ``steps`` when given); ``recompile`` only when the same function was compiled before
    (a first compile is a one-time cost)."""
    T = diag.compilations
    if T is None:
        return []
    i = np.asarray(_in_steps(np.asarray(T.step), steps), np.int64)
    return [{"step": st, "start_ns": s, "duration_ns": d, "function": T.function[k] or None,
             "recompile": rc, "event": nm or None}
            for k, st, s, d, rc, nm in zip(i.tolist(), _step_ids(diag, T.step, i),
                                           ns_list(T.start[i]), ns_list(T.duration[i]),
                                           np.asarray(T.recompile, bool)[i].tolist(),
                                           diag.refs.names_of(T.event[i]))]


def transfers_json(diag: Diagnosis, steps=None) -> list:
    """One record per user-level host↔device transfer call (those outside steps or in the
    step indices ``steps`` when given)."""
    T = diag.transfers
    if T is None:
        return []
    i = np.asarray(_in_steps(np.asarray(T.step), steps), np.int64)
    d2h = (np.asarray(T.direction)[i] == Direction.D2H).tolist()
    return [{"step": st, "start_ns": s, "duration_ns": d, "direction": "d2h" if x else "h2d",
             "event": nm or None}
            for st, s, d, x, nm in zip(_step_ids(diag, T.step, i), ns_list(T.start[i]),
                                       ns_list(T.duration[i]), d2h,
                                       diag.refs.names_of(T.event[i]))]


def _step_ids(diag: Diagnosis, step_col, rows: np.ndarray) -> list:
    """``_step_id`` of each of ``rows`` of a per-call table's step column."""
    k = np.asarray(step_col, np.int64)[rows]
    ids = diag.steps.ids
    got = np.asarray(ids, np.int64)[np.maximum(k, 0)] if ids.shape[0] else np.zeros_like(k)
    return [int(v) if kk >= 0 else None for v, kk in zip(got.tolist(), k.tolist())]


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
           "evidence": {"gaps": gap_ids(diag, rows), "gap_refs": gap_refs(diag, rows),
                        "ranges": ranges}}
    out.update(f.extra)
    if f.kind == FindingKind.D2H_TRANSFER:
        R = diag.refs
        rr = R.row(f.events)
        out["events"] = [{"name": R.strings[int(R.name[r])], "start_ns": int(R.ts[r] // 1000),
                          "duration_ns": int(R.dur[r] // 1000),
                          "chain": [R.strings[i] for i in R.chain[r]]} for r in rr.tolist()]
    return out


def gap_fix(diag: Diagnosis, row: int) -> dict | None:
    """What to change for gap ``row``, for its detail panel: the fix of the finding that
    cites the gap (the one losing most, as findings are listed), else of the finding about
    the gap's cause; None when no finding has a fix. ``finding`` is the finding's index in
    the diagnosis' ``findings`` (None past the ones listed)."""
    cause = C.ALL[int(diag.gaps.cause[row])]
    fs = [(i, f) for i, f in enumerate(diag.findings) if f.fix]   # a few dozen at most
    hit = next(((i, f, "gap") for i, f in fs if f.gaps.size and bool((f.gaps == row).any())), None)
    if hit is None:
        hit = next(((i, f, "cause") for i, f in fs if f.extra.get("cause") == cause), None)
    if hit is None:
        return None
    i, f, via = hit
    return {"text": f.fix, "title": f.title, "via": via,
            "finding": i if i < FINDINGS_SHOWN else None}


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


def gap_rows(diag: Diagnosis, step: int | None = None, cause: str | None = None,
             device: int | None = None) -> np.ndarray:
    """Rows of the gaps of step ``step`` (an id, as the JSON names steps), whose primary
    cause is ``cause`` and that lie on device ``device``; None: any."""
    g = diag.gaps
    keep = np.ones(len(g), bool)
    if step is not None:
        ids = diag.steps.ids
        st = g.step
        sid = np.where(st >= 0, ids[np.maximum(st, 0)] if ids.size else -1, -1)
        keep &= (st >= 0) & (sid == step)
    if cause is not None:
        keep &= g.cause == C.ALL.index(cause)
    if device is not None:
        keep &= g.device == device
    return np.flatnonzero(keep)


def gaps_page(diag: Diagnosis, offset: int, limit: int, step: int | None = None,
              cause: str | None = None, device: int | None = None) -> dict:
    """One page of the gap records of ``gap_rows``, in the order /diagnosis pages them,
    with how many there are in all."""
    rows = gap_rows(diag, step, cause, device)
    return {"gaps": gap_records(diag, rows[offset:offset + limit]),
            "gaps_total": int(rows.shape[0]), "gaps_offset": offset, "gaps_limit": limit}


def unknown_device(diag: Diagnosis, device: int | None) -> str:
    """Why ``device`` names no device of ``diag`` ("" when it does, or is None)."""
    n = len(diag.devices)
    if device is None or 0 <= device < n:
        return ""
    if n == 0:
        return f"no device {device}: this trace has no device"
    return f"no device {device}: this trace's devices are 0…{n - 1} (devices[].id)"


def diagnosis_json(diag: Diagnosis, gaps_offset: int = 0, gaps_limit: int | None = None,
                   step: int | None = None, paged: bool = False, light: bool = False,
                   device: int | None = None) -> dict:
    """The whole diagnosis; gaps ``[gaps_offset, +gaps_limit)`` of those of ``step`` (all
    steps when None) on ``device`` (all when None).  ``paged`` adds gaps_total/offset/limit
    as the route does.  ``light`` is the page's first answer, bounded on any trace: each
    gap's first HOST_OPS_SHOWN host ops and syncs, chains cut to their ends, a page of
    gaps within GAPS_BYTES; with ``device`` the steps' figures of that device alone; above
    STEP_ROWS steps (or STEP_CELLS step × device figures) the steps binned with a few rows
    (``step_bins_json``, ``step_rows_shown``); annotations' and unscoped per-step figures of
    ``step`` alone; the largest annotations, scopes, compilations, transfers, findings and
    warnings, each list with its total."""
    if why := unknown_device(diag, device):
        raise ValueError(why)
    rows = gap_rows(diag, step, device=device)
    total = int(rows.shape[0])
    end = None if gaps_limit is None else gaps_offset + gaps_limit
    page = rows[gaps_offset:end]
    n_steps = len(diag.steps)
    devs = None if device is None or not light else [device]
    n_devs = 1 if devs else max(1, int(np.count_nonzero(diag.steps.has_device)))
    binned = light and (n_steps > STEP_ROWS or n_steps * n_devs > STEP_CELLS)
    # binned: the per-step figures and calls of the listed steps only
    shown = step_rows_shown(diag, step) if binned else None
    # light: the per-step figures of annotations are the selected step's (the page shows
    # no other); the step's own answer has them for any step
    per_step = shown if not light else (np.flatnonzero(diag.steps.ids == step)
                                         if step is not None else np.zeros(0, np.int64))
    gaps = gap_records(diag, page, host_ops=HOST_OPS_SHOWN if light else None)
    if light and gaps_limit is not None:
        gaps = _within(gaps, GAPS_BYTES)
    out = {
        "schema_version": SCHEMA_VERSION, "source": dict(diag.source),
        "options": {"threshold_us": diag.threshold_us, "kernels_only": diag.kernels_only},
        "definitions": DEFINITIONS, "step_source": diag.steps.source,
        "step_marker": getattr(diag.steps, "marker", "") or None,
        "devices": devices_json(diag),
        "primary_device": primary_device(diag),
        "steps": steps_json(diag, shown, devs), "steps_total": n_steps,
        "typical_step_ns": _typical_step_ns(diag),
        "gaps": gaps,
        "annotations": annotations_json(diag, per_step),
        "unscoped": unscoped_json(diag, per_step), "user_scopes": user_scopes_json(diag),
        "compilations": compilations_json(diag, shown), "transfers": transfers_json(diag, shown),
        "device_ops": device_ops_json(diag, step),
        "findings": [finding_json(diag, f) for f in diag.findings], "hta": hta_json(diag),
        "warnings": list(diag.warnings),
        **startup_steps_json(diag),
    }
    if light:
        T, X = diag.compilations, diag.transfers
        out.update(step_bins=step_bins_json(diag, min(STEP_BINS, max(
                       MIN_STEP_BINS, STEP_CELLS // n_devs)), devs) if binned else None,
                   compilations_total=len(T) if T is not None else 0,
                   recompilations_total=int(np.asarray(T.recompile, bool).sum())
                   if T is not None else 0,
                   transfers_total=len(X) if X is not None else 0)
        _bound(out)
    if paged:
        out.update(gaps_total=total, gaps_offset=gaps_offset,
                   gaps_limit=gaps_limit if gaps_limit is not None else total,
                   gaps_device=device)
    return out


def startup_steps_json(diag: Diagnosis) -> dict:
    """The steps whose windows hold start-up idle on a device (``startup_steps``, ids) and
    the mean step without them (``steady_step_ns``): the steady state leaves start-up
    out.  Empty when no step holds any, or every step does."""
    S = diag.steps
    if not len(S) or diag.steps.source == "whole_trace" or \
            S.idle_by_cause.shape[-1] <= _STARTUP_I:
        return {}
    has = (S.idle_by_cause[:, :, _STARTUP_I] > 0).any(axis=1)
    if not has.any() or has.all():
        return {}
    dur = _step_ns(diag)
    return {"startup_steps": S.ids[has].astype(np.int64).tolist(),
            "steady_step_ns": int(round(float(dur[~has].mean())))}


def _within(records: list, limit: int) -> list:
    """The first of ``records`` whose JSON adds up to at most ``limit`` bytes (one at
    least)."""
    size = 0
    for i, r in enumerate(records):
        size += len(orjson.dumps(r, option=_ORJSON)) + 1
        if size > limit and i:
            return records[:i]
    return records


def _longest(rows: list, limit: int) -> list:
    """The ``limit`` longest of ``rows`` (records with ``duration_ns``), in their order."""
    if len(rows) <= limit:
        return rows
    keep = sorted(sorted(range(len(rows)), key=lambda i: -rows[i]["duration_ns"])[:limit])
    return [rows[i] for i in keep]


def _bound(out: dict) -> None:
    """The first answer's lists that grow with the trace cut to their largest, each with
    its total (the CLI's --full and the API keep every item)."""
    ann = out["annotations"]
    out["annotations_total"] = len(ann)
    if len(ann) > ANNOTATIONS_SHOWN:
        # inclusive time: an annotation's ancestors have at least its own, so they stay
        keep = sorted(sorted(range(len(ann)), key=lambda i: -ann[i]["inclusive_ns"])
                      [:ANNOTATIONS_SHOWN])
        out["annotations"] = [ann[i] for i in keep]
    out["user_scopes_total"] = len(out["user_scopes"])
    out["user_scopes"] = out["user_scopes"][:SCOPES_SHOWN]
    out["compilations"] = _longest(out["compilations"], CALLS_SHOWN)
    out["transfers"] = _longest(out["transfers"], CALLS_SHOWN)
    found = out["findings"]
    out["findings_total"] = len(found)
    out["findings"] = found = found[:FINDINGS_SHOWN]
    for f in found:
        if len(f["steps"]) > FINDING_STEPS_SHOWN:
            f["steps_total"] = len(f["steps"])
            f["steps"] = f["steps"][:FINDING_STEPS_SHOWN]
        if len(f.get("events") or ()) > MAX_EVIDENCE:
            f["events_total"] = len(f["events"])
            f["events"] = f["events"][:MAX_EVIDENCE]
    out["warnings_total"] = len(out["warnings"])
    out["warnings"] = out["warnings"][:WARNINGS_SHOWN]


_INT64 = (-2**63, 2**63 - 1)
_ORJSON = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def _wide(x):
    """``x`` with integers beyond 64 bits (``origin_ps``: ps since 1970) as JSON fragments:
    orjson refuses them, the standard encoder writes them as they are."""
    if isinstance(x, dict):
        return {k: _wide(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_wide(v) for v in x]
    if isinstance(x, int) and not isinstance(x, bool) and not _INT64[0] <= x <= _INT64[1]:
        return orjson.Fragment(str(x).encode())
    return x


def _sources_wide(doc):
    """The small ``source`` dicts made safe up front, so the large rest is encoded once."""
    if not isinstance(doc, dict):
        return doc
    out = dict(doc)
    for k, v in doc.items():
        if k == "source" and isinstance(v, dict):
            out[k] = _wide(v)
        elif isinstance(v, dict) and ("source" in v or k in ("before", "after")):
            out[k] = _sources_wide(v)
    return out


def json_bytes(doc, pretty: bool = False) -> bytes:
    """A route's or the CLI's JSON document as UTF-8 bytes (orjson; NaN as null)."""
    opt = _ORJSON | (orjson.OPT_INDENT_2 if pretty else 0)
    doc = _sources_wide(doc)
    try:
        return orjson.dumps(doc, option=opt)
    except TypeError:           # a wide integer elsewhere: look everywhere
        return orjson.dumps(_wide(doc), option=opt)
