"""Loader benchmark: load into the trace model vs. the bare decode of the same file.

Each measurement runs in its own process (wall time and peak RSS are that process's).
    python benchmarks/bench_load.py [FILE ...]
Defaults: df_index_resolver.json.gz from ../shared/traces and a generated 2 M-event XSpace.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DF = os.path.join(ROOT, "..", "shared", "traces", "public", "HolisticTraceAnalysis", "tests",
                  "data", "df_index_resolver", "df_index_resolver.json.gz")

CHILD = r'''
import gzip, json, resource, sys, time
sys.path.insert(0, {root!r})
path, what = sys.argv[1], sys.argv[2]
raw = open(path, "rb").read()
if raw[:2] == b"\x1f\x8b":
    raw = gzip.decompress(raw)
t = time.perf_counter()
if what == "json.loads":
    n = len(json.loads(raw)["traceEvents"])
elif what == "orjson.loads":
    import orjson; n = len(orjson.loads(raw)["traceEvents"])
elif what == "ParseFromString":
    from tb_perfdiag.trace.xplane_pb import XSpace
    s = XSpace(); s.ParseFromString(raw); n = sum(len(l.events) for p in s.planes for l in p.lines)
else:
    import tb_perfdiag
    from tb_perfdiag.trace import kineto, xspace
    tr = (xspace if path.endswith(".pb") else kineto).read(path, raw); n = tr.n_events
dt = time.perf_counter() - t
print(json.dumps({{"what": what, "seconds": dt, "events": n,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
'''


def run(path, what):
    out = subprocess.run([sys.executable, "-c", CHILD.format(root=ROOT), path, what],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(files):
    if not files:
        files = [DF] if os.path.exists(DF) else []
        big = os.path.join(tempfile.gettempdir(), "tb_perfdiag_bench_2M.xplane.pb")
        gen = os.path.join(ROOT, "testdata", "generators", "synthetic.py")
        if not os.path.exists(big) and os.path.exists(gen):
            subprocess.run([sys.executable, gen, "--large", big, "--events", "2000000",
                            "--format", "xspace"], check=True)
        if os.path.exists(big):
            files.append(big)
    print(f"{'file':40} {'step':16} {'seconds':>8} {'Mev/s':>7} {'peak MB':>8} {'× decode':>9}")
    for f in files:
        decodes = ["ParseFromString"] if f.endswith(".pb") else ["json.loads", "orjson.loads"]
        base = [run(f, d) for d in decodes]
        ours = run(f, "tb_perfdiag.load")
        for r in base + [ours]:
            ratio = r["seconds"] / base[0]["seconds"]
            print(f"{os.path.basename(f)[:40]:40} {r['what']:16} {r['seconds']:8.3f} "
                  f"{r['events'] / r['seconds'] / 1e6:7.2f} {r['peak_mb']:8.0f} {ratio:9.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
