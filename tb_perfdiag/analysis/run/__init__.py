"""Across the files of a run, never reading a trace: the run's captures over time (its
trend, what changed between captures, which captures to trust)."""
