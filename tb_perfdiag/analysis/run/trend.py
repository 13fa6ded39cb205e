"""A run's captures in time order (its trend) and what changed between them.

A **capture** is one profiling window of a run: an XSpace session (all its hosts), or one
span of a PyTorch worker.  Its figures are its diagnosis' (``figures.capture_figures``:
cached, computed once per file); a pod's capture takes the median host's figures and
names its straggler.  A capture with a ``trust`` problem is listed and left out of the
changes and of the noise.

A **change** between two trusted captures is the compare of their typical steps: the
step-time ratio and each cause's delta in points of the step (100 × the change of its
share of the step window).  **Noise** is the run's own capture-to-capture spread over its
trusted captures: σ = 1.4826 × the median absolute deviation of ln(step time) from its
median (a standard deviation that regressed captures, a minority, do not move), and the
same of each cause's points; two captures differ by noise within ``NOISE_K`` × √2 × σ
(at least ``MIN_RATIO_NOISE`` of the step, ``MIN_POINTS_NOISE`` points).  With fewer than
``MIN_CAPTURES`` trusted captures there is no spread to speak of: the floors alone.  A
change is one when its step-time ratio or a cause's delta is beyond the noise; only the
causes beyond it are named.  (Consecutive differences would not do: a regression in one
capture makes two large ones, its onset and its recovery.)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .. import causes as C
from .figures import CaptureFigures

NOISE_K = 3.0
MIN_RATIO_NOISE = 0.05          # 5 % of the step
MIN_POINTS_NOISE = 2.0          # points of the step
MIN_CAPTURES = 4


@dataclass
class Capture:
    session: str               # the session (XSpace) or span (Kineto) name
    start: float | None        # s since the epoch (None: the name gives none, no mtime)
    hosts: list                # hosts read (a pod: several)
    figures: CaptureFigures | None    # None: unreadable
    problems: list = field(default_factory=list)   # [trust.Problem]
    straggler: str | None = None      # a pod's: the host the others wait for
    rows: list = field(default_factory=list)   # per host: (host, figures or None, problems)

    @property
    def ok(self) -> bool:
        return self.figures is not None and not self.problems


@dataclass
class Change:
    before: int                # capture index
    after: int
    ratio: float               # step time after / before
    points: np.ndarray         # (n_causes,) after − before, points of the step
    named: np.ndarray          # bool (n_causes,): beyond the noise
    beyond: bool               # the ratio or a cause is beyond the noise


@dataclass
class Noise:
    ratio: float               # a step-time ratio within exp(±ratio) is noise
    points: np.ndarray         # (n_causes,) points
    captures: int              # trusted captures it was taken over


@dataclass
class Trend:
    run: str
    captures: list             # [Capture], time order
    noise: Noise
    changes: list              # [Change] beyond the noise: consecutive, or against baseline
    baseline: int | None = None


SLOWER_STEP = 1.10     # a pod's slow host: typical step 10 % over the median host's (as
                       # the pod summary flags one when its hosts share no collectives)


def slow_host(rows: list) -> str | None:
    """Of a pod capture's hosts [(host, CaptureFigures or None, problems)], the slowest
    when its typical step is ``SLOWER_STEP`` × the median host's or more; None else.  Where
    the hosts share collectives the straggler is the one the others wait for (the run's
    join), not this."""
    steps = [(f.step_time, h) for h, f, _ in rows if f is not None and f.step_time > 0]
    if len(steps) < 2:
        return None
    med = float(np.median([t for t, _ in steps]))
    t, h = max(steps)
    return h if t >= SLOWER_STEP * med else None


def order(captures: list) -> list:
    """Captures in time order (by start, then name: a session name is its UTC time)."""
    return sorted(captures, key=lambda c: (c.start if c.start is not None else math.inf,
                                           c.session))


def _delta(a: CaptureFigures, b: CaptureFigures) -> tuple:
    ratio = b.step_time / a.step_time if a.step_time > 0 and b.step_time > 0 else math.nan
    return ratio, 100.0 * (b.idle_share - a.idle_share)


def _spread(x: np.ndarray) -> np.ndarray:
    """Per column: the spread of one capture around the run's typical one (1.4826 × the
    median absolute deviation: a standard deviation that a minority of regressed captures
    does not move), times √2 for the difference of two captures."""
    return 1.4826 * np.median(np.abs(x - np.median(x, axis=0)), axis=0) * math.sqrt(2)


def noise_of(captures: list) -> Noise:
    ok = [c.figures for c in captures if c.ok and c.figures.step_time > 0]
    if len(ok) < MIN_CAPTURES:
        return Noise(MIN_RATIO_NOISE, np.full(len(C.ALL), MIN_POINTS_NOISE), len(ok))
    logs = np.log([f.step_time for f in ok])[:, None]
    pts = 100.0 * np.stack([f.idle_share for f in ok])
    return Noise(max(NOISE_K * float(_spread(logs)[0]), MIN_RATIO_NOISE),
                 np.maximum(NOISE_K * _spread(pts), MIN_POINTS_NOISE), len(ok))


def change(captures: list, i: int, j: int, noise: Noise) -> Change:
    ratio, pts = _delta(captures[i].figures, captures[j].figures)
    named = np.abs(pts) > noise.points
    beyond = bool(named.any()) or (math.isfinite(ratio) and abs(math.log(ratio)) > noise.ratio)
    return Change(i, j, ratio, pts, named, beyond)


def trend(run: str, captures: list, baseline: str | None = None) -> Trend:
    """The trend of ``run`` over ``captures`` ([Capture], any order); ``baseline``: a
    session every trusted capture is compared with (else each with the previous trusted
    one).  Raises ``KeyError`` for a baseline that is no capture, ``ValueError`` for one
    that is not trusted."""
    caps = order(captures)
    noise = noise_of(caps)
    ok = [i for i, c in enumerate(caps) if c.ok and c.figures.step_time > 0]
    base = None
    if baseline is not None:
        base = next((i for i, c in enumerate(caps) if c.session == baseline), None)
        if base is None:
            raise KeyError(baseline)
        if base not in ok:
            raise ValueError(baseline)
        pairs = [(base, j) for j in ok if j != base]
    else:
        pairs = list(zip(ok, ok[1:]))
    changes = [ch for ch in (change(caps, i, j, noise) for i, j in pairs) if ch.beyond]
    return Trend(run, caps, noise, changes, base)


def latest_vs_median(t: Trend) -> tuple | None:
    """(latest trusted capture index, its step time ÷ the median step time of the run's
    trusted captures) or None without a trusted capture."""
    ok = [i for i, c in enumerate(t.captures) if c.ok and c.figures.step_time > 0]
    if not ok:
        return None
    med = float(np.median([t.captures[i].figures.step_time for i in ok]))
    return ok[-1], t.captures[ok[-1]].figures.step_time / med


def regression_check(t: Trend, limit: float):
    """``check --trend --max-regression``: a ``budgets.Result`` that fails when the latest
    trusted capture's typical step is more than ``limit`` (a fraction) slower than the
    median of the run's trusted captures (none trusted: it cannot be met)."""
    from ..compare.budgets import Result
    lv = latest_vs_median(t)
    flagged = sum(not c.ok for c in t.captures)
    if lv is None:
        return Result("max_trend_regression", "", None, limit, False,
                      {"captures": len(t.captures), "flagged": flagged})
    i, ratio = lv
    c = t.captures[i]
    return Result("max_trend_regression", "", ratio - 1.0, limit, ratio - 1.0 <= limit,
                  {"latest": c.session, "latest_ps": c.figures.step_time,
                   "median_ps": c.figures.step_time / ratio,
                   "captures": len(t.captures), "flagged": flagged})
