"""What the profiler said it lost while it recorded: device-side records it dropped, and
device tracing that stopped before the capture ended.  Read once, by both readers of a
format, from what the profiler wrote beside the events — libkineto's log lines in a
PyTorch trace's top-level "WARNING" and "INFO" lists, an XSpace's ``warnings`` — into
``Trace.metadata["losses"]``: {"dropped": records, "why": [reasons], "stopped_early":
bool, "limit": "N >= M" or None, "said": [the profiler's lines]}.  The capture notes say
what each does to the figures."""
from __future__ import annotations

import re

# libkineto (CuptiActivityApi): CUPTI's count of dropped records, a WARNING (logged in
# verbose runs); the GPU buffer limit that ends GPU tracing, a WARNING; and the record
# counts it logs once done, an INFO line ending "CUPTI stopped early? = 1" when it did
_K_DROPPED = re.compile(r"\bDropped (\d+) activity records")
_K_LIMIT = re.compile(r"Exceeded max GPU buffer count \((\d+) >= (\d+)\)")
_K_STOPPED = re.compile(r"CUPTI stopped early\? = (?:1|true)\b")
# XLA's and TensorFlow's GPU tracers (XSpace.warnings): "Detected GPU events dropped on
# <host>: Profiler has collected N driver events and M device events. K events dropped
# because <reason>; L events dropped because <reason>."
_X_REPORT = re.compile(r"^Detected GPU events dropped on ")
_X_DROPPED = re.compile(r"(\d+) events dropped because (.+?)(?:;|\.?\s*$)")


def _lines(value) -> list:
    if isinstance(value, str):
        return [value]
    return [x for x in value if isinstance(x, str)] if isinstance(value, list) else []


def kineto_losses(metadata: dict) -> dict | None:
    """The losses libkineto logged in a trace's top-level "WARNING"/"INFO" lists (as
    the readers keep them in ``metadata``), or None."""
    dropped, limit, stopped, said = 0, None, False, []
    for line in _lines(metadata.get("WARNING")) + _lines(metadata.get("INFO")):
        m = _K_DROPPED.search(line)
        if m and int(m.group(1)):
            dropped += int(m.group(1))
            said.append(line)
        m = _K_LIMIT.search(line)
        if m:
            limit, stopped = f"{m.group(1)} >= {m.group(2)}", True
            said.append(line)
        if _K_STOPPED.search(line):
            stopped = True
            said.append(line)
    if not (dropped or stopped):
        return None
    return {"dropped": dropped, "why": ["CUPTI activity buffer"] if dropped else [],
            "stopped_early": stopped, "limit": limit, "said": said}


def xspace_losses(warnings: list) -> tuple:
    """(losses or None, the other warnings): the GPU tracer's dropped-events reports
    among an XSpace's warnings."""
    dropped, why, said, rest = 0, [], [], []
    for w in warnings:
        if not _X_REPORT.search(w):
            rest.append(w)
            continue
        said.append(w)
        for m in _X_DROPPED.finditer(w):
            dropped += int(m.group(1))
            reason = m.group(2).strip().rstrip(":")
            if reason not in why:
                why.append(reason)
    if not said:
        return None, rest
    return {"dropped": dropped, "why": why, "stopped_early": False, "limit": None,
            "said": said}, rest
