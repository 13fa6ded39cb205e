"""The XSpace stats the model reads: the scanners (``xspace.scan_python`` and the C one
behind ``native_scan``) keep these and drop every other stat row as it is read."""

# copied into trace columns (string-valued ones are interned)
INT_STATS = ("step_num", "program_id", "run_id", "correlation_id", "device_ordinal",
             "group_id", "_r", "bytes_transferred", "stream_id", "context_id")
# per-kernel description strings (kernel_details, long_name) are unique per event and no
# analysis reads them: they stay out of the model (``raw_event_stats`` reads them on demand)
STR_STATS = ("hlo_op", "hlo_module", "tf_op", "memcpy_details", "hlo_category", "graph_hash",
             "shape", "source")
FLOW_STATS = ("_p", "_pt", "_c", "_ct", "flow")
# the stats the scanners keep (every other stat row is dropped as it is read)
STATS = INT_STATS + STR_STATS + FLOW_STATS
