"""Plain-language findings with evidence, time lost per step and a fix."""
from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

from ..trace.build import unique_inverse
from ..trace.classify import is_collective_kernel
from ..trace.model import EventKind as K, Trace
from . import causes as C

MAX_EVIDENCE = 20
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


def findings(trace: Trace, diag, steps, compile_ev, compile_step) -> list:
    n_steps = max(len(diag.steps), 1)
    out = []
    gaps = diag.gaps
    by_cause = defaultdict(list)
    for g in gaps:
        by_cause[g["cause"]].append(g)

    def add(kind, title, gl, fix, detail, confidence=None, total_ns=None, extra=None):
        total = total_ns if total_ns is not None else sum(g["duration_ns"] for g in gl)
        steps_hit = {g["step"] for g in gl if g.get("step") is not None}
        conf = confidence or ("high" if len(steps_hit) >= max(0.8 * n_steps, 1) and n_steps > 1
                              else "medium")
        f = {"kind": kind, "title": title, "time_lost_ns_per_step": int(total / n_steps),
             "time_lost_ns": int(total), "confidence": conf,
             "steps": sorted(steps_hit), "fix": fix, "detail": detail,
             "evidence": {"gaps": [g["id"] for g in gl[:MAX_EVIDENCE]],
                          "ranges": [[g["start_ns"], g["end_ns"]] for g in gl[:MAX_EVIDENCE]]}}
        if extra:
            f.update(extra)
        out.append(f)

    # host sync points, one finding per culprit call chain
    sync_groups = defaultdict(list)
    for g in by_cause.get(C.HOST_SYNC, []):
        chain = g["syncs"][0]["chain"] if g.get("syncs") else \
            (g["waited_for"]["chain"] if g.get("waited_for") else [])
        label, fix = "a host–device sync", SYNC_CULPRITS[4][2]
        for rx, name, fx in SYNC_CULPRITS:
            if any(rx.search(c) for c in chain):
                label, fix = name, fx
                break
        key_chain = [c for c in chain if not c.startswith("ProfilerStep#")]
        sync_groups[(label, " › ".join(key_chain))].append(g)
    for (label, chain), gl in sorted(sync_groups.items(), key=lambda kv: -sum(
            g["duration_ns"] for g in kv[1])):
        add("host_sync", f"Host–device sync at {label}", gl, fix,
            f"The device drained its queue and idled while the host waited at: {chain or label}. "
            f"{len(gl)} gap(s).", extra={"chain": chain.split(" › ") if chain else []})

    # recompilation
    if compile_ev.size:
        ids = diag.steps
        per_step = defaultdict(lambda: [0, 0])
        outside = 0
        for e, s in zip(compile_ev.tolist(), compile_step.tolist()):
            if s < 0:
                outside += 1
                continue
            per_step[int(steps.ids[s])][0] += 1
            per_step[int(steps.ids[s])][1] += int(trace.dur[e])
        compiled_steps = sorted(per_step)
        after_first = [s for s in compiled_steps if ids and s > ids[0]["id"]]
        total = int(trace.dur[compile_ev].sum() // 1000)
        gl = by_cause.get(C.COMPILATION, [])
        grows = len(after_first) >= 1
        add("recompilation",
            f"Recompilation in {len(compiled_steps)} step(s)" if grows else "Compilation",
            gl,
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
        chains = {" › ".join(_chain(trace, e)) for e in d2h[:50].tolist()}
        add("d2h_transfer", f"{d2h.size} device→host transfer(s) ({', '.join(names[:3])})", [],
            SYNC_CULPRITS[3][2],
            f"Transfers in steps {hit_steps}: each one waits for the device. Call chains: "
            + "; ".join(sorted(chains)[:3]),
            total_ns=total, confidence="high",
            extra={"events": [{"name": trace.event_name(e), "start_ns": int(trace.ts[e] // 1000),
                               "duration_ns": int(trace.dur[e] // 1000),
                               "chain": _chain(trace, e)} for e in d2h[:MAX_EVIDENCE].tolist()],
                   "steps": hit_steps})

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
        gl = by_cause.get(cause, [])
        if not gl:
            continue
        total = sum(g["duration_ns"] for g in gl)
        top_ops = defaultdict(int)
        for g in gl[:200]:
            for h in g.get("host_ops", [])[:3]:
                top_ops[h["name"]] += h["self_ns"]
        tops = ", ".join(n for n, _ in sorted(top_ops.items(), key=lambda kv: -kv[1])[:4])
        add(kind, title, gl, fix,
            f"{len(gl)} gap(s), {total / 1e6:.2f} ms in total." +
            (f" Host ops filling them: {tops}." if tops else ""))

    # excessive memcpy
    mem = np.flatnonzero(trace.kind == K.MEMCPY)
    busy_total = sum(d["busy_ns"] for d in diag.devices) or 0
    if mem.size and busy_total:
        mem_ns = int(trace.dur[mem].sum() // 1000)
        if mem_ns > 0.15 * busy_total:
            add("excessive_memcpy", "Memory copies take a large share of device time", [],
                "Avoid repeated .to(device)/.cpu() round trips, keep tensors on the device, and "
                "use pinned memory for the copies that remain.",
                f"{mem.size} memcpy events take {mem_ns / 1e6:.2f} ms, "
                f"{100 * mem_ns / busy_total:.0f}% of device busy time.",
                total_ns=mem_ns, confidence="medium")

    out.extend(_multi_device(trace, diag, n_steps))
    out.extend(_recurring(diag, n_steps, list(out)))
    out.sort(key=lambda f: (-f["time_lost_ns_per_step"], f["kind"]))
    return out


def _chain(trace: Trace, e: int) -> list:
    return [trace.event_name(i) for i in trace.chain(e)]


def _multi_device(trace: Trace, diag, n_steps: int) -> list:
    devs = [d for d in diag.devices if d["ops"]]
    if len(devs) < 2:
        return []
    out = []
    busy = np.array([d["busy_ns"] for d in devs], float)
    skew = busy.max() - busy.min()
    slow = devs[int(np.argmax(busy))]["name"]
    coll = {}
    for d in devs:
        ev = np.flatnonzero(trace.is_device_activity() & (trace.track_device[trace.track] == d["id"]))
        names = trace.name[ev]
        u, inv = unique_inverse(names)
        is_c = np.array([is_collective_kernel(trace.strings[x]) for x in u.tolist()], bool)[inv]
        coll[d["name"]] = int(trace.dur[ev[is_c]].sum() // 1000)
    per_step_dev = {}
    for s in diag.steps:
        for k, v in s["devices"].items():
            if v["start_ns"] is not None:
                per_step_dev.setdefault(diag.devices[int(k)]["name"], []).append(
                    v["end_ns"] - v["start_ns"])
    detail = (f"Busy time differs by {skew / 1e6:.2f} ms across {len(devs)} devices "
              f"({slow} is busiest). Collective time per device (ms): " +
              ", ".join(f"{k}: {v / 1e6:.2f}" for k, v in coll.items()) + ".")
    if busy.max() > 0 and skew / busy.max() > 0.05:
        out.append({"kind": "device_skew", "title": f"Device skew: {slow} does more work",
                    "time_lost_ns_per_step": int(skew / n_steps), "time_lost_ns": int(skew),
                    "confidence": "medium", "steps": [], "detail": detail,
                    "fix": "Balance the work per device (shard sizes, padding, data split); the "
                           "others wait for the busiest one at every collective.",
                    "evidence": {"gaps": [], "ranges": []},
                    "per_device_busy_ns": {d["name"]: d["busy_ns"] for d in devs},
                    "collective_ns": coll,
                    "per_device_step_ns": {k: int(np.mean(v)) for k, v in per_step_dev.items()}})
    # devices running in turn: little overlap of busy time between devices
    spans = [(d["start_ns"], d["end_ns"]) for d in devs]
    overlap = max(0, min(e for _, e in spans) - max(s for s, _ in spans))
    longest = max(e - s for s, e in spans)
    if longest and overlap < 0.2 * longest:
        out.append({"kind": "serialized_devices", "title": "Devices run in turn, not together",
                    "time_lost_ns_per_step": int((sum(e - s for s, e in spans) - longest)
                                                 / n_steps),
                    "time_lost_ns": int(sum(e - s for s, e in spans) - longest),
                    "confidence": "medium", "steps": [], "evidence": {"gaps": [], "ranges":
                                                                      [list(x) for x in spans]},
                    "detail": "The devices' active spans barely overlap.",
                    "fix": "Launch work on all devices before waiting on any (no per-device "
                           "sync in a loop); use one process per device or async dispatch."})
    return out


CAUSE_FINDING = {C.HOST_SYNC: "host_sync", C.COMPILATION: "recompilation",
                 C.DATA_LOADING: "input_bound", C.H2D_TRANSFER: "h2d_transfer",
                 C.LAUNCH_OVERHEAD: "launch_bound", C.HOST_COMPUTE: "host_compute",
                 C.COLLECTIVE_WAIT: "collective_wait", C.UNTRACED: "untraced"}


def _recurring(diag, n_steps: int, others: list) -> list:
    """The same gap (device, cause, waited-for op) in most steps."""
    if n_steps < 3:
        return []
    groups = defaultdict(list)
    for g in diag.gaps:
        if g.get("step") is None:
            continue
        wf = g["waited_for"]["name"] if g.get("waited_for") else ""
        groups[(g["device"], g["cause"], wf)].append(g)
    out = []
    step_len = {s["id"]: max(s["end_ns"] - s["start_ns"], 1) for s in diag.steps}
    for (dev, cause, wf), gl in groups.items():
        steps_hit = {g["step"] for g in gl}
        if len(steps_hit) < max(3, 0.8 * n_steps):
            continue
        # one representative per step: the largest
        best = {}
        for g in gl:
            if g["step"] not in best or g["duration_ns"] > best[g["step"]]["duration_ns"]:
                best[g["step"]] = g
        reps = sorted(best.values(), key=lambda g: g["step"])
        per_step = int(np.median([g["duration_ns"] for g in reps]))
        share = float(np.median([g["duration_ns"] / step_len.get(g["step"], 1) for g in reps]))
        if share < MIN_RECURRING_SHARE:
            continue              # repeats, but costs too little of the step to lead with
        dev_name = diag.devices[dev]["name"]
        out.append({"kind": "recurring_gap",
                    "title": f"Recurring {C.LABELS[cause].lower()} gap on {dev_name} in "
                             f"{len(steps_hit)} of {n_steps} steps",
                    "time_lost_ns_per_step": per_step, "time_lost_ns": per_step * len(reps),
                    "confidence": "high", "steps": sorted(steps_hit), "cause": cause,
                    "share_of_step": share,
                    "detail": f"About {per_step / 1e3:.0f} µs ({100 * share:.1f}% of the step) "
                              f"idle every step before {wf or 'the next op'}. Because it repeats, "
                              "removing it saves that much in every step.",
                    "fix": _matching_fix(others, cause, {g["id"] for g in reps}),
                    "evidence": {"gaps": [g["id"] for g in reps[:MAX_EVIDENCE]],
                                 "ranges": [[g["start_ns"], g["end_ns"]]
                                            for g in reps[:MAX_EVIDENCE]]}})
    return out


def _matching_fix(others: list, cause: str, gap_ids: set) -> str:
    """The fix of the finding that explains these gaps (the one citing most of them)."""
    kind = CAUSE_FINDING.get(cause)
    best = max((f for f in others if f["kind"] == kind),
               key=lambda f: len(gap_ids & set(f["evidence"]["gaps"])), default=None)
    if best is None:
        return "Remove what the host does in this gap (see its host ops); because it repeats " \
               "every step, that saves its time in every step."
    return f"{best['fix']} (same cause as “{best['title']}”)"

