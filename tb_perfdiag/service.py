"""Request handling behind the plugin routes: cache, paging, overlay.

Kept apart from ``plugin.py`` so it can be tested without a TensorBoard server.  Each
route method takes the typed parameters ``params.parse`` made and returns the JSON body
of a 200; every failure is raised (an ``errors.ApiError``, or a ``TraceError``), and
``plugin.py`` turns it into a response.
"""
from __future__ import annotations

import os
import threading

import numpy as np

from ._version import __version__
from .analysis import Options
from .analysis.diagnosis import gap_detail, host_context
from .analysis.timeline import lanes
from .analysis import causes as C
from .cache import DiagnosisCache
from .discovery import Catalog
from .errors import NotFound, TooLarge, TraceError, trace_error
from .pod import PodJob, analyse_file
from .progress import Progress
from .storage import file_identity
from .trace import load

DEFAULT_MAX_FILE_MB = float(os.environ.get("TB_PERFDIAG_MAX_FILE_MB", "4096"))
CAUSE_COLORS = {  # Chrome trace viewer reserved colour names
    C.HOST_SYNC: "terrible", C.COMPILATION: "bad", C.H2D_TRANSFER: "olive",
    C.DATA_LOADING: "yellow", C.HOST_COMPUTE: "rail_response", C.LAUNCH_OVERHEAD: "grey",
    C.COLLECTIVE_WAIT: "rail_animation", C.UNTRACED: "white",
}


MAX_POD_JOBS = 4      # finished pod summaries kept (their diagnoses stay in the cache)


class DiagnosisService:
    def __init__(self, catalog: Catalog, cache: DiagnosisCache | None = None,
                 max_file_mb: float = DEFAULT_MAX_FILE_MB):
        self.catalog = catalog
        self.cache = cache or DiagnosisCache(version=__version__)
        self.max_file_mb = max_file_mb
        self._contexts: dict = {}
        self._ctx_lock = threading.Lock()
        self._pods: dict = {}            # (run, options, file identities) → PodJob
        self._pods_lock = threading.Lock()
        self._progress: dict = {}        # cache key → Progress of the analysis under way
        self._progress_lock = threading.Lock()

    # ---- resolving a request to a file ----
    def _source(self, params):
        src = self.catalog.find(params.run, params.host, params.span)
        if src is None:
            raise NotFound("no such run/host/span in the logdir", run=params.run,
                           host=params.host)
        return src

    def _options(self, params) -> Options:
        return Options(threshold_us=params.threshold_us, kernels_only=params.kernels_only)

    def _diagnosis(self, params):
        """The diagnosis JSON of the file ``params`` name."""
        src = self._source(params)
        try:
            return self._diagnose_source(src, self._options(params))
        except TraceError as e:
            raise trace_error(e, run=params.run, host=params.host) from None

    @staticmethod
    def _identity(src):
        try:
            return file_identity(src.path)
        except OSError:
            raise NotFound("file disappeared", file=os.path.basename(src.path)) from None

    def _diagnose_source(self, src, opt: Options, compute_elsewhere=None):
        """The diagnosis JSON of one file, from the cache or computed once; by default in
        this process with progress reported, else by ``compute_elsewhere()`` (a pod
        worker).  An unreadable file raises its ``TraceError``."""
        if src.size > self.max_file_mb * 1e6:
            raise TooLarge(f"{os.path.basename(src.path)} is {src.size / 1e6:.0f} MB, over "
                           f"the {self.max_file_mb:.0f} MB budget; raise it with the "
                           f"TB_PERFDIAG_MAX_FILE_MB environment variable",
                           file=os.path.basename(src.path))
        ident = self._identity(src)
        key = (ident, opt.key())

        def compute():
            prog = Progress(os.path.basename(src.path))
            with self._progress_lock:
                self._progress[key] = prog
            try:
                if compute_elsewhere is not None:
                    prog.phase("analysing", "in a worker process")
                    return compute_elsewhere()
                return analyse_file(src.path, opt, prog)
            finally:
                prog.done()
                with self._progress_lock:      # the cache answers from now on
                    if self._progress.get(key) is prog:
                        del self._progress[key]
        result = self.cache.get_or_compute(key, compute)
        if "error" in result:                 # the cached failure (pod.analyse_file's shape)
            raise TraceError(result["file"], result["error"])
        return result["ok"]

    def hosts_json(self, params):
        """Per-host summary of a run (pods with many hosts): duty cycle, step time, worst
        gap, top finding, stragglers flagged against the median host.  The hosts are
        analysed in the background; each call answers with the rows done so far
        (``complete`` false until all are), or waits for all with ``wait=1``."""
        run = self.catalog.runs().get(params.run)
        if run is None:
            run = self.catalog.runs(refresh=True).get(params.run)
        if run is None:
            raise NotFound("no such run in the logdir", run=params.run)
        opt = self._options(params)
        sources = [self.catalog.find(run.name, h) for h in sorted({s.host for s in run.sources})]
        sources = [s for s in sources if s is not None]
        try:
            idents = tuple(file_identity(s.path) for s in sources)
        except OSError:
            raise NotFound("a file of this run disappeared; reload", run=run.name) from None
        key = (run.name, opt.key(), idents)
        with self._pods_lock:
            job = self._pods.pop(key, None)
            if job is None:
                job = PodJob(run.name, sources, opt,
                             lambda src, elsewhere: self._diagnose_source(src, opt, elsewhere))
            self._pods[key] = job                # most recent last
            while len(self._pods) > MAX_POD_JOBS:
                self._pods.pop(next(iter(self._pods)))
        if params.wait:
            job.wait()
        return job.snapshot()

    def status(self) -> dict:
        """Counters an operator (or a load test) can watch."""
        c = self.cache
        return {"analyses": c.computations, "cached": len(c._mem), "cache_bytes": c._size,
                "cache_limit_bytes": c.memory_bytes, "disk_cache": c.disk_dir or None,
                "max_file_mb": self.max_file_mb, "traces_in_memory": len(self._contexts)}

    # ---- routes ----
    def progress_json(self, params):
        """How far the analysis behind the same /diagnosis parameters is: ``state`` is
        ``running`` (with phase, text, fraction), ``done`` (the next /diagnosis answers
        from the cache) or ``idle`` (nothing asked for it yet)."""
        src = self._source(params)
        key = (self._identity(src), self._options(params).key())
        with self._progress_lock:
            prog = self._progress.get(key)
        if prog is not None:
            return {"state": "running", "file": prog.label, **prog.snapshot()}
        if self.cache.has(key):
            return {"state": "done", "file": os.path.basename(src.path)}
        return {"state": "idle", "file": os.path.basename(src.path)}

    def diagnosis_json(self, params):
        body = self._diagnosis(params)
        offset, limit = params.gaps_offset, params.gaps_limit
        gaps = body["gaps"]
        if params.step is not None:
            gaps = [g for g in gaps if g["step"] == params.step]
        out = dict(body)
        out["gaps"] = gaps[offset:offset + limit]
        out["gaps_total"] = len(gaps)
        out["gaps_offset"] = offset
        out["gaps_limit"] = limit
        return out

    def gap_json(self, params):
        gap_id = params.id
        body = self._diagnosis(params)
        for g in body["gaps"]:
            if g["id"] == gap_id:
                if not g.get("detail"):
                    g = self._detail(params, g)
                return g
        raise NotFound(f"no gap {gap_id!r} in this diagnosis")

    def _context(self, src):
        """(trace, host context) of a file, for requests that need the events again;
        kept for the two most recently used files (traces are big)."""
        ident = file_identity(src.path)
        with self._ctx_lock:
            hit = self._contexts.pop(ident, None)
            if hit is not None:
                self._contexts[ident] = hit
                return hit
        trace = load(src.path)
        hit = (trace, host_context(trace))
        with self._ctx_lock:
            self._contexts[ident] = hit
            while len(self._contexts) > 2:
                self._contexts.pop(next(iter(self._contexts)))
        return hit

    def _detail(self, params, gap: dict) -> dict:
        """Host-op detail of a gap outside the precomputed largest ones (cached)."""
        src = self._source(params)
        key = ("detail", file_identity(src.path), gap["id"])

        def compute():
            trace, ctx = self._context(src)
            return gap_detail(trace, gap, ctx)
        try:
            return self.cache.get_or_compute(key, compute)
        except TraceError:
            return gap

    def timeline_json(self, params):
        """Lanes of every track in [start_ns, end_ns] for a canvas ``width`` px wide."""
        self._diagnosis(params)
        src = self._source(params)
        lo, hi, width = params.start_ns, params.end_ns, params.width
        trace, ctx = self._context(src)       # a TraceError is the route's 422
        span_hi = int(trace.end.max()) if trace.n_events else 0
        lo_ps = int(max(lo, 0) * 1000)
        hi_ps = int(min(hi * 1000, span_hi))
        return lanes(trace, lo_ps, max(hi_ps, lo_ps + 1000), width, ctx["origin"])

    def overlay_json(self, params):
        """Chrome trace JSON: one track per device with a slice per gap, coloured by
        cause, plus the step windows — opens in the trace viewer, Perfetto and
        chrome://tracing."""
        body = self._diagnosis(params)
        events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "Diagnosis"}},
                  {"ph": "M", "name": "process_sort_index", "pid": 1, "args": {"sort_index": -1}}]
        tid = 1
        for d in body["devices"]:
            events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tid + d["id"],
                           "args": {"name": f"{d['name']} idle gaps"}})
        steps_tid = tid + len(body["devices"]) + 1
        events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": steps_tid,
                       "args": {"name": "Steps"}})
        for g in body["gaps"]:
            events.append({"ph": "X", "cat": "gap", "name": f"{C.LABELS[g['cause']]}",
                           "pid": 1, "tid": tid + g["device"], "ts": g["start_ns"] / 1000,
                           "dur": g["duration_ns"] / 1000, "cname": CAUSE_COLORS[g["cause"]],
                           "args": {"gap": g["id"], "cause": g["cause"],
                                    "evidence": g["evidence"],
                                    "waited_for": " › ".join(g["waited_for"]["chain"])
                                    if g["waited_for"] else ""}})
        for s in body["steps"]:
            events.append({"ph": "X", "cat": "step", "name": f"Step {s['id']}", "pid": 1,
                           "tid": steps_tid, "ts": s["start_ns"] / 1000,
                           "dur": (s["end_ns"] - s["start_ns"]) / 1000,
                           "args": {f"{body['devices'][int(k)]['name']} duty cycle":
                                    v["duty_cycle"] for k, v in s["devices"].items()}})
        if params.with_events:
            events.extend(self._events_around(params, body))
        return {"traceEvents": events, "displayTimeUnit": "ns",
                "otherData": {"source": body["source"]["path"], "tool": "tb-perfdiag"}}

    def _events_around(self, params, body, limit=20000):
        """The trace's own events in [start_us, end_us] (µs, trace-relative)."""
        src = self._source(params)
        lo = params.start_us * 1e6
        hi = params.end_us * 1e6
        try:
            trace = load(src.path)
        except TraceError:
            return []
        sel = np.flatnonzero((trace.ts < hi) & (trace.end > lo))[:limit]
        out = []
        for t in np.unique(trace.track[sel]).tolist():
            out.append({"ph": "M", "name": "thread_name", "pid": 2, "tid": t,
                        "args": {"name": trace.track_label[t]}})
        out.append({"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "Trace"}})
        for e in sel.tolist():
            out.append({"ph": "X", "name": trace.event_name(e), "pid": 2,
                        "tid": int(trace.track[e]), "ts": int(trace.ts[e]) / 1e6,
                        "dur": int(trace.dur[e]) / 1e6})
        return out
