#!/usr/bin/env python3
"""Pods: the per-host summary of a 256-host run on a Dask LocalCluster against one
process analysing the hosts one after the other, each in its own child process, as a
ratio; then, from measured numbers, how big a cluster analyses 1,000 hosts of 1 GB each
in ten minutes.

    python benchmarks/bench_pod.py [--hosts 256] [--events 100000] [--large FILE] [--json OUT]

The pod is written by testdata/generators/synthetic.py --pod into the temp dir on first
use (hosts 17 and 40 stall 150 ms in data loading every step) and reused.  No anchor
summarises a pod per host from the files (xprof's pod viewer needs TPU op profiles;
HTA's straggler view needs a loaded trace per rank in one process), so the anchor is
this project's own analysis, one process, one host after the other.

``--large FILE`` (an XSpace, e.g. the 1.45 GB one bench_large.py writes) is analysed as
one task on a one-worker cluster to measure what a worker spends on a large host and its
peak memory; the projection scales that by file size to 1 GB hosts.  Without it the
projection uses the 70 MB (2 M-event) XSpace bench_large makes, if present.
"""
from __future__ import annotations

import argparse
import datetime
import glob
import json
import math
import os
import platform
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402


# longer than a step's device time (~34 ms at 30 k events a host, ~110 ms at 100 k), so the
# stall shows as device idle time and not only as a slower host step
STALL_US = 150_000
TARGET_S = 600.0             # "analysed in ten minutes"
PROJECT_HOSTS, PROJECT_GB = 1000, 1.0
MEMORY_HEADROOM = 1.25       # a worker's limit over its peak (Dask's nanny stops it at 95 %)


def pod_logdir(hosts: int, events: int, log) -> tuple[str, dict]:
    out = os.path.join(C.TMP, f"pod{hosts}_{events // 1000}k_stall{STALL_US // 1000}ms")
    truth_path = os.path.join(out, "pod", "POD_TRUTH.json")
    if not (os.path.exists(truth_path)
            and os.path.getmtime(truth_path) >= os.path.getmtime(C.GENERATOR)):
        log(f"writing a {hosts}-host pod of ~{events} events a host …")
        subprocess.run([C.MAIN_PY, C.GENERATOR, "--pod", os.path.join(out, "pod"),
                        "--hosts", str(hosts), "--events", str(events),
                        "--stragglers", "17,40", "--stall-us", str(STALL_US)],
                       check=True, cwd=C.ROOT)
    with open(truth_path) as f:
        return out, json.load(f)


def projection(large: dict, pod: dict, serial: dict, n_files: int) -> dict:
    """1,000 hosts × 1 GB in ten minutes, from measured numbers: what one worker spends on
    a large host and its peak memory, scaled linearly by bytes to 1 GB (both grow with the
    file: bench_large), plus the per-task overhead measured on the pod (the cluster's time
    × workers beyond the one-process time, per host).  Each worker analyses
    floor(600 s / per-host time) hosts in ten minutes; the cluster needs enough workers
    for all of them."""
    gb = large["bytes"] / 1e9
    sec_per_host = large["seconds"] / gb * PROJECT_GB
    workers_used = max(pod.get("workers") or 1, 1)
    overhead = max(0.0, (pod["seconds"] * workers_used - serial["seconds"]) / n_files)
    per_host = sec_per_host + overhead
    hosts_per_worker = max(1, int(TARGET_S // per_host))
    workers = math.ceil(PROJECT_HOSTS / hosts_per_worker)
    # the worker's own footprint does not grow with the file: scale only what is above it
    base_mb = min(pod.get("worker_peak_mb") or 0.0, large["worker_peak_mb"])
    peak_mb = base_mb + (large["worker_peak_mb"] - base_mb) / gb * PROJECT_GB
    limit_gb = math.ceil(peak_mb * MEMORY_HEADROOM / 1e3 * 2) / 2
    return {"sec_per_1gb_host": sec_per_host, "task_overhead_s": overhead,
            "worker_peak_mb_1gb": peak_mb, "hosts_per_worker": hosts_per_worker,
            "workers": workers, "worker_memory_limit_gb": limit_gb,
            "cluster_memory_gb": workers * limit_gb,
            "read_mb_per_s_per_worker": PROJECT_GB * 1e3 / per_host,
            "read_gb_per_s": PROJECT_HOSTS * PROJECT_GB / TARGET_S,
            "measured_on": large.get("file"), "measured_gb": gb}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=256)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--large", metavar="FILE", help="a large XSpace for the per-host cost")
    ap.add_argument("--large-memory-mb", type=float, default=12000,
                    help="the one worker's memory limit for --large")
    ap.add_argument("--json", metavar="OUT")
    a = ap.parse_args(argv)

    def log(*x):
        print(*x, file=sys.stderr, flush=True)

    print(f"# bench_pod  {datetime.datetime.now().isoformat(timespec='seconds')}  "
          f"{platform.node()}  cpus={os.cpu_count()}  load avg {C.load_avg()}")
    logdir, truth = pod_logdir(a.hosts, a.events, log)
    files = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))
    size = sum(os.path.getsize(f) for f in files)
    print(f"# {len(files)} hosts, {size / 2**20:.0f} MiB in all; injected stragglers "
          f"{truth['stragglers']} ({truth['straggler_cause']})")
    rows, errors = {}, []
    cores = os.cpu_count() or 1
    variants = [
        ("one process", "pod-serial", logdir, {}),
        (f"local cluster ({cores} workers)", "pod-dask", logdir,
         {"TB_PERFDIAG_WORKERS": str(cores), "TB_PERFDIAG_WORKER_MEMORY_MB": "2048"}),
    ]
    large = a.large or os.path.join(C.TMP, "synthetic_2000k.xplane.pb")
    if os.path.exists(large):
        variants.append(("one large host, 1 worker", "host-dask", large,
                         {"TB_PERFDIAG_WORKERS": "1",
                          "TB_PERFDIAG_WORKER_MEMORY_MB": str(a.large_memory_mb)}))
    for label, what, path, env in variants:
        log(f"  {label} …")
        try:
            rows[what] = {"variant": label, **C.run_child(what, path, env=env, timeout=3600)}
        except C.ChildFailed as e:
            errors.append(f"{label}: {e}")
    serial, pod = rows.get("pod-serial"), rows.get("pod-dask")
    print(f"\n{'variant':30} {'seconds':>8} {'cpu s':>7} {'peak MB':>8} {'worker MB':>9} "
          f"{'workers':>7}  stragglers found")
    for r in (serial, pod):
        if r is None:
            continue
        print(f"{r['variant']:30} {r['seconds']:8.2f} {r['cpu_seconds']:7.2f} "
              f"{r['peak_mb']:8.0f} {(r.get('worker_peak_mb') or 0):9.0f} "
              f"{str(r.get('workers') or '—'):>7}  {r['stragglers']}")
        ok = sorted(r["stragglers"]) == truth["stragglers"] and r["failed"] == 0 and \
            r["straggler_causes"] == [truth["straggler_cause"]]
        if not ok:
            errors.append(f"{r['variant']}: found {r['stragglers']} {r['straggler_causes']} "
                          f"({r['failed']} failed), want {truth['stragglers']}")
    if serial and pod:
        print(f"\nlocal cluster: {serial['seconds'] / pod['seconds']:.2f}× one process on "
              f"{pod['workers']} workers ({cores} cores; cluster start-up included); "
              f"{serial['seconds'] / len(files) * 1e3:.0f} ms a host in one process; "
              f"the summary again from the filled result store: {pod['from_store_seconds']:.2f} s, "
              f"{pod['from_store_analysed']} hosts analysed")
    big = rows.get("host-dask")
    proj = None
    if big:
        big["file"] = os.path.basename(large)
        print(f"one large host ({big['bytes'] / 1e6:.0f} MB) on one worker: "
              f"{big['seconds']:.1f} s, worker peak {big['worker_peak_mb']:.0f} MB"
              + (f" — row status {big['row_status']}: {big['row_error']}"
                 if big["row_status"] != 200 else ""))
        if big["row_status"] != 200:
            errors.append(f"large host: {big['row_error']}")
        elif serial and pod:
            proj = projection(big, pod, serial, len(files))
            print(f"\nprojection, {PROJECT_HOSTS} hosts × {PROJECT_GB:.0f} GB in "
                  f"{TARGET_S / 60:.0f} min: a host takes {proj['sec_per_1gb_host']:.0f} s "
                  f"and {proj['worker_peak_mb_1gb'] / 1e3:.1f} GB on a worker (scaled from "
                  f"{proj['measured_gb']:.2f} GB) + {proj['task_overhead_s'] * 1e3:.0f} ms of "
                  f"task overhead → {proj['hosts_per_worker']} hosts a worker in "
                  f"{TARGET_S / 60:.0f} min → {proj['workers']} single-threaded workers with a "
                  f"{proj['worker_memory_limit_gb']:.1f} GB memory limit each "
                  f"({proj['cluster_memory_gb']:.0f} GB in all), each reading "
                  f"{proj['read_mb_per_s_per_worker']:.0f} MB/s "
                  f"({proj['read_gb_per_s']:.2f} GB/s from the bucket in all)")
    C.finish(errors, a.json, {"rows": rows, "errors": errors, "truth": truth,
                              "projection": proj})


if __name__ == "__main__":
    main()
