"""``tb-perfdiag info PATH`` and ``tb-perfdiag diagnose PATH`` in a terminal."""
from __future__ import annotations

import argparse
import json
import sys

from ._version import __version__
from .analysis import Options, diagnose_trace
from .analysis import causes as C
from .api import trace_files
from .trace import TraceError, load


def _ms(ns) -> str:
    return f"{ns / 1e6:.3f} ms"


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


def _report(label: str, d: dict, top: int) -> None:
    print(f"== {label}")
    print(f"   {d['source']['events']} events, steps from {d['step_source']}, "
          f"gap threshold {d['options']['threshold_us']} µs")
    for dev in d["devices"]:
        if dev["duty_cycle"] is None:
            print(f"   {dev['name']}: no device activity")
            continue
        idle = ", ".join(f"{C.LABELS[c]} {_ms(v)}" for c, v in
                         sorted(dev["idle_by_cause_ns"].items(), key=lambda kv: -kv[1]))
        print(f"   {dev['name']}: duty cycle {dev['duty_cycle'] * 100:.1f}% "
              f"(busy {_ms(dev['busy_ns'])} of {_ms(dev['window_ns'])}); idle: {idle or '-'}")
    if d["steps"]:
        print("   steps:")
        for s in d["steps"]:
            dc = " ".join(f"{d['devices'][int(k)]['name']} {v['duty_cycle'] * 100:.1f}%"
                          for k, v in s["devices"].items() if v["duty_cycle"] is not None)
            extra = f", {s['compile']['count']} compile(s)" if s["compile"]["count"] else ""
            print(f"     step {s['id']}: {_ms(s['end_ns'] - s['start_ns'])}, duty {dc}{extra}")
    if d["findings"]:
        print("   findings:")
        for f in d["findings"][:top]:
            print(f"   * {f['title']} — {_ms(f['time_lost_ns_per_step'])}/step "
                  f"[{f['confidence']}]\n       {f['detail']}\n       fix: {f['fix']}")
    if d["gaps"]:
        print(f"   largest gaps ({len(d['gaps'])} in total):")
        for g in d["gaps"][:top]:
            print(f"   - {g['id']} step {g['step']}: {_ms(g['duration_ns'])} "
                  f"{C.LABELS[g['cause']]} — {g['evidence']}")
            if g["waited_for"]:
                print(f"       waited for: {' › '.join(g['waited_for']['chain'])}")
            for h in g["host_ops"][:4]:
                print(f"       {h['thread']}: {' › '.join(h['chain'])} ({_ms(h['self_ns'])})")
    for w in d["warnings"]:
        print(f"   warning: {w}")


def cmd_diagnose(args) -> int:
    opt = Options(threshold_us=args.threshold_us, kernels_only=args.kernels_only)
    results, rc = [], 0
    for label, path in trace_files(args.path):
        try:
            d = diagnose_trace(load(path), opt).to_json()
        except TraceError as e:
            results.append((label, {"error": e.reason, "file": path}))
            rc = 1
            continue
        if args.step is not None:
            d["gaps"] = [g for g in d["gaps"] if g["step"] == args.step]
        d.update(gaps_total=len(d["gaps"]), gaps_offset=0, gaps_limit=len(d["gaps"]))
        results.append((label, d))
    if not results:
        print(f"no profiles found under {args.path}", file=sys.stderr)
        return 2
    if args.json:
        out = results[0][1] if len(results) == 1 else {label: d for label, d in results}
        json.dump(out, sys.stdout, indent=None if args.compact else 1)
        print()
        return rc
    for label, d in results:
        if "error" in d:
            print(f"== {label}\n   ERROR {d['error']}")
        else:
            _report(label, d, args.top)
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
