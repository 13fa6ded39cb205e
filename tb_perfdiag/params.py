"""Every route parameter, declared once; ``parse`` turns a query into typed values.

``PARAMS`` says what each parameter is (type, range, default, longest value, required)
and ``ROUTES`` which parameters each route takes.  ``parse(route, query)`` returns a
frozen object whose attributes are exactly that route's parameters, or raises
``BadRequest`` naming what is wrong: a missing required value, a value of the wrong
type, NaN or infinity, a number out of range, an over-long value, a NUL byte, a
parameter given twice.  An empty value counts as absent.  Names a route does not take
are ignored (a cache-buster does no harm) but still bounded in length and NUL-free.
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Optional

from .errors import BadRequest
from .render.pod import SORT_CHOICES as POD_SORTS

MAX_NAME = 64          # longest parameter name
MAX_VALUE = 1024       # longest value of a str parameter (or of one a route ignores)
MAX_NUMBER = 64        # longest value of a number or bool parameter
MAX_GAPS_PAGE = 100_000
DEFAULT_GAPS_PAGE = 200
MAX_STEPS_PAGE = 10_000
DEFAULT_STEPS_PAGE = 500
MAX_HOSTS_PAGE = 10_000
DEFAULT_HOSTS_PAGE = 1000

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_NOT_FINITE = re.compile(r"[+-]?(nan|inf|infinity)", re.IGNORECASE)
_TRUE, _FALSE = ("1", "true"), ("0", "false")
_PY_TYPES = {"str": str, "int": int, "float": float, "bool": bool, "choice": str, "path": str}


@dataclass(frozen=True)
class Param:
    name: str
    type: str                    # "str", "int", "float", "bool", "choice" or "path"
    default: object = None       # when absent or empty (required ones have none)
    lo: float | None = None      # numbers: inclusive range
    hi: float | None = None
    max_len: int | None = None   # longest value; by type when None
    required: bool = False
    choices: tuple = ()          # "choice": the values allowed
    doc: str = ""

    @property
    def limit(self) -> int:
        if self.max_len is not None:
            return self.max_len
        return MAX_VALUE if self.type in ("str", "choice", "path") else MAX_NUMBER


@dataclass(frozen=True)
class Route:
    params: tuple                # names, in the order the parsed object lists them
    ordered: tuple = ()          # (a, b) pairs: b must be greater than a when both given


PARAMS = {p.name: p for p in (
    Param("run", "str", required=True, doc="run, as /runs names it"),
    Param("host", "str", required=True, doc="host of the run"),
    Param("span", "str", doc="profile span (capture time); the latest when absent"),
    Param("threshold_us", "float", 5.0, 0.0, 1e7, doc="shortest idle gap counted, µs"),
    Param("kernels_only", "bool", False, doc="only kernels count as device busy"),
    Param("peak_tflops", "float", None, 1e-3, 1e6,
          doc="the peak MFU is taken against, TFLOP/s (the device's own when absent)"),
    Param("step", "int", None, -2**63, 2**63 - 1, doc="only the gaps of this step"),
    Param("device", "int", None, 0, 2**31 - 1,
          doc="only this device's gaps (its id in devices); every device's when absent"),
    Param("gaps_offset", "int", 0, 0, 10**9, doc="first gap of the page"),
    Param("gaps_limit", "int", DEFAULT_GAPS_PAGE, 0, MAX_GAPS_PAGE, doc="gaps in the page"),
    Param("steps_offset", "int", 0, 0, 10**9, doc="steps: first step row of the page"),
    Param("steps_limit", "int", DEFAULT_STEPS_PAGE, 0, MAX_STEPS_PAGE,
          doc="steps: step rows in the page"),
    Param("id", "str", required=True, max_len=64, doc="gap id"),
    Param("start_ns", "float", 0.0, -1e18, 1e18, doc="timeline view start, ns"),
    Param("end_ns", "float", 1e18, -1e18, 1e18, doc="timeline view end, ns"),
    Param("width", "int", 1200, 16, 4000, doc="timeline canvas width, px"),
    Param("with_events", "bool", False, doc="overlay: add the trace's own events"),
    Param("gap", "str", max_len=64, doc="overlay: the trace around this gap (its events "
                                        "and the diagnosis of the window)"),
    Param("start_us", "float", 0.0, -1e15, 1e15, doc="overlay events from, µs"),
    Param("end_us", "float", 1e15, -1e15, 1e15, doc="overlay events to, µs"),
    Param("wait", "bool", False, doc="hosts: answer once every host is analysed"),
    Param("refresh", "bool", False, doc="runs: list the logdir again now"),
    Param("base_run", "str", required=True, doc="compare: the run to compare with (before)"),
    Param("base_host", "str", required=True, doc="compare: its host"),
    Param("base_span", "str", doc="compare: its span; the latest when absent"),
    Param("baseline", "str", doc="trend: the capture (session) every other is compared with; "
                                 "each with the previous one when absent"),
    Param("top", "int", 15, 1, 1000, doc="compare: ops, findings and annotations listed"),
    Param("hosts_offset", "int", 0, 0, 10**7, doc="hosts: first row of the page"),
    Param("hosts_limit", "int", DEFAULT_HOSTS_PAGE, 0, MAX_HOSTS_PAGE, doc="hosts: rows in the page"),
    Param("sort", "choice", "straggler", choices=POD_SORTS,
          doc="hosts: order of the rows (cause.X: by cause X's share of the idle time)"),
    Param("order", "choice", None, choices=("asc", "desc"),
          doc="hosts: direction (each column has its natural default)"),
    Param("capture", "path", doc="a trace recorded while the file's CUDA/HIP graphs were "
                                 "captured, relative to the logdir (the CLI's --capture); "
                                 "default: capture_traces/ beside the file"),
)}

# one file's diagnosis: every route reading it takes the same capture, so they share it
_FILE = ("run", "host", "span", "threshold_us", "kernels_only", "peak_tflops", "capture")
ROUTES = {
    "runs": Route(("refresh",)),
    "diagnosis": Route(_FILE + ("step", "device", "gaps_offset", "gaps_limit")),
    "gap": Route(_FILE + ("id",)),
    "steps": Route(_FILE + ("steps_offset", "steps_limit")),
    "overlay": Route(_FILE + ("with_events", "start_us", "end_us", "gap")),
    "timeline": Route(_FILE + ("start_ns", "end_ns", "width"), ordered=(("start_ns", "end_ns"),)),
    "hosts": Route(("run", "threshold_us", "kernels_only", "peak_tflops", "wait", "hosts_offset",
                    "hosts_limit", "sort", "order")),
    "progress": Route(_FILE),
    "compare": Route(_FILE + ("base_run", "base_host", "base_span", "top")),
    "collectives": Route(_FILE),
    "trend": Route(("run", "baseline", "threshold_us", "kernels_only", "peak_tflops")),
    "version": Route(()),
    "status": Route(()),
}


def _num(x) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _path(p: Param, v: str) -> str:
    """A path below the logdir, judged by its text alone: the guarded open
    (``storage.open_file``) refuses links below the root when it is read."""
    parts = v.split("/")
    if ("\\" in v or "://" in v or ":" in parts[0] or v.startswith("/")
            or any(part in ("", ".", "..") for part in parts)):
        raise BadRequest(f"{p.name} must be a file's path relative to the logdir "
                         f"(no '..', '.', empty part, leading '/', '\\' or URL)")
    return v


def _value(p: Param, v: str):
    """One present, non-empty value converted to ``p``'s type and checked."""
    if p.type == "str":
        return v
    if p.type == "path":
        return _path(p, v)
    if p.type == "choice":
        if v not in p.choices:
            raise BadRequest(f"{p.name} must be one of {', '.join(p.choices)}")
        return v
    if p.type == "bool":
        if v.lower() in _TRUE + _FALSE:
            return v.lower() in _TRUE
        raise BadRequest(f"{p.name} must be 1, 0, true or false")
    if _NOT_FINITE.fullmatch(v):
        raise BadRequest(f"{p.name} must be a finite number")
    if p.type == "int":
        if not _INT.fullmatch(v):
            raise BadRequest(f"{p.name} must be an integer")
        x = int(v)
    else:
        if not _FLOAT.fullmatch(v):
            raise BadRequest(f"{p.name} must be a number")
        x = float(v)
        if not math.isfinite(x):
            raise BadRequest(f"{p.name} must be a finite number")
    if not (p.lo <= x <= p.hi):
        raise BadRequest(f"{p.name} must be between {_num(p.lo)} and {_num(p.hi)}")
    return x


def _check_name_and_value(k: str, v: str, limit: int) -> None:
    if len(k) > MAX_NAME:
        raise BadRequest(f"parameter name {k[:MAX_NAME]!r}… is too long (over {MAX_NAME} "
                         f"characters)")
    if "\x00" in k or "\x00" in v:
        raise BadRequest(f"parameter {k!r} contains a NUL byte")
    if len(v) > limit:
        raise BadRequest(f"parameter {k!r} is too long (over {limit} characters)")


def _classes() -> dict:
    out = {}
    for name, route in ROUTES.items():
        fields = [(n, Optional[_PY_TYPES[PARAMS[n].type]]) for n in route.params]
        out[name] = dataclasses.make_dataclass(f"{name.capitalize()}Params", fields,
                                               frozen=True)
    return out


_CLASSES = _classes()


def parse(route: str, query):
    """``query`` (a mapping of str to str, werkzeug's ``MultiDict`` included) as the
    typed parameters of ``route``; raises ``BadRequest``."""
    spec = ROUTES[route]
    for k, v in query.items():
        _check_name_and_value(str(k), str(v), PARAMS[k].limit if k in spec.params else MAX_VALUE)
    values, missing = {}, []
    for name in spec.params:
        p = PARAMS[name]
        given = query.getlist(name) if hasattr(query, "getlist") else [query.get(name)]
        if len(given) > 1:
            raise BadRequest(f"{name} is given more than once")
        v = given[0] if given else None
        if v is None or v == "":
            if p.required:
                missing.append(name)
            values[name] = p.default
        else:
            values[name] = _value(p, str(v))
    if missing:
        names = ", ".join(missing[:-1]) + " and " + missing[-1] if len(missing) > 1 else missing[0]
        raise BadRequest(f"{names} {'are' if len(missing) > 1 else 'is'} required")
    for a, b in spec.ordered:
        if values[a] is not None and values[b] is not None and values[b] <= values[a]:
            raise BadRequest(f"{b} must be after {a}")
    return _CLASSES[route](**values)
