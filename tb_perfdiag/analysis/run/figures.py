"""One capture's figures as the trend shows them, read from its typed diagnosis with the
comparison's own per-side figures (``compare.side_of``, ``compare.step_figures``), so a
trend and a before → after compare of the same two files agree.

* **Step time**: the typical step (``StepNumbers.typical_step_ps``, the one every face
  shows).
* **Duty cycle, MFU, idle by cause**: over the typical steps, per device with activity,
  then the mean over those devices (a figure per device, never a sum over devices).
  Idle by cause is a share of the device's step window.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import causes as C
from ..compare.diff import side_of, step_figures
from ..result import Diagnosis


@dataclass
class CaptureFigures:
    step_time: float           # ps, the typical step (0: no steps)
    first_step: int | None     # the first global step the capture covers (None: unnamed)
    steps: int                 # steps in the capture
    step_source: str
    duty: float | None         # mean over devices with activity, typical steps
    mfu: float | None
    idle_share: np.ndarray     # (n_causes,) share of the step window, mean over devices
    top_title: str = ""        # the largest finding ("" none)
    top_cause: str = ""


def _mean(xs: list) -> float | None:
    xs = [x for x in xs if x is not None and np.isfinite(x)]
    return float(np.mean(xs)) if xs else None


def capture_figures(diag: Diagnosis) -> CaptureFigures:
    S = diag.steps
    side = side_of(diag, "")
    typ = S.typical()
    duty, mfu, shares = [], [], []
    for d in np.flatnonzero(diag.devices.ops > 0).tolist():
        f = step_figures(diag, d, typ)
        if f is None or f.window <= 0:
            continue
        duty.append(f.duty)
        mfu.append(f.mfu)
        shares.append(f.idle_by_cause / f.window)
    share = np.mean(shares, axis=0) if shares else np.zeros(len(C.ALL))
    named = S.source != "whole_trace" and len(S)
    top = diag.findings[0] if diag.findings else None
    return CaptureFigures(
        step_time=float(side.step_time), first_step=int(S.ids[0]) if named else None,
        steps=len(S), step_source=S.source, duty=_mean(duty), mfu=_mean(mfu),
        idle_share=share, top_title=top.title if top else "",
        top_cause=str(top.extra.get("cause") or "") if top else "")
