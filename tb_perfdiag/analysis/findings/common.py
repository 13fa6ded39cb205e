"""What the detectors share: the gap shares by cause family, a finding's cost phrased against
the step, titles and the unit rule."""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ...units import duration
from ...trace.model import Trace
from .. import causes as C
from ..attribution.culprits import (
    applied_fixes,
    framework,
)
from ..steps.losses import compute_devices
from ..steps.windows import in_step_part
from ..result import Finding, FindingKind as FK



MAX_EVIDENCE = 20              # events named in a d2h finding


TOP_SHARE = 0.01               # a top finding costs at least 1 % of a typical step


TITLE_MAX = 240               # characters of a title: a person reads it at a glance


_LONG_ARG = re.compile(r"<([^<>…]{24})[^<>…]{8,}")


TITLE_NAME = 60               # characters of one name in a title (the detail has it whole)


RECURRING = 0.8                # in this share of the steps (and 3 or more): it recurs


# costs paid once (warm-up), reported as a total and its share of the capture, never as
# a rate per step
ONE_TIME = (FK.COMPILATION, FK.GRAPH_CAPTURE)


FAMILY = {C.HOST_SYNC: FK.HOST_SYNC, C.COMPILATION: FK.RECOMPILATION,
          C.DATA_LOADING: FK.INPUT_BOUND, C.H2D_TRANSFER: FK.H2D_TRANSFER,
          C.LAUNCH_OVERHEAD: FK.LAUNCH_BOUND, C.HOST_COMPUTE: FK.HOST_COMPUTE,
          C.COLLECTIVE_WAIT: FK.COLLECTIVE_WAIT, C.UNTRACED: FK.UNTRACED,
          C.DEVICE_WAIT: FK.DEVICE_WAIT, C.ALLOCATOR: FK.ALLOCATOR,
          C.GRAPH_CAPTURE: FK.GRAPH_CAPTURE, C.RUNTIME_CALL: FK.RUNTIME_CALL,
          C.STARTUP: FK.STARTUP}


PHRASE = {FK.HOST_SYNC: "blocks on the device", FK.INPUT_BOUND: "data loading starves the device",
          FK.H2D_TRANSFER: "host→device staging starves the device",
          FK.LAUNCH_BOUND: "kernel launches outpace tiny kernels",
          FK.HOST_COMPUTE: "host work between launches starves the device",
          FK.COLLECTIVE_WAIT: "the device waits for its peers",
          FK.UNTRACED: "the device idles while the host shows no op",
          FK.DEVICE_WAIT: "the device waits on device-side work",
          FK.ALLOCATOR: "memory allocation stalls the device",
          FK.GRAPH_CAPTURE: "CUDA-graph capture (one-time) stalls the device",
          FK.RUNTIME_CALL: "runtime calls stall the device",
          FK.RECOMPILATION: "recompilation (a function compiled again for new shapes) stalls "
                            "the device",
          FK.COMPILATION: "one-time compilation stalls the device",
          FK.GRAPH_BUILDING: "XLA graph building on the host starves the device"}


_fmt = duration            # the one unit rule (units.py)


class _Gaps:
    """The gap columns findings read, as reported (ns, step ids)."""

    def __init__(self, diag):
        g = diag.gaps
        self.g = g
        self.n = len(g)
        self.dur_ns = np.rint((g.end - g.start) / 1000).astype(np.int64)
        self.share_ns = np.rint(g.shares / 1000).astype(np.int64)
        ids = diag.steps.ids
        self.step = np.where(g.step >= 0, ids[np.maximum(g.step, 0)] if ids.size else -1, -1)
        # the part of each gap inside its device's step windows: only that is a cost per
        # step; a gap the gap list puts before the first step or after the last is all
        # outside every step (a sliver of it in step 0's window is no "once in step 0")
        self.inside = np.zeros(self.n, np.int64)
        S = diag.steps
        for d in np.unique(g.device).tolist():
            at = np.flatnonzero(g.device == d)
            self.inside[at] = in_step_part(S.win_start[:, d], S.win_end[:, d], g.start[at],
                                           g.end[at], g.step[at])
        frac = self.inside / np.maximum(g.end - g.start, 1)
        self.share_in_ns = np.rint(self.share_ns * frac[:, None]).astype(np.int64)
        # gaps in a typical step (not one that compiles or stalls): only they make a cost
        # per step, which then never exceeds the step
        typ = S.typical() if len(S) else np.zeros(0, bool)
        self.n_typical = int(typ.sum())
        self.in_typical_step = (g.step >= 0) & (typ[np.maximum(g.step, 0)] if typ.size
                                                else np.zeros(self.n, bool))
        # the devices that compute: a copy-only device's idle is no loss of the job's where
        # another device computes (the page opens on one that computes, for the same reason)
        self.computes = compute_devices(diag)

    def steps_hit(self, rows) -> set:
        st = self.step[rows]
        return set(st[st >= 0].tolist())

    def on_worst_device(self, rows, cause: int) -> tuple:
        """(ns of the cause's share on the device these gaps hit hardest, that device)."""
        rows = np.asarray(rows, np.int64)
        if rows.size == 0:
            return 0, -1
        dev = self.g.device[rows]
        per = np.bincount(dev, weights=self.share_ns[rows, cause],
                          minlength=self.computes.shape[0])
        comp = self.computes[:per.shape[0]]
        if (per[:comp.shape[0]][comp] > 0).any():
            per = np.where(np.r_[comp, np.zeros(per.shape[0] - comp.shape[0], bool)], per, 0)
        d = int(np.argmax(per))
        return int(round(per[d])), d

    def in_steps(self, rows, cause: int, device: int) -> int:
        """ns of the cause's share of these gaps on ``device`` inside its step windows."""
        rows = np.asarray(rows, np.int64)
        rows = rows[self.g.device[rows] == device]
        return int(self.share_in_ns[rows, cause].sum())

    def in_typical(self, rows, cause: int, device: int) -> int:
        """``in_steps`` of the gaps in typical steps alone."""
        rows = np.asarray(rows, np.int64)
        rows = rows[(self.g.device[rows] == device) & self.in_typical_step[rows]]
        return int(self.share_in_ns[rows, cause].sum())


def cost_phrase(diag, inside: float, outside: float, hit: list, n_steps: int,
                extra: dict, once_ok: bool = True) -> str:
    """What a cost means, said plainly: over the capture when it has no steps; once, in
    the one step it hit (of three or more); else the mean per step over all of them
    with the total and the steps it was seen in; and the time outside every step."""
    parts = []
    if diag.steps.source == "whole_trace":
        span = _capture_ns(diag)
        share = inside / span if span else None
        extra.update(capture_share=share)
        if inside:
            parts.append(f"{_fmt(inside)} in the {_fmt(span)} capture"
                         + (f" ({_pct(share)})" if share else ""))
    elif inside and len(hit) == 1 and n_steps >= 3 and once_ok:
        extra.update(once={"step": hit[0], "ns": int(inside)})
        parts.append(f"once, {_fmt(inside)} in step {hit[0]}")
    elif inside:
        seen = f" in {len(hit)} of {n_steps} steps"
        parts.append(f"{_fmt(inside / n_steps)} per step"
                     + (f" on average ({_fmt(inside)}{seen})" if n_steps > 1 else ""))
    if outside > 0:
        parts.append(f"{_fmt(outside)} outside every step")
    return ", ".join(parts)


def cost_phrase_typical(diag, G, rows, typical: float, stalled: float, outside: float,
                        extra: dict) -> str:
    """``cost_phrase`` of a cost partly in steps that compile or stall (outliers of the
    typical step): the mean over the typical steps, and the rest once, in its steps —
    "282 ms per step" of a 49.7 ms step becomes "3379 ms in steps 5 and 9 (compiling or
    stalled)"."""
    S = diag.steps
    out_steps = sorted({int(S.ids[s]) for s in G.g.step[rows].tolist()
                        if s >= 0 and not S.typical()[s]})
    parts = []
    if typical > 0:
        typ_hit = {int(s) for s in G.g.step[rows].tolist() if s >= 0 and S.typical()[s]}
        parts.append(f"{_fmt(typical / G.n_typical)} per typical step on average "
                     f"({_fmt(typical)} in {len(typ_hit)} of {G.n_typical})")
    else:
        extra.update(one_time=True)
    if stalled > 0:
        where = ", ".join(str(x) for x in out_steps[:4]) + (" …" if len(out_steps) > 4 else "")
        parts.append(f"{_fmt(stalled)} once, in step{'s' if len(out_steps) > 1 else ''} "
                     f"{where} (compiling or stalled)")
    if outside > 0:
        parts.append(f"{_fmt(outside)} outside every step")
    return ", ".join(parts)


# where a name may be cut: between its frames and qualifiers, never inside a word
_BOUNDARY = re.compile(r" › |::|: | |/|\|")


def _short(name: str, most: int = TITLE_NAME) -> str:
    """A name as a title shows it: a long template argument cut (``cutlass::Kernel<
    cutlass_80_tensorop_s1688gemm_…>``), then, past ``most`` characters, its leading
    qualifiers and frames folded at a boundary ("…" + the most specific part:
    ``autograd::engine::evaluate_function: CompiledFunctionBackward`` →
    ``…engine::evaluate_function: CompiledFunctionBackward``).  A single word longer than that
    is kept whole up to twice ``most``."""
    name = _LONG_ARG.sub(r"<\1…", name)
    if len(name) <= most:
        return name
    # the latest cut that leaves a tail short enough (the tail starts past a boundary)
    for m in _BOUNDARY.finditer(name):
        tail = name[m.end():].lstrip(" ›")
        if tail and len(tail) + 1 <= most:
            return "…" + tail
    return name if len(name) <= 2 * most else name[:2 * most - 1] + "…"


def _pct(share: float) -> str:
    return f"{100 * share:.1f}%" if share < 0.095 else f"{100 * share:.0f}%"


def _capture_ns(diag) -> float:
    """Length of the capture a one-time cost is weighed against: the steps' host span,
    else the devices' active span."""
    S = diag.steps
    if len(S):
        return float(np.rint((S.host_end.max() - S.host_start.min()) / 1000))
    D = diag.devices
    on = D.lo >= 0
    return float(np.rint((D.hi[on].max() - D.lo[on].min()) / 1000)) if on.any() else 0.0


_SUBJECT: dict = {}       # id(finding) → the subject its title starts with


def _unique_titles(out: list) -> None:
    """Findings whose titles collide name more of their call chain, until they differ."""
    groups = defaultdict(list)
    for f in out:
        groups[f.title].append(f)
    for title, fs in groups.items():
        if len(fs) < 2:
            continue
        for k in range(3, 12):
            names = [" › ".join([c for c in (f.extra.get("chain") or [])
                                 if c != "ProfilerStep"][-k:]) for f in fs]
            if len(set(names)) == len(names):
                break
        for f, n in zip(fs, names):
            subj = _SUBJECT.get(id(f))
            if subj and n and n != subj:
                f.title = f.title.replace(subj, n, 1)
    counts = defaultdict(int)
    for f in out:
        counts[f.title] += 1
        if counts[f.title] > 1:
            f.title = f"{f.title} ({counts[f.title]})"
    _SUBJECT.clear()


def _chain(trace: Trace, e: int) -> list:
    return [trace.event_name(i) for i in trace.chain(e)]


@dataclass
class Scope:
    """What every detector reads (the trace, the diagnosis made so far, its gaps by cause
    family, the framework and the fixes it already applies, the typical step) and the two
    ways a detector reports: ``add`` a finding costed here from its gaps' time (per typical
    step, the rest once), or ``made`` findings it costed itself."""

    trace: Trace
    diag: object
    steps: object
    compile_ev: np.ndarray
    compile_step: np.ndarray
    ctx: object
    G: _Gaps
    fw: str
    applied: frozenset
    n_steps: int
    typical_step: float
    out: list = field(default_factory=list)
    cited: list = field(default_factory=list)

    @classmethod
    def of(cls, trace: Trace, diag, steps, compile_ev, compile_step, ctx) -> "Scope":
        # the one step time every face shows (TYPICAL_STEP: a mean over the typical steps),
        # not a median of its own: a finding's share of the step is of that step
        ts = diag.steps.typical_step_ps()
        # the fixes the trace already applies: a finding offers the next step instead
        return cls(trace, diag, steps, compile_ev, compile_step, ctx, _Gaps(diag),
                   framework(trace), applied_fixes(trace), max(len(diag.steps), 1),
                   ts / 1000 if ts else 0.0)

    def add(self, kind, title, rows, fix, detail, total_ns, device=-1, confidence=None,
            extra=None, steps_hit=None, events=None, ranges=None, in_steps_ns=None,
            typical_ns=None):
        G, n_steps, typical_step = self.G, self.n_steps, self.typical_step
        hit = G.steps_hit(rows) if steps_hit is None else set(steps_hit)
        conf = confidence or ("high" if len(hit) >= max(RECURRING * n_steps, 1) and n_steps > 1
                              else "medium")
        # a cost per step is the part inside the steps, averaged over all of them; given
        # the part in typical steps, over those alone (the typical step's own steps), the
        # steps that compile or stall paying the rest once
        inside = total_ns if in_steps_ns is None else in_steps_ns
        per_step = int(inside / n_steps)
        stalled = 0
        if typical_ns is not None and G.n_typical:
            per_step = int(typical_ns / G.n_typical)
            stalled = max(int(inside - typical_ns), 0)
        f = Finding(kind, title, detail, fix, conf, int(total_ns), per_step, sorted(hit),
                    np.asarray(rows, np.int32), extra=dict(extra or {}))
        if inside < total_ns:
            f.extra["outside_steps_ns"] = int(total_ns - inside)
        if stalled:
            f.extra["outlier_steps_ns"] = stalled
        f.extra["share_of_step"] = per_step / typical_step if typical_step else None
        f.extra["top"] = bool((per_step > 0 and (not typical_step or
                                                 per_step >= TOP_SHARE * typical_step))
                              or (typical_step and stalled >= TOP_SHARE * typical_step * n_steps))
        if device >= 0:
            f.extra["device"] = self.diag.devices.name[device]
        if ranges:
            f.ranges = ranges
        if events is not None:
            f.events = np.asarray(events, np.int64)
            self.cited.append(f.events)
        self.out.append(f)
        return f

    def made(self, found: list) -> None:
        """Findings a detector costed itself, with their share of the typical step."""
        typical_step = self.typical_step
        for f in found:
            f.extra["share_of_step"] = f.time_lost_ns_per_step / typical_step if typical_step \
                else None
            f.extra["top"] = bool(f.time_lost_ns_per_step > 0 and (
                not typical_step or f.time_lost_ns_per_step >= TOP_SHARE * typical_step))
            self.out.append(f)
