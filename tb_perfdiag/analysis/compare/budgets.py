"""Budgets a CI job holds a run to, checked against its typed diagnosis.

* ``min_duty``: every device with activity keeps a duty cycle per typical step of at
  least this fraction (busy / window over the typical steps: compiling steps and
  outliers left out, so a warm-up does not fail the job).
* ``max_idle``: {cause: fraction}: on every device, that cause's idle time per typical
  step stays within this share of the step window.
* ``max_regression`` with a baseline: the typical step is at most this much slower than
  the baseline's (a ``compare.Comparison`` of the two, which also names what grew).
* ``max_peer_wait``: on every device, the busy time spent waiting for peers at collectives
  per typical step (GUIDE §4, from the run's collective join) stays within this share of
  the step window.  A device without collectives waits 0; one whose collectives could not
  be matched with the other participants' fails: its wait cannot be measured.
* ``min_mfu``: every device with activity keeps an MFU over the typical steps (model FLOPs
  they launched ÷ (their windows × peak), GUIDE §4) of at least this fraction; a device
  with no FLOP figures or no peak fails: its MFU cannot be measured.

Results are typed (``Result``); ``render/check.py`` words them for a terminal, JUnit XML
and GitHub annotations.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import causes as C
from .diff import Comparison, no_collectives, step_figures
from ..result import Diagnosis


@dataclass
class Budgets:
    min_duty: float | None = None
    max_idle: dict = field(default_factory=dict)      # cause key → fraction of the step
    max_regression: float | None = None               # fraction; needs a baseline
    max_peer_wait: float | None = None                # fraction of the step
    min_mfu: float | None = None                      # fraction of the peak

    def empty(self) -> bool:
        return self.min_duty is None and not self.max_idle and self.max_regression is None \
            and self.max_peer_wait is None and self.min_mfu is None


@dataclass
class Result:
    budget: str            # "min_duty" | "max_idle" | "max_regression"
    subject: str           # device name, "cause on device", or "" (step time)
    value: float | None    # measured: a fraction (duty, idle share, slowdown)
    limit: float
    ok: bool
    detail: dict = field(default_factory=dict)   # figures behind it (ps per step…)


def check(diag: Diagnosis, budgets: Budgets, baseline: Comparison | None = None,
          peer=None, peer_note: str = "", waited_for: str | None = None) -> list:
    """[Result], one per budget and device (``baseline``: the comparison of the baseline
    run with this one, for ``max_regression``; ``peer``: the peer wait per step and device,
    ``compare.peer_wait_cells`` of the run's join, None when unknown — ``peer_note`` says
    why; ``waited_for``: the participant it waited for most)."""
    out = []
    typ = diag.steps.typical()
    active = [d for d in range(len(diag.devices)) if diag.devices.ops[d] > 0]
    if peer is None and no_collectives(diag):
        peer = np.zeros((len(diag.steps), len(diag.devices)))
    figs = {d: step_figures(diag, d, typ, peer) for d in active}
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
    if budgets.max_peer_wait is not None:
        lim = budgets.max_peer_wait
        for d, f in figs.items():
            name = diag.devices.name[d]
            if f.peer_wait is None:
                out.append(Result("max_peer_wait", name, None, lim, False,
                                  {"device": name, "reason": peer_note or "its collectives "
                                   "could not be matched with the other participants'"}))
                continue
            share = f.peer_wait / f.window if f.window > 0 else 0.0
            out.append(Result("max_peer_wait", name, share, lim, share <= lim,
                              {"device": name, "peer_wait_ps": f.peer_wait,
                               "window_ps": f.window, "steps": f.steps,
                               "waited_for": waited_for}))
    if budgets.min_mfu is not None:
        out += _mfu_results(diag, active, typ, budgets.min_mfu)
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


def _mfu_results(diag: Diagnosis, active: list, typ: np.ndarray, limit: float) -> list:
    """``min_mfu`` per active device: the typical steps' FLOPs over their windows at peak
    (the device's steps window when there are no steps)."""
    E, S, out = diag.efficiency, diag.steps, []
    for d in active:
        name = diag.devices.name[d]
        why = (E.missing[d] if E is not None else "") or "no FLOP figures"
        pk = float(E.peak_flops[d]) if E is not None else float("nan")
        if E is None or not np.isfinite(pk):
            out.append(Result("min_mfu", name, None, limit, False, {"device": name, "reason": why}))
            continue
        if len(S):
            w = np.clip(S.win_end[typ, d] - S.win_start[typ, d], 0, None).sum() * 1e-12
            f = float(np.nansum(E.step_flops[typ, d]))
            n = int(typ.sum())
        else:
            a, b = diag.devices.window(d)
            w, f, n = (b - a) * 1e-12, float(np.nansum([E.flops[d], E.flops_estimated[d]])), 0
        mfu = f / (w * pk) if w > 0 and f > 0 else None
        # above 1 the peak (or the FLOPs) is wrong: no budget is met by it
        out.append(Result("min_mfu", name, mfu, limit, mfu is not None and limit <= mfu <= 1,
                          {"device": name, "flops": f, "window_s": w, "peak_flops_per_s": pk,
                           "steps": n, "reason": why if mfu is None else ""}))
    return out
