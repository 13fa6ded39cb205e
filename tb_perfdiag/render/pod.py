"""Diagnosis → one row of a pod's per-host summary table."""
from __future__ import annotations

import numpy as np

from ..analysis import causes as C
from ..analysis.result import Diagnosis
from .json import gap_ids, ns, ns_list


def _median(xs):
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else None


def summary_row(host: str, span: str, diag: Diagnosis) -> dict:
    S, D, g = diag.steps, diag.devices, diag.gaps
    steps = (np.asarray(ns_list(S.host_end)) - np.asarray(ns_list(S.host_start))).tolist()
    # idle time of a typical step by cause: the median over steps, so a one-off (the
    # first step's compilation) does not hide what every step loses; per device (the
    # mean over devices), never summed over them
    n_dev = max(int(S.has_device.sum()), 1)
    cells = np.rint(S.idle_by_cause[:, S.has_device, :].sum(axis=1) / 1000 / n_dev
                    ).astype(np.int64)
    per_step = {c: cells[:, i].tolist() for i, c in enumerate(C.ALL) if cells[:, i].any()}
    duty_of = [(int(D.busy[d]) / (int(D.hi[d]) - int(D.lo[d])) if D.hi[d] > D.lo[d] else 1.0)
               if D.ops[d] else None for d in range(len(D))]
    duty = [x for x in duty_of if x is not None]
    worst = None
    if len(g):
        st = int(g.step[0])
        worst = {"id": gap_ids(diag, [0])[0], "duration_ns": ns(g.end[0] - g.start[0]),
                 "cause": C.ALL[int(g.cause[0])],
                 "step": int(S.ids[st]) if st >= 0 else None}
    return {
        "host": host, "span": span, "status": 200,
        "devices": [{"name": D.name[d], "duty_cycle": duty_of[d]} for d in range(len(D))],
        "duty_cycle": sum(duty) / len(duty) if duty else None,
        "steps": len(steps), "avg_step_ns": int(sum(steps) / len(steps)) if steps else None,
        "typical_step_ns": int(_median(steps)) if steps else None,
        "worst_gap": worst,
        "top_finding": diag.findings[0].title if diag.findings else None,
        "step_idle_ns": {c: int(_median(v)) for c, v in per_step.items() if _median(v)}}


def error_row(host: str, span: str, status: int, error: str) -> dict:
    return {"host": host, "span": span, "status": status, "error": error}
