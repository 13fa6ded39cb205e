#!/usr/bin/env python3
"""Gzip bombs asked of a running TensorBoard: the time to the refusal (413) and the
process's peak memory over its idle size, for each bomb, beside the floor of the same run.

    python benchmarks/bench_bomb.py [--bombs zeros,spaces] [--out-mb 6144]
                                    [--memory-mb 2048] [--max-file-mb MB]
                                    [--code DIR ...] [--repeat N] [--json OUT]

The bombs (``tests/conftest.py::gzip_bomb``, written to the temp dir on first use, about
1/1000 of ``--out-mb`` MiB on disk: 6 MB for the default 6 GiB), each the one file of a
logdir of its own:

* ``zeros``: MiB of zeros, refused as not JSON from the first byte;
* ``spaces``: ``{"traceEvents": [`` then MiB of spaces: JSON as far as it goes, so only
  the budget in bytes out (``TB_PERFDIAG_MAX_FILE_MB``, default 4096 MB) stops it, once
  that much is decompressed *and* scanned.

Per run: TensorBoard starts (``TB_PERFDIAG_MEMORY_MB``, the file budget given or the
default), the run list is asked once (idle = the process's RSS peak, VmHWM, then), then
``/diagnosis`` of the bomb; reported: the status, seconds to it, and VmHWM after it less
idle.  The anchor, per bomb: ``gunzip to budget``, a child process that only
decompresses the file (ISA-L, 1 MB in, 4 MB out a call, each dropped) until the budget
is passed: what any refusal in bytes out must at least cost.  ``--code DIR`` runs that
checkout's tb_perfdiag (put first on PYTHONPATH) in the same run, side by side, runs
interleaved: ``--code /work/main`` for the code before a change.
Target (issues 24, 48): every bomb 413, peak ≤ idle + 300 MB, in ≤ 5 s.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
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


# head, byte repeated
BOMBS = {"zeros": (b"", b"\0"), "spaces": (b'{"traceEvents": [', b" ")}

# the floor: decompression alone, to the budget (what storage.OpenFile.chunks does,
# without the scan); prints the seconds and the bytes out
GUNZIP = r"""
import sys, time, zlib
try:
    from isal import isal_zlib as z
except ImportError:
    z = zlib
path, cap = sys.argv[1], int(sys.argv[2])
t = time.perf_counter()
d = z.decompressobj(16 + zlib.MAX_WBITS)
out = 0
with open(path, "rb") as f:
    while out <= cap and not d.eof:
        b = f.read(1 << 20)
        if not b:
            break
        while out <= cap:
            o = d.decompress(b, 4 << 20)
            out += len(o)
            b = d.unconsumed_tail
            if d.eof or (not b and len(o) < 4 << 20):
                break
print(time.perf_counter() - t, out)
"""


def bomb_file(kind: str, out_mb: int) -> tuple:
    """(logdir, path) of the ``kind`` bomb, written on first use."""
    logdir = os.path.join(C.TMP, f"bomb_{kind}_{out_mb}")
    path = os.path.join(logdir, "bomb", "w0.1.pt.trace.json.gz")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        head, fill = BOMBS[kind]
        gzip_bomb(path + ".part", out_mb, head, fill)
        os.replace(path + ".part", path)
    return logdir, path


def gunzip_floor(path: str, cap_bytes: int) -> dict:
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", GUNZIP, path, str(cap_bytes)],
                         capture_output=True, text=True, check=True).stdout.split()
    wall = time.perf_counter() - t
    return {"code": "gunzip to budget", "status": 0, "seconds": float(out[0]),
            "wall_s": wall, "bytes_out": int(out[1]), "idle_mb": float("nan"),
            "peak_mb": float("nan"), "over_idle_mb": float("nan"), "error": ""}


def native_of(pid: int) -> str:
    """The checkout whose built extension the process mapped: which code it runs."""
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            if "_native" in line and line.rstrip().endswith(".so"):
                return os.path.dirname(os.path.dirname(line.split()[-1]))
    return "?"


def one(logdir: str, code: str | None, memory_mb: int, max_file_mb: float | None) -> dict:
    # the checkout first on the path, and a working folder that is none: ``python -m``
    # puts the working folder before PYTHONPATH, so run from a checkout every --code
    # would have run that checkout's code
    env = {"TB_PERFDIAG_MEMORY_MB": str(memory_mb), "TB_PERFDIAG_CACHE_DIR": "",
           "PYTHONPATH": code or ROOT}
    if max_file_mb:
        env["TB_PERFDIAG_MAX_FILE_MB"] = str(max_file_mb)
    here = os.getcwd()
    os.chdir(os.path.dirname(logdir))
    try:
        tb = TensorBoard(logdir, extra_env=env)
    finally:
        os.chdir(here)
    try:
        status, _, runs = tb.get(f"{API}/runs")
        idle = hwm_mb(tb.proc.pid)
        ran = native_of(tb.proc.pid)
        if os.path.realpath(ran) != os.path.realpath(code or ROOT):
            raise RuntimeError(f"TensorBoard ran the code of {ran}, not {code or ROOT}")
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
    ap.add_argument("--bombs", default="zeros,spaces",
                    help="comma-separated, of: " + ", ".join(BOMBS))
    ap.add_argument("--out-mb", type=int, default=6144)
    ap.add_argument("--memory-mb", type=int, default=2048)
    ap.add_argument("--max-file-mb", type=float, default=None,
                    help="TB_PERFDIAG_MAX_FILE_MB for the server (default: its own, 4096)")
    ap.add_argument("--code", action="append", default=[])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", metavar="OUT")
    a = ap.parse_args(argv)
    kinds = [k for k in a.bombs.split(",") if k]
    unknown = set(kinds) - set(BOMBS)
    if unknown:
        ap.error(f"unknown bomb(s): {', '.join(sorted(unknown))}")
    cap_mb = a.max_file_mb or float(os.environ.get("TB_PERFDIAG_MAX_FILE_MB", 4096))
    files = {k: bomb_file(k, a.out_mb) for k in kinds}
    print(f"# bench_bomb  {datetime.datetime.now().isoformat(timespec='seconds')}  "
          f"load avg {C.load_avg()}")
    print(f"# {a.out_mb} MiB out of each bomb; TB_PERFDIAG_MEMORY_MB={a.memory_mb}, "
          f"file budget {cap_mb:.0f} MB")
    rows = []
    for _ in range(a.repeat):           # interleaved: each bomb and code once per round
        for kind, (logdir, path) in files.items():
            for code in [None, *a.code]:
                rows.append({"bomb": kind, **one(logdir, code, a.memory_mb, a.max_file_mb)})
            rows.append({"bomb": kind, **gunzip_floor(path, int(cap_mb * 1e6))})
    print(f"{'bomb':7} {'MB on disk':>10} {'code':32} {'status':>6} {'seconds':>8} "
          f"{'idle MB':>8} {'peak MB':>8} {'over idle':>9}  error")
    for r in rows:
        size = os.path.getsize(files[r["bomb"]][1]) / 1e6
        print(f"{r['bomb']:7} {size:10.1f} {r['code'][-32:]:32} {r['status']:6d} "
              f"{r['seconds']:8.2f} {r['idle_mb']:8.0f} {r['peak_mb']:8.0f} "
              f"{r['over_idle_mb']:9.0f}  {r['error'][:60]}")
    print()
    for kind in kinds:
        ours = [r for r in rows if r["bomb"] == kind and r["code"] == ROOT]
        floor = statistics.median(r["seconds"] for r in rows
                                  if r["bomb"] == kind and r["code"] == "gunzip to budget")
        over = statistics.median(r["over_idle_mb"] for r in ours)
        secs = statistics.median(r["seconds"] for r in ours)
        ok = all(r["status"] == 413 for r in ours)
        print(f"{kind}: 413 {'PASS' if ok else 'MISS'}; peak ≤ idle + 300 MB "
              f"{'PASS' if over <= 300 else 'MISS'} (+{over:.0f} MB); ≤ 5 s "
              f"{'PASS' if secs <= 5 else 'MISS'} ({secs:.2f} s; "
              f"{secs / floor:.2f}× the gunzip to the budget, {floor:.2f} s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
