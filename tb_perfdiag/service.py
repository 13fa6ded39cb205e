"""Request handling behind the plugin routes: cache, paging, overlay.

Kept apart from ``plugin.py`` so it can be tested without a TensorBoard server.  Each
route method takes the typed parameters ``params.parse`` made and returns the JSON body
of a 200; every failure is raised (an ``errors.ApiError``, or a ``TraceError``), and
``plugin.py`` turns it into a response.
"""
from __future__ import annotations

import os
import threading

from ._version import __version__
from .analysis import Options
from .analysis.compare import compare
from .analysis.diagnosis import gap_detail, host_context
from .analysis.timeline import lanes
from .cache import DiagnosisCache
from .discovery import Catalog
from .errors import NotFound, TooLarge, TraceError, trace_error
from .pod import Failure, PodJob, analyse_file
from .progress import Progress
from .render import chrome
from .render.compare import comparison_json
from .render.json import diagnosis_json, gap_records, gap_row
from .storage import file_identity
from .trace import load

DEFAULT_MAX_FILE_MB = float(os.environ.get("TB_PERFDIAG_MAX_FILE_MB", "4096"))
# loaded traces kept for the timeline, gap detail and overlay of open runs
DEFAULT_TRACES_MB = float(os.environ.get("TB_PERFDIAG_TRACES_MB", "1024"))


MAX_POD_JOBS = 4      # finished pod summaries kept (their diagnoses stay in the cache)


class DiagnosisService:
    def __init__(self, catalog: Catalog, cache: DiagnosisCache | None = None,
                 max_file_mb: float = DEFAULT_MAX_FILE_MB):
        self.catalog = catalog
        self.cache = cache or DiagnosisCache(version=__version__)
        self.max_file_mb = max_file_mb
        # (trace, host timelines) per file identity, bounded by their resident bytes
        self.contexts = DiagnosisCache(int(DEFAULT_TRACES_MB * 1e6), disk_dir=None)
        self.loads = 0                   # trace files read (analyses and reloads)
        self._loads_lock = threading.Lock()
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
        """The typed diagnosis of the file ``params`` name."""
        src = self._source(params)
        try:
            return self._diagnose_source(src, self._options(params))
        except TraceError as e:
            raise trace_error(e, run=params.run, host=params.host) from None

    def _counted_load(self, path, progress=None):
        with self._loads_lock:
            self.loads += 1
        return load(path, progress) if progress is not None else load(path)

    @staticmethod
    def _identity(src):
        try:
            return file_identity(src.path)
        except OSError:
            raise NotFound("file disappeared", file=os.path.basename(src.path)) from None

    def _diagnose_source(self, src, opt: Options, compute_elsewhere=None):
        """The typed diagnosis of one file, from the cache or computed once; by default in
        this process with progress reported (the loaded trace stays for the requests
        that need it), else by ``compute_elsewhere()`` (a pod worker).  An unreadable
        file raises its ``TraceError``."""
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
                with self._loads_lock:
                    self.loads += 1
                return analyse_file(src.path, opt, prog,
                                    lambda ctx: self.contexts.put((ident, "trace"), ctx))
            finally:
                prog.done()
                with self._progress_lock:      # the cache answers from now on
                    if self._progress.get(key) is prog:
                        del self._progress[key]
        result = self.cache.get_or_compute(key, compute)
        if isinstance(result, Failure):
            raise TraceError(result.file, result.reason)
        return result

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
                "max_file_mb": self.max_file_mb, "trace_loads": self.loads,
                "traces_in_memory": len(self.contexts._mem),
                "traces_bytes": self.contexts._size}

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
        return diagnosis_json(self._diagnosis(params), params.gaps_offset, params.gaps_limit,
                              params.step, paged=True)

    def compare_json(self, params):
        """Before (``base_run``/``base_host``/``base_span``) → after (``run``/``host``/
        ``span``), both diagnosed with the same options (and cached as /diagnosis)."""
        src = self._source(params)
        after = self._diagnosis(params)
        base = self.catalog.find(params.base_run, params.base_host, params.base_span)
        if base is None:
            raise NotFound("no such base run/host/span in the logdir", base_run=params.base_run,
                           base_host=params.base_host)
        try:
            before = self._diagnose_source(base, self._options(params))
        except TraceError as e:
            raise trace_error(e, run=params.base_run, host=params.base_host) from None
        label = lambda r, s: f"{r} · {s.host}" + (f" · {s.span}" if s.span else "")  # noqa: E731
        cmp = compare(before, after, (label(params.base_run, base), label(params.run, src)))
        out = comparison_json(cmp, params.top)
        out["before"].update(run=params.base_run, host=base.host, span=base.span)
        out["after"].update(run=params.run, host=src.host, span=src.span)
        return out

    def gap_json(self, params):
        diag = self._diagnosis(params)
        row = gap_row(diag, params.id)
        if row < 0:
            raise NotFound(f"no gap {params.id!r} in this diagnosis")
        if row < diag.detail.rows.shape[0]:
            return gap_records(diag, [row])[0]
        # host-op detail of a gap beyond the largest ones, from the loaded trace (cached)
        src = self._source(params)
        key = ("detail", self._identity(src), self._options(params).key(), row)
        extra = self.cache.get_or_compute(key, lambda: _Detail(gap_detail(
            self._context(src), diag, row)))
        return gap_records(diag, [row], extra_detail=extra.value)[0]

    def _context(self, src):
        """The loaded trace and host timelines of a file: kept from its analysis, else
        loaded once more (a TraceError is the route's 422)."""
        ident = self._identity(src)
        return self.contexts.get_or_compute(
            (ident, "trace"), lambda: host_context(self._counted_load(src.path)))

    def timeline_json(self, params):
        """Lanes of every track in [start_ns, end_ns] for a canvas ``width`` px wide."""
        self._diagnosis(params)
        ctx = self._context(self._source(params))
        trace = ctx.trace
        span_hi = int(trace.end.max()) if trace.n_events else 0
        lo_ps = int(max(params.start_ns, 0) * 1000)
        hi_ps = int(min(params.end_ns * 1000, span_hi))
        return lanes(trace, lo_ps, max(hi_ps, lo_ps + 1000), params.width, ctx.origin)

    def overlay_json(self, params):
        """Chrome trace JSON: one track per device with a slice per gap, coloured by
        cause, plus the step windows (and the trace's own events in [start_us, end_us])
        — opens in the trace viewer, Perfetto and chrome://tracing."""
        diag = self._diagnosis(params)
        events = None
        if params.with_events:
            ctx = self._context(self._source(params))
            events = chrome.trace_events(ctx.trace, params.start_us * 1e6, params.end_us * 1e6)
        return chrome.overlay(diag, events)


class _Detail:
    """A gap's host-op detail computed on demand, as the cache keeps it (memory only)."""

    persist = False

    def __init__(self, value):
        self.value = value

    def nbytes(self) -> int:
        ho, refs = self.value
        return int(ho.event.nbytes * 4 + refs.event.nbytes * 8 + 1000)
