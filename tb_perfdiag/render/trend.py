"""A run's ``Trend`` → the JSON of ``tb-perfdiag trend --json``, the trend route and MCP
(``schema/trend.json``), and its text for a terminal.

Times are ISO 8601 UTC; ``step_time_ns`` the typical step; ``duty_cycle``, ``mfu`` and
``idle_by_cause`` (every cause, by the gap table's names) fractions; a change's
``causes`` the causes beyond the run's noise, in points of the step.
"""
from __future__ import annotations

import math
from datetime import datetime, timezone

from ..analysis import causes as C
from ..analysis.run import trust as T
from ..analysis.run.trend import Trend, latest_vs_median
from ..units import duration_ps


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _clock(t: float | None, session: str) -> str:
    if t is None:
        return f"in {session}"
    return "at " + datetime.fromtimestamp(t, timezone.utc).strftime("%H:%M:%S")


def cause_words(cause: str) -> str:
    return cause.replace("h2d_", "host→device ").replace("_", " ")


def problem_text(p) -> str:
    f = p.figures
    if p.kind == T.EMPTY:
        return ("empty file (0 bytes): the profiler wrote nothing — JAX writes a 0-byte "
                ".xplane.pb and reports success when a capture exceeds 2 GB")
    if p.kind == T.UNREADABLE:
        return f"unreadable or truncated: {f.get('reason', '')}"
    if p.kind == T.NO_DEVICE_EVENTS:
        return (f"{f['planes']} device plane(s) but no device events: the device tracer "
                f"failed silently; this is a host-only capture")
    if p.kind == T.STEPS_WITHOUT_DEVICE:
        return (f"{f['steps']} of {f['of']} steps have no device events: the device was "
                f"not (fully) recorded")
    if p.kind == T.GRAPHS:
        return f"graph replays under-recorded: {f['note']}"
    if p.kind == T.OVERHEAD:
        return (f"the profiler's own overhead is about {100 * f['share']:.0f} % of the capture "
                f"(over {100 * T.MAX_OVERHEAD_SHARE:.0f} %: start/stop "
                f"{duration_ps(f['calls_ps'])}, {f['python_events']} Python-tracer events at "
                f"~{T.PYTHON_EVENT_COST_PS / 1e6:g} µs each)")
    return p.kind


def _num(x, nd: int = 4):
    return None if x is None or not math.isfinite(x) else round(float(x), nd)


def _ms(ps: float) -> str:
    ms = ps / 1e9
    return f"{ms:.1f}" if ms >= 1 else f"{ms:.3g}"


def summary(t: Trend, ch) -> str:
    """"step 3.1 → 29.7 ms at 19:38:59: data loading +80 points"."""
    a, b = t.captures[ch.before], t.captures[ch.after]
    head = (f"step {_ms(a.figures.step_time)} → {_ms(b.figures.step_time)} ms "
            f"{_clock(b.start, b.session)}")
    idx = [i for i in sorted(range(len(C.ALL)), key=lambda i: -abs(ch.points[i]))
           if ch.named[i]]
    parts = [f"{cause_words(C.ALL[i])} {ch.points[i]:+.0f} points" for i in idx[:3]]
    if not parts:
        parts = ["no cause of idle time changed beyond the noise (busy time did)"]
    return head + ": " + ", ".join(parts)


def capture_json(c) -> dict:
    f = c.figures
    out = {"session": c.session, "start_time": iso(c.start),
           "first_step": f.first_step if f else None, "steps": f.steps if f else 0,
           "step_time_ns": int(round(f.step_time / 1000)) if f and f.step_time > 0 else None,
           "duty_cycle": _num(f.duty) if f else None, "mfu": _num(f.mfu) if f else None,
           "idle_by_cause": {c_: _num(float(f.idle_share[i])) for i, c_ in enumerate(C.ALL)}
           if f else {},
           "top_finding": {"title": f.top_title, "cause": f.top_cause or None}
           if f and f.top_title else None,
           "trust": {"ok": c.ok,
                     "problems": list(dict.fromkeys(problem_text(p) for p in c.problems))},
           "hosts": list(c.hosts)}
    if len(c.hosts) > 1:
        out["straggler"] = c.straggler
    return out


def trend_json(t: Trend) -> dict:
    caps = t.captures
    out = {"run": t.run, "captures": [capture_json(c) for c in caps],
           "changes": [{"from": caps[ch.before].session, "to": caps[ch.after].session,
                        "step_time_ratio": _num(ch.ratio),
                        "causes": {C.ALL[i]: round(float(ch.points[i]), 1)
                                   for i in range(len(C.ALL)) if ch.named[i]},
                        "summary": summary(t, ch)} for ch in t.changes],
           "baseline": caps[t.baseline].session if t.baseline is not None else None,
           "noise": {"step_time_ratio": round(math.exp(t.noise.ratio), 4),
                     "points": {c: round(float(t.noise.points[i]), 1)
                                for i, c in enumerate(C.ALL)},
                     "captures": t.noise.captures,
                     "definition": NOISE_TEXT}}
    lv = latest_vs_median(t)
    out["latest_vs_median"] = None if lv is None else {"session": caps[lv[0]].session,
                                                      "ratio": _num(lv[1])}
    return out


NOISE_TEXT = ("A change is one when it exceeds the run's own capture-to-capture spread: "
              "σ = 1.4826 × the median absolute deviation of ln(step time) over the trusted "
              "captures (regressed captures, a minority, do not move it), and the same of "
              "each cause's points; two captures differ beyond the noise past 3 × √2 × σ, "
              "at least 5 % of the step and 2 points. With fewer than 4 trusted captures, "
              "the floors alone.")


def text(t: Trend) -> str:
    lines = [f"run {t.run}: {len(t.captures)} captures"]
    for c in t.captures:
        f = c.figures
        when = iso(c.start) or c.session
        if f is None:
            fig = "—"
        else:
            duty = f"duty {100 * f.duty:.0f} %" if f.duty is not None else "duty —"
            mfu = f", MFU {100 * f.mfu:.1f} %" if f.mfu is not None else ""
            steps = f"steps {f.first_step}+{f.steps}" if f.first_step is not None \
                else f"{f.steps} steps"
            fig = f"step {_ms(f.step_time)} ms, {duty}{mfu}, {steps}"
            if f.top_title:
                fig += f"; top: {f.top_title}"
        flag = "" if c.ok else "  [not trusted: " + "; ".join(
            problem_text(p) for p in c.problems) + "]"
        strag = f"; straggler {c.straggler}" if c.straggler else ""
        lines.append(f"  {c.session}  {when}  {fig}{strag}{flag}")
    lines.append("changes" + (f" against {t.captures[t.baseline].session}"
                              if t.baseline is not None else "") + ":")
    lines += [f"  {summary(t, ch)}" for ch in t.changes] or ["  none beyond the noise"]
    lines.append(f"noise: step time ×{math.exp(t.noise.ratio):.3f}, cause ±"
                 f"{float(t.noise.points.max()):.0f} points at most, over "
                 f"{t.noise.captures} trusted captures")
    return "\n".join(lines)
