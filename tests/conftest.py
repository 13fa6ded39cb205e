"""Shared fixtures: paths to real traces and a real TensorBoard server."""
from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.normpath(os.path.join(ROOT, "..", "shared", "traces"))
TESTDATA = os.path.join(ROOT, "testdata")
IN_CI = os.environ.get("CI", "").lower() == "true"

# The quick tier (`pytest --quick`, `bash scripts/test.sh --quick`) leaves out the tests marked
# `slow`: those that use a browser, a TensorBoard server or the 64-host pod by fixture, those
# parametrized over the real traces in ../shared, the files and tests below (they start
# servers, subprocesses or clusters inside their tests, or take seconds of CPU each), the tests
# whose name says they drive a browser, and any test marked `@pytest.mark.slow` itself. CI
# runs them all.
SLOW_FIXTURES = {"browser", "tb_demo", "pod_logdir"}
SLOW_FILES = {
    "test_cli.py", "test_newcomer.py", "test_rough_edges.py", "test_readme.py",   # the CLI, run
    "test_packaging.py",                                                         # a process each
    "test_server.py", "test_load.py", "test_reliability.py", "test_pod.py",       # servers,
    "test_result_store.py", "test_mcp.py",                                        # clusters
    "test_engine_real.py", "test_truth.py",                                       # real traces
    "test_cli_figures.py",                                                        # CLI runs
}
SLOW_TESTS = (      # node ids up to the parameters: measured at seconds of CPU each
    "test_causes.py::test_a_line_with_split_boundaries_answers_as_the_plain_one",
    "test_build.py::test_lookup_together_answers_as_each_lookup",
    "test_cache.py::test_a_bad_entry_is_recomputed_not_an_error",
    "test_cache.py::test_memory_tier_holds_what_it_measures",
    "test_cache.py::test_store_is_bounded_and_evicts_the_least_recently_used",
    "test_guard.py::test_a_bomb_stops_at_the_budget_having_held_only_chunks",
    "test_warnings_losses.py::test_real_kineto_logs_are_read_and_report_no_loss",
    "test_tensorflow.py::test_folded_findings_name_distinct_places_on_shared_traces",
    "test_first_answer.py::test_every_demo_and_testdata_first_answer_is_at_most_2_mb",
    "test_first_answer.py::test_3000_steps_with_annotations_answer_within_2_mb",
    "test_first_answer.py::test_every_list_of_the_first_answer_is_bounded_at_500_steps_and_under",
    "test_params.py::test_service_raises_its_errors",
    "test_native_scan.py::test_fuzz_xspace_mutated_never_wrong",
    "test_native_scan.py::test_fuzz_xspace_wellformed_equals_reference",
    "test_native_scan.py::test_kineto_chunked_equals_whole_at_every_boundary",
    "test_hardening.py::test_fuzz_structured_kineto",
    "test_trend.py::test_scalars_watch_adds_captures_as_they_land",
    "test_compare.py::test_compare_route_and_its_errors",
    "test_pages.py::test_held_never_passes_the_most_in_use",
    "test_efficiency_torch.py::test_real_traces_with_shapes_no_kernel_above_its_peak",
    "test_budget.py::test_large_work_is_not_starved_by_a_stream_of_small",
)


def _real_trace(value) -> bool:
    """Whether a test parameter names a file of ../shared/traces (a path, or one relative to
    it or to ../shared, as a string or as a tuple of parts)."""
    if isinstance(value, tuple) and value and isinstance(value[0], str):
        value = "/".join(value)
    return isinstance(value, str) and (SHARED in value or value.startswith(
        ("public/", "cpu/", "traces/public/", "traces/cpu/")))


def pytest_addoption(parser):
    parser.addoption("--quick", action="store_true",
                     help="leave out the tests marked slow (browser, servers, subprocesses, "
                          "real-trace sweeps): the edit-test loop; CI runs everything")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: left out by --quick (browser, server, subprocess, "
                                       "real-trace sweep)")


def _is_slow(item) -> bool:
    name = item.path.name
    test = f"{name}::{getattr(item, 'originalname', None) or item.name}"
    params = getattr(getattr(item, "callspec", None), "params", {})
    return (name in SLOW_FILES or name.startswith("test_browser") or test in SLOW_TESTS
            or "browser" in (getattr(item, "originalname", None) or item.name)
            or not SLOW_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
            or any(_real_trace(v) for v in params.values()))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _is_slow(item) and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
    if config.getoption("--quick"):
        kept = [item for item in items if item.get_closest_marker("slow") is None]
        dropped = [item for item in items if item.get_closest_marker("slow") is not None]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept


@functools.lru_cache(maxsize=6)
def diagnosed(path: str, **options):
    """``tb_perfdiag.diagnose(path, **options)``, computed once per session (per xdist worker)
    for each file and options: real-trace tests share it and only read it. The few most
    recent are kept (a Report holds its trace): a file's tests run in a row on a worker, so
    each file diagnoses each trace it reads about once."""
    import tb_perfdiag
    return tb_perfdiag.diagnose(path, **options)


@functools.lru_cache(maxsize=64)
def diagnosed_json(path: str) -> dict:
    """``diagnosed(path).to_json()`` (every gap), once per session (per xdist worker): for the
    real-trace sweeps that check several properties of the same files. Read it, never change
    it."""
    return diagnosed(path).to_json()


def shared_path(*parts) -> str:
    p = os.path.join(SHARED, *parts)
    if not os.path.exists(p):
        pytest.skip(f"real traces not available ({p} is absent; they live in ../shared/traces)")
    return p


def call(svc, route: str, query: dict) -> tuple:
    """(status, body) of a ``DiagnosisService`` route as the plugin answers it: the
    query parsed for the route, failures mapped to their status and JSON body."""
    from tb_perfdiag.plugin import answer
    return answer(route, getattr(svc, f"{route}_json"), query)


def shared_files(suffixes) -> list:
    if not os.path.isdir(SHARED):
        return []
    out = []
    for dirpath, _, files in os.walk(SHARED):
        for f in sorted(files):
            if f.endswith(suffixes):
                out.append(os.path.join(dirpath, f))
    return sorted(out)


def gzip_bomb(path, out_mb: int, head: bytes = b"", fill: bytes = b"\0") -> None:
    """A valid gzip of ``head`` then ``out_mb`` MiB of ``fill`` repeated (zeros by default;
    ``b'{"traceEvents": ['`` and spaces make a bomb that is JSON as far as it goes), about
    1/1000 of that on disk, written in well under a second: one self-contained deflate
    block of 1 MiB of ``fill``, repeated, then the trailer (CRC and size of all of it)."""
    import struct
    import zlib
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = (fill * ((1 << 20) // len(fill) + 1))[:1 << 20]
    first = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH) if head else b""
    block = c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
    tail = c.flush(zlib.Z_FINISH)
    crc = zlib.crc32(head)
    for _ in range(out_mb):
        crc = zlib.crc32(chunk, crc)
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + first)
        for _ in range(out_mb):
            f.write(block)
        f.write(tail + struct.pack("<II", crc, ((out_mb << 20) + len(head)) & 0xFFFFFFFF))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _limit_address_space(nbytes: int):
    """A ``preexec_fn`` that caps the child's address space (RLIMIT_AS)."""
    def apply():
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (nbytes, nbytes))
    return apply


class TensorBoard:
    def __init__(self, logdir: str, extra_env=None, address_space_bytes: int | None = None):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ)
        env.setdefault("TB_PERFDIAG_CACHE_DIR", os.path.join(str(logdir) + ".cache")
                       if "://" not in str(logdir) else "")
        env.update(extra_env or {})
        self.log = open(os.path.join(ROOT, "test-artifacts", f"tensorboard-{self.port}.log"), "w") \
            if os.path.isdir(os.path.join(ROOT, "test-artifacts")) else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--port",
             str(self.port), "--host", "127.0.0.1", "--reload_interval", "0"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env,
            preexec_fn=_limit_address_space(address_space_bytes) if address_space_bytes else None)
        deadline = time.time() + 90
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("tensorboard exited early")
            try:
                urllib.request.urlopen(self.url + "/data/plugins_listing", timeout=2)
                return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError("tensorboard did not start in 90 s")

    def get(self, path: str, timeout=120):
        import json
        req = urllib.request.Request(self.url + path)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                body = r.read()
                return r.status, r.headers, (json.loads(body) if body[:1] in (b"{", b"[")
                                            else body)
        except urllib.error.HTTPError as e:
            body = e.read()
            try:
                body = json.loads(body)
            except ValueError:
                pass
            return e.code, e.headers, body

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="session")
def artifacts_dir():
    d = os.path.join(ROOT, "test-artifacts")
    os.makedirs(d, exist_ok=True)
    return d


@pytest.fixture(scope="session")
def demo_logdir(tmp_path_factory):
    """The bundled demo logdir: testdata captures + synthetic runs, copied to a temp dir
    with one bad file added, so tests never write into the repository."""
    import shutil
    dst = tmp_path_factory.mktemp("logdir")
    for name in ("captures", os.path.join("synthetic", "logdir")):
        src = os.path.join(TESTDATA, name)
        if os.path.isdir(src):
            for entry in os.listdir(src):
                s = os.path.join(src, entry)
                if os.path.isdir(s):
                    shutil.copytree(s, dst / entry, dirs_exist_ok=True)
    bad = dst / "broken_run" / "plugins" / "profile" / "2026_01_01_00_00_00"
    bad.mkdir(parents=True)
    (bad / "badhost.xplane.pb").write_bytes(b"\x0a\xff\xff\xff\x7f garbage")
    return dst


@pytest.fixture(scope="session")
def tb_demo(demo_logdir, artifacts_dir):
    tb = TensorBoard(demo_logdir)
    yield tb
    tb.stop()


POD_HOSTS, POD_STRAGGLERS, POD_STALL_US = 64, (17, 40), 20_000


@pytest.fixture(scope="session")
def pod_logdir(tmp_path_factory):
    """A 64-host pod from the synthetic generator (about 5 k events a host, ~7 s to write):
    hosts 17 and 40 stall 20 ms in data loading every step. Returns (logdir, truth)."""
    sys.path.insert(0, os.path.join(TESTDATA, "generators"))
    try:
        import synthetic
    finally:
        sys.path.pop(0)
    logdir = tmp_path_factory.mktemp("pod")
    truth = synthetic.write_pod(logdir / "pod", POD_HOSTS, 5000, POD_STRAGGLERS, POD_STALL_US)
    return logdir, truth


class DaskCluster:
    """A real Dask scheduler and worker processes (``dask scheduler`` / ``dask worker``,
    each worker with its nanny), as an operator would start them; ``address`` is what
    ``TB_PERFDIAG_DASK_SCHEDULER`` takes."""

    def __init__(self, tmp, workers: int = 2, memory_limit: str = "1GB",
                 allowed_failures: int = 1):
        self.tmp = str(tmp)
        self.file = os.path.join(self.tmp, "scheduler.json")
        self.memory_limit = memory_limit
        self.workers = []
        self.env = dict(os.environ,
                        DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=str(allowed_failures),
                        DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION="1.0")
        dask = os.path.join(os.path.dirname(sys.executable), "dask")
        self._dask = dask
        self.log = open(os.path.join(self.tmp, "dask.log"), "a")
        self.scheduler = subprocess.Popen(
            [dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--scheduler-file", self.file], env=self.env, stdout=self.log,
            stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while not os.path.exists(self.file):
            if time.time() > deadline or self.scheduler.poll() is not None:
                raise RuntimeError("dask scheduler did not start")
            time.sleep(0.1)
        import json
        for _ in range(50):
            try:
                with open(self.file) as f:
                    self.address = json.load(f)["address"]
                break
            except (ValueError, KeyError):
                time.sleep(0.1)
        for _ in range(workers):
            self.add_worker()
        self.wait_for_workers(workers)

    def add_worker(self):
        p = subprocess.Popen(
            [self._dask, "worker", "--scheduler-file", self.file, "--nthreads", "1",
             "--memory-limit", self.memory_limit, "--no-dashboard", "--host", "127.0.0.1"],
            env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        self.workers.append(p)
        return p

    def client(self):
        from distributed import Client
        return Client(self.address, set_as_default=False, timeout=30)

    def wait_for_workers(self, n: int, timeout: float = 90):
        with self.client() as c:
            c.wait_for_workers(n, timeout=timeout)

    def processes(self) -> list:
        """Every process of the cluster (scheduler, nannies, workers)."""
        import psutil
        out = []
        for p in [self.scheduler] + self.workers:
            try:
                pp = psutil.Process(p.pid)
                out += [pp] + pp.children(recursive=True)
            except psutil.NoSuchProcess:
                pass
        return out

    def stop(self):
        import psutil
        procs = self.processes()
        for p in procs:
            try:
                p.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(procs, timeout=15)
        for p in alive:
            p.kill()
        self.log.close()
