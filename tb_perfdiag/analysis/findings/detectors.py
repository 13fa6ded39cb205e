"""Plain-language findings with evidence, the time they cost per step, and a fix.

Computed from the typed gap table and its cause shares (every gap, whatever a page
shows).  A gap finding is one culprit of one cause family: the gaps whose primary cause
is that family and whose culprit (``culprits.Culprits``) is the same user frame and op
chain.  Its time is the family's share of those gaps on the device they hit hardest
(never a sum over devices), so the findings of a family never claim more than that
device's idle in it; a finding that repeats in most steps says so instead of
appearing twice.  Fix texts come from ``fixes.py`` for the trace's framework.
"""
from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

from ...units import duration
from ...trace.build import distinct, unique_rows
from ...trace.classify import is_collective_kernel
from ...trace.model import EventKind as K, Trace
from .. import causes as C
from ..attribution.culprits import (
    PYTORCH_XLA,
    SYNC_LABELS,
    Culprits,
    applied_fixes,
    chain_sync_kind,
    clean,
    framework,
    sync_kind,
)
from ..steps import startup
from ..gaps import tfdata
from .fixes import fix_for, for_platform, platform
from .efficiency import findings as efficiency_findings
from ..steps.windows import in_step_part
from ..steps.capture_notes import kernels_per_device
from ..result import Finding, FindingKind as FK

MAX_EVIDENCE = 20              # events named in a d2h finding
TOP_SHARE = 0.01               # a top finding costs at least 1 % of a typical step
TITLE_MAX = 240               # characters of a title: a person reads it at a glance
_LONG_ARG = re.compile(r"<([^<>…]{24})[^<>…]{8,}")
TITLE_NAME = 60               # characters of one name in a title (the detail has it whole)
RECURRING = 0.8                # in this share of the steps (and 3 or more): it recurs
# costs paid once (warm-up), reported as a total and its share of the capture, never as
# a rate per step
ONE_TIME = (FK.COMPILATION, FK.GRAPH_CAPTURE)

FAMILY = {C.HOST_SYNC: FK.HOST_SYNC, C.COMPILATION: FK.RECOMPILATION,
          C.DATA_LOADING: FK.INPUT_BOUND, C.H2D_TRANSFER: FK.H2D_TRANSFER,
          C.LAUNCH_OVERHEAD: FK.LAUNCH_BOUND, C.HOST_COMPUTE: FK.HOST_COMPUTE,
          C.COLLECTIVE_WAIT: FK.COLLECTIVE_WAIT, C.UNTRACED: FK.UNTRACED,
          C.DEVICE_WAIT: FK.DEVICE_WAIT, C.ALLOCATOR: FK.ALLOCATOR,
          C.GRAPH_CAPTURE: FK.GRAPH_CAPTURE, C.RUNTIME_CALL: FK.RUNTIME_CALL,
          C.STARTUP: FK.STARTUP}
PHRASE = {FK.HOST_SYNC: "blocks on the device", FK.INPUT_BOUND: "data loading starves the device",
          FK.H2D_TRANSFER: "host→device staging starves the device",
          FK.LAUNCH_BOUND: "kernel launches outpace tiny kernels",
          FK.HOST_COMPUTE: "host work between launches starves the device",
          FK.COLLECTIVE_WAIT: "the device waits for its peers",
          FK.UNTRACED: "the device idles while the host shows no op",
          FK.DEVICE_WAIT: "the device waits on device-side work",
          FK.ALLOCATOR: "memory allocation stalls the device",
          FK.GRAPH_CAPTURE: "CUDA-graph capture (one-time) stalls the device",
          FK.RUNTIME_CALL: "runtime calls stall the device",
          FK.RECOMPILATION: "recompilation (a function compiled again for new shapes) stalls "
                            "the device",
          FK.COMPILATION: "one-time compilation stalls the device",
          FK.GRAPH_BUILDING: "XLA graph building on the host starves the device"}


_fmt = duration            # the one unit rule (units.py)


class _Gaps:
    """The gap columns findings read, as reported (ns, step ids)."""

    def __init__(self, diag):
        g = diag.gaps
        self.g = g
        self.n = len(g)
        self.dur_ns = np.rint((g.end - g.start) / 1000).astype(np.int64)
        self.share_ns = np.rint(g.shares / 1000).astype(np.int64)
        ids = diag.steps.ids
        self.step = np.where(g.step >= 0, ids[np.maximum(g.step, 0)] if ids.size else -1, -1)
        # the part of each gap inside its device's step windows: only that is a cost per
        # step; a gap the gap list puts before the first step or after the last is all
        # outside every step (a sliver of it in step 0's window is no "once in step 0")
        self.inside = np.zeros(self.n, np.int64)
        S = diag.steps
        for d in np.unique(g.device).tolist():
            at = np.flatnonzero(g.device == d)
            self.inside[at] = in_step_part(S.win_start[:, d], S.win_end[:, d], g.start[at],
                                           g.end[at], g.step[at])
        frac = self.inside / np.maximum(g.end - g.start, 1)
        self.share_in_ns = np.rint(self.share_ns * frac[:, None]).astype(np.int64)
        # gaps in a typical step (not one that compiles or stalls): only they make a cost
        # per step, which then never exceeds the step
        typ = S.typical() if len(S) else np.zeros(0, bool)
        self.n_typical = int(typ.sum())
        self.in_typical_step = (g.step >= 0) & (typ[np.maximum(g.step, 0)] if typ.size
                                                else np.zeros(self.n, bool))

    def steps_hit(self, rows) -> set:
        st = self.step[rows]
        return set(st[st >= 0].tolist())

    def on_worst_device(self, rows, cause: int) -> tuple:
        """(ns of the cause's share on the device these gaps hit hardest, that device)."""
        rows = np.asarray(rows, np.int64)
        if rows.size == 0:
            return 0, -1
        dev = self.g.device[rows]
        per = np.bincount(dev, weights=self.share_ns[rows, cause]) if rows.size else []
        d = int(np.argmax(per))
        return int(round(per[d])), d

    def in_steps(self, rows, cause: int, device: int) -> int:
        """ns of the cause's share of these gaps on ``device`` inside its step windows."""
        rows = np.asarray(rows, np.int64)
        rows = rows[self.g.device[rows] == device]
        return int(self.share_in_ns[rows, cause].sum())

    def in_typical(self, rows, cause: int, device: int) -> int:
        """``in_steps`` of the gaps in typical steps alone."""
        rows = np.asarray(rows, np.int64)
        rows = rows[(self.g.device[rows] == device) & self.in_typical_step[rows]]
        return int(self.share_in_ns[rows, cause].sum())


def findings(trace: Trace, diag, steps, compile_ev, compile_step, ctx) -> tuple:
    """([Finding], events cited) — most time lost per step first."""
    n_steps = max(len(diag.steps), 1)
    G = _Gaps(diag)
    fw = framework(trace)
    # the fixes the trace already applies: a finding offers the next step instead
    applied = applied_fixes(trace)
    # the one step time every face shows (TYPICAL_STEP: a mean over the typical steps),
    # not a median of its own: a finding's share of the step is of that step
    ts = diag.steps.typical_step_ps()
    typical_step = ts / 1000 if ts else 0.0
    out, cited = [], []

    def add(kind, title, rows, fix, detail, total_ns, device=-1, confidence=None, extra=None,
            steps_hit=None, events=None, ranges=None, in_steps_ns=None, typical_ns=None):
        hit = G.steps_hit(rows) if steps_hit is None else set(steps_hit)
        conf = confidence or ("high" if len(hit) >= max(RECURRING * n_steps, 1) and n_steps > 1
                              else "medium")
        # a cost per step is the part inside the steps, averaged over all of them; given
        # the part in typical steps, over those alone (the typical step's own steps), the
        # steps that compile or stall paying the rest once
        inside = total_ns if in_steps_ns is None else in_steps_ns
        per_step = int(inside / n_steps)
        stalled = 0
        if typical_ns is not None and G.n_typical:
            per_step = int(typical_ns / G.n_typical)
            stalled = max(int(inside - typical_ns), 0)
        f = Finding(kind, title, detail, fix, conf, int(total_ns), per_step, sorted(hit),
                    np.asarray(rows, np.int32), extra=dict(extra or {}))
        if inside < total_ns:
            f.extra["outside_steps_ns"] = int(total_ns - inside)
        if stalled:
            f.extra["outlier_steps_ns"] = stalled
        f.extra["share_of_step"] = per_step / typical_step if typical_step else None
        f.extra["top"] = bool((per_step > 0 and (not typical_step or
                                                 per_step >= TOP_SHARE * typical_step))
                              or (typical_step and stalled >= TOP_SHARE * typical_step * n_steps))
        if device >= 0:
            f.extra["device"] = diag.devices.name[device]
        if ranges:
            f.ranges = ranges
        if events is not None:
            f.events = np.asarray(events, np.int64)
            cited.append(f.events)
        out.append(f)
        return f

    _gap_families(trace, diag, G, ctx, fw, applied, n_steps, typical_step, add)

    _compile_summary(trace, diag, steps, compile_ev, compile_step, out, fw)
    _transfers(trace, diag, G, steps, fw, add, out)
    _memcpy_share(trace, diag, fw, add)

    for f in _multi_device(trace, diag, n_steps, fw) + efficiency_findings(diag, fw, out, applied):
        f.extra["share_of_step"] = f.time_lost_ns_per_step / typical_step if typical_step \
            else None
        f.extra["top"] = bool(f.time_lost_ns_per_step > 0 and (
            not typical_step or f.time_lost_ns_per_step >= TOP_SHARE * typical_step))
        out.append(f)
    _unique_titles(out)
    # every fix for the accelerator the trace ran on (no CUDA graphs for an MTIA)
    plat = platform(trace)
    for f in out:
        f.fix = for_platform(f.fix, plat)
    out.sort(key=lambda f: (-f.time_lost_ns_per_step, f.kind.value, f.title))
    return out, (np.concatenate(cited) if cited else np.zeros(0, np.int64))


def _gap_families(trace, diag, G, ctx, fw, applied, n_steps, typical_step, add) -> None:
    """Per cause family: one finding per culprit that costs at least 1 % of a step; the
    family's other culprits fold into one finding that names the largest of them."""
    if G.n == 0:
        return
    cul = Culprits(trace)
    g = G.g
    cul.prime(np.concatenate((g.culprit, g.blocking, g.waited_for)))
    floor = TOP_SHARE * typical_step * n_steps
    for ci, cause in enumerate(C.ALL):
        rows = np.flatnonzero(g.cause == ci)
        if cause == C.STARTUP:
            if rows.size:
                _startup_findings(trace, diag, G, ci, rows, fw, add)
            continue
        if cause == C.HOST_SYNC:
            # every gap a sync took a share of, by the blocking call that took it
            rows = np.flatnonzero((G.share_ns[:, ci] > 0) & (g.blocking >= 0))
        if rows.size == 0:
            continue
        kind = FAMILY[cause]
        if cause == C.HOST_SYNC:
            evs = g.blocking[rows]
        elif cause in C.DEVICE_SIDE:
            evs = g.waited_for[rows]
        else:
            evs = g.culprit[rows]
        groups, first = _group_by_signature(
            rows, evs.astype(np.int64), _signature_key(trace, g, cul, cause, rows, evs),
            lambda ev, r: _signature(trace, diag, ctx, cul, cause, ev, g, r, fw))
        if cause == C.DEVICE_WAIT:
            groups, first = _fold_runtime_queue(groups, first, G, ci)
        ranked = sorted(groups.items(), key=lambda kv: -G.on_worst_device(kv[1], ci)[0])
        big = [(k, rs) for k, rs in ranked if G.on_worst_device(rs, ci)[0] >= floor] \
            or ranked[:1]
        rest = [rs for k, rs in ranked if (k, rs) not in big]
        for key, rs in big:
            _family_finding(trace, diag, G, ci, cause, kind, first[key], rs, fw, applied,
                            n_steps, add)
        if rest:
            rs = sorted(r for x in rest for r in x)
            # distinct places: many culprits share a name (one op in several chains)
            names = list(dict.fromkeys(first[k][1] or " › ".join(first[k][2][-2:])
                                       for k, x in ranked if (k, x) not in big))[:3]
            _family_finding(trace, diag, G, ci, cause, kind, ("", None, (), "", (), -1), rs,
                            fw, applied, n_steps, add, others=(len(rest), names))


QUEUE_LABEL = "the runtime's queue"
# what each kind of start-up is called in a title
STARTUP_SUBJECT = {startup.PROFILER: "The profiler starting and stopping",
                   startup.RUNTIME: "{api} context creation and lazy module loading",
                   startup.HANDLE: "Library handle creation (cuDNN, cuBLAS, MIOpen)",
                   startup.AUTOTUNE: "First-iteration autotuning"}


def _startup_findings(trace, diag, G, ci, rows, fw, add) -> None:
    """One finding per kind of start-up (``startup.kind_of`` its culprit and the frames
    above it): a cost paid once, as a total and its share of the capture, never per
    step (steady-state figures leave it out)."""
    g = G.g
    fam: dict = {}
    names: dict = {}
    seen: dict = {}                 # culprit event → (family, the call it names)
    for r in rows.tolist():
        ev = int(g.culprit[r])
        if ev not in seen:
            chain = [trace.event_name(e) for e in trace.chain(ev)] if ev >= 0 else []
            k = startup.family(chain) or startup.RUNTIME
            # the call named: the family's innermost frame (the runtime call), the
            # profiler's outermost one (start_trace, not what it calls)
            hit = [n for n in chain if startup.kind_of(n) == k]
            seen[ev] = (k, clean(hit[0] if k == startup.PROFILER else hit[-1]) if hit else "")
        k, call = seen[ev]
        fam.setdefault(k, []).append(r)
        if call:
            names.setdefault(k, {}).setdefault(call, 0)
            names[k][call] += int(G.share_ns[r, ci])
    span = _capture_ns(diag)
    ids = diag.steps.ids
    for k, rs in sorted(fam.items(), key=lambda kv: -G.on_worst_device(kv[1], ci)[0]):
        total, dev = G.on_worst_device(rs, ci)
        if total <= 0:
            continue
        called = sorted(names.get(k, {}), key=lambda n: -names[k][n])
        api = "HIP" if called and all(n.startswith("hip") for n in called) else "CUDA"
        subject = STARTUP_SUBJECT[k].format(api=api)
        what = ", ".join(_short(n, 50) for n in called[:2]) + (" …" if len(called) > 2 else "")
        st = sorted(set(G.step[rs].tolist()))
        if diag.steps.source == "whole_trace" or not len(diag.steps):
            where = ""
        elif st == [-1]:
            where = " before the first step"
        elif len(st) == 1:
            where = f" in step {st[0]}"
        else:
            where = f" in steps {st[0]}–{st[-1]}" if -1 not in st else " around the first step"
        share = total / span if span else None
        cost = f"once, {_fmt(total)}{where}" + (f" ({_pct(share)} of the capture)"
                                                if share else "")
        title = f"{subject}{f' ({what})' if what else ''} — start-up, {cost}"
        if len(title) > TITLE_MAX:
            title = f"{subject} — start-up, {cost}"
        extra = {"cause": C.STARTUP, "one_time": True, "capture_share": share,
                 "startup": {"kind": k, "calls": called[:10]}}
        if len(st) == 1 and st[0] >= 0:
            extra["once"] = {"step": int(st[0]), "ns": int(total)}
        detail = (f"{len(rs)} gap(s); start-up takes {_per_device(diag, rs, G, ci)}: paid "
                  "once by every run, not by the training loop, so the typical step, the "
                  "duty cycle over the steps and the per-step costs leave it out.")
        f = add(FK.STARTUP, title, rs, fix_for("startup", k, fw), detail, total, dev,
                confidence="high", extra=extra, in_steps_ns=total)
        # a one-time cost has no rate per step
        f.time_lost_ns_per_step = 0
        f.extra.pop("outside_steps_ns", None)
        f.extra["share_of_step"] = None
        # not a top finding: those cost at least 1 % of a step, per step (the capture
        # note says what start-up takes)
        f.extra["top"] = False
        _SUBJECT[id(f)] = subject


def _fold_runtime_queue(groups: dict, first: dict, G, ci: int) -> tuple:
    """Device-side waits whose waited-for launch has no frame of the user's code above it
    (the runtime's own executor: XLA's ``ThunkExecutor::Execute``, a stream's dependency)
    differ only by the op the device was about to run: one finding per op says the same
    non-actionable thing many times.  They fold into one finding for the runtime's queue,
    with its total and the ops it held up most; waits under user code keep their own."""
    queue = [k for k, sig in first.items() if not sig[1] and sig[3].startswith("waiting to run ")]
    if len(queue) < 2:
        return groups, first
    # one entry per op the device was about to run (a label may come with several chains)
    by_op: dict = {}
    for k in queue:
        by_op.setdefault(first[k][3][len("waiting to run "):], []).extend(groups[k])
    cost = {op: G.on_worst_device(rs, ci)[0] for op, rs in by_op.items()}
    ops = sorted(by_op, key=lambda op: -cost[op])
    top = first[max(queue, key=lambda k: G.on_worst_device(groups[k], ci)[0])]
    under = tuple(top[2][-2:])               # the executor frames of its largest part
    key = ("", None, under, QUEUE_LABEL)
    rows = sorted(r for k in queue for r in groups[k])
    out_g = {k: v for k, v in groups.items() if k not in queue}
    out_f = {k: v for k, v in first.items() if k not in queue}
    out_g[key] = rows
    out_f[key] = ("", None, under, QUEUE_LABEL, tuple(top[4]), top[5],
                  {"ops": ops, "ops_ns": [int(cost[op]) for op in ops]})
    return out_g, out_f


def _signature_key(trace, g, cul, cause, rows, evs) -> np.ndarray:
    """Per gap row, a number that is equal for two rows only when ``_signature`` gives
    them the same result: the culprit's chain (names and kinds), plus what else the
    signature reads — the next op's name for a device-side wait (of the launch's first
    gap), the event itself for a copy (its direction comes from its launches) or a compilation (which compile)."""
    cid = cul.chain_ids(evs)
    if cause == C.COMPILATION:
        return rows.astype(np.int64)
    extra = np.zeros(rows.shape[0], np.int64)
    if cause in C.DEVICE_SIDE:
        # the label names the op the first gap of this waited-for launch was waiting to
        # run; later gaps of the same launch share it
        _, at, inv = np.unique(evs, return_index=True, return_inverse=True)
        nxt = g.next_op[rows[at]].astype(np.int64)[inv.reshape(-1)]
        extra = np.where(nxt >= 0, trace.name[np.maximum(nxt, 0)].astype(np.int64) + 1, 0)
    elif cause == C.HOST_SYNC:
        copy = np.zeros(0, np.int64)
        known = distinct(cid[cid >= 0])
        if known.size:
            copy = known[np.array([chain_sync_kind(cul.chain_names(c))[0] == "copy"
                                   for c in known.tolist()], bool)]
        extra = np.where(np.isin(cid, copy), evs.astype(np.int64) + 1, 0)
    # chains that differ by their step's number alone are described alike: one key
    # (a 20 M-event trace: 52 k chains, a few hundred descriptions).  tf.data's stage
    # label reads the gap too, so a data-loading culprit on its threads keeps its chain's
    # key.  Unprimed events (cid < −1) are keyed by the event itself through their cid.
    pinned = np.full(cid.shape[0], -1, np.int64)
    if cause == C.DATA_LOADING:
        on = tfdata.on_pipeline_threads(trace, evs)
        pinned[on] = cid[on]
    key = np.stack((cul.description_ids(cid), pinned, extra), axis=1)
    return unique_rows(key)[1]


def _group_by_signature(rows, evs, key, signature) -> tuple:
    """{signature[:4]: sorted rows}, {signature[:4]: signature of its earliest row}:
    ``signature`` is worked out once per distinct ``key``, in the order of each key's
    earliest row (so the earliest row of a group names it, as a row-by-row pass would)."""
    order = np.argsort(key, kind="stable")
    k = key[order]
    new = np.ones(k.shape[0], bool)
    new[1:] = k[1:] != k[:-1]
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], k.shape[0])
    firsts = order[starts]                        # earliest position of each key
    groups, first, parts = {}, {}, {}
    for j in np.argsort(firsts, kind="stable").tolist():
        i0 = int(firsts[j])
        sig = signature(int(evs[i0]), int(rows[i0]))
        gk = sig[:4]                              # kind override, where, ops, label
        first.setdefault(gk, sig)
        parts.setdefault(gk, []).append(order[starts[j]:ends[j]])
    for gk, ps in parts.items():
        groups[gk] = np.sort(rows[np.concatenate(ps)]).tolist()
    return groups, first


def _family_finding(trace, diag, G, ci, cause, kind, sig, rs, fw, applied, n_steps, add,
                    others=None) -> None:
    sub_kind, where, ops, label, chain, example = sig[:6]
    queue = sig[6] if len(sig) > 6 else None
    k = FK(sub_kind) if sub_kind else kind
    total, dev = G.on_worst_device(rs, ci)
    if total <= 0:
        return
    hit = G.steps_hit(rs)
    # a title names the place and the innermost ops; the whole chain is in the detail
    if others:
        subject = f"{C.LABELS[cause]} in {others[0]} other place(s)"
        what = "largest: " + "; ".join(_short(n) for n in others[1][:2] if n)
    elif queue:
        subject = "The runtime's queue" + (f" ({_short(' › '.join(ops), 60)})" if ops else "")
        n_ops = len(queue["ops"])
        # a readable title: two ops named (the rest are in runtime_queue and the detail)
        what = (f"{n_ops} ops waited to run, most " +
                ", ".join(_short(o, 40) for o in queue["ops"][:2]) + (" …" if n_ops > 2 else ""))
        label = ""
    else:
        # the autograd engine's "evaluate_function: X" around X says X twice
        ops = tuple(o for i, o in enumerate(ops)
                    if not (i + 1 < len(ops) and o.endswith(": " + ops[i + 1])))
        subject = _short(where) if where else (
            " › ".join(_short(o) for o in ops[-2:]) if ops else C.LABELS[cause])
        what = " › ".join(_short(o) for o in ops[-2:]) if ops and where else ""
        if ops and where and len(ops) > 2:
            what = "… › " + what
    if label:
        what = f"{what} ({_short(label, 80)})" if what else _short(label, 80)
    inside = G.in_steps(rs, ci, dev)
    extra = {"cause": cause, "culprit": {"where": where, "ops": list(ops), "chain": list(chain)},
             "chain": list(chain), "sync": label or None}
    if queue:
        # the ops the queue held up, largest first: what the folded findings were
        extra["runtime_queue"] = {"ops": queue["ops"][:20], "ops_ns": queue["ops_ns"][:20],
                                  "op_count": len(queue["ops"])}
    typ = None
    if k in ONE_TIME:
        # paid once: its part in typical steps alone makes a rate (a first compile in a
        # compiling step makes none)
        if G.n_typical and G.n_typical < n_steps:
            typ = G.in_typical(rs, ci, dev)
        span = _capture_ns(diag)
        share = total / span if span else None
        extra.update(one_time=True, capture_share=share)
        cost = f"{_fmt(total)} in total" + (f" ({_pct(share)} of the capture)" if share else "")
    else:
        # a recompilation says the shapes change: a rate, even when the capture saw one
        # the steps the figure is from: the gaps on the device it is said of, each in the
        # step the gap list names (another device's gap in step 0 makes no "once in step 0"
        # of this one's)
        on_dev = np.asarray(rs, np.int64)
        on_dev = on_dev[G.g.device[on_dev] == dev]
        typ = G.in_typical(rs, ci, dev)
        hit = sorted(G.steps_hit(on_dev))
        if G.n_typical and G.n_typical < n_steps and inside > 0:
            # some of it lies in steps that compile or stall: their part is said once
            # there, the rest per typical step (never a rate above the step)
            cost = cost_phrase_typical(diag, G, on_dev, typ, inside - typ, total - inside,
                                       extra)
        else:
            cost = cost_phrase(diag, inside, total - inside, hit, n_steps, extra,
                               once_ok=k != FK.RECOMPILATION)
            typ = None
    phrase = PHRASE.get(k, C.LABELS[cause].lower())
    title = f"{subject}: {what + ' — ' if what else ''}{phrase} {cost}"
    if len(title) > TITLE_MAX and others and len(others[1]) > 1:
        # the largest place alone; the others are in the detail
        what = "largest: " + _short(others[1][0])
        title = f"{subject}: {what} — {phrase} {cost}"
    if len(title) > TITLE_MAX:
        title = f"{subject}: {phrase} {cost}"
    fix = fix_for(k.value, _fix_culprit(k, label, example, applied), fw)
    f = add(k, title, rs, fix, _detail(diag, cause, rs, G, chain, ci), total, dev, extra=extra,
            in_steps_ns=inside, typical_ns=typ)
    _SUBJECT[id(f)] = subject


def cost_phrase(diag, inside: float, outside: float, hit: list, n_steps: int,
                extra: dict, once_ok: bool = True) -> str:
    """What a cost means, said plainly: over the capture when it has no steps; once, in
    the one step it hit (of three or more); else the mean per step over all of them
    with the total and the steps it was seen in; and the time outside every step."""
    parts = []
    if diag.steps.source == "whole_trace":
        span = _capture_ns(diag)
        share = inside / span if span else None
        extra.update(capture_share=share)
        if inside:
            parts.append(f"{_fmt(inside)} in the {_fmt(span)} capture"
                         + (f" ({_pct(share)})" if share else ""))
    elif inside and len(hit) == 1 and n_steps >= 3 and once_ok:
        extra.update(once={"step": hit[0], "ns": int(inside)})
        parts.append(f"once, {_fmt(inside)} in step {hit[0]}")
    elif inside:
        seen = f" in {len(hit)} of {n_steps} steps"
        parts.append(f"{_fmt(inside / n_steps)} per step"
                     + (f" on average ({_fmt(inside)}{seen})" if n_steps > 1 else ""))
    if outside > 0:
        parts.append(f"{_fmt(outside)} outside every step")
    return ", ".join(parts)


def cost_phrase_typical(diag, G, rows, typical: float, stalled: float, outside: float,
                        extra: dict) -> str:
    """``cost_phrase`` of a cost partly in steps that compile or stall (outliers of the
    typical step): the mean over the typical steps, and the rest once, in its steps —
    "282 ms per step" of a 49.7 ms step becomes "3379 ms in steps 5 and 9 (compiling or
    stalled)"."""
    S = diag.steps
    out_steps = sorted({int(S.ids[s]) for s in G.g.step[rows].tolist()
                        if s >= 0 and not S.typical()[s]})
    parts = []
    if typical > 0:
        typ_hit = {int(s) for s in G.g.step[rows].tolist() if s >= 0 and S.typical()[s]}
        parts.append(f"{_fmt(typical / G.n_typical)} per typical step on average "
                     f"({_fmt(typical)} in {len(typ_hit)} of {G.n_typical})")
    else:
        extra.update(one_time=True)
    if stalled > 0:
        where = ", ".join(str(x) for x in out_steps[:4]) + (" …" if len(out_steps) > 4 else "")
        parts.append(f"{_fmt(stalled)} once, in step{'s' if len(out_steps) > 1 else ''} "
                     f"{where} (compiling or stalled)")
    if outside > 0:
        parts.append(f"{_fmt(outside)} outside every step")
    return ", ".join(parts)


# where a name may be cut: between its frames and qualifiers, never inside a word
_BOUNDARY = re.compile(r" › |::|: | |/|\|")


def _short(name: str, most: int = TITLE_NAME) -> str:
    """A name as a title shows it: a long template argument cut (``cutlass::Kernel<
    cutlass_80_tensorop_s1688gemm_…>``), then, past ``most`` characters, its leading
    qualifiers and frames folded at a boundary ("…" + the most specific part:
    ``autograd::engine::evaluate_function: CompiledFunctionBackward`` →
    ``…engine::evaluate_function: CompiledFunctionBackward``).  A single word longer than that
    is kept whole up to twice ``most``."""
    name = _LONG_ARG.sub(r"<\1…", name)
    if len(name) <= most:
        return name
    # the latest cut that leaves a tail short enough (the tail starts past a boundary)
    for m in _BOUNDARY.finditer(name):
        tail = name[m.end():].lstrip(" ›")
        if tail and len(tail) + 1 <= most:
            return "…" + tail
    return name if len(name) <= 2 * most else name[:2 * most - 1] + "…"


def _compile_kind(trace, diag, ev, g, r) -> str:
    """recompilation when the compile the gap waited on compiled a function again (the
    compile containing the culprit, else any compile of the gap's step)."""
    T = diag.compilations
    if T is None or not len(T):
        return FK.COMPILATION.value
    k = int(np.searchsorted(T.start, trace.ts[ev], side="right")) - 1
    if k >= 0 and trace.ts[ev] < T.start[k] + T.duration[k]:
        again = bool(T.recompile[k])
    else:
        again = bool(T.recompile[T.step == g.step[r]].any())
    return (FK.RECOMPILATION if again else FK.COMPILATION).value


def _signature(trace, diag, ctx, cul, cause, ev, g, r, fw) -> tuple:
    """(finding kind override, where, ops, label, chain, example) of one culprit event."""
    if ev < 0:
        if cause in C.DEVICE_SIDE:
            return ("", None, (), "no launch in the trace: the device ran behind the host",
                    (), -1)
        return ("", None, (), "", (), -1)
    where, ops, chain = cul.describe(ev)
    label, sub = "", ""
    if cause == C.COMPILATION:
        sub = _compile_kind(trace, diag, ev, g, r)
        # name the compilation by its outermost compile call (and what asked for it), not
        # by the compiler pass that happened to take longest
        ch = trace.chain(ev)
        outer = next((i for i, e in enumerate(ch) if trace.kind[e] == K.COMPILE), None)
        if outer is not None:
            names = [clean(trace.event_name(e)) for e in ch[max(outer - 1, 0):outer + 1]]
            ops = tuple(n for n in names if n not in (where,))
    if cause == C.HOST_SYNC:
        label = SYNC_LABELS.get(sync_kind(trace, ctx, trace.chain(ev)), "")
    elif cause in C.DEVICE_SIDE:
        nxt = clean(trace.event_name(int(g.next_op[r])))
        label = f"waiting to run {nxt}"
    elif cause == C.HOST_COMPUTE and fw == PYTORCH_XLA and any(
            n in ("StepMarker", "SyncTensorsGraph", "SyncLiveTensorsGraph") for n in chain):
        sub = FK.GRAPH_BUILDING.value
    elif cause == C.UNTRACED and (ops[-1:] or (where,))[-1] in ("ProfilerStep",) or (
            cause == C.UNTRACED and chain and chain[-1] == "ProfilerStep"):
        label = "self time of the step annotation: profile with Python stacks"
    elif cause == C.DATA_LOADING and any("SingleProcessDataLoaderIter" in n for n in chain):
        label = "DataLoader on the main thread"
    elif cause == C.DATA_LOADING and (st := tfdata.stage(
            trace, ctx.lines, int(g.thread[r]), int(g.start[r]), int(g.end[r]), ev)):
        ops, label, where = st[0], st[1], None
    return (sub, where, ops, label, chain, ev)


def _fix_culprit(kind, label, ev, applied: frozenset) -> str:
    """The fix's culprit key: what the finding names, and what the trace already applies
    (``culprits.applied_fixes``: never offer torch.compile to a compiled step)."""
    if kind == FK.HOST_SYNC:
        for k, v in SYNC_LABELS.items():
            if v == label:
                return k
        return "*"
    if kind == FK.INPUT_BOUND and label == "DataLoader on the main thread":
        return "main_thread"
    if kind == FK.INPUT_BOUND and tfdata.fix_key(label):
        return tfdata.fix_key(label)
    if kind == FK.INPUT_BOUND and "workers" in applied:
        return "workers"
    if kind in (FK.INPUT_BOUND, FK.H2D_TRANSFER) and "pinned" in applied:
        return "pinned"
    if kind in (FK.LAUNCH_BOUND, FK.HOST_COMPUTE):
        if "compiled" in applied:
            return "compiled_graphs" if "graphs" in applied else "compiled"
        if "graphs" in applied:
            return "graphs"
        if "jitted" in applied:
            return "jitted"
    return "*"


def _pct(share: float) -> str:
    return f"{100 * share:.1f}%" if share < 0.095 else f"{100 * share:.0f}%"


def _capture_ns(diag) -> float:
    """Length of the capture a one-time cost is weighed against: the steps' host span,
    else the devices' active span."""
    S = diag.steps
    if len(S):
        return float(np.rint((S.host_end.max() - S.host_start.min()) / 1000))
    D = diag.devices
    on = D.lo >= 0
    return float(np.rint((D.hi[on].max() - D.lo[on].min()) / 1000)) if on.any() else 0.0


def _per_device(diag, rows, G, ci) -> str:
    """The cause's time in these gaps, device by device (idle is never added up across
    devices): "39.6 ms of them in total", "20.1 ms of them on each device",
    "12.0 ms of them on TPU 0, 3.2 ms on TPU 1"."""
    dev = G.g.device[rows]
    per = np.bincount(dev, weights=G.share_ns[rows, ci])
    on = np.flatnonzero(per > 0)
    if on.size <= 1:
        return f"{_fmt(float(per.sum()))} of them in total"
    v = per[on]
    if v.max() - v.min() <= 0.01 * v.max():
        return f"{_fmt(float(v.mean()))} of them on each device"
    order = on[np.argsort(-per[on], kind="stable")]
    named = [f"{_fmt(float(per[d]))} on {diag.devices.name[d]}" for d in order[:4].tolist()]
    more = f" and some on {on.size - 4} more device(s)" if on.size > 4 else ""
    return f"{named[0].replace(' on ', ' of them on ', 1)}" + "".join(
        ", " + n for n in named[1:]) + more


def _detail(diag, cause, rows, G, chain, ci) -> str:
    n = len(rows)
    ndev = np.unique(G.g.device[rows]).size
    where = f" on {ndev} devices" if ndev > 1 else ""
    full = " › ".join(chain[-6:])
    return (f"{n} gap(s){where}; {C.LABELS[cause].lower()} takes "
            f"{_per_device(diag, rows, G, ci)}"
            + (f". Call chain: {full}." if full else "."))


_SUBJECT: dict = {}       # id(finding) → the subject its title starts with


def _unique_titles(out: list) -> None:
    """Findings whose titles collide name more of their call chain, until they differ."""
    groups = defaultdict(list)
    for f in out:
        groups[f.title].append(f)
    for title, fs in groups.items():
        if len(fs) < 2:
            continue
        for k in range(3, 12):
            names = [" › ".join([c for c in (f.extra.get("chain") or [])
                                 if c != "ProfilerStep"][-k:]) for f in fs]
            if len(set(names)) == len(names):
                break
        for f, n in zip(fs, names):
            subj = _SUBJECT.get(id(f))
            if subj and n and n != subj:
                f.title = f.title.replace(subj, n, 1)
    counts = defaultdict(int)
    for f in out:
        counts[f.title] += 1
        if counts[f.title] > 1:
            f.title = f"{f.title} ({counts[f.title]})"
    _SUBJECT.clear()


def _chain(trace: Trace, e: int) -> list:
    return [trace.event_name(i) for i in trace.chain(e)]


def _compile_summary(trace, diag, steps, compile_ev, compile_step, out, fw) -> None:
    """Say on the compilation findings how many compiles ran in which steps.  Only the
    same function compiled again is a recompilation (new shapes); the first compile of
    each function is a one-time cost."""
    comp = [f for f in out if f.extra.get("cause") == C.COMPILATION]
    T = diag.compilations
    if T is None or not len(T):
        return
    ids = diag.steps.ids
    sid = [int(ids[s]) if s >= 0 and ids.size else None for s in T.step.tolist()]
    per_step = defaultdict(lambda: [0, 0])
    for s, d in zip(sid, T.duration.tolist()):
        if s is not None:
            per_step[s][0] += 1
            per_step[s][1] += int(d)
    again = sorted({s for s, r in zip(sid, T.recompile.tolist()) if r and s is not None})
    grows = bool(T.recompile.any())
    funcs = sorted({f for f in T.function if f})
    for f in comp:
        f.fix = fix_for(f.kind.value, "*", fw)
        f.detail += (f" {len(T)} compilation(s) of {len(funcs) or 'unnamed'} function(s) in "
                     f"steps {sorted(per_step)}"
                     + (f"; compiled again in steps {again}: the program changes between "
                        "steps (new shapes)." if grows else ": first compiles, a one-time cost."))
        f.extra.update(compile_steps=sorted(per_step), recompile_steps=again,
                       grows_with_steps=grows,
                       per_step={str(k): {"count": v[0], "total_ns": v[1] // 1000}
                                 for k, v in per_step.items()})


def _transfers(trace, diag, G, steps, fw, add, out) -> None:
    """Device→host reads the user's code makes (counted once per call, even when they
    open no gap).  The sync findings that cite the gaps they exposed say so; reads that
    exposed none get a finding of their own that costs nothing."""
    T = diag.transfers
    if T is None or not len(T):
        return
    from ..result import Direction
    sel = np.flatnonzero(T.direction == Direction.D2H)
    if not sel.size:
        return
    ev = T.event[sel]
    names = sorted({clean(trace.event_name(e)) for e in ev.tolist()})
    ids = diag.steps.ids
    hit_steps = sorted({int(ids[s]) for s in T.step[sel].tolist() if s >= 0})
    g = G.g
    hs = C.ALL.index(C.HOST_SYNC)
    # a gap a read exposed: its blocking call ran inside the read, on the same thread
    b = g.blocking
    rows = np.flatnonzero((b >= 0) & (G.share_ns[:, hs] > 0))
    o = np.argsort(T.start[sel], kind="stable")
    ts, te, tt = T.start[sel][o], (T.start + T.duration)[sel][o], trace.track[ev[o]]
    k = np.searchsorted(ts, trace.ts[b[rows]], side="right") - 1
    inside = (k >= 0) & (trace.ts[b[rows]] < te[np.maximum(k, 0)]) & \
        (tt[np.maximum(k, 0)] == trace.track[b[rows]])
    exposed = rows[inside]
    blocked = int(T.duration[sel].sum() // 1000)
    said = (f"{sel.size} device→host read(s) ({', '.join(names[:3])}) in {len(hit_steps)} "
            f"step(s); the host waited {_fmt(blocked)} in them in total.")
    owners = [f for f in out if f.kind == FK.HOST_SYNC and exposed.size
              and np.isin(f.gaps, exposed).any()]
    for f in owners:
        f.detail += " " + said
        f.extra["transfer_steps"] = hit_steps
    if owners:
        return
    add(FK.D2H_TRANSFER, f"{sel.size} device→host read(s) ({', '.join(names[:3])}) in "
        f"{len(hit_steps)} step(s), none exposing device idle", np.zeros(0, np.int32),
        fix_for("d2h_transfer", "*", fw), said + " The device had other work meanwhile, so "
        "they cost no idle here.", 0, -1, confidence="high", steps_hit=hit_steps,
        events=ev[:MAX_EVIDENCE])


def _memcpy_share(trace, diag, fw, add) -> None:
    """Copies taking a large share of one device's busy time."""
    D = diag.devices
    mem = np.flatnonzero(trace.kind == K.MEMCPY)         # one pass, not one per device
    mem_dev = trace.track_device[trace.track[mem]]
    for d in np.flatnonzero(D.ops > 0).tolist():
        ev = mem[mem_dev == d]
        busy = int(round(int(D.busy[d]) / 1000))
        if not ev.size or not busy:
            continue
        mem_ns = int(trace.dur[ev].sum() // 1000)
        if mem_ns > 0.15 * busy and mem_ns < 0.95 * busy:     # a copy-only device is not this
            add(FK.EXCESSIVE_MEMCPY, f"Memory copies take {100 * mem_ns / busy:.0f}% of "
                f"{D.name[d]}'s busy time", np.zeros(0, np.int32),
                fix_for("excessive_memcpy", "*", fw),
                f"{ev.size} copies take {_fmt(mem_ns)} of {_fmt(busy)} busy.",
                mem_ns, d, confidence="medium")


# events looked at a block at a time where a column over them all is not needed (the
# multi-device finding's masks and gathers over 40 M events were 0.45 GB, at the process'
# peak)
_BLOCK = 1 << 20


def _collective_ps(trace: Trace, d: int) -> int:
    """Time of device ``d``'s collective kernels (its activity whose name is one), each
    distinct name classified once, the ops read a block at a time."""
    ops = trace.activity_of(d)
    seen = np.zeros(len(trace.strings), bool)
    for i in range(0, ops.shape[0], _BLOCK):
        seen[trace.name[ops[i:i + _BLOCK].astype(np.intp)]] = True
    u = np.flatnonzero(seen)
    is_c = seen
    is_c[u] = [is_collective_kernel(trace.strings[x]) for x in u.tolist()]
    total = 0
    for i in range(0, ops.shape[0], _BLOCK):
        blk = ops[i:i + _BLOCK].astype(np.intp)
        total += int(trace.dur[blk[is_c[trace.name[blk]]]].sum())
    return total


def _multi_device(trace: Trace, diag, n_steps: int, fw: str) -> list:
    D = diag.devices
    # devices that compute: a copy-only device is not "skewed" against a compute one
    kern = kernels_per_device(trace, len(D))
    devs = [d for d in np.flatnonzero(D.ops > 0).tolist() if kern[d] > 0]
    if len(devs) < 2:
        return []
    out = []
    busy_ns = np.rint(D.busy / 1000).astype(np.int64)
    busy = busy_ns[devs].astype(float)
    skew = busy.max() - busy.min()
    slow = D.name[devs[int(np.argmax(busy))]]
    coll = {D.name[d]: _collective_ps(trace, d) // 1000 for d in devs}
    S = diag.steps
    win_ns = np.rint(S.win_end / 1000).astype(np.int64) - np.rint(S.win_start / 1000).astype(
        np.int64)
    per_step_dev = {D.name[d]: win_ns[:, d].tolist() for d in devs if len(S)}
    detail = (f"Busy time differs by {_fmt(skew)} across {len(devs)} devices "
              f"({slow} is busiest). Collective time per device: " +
              ", ".join(f"{k}: {_fmt(v)}" for k, v in coll.items()) + ".")
    none = np.zeros(0, np.int32)
    # per step: how much longer the busiest device worked than the least busy one, inside
    # the step (the whole-trace difference may lie outside every step)
    in_steps = int(np.rint((S.busy[:, devs].max(axis=1) - S.busy[:, devs].min(axis=1))
                           / 1000).sum()) if len(S) else int(skew)
    if busy.max() > 0 and skew / busy.max() > 0.05:
        out.append(Finding(FK.DEVICE_SKEW, f"Device skew: {slow} does more work", detail,
                           fix_for("device_skew", "*", fw),
                           "medium", int(skew), int(min(skew, in_steps) / n_steps), [], none,
                           extra={"per_device_busy_ns": {D.name[d]: int(busy_ns[d])
                                                         for d in devs},
                                  "collective_ns": coll,
                                  "per_device_step_ns": {k: int(np.mean(v))
                                                         for k, v in per_step_dev.items()}}))
    # devices running in turn: little overlap of busy time between devices
    lo_ns = np.rint(D.lo / 1000).astype(np.int64)
    hi_ns = np.rint(D.hi / 1000).astype(np.int64)
    spans = [(int(lo_ns[d]), int(hi_ns[d])) for d in devs]
    overlap = max(0, min(e for _, e in spans) - max(s for s, _ in spans))
    longest = max(e - s for s, e in spans)
    if longest and overlap < 0.2 * longest:
        # the wall-clock time running together would save: the union of the spans less
        # the longest; per step, the same within the steps' windows
        lost = _union_ns(spans) - longest
        inside = lost
        if len(S):
            w0 = int(np.rint(S.win_start[:, devs].min() / 1000))
            w1 = int(np.rint(S.win_end[:, devs].max() / 1000))
            cl = [(max(a, w0), min(b, w1)) for a, b in spans]
            cl = [(a, b) for a, b in cl if b > a]
            inside = _union_ns(cl) - max((b - a for a, b in cl), default=0)
        extra = {"outside_steps_ns": int(lost - inside)} if inside < lost else {}
        out.append(Finding(FK.SERIALIZED_DEVICES, "Devices run in turn, not together",
                           "The devices' active spans barely overlap.",
                           fix_for("serialized_devices", "*", fw),
                           "medium", int(lost), int(inside / n_steps), [], none,
                           ranges=[list(x) for x in spans], extra=extra))
    return out


def _union_ns(spans: list) -> int:
    """Length of the union of (start, end) spans."""
    total, end = 0, None
    for a, b in sorted(spans):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total
