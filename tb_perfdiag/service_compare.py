"""The service's routes that set two files side by side: a comparison (``/compare``) and
``tb-perfdiag check`` against budgets, each file with its run's peer wait.  A mixin of
``DiagnosisService``."""
from __future__ import annotations

from .analysis.compare.budgets import Budgets, check as check_budgets
from .analysis.compare.diff import compare, no_collectives
from .discovery import span_label
from .errors import NotFound, TraceError, trace_error
from .params import parse
from .render.compare import comparison_json
from .service_common import PEAK_PER_DIAG_BYTE, RENDER_PEAK, _same


def _label(run: str, src) -> str:
    """A run's file as comparisons and checks name it: run · host (· span)."""
    return f"{run} · {src.host}" + (f" · {span_label(src)}" if src.span else "")


class CompareRoutes:
    """The comparison routes of ``DiagnosisService`` (its diagnoses and the run joins)."""

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
