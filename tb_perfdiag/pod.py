"""Pods: one summary row per host of a run, analysed in parallel within a memory budget.

A ``PodJob`` runs in the background and is polled: the page shows rows as hosts finish.
Each host's diagnosis runs in a worker *process* (the analysis holds the GIL for long
stretches, so threads would not run two hosts at once; a process that runs out of
memory also cannot take TensorBoard down with it) and lands in the service's cache, so
drilling into a host afterwards is instant.
"""
from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from dataclasses import dataclass

from .analysis import analyse
from .errors import ApiError, TraceError, as_api_error
from .progress import NULL
from .render.pod import error_row, summary_row
from .trace import load

MEMORY_BUDGET_MB = float(os.environ.get("TB_PERFDIAG_MEMORY_MB", "4096"))
MAX_WORKERS = int(os.environ.get("TB_PERFDIAG_WORKERS", "4"))
# 0: analyse hosts in threads of the TensorBoard process instead of worker processes
USE_PROCESSES = os.environ.get("TB_PERFDIAG_POD_PROCESSES", "1") != "0"
PEAK_PER_FILE_MB = 8.0      # a diagnosis peaks at about 8× the file's size (benchmarks)
PROCESS_BASE_MB = 150.0     # interpreter, numpy and tb_perfdiag in a worker
SLOWER_STEP = 1.10          # straggler: typical (median) step 10 % slower than the median host…
LOWER_DUTY = 0.05           # …or duty cycle 5 points below it


class WorkerDied(RuntimeError):
    """A worker process ended without an answer (killed for memory, most likely)."""


@dataclass
class Failure:
    """A file that is not a readable trace, as the cache keeps it."""

    file: str
    reason: str

    def nbytes(self) -> int:
        return 100 + len(self.reason)


def analyse_file(path: str, opt, progress=NULL, keep_context=None):
    """Typed diagnosis of one file, or its ``Failure``; in the server's process (with
    progress; ``keep_context(ctx)`` receives the loaded trace and host timelines) or in
    a pod's worker process (which sends back the diagnosis alone)."""
    try:
        diag, ctx = analyse(load(path, progress), opt, progress)
    except TraceError as e:
        return Failure(os.path.basename(path), e.reason)
    if keep_context is not None:
        keep_context(ctx)
    return diag


def workers_for(sizes_bytes, cpus: int | None = None) -> int:
    """How many hosts at once: no more than the cores, ``MAX_WORKERS``, and what the
    memory budget holds for the largest file."""
    biggest = max(sizes_bytes, default=0) / 1e6
    per = PEAK_PER_FILE_MB * biggest + PROCESS_BASE_MB
    return max(1, min(cpus or os.cpu_count() or 1, MAX_WORKERS, int(MEMORY_BUDGET_MB // per)))


def _median(xs):
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else None


def flag_stragglers(rows: list) -> tuple:
    """Marks rows whose typical (median) step is slow or whose duty cycle is low next to
    the median host, and names the cause of idle time that grew most; returns (median
    host's typical step ns, median duty cycle)."""
    ok = [r for r in rows if r.get("status") == 200]
    med_step = _median([r["typical_step_ns"] for r in ok if r.get("typical_step_ns")])
    med_duty = _median([r["duty_cycle"] for r in ok])
    causes = {c for r in ok for c in r.get("step_idle_ns", {})}
    med_idle = {c: _median([r.get("step_idle_ns", {}).get(c, 0) for r in ok]) for c in causes}
    for r in ok:
        why = []
        step = r.get("typical_step_ns")
        if med_step and step and step > SLOWER_STEP * med_step:
            why.append(f"steps {100 * (step / med_step - 1):.0f}% slower than the median host")
        if med_duty is not None and r.get("duty_cycle") is not None and \
                r["duty_cycle"] < med_duty - LOWER_DUTY:
            why.append(f"duty cycle {100 * (med_duty - r['duty_cycle']):.0f} points below "
                       "the median host")
        r["straggler"] = bool(why)
        # the cause whose idle time per step grew most over the median host's
        excess = {c: v - med_idle.get(c, 0) for c, v in r.get("step_idle_ns", {}).items()}
        worst = max(excess, key=excess.get, default=None)
        if why and worst is not None and excess[worst] > 0:
            r["straggler_cause"] = worst
            r["straggler_excess_ns"] = int(excess[worst])
            why.append(f"{worst.replace('_', ' ')} idle {excess[worst] / 1e6:.1f} ms/step "
                       "above the median host")
        r["straggler_reason"] = "; ".join(why)
    return med_step, med_duty


class PodJob:
    """Summaries of every host of one run, computed in the background.

    ``diagnose(source, compute)`` is the service's cached diagnosis JSON of one file
    (raising an ``ApiError`` or ``TraceError`` when there is none) with
    ``compute`` replacing the in-process analysis (so a host already analysed, or being
    analysed for the page, is not analysed twice)."""

    def __init__(self, run: str, sources: list, options, diagnose):
        self.run, self.sources, self.options = run, sources, options
        self._diagnose = diagnose
        self.workers = workers_for([s.size for s in sources])
        self.processes = USE_PROCESSES and self.workers > 1 and len(sources) > 1
        self.rows = {s.host: {"host": s.host, "span": s.span, "status": "pending"}
                     for s in sources}
        self.started = time.monotonic()
        self.elapsed = None
        self._done = threading.Event()
        self._pool = None
        self._pool_lock = threading.Lock()
        threading.Thread(target=self._run, name=f"perfdiag-pod-{run}", daemon=True).start()

    # ---- the work ----
    def _compute_in_worker(self, src):
        def compute():
            fut = self._pool.submit(analyse_file, src.path, self.options)
            try:
                return fut.result()
            except BrokenProcessPool:
                self._renew_pool()
                raise WorkerDied(f"the worker analysing {os.path.basename(src.path)} ended "
                                 "without an answer (out of memory?)") from None
        return compute

    def _renew_pool(self):
        with self._pool_lock:
            old, self._pool = self._pool, self._new_pool()
        old.shutdown(wait=False, cancel_futures=True)

    def _new_pool(self):
        # spawn, not fork: TensorBoard's process has many threads
        return ProcessPoolExecutor(max_workers=self.workers,
                                   mp_context=multiprocessing.get_context("spawn"))

    def _one(self, src):
        try:
            diag = self._diagnose(src, self._compute_in_worker(src)
                                  if self._pool is not None else None)
            row = summary_row(src.host, src.span, diag)
        except (ApiError, TraceError) as e:
            err = as_api_error(e)
            row = error_row(src.host, src.span, err.status, err.body().get("error"))
        except Exception as e:  # noqa: BLE001 - one host's failure is that host's row
            row = error_row(src.host, src.span, 500, str(e) or type(e).__name__)
        self.rows[src.host] = row

    def _run(self):
        try:
            if self.processes:
                try:
                    self._pool = self._new_pool()
                except (OSError, ValueError):       # no processes here: threads it is
                    self._pool, self.processes = None, False
            with ThreadPoolExecutor(max_workers=self.workers) as feeders:
                list(feeders.map(self._one, self.sources))
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            self.elapsed = time.monotonic() - self.started
            self._done.set()

    # ---- what the route shows ----
    @property
    def complete(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def snapshot(self) -> dict:
        rows = [dict(self.rows[s.host]) for s in self.sources]
        med_step, med_duty = flag_stragglers(rows)
        done = sum(r["status"] != "pending" for r in rows)
        return {"run": self.run, "hosts": rows, "done": done, "total": len(rows),
                "complete": self.complete, "workers": self.workers,
                "processes": self.processes, "median_step_ns": med_step,
                "median_duty_cycle": med_duty,
                "elapsed_s": round(self.elapsed if self.elapsed is not None
                                   else time.monotonic() - self.started, 2)}
