"""Ground truth of a simulated timeline: plain interval arithmetic over the events
written (busy set, gaps, step windows, duty cycles, annotation device time), with the
definitions of GUIDE.md §4 that the manifest states."""
from __future__ import annotations

from sim import ACTIVITY, CAUSES, GAP_MIN_NS, LAUNCH_OVERHEAD, Timeline, chain_names, disp


def merge(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return out


def overlap(merged, a, b) -> int:
    tot = 0
    for s, e in merged:
        if e <= a:
            continue
        if s >= b:
            break
        tot += min(e, b) - max(s, a)
    return tot


def ground_truth(tl: Timeline, host_steps, device_steps=None, annotation=None):
    """host_steps: [(step id, host start, host end)] in order.
    device_steps: {device: [(step id, start, end)]} from a device ``Steps`` line.
    annotation: callable(device op) -> scope name or None (annotation device time)."""
    evs = tl.events
    assert min(e.ts for e in evs) == 0, "the earliest event must start at t=0"
    devices = sorted({t.device for t in tl.tracks.values() if t.side == "device"})
    act = {d: [e for e in evs if e.kind in ACTIVITY and e.track.device == d] for d in devices}
    busy = {d: merge([(e.ts, e.end) for e in act[d]]) for d in devices}
    counts = {}
    for d in devices:
        dev_evs = [e for e in evs if e.track.side == "device" and e.track.device == d]
        counts[d] = {"events": len(dev_evs), "activity_events": len(act[d]),
                     "kernels": sum(e.kind == "kernel" for e in act[d]),
                     "memcpy": sum(e.kind == "memcpy" for e in act[d]),
                     "memset": sum(e.kind == "memset" for e in act[d]),
                     "tracks": sorted({e.track.info.get("label", str(e.track.key))
                                       for e in dev_evs})}
    # ---- steps / windows ----
    windows = {}
    step_ids = [s for s, _, _ in host_steps]
    for d in devices:
        if device_steps and d in device_steps:
            windows[d] = [(s, a, b) for s, a, b in device_steps[d]]
            continue
        E = {}
        for e in act[d]:
            if e.step is not None:
                E[e.step] = max(E.get(e.step, 0), e.end)
        w = []
        bounds = []
        for k, (s, h, _) in enumerate(host_steps):
            if k == 0:
                bounds.append(h)
            else:
                prev = host_steps[k - 1][0]
                bounds.append(max(h, E.get(prev, h)))
        for k, (s, h, he) in enumerate(host_steps):
            if k + 1 < len(host_steps):
                w.append((s, bounds[k], bounds[k + 1]))
            else:
                w.append((s, bounds[k], max(E.get(s, he), he)))
        windows[d] = w
    # ---- gaps ----
    gaps = []
    for d in devices:
        b = busy[d]
        starts = {}
        for e in act[d]:
            starts.setdefault(e.ts, []).append(e)
        for (s0, e0), (s1, _) in zip(b, b[1:]):
            if s1 - e0 < GAP_MIN_NS:
                continue
            enders = starts[s1]
            marked = [e for e in enders if e.marker]
            if not marked:
                raise AssertionError(
                    f"unexpected gap on {d}: [{e0}, {s1}) ({(s1 - e0) / 1000:.1f} µs), ended by "
                    f"{[x.name[:40] for x in enders]} launched under "
                    f"{[chain_names(x.launch) + [x.launch.name] if x.launch else None for x in enders]}")
            ender = marked[0]
            mk = ender.marker
            mk["_hit"] = True
            wf = ender.launch
            step = None
            for sid, a, bb in windows[d]:
                if a <= e0 < bb:
                    step = sid
                    break
            gap = {"device": d, "start_ns": e0, "end_ns": s1, "duration_ns": s1 - e0,
                   "step": step, "cause": mk["cause"],
                   "waited_for": {"name": wf.name, "enclosing": chain_names(wf),
                                  "thread": wf.track.info.get("label", ""),
                                  "start_ns": wf.ts, "end_ns": wf.end},
                   "ended_by": {"name": disp(ender),
                                "track": ender.track.info.get("label", ""),
                                "launched_by": ender.launch.name if ender.launch else None}}
            if mk.get("culprit") is not None:
                cu = mk["culprit"]
                gap["culprit"] = {"name": cu.name, "enclosing": chain_names(cu),
                                  "thread": cu.track.info.get("label", "")}
            if mk.get("note"):
                gap["note"] = mk["note"]
            gaps.append(gap)
    for e in evs:
        if e.marker and not e.marker.get("optional") and not e.marker.get("_hit"):
            raise AssertionError(f"injected gap missing before {e.name[:40]} at {e.ts} on "
                                 f"{e.track.device}")
    gaps.sort(key=lambda g: (g["start_ns"], g["device"]))
    # ---- duty cycles ----
    steps_out = []
    for k, sid in enumerate(step_ids):
        hs, he = host_steps[k][1], host_steps[k][2]
        entry = {"id": sid, "host_start_ns": hs, "host_end_ns": he}
        wins = {d: [w for w in windows[d] if w[0] == sid] for d in devices}
        first = devices[0]
        if wins[first]:
            entry["window_start_ns"] = wins[first][0][1]
            entry["window_end_ns"] = wins[first][0][2]
        entry["windows"] = {d: [wins[d][0][1], wins[d][0][2]] for d in devices if wins[d]}
        entry["busy_ns"] = {d: overlap(busy[d], wins[d][0][1], wins[d][0][2])
                            for d in devices if wins[d]}
        entry["duty_cycle"] = {d: round(entry["busy_ns"][d] / (wins[d][0][2] - wins[d][0][1]), 6)
                               for d in devices if wins[d]}
        steps_out.append(entry)
    whole = {}
    for d in devices:
        b = busy[d]
        tot = sum(e - s for s, e in b)
        whole[d] = {"first_activity_ns": b[0][0], "last_activity_end_ns": b[-1][1],
                    "busy_ns": tot, "duty_cycle": round(tot / (b[-1][1] - b[0][0]), 6)}
    out = {"devices": [dict(name=d, **counts[d]) for d in devices],
           "steps": steps_out, "gaps": gaps, "whole_trace": whole}
    lo = [g for g in gaps if g["cause"] == LAUNCH_OVERHEAD]
    if lo:
        per = {}
        for g in lo:
            p = per.setdefault(str(g["step"]), {"count": 0, "total_ns": 0})
            p["count"] += 1
            p["total_ns"] += g["duration_ns"]
        out["launch_overhead_gaps"] = {"count": len(lo),
                                       "total_ns": sum(g["duration_ns"] for g in lo),
                                       "per_step": per}
    if annotation is not None:
        out["annotation_device_time"] = annotation_time(act, devices, step_ids, annotation)
    return out


def annotation_time(act, devices, step_ids, scope_of):
    """Per step, per annotation: device time of the device ops it caused (scope_of(op)
    returns the annotations of one op)."""
    res = {}
    for sid in step_ids:
        per = {}
        for d in devices:
            for e in act[d]:
                if e.step != sid:
                    continue
                for sc in scope_of(e) or ():
                    per.setdefault(sc, []).append((e.ts, e.end))
        res[str(sid)] = {sc: {"sum_ns": sum(b - a for a, b in iv),
                              "union_ns": sum(b - a for a, b in merge(iv)),
                              "ops": len(iv)}
                         for sc, iv in sorted(per.items())}
    return res


DEFINITIONS = {
    "time_unit": "ns. Every *_ns value is an integer number of nanoseconds relative to the "
                 "start of the earliest complete event of the file (Kineto: 'ph':'X' events "
                 "other than the profiler's own 'Trace' span; XSpace: events of all planes' "
                 "lines). tb_perfdiag.load() uses the same origin: ps = ns * 1000.",
    "busy": "Busy set of a device: union over all its streams/lines of kernels + memcpy + "
            "memset (Kineto categories kernel/gpu_memcpy/gpu_memset; XSpace GPU 'Stream #…' "
            "lines; TPU: the 'XLA Ops' line only; gpu_user_annotation, cuda_sync, 'XLA "
            "Modules', 'Steps', 'XLA TraceMe' are not busy).",
    "gap": "A maximal interval of at least 5000 ns inside [first device activity start, last "
           "device activity end] where the busy set is empty. Every such gap is listed.",
    "steps": "Kineto: ProfilerStep#N (user_annotation) on the host; XSpace: host events with "
             "stats step_num and _r=1, or the device 'Steps' line when present (then a "
             "device's window is simply its Steps event). Device work belongs to the step "
             "whose host code launched it (correlation ids / flows / run ids).",
    "window": "Per device, h_k = host start of step k, E_k = end of the last device activity "
              "launched in step k on that device; b_0 = h_0, b_k = max(h_k, E_{k-1}); window "
              "k = [b_k, b_{k+1}); the last window is [b_last, max(E_last, host end of the "
              "last step)).",
    "duty_cycle": "|busy ∩ window| / |window| per device; whole trace: |busy| / (last "
                  "activity end − first activity start).",
    "gap_step": "The step whose window (on the gap's device) contains the gap start; null "
                "when none does.",
    "waited_for": "The host call that issued the device work that ended the gap: its launch "
                  "(cudaLaunchKernel / cudaMemcpyAsync / cuLaunchKernel / "
                  "TpuExecutable::Execute). 'enclosing' lists its enclosing host ops on its "
                  "own thread, outermost first (innermost last); 'ended_by' names the device "
                  "op that ended the gap and its launching call. 'culprit', where given, is "
                  "the host op behind the gap's cause when that is not the launch (the "
                  "TransferToDevice a TPU execution had to wait for).",
    "causes": list(CAUSES),
}
