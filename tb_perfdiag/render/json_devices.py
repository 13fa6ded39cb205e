"""The devices section of the JSON faces: each device's busy and idle time by cause,
over its activity and over its steps' windows."""
from __future__ import annotations

import numpy as np

from ..analysis import causes as C
from ..analysis.result import Diagnosis
from ..analysis.steps.losses import device_losses
from . import efficiency as eff_json
from .json_ids import ns


def _by_cause(v) -> dict:
    out = {c: ns(v[i]) for i, c in enumerate(C.ALL) if v[i] > 0}
    return {c: x for c, x in out.items() if x > 0}


def devices_json(diag: Diagnosis) -> list:
    D = diag.devices
    # gaps above the threshold per device: what a device's own gap list pages through
    gaps = np.bincount(np.asarray(diag.gaps.device, np.int64), minlength=len(D)).tolist()
    L = device_losses(diag)
    out = []
    for d in range(len(D)):
        if D.ops[d] == 0:
            out.append({"id": d, "name": D.name[d], "kind": D.kind[d], "duty_cycle": None,
                        "busy_ns": 0, "window_ns": 0, "start_ns": None, "end_ns": None,
                        "ops": 0, "gaps": gaps[d], "idle_by_cause_ns": {}})
            continue
        lo, hi, busy = int(D.lo[d]), int(D.hi[d]), int(D.busy[d])
        out.append({"id": d, "name": D.name[d], "kind": D.kind[d],
                    "duty_cycle": busy / (hi - lo) if hi > lo else 1.0,
                    "busy_ns": ns(busy), "window_ns": ns(hi - lo), "start_ns": ns(lo),
                    "end_ns": ns(hi), "ops": int(D.ops[d]), "gaps": gaps[d],
                    "idle_by_cause_ns": _by_cause(D.idle_by_cause[d]),
                    # the one split of each loss every face says: per typical step, once
                    "idle_per_step_ns": _by_cause(L.per_step[d]),
                    "idle_once_ns": _by_cause(L.once[d]),
                    "step_window_ns": (ns(L.step_window[d]) if L.step_window is not None
                                       and L.step_window[d] > 0 else None),
                    "small_gaps": {"count": int(D.small_count[d]),
                                   "total_ns": ns(D.small_total[d])},
                    "steps_window": _steps_window(D, d, busy,
                                                  diag.steps.source != "whole_trace",
                                                  diag.steps),
                    "efficiency": eff_json.device_json(diag, d)})
    return out


_STARTUP_I = C.ALL.index(C.STARTUP)


def _steps_window(D, d: int, busy: int, steps: bool = True, S=None) -> dict:
    """The window the device's idle by cause adds up over: its activity and the step
    windows on it (the duty cycle beside it is over its activity alone).  Over steps, the
    steady state leaves start-up out: ``steady_duty_cycle`` is busy over the window less
    its ``startup_ns``.  With the step numbers ``S``: ``past_steps`` when the device's
    work reaches outside the span of its step windows (the window is then more than the
    steps)."""
    a, b = D.window(d)
    w = max(b - a, 0)
    out = {"start_ns": ns(a), "end_ns": ns(b), "window_ns": ns(w), "busy_ns": ns(busy),
           "idle_ns": ns(w) - ns(busy), "duty_cycle": busy / w if w else None}
    st = int(D.idle_by_cause[d, _STARTUP_I]) if D.idle_by_cause.shape[1] > _STARTUP_I else 0
    if steps and st > 0 and w > st:
        out.update(startup_ns=ns(st), steady_duty_cycle=min(busy / (w - st), 1.0))
    if S is not None:
        wb, we = S.win_start[:, d], S.win_end[:, d]
        open_ = we > wb
        out["past_steps"] = steps and bool(open_.any()) and (
            int(D.lo[d]) < int(wb[open_].min()) or int(D.hi[d]) > int(we[open_].max()))
    return out
