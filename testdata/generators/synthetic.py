#!/usr/bin/env python3
"""Synthetic profiler traces with known, injected device idle gaps and their causes.

    python testdata/generators/synthetic.py
        (Re)writes every small scenario under testdata/synthetic/logdir/ and the ground
        truth in testdata/synthetic/MANIFEST.json.  Fixed seeds: byte-identical on rerun.

    python testdata/generators/synthetic.py --pod OUT_DIR --hosts 64 --events N \
            --stragglers 17,40 --stall-us 20000
        Writes a pod run: one XSpace per host (the --large XSpace job, own seed per host)
        in one capture folder; the straggler hosts spend --stall-us more in data loading
        every step.  OUT_DIR/POD_TRUTH.json names them.

    python testdata/generators/synthetic.py --large OUT --events N --format kineto|xspace
        Writes one large, realistic file of about N events for benchmarks, generated and
        written step by step (only the current step's events are ever held; XSpace lines
        are serialized in chunks): Kineto = a 24-layer transformer with gradient
        accumulation, DDP all-reduce on a NCCL stream, pinned H2D copies on a side stream,
        main/autograd/pin-memory threads, a stalled input pipeline every 10th batch;
        XSpace = PyTorch/XLA on a GPU (python / tf_pytorchxla / pt_autograd_0 threads,
        cuLaunchKernel ↔ kernel correlation ids, 2 kernel streams + a memcpy stream, an
        Hlo Proto with op_name scopes).  2 M events: Kineto ~25 s, ~410 MB, ~75 MB RSS;
        XSpace ~55 s, ~75 MB, ~200 MB RSS.

Each scenario is built by simulating a host (threads with nested ops that launch device
work) and a device (FIFO streams / XLA op lines).  Kernels queue behind each other with
sub-5 µs gaps, so the device is busy except where a scenario *injects* a gap; every
device op that ends an injected gap carries a marker with the cause and the host op the
device waited for.  After generating, the ground truth (busy set, gaps, step windows,
duty cycles, annotation device time) is computed independently with plain interval
arithmetic over the events written, and every gap found must be an injected one (and
vice versa) or the generator fails.  The definitions are those of GUIDE.md §4 and are
written into the manifest.

Only the standard library and protobuf (through tb_perfdiag/trace/xplane_pb.py, for the
XSpace message classes) are needed.
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT_DIR = ROOT / "testdata" / "synthetic"
LOGDIR = OUT_DIR / "logdir"
MANIFEST = OUT_DIR / "MANIFEST.json"

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

US = 1_000          # all times are integer nanoseconds
MS = 1_000_000
GAP_MIN_NS = 5 * US
ACTIVITY = ("kernel", "memcpy", "memset")

# cause vocabulary: tb_perfdiag/analysis/causes.py
HOST_SYNC = "host_sync"
COMPILATION = "compilation"
H2D_TRANSFER = "h2d_transfer"
DATA_LOADING = "data_loading"
HOST_COMPUTE = "host_compute"
LAUNCH_OVERHEAD = "launch_overhead"
COLLECTIVE_WAIT = "collective_wait"
UNTRACED = "untraced"
CAUSES = (HOST_SYNC, COMPILATION, H2D_TRANSFER, DATA_LOADING, HOST_COMPUTE, LAUNCH_OVERHEAD,
          COLLECTIVE_WAIT, UNTRACED)


# ======================================================================================
# In-memory timeline: tracks, events, host cursors, device streams
# ======================================================================================

class Ev:
    __slots__ = ("idx", "track", "name", "cat", "ts", "dur", "kind", "parent", "ext", "corr",
                 "args", "stats", "launch", "step", "marker", "meta")

    def __init__(self, idx, track, name, cat, ts, dur, kind, parent=None):
        self.idx = idx
        self.track = track
        self.name = name
        self.cat = cat
        self.ts = ts
        self.dur = dur
        self.kind = kind            # "host" | "kernel" | "memcpy" | "memset" | "dev_other"
        self.parent = parent
        self.ext = None             # Kineto External id
        self.corr = None            # correlation id (launch <-> device op)
        self.args = None            # extra Kineto args
        self.stats = None           # XSpace stats: [(name, type, value)]
        self.launch = None          # device op: the host event that launched it
        self.step = None            # device op: step whose host code launched it
        self.marker = None          # device op: it ends an injected gap
        self.meta = None            # "flow" (Kineto: write an ac2g start) or a dict of
        #                             XSpace extras (display name, metadata stats, op_name)

    @property
    def end(self):
        return self.ts + self.dur


class Track:
    def __init__(self, key, side, device=None, **info):
        self.key = key
        self.side = side            # "host" | "device"
        self.device = device        # display name of the device ("GPU 0", "TPU 1")
        self.info = info


class Timeline:
    """Events of one file (or, in --large mode, of the current chunk)."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.events: list = []
        self.tracks: dict = {}
        self._n = 0
        self._corr = 1000
        self._ext = 0
        self.pending = None         # marker for the next device op
        self.step = None            # step currently being generated (host side)

    def track(self, key, side, device=None, **info) -> Track:
        t = self.tracks.get(key)
        if t is None:
            t = self.tracks[key] = Track(key, side, device, **info)
        return t

    def add(self, track, name, cat, ts, dur, kind, parent=None) -> Ev:
        ev = Ev(self._n, track, name, cat, ts, dur, kind, parent)
        self._n += 1
        self.events.append(ev)
        return ev

    def next_corr(self) -> int:
        self._corr += self.rng.choice((1, 2, 2, 3))
        return self._corr

    def next_ext(self) -> int:
        self._ext += 1
        return self._ext

    def expect(self, cause, waited_for=None, optional=False, note=None):
        """The next device op launched ends an injected gap of this cause."""
        self.pending = {"cause": cause, "waited_for": waited_for, "optional": optional,
                        "note": note}


class Host:
    """A host thread: a cursor in time and a stack of open events."""

    def __init__(self, tl: Timeline, track: Track, t: int = 0):
        self.tl = tl
        self.track = track
        self.t = t
        self.stack: list = []

    @property
    def rng(self):
        return self.tl.rng

    def r(self, lo, hi) -> int:
        return self.tl.rng.randint(lo, hi)

    def open(self, name, cat="cpu_op", stats=None, args=None) -> Ev:
        ev = self.tl.add(self.track, name, cat, self.t, 0, "host",
                         self.stack[-1] if self.stack else None)
        ev.ext = self.tl.next_ext()
        ev.stats = stats
        ev.args = args
        self.stack.append(ev)
        return ev

    def close(self, tail=0) -> Ev:
        self.t += tail
        ev = self.stack.pop()
        ev.dur = self.t - ev.ts
        return ev

    def leaf(self, name, cat="cpu_op", dur=0, stats=None, args=None) -> Ev:
        ev = self.tl.add(self.track, name, cat, self.t, dur, "host",
                         self.stack[-1] if self.stack else None)
        ev.ext = self.tl.next_ext() if cat in ("cpu_op", "user_annotation") else \
            (self.stack[-1].ext if self.stack else 0)
        ev.stats = stats
        ev.args = args
        self.t += dur
        return ev

    def adv(self, dt):
        self.t += dt

    @contextmanager
    def span(self, name, cat="cpu_op", pre=0, post=0, stats=None, args=None):
        ev = self.open(name, cat, stats, args)
        self.t += pre
        yield ev
        self.close(post)

    def launch(self, stream, name, dur, kind="kernel", api="cudaLaunchKernel", api_dur=None,
               delay=None, blocking_ret=None, dev_args=None, dev_stats=None, api_stats=None,
               corr_stat=None, cat=None, not_before=None):
        """A runtime call that enqueues one device op on ``stream``.

        ``delay``: earliest device start after the call starts (default 2.5–4 µs).
        ``blocking_ret``: the call returns this long after the device op ends
        (synchronous copies); otherwise it lasts ``api_dur``.
        """
        rt_cat = "cuda_runtime"
        rt = self.tl.add(self.track, api, rt_cat, self.t, 0, "host",
                         self.stack[-1] if self.stack else None)
        rt.ext = self.stack[-1].ext if self.stack else 0
        rt.corr = self.tl.next_corr()
        rt.stats = list(api_stats or [])
        if corr_stat:
            rt.stats.append((corr_stat, "u", rt.corr))
        earliest = self.t + (delay if delay is not None else self.r(2500, 4000))
        dev = stream.run(name, dur, earliest, kind=kind, cat=cat, args=dev_args,
                         stats=dev_stats, not_before=not_before)
        dev.corr = rt.corr
        dev.launch = rt
        if corr_stat:
            dev.stats = list(dev.stats or []) + [(corr_stat, "u", rt.corr)]
        if blocking_ret is not None:
            rt.dur = dev.end + blocking_ret - rt.ts
        else:
            rt.dur = api_dur if api_dur is not None else self.r(4500, 7500)
        self.t = rt.ts + rt.dur
        return rt, dev


class Stream:
    """A FIFO device queue (CUDA stream, XLA op line)."""

    def __init__(self, tl: Timeline, track: Track, gap=(600, 2400)):
        self.tl = tl
        self.track = track
        self.gap = gap
        self.free = None            # end of the last op on this queue

    def run(self, name, dur, earliest, kind="kernel", cat=None, args=None, stats=None,
            not_before=None) -> Ev:
        start = earliest
        if self.free is not None:
            start = max(start, self.free + self.tl.rng.randint(*self.gap))
        if not_before is not None:
            start = max(start, not_before)
        ev = self.tl.add(self.track, name, cat or {"kernel": "kernel", "memcpy": "gpu_memcpy",
                                                   "memset": "gpu_memset"}.get(kind, kind),
                         start, dur, kind)
        ev.args = args
        ev.stats = list(stats) if stats else None
        ev.step = self.tl.step
        if self.tl.pending is not None and kind in ACTIVITY:
            ev.marker = self.tl.pending
            self.tl.pending = None
        self.free = start + dur
        return ev


def chain_names(ev) -> list:
    out = []
    p = ev.parent
    while p is not None:
        out.append(p.name)
        p = p.parent
    return out[::-1]


# ======================================================================================
# Ground truth: plain interval arithmetic over the events written
# ======================================================================================

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
            wf = mk["waited_for"] or ender.launch
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


# ======================================================================================
# Kineto (PyTorch profiler) Chrome-trace JSON
# ======================================================================================

def fts(ns: int) -> str:
    """µs with nanosecond decimals, as Kineto writes them."""
    return f"{ns // 1000}.{ns % 1000:03d}"


CBID = {"cudaLaunchKernel": 211, "cudaMemcpyAsync": 41, "cudaStreamSynchronize": 131,
        "cudaMemsetAsync": 51, "cudaStreamIsCapturing": 317, "cudaEventRecord": 135,
        "cudaStreamWaitEvent": 147, "cudaGetDevice": 17, "cudaEventQuery": 138}

A100 = {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85051572224,
        "computeMajor": 8, "computeMinor": 0, "maxThreadsPerBlock": 1024,
        "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
        "regsPerMultiprocessor": 65536, "warpSize": 32, "sharedMemPerBlock": 49152,
        "sharedMemPerMultiprocessor": 167936, "numSms": 108, "sharedMemPerBlockOptin": 166912}

_J = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _kernel_args(name: str) -> dict:
    """Stable launch configuration per kernel name (deterministic, no hash())."""
    h = 0
    for ch in name.encode():
        h = (h * 131 + ch) & 0xFFFFFFFF
    regs = (32, 40, 48, 64, 72, 96, 128)[h % 7]
    block = (128, 256, 512, 256)[(h >> 3) % 4]
    grid = 108 * (1 + (h >> 5) % 24)
    warps = min(64.0, round(grid * block / 32 / 108, 2))
    return {"registers per thread": regs, "shared memory": ((h >> 9) % 4) * 16384,
            "blocks per SM": round(grid / 108, 2), "warps per SM": warps,
            "grid": [grid, 1, 1], "block": [block, 1, 1],
            "est. achieved occupancy %": int(min(100, warps / 64 * 100))}


class KinetoWriter:
    """Streams one Kineto JSON file: header, events in chunks, footer."""

    def __init__(self, f, pid: int, t0_ns: int, base_ns: int, trace_name: str,
                 device_props=(A100,), gpu_ids=(0,)):
        self.f = f
        self.pid = pid
        self.t0 = t0_ns
        self.ev_idx = 0
        header = {"schemaVersion": 1, "deviceProperties": list(device_props),
                  "cupti_version": 24, "cuda_runtime_version": 12040,
                  "cuda_driver_version": 12040, "trace_id": "5F7C1E0B9D8A4B2CA3D6E1F0A9B8C7D6",
                  "record_shapes": 0, "host_name": "synthhost", "displayTimeUnit": "ms",
                  "baseTimeNanoseconds": base_ns}
        head = _J.encode(header)[:-1] + ',"traceEvents":[\n'
        f.write(head.encode())
        self.first = True
        self.gpu_ids = gpu_ids

    def _w(self, lines):
        if not lines:
            return
        s = ",\n".join(lines)
        if not self.first:
            s = ",\n" + s
        self.first = False
        self.f.write(s.encode())

    def metadata(self, threads, streams):
        """threads: [(tid, name)] of the host process; streams: [(device, stream)]."""
        ts = fts(self.t0)
        out = []
        pid = self.pid
        out.append(f'{{"ph":"M","name":"process_name","ts":{ts},"pid":{pid},"tid":0,'
                   f'"args":{{"name":"python"}}}}')
        out.append(f'{{"ph":"M","name":"process_labels","ts":{ts},"pid":{pid},"tid":0,'
                   f'"args":{{"labels":"CPU"}}}}')
        out.append(f'{{"ph":"M","name":"process_sort_index","ts":{ts},"pid":{pid},"tid":0,'
                   f'"args":{{"sort_index":{pid}}}}}')
        for d in self.gpu_ids:
            out.append(f'{{"ph":"M","name":"process_name","ts":{ts},"pid":{d},"tid":0,'
                       f'"args":{{"name":"python"}}}}')
            out.append(f'{{"ph":"M","name":"process_labels","ts":{ts},"pid":{d},"tid":0,'
                       f'"args":{{"labels":"GPU {d}"}}}}')
            out.append(f'{{"ph":"M","name":"process_sort_index","ts":{ts},"pid":{d},"tid":0,'
                       f'"args":{{"sort_index":{16777216 + d}}}}}')
        for tid, name in threads:
            out.append(f'{{"ph":"M","name":"thread_name","ts":{ts},"pid":{pid},"tid":{tid},'
                       f'"args":{{"name":{_J.encode(name)}}}}}')
            out.append(f'{{"ph":"M","name":"thread_sort_index","ts":{ts},"pid":{pid},'
                       f'"tid":{tid},"args":{{"sort_index":{tid}}}}}')
        for d, s in streams:
            out.append(f'{{"ph":"M","name":"thread_name","ts":{ts},"pid":{d},"tid":{s},'
                       f'"args":{{"name":"stream {s} "}}}}')
            out.append(f'{{"ph":"M","name":"thread_sort_index","ts":{ts},"pid":{d},"tid":{s},'
                       f'"args":{{"sort_index":{s}}}}}')
        self._w(out)

    def events(self, evs):
        """Write events (sorted here by start) with their ac2g flow pairs."""
        out = []
        t0 = self.t0
        enc = _J.encode
        for ev in sorted(evs, key=lambda e: (e.ts, -e.dur, e.idx)):
            info = ev.track.info
            pid, tid = info["pid"], info["tid"]
            head = (f'{{"ph":"X","cat":"{ev.cat}","name":{enc(ev.name)},"pid":{pid},"tid":{tid},'
                    f'"ts":{fts(t0 + ev.ts)},"dur":{fts(ev.dur)},"args":')
            if ev.kind == "host":
                if ev.cat == "cuda_runtime":
                    args = (f'{{"External id":{ev.ext},"cbid":{CBID.get(ev.name, 0)},'
                            f'"correlation":{ev.corr}}}')
                else:
                    args = f'{{"External id":{ev.ext},"Ev Idx":{self.ev_idx}}}'
                    self.ev_idx += 1
                out.append(head + args + "}")
                if ev.corr is not None and ev.meta == "flow":
                    out.append(f'{{"ph":"s","id":{ev.corr},"pid":{pid},"tid":{tid},'
                               f'"ts":{fts(t0 + ev.ts)},"cat":"ac2g","name":"ac2g"}}')
                continue
            ext = ev.launch.ext if ev.launch is not None else (ev.ext or 0)
            if ev.kind == "kernel":
                a = {"External id": ext, "queued": 0, "device": pid, "context": 1,
                     "stream": tid, "correlation": ev.corr}
                a.update(ev.args or _kernel_args(ev.name))
            elif ev.kind in ("memcpy", "memset"):
                a = {"External id": ext, "device": pid, "context": 1, "stream": tid,
                     "correlation": ev.corr}
                a.update(ev.args or {})
            elif ev.cat == "cuda_sync":
                a = {"External id": ext, "cuda_sync_kind": "Stream Sync", "stream": tid,
                     "correlation": ev.corr, "device": pid, "context": 1}
            else:
                a = {"External id": ext}
            out.append(head + enc(a) + "}")
            if ev.corr is not None and ev.kind in ACTIVITY + ("dev_other",) and \
                    ev.launch is not None:
                out.append(f'{{"ph":"f","id":{ev.corr},"pid":{pid},"tid":{tid},'
                           f'"ts":{fts(t0 + ev.ts)},"cat":"ac2g","name":"ac2g","bp":"e"}}')
        self._w(out)

    def footer(self, span_ns, trace_name):
        t0 = fts(self.t0)
        out = [f'{{"ph":"X","cat":"Trace","ts":{t0},"dur":{fts(span_ns)},"pid":"Spans",'
               f'"tid":"PyTorch Profiler","name":"PyTorch Profiler (0)","args":{{"Op count":0}}}}',
               f'{{"name":"process_sort_index","ph":"M","ts":{t0},"pid":"Spans","tid":0,'
               f'"args":{{"sort_index":536870912}}}}',
               f'{{"name":"Iteration Start: PyTorch Profiler","ph":"i","s":"g","pid":"Traces",'
               f'"tid":"Trace PyTorch Profiler","ts":{t0}}}',
               f'{{"name":"Record Window End","ph":"i","s":"g","pid":"","tid":"",'
               f'"ts":{fts(self.t0 + span_ns)}}}']
        self._w(out)
        self.f.write(("\n],\n" + f'"traceName":{_J.encode(trace_name)}' + "}\n").encode())


# ---- kernels and ops of a small segmentation network (names as CUDA 12 / PyTorch 2.x write them)
KN = {
    "conv": "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16"
            "_stage4_warpsize2x2x1_g1_tensor16x8x8_kernel",
    "dgrad": "sm80_xmma_dgrad_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16"
             "_stage4_warpsize2x2x1_g1_tensor16x8x8_kernel",
    "wgrad": "sm80_xmma_wgrad_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16"
             "_stage4_warpsize2x2x1_g1_tensor16x8x8_kernel",
    "bn": "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>"
          "(cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, "
          "float const*, float, float, float*, float*, float*, float*, float, float)",
    "bn_bwd": "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>(float, "
              "float, float, float, cudnnTensorStruct, float const*, cudnnTensorStruct, "
              "float const*, cudnnTensorStruct, float*, float const*, float*, float*, "
              "float const*, float const*, float)",
    "relu": "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous "
            "namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
            "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}"
            "::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, ...)",
    "relu_bwd": "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous "
                "namespace)::threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)"
                "::{lambda(float, float)#1}, at::detail::Array<char*, 3> >(int, ...)",
    "upsample": "void at::native::(anonymous namespace)::upsample_bilinear2d_out_frame<float, "
                "float>(int, float, float, bool, at::GenericPackedTensorAccessor<float, 4ul, "
                "at::DefaultPtrTraits, long>, at::GenericPackedTensorAccessor<float, 4ul, "
                "at::DefaultPtrTraits, long>)",
    "upsample_bwd": "void at::native::(anonymous namespace)::upsample_bilinear2d_backward_out_"
                    "frame<float, float>(unsigned long, int, int, int, int, int, int, float, "
                    "float, bool, float*, float const*)",
    "ne": "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)"
          "::CompareFunctor<long>, at::detail::Array<char*, 3> >(int, at::native::(anonymous "
          "namespace)::CompareFunctor<long>, at::detail::Array<char*, 3>)",
    "cub_count": "void at_cuda_detail::cub::DeviceReduceSingleTileKernel<at_cuda_detail::cub::"
                 "DeviceReducePolicy<int, int, at_cuda_detail::cub::Sum>::Policy600, "
                 "at_cuda_detail::cub::TransformInputIterator<bool, at::native::(anonymous "
                 "namespace)::NonZeroOp<bool>, bool const*, long>, int*, int, "
                 "at_cuda_detail::cub::Sum, int, int>(...)",
    "index": "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<"
             "at::native::index_kernel_impl<at::native::OpaqueType<4> >(at::TensorIteratorBase&,"
             " c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1}>"
             "(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, ...)"
             "::{lambda(int)#1}>(long, ...)",
    "log_softmax": "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float,"
                   " float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*,"
                   " float const*, int)",
    "nll": "void at::native::(anonymous namespace)::nll_loss2d_forward_kernel<float, float>"
           "(float*, float*, float const*, long const*, float const*, int, int, int, int, long)",
    "mean": "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
            "at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> >"
            "(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, "
            "unsigned int, float, 4>)",
    "fill": "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
            "at::detail::Array<char*, 1>)",
    "nll_bwd": "void at::native::(anonymous namespace)::nll_loss2d_backward_kernel<float>(float*,"
               " float const*, long const*, float const*, float const*, bool, int, int, int, "
               "int, long)",
    "log_softmax_bwd": "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, "
                       "float, float, at::native::(anonymous namespace)::LogSoftMaxBackward"
                       "Epilogue>(float*, float const*, float const*, int)",
    "index_put": "void at::native::(anonymous namespace)::indexing_backward_kernel<float, 4>("
                 "long const*, long const*, float const*, float*, long, long, long, long, bool)",
    "adamw": "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::("
             "anonymous namespace)::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous "
             "namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, "
             "float*, double, double, double, double, double, bool, float const*, float const*>"
             "(...)",
    "foreach_mul": "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
                   "(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous "
                   "namespace)::BinaryOpScalarFunctor<float, 2, 1, 1>, std::multiplies<float>, "
                   "float>(...)",
    "foreach_add": "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
                   "(anonymous namespace)::TensorListMetadata<3>, at::native::(anonymous "
                   "namespace)::BinaryOpListAlphaFunctor<float, 3, 2, 0>, std::plus<float>, "
                   "float>(...)",
    "norm": "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
            "at::native::NormTwoOps<float, float, float>, unsigned int, float, 4> >"
            "(at::native::ReduceOp<float, at::native::NormTwoOps<float, float, float>, "
            "unsigned int, float, 4>)",
    "cat": "void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<at::"
           "native::(anonymous namespace)::OpaqueType<4u>, unsigned int, 1, 128, 1>(...)",
    "clamp": "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)"
             "::clamp_max_scalar_kernel_impl(at::TensorIteratorBase&, c10::Scalar)::{lambda()#1}"
             "::operator()() const::{lambda()#8}::operator()() const::{lambda(float)#1}, "
             "at::detail::Array<char*, 2> >(int, ...)",
    "gemm": "ampere_sgemm_64x32_sliced1x4_tn",
    "gemm_bwd": "ampere_sgemm_32x128_nt",
    "bias_relu": "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous "
                 "namespace)::launch_clamp_scalar(...)::{lambda(float)#1}, "
                 "at::detail::Array<char*, 2> >(int, ...)",
}
MEMCPY_H2D_PINNED = "Memcpy HtoD (Pinned -> Device)"
MEMCPY_H2D_PAGEABLE = "Memcpy HtoD (Pageable -> Device)"
MEMCPY_D2H_PAGEABLE = "Memcpy DtoH (Device -> Pageable)"
DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"

# forward op kinds: (aten chain, [(kernel key, (lo µs, hi µs))], backward fn, backward chain,
# backward kernels)
FWD_OPS = {
    "conv": (["aten::conv2d", "aten::convolution", "aten::_convolution",
              "aten::cudnn_convolution"], [("conv", (150, 320))],
             "ConvolutionBackward0", ["aten::convolution_backward"],
             [("dgrad", (160, 330)), ("wgrad", (170, 340))]),
    "bn": (["aten::batch_norm", "aten::_batch_norm_impl_index", "aten::cudnn_batch_norm"],
           [("bn", (55, 95))], "CudnnBatchNormBackward0", ["aten::cudnn_batch_norm_backward"],
           [("bn_bwd", (70, 120))]),
    "relu": (["aten::relu_", "aten::clamp_min_"], [("relu", (32, 50))],
             "ReluBackward0", ["aten::threshold_backward"], [("relu_bwd", (34, 55))]),
    "upsample": (["aten::upsample_bilinear2d"], [("upsample", (60, 110))],
                 "UpsampleBilinear2DBackward0", ["aten::upsample_bilinear2d_backward"],
                 [("fill", (8, 12)), ("upsample_bwd", (70, 120))]),
}
SEG_MODEL = ["conv", "bn", "relu"] * 2 + ["conv", "upsample"]
TINY_SEG_MODEL = ["conv", "relu"]


class KinetoSim:
    """Host (main + autograd thread) and one GPU for the Kineto scenarios."""

    def __init__(self, seed: int, pid: int, streams=(7,)):
        self.rng = random.Random(seed)
        self.tl = Timeline(self.rng)
        self.pid = pid
        tl = self.tl
        self.main = Host(tl, tl.track(("h", pid), "host", pid=pid, tid=pid,
                                      label=f"thread {pid} (python)"))
        atid = pid + 161
        self.ag = Host(tl, tl.track(("h", atid), "host", pid=pid, tid=atid,
                                    label=f"thread {atid} (python)"))
        self.streams = {s: Stream(tl, tl.track(("d", 0, s), "device", "GPU 0", pid=0, tid=s,
                                               label=f"stream {s}")) for s in streams}
        self.s7 = self.streams[streams[0]]
        self.steps = []             # (step id, host start, host end)
        self.fwd_done = []          # forward op kinds of the current step (for backward)

    def r(self, lo_us, hi_us) -> int:
        return self.rng.randint(int(lo_us * US), int(hi_us * US))

    # ---- building blocks ----
    def op(self, h: Host, chain, kernels, stream=None, pre=(2.0, 5.0), post=(0.8, 2.0),
           launch_us=(4.5, 7.5), not_before=None):
        for name in chain:
            h.open(name, "cpu_op")
            h.adv(self.r(*pre))
        devs = []
        for key, (lo, hi) in kernels:
            rt, dev = h.launch(stream or self.s7, KN.get(key, key), self.r(lo, hi),
                               api_dur=self.r(*launch_us), not_before=not_before)
            rt.meta = "flow"
            devs.append(dev)
            h.adv(self.r(0.5, 1.5))
        for _ in chain:
            h.close(self.r(*post))
        return devs

    def cpu(self, h: Host, name, lo, hi, cat="cpu_op"):
        return h.leaf(name, cat, self.r(lo, hi))

    def runtime(self, h: Host, name, lo, hi):
        ev = h.leaf(name, "cuda_runtime", self.r(lo, hi))
        ev.corr = self.tl.next_corr()
        ev.meta = "flow"
        return ev

    def dataloader(self, dur_us=(80, 130)):
        h = self.main
        total = self.r(*dur_us)
        with h.span(DATALOADER, "user_annotation") as dl:
            end = dl.ts + total
            h.adv(self.r(8, 15))
            n = 0
            while h.t < end - 40 * US or n == 0:
                with h.span("aten::stack", "cpu_op"):
                    h.adv(self.r(3, 6))
                    with h.span("aten::cat", "cpu_op"):
                        h.adv(self.r(8, 30) if total < 1 * MS else self.r(200, 900))
                    h.adv(self.r(1, 3))
                n += 1
                if total >= 1 * MS:
                    self.cpu(h, "aten::to", 15, 40)
                    h.adv(self.r(100, 600))          # Python-side decode / augment
            h.t = max(h.t, end - 5 * US)
            h.adv(self.r(2, 5))

    def h2d(self, name_bytes, pageable, stage_us=None):
        """aten::to(device) of a host tensor: returns the copy's runtime call."""
        h = self.main
        with h.span("aten::to", "cpu_op", pre=self.r(2, 4), post=self.r(1, 2)):
            with h.span("aten::_to_copy", "cpu_op", pre=self.r(2, 4), post=self.r(1, 2)):
                self.cpu(h, "aten::empty_strided", 4, 9)
                with h.span("aten::copy_", "cpu_op", pre=self.r(3, 6), post=self.r(1, 3)):
                    nbytes = name_bytes
                    if pageable and stage_us:
                        stage = self.r(*stage_us)
                        dma = max(2 * US, int(nbytes / 24e9 * 1e9))      # ~24 GB/s
                        rt, dev = h.launch(self.s7, MEMCPY_H2D_PAGEABLE, dma, kind="memcpy",
                                           api="cudaMemcpyAsync", api_dur=stage,
                                           delay=stage - dma + self.r(120, 160),
                                           dev_args={"bytes": nbytes,
                                                     "memory bandwidth (GB/s)": round(
                                                         nbytes / dma, 6)})
                    else:
                        dma = max(1500, int(nbytes / 20e9 * 1e9))
                        rt, dev = h.launch(self.s7, MEMCPY_H2D_PAGEABLE if pageable
                                           else MEMCPY_H2D_PINNED, dma, kind="memcpy",
                                           api="cudaMemcpyAsync", api_dur=self.r(6, 11),
                                           dev_args={"bytes": nbytes,
                                                     "memory bandwidth (GB/s)": round(
                                                         nbytes / dma, 6)})
                    rt.meta = "flow"
        return rt, dev

    def forward(self, model=SEG_MODEL, scale=1.0, name="forward"):
        h = self.main
        self.fwd_done = []
        with h.span(name, "user_annotation", pre=self.r(3, 6), post=self.r(2, 4)):
            for kind in model:
                chain, kernels, *_ = FWD_OPS[kind]
                ks = [(k, (lo * scale, hi * scale)) for k, (lo, hi) in kernels]
                self.op(h, chain, ks)
                self.fwd_done.append((kind, scale))
                h.adv(self.r(1, 4))

    def plain_loss(self):
        h = self.main
        with h.span("aten::cross_entropy_loss", "cpu_op", pre=self.r(2, 4)):
            self.op(h, ["aten::log_softmax", "aten::_log_softmax"],
                    [("log_softmax", (45, 70))])
            self.op(h, ["aten::nll_loss_nd", "aten::nll_loss2d", "aten::nll_loss2d_forward"],
                    [("nll", (40, 60))])
        self.loss_bwd = [("NllLoss2DBackward0", ["aten::nll_loss2d_backward"],
                          [("fill", (9, 14)), ("nll_bwd", (40, 60))]),
                         ("LogSoftmaxBackward0", ["aten::_log_softmax_backward_data"],
                          [("log_softmax_bwd", (45, 70))])]

    def backward(self, scale=1.0):
        """loss.backward(): the autograd engine's device thread runs the backward ops."""
        m, a = self.main, self.ag
        a.t = max(a.t, m.t + self.r(10, 18))
        items = list(self.loss_bwd)
        for kind, sc in reversed(self.fwd_done):
            _, _, fn, chain, kernels = FWD_OPS[kind]
            items.append((fn, chain, [(k, (lo * sc, hi * sc)) for k, (lo, hi) in kernels]))
        for fn, chain, kernels in items:
            with a.span(f"autograd::engine::evaluate_function: {fn}", "cpu_op",
                        pre=self.r(2, 4), post=self.r(1, 2)):
                with a.span(fn, "cpu_op", pre=self.r(1.5, 3), post=self.r(0.5, 1.5)):
                    self.op(a, chain, kernels)
            a.adv(self.r(2, 5))
        m.t = a.t + self.r(6, 12)

    def optimizer(self, n_kernels=2, dur=(180, 320), name="Optimizer.step#AdamW.step"):
        h = self.main
        with h.span(name, "user_annotation", pre=self.r(6, 12), post=self.r(3, 6)):
            self.op(h, ["aten::_fused_adamw_"], [("adamw", dur)] * n_kernels,
                    pre=(8, 14))
        with h.span("Optimizer.zero_grad#AdamW.zero_grad", "user_annotation",
                    pre=self.r(12, 22), post=self.r(1, 3)):
            pass

    # ---- steps ----
    @contextmanager
    def step(self, n):
        h = self.main
        self.tl.step = n
        with h.span(f"ProfilerStep#{n}", "user_annotation", pre=self.r(3, 6),
                    post=self.r(4, 9)) as ev:
            yield ev
        self.steps.append((n, ev.ts, ev.end))

    def gpu_user_annotations(self, names):
        """Kineto's projection of record_function ranges onto the GPU streams."""
        tl = self.tl
        launched = {}
        for e in list(tl.events):
            if e.kind in ACTIVITY and e.launch is not None:
                p = e.launch.parent
                while p is not None:
                    if p.name in names:
                        launched.setdefault((p.idx, e.track.key), [p, e.track, []])[2].append(e)
                    p = p.parent
        for (_, _), (ann, track, devs) in sorted(launched.items(), key=lambda kv: kv[0]):
            s = min(d.ts for d in devs)
            e = max(d.end for d in devs)
            ev = tl.add(track, ann.name, "gpu_user_annotation", s, e - s, "dev_other")
            ev.ext = ann.ext


def write_kineto_file(sim: KinetoSim, path: Path, t0_ns: int, base_ns: int):
    tl = sim.tl
    path.parent.mkdir(parents=True, exist_ok=True)
    span = max(e.end for e in tl.events)
    threads = sorted({(t.info["tid"], t.info["label"]) for t in tl.tracks.values()
                      if t.side == "host"})
    streams = sorted({(t.info["pid"], t.info["tid"]) for t in tl.tracks.values()
                      if t.side == "device"})
    with open(path, "wb") as f:
        w = KinetoWriter(f, sim.pid, t0_ns, base_ns, trace_name=str(path.name))
        w.metadata(threads, streams)
        w.events(tl.events)
        w.footer(span, f"/tmp/logdir/{path.parent.name}/{path.name}")


# ---- Kineto scenarios ------------------------------------------------------------------

def _masked_loss(sim: KinetoSim):
    """MaskedLoss.forward › non_zero › aten::nonzero › cudaMemcpyAsync (D2H) +
    cudaStreamSynchronize; then aten::index launches the kernel that ends the gap."""
    h, tl, s7 = sim.main, sim.tl, sim.s7
    with h.span("MaskedLoss.forward", "user_annotation", pre=sim.r(4, 8), post=sim.r(2, 4)):
        sim.op(h, ["aten::ne"], [("ne", (30, 45))])
        h.adv(sim.r(2, 5))
        with h.span("non_zero", "user_annotation", pre=sim.r(3, 6), post=sim.r(2, 4)):
            with h.span("aten::nonzero", "cpu_op", pre=sim.r(4, 8), post=sim.r(2, 4)):
                rt, _ = h.launch(s7, KN["cub_count"], sim.r(6, 10), api_dur=sim.r(5, 7))
                rt.meta = "flow"
                h.adv(sim.r(2, 4))
                # the count goes to pageable host memory: the copy waits for the queue
                rt, mc = h.launch(s7, MEMCPY_D2H_PAGEABLE, sim.r(1.5, 2.5), kind="memcpy",
                                  api="cudaMemcpyAsync", blocking_ret=sim.r(5, 9),
                                  dev_args={"bytes": 8, "memory bandwidth (GB/s)": 0.004})
                rt.meta = "flow"
                sync = sim.runtime(h, "cudaStreamSynchronize", 3, 6)
                ds = max(mc.end, sync.ts)
                ev = tl.add(s7.track, "Stream Sync", "cuda_sync", ds, sync.end - ds, "dev_other")
                ev.launch, ev.corr = sync, sync.corr
                h.adv(sim.r(3, 6))
                sim.cpu(h, "aten::empty", 4, 8)
                h.adv(sim.r(2, 4))
                sim.cpu(h, "aten::resize_", 8, 14)
                h.adv(sim.r(25, 60))            # host-side bookkeeping of the result
        h.adv(sim.r(3, 6))
        # the next device op waits for all of the above: the injected host_sync gap
        tl.expect(HOST_SYNC)
        with h.span("aten::index", "cpu_op", pre=sim.r(4, 8), post=sim.r(2, 4)):
            sim.cpu(h, "aten::expand", 5, 9)
            h.adv(sim.r(2, 4))
            sim.cpu(h, "aten::_reshape_alias", 3, 6)
            h.adv(sim.r(30, 70))                # index computation on the host
            rt, _ = h.launch(s7, KN["index"], sim.r(70, 110))
            rt.meta = "flow"
            h.adv(sim.r(1, 3))
        sim.plain_loss()
        sim.op(h, ["aten::mean"], [("mean", (35, 50))])
    sim.loss_bwd = [("MeanBackward0", ["aten::div"], [("fill", (30, 42))])] + sim.loss_bwd + [
        ("IndexBackward0", ["aten::index_put_", "aten::_index_put_impl_"],
         [("fill", (30, 40)), ("index_put", (60, 90))])]


def scenario_kineto_sync_nonzero():
    sim = KinetoSim(seed=1101, pid=28417, streams=(7, 20))
    h = sim.main
    for n in range(10, 15):
        with sim.step(n):
            sim.dataloader()
            sim.h2d(8 * 3 * 256 * 256 * 4, pageable=False)
            sim.h2d(8 * 256 * 256 * 8, pageable=False)
            sim.forward()
            _masked_loss(sim)
            sim.backward()
            sim.optimizer()
            with h.span("ema_update", "user_annotation", pre=sim.r(4, 8), post=sim.r(2, 4)):
                sim.runtime(h, "cudaEventRecord", 2, 4)
                sim.runtime(h, "cudaStreamWaitEvent", 2, 3)
                nb = sim.s7.free
                sim.op(h, ["aten::_foreach_mul_"], [("foreach_mul", (40, 60))],
                       stream=sim.streams[20], not_before=nb)
                sim.op(h, ["aten::_foreach_add_"], [("foreach_add", (50, 70))],
                       stream=sim.streams[20])
    sim.gpu_user_annotations({"forward", "MaskedLoss.forward", "non_zero", "ema_update",
                              "Optimizer.step#AdamW.step"})
    desc = ("5 steps (ProfilerStep#10-14) of a small segmentation CNN on GPU 0 (stream 7, plus "
            "stream 20 for an EMA update that overlaps the next step). In every step "
            "MaskedLoss.forward › non_zero › aten::nonzero copies a count to pageable host "
            "memory (cudaMemcpyAsync D2H, blocking until the queue drains) and calls "
            "cudaStreamSynchronize; the GPU finishes the tiny D2H memcpy and then idles while the "
            "host finishes nonzero on the CPU and aten::index launches the next kernel.")
    return sim, desc, None


def scenario_kineto_data_loading():
    sim = KinetoSim(seed=2202, pid=31337)
    for i, n in enumerate(range(40, 45)):
        with sim.step(n):
            sim.dataloader(dur_us=(3500, 6500))
            if i > 0:
                sim.tl.expect(DATA_LOADING)
            sim.forward()
            sim.plain_loss()
            sim.backward()
            sim.optimizer()
    sim.gpu_user_annotations({"forward", "Optimizer.step#AdamW.step"})
    desc = ("5 steps (ProfilerStep#40-44). Each step starts with "
            f"{DATALOADER} taking 3.5-6.5 ms on the host (collate + decode, CPU only); the GPU "
            "drains the previous step's tail and idles until the first cudaLaunchKernel of the "
            "step's forward. Step 40's data loading precedes the first device activity, so it "
            "is not a gap by definition.")
    return sim, desc, None


def scenario_kineto_h2d_copy():
    sim = KinetoSim(seed=3303, pid=41999)
    for i, n in enumerate(range(100, 105)):
        with sim.step(n):
            sim.dataloader()
            if i > 0:
                sim.tl.expect(H2D_TRANSFER)
            sim.h2d(16 * 3 * 320 * 320 * 4, pageable=True, stage_us=(5500, 7000))
            sim.h2d(16 * 64 * 64 * 8, pageable=True)
            sim.forward()
            sim.plain_loss()
            sim.backward()
            sim.optimizer()
    sim.gpu_user_annotations({"forward", "Optimizer.step#AdamW.step"})
    desc = ("5 steps (ProfilerStep#100-104). Each step copies a 20 MB batch from pageable host "
            "memory: aten::to › aten::_to_copy › aten::copy_ › cudaMemcpyAsync stages it on the "
            "host for 5.5-7 ms while the GPU idles, then 'Memcpy HtoD (Pageable -> Device)' "
            "runs (its DMA outlives the call by ~0.15 ms). Step 100's copy precedes the first "
            "device activity, so it is not a gap by definition.")
    return sim, desc, None


def scenario_kineto_launch_bound():
    sim = KinetoSim(seed=4404, pid=52018)
    h, tl = sim.main, sim.tl
    n_params = 50
    for n in range(7, 11):
        with sim.step(n):
            sim.dataloader()
            sim.forward(model=TINY_SEG_MODEL)
            sim.plain_loss()
            sim.backward()
            with h.span("clip_gradients", "user_annotation", pre=sim.r(4, 8), post=sim.r(2, 4)):
                # Python-side grouping of the gradients while the GPU finishes backward
                lag = sim.s7.free - h.t
                h.adv(max(sim.r(15, 30), lag - sim.r(25, 45)))
                for p in range(n_params):
                    tl.expect(LAUNCH_OVERHEAD, optional=True)
                    sim.op(h, ["aten::linalg_vector_norm"], [("norm", (2.0, 3.0))],
                           pre=(2.0, 3.5), post=(0.8, 1.6), launch_us=(8.0, 10.0))
                    h.adv(sim.r(0.8, 2.0))
                for chain, k, rng_ in ((["aten::stack", "aten::cat"], "cat", (5, 8)),
                                       (["aten::_foreach_mul_"], "foreach_mul", (25, 35))):
                    tl.expect(LAUNCH_OVERHEAD, optional=True)
                    sim.op(h, chain, [(k, rng_)], launch_us=(8.0, 10.0))
                    h.adv(sim.r(1, 3))
            tl.expect(LAUNCH_OVERHEAD, optional=True)
            sim.optimizer(n_kernels=1, dur=(500, 640))
            tl.pending = None
    sim.gpu_user_annotations({"forward", "clip_gradients", "Optimizer.step#AdamW.step"})
    desc = (f"4 steps (ProfilerStep#7-10). After backward, clip_gradients computes a norm per "
            f"parameter without foreach: {n_params} aten::linalg_vector_norm ops, each launching "
            "one 2-3 µs reduce kernel with an 8-10 µs cudaLaunchKernel; the GPU runs ahead of "
            "the host and idles ~10 µs between kernels (launch overhead). Every such gap of "
            ">= 5 µs is listed; the first few kernels of the stretch still run from the "
            "backlog of backward, so they leave no gap.")
    return sim, desc, None


# ======================================================================================
# XSpace (xplane.pb)
# ======================================================================================

def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def pb_len(num: int, payload: bytes) -> bytes:
    return _varint((num << 3) | 2) + _varint(len(payload)) + payload


def pb_str(num: int, s: str) -> bytes:
    return pb_len(num, s.encode())


def pb_int(num: int, v: int) -> bytes:
    return _varint(num << 3) + _varint(v)


def hlo_proto(module: str, instructions) -> bytes:
    """A minimal serialized HloProto: hlo_module{name, entry_computation_name,
    computations[{name, instructions[{name, opcode, metadata{op_type, op_name,
    source_file, source_line}}]}]}."""
    ins = []            # joined once: += on bytes is quadratic in 100k-op modules
    for name, opcode, op_type, op_name, src, line in instructions:
        md = b""
        if op_type:
            md += pb_str(1, op_type)
        if op_name:
            md += pb_str(2, op_name)
        if src:
            md += pb_str(3, src) + pb_int(4, line)
        ins.append(pb_len(2, pb_str(1, name) + pb_str(2, opcode) + (pb_len(7, md) if md else b"")))
    comp = pb_str(1, "main.1") + b"".join(ins)
    mod = pb_str(1, module) + pb_str(2, "main.1") + pb_len(3, comp)
    return pb_len(1, mod)


def _xpb():
    from tb_perfdiag.trace.xplane_pb import XSpace, XPlane, XLine
    return XSpace, XPlane, XLine


class PlaneBuilder:
    """Interns event/stat metadata of one XPlane and sets stats."""

    def __init__(self, plane):
        self.pl = plane
        self.smd: dict = {}
        self.emd: dict = {}

    def sid(self, name: str) -> int:
        i = self.smd.get(name)
        if i is None:
            i = self.smd[name] = len(self.smd) + 1
            m = self.pl.stat_metadata[i]
            m.id = i
            m.name = name
        return i

    def set_stat(self, st, name, typ, val):
        st.metadata_id = self.sid(name)
        if typ == "i":
            st.int64_value = int(val)
        elif typ == "u":
            st.uint64_value = int(val)
        elif typ == "d":
            st.double_value = float(val)
        elif typ == "s":
            st.str_value = val
        elif typ == "b":
            st.bytes_value = val
        elif typ == "r":
            st.ref_value = self.sid(val)
        else:
            raise ValueError(typ)

    def eid(self, name: str, display: str = "", md_stats=()) -> int:
        i = self.emd.get(name)
        if i is None:
            i = self.emd[name] = len(self.emd) + 1
            m = self.pl.event_metadata[i]
            m.id = i
            m.name = name
            if display:
                m.display_name = display
            for st in md_stats:
                self.set_stat(m.stats.add(), *st)
        return i


def write_xspace_file(tl: Timeline, path: Path, plane_order, plane_stats=None,
                      metadata_events=(), offset_ns=1_250_000,
                      profile_start_epoch_ns=1_795_400_000_000_000_000, hostname="synthhost"):
    """Tracks carry info plane=, line_id=, line=; device tracks' events become lines of
    their plane.  Host lines share one timestamp; device lines start at their first
    event.  Times are written relative to the profile start (``offset_ns`` before t=0)."""
    XSpace, _, _ = _xpb()
    sp = XSpace()
    by_plane = {}
    for t in tl.tracks.values():
        by_plane.setdefault(t.info["plane"], []).append(t)
    evs_by_track = {}
    for e in tl.events:
        evs_by_track.setdefault(e.track.key, []).append(e)
    host_ts = offset_ns + min(e.ts for e in tl.events if e.track.side == "host")
    span = max(e.end for e in tl.events)
    for pid, pname in plane_order:
        pl = sp.planes.add()
        pl.id = pid
        pl.name = pname
        pb = PlaneBuilder(pl)
        if pname == "Task Environment":
            pb.set_stat(pl.stats.add(), "profile_start_time", "u", profile_start_epoch_ns)
            pb.set_stat(pl.stats.add(), "profile_stop_time", "u",
                        profile_start_epoch_ns + offset_ns + span + 2 * MS)
            continue
        if pname == "/host:metadata":
            for name, stats in metadata_events:
                pb.eid(name, md_stats=stats)
            continue
        for st in (plane_stats or {}).get(pname, ()):
            pb.set_stat(pl.stats.add(), *st)
        for t in sorted(by_plane.get(pname, []), key=lambda t: t.info.get("order", 0)):
            evs = sorted(evs_by_track.get(t.key, []), key=lambda e: (e.ts, -e.dur, e.idx))
            ln = pl.lines.add()
            ln.id = t.info["line_id"]
            ln.name = t.info["line"]
            if t.side == "host":
                ln.display_name = t.info["line"]
                ln.timestamp_ns = host_ts
            else:
                ln.timestamp_ns = offset_ns + (evs[0].ts if evs else 0)
            base_ps = ln.timestamp_ns * 1000
            for e in evs:
                meta = e.meta if isinstance(e.meta, dict) else {}
                x = ln.events.add()
                x.metadata_id = pb.eid(e.name, meta.get("display", ""), meta.get("md_stats", ()))
                x.offset_ps = (offset_ns + e.ts) * 1000 - base_ps
                x.duration_ps = e.dur * 1000
                for st in e.stats or ():
                    pb.set_stat(x.stats.add(), *st)
    sp.hostnames.append(hostname)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(sp.SerializeToString(deterministic=True))


def disp(ev) -> str:
    return ev.meta.get("display", ev.name) if isinstance(ev.meta, dict) else ev.name


class XlaHost:
    """The python and tf_pytorchxla threads of a PyTorch/XLA process (/host:CPU)."""

    def __init__(self, tl: Timeline):
        self.tl = tl
        self.rng = tl.rng
        self.py = Host(tl, tl.track(("h", "python"), "host", plane="/host:CPU",
                                    line_id=140213541771072, line="python", label="python",
                                    order=0))
        self.px = Host(tl, tl.track(("h", "px"), "host", plane="/host:CPU",
                                    line_id=140209163212352,
                                    line="tf_pytorchxla/140209163212352",
                                    label="tf_pytorchxla/140209163212352", order=1))
        self.flow = 1 << 20
        self.steps = []

    def r(self, lo_us, hi_us) -> int:
        return self.rng.randint(int(lo_us * US), int(hi_us * US))

    def next_flow(self) -> int:
        self.flow += self.rng.randint(1, 5)
        return self.flow

    @contextmanager
    def train_step(self, k):
        py = self.py
        self.tl.step = k
        with py.span("train_step", "xla", pre=self.r(20, 40), post=self.r(10, 25),
                     stats=[("_r", "i", 1), ("step_num", "i", k)]) as ev:
            yield ev
        self.steps.append((k, ev.ts, ev.end))

    def trace_block(self, name, lo_us, hi_us, children=()):
        py = self.py
        with py.span(name, "xla", pre=self.r(5, 15), post=self.r(3, 8)):
            if children:
                per = (lo_us + hi_us) / 2 / len(children)
                for c in children:
                    with py.span(c, "xla", pre=self.r(per * 0.7, per * 1.1), post=self.r(2, 5)):
                        pass
            else:
                py.adv(self.r(lo_us, hi_us))

    def transfer(self, dur_us, stream=None, nbytes=0, corr_stat="correlation_id"):
        """PjRtComputationClient::TransferToDevice (with its memcpy on a GPU stream)."""
        py = self.py
        with py.span("PjRtComputationClient::TransferToDevice", "xla", pre=self.r(6, 12),
                     post=self.r(3, 6)) as ev:
            if stream is not None:
                dma = max(2 * US, int(nbytes / 20e9 * 1e9))
                rt, dev = py.launch(stream, "MemcpyH2D", dma, kind="memcpy",
                                    api="cuMemcpyHtoDAsync", api_dur=self.r(5, 9),
                                    corr_stat=corr_stat,
                                    dev_stats=[("memcpy_details", "s",
                                                f"kind_src:pageable kind_dst:device "
                                                f"size:{nbytes} dest:0 async:1")])
                py.adv(self.r(3, 8))
            else:
                py.adv(self.r(dur_us * 0.95, dur_us * 1.05))
        return ev

    @contextmanager
    def step_marker(self, compile_ms=None, transfer_ms=None, graph_hash=None):
        """StepMarker › … › SyncTensorsGraphInternal; yields inside ScheduleSyncTensorsGraph
        right after ThreadpoolListener::Record, with the flow id for the executor thread."""
        py = self.py
        out = {}
        with py.span("StepMarker", "xla", pre=self.r(6, 12), post=self.r(4, 9)):
            with py.span("SyncLiveTensorsGraph", "xla", pre=self.r(3, 6), post=self.r(2, 4)):
                with py.span("SyncTensorsGraph", "xla", pre=self.r(4, 9), post=self.r(1, 3)):
                    with py.span("SyncTensorsGraphInternal", "xla", pre=self.r(1, 3),
                                 post=self.r(4, 9)):
                        py.leaf("CollectSyncTensors", "xla", self.r(15, 35))
                        py.adv(self.r(3, 8))
                        with py.span("ExtractIRAndPrepareXlaData_", "xla", pre=self.r(20, 40),
                                     post=self.r(8, 20)):
                            if transfer_ms:
                                out["transfer"] = self.transfer(transfer_ms * 1000)
                        py.adv(self.r(2, 6))
                        py.leaf("RunPostOrder", "xla", self.r(70, 140))
                        py.adv(self.r(5, 15))
                        if compile_ms:
                            with py.span("XLAGraphExecutor::Compile", "xla",
                                         stats=[("graph_hash", "r", graph_hash)]) as c:
                                out["compile"] = c
                                total = int(compile_ms * MS)
                                py.adv(self.r(1500, 3000))
                                with py.span("PjRtComputationClient::Compile", "xla",
                                             pre=self.r(200, 400), post=self.r(300, 600)):
                                    with py.span("PjRtStreamExecutorClient::Compile", "xla",
                                                 pre=self.r(100, 300), post=self.r(100, 200)):
                                        rest = total - 6 * MS
                                        py.leaf("GpuCompiler::RunHloPasses", "xla",
                                                int(rest * 0.58))
                                        py.adv(self.r(50, 120))
                                        with py.span("GpuCompiler::RunBackend", "xla",
                                                     pre=self.r(500, 900), post=self.r(200, 400)):
                                            py.leaf("NVPTXCompiler::CompileTargetBinary", "xla",
                                                    int(rest * 0.36))
                                py.adv(self.r(800, 1500))
                        with py.span("ScheduleSyncTensorsGraph", "xla", pre=self.r(3, 6),
                                     post=self.r(2, 5)):
                            py.leaf("TensorCollectionBarrier", "xla", self.r(10, 30))
                            py.adv(self.r(5, 12))
                            fid = self.next_flow()
                            py.leaf("ThreadpoolListener::Record", "xla", 0,
                                    stats=[("_pt", "i", 15), ("_p", "i", fid)])
                            out["flow"] = fid
                            yield out
                        # bookkeeping goes on while the executor thread launches
                        py.t = max(py.t, self.px.t + self.r(10, 25))

    def executor_region(self, fid):
        px = self.px
        px.t = max(px.t, self.py.t + self.r(15, 30))
        px.leaf("ThreadpoolListener::StartRegion", "xla", 0,
                stats=[("_ct", "i", 15), ("_c", "i", fid)])
        px.adv(self.r(20, 60))


# ---- XLA on GPU: recompilation --------------------------------------------------------

def gpu_program(scale):
    """(hlo op, kernel name, stream, lo µs, hi µs, op_name, op_type) in device order; the
    scheduler moves the updates of dense_3/dense_2 next to their gradients."""
    ops = []

    def add(hlo, stream, lo, hi, op_name, op_type):
        ops.append((hlo, hlo.replace(".", "_"), stream, lo * scale, hi * scale, op_name, op_type))

    for i in range(4):
        add(f"gemm_fusion_dot.{10 + i}", 7, 300, 420, f"train_step/forward/dense_{i}/dot_general",
            "dot_general")
        add(f"loop_add_fusion.{20 + i}", 7, 70, 100, f"train_step/forward/dense_{i}/gelu", "add")
    add("input_reduce_fusion.3", 7, 60, 90, "train_step/forward/loss/log_softmax", "reduce")
    add("loop_select_fusion.1", 7, 50, 80, "train_step/forward/loss/nll_loss", "select")
    add("copy.7", 7, 45, 70, "", "")
    for i in (3, 2, 1, 0):
        add(f"loop_multiply_fusion.{30 + i}", 7, 70, 100,
            f"train_step/backward/dense_{i}/gelu_grad", "multiply")
        add(f"gemm_fusion_dot.{40 + i}", 7, 300, 420,
            f"train_step/backward/dense_{i}/dot_general", "dot_general")
        add(f"gemm_fusion_dot.{50 + i}", 14 if i % 2 else 7, 280, 400,
            f"train_step/backward/dense_{i}/dot_general.1", "dot_general")
        add(f"input_reduce_fusion.{60 + i}", 7, 50, 80,
            f"train_step/backward/dense_{i}/reduce_sum", "reduce")
        if i >= 2:
            add(f"loop_adam_fusion.{70 + i}", 7, 90, 140,
                f"train_step/optimizer/adamw/dense_{i}/update", "add")
    for i in (1, 0):
        add(f"loop_adam_fusion.{70 + i}", 7, 90, 140,
            f"train_step/optimizer/adamw/dense_{i}/update", "add")
    return ops


def scenario_xla_gpu_recompile():
    rng = random.Random(5505)
    tl = Timeline(rng)
    xh = XlaHost(tl)
    py, px = xh.py, xh.px
    plane = "/device:GPU:0"
    s7 = Stream(tl, tl.track(("d", 7), "device", "GPU 0", plane=plane, line_id=7,
                             line="Stream #7(Kernel)", label="Stream #7(Kernel)", order=0))
    s14 = Stream(tl, tl.track(("d", 14), "device", "GPU 0", plane=plane, line_id=14,
                              line="Stream #14(Kernel)", label="Stream #14(Kernel)", order=1))
    s21 = Stream(tl, tl.track(("d", 21), "device", "GPU 0", plane=plane, line_id=21,
                              line="Stream #21(MemcpyH2D)", label="Stream #21(MemcpyH2D)",
                              order=2))
    streams = {7: s7, 14: s14}
    programs = {1: ("SyncTensorsGraph.412", gpu_program(1.0)),
                2: ("SyncTensorsGraph.418", gpu_program(1.18))}
    compile_ms = {0: 300, 3: 250}
    hashes = {1: "9c1e5b07a3d24f6e81b2c4d5e6f70812", 2: "4a7d93e0c1b25f68d9e0a1b2c3d4e5f6"}
    for k in range(6):
        prog = 1 if k < 3 else 2
        module, ops = programs[prog]
        with xh.train_step(k):
            with py.span("data_loading", "xla", pre=xh.r(500, 800), post=xh.r(5, 10)):
                xh.transfer(0, stream=s21, nbytes=32 * 3 * 224 * 224 * 4)
                py.adv(xh.r(5, 10))
                xh.transfer(0, stream=s21, nbytes=32 * 8)
            xh.trace_block("forward", 900, 1100, children=("dense_0", "dense_1", "dense_2",
                                                           "dense_3", "loss"))
            xh.trace_block("backward", 650, 850)
            xh.trace_block("optimizer", 300, 420)
            with xh.step_marker(compile_ms=compile_ms.get(k), graph_hash=hashes[prog]) as sm:
                xh.executor_region(sm["flow"])
                with px.span("PjRtComputationClient::ExecuteComputation", "xla",
                             pre=xh.r(20, 40), post=xh.r(10, 20)):
                    with px.span("PjRtStreamExecutorLoadedExecutable::Execute", "xla",
                                 pre=xh.r(30, 60), post=xh.r(8, 15)):
                        last7 = None
                        for j, (hlo, kname, st, lo, hi, op_name, op_type) in enumerate(ops):
                            if j == 0 and k in compile_ms:
                                tl.expect(COMPILATION, note=(
                                    "the python thread is in StepMarker › … › "
                                    "XLAGraphExecutor::Compile › PjRtComputationClient::"
                                    "Compile (%s)" % ("first compilation of the step graph"
                                                      if k == 0 else
                                                      "recompilation: new input shape")))
                            stats = [("hlo_op", "r", hlo), ("hlo_module", "r", module),
                                     ("program_id", "i", prog),
                                     ("kernel_details", "s",
                                      "regs:64 static_shared:0 dynamic_shared:49152 "
                                      "grid:216,1,1 block:256,1,1 occ_pct:50.0")]
                            nb = last7.ts if (st == 14 and last7 is not None) else None
                            rt, dev = px.launch(streams[st], kname, xh.r(lo, hi),
                                                api="cuLaunchKernel", api_dur=xh.r(3, 5),
                                                corr_stat="correlation_id", dev_stats=stats,
                                                not_before=nb)
                            dev.meta = {"op_name": op_name}
                            if st == 7:
                                last7 = dev
                            px.adv(xh.r(1, 3))
                px.leaf("ThreadpoolListener::StopRegion", "xla", 0)
    meta = []
    for prog, (module, ops) in programs.items():
        ins = [(hlo, "fusion" if "fusion" in hlo else "copy", op_type, op_name,
                "/workspace/train.py" if op_name else "", 40 + j)
               for j, (hlo, _, _, _, _, op_name, op_type) in enumerate(ops)]
        meta.append((f"{module}({prog})", [("Hlo Proto", "b", hlo_proto(module, ins))]))
    desc = ("PyTorch/XLA on one GPU, 6 steps (train_step step_num 0-5, _r=1) with xp.Trace "
            "blocks data_loading/forward/backward/optimizer. StepMarker › … › "
            "XLAGraphExecutor::Compile › PjRtComputationClient::Compile runs on steps 0 "
            "(300 ms) and 3 (250 ms, a new input shape → module SyncTensorsGraph.418); the GPU "
            "idles until the tf_pytorchxla thread's first cuLaunchKernel after the compile. "
            "Step 0's gap starts after the input MemcpyH2D (the first device activity). "
            "Kernels carry correlation_id (= their cuLaunchKernel's), hlo_op, hlo_module, "
            "program_id; /host:metadata holds one Hlo Proto per module whose op_name scopes "
            "(train_step/<scope>/…) give the annotation device time. The XLA scheduler "
            "interleaves optimizer updates of dense_3/dense_2 with backward ops, and "
            "Stream #14 runs some weight-gradient GEMMs concurrently with Stream #7.")

    def scope(e):
        on = (e.meta or {}).get("op_name") if isinstance(e.meta, dict) else None
        if not on:
            return None
        parts = on.split("/")
        return [parts[1]] if len(parts) > 1 else None

    extra = {"plane_order": [(0, "/host:metadata"), (0, "/host:CPU"), (1, plane),
                             (0, "Task Environment")],
             "metadata_events": meta, "scope": scope,
             "plane_stats": {plane: [("device_type_string", "s", "NVIDIA A100-SXM4-80GB"),
                                     ("devcap_cores_per_sm", "u", 64),
                                     ("devcap_num_sms", "u", 108)]},
             "annotation_definition": (
                 "device ops whose HLO op_name (from the /host:metadata Hlo Proto joined on "
                 "(hlo_module, program_id, hlo_op)) has this second path component "
                 "(train_step/<scope>/…); per step (the step that launched the op); sum_ns = "
                 "sum of op durations, union_ns = length of their union (Stream #14 overlaps "
                 "Stream #7). copy.7 has no op_name and is not attributed.")}
    return tl, xh.steps, desc, extra


# ---- XLA on TPU: two devices, collective wait, one host→device transfer ------------------

def _hlo_text(name, category, shape="bf16[256,1024]{1,0:T(8,128)(2,1)}"):
    op = {"all-reduce": "all-reduce", "convolution fusion": "fusion",
          "loop fusion": "fusion", "output fusion": "fusion"}.get(category, "fusion")
    if op == "all-reduce":
        return (f"%{name} = f32[4096,1024]{{1,0:T(8,128)}} all-reduce(f32[4096,1024]"
                f"{{1,0:T(8,128)}} %fusion.61), replica_groups={{{{0,1}}}}, to_apply=%add.1")
    return f"%{name} = {shape} fusion({shape} %param.{len(name)}), kind=kOutput, calls=%fused_computation.{name.split('.')[-1]}"


TPU_OPS = [("fusion.%d" % (10 + j), cat, lo, hi) for j, (cat, lo, hi) in enumerate(
    [("convolution fusion", 700, 900), ("loop fusion", 150, 250), ("convolution fusion", 800, 1000),
     ("output fusion", 300, 400), ("convolution fusion", 700, 900), ("loop fusion", 150, 250),
     ("convolution fusion", 900, 1100), ("output fusion", 300, 400),
     ("convolution fusion", 800, 1000), ("loop fusion", 200, 300),
     ("convolution fusion", 900, 1100), ("output fusion", 350, 450),
     ("convolution fusion", 800, 1000), ("loop fusion", 150, 250)])]


class TpuDevice:
    def __init__(self, tl, d, steps_line=True):
        plane = f"/device:TPU:{d}"
        self.name = f"TPU {d}"
        self.plane = plane
        self.ops = Stream(tl, tl.track(("tpu", d, "ops"), "device", self.name, plane=plane,
                                       line_id=3, line="XLA Ops", label="XLA Ops", order=2),
                          gap=(300, 1500))
        self.mod = tl.track(("tpu", d, "mod"), "device", self.name, plane=plane, line_id=2,
                            line="XLA Modules", label="XLA Modules", order=1)
        self.steps = tl.track(("tpu", d, "steps"), "device", self.name, plane=plane,
                              line_id=1, line="Steps", label="Steps", order=0) \
            if steps_line else None
        self.traceme = tl.track(("tpu", d, "traceme"), "device", self.name, plane=plane,
                                line_id=6, line="XLA TraceMe", label="XLA TraceMe", order=3)
        self.free = None
        self.module_ends = {}


TPU_PLANE_STATS = [("device_type_string", "s", "TPU v5 lite"),
                   ("peak_teraflops_per_second", "d", 197.0),
                   ("peak_hbm_bw_gigabytes_per_second", "d", 819.0)]


def _tpu_module(tl, xh, devs, k, module, prog, run_id, execs, op_scale, collective,
                first_markers=None):
    """Run one module on each TPU: compute ops, then (if ``collective``) a synchronized
    all-reduce; record module events.  execs[d] is the host launch for device d."""
    rng = tl.rng
    base = [rng.randint(lo * US, hi * US) for _, _, lo, hi in TPU_OPS]
    ready = {}
    starts = {}
    for di, dev in enumerate(devs):
        ex = execs[di]
        t0 = ex.end + rng.randint(6 * US, 12 * US)
        if dev.ops.free is not None:
            t0 = max(t0, dev.ops.free + rng.randint(2 * US, 4 * US))
        starts[di] = t0
        for j, (name, cat, _, _) in enumerate(TPU_OPS):
            if j == 0 and first_markers:
                tl.pending = dict(first_markers)
            ev = dev.ops.run(_hlo_text(name, cat), int(base[j] * op_scale[di]),
                             t0 if j == 0 else 0)
            ev.meta = {"display": name, "md_stats": [("hlo_category", "s", cat),
                                                     ("program_id", "u", prog)]}
            ev.stats = [("hlo_op", "s", name), ("hlo_module", "r", module),
                        ("program_id", "u", prog), ("run_id", "u", run_id)]
            ev.launch = ex
        ready[di] = dev.ops.free
    if collective:
        # both cores enter the all-reduce together, once the slower one is ready
        ar_start = max(ready.values()) + rng.randint(1600, 2400)
        dur = rng.randint(700 * US, 800 * US)
        for di, dev in enumerate(devs):
            if ar_start - ready[di] >= GAP_MIN_NS:
                tl.expect(COLLECTIVE_WAIT, note=(
                    f"{devs[1 - di].name} is still computing (its ops run 20% longer); "
                    f"all-reduce.5 was enqueued by TpuExecutable::Execute long before"))
                bar = tl.add(dev.traceme, "barrier-cores", "", ready[di], ar_start - ready[di],
                             "dev_other")
            ev = dev.ops.run(_hlo_text("all-reduce.5", "all-reduce"), dur, 0,
                             not_before=ar_start)
            assert ev.ts == ar_start
            ev.meta = {"display": "all-reduce.5", "md_stats": [("hlo_category", "s", "all-reduce"),
                                                               ("program_id", "u", prog)]}
            ev.stats = [("hlo_op", "s", "all-reduce.5"), ("hlo_module", "r", module),
                        ("program_id", "u", prog), ("run_id", "u", run_id),
                        ("all_reduce_unique_id", "u", 65537 + k)]
            ev.launch = execs[di]
    tl.pending = None
    for di, dev in enumerate(devs):
        end = dev.ops.free + rng.randint(1 * US, 3 * US)
        m = tl.add(dev.mod, f"{module}({prog})", "", starts[di] - rng.randint(300, 900),
                   end - starts[di], "dev_other")
        m.stats = [("run_id", "u", run_id), ("program_id", "u", prog), ("queue_id", "u", 0),
                   ("_ct", "i", 12), ("_c", "i", execs[di].meta["flow"])]
        m.step = k
        dev.module_ends[k] = dev.ops.free


def _tpu_execute(xh, fid, n_devices, run_id, replicated):
    px = xh.px
    xh.executor_region(fid)
    execs = []
    outer = "PjRtComputationClient::ExecuteReplicated" if replicated else \
        "PjRtComputationClient::ExecuteComputation"
    with px.span(outer, "xla", pre=xh.r(15, 30), post=xh.r(8, 15)):
        for d in range(n_devices):
            pflow = (run_id << 8) | (d + 1) | (1 << 40)
            ex = px.leaf("TpuExecutable::Execute", "xla", xh.r(30, 50),
                         stats=[("device_ordinal", "i", d), ("run_id", "i", run_id),
                                ("_pt", "i", 12), ("_p", "i", pflow)])
            ex.meta = {"flow": pflow}
            execs.append(ex)
            px.adv(xh.r(3, 8))
    px.leaf("ThreadpoolListener::StopRegion", "xla", 0)
    return execs


def _steps_line(tl, dev, step_ids):
    out = []
    prev = None
    for k in step_ids:
        end = dev.module_ends[k]
        start = prev if prev is not None else min(
            e.ts for e in tl.events if e.track is dev.ops.track)
        ev = tl.add(dev.steps, str(k), "", start, end - start, "dev_other")
        ev.stats = [("step_num", "i", k), ("group_id", "i", k)]
        out.append((k, start, end))
        prev = end
    return out


def scenario_xla_tpu_two_devices():
    rng = random.Random(6606)
    tl = Timeline(rng)
    xh = XlaHost(tl)
    py = xh.py
    devs = [TpuDevice(tl, 0), TpuDevice(tl, 1)]
    module, prog = "SyncTensorsGraph.220", 7
    steps = list(range(20, 25))
    h2d_step = 23
    for i, k in enumerate(steps):
        with xh.train_step(k):
            with py.span("data_loading", "xla", pre=xh.r(3600, 4200), post=xh.r(5, 10)):
                xh.transfer(40)
            xh.trace_block("forward", 1000, 1300, children=("encoder", "head", "loss"))
            xh.trace_block("backward", 700, 900)
            xh.trace_block("optimizer", 300, 450)
            with xh.step_marker(transfer_ms=30 if k == h2d_step else None) as sm:
                run_id = 300 + i
                execs = _tpu_execute(xh, sm["flow"], 2, run_id, replicated=True)
                first = None
                if k == h2d_step:
                    first = {"cause": H2D_TRANSFER, "waited_for": sm["transfer"],
                             "optional": False,
                             "note": ("StepMarker › … › ExtractIRAndPrepareXlaData_ › "
                                      "PjRtComputationClient::TransferToDevice uploads a "
                                      "1.5 GB host tensor before the execution can be "
                                      "scheduled; the op that ends the gap was launched by "
                                      "TpuExecutable::Execute right after it")}
                _tpu_module(tl, xh, devs, k, module, prog, run_id, execs, (1.0, 1.2),
                            collective=True, first_markers=first)
    dsteps = {d.name: _steps_line(tl, d, steps) for d in devs}
    desc = ("PyTorch/XLA on two TPU cores, 5 steps (step_num 20-24; device 'Steps' lines, "
            "one event per step named by its number). Each step's module "
            "(SyncTensorsGraph.220, launched by ExecuteReplicated › TpuExecutable::Execute "
            "per core, flows _pt/_p=12 → XLA Modules _ct/_c) runs 14 fusions and ends with "
            "all-reduce.5 on both cores; TPU 1's fusions run 20% longer, so TPU 0 idles "
            "before every all-reduce (collective_wait; an XLA TraceMe 'barrier-cores' spans "
            "it). In step 23, StepMarker › … › ExtractIRAndPrepareXlaData_ › "
            "PjRtComputationClient::TransferToDevice takes 30 ms; both cores drain their "
            "queue during it and idle until the transfer completes (h2d_transfer).")
    extra = {"plane_order": [(0, "/host:metadata"), (0, "/host:CPU"), (1, "/device:TPU:0"),
                             (2, "/device:TPU:1"), (0, "Task Environment")],
             "device_steps": dsteps,
             "plane_stats": {"/device:TPU:0": TPU_PLANE_STATS,
                             "/device:TPU:1": TPU_PLANE_STATS}}
    return tl, xh.steps, desc, extra


def scenario_xla_tpu_data_loading():
    rng = random.Random(7707)
    tl = Timeline(rng)
    xh = XlaHost(tl)
    py = xh.py
    dev = TpuDevice(tl, 0, steps_line=False)
    module, prog = "SyncTensorsGraph.97", 3
    steps = list(range(100, 105))
    for i, k in enumerate(steps):
        with xh.train_step(k):
            with py.span("data_loading", "xla", pre=xh.r(19200, 20800), post=xh.r(5, 10)):
                xh.transfer(40)
            xh.trace_block("forward", 450, 550, children=("encoder", "head"))
            xh.trace_block("backward", 300, 400)
            xh.trace_block("optimizer", 150, 250)
            with xh.step_marker() as sm:
                run_id = 900 + i
                execs = _tpu_execute(xh, sm["flow"], 1, run_id, replicated=False)
                first = None
                if i > 0:
                    first = {"cause": DATA_LOADING, "waited_for": None, "optional": False,
                             "note": ("the python thread spends ~20 ms in the data_loading "
                                      "xp.Trace at the start of the step")}
                _tpu_module(tl, xh, [dev], k, module, prog, run_id, execs, (0.62,),
                            collective=False, first_markers=first)
    desc = ("PyTorch/XLA on one TPU core, 5 steps (step_num 100-104, no device 'Steps' "
            "line: steps come from the host's train_step events). Each step starts with a "
            "20 ms data_loading xp.Trace (ending in a tiny TransferToDevice); the module "
            "(ExecuteComputation › TpuExecutable::Execute, ~6 ms of ops) is launched after "
            "it, so the core idles ~15 ms per step (data_loading). Step 100's data loading "
            "precedes the first device activity, so it is not a gap by definition.")
    extra = {"plane_order": [(0, "/host:metadata"), (0, "/host:CPU"), (1, "/device:TPU:0"),
                             (0, "Task Environment")],
             "plane_stats": {"/device:TPU:0": TPU_PLANE_STATS}}
    return tl, xh.steps, desc, extra


# ======================================================================================
# --large: one big realistic file for benchmarks, generated and written step by step
# ======================================================================================

TRANSFORMER_FWD = [
    (["aten::layer_norm", "aten::native_layer_norm"], "layer_norm", (18, 30)),
    (["aten::linear", "aten::addmm"], "gemm_qkv", (60, 110)),
    (["aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
      "aten::_flash_attention_forward"], "flash_fwd", (90, 160)),
    (["aten::linear", "aten::addmm"], "gemm_out", (30, 60)),
    (["aten::add"], "add", (10, 18)),
    (["aten::layer_norm", "aten::native_layer_norm"], "layer_norm", (18, 30)),
    (["aten::linear", "aten::addmm"], "gemm_fc1", (110, 190)),
    (["aten::gelu"], "gelu", (20, 35)),
    (["aten::linear", "aten::addmm"], "gemm_fc2", (110, 190)),
    (["aten::add"], "add", (10, 18)),
]
TRANSFORMER_BWD = [
    ("AddBackward0", [], []),
    ("AddmmBackward0", ["aten::mm"], [("gemm_bwd_fc2", (110, 190)), ("gemm_wgrad_fc2", (110, 190))]),
    ("GeluBackward0", ["aten::gelu_backward"], [("gelu_bwd", (25, 40))]),
    ("AddmmBackward0", ["aten::mm"], [("gemm_bwd_fc1", (110, 190)), ("gemm_wgrad_fc1", (110, 190))]),
    ("NativeLayerNormBackward0", ["aten::native_layer_norm_backward"], [("ln_bwd", (30, 50))]),
    ("AddmmBackward0", ["aten::mm"], [("gemm_bwd_out", (30, 60)), ("gemm_wgrad_out", (30, 60))]),
    ("ScaledDotProductFlashAttentionBackward0", ["aten::_scaled_dot_product_flash_attention_backward",
                                                 "aten::_flash_attention_backward"],
     [("flash_bwd", (200, 330))]),
    ("AddmmBackward0", ["aten::mm"], [("gemm_bwd_qkv", (60, 110)), ("gemm_wgrad_qkv", (60, 110))]),
    ("NativeLayerNormBackward0", ["aten::native_layer_norm_backward"], [("ln_bwd", (30, 50))]),
]
LARGE_KN = {
    "layer_norm": "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
    "gemm_qkv": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "gemm_out": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "gemm_fc1": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas",
    "gemm_fc2": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_on_kernel__5x_cublas",
    "flash_fwd": "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
    "flash_bwd": "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<pytorch_flash::Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, false, true, false, false, false, false>(pytorch_flash::Flash_bwd_params)",
    "add": "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)",
    "gelu": "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >(int, ...)",
    "gelu_bwd": "void at::native::vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, at::detail::Array<char*, 3> >(int, ...)",
    "ln_bwd": "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::BFloat16, float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16 const*, c10::BFloat16*, int)",
    "nccl": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "adamw": KN["adamw"],
    "ce": "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, c10::BFloat16 const*, int)",
}
for _k in ("gemm_bwd_fc2", "gemm_wgrad_fc2", "gemm_bwd_fc1", "gemm_wgrad_fc1", "gemm_bwd_out",
           "gemm_wgrad_out", "gemm_bwd_qkv", "gemm_wgrad_qkv"):
    LARGE_KN[_k] = LARGE_KN["gemm_fc1" if "fc" in _k else "gemm_qkv"].replace(
        "_tn_", "_nn_" if "bwd" in _k else "_nt_")


class LargeKineto:
    """A GPT-like training job with data-parallel all-reduce, streamed step by step."""

    def __init__(self, f, seed, n_events):
        self.rng = random.Random(seed)
        self.tl = Timeline(self.rng)
        pid = 3117
        self.sim = KinetoSim.__new__(KinetoSim)
        sim = self.sim
        sim.rng, sim.tl, sim.pid = self.rng, self.tl, pid
        tl = self.tl
        sim.main = Host(tl, tl.track(("h", pid), "host", pid=pid, tid=pid,
                                     label=f"thread {pid} (python)"))
        sim.ag = Host(tl, tl.track(("h", pid + 161), "host", pid=pid, tid=pid + 161,
                                   label=f"thread {pid + 161} (python)"))
        self.pin = Host(tl, tl.track(("h", pid + 97), "host", pid=pid, tid=pid + 97,
                                     label=f"thread {pid + 97} (python)"))
        sim.streams = {s: Stream(tl, tl.track(("d", 0, s), "device", "GPU 0", pid=0, tid=s,
                                              label=f"stream {s}")) for s in (7, 20, 24)}
        sim.s7 = sim.streams[7]
        sim.steps, sim.fwd_done = [], []
        self.layers = 24
        per_mb = self.layers * 136 + 15            # events per micro-batch (measured)
        total_mb = max(4, n_events // per_mb)
        self.micro = max(1, min(16, total_mb // 8))
        self.target = n_events
        self.writer = KinetoWriter(f, pid, 4_462_354_505_660_805, 1_790_857_026_000_000_000,
                                   "large", device_props=[dict(A100, name="NVIDIA H100 80GB HBM3",
                                                               computeMajor=9, numSms=132)])
        threads = [(pid, f"thread {pid} (python)"), (pid + 97, f"thread {pid + 97} (python)"),
                   (pid + 161, f"thread {pid + 161} (python)")]
        self.writer.metadata(threads, [(0, 7), (0, 20), (0, 24)])
        self.written = 6 + 2 * 3 + 2 * 3

    def op(self, h, chain, kernels, stream=None, not_before=None):
        sim = self.sim
        for name in chain:
            h.open(name, "cpu_op")
            h.adv(sim.r(2.0, 5.0))
        for key, (lo, hi) in kernels:
            # a small model: the GPU is only slightly faster than the host can feed it
            rt, _ = h.launch(stream or sim.s7, LARGE_KN[key], sim.r(lo * 0.22, hi * 0.22),
                             api_dur=sim.r(4.0, 7.0), not_before=not_before)
            rt.meta = "flow"
            h.adv(sim.r(0.5, 1.5))
        for _ in chain:
            h.close(sim.r(0.8, 2.0))

    def micro_batch(self, step, mb):
        sim, h, a = self.sim, self.sim.main, self.sim.ag
        with h.span(f"micro_batch_{mb}", "user_annotation", pre=sim.r(3, 6), post=sim.r(2, 4)):
            with h.span(DATALOADER, "user_annotation", pre=sim.r(10, 20), post=sim.r(3, 6)):
                # every 10th batch the input pipeline stalls
                h.adv(sim.r(30, 80) if (step * self.micro + mb) % 10 != 4 else
                      sim.r(3000, 6000))
            p = self.pin
            p.t = max(p.t, h.t - sim.r(200, 400))
            with p.span("aten::pin_memory", "cpu_op", pre=sim.r(3, 6), post=sim.r(2, 4)):
                with p.span("aten::_pin_memory", "cpu_op", pre=sim.r(5, 10), post=sim.r(2, 4)):
                    p.leaf("aten::copy_", "cpu_op", sim.r(60, 140))
            with h.span("aten::to", "cpu_op", pre=sim.r(2, 4), post=sim.r(1, 2)):
                with h.span("aten::_to_copy", "cpu_op", pre=sim.r(2, 4), post=sim.r(1, 2)):
                    with h.span("aten::copy_", "cpu_op", pre=sim.r(3, 6), post=sim.r(1, 3)):
                        rt, _ = h.launch(sim.streams[24], MEMCPY_H2D_PINNED, sim.r(20, 40),
                                         kind="memcpy", api="cudaMemcpyAsync",
                                         api_dur=sim.r(6, 10),
                                         dev_args={"bytes": 1 << 20,
                                                   "memory bandwidth (GB/s)": 35.2})
                        rt.meta = "flow"
            fwd = []
            with h.span("forward", "user_annotation", pre=sim.r(4, 8), post=sim.r(2, 4)):
                for li in range(self.layers):
                    with h.span(f"TransformerBlock_{li}", "user_annotation", pre=sim.r(2, 4),
                                post=sim.r(1, 3)):
                        for chain, k, rng_ in TRANSFORMER_FWD:
                            self.op(h, chain, [(k, rng_)])
                            h.adv(sim.r(1, 3))
                    fwd.append(li)
                self.op(h, ["aten::cross_entropy_loss", "aten::log_softmax",
                            "aten::_log_softmax"], [("ce", (80, 120))])
            a.t = max(a.t, h.t + sim.r(10, 18))
            for li in reversed(fwd):
                for fn, chain, kernels in TRANSFORMER_BWD:
                    with a.span(f"autograd::engine::evaluate_function: {fn}", "cpu_op",
                                pre=sim.r(2, 4), post=sim.r(1, 2)):
                        with a.span(fn, "cpu_op", pre=sim.r(1.5, 3), post=sim.r(0.5, 1.5)):
                            if kernels:
                                self.op(a, chain, kernels)
                    a.adv(sim.r(2, 5))
                if li % 4 == 0:
                    with a.span("nccl:all_reduce", "user_annotation", pre=sim.r(3, 6),
                                post=sim.r(2, 4)):
                        with a.span("record_param_comms", "cpu_op", pre=sim.r(4, 8),
                                    post=sim.r(2, 4)):
                            self.op(a, [], [("nccl", (300, 700))], stream=sim.streams[20],
                                    not_before=sim.s7.free)
            h.t = a.t + sim.r(6, 12)
            if (step * self.micro + mb) % 7 == 3:
                # loss.item() for logging: a device→host sync
                with h.span("aten::item", "cpu_op", pre=sim.r(2, 4), post=sim.r(1, 2)):
                    with h.span("aten::_local_scalar_dense", "cpu_op", pre=sim.r(2, 4),
                                post=sim.r(1, 2)):
                        rt, mc = h.launch(sim.s7, MEMCPY_D2H_PAGEABLE, sim.r(1.5, 2.5),
                                          kind="memcpy", api="cudaMemcpyAsync",
                                          blocking_ret=sim.r(5, 9),
                                          dev_args={"bytes": 4, "memory bandwidth (GB/s)": 0.002})
                        rt.meta = "flow"
                        sim.runtime(h, "cudaStreamSynchronize", 3, 6)

    def run(self):
        sim, h = self.sim, self.sim.main
        n = self.written
        k = 0
        while k < 4 or n < self.target:
            k += 1
            with sim.step(1000 + k):
                for mb in range(self.micro):
                    self.micro_batch(k, mb)
                with h.span("Optimizer.step#AdamW.step", "user_annotation", pre=sim.r(6, 12),
                            post=sim.r(3, 6)):
                    self.op(h, ["aten::_fused_adamw_"], [("adamw", (400, 700))] * 6)
                with h.span("Optimizer.zero_grad#AdamW.zero_grad", "user_annotation",
                            pre=sim.r(12, 22), post=sim.r(1, 3)):
                    pass
            n += self.flush()
        span = max(sim.s7.free, sim.streams[20].free or 0, h.t)
        self.writer.footer(span, "large")
        return n + 4

    def flush(self):
        evs = self.tl.events
        n = len(evs) + sum(1 for e in evs if e.meta == "flow") + \
            sum(1 for e in evs if e.kind in ACTIVITY and e.launch is not None)
        self.writer.events(evs)
        self.tl.events = []
        return n


class LargeXSpace:
    """PyTorch/XLA on one GPU, written line by line in serialized chunks."""

    CHUNK = 20_000

    def __init__(self, seed, n_events, stall_us=0, hostname="synthhost"):
        _, XPlane, XLine = _xpb()
        self.XPlane, self.XLine = XPlane, XLine
        self.stall_ns = int(stall_us * US)     # extra host time in data_loading per step
        self.hostname = hostname
        self.rng = random.Random(seed)
        self.tl = Timeline(self.rng)
        self.xh = XlaHost(self.tl)
        tl = self.tl
        self.ag = Host(tl, tl.track(("h", "ag"), "host", plane="/host:CPU",
                                    line_id=140209146426944, line="pt_autograd_0",
                                    label="pt_autograd_0", order=2))
        plane = "/device:GPU:0"
        self.streams = {}
        for order, (sid, nm) in enumerate(((7, "Stream #7(Kernel)"), (14, "Stream #14(Kernel)"),
                                           (21, "Stream #21(MemcpyH2D)"))):
            self.streams[sid] = Stream(tl, tl.track(("d", sid), "device", "GPU 0", plane=plane,
                                                    line_id=sid, line=nm, label=nm, order=order))
        self.layers = 24
        self.steps = max(4, min(60, n_events // 60_000))
        per_step = n_events / self.steps
        self.kernels_per_layer = max(4, int((per_step - 30 - 4 * self.layers) / 2 / self.layers))
        self.planes = {"/host:CPU": XPlane(id=0, name="/host:CPU"),
                       plane: XPlane(id=1, name=plane)}
        self.builders = {k: PlaneBuilder(v) for k, v in self.planes.items()}
        self.lines = {}         # track key -> [header XLine, chunk XLine, [bytes]]
        self.base_ns = 1_000_000
        self.module = "SyncTensorsGraph.1337"
        self.ops = []           # (hlo name, op_name, op_type)
        self.count = 0

    def _line(self, t):
        ln = self.lines.get(t.key)
        if ln is None:
            hdr = self.XLine(id=t.info["line_id"], name=t.info["line"],
                             timestamp_ns=self.base_ns)
            if t.side == "host":
                hdr.display_name = t.info["line"]
            ln = self.lines[t.key] = [hdr, self.XLine(), [], t]
        return ln

    def flush_events(self, force=False):
        tl = self.tl
        for e in sorted(tl.events, key=lambda e: (e.ts, e.idx)):
            pb = self.builders[e.track.info["plane"]]
            ln = self._line(e.track)
            x = ln[1].events.add()
            meta = e.meta if isinstance(e.meta, dict) else {}
            x.metadata_id = pb.eid(e.name, meta.get("display", ""), meta.get("md_stats", ()))
            x.offset_ps = e.ts * 1000
            x.duration_ps = e.dur * 1000
            for st in e.stats or ():
                pb.set_stat(x.stats.add(), *st)
            if len(ln[1].events) >= self.CHUNK:
                ln[2].append(ln[1].SerializeToString())
                ln[1] = self.XLine()
        self.count += len(tl.events)
        tl.events = []
        if force:
            for ln in self.lines.values():
                if len(ln[1].events):
                    ln[2].append(ln[1].SerializeToString())
                    ln[1] = self.XLine()

    def step(self, k):
        xh, py, px, tl = self.xh, self.xh.py, self.xh.px, self.tl
        s7, s14, s21 = self.streams[7], self.streams[14], self.streams[21]
        with xh.train_step(k):
            with py.span("data_loading", "xla", pre=xh.r(300, 600) + self.stall_ns,
                         post=xh.r(5, 10)):
                xh.transfer(0, stream=s21, nbytes=64 * 2048 * 4)
                xh.transfer(0, stream=s21, nbytes=64 * 2048 * 4)
            with py.span("forward", "xla", pre=xh.r(10, 20), post=xh.r(5, 10)):
                for li in range(self.layers):
                    with py.span(f"layer_{li}", "xla", pre=xh.r(5, 10), post=xh.r(2, 5)):
                        with py.span("attention", "xla", pre=xh.r(20, 40), post=xh.r(2, 5)):
                            pass
                        with py.span("mlp", "xla", pre=xh.r(15, 30), post=xh.r(2, 5)):
                            pass
            if k % 5 == 2:
                a = self.ag
                a.t = max(a.t, py.t + xh.r(5, 10))
                with a.span("PjRtComputationClient::TransferToDevice", "xla", pre=xh.r(10, 20),
                            post=xh.r(3, 6)):
                    a.adv(xh.r(15, 30))
            xh.trace_block("backward", 400, 600)
            xh.trace_block("optimizer", 200, 300)
            with xh.step_marker(compile_ms=150 if k == 0 else None,
                                graph_hash="0d1f2e3c4b5a69788796a5b4c3d2e1f0") as sm:
                xh.executor_region(sm["flow"])
                with px.span("PjRtComputationClient::ExecuteComputation", "xla",
                             pre=xh.r(20, 40), post=xh.r(10, 20)):
                    with px.span("PjRtStreamExecutorLoadedExecutable::Execute", "xla",
                                 pre=xh.r(30, 60), post=xh.r(8, 15)):
                        last7 = None
                        j = 0
                        for phase, n_l in (("forward", 0.35), ("backward", 0.5),
                                           ("optimizer", 0.15)):
                            for li in range(self.layers):
                                for _ in range(max(1, int(self.kernels_per_layer * n_l))):
                                    if k == 0:
                                        self.ops.append((f"fusion.{j}", f"train_step/{phase}/"
                                                         f"layer_{li}/op_{j % 7}", "fusion"))
                                    st = 14 if (phase == "backward" and j % 3 == 0) else 7
                                    nb = last7.ts if (st == 14 and last7 is not None) else None
                                    rt, dev = px.launch(
                                        self.streams[st], f"fusion_{j}", xh.r(4, 18),
                                        api="cuLaunchKernel", api_dur=xh.r(2, 4),
                                        corr_stat="correlation_id", not_before=nb,
                                        dev_stats=[("hlo_op", "r", f"fusion.{j}"),
                                                   ("hlo_module", "r", self.module),
                                                   ("program_id", "i", 1)])
                                    if st == 7:
                                        last7 = dev
                                    px.adv(xh.r(0.5, 1.5))
                                    j += 1
                px.leaf("ThreadpoolListener::StopRegion", "xla", 0)

    def run(self, path: Path):
        for k in range(self.steps):
            self.step(k)
            self.flush_events()
        self.flush_events(force=True)
        meta = self.XPlane(id=0, name="/host:metadata")
        mb = PlaneBuilder(meta)
        ins = [(name, "fusion", op_type, op_name, "/workspace/train.py", 100 + i)
               for i, (name, op_name, op_type) in enumerate(self.ops)]
        mb.eid(f"{self.module}(1)", md_stats=[("Hlo Proto", "b", hlo_proto(self.module, ins))])
        env = self.XPlane(id=0, name="Task Environment")
        eb = PlaneBuilder(env)
        eb.set_stat(env.stats.add(), "profile_start_time", "u", 1_795_400_000_000_000_000)
        eb.set_stat(env.stats.add(), "profile_stop_time", "u",
                    1_795_400_000_000_000_000 + self.base_ns + self.xh.py.t + 10 * MS)
        with open(path, "wb") as f:
            f.write(pb_len(1, meta.SerializeToString(deterministic=True)))
            for pname, pl in self.planes.items():
                header = pl.SerializeToString(deterministic=True)
                lines = []
                for ln in sorted((v for v in self.lines.values()
                                  if v[3].info["plane"] == pname),
                                 key=lambda v: v[3].info.get("order", 0)):
                    body = ln[0].SerializeToString()
                    size = len(body) + sum(len(c) for c in ln[2])
                    lines.append((_varint((3 << 3) | 2) + _varint(size) + body, ln[2]))
                total = len(header) + sum(len(h) + sum(len(c) for c in cs) for h, cs in lines)
                f.write(_varint((1 << 3) | 2) + _varint(total))
                f.write(header)
                for h, cs in lines:
                    f.write(h)
                    for c in cs:
                        f.write(c)
                    cs.clear()
            f.write(pb_len(1, env.SerializeToString(deterministic=True)))
            f.write(pb_str(4, self.hostname))
        return self.count


def write_large(path: Path, n_events: int, fmt: str, seed: int = 12345) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "kineto":
        # OUT ending in .gz is written gzipped (level 1: the generator stays the bottleneck)
        opener = (lambda: gzip.open(path, "wb", compresslevel=1)) if path.suffix == ".gz" \
            else (lambda: open(path, "wb"))
        with opener() as f:
            return LargeKineto(f, seed, n_events).run()
    return LargeXSpace(seed, n_events).run(path)


def write_pod(out: Path, hosts: int, events: int, stragglers=(), stall_us=20_000,
              seed: int = 12345) -> dict:
    """A pod run: ``hosts`` XSpace files (one per host, own seed) in one capture folder;
    the ``stragglers`` spend ``stall_us`` more in data loading every step.  Returns the
    ground truth the pod summary must find."""
    folder = out / "plugins" / "profile" / "2026_11_23_10_00_00"
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"host{i:02d}" for i in range(hosts)]
    for i, name in enumerate(names):
        LargeXSpace(seed + i, events, stall_us if i in stragglers else 0,
                    hostname=name).run(folder / f"{name}.xplane.pb")
    truth = {"hosts": names, "stragglers": [names[i] for i in sorted(stragglers)],
             "straggler_cause": "data_loading", "stall_ns_per_step": int(stall_us * US)}
    (out / "POD_TRUTH.json").write_text(json.dumps(truth, indent=1))
    return truth


# ======================================================================================
# Driver: write every scenario and the manifest
# ======================================================================================

KINETO_SCENARIOS = [
    ("kineto_sync_nonzero", scenario_kineto_sync_nonzero),
    ("kineto_data_loading", scenario_kineto_data_loading),
    ("kineto_h2d_copy", scenario_kineto_h2d_copy),
    ("kineto_launch_bound", scenario_kineto_launch_bound),
]
XSPACE_SCENARIOS = [
    ("xla_gpu_recompile", scenario_xla_gpu_recompile),
    ("xla_tpu_two_devices", scenario_xla_tpu_two_devices),
    ("xla_tpu_data_loading", scenario_xla_tpu_data_loading),
]

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
    "waited_for": "The host op the device work that ended the gap depended on: the launch "
                  "of that work (cudaLaunchKernel / cudaMemcpyAsync / cuLaunchKernel / "
                  "TpuExecutable::Execute), or, for a host→device transfer on TPU, the "
                  "TransferToDevice that had to finish first. 'enclosing' lists its "
                  "enclosing host ops on its own thread, outermost first (innermost last); "
                  "'ended_by' names the device op that ended the gap and its launching call.",
    "causes": list(CAUSES),
}


def kineto_scope(e):
    if e.launch is None:
        return None
    out = []
    p = e.launch.parent
    while p is not None:
        if p.cat == "user_annotation" and not p.name.startswith("ProfilerStep#"):
            out.append(p.name)
        p = p.parent
    return out[::-1]


def _entry(name, fmt, rel_path, desc, gt, tl, extra=None):
    hosts = sorted({t.info["label"] for t in tl.tracks.values() if t.side == "host"})
    e = {"name": name, "path": rel_path, "format": fmt, "description": desc,
         "host_threads": hosts,
         "devices": gt["devices"],
         "expected_causes": sorted({g["cause"] for g in gt["gaps"]}),
         "steps": gt["steps"],
         "gaps": gt["gaps"],
         "whole_trace": gt["whole_trace"]}
    for k in ("launch_overhead_gaps", "annotation_device_time"):
        if k in gt:
            e[k] = gt[k]
    if extra:
        e.update(extra)
    return e


def build_small(verbose=True):
    entries = []
    for i, (name, fn) in enumerate(KINETO_SCENARIOS):
        sim, desc, _ = fn()
        ms = 1_795_400_000_000 + i * 61_000
        path = LOGDIR / name / f"worker0.{ms}.pt.trace.json"
        for old in (path.parent.glob("*.pt.trace.json*") if path.parent.exists() else ()):
            if old != path:
                old.unlink()
        t0 = 4_462_354_505_660_805 + i * 7_919_000_123
        write_kineto_file(sim, path, t0_ns=t0, base_ns=1_790_857_026_000_000_000)
        gt = ground_truth(sim.tl, sim.steps, annotation=kineto_scope)
        extra = {"annotation_definition": (
            "device ops launched (correlation) by host ops enclosed on the same thread by a "
            "user_annotation (record_function) other than ProfilerStep#N; per step; sum_ns "
            "= sum of op durations, union_ns = length of their union. Ops launched from the "
            "autograd thread have no enclosing annotation.")}
        entries.append(_entry(name, "kineto", str(path.relative_to(OUT_DIR)), desc, gt,
                              sim.tl, extra))
    for i, (name, fn) in enumerate(XSPACE_SCENARIOS):
        tl, steps, desc, extra = fn()
        run = f"2026_11_22_06_0{i}_00"
        path = LOGDIR / name / "plugins" / "profile" / run / "synthhost.xplane.pb"
        prof = path.parent.parent
        if prof.exists():
            for old in prof.rglob("*"):
                if old.is_file() and old != path:
                    old.unlink()
            for d in sorted(prof.iterdir()):
                if d.is_dir() and d != path.parent and not any(d.iterdir()):
                    d.rmdir()
        write_xspace_file(tl, path, extra["plane_order"], plane_stats=extra.get("plane_stats"),
                          metadata_events=extra.get("metadata_events", ()),
                          offset_ns=1_250_000 + i * 333_000,
                          profile_start_epoch_ns=1_795_400_000_000_000_000 + i * 10 ** 11)
        gt = ground_truth(tl, steps, device_steps=extra.get("device_steps"),
                          annotation=extra.get("scope"))
        ex = {}
        if "annotation_definition" in extra:
            ex["annotation_definition"] = extra["annotation_definition"]
        ex["step_source"] = "device Steps line" if extra.get("device_steps") else \
            "host train_step events (step_num, _r=1)"
        entries.append(_entry(name, "xspace", str(path.relative_to(OUT_DIR)), desc, gt, tl, ex))
    for e in entries:
        e["bytes"] = (OUT_DIR / e["path"]).stat().st_size
    manifest = {"about": "Synthetic traces with injected device idle gaps and their known "
                         "causes, written by testdata/generators/synthetic.py (fixed seeds; "
                         "rerunning rewrites identical bytes). Ground truth is computed by the "
                         "generator with plain interval arithmetic over the events it wrote.",
                "generator": "testdata/generators/synthetic.py",
                "gap_threshold_ns": GAP_MIN_NS,
                "definitions": DEFINITIONS,
                "files": entries}
    MANIFEST.write_text(dump_manifest(manifest))
    if verbose:
        total = 0
        for e in entries:
            total += e["bytes"]
            causes = {}
            for g in e["gaps"]:
                causes[g["cause"]] = causes.get(g["cause"], 0) + 1
            print(f"{e['path']}: {e['bytes']:,} bytes, "
                  f"{sum(d['events'] for d in e['devices'])} device events, gaps {causes}, "
                  f"duty {[round(v['duty_cycle'], 3) for v in e['whole_trace'].values()]}")
        print(f"total {total:,} bytes + MANIFEST.json {MANIFEST.stat().st_size:,} bytes")
    return entries


def dump_manifest(m) -> str:
    """Readable JSON with one gap (and one step) per line."""
    def enc(o, ind):
        pad = "  " * ind
        if isinstance(o, dict):
            if not o:
                return "{}"
            items = []
            for k, v in o.items():
                if k in ("gaps", "steps") and isinstance(v, list):
                    inner = ",\n".join(pad + "    " + json.dumps(x, ensure_ascii=False)
                                       for x in v)
                    items.append(f'{pad}  {json.dumps(k)}: [\n{inner}\n{pad}  ]' if v
                                 else f'{pad}  {json.dumps(k)}: []')
                else:
                    items.append(f"{pad}  {json.dumps(k)}: {enc(v, ind + 1)}")
            return "{\n" + ",\n".join(items) + "\n" + pad + "}"
        if isinstance(o, list) and o and any(isinstance(x, (dict, list)) for x in o):
            return "[\n" + ",\n".join(pad + "  " + enc(x, ind + 1) for x in o) + "\n" + pad + "]"
        return json.dumps(o, ensure_ascii=False)
    return enc(m, 0) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--large", metavar="OUT_PATH", help="write one large file for benchmarks")
    ap.add_argument("--events", type=int, default=2_000_000,
                    help="about how many events: Kineto counts every traceEvents entry "
                         "(flows included), XSpace every XEvent")
    ap.add_argument("--format", choices=("kineto", "xspace"), default="kineto")
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--pod", metavar="OUT_DIR",
                    help="write a pod run: --hosts XSpace files of about --events events each")
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--stragglers", default="17",
                    help="comma-separated host indices that stall in data loading every step")
    ap.add_argument("--stall-us", type=float, default=20_000)
    args = ap.parse_args(argv)
    if args.pod:
        t = time.time()
        strag = [int(x) for x in args.stragglers.split(",") if x.strip()]
        truth = write_pod(Path(args.pod), args.hosts, args.events, strag, args.stall_us,
                          args.seed)
        print(f"{args.pod}: {args.hosts} hosts, stragglers {truth['stragglers']} "
              f"in {time.time() - t:.1f} s")
        return 0
    if args.large:
        t = time.time()
        n = write_large(Path(args.large), args.events, args.format, args.seed)
        size = Path(args.large).stat().st_size
        print(f"{args.large}: {n:,} events, {size / 1e6:.1f} MB in {time.time() - t:.1f} s")
        return 0
    build_small()
    return 0


if __name__ == "__main__":
    sys.exit(main())
