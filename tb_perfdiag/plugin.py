"""The TensorBoard face: routes that return JSON and serve the Diagnose page.

Routes name (run, host, span), never files; they are resolved through the
logdir listing, so no parameter can reach outside the logdir.
"""
from __future__ import annotations

import mimetypes
import os
import threading

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from . import __version__
from .discovery import Catalog, runs_json
from .service import BadRequest, DiagnosisService

PLUGIN_NAME = "perfdiag"
_FRONTEND_CANDIDATES = (
    os.path.join(os.path.dirname(__file__), "frontend"),                  # installed wheel
    os.path.join(os.path.dirname(os.path.dirname(__file__)), "frontend"),  # source checkout
)
_MAX_PARAM = 1024


def _frontend_dir() -> str:
    for d in _FRONTEND_CANDIDATES:
        if os.path.isfile(os.path.join(d, "index.js")):
            return d
    return _FRONTEND_CANDIDATES[0]


class DiagnosePlugin(base_plugin.TBPlugin):
    plugin_name = PLUGIN_NAME

    def __init__(self, context):
        self._logdir = context.logdir or ""
        self._catalog = Catalog(self._logdir)
        self._service = DiagnosisService(self._catalog)
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
            "/overlay": self._serve_overlay,
            "/timeline": self._serve_timeline,
            "/hosts": self._serve_hosts,
            "/progress": self._serve_progress,
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
    def _json(self, request, obj, code=200):
        return http_util.Respond(request, obj, "application/json", code=code)

    def _error(self, request, code, message, **extra):
        body = {"error": message}
        body.update(extra)
        return self._json(request, body, code)

    @staticmethod
    def _params(request) -> dict:
        out = {}
        for k, v in request.args.items():
            if len(k) > 64 or len(v) > _MAX_PARAM or "\x00" in v or "\x00" in k:
                raise BadRequest(f"parameter {k[:64]!r} is too long or contains a null byte")
            out[k] = v
        return out

    @wrappers.Request.application
    def _serve_version(self, request):
        return self._json(request, {"version": __version__})

    @wrappers.Request.application
    def _serve_status(self, request):
        return self._json(request, self._service.status())

    @wrappers.Request.application
    def _serve_runs(self, request):
        try:
            runs = self._catalog.runs(refresh=request.args.get("refresh") == "1")
        except Exception as e:  # unreadable remote logdir and the like
            return self._error(request, 500, f"cannot list the logdir: {e}")
        return self._json(request, {"logdir": self._logdir, "runs": runs_json(runs)})

    @wrappers.Request.application
    def _serve_diagnosis(self, request):
        return self._respond(request, self._service.diagnosis_json)

    @wrappers.Request.application
    def _serve_gap(self, request):
        return self._respond(request, self._service.gap_json)

    @wrappers.Request.application
    def _serve_overlay(self, request):
        return self._respond(request, self._service.overlay_json)

    @wrappers.Request.application
    def _serve_hosts(self, request):
        return self._respond(request, self._service.hosts_json)

    @wrappers.Request.application
    def _serve_progress(self, request):
        return self._respond(request, self._service.progress_json)

    @wrappers.Request.application
    def _serve_timeline(self, request):
        return self._respond(request, self._service.timeline_json)

    def _respond(self, request, fn):
        try:
            params = self._params(request)
            status, body = fn(params)
        except BadRequest as e:
            return self._error(request, 400, str(e))
        return self._json(request, body, status)

    @wrappers.Request.application
    def _serve_static(self, request):
        rel = request.path.split(f"/data/plugin/{PLUGIN_NAME}/", 1)[-1]
        if rel not in self._static_files:   # only files listed at start-up are served
            return self._error(request, 404, "not found")
        with open(os.path.join(self._static, rel), "rb") as f:
            data = f.read()
        ctype = mimetypes.guess_type(rel)[0] or "application/octet-stream"
        if rel.endswith(".js"):
            ctype = "text/javascript"
        return http_util.Respond(request, data, ctype)
