"""Pods: every host of a run analysed as a Dask task, rows kept in the result store.

One ``Engine`` per server (whatever the request options) holds a ``dask.distributed``
client: of a ``LocalCluster`` it starts on first use (worker processes sized by the cores
and ``TB_PERFDIAG_WORKER_MEMORY_MB``; TLS on 127.0.0.1 with a key made for this run, so no
other local user can submit work to it), or of an existing cluster by address
(``TB_PERFDIAG_DASK_SCHEDULER=tcp://…``: Kubernetes, SLURM, a cloud service).  What a
hand-made pool would have to get right comes from Dask: each worker's memory limit (its
nanny stops a worker that goes over it), retrying a task whose worker died on another
worker (``distributed.scheduler.allowed-failures``), one task per key however many ask
(a task's key is its result's store digest: file identity, options and code), and
workers that end with the process that started them.

Each task reads its host's file where it lives (a path or an fsspec URL the workers can
reach) and writes the typed diagnosis and the host's row to the result store itself when
it can reach it (an fsspec URL, or a local folder with a local cluster); otherwise the
encoded result comes back with the row and the server stores it.  A ``PodJob`` reads
the rows already stored in one batch and submits only the hosts missing.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from .analysis import Options
from .cache import DiagnosisCache, ResultStore, code_fingerprint, decode_row, encode_row, \
    row_of
from .codec import Failure, decode, encode
from .errors import TraceError, TraceTooLarge
from .file_analysis import read_and_analyse
from .progress import NULL
from .render.pod import error_row, pod_summary
from .graph_captures import keyed
from .storage import file_identity, is_remote

logger = logging.getLogger(__name__)

SCHEDULER_ENV = "TB_PERFDIAG_DASK_SCHEDULER"
MIN_WORKER_MB = 1024.0       # a worker below this could not hold its own imports and a host
KEY_PREFIX = "perfdiag-host-"
IDENTITY_THREADS = 32        # metadata requests in flight for an object store's files
TRIM_ABOVE = 0.5             # of a worker's memory limit: hand freed memory back past it
# a scheduler that does not answer within this is not there (Dask's own default is 30 s)
CONNECT_TIMEOUT_S = 10.0

__all__ = ["ClusterUnreachable", "Engine", "Failure", "PodJob", "analyse_file", "analyse_host", "cluster_size",
           "diagnose_pod"]


def analyse_file(path: str, opt, progress=NULL, max_bytes: int | None = None):
    """Typed diagnosis of one file, or its ``Failure`` (a Dask task's analysis: the
    file read through the guard within ``max_bytes``, the server's file budget)."""
    try:
        diag, _ = read_and_analyse(path, opt, progress, max_bytes)
    except TraceError as e:
        return Failure(os.path.basename(path), e.reason,
                       413 if isinstance(e, TraceTooLarge) else 422)
    return diag


# ------------------------------------------------------------------- the task (worker)
_WORKER_STORES: dict = {}


def _worker_store(location, max_bytes):
    if not location:
        return None
    key = (location, max_bytes)
    if key not in _WORKER_STORES:
        _WORKER_STORES[key] = ResultStore(location, max_bytes, evict=False)
    return _WORKER_STORES[key]


_LIBC = []


def _give_memory_back() -> None:
    """Returns the memory an analysis freed to the OS (glibc's ``malloc_trim``) once the
    worker holds over half its memory limit, so its resident size — what Dask's limit
    watches — drops between large hosts (small ones keep their pages: no faults again)."""
    try:
        from distributed import get_worker
        import psutil
        limit = get_worker().memory_manager.memory_limit
        if not limit or psutil.Process().memory_info().rss < TRIM_ABOVE * limit:
            return
    except (ImportError, ValueError, AttributeError):
        pass          # not in a worker (a test calling the task): trim
    if not _LIBC:
        try:
            import ctypes
            _LIBC.append(ctypes.CDLL("libc.so.6").malloc_trim)
        except (OSError, AttributeError):
            _LIBC.append(None)
    if _LIBC[0] is not None:
        _LIBC[0](0)


def analyse_host(path: str, opt: Options, digest: str, fingerprint: str,
                 store_location: str | None, store_bytes: int,
                 max_bytes: int | None = None) -> dict:
    """A Dask task: the row of one host, from the store when another process already
    analysed it, else analysed here and written to the store (``analysed`` says which;
    ``blob`` carries the encoded result when the store was out of reach)."""
    if fingerprint != code_fingerprint():
        raise RuntimeError("this Dask worker runs other tb-perfdiag code than the server "
                           f"({code_fingerprint()} ≠ {fingerprint}): install the same "
                           "version on the workers")
    store = _worker_store(store_location, store_bytes)
    if store is not None:
        row = store.get_rows([digest]).get(digest)
        if row is not None:
            return {"row": row, "analysed": False}
    try:
        result = analyse_file(path, opt, max_bytes=max_bytes)
        row = decode_row(encode_row(row_of(result)))
        blob = encode(result)
        del result
    finally:
        _give_memory_back()
    if store is not None and store.put(digest, blob, row):
        return {"row": row, "analysed": True}
    return {"row": row, "analysed": True, "blob": blob}


# ---------------------------------------------------------------------------- engine
def _total_memory_mb() -> float:
    try:
        import psutil
        return psutil.virtual_memory().total / 1e6
    except Exception:  # noqa: BLE001 - no psutil here: assume a small machine
        return 8192.0


def cluster_size(cpus: int | None = None, worker_mb: float | None = None,
                 max_workers: int | None = None) -> tuple[int, int]:
    """(workers, memory limit of each in bytes) of the local cluster: one single-threaded
    worker per core (the analysis holds the GIL), at most ``TB_PERFDIAG_WORKERS``; each
    worker's Dask memory limit is ``TB_PERFDIAG_WORKER_MEMORY_MB``, by default half the
    machine's memory shared among them — with fewer workers when that would leave a
    worker under ``MIN_WORKER_MB``."""
    cpus = cpus or os.cpu_count() or 1
    if max_workers is None:
        env = os.environ.get("TB_PERFDIAG_WORKERS")
        max_workers = int(env) if env else cpus
    n = max(1, min(cpus, max_workers))
    if worker_mb is None:
        env = os.environ.get("TB_PERFDIAG_WORKER_MEMORY_MB")
        if env:
            worker_mb = float(env)
        else:
            half = _total_memory_mb() / 2
            n = max(1, min(n, int(half // MIN_WORKER_MB)))
            worker_mb = half / n
    return n, int(worker_mb * 1e6)


class Engine:
    """The server's Dask client, started on first use."""

    def __init__(self, address: str | None = None, processes: bool | None = None,
                 connect_timeout: float = CONNECT_TIMEOUT_S):
        self.address = address if address is not None else \
            (os.environ.get(SCHEDULER_ENV) or None)
        self.connect_timeout = connect_timeout
        # 0: a local cluster of threads in this process (no processes allowed here)
        self.processes = processes if processes is not None else \
            os.environ.get("TB_PERFDIAG_POD_PROCESSES", "1") != "0"
        self._client = None
        self._cluster = None
        self._lock = threading.Lock()
        self._inflight: dict = {}      # digest → [future, holders]
        self._inflight_lock = threading.Lock()
        self.submitted = 0
        self.error = None

    @property
    def started(self) -> bool:
        return self._client is not None

    @property
    def local(self) -> bool:
        return not self.address

    def client(self):
        with self._lock:
            if self._client is None:
                self._client = self._start()
            return self._client

    def _start(self):
        import dask
        from distributed import Client, LocalCluster
        dlog = logging.getLogger("distributed")
        if dlog.getEffectiveLevel() < logging.WARNING:   # its INFO lines would flood TB's log
            dlog.setLevel(logging.WARNING)
        if self.address:
            return Client(self.address, set_as_default=False, timeout=self.connect_timeout)
        n, per = cluster_size()
        environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {})
        # Dask's MALLOC_TRIM_THRESHOLD_ (to hand freed memory back) also pins glibc's mmap
        # threshold, so every large numpy array is a fresh mmap: the analysis ran 1.6-2×
        # slower in a worker (measured: 2.0 s vs 1.2 s on the 2 M-event XSpace).  Without
        # it the task hands memory back itself (``_give_memory_back``).
        environ["MALLOC_TRIM_THRESHOLD_"] = None
        # one task per worker thread at a time: a worker that dies takes one host with it
        with dask.config.set({"distributed.scheduler.worker-saturation": 1.0,
                              "distributed.nanny.pre-spawn-environ": environ,
                              # its sampling profiler takes the GIL every 10 ms
                              "distributed.worker.profile.enabled": False}):
            self._cluster = LocalCluster(
                n_workers=n, threads_per_worker=1, memory_limit=per, processes=self.processes,
                dashboard_address="127.0.0.1:0", host="127.0.0.1" if self.processes else None,
                # TLS between worker processes; threads of this process talk in memory
                # (LocalCluster refuses ``security=False``)
                **({"security": True} if self.processes else {}))
        return Client(self._cluster, set_as_default=False)

    def submit(self, digest: str, *args):
        """The future of ``analyse_host(*args)`` under the key of ``digest``: the one in
        flight when there is one (one task per key), else a new task."""
        with self._inflight_lock:
            hit = self._inflight.get(digest)
            if hit is not None:
                hit[1] += 1
                return hit[0]
        fut = self.client().submit(analyse_host, *args, key=KEY_PREFIX + digest, pure=False)
        with self._inflight_lock:
            hit = self._inflight.get(digest)
            if hit is not None:            # another thread submitted it meanwhile
                hit[1] += 1
                return hit[0]
            self._inflight[digest] = [fut, 1]
            self.submitted += 1
        return fut

    def release(self, digest: str, cancel: bool = False) -> None:
        """One holder less; the last one cancels the task when asked (never for other
        clients of the cluster that want it too)."""
        with self._inflight_lock:
            hit = self._inflight.get(digest)
            if hit is None:
                return
            hit[1] -= 1
            if hit[1] > 0:
                return
            del self._inflight[digest]
        if cancel and not hit[0].done():
            try:
                hit[0].cancel()
            except Exception:  # noqa: BLE001 - a client already closed
                pass

    def pending(self, digest: str):
        """The future of ``digest``'s task from its submission until its result is
        stored, else None."""
        with self._inflight_lock:
            hit = self._inflight.get(digest)
        return hit[0] if hit is not None else None

    def memory_kill(self, worker: str) -> int | None:
        """The resident bytes at which ``worker``'s nanny stopped it for going over its
        memory limit, or None when it was not stopped for memory."""
        try:
            events = self.client().get_events("worker-restart-memory")
        except Exception:  # noqa: BLE001 - an old scheduler without events
            return None
        for _, ev in reversed(list(events)):
            if isinstance(ev, dict) and ev.get("worker") == worker:
                return int(ev.get("rss") or 0)
        return None

    def describe(self) -> dict:
        """Where the tasks run (without starting anything)."""
        out = {"scheduler": self.address or "local", "started": self.started,
               "tasks_submitted": self.submitted}
        if self.error:
            out["error"] = self.error
        c = self._client
        if c is None:
            return out
        try:
            info = c.scheduler_info()
            ws = list(info.get("workers", {}).values())
            out.update({"address": info.get("address"), "workers": len(ws),
                        "threads": sum(int(w.get("nthreads") or 0) for w in ws),
                        "memory_limit_bytes": max((int(w.get("memory_limit") or 0)
                                                   for w in ws), default=None),
                        "processes": self.processes if self.local else True})
        except Exception:  # noqa: BLE001 - a cluster going away
            pass
        return out

    def worker_pids(self) -> list:
        try:
            return sorted(self.client().run(os.getpid).values())
        except Exception:  # noqa: BLE001
            return []

    def close(self) -> None:
        with self._lock:
            client, cluster, self._client, self._cluster = self._client, self._cluster, None, None
        for x in (client, cluster):
            if x is not None:
                try:
                    x.close()
                except Exception:  # noqa: BLE001 - already gone
                    pass


# ----------------------------------------------------------------------------- a job
class PodJob:
    """The rows of every host of one run for one set of options: those in the store
    at once, the others as their tasks finish (polled by the page)."""

    def __init__(self, run: str, sources: list, options: Options, cache: DiagnosisCache,
                 engine: Engine, max_file_bytes: float = float("inf")):
        self.run, self.sources, self.options = run, sources, options
        self.cache, self.engine, self.max_file_bytes = cache, engine, max_file_bytes
        self.rows = {s.host: {"host": s.host, "span": s.span, "status": "pending"}
                     for s in sources}
        self.analysed = 0            # hosts analysed by workers for this job
        self.from_store = 0          # hosts answered by stored rows
        self.started = time.monotonic()
        self.elapsed = None
        self.cancelled = False
        self._held: set = set()          # digests whose task this job still holds
        self._held_lock = threading.Lock()
        self._done = threading.Event()
        self.known = threading.Event()  # set once the stored rows are in (or all are)
        self._version = 0
        self._snap = None
        threading.Thread(target=self._run, name=f"perfdiag-pod-{run}", daemon=True).start()

    def _set(self, src, row: dict) -> None:
        self.rows[src.host] = {"host": src.host, "span": src.span, **row}
        self._version += 1

    def _run(self):
        try:
            self._work()
        except Exception as e:  # noqa: BLE001 - the job ends with every row said
            logger.exception("perfdiag pod %s failed", self.run)
            for s in self.sources:
                if self.rows[s.host]["status"] == "pending":
                    self._set(s, error_row(s.host, s.span, 500, f"{type(e).__name__}: {e}"))
        finally:
            self.elapsed = time.monotonic() - self.started
            self._done.set()
            self.known.set()
            if self.cache.store is not None and self.analysed:
                self.cache.store.trim()

    def _identity(self, s):
        try:
            # as the service keys it: with the graph captures beside the file
            return keyed(file_identity(s.path), s.path)
        except (TraceError, OSError) as e:
            return e

    def _work(self):
        keys = {}
        fit = []
        for s in self.sources:
            if s.size > self.max_file_bytes:
                self._set(s, error_row(s.host, s.span, 413,
                                       f"{s.size / 1e6:.0f} MB, over the "
                                       f"{self.max_file_bytes / 1e6:.0f} MB file budget "
                                       "(TB_PERFDIAG_MAX_FILE_MB)"))
            else:
                fit.append(s)
        # identities: a stat and 128 KiB a local file, a metadata request an object
        # (those in parallel: a thousand one after the other would be a minute)
        remote = any(is_remote(s.path) for s in fit)
        with ThreadPoolExecutor(IDENTITY_THREADS if remote else 1) as pool:
            idents = list(pool.map(self._identity, fit))
        for s, ident in zip(fit, idents):
            if isinstance(ident, TraceError):
                self._set(s, error_row(s.host, s.span, 422, ident.reason))
            elif isinstance(ident, OSError):
                self._set(s, error_row(s.host, s.span, 404, "file disappeared; reload"))
            else:
                keys[s.host] = (ident, self.options.key())
        known = self.cache.rows(keys.values())
        todo = []
        for s in self.sources:
            k = keys.get(s.host)
            if k is None:
                continue
            if k in known:
                self._set(s, known[k])
                self.from_store += 1
            else:
                todo.append(s)
        if not todo or self.cancelled:
            return
        self.known.set()
        from distributed import as_completed
        try:
            client = self.engine.client()
        except Exception as e:  # noqa: BLE001 - no cluster: every row says why
            self.engine.error = unreachable(self.engine, e)
            for s in todo:
                self._set(s, error_row(s.host, s.span, 503, self.engine.error))
            return
        store = self.cache.store
        reach = store is not None and (store.shared or self.engine.local) and not store.usable()
        fp = code_fingerprint()
        futures = {}
        for s in todo:
            d = self.cache.digest(keys[s.host])
            fut = self.engine.submit(d, s.path, self.options, d, fp,
                                     store.location if reach else None,
                                     store.max_bytes if store is not None else 0,
                                     int(self.max_file_bytes)
                                     if self.max_file_bytes < float("inf") else None)
            with self._held_lock:
                self._held.add(d)
            futures.setdefault(fut.key, []).append((s, d, fut))
        for fut in as_completed([v[0][2] for v in futures.values()], loop=client.loop):
            for s, d, _ in futures.pop(fut.key, ()):
                self._finish(s, d, keys[s.host], fut)
            del fut                    # released: its result leaves the worker
            if self.cancelled:
                break

    def _finish(self, src, digest, key, fut) -> None:
        from distributed.scheduler import KilledWorker
        try:
            res = fut.result()
        except KilledWorker as e:
            self._release(digest)
            self._set(src, self._killed_row(e))
            return
        except Exception as e:  # noqa: BLE001 - this host's failure is this host's row
            self._release(digest)
            name = type(e).__name__
            msg = str(e) or name
            self._set(src, {"status": 500, "error": f"{name}: {msg}"[:500]})
            return
        row = decode_row(encode_row(res["row"])) or {"status": 500, "error": "bad row"}
        if res.get("blob") is not None:
            self.cache.save_blob(key, res["blob"], row)
        # released once stored: until then a request for this host waits for the task
        self._release(digest)
        if res.get("analysed"):
            self.analysed += 1
        else:
            self.from_store += 1
        self._set(src, row)

    def _killed_row(self, e) -> dict:
        ws = e.last_worker
        limit = int(getattr(ws, "memory_limit", 0) or 0)
        rss = self.engine.memory_kill(ws.address)
        tries = e.allowed_failures + 1
        if rss is not None:
            return {"status": 413, "reason": "worker_memory",
                    "error": f"the analysis needs more memory than a worker has: it went over "
                             f"the {limit / 1e6:.0f} MB worker memory limit ({rss / 1e6:.0f} MB "
                             f"when stopped) on {tries} worker(s); give the workers more "
                             "memory (TB_PERFDIAG_WORKER_MEMORY_MB here, or the "
                             "cluster's --memory-limit)"}
        return {"status": 500, "reason": "worker_died",
                "error": f"the worker analysing this host died {tries} time(s) without an "
                         "answer; the Dask worker logs say why"}

    # ---- what the route shows ----
    @property
    def complete(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def _release(self, digest: str, cancel: bool = False) -> None:
        """Gives up this job's claim on a task, once."""
        with self._held_lock:
            if digest not in self._held:
                return
            self._held.discard(digest)
        self.engine.release(digest, cancel)

    def cancel(self) -> None:
        """Stops waiting and gives up this job's claim on its tasks (those no other job
        or client wants are cancelled)."""
        self.cancelled = True
        with self._held_lock:
            held = list(self._held)
        for d in held:
            self._release(d, cancel=True)

    def snapshot(self, sort: str = "straggler", descending: bool | None = None,
                 offset: int = 0, limit: int | None = None) -> dict:
        rows = [dict(self.rows[s.host]) for s in self.sources]
        out = pod_summary(rows, sort, descending, offset, limit)
        out.update({"run": self.run, "complete": self.complete,
                    "analysed": self.analysed, "from_store": self.from_store,
                    "engine": self.engine.describe(),
                    "elapsed_s": round(self.elapsed if self.elapsed is not None
                                       else time.monotonic() - self.started, 2)})
        return out


class ClusterUnreachable(Exception):
    """The Dask cluster could not be started or reached: nothing can be analysed."""


def unreachable(engine: Engine, e: BaseException) -> str:
    """One sentence: which cluster, what went wrong, what to check."""
    why = (str(e) or type(e).__name__).splitlines()[0][:300]
    if engine.local:
        return (f"cannot start a local Dask cluster: {why}; check the memory and processes "
                "this machine allows (TB_PERFDIAG_WORKERS, TB_PERFDIAG_WORKER_MEMORY_MB)")
    return (f"cannot reach the Dask scheduler at {engine.address} within "
            f"{engine.connect_timeout:g} s ({why}); check that a scheduler runs there "
            "(`dask scheduler`), that the address and port are right and reachable from "
            "this machine, or use --scheduler local")


def decode_result(blob: bytes):
    """A result a worker sent back encoded."""
    return decode(blob)


def diagnose_pod(path: str, options: Options, scheduler: str | None = None,
                 results: str | None = None, on_progress=None, max_file_mb: float = 4096.0,
                 engine: Engine | None = None,
                 connect_timeout: float = CONNECT_TIMEOUT_S) -> dict:
    """Every run with several hosts under ``path`` (a logdir, local or fsspec URL)
    summarised host by host on Dask (``scheduler``: an address, or None for a local
    cluster), filling the result store at ``results`` (default: the server's) so that a
    TensorBoard on the same store opens these summaries without analysing anything.
    Returns {run: summary}; ``on_progress(run, done, total)`` is called as rows come.
    Raises ClusterUnreachable when hosts need analysing and the cluster cannot be had
    (within ``connect_timeout`` seconds for a scheduler address)."""
    from .discovery import latest, scan_logdir
    cache = DiagnosisCache(disk_dir=results if results else "")
    own = engine is None
    engine = engine or Engine("" if scheduler in (None, "local") else scheduler,
                              connect_timeout=connect_timeout)
    out = {}
    try:
        for name, run in scan_logdir(path).items():
            sources = []
            for h in run.hosts():
                mine = [s for s in run.sources if s.host == h]
                sources.append(latest(mine))        # discovery.SPAN_RULE, as the server
            engine.error = None
            job = PodJob(name, sources, options, cache, engine, max_file_mb * 1e6)
            while not job.wait(1.0):
                if on_progress is not None:
                    on_progress(name, sum(r["status"] != "pending" for r in job.rows.values()),
                                len(sources))
            if engine.error is not None:      # every later run would fail the same way
                raise ClusterUnreachable(engine.error)
            out[name] = job.snapshot()
            if on_progress is not None:
                on_progress(name, len(sources), len(sources))
    finally:
        if own:
            engine.close()
    return out
