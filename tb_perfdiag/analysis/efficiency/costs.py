"""FLOPs and bytes per device op: the one entry point (``op_costs``) over the sources.

One row per device-op event given, in the order given.  Every figure is computed once
per distinct op (XLA op of a program, PyTorch op of one shape) and broadcast to the
events of it: no Python loop per event.
"""
from __future__ import annotations

import numpy as np

from ...trace.model import Trace
from . import hlo_costs, torch_shapes, xla_costs
from .opcosts import DTYPES, UNKNOWN_DTYPE, OpCosts, distinct_rows, empty, per_trace

__all__ = ["DTYPES", "UNKNOWN_DTYPE", "OpCosts", "distinct_rows", "empty", "op_costs",
           "per_trace"]


def op_costs(trace: Trace, events: np.ndarray) -> OpCosts:
    """The FLOPs and bytes of each of ``events`` (device op events), from the most exact
    source the trace has for them."""
    events = np.asarray(events, np.int64)
    if trace.format == "xspace":
        got = xla_costs.from_op_stats(trace, events)
        if got is not None and got.known.any():
            return got
        got = hlo_costs.from_hlo(trace, events)
        if got is not None:
            return got
        return empty(events, "", "the ops carry no XLA cost figures and the capture has no "
                                 "HLO proto of their programs")
    if trace.format == "kineto":
        return torch_shapes.from_torch(trace, events)
    return empty(events, "", f"no cost figures are read from {trace.format} traces")
