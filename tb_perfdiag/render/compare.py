"""Comparison → the JSON the compare route and ``tb-perfdiag compare --json`` print, and
the terminal report.  Times in ns per step (rounded), duty cycles as fractions."""
from __future__ import annotations

from ..units import duration_ps
from ..analysis import causes as C
from ..analysis.compare.diff import Change, Comparison, StepFigures
from ..analysis.result import TYPICAL_STEP
from ..analysis.device_time.by_op import fold_kernel_name
from ..analysis.result import Diagnosis, OpClass
from ..trace.model import EventKind as K
from .efficiency import DEFINITION as MFU_DEFINITION, part_label, pct
from .json import SCHEMA_VERSION, steps_json

DEFAULT_TOP = 15
_KIND = {int(k): k.name.lower() for k in K}

DEFINITIONS = {
    "typical_step": TYPICAL_STEP,
    "per_step": "The mean over all steps.",
    "device_figures": "Per device and step: the device's step window, its busy time, its "
                      "idle time by cause (the gaps' cause shares), gaps under the "
                      "threshold, and other idle (the rest of the window). Duty cycle = "
                      "busy / window, summed over the steps.",
    "devices": "Devices are paired by name, else in order (paired_by).",
    "findings": "Matched by kind and culprit (the user's frame and op chain; line numbers "
                "and numbered suffixes dropped), then those left by kind and the user's "
                "frame alone, so one culprit is one row whatever its op chain or steps: "
                "new, gone, grew or shrank by at least 10 % "
                "and 1 % of the before run's typical step, else same. Times are the "
                "findings' own time lost per step.",
    "ops": "Count and time per typical step of every op name: host ops with their "
           "inclusive time, device ops (kernels, copies, sets) with their device time; "
           "by_count ranks by the change in count, by_device_time device ops by the change "
           "in device time, by_host_time host ops by the change in host time (a sync "
           "point blocking longer shows here).",
    "annotations": "Device time per typical step of each annotation path (inclusive).",
    "peer_wait": "Peer wait: busy time inside collectives spent waiting for the last "
                 "participant, min(op duration, last arrival − own arrival) per instance, per "
                 "device and step (GUIDE §4); null when the run's collectives could not be "
                 "matched with the other participants', 0 for a run without collectives.",
    "mfu": MFU_DEFINITION + " Compared: each side's waterfall over the steps, weighted by "
           "their windows; waterfall_moved lists the MFU and the parts that moved 1 point "
           "or more.",
}


def _ns(ps) -> int | None:
    return None if ps is None else int(round(ps / 1000))


def _delta(a, b, scale=1.0):
    if a is None or b is None:
        return None
    return (b - a) * scale


def _figures(f: StepFigures | None) -> dict | None:
    if f is None:
        return None
    return {"steps": f.steps, "window_ns": _ns(f.window), "busy_ns": _ns(f.busy),
            "duty_cycle": f.duty, "launched_ns": _ns(f.launched),
            "idle_by_cause_ns": {c: _ns(v) for c, v in zip(C.ALL, f.idle_by_cause.tolist())
                                 if round(v / 1000)},
            "short_gaps_ns": _ns(f.short_gaps), "other_idle_ns": _ns(f.other_idle),
            "peer_wait_ns": _ns(f.peer_wait), "work_duty_cycle": _work(f),
            "flops": f.flops, "mfu": f.mfu, "device_model": f.device_model or None,
            "peak_dtype": f.peak_dtype or None,
            "graph_kernels_matched": f.graph_matched, "graph_kernels_total": f.graph_total,
            "waterfall": {p: round(float(v), 4) for p, v in zip(f.parts, f.waterfall.tolist())
                          if v > 0 or p in _FIXED_PARTS} if f.waterfall is not None else None,
            "missing": f.missing or None}


_FIXED_PARTS = ("small_gaps", "peer_wait", "no_matmul_work", "matmul_below_peak", "mfu")


def _work(f: StepFigures):
    """Duty cycle with the peer wait left out: the share of the window the device did work
    (None when the peer wait is unknown)."""
    if f.peer_wait is None or f.window <= 0:
        return None
    return (f.busy - f.peer_wait) / f.window


def _causes(fa: StepFigures | None, fb: StepFigures | None) -> list:
    """Per cause: ns per step before/after, its change, and its share of the step window;
    largest change first."""
    rows = []
    for i, c in enumerate(C.ALL):
        a = float(fa.idle_by_cause[i]) if fa is not None else 0.0
        b = float(fb.idle_by_cause[i]) if fb is not None else 0.0
        if not round(a / 1000) and not round(b / 1000):
            continue
        sa = a / fa.window if fa is not None and fa.window > 0 else None
        sb = b / fb.window if fb is not None and fb.window > 0 else None
        rows.append({"cause": c, "label": C.LABELS[c], "before_ns": _ns(a), "after_ns": _ns(b),
                     "delta_ns": _ns(b) - _ns(a), "before_share": sa, "after_share": sb,
                     "delta_share": _delta(sa, sb)})
    rows.sort(key=lambda r: (-abs(r["delta_ns"]), r["cause"]))
    return rows


def _waterfall_delta(fa: StepFigures, fb: StepFigures) -> dict | None:
    """Per waterfall part: after − before, in points (None without both waterfalls)."""
    if fa.waterfall is None or fb.waterfall is None:
        return None
    return {p: round(float(y - x), 4) for p, x, y in zip(fa.parts, fa.waterfall.tolist(),
                                                         fb.waterfall.tolist()) if x or y}


WATERFALL_MOVED = 1.0       # points: a waterfall part that moved less is not listed


def waterfall_moves(fa: StepFigures, fb: StepFigures) -> list | None:
    """The waterfall's parts before → after in points, as the CLI and the page list them:
    the achieved MFU first, then every part that moved ``WATERFALL_MOVED`` points or more,
    largest move first (None without both waterfalls).  A part absent on one side is 0
    there."""
    d = _waterfall_delta(fa, fb)
    if d is None:
        return None
    a = dict(zip(fa.parts, fa.waterfall.tolist()))
    b = dict(zip(fb.parts, fb.waterfall.tolist()))
    row = lambda p: {"part": p, "before": round(float(a.get(p, 0.0)), 4),  # noqa: E731
                     "after": round(float(b.get(p, 0.0)), 4), "delta": d.get(p, 0.0)}
    moved = sorted((p for p, v in d.items() if p != "mfu" and abs(v) >= WATERFALL_MOVED),
                   key=lambda p: (-abs(d[p]), p))
    return [row("mfu")] + [row(p) for p in moved]


def _set(fa, fb) -> dict:
    out = {"before": _figures(fa), "after": _figures(fb), "causes": _causes(fa, fb)}
    if fa is not None and fb is not None:
        out["delta"] = {"window_ns": _ns(fb.window) - _ns(fa.window),
                        "busy_ns": _ns(fb.busy) - _ns(fa.busy),
                        "duty_cycle": _delta(fa.duty, fb.duty),
                        "short_gaps_ns": _ns(fb.short_gaps) - _ns(fa.short_gaps),
                        "peer_wait_ns": None if fa.peer_wait is None or fb.peer_wait is None
                        else _ns(fb.peer_wait) - _ns(fa.peer_wait),
                        "mfu": _delta(fa.mfu, fb.mfu),
                        "waterfall": _waterfall_delta(fa, fb),
                        "waterfall_moved": waterfall_moves(fa, fb)}
    return out


def _side(s, diag: Diagnosis, with_steps: bool, peer=None) -> dict:
    out = {"label": s.label, "source": dict(s.source),
           "options": {"threshold_us": s.threshold_us, "kernels_only": s.kernels_only},
           "step_source": s.step_source, "steps": s.steps, "typical_steps": len(s.typical_ids),
           "typical_step_ids": list(s.typical_ids), "step_ns": _ns(s.step_time),
           "step_ns_all": _ns(s.step_time_all), "step_median_ns": _ns(s.step_median),
           "compilations": {"count": s.compilations, "recompilations": s.recompilations,
                            "per_step": s.compile_count_per_step,
                            "ns_per_step": _ns(s.compile_time_per_step)},
           "transfers": {"d2h_per_step": s.d2h_per_step, "h2d_per_step": s.h2d_per_step},
           "devices": [{"id": d, "name": diag.devices.name[d]} for d in range(len(diag.devices))
                       if diag.devices.ops[d] > 0]}
    if with_steps:
        out["step_chart"] = steps_json(diag)
        if peer is not None:          # the bars draw peer wait as a part of busy
            for k, st in enumerate(out["step_chart"]):
                for d, fig in st["devices"].items():
                    fig["peer_wait_ns"] = _ns(peer[k, int(d)])
    return out


def _one_time(f) -> bool:
    """A finding whose cost is paid once (start-up, a first compile, one step's)."""
    return f is not None and bool(f.extra.get("one_time") or f.extra.get("once"))


def _finding(diag: Diagnosis, i: int) -> dict | None:
    if i < 0:
        return None
    f = diag.findings[i]
    return {"title": f.title, "per_step_ns": int(f.time_lost_ns_per_step),
            "steps_hit": len(f.steps), "confidence": f.confidence,
            "top": bool(f.extra.get("top", True)), "fix": f.fix,
            "one_time": _one_time(f), "total_ns": int(f.time_lost_ns)}


def op_label(o) -> str:
    """An op as the tables show it: a kernel's name folded as the device-op table folds it
    (``at::native::foo<…>``), any other name as it is."""
    return fold_kernel_name(o.name) if o.device and o.kind == K.KERNEL else o.name


def _op(o) -> dict:
    return {"name": o.name, "label": op_label(o), "where": "device" if o.device else "host",
            "kind": _KIND.get(o.kind, "other"),
            "count_before": o.count_before, "count_after": o.count_after,
            "count_delta": o.count_delta,
            "time_before_ns": _ns(o.time_before), "time_after_ns": _ns(o.time_after),
            "time_delta_ns": _ns(o.time_after) - _ns(o.time_before),
            "per_step": {"count_before": o.count_all_before, "count_after": o.count_all_after,
                         "time_before_ns": _ns(o.time_all_before),
                         "time_after_ns": _ns(o.time_all_after)}}


def counted_change(o) -> bool:
    """A count change worth listing: half a call per step or more, and 10 % of the count."""
    return abs(o.count_delta) >= max(0.5, 0.1 * max(o.count_before, o.count_after))


def top_ops(cmp: Comparison, top: int) -> tuple:
    """(by count change, device ops by device-time change, host ops by host-time change):
    the ``top`` largest changes of each."""
    by_count = sorted((o for o in cmp.ops if counted_change(o)),
                      key=lambda o: (-abs(o.count_delta), o.name))[:top]

    def by_time(device):
        return sorted((o for o in cmp.ops if o.device == device
                       and abs(o.time_delta) >= 1e6),          # 1 µs per step or more
                      key=lambda o: (-abs(o.time_delta), o.name))[:top]
    return by_count, by_time(True), by_time(False)


def changed_device_ops(cmp: Comparison, top: int) -> list:
    """The ``top`` op groups (the device-op table's grouping) whose device time per typical
    step changed by 1 µs or more, largest change first."""
    return [r for r in cmp.device_ops if abs(r.delta) >= 1e6][:top]


def _device_op(r) -> dict:
    return {"name": r.name, "class": OpClass(r.klass).name.lower(),
            "before_ns": _ns(r.before), "after_ns": _ns(r.after),
            "delta_ns": _ns(r.after) - _ns(r.before),
            "calls_before": r.calls_before, "calls_after": r.calls_after}


def changed_annotations(cmp: Comparison, top: int) -> list:
    """The ``top`` annotations whose device time per typical step changed by 1 µs and
    0.1 % of the before run's typical step or more (largest change first)."""
    floor = max(1e6, 0.001 * cmp.sides[0].step_time)
    return [r for r in cmp.annotations if abs(r.delta) >= floor][:top]


# ---- highlights in words ----

_ms = duration_ps          # the one unit rule (units.py)


def _signed(ps) -> str:
    return "0" if ps == 0 else ("+" if ps > 0 else "−") + _ms(abs(ps))


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _count(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 10 or float(x).is_integer() else f"{x:.1f}"


def _short(name: str, n: int = 80) -> str:
    """A long name (a templated kernel) cut to ``n`` characters."""
    return name if len(name) <= n else name[:n - 1] + "…"


def highlight_text(cmp: Comparison, h) -> str:
    dev = f"{h.device}: " if h.device else ""
    if h.what == "step_time":
        rel = (h.after - h.before) / h.before if h.before else 0
        return (f"typical step {_ms(h.before)} → {_ms(h.after)} ({_signed(h.after - h.before)}, "
                f"{'+' if rel > 0 else '−'}{abs(rel) * 100:.1f}%)")
    if h.what == "duty":
        pair = next((p for p in cmp.devices if p.name == h.device), None)
        fa, fb = pair.typical if pair is not None else (None, None)
        work = ""
        if fa is not None and fb is not None and _work(fa) is not None and \
                _work(fb) is not None and (fa.peer_wait or fb.peer_wait):
            work = (f"; peer wait left out {_pct(_work(fa))} → {_pct(_work(fb))}: the rest was "
                    "waiting for peers at collectives")
        return (f"{dev}duty cycle per typical step {_pct(h.before)} → {_pct(h.after)} "
                f"({'+' if h.after > h.before else '−'}{abs(h.after - h.before) * 100:.1f} points"
                f"{work})")
    if h.what == "busy":
        return (f"{dev}device busy per typical step {_ms(h.before)} → {_ms(h.after)} "
                f"({_signed(h.after - h.before)})")
    if h.what == "peer_wait":
        return (f"{dev}peer wait at collectives per typical step {_ms(h.before)} → "
                f"{_ms(h.after)} ({_signed(h.after - h.before)}; busy time waiting for the last "
                "participant)")
    if h.what == "idle_cause":
        return (f"{dev}{C.LABELS[h.subject].lower()} idle per typical step {_ms(h.before)} → "
                f"{_ms(h.after)} ({_signed(h.after - h.before)})")
    if h.what == "compilations":
        a, b = cmp.sides
        return (f"compilations per step {_count(h.before)} → {_count(h.after)} "
                f"({a.compilations} in {a.steps} steps → {b.compilations} in {b.steps}; "
                f"{_ms(a.compile_time_per_step)} → {_ms(b.compile_time_per_step)} per step)")
    if h.what == "finding":
        f = cmp.findings[h.ref]
        # what went is said by its before title, anything else by its after one
        side = 1 if f.after >= 0 and not (f.change == Change.GONE and f.before >= 0) else 0
        title = cmp.diagnoses[side].findings[f.after if side else f.before].title
        if f.change == Change.NEW:
            return f"new finding: {title}"
        if f.change == Change.GONE:
            return f"gone: {title}"
        if all(_one_time(d.findings[x]) for d, x in zip(cmp.diagnoses, (f.before, f.after))
               if x >= 0):
            return f"{f.change.value}: {title}"
        return (f"{f.change.value}: {title} ({_ms(f.per_step_before * 1000)} → "
                f"{_ms(f.per_step_after * 1000)} per step)")
    if h.what == "op_count":
        return (f"{_short(op_label(cmp.ops[h.ref]))} calls per typical step {_count(h.before)} → "
                f"{_count(h.after)}")
    if h.what == "op_time":
        return (f"{_short(op_label(cmp.ops[h.ref]))}: device time per typical step "
                f"{_ms(h.before)} → {_ms(h.after)} "
                f"({_signed(h.after - h.before)})")
    if h.what == "op_host_time":
        o = cmp.ops[h.ref]
        return (f"{_short(h.subject)}: host time per typical step {_ms(h.before)} → {_ms(h.after)} "
                f"({_signed(h.after - h.before)}; {_count(o.count_before)} → "
                f"{_count(o.count_after)} calls)")
    if h.what == "annotation":
        return (f"annotation {h.subject}: device time per typical step {_ms(h.before)} → "
                f"{_ms(h.after)} ({_signed(h.after - h.before)})")
    return f"{h.what} {h.subject}: {h.before} → {h.after}"


def warning_text(w) -> str:
    what, x = w
    if what == "options":
        (ta, ka), (tb, kb) = x
        return (f"the runs were analysed with different options (threshold {ta} µs"
                f"{', kernels only' if ka else ''} vs {tb} µs{', kernels only' if kb else ''}): "
                "gap and idle figures are not comparable")
    if what == "no_steps":
        return (f"the {'before' if x == 0 else 'after'} run has no steps: its figures are over "
                "the whole trace, not per step")
    if what == "framework":
        return f"different frameworks: {x[0] or 'unknown'} vs {x[1] or 'unknown'}"
    if what == "paired_by_order":
        return f"{x[0]} (before) is compared with {x[1]} (after): no device of the same name"
    if what == "unpaired":
        return (f"{x[0] or x[1]} has activity only in the {'before' if x[0] else 'after'} run")
    if what == "no_ops":
        return "a diagnosis made before op counts existed: ops are not compared"
    if what == "peer_wait_unknown":
        return (f"the {'before' if x == 0 else 'after'} run's peer wait at collectives is "
                "unknown: its collectives could not be matched with the other participants' "
                "(not captured, or not analysed)")
    return str(w)


# ---- JSON ----

_UNITLESS = ("duty", "op_count", "compilations")     # highlights not in time

def comparison_json(cmp: Comparison, top: int = DEFAULT_TOP, with_steps: bool = True) -> dict:
    a, b = cmp.sides
    da, db = cmp.diagnoses
    by_count, by_time, by_host = top_ops(cmp, top)
    step = {"before_ns": _ns(a.step_time), "after_ns": _ns(b.step_time),
            "delta_ns": _ns(b.step_time) - _ns(a.step_time),
            "delta_pct": (b.step_time - a.step_time) / a.step_time if a.step_time else None,
            "all_steps": {"before_ns": _ns(a.step_time_all), "after_ns": _ns(b.step_time_all)}}
    return {
        "schema_version": SCHEMA_VERSION, "kind": "comparison", "definitions": DEFINITIONS,
        "before": _side(a, da, with_steps, cmp.peer[0]),
        "after": _side(b, db, with_steps, cmp.peer[1]),
        "step_time": step,
        "highlights": [{"what": h.what, "subject": h.subject, "device": h.device,
                        "before": h.before if h.what in _UNITLESS else _ns(h.before),
                        "after": h.after if h.what in _UNITLESS else _ns(h.after),
                        "text": highlight_text(cmp, h)} for h in cmp.highlights],
        "devices": [{"before": p.name_before, "after": p.name_after, "name": p.name,
                     "paired_by": p.paired_by or None,
                     "duty_cycle": {"before": p.duty_before, "after": p.duty_after,
                                    "delta": _delta(p.duty_before, p.duty_after)},
                     "typical_step": _set(*p.typical), "per_step": _set(*p.all_steps)}
                    for p in cmp.devices],
        "findings": [{"change": f.change.value, "kind": f.kind.value, "culprit": f.culprit,
                      "per_step_before_ns": f.per_step_before,
                      "per_step_after_ns": f.per_step_after, "delta_ns": f.delta,
                      "before": _finding(da, f.before), "after": _finding(db, f.after)}
                     for f in cmp.findings],
        "ops": {"compared": len(cmp.ops), "limit": top,
                "by_count": [_op(o) for o in by_count],
                "by_device_time": [_op(o) for o in by_time],
                "by_host_time": [_op(o) for o in by_host]},
        "annotations": [{"path": list(r.path), "name": r.path[-1], "before_ns": _ns(r.before),
                         "after_ns": _ns(r.after), "delta_ns": _ns(r.after) - _ns(r.before)}
                        for r in changed_annotations(cmp, top)],
        "unscoped": {"before_ns": _ns(cmp.unscoped[0]), "after_ns": _ns(cmp.unscoped[1])},
        "device_ops": {"compared": len(cmp.device_ops), "limit": top,
                       "by_device_time": [_device_op(r) for r in changed_device_ops(cmp, top)]},
        "warnings": [warning_text(w) for w in cmp.warnings],
    }


# ---- terminal ----

def _graph_line(fa: StepFigures, fb: StepFigures) -> list:
    """Where a side replays CUDA/HIP graphs, how many replayed kernels matched their
    capture: an MFU moved by captures read on one side only says so."""
    if fa.graph_total is None and fb.graph_total is None:
        return []
    side = lambda f: "no graph replays" if f.graph_total is None else \
        f"{f.graph_matched:,} of {f.graph_total:,}"  # noqa: E731
    return [f"     replayed kernels matched to their capture: {side(fa)} → {side(fb)}"]


def _mfu_lines(fa: StepFigures, fb: StepFigures) -> list:
    """MFU and the waterfall's parts that moved a point or more, before → after."""
    if fa.mfu is None and fb.mfu is None:
        return []
    m = lambda x: "–" if x is None else pct(x)  # noqa: E731
    pts = lambda v: f"{'+' if v >= 0 else '−'}{abs(v):.1f} points"  # noqa: E731  (as duty's)
    L = [f"     {'MFU':40} {m(fa.mfu):>9} → {m(fb.mfu):>9}"
         + (f"  {pts((fb.mfu - fa.mfu) * 100)}" if fa.mfu is not None and fb.mfu is not None
            else "")]
    if (fa.device_model, fa.peak_dtype) != (fb.device_model, fb.peak_dtype):
        # each side against its own part's peak, in its own format
        side = lambda f: f"{f.device_model or 'unnamed device'} {f.peak_dtype}".strip()  # noqa: E731
        L.append(f"     peaks: {side(fa)} → {side(fb)}")
    moves = (waterfall_moves(fa, fb) or ())[1:]      # the MFU's own row is the line above
    if moves:
        L.append("     MFU waterfall, points of the step at peak:")
    for r in moves:
        # a part by the name the page and the diagnose report give it, not its JSON key;
        # the name whole, the figures after it (a 40-column cut made "between la")
        L.append(f"       {part_label(r['part'])}: {r['before']:.1f} → {r['after']:.1f} pts "
                 f"({pts(r['delta'])})")
    for tag, f in (("before", fa), ("after", fb)):
        if f.waterfall is None and f.missing:
            L.append(f"     no MFU waterfall {tag}: {f.missing}")
    return L


def report(cmp: Comparison, top: int = 8) -> str:
    a, b = cmp.sides
    L = [f"== compare: {a.label}  →  {b.label}"]
    for tag, s in (("before", a), ("after", b)):
        L.append(f"   {tag + ':':7} {s.label} — {s.source.get('format')}, {s.steps} steps "
                 f"({len(s.typical_ids)} typical) from {s.step_source}, typical step "
                 f"{_ms(s.step_time)} (the host's step)")
    if cmp.highlights:
        L.append("   what changed:")
        L += [f"   * {highlight_text(cmp, h)}" for h in cmp.highlights[:max(top, 3)]]
    else:
        L.append("   what changed: nothing beyond 1 % of a step")
    for p in cmp.devices:
        fa, fb = p.typical
        L.append(f"   {p.name} (typical step; before → after, change):")
        if fa is None or fb is None:
            only = "before" if fb is None else "after"
            L.append(f"     active in the {only} run only")
            continue
        rows = [(f"{p.name}'s step window", fa.window, fb.window), ("busy", fa.busy, fb.busy)]
        # a run with no wait at collectives on either side has no such row ("0 ns → 0 ns")
        if fa.peer_wait is not None and fb.peer_wait is not None and (fa.peer_wait or
                                                                      fb.peer_wait):
            rows.append(("of it peer wait at collectives", fa.peer_wait, fb.peer_wait))
        rows += [(f"{C.LABELS[r['cause']].lower()}", r["before_ns"] * 1000, r["after_ns"] * 1000)
                 for r in _causes(fa, fb)]
        rows += [("gaps under threshold", fa.short_gaps, fb.short_gaps)]
        L.append(f"     {'duty cycle':40} {_pct(fa.duty):>9} → {_pct(fb.duty):>9}  "
                 f"{(fb.duty - fa.duty) * 100:+.1f} points" if fa.duty is not None and
                 fb.duty is not None else f"     duty cycle: {_pct(fa.duty)} → {_pct(fb.duty)}")
        for name, x, y in rows:
            L.append(f"     {name[:40]:40} {_ms(x):>9} → {_ms(y):>9}  {_signed(y - x)}")
        L += _mfu_lines(fa, fb) + _graph_line(fa, fb)
    changed = [f for f in cmp.findings if f.change != Change.SAME][:top]
    if changed:
        L.append("   findings:")
        da, db = cmp.diagnoses
        for f in changed:
            fa = da.findings[f.before] if f.before >= 0 else None
            fb = db.findings[f.after] if f.after >= 0 else None
            title = (fa if f.change == Change.GONE and fa is not None else fb or fa).title
            # once only where every side is paid once: a one-step DataLoader before and
            # one in every step after is a rate per step that grew, not "… once"
            if all(_one_time(x) for x in (fa, fb) if x is not None):
                # a one-time cost (start-up, one step's) has no rate per step: its totals
                tot = [x.time_lost_ns if x is not None else 0 for x in (fa, fb)]
                L.append(f"   - {f.change.value:6} {_ms(tot[0] * 1000):>9} → "
                         f"{_ms(tot[1] * 1000):>9} once  {title}")
                continue
            L.append(f"   - {f.change.value:6} {_ms(f.per_step_before * 1000):>9} → "
                     f"{_ms(f.per_step_after * 1000):>9}/step  {title}")
    by_count, by_time, by_host = top_ops(cmp, top)
    if by_count:
        L.append("   ops, calls per typical step:")
        L += [f"   - {_count(o.count_before):>8} → {_count(o.count_after):>8}  "
              f"{o.name[:90]} ({'device' if o.device else 'host'})" for o in by_count]
    if by_time:
        L.append("   device ops, device time per typical step:")
        L += [f"   - {_ms(o.time_before):>9} → {_ms(o.time_after):>9}  {_signed(o.time_delta):>10}  "
              f"{o.name[:90]}" for o in by_time]
    if by_host:
        L.append("   host ops, host time per typical step (inclusive):")
        L += [f"   - {_ms(o.time_before):>9} → {_ms(o.time_after):>9}  {_signed(o.time_delta):>10}  "
              f"{o.name[:90]}" for o in by_host]
    grouped = changed_device_ops(cmp, top)
    if grouped:
        L.append("   device time by op group, per typical step and device:")
        L += [f"   - {_ms(r.before):>9} → {_ms(r.after):>9}  {_signed(r.delta):>10}  "
              f"{r.name[:90]} ({_count(r.calls_before)} → {_count(r.calls_after)} calls)"
              for r in grouped]
    ann = changed_annotations(cmp, top)
    if ann:
        L.append("   annotations, device time per typical step:")
        L += [f"   - {_ms(r.before):>9} → {_ms(r.after):>9}  {_signed(r.delta):>10}  "
              f"{' › '.join(r.path)[:90]}" for r in ann]
    for w in cmp.warnings:
        L.append(f"   warning: {warning_text(w)}")
    return "\n".join(L)
