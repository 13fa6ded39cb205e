"""Analyses: pure functions of the trace model."""
from .diagnosis import Diagnosis, Options, diagnose_trace

__all__ = ["Diagnosis", "Options", "diagnose_trace"]
