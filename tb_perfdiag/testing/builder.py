"""Build a small trace in memory and read it with the real readers: a test reads like a
timeline and needs no file.

    >>> b = TraceBuilder()                      # Kineto; TraceBuilder("xspace") for XLA
    >>> main = b.thread("python main")
    >>> s7 = b.stream(gpu=0, stream=7)
    >>> with b.step(main, 1, 0, 1000):
    ...     k = b.kernel(s7, "gemm", 20, 100)
    ...     launch = b.launch(main, "cudaLaunchKernel", 10, 5, kernel=k)
    ...     sync = b.op(main, "cudaStreamSynchronize", 20, 200, cat="cuda_runtime")
    >>> trace = b.build()
    >>> trace.event_name(trace.parent[launch.index])
    'ProfilerStep#1'
    >>> int(trace.link_src[0]) == launch.index and int(trace.link_dst[0]) == k.index
    True

Times are µs (floats allowed; Kineto keeps nanoseconds, XSpace picoseconds).  Nesting is
by time, as in a real trace: ``with`` blocks only make the test read like one.  After
``build()`` every event's ``index`` is its row in the returned ``Trace``, whose times are
picoseconds after the earliest event.
"""
from __future__ import annotations

import bisect

import re

from ..trace import kineto as _kineto_reader
from .kineto import A100, CBID, Ns, kineto_bytes, process_events, thread_events
from .xspace import XSpaceWriter, hlo_proto, load_xspace, stat_list

_PLANE = re.compile(r"^/device:([A-Za-z_]+):(\d+)")


class Track:
    """A host thread or a device stream / XSpace line of a ``TraceBuilder``."""

    def __init__(self, side: str, name: str, label: str, **where):
        self.side = side            # "host" | "device"
        self.name = name            # thread / line name ("stream 7" for a Kineto stream)
        self.label = label          # the Trace's track label
        self.where = where          # Kineto pid/tid/gpu; XSpace plane/line_id

    def __repr__(self):
        return f"Track({self.label!r})"


class Event:
    """One event of a ``TraceBuilder``; ``index`` is its row in the Trace after
    ``build()``.  Usable as a context manager so nested ops read as nested."""

    def __init__(self, track, name, ts, dur, cat, fields):
        self.track, self.name, self.ts, self.dur, self.cat = track, name, ts, dur, cat
        self.fields = fields        # Kineto args / XSpace stats, display, metadata_stats
        self.corr = None            # correlation id shared by a launch and its device op
        self.kernel = None          # a launch: the device event it enqueues
        self.launched_by = None     # a device event: its launch
        self.extra = []             # XSpace: flow / correlation stats added by the builder
        self.index = None

    @property
    def end(self):
        return self.ts + self.dur

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __repr__(self):
        return f"Event({self.name!r}, {self.ts}, {self.dur}, {self.track.label!r})"


class TraceBuilder:
    """Tracks and events of one trace, in Kineto (default) or XSpace form.  Set
    ``header`` (Kineto top-level keys, e.g. ``distributedInfo``, or the profiler's log
    lines ``WARNING``/``INFO``), ``plane_stats`` (XSpace: plane name → stats) and
    ``space_warnings`` / ``space_errors`` (XSpace: what the profiler said) directly.

    >>> b = TraceBuilder("xspace")
    >>> py = b.thread("python")
    >>> s = b.stream(gpu=0, stream=7)
    >>> step = b.step(py, 3, 0, 500)
    >>> ln = b.launch(py, "cuLaunchKernel", 10, 4, kernel=b.kernel(s, "fusion_1", 20, 50))
    >>> t = b.build()
    >>> int(t.stat("step_num")[step.index]), int(t.link_dst[0]) == ln.kernel.index
    (3, True)
    """

    def __init__(self, format: str = "kineto", pid: int = 100):
        if format not in ("kineto", "xspace"):
            raise ValueError(f"format is 'kineto' or 'xspace', not {format!r}")
        self.format = format
        self.pid = pid
        self.tracks: list = []
        self.events: list = []
        self.flows: list = []           # (src, dst, id, Kineto cat, XSpace type)
        self.header: dict = {}          # Kineto top-level keys beyond the defaults
        self.plane_stats: dict = {}     # XSpace plane name -> stats
        self.modules: list = []         # XSpace (module, program id, [instructions])
        self.space_warnings: list = []  # XSpace.warnings
        self.space_errors: list = []    # XSpace.errors
        self._ids = 0

    @property
    def kineto(self) -> bool:
        return self.format == "kineto"

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    # ---- tracks ----
    def thread(self, name: str, tid: int | None = None) -> Track:
        """A host thread (XSpace: a line of ``/host:CPU``).

        >>> TraceBuilder().thread("python main")
        Track('python main')
        """
        if any(t.side == "host" and t.name == name for t in self.tracks):
            raise ValueError(f"a thread named {name!r} exists already")
        tid = self.pid + len(self.tracks) if tid is None else tid
        t = Track("host", name, name, pid=self.pid, tid=tid, plane="/host:CPU", line_id=tid)
        self.tracks.append(t)
        return t

    def stream(self, gpu: int = 0, stream: int = 7, name: str | None = None) -> Track:
        """A GPU stream (XSpace: line ``name`` or ``Stream #N`` of ``/device:GPU:N``).

        >>> TraceBuilder().stream(gpu=1, stream=13)
        Track('GPU 1 · stream 13')
        """
        if self.kineto:
            t = Track("device", f"stream {stream}", f"GPU {gpu} · stream {stream}", pid=gpu,
                      tid=stream, gpu=gpu)
            self.tracks.append(t)
            return t
        return self.line(f"/device:GPU:{gpu}", name or f"Stream #{stream}", stream)

    def line(self, plane: str, name: str, id: int | None = None) -> Track:
        """XSpace only: a line of any plane (``/device:TPU:0`` ``XLA Ops``, ``Steps``…).

        >>> TraceBuilder("xspace").line("/device:TPU:0", "XLA Ops")
        Track('TPU 0 · XLA Ops')
        """
        if self.kineto:
            raise ValueError("Kineto has no planes: use thread() or stream()")
        m = _PLANE.match(plane)
        side = "device" if m else "host"
        label = f"{m.group(1).upper()} {m.group(2)} · {name}" if m else name
        t = Track(side, name, label, plane=plane,
                  line_id=len(self.tracks) + 1 if id is None else id)
        self.tracks.append(t)
        return t

    # ---- events ----
    def op(self, track: Track, name: str, ts: float, dur: float, cat: str | None = None, *,
           args: dict | None = None, stats=None, display: str = "",
           metadata_stats=None) -> Event:
        """An event on any track.  ``cat`` (Kineto) defaults to ``cpu_op`` on a thread and
        ``kernel`` on a stream; ``args`` (Kineto) are merged into the event's args;
        ``stats`` (XSpace: dict or (name, type, value) triples, see
        ``tb_perfdiag.testing.xspace.stat_list``), ``display`` and ``metadata_stats``
        (set on the event's metadata) are XSpace's.

        >>> b = TraceBuilder()
        >>> b.op(b.thread("main"), "aten::mm", 0, 30, args={"Input Dims": [[2, 2]]}).cat
        'cpu_op'
        """
        if self.kineto and (stats or display or metadata_stats):
            raise ValueError("Kineto events have args, not stats/display/metadata_stats")
        if not self.kineto and (args or cat):
            raise ValueError("XSpace events have stats, not args/cat: kinds come from "
                             "names and lines")
        if cat is None and self.kineto:
            cat = "cpu_op" if track.side == "host" else "kernel"
        fields = dict(args or {}) if self.kineto else {
            "stats": stat_list(stats), "display": display,
            "metadata_stats": stat_list(metadata_stats)}
        ev = Event(track, name, ts, dur, cat, fields)
        self.events.append(ev)
        return ev

    def kernel(self, stream: Track, name: str, ts: float, dur: float, **kw) -> Event:
        """A kernel (Kineto ``kernel``; XSpace: an event on a ``Stream`` line)."""
        return self.op(stream, name, ts, dur, "kernel" if self.kineto else None, **kw)

    def memcpy(self, stream: Track, name: str, ts: float, dur: float, **kw) -> Event:
        """A copy: ``b.memcpy(s7, "Memcpy HtoD (Pageable -> Device)", 0, 40)`` (XSpace:
        the name must say memcpy, e.g. ``MemcpyH2D``)."""
        return self.op(stream, name, ts, dur, "gpu_memcpy" if self.kineto else None, **kw)

    def memset(self, stream: Track, name: str, ts: float, dur: float, **kw) -> Event:
        """A memset: ``b.memset(s7, "Memset (Device)", 0, 2)``."""
        return self.op(stream, name, ts, dur, "gpu_memset" if self.kineto else None, **kw)

    def launch(self, thread: Track, name: str, ts: float, dur: float, kernel: Event,
               cat: str = "cuda_runtime", **kw) -> Event:
        """A runtime call that enqueues ``kernel`` (any device event): both get one new
        correlation id (Kineto: ``args.correlation`` and an ac2g flow; XSpace: the
        ``correlation_id`` stat).

        >>> b = TraceBuilder()
        >>> k = b.kernel(b.stream(), "gemm", 20, 100)
        >>> b.launch(b.thread("main"), "cudaLaunchKernel", 10, 5, kernel=k).corr == k.corr
        True
        """
        ev = self.op(thread, name, ts, dur, cat if self.kineto else None, **kw)
        ev.kernel, kernel.launched_by = kernel, ev
        ev.corr = kernel.corr = self._next_id()
        if self.kineto:
            self.flows.append((ev, kernel, ev.corr, "ac2g", None))
        else:
            for e in (ev, kernel):
                e.extra.append(("correlation_id", "u", ev.corr))
        return ev

    def step(self, thread: Track, number: int, ts: float, dur: float,
             name: str = "train_step", **kw) -> Event:
        """A training step: Kineto ``ProfilerStep#N`` (user_annotation); XSpace ``name``
        with stats ``step_num`` and ``_r=1``.

        >>> b = TraceBuilder()
        >>> b.step(b.thread("main"), 4, 0, 100).name
        'ProfilerStep#4'
        """
        if self.kineto:
            return self.op(thread, f"ProfilerStep#{number}", ts, dur, "user_annotation", **kw)
        stats = stat_list(kw.pop("stats", None)) + [("_r", "i", 1), ("step_num", "i", number)]
        return self.op(thread, name, ts, dur, stats=stats, **kw)

    def flow(self, src: Event, dst: Event, cat: str = "ac2g", type: int = 1) -> int:
        """A flow from ``src`` to ``dst``, returning its id: Kineto ``s``/``f`` events of
        category ``cat``; XSpace producer stats ``_pt``/``_p`` on ``src`` and consumer
        stats ``_ct``/``_c`` on ``dst`` with context ``type``.

        >>> b = TraceBuilder("xspace")
        >>> py, px = b.thread("python"), b.thread("tf_pytorchxla")
        >>> b.flow(b.op(py, "Record", 0, 0), b.op(px, "StartRegion", 5, 0))
        1
        """
        fid = self._next_id()
        if self.kineto:
            self.flows.append((src, dst, fid, cat, type))
        else:
            src.extra += [("_pt", "i", type), ("_p", "i", fid)]
            dst.extra += [("_ct", "i", type), ("_c", "i", fid)]
        return fid

    def hlo_module(self, module: str, program_id: int, ops: dict) -> None:
        """XSpace: an Hlo Proto on ``/host:metadata``; ``ops`` maps HLO op name → op_name
        (or → (op_name, op_type), or → (op_name, op_type, HLO opcode); else ``fusion``).  Device ops join it through their ``hlo_op``,
        ``hlo_module`` and ``program_id`` stats.

        >>> TraceBuilder("xspace").hlo_module("jit_step", 1, {"fusion.1": "train/dense"})
        """
        ins = []
        for hlo_op, v in ops.items():
            # op_name, (op_name, op_type) or (op_name, op_type, opcode)
            op_name, op_type, opcode = ((v, "", "fusion") if isinstance(v, str) else
                                        (*v, "fusion") if len(v) == 2 else v)
            ins.append((hlo_op, opcode, op_type, op_name, "", 0))
        self.modules.append((module, program_id, ins))

    # ---- output ----
    def to_bytes(self) -> bytes:
        """The trace file's bytes (``*.pt.trace.json`` or ``*.xplane.pb``)."""
        return self._kineto_bytes() if self.kineto else self._xspace().to_bytes(["localhost"])

    def build(self):
        """The ``Trace`` read by the real reader; sets every event's ``index``."""
        if self.kineto:
            trace = _kineto_reader.read("memory.pt.trace.json", self._kineto_bytes())
        else:
            trace = load_xspace(self._xspace())
        self._set_indices(trace)
        return trace

    def _quantum(self) -> int:
        return 1000 if self.kineto else 1      # ps per written unit: Kineto keeps ns

    def _ps(self, us: float) -> int:
        q = self._quantum()
        return int(round(us * 1e6 / q)) * q

    def _set_indices(self, trace):
        by_key: dict = {}
        for i, (n, t, d) in enumerate(zip(trace.name.tolist(), trace.ts.tolist(),
                                          trace.dur.tolist())):
            by_key.setdefault((trace.strings[n], t, d), []).append(i)
        origin = min((self._ps(e.ts) for e in self.events), default=0)
        for ev in self.events:
            shown = ev.name if self.kineto else ev.fields["display"] or ev.name
            cands = by_key.get((shown, self._ps(ev.ts) - origin, self._ps(ev.dur)), [])
            labels = (ev.track.label, f"CPU (XLA) · {ev.track.name}")
            mine = [i for i in cands if trace.track_label[trace.track[i]] in labels] or cands
            ev.index = mine[0] if mine else None
            if mine:
                cands.remove(mine[0])

    def _kineto_bytes(self) -> bytes:
        ns = lambda us: Ns(self._ps(us) // 1000)  # noqa: E731
        gpus = sorted({t.where["gpu"] for t in self.tracks if t.side == "device"})
        meta = []
        for pid in sorted({t.where["pid"] for t in self.tracks if t.side == "host"}):
            meta += process_events(pid, "python", "CPU", pid)
        for g in gpus:
            meta += process_events(g, "python", f"GPU {g}", 16777216 + g)
        for t in self.tracks:
            name = t.name if t.side == "host" else f"{t.name} "
            meta += thread_events(t.where["pid"], t.where["tid"], name, t.where["tid"])
        ext = {}
        for ev in self.events:
            if ev.cat in ("cpu_op", "user_annotation"):
                ext[ev] = len(ext) + 1
        out = []
        for ev in self.events:
            w = ev.track.where
            args = {"External id": ext.get(ev) or self._enclosing_ext(ev, ext)}
            if ev.track.side == "device":
                args.update(device=w["gpu"], stream=w["tid"])
            elif ev.cat in ("cuda_runtime", "cuda_driver"):
                args["cbid"] = CBID.get(ev.name, 0)
            if ev.corr is not None:
                args["correlation"] = ev.corr
            args.update(ev.fields)
            out.append({"ph": "X", "cat": ev.cat, "name": ev.name, "pid": w["pid"],
                        "tid": w["tid"], "ts": ns(ev.ts), "dur": ns(ev.dur), "args": args})
        for src, dst, fid, cat, _ in self.flows:
            for ph, ev in (("s", src), ("f", dst)):
                f = {"ph": ph, "id": fid, "pid": ev.track.where["pid"],
                     "tid": ev.track.where["tid"], "ts": ns(ev.ts), "cat": cat, "name": cat}
                if ph == "f":
                    f["bp"] = "e"
                out.append(f)
        header = {"schemaVersion": 1, "deviceProperties": [dict(A100, id=g) for g in gpus],
                  "displayTimeUnit": "ms", **self.header}
        return kineto_bytes(meta + out, trace_name="memory", **header)

    def _enclosing_ext(self, ev: Event, ext: dict) -> int:
        """External id of the innermost cpu_op/user_annotation around ``ev`` on its thread
        (a device op: around its launch), 0 if none."""
        at = ev.launched_by if ev.track.side == "device" else ev
        if at is None:
            return 0
        index = self._ext_index(ext)
        got = index.get(id(at.track))
        if got is None:
            return 0
        starts, evs, reach = got
        # the candidates start at or before ``at``; walking back from the last of them,
        # none before ``i`` can end past ``at`` once the furthest end up to ``i`` falls short
        # (a long trace stays linear: no scan of every annotation per event)
        around = []
        i = bisect.bisect_right(starts, at.ts) - 1
        while i >= 0 and reach[i] >= at.end:
            e = evs[i]
            if e.end >= at.end:
                around.append(e)
            i -= 1
        return ext[min(around, key=lambda e: (e.dur, ext[e]))] if around else 0

    def _ext_index(self, ext: dict) -> dict:
        """Per thread, its events with an External id by start: (starts, events, the
        furthest end up to each), built once per ``ext``."""
        if getattr(self, "_ext_for", None) is not ext:
            by: dict = {}
            for e in ext:
                by.setdefault(id(e.track), []).append(e)
            index = {}
            for k, evs in by.items():
                evs.sort(key=lambda e: (e.ts, ext[e]))
                reach, far = [], float("-inf")
                for e in evs:
                    far = max(far, e.end)
                    reach.append(far)
                index[k] = ([e.ts for e in evs], evs, reach)
            self._ext_for, self._ext_idx = ext, index
        return self._ext_idx

    def _xspace(self) -> XSpaceWriter:
        ps = self._ps
        planes = {}
        if self.modules:
            planes["/host:metadata"] = []
        for t in sorted(self.tracks, key=lambda t: t.side != "host"):
            planes.setdefault(t.where["plane"], []).append(t)
        for p in self.plane_stats:
            planes.setdefault(p, [])
        w = XSpaceWriter()
        for pid, (pname, tracks) in enumerate(planes.items()):
            pb = w.plane(pname, pid, self.plane_stats.get(pname, ()))
            if pname == "/host:metadata":
                for module, prog, ins in self.modules:
                    pb.eid(f"{module}({prog})",
                           md_stats=[("Hlo Proto", "b", hlo_proto(module, ins))])
            for t in tracks:
                ln = pb.line(t.where["line_id"], t.name, 0,
                             display_name=t.name if t.side == "host" else "")
                for ev in sorted((e for e in self.events if e.track is t),
                                 key=lambda e: (e.ts, -e.dur)):
                    f = ev.fields
                    pb.event(ln, ev.name, ps(ev.ts), ps(ev.dur), f["stats"] + ev.extra,
                             f["display"], f["metadata_stats"])
        w.space.warnings.extend(self.space_warnings)
        w.space.errors.extend(self.space_errors)
        return w
