"""The FLOPs and bytes of kernels replayed from CUDA/HIP graphs, from the ops that
launched them while the graph was captured (``graphs.graph_match``): the capture
trace's host ops are costed as any trace's (``torch_shapes.host_costs``) and each op's
figure split over the kernels of one replay of it, as over the kernels an op launched
one by one."""
from __future__ import annotations

import numpy as np

from ...trace.model import Trace
from . import torch_shapes
from .graphs import graph_match
from .opcosts import OpCosts, per_trace


def with_captured(trace: Trace, events: np.ndarray, got: OpCosts) -> OpCosts:
    """``got`` (the costs of ``events``) with the figures of the replayed kernels
    matched to a capture's launches put in (the rest as they were)."""
    m = graph_match(trace)
    if m is None or not m.matched or not events.size:
        return got
    order = np.argsort(m.event, kind="stable")
    sev = m.event[order]
    k = np.minimum(np.searchsorted(sev, events), sev.shape[0] - 1)
    on = np.flatnonzero(sev[k] == events)
    at = order[k[on]]                       # each such event's row in the match
    keep = m.launch[at] >= 0
    on, at = on[keep], at[keep]
    if not on.size:
        return got
    out = _per_event(got)
    for s in np.unique(m.source[at]).tolist():
        cap = m.captures[s].trace or trace
        h = per_trace(cap, "torch_host_costs", torch_shapes.host_costs)
        if isinstance(h, str) or not h.has.any():
            continue
        sub = m.source[at] == s
        rows, ats = on[sub], at[sub]
        c = torch_shapes._to_kernels(trace, events[rows], h, launch=m.launch[ats],
                                     op_trace=cap, instance=m.replay[ats])
        kn = np.flatnonzero(c.known)
        if not kn.size:
            continue
        dst = rows[kn]
        for f in ("flops", "hw_flops", "bytes", "estimated", "matmul", "dtype", "known"):
            getattr(out, f)[dst] = getattr(c, f)[kn]
        out.source = out.source or c.source
    out.missing = "" if out.known.all() else \
        "some device ops were launched by no host op with shapes and a cost formula"
    return out


def _per_event(c: OpCosts) -> OpCosts:
    """``c`` with every figure held per event (a copy where it was held per op)."""
    if c.code is None:
        return c
    return OpCosts(c.event, c.flops.copy(), c.hw_flops.copy(), c.bytes.copy(),
                   c.estimated.copy(), c.matmul.copy(), c.dtype.copy(), c.known.copy(),
                   c.source, c.missing)
