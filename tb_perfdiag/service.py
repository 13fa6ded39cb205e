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
from .analysis.compare.budgets import Budgets, check as check_budgets
from .analysis.compare.diff import compare, no_collectives
from .analysis.diagnosis import gap_detail, host_context, host_side_beside
from .beside import SIDE_BYTES_PER_EVENT
from .analysis.timeline import annotation_spans, lanes
from .analysis.steps.windows import unknown_step
from .trace.extension import reader_kind
from .budget import MB, Budget, Store, measure
from .cache import DiagnosisCache
from .discovery import Catalog, Source, resolve_root, span_label
from .graph_captures import attach as attach_captures, keyed as keyed_identity
from .errors import ApiError, BadRequest, FileGone, NotFound, TraceError, TraceTooLarge, trace_error
from .codec import Failure
from .pod import Engine, PodJob, decode_result
from .params import parse
from .progress import NULL, Progress
from .analysis.run.view import RunView, run_view
from .analysis.run import trust as run_trust
from .analysis.run.figures import capture_figures
from .analysis.run.trend import Capture, slow_host, trend as run_trend
from .run_captures import captures as run_captures, trend_run
from .render import chrome
from .render import collectives as coll_render
from .render.compare import comparison_json
from .render.device_ops import TOP as TOP_OPS, device_ops_json
from .render.json import (diagnosis_json, finding_json, gap_fix, gap_records, gap_row, gaps_page,
                          json_bytes, steps_page, unknown_device)
from .render.pod import summary_row
from .render.trend import trend_json
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

MAX_POD_JOBS = 4      # finished pod summaries kept (their diagnoses stay in the cache)
STORED_ROWS_WAIT_S = 10.0   # a new summary's first answer waits this long for stored rows
MAX_REFUSED = 4096    # files remembered as unreadable or over the budget
MAX_CAPTURE_FIGURES = 100_000   # a trend's per-file figures kept (a few hundred bytes each)

# Estimated peaks, measured on the benchmark files (benchmarks/HISTORY.md: df_index_resolver
# ×10, 405 MB of JSON → 594 MB read, trace 77 MB; the 2 M-event XSpace, 74 MB → 297 MB
# read, trace 133 MB, analysis +27 MB over the trace; a page of 100,000 gaps 535 MB, the
# overlay of 220,000 gaps 934 MB), rounded up.
# A Kineto trace is streamed (its text never held whole): its peak follows its events,
# which its decoded size bounds and its gzip size tells (benchmarks/HISTORY.md, issue 24:
# df_index_resolver ×10, 27.8 MB gz / 405 MB of JSON → 237 MB read over the imports)
PEAK_PER_JSON_BYTE = 0.7      # reading a Kineto trace, per decoded byte (at most)
PEAK_PER_JSON_GZ_BYTE = 10.0  # …and per byte of its gzip on disk
PEAK_PER_XSPACE_BYTE = 4.5    # reading an XSpace, per file byte
PEAK_PER_TRACE_BYTE = 1.0     # an analysis, per byte of the loaded trace
CONTEXT_PER_TRACE_BYTE = 0.5  # host timelines of a trace loaded without analysis
PEAK_PER_DIAG_BYTE = 1.5      # rendering a diagnosis page, per byte of the diagnosis
PEAK_PER_GAP_ROW = 5_000      # …and per gap record in it (or gap slice in an overlay)
PEAK_PER_EVENT = 1_000        # a trace event in an exported overlay
BASE_PEAK = 16 * MB           # a read or an analysis, beyond the per-byte figure
RENDER_PEAK = 2 * MB          # an answer, beyond it
# work waits this long for others to end before loaded traces are dropped for it
TRACE_PATIENCE_S = 1.0


def load_estimate(fmt: str | None, size: int, decoded: int,
                  compressed: bool = False) -> int:
    """The peak of reading a file of ``size`` bytes that decodes to ``decoded``."""
    json = PEAK_PER_JSON_BYTE * decoded
    if compressed:   # what a gzip's own figure claims is not believed past its size's worth
        json = min(json, PEAK_PER_JSON_GZ_BYTE * size)
    if fmt == "xspace":
        return int(PEAK_PER_XSPACE_BYTE * size + BASE_PEAK)
    if fmt == "kineto":
        return int(json + BASE_PEAK)
    return int(max(PEAK_PER_XSPACE_BYTE * size, json) + BASE_PEAK)


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


def _same(doc):
    return doc


def _label(run: str, src) -> str:
    """A run's file as comparisons and checks name it: run · host (· span)."""
    return f"{run} · {src.host}" + (f" · {span_label(src)}" if src.span else "")


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


class DiagnosisService:
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

    def _wait_for_pod_task(self, key) -> None:
        """When a pod summary's Dask task is analysing ``key`` right now, waits for it
        (and keeps what it sent back) instead of analysing the file a second time."""
        fut = self.engine.pending(self.cache.digest(key))
        if fut is None or self.cache.peek(key) is not None:
            return
        try:
            res = fut.result()
        except Exception:  # noqa: BLE001 - the task failed: analysed here, its error said here
            return
        if res.get("blob") is not None and self.cache.store is None:
            self.cache.put(key, decode_result(res["blob"]))
        elif res.get("blob") is not None:
            self.cache.save_blob(key, res["blob"], res["row"])

    def hosts_json(self, params):
        """Per-host summary of a run (pods of up to thousands of hosts): duty cycle,
        typical step, worst gap, top causes, stragglers flagged against the median host;
        one page of rows in the order asked.  Rows come from the result store when any
        process analysed the host already; the other hosts are analysed as Dask tasks in
        the background and each call answers with the rows done so far (``complete``
        false until all are), or waits for all with ``wait=1``."""
        job = self._pod_job(params.run, self._options(params))
        if params.wait:
            job.wait()
        else:   # a pod already in the store answers whole at the first call
            job.known.wait(STORED_ROWS_WAIT_S)
        desc = None if not params.order else params.order == "desc"
        return job.snapshot(params.sort or "straggler", desc, params.hosts_offset,
                            params.hosts_limit)

    def _pod_job(self, run_name: str, opt: Options) -> PodJob:
        """The job summarising every host of run ``run_name`` with options ``opt`` (the
        running or finished one for the files as listed, else a new one)."""
        run = self.catalog.runs().get(run_name)
        if run is None:
            run = self.catalog.runs(refresh=True).get(run_name)
        if run is None:
            raise NotFound("no such run in the logdir", run=run_name)
        sources = [self.catalog.find(run.name, h) for h in run.hosts()]
        sources = [s for s in sources if s is not None]
        # the files as listed (size, mtime) pick the job, so a poll costs no I/O per
        # host; the job keys each result by the file's full identity
        key = (run.name, opt.key(), tuple((s.path, s.size, s.mtime) for s in sources))
        with self._pods_lock:
            job = self._pods.pop(key, None)
            if job is None:
                job = PodJob(run.name, sources, opt, self.cache, self.engine,
                             self.max_file_bytes)
            self._pods[key] = job                # most recent last
            while len(self._pods) > MAX_POD_JOBS:
                self._pods.pop(next(iter(self._pods))).cancel()
        return job

    def run_join(self, params, wait: bool = False) -> tuple[RunView | None, dict, dict]:
        """(the run's ``RunView`` or None, the host's own row, a state): ``joined``;
        ``pending`` while the run's other hosts are analysed (``wait``: until they are);
        ``alone`` when no other participant shares this host's collectives; ``none`` when
        it has none; ``other_span`` when the capture asked for is not the one the run's
        summary joins (each host's latest)."""
        src = self._source(params)
        diag = self._diagnosis(params)
        opt = self._options(params)
        own = summary_row(src.host, src.span, diag)
        if not own.get("collectives_table"):
            return None, own, {"state": "none"}
        run = self.catalog.runs().get(params.run)
        if run is None or len(run.hosts()) < 2:
            rows, key = [own], (self._identity(src), opt.key())
        else:
            latest = self.catalog.find(params.run, src.host)
            if latest is not None and latest.path != src.path:
                return None, own, {"state": "other_span"}
            job = self._pod_job(params.run, opt)
            if wait:
                job.wait()
            if not job.complete:
                rows_now = list(job.rows.values())
                return None, own, {"state": "pending", "hosts": len(rows_now),
                                       "done": sum(r.get("status") != "pending"
                                                   for r in rows_now)}
            rows, key = [dict(r) for r in job.rows.values()], job   # finished: its rows stay
        with self._pods_lock:
            view = self._joins.get(key)
        if view is None:
            view = run_view(rows)
            with self._pods_lock:
                self._joins[key] = view
                while len(self._joins) > MAX_POD_JOBS:
                    self._joins.pop(next(iter(self._joins)))
        failed = [r for r in rows if r.get("status") != 200]
        if not view.joined(src.host):
            return None, own, {"state": "alone", "failed": failed, "hosts": len(rows)}
        return view, own, {"state": "joined", "failed": [r["host"] for r in failed]}

    def collectives_json(self, params, wait: bool = False):
        """The Collectives card of one host: its collectives matched with the other
        participants of the run (per op: instances, peer wait, transfer, whom it waited
        for, the steps), its peer wait per step and device, the run's stragglers; or why
        there is no such figure (``state``)."""
        view, own, st = self.run_join(params, wait)
        if view is None:
            out = {"state": st["state"], "host": params.host}
            if st["state"] == "alone":
                out.update(coll_render.alone_json(own, st["failed"], st["hosts"]))
            elif st["state"] == "pending":
                out.update(hosts=st["hosts"], done=st["done"],
                           note="matching this host's collectives with the other hosts' "
                                f"({st['done']} of {st['hosts']} analysed)")
            elif st["state"] == "other_span":
                out["note"] = ("this is not the host's latest capture: the run's collectives "
                               "are matched across each host's latest capture only")
            else:
                out["note"] = "no collective ops on this host's devices"
            return out
        diag = self._diagnosis(params)
        with self.budget.admit(RENDER_PEAK, what="collectives"):
            out = coll_render.host_json(view, self._source(params).host, diag,
                                        len(diag.steps) or None)
        out["failed_hosts"] = st["failed"]
        return out

    # ---- a run over time ----
    def trend(self, run: str, opt: Options, baseline: str | None = None):
        """The typed ``Trend`` of ``run`` (a PyTorch run, a TensorBoard run holding Profile
        sessions, or one of its sessions): each capture's figures from its file's cached
        diagnosis, analysed once (result store), an unreadable file a flagged capture."""
        runs = self.catalog.runs()
        name = trend_run(runs, run)
        if name is None:
            runs = self.catalog.runs(refresh=True)
            name = trend_run(runs, run)
        if name is None:
            raise NotFound("no such run in the logdir", run=run)
        caps = [self._capture(c, opt) for c in run_captures(runs, name)]
        try:
            return run_trend(name, caps, baseline)
        except KeyError:
            raise NotFound(f"no capture {baseline!r} in run {name!r}") from None
        except ValueError:
            raise BadRequest(f"capture {baseline!r} is not trusted: it cannot be the "
                             f"baseline") from None

    def _capture(self, files, opt: Options) -> Capture:
        rows = [(src.host,) + self._file_figures(src, opt) for src in files.sources]
        good = sorted((r for r in rows if r[1] is not None), key=lambda r: r[1].step_time)
        if not good:
            return Capture(files.session, files.start, [r[0] for r in rows], None,
                           [p for r in rows for p in r[2]], rows=rows)
        host, fig, problems = good[(len(good) - 1) // 2]       # the median host
        cap = Capture(files.session, files.start, [r[0] for r in rows], fig,
                      problems + [p for r in rows if r[1] is None for p in r[2]], rows=rows)
        if len(rows) > 1:
            cap.straggler = self._straggler(files, opt, rows)
        return cap

    def _file_figures(self, src, opt: Options) -> tuple:
        """(CaptureFigures or None, [trust.Problem]) of one file, kept by identity."""
        try:
            ident = self._identity(src)
        except NotFound:
            return None, run_trust.unread(-1, "file disappeared since the listing")
        key = (ident, opt.key())
        with self._figures_lock:
            hit = self._figures.get(key)
        if hit is not None:
            return hit
        try:
            diag = self._diagnose_source(src, opt, later=True)
            hit = (capture_figures(diag), run_trust.problems(diag))
        except TraceError as e:
            hit = (None, run_trust.unread(src.size, e.reason))
        with self._figures_lock:
            self._figures[key] = hit
            while len(self._figures) > MAX_CAPTURE_FIGURES:
                self._figures.popitem(last=False)
        return hit

    def _straggler(self, files, opt: Options, rows: list) -> str | None:
        """The host the others of a pod capture wait for most (GUIDE §4: the run's
        collective join), None when none; where its hosts share no collectives, its slow
        host as the pod summary flags one (``slow_host``).  A run's join covers each
        worker's latest span only: an older span of a multi-worker PyTorch run has none."""
        for src in files.sources:
            latest = self.catalog.find(files.run, src.host)
            if latest is None or latest.path != src.path:
                return None
        p = parse("collectives", {"run": files.run, "host": files.sources[0].host,
                                  "threshold_us": repr(opt.threshold_us),
                                  "kernels_only": "1" if opt.kernels_only else "0",
                                  "peak_tflops": repr(opt.peak_tflops) if opt.peak_tflops
                                  else ""})
        try:
            view, _, st = self.run_join(p, wait=True)
        except (TraceError, ApiError):
            return None
        if st["state"] == "none":
            return slow_host(rows)
        figs = view.figures if view is not None else {}
        late = [(f.get("caused_wait_per_step_ns") or 0, h) for h, f in figs.items()
                if f.get("straggler")]
        return max(late)[1] if late else None

    def trend_json(self, params, finish=_same):
        opt = self._options(params)
        t = self.trend(params.run, opt, params.baseline)
        with self.budget.admit(RENDER_PEAK, what="trend"):
            return finish(trend_json(t))

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
            return finish(diagnosis_json(diag, params.gaps_offset, params.gaps_limit,
                                         params.step, paged=True, light=True,
                                         device=params.device))

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

    def peer_wait(self, params, diag) -> tuple:
        """(peer wait per step and device of the host ``params`` name, or None; why None;
        whom it waited for most): from the run's collective join, waiting for the run's
        other hosts to be analysed."""
        view, _, st = self.run_join(params, wait=True)
        if view is None:
            return None, coll_render.ALONE_SHORT if st["state"] == "alone" else \
                "peer wait is matched on each host's latest capture only", None
        host = self._source(params).host
        return view.peer_cells(host, diag), "", view.waited_for(host)

    def _peer_of(self, params, run, host, span, diag) -> tuple:
        """(``peer_wait`` cells, the step waterfalls with that peer wait or None) of a
        file of a comparison with ``params``' options."""
        if no_collectives(diag):
            return None, None
        p = self._as_file(params, run, host, span)
        cells = self.peer_wait(p, diag)[0]
        view = self.run_join(p, wait=True)[0]
        rw = view.waterfall(host, diag) if view is not None else None
        return cells, rw.step_waterfall if rw is not None else None

    def check(self, params, budgets: Budgets, base=None) -> list:
        """``tb-perfdiag check`` of the file ``params`` name: its budget ``Result``s, with
        ``base`` (the baseline's file parameters) for ``max_regression``."""
        after = self._diagnosis(params)
        peer = ()
        if budgets.max_peer_wait is not None and not no_collectives(after):
            peer = self.peer_wait(self._as_file(params), after)
        if base is None:
            return check_budgets(after, budgets, None, *peer)
        src, bsrc = self._source(params), self._source(base)
        try:
            before = self._diagnose_source(bsrc, self._options(params))
        except TraceError as e:
            raise trace_error(e, run=base.run, host=base.host) from None
        with self.budget.admit(PEAK_PER_DIAG_BYTE * (before.nbytes() + after.nbytes()),
                               what="comparison"):
            cmp = compare(before, after, (_label(base.run, bsrc), _label(params.run, src)))
        return check_budgets(after, budgets, cmp, *peer)

    @staticmethod
    def _as_file(params, run=None, host=None, span=None):
        """A route's parameters as one file's (its run, host and span, or those given, with
        its options)."""
        return parse("collectives", {"run": run or params.run, "host": host or params.host,
                                     "span": (span if run else params.span) or "",
                                     "threshold_us": repr(params.threshold_us),
                                     "kernels_only": "1" if params.kernels_only else "0",
                                     "peak_tflops": repr(params.peak_tflops)
                                     if getattr(params, "peak_tflops", None) else ""})

    def _base_source(self, params):
        base = self.catalog.find(params.base_run, params.base_host, params.base_span)
        if base is None:
            raise NotFound("no such base run/host/span in the logdir", base_run=params.base_run,
                           base_host=params.base_host)
        return base

    def compare_json(self, params, finish=_same, with_steps: bool = True):
        """Before (``base_run``/``base_host``/``base_span``) → after (``run``/``host``/
        ``span``), both diagnosed with the same options (and cached as /diagnosis)."""
        src = self._source(params)
        after = self._diagnosis(params)
        base = self._base_source(params)
        try:
            before = self._diagnose_source(base, self._options(params))
        except TraceError as e:
            raise trace_error(e, run=params.base_run, host=params.base_host) from None
        (pa, wa), (pb, wb) = (self._peer_of(params, params.base_run, base.host, base.span, before),
                              self._peer_of(params, params.run, src.host, src.span, after))
        est = PEAK_PER_DIAG_BYTE * (before.nbytes() + after.nbytes()) + RENDER_PEAK
        with self.budget.admit(est, what="comparison"):
            cmp = compare(before, after, (_label(params.base_run, base), _label(params.run, src)),
                          (pa, pb), (wa, wb))
            out = comparison_json(cmp, params.top, with_steps)
            out["before"].update(run=params.base_run, host=base.host, span=base.span)
            out["after"].update(run=params.run, host=src.host, span=src.span)
            return finish(out)

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

    def _wait_slices(self, params, diag) -> tuple:
        """(the peer-wait part of each collective op of this host, or None; why none): the
        overlay waits for the run's other hosts to be analysed (it is kept as built)."""
        view, _, st = self.run_join(params, wait=True)
        if view is None:
            return None, {"none": None, "alone": coll_render.ALONE,
                          "other_span": "peer wait is matched on each host's latest capture "
                                        "only"}.get(st["state"])
        return coll_render.wait_slices(view.join, self._source(params).host, diag), None


class _Detail:
    """A gap's host-op detail computed on demand, as the cache keeps it (memory only)."""

    persist = False

    def __init__(self, value):
        self.value = value

    def nbytes(self) -> int:
        ho, refs = self.value
        return int(ho.event.nbytes * 4 + refs.event.nbytes * 8 + 1000)
