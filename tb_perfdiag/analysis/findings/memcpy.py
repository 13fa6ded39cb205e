"""Excessive copies: the share of device time in host↔device and device↔device copies."""
from __future__ import annotations

import numpy as np

from ...trace.model import EventKind as K
from .fixes import fix_for
from ..result import FindingKind as FK
from .common import _fmt, Scope


def _memcpy_share(trace, diag, fw, add) -> None:
    """Copies taking a large share of one device's busy time."""
    D = diag.devices
    mem = np.flatnonzero(trace.kind == K.MEMCPY)         # one pass, not one per device
    mem_dev = trace.track_device[trace.track[mem]]
    for d in np.flatnonzero(D.ops > 0).tolist():
        ev = mem[mem_dev == d]
        busy = int(round(int(D.busy[d]) / 1000))
        if not ev.size or not busy:
            continue
        mem_ns = int(trace.dur[ev].sum() // 1000)
        if mem_ns > 0.15 * busy and mem_ns < 0.95 * busy:     # a copy-only device is not this
            add(FK.EXCESSIVE_MEMCPY, f"Memory copies take {100 * mem_ns / busy:.0f}% of "
                f"{D.name[d]}'s busy time", np.zeros(0, np.int32),
                fix_for("excessive_memcpy", "*", fw),
                f"{ev.size} copies take {_fmt(mem_ns)} of {_fmt(busy)} busy.",
                mem_ns, d, confidence="medium")


def detect(s: Scope) -> None:
    _memcpy_share(s.trace, s.diag, s.fw, s.add)
