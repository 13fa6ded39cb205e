#!/usr/bin/env python3
"""`tb-perfdiag diagnose --json` beside the plain `tb-perfdiag diagnose`, as a pipeline runs
them: the whole command in its own process (start-up, imports, reading, analysis,
rendering, writing), stdout into a pipe that counts the bytes.

    python benchmarks/bench_cli.py [--repeat N] [--json OUT] [FILE]

FILE defaults to df_index_resolver.json.gz (216k events).  Rows: the text report, the
default `--json` (one page of gaps, as the route), `--json --pretty` and `--json
--all-gaps` (every gap: the output the issue started from).  Best wall time of N runs
(default 5) and the CPU time of that run; the parts inside one process (diagnose,
to_json of the page, the orjson write) are timed too, so a miss can be placed.
Targets: default `--json` ≤ 1.5× the plain command, its output < 1 MB.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

ROWS = [("diagnose (text)", []), ("diagnose --json", ["--json"]),
        ("diagnose --json --pretty", ["--json", "--pretty"]),
        ("diagnose --json --all-gaps", ["--json", "--all-gaps"])]


def one(args: list, path: str) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.Popen([C.MAIN_PY, "-m", "tb_perfdiag.cli", "diagnose", path, *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=C.ROOT)
    n = 0
    while True:
        chunk = p.stdout.read(1 << 20)
        if not chunk:
            break
        n += len(chunk)
    err = p.stderr.read()
    rc = p.wait()
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if rc != 0:
        raise C.ChildFailed(f"diagnose {' '.join(args)}: exit {rc}: {err.decode()[-400:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"seconds": wall, "cpu_seconds": cpu, "bytes": n}


PARTS = r"""
import sys, time, orjson
t0 = time.perf_counter()
import tb_perfdiag
from tb_perfdiag.render.json import diagnosis_json, json_bytes
t1 = time.perf_counter()
d = tb_perfdiag.diagnose(sys.argv[1]).diagnosis
t2 = time.perf_counter()
doc = diagnosis_json(d, 0, 200, None, paged=True)
t3 = time.perf_counter()
out = json_bytes(doc)                # the CLI's and the routes' encoder
t4 = time.perf_counter()
print(orjson.dumps({"imports": t1 - t0, "diagnose": t2 - t1, "to_json_page": t3 - t2,
                    "orjson": t4 - t3, "bytes": len(out)}).decode())
"""


def parts(path: str) -> dict:
    r = subprocess.run([C.MAIN_PY, "-c", PARTS, path], capture_output=True, text=True,
                       cwd=C.ROOT, timeout=600, check=True)
    return json.loads(r.stdout)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", nargs="?", default=C.DF)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", dest="json_out")
    a = ap.parse_args(argv)
    if not os.path.exists(a.path):
        print(f"{a.path} is absent (../shared/traces): nothing to measure")
        return 0
    rows = {}
    for _ in range(a.repeat):             # interleaved: a slow moment hits every row alike
        for label, args in ROWS:
            r = one(args, a.path)
            if label not in rows or r["seconds"] < rows[label]["seconds"]:
                rows[label] = r
    base = rows[ROWS[0][0]]
    print(f"file: {os.path.basename(a.path)}   best of {a.repeat}, each a whole CLI process")
    print(f"{'command':30} {'seconds':>8} {'cpu s':>7} {'output':>11} {'×plain':>7}")
    for label, _ in ROWS:
        r = rows[label]
        r["x_plain"] = r["seconds"] / base["seconds"]
        print(f"{label:30} {r['seconds']:8.3f} {r['cpu_seconds']:7.3f} "
              f"{r['bytes'] / 1e6:8.3f} MB {r['x_plain']:7.2f}")
    p = parts(a.path)
    print(f"inside one process: imports {p['imports']:.3f} s, diagnose {p['diagnose']:.3f} s, "
          f"to_json (200-gap page) {p['to_json_page']:.3f} s, orjson {p['orjson']:.3f} s")
    j = rows["diagnose --json"]
    ok_t, ok_b = j["x_plain"] <= 1.5, j["bytes"] < 1e6
    print(f"{'PASS' if ok_t else 'MISS'}: diagnose --json {j['x_plain']:.2f}× the plain command "
          f"(target ≤ 1.5×)")
    print(f"{'PASS' if ok_b else 'MISS'}: default --json output {j['bytes'] / 1e6:.3f} MB "
          f"(target < 1 MB)")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"file": a.path, "rows": rows, "parts": p}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
