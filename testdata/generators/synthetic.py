#!/usr/bin/env python3
"""Synthetic profiler traces with known, injected device idle gaps and their causes.

    python testdata/generators/synthetic.py
        (Re)writes every small scenario under testdata/synthetic/logdir/ and the ground
        truth in testdata/synthetic/MANIFEST.json.  Fixed seeds: byte-identical on rerun.

    python testdata/generators/synthetic.py --pod OUT_DIR --hosts 64 --events N \
            --stragglers 17,40 --stall-us 20000
        Writes a pod run: one XSpace per host (the --large XSpace job, own seed per host)
        in one capture folder; the straggler hosts spend --stall-us more in data loading
        every step.  OUT_DIR/POD_TRUTH.json names them.

    python testdata/generators/synthetic.py --large OUT --events N --format kineto|xspace
        Writes one large, realistic file of about N events for benchmarks, generated and
        written step by step (only the current step's events are ever held; XSpace lines
        are serialized in chunks): Kineto = a 24-layer transformer with gradient
        accumulation, DDP all-reduce on a NCCL stream, pinned H2D copies on a side stream,
        main/autograd/pin-memory threads, a stalled input pipeline every 10th batch;
        XSpace = PyTorch/XLA on a GPU (python / tf_pytorchxla / pt_autograd_0 threads,
        cuLaunchKernel ↔ kernel correlation ids, 2 kernel streams + a memcpy stream, an
        Hlo Proto with op_name scopes).  2 M events: Kineto ~25 s, ~410 MB, ~75 MB RSS;
        XSpace ~55 s, ~75 MB, ~200 MB RSS.

Each scenario is built by simulating a host (threads with nested ops that launch device
work) and a device (FIFO streams / XLA op lines).  Kernels queue behind each other with
sub-5 µs gaps, so the device is busy except where a scenario *injects* a gap; every
device op that ends an injected gap carries a marker with the cause and the host op the
device waited for.  After generating, the ground truth (busy set, gaps, step windows,
duty cycles, annotation device time) is computed independently with plain interval
arithmetic over the events written, and every gap found must be an injected one (and
vice versa) or the generator fails.  The definitions are those of GUIDE.md §4 and are
written into the manifest.

The jobs, one module each next to this one: sim.py (the simulator: timeline, host
threads, device streams), truth.py (ground truth and its definitions),
scenarios_kineto.py and scenarios_xla.py (the small scenarios; the GPU ops carry the
shapes of a record_shapes=True profile, the TPU ops XLA's cost stats), hlo_shapes.py (the
Hlo Proto of the PyTorch/XLA GPU program, with shapes), export.py (a timeline
as a file, through the writers of tb_perfdiag.testing), manifest.py (every small
scenario and MANIFEST.json), large.py (--large) and pod.py (--pod).  Only the standard
library, protobuf and tb_perfdiag are needed.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from large import write_large  # noqa: E402
from manifest import build_small  # noqa: E402
from pod import write_pod  # noqa: E402

__all__ = ["main", "build_small", "write_large", "write_pod"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--large", metavar="OUT_PATH", help="write one large file for benchmarks")
    ap.add_argument("--events", type=int, default=2_000_000,
                    help="about how many events: Kineto counts every traceEvents entry "
                         "(flows included), XSpace every XEvent")
    ap.add_argument("--format", choices=("kineto", "xspace"), default="kineto")
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--pod", metavar="OUT_DIR",
                    help="write a pod run: --hosts XSpace files of about --events events each")
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--stragglers", default=None,
                    help="comma-separated host indices (0 … hosts−1) that stall in data loading "
                         "every step (default: one, about a quarter of the way in: 17 of 64)")
    ap.add_argument("--stall-us", type=float, default=20_000)
    args = ap.parse_args(argv)
    if args.pod:
        t = time.time()
        if args.hosts < 1:
            ap.error(f"--hosts {args.hosts}: a pod needs at least one host")
        if args.stragglers is None:
            strag = [args.hosts * 17 // 64]
        else:
            try:
                strag = [int(x) for x in args.stragglers.split(",") if x.strip()]
            except ValueError:
                ap.error(f"--stragglers {args.stragglers!r}: comma-separated host indices")
            bad = [i for i in strag if not 0 <= i < args.hosts]
            if bad:
                ap.error(f"--stragglers {bad}: host indices run from 0 to {args.hosts - 1} "
                         f"with --hosts {args.hosts}")
        truth = write_pod(Path(args.pod), args.hosts, args.events, strag, args.stall_us,
                          args.seed)
        print(f"{args.pod}: {args.hosts} hosts, stragglers {truth['stragglers']} "
              f"in {time.time() - t:.1f} s")
        return 0
    if args.large:
        t = time.time()
        n = write_large(Path(args.large), args.events, args.format, args.seed)
        size = Path(args.large).stat().st_size
        print(f"{args.large}: {n:,} events, {size / 1e6:.1f} MB in {time.time() - t:.1f} s")
        return 0
    build_small()
    return 0


if __name__ == "__main__":
    sys.exit(main())
