#!/usr/bin/env python3
"""What matching collectives across a pod costs (issue 47's target: ≤ 10 % on top of the
pod's time, each host's table a few KB in the result store, no Python per event).

    python benchmarks/bench_collectives.py [--hosts 256] [--instances 100,1000] [--repeat 3] [--json OUT]

Two parts, each side by side with its anchor in the same run:

* **per host**: ``tb_perfdiag.diagnose`` of each real JAX pod capture in
  ``testdata/captures/jax_pod`` (4 hosts × 6 scenarios, a gloo all-reduce a step) with its
  collective table, against the same analysis with the table left out (``collective_ops``
  finding none), alternated, the median of ``--repeat``;
* **per pod**: the pod summary of ``--hosts`` rows whose tables hold ``--instances``
  all-reduces each (one host arriving 30 ms late), through their stored JSON as the
  result store keeps them, against the same rows without tables (the summary as it was
  before the join), and the row's size.  The pod's own time for the ratio is the per-host
  analysis above times the hosts (one process, one host after the other, as
  bench_pod.py's anchor).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as BC  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import tb_perfdiag  # noqa: E402
from tb_perfdiag.analysis import causes as C  # noqa: E402
from tb_perfdiag.analysis.collectives import instances as coll  # noqa: E402
from tb_perfdiag.analysis import diagnosis as D  # noqa: E402
from tb_perfdiag.analysis.result import CollectiveTable  # noqa: E402
from tb_perfdiag.render import pod  # noqa: E402

MS = 1_000_000


def per_host(repeat: int) -> dict:
    files = sorted(glob.glob(os.path.join(ROOT, "testdata", "captures", "jax_pod", "*",
                                          "plugins", "profile", "*", "host*.xplane.pb")))
    traces = [tb_perfdiag.load(f) for f in files]
    real = D.collective_ops
    with_t, without_t = [], []
    for _ in range(repeat):
        for on in (True, False):
            D.collective_ops = real if on else (lambda trace, ops: ops[:0])
            t0 = time.perf_counter()
            n = 0
            for t in traces:
                n += len(tb_perfdiag.diagnose(t).diagnosis.collectives or ())
            (with_t if on else without_t).append(time.perf_counter() - t0)
            if on:
                instances = n
    D.collective_ops = real
    w, wo = statistics.median(with_t), statistics.median(without_t)
    return {"hosts": len(traces), "instances": instances, "with_s": w, "without_s": wo,
            "per_host_s": w / max(len(traces), 1), "ratio": w / wo}


def rows(hosts: int, n: int, tables: bool) -> list:
    rng = np.random.default_rng(0)
    t0 = np.arange(n, dtype=np.int64) * 40 * MS + 5 * MS
    out = []
    for h in range(hosts):
        late = 30 * MS if h == 17 else 0
        arr = (t0 + late + rng.integers(0, 200_000, n)) * 1000
        end = (t0 + 32 * MS + rng.integers(0, 50_000, n)) * 1000
        idle = np.zeros((n, len(C.ALL)), np.int64)
        idle[:, C.ALL.index(C.DATA_LOADING)] = late * 1000
        z = np.zeros(n, np.int32)
        ct = CollectiveTable(z, z, np.arange(n, dtype=np.int32), arr, end,
                             np.arange(n, dtype=np.int32), np.r_[0, end[:-1]], idle,
                             np.where(idle.any(axis=1), 0, -1).astype(np.int32),
                             ["all-reduce.1"], ["all-reduce"], ["load_batch"], f"host{h}")
        r = {"host": f"host{h}", "span": "", "status": 200, "duty_cycle": 0.9,
             "typical_step_ns": 40 * MS, "steps": n, "window_ns": n * 40 * MS,
             "step_idle_ns": {C.DATA_LOADING: late}, "cause_shares": {}, "top_cause": None}
        if tables:
            r["collectives_table"] = coll.to_row(ct, 1_795_889_392_053_559_853_000, ["CPU"])
            r["step_ids"] = list(range(n))
        out.append(json.dumps(r))
    return out


def per_pod(hosts: int, n: int, repeat: int) -> dict:
    stored = {True: rows(hosts, n, True), False: rows(hosts, n, False)}
    times = {True: [], False: []}
    flagged = None
    for _ in range(repeat):
        for on in (True, False):
            t0 = time.perf_counter()
            s = pod.pod_summary([json.loads(x) for x in stored[on]])
            times[on].append(time.perf_counter() - t0)
            if on:
                flagged = [x["host"] for x in s["stragglers"]]
    size = statistics.median(len(x) - len(y) for x, y in zip(stored[True], stored[False]))
    return {"hosts": hosts, "instances": n, "with_s": statistics.median(times[True]),
            "without_s": statistics.median(times[False]), "table_bytes": int(size),
            "stragglers": flagged}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=256)
    ap.add_argument("--instances", default="100,1000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", metavar="OUT")
    a = ap.parse_args()
    print(f"reader: {BC.native_status()}; load: {BC.load_avg()}")
    h = per_host(a.repeat)
    print(f"per host (real JAX pod captures, {h['hosts']} hosts, {h['instances']} instances): "
          f"{h['with_s']:.2f} s with the collective table, {h['without_s']:.2f} s without "
          f"({h['ratio']:.3f}×)")
    errors, pods = [], []
    for n in (int(x) for x in a.instances.split(",")):
        p = per_pod(a.hosts, n, a.repeat)
        pod_s = h["per_host_s"] * a.hosts
        p["pod_analysis_s"] = pod_s
        p["share_of_pod"] = (p["with_s"] - p["without_s"]) / pod_s
        pods.append(p)
        print(f"pod of {a.hosts} hosts × {n} instances: summary {p['with_s']:.2f} s with the "
              f"join, {p['without_s']:.3f} s without; +{p['with_s'] - p['without_s']:.2f} s = "
              f"{100 * p['share_of_pod']:.1f} % of the pod's {pod_s:.0f} s of analysis; "
              f"table {p['table_bytes'] / 1024:.1f} KB a row; stragglers {p['stragglers']}")
        if p["stragglers"] != ["host17"]:
            errors.append(f"{n} instances: stragglers {p['stragglers']}, expected host17")
    BC.finish(errors, a.json, {"per_host": h, "per_pod": pods})


if __name__ == "__main__":
    main()
