"""Plain-language findings with evidence, the time they cost per step, and a fix: every
detector, registered in one list, run over one ``common.Scope``.

A detector is a module of this package with a ``detect(scope)``: it reads the trace and
the diagnosis made so far and reports through ``scope.add`` (a finding costed from its
gaps) or ``scope.made`` (findings it costed itself).  A new kind of finding is a new
module and a line in ``DETECTORS``; its fix text goes in ``fixes.FIXES``.
"""
from __future__ import annotations

import numpy as np

from ...trace.model import Trace
from . import compilations, efficiency, gap_families, memcpy, multi_device, transfers
from .common import Scope, _unique_titles
from .fixes import for_platform, platform

# every detector, in the order they run: each reads the Scope and reports through it.
# efficiency runs before multi_device: it reads the findings made so far, which never
# held the multi-device ones
DETECTORS = (gap_families.detect, compilations.detect, transfers.detect, memcpy.detect,
             efficiency.detect, multi_device.detect)


def findings(trace: Trace, diag, steps, compile_ev, compile_step, ctx) -> tuple:
    """([Finding], events cited) — most time lost per step first."""
    s = Scope.of(trace, diag, steps, compile_ev, compile_step, ctx)
    for detect in DETECTORS:
        detect(s)
    out = s.out
    _unique_titles(out)
    # every fix for the accelerator the trace ran on (no CUDA graphs for an MTIA)
    plat = platform(trace)
    for f in out:
        f.fix = for_platform(f.fix, plat)
    out.sort(key=lambda f: (-f.time_lost_ns_per_step, f.kind.value, f.title))
    return out, (np.concatenate(s.cited) if s.cited else np.zeros(0, np.int64))
