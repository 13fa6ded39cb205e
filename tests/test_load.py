"""Loopback load test against a real TensorBoard: twenty clients opening the same large
run cause one analysis; other runs stay responsive meanwhile; no errors; memory bounded.
Bounded in count and time; prints its report."""
from __future__ import annotations

import os
import shutil
import threading
import time


from conftest import TESTDATA, TensorBoard, shared_path


def _peak_rss_mb(pid: int) -> float:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def test_twenty_clients_one_analysis(tmp_path, artifacts_dir):
    ld = tmp_path / "ld"
    (ld / "big").mkdir(parents=True)
    big = shared_path("public", "HolisticTraceAnalysis", "tests", "data", "df_index_resolver",
                      "df_index_resolver.json.gz")
    shutil.copy(big, ld / "big" / "rank1.1669783687384.pt.trace.json.gz")
    shutil.copytree(os.path.join(TESTDATA, "captures", "jax_cpu"), ld / "small")
    tb = TensorBoard(ld, extra_env={"TB_PERFDIAG_CACHE_DIR": str(tmp_path / "cache")})
    try:
        _, _, runs = tb.get("/data/plugin/perfdiag/runs")
        small = [r for r in runs["runs"] if r["run"].startswith("small")][0]
        big_q = "/data/plugin/perfdiag/diagnosis?run=big&host=rank1&gaps_limit=50"
        small_q = (f"/data/plugin/perfdiag/diagnosis?run={small['run']}"
                   f"&host={small['hosts'][0]['name']}&gaps_limit=5")
        results, errors, small_latency = [], [], []
        start = time.time()

        def client():
            try:
                status, _, body = tb.get(big_q, timeout=180)
                results.append((status, body.get("gaps_total")))
            except Exception as e:  # noqa: BLE001 - the report counts every failure
                errors.append(repr(e))

        threads = [threading.Thread(target=client) for _ in range(20)]
        for t in threads:
            t.start()
        time.sleep(0.2)
        # while the big run is being analysed, a small run answers on its own
        t0 = time.time()
        status, _, _ = tb.get(small_q, timeout=120)
        small_latency.append(time.time() - t0)
        assert status == 200
        for t in threads:
            t.join(200)
        wall = time.time() - start
        _, _, st = tb.get("/data/plugin/perfdiag/status")
        peak = _peak_rss_mb(tb.proc.pid)
        report = (f"load test: {len(results)} big-run requests served, {len(errors)} errors, "
                  f"{st['analyses']} analyses for 2 runs (duplicates: {st['analyses'] - 2}), "
                  f"small run answered in {small_latency[0]:.2f} s during the big analysis, "
                  f"wall {wall:.1f} s, TensorBoard peak RSS {peak:.0f} MB")
        print(report)
        with open(os.path.join(artifacts_dir, "load-test.txt"), "w") as f:
            f.write(report + "\n")
        assert not errors and len(results) == 20
        assert all(s == 200 for s, _ in results) and len({g for _, g in results}) == 1
        assert st["analyses"] == 2                      # one per run, not one per client
        assert small_latency[0] < wall                  # not queued behind the big analysis
        assert st["cache_bytes"] <= st["cache_limit_bytes"]
    finally:
        tb.stop()
