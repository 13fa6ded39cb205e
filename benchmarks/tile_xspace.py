#!/usr/bin/env python3
"""Tile an XSpace (``*.xplane.pb``) N times into one larger, still valid XSpace: the same
program run again and again, as a long capture of a serving or training loop looks.

    python benchmarks/tile_xspace.py SRC.xplane.pb OUT.xplane.pb [--copies 80]

Copy k (k = 0 … N-1) of every event of every line is shifted in time by k × (span + 1 ms),
where span is the source's first start to last end over all lines, so each copy begins
after the previous one ends.  Stats that link or group events keep doing so within their
copy: each id stat (flows ``_p``/``_c``/``flow``, ``correlation_id``, ``run_id``,
``group_id``, ``step_num``, ``id``) is offset by k × M, M a power of two above the
largest value of that stat (so a flow's direction bits stay as they are; 4 for ids that
are hashes near 2**63).  Planes, lines,
metadata and the /host:metadata HLO protos are written once.  Writes into a temp dir
(bench_large.py), never the repo.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tb_perfdiag.trace.xplane_pb import XSpace  # noqa: E402

ID_STATS = ("_p", "_c", "flow", "correlation_id", "run_id", "group_id", "step_num", "id")
GAP_PS = 1_000_000_000


def tile(src: str, out: str, copies: int = 80) -> int:
    """Write ``copies`` time-shifted copies of ``src``'s events to ``out``; return the
    event count."""
    with open(src, "rb") as f:
        space = XSpace.FromString(f.read())
    t0, t1 = None, None
    top: dict = {}
    for plane in space.planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            base = line.timestamp_ns * 1000
            for e in line.events:
                s = base + e.offset_ps
                t0 = s if t0 is None or s < t0 else t0
                t1 = s + e.duration_ps if t1 is None or s + e.duration_ps > t1 else t1
                for st in e.stats:
                    n = names.get(st.metadata_id)
                    if n in ID_STATS:
                        v = st.uint64_value or st.int64_value
                        top[n] = max(top.get(n, 0), v)
    if t0 is None:
        raise SystemExit(f"{src}: no events")
    shift = t1 - t0 + GAP_PS
    step = {n: 1 << max(int(v).bit_length(), 2) for n, v in top.items()}
    # ids that are hashes (near 2**63) cannot be spaced apart: copy k adds k × 4 instead
    step = {n: m if m * copies < 1 << 62 else 4 for n, m in step.items()}
    n_events = 0
    for plane in space.planes:
        ids = {k: step[v.name] for k, v in plane.stat_metadata.items() if v.name in step}
        for line in plane.lines:
            orig = list(line.events)
            for k in range(1, copies):
                for e in orig:
                    c = line.events.add()
                    c.CopyFrom(e)
                    c.offset_ps = e.offset_ps + k * shift
                    for st in c.stats:
                        m = ids.get(st.metadata_id)
                        if m is not None:
                            if st.HasField("uint64_value"):
                                st.uint64_value += k * m
                            elif st.HasField("int64_value"):
                                st.int64_value += k * m
            n_events += len(line.events)
    with open(out + ".part", "wb") as f:
        f.write(space.SerializeToString())
    os.replace(out + ".part", out)
    return n_events


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--copies", type=int, default=80)
    a = ap.parse_args(argv)
    n = tile(a.src, a.out, a.copies)
    print(f"{a.out}: {n:,} events, {os.path.getsize(a.out) / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
