"""A simulated timeline written as a file, through tb_perfdiag.testing's writers: Kineto
JSON (events streamed in chunks) and XSpace protobuf."""
from __future__ import annotations

import json
from pathlib import Path

from sim import ACTIVITY, MS, Timeline
from tb_perfdiag.testing.kineto import (
    A100,
    CBID,
    KinetoJsonWriter,
    Ns,
    footer_events,
    fts,
    process_events,
    thread_events,
)
from tb_perfdiag.testing.xspace import XSpaceWriter

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
    """Streams one Kineto JSON file of simulated events: header, events in chunks, footer."""

    def __init__(self, f, pid: int, t0_ns: int, base_ns: int, trace_name: str,
                 device_props=(A100,), gpu_ids=(0,)):
        self.pid = pid
        self.t0 = t0_ns
        self.ev_idx = 0
        header = {"schemaVersion": 1, "deviceProperties": list(device_props),
                  "cupti_version": 24, "cuda_runtime_version": 12040,
                  "cuda_driver_version": 12040, "trace_id": "5F7C1E0B9D8A4B2CA3D6E1F0A9B8C7D6",
                  "record_shapes": 0, "host_name": "synthhost", "displayTimeUnit": "ms",
                  "baseTimeNanoseconds": base_ns}
        self.out = KinetoJsonWriter(f, header)
        self.gpu_ids = gpu_ids

    def metadata(self, threads, streams):
        """threads: [(tid, name)] of the host process; streams: [(device, stream)]."""
        ts = Ns(self.t0)
        out = process_events(self.pid, "python", "CPU", self.pid, ts)
        for d in self.gpu_ids:
            out += process_events(d, "python", f"GPU {d}", 16777216 + d, ts)
        for tid, name in threads:
            out += thread_events(self.pid, tid, name, tid, ts)
        for d, s in streams:
            out += thread_events(d, s, f"stream {s} ", s, ts)
        self.out.write(out)

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
                elif ev.args:
                    # record_shapes=True: the op's Input Dims / Input type / Concrete Inputs
                    args = (f'{{"External id":{ev.ext},{enc(ev.args)[1:-1]},'
                            f'"Ev Idx":{self.ev_idx}}}')
                    self.ev_idx += 1
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
        self.out.write(out)

    def footer(self, span_ns, trace_name):
        self.out.write(footer_events(self.t0, span_ns))
        self.out.close(trace_name)


def write_kineto_file(sim, path: Path, t0_ns: int, base_ns: int):
    """The timeline of a ``KinetoSim`` as one Kineto JSON file."""
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


def write_xspace_file(tl: Timeline, path: Path, plane_order, plane_stats=None,
                      metadata_events=(), offset_ns=1_250_000,
                      profile_start_epoch_ns=1_795_400_000_000_000_000, hostname="synthhost"):
    """Tracks carry info plane=, line_id=, line=; device tracks' events become lines of
    their plane.  Host lines share one timestamp; device lines start at their first
    event.  Times are written relative to the profile start (``offset_ns`` before t=0)."""
    w = XSpaceWriter()
    by_plane = {}
    for t in tl.tracks.values():
        by_plane.setdefault(t.info["plane"], []).append(t)
    evs_by_track = {}
    for e in tl.events:
        evs_by_track.setdefault(e.track.key, []).append(e)
    host_ts = offset_ns + min(e.ts for e in tl.events if e.track.side == "host")
    span = max(e.end for e in tl.events)
    for pid, pname in plane_order:
        if pname == "Task Environment":
            w.plane(pname, pid, [("profile_start_time", "u", profile_start_epoch_ns),
                                 ("profile_stop_time", "u",
                                  profile_start_epoch_ns + offset_ns + span + 2 * MS)])
            continue
        if pname == "/host:metadata":
            pb = w.plane(pname, pid)
            for name, stats in metadata_events:
                pb.eid(name, md_stats=stats)
            continue
        pb = w.plane(pname, pid, (plane_stats or {}).get(pname, ()))
        for t in sorted(by_plane.get(pname, []), key=lambda t: t.info.get("order", 0)):
            evs = sorted(evs_by_track.get(t.key, []), key=lambda e: (e.ts, -e.dur, e.idx))
            host = t.side == "host"
            ln = pb.line(t.info["line_id"], t.info["line"],
                         host_ts if host else offset_ns + (evs[0].ts if evs else 0),
                         display_name=t.info["line"] if host else "")
            base_ps = ln.timestamp_ns * 1000
            for e in evs:
                meta = e.meta if isinstance(e.meta, dict) else {}
                pb.event(ln, e.name, (offset_ns + e.ts) * 1000 - base_ps, e.dur * 1000,
                         e.stats or (), meta.get("display", ""), meta.get("md_stats", ()))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(w.to_bytes([hostname]))
