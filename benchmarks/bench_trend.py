#!/usr/bin/env python3
"""A run of 200 captures (issue 62): its first trend against the sum of the 200 single
diagnoses, both on one core, then a second trend from the same server, and the memory.

    python benchmarks/bench_trend.py [--captures 200] [--steps 40] [--json OUT]

The run is written by testdata/generators/trend_runs.py (a PyTorch job on one GPU, one
trace per ``repeat`` cycle, ~200 KB each like the demo's captures, a regression in two
captures and a 0-byte one) into the temp dir on first use.  Each measurement runs in its
own child process pinned to one core: (a) every file read and analysed one after the
other (``file_analysis.read_and_analyse``: the single diagnoses), (b) a fresh server
(``DiagnosisService`` with an empty result store) asked for the run's trend twice.
(c) a fresh server diagnosing each capture as the tab opens it (its result stored), one
after the other.  Targets: (b)'s first call ≤ 1.2× (a) — and of (c) —, its second ≤ 1 s,
peak within the memory budget.  Wall and CPU times both: this 2-core VM is shared.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402


def run_dir(n: int, steps: int, log) -> str:
    out = os.path.join(C.TMP, f"trend{n}_{steps}steps")
    gen = os.path.join(C.ROOT, "testdata", "generators", "trend_runs.py")
    done = os.path.join(out, "DONE")
    if not (os.path.exists(done) and os.path.getmtime(done) >= os.path.getmtime(gen)):
        log(f"writing a run of {n} captures of {steps} steps …")
        sys.path.insert(0, os.path.dirname(gen))
        import trend_runs
        trend_runs.write_torch(__import__("pathlib").Path(out) / "run", n, steps)
        open(done, "w").close()
    return os.path.join(out, "run")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child(what: str, path: str) -> dict:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    if what == "singles":
        from tb_perfdiag.errors import TraceError
        from tb_perfdiag.file_analysis import read_and_analyse
        t0, c0 = time.perf_counter(), _cpu()
        n = 0
        for f in sorted(glob.glob(os.path.join(path, "*.pt.trace.json"))):
            try:
                read_and_analyse(f)
                n += 1
            except TraceError:
                pass
        out = {"seconds": time.perf_counter() - t0, "cpu_s": _cpu() - c0, "analysed": n}
    elif what == "tab":
        # each capture diagnosed as the tab opens it: the server's path, the result stored
        from tb_perfdiag.analysis import Options
        from tb_perfdiag.cache import DiagnosisCache
        from tb_perfdiag.discovery import Catalog
        from tb_perfdiag.errors import TraceError
        from tb_perfdiag.service import DiagnosisService
        with tempfile.TemporaryDirectory() as store:
            svc = DiagnosisService(Catalog(path), DiagnosisCache(disk_dir=store))
            srcs = next(iter(svc.catalog.runs().values())).sources
            t0, c0 = time.perf_counter(), _cpu()
            for src in srcs:
                try:
                    svc._diagnose_source(src, Options())
                except TraceError:
                    pass
            out = {"seconds": time.perf_counter() - t0, "cpu_s": _cpu() - c0,
                   "analysed": svc.cache.computations}
    else:
        from tb_perfdiag.analysis import Options
        from tb_perfdiag.cache import DiagnosisCache
        from tb_perfdiag.discovery import Catalog
        from tb_perfdiag.render.trend import trend_json
        from tb_perfdiag.service import DiagnosisService
        with tempfile.TemporaryDirectory() as store:
            svc = DiagnosisService(Catalog(path), DiagnosisCache(disk_dir=store))
            svc.catalog.runs()
            name = next(iter(svc.catalog.runs()))
            t0, c0 = time.perf_counter(), _cpu()
            doc = trend_json(svc.trend(name, Options()))
            first, first_cpu = time.perf_counter() - t0, _cpu() - c0
            svc.cache.flush()
            stored, stored_cpu = time.perf_counter() - t0, _cpu() - c0
            t0 = time.perf_counter()
            trend_json(svc.trend(name, Options()))
            second = time.perf_counter() - t0
            out = {"first_s": first, "first_cpu_s": first_cpu, "stored_s": stored,
                   "stored_cpu_s": stored_cpu, "second_s": second, "captures": len(doc["captures"]),
                   "changes": [c["summary"] for c in doc["changes"]],
                   "flagged": sum(not c["trust"]["ok"] for c in doc["captures"]),
                   "analyses": svc.cache.computations}
    out["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--captures", type=int, default=200)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--json")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print(json.dumps(child(*a.child)))
        return 0
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    path = run_dir(a.captures, a.steps, log)
    size = sum(os.path.getsize(f) for f in glob.glob(os.path.join(path, "*")))
    env = dict(os.environ, PYTHONPATH=C.ROOT)
    res = {}
    for what in ("singles", "tab", "trend"):
        r = subprocess.run([C.MAIN_PY, __file__, "--child", what, path], capture_output=True,
                           text=True, env=env, timeout=1800)
        if r.returncode:
            raise SystemExit(r.stderr)
        res[what] = json.loads(r.stdout.strip().splitlines()[-1])
    s, t, tab = res["singles"], res["trend"], res["tab"]
    print(f"run: {a.captures} captures, {size / 1e6:.1f} MB ({a.steps} steps each)")
    print(f"single diagnoses, one after the other, one core: {s['seconds']:.2f} s "
          f"({s['cpu_s']:.2f} s of CPU; {s['analysed']} files), peak {s['peak_mb']:.0f} MB")
    print(f"first trend, fresh server and store, one core: {t['first_s']:.2f} s "
          f"(×{t['first_s'] / s['seconds']:.2f} the singles; {t['analyses']} analyses; every "
          f"result stored at {t['stored_s']:.2f} s, ×{t['stored_s'] / s['seconds']:.2f}; CPU "
          f"{t['first_cpu_s']:.2f} s, ×{t['first_cpu_s'] / s['cpu_s']:.2f}, stored "
          f"{t['stored_cpu_s']:.2f} s, ×{t['stored_cpu_s'] / s['cpu_s']:.2f}), "
          f"second {t['second_s'] * 1000:.0f} ms, peak {t['peak_mb']:.0f} MB")
    print(f"the same captures diagnosed one by one as the tab does (server path, result "
          f"stored): {tab['seconds']:.2f} s ({tab['cpu_s']:.2f} s of CPU); the first trend "
          f"×{t['first_s'] / tab['seconds']:.2f} of it (CPU ×{t['first_cpu_s'] / tab['cpu_s']:.2f})")
    print(f"flagged {t['flagged']}; changes: " + "; ".join(t["changes"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"size_bytes": size, **res}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
