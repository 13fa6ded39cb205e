"""``diagnose(path_or_trace) → Report``: the typed diagnosis with its renderers."""
from __future__ import annotations

import os

from .analysis import Diagnosis, Options, analyse
from .analysis.compare.diff import Comparison, compare as compare_diagnoses
from .discovery import scan_logdir, span_label
from .file_analysis import read_and_analyse
from .params import DEFAULT_GAPS_PAGE
from .render import chrome, text
from .render import compare as compare_render
from .analysis.timeline import annotation_spans
from .render.json import diagnosis_json, gap_row
from .storage import filesystem
from .trace import Trace



class Report:
    """A typed ``Diagnosis`` (``.diagnosis``; its fields read through too: ``.gaps``,
    ``.findings``…) with the renderers that turn it into JSON, text or a Chrome trace.
    ``.context`` holds the loaded trace and host timelines when at hand."""

    def __init__(self, diagnosis: Diagnosis, context=None):
        self.diagnosis = diagnosis
        self.context = context

    def __getattr__(self, name):
        return getattr(self.__dict__["diagnosis"], name)

    def to_json(self, all_gaps: bool = True, gaps_offset: int = 0,
                gaps_limit: int = DEFAULT_GAPS_PAGE, step: int | None = None,
                light: bool | None = None, device: int | None = None) -> dict:
        """The JSON the plugin serves: every gap, or (``all_gaps=False``) one page of
        them with ``gaps_total``/``gaps_offset``/``gaps_limit`` as the route pages.
        ``light`` (by default with ``all_gaps=False``, as the route answers): each gap's
        largest host ops only and, above 500 steps, step bins and a few step rows."""
        if light is None:
            light = not all_gaps
        if all_gaps:
            return diagnosis_json(self.diagnosis, step=step, light=light, device=device)
        return diagnosis_json(self.diagnosis, gaps_offset, gaps_limit, step, paged=True,
                              light=light, device=device)

    def to_text(self, label: str = "", top: int = 8) -> str:
        return text.report(label or self.diagnosis.source["path"], self.diagnosis, top)

    def to_chrome_trace(self, with_events: bool = False, gap: str | None = None) -> dict:
        """The diagnosis as Chrome trace JSON (Perfetto, chrome://tracing, the Profile
        plugin's trace viewer); ``with_events`` adds the trace's own events (the longest
        ``chrome.MAX_EVENTS``), ``gap`` (an id) those of a window around that gap."""
        ctx = self.context
        if gap is not None:
            row = gap_row(self.diagnosis, gap)
            if row < 0:
                raise KeyError(f"no gap {gap!r}")
            window = chrome.gap_window(self.diagnosis, row)[0]
            if ctx is None:
                return chrome.overlay(self.diagnosis, window)
            return chrome.overlay(self.diagnosis, window, ctx.trace, row,
                                  annotation_spans(ctx.trace, *window, ctx.origin))
        if with_events and ctx is not None:
            return chrome.overlay(self.diagnosis, None, ctx.trace)
        return chrome.overlay(self.diagnosis)


def diagnose(path_or_trace, **options) -> Report:
    """Diagnose one trace file (or an already loaded ``Trace``).

    Options: ``threshold_us`` (default 5), ``kernels_only`` (default False),
    ``peak_tflops`` (the peak MFU is taken against; default: the device's own).
    """
    opt = Options(**options)
    if isinstance(path_or_trace, Trace):
        return Report(*analyse(path_or_trace, opt))
    return Report(*read_and_analyse(path_or_trace, opt))


def is_folder(path: str) -> bool:
    """Whether ``path`` — a local path, ``file://…`` or an fsspec URL (``gs://``, ``s3://``…),
    anything TensorBoard takes as a logdir — names a folder rather than a file."""
    fs, inner = filesystem(str(path))
    if fs is None:
        return os.path.isdir(inner)
    try:
        return bool(fs.isdir(inner))
    except (OSError, ValueError):
        return False


def trace_files(path: str, skipped: list | None = None) -> list:
    """A file, or every profile file under a folder, as (label, path); ``path`` is anything
    TensorBoard takes as a logdir (see ``is_folder``).  ``skipped``: see ``scan_logdir``."""
    if not is_folder(path):
        fs, inner = filesystem(str(path))
        path = inner if fs is None else str(path)          # file://…: the local path
        return [(os.path.basename(str(path).rstrip("/")), str(path))]
    out = []
    for run in scan_logdir(str(path), skipped).values():
        for s in sorted(run.sources, key=lambda s: (s.host, s.order_key)):
            label = f"{run.name} · {s.host}" + (f" · {span_label(s)}" if s.span else "")
            out.append((label, s.path))
    return out


class CompareReport:
    """A typed before/after ``Comparison`` (``.comparison``; its fields read through:
    ``.devices``, ``.findings``, ``.highlights``…) with its JSON and text renderers."""

    def __init__(self, comparison: Comparison):
        self.comparison = comparison

    def __getattr__(self, name):
        return getattr(self.__dict__["comparison"], name)

    def to_json(self, top: int = compare_render.DEFAULT_TOP, with_steps: bool = True) -> dict:
        return compare_render.comparison_json(self.comparison, top, with_steps)

    def to_text(self, top: int = 8) -> str:
        return compare_render.report(self.comparison, top)


def _diagnosis_of(x, options: dict) -> tuple:
    """(Diagnosis, label) of a path, a loaded ``Trace``, a ``Report`` or a ``Diagnosis``."""
    if isinstance(x, Report):
        return x.diagnosis, os.path.basename(str(x.diagnosis.source.get("path", ""))) or "trace"
    if isinstance(x, Diagnosis):
        return x, os.path.basename(str(x.source.get("path", ""))) or "trace"
    if isinstance(x, Trace):
        return diagnose(x, **options).diagnosis, os.path.basename(str(x.path)) or "trace"
    return diagnose(x, **options).diagnosis, os.path.basename(str(x).rstrip("/"))


def compare(before, after, labels=None, **options) -> CompareReport:
    """Compare two runs: each a trace file, a loaded ``Trace``, a ``Report`` or a
    ``Diagnosis`` (files and traces are diagnosed with ``options``, as ``diagnose``).
    Figures per device and typical step, findings new/gone/grew/shrank, ops and
    annotations whose count or device time changed."""
    a, la = _diagnosis_of(before, options)
    b, lb = _diagnosis_of(after, options)
    return CompareReport(compare_diagnoses(a, b, tuple(labels) if labels else (la, lb)))
