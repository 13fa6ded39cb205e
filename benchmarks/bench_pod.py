#!/usr/bin/env python3
"""Pods: the per-host summary of a 64-host run, host by host in one process versus in
worker processes within the memory budget, each variant in its own child process.

    python benchmarks/bench_pod.py [--hosts 64] [--events 30000] [--json OUT]

The pod is written by testdata/generators/synthetic.py --pod into the temp dir on first
use (hosts 17 and 40 stall 60 ms in data loading every step) and reused.  No anchor
summarises a pod per host from the files (xprof's pod viewer needs TPU op profiles;
HTA's straggler view needs a loaded trace per rank in one process), so the ratios are
to one host's diagnosis × the number of hosts.
"""
from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import platform
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402


# longer than a step's device time (~34 ms at 30 k events a host), so the stall shows as
# device idle time and not only as a slower host step
STALL_US = 60_000


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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--events", type=int, default=30_000)
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
    rows, errors = [], []
    variants = [
        ("one host", "diagnose", files[0], {}),
        ("pod, one at a time", "pod", logdir,
         {"TB_PERFDIAG_POD_PROCESSES": "0", "TB_PERFDIAG_WORKERS": "1"}),
        ("pod, worker processes", "pod", logdir, {}),
    ]
    for label, what, path, env in variants:
        log(f"  {label} …")
        try:
            r = C.run_child(what, path, env=env, timeout=1800)
        except C.ChildFailed as e:
            errors.append(f"{label}: {e}")
            continue
        rows.append({"variant": label, **{k: r.get(k) for k in (
            "seconds", "cpu_seconds", "peak_mb", "worker_peak_mb", "workers", "processes",
            "failed", "stragglers", "straggler_causes")}})
    one = next((r for r in rows if r["variant"] == "one host"), None)
    print(f"\n{'variant':24} {'seconds':>8} {'cpu s':>7} {'peak MB':>8} {'worker MB':>9} "
          f"{'workers':>7} {'×(1 host×N)':>11}  stragglers found")
    for r in rows:
        ratio = r["seconds"] / (one["seconds"] * len(files)) if one and r["variant"] != "one host" \
            else None
        print(f"{r['variant']:24} {r['seconds']:8.2f} {r['cpu_seconds']:7.2f} {r['peak_mb']:8.0f} "
              f"{(r['worker_peak_mb'] or 0):9.0f} {str(r['workers'] or '—'):>7} "
              f"{(f'{ratio:.2f}' if ratio else '—'):>11}  "
              f"{r['stragglers'] if r['stragglers'] is not None else ''}")
        if r["variant"].startswith("pod"):
            ok = r["stragglers"] == truth["stragglers"] and r["failed"] == 0 and \
                r["straggler_causes"] == [truth["straggler_cause"]]
            if not ok:
                errors.append(f"{r['variant']}: found {r['stragglers']} "
                              f"{r['straggler_causes']}, want {truth['stragglers']}")
    seq = next((r for r in rows if r["variant"] == "pod, one at a time"), None)
    par = next((r for r in rows if r["variant"] == "pod, worker processes"), None)
    if seq and par:
        print(f"\nworker processes: {seq['seconds'] / par['seconds']:.2f}× faster than one at "
              f"a time on {os.cpu_count()} cores; TensorBoard's process peak "
              f"{par['peak_mb']:.0f} MB, largest worker {par['worker_peak_mb']:.0f} MB")
    C.finish(errors, a.json, {"rows": rows, "errors": errors, "truth": truth})


if __name__ == "__main__":
    main()
