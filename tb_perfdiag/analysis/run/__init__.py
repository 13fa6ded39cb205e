"""A run across its files: joins, clocks, stragglers, peer wait, run waterfalls, the trend
(its captures over time, what changed between them, which to trust). Never reads a trace."""
