"""What the service's route modules share: the estimated peaks by which work and answers
are admitted within the memory budget (``budget.py``), and the identity ``finish``."""
from __future__ import annotations

from .budget import MB

# Estimated peaks, measured on the benchmark files (benchmarks/HISTORY.md: df_index_resolver
# ×10, 405 MB of JSON → 594 MB read, trace 77 MB; the 2 M-event XSpace, 74 MB → 297 MB
# read, trace 133 MB, analysis +27 MB over the trace; a page of 100,000 gaps 535 MB, the
# overlay of 220,000 gaps 934 MB), rounded up.
# A Kineto trace is streamed (its text never held whole): its peak follows its events,
# which its decoded size bounds and its gzip size tells (benchmarks/HISTORY.md, issue 24:
# df_index_resolver ×10, 27.8 MB gz / 405 MB of JSON → 237 MB read over the imports)
PEAK_PER_JSON_BYTE = 0.7      # reading a Kineto trace, per decoded byte (at most)
PEAK_PER_JSON_GZ_BYTE = 10.0  # …and per byte of its gzip on disk
PEAK_PER_XSPACE_BYTE = 4.5    # reading an XSpace, per file byte
PEAK_PER_TRACE_BYTE = 1.0     # an analysis, per byte of the loaded trace
CONTEXT_PER_TRACE_BYTE = 0.5  # host timelines of a trace loaded without analysis
PEAK_PER_DIAG_BYTE = 1.5      # rendering a diagnosis page, per byte of the diagnosis
PEAK_PER_GAP_ROW = 5_000      # …and per gap record in it (or gap slice in an overlay)
PEAK_PER_EVENT = 1_000        # a trace event in an exported overlay
BASE_PEAK = 16 * MB           # a read or an analysis, beyond the per-byte figure
RENDER_PEAK = 2 * MB          # an answer, beyond it
# work waits this long for others to end before loaded traces are dropped for it
TRACE_PATIENCE_S = 1.0


def load_estimate(fmt: str | None, size: int, decoded: int,
                  compressed: bool = False) -> int:
    """The peak of reading a file of ``size`` bytes that decodes to ``decoded``."""
    json = PEAK_PER_JSON_BYTE * decoded
    if compressed:   # what a gzip's own figure claims is not believed past its size's worth
        json = min(json, PEAK_PER_JSON_GZ_BYTE * size)
    if fmt == "xspace":
        return int(PEAK_PER_XSPACE_BYTE * size + BASE_PEAK)
    if fmt == "kineto":
        return int(json + BASE_PEAK)
    return int(max(PEAK_PER_XSPACE_BYTE * size, json) + BASE_PEAK)


def _same(doc):
    return doc
