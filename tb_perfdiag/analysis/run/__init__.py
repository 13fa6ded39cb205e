"""A run across its files: joins, clocks, stragglers, peer wait, run waterfalls, the trend. Never reads a trace."""
