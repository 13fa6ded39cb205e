"""tb-perfdiag: why the accelerator sits idle — device gaps, duty cycle and the host
ops behind them, for XLA (XSpace) and PyTorch (Kineto) traces."""
from __future__ import annotations

from ._version import __version__

from .trace import Trace, TraceError  # noqa: E402
from .graph_captures import load  # noqa: E402 - a trace with the graph captures beside it
from .analysis import Diagnosis, Options  # noqa: E402
from .api import CompareReport, Report, compare, diagnose  # noqa: E402

__all__ = ["load", "diagnose", "compare", "CompareReport", "Diagnosis", "Report", "Options", "Trace", "TraceError", "__version__"]
