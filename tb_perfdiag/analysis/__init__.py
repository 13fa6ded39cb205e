"""Analyses: pure functions of the trace model returning a typed ``Diagnosis``."""
from .diagnosis import HostContext, Options, analyse, diagnose_trace
from .result import Cause, Diagnosis, FindingKind

__all__ = ["Cause", "Diagnosis", "FindingKind", "HostContext", "Options", "analyse",
           "diagnose_trace"]
