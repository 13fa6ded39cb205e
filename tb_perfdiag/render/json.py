"""Diagnosis → the JSON the page, the CLI and the API serve (schema_version 1).

Gaps are paged: a page renders only its own gap records.  A gap's host-op detail
comes from the diagnosis (the largest gaps) or from ``extra_detail`` (computed on
demand for one gap by the server).

The page's first answer (``light``) stays small on any trace: a listed gap carries its
first ``HOST_OPS_SHOWN`` host ops (``host_ops_total`` says how many the ``gap`` route
gives), and above ``STEP_ROWS`` steps the rows give way to ``step_bins`` (per bin the
step times' spread and the mean split of a step) and the rows a reader looks for first,
the others coming from the ``steps`` route a page at a time."""
from __future__ import annotations

import numpy as np
import orjson

from ..analysis import causes as C
from ..analysis.result import Diagnosis, Finding, FindingKind
from ..analysis.steps.windows import DEFINITION as STEP_DEFINITION
from ..analysis.result import TYPICAL_STEP
from ..analysis.steps.losses import primary_device
from .device_ops import device_ops_json
from . import efficiency as eff_json
# the sections' names stay reachable here (``from .json import gap_records, ns``…)
from .json_devices import _STARTUP_I, devices_json  # noqa: F401
from .json_gaps import evidence_text, gap_records, tracelens  # noqa: F401
from .json_ids import _dur, _typical_step_ns, gap_ids, gap_refs, gap_row, ns, ns_list  # noqa: F401
from .json_steps import (MIN_STEP_BINS, STEP_BINS, STEP_CELLS, STEP_ROWS,  # noqa: F401
                         _step_ns, annotations_json, compilations_json, step_bins_json,
                         step_rows_shown, steps_json, steps_page, transfers_json,
                         unscoped_json, user_scopes_json)

SCHEMA_VERSION = 1
MAX_EVIDENCE = 20
# a listed gap's host ops in the first answer (the most self time first): the panel opens
# on these; one gap of a busy host holds hundreds (324 on a TPU host: 78 KB a gap)
HOST_OPS_SHOWN = 5
# lists of the first answer that grow with the trace, cut to their largest (with a total)
ANNOTATIONS_SHOWN = 200      # annotation paths, by inclusive device time
SCOPES_SHOWN = 200           # user scope names, by device time
CALLS_SHOWN = 100            # compilations and transfers each, the longest (time order)
FINDINGS_SHOWN = 50          # findings, largest time lost first (as listed)
FINDING_STEPS_SHOWN = 100    # a finding's steps
WARNINGS_SHOWN = 50
# the gap page of the first answer within this many bytes of JSON: a page of gaps whose
# names and chains are long holds fewer, "Load more" pages on
GAPS_BYTES = 1_200_000

DEFINITIONS = {
    "busy": "Busy set of a device: the union over all its streams/lines of kernels, memcpy and "
            "memset (kernels only when kernels_only is set). Overlapping streams count once.",
    "duty_cycle": "Duty cycle of a window = |busy ∩ window| / |window|, per device. The whole-"
                  "trace figure uses the window [first device activity start, last device "
                  "activity end].",
    "gap": "A gap is a maximal interval inside that window where the busy set is empty, at least "
           "the threshold long; shorter ones are counted and summed per step.",
    "steps": STEP_DEFINITION,
    "typical_step": TYPICAL_STEP,
    "device_time": "Annotation device time is the sum of the durations of the device ops the "
                   "annotation caused (streams may overlap).",
    "compilation": "One per outermost graph compilation with a duration on the user's threads "
                   "(XLAGraphExecutor::Compile, backend_compile_and_load…; passes and compiler "
                   "threads' pieces are part of it). A recompilation is the same function "
                   "compiled again (or compiled after it already ran); a first compile is a "
                   "one-time cost.",
    "transfer": "One per user-level host↔device transfer call on the user's threads (.item()'s "
                "TransferFromDevice, JAX's np.asarray(jax.Array)), however many runtime "
                "threads carry the copy.",
    "mfu": eff_json.DEFINITION,
    "waited_for": "The host op that issued the device op ending the gap (launch, transfer, "
                  "execute), found through correlation ids, flows or program runs.",
    "causes": "Each gap is split into what would have to change to close it: device-side "
              "wait after the next op was issued (collective wait at a collective); host "
              "sync worth the lead over the device the blocking call destroyed; the rest by "
              "what the thread that issued the next op did (data loading, compilation, "
              "host→device staging, allocator, graph capture, launch calls, other runtime "
              "calls, host compute, untraced). The gap's cause is its largest share; idle "
              "time by cause adds up the shares.",
}


def finding_json(diag: Diagnosis, f: Finding) -> dict:
    rows = f.gaps[:MAX_EVIDENCE]
    if rows.size:
        ranges = [[s, e] for s, e in zip(ns_list(diag.gaps.start[rows]),
                                         ns_list(diag.gaps.end[rows]))]
    else:
        ranges = [list(r) for r in f.ranges]
    out = {"kind": f.kind.value, "title": f.title,
           "time_lost_ns_per_step": int(f.time_lost_ns_per_step),
           "time_lost_ns": int(f.time_lost_ns), "confidence": f.confidence,
           "steps": list(f.steps), "fix": f.fix, "detail": f.detail,
           "evidence": {"gaps": gap_ids(diag, rows), "gap_refs": gap_refs(diag, rows),
                        "ranges": ranges}}
    out.update(f.extra)
    if f.kind == FindingKind.D2H_TRANSFER:
        R = diag.refs
        rr = R.row(f.events)
        out["events"] = [{"name": R.strings[int(R.name[r])], "start_ns": int(R.ts[r] // 1000),
                          "duration_ns": int(R.dur[r] // 1000),
                          "chain": [R.strings[i] for i in R.chain[r]]} for r in rr.tolist()]
    return out


def gap_fix(diag: Diagnosis, row: int) -> dict | None:
    """What to change for gap ``row``, for its detail panel: the fix of the finding that
    cites the gap (the one losing most, as findings are listed), else of the finding about
    the gap's cause; None when no finding has a fix. ``finding`` is the finding's index in
    the diagnosis' ``findings`` (None past the ones listed)."""
    cause = C.ALL[int(diag.gaps.cause[row])]
    fs = [(i, f) for i, f in enumerate(diag.findings) if f.fix]   # a few dozen at most
    hit = next(((i, f, "gap") for i, f in fs if f.gaps.size and bool((f.gaps == row).any())), None)
    if hit is None:
        hit = next(((i, f, "cause") for i, f in fs if f.extra.get("cause") == cause), None)
    if hit is None:
        return None
    i, f, via = hit
    return {"text": f.fix, "title": f.title, "via": via,
            "finding": i if i < FINDINGS_SHOWN else None}


def hta_json(diag: Diagnosis) -> dict:
    """Idle time in HTA's categories per device (the mean over the devices with activity:
    idle summed over devices would outgrow the trace)."""
    out = {"host_wait_ns": 0, "kernel_wait_ns": 0, "other_ns": 0}
    dur = np.asarray(ns_list(diag.gaps.end - diag.gaps.start), np.int64)
    for i, c in enumerate(C.ALL):
        out[C.HTA[c] + "_ns"] += int(dur[diag.gaps.cause == i].sum())
    active = np.flatnonzero(diag.devices.ops > 0).tolist()
    for d in active:
        out["kernel_wait_ns"] += ns(diag.devices.small_total[d])
    return {k: int(round(v / max(len(active), 1))) for k, v in out.items()}


def gap_rows(diag: Diagnosis, step: int | None = None, cause: str | None = None,
             device: int | None = None) -> np.ndarray:
    """Rows of the gaps of step ``step`` (an id, as the JSON names steps), whose primary
    cause is ``cause`` and that lie on device ``device``; None: any."""
    g = diag.gaps
    keep = np.ones(len(g), bool)
    if step is not None:
        ids = diag.steps.ids
        st = g.step
        sid = np.where(st >= 0, ids[np.maximum(st, 0)] if ids.size else -1, -1)
        keep &= (st >= 0) & (sid == step)
    if cause is not None:
        keep &= g.cause == C.ALL.index(cause)
    if device is not None:
        keep &= g.device == device
    return np.flatnonzero(keep)


def gaps_page(diag: Diagnosis, offset: int, limit: int, step: int | None = None,
              cause: str | None = None, device: int | None = None) -> dict:
    """One page of the gap records of ``gap_rows``, in the order /diagnosis pages them,
    with how many there are in all."""
    rows = gap_rows(diag, step, cause, device)
    return {"gaps": gap_records(diag, rows[offset:offset + limit]),
            "gaps_total": int(rows.shape[0]), "gaps_offset": offset, "gaps_limit": limit}


def unknown_device(diag: Diagnosis, device: int | None) -> str:
    """Why ``device`` names no device of ``diag`` ("" when it does, or is None)."""
    n = len(diag.devices)
    if device is None or 0 <= device < n:
        return ""
    if n == 0:
        return f"no device {device}: this trace has no device"
    return f"no device {device}: this trace's devices are 0…{n - 1} (devices[].id)"


def diagnosis_json(diag: Diagnosis, gaps_offset: int = 0, gaps_limit: int | None = None,
                   step: int | None = None, paged: bool = False, light: bool = False,
                   device: int | None = None) -> dict:
    """The whole diagnosis; gaps ``[gaps_offset, +gaps_limit)`` of those of ``step`` (all
    steps when None) on ``device`` (all when None).  ``paged`` adds gaps_total/offset/limit
    as the route does.  ``light`` is the page's first answer, bounded on any trace: each
    gap's first HOST_OPS_SHOWN host ops and syncs, chains cut to their ends, a page of
    gaps within GAPS_BYTES; with ``device`` the steps' figures of that device alone; above
    STEP_ROWS steps (or STEP_CELLS step × device figures) the steps binned with a few rows
    (``step_bins_json``, ``step_rows_shown``); annotations' and unscoped per-step figures of
    ``step`` alone; the largest annotations, scopes, compilations, transfers, findings and
    warnings, each list with its total."""
    if why := unknown_device(diag, device):
        raise ValueError(why)
    rows = gap_rows(diag, step, device=device)
    total = int(rows.shape[0])
    end = None if gaps_limit is None else gaps_offset + gaps_limit
    page = rows[gaps_offset:end]
    n_steps = len(diag.steps)
    devs = None if device is None or not light else [device]
    n_devs = 1 if devs else max(1, int(np.count_nonzero(diag.steps.has_device)))
    binned = light and (n_steps > STEP_ROWS or n_steps * n_devs > STEP_CELLS)
    # binned: the per-step figures and calls of the listed steps only
    shown = step_rows_shown(diag, step) if binned else None
    # light: the per-step figures of annotations are the selected step's (the page shows
    # no other); the step's own answer has them for any step
    per_step = shown if not light else (np.flatnonzero(diag.steps.ids == step)
                                         if step is not None else np.zeros(0, np.int64))
    gaps = gap_records(diag, page, host_ops=HOST_OPS_SHOWN if light else None)
    if light and gaps_limit is not None:
        gaps = _within(gaps, GAPS_BYTES)
    out = {
        "schema_version": SCHEMA_VERSION, "source": dict(diag.source),
        "options": {"threshold_us": diag.threshold_us, "kernels_only": diag.kernels_only},
        "definitions": DEFINITIONS, "step_source": diag.steps.source,
        "step_marker": getattr(diag.steps, "marker", "") or None,
        "devices": devices_json(diag),
        "primary_device": primary_device(diag),
        "steps": steps_json(diag, shown, devs), "steps_total": n_steps,
        "typical_step_ns": _typical_step_ns(diag),
        "gaps": gaps,
        "annotations": annotations_json(diag, per_step),
        "unscoped": unscoped_json(diag, per_step), "user_scopes": user_scopes_json(diag),
        "compilations": compilations_json(diag, shown), "transfers": transfers_json(diag, shown),
        "device_ops": device_ops_json(diag, step),
        "findings": [finding_json(diag, f) for f in diag.findings], "hta": hta_json(diag),
        "warnings": list(diag.warnings),
        **startup_steps_json(diag),
    }
    if light:
        T, X = diag.compilations, diag.transfers
        out.update(step_bins=step_bins_json(diag, min(STEP_BINS, max(
                       MIN_STEP_BINS, STEP_CELLS // n_devs)), devs) if binned else None,
                   compilations_total=len(T) if T is not None else 0,
                   recompilations_total=int(np.asarray(T.recompile, bool).sum())
                   if T is not None else 0,
                   transfers_total=len(X) if X is not None else 0)
        _bound(out)
    if paged:
        out.update(gaps_total=total, gaps_offset=gaps_offset,
                   gaps_limit=gaps_limit if gaps_limit is not None else total,
                   gaps_device=device)
    return out


def startup_steps_json(diag: Diagnosis) -> dict:
    """The steps whose windows hold start-up idle on a device (``startup_steps``, ids) and
    the mean step without them (``steady_step_ns``): the steady state leaves start-up
    out.  Empty when no step holds any, or every step does."""
    S = diag.steps
    if not len(S) or diag.steps.source == "whole_trace" or \
            S.idle_by_cause.shape[-1] <= _STARTUP_I:
        return {}
    has = (S.idle_by_cause[:, :, _STARTUP_I] > 0).any(axis=1)
    if not has.any() or has.all():
        return {}
    dur = _step_ns(diag)
    return {"startup_steps": S.ids[has].astype(np.int64).tolist(),
            "steady_step_ns": int(round(float(dur[~has].mean())))}


def _within(records: list, limit: int) -> list:
    """The first of ``records`` whose JSON adds up to at most ``limit`` bytes (one at
    least)."""
    size = 0
    for i, r in enumerate(records):
        size += len(orjson.dumps(r, option=_ORJSON)) + 1
        if size > limit and i:
            return records[:i]
    return records


def _longest(rows: list, limit: int) -> list:
    """The ``limit`` longest of ``rows`` (records with ``duration_ns``), in their order."""
    if len(rows) <= limit:
        return rows
    keep = sorted(sorted(range(len(rows)), key=lambda i: -rows[i]["duration_ns"])[:limit])
    return [rows[i] for i in keep]


def _bound(out: dict) -> None:
    """The first answer's lists that grow with the trace cut to their largest, each with
    its total (the CLI's --full and the API keep every item)."""
    ann = out["annotations"]
    out["annotations_total"] = len(ann)
    if len(ann) > ANNOTATIONS_SHOWN:
        # inclusive time: an annotation's ancestors have at least its own, so they stay
        keep = sorted(sorted(range(len(ann)), key=lambda i: -ann[i]["inclusive_ns"])
                      [:ANNOTATIONS_SHOWN])
        out["annotations"] = [ann[i] for i in keep]
    out["user_scopes_total"] = len(out["user_scopes"])
    out["user_scopes"] = out["user_scopes"][:SCOPES_SHOWN]
    out["compilations"] = _longest(out["compilations"], CALLS_SHOWN)
    out["transfers"] = _longest(out["transfers"], CALLS_SHOWN)
    found = out["findings"]
    out["findings_total"] = len(found)
    out["findings"] = found = found[:FINDINGS_SHOWN]
    for f in found:
        if len(f["steps"]) > FINDING_STEPS_SHOWN:
            f["steps_total"] = len(f["steps"])
            f["steps"] = f["steps"][:FINDING_STEPS_SHOWN]
        if len(f.get("events") or ()) > MAX_EVIDENCE:
            f["events_total"] = len(f["events"])
            f["events"] = f["events"][:MAX_EVIDENCE]
    out["warnings_total"] = len(out["warnings"])
    out["warnings"] = out["warnings"][:WARNINGS_SHOWN]


_INT64 = (-2**63, 2**63 - 1)
_ORJSON = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def _wide(x):
    """``x`` with integers beyond 64 bits (``origin_ps``: ps since 1970) as JSON fragments:
    orjson refuses them, the standard encoder writes them as they are."""
    if isinstance(x, dict):
        return {k: _wide(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_wide(v) for v in x]
    if isinstance(x, int) and not isinstance(x, bool) and not _INT64[0] <= x <= _INT64[1]:
        return orjson.Fragment(str(x).encode())
    return x


def _sources_wide(doc):
    """The small ``source`` dicts made safe up front, so the large rest is encoded once."""
    if not isinstance(doc, dict):
        return doc
    out = dict(doc)
    for k, v in doc.items():
        if k == "source" and isinstance(v, dict):
            out[k] = _wide(v)
        elif isinstance(v, dict) and ("source" in v or k in ("before", "after")):
            out[k] = _sources_wide(v)
    return out


def json_bytes(doc, pretty: bool = False) -> bytes:
    """A route's or the CLI's JSON document as UTF-8 bytes (orjson; NaN as null)."""
    opt = _ORJSON | (orjson.OPT_INDENT_2 if pretty else 0)
    doc = _sources_wide(doc)
    try:
        return orjson.dumps(doc, option=opt)
    except TypeError:           # a wide integer elsewhere: look everywhere
        return orjson.dumps(_wide(doc), option=opt)
