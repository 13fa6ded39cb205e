"""FLOPs and bytes per device op: the one entry point (``op_costs``) over the sources.

One row per device-op event given, in the order given.  Every figure is computed once
per distinct op (XLA op of a program, PyTorch op of one shape) and broadcast to the
events of it: no Python loop per event.
"""
from __future__ import annotations

import numpy as np

from ...trace.model import Trace
from . import graph_costs, hlo_costs, torch_shapes, xla_costs
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
        return empty(events, "", _no_xla_figures(trace))
    if trace.format == "kineto":
        # kernels replayed from a graph: the figures of the ops that captured them
        return graph_costs.with_captured(trace, events, torch_shapes.from_torch(trace, events))
    return empty(events, "", f"no cost figures are read from {trace.format} traces")


def _no_xla_figures(trace: Trace) -> str:
    """Why an XSpace's ops have no cost figure, for the framework that wrote it: a
    TensorFlow graph run without XLA executes kernels XLA never saw (its ``tf_op``s carry
    no cost figure and no HLO is recorded), where XLA would record its programs' HLO."""
    from ..attribution.culprits import TENSORFLOW, framework
    if framework(trace) == TENSORFLOW:
        return ("TensorFlow ops run without XLA carry no cost figures and the capture has no "
                "HLO proto: compile the step with XLA (tf.function(jit_compile=True)) and the "
                "profile records its programs' HLO, from which the FLOPs are counted")
    return "the ops carry no XLA cost figures and the capture has no HLO proto of their programs"
