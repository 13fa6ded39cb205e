"""Diagnosis → the terminal report of ``tb-perfdiag diagnose``."""
from __future__ import annotations

import re

from ..units import duration, duration_ps
from ..analysis import causes as C
from ..analysis.result import Diagnosis
from .device_ops import text_lines as device_op_lines
from .efficiency import pct, text_lines as efficiency_lines
from .json import devices_json, finding_json, gap_records, steps_json

# C0 and C1 controls (ESC, CSI, BEL, backspace, carriage return, newline…), DEL, and the
# invisible and bidirectional format characters that reorder or hide what follows
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def _escape(m) -> str:
    o = ord(m.group())
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def safe(s) -> str:
    """``s`` as text a terminal shows as it is: every control character written as an
    escape (``\\x1b[31m``), so names from a trace file cannot recolour, move the cursor,
    retitle or rewrite the terminal, or start a line of their own."""
    return _UNSAFE.sub(_escape, str(s))


def safe_text(s) -> str:
    """``safe`` line by line: a report's own line breaks kept, everything else escaped."""
    return "\n".join(safe(line) for line in str(s).split("\n"))


STEP_LINES = 12       # steps listed one a line; a longer list is summarised


_ms = duration             # the one unit rule (units.py)


def _duty(diag: Diagnosis, dev: dict) -> str:
    """A device's duty cycle over the window its idle adds up over (its steps, or the
    capture), and over its own activity when that differs."""
    sw = dev.get("steps_window")
    own = f"busy {_ms(dev['busy_ns'])} of {_ms(dev['window_ns'])}"
    if not sw or sw["window_ns"] == dev["window_ns"] or sw["duty_cycle"] is None:
        return f"duty cycle {dev['duty_cycle'] * 100:.1f}% ({own}, its active span)"
    over = "the capture" if diag.steps.source == "whole_trace" else \
        f"its {len(diag.steps)} step(s)"
    if sw.get("past_steps"):
        # the window reaches past the steps to the device's work outside them: said so,
        # beside the note that this work counts in no step's figures
        over += " and its work outside them"
    if sw.get("startup_ns"):
        # the steady state: the steps less the start-up they hold
        return (f"duty cycle {sw['steady_duty_cycle'] * 100:.1f}% over {over} leaving out "
                f"{_ms(sw['startup_ns'])} of start-up (busy {_ms(sw['busy_ns'])} of "
                f"{_ms(sw['window_ns'] - sw['startup_ns'])}; "
                f"{sw['duty_cycle'] * 100:.1f}% with it); "
                f"{dev['duty_cycle'] * 100:.1f}% over its active span ({own})")
    return (f"duty cycle {sw['duty_cycle'] * 100:.1f}% over {over} (busy "
            f"{_ms(sw['busy_ns'])} of {_ms(sw['window_ns'])}); "
            f"{dev['duty_cycle'] * 100:.1f}% over its active span ({own})")


def _step_line(s: dict, devices: list) -> str:
    dc = " ".join(f"{devices[int(k)]['name']} {v['duty_cycle'] * 100:.1f}%"
                  + (f" (MFU {pct(v['mfu'])})" if v.get("mfu") is not None else "")
                  for k, v in s["devices"].items() if v["duty_cycle"] is not None)
    extra = f", {s['compile']['count']} compile(s)" if s["compile"]["count"] else ""
    return f"     step {s['id']}: {_ms(s['end_ns'] - s['start_ns'])}, duty {dc}{extra}"


def _steps_summary(steps: list, devices: list) -> list:
    """A long step list in a few lines: the median step, the slowest ones and the
    outliers (compiling, or 1.5× the median), each slow one with its own line."""
    length = [s["end_ns"] - s["start_ns"] for s in steps]
    med = sorted(length)[len(length) // 2]
    slow = sorted(range(len(steps)), key=lambda i: -length[i])[:3]
    out = [i for i, s in enumerate(steps) if s["outlier"]]
    shown = sorted(set(slow) | set(out[:STEP_LINES - 3]))
    lines = [f"   steps: {len(steps)}, median {_ms(med)}; {len(out)} outlier(s) (compiling, "
             f"or 1.5× the median); the slowest and the outliers (every step: --steps all):"]
    return lines + [_step_line(steps[i], devices) + (" (outlier)" if steps[i]["outlier"] else "")
                     for i in shown]


def _cost_suffix(fj: dict) -> str:
    """What a finding costs after its title: a rate per step for a recurring cost only;
    a one-time cost ("once", a warm-up, time outside every step) is its total, said once
    (the title already says it when it says "once")."""
    once = fj.get("one_time") or fj.get("once")
    if once or not fj["time_lost_ns_per_step"]:
        if "once" in fj["title"] or "outside every step" in fj["title"]:
            return ""
        return f" — {_ms(fj['time_lost_ns'])}" + (" once" if once else " in total")
    return f" — {_ms(fj['time_lost_ns_per_step'])}/step"


def report(label: str, diag: Diagnosis, top: int, step: int | None = None,
           all_steps: bool = False, run_efficiency: dict | None = None) -> str:
    """``run_efficiency``: the file's waterfalls with its run's peer wait
    (``efficiency.run_json``), said under its own."""
    # training-loop steps: the call (or the engine's bursts) that marked them
    marker = getattr(diag.steps, "marker", "")
    lines = [f"== {label}",
             f"   {diag.source['events']} events, steps from {diag.steps.source}"
             f"{f' ({marker})' if marker else ''}, gap threshold {diag.threshold_us} µs"]
    t = diag.steps.typical_step_ps()
    if t is not None:
        n, k = len(diag.steps), int(diag.steps.typical().sum())
        lines.append(f"   typical step {duration_ps(t)}: the mean of {k} of {n} step(s)"
                     + (", compiling and 1.5×-median steps left out" if k < n else ""))
    devices = devices_json(diag)
    for dev in devices:
        if dev["duty_cycle"] is None:
            lines.append(f"   {dev['name']}: no device activity")
            continue
        idle = ", ".join(f"{C.LABELS[c]} {_ms(v)}" for c, v in
                         sorted(dev["idle_by_cause_ns"].items(), key=lambda kv: -kv[1]))
        lines.append(f"   {dev['name']}: {_duty(diag, dev)}; idle: {idle or '-'}")
    lines += ["   " + x for x in efficiency_lines(diag, run_efficiency)]
    steps = steps_json(diag)
    if steps and (all_steps or len(steps) <= STEP_LINES):
        lines.append("   steps:")
        lines += [_step_line(s, devices) for s in steps]
    elif steps:
        lines += _steps_summary(steps, devices)
    if diag.findings:
        lines.append("   findings:")
        for f in diag.findings[:top]:
            fj = finding_json(diag, f)
            lines.append(f"   * {fj['title']}{_cost_suffix(fj)} [{fj['confidence']}]")
            lines.append(f"       {fj['detail']}")
            lines.append(f"       fix: {fj['fix']}")
    lines += ["   " + x for x in device_op_lines(diag, top, step)]
    rows = list(range(len(diag.gaps)))
    if step is not None:
        ids = diag.steps.ids
        rows = [r for r in rows if diag.gaps.step[r] >= 0 and ids[diag.gaps.step[r]] == step]
    if rows:
        lines.append(f"   largest gaps ({len(rows)} in total):")
        for g in gap_records(diag, rows[:top]):
            where = f"in step {g['step']}" if g["step"] is not None else \
                "after the last step" if g.get("outside") == "after_last_step" else \
                "before the first step"
            lines.append(f"   - {_ms(g['duration_ns'])} {where} (gap {g['id']}): "
                         f"{C.LABELS[g['cause']]} — {g['evidence']}")
            if g["waited_for"]:
                lines.append(f"       waited for: {' › '.join(g['waited_for']['chain'])}")
            cap = (g["next_op"] or {}).get("captured")
            if cap:
                # replayed from a graph: where its op was launched while it was captured
                ann = f" (annotations: {' › '.join(cap['annotations'])})" \
                    if cap["annotations"] else ""
                lines.append(f"       captured: {' › '.join(cap['chain'][-6:])}{ann}")
            for h in g["host_ops"][:4]:
                lines.append(f"       {h['thread']}: {' › '.join(h['chain'])} ({_ms(h['self_ns'])})")
    for w in diag.warnings:
        lines.append(f"   warning: {w}")
    # every line built here holds names read from the trace file
    return "\n".join(safe(line) for line in lines)
