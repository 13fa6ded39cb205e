#!/usr/bin/env python3
"""Every benchmark, one after the other, all tables printed:

    python benchmarks/run_all.py [--quick | --large]

1. bench_load.py      load into the trace model vs. bare decode (216k Kineto, 2 M XSpace)
2. bench_diagnose.py  full diagnosis vs. bare decode vs. HTA (216k, 2.16 M tiled Kineto,
                      2 M XSpace)
   bench_cli.py       `tb-perfdiag diagnose --json` vs the plain command, whole processes
                      (216k Kineto): time and output size
3. bench_large.py     (--large only) the large-profile table: 2 M XSpace, 2 M Kineto,
                      40 M XSpace, 20 M Kineto, with xprof and HTA beside the 2 M rows
                      (first run: ~25 min to generate the inputs; then ~6 min)

Needs the project venv (.venv, tb_perfdiag installed) and, for the HTA rows,
benchmarks/.venv-hta (see README.md); large inputs are generated into the temp dir
(tb_perfdiag_bench/) on the first run and reused.  --quick: 216k file only.
About 6–9 minutes on a 2-core machine (first run: +1 min to make the large files).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402


def main():
    quick = "--quick" in sys.argv[1:]
    large = "--large" in sys.argv[1:]
    t0 = time.time()
    steps = [
        ("bench_load", [os.path.join(C.HERE, "bench_load.py")]
         + ([C.DF] if quick else [])),
        ("bench_diagnose", [os.path.join(C.HERE, "bench_diagnose.py")]
         + (["--quick"] if quick else [])
         + ["--json", os.path.join(C.TMP, "bench_diagnose.json")]),
        ("bench_cli", [os.path.join(C.HERE, "bench_cli.py"), "--json",
                       os.path.join(C.TMP, "bench_cli.json")] + (["--repeat", "3"] if quick else [])),
    ]
    if large:
        steps.append(("bench_large", [os.path.join(C.HERE, "bench_large.py"), "--json",
                                      os.path.join(C.TMP, "bench_large.json")]))
    os.makedirs(C.TMP, exist_ok=True)
    rc = 0
    for name, cmd in steps:
        print(f"\n===== {name} =====", flush=True)
        t = time.time()
        r = subprocess.run([C.MAIN_PY] + cmd, cwd=C.ROOT)
        rc = rc or r.returncode
        print(f"({name}: {time.time() - t:.0f} s)", flush=True)
    print(f"\nrun_all: {time.time() - t0:.0f} s in all; rows as JSON in "
          f"{os.path.join(C.TMP, 'bench_diagnose.json')}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
