"""Plain-language findings with evidence, the time they cost per step, and a fix.

Computed from the typed gap table and its cause shares (every gap, whatever a page
shows).  A gap finding is one culprit of one cause family: the gaps whose primary cause
is that family and whose culprit (``culprits.Culprits``) is the same user frame and op
chain.  Its time is the family's share of those gaps on the device they hit hardest
(never a sum over devices), so the findings of a family never claim more than that
device's idle in it; a finding that repeats in most steps says so instead of
appearing twice.  Fix texts come from ``fixes.py`` for the trace's framework."""
from __future__ import annotations

import numpy as np

from ...trace.build import distinct, unique_rows
from ...trace.model import EventKind as K
from .. import causes as C
from ..attribution.culprits import (
    PYTORCH_XLA,
    SYNC_LABELS,
    Culprits,
    chain_sync_kind,
    clean,
    sync_kind,
)
from ..steps import startup
from ..gaps import tfdata
from .fixes import fix_for
from ..result import FindingKind as FK
from .common import (
    _capture_ns,
    cost_phrase,
    cost_phrase_typical,
    FAMILY,
    _fmt,
    ONE_TIME,
    _pct,
    PHRASE,
    Scope,
    _short,
    _SUBJECT,
    TITLE_MAX,
    TOP_SHARE,
)


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
QUEUE_SUBJECT = "Work already queued on the device"


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
        # the runtime's own frames name where the work was issued, not what to change
        subject = QUEUE_SUBJECT + (f" (issued by {_short(ops[-1], 60)})" if ops else "")
        n_ops = len(queue["ops"])
        # a readable title: two ops named (the rest are in runtime_queue and the detail)
        named = [_short(o, 40) for o in queue["ops"][:2]]
        more = n_ops - len(named)
        what = (" and ".join(named) if not more else ", ".join(named) +
                f" and {more} more op{'s' if more > 1 else ''}") + \
            " waited to run"
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
    # one place waited to run an op replayed from a graph: where it was captured
    place = _captured(trace, G.g, rs, G.share_ns[:, ci]) if cause in C.DEVICE_SIDE and \
        not others and not queue else None
    if place is not None:
        extra["captured"] = {"op": clean(place.op) if place.op else None,
                             "where": _where(place),
                             "chain": [clean(n) for n in place.chain],
                             "annotations": list(place.annotations)}
    fix = fix_for(k.value, _fix_culprit(k, label, example, applied), fw)
    f = add(k, title, rs, fix, _detail(diag, cause, rs, G, chain, ci, place), total, dev,
            extra=extra, in_steps_ns=inside, typical_ns=typ)
    _SUBJECT[id(f)] = subject


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
        place = _captured(trace, g, [r])
        under = f" (captured under {clean(place.op)})" if place and place.op and \
            clean(place.op) != nxt else ""
        label = f"waiting to run {nxt}{under}"
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


def _detail(diag, cause, rows, G, chain, ci, place=None) -> str:
    n = len(rows)
    ndev = np.unique(G.g.device[rows]).size
    where = f" on {ndev} devices" if ndev > 1 else ""
    full = " › ".join(chain[-6:])
    out = (f"{n} gap(s){where}; {C.LABELS[cause].lower()} takes "
           f"{_per_device(diag, rows, G, ci)}" + (f". Call chain: {full}." if full else "."))
    if place is not None:
        # the op it waited to run was replayed from a graph: where it was captured
        cap = " › ".join(clean(x) for x in place.chain[-6:])
        ann = " › ".join(place.annotations)
        by = f"{clean(place.op)}" if place.op else "its launch"
        at = _where(place)
        out += (f" The op was replayed from a CUDA/HIP graph; while the graph was captured, "
                f"{by} launched it" + (f" at {at}" if at else "") +
                (f" (annotations: {ann})" if ann else "") + f". Captured chain: {cap}.")
    return out


def _where(place) -> str | None:
    """The innermost frame of the user's own code in a capture's chain."""
    from ..attribution.culprits import user_frame
    return next((w for w in map(user_frame, reversed(place.chain)) if w), None)


def _captured(trace, g, rows, weight=None):
    """The capture place (``graphs.CapturedPlace``) of the op the largest of ``rows``
    waited to run, where it was replayed from a graph matched to its capture; else None."""
    from ..efficiency.graphs import captured_places
    rows = np.asarray(rows, np.int64)
    if weight is not None and rows.size > 1:
        rows = rows[np.argsort(-weight[rows], kind="stable")]
    nxt = g.next_op[rows[:64]].astype(np.int64)
    pos, places = captured_places(trace, nxt[nxt >= 0])
    return places[0] if places else None


def detect(s: Scope) -> None:
    _gap_families(s.trace, s.diag, s.G, s.ctx, s.fw, s.applied, s.n_steps, s.typical_step,
                  s.add)
