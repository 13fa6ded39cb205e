#!/usr/bin/env python3
"""Tile a Kineto (Chrome-trace JSON) trace N times into one larger, still valid trace.

    python benchmarks/tile_kineto.py SRC.json.gz OUT.json.gz [--copies 10]

Copy k (k = 0 … N-1) of every non-metadata event is shifted in time by k × (span + 1 ms),
where span is the source's first start to last end, so each copy begins after the previous
copy ends.  Every id that links events is offset by k × (max id + 1) so it stays unique:
``args.correlation``, ``args["External id"]``, ``args["Ev Idx"]`` and the flow ``id`` of
"s"/"f"/"t" events.  Metadata ("M") events are written once.  The top-level keys other
than ``traceEvents`` (deviceProperties, distributedInfo, …) are kept as they are.

Streams copy by copy (memory stays about one copy of the source as Python objects) and
writes gzip.  Used by bench_diagnose.py, which writes into a temp dir, never the repo.
"""
from __future__ import annotations

import argparse
import gzip
import os
import sys

import orjson

ID_ARGS = ("correlation", "External id", "Ev Idx")
FLOW_PH = ("s", "f", "t")


def _num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def tile(src: str, out: str, copies: int = 10, gap_us: int = 1000, level: int = 6) -> int:
    """Write ``copies`` time-shifted copies of ``src`` to ``out``; return the event count."""
    with open(src, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = orjson.loads(raw)
    del raw
    events = doc.pop("traceEvents")
    meta = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    del events

    t0, t1, max_id = None, None, 0
    for e in body:
        ts = e.get("ts")
        if _num(ts):
            end = ts + (e.get("dur") or 0)
            t0 = ts if t0 is None or ts < t0 else t0
            t1 = end if t1 is None or end > t1 else t1
        a = e.get("args")
        if isinstance(a, dict):
            for k in ID_ARGS:
                v = a.get(k)
                if isinstance(v, int) and v > max_id:
                    max_id = v
        if e.get("ph") in FLOW_PH and isinstance(e.get("id"), int) and e["id"] > max_id:
            max_id = e["id"]
    if t0 is None:
        raise SystemExit(f"{src}: no timed events")
    shift = int(t1 - t0) + gap_us          # microseconds, as in the file
    id_step = max_id + 1

    # Each copy is written from the previous one, shifted by one step more.
    tmp = out + ".tmp"
    n = 0
    with gzip.open(tmp, "wb", compresslevel=level) as g:
        head = orjson.dumps(doc)[:-1]        # '{...' without the closing brace
        g.write(head + (b"," if len(head) > 1 else b"") + b'"traceEvents":[')
        first = True
        for k in range(copies):
            if k:
                for e in body:
                    ts = e.get("ts")
                    if _num(ts):
                        e["ts"] = ts + shift
                    a = e.get("args")
                    if isinstance(a, dict):
                        for key in ID_ARGS:
                            v = a.get(key)
                            if isinstance(v, int) and v >= 0:
                                a[key] = v + id_step
                    if e.get("ph") in FLOW_PH and isinstance(e.get("id"), int):
                        e["id"] += id_step
            chunk = body + meta if k == 0 else body
            data = orjson.dumps(chunk)[1:-1]
            if data:
                if not first:
                    g.write(b",")
                g.write(data)
                first = False
            n += len(chunk)
        g.write(b"]}")
    os.replace(tmp, out)
    return n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--level", type=int, default=6, help="gzip level (default 6)")
    a = ap.parse_args(argv)
    n = tile(a.src, a.out, a.copies, level=a.level)
    print(f"{a.out}: {n} events, {os.path.getsize(a.out) / 2**20:.1f} MiB", file=sys.stderr)


if __name__ == "__main__":
    main()
