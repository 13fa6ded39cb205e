"""Where a long analysis is, for the page's progress bar.

A ``Progress`` is handed down to the reader and the analysis, which move it through
named phases.  Each phase owns a share of the bar (its weight), measured on the large
benchmark files, so the bar moves at a roughly even pace whatever the format.  Inside
decoding the fraction follows the native scanner's position (it publishes it while it
runs without the GIL); building and analysing move it at their named stages.  Readers and
analyses never depend on it: ``NULL`` accepts everything and keeps nothing.
"""
from __future__ import annotations

import threading
import time

# share of the whole bar each phase takes, by format (2 M-event benchmark files)
WEIGHTS = {
    "xspace": {"reading": 0.04, "scanning": 0.24, "building": 0.30, "analysing": 0.42},
    # a Kineto trace is decompressed as it is scanned: one phase, following the file read
    "kineto": {"reading": 0.02, "scanning": 0.48, "building": 0.16, "analysing": 0.34},
}
LABELS = {"queued": "waiting for another analysis of this file",
          "waiting": "waiting for memory or a free analysis slot", "reading": "reading the file",
          "decompressing": "decompressing", "scanning": "decoding events",
          "building": "building the trace model", "analysing": "analysing", "done": "done"}


class Progress:
    """Phase and fraction of one analysis; every method is safe from any thread."""

    def __init__(self, label: str = ""):
        self.label = label
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._weights = WEIGHTS["xspace"]
        self._phase = "queued"
        self._detail = ""
        self._base = 0.0         # fraction of the bar before the current phase
        self._within = 0.0       # fraction of the current phase done
        self._follow = None      # reads the current phase's fraction from its worker
        self.finished = False

    def format(self, fmt: str) -> None:
        """The file's format fixes the phases' shares."""
        with self._lock:
            self._weights = WEIGHTS.get(fmt, self._weights)

    def phase(self, name: str, detail: str = "") -> None:
        with self._lock:
            order = list(self._weights)
            self._base = sum(self._weights[p] for p in order[:order.index(name)]) \
                if name in self._weights else self._base
            self._phase, self._detail, self._within = name, detail, 0.0
            self._follow = None

    def follow(self, fraction) -> None:
        """Until the next phase, the fraction of this one is ``fraction()``, asked at
        each snapshot (a scanner in C publishes its position instead of calling back)."""
        with self._lock:
            self._follow = fraction

    def within(self, fraction: float, detail: str | None = None) -> None:
        with self._lock:
            self._within = min(max(float(fraction), self._within), 1.0)
            if detail is not None:
                self._detail = detail

    def done(self) -> None:
        with self._lock:
            self._phase, self._detail, self._base, self._within = "done", "", 1.0, 0.0
            self.finished = True

    def snapshot(self) -> dict:
        with self._lock:
            if self._follow is not None:
                self._within = min(max(float(self._follow()), self._within), 1.0)
            w = self._weights.get(self._phase, 0.0)
            frac = 1.0 if self._phase == "done" else min(self._base + w * self._within, 0.99)
            text = LABELS.get(self._phase, self._phase)
            if self._detail:
                text = f"{text}: {self._detail}"
            return {"phase": self._phase, "text": text, "fraction": round(frac, 3),
                    "elapsed_s": round(time.monotonic() - self.started, 2),
                    "done": self.finished}


class _Null:
    def format(self, fmt):
        pass

    def phase(self, name, detail=""):
        pass

    def within(self, fraction, detail=None):
        pass

    def follow(self, fraction):
        pass

    def done(self):
        pass


NULL = _Null()
