"""The service's route for a run over time (``/trend``): each capture's figures from its
file's cached diagnosis, kept by file identity.  A mixin of ``DiagnosisService``."""
from __future__ import annotations

from .analysis import Options
from .analysis.run import trust as run_trust
from .analysis.run.figures import capture_figures
from .analysis.run.trend import Capture, slow_host, trend as run_trend
from .errors import ApiError, BadRequest, NotFound, TraceError
from .params import parse
from .render.trend import trend_json
from .run_captures import captures as run_captures, trend_run
from .service_common import RENDER_PEAK, _same

MAX_CAPTURE_FIGURES = 100_000   # a trend's per-file figures kept (a few hundred bytes each)


class TrendRoutes:
    """The trend routes of ``DiagnosisService`` (its catalog, diagnoses and figures)."""

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
