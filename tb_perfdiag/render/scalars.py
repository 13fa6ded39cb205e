"""A run's ``Trend`` as TensorBoard scalar points: one per trusted capture and tag, at the
capture's first global step (else its index in the run) and its start time.

Tags: ``perfdiag/step_time_ms`` (the typical step), ``perfdiag/duty_cycle``,
``perfdiag/mfu`` (where the capture has one), ``perfdiag/idle/<cause>`` (share of the
step, every cause by the gap table's names).  Values are rounded as ``trend --json``
prints them, so the two agree.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..analysis import causes as C
from ..analysis.run.trend import Trend

PREFIX = "perfdiag/"


@dataclass(frozen=True)
class Point:
    tag: str
    step: int
    wall_time: float
    value: float


def points(t: Trend) -> list:
    """[Point] of every trusted capture, in time order."""
    out = []
    for i, c in enumerate(t.captures):
        f = c.figures
        if not c.ok:
            continue
        step = f.first_step if f.first_step is not None else i
        wall = c.start if c.start is not None else float(i)
        vals = [("step_time_ms", round(f.step_time / 1e9, 6)),
                ("duty_cycle", None if f.duty is None else round(f.duty, 4)),
                ("mfu", None if f.mfu is None else round(f.mfu, 4))]
        vals += [(f"idle/{c_}", round(float(f.idle_share[k]), 4)) for k, c_ in enumerate(C.ALL)]
        out += [Point(PREFIX + tag, int(step), float(wall), float(v)) for tag, v in vals
                if v is not None]
    return out
