#!/usr/bin/env python3
"""A gzip bomb asked of a running TensorBoard: its process's peak memory over its idle
size, and the time to the 413.

    python benchmarks/bench_bomb.py [--out-mb 6144] [--memory-mb 2048]
                                    [--code DIR ...] [--repeat N] [--json OUT]

The bomb (``tests/conftest.py::gzip_bomb``: ``--out-mb`` MiB of zeros, about 1/1000 of
that on disk; 6 MB for the default 6 GiB) is the one file of a logdir under the temp
dir.  Per run: TensorBoard starts (``TB_PERFDIAG_MEMORY_MB``, default file budget),
the run list is asked once (idle = the process's RSS peak, VmHWM, then), then
``/diagnosis`` of the bomb; reported: the status, seconds to it, and VmHWM after it
less idle.  ``--code DIR`` runs that checkout's tb_perfdiag (put first on PYTHONPATH)
in the same run, side by side: ``--code /work/main`` for the code before a change.
Target (issue 24): peak ≤ idle + 300 MB, 413 in ≤ 5 s.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, HERE)
import _common as C  # noqa: E402
from conftest import TensorBoard, gzip_bomb  # noqa: E402

API = "/data/plugin/perfdiag"


def hwm_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def one(logdir: str, code: str | None, memory_mb: int) -> dict:
    env = {"TB_PERFDIAG_MEMORY_MB": str(memory_mb), "TB_PERFDIAG_CACHE_DIR": ""}
    if code:
        env["PYTHONPATH"] = code
    tb = TensorBoard(logdir, extra_env=env)
    try:
        status, _, runs = tb.get(f"{API}/runs")
        idle = hwm_mb(tb.proc.pid)
        t = time.perf_counter()
        status, _, body = tb.get(f"{API}/diagnosis?run=bomb&host=w0", timeout=600)
        seconds = time.perf_counter() - t
        peak = hwm_mb(tb.proc.pid)
    finally:
        tb.stop()
    return {"code": code or ROOT, "status": status, "seconds": seconds, "idle_mb": idle,
            "peak_mb": peak, "over_idle_mb": peak - idle,
            "error": body.get("error", "")[:80] if isinstance(body, dict) else ""}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-mb", type=int, default=6144)
    ap.add_argument("--memory-mb", type=int, default=2048)
    ap.add_argument("--code", action="append", default=[])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", metavar="OUT")
    a = ap.parse_args(argv)
    logdir = os.path.join(C.TMP, f"bomb_{a.out_mb}")
    path = os.path.join(logdir, "bomb", "w0.1.pt.trace.json.gz")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        gzip_bomb(path + ".part", a.out_mb)
        os.replace(path + ".part", path)
    print(f"# bench_bomb  {datetime.datetime.now().isoformat(timespec='seconds')}  "
          f"load avg {C.load_avg()}")
    print(f"# bomb: {os.path.getsize(path) / 1e6:.1f} MB on disk, {a.out_mb} MiB of zeros out; "
          f"TB_PERFDIAG_MEMORY_MB={a.memory_mb}")
    rows = []
    for _ in range(a.repeat):           # interleaved: each code once per round
        for code in [None, *a.code]:
            rows.append(one(logdir, code, a.memory_mb))
    print(f"{'code':32} {'status':>6} {'seconds':>8} {'idle MB':>8} {'peak MB':>8} "
          f"{'over idle':>9}")
    for r in rows:
        print(f"{r['code'][-32:]:32} {r['status']:6d} {r['seconds']:8.2f} {r['idle_mb']:8.0f} "
              f"{r['peak_mb']:8.0f} {r['over_idle_mb']:9.0f}")
    ours = [r for r in rows if r["code"] == ROOT]
    over = statistics.median(r["over_idle_mb"] for r in ours)
    secs = statistics.median(r["seconds"] for r in ours)
    ok = all(r["status"] == 413 for r in ours)
    print(f"\nTargets: 413 {'PASS' if ok else 'MISS'}; peak ≤ idle + 300 MB "
          f"{'PASS' if over <= 300 else 'MISS'} (+{over:.0f} MB); ≤ 5 s "
          f"{'PASS' if secs <= 5 else 'MISS'} ({secs:.2f} s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
