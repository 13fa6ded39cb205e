"""Soak: many clients for a long time against a real TensorBoard over a mixed logdir.

    python benchmarks/bench_soak.py [--clients 200] [--duration 600] [--logdir DIR]
                                    [--memory-mb 1024] [--max-file-mb 512]
                                    [--address-space-mb N] [--anchor-s 60] [--json OUT]

Starts TensorBoard (this venv, the plugin's budget from ``--memory-mb``) on a mixed
logdir — generated once into ``$TMPDIR/tb_perfdiag_bench/soak``: a 200k-event Kineto
trace (gz) and a 200k-event XSpace, the bundled captures and synthetic runs, an
unreadable file, a gzip bomb (1 GiB out of 1 MB) — or on ``--logdir``.  Each client
loops over a weighted mix of what the page and a hostile client ask: diagnosis pages at
a few thresholds, gaps, timelines at random windows, exports with events, progress, the
run list, unknown runs, the bad file and the bomb.  Reported: requests, p50/p95/p99
latency per kind and overall, errors (5xx other than 503, timeouts, dropped
connections; a 4xx for a bad request is an expected answer and counted apart), 503s,
TensorBoard's peak memory (VmHWM) and idle memory, and TensorBoard's own
``/data/plugins_listing`` latency under that load, polled by one more client every 0.5 s.
The anchor, in the same run: the same clients then ask TensorBoard's own
``/data/environment`` for ``--anchor-s`` seconds, and the plugin listing's latency under
*that* load is reported beside it (the share of the listing's slowdown that is
TensorBoard's thread-per-request server, whatever the plugin does).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

API = "/data/plugin/perfdiag"
SOAK = Path(C.TMP) / "soak"


def make_logdir(root: Path) -> Path:
    """The mixed logdir (written once, reused)."""
    done = root / ".complete"
    if done.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    sys.path.insert(0, os.path.join(C.ROOT, "testdata", "generators"))
    import large
    sys.path.pop(0)
    sys.path.insert(0, os.path.join(C.ROOT, "tests"))
    from conftest import gzip_bomb
    sys.path.pop(0)
    large.write_large(root / "big_kineto" / "rank0.1700000000000.pt.trace.json.gz", 200_000,
                      "kineto")
    large.write_large(root / "tpu" / "plugins" / "profile" / "r1" / "host0.xplane.pb", 200_000,
                      "xspace")
    for name in ("captures", os.path.join("synthetic", "logdir")):
        src = os.path.join(C.ROOT, "testdata", name)
        for entry in os.listdir(src):
            if os.path.isdir(os.path.join(src, entry)):
                shutil.copytree(os.path.join(src, entry), root / entry, dirs_exist_ok=True)
    (root / "broken").mkdir()
    (root / "broken" / "w0.1.pt.trace.json").write_bytes(b'{"traceEvents": [{"ph": ')
    (root / "bomb").mkdir()
    gzip_bomb(root / "bomb" / "w0.1.pt.trace.json.gz", 1024)
    done.write_text("ok")
    return root


def _status(pid: int) -> dict:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


def _mb(v: str) -> float:
    return int(v.split()[0]) / 1024


class Server:
    def __init__(self, logdir: Path, env: dict, address_space_mb: float | None):
        self.port = C.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full = dict(os.environ, **env)

        def cap():
            if address_space_mb:
                import resource
                n = int(address_space_mb * 2**20)
                resource.setrlimit(resource.RLIMIT_AS, (n, n))
        self.log = open(os.path.join(C.TMP, f"soak-tensorboard-{self.port}.log"), "w")
        self.proc = subprocess.Popen(
            [C.MAIN_PY, "-m", "tensorboard.main", "--logdir", str(logdir), "--port",
             str(self.port), "--host", "127.0.0.1", "--reload_interval", "0"],
            stdout=self.log, stderr=subprocess.STDOUT, env=full, preexec_fn=cap)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit("tensorboard exited early; see " + self.log.name)
            try:
                urllib.request.urlopen(self.url + "/data/plugins_listing", timeout=2).read()
                return
            except OSError:
                time.sleep(0.3)
        raise SystemExit("tensorboard did not start in 120 s")

    def get(self, path: str, timeout: float) -> tuple:
        """(status or error name, seconds), asked as a browser does (gzip welcome); the
        body is read, not parsed."""
        t0 = time.monotonic()
        req = urllib.request.Request(self.url + path, headers={"Accept-Encoding": "gzip"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                r.read()
                status = r.status
        except urllib.error.HTTPError as e:
            e.read()
            status = e.code
        except Exception as e:  # noqa: BLE001 - a timeout or a dropped connection
            status = type(e).__name__
        return status, time.monotonic() - t0

    def stop(self):
        C.stop(self.proc)


def request_mix(runs: list, rng: random.Random):
    """(kind, path, expected statuses) of one request, drawn from a weighted mix."""
    ok = [r for r in runs if r["run"] not in ("broken", "bomb")]
    big = [r for r in ok if r["run"] in ("big_kineto", "tpu/r1")] or ok
    r = rng.choice(big if rng.random() < 0.6 else ok)
    q = f"run={r['run']}&host={r['hosts'][0]['name']}"
    th = rng.choice((5, 5, 5, 10, 50))
    x = rng.random()
    if x < 0.30:
        return "diagnosis", f"{API}/diagnosis?{q}&threshold_us={th}&gaps_limit=200", (200,)
    if x < 0.40:
        return "diagnosis page 2", (f"{API}/diagnosis?{q}&threshold_us={th}&gaps_limit=200"
                                    f"&gaps_offset=200"), (200,)
    if x < 0.55:
        a = rng.randrange(0, 200) * 1_000_000
        return "timeline", (f"{API}/timeline?{q}&threshold_us={th}&start_ns={a}"
                            f"&end_ns={a + rng.choice((5, 50, 500)) * 1_000_000}&width=1200"), (200,)
    if x < 0.63:
        a = rng.randrange(0, 100) * 1000
        return "export with events", (f"{API}/overlay?{q}&with_events=1&start_us={a}"
                                      f"&end_us={a + 20000}"), (200,)
    if x < 0.70:
        return "gap", f"{API}/gap?{q}&id=0-{rng.randrange(10**6)}", (200, 404)
    if x < 0.78:
        return "progress", f"{API}/progress?{q}&threshold_us={th}", (200,)
    if x < 0.85:
        return "runs", f"{API}/runs", (200,)
    if x < 0.90:
        return "unknown run", f"{API}/diagnosis?run=nope{rng.randrange(10**9)}&host=x", (404,)
    if x < 0.95:
        return "bad file", f"{API}/diagnosis?run=broken&host=w0&threshold_us={th}", (422,)
    return "gzip bomb", f"{API}/diagnosis?run=bomb&host=w0&threshold_us={th}", (413,)


def load_phase(srv, clients: int, seconds: float, timeout: float, pick, seed: int):
    """``clients`` threads asking ``pick(rng)`` requests for ``seconds``, while one more
    polls /data/plugins_listing (and TensorBoard's memory) every 0.5 s; (results by
    kind, listing samples, RSS samples, wall seconds)."""
    results = defaultdict(list)         # kind → [(status, seconds, expected)]
    listing, rss = [], []
    stop = threading.Event()
    deadline = time.monotonic() + seconds

    def client(i):
        rng = random.Random(seed * 1000 + i)
        while time.monotonic() < deadline:
            kind, path, expected = pick(rng)
            status, secs = srv.get(path, timeout)
            results[kind].append((status, secs, expected))

    def watch():
        while not stop.is_set():
            listing.append(srv.get("/data/plugins_listing", 30))
            try:
                rss.append(_mb(_status(srv.proc.pid)["VmRSS"]))
            except OSError:
                pass
            stop.wait(0.5)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + timeout + 60)
    wall = time.monotonic() - t0
    stop.set()
    watcher.join(35)
    return results, listing, rss, wall


def _listing_stats(listing: list) -> dict:
    lat = [s for _, s in listing]
    return {"polls": len(lat), "p50_s": pct(lat, 50), "p99_s": pct(lat, 99),
            "max_s": max(lat) if lat else None,
            "failed": sum(1 for s_, _ in listing if s_ != 200)}


def pct(xs: list, p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--duration", type=float, default=600, help="seconds of load")
    ap.add_argument("--logdir", help="a logdir of your own instead of the generated one")
    ap.add_argument("--memory-mb", type=float, default=1024, help="TB_PERFDIAG_MEMORY_MB")
    ap.add_argument("--max-file-mb", type=float, default=512, help="TB_PERFDIAG_MAX_FILE_MB")
    ap.add_argument("--address-space-mb", type=float, default=None,
                    help="RLIMIT_AS of TensorBoard (default: none)")
    ap.add_argument("--timeout", type=float, default=120, help="per request, seconds")
    ap.add_argument("--anchor-s", type=float, default=60,
                    help="then as long with the same clients on TensorBoard's own "
                         "/data/environment (0: skip)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the report here too")
    a = ap.parse_args(argv)
    os.makedirs(C.TMP, exist_ok=True)
    logdir = Path(a.logdir) if a.logdir else make_logdir(SOAK)
    env = {"TB_PERFDIAG_MEMORY_MB": str(a.memory_mb), "TB_PERFDIAG_MAX_FILE_MB": str(a.max_file_mb),
           "TB_PERFDIAG_CACHE_DIR": os.path.join(C.TMP, f"soak-cache-{os.getpid()}"),
           "MALLOC_ARENA_MAX": "2"}
    srv = Server(logdir, env, a.address_space_mb)
    try:
        idle_mb = _mb(_status(srv.proc.pid)["VmRSS"])
        runs = json.loads(urllib.request.urlopen(srv.url + f"{API}/runs", timeout=120).read())
        runs = runs["runs"]
        results, listing, rss, wall = load_phase(
            srv, a.clients, a.duration, a.timeout,
            lambda rng: request_mix(runs, rng), a.seed)
        anchor_results, anchor_listing = {}, []
        if a.anchor_s > 0 and srv.proc.poll() is None:
            anchor_results, anchor_listing, _, _ = load_phase(
                srv, a.clients, a.anchor_s, a.timeout,
                lambda rng: ("TensorBoard /data/environment", "/data/environment", (200,)),
                a.seed)
        alive = srv.proc.poll() is None
        st = _status(srv.proc.pid) if alive else {}
        peak_mb = _mb(st["VmHWM"]) if st else float("nan")
        try:
            plugin = json.loads(urllib.request.urlopen(srv.url + f"{API}/status",
                                                       timeout=30).read())
        except Exception:  # noqa: BLE001
            plugin = {}
    finally:
        srv.stop()

    rows, all_lat = [], []
    errors = unexpected = busy = total = 0
    for kind in sorted(results):
        rs = results[kind]
        lat = [s for _, s, _ in rs]
        all_lat += lat
        err = sum(1 for st_, _, _ in rs if not isinstance(st_, int) or (st_ >= 500 and st_ != 503))
        b = sum(1 for st_, _, _ in rs if st_ == 503)
        unexp = sum(1 for st_, _, exp in rs if isinstance(st_, int) and st_ < 500 and st_ not in exp)
        errors, busy, unexpected, total = errors + err, busy + b, unexpected + unexp, total + len(rs)
        rows.append({"kind": kind, "requests": len(rs), "p50_s": pct(lat, 50),
                     "p95_s": pct(lat, 95), "p99_s": pct(lat, 99), "max_s": max(lat),
                     "errors": err, "busy_503": b, "unexpected_status": unexp})
    report = {
        "clients": a.clients, "duration_s": a.duration, "wall_s": round(wall, 1),
        "logdir": str(logdir), "memory_budget_mb": a.memory_mb,
        "address_space_mb": a.address_space_mb, "requests": total,
        "throughput_rps": round(total / wall, 1), "errors": errors, "busy_503": busy,
        "unexpected_status": unexpected, "tensorboard_alive": alive,
        "idle_mb": round(idle_mb), "peak_mb": round(peak_mb),
        "rss_max_sampled_mb": round(max(rss)) if rss else None,
        "p50_s": pct(all_lat, 50), "p95_s": pct(all_lat, 95), "p99_s": pct(all_lat, 99),
        "plugins_listing": _listing_stats(listing),
        "anchor": {"load": "the same clients asking TensorBoard's own /data/environment",
                   "seconds": a.anchor_s,
                   "requests": sum(len(v) for v in anchor_results.values()),
                   "p50_s": pct([x for v in anchor_results.values() for _, x, _ in v], 50),
                   "p95_s": pct([x for v in anchor_results.values() for _, x, _ in v], 95),
                   "plugins_listing": _listing_stats(anchor_listing)},
        "plugin_status": plugin, "rows": rows,
    }
    print(f"# bench_soak  {a.clients} clients × {a.duration:.0f} s on {logdir}  "
          f"(TB_PERFDIAG_MEMORY_MB={a.memory_mb:.0f}, load avg {C.load_avg()})")
    print(f"{'kind':20} {'requests':>8} {'p50 s':>7} {'p95 s':>7} {'p99 s':>7} {'max s':>7} "
          f"{'errors':>6} {'503':>5} {'unexp.':>6}")
    for r in rows:
        print(f"{r['kind']:20} {r['requests']:8d} {r['p50_s']:7.3f} {r['p95_s']:7.3f} "
              f"{r['p99_s']:7.3f} {r['max_s']:7.2f} {r['errors']:6d} {r['busy_503']:5d} "
              f"{r['unexpected_status']:6d}")
    print(f"{'all':20} {total:8d} {report['p50_s']:7.3f} {report['p95_s']:7.3f} "
          f"{report['p99_s']:7.3f}  ({report['throughput_rps']} req/s)")
    pl = report["plugins_listing"]
    print(f"/data/plugins_listing under this load: p50 {pl['p50_s']:.3f} s, p99 "
          f"{pl['p99_s']:.3f} s, max {pl['max_s']:.3f} s, {pl['failed']} failed of {pl['polls']}")
    an = report["anchor"]
    if an["requests"]:
        al = an["plugins_listing"]
        print(f"anchor ({a.clients} clients × {a.anchor_s:.0f} s on TensorBoard's own "
              f"/data/environment, {an['requests'] / a.anchor_s:.0f} req/s, p50 "
              f"{an['p50_s']:.3f} s, p95 {an['p95_s']:.3f} s): /data/plugins_listing p50 "
              f"{al['p50_s']:.3f} s, p99 {al['p99_s']:.3f} s, max {al['max_s']:.3f} s; "
              f"ratio of p99s {pl['p99_s'] / al['p99_s']:.2f}")
    print(f"TensorBoard alive: {alive}; memory idle {idle_mb:.0f} MB, peak {peak_mb:.0f} MB "
          f"(+{peak_mb - idle_mb:.0f} MB; plugin budget {a.memory_mb:.0f} MB)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0 if alive and errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
