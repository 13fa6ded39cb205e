"""Budgets a CI job holds a run to, checked against its typed diagnosis.

* ``min_duty``: every device with activity keeps a duty cycle per typical step of at
  least this fraction (busy / window over the typical steps: compiling steps and
  outliers left out, so a warm-up does not fail the job).
* ``max_idle``: {cause: fraction}: on every device, that cause's idle time per typical
  step stays within this share of the step window.
* ``max_regression`` with a baseline: the typical step is at most this much slower than
  the baseline's (a ``compare.Comparison`` of the two, which also names what grew).

Results are typed (``Result``); ``render/check.py`` words them for a terminal, JUnit XML
and GitHub annotations.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import causes as C
from .compare import Comparison, step_figures
from .result import Diagnosis


@dataclass
class Budgets:
    min_duty: float | None = None
    max_idle: dict = field(default_factory=dict)      # cause key → fraction of the step
    max_regression: float | None = None               # fraction; needs a baseline

    def empty(self) -> bool:
        return self.min_duty is None and not self.max_idle and self.max_regression is None


@dataclass
class Result:
    budget: str            # "min_duty" | "max_idle" | "max_regression"
    subject: str           # device name, "cause on device", or "" (step time)
    value: float | None    # measured: a fraction (duty, idle share, slowdown)
    limit: float
    ok: bool
    detail: dict = field(default_factory=dict)   # figures behind it (ps per step…)


def check(diag: Diagnosis, budgets: Budgets, baseline: Comparison | None = None) -> list:
    """[Result], one per budget and device (``baseline``: the comparison of the baseline
    run with this one, for ``max_regression``)."""
    out = []
    typ = diag.steps.typical()
    active = [d for d in range(len(diag.devices)) if diag.devices.ops[d] > 0]
    figs = {d: step_figures(diag, d, typ) for d in active}
    figs = {d: f for d, f in figs.items() if f is not None}
    if budgets.min_duty is not None:
        if not figs:
            out.append(Result("min_duty", "", None, budgets.min_duty, False,
                              {"reason": "no device activity"}))
        for d, f in figs.items():
            duty = f.duty
            out.append(Result("min_duty", diag.devices.name[d], duty, budgets.min_duty,
                              duty is not None and duty >= budgets.min_duty,
                              {"busy_ps": f.busy, "window_ps": f.window, "steps": f.steps}))
    for cause, limit in budgets.max_idle.items():
        ci = C.ALL.index(cause)
        for d, f in figs.items():
            idle = float(f.idle_by_cause[ci])
            share = idle / f.window if f.window > 0 else 0.0
            out.append(Result("max_idle", f"{cause} on {diag.devices.name[d]}", share, limit,
                              share <= limit, {"cause": cause, "device": diag.devices.name[d],
                                               "idle_ps": idle, "window_ps": f.window,
                                               "steps": f.steps}))
    if budgets.max_regression is not None and baseline is not None:
        a, b = baseline.sides
        slower = (b.step_time - a.step_time) / a.step_time if a.step_time > 0 else 0.0
        grew = []
        for p in baseline.devices:
            fa, fb = p.typical
            if fa is None or fb is None:
                continue
            d = fb.idle_by_cause - fa.idle_by_cause
            grew += [(float(d[i]), C.ALL[i], p.name) for i in np.flatnonzero(d > 0).tolist()]
            if fb.busy > fa.busy:
                grew.append((fb.busy - fa.busy, "busy", p.name))
        # what grew, when the step slowed: the changes of 1 % of the baseline step or more
        grew = sorted((g for g in grew if slower > 0 and g[0] >= 0.01 * a.step_time),
                      reverse=True)
        out.append(Result("max_regression", "", slower, budgets.max_regression,
                          slower <= budgets.max_regression,
                          {"before_ps": a.step_time, "after_ps": b.step_time,
                           "baseline": a.label, "grew": grew[:3]}))
    return out
