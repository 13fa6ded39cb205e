"""Loader benchmark: load into the trace model vs. the bare decode of the same file.

Each measurement runs in its own process (wall time and peak RSS are that process's).
    python benchmarks/bench_load.py [--repeat N] [--no-pure] [FILE ...]
Defaults: df_index_resolver.json.gz from ../shared/traces and a generated 2 M-event XSpace
(testdata/generators/synthetic.py --large, cached in the temp dir).

Rows: the bare decode of the already read (and gunzipped) bytes — json.loads and
orjson.loads, or XSpace.ParseFromString — and tb_perfdiag.load(path) (reading the file
included), with the native scanner when it imports and with TB_PERFDIAG_NO_NATIVE=1.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--repeat", type=int, default=1, help="runs per row, fastest kept")
    ap.add_argument("--no-pure", action="store_true", help="skip TB_PERFDIAG_NO_NATIVE=1 rows")
    a = ap.parse_args(argv)
    files, errors = list(a.files), []
    if not files:
        files = [C.DF] if os.path.exists(C.DF) else []
        big, note = C.generated_file("xspace", 2_000_000,
                                     log=lambda *x, **k: print(*x, file=sys.stderr))
        if big:
            files.append(big)
        else:
            errors.append(f"2 M-event XSpace not run: {note}")
    native = C.native_status()
    print(f"# bench_load  native scanner: {native}  load avg {C.load_avg()}")
    modes = ([("native", {})] if native == "active" else []) + \
            ([("pure Python", {"TB_PERFDIAG_NO_NATIVE": "1"})]
             if not a.no_pure or native != "active" else [])
    print(f"{'file':36} {'step':28} {'seconds':>8} {'cpu s':>7} {'Mev/s':>7} {'peak MB':>8} "
          f"{'× decode':>9}")
    for f in files:
        is_pb = f.endswith(".pb")
        decodes = ["ParseFromString"] if is_pb else ["json.loads", "orjson.loads"]
        rows = []
        for d in decodes:
            try:
                rows.append((d, C.run_best(d, f, a.repeat)))
            except C.ChildFailed as e:
                errors.append(str(e))
        for name, env in modes:
            try:
                r = C.run_best("load", f, a.repeat, env=env)
                rows.append((f"tb_perfdiag.load ({name})", r))
            except C.ChildFailed as e:
                errors.append(str(e))
        base = rows[0][1]["seconds"] if rows and rows[0][0] in decodes[:1] else None
        for label, r in rows:
            ratio = f"{r['seconds'] / base:9.2f}" if base else "        —"
            print(f"{os.path.basename(f)[:36]:36} {label:28} {r['seconds']:8.3f} "
                  f"{r['cpu_seconds']:7.2f} {r['events'] / r['seconds'] / 1e6:7.2f} {r['peak_mb']:8.0f} {ratio}")
    print("(events: JSON/XSpace events decoded, or the Trace model's n_events for load)")
    if errors:
        print("Failed / not run:")
        for e in errors:
            print("  " + e)


if __name__ == "__main__":
    main()
