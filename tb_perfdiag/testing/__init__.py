"""Helpers for tests of tb-perfdiag and of code built on it (like ``numpy.testing``):
build a trace in memory and read it with the real readers, no file needed.

    >>> from tb_perfdiag.testing import TraceBuilder
    >>> b = TraceBuilder()
    >>> main, s7 = b.thread("python main"), b.stream(gpu=0, stream=7)
    >>> _ = b.launch(main, "cudaLaunchKernel", 10, 5, kernel=b.kernel(s7, "gemm", 20, 100))
    >>> b.build().n_events
    2

``builder``: ``TraceBuilder`` (Kineto or XSpace flavour); ``kineto``: event dicts → JSON
bytes → ``load_kineto``; ``xspace``: ``XSpaceWriter``/``PlaneBuilder`` → protobuf bytes
→ ``load_xspace``.
"""
from .builder import Event, Track, TraceBuilder
from .kineto import Ns, kineto_bytes, load_kineto
from .xspace import Ref, U64, XSpaceWriter, load_xspace

__all__ = ["TraceBuilder", "Track", "Event", "load_kineto", "kineto_bytes", "Ns",
           "load_xspace", "XSpaceWriter", "Ref", "U64"]
