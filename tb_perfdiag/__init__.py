"""tb-perfdiag: why the accelerator sits idle — device gaps, duty cycle and the host
ops behind them, for XLA (XSpace) and PyTorch (Kineto) traces."""
from __future__ import annotations

from ._version import __version__

from .trace import Trace, TraceError, load  # noqa: E402
from .analysis import Diagnosis, Options  # noqa: E402
from .api import CompareReport, Report, compare, diagnose  # noqa: E402

__all__ = ["load", "diagnose", "compare", "CompareReport", "Diagnosis", "Report", "Options", "Trace", "TraceError", "__version__"]
