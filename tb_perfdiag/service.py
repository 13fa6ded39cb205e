"""Request handling behind the plugin routes: bounded work, answers built once.

Kept apart from ``plugin.py`` so it can be tested without a TensorBoard server.  Each
route method takes the typed parameters ``params.parse`` made and returns the JSON body
of a 200; every failure is raised (an ``errors.ApiError``, or a ``TraceError``), and
``plugin.py`` turns it into a response.  ``response(route, params)`` is what the plugin
serves for the routes whose answers can be large: the same body serialized and gzipped
once, kept for the next request with the same file identity and parameters.

What one request can cost is bounded (``budget.py``): a file is read and analysed once
at a time per (file identity, options), its loaded trace is shared by every analysis,
timeline and export of that file and kept within ``TB_PERFDIAG_TRACES_MB``; reads,
analyses and large answers are admitted by their estimated peak within
``TB_PERFDIAG_MEMORY_MB``, at most ``TB_PERFDIAG_ANALYSES`` reads or analyses at once; a
file found unreadable or over the budget is not read again until it changes.
"""
from __future__ import annotations

import gzip
import json
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass

from ._version import __version__
from .analysis import Options, analyse
from .analysis.diagnosis import gap_detail, host_context, host_side_beside
from .beside import SIDE_BYTES_PER_EVENT
from .analysis.timeline import annotation_spans, lanes
from .analysis.steps.windows import unknown_step
from .trace.extension import reader_kind
from .budget import MB, Budget, Store, measure
from .cache import DiagnosisCache
from .discovery import Catalog, Source, resolve_root
from .graph_captures import (attach as attach_captures, choices as capture_choices,
                             keyed as keyed_identity)
from .errors import BadRequest, FileGone, NotFound, TraceError, TraceTooLarge, trace_error
from .codec import Failure
from .pod import Engine
from .progress import NULL, Progress
from .render import chrome
from .render.device_ops import TOP as TOP_OPS, device_ops_json
from .render.json import (diagnosis_json, finding_json, gap_fix, gap_records, gap_row, gaps_page,
                          json_bytes, steps_page, unknown_device)
from .service_common import (BASE_PEAK, CONTEXT_PER_TRACE_BYTE, PEAK_PER_DIAG_BYTE,
                             PEAK_PER_EVENT, PEAK_PER_GAP_ROW, PEAK_PER_TRACE_BYTE, RENDER_PEAK,
                             TRACE_PATIENCE_S, _same, load_estimate)
from .service_compare import CompareRoutes
from .service_pod import PodRoutes
from .service_trend import TrendRoutes
from .storage import TRACE_BYTES_READ, ListedPath, Underestimated, file_identity, open_file
from .trace import detect_format, load_open


def _env_float(name: str, default: float) -> float:
    try:
        v = float(os.environ.get(name, default))
    except ValueError:
        return default
    return v if v > 0 and v != float("inf") else default


DEFAULT_MAX_FILE_MB = _env_float("TB_PERFDIAG_MAX_FILE_MB", 4096)
# memory of the work under way and of what is kept (traces, built answers)
DEFAULT_MEMORY_MB = _env_float("TB_PERFDIAG_MEMORY_MB", 4096)
# loaded traces kept for the timeline, gap detail, overlay and other options of open runs
DEFAULT_TRACES_MB = _env_float("TB_PERFDIAG_TRACES_MB", 1024)
# built answers (gzipped JSON) kept for the next identical request
DEFAULT_RESPONSES_MB = _env_float("TB_PERFDIAG_RESPONSES_MB", 128)
# reads and analyses at once (each holds a core: they hold the GIL much of the time)
DEFAULT_ANALYSES = int(_env_float("TB_PERFDIAG_ANALYSES", 2))
# large answers built at once
DEFAULT_ANSWERS = int(_env_float("TB_PERFDIAG_ANSWERS", 2))
# how long a request waits for memory or a slot before a 503
DEFAULT_QUEUE_S = _env_float("TB_PERFDIAG_QUEUE_S", 120)

MAX_REFUSED = 4096    # files remembered as unreadable or over the budget


class Body:
    """A 200's JSON, serialized and gzipped once (what the plugin sends as is)."""

    __slots__ = ("gz", "raw_size")

    def __init__(self, gz: bytes, raw_size: int):
        self.gz, self.raw_size = gz, raw_size

    @classmethod
    def of(cls, doc) -> "Body":
        raw = json_bytes(doc)
        return cls(_gzip(raw), len(raw))

    def json(self):
        """The document again (tests, and clients that want a dict)."""
        return json.loads(gzip.decompress(self.gz))


def _gzip(raw: bytes) -> bytes:
    try:
        from isal import igzip
        return igzip.compress(raw, compresslevel=1, mtime=0)
    except ImportError:  # pragma: no cover - isal is a dependency
        return gzip.compress(raw, compresslevel=3, mtime=0)


@dataclass
class _Captured(Source):
    """A file with the graph capture files a request named (the route's ``capture``):
    read, analysed and cached apart from the file alone."""
    captures: tuple = ()


class _Loaded:
    """A loaded trace and, once an analysis or a timeline needed them, its host
    timelines (``HostContext``); kept in the traces store by file identity, at their
    measured size."""

    def __init__(self, trace):
        self.trace = trace
        self.trace_bytes = measure(trace)
        self.ctx = None
        self.nbytes = self.trace_bytes
        self.lock = threading.Lock()
        self.building = threading.Lock()     # one host-timelines build at a time

    def attach(self, ctx) -> bool:
        """Keep ``ctx`` unless one is kept already; whether it was kept."""
        with self.lock:
            if self.ctx is not None:
                return False
            self.ctx = ctx
            self.nbytes = measure(ctx)     # the trace's buffers are counted once
            return True


class DiagnosisService(PodRoutes, TrendRoutes, CompareRoutes):
    def __init__(self, catalog: Catalog, cache: DiagnosisCache | None = None,
                 max_file_mb: float = DEFAULT_MAX_FILE_MB, memory_mb: float = DEFAULT_MEMORY_MB,
                 traces_mb: float = DEFAULT_TRACES_MB, responses_mb: float = DEFAULT_RESPONSES_MB,
                 analyses: int = DEFAULT_ANALYSES, answers: int = DEFAULT_ANSWERS,
                 queue_s: float = DEFAULT_QUEUE_S, engine: Engine | None = None):
        self.catalog = catalog
        self.cache = cache or DiagnosisCache(version=__version__)
        # the Dask client that analyses pods' hosts: one per server, started on first use
        self.engine = engine or Engine()
        self.max_file_mb = max_file_mb
        self.budget = Budget(int(memory_mb * MB), {"work": analyses, "answer": answers}, queue_s)
        # loaded traces by file identity, within their measured bytes
        self.traces = Store(int(min(traces_mb, memory_mb) * MB),
                            sizer=lambda loaded: loaded.nbytes, keep_newest=True)
        self.responses = Store(int(min(responses_mb, memory_mb) * MB),
                               sizer=lambda body: len(body.gz) + 200)
        self.budget.add_store(self.responses)
        self.budget.add_store(self.traces, patience_s=TRACE_PATIENCE_S)
        self.loads = 0                   # trace files read
        self._loads_lock = threading.Lock()
        self._refused: OrderedDict = OrderedDict()   # file identity → its TraceError
        self._refused_lock = threading.Lock()
        self._pods: dict = {}            # (run, options, files as listed) → PodJob
        self._joins: dict = {}           # a finished job (or one file) → (Join, host figures)
        self._pods_lock = threading.Lock()
        self._progress: dict = {}        # cache key → Progress of the analysis under way
        self._progress_lock = threading.Lock()
        # a trend's per-file figures by (file identity, options): a second trend of a run
        # of hundreds of captures reads no diagnosis again
        self._figures: OrderedDict = OrderedDict()
        self._figures_lock = threading.Lock()

    @property
    def max_file_bytes(self) -> int:
        return int(self.max_file_mb * 1e6)

    # ---- resolving a request to a file ----
    def _source(self, params):
        src = self.catalog.find(params.run, params.host, params.span)
        if src is None:
            raise NotFound("no such run/host/span in the logdir", run=params.run,
                           host=params.host)
        rel = getattr(params, "capture", None)
        if rel:
            # below the logdir itself (params checked the text), read through the guard
            root = resolve_root(self.catalog.logdir)
            sep = "/" if "://" in root else os.sep
            path = ListedPath(root.rstrip("/" + os.sep) + sep + rel.replace("/", sep), root)
            src = _Captured(**vars(src), captures=(path,))
        return src

    def _options(self, params) -> Options:
        return Options(threshold_us=params.threshold_us, kernels_only=params.kernels_only,
                       peak_tflops=getattr(params, "peak_tflops", None))

    def _diagnosis(self, params):
        """The typed diagnosis of the file ``params`` name."""
        src = self._source(params)
        try:
            return self._diagnose_source(src, self._options(params))
        except TraceError as e:
            raise trace_error(e, run=params.run, host=params.host) from None

    @staticmethod
    def _identity(src):
        """The file's identity, with its named capture files' when it has some: every
        store keyed by it (results, loaded traces, answers) keeps the two apart."""
        try:
            ident = file_identity(src.path)
        except OSError:
            raise NotFound("file disappeared since the listing; reload",
                           file=os.path.basename(src.path)) from None
        caps = getattr(src, "captures", ())
        if not caps:
            return keyed_identity(ident, src.path)
        out = []
        for p in caps:
            try:
                out.append(file_identity(p))
            except OSError:
                raise NotFound("no such capture file in the logdir",
                               capture=os.path.relpath(p, p.root)) from None
            except TraceError as e:
                raise BadRequest(f"capture {os.path.relpath(p, p.root)!r} not read: "
                                 f"{e.reason}") from None
        return (ident, ("captures",) + tuple(out))

    # ---- files that are not read again until they change ----
    def _check_refused(self, ident) -> None:
        with self._refused_lock:
            err = self._refused.get(ident)
        if err is not None:
            raise err

    def _refuse(self, ident, err: TraceError) -> None:
        if isinstance(err, FileGone):
            return                      # a later file of that name is another story
        with self._refused_lock:
            self._refused[ident] = err
            while len(self._refused) > MAX_REFUSED:
                self._refused.popitem(last=False)

    # ---- loading: once per file identity, within the budget ----
    def _load(self, src, ident, progress=NULL) -> _Loaded:
        name = os.path.basename(src.path)
        try:
            with open_file(src.path, max_bytes=self.max_file_bytes) as f:
                fmt = detect_format(src.path)
                # a gzip's own figure, capped; read within it, else again within the budget
                decoded = min(f.decoded_size_hint(), self.max_file_bytes)
                expect = decoded if f.compressed else None
                while True:
                    est = load_estimate(fmt, f.size, decoded, f.compressed)
                    with self.budget.admit(est, lane="work",
                                           what=f"reading {name}", progress=progress):
                        with self._loads_lock:
                            self.loads += 1
                        try:
                            trace = load_open(f, progress, expect)
                            # the graph captures named (below the logdir), else
                            # those beside it (below its folder)
                            caps = getattr(src, "captures", ())
                            root = (caps[0].root if caps
                                    else os.path.dirname(str(src.path)))
                            return _Loaded(attach_captures(
                                trace, src.path, root, self.max_file_bytes,
                                named=list(caps) or None, progress=progress))
                        except Underestimated:
                            pass
                    decoded, expect = self.max_file_bytes, None
        except TraceError as e:
            self._refuse(ident, e)
            raise

    def _loaded(self, src, ident, progress=NULL):
        """The loaded trace of ``src`` (context manager; kept from being dropped while
        in use): from the traces store, else read once for everyone asking."""
        self._check_refused(ident)
        return self.traces.use(ident, lambda: self._load(src, ident, progress))

    def _with_context(self, loaded: _Loaded, ident):
        """The host timelines of a loaded trace (kept from its analysis, else built once)."""
        with loaded.building:
            if loaded.ctx is None:
                est = CONTEXT_PER_TRACE_BYTE * loaded.trace_bytes + BASE_PEAK
                with self.budget.admit(est, lane="work", what="host timelines"):
                    ctx = host_context(loaded.trace)
                if loaded.attach(ctx):
                    self.traces.remeasure(ident)
        return loaded.ctx

    def _diagnose_source(self, src, opt: Options, later: bool = False):
        """The typed diagnosis of one file, from the cache or the result store, else
        computed once in this process (its loaded trace shared with the other options
        and routes of the file); a pod summary's Dask task analysing it right now is
        waited for instead.  An unreadable file raises its ``TraceError``.  ``later``: the
        result store is written in the background (``DiagnosisCache.flush``)."""
        ident = self._identity(src)
        self._check_refused(ident)
        key = (ident, opt.key())

        def compute():
            prog = Progress(os.path.basename(src.path))
            with self._progress_lock:
                self._progress[key] = prog
            try:
                with self._loaded(src, ident, prog) as loaded:
                    est = PEAK_PER_TRACE_BYTE * loaded.trace_bytes + BASE_PEAK
                    if host_side_beside(loaded.trace):     # its timelines beside the steps'
                        est += SIDE_BYTES_PER_EVENT * loaded.trace.n_events
                    with self.budget.admit(est, lane="work", what="analysis", progress=prog):
                        diag, ctx = analyse(loaded.trace, opt, prog)
                    if loaded.attach(ctx):
                        self.traces.remeasure(ident)
                    return diag
            finally:
                prog.done()
                with self._progress_lock:      # the cache answers from now on
                    if self._progress.get(key) is prog:
                        del self._progress[key]
        self._wait_for_pod_task(key)
        result = self.cache.get_or_compute(key, compute, later=later)
        if isinstance(result, Failure):     # a pod task's verdict, kept in the store
            raise (TraceTooLarge if result.status == 413 else TraceError)(result.file,
                                                                          result.reason)
        return result

    def close(self) -> None:
        """Stops the pod jobs and the local Dask cluster (TensorBoard exiting does the
        same: the workers end with this process)."""
        with self._pods_lock:
            jobs, self._pods = list(self._pods.values()), {}
        for j in jobs:
            j.cancel()
        self.engine.close()

    def status(self) -> dict:
        """Counters an operator (or a load test) can watch."""
        c = self.cache
        with self._pods_lock:
            in_workers = sum(j.analysed for j in self._pods.values())
        st = c.store
        return {"analyses": c.computations + in_workers, "analyses_in_process": c.computations,
                "analyses_in_workers": in_workers,
                "cached": len(c._mem), "cache_bytes": c._size,
                "cache_limit_bytes": c.memory_bytes, "disk_cache": c.disk_dir or None,
                "results": None if st is None else {
                    "location": st.location, "limit_bytes": st.max_bytes,
                    "shared": st.shared, "unusable": st.usable() or None,
                    "reads": st.reads, "writes": st.writes, "dropped_bad": st.dropped,
                    "evicted": st.evicted},
                "pod_engine": self.engine.describe(),
                "max_file_mb": self.max_file_mb, "trace_loads": self.loads,
                "trace_bytes_read": TRACE_BYTES_READ.total,
                "traces_in_memory": len(self.traces), "traces_bytes": self.traces.size,
                "traces_limit_bytes": self.traces.capacity,
                "responses": self.responses.snapshot(), "memory": self.budget.snapshot(),
                "refused_files": len(self._refused), "listings": self.catalog.scans,
                "reader": reader_kind()}

    # ---- routes ----
    def response(self, route: str, params):
        """The gzipped body of a 200 of ``route`` (diagnosis, gap, steps, timeline,
        overlay, compare),
        built once per (file identity, parameters) and kept while the budget allows."""
        key = (route, self._identity(self._source(params)), params)
        if route == "compare":        # an answer of two files: either one changing is new
            key += (self._identity(self._base_source(params)),)
        build = getattr(self, f"{route}_json")
        return self.responses.get_or_make(key, lambda: build(params, finish=Body.of))

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
        if self.engine.pending(self.cache.digest(key)) is not None:
            return {"state": "running", "file": os.path.basename(src.path),
                    "phase": "analysing", "text": "analysing on a Dask worker (pod summary)",
                    "fraction": None, "elapsed_s": None, "done": False}
        if self.cache.has(key):
            return {"state": "done", "file": os.path.basename(src.path)}
        return {"state": "idle", "file": os.path.basename(src.path)}

    def diagnosis_json(self, params, finish=_same):
        diag = self._diagnosis(params)
        self._check_device(diag, params.device)
        rows = max(0, min(params.gaps_limit, len(diag.gaps) - params.gaps_offset))
        est = PEAK_PER_DIAG_BYTE * diag.nbytes() + PEAK_PER_GAP_ROW * rows + RENDER_PEAK
        with self.budget.admit(est, what="diagnosis page"):
            doc = diagnosis_json(diag, params.gaps_offset, params.gaps_limit, params.step,
                                 paged=True, light=True, device=params.device)
        caps = self._capture_choices(params, diag)
        if caps is not None:
            doc["graph_captures"] = caps
        return finish(doc)

    def _capture_choices(self, params, diag) -> dict | None:
        """Where the file replays CUDA/HIP graphs: the capture it was aligned with
        (the one named, else those beside it) and the files it may be aligned with instead
        (``graph_captures.choices``); None without replays."""
        g = getattr(getattr(diag, "efficiency", None), "graphs", None)
        if g is None or not int(g.total.sum()):
            return None
        src = self.catalog.find(params.run, params.host, params.span)
        if src is None:
            return None
        run = self.catalog.runs().get(params.run)
        others = [s.path for s in (run.sources if run else ()) if s.format == "kineto"]
        root = resolve_root(self.catalog.logdir)
        return {"chosen": getattr(params, "capture", None) or None,
                "files_read": int(g.capture_files),
                "choices": capture_choices(src.path, root, others)}

    @staticmethod
    def _check_device(diag, device) -> None:
        if why := unknown_device(diag, device):
            raise BadRequest(why)

    def findings_json(self, params) -> list:
        """Every finding, largest time lost first (the first answer lists the first
        FINDINGS_SHOWN)."""
        diag = self._diagnosis(params)
        with self.budget.admit(RENDER_PEAK, what="findings"):
            return [finding_json(diag, f) for f in diag.findings]

    def steps_json(self, params, finish=_same):
        """Step rows ``[steps_offset, +steps_limit)`` with how many there are: the rows the
        first answer leaves out above 500 steps."""
        diag = self._diagnosis(params)
        with self.budget.admit(RENDER_PEAK + 2_000 * params.steps_limit, what="steps page"):
            return finish(steps_page(diag, params.steps_offset, params.steps_limit))

    def gaps_json(self, params, cause: str | None = None, device: int | None = None,
                  finish=_same):
        """A page of the gaps of ``params.step`` (all when None) whose cause is ``cause``
        and that lie on ``device`` (any when None): the /diagnosis page's gaps alone."""
        diag = self._diagnosis(params)
        self._check_device(diag, device)
        rows = max(0, min(params.gaps_limit, len(diag.gaps) - params.gaps_offset))
        with self.budget.admit(PEAK_PER_GAP_ROW * rows + RENDER_PEAK, what="gaps page"):
            return finish(gaps_page(diag, params.gaps_offset, params.gaps_limit, params.step,
                                    cause, device))

    def device_ops_json(self, params, top: int = TOP_OPS, device: int | None = None,
                        finish=_same):
        """The device-time-by-op section of ``params.step`` (whole trace when None), ``top``
        groups per device, only ``device`` when given: the /diagnosis page's
        ``device_ops`` alone, for a caller that wants no more."""
        diag = self._diagnosis(params)
        if params.step is not None and (why := unknown_step(diag.steps.ids, params.step)):
            raise NotFound(why)
        self._check_device(diag, device)
        with self.budget.admit(RENDER_PEAK, what="device ops"):
            doc = device_ops_json(diag, params.step, top)
        if doc is not None and device is not None:
            doc["devices"] = [d for d in doc["devices"] if d["device"] == device]
        return finish(doc)

    def gap_json(self, params, finish=_same):
        diag = self._diagnosis(params)
        row = gap_row(diag, params.id)
        if row < 0:
            raise NotFound(f"no gap {params.id!r} in this diagnosis")
        if row < diag.detail.rows.shape[0]:
            rec = gap_records(diag, [row])[0]
        else:
            # host-op detail of a gap beyond the largest ones, from the loaded trace (cached)
            src = self._source(params)
            ident = self._identity(src)
            key = ("detail", ident, self._options(params).key(), row)

            def detail():
                with self._loaded(src, ident) as loaded:
                    ctx = self._with_context(loaded, ident)
                    with self.budget.admit(RENDER_PEAK, what="gap detail"):
                        return _Detail(gap_detail(ctx, diag, row))
            extra = self.cache.get_or_compute(key, detail, persist=False)
            rec = gap_records(diag, [row], extra_detail=extra.value)[0]
        rec["viewer"] = chrome.viewer_json(diag, row)      # where the trace viewers open
        rec["fix"] = gap_fix(diag, row)                     # what to change, in its panel
        return finish(rec)

    def timeline_json(self, params, finish=_same):
        """Lanes of every track in [start_ns, end_ns] for a canvas ``width`` px wide."""
        self._diagnosis(params)
        src = self._source(params)
        ident = self._identity(src)
        with self._loaded(src, ident) as loaded:
            ctx = self._with_context(loaded, ident)
            trace = ctx.trace
            est = 0.2 * loaded.trace_bytes + RENDER_PEAK
            with self.budget.admit(est, what="timeline"):
                span_hi = int(trace.end.max()) if trace.n_events else 0
                lo_ps = int(max(params.start_ns, 0) * 1000)
                hi_ps = int(min(params.end_ns * 1000, span_hi))
                return finish(lanes(trace, lo_ps, max(hi_ps, lo_ps + 1000), params.width,
                                    ctx.origin))

    def overlay_json(self, params, finish=_same):
        """Chrome trace JSON: the diagnosis' tracks (gaps coloured by cause, steps,
        blocking calls) — with ``gap``, over the real events of a window around that gap
        (devices, the host threads that matter, annotations, waited-for arrows); with
        ``with_events``, over those of [start_us, end_us].  Opens in the Profile
        plugin's trace viewer, Perfetto and chrome://tracing."""
        diag = self._diagnosis(params)
        est = PEAK_PER_GAP_ROW * len(diag.gaps) + RENDER_PEAK
        waits, note = self._wait_slices(params, diag)
        if params.gap is None and not params.with_events:
            with self.budget.admit(est, what="overlay"):
                return finish(chrome.overlay(diag, waits=waits, waits_note=note))
        focus = None
        if params.gap is not None:
            focus = gap_row(diag, params.gap)
            if focus < 0:
                raise NotFound(f"no gap {params.gap!r} in this diagnosis")
            window = chrome.gap_window(diag, focus)[0]
        else:
            window = (int(max(params.start_us * 1e6, -2**62)),
                      int(min(params.end_us * 1e6, 2**62)))
        src = self._source(params)
        ident = self._identity(src)
        with self._loaded(src, ident) as loaded:
            ctx = self._with_context(loaded, ident)
            trace = ctx.trace
            est += 0.1 * loaded.trace_bytes + PEAK_PER_EVENT * min(chrome.MAX_EVENTS,
                                                                    trace.n_events)
            with self.budget.admit(est, what="overlay with events"):
                spans = annotation_spans(trace, window[0], window[1], ctx.origin)
                return finish(chrome.overlay(diag, window, trace, focus, spans, waits=waits,
                                             waits_note=note))


class _Detail:
    """A gap's host-op detail computed on demand, as the cache keeps it (memory only)."""

    persist = False

    def __init__(self, value):
        self.value = value

    def nbytes(self) -> int:
        ho, refs = self.value
        return int(ho.event.nbytes * 4 + refs.event.nbytes * 8 + 1000)
