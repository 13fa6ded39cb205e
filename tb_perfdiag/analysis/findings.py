"""Plain-language findings with evidence, time lost per step and a fix.

Computed from the typed gap table (every gap, whatever a page shows): a finding cites
gap rows, and its time lost is the sum of their durations as reported (ns).
"""
from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

from ..trace.build import unique_inverse
from ..trace.classify import is_collective_kernel
from ..trace.model import EventKind as K, Trace
from . import causes as C
from .detail import host_ops
from .result import Finding, FindingKind as FK

MAX_EVIDENCE = 20              # events named in a d2h finding
TOP_OPS_GAPS = 200             # gaps of a cause whose host ops name the finding's culprits
MIN_RECURRING_SHARE = 0.01     # a recurring gap worth reporting takes ≥ 1 % of its step

# culprit op (matched against the sync call's chain, innermost first) → (title, fix)
SYNC_CULPRITS = [
    (re.compile(r"aten::nonzero|nonzero", re.I), "torch.nonzero",
     "torch.nonzero (and torch.where with one argument) must copy the number of results to the "
     "host. Keep shapes static: use torch.where(mask, x, 0) or multiply by the mask instead of "
     "selecting indices."),
    (re.compile(r"aten::unique|_unique", re.I), "torch.unique",
     "torch.unique waits for the device to size its output. Sort and count on the device "
     "(torch.bincount with a fixed minlength, or torch.sort + diff) instead."),
    (re.compile(r"aten::masked_select|aten::index(?!_)|aten::index\b|boolean", re.I),
     "boolean-mask indexing",
     "Indexing with a boolean mask (x[mask]) has a data-dependent size and syncs. Use "
     "torch.where(mask, x, 0), or a loss with ignore_index / reduction over the mask."),
    (re.compile(r"aten::item|_local_scalar_dense|TransferFromDevice|ToLiteral", re.I),
     ".item() / device→host read",
     "Every .item(), float(tensor), print(tensor) or if tensor: copies to the host and waits. "
     "Keep values on the device (accumulate metrics as tensors) and read them every N steps."),
    (re.compile(r"synchronize", re.I), "explicit synchronize",
     "An explicit torch.cuda.synchronize() / stream sync empties the queue; remove it outside "
     "timing code, or use events to wait only for what you need."),
    (re.compile(r"aten::to|aten::copy_|Memcpy", re.I), "device→host copy",
     "A .cpu()/.to('cpu') copy waits for all queued work. Move the copy later, batch several "
     "copies, or use non_blocking=True with pinned memory."),
]


class _Gaps:
    """The gap columns findings read, as reported (ns, step ids)."""

    def __init__(self, trace: Trace, diag):
        g = diag.gaps
        self.n = len(g)
        self.dur_ns = np.rint((g.end - g.start) / 1000).astype(np.int64)
        self.start_ns = np.rint(g.start / 1000).astype(np.int64)
        self.end_ns = np.rint(g.end / 1000).astype(np.int64)
        ids = diag.steps.ids
        self.step = np.where(g.step >= 0, ids[np.maximum(g.step, 0)] if ids.size else -1, -1)
        self.cause = g.cause
        self.device = g.device
        self.g = g

    def steps_hit(self, rows) -> set:
        st = self.step[rows]
        return set(st[st >= 0].tolist())

    def total(self, rows) -> int:
        return int(self.dur_ns[rows].sum())


def findings(trace: Trace, diag, steps, compile_ev, compile_step, ctx) -> tuple:
    """([Finding], events cited) — most time lost per step first."""
    n_steps = max(len(diag.steps), 1)
    G = _Gaps(trace, diag)
    out = []
    cited = []
    by_cause = {c: np.flatnonzero(G.cause == i).astype(np.int32) for i, c in enumerate(C.ALL)}

    def add(kind, title, rows, fix, detail, confidence=None, total_ns=None, extra=None,
            steps_hit=None, events=None):
        total = total_ns if total_ns is not None else G.total(rows)
        hit = G.steps_hit(rows) if steps_hit is None else set(steps_hit)
        conf = confidence or ("high" if len(hit) >= max(0.8 * n_steps, 1) and n_steps > 1
                              else "medium")
        f = Finding(kind, title, detail, fix, conf, int(total), int(total / n_steps),
                    sorted(hit), np.asarray(rows, np.int32), extra=extra or {})
        if events is not None:
            f.events = np.asarray(events, np.int64)
            cited.append(f.events)
        out.append(f)

    # host sync points, one finding per culprit call chain
    chains: dict = {}

    def chain_of(e: int) -> tuple:
        c = chains.get(e)
        if c is None:
            c = chains[e] = tuple(_chain(trace, e)) if e >= 0 else ()
        return c

    sync_groups = defaultdict(list)
    fixes = {}
    for r in by_cause[C.HOST_SYNC].tolist():
        b, w = int(G.g.blocking[r]), int(G.g.waited_for[r])
        chain = chain_of(b) if b >= 0 else chain_of(w)
        label, fix = "a host–device sync", SYNC_CULPRITS[4][2]
        for rx, name, fx in SYNC_CULPRITS:
            if any(rx.search(c) for c in chain):
                label, fix = name, fx
                break
        key = (label, " › ".join(c for c in chain if not c.startswith("ProfilerStep#")))
        sync_groups[key].append(r)
        fixes[key] = fix
    for (label, chain), rows in sorted(sync_groups.items(), key=lambda kv: -G.total(kv[1])):
        add(FK.HOST_SYNC, f"Host–device sync at {label}", rows, fixes[(label, chain)],
            f"The device drained its queue and idled while the host waited at: {chain or label}. "
            f"{len(rows)} gap(s).", extra={"chain": chain.split(" › ") if chain else []})

    # recompilation
    if compile_ev.size:
        per_step = defaultdict(lambda: [0, 0])
        outside = 0
        for e, s in zip(compile_ev.tolist(), compile_step.tolist()):
            if s < 0:
                outside += 1
                continue
            per_step[int(steps.ids[s])][0] += 1
            per_step[int(steps.ids[s])][1] += int(trace.dur[e])
        compiled_steps = sorted(per_step)
        first_id = int(diag.steps.ids[0]) if len(diag.steps) else None
        after_first = [s for s in compiled_steps if first_id is not None and s > first_id]
        total = int(trace.dur[compile_ev].sum() // 1000)
        grows = len(after_first) >= 1
        add(FK.RECOMPILATION,
            f"Recompilation in {len(compiled_steps)} step(s)" if grows else "Compilation",
            by_cause[C.COMPILATION],
            "Each new input shape compiles a new graph. Keep shapes static: pad or bucket "
            "batch/sequence sizes, drop the last partial batch (drop_last=True), and keep "
            "Python scalars out of the graph (torch_xla: check the CompileTime metric; "
            "JAX: avoid re-jitting on new shapes).",
            f"{len(compile_ev)} compilation(s) taking {total / 1e6:.1f} ms in total, in steps "
            f"{compiled_steps}" + (f" and {outside} outside any step" if outside else "")
            + (". Compilations after the first step mean the graph changes between steps "
               "(dynamic shapes)." if grows else "."),
            confidence="high", total_ns=total,
            extra={"compile_steps": compiled_steps,
                   "per_step": {str(k): {"count": v[0], "total_ns": v[1] // 1000}
                                for k, v in per_step.items()},
                   "grows_with_steps": grows})

    # device→host transfers (count even when they do not open a gap)
    d2h = np.flatnonzero(trace.kind == K.TRANSFER_D2H)
    d2h = d2h[~np.isin(trace.parent[d2h], d2h)] if d2h.size else d2h
    if d2h.size:
        from .steps import step_of_time
        st = step_of_time(steps, trace.ts[d2h])
        names = sorted({trace.event_name(e) for e in d2h.tolist()})
        hit_steps = sorted({int(steps.ids[s]) for s in st.tolist() if s >= 0})
        total = int(trace.dur[d2h].sum() // 1000)
        chains_txt = {" › ".join(_chain(trace, e)) for e in d2h[:50].tolist()}
        add(FK.D2H_TRANSFER, f"{d2h.size} device→host transfer(s) ({', '.join(names[:3])})",
            np.zeros(0, np.int32), SYNC_CULPRITS[3][2],
            f"Transfers in steps {hit_steps}: each one waits for the device. Call chains: "
            + "; ".join(sorted(chains_txt)[:3]),
            total_ns=total, confidence="high", steps_hit=hit_steps,
            events=d2h[:MAX_EVIDENCE])

    simple = {
        C.DATA_LOADING: ("input_bound", "Input-bound: the device waits for data loading",
                         "Load data in the background: DataLoader(num_workers>0, pin_memory=True, "
                         "persistent_workers=True, prefetch_factor), or a prefetching input "
                         "pipeline (tf.data prefetch, torch_xla MpDeviceLoader)."),
        C.H2D_TRANSFER: ("h2d_transfer", "Host→device copies not overlapped with compute",
                         "Copy from pinned memory with non_blocking=True on a side stream, or "
                         "prefetch the next batch to the device while this one computes "
                         "(torch_xla: MpDeviceLoader)."),
        C.LAUNCH_OVERHEAD: ("launch_bound", "Launch-bound: kernels shorter than their launch",
                            "Fuse small ops (torch.compile, CUDA graphs via "
                            "torch.cuda.graphs / mode='reduce-overhead'), use larger batches, or "
                            "foreach/fused optimizers."),
        C.HOST_COMPUTE: ("host_compute", "Host compute between launches starves the device",
                         "Move Python work out of the step (precompute, vectorise), avoid "
                         "per-element Python loops, and check the host ops listed in the gaps."),
        C.COLLECTIVE_WAIT: ("collective_wait", "Devices wait for each other at collectives",
                            "Balance work across devices (uneven shards or batch sizes), overlap "
                            "communication with compute (bucketed DDP/FSDP), and check for a "
                            "straggler."),
        C.UNTRACED: ("untraced", "Device idle while the host shows nothing",
                     "The host was idle or not profiled during these gaps: profile with Python "
                     "stacks and all threads, and check for sleeps, I/O or other processes."),
    }
    for cause, (kind, title, fix) in simple.items():
        rows = by_cause[cause]
        if not rows.size:
            continue
        total = G.total(rows)
        top = rows[:TOP_OPS_GAPS]
        ho = host_ops(trace, ctx.lines, ctx.block_anc, top, G.g.start[top], G.g.end[top])
        top_ops = defaultdict(int)
        at = np.searchsorted(ho.gap, top) if ho.gap.size else np.zeros(0, np.int64)
        # per gap its three ops with most self time (all threads)
        for r, k in zip(top.tolist(), at.tolist()):
            j = k
            while j < ho.gap.shape[0] and ho.gap[j] == r and j < k + 3:
                top_ops[trace.event_name(int(ho.event[j]))] += int(round(int(ho.self_time[j])
                                                                         / 1000))
                j += 1
        tops = ", ".join(n for n, _ in sorted(top_ops.items(), key=lambda kv: -kv[1])[:4])
        add(FK(kind), title, rows, fix,
            f"{rows.size} gap(s), {total / 1e6:.2f} ms in total." +
            (f" Host ops filling them: {tops}." if tops else ""))

    # excessive memcpy
    mem = np.flatnonzero(trace.kind == K.MEMCPY)
    busy_total = int(np.rint(diag.devices.busy / 1000).sum())
    if mem.size and busy_total:
        mem_ns = int(trace.dur[mem].sum() // 1000)
        if mem_ns > 0.15 * busy_total:
            add(FK.EXCESSIVE_MEMCPY, "Memory copies take a large share of device time",
                np.zeros(0, np.int32),
                "Avoid repeated .to(device)/.cpu() round trips, keep tensors on the device, and "
                "use pinned memory for the copies that remain.",
                f"{mem.size} memcpy events take {mem_ns / 1e6:.2f} ms, "
                f"{100 * mem_ns / busy_total:.0f}% of device busy time.",
                total_ns=mem_ns, confidence="medium")

    out.extend(_multi_device(trace, diag, n_steps))
    out.extend(_recurring(trace, diag, G, n_steps, list(out)))
    out.sort(key=lambda f: (-f.time_lost_ns_per_step, f.kind.value))
    return out, (np.concatenate(cited) if cited else np.zeros(0, np.int64))


def _chain(trace: Trace, e: int) -> list:
    return [trace.event_name(i) for i in trace.chain(e)]


def _multi_device(trace: Trace, diag, n_steps: int) -> list:
    D = diag.devices
    devs = np.flatnonzero(D.ops > 0).tolist()
    if len(devs) < 2:
        return []
    out = []
    busy_ns = np.rint(D.busy / 1000).astype(np.int64)
    busy = busy_ns[devs].astype(float)
    skew = busy.max() - busy.min()
    slow = D.name[devs[int(np.argmax(busy))]]
    coll = {}
    for d in devs:
        ev = np.flatnonzero(trace.is_device_activity() & (trace.track_device[trace.track] == d))
        u, inv = unique_inverse(trace.name[ev])
        is_c = np.array([is_collective_kernel(trace.strings[x]) for x in u.tolist()], bool)[inv]
        coll[D.name[d]] = int(trace.dur[ev[is_c]].sum() // 1000)
    S = diag.steps
    win_ns = np.rint(S.win_end / 1000).astype(np.int64) - np.rint(S.win_start / 1000).astype(
        np.int64)
    per_step_dev = {D.name[d]: win_ns[:, d].tolist() for d in devs if len(S)}
    detail = (f"Busy time differs by {skew / 1e6:.2f} ms across {len(devs)} devices "
              f"({slow} is busiest). Collective time per device (ms): " +
              ", ".join(f"{k}: {v / 1e6:.2f}" for k, v in coll.items()) + ".")
    none = np.zeros(0, np.int32)
    if busy.max() > 0 and skew / busy.max() > 0.05:
        out.append(Finding(FK.DEVICE_SKEW, f"Device skew: {slow} does more work", detail,
                           "Balance the work per device (shard sizes, padding, data split); "
                           "the others wait for the busiest one at every collective.",
                           "medium", int(skew), int(skew / n_steps), [], none,
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
        lost = sum(e - s for s, e in spans) - longest
        out.append(Finding(FK.SERIALIZED_DEVICES, "Devices run in turn, not together",
                           "The devices' active spans barely overlap.",
                           "Launch work on all devices before waiting on any (no per-device "
                           "sync in a loop); use one process per device or async dispatch.",
                           "medium", int(lost), int(lost / n_steps), [], none,
                           ranges=[list(x) for x in spans]))
    return out


CAUSE_FINDING = {C.HOST_SYNC: FK.HOST_SYNC, C.COMPILATION: FK.RECOMPILATION,
                 C.DATA_LOADING: FK.INPUT_BOUND, C.H2D_TRANSFER: FK.H2D_TRANSFER,
                 C.LAUNCH_OVERHEAD: FK.LAUNCH_BOUND, C.HOST_COMPUTE: FK.HOST_COMPUTE,
                 C.COLLECTIVE_WAIT: FK.COLLECTIVE_WAIT, C.UNTRACED: FK.UNTRACED}


def _recurring(trace: Trace, diag, G: _Gaps, n_steps: int, others: list) -> list:
    """The same gap (device, cause, waited-for op) in most steps."""
    if n_steps < 3:
        return []
    # the waited-for op by name: ops of the same name are the same call in each step
    by_name = defaultdict(list)
    wf = G.g.waited_for
    names = {}
    for r in np.flatnonzero(G.step >= 0).tolist():
        w = int(wf[r])
        if w not in names:
            names[w] = trace.event_name(w) if w >= 0 else ""
        by_name[(int(G.device[r]), int(G.cause[r]), names[w])].append(r)
    out = []
    S = diag.steps
    host_ns = np.rint(S.host_end / 1000).astype(np.int64) - np.rint(S.host_start / 1000).astype(
        np.int64)
    step_len = {int(i): max(int(x), 1) for i, x in zip(S.ids.tolist(), host_ns.tolist())}
    for (dev, cause, wname), rows in by_name.items():
        steps_hit = {int(G.step[r]) for r in rows}
        if len(steps_hit) < max(3, 0.8 * n_steps):
            continue
        # one representative per step: the largest
        best = {}
        for r in rows:
            s = int(G.step[r])
            if s not in best or G.dur_ns[r] > G.dur_ns[best[s]]:
                best[s] = r
        reps = [best[s] for s in sorted(best)]
        durs = G.dur_ns[reps]
        per_step = int(np.median(durs))
        share = float(np.median([int(G.dur_ns[r]) / step_len.get(int(G.step[r]), 1)
                                 for r in reps]))
        if share < MIN_RECURRING_SHARE:
            continue              # repeats, but costs too little of the step to lead with
        cname = C.ALL[cause]
        out.append(Finding(
            FK.RECURRING_GAP,
            f"Recurring {C.LABELS[cname].lower()} gap on {diag.devices.name[dev]} in "
            f"{len(steps_hit)} of {n_steps} steps",
            f"About {per_step / 1e3:.0f} µs ({100 * share:.1f}% of the step) idle every step "
            f"before {wname or 'the next op'}. Because it repeats, removing it saves that much "
            "in every step.",
            _matching_fix(others, cname, set(reps)), "high", per_step * len(reps), per_step,
            sorted(steps_hit), np.array(reps, np.int32),
            extra={"cause": cname, "share_of_step": share}))
    return out


def _matching_fix(others: list, cause: str, rows: set) -> str:
    """The fix of the finding that explains these gaps (the one citing most of them)."""
    kind = CAUSE_FINDING.get(cause)
    best = max((f for f in others if f.kind == kind),
               key=lambda f: len(rows & set(f.gaps.tolist())), default=None)
    if best is None:
        return "Remove what the host does in this gap (see its host ops); because it repeats " \
               "every step, that saves its time in every step."
    return f"{best.fix} (same cause as “{best.title}”)"
