"""Listing a logdir with thousands of files: time of one full listing.

    python benchmarks/bench_discovery.py [N_RUNS]
Builds (in a temp dir) N_RUNS TensorBoard runs, each with event files, a profile run with
4 hosts plus the Profile plugin's cache files, and a PyTorch worker with 3 spans, then
times ``scan_logdir`` next to a bare ``os.walk`` of the same tree.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tb_perfdiag.discovery import scan_logdir  # noqa: E402


def build(root: str, n_runs: int) -> int:
    files = 0
    for r in range(n_runs):
        base = os.path.join(root, f"exp{r // 50}", f"run{r}")
        prof = os.path.join(base, "plugins", "profile", "2026_01_01_00_00_00")
        pt = os.path.join(base, "torch")
        os.makedirs(prof)
        os.makedirs(pt)
        names = [os.path.join(base, f"events.out.tfevents.{i}") for i in range(3)]
        names += [os.path.join(prof, f"host{h}.xplane.pb") for h in range(4)]
        names += [os.path.join(prof, n) for n in ("m.hlo_proto.pb", "host0.SSTABLE",
                                                   ".cached_tools.json", "cache_version.txt")]
        names += [os.path.join(pt, f"w0.{1700000000000 + s}.pt.trace.json.gz") for s in range(3)]
        for n in names:
            open(n, "wb").close()
        files += len(names)
    return files


def main(n_runs: int) -> None:
    with tempfile.TemporaryDirectory() as root:
        files = build(root, n_runs)
        t = time.perf_counter()
        walked = sum(len(f) for _, _, f in os.walk(root))
        walk_s = time.perf_counter() - t
        t = time.perf_counter()
        runs = scan_logdir(root)
        scan_s = time.perf_counter() - t
        print(f"{files} files ({walked} walked) in {n_runs} TensorBoard runs → {len(runs)} profile "
              f"runs; os.walk {walk_s * 1000:.0f} ms, scan_logdir {scan_s * 1000:.0f} ms "
              f"({scan_s / max(walk_s, 1e-9):.1f}× os.walk)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 500)
