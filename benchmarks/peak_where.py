"""Where a trace's read and analysis reach their memory peak: the recycled pages' bytes in
arrays (``tb_perfdiag.trace.pages.stats``), around chosen functions and at their highs.

    python benchmarks/peak_where.py TRACE [--wrap MOD.FUNC,...] [--sample]

``--wrap``: functions of ``tb_perfdiag.analysis`` modules (``diagnosis.device_busy``,
``diagnosis.split``, ``annotations.device_time`` …) to report on entry and exit: the live
bytes then and the peak so far.  A function is wrapped under the name it is called by:
the analysis calls most passes through the names ``diagnosis`` imported
(``diagnosis.split``, not ``shares.split``).  ``--sample``: a thread records the Python
stack each time the live bytes reach a new high (every 2 ms: a brief temporary can slip
between samples, the entry/exit peaks cannot) and prints the last highs.  The handler
counts numpy's small arrays into its peak lazily, so a sampled high can pass the peak the
wrappers print; the sampler's own bookkeeping adds a few tens of MB to the process.

What it prints is the arrays' side of the process' peak (``ru_maxrss``): strings, the
interpreter and malloc's own arenas come on top.  Stops 39 and 40 of issue 24 found the
40 M-event row's transients with it.  Needs the native extension (the pages are off
without it).
"""
from __future__ import annotations

import argparse
import functools
import importlib
import os
import resource
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tb_perfdiag import trace as T  # noqa: E402
from tb_perfdiag.analysis import diagnosis as D  # noqa: E402
from tb_perfdiag.trace import pages  # noqa: E402

MB = 1 << 20


def _live() -> int:
    s = pages.stats()
    return (s.get("live", 0) + s.get("small", 0)) // MB


def _peak() -> int:
    return pages.stats().get("peak_use", 0) // MB


def _wrap(spec: str) -> None:
    mod_name, fn_name = spec.rsplit(".", 1)
    mod = importlib.import_module(f"tb_perfdiag.analysis.{mod_name}")
    fn = getattr(mod, fn_name)

    @functools.wraps(fn)
    def reported(*a, **k):
        print(f"> {spec:36s} live {_live():6d} MB", flush=True)
        try:
            return fn(*a, **k)
        finally:
            print(f"< {spec:36s} live {_live():6d} MB  peak so far {_peak():6d} MB", flush=True)
    setattr(mod, fn_name, reported)


class _Sampler:
    """The main thread's stack at each new high of the live bytes."""

    def __init__(self):
        self.highs: list = []
        self.stop = False
        self.main = threading.main_thread().ident
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        best = 0
        while not self.stop:
            now = _live()
            if now > best:
                best = now
                frame = sys._current_frames().get(self.main)
                where = [f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"
                         for f in traceback.extract_stack(frame)[-5:]] if frame else []
                # a frame held past its return keeps its locals (the arrays) alive: the
                # last sampled one held 1.1 GB of the read's temporaries into the analysis
                del frame
                self.highs.append((now, where))
            time.sleep(0.002)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--wrap", default="", help="comma-separated MOD.FUNC of tb_perfdiag.analysis")
    ap.add_argument("--sample", action="store_true", help="record the stack at each new high")
    a = ap.parse_args(argv)
    if not pages.available():
        print("the recycled pages are off (no native extension): nothing to measure")
        return 1
    for spec in filter(None, a.wrap.split(",")):
        _wrap(spec)
    sampler = _Sampler() if a.sample else None
    if sampler:
        sampler.thread.start()
    tr = T.load(a.trace)
    print(f"read: arrays' peak {tr.read_peak // MB} MB, arrays after it {_live()} MB, "
          f"process high-water mark {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10} MB",
          flush=True)
    D.analyse(tr)
    if sampler:
        sampler.stop = True
        sampler.thread.join()
        print("highs of the live bytes (last first):")
        for now, where in reversed(sampler.highs[-8:]):
            print(f"  {now:6d} MB  {' < '.join(reversed(where))}")
    print(f"process high-water mark {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
