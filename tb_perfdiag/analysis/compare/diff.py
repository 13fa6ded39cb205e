"""Before and after: two typed diagnoses side by side, and what changed between them.

Everything here is read from the two ``Diagnosis`` objects (no trace, no second
analysis), so each figure is the two diagnoses' own figures subtracted:

* **Typical step**: the mean over a diagnosis' typical steps (``StepNumbers.typical``:
  not compiling, not 1.5× the median step); **all steps**: the mean over every step.
  Per device and step set: the device's step window, its busy time, its idle time by
  cause (the gaps' shares in those windows), the gaps under the threshold; duty cycle
  is busy / window summed over the steps (time-weighted).  A trace without steps is one
  step.  Step time is the host's step window.
* **Devices** are paired by name, the rest in order (a run moved from GPU 3 to GPU 1
  still compares), devices without activity left out.
* **Findings** are matched by kind and culprit (the user's frame and op chain, with line
  numbers and numbered suffixes dropped so an edit elsewhere in the file still matches):
  new, gone, grew, shrank or about the same, by their time per step.
* **Ops** by name, host and device apart: count and time per typical step (and per step).
* **Annotations** by path: device time per typical step.

``highlights`` ranks the changes worth a sentence (the renderer writes it): step time,
duty cycle, busy time, idle causes, compilations, findings, ops, annotations — each
weighed by its change per step against the before run's typical step.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

import numpy as np

from .. import causes as C
from ..result import Diagnosis, Finding, FindingKind

GREW_REL = 0.10        # a finding grew/shrank: its time per step changed by ≥ 10 % …
GREW_ABS = 0.01        # … and by ≥ 1 % of the before run's typical step
NOTE_SHARE = 0.01      # a change worth a highlight: ≥ 1 % of the before run's typical step
OP_REL = 0.25          # an op count change worth a highlight: ≥ 25 % and ≥ 1 call per step


class Change(str, enum.Enum):
    NEW = "new"
    GONE = "gone"
    GREW = "grew"
    SHRANK = "shrank"
    SAME = "same"


@dataclass
class StepFigures:
    """One device over a set of steps, per step (means, ps)."""

    steps: int                 # steps averaged over
    window: float              # the device's step window
    busy: float
    idle_by_cause: np.ndarray  # (n_causes,) float
    short_gaps: float          # gaps under the threshold
    launched: float | None     # device time the steps launched (None: not measured)
    # busy time spent waiting for peers at collectives (GUIDE §4), part of ``busy``; None:
    # no join of the run's participants (one file alone, or no collectives)
    peer_wait: float | None = None
    # model FLOPs the steps launched (mean per step), MFU over their windows and the MFU
    # waterfall over them (points per ``EfficiencyTable.parts``); None: no FLOP figures
    flops: float | None = None
    mfu: float | None = None
    waterfall: np.ndarray | None = None
    parts: tuple = ()
    # why the waterfall (or part of its figures) is absent: the diagnosis' own reason for the
    # device ("" when nothing is missing), so a before → after view can say which side lacks
    # figures and why
    missing: str = ""
    # the accelerator and the format its peak is of (``EfficiencyTable``): a before → after
    # across parts or formats says so
    device_model: str = ""
    peak_dtype: str = ""
    # the capture's CUDA/HIP graph replays on the device (``GraphSummary``, whole capture,
    # not per step): events matched to a capture launch, of all replayed; None: no replay
    graph_matched: int | None = None
    graph_total: int | None = None

    @property
    def duty(self) -> float | None:
        return self.busy / self.window if self.window > 0 else None

    @property
    def other_idle(self) -> float:
        """Idle in the windows that is neither a gap's share nor a short gap (a window
        edge before the device's first op, rounding of gaps split at a window edge)."""
        return self.window - self.busy - float(self.idle_by_cause.sum()) - self.short_gaps


@dataclass
class Side:
    """One run's figures (``label`` names it: a file, or run · host · span)."""

    label: str
    source: dict
    threshold_us: float
    kernels_only: bool
    step_source: str
    step_ids: list             # every step id
    typical_ids: list          # the typical ones
    step_time: float           # ps, mean host step window over the typical steps
    step_time_all: float       # ps, over all steps
    step_median: float         # ps, median over all steps
    compilations: int          # over the whole trace
    recompilations: int
    compile_count_per_step: float   # over all steps
    compile_time_per_step: float    # ps
    d2h_per_step: float        # user-level device→host reads per step (all steps)
    h2d_per_step: float

    @property
    def steps(self) -> int:
        return len(self.step_ids)


@dataclass
class DevicePair:
    before: int                # device row in the before diagnosis (−1: none)
    after: int
    name_before: str | None
    name_after: str | None
    paired_by: str             # "name", "order" or "" (one side only)
    duty_before: float | None  # whole trace
    duty_after: float | None
    typical: tuple             # (StepFigures | None, StepFigures | None)
    all_steps: tuple

    @property
    def name(self) -> str:
        if self.name_before == self.name_after or self.name_before is None:
            return self.name_after or ""
        if self.name_after is None:
            return self.name_before
        return f"{self.name_before} → {self.name_after}"


@dataclass
class FindingDelta:
    kind: FindingKind
    culprit: str               # the matching key: culprit chain, label or device
    change: Change
    before: int                # index into the before diagnosis' findings (−1: none)
    after: int
    per_step_before: int       # ns per step (the finding's own figure; 0 when absent)
    per_step_after: int

    @property
    def delta(self) -> int:
        return self.per_step_after - self.per_step_before


@dataclass
class OpDelta:
    name: str
    device: bool
    kind: int                  # EventKind (of the after run when both)
    count_before: float        # per typical step
    count_after: float
    time_before: float         # ps per typical step (host: inclusive; device: device time)
    time_after: float
    count_all_before: float    # per step, all steps
    count_all_after: float
    time_all_before: float
    time_all_after: float

    @property
    def count_delta(self) -> float:
        return self.count_after - self.count_before

    @property
    def time_delta(self) -> float:
        return self.time_after - self.time_before


@dataclass
class DeviceOpDelta:
    """An op group of the device-op table (kernels with template arguments folded, copies
    by direction, XLA ops by HLO instruction), device time and calls per typical step and
    device (the mean over the devices with activity: device time is never summed over
    devices)."""

    name: str
    klass: int                 # OpClass
    before: float              # ps
    after: float
    calls_before: float
    calls_after: float

    @property
    def delta(self) -> float:
        return self.after - self.before


@dataclass
class AnnotationDelta:
    path: tuple
    before: float              # device ps per typical step (inclusive)
    after: float

    @property
    def delta(self) -> float:
        return self.after - self.before


@dataclass
class Highlight:
    """A change worth a sentence; ``weight`` (its change per step as a share of the
    before run's typical step) orders them."""

    what: str        # step_time, duty, busy, idle_cause, compilations, finding, op_count,
                     # op_time (device), op_host_time, annotation
    subject: str     # cause key, finding index, op or annotation name ("" for step time)
    device: str | None
    before: float
    after: float
    weight: float
    ref: int = -1    # findings: index into Comparison.findings; ops: into .ops


@dataclass
class Comparison:
    sides: tuple                      # (Side, Side)
    diagnoses: tuple                  # (Diagnosis, Diagnosis)
    devices: list                     # [DevicePair]
    findings: list                    # [FindingDelta], largest change first
    ops: list                         # [OpDelta], every op of either run
    annotations: list                 # [AnnotationDelta], largest change first
    unscoped: tuple                   # (before, after) device ps per typical step
    highlights: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    device_ops: list = field(default_factory=list)    # [DeviceOpDelta], largest change first
    # each side's peer wait per step and device (ps; None: unknown), ``peer_wait_cells``
    peer: tuple = (None, None)


# ---- one side ----

def _host_step_ps(diag: Diagnosis) -> np.ndarray:
    S = diag.steps
    return (np.asarray(S.host_end, np.int64) - np.asarray(S.host_start, np.int64)).astype(float)


def side_of(diag: Diagnosis, label: str) -> Side:
    S = diag.steps
    typ = S.typical()
    host = _host_step_ps(diag)
    n = max(len(S), 1)
    T, X = diag.compilations, diag.transfers
    n_comp = len(T) if T is not None else 0
    in_steps = (T.step >= 0) if n_comp else np.zeros(0, bool)
    d2h = h2d = 0
    if X is not None and len(X):
        from ..result import Direction
        ok = X.step >= 0
        d2h = int((ok & (X.direction == Direction.D2H)).sum())
        h2d = int((ok & (X.direction == Direction.H2D)).sum())
    return Side(
        label=label, source=dict(diag.source), threshold_us=diag.threshold_us,
        kernels_only=diag.kernels_only, step_source=S.source,
        step_ids=S.ids.tolist(), typical_ids=S.ids[typ].tolist(),
        step_time=float(host[typ].mean()) if host.size else 0.0,
        step_time_all=float(host.mean()) if host.size else 0.0,
        step_median=float(np.median(host)) if host.size else 0.0,
        compilations=n_comp,
        recompilations=int(T.recompile.sum()) if n_comp else 0,
        compile_count_per_step=float(in_steps.sum()) / n,
        compile_time_per_step=float(T.duration[in_steps].sum()) / n if n_comp else 0.0,
        d2h_per_step=d2h / n, h2d_per_step=h2d / n)


def step_figures(diag: Diagnosis, device: int, steps: np.ndarray,
                 peer: np.ndarray | None = None, step_wf: np.ndarray | None = None
                 ) -> StepFigures | None:
    """Device ``device``'s means over the steps selected by the bool mask ``steps``;
    ``peer``: the host's peer wait per step and device (``peer_wait_cells``); ``step_wf``:
    its step waterfalls with that peer wait in them (``run_peer.RunWaterfall``), else the
    diagnosis' own."""
    S = diag.steps
    if device < 0 or not len(S) or not steps.any() or not S.has_device[device]:
        return None
    k = int(steps.sum())
    win = np.maximum(S.win_end[steps, device] - S.win_start[steps, device], 0)
    launched = None
    if S.launched is not None and (S.launched[steps, device] >= 0).all():
        launched = float(S.launched[steps, device].sum()) / k
    pw = float(peer[steps, device].sum()) / k if peer is not None else None
    fig = StepFigures(k, float(win.sum()) / k, float(S.busy[steps, device].sum()) / k,
                      S.idle_by_cause[steps, device, :].sum(axis=0).astype(float) / k,
                      float(S.small_total[steps, device].sum()) / k, launched, pw)
    E = getattr(diag, "efficiency", None)
    if E is None or device >= E.step_flops.shape[1]:
        fig.missing = "the diagnosis has no cost figures for its device ops"
    else:
        fig.missing = E.missing[device] if device < len(E.missing) else ""
        fig.device_model = E.device_model[device] if device < len(E.device_model) else ""
        fig.peak_dtype = E.peak_dtype[device] if device < len(E.peak_dtype) else ""
        fig.graph_matched, fig.graph_total = graph_counts(E, device)
        fl = E.step_flops[steps, device]
        pk = float(E.peak_flops[device])
        if np.isfinite(fl).any() and np.nansum(fl) > 0:
            fig.flops = float(np.nansum(fl)) / k
            if np.isfinite(pk) and win.sum() > 0:
                fig.mfu = float(np.nansum(fl)) / (float(win.sum()) * 1e-12 * pk)
            # the steps' waterfalls weighted by their windows: still 100 points
            src = step_wf if step_wf is not None and step_wf.shape[:2] == E.step_mfu.shape \
                else E.step_waterfall
            wf = src[steps, device].astype(np.float64)
            ok = np.isfinite(wf).all(axis=1) & (win > 0)
            if ok.any():
                fig.waterfall = (wf[ok] * win[ok, None]).sum(axis=0) / float(win[ok].sum())
                fig.parts = tuple(E.parts)
        if fig.waterfall is None and not fig.missing:
            # the device has figures but these steps launched none (or no window)
            fig.missing = "no FLOP figures in these steps"
    return fig


def _duty(diag: Diagnosis, d: int) -> float | None:
    D = diag.devices
    if d < 0 or not D.ops[d]:
        return None
    return int(D.busy[d]) / (int(D.hi[d]) - int(D.lo[d])) if D.hi[d] > D.lo[d] else 1.0


# ---- pairing ----

def pair_devices(a: Diagnosis, b: Diagnosis) -> list:
    """[(before row, after row, how)]: devices with activity, same names first, the rest
    in order; a device on one side only pairs with −1."""
    act_a = [d for d in range(len(a.devices)) if a.devices.ops[d] > 0]
    act_b = [d for d in range(len(b.devices)) if b.devices.ops[d] > 0]
    by_name = {b.devices.name[d]: d for d in act_b}
    pairs, left_a = [], []
    for d in act_a:
        m = by_name.pop(a.devices.name[d], None)
        if m is None:
            left_a.append(d)
        else:
            pairs.append((d, m, "name"))
    left_b = [d for d in act_b if d in by_name.values()]
    for x, y in zip(left_a, left_b):
        pairs.append((x, y, "order"))
    pairs += [(x, -1, "") for x in left_a[len(left_b):]]
    pairs += [(-1, y, "") for y in left_b[len(left_a):]]
    return sorted(pairs, key=lambda p: (p[0] < 0, p[0], p[1]))


# ---- findings ----

_LINE = re.compile(r"(\.py):\d+")
_NUMBERED = re.compile(r"(#|\.)\d+\b")


def _norm(s: str) -> str:
    """A name with what changes between two runs of the same code dropped: source line
    numbers (``train.py:88`` → ``train.py``) and numbered suffixes (``#3``, ``fusion.12``)."""
    return _NUMBERED.sub(r"\1N", _LINE.sub(r"\1", s or ""))


def finding_key(f: Finding, device_name=lambda n: n) -> str:
    """A finding's culprit as the comparison matches it: the user's frame and op chain
    (with the sync label), the family when it folds several places, else its device."""
    cul = f.extra.get("culprit")
    if isinstance(cul, dict):
        where, ops = cul.get("where") or "", [o for o in cul.get("ops") or []]
        if where or ops:
            key = " › ".join(_norm(x) for x in ([where] if where else []) + ops)
            label = f.extra.get("sync")
            return f"{key} ({_norm(label)})" if label else key
        return f"other places ({f.extra.get('cause', '')})"
    dev = f.extra.get("device")
    return device_name(dev) if dev else ""


def culprit_place(f: Finding) -> str:
    """The user's place a finding blames (its innermost user frame, line numbers dropped),
    "" when it names none: what still matches when the op chain below it or the steps it
    hit differ between runs (a DataLoader once in step 10 before, in every step after)."""
    cul = f.extra.get("culprit")
    return _norm(cul.get("where") or "") if isinstance(cul, dict) else ""


def _pair_leftovers(a: Diagnosis, b: Diagnosis, gone: list, new: list) -> list:
    """[(before index, after index, key)]: the findings only one run has, paired when both
    blame the same place with the same kind — one culprit is one row, whatever its op
    chain or steps; the largest of each side first."""
    def by_place(diag, idx):
        out = {}
        for i in sorted(idx, key=lambda i: -int(diag.findings[i].time_lost_ns_per_step)):
            place = culprit_place(diag.findings[i])
            if place:
                out.setdefault((diag.findings[i].kind, place), []).append(i)
        return out
    ga, nb = by_place(a, gone), by_place(b, new)
    return [(i, j, k[1]) for k in ga if k in nb for i, j in zip(ga[k], nb[k])]


def match_findings(a: Diagnosis, b: Diagnosis, rename: dict, step_before: float) -> list:
    """[FindingDelta], the largest change per step first; ``rename`` maps a before device
    name to its after partner (per-device findings match across the pairing).  Findings
    match by kind and culprit key (``finding_key``), then those left by kind and the
    user's place they blame (``culprit_place``)."""
    def keyed(diag, names):
        out, seen = {}, {}
        for i, f in enumerate(diag.findings):
            k = (f.kind, finding_key(f, lambda n: names.get(n, n)))
            seen[k] = seen.get(k, 0) + 1
            if seen[k] > 1:
                k = (k[0], f"{k[1]} #{seen[k]}")
            out[k] = i
        return out
    ka, kb = keyed(a, rename), keyed(b, {})
    pairs = [(k, ka.get(k, -1), kb.get(k, -1)) for k in list(ka) + [k for k in kb if k not in ka]]
    gone = [i for _, i, j in pairs if j < 0]
    new = [j for _, i, j in pairs if i < 0]
    joined = _pair_leftovers(a, b, gone, new)
    if joined:
        used_a = {i for i, _, _ in joined}
        used_b = {j for _, j, _ in joined}
        pairs = [p for p in pairs if not (p[2] < 0 and p[1] in used_a)
                 and not (p[1] < 0 and p[2] in used_b)]
        pairs += [((a.findings[i].kind, key), i, j) for i, j, key in joined]
    out = []
    for k, i, j in pairs:
        pa = int(a.findings[i].time_lost_ns_per_step) if i >= 0 else 0
        pb = int(b.findings[j].time_lost_ns_per_step) if j >= 0 else 0
        # paid once on both sides (a recompilation in steps that compile): by its totals
        ta, tb = (int(a.findings[i].time_lost_ns), int(b.findings[j].time_lost_ns)) \
            if i >= 0 and j >= 0 and _once(a.findings[i]) and _once(b.findings[j]) else (pa, pb)
        if i < 0:
            ch = Change.NEW
        elif j < 0:
            ch = Change.GONE
        # below a top finding's share of the step on one side (a one-step remnant of a
        # fixed DataLoader): the story's gone / new, not shrank / grew
        elif _top(a.findings[i]) and not _top(b.findings[j]):
            ch = Change.GONE
        elif _top(b.findings[j]) and not _top(a.findings[i]):
            ch = Change.NEW
        elif abs(tb - ta) >= GREW_REL * max(ta, 1) and \
                abs(tb - ta) * 1000 >= GREW_ABS * step_before:
            ch = Change.GREW if tb > ta else Change.SHRANK
        else:
            ch = Change.SAME
        out.append(FindingDelta(k[0], k[1], ch, i, j, pa, pb))
    out.sort(key=lambda x: (-abs(x.delta), -max(x.per_step_before, x.per_step_after),
                            x.kind.value, x.culprit))
    return out


def _once(f) -> bool:
    """A finding whose cost is paid once (start-up, a compiling step's, one step's)."""
    return bool(f.extra.get("one_time") or f.extra.get("once"))


def _top(f) -> bool:
    """A finding that costs at least ``findings.TOP_SHARE`` of the typical step."""
    return bool(f.extra.get("top", True))


# ---- ops and annotations ----

def match_ops(a: Diagnosis, b: Diagnosis) -> list:
    """[OpDelta] for every op name of either run (host and device ops apart)."""
    def per_step(diag):
        O = diag.ops
        if O is None:
            return {}
        nt, ns = max(O.typical_steps, 1), max(O.steps, 1)
        return {(n, bool(dv)): (int(k), O.typical_count[i] / nt, O.typical_time[i] / nt,
                                O.step_count[i] / ns, O.step_time[i] / ns)
                for i, (n, dv, k) in enumerate(zip(O.name, O.device.tolist(), O.kind.tolist()))}
    pa, pb = per_step(a), per_step(b)
    zero = (0, 0.0, 0.0, 0.0, 0.0)
    out = []
    for key in list(pa) + [k for k in pb if k not in pa]:
        x, y = pa.get(key, zero), pb.get(key, zero)
        out.append(OpDelta(key[0], key[1], y[0] if key in pb else x[0], x[1], y[1], x[2], y[2],
                           x[3], y[3], x[4], y[4]))
    return out


def _device_op_rows(diag: Diagnosis) -> dict:
    """name → (class, ps, calls) per typical step and active device."""
    T = diag.device_ops
    if T is None or not len(T):
        return {}
    typ = diag.steps.typical()
    n_dev = max(int((diag.devices.ops > 0).sum()), 1)
    if typ.size and T.step.size:            # the table sums the typical steps' cells
        t, c, k = T.typical_time, T.typical_count, max(int(typ.sum()), 1)
    else:                                   # no steps: the whole trace as one
        t, c, k = T.time, T.count, 1
    tt = t / (k * n_dev)
    cc = c / (k * n_dev)
    out: dict = {}
    for i, nm in enumerate(T.name):
        kl, a, b = out.get(nm, (int(T.klass[i]), 0.0, 0.0))
        out[nm] = (kl, a + float(tt[i]), b + float(cc[i]))
    return out


def match_device_ops(a: Diagnosis, b: Diagnosis) -> list:
    ra, rb = _device_op_rows(a), _device_op_rows(b)
    zero = (0, 0.0, 0.0)
    rows = []
    for nm in list(ra) + [n for n in rb if n not in ra]:
        x, y = ra.get(nm, zero), rb.get(nm, zero)
        rows.append(DeviceOpDelta(nm, (y if nm in rb else x)[0], x[1], y[1], x[2], y[2]))
    rows.sort(key=lambda r: (-abs(r.delta), r.name))
    return rows


def _annotation_rows(diag: Diagnosis) -> dict:
    A, typ = diag.annotations, diag.steps.typical()
    k = max(int(typ.sum()), 1)
    out = {}
    for a, path in enumerate(A.paths):
        inc = A.per_step_inclusive[a]
        key = tuple(_norm(p) for p in path)
        v = float(inc[typ[:inc.shape[0]]].sum()) / k if inc.shape[0] == typ.shape[0] else 0.0
        out[key] = out.get(key, 0.0) + v
    return out


def match_annotations(a: Diagnosis, b: Diagnosis) -> tuple:
    ra, rb = _annotation_rows(a), _annotation_rows(b)
    rows = [AnnotationDelta(p, ra.get(p, 0.0), rb.get(p, 0.0))
            for p in list(ra) + [p for p in rb if p not in ra]]
    rows.sort(key=lambda r: (-abs(r.delta), r.path))

    def unscoped(diag):
        per, typ = np.asarray(diag.annotations.unscoped_per_step), diag.steps.typical()
        if per.shape[0] != typ.shape[0]:
            return 0.0
        return float(per[typ].sum()) / max(int(typ.sum()), 1)
    return rows, (unscoped(a), unscoped(b))


# ---- the comparison ----

def no_collectives(diag: Diagnosis) -> bool:
    """Whether ``diag``'s devices ran no collective op (its peer wait is 0, not unknown)."""
    return diag.collectives is None or not len(diag.collectives)


def compare(before: Diagnosis, after: Diagnosis, labels=("before", "after"),
            peer: tuple = (None, None), step_wf: tuple = (None, None)) -> Comparison:
    """``peer``: each side's peer wait per step and device (``peer_wait_cells`` of its
    run's collective join), None where unknown (a run without collectives has 0);
    ``step_wf``: each side's step waterfalls with that peer wait (``run_peer``), None:
    its own."""
    sa, sb = side_of(before, labels[0]), side_of(after, labels[1])
    ta, tb = before.steps.typical(), after.steps.typical()
    alla, allb = np.ones(len(before.steps), bool), np.ones(len(after.steps), bool)
    pa, pb = (p if p is not None or not no_collectives(d) else
              np.zeros((len(d.steps), len(d.devices))) for p, d in zip(peer, (before, after)))
    wa, wb = step_wf
    devices = []
    for x, y, how in pair_devices(before, after):
        devices.append(DevicePair(
            x, y, before.devices.name[x] if x >= 0 else None,
            after.devices.name[y] if y >= 0 else None, how, _duty(before, x), _duty(after, y),
            (step_figures(before, x, ta, pa, wa), step_figures(after, y, tb, pb, wb)),
            (step_figures(before, x, alla, pa, wa), step_figures(after, y, allb, pb, wb))))
    rename = {p.name_before: p.name_after for p in devices if p.before >= 0 and p.after >= 0}
    findings = match_findings(before, after, rename, sa.step_time)
    ops = match_ops(before, after)
    annotations, unscoped = match_annotations(before, after)
    cmp = Comparison((sa, sb), (before, after), devices, findings, ops, annotations, unscoped)
    cmp.device_ops = match_device_ops(before, after)
    cmp.peer = (pa, pb)
    cmp.warnings = _warnings(cmp)
    cmp.highlights = highlights(cmp)
    return cmp


def _warnings(cmp: Comparison) -> list:
    """Facts that limit what the figures mean: kept typed (what, detail) for the renderer."""
    a, b = cmp.sides
    out = []
    if (a.threshold_us, a.kernels_only) != (b.threshold_us, b.kernels_only):
        out.append(("options", ((a.threshold_us, a.kernels_only), (b.threshold_us, b.kernels_only))))
    for i, s in enumerate(cmp.sides):
        if s.step_source == "whole_trace":
            out.append(("no_steps", i))
    if a.source.get("framework") != b.source.get("framework"):
        out.append(("framework", (a.source.get("framework"), b.source.get("framework"))))
    for p in cmp.devices:
        if p.paired_by == "order":
            out.append(("paired_by_order", (p.name_before, p.name_after)))
        elif p.before < 0 or p.after < 0:
            out.append(("unpaired", (p.name_before, p.name_after)))
    if any(d.ops is None for d in cmp.diagnoses):
        out.append(("no_ops", None))
    for i, d in enumerate(cmp.diagnoses):
        if not no_collectives(d) and any(p.typical[i] is not None and p.typical[i].peer_wait is None
                                         for p in cmp.devices):
            out.append(("peer_wait_unknown", i))
    return out


RISING = (Change.NEW, Change.GREW)
RISING_NAMES = tuple(c.value for c in RISING)


def highlights(cmp: Comparison) -> list:
    """The changes worth a sentence, most weighty first (step time always first)."""
    a, b = cmp.sides
    base = a.step_time if a.step_time > 0 else max(b.step_time, 1.0)
    out = []
    if a.step_time > 0 and b.step_time > 0 and abs(b.step_time - a.step_time) >= NOTE_SHARE * base:
        out.append(Highlight("step_time", "", None, a.step_time, b.step_time, float("inf")))
    for p in cmp.devices:
        fa, fb = p.typical
        if fa is None or fb is None:
            continue
        if fa.duty is not None and fb.duty is not None and abs(fb.duty - fa.duty) >= 0.01:
            out.append(Highlight("duty", "", p.name, fa.duty, fb.duty,
                                 1e6 + abs(fb.duty - fa.duty)))
        if abs(fb.busy - fa.busy) >= NOTE_SHARE * base:
            out.append(Highlight("busy", "", p.name, fa.busy, fb.busy,
                                 abs(fb.busy - fa.busy) / base))
        if fa.peer_wait is not None and fb.peer_wait is not None and \
                abs(fb.peer_wait - fa.peer_wait) >= NOTE_SHARE * base:
            out.append(Highlight("peer_wait", "", p.name, fa.peer_wait, fb.peer_wait,
                                 abs(fb.peer_wait - fa.peer_wait) / base))
        d = fb.idle_by_cause - fa.idle_by_cause
        for ci in np.argsort(-np.abs(d), kind="stable")[:3].tolist():
            if abs(d[ci]) >= NOTE_SHARE * base:
                out.append(Highlight("idle_cause", C.ALL[ci], p.name, float(fa.idle_by_cause[ci]),
                                     float(fb.idle_by_cause[ci]), abs(d[ci]) / base))
    if abs(b.compile_time_per_step - a.compile_time_per_step) >= NOTE_SHARE * base or \
            (a.compile_count_per_step > 0) != (b.compile_count_per_step > 0):
        out.append(Highlight("compilations", "", None, a.compile_count_per_step,
                             b.compile_count_per_step,
                             abs(b.compile_time_per_step - a.compile_time_per_step) / base))
    k = 0
    # new and grown findings take the places first: they are what to act on
    ahead = sorted(range(len(cmp.findings)),
                   key=lambda i: cmp.findings[i].change not in RISING)
    for i in ahead:
        f = cmp.findings[i]
        if f.change == Change.SAME or abs(f.delta) * 1000 < NOTE_SHARE * base or k >= 3:
            continue
        out.append(Highlight("finding", f.change.value, None, f.per_step_before * 1000.0,
                             f.per_step_after * 1000.0, abs(f.delta) * 1000 / base, i))
        k += 1
    counts = sorted(range(len(cmp.ops)), key=lambda i: -abs(cmp.ops[i].count_delta))
    k = 0
    for i in counts:
        o = cmp.ops[i]
        if k >= 2 or abs(o.count_delta) < 1:
            break
        if abs(o.count_delta) >= OP_REL * max(o.count_before, o.count_after):
            out.append(Highlight("op_count", o.name, None, o.count_before, o.count_after,
                                 abs(o.time_delta) / base, i))
            k += 1
    times = sorted((i for i, o in enumerate(cmp.ops) if o.device),
                   key=lambda i: -abs(cmp.ops[i].time_delta))
    for i in times[:2]:
        o = cmp.ops[i]
        if abs(o.time_delta) >= NOTE_SHARE * base:
            out.append(Highlight("op_time", o.name, None, o.time_before, o.time_after,
                                 abs(o.time_delta) / base, i))
    # the host op whose time changed most (a sync point blocking longer, a loader gone)
    host = sorted((i for i, o in enumerate(cmp.ops) if not o.device),
                  key=lambda i: -abs(cmp.ops[i].time_delta))
    for i in host[:1]:
        o = cmp.ops[i]
        if abs(o.time_delta) >= 2 * NOTE_SHARE * base:
            out.append(Highlight("op_host_time", o.name, None, o.time_before, o.time_after,
                                 abs(o.time_delta) / base, i))
    for r in cmp.annotations[:2]:
        if abs(r.delta) >= 2 * NOTE_SHARE * base:
            out.append(Highlight("annotation", " › ".join(r.path), None, r.before, r.after,
                                 abs(r.delta) / base))
    # new and grown findings (the story of what went wrong) first, by the time they explain;
    # then the step time and duty cycle (the headline the rest adds up to); then the rest by
    # the time they explain
    def rank(h):
        if h.what == "finding" and h.subject in RISING_NAMES:
            return (0, -h.weight)
        return (1 if h.what in ("step_time", "duty") else 2, -h.weight)
    out.sort(key=rank)
    return out


def graph_counts(E, device: int) -> tuple:
    """(replayed device events matched to a capture launch, replayed events) of
    ``device``; (None, None) where it replays no graph."""
    g = getattr(E, "graphs", None) if E is not None else None
    if g is None or device >= len(g.total) or not int(g.total[device]):
        return None, None
    return int(g.matched[device]), int(g.total[device])
