#!/usr/bin/env python3
"""Sweep traces and print, per accelerator with activity, the model the efficiency
analysis names, its peak and where the peak comes from, or what the trace says of the
device and what is missing (a debug aid, no CLI of the product):

    python scripts/device_models.py [DIR_OR_TRACE …]   # default: ../shared/traces

A CPU-only trace prints one line saying so; a trace that fails to load prints its error."""
from __future__ import annotations

import os
import sys

import tb_perfdiag

_SUFFIXES = (".json", ".json.gz", ".xplane.pb")


def traces(roots):
    for root in roots:
        if os.path.isfile(root):
            yield root
            continue
        for dirpath, dirnames, files in os.walk(root):
            dirnames.sort()
            # graph captures are read with their execution trace, not as traces of their own
            dirnames[:] = [d for d in dirnames if d != "capture_traces"]
            for f in sorted(files):
                if f.endswith(_SUFFIXES) and "expected" not in f:
                    yield os.path.join(dirpath, f)


def sweep(path: str) -> list[str]:
    try:
        d = tb_perfdiag.diagnose(tb_perfdiag.load(path)).to_json()
    except Exception as e:              # noqa: BLE001 - a debug sweep reports and goes on
        return [f"  error: {type(e).__name__}: {str(e)[:120]}"]
    out = []
    for dev in d.get("devices", []):
        e = dev.get("efficiency") or {}
        if not dev.get("busy_ns") or dev.get("kind", "gpu") == "cpu" or \
                str(dev.get("name", "")).startswith("CPU"):
            continue
        pk = e.get("peak_flops_per_s")
        bw = e.get("peak_bytes_per_s")
        if pk:
            fig = (f"{pk / 1e12:,.1f} TFLOP/s {e.get('peak_dtype')}"
                   f"{f', {bw / 1e12:.2f} TB/s' if bw else ''} ({e.get('peak_source')})")
        else:
            fig = "no peak: " + next((m for m in str(e.get("missing") or "").split("; ")
                                      if "peak" in m or "datasheet" in m), "?")
        out.append(f"  {dev.get('name')} → {e.get('device_model') or '(no model)'}: {fig}")
    return out or ["  (no accelerator with activity)"]


def main(argv) -> int:
    roots = argv or [os.path.join(os.path.dirname(__file__), "..", "..", "shared", "traces")]
    for path in traces(roots):
        print(os.path.relpath(path, roots[0]) if os.path.isdir(roots[0]) else path)
        print("\n".join(sweep(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
