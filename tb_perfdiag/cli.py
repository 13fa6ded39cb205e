"""``tb-perfdiag info PATH`` and ``tb-perfdiag diagnose PATH`` in a terminal."""
from __future__ import annotations

import argparse
import json
import sys

from ._version import __version__
from .analysis import Options, diagnose_trace
from .render import text
from .render.json import diagnosis_json
from .api import trace_files
from .trace import TraceError, load


def cmd_info(args) -> int:
    rc = 0
    for label, path in trace_files(args.path):
        try:
            tr = load(path)
        except TraceError as e:
            print(f"{label}: ERROR {e.reason}")
            rc = 1
            continue
        s = tr.summary()
        lo, hi = s["span_ps"]
        print(f"{label}\n  file: {path}\n  format: {s['format']}, {s['events']} events, "
              f"span {(hi - lo) / 1e9:.3f} ms, devices: {', '.join(s['devices']) or 'none'}")
        steps = s["steps"]
        print(f"  steps: {len(steps)}" + (f" ({steps[0]}..{steps[-1]})" if steps else ""))
        for t in s["tracks"]:
            print(f"  {t['kind']:6} {t['events']:9d}  {t['label']}")
        for w in s["warnings"]:
            print(f"  warning: {w}")
    return rc


def cmd_diagnose(args) -> int:
    opt = Options(threshold_us=args.threshold_us, kernels_only=args.kernels_only)
    results, rc = [], 0
    for label, path in trace_files(args.path):
        try:
            diag = diagnose_trace(load(path), opt)
        except TraceError as e:
            results.append((label, None, {"error": e.reason, "file": path}))
            rc = 1
            continue
        results.append((label, diag, None))
    if not results:
        print(f"no profiles found under {args.path}", file=sys.stderr)
        return 2
    if args.json:
        docs = [(label, err if diag is None else
                 diagnosis_json(diag, step=args.step, paged=True)) for label, diag, err in results]
        out = docs[0][1] if len(docs) == 1 else dict(docs)
        json.dump(out, sys.stdout, indent=None if args.compact else 1)
        print()
        return rc
    for label, diag, err in results:
        if diag is None:
            print(f"== {label}\n   ERROR {err['error']}")
        else:
            print(text.report(label, diag, args.top, args.step))
    return rc


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="tb-perfdiag", description=__doc__)
    p.add_argument("--version", action="version", version=__version__)
    sub = p.add_subparsers(dest="cmd", required=True)
    pi = sub.add_parser("info", help="tracks, event counts, time span and steps of a trace")
    pi.add_argument("path")
    pi.set_defaults(fn=cmd_info)
    pd = sub.add_parser("diagnose", help="duty cycle, idle gaps with causes, findings")
    pd.add_argument("path")
    pd.add_argument("--json", action="store_true", help="print the JSON the plugin serves")
    pd.add_argument("--compact", action="store_true", help="JSON on one line")
    pd.add_argument("--step", type=int, default=None, help="only this step's gaps")
    pd.add_argument("--threshold-us", type=float, default=5.0, help="smallest listed gap")
    pd.add_argument("--kernels-only", action="store_true", help="busy = kernels only")
    pd.add_argument("--top", type=int, default=8, help="findings and gaps to print")
    pd.set_defaults(fn=cmd_diagnose)
    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
