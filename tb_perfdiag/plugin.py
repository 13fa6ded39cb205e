"""The TensorBoard face: routes that return JSON and serve the Diagnose page.

Routes name (run, host, span), never files; they are resolved through the
logdir listing, so no parameter can reach a file the listing did not find.
"""
from __future__ import annotations

import logging
import mimetypes
import os
import threading

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from ._version import __version__
from .discovery import SPAN_RULE, Catalog, runs_json
from .trace.extension import reader_kind
from .errors import ApiError, NotFound, StorageError, Unavailable, as_api_error
from .params import parse
from .cache import DiagnosisCache
from .pod import Engine
from .service import Body, DiagnosisService

PLUGIN_NAME = "perfdiag"
PROFILE_PLUGIN = "profile"     # tensorboard-plugin-profile: its trace viewer and tab
logger = logging.getLogger(__name__)
_FRONTEND_CANDIDATES = (
    os.path.join(os.path.dirname(__file__), "frontend"),                  # installed wheel
    os.path.join(os.path.dirname(os.path.dirname(__file__)), "frontend"),  # source checkout
)


def answer(route, fn, query) -> tuple:
    """(status, JSON body) of one request: ``fn`` called with ``query`` parsed for
    ``route`` (``route`` None: no parameters).  The one place a failure becomes a
    response: an ``ApiError`` is its status and ``{"error": message, **extra}``, a
    ``TraceError`` a 422 naming the file, anything else a 500 with a short message
    (the traceback goes to the log, never into a response)."""
    try:
        return 200, fn(parse(route, query) if route is not None else None)
    except Exception as e:  # noqa: BLE001 - no route may leak a traceback
        err = as_api_error(e)
        if err.status >= 500:
            logger.error("perfdiag /%s failed: %s", route or "static", err.message,
                         exc_info=not isinstance(e, ApiError))
        return err.status, err.body()


def _frontend_dir() -> str:
    for d in _FRONTEND_CANDIDATES:
        if os.path.isfile(os.path.join(d, "index.js")):
            return d
    return _FRONTEND_CANDIDATES[0]


class DiagnosePlugin(base_plugin.TBPlugin):
    plugin_name = PLUGIN_NAME

    def __init__(self, context):
        self._logdir = context.logdir or ""
        # filled by TensorBoard as it loads the plugins: which hand-offs exist
        plugins = getattr(context, "plugin_name_to_instance", None)
        self._plugins = plugins if plugins is not None else {}
        self._catalog = Catalog(self._logdir)
        flags = getattr(context, "flags", None)
        results = getattr(flags, "perfdiag_results", None)
        scheduler = getattr(flags, "perfdiag_scheduler", None)
        self._service = DiagnosisService(
            self._catalog, DiagnosisCache(version=__version__, **(
                {"disk_dir": results} if results else {})),
            engine=Engine(scheduler) if scheduler else None)
        self._static = _frontend_dir()
        self._static_files = self._list_static()
        self._lock = threading.Lock()

    def _list_static(self) -> set:
        out = set()
        for dirpath, _, files in os.walk(self._static):
            for f in files:
                if f.endswith((".js", ".css", ".html", ".svg", ".json")):
                    out.add(os.path.relpath(os.path.join(dirpath, f), self._static)
                            .replace(os.sep, "/"))
        return out

    # ---- TensorBoard hooks ----
    def get_plugin_apps(self):
        apps = {
            "/runs": self._serve_runs,
            "/diagnosis": self._serve_diagnosis,
            "/gap": self._serve_gap,
            "/steps": self._serve_steps,
            "/overlay": self._serve_overlay,
            "/timeline": self._serve_timeline,
            "/hosts": self._serve_hosts,
            "/progress": self._serve_progress,
            "/compare": self._serve_compare,
            "/collectives": self._serve_collectives,
            "/trend": self._serve_trend,
            "/version": self._serve_version,
            "/status": self._serve_status,
        }
        for rel in self._static_files:
            apps["/" + rel] = self._serve_static
        return apps

    def is_active(self):
        try:
            return self._catalog.has_profiles()
        except Exception:  # a broken logdir must not break TensorBoard's plugin listing
            return False

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="Diagnose")

    # ---- routes ----
    def _respond(self, request, route, fn):
        status, body = answer(route, fn, request.args)
        if isinstance(body, Body):      # built and gzipped once, sent as it is
            return http_util.Respond(request, body.gz, "application/json", code=status,
                                     content_encoding="gzip")
        retry = body.get("retry_after_s") if status == 503 else None
        return http_util.Respond(request, body, "application/json", code=status,
                                 headers=[("Retry-After", str(retry))] if retry else None)

    def _large(self, request, route):
        """A route whose answer can be large: served from the built answers."""
        return self._respond(request, route, lambda p: self._service.response(route, p))

    def _runs(self, params):
        try:
            runs = self._catalog.runs(refresh=params.refresh)
        except StorageError:
            raise
        except OSError as e:  # an unreadable remote logdir and the like
            raise Unavailable(f"cannot list the logdir: {e.strerror or e}") from None
        return {"logdir": self._logdir, "runs": runs_json(runs), "span_rule": SPAN_RULE,
                "profile_plugin": PROFILE_PLUGIN in self._plugins,
                "skipped": [x.to_json() for x in self._catalog.skipped()],
                "reader": reader_kind()}

    @wrappers.Request.application
    def _serve_version(self, request):
        return self._respond(request, "version", lambda _: {"version": __version__})

    @wrappers.Request.application
    def _serve_status(self, request):
        return self._respond(request, "status", lambda _: self._service.status())

    @wrappers.Request.application
    def _serve_runs(self, request):
        return self._respond(request, "runs", self._runs)

    @wrappers.Request.application
    def _serve_diagnosis(self, request):
        return self._large(request, "diagnosis")

    @wrappers.Request.application
    def _serve_gap(self, request):
        return self._large(request, "gap")

    @wrappers.Request.application
    def _serve_steps(self, request):
        return self._large(request, "steps")

    @wrappers.Request.application
    def _serve_overlay(self, request):
        return self._large(request, "overlay")

    @wrappers.Request.application
    def _serve_hosts(self, request):
        return self._respond(request, "hosts", self._service.hosts_json)

    @wrappers.Request.application
    def _serve_progress(self, request):
        return self._respond(request, "progress", self._service.progress_json)

    @wrappers.Request.application
    def _serve_compare(self, request):
        return self._large(request, "compare")

    @wrappers.Request.application
    def _serve_collectives(self, request):
        return self._respond(request, "collectives", self._service.collectives_json)

    @wrappers.Request.application
    def _serve_trend(self, request):
        return self._respond(request, "trend", self._service.trend_json)

    @wrappers.Request.application
    def _serve_timeline(self, request):
        return self._large(request, "timeline")

    @wrappers.Request.application
    def _serve_static(self, request):
        rel = request.path.split(f"/data/plugin/{PLUGIN_NAME}/", 1)[-1]
        if rel not in self._static_files:   # only files listed at start-up are served
            return self._respond(request, None, self._not_found)
        with open(os.path.join(self._static, rel), "rb") as f:
            data = f.read()
        ctype = mimetypes.guess_type(rel)[0] or "application/octet-stream"
        if rel.endswith(".js"):
            ctype = "text/javascript"
        return http_util.Respond(request, data, ctype)

    @staticmethod
    def _not_found(_):
        raise NotFound("not found")


class DiagnoseLoader(base_plugin.TBLoader):
    """Adds the plugin's own TensorBoard flags (each also an environment variable)."""

    def define_flags(self, parser):
        group = parser.add_argument_group("perfdiag (Diagnose tab)")
        group.add_argument(
            "--perfdiag_scheduler", metavar="ADDRESS", default=None,
            help="Dask scheduler that analyses pods' hosts (tcp://host:8786); default "
                 "$TB_PERFDIAG_DASK_SCHEDULER, else a local cluster started on first use")
        group.add_argument(
            "--perfdiag_results", metavar="FOLDER_OR_URL", default=None,
            help="result store shared with other TensorBoards, the CLI and the workers "
                 "(a folder or an fsspec URL such as gs://bucket/perfdiag); default "
                 "$TB_PERFDIAG_RESULTS, else the user's cache folder")

    def load(self, context):
        return DiagnosePlugin(context)
