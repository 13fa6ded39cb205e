"""The tools an assistant calls on a logdir (``tb-perfdiag mcp``): the plugin's JSON in
pieces it can hold.

Each tool is a method of ``Tools`` registered with ``@tool("one line")``, in ``TOOLS``:
its name, that description and its typed parameters (the signature is the schema the MCP
face publishes; ``mcp_server.py`` adds nothing else).  A new tool is one more method.

Tools name runs, hosts and spans as ``list_runs`` lists them, never files: they go
through the plugin's service (``service.DiagnosisService``) with parameters parsed by
``params.parse`` as a route's, so discovery, the guarded reader (nothing outside the
logdir, no links, the size budget of a gzip bomb), the memory budget, the cache and the
errors are the plugin's.  Every answer is a JSON document within ``max_bytes``
(``render.pieces``: lists paged with ``next_offset``, records trimmed with ``trimmed``).
A failure is raised; ``error_text`` words it for the assistant.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Annotated, Dict, Optional

from .analysis import causes as C
from .analysis.compare.budgets import Budgets
from .analysis.device_time.by_op import STEP_GROUPS
from .discovery import SPAN_RULE, runs_json, span_label
from .errors import ApiError, BadRequest, NotFound, TraceError, Unavailable, as_api_error
from .params import MAX_GAPS_PAGE, parse
from .render import check as check_render
from .render.pieces import DEFAULT_MAX_BYTES, MIN_MAX_BYTES, page, trim

try:                      # per-parameter descriptions in the published schema
    from pydantic import Field
except ImportError:       # pragma: no cover - pydantic comes with the mcp extra
    def Field(description: str = "", **_):
        return description

logger = logging.getLogger(__name__)
MAX_MAX_BYTES = 1 << 20
DEFAULT_GAPS = 50
DEFAULT_FINDINGS = 20
DEFAULT_TOP = 5


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str


TOOLS: list = []          # ToolSpec, in the order listed to the assistant


def tool(description: str):
    """Registers a ``Tools`` method as a tool named after it."""
    assert "\n" not in description
    def deco(fn):
        TOOLS.append(ToolSpec(fn.__name__, description))
        return fn
    return deco


# ---- the parameters the tools share ----
Run = Annotated[str, Field(description="run name as list_runs gives it (never a path)")]
Host = Annotated[Optional[str], Field(
    description="host/worker of the run; may be left out when the run has one")]
Span = Annotated[Optional[str], Field(
    description="capture (span) of the host; the latest when left out")]
Threshold = Annotated[float, Field(description="shortest idle gap listed, µs", ge=0, le=1e7)]
KernelsOnly = Annotated[bool, Field(description="only kernels count as device busy")]
MaxBytes = Annotated[int, Field(
    description="largest answer in bytes; a longer one is paged (next_offset) or trimmed "
                "(trimmed)", ge=MIN_MAX_BYTES, le=MAX_MAX_BYTES)]
Offset = Annotated[int, Field(description="first item of the page (a previous answer's "
                                          "next_offset)", ge=0)]
Capture = Annotated[Optional[str], Field(
    description="a trace recorded while the file's CUDA/HIP graphs were captured, relative to "
                "LOGDIR, to align the graph replays with (summary's graph_captures.choices "
                "lists them); capture_traces/ beside the file when left out")]
PeakTflops = Annotated[Optional[float], Field(
    description="the peak MFU is taken against, TFLOP/s (the device's own from the trace or "
                "its datasheet when absent)", gt=0, le=1e6)]


def _name(what: str, value: Optional[str]) -> Optional[str]:
    """A run/host/span name as given, refused when it is a path: names come from the
    listing and nothing the listing did not find is reachable through one."""
    if value is None:
        return None
    v = str(value)
    parts = v.replace("\\", "/").split("/")
    if v.startswith(("/", "\\", "~")) or ".." in parts or "\x00" in v or \
            (len(v) > 1 and v[1] == ":"):
        raise BadRequest(f"{what} {v!r} is a path: tools take {what} names as list_runs lists "
                         f"them, and read nothing outside LOGDIR")
    return v


def _fraction(what: str, x, at_most_one: bool = True) -> Optional[float]:
    if x is None:
        return None
    x = float(x)
    if not (0 <= x <= (1 if at_most_one else 1e6)):
        raise BadRequest(f"{what} must be a fraction between 0 and 1 (0.8 for 80 %)"
                         if at_most_one else f"{what} must be a fraction ≥ 0 (0.05 for 5 %)")
    return x


def error_text(e: BaseException) -> str:
    """A failure in words for the assistant: the plugin's message for it (the file by
    name, never its path) and its extra fields; an unexpected one by its type alone, with
    the traceback in the server's log."""
    if not isinstance(e, (ApiError, TraceError)):
        logger.error("tb-perfdiag tool failed", exc_info=e)
    err = as_api_error(e)
    if err.status >= 500 and not isinstance(e, ApiError) and not isinstance(err, Unavailable):
        return f"internal error ({type(e).__name__}); the server's log (stderr) has the details"
    extra = ", ".join(f"{k}: {v}" for k, v in err.extra.items() if v is not None)
    kind = {400: "bad request", 404: "not found", 413: "too large", 422: "unreadable file",
            503: "unavailable now"}.get(err.status, f"error {err.status}")
    return f"{kind}: {err.message}" + (f" ({extra})" if extra else "")


class Tools:
    """The tools over one ``DiagnosisService`` (its catalog is LOGDIR's)."""

    def __init__(self, service):
        self.service = service
        self.catalog = service.catalog

    # ---- resolving names ----
    def _run(self, run: str):
        name = _name("run", run)
        r = self.catalog.runs().get(name) or self.catalog.runs(refresh=True).get(name)
        if r is None:
            raise NotFound(f"no run {name!r} in LOGDIR; list_runs names the runs")
        return r

    def _host(self, run: str, host: Optional[str]) -> str:
        r = self._run(run)
        hosts = r.hosts()
        host = _name("host", host)
        if host is None:
            if len(hosts) == 1:
                return hosts[0]
            raise BadRequest(f"run {run!r} has {len(hosts)} hosts ({', '.join(hosts[:8])}"
                             f"{', …' if len(hosts) > 8 else ''}): name one with host")
        if host not in hosts:
            raise NotFound(f"no host {host!r} in run {run!r}; its hosts: "
                           f"{', '.join(hosts[:8])}{', …' if len(hosts) > 8 else ''}")
        return host

    def _params(self, route: str, run, host, span, threshold_us, kernels_only, **more):
        q = {"run": _name("run", run), "host": self._host(run, host),
             "span": _name("span", span), "threshold_us": repr(float(threshold_us)),
             "kernels_only": "1" if kernels_only else "0"}
        q.update({k: str(v) for k, v in more.items() if v is not None})
        return parse(route, {k: v for k, v in q.items() if v is not None})

    # ---- the tools ----
    @tool("The profile runs under LOGDIR, each with its hosts and their captures (spans).")
    def list_runs(self, offset: Offset = 0,
                  refresh: Annotated[bool, Field(
                      description="list LOGDIR again now (for a profile written in the last "
                                  "seconds; the listing renews itself every few seconds)")
                  ] = False,
                  max_bytes: MaxBytes = DEFAULT_MAX_BYTES) -> dict:
        try:
            runs = runs_json(self.catalog.runs(refresh=refresh))
        except OSError as e:
            raise Unavailable(f"cannot list LOGDIR: {e.strerror or e}") from None
        return page({"span_rule": SPAN_RULE}, "runs", runs[offset:], offset, len(runs),
                    max_bytes)

    @tool("One host's diagnosis at a glance: devices with duty cycle, idle time by cause and "
          "efficiency (FLOPs, peak, MFU and its waterfall), gap count, compilations, transfers "
          "and the top findings with their fixes.")
    def summary(self, run: Run, host: Host = None, span: Span = None,
                top: Annotated[int, Field(description="findings to include", ge=0,
                                          le=1000)] = DEFAULT_TOP,
                threshold_us: Threshold = 5.0, kernels_only: KernelsOnly = False,
                peak_tflops: PeakTflops = None, capture: Capture = None,
                max_bytes: MaxBytes = DEFAULT_MAX_BYTES) -> dict:
        p = self._params("diagnosis", run, host, span, threshold_us, kernels_only, gaps_limit=0,
                         peak_tflops=peak_tflops, capture=capture)
        doc = self.service.diagnosis_json(p)
        out = {"schema_version": doc["schema_version"], "run": p.run, "host": p.host,
               "source": doc["source"], "options": doc["options"],
               "step_source": doc["step_source"], "step_marker": doc["step_marker"],
               "steps": doc["steps_total"],
               # the one step time of every face, with its definition
               "typical_step_ns": doc.get("typical_step_ns"),
               "typical_step": doc["definitions"].get("typical_step"),
               "devices": doc["devices"], "gaps_total": doc["gaps_total"], "hta": doc["hta"],
               "compilations": {"count": doc["compilations_total"],
                                "recompilations": doc["recompilations_total"]},
               "transfers": {"count": doc["transfers_total"]},
               "findings_total": doc["findings_total"], "findings": doc["findings"][:top],
               "warnings": doc["warnings"]}
        if "graph_captures" in doc:
            out["graph_captures"] = doc["graph_captures"]
        return trim(out, max_bytes)

    @tool("A page of idle gaps (id, time, cause, shares by cause, evidence), filtered by "
          "step, cause or device; next_offset pages on.")
    def gaps(self, run: Run, host: Host = None, span: Span = None,
             step: Annotated[Optional[int], Field(description="only this step's gaps")] = None,
             cause: Annotated[Optional[str], Field(
                 description="only gaps whose primary cause is this: " + ", ".join(C.ALL))
             ] = None,
             device: Annotated[Optional[int], Field(
                 description="only this device's gaps (its id in summary.devices)", ge=0)
             ] = None,
             offset: Offset = 0,
             limit: Annotated[int, Field(description="most gaps in the page", ge=1,
                                         le=MAX_GAPS_PAGE)] = DEFAULT_GAPS,
             detail: Annotated[bool, Field(
                 description="keep each gap's host_ops and syncs (else their counts; the gap "
                             "tool gives them)")] = False,
             threshold_us: Threshold = 5.0, kernels_only: KernelsOnly = False,
             capture: Capture = None,
             max_bytes: MaxBytes = DEFAULT_MAX_BYTES) -> dict:
        if cause is not None and cause not in C.ALL:
            raise BadRequest(f"cause must be one of {', '.join(C.ALL)}")
        p = self._params("diagnosis", run, host, span, threshold_us, kernels_only, step=step,
                         gaps_offset=offset, gaps_limit=limit, capture=capture)
        doc = self.service.gaps_json(p, cause, device)
        rows = doc["gaps"]
        if not detail:
            for g in rows:
                g.pop("host_ops")
                g["host_ops_count"] = g.pop("host_ops_total")
                g["syncs_count"] = len(g.pop("syncs"))
        head = {"run": p.run, "host": p.host, "filter": {"step": step, "cause": cause,
                                                         "device": device}}
        return page(head, "gaps", rows, offset, doc["gaps_total"], max_bytes)

    @tool("One gap by id: its cause shares, evidence, the op it waited for and the host ops "
          "and syncs behind it.")
    def gap(self, run: Run, id: Annotated[str, Field(description="gap id, as gaps lists it "
                                                                 "(device-start_ns)")],
            host: Host = None, span: Span = None, threshold_us: Threshold = 5.0,
            kernels_only: KernelsOnly = False, capture: Capture = None,
            max_bytes: MaxBytes = DEFAULT_MAX_BYTES) -> dict:
        p = self._params("gap", run, host, span, threshold_us, kernels_only, id=id,
                         capture=capture)
        return trim(self.service.gap_json(p), max_bytes)

    @tool("A page of findings, largest time lost first: what, where in the user's code, how "
          "much per step, the fix and the gaps that show it.")
    def findings(self, run: Run, host: Host = None, span: Span = None, offset: Offset = 0,
                 limit: Annotated[int, Field(description="most findings in the page", ge=1,
                                             le=1000)] = DEFAULT_FINDINGS,
                 threshold_us: Threshold = 5.0, kernels_only: KernelsOnly = False,
                 capture: Capture = None,
                 max_bytes: MaxBytes = DEFAULT_MAX_BYTES) -> dict:
        p = self._params("diagnosis", run, host, span, threshold_us, kernels_only, gaps_limit=0,
                         capture=capture)
        found = self.service.findings_json(p)
        return page({"run": p.run, "host": p.host}, "findings", found[offset:offset + limit],
                    offset, len(found), max_bytes)

    @tool("What the device is busy with: per device, the op groups with the most device "
          "time (calls, mean, share of busy, host op and annotation behind each, its longest "
          "instance, its roofline: FLOPs, bytes, intensity, what bounds it (compute, HBM, a TPU's "
          "CMEM/VMEM reads or writes) and its share of the roofline), short kernels, and compute/copies/collectives overlap; whole trace or "
          "one step.")
    def device_ops(self, run: Run, host: Host = None, span: Span = None,
                   step: Annotated[Optional[int], Field(
                       description="only the ops this step launched (a step id as summary and "
                                   "gaps give them)")] = None,
                   device: Annotated[Optional[int], Field(
                       description="only this device (its id in summary.devices)", ge=0)
                   ] = None,
                   top: Annotated[int, Field(description="op groups listed per device, the "
                                                         "rest summed as other", ge=1,
                                             le=STEP_GROUPS)] = 15,
                   threshold_us: Threshold = 5.0, kernels_only: KernelsOnly = False,
                   peak_tflops: PeakTflops = None, capture: Capture = None,
                   max_bytes: MaxBytes = DEFAULT_MAX_BYTES) -> dict:
        p = self._params("diagnosis", run, host, span, threshold_us, kernels_only, step=step,
                         gaps_limit=0, peak_tflops=peak_tflops, capture=capture)
        doc = self.service.device_ops_json(p, top, device)
        if doc is None:
            raise Unavailable("this diagnosis was made before device time by op existed; "
                              "it is made again when the cache is cleared")
        return trim({"run": p.run, "host": p.host, **doc}, max_bytes)

    @tool("What changed from a base run (before) to a run (after): step time, duty cycle and "
          "idle by cause per device, findings new/gone/grew, ops and annotations.")
    def compare(self, run: Run, base_run: Annotated[str, Field(
                    description="the run to compare with (before)")],
                host: Host = None, base_host: Annotated[Optional[str], Field(
                    description="its host; left out: the same host name, else its only one")
                ] = None,
                span: Span = None, base_span: Span = None,
                top: Annotated[int, Field(description="ops, findings and annotations listed",
                                          ge=1, le=1000)] = 15,
                steps: Annotated[bool, Field(description="add each run's per-step chart "
                                                         "data")] = False,
                threshold_us: Threshold = 5.0, kernels_only: KernelsOnly = False,
                max_bytes: MaxBytes = DEFAULT_MAX_BYTES) -> dict:
        after = self._host(run, host)
        before = self._base_host(base_run, base_host, after)
        p = self._params("compare", run, after, span, threshold_us, kernels_only,
                         base_run=_name("run", base_run), base_host=before,
                         base_span=_name("span", base_span), top=top)
        return trim(self.service.compare_json(p, with_steps=steps), max_bytes)

    @tool("A run over time: every capture (Profile session or PyTorch span) in time order with "
          "its step time, duty cycle, MFU, idle by cause, top finding and trust, and the "
          "changes beyond the run's noise (step-time ratio, causes in points of the step).")
    def trend(self, run: Annotated[str, Field(
                  description="a PyTorch run, a TensorBoard run holding Profile sessions, or "
                              "one of its sessions, as list_runs names it")],
              baseline: Annotated[Optional[str], Field(
                  description="a capture (session) every other is compared with; left out: "
                              "each with the previous trusted one")] = None,
              threshold_us: Threshold = 5.0, kernels_only: KernelsOnly = False,
              max_bytes: MaxBytes = DEFAULT_MAX_BYTES) -> dict:
        q = {"run": _name("run", run), "baseline": _name("baseline", baseline),
             "threshold_us": repr(float(threshold_us)), "kernels_only": "1" if kernels_only
             else "0"}
        p = parse("trend", {k: v for k, v in q.items() if v is not None})
        return trim(self.service.trend_json(p), max_bytes)

    def _base_host(self, base_run: str, base_host: Optional[str], host: str) -> str:
        if base_host is not None:
            return self._host(base_run, base_host)
        hosts = self._run(base_run).hosts()
        return host if host in hosts else self._host(base_run, None)

    @tool("Who everyone waits for at collectives: without host, the run's collectives (instances "
          "matched, per op peer wait and transfer, last arrivers, clocks) and per host its peer "
          "wait per step, last arrivals and straggler verdict with cause, stragglers first; with "
          "host, its collectives per op (instances, peer wait, transfer, whom it waited for, the "
          "steps) and its peer wait per step.")
    def collectives(self, run: Run, host: Annotated[Optional[str], Field(
                        description="one host's collectives; left out: the run's summary")] = None,
                    span: Span = None, offset: Offset = 0,
                    limit: Annotated[int, Field(description="most hosts in the page (run "
                                                            "summary)", ge=1, le=10000)] = 50,
                    threshold_us: Threshold = 5.0, kernels_only: KernelsOnly = False,
                    max_bytes: MaxBytes = DEFAULT_MAX_BYTES) -> dict:
        if host is not None:
            p = self._params("collectives", run, host, span, threshold_us, kernels_only)
            doc = self.service.collectives_json(p, wait=True)
            steps = doc.pop("step_peer_wait_ns", None)
            if steps is not None:          # a list, so that a long run is trimmed, not refused
                doc["step_peer_wait_ns"] = [{"step": int(k), "devices": v}
                                            for k, v in steps.items()]
            eff = doc.get("efficiency")
            if eff and isinstance(eff.get("steps"), dict):   # likewise each step's waterfall
                eff["steps"] = [{"step": int(k), "devices": v} for k, v in eff["steps"].items()]
            return trim({"run": p.run, **doc}, max_bytes)
        r = self._run(run)
        q = parse("hosts", {"run": r.name, "threshold_us": repr(float(threshold_us)),
                            "kernels_only": "1" if kernels_only else "0", "wait": "1"})
        summary = self.service.hosts_json(q)
        keep = ("host", "span", "status", "error", "duty_cycle", "typical_step_ns",
                "peer_wait_ns", "peer_wait_total_ns", "peer_wait_points", "last_arrivals",
                "caused_wait_per_step_ns", "straggler", "straggler_cause", "straggler_reason",
                "straggler_steps", "lateness_ns", "saving_per_step_ns", "next_straggler",
                "idle_wait_ns")
        rows = []
        for x in summary["hosts"]:
            row = {k: x[k] for k in keep if k in x}
            row["waited_for"] = dict(list((x.get("waited_for") or {}).items())[:3])
            rows.append(row)
        coll = dict(summary.get("collectives") or {})
        if coll:    # per-host maps of a large pod are bounded: the rows carry each host's own
            offs = coll.pop("clock_offsets", {}) or {}
            coll["clock_offsets_applied"] = [{"host": h, **o} for h, o in offs.items()
                                             if o.get("applied")][:20]
            coll["last_arrivers"] = dict(list((coll.get("last_arrivers") or {}).items())[:10])
            coll["unmatched"] = (coll.get("unmatched") or [])[:10]
            coll["clocks"] = [dict(c, hosts=c["hosts"][:10]) for c in (coll.get("clocks") or [])[:10]]
        head = {"run": r.name, "collectives": coll or None,
                "stragglers": summary.get("stragglers"),
                "note": None if summary.get("collectives") else
                "no collectives matched across this run's hosts (none ran any, or only one "
                "host's profile holds them)"}
        return page(head, "hosts", rows[offset:offset + limit], offset, len(rows), max_bytes)

    @tool("Check a run against budgets (least duty cycle, most idle of a cause, most slowdown "
          "against a baseline, most peer wait at collectives) per device and typical step: "
          "pass/fail, as tb-perfdiag check.")
    def check(self, run: Run, host: Annotated[Optional[str], Field(
                  description="host to check; left out: every host of the run")] = None,
              span: Span = None,
              min_duty: Annotated[Optional[float], Field(
                  description="least duty cycle per typical step, a fraction (0.8)")] = None,
              max_idle: Annotated[Optional[Dict[str, float]], Field(
                  description="most idle of a cause per typical step as a fraction of the "
                              "step, by cause ({\"data_loading\": 0.05}); causes: "
                              + ", ".join(C.ALL))] = None,
              baseline_run: Annotated[Optional[str], Field(
                  description="a run to compare with, for max_regression")] = None,
              baseline_host: Annotated[Optional[str], Field(
                  description="its host; left out: the same host name, else its only one")
              ] = None,
              max_regression: Annotated[Optional[float], Field(
                  description="with baseline_run: most the typical step may slow down, a "
                              "fraction (0.05)")] = None,
              max_peer_wait: Annotated[Optional[float], Field(
                  description="most busy time spent waiting for peers at collectives per "
                              "typical step, a fraction of the step (0.1)")] = None,
              threshold_us: Threshold = 5.0, kernels_only: KernelsOnly = False,
              max_bytes: MaxBytes = DEFAULT_MAX_BYTES) -> dict:
        for cause in max_idle or {}:
            if cause not in C.ALL:
                raise BadRequest(f"max_idle: {cause!r} is no cause; causes: {', '.join(C.ALL)}")
        budgets = Budgets(_fraction("min_duty", min_duty),
                          {c: _fraction(f"max_idle[{c}]", v) for c, v in (max_idle or {}).items()},
                          _fraction("max_regression", max_regression, at_most_one=False),
                          _fraction("max_peer_wait", max_peer_wait))
        if (baseline_run is None) != (max_regression is None):
            raise BadRequest("baseline_run and max_regression go together")
        if budgets.empty():
            raise BadRequest("nothing to check: give min_duty, max_idle, max_peer_wait or "
                             "baseline_run with max_regression")
        hosts = [self._host(run, host)] if host is not None else self._run(run).hosts()
        checked = []
        for h in hosts:
            p = self._params("progress", run, h, span, threshold_us, kernels_only)
            src = self.catalog.find(p.run, p.host, p.span)
            label = f"{p.run} · {h}" + (f" · {span_label(src)}" if src and src.span else "")
            base = None
            if baseline_run is not None:
                base = self._params("progress", baseline_run,
                                    self._base_host(baseline_run, baseline_host, h), None,
                                    threshold_us, kernels_only)
            try:
                res = self.service.check(p, budgets, base)
            except (TraceError, ApiError) as e:    # one unreadable host: the others still
                if isinstance(e, ApiError) and e.status not in (404, 413, 422):
                    raise
                res = error_text(e)
            checked.append((label, os.path.basename(src.path) if src else "", res))
        return trim(check_render.as_json(checked), max_bytes)

