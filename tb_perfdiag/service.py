"""Request handling behind the plugin routes: parameter checks, cache, paging, overlay.

Kept apart from ``plugin.py`` so it can be tested without a TensorBoard server.
"""
from __future__ import annotations

import os
import threading

import numpy as np

from . import __version__
from .analysis import Options
from .analysis.diagnosis import gap_detail, host_context
from .analysis.timeline import lanes
from .analysis import causes as C
from .cache import DiagnosisCache
from .discovery import Catalog
from .pod import PodJob, analyse_file
from .progress import Progress
from .storage import file_identity
from .trace import TraceError, load

MAX_GAPS_PAGE = 100_000
DEFAULT_GAPS_PAGE = 200
DEFAULT_MAX_FILE_MB = float(os.environ.get("TB_PERFDIAG_MAX_FILE_MB", "4096"))
CAUSE_COLORS = {  # Chrome trace viewer reserved colour names
    C.HOST_SYNC: "terrible", C.COMPILATION: "bad", C.H2D_TRANSFER: "olive",
    C.DATA_LOADING: "yellow", C.HOST_COMPUTE: "rail_response", C.LAUNCH_OVERHEAD: "grey",
    C.COLLECTIVE_WAIT: "rail_animation", C.UNTRACED: "white",
}


MAX_POD_JOBS = 4      # finished pod summaries kept (their diagnoses stay in the cache)


class BadRequest(ValueError):
    pass


def _float(params, key, default, lo, hi):
    v = params.get(key)
    if v is None or v == "":
        return default
    try:
        f = float(v)
    except ValueError:
        raise BadRequest(f"{key} must be a number") from None
    if not (lo <= f <= hi):
        raise BadRequest(f"{key} must be between {lo} and {hi}")
    return f


def _int(params, key, default, lo, hi):
    return int(_float(params, key, default, lo, hi))


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
        run = params.get("run")
        host = params.get("host")
        if not run or not host:
            raise BadRequest("run and host are required")
        span = params.get("span") or None
        src = self.catalog.find(run, host, span)
        if src is None:
            return None
        return src

    def _options(self, params) -> Options:
        return Options(threshold_us=_float(params, "threshold_us", 5.0, 0.0, 1e7),
                       kernels_only=params.get("kernels_only") in ("1", "true"))

    @staticmethod
    def _no_source(params):
        return 404, {"error": "no such run/host/span in the logdir",
                     "run": params.get("run"), "host": params.get("host")}

    def _diagnosis(self, params):
        """(status, diagnosis JSON or error body)."""
        src = self._source(params)
        if src is None:
            return self._no_source(params)
        status, body = self._diagnose_source(src, self._options(params))
        if status == 422:
            body = {**body, "run": params.get("run"), "host": params.get("host")}
        return status, body

    def _diagnose_source(self, src, opt: Options, compute_elsewhere=None):
        """(status, body) of one file, from the cache or computed once; by default in this
        process with progress reported, else by ``compute_elsewhere()`` (a pod worker)."""
        if src.size > self.max_file_mb * 1e6:
            return 413, {"error": f"{os.path.basename(src.path)} is {src.size / 1e6:.0f} MB, over "
                                  f"the {self.max_file_mb:.0f} MB budget; raise it with the "
                                  f"TB_PERFDIAG_MAX_FILE_MB environment variable",
                         "file": os.path.basename(src.path)}
        try:
            ident = file_identity(src.path)
        except OSError:
            return 404, {"error": "file disappeared", "file": os.path.basename(src.path)}
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
        if "error" in result:
            return 422, {"error": result["error"], "file": result["file"]}
        return 200, result["ok"]

    def hosts_json(self, params):
        """Per-host summary of a run (pods with many hosts): duty cycle, step time, worst
        gap, top finding, stragglers flagged against the median host.  The hosts are
        analysed in the background; each call answers with the rows done so far
        (``complete`` false until all are), or waits for all with ``wait=1``."""
        run = self.catalog.runs().get(params.get("run") or "")
        if run is None:
            run = self.catalog.runs(refresh=True).get(params.get("run") or "")
        if run is None:
            return 404, {"error": "no such run in the logdir", "run": params.get("run")}
        opt = self._options(params)
        sources = [self.catalog.find(run.name, h) for h in sorted({s.host for s in run.sources})]
        sources = [s for s in sources if s is not None]
        try:
            idents = tuple(file_identity(s.path) for s in sources)
        except OSError:
            return 404, {"error": "a file of this run disappeared; reload", "run": run.name}
        key = (run.name, opt.key(), idents)
        with self._pods_lock:
            job = self._pods.pop(key, None)
            if job is None:
                job = PodJob(run.name, sources, opt,
                             lambda src, elsewhere: self._diagnose_source(src, opt, elsewhere))
            self._pods[key] = job                # most recent last
            while len(self._pods) > MAX_POD_JOBS:
                self._pods.pop(next(iter(self._pods)))
        if params.get("wait") in ("1", "true"):
            job.wait()
        return 200, job.snapshot()

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
        if src is None:
            return self._no_source(params)
        try:
            key = (file_identity(src.path), self._options(params).key())
        except OSError:
            return 404, {"error": "file disappeared", "file": os.path.basename(src.path)}
        with self._progress_lock:
            prog = self._progress.get(key)
        if prog is not None:
            return 200, {"state": "running", "file": prog.label, **prog.snapshot()}
        if self.cache.has(key):
            return 200, {"state": "done", "file": os.path.basename(src.path)}
        return 200, {"state": "idle", "file": os.path.basename(src.path)}

    def diagnosis_json(self, params):
        status, body = self._diagnosis(params)
        if status != 200:
            return status, body
        offset = _int(params, "gaps_offset", 0, 0, 1e9)
        limit = _int(params, "gaps_limit", DEFAULT_GAPS_PAGE, 0, MAX_GAPS_PAGE)
        step = params.get("step")
        gaps = body["gaps"]
        if step not in (None, ""):
            try:
                step_i = int(step)
            except ValueError:
                raise BadRequest("step must be an integer") from None
            gaps = [g for g in gaps if g["step"] == step_i]
        out = dict(body)
        out["gaps"] = gaps[offset:offset + limit]
        out["gaps_total"] = len(gaps)
        out["gaps_offset"] = offset
        out["gaps_limit"] = limit
        return 200, out

    def gap_json(self, params):
        gap_id = params.get("id") or ""
        if not gap_id or len(gap_id) > 64:
            raise BadRequest("id is required")
        status, body = self._diagnosis(params)
        if status != 200:
            return status, body
        for g in body["gaps"]:
            if g["id"] == gap_id:
                if not g.get("detail"):
                    g = self._detail(params, g)
                return 200, g
        return 404, {"error": f"no gap {gap_id!r} in this diagnosis"}

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
        status, body = self._diagnosis(params)
        if status != 200:
            return status, body
        src = self._source(params)
        lo = _float(params, "start_ns", 0, -1e18, 1e18)
        hi = _float(params, "end_ns", 1e18, -1e18, 1e18)
        width = _int(params, "width", 1200, 16, 4000)
        if hi <= lo:
            raise BadRequest("end_ns must be after start_ns")
        try:
            trace, ctx = self._context(src)
        except TraceError as e:
            return 422, {"error": e.reason, "file": os.path.basename(src.path)}
        span_hi = int(trace.end.max()) if trace.n_events else 0
        lo_ps = int(max(lo, 0) * 1000)
        hi_ps = int(min(hi * 1000, span_hi))
        return 200, lanes(trace, lo_ps, max(hi_ps, lo_ps + 1000), width, ctx["origin"])

    def overlay_json(self, params):
        """Chrome trace JSON: one track per device with a slice per gap, coloured by
        cause, plus the step windows — opens in the trace viewer, Perfetto and
        chrome://tracing."""
        status, body = self._diagnosis(params)
        if status != 200:
            return status, body
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
        if params.get("with_events") in ("1", "true"):
            events.extend(self._events_around(params, body))
        return 200, {"traceEvents": events, "displayTimeUnit": "ns",
                     "otherData": {"source": body["source"]["path"], "tool": "tb-perfdiag"}}

    def _events_around(self, params, body, limit=20000):
        """The trace's own events in [start_us, end_us] (µs, trace-relative)."""
        src = self._source(params)
        lo = _float(params, "start_us", 0, -1e15, 1e15) * 1e6
        hi = _float(params, "end_us", 1e15, -1e15, 1e15) * 1e6
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
