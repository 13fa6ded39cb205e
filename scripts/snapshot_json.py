#!/usr/bin/env python
"""Snapshot of the JSON tb-perfdiag produces for every trace it reads, and a compare of
two snapshots: one taken before a refactor and one after should be equal.

    python scripts/snapshot_json.py --out DIR [--only SUBSTR]
    python scripts/snapshot_json.py --compare DIR_A DIR_B     # exit 0 equal, 1 not

Each trace gives DIR/<root>__<path>.json.gz holding "file", "api" (``diagnose().to_json()``)
and "routes" (every DiagnosisService route, called in-process).  To snapshot another
checkout's code, put it first on the path: ``PYTHONPATH=/path/to/checkout python ...``.
The traces are always those of this repository's testdata and the shared traces, so both
snapshots name the same absolute paths.
"""
from __future__ import annotations

import argparse
import gzip
import inspect
import json
import math
import os
import re
import subprocess
import sys
import time

try:
    import orjson
except ImportError:  # json is slower, and writes NaN where orjson writes null
    orjson = None

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOTS = {"testdata": os.path.join(REPO, "testdata"),
         "shared": os.environ.get("TB_PERFDIAG_TRACES", "/work/shared/traces")}
# wall-clock measurements: they differ on every run, whatever the code
IGNORED_KEYS = {"elapsed_s"}
MAX_LINES = 30


def dumps(obj) -> bytes:
    if orjson is not None:
        try:
            return orjson.dumps(obj, default=_unserialisable,
                                option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)
        except TypeError:  # integers past 64 bits (real traces hold some): json copes
            pass
    return json.dumps(obj, default=_unserialisable, separators=(",", ":")).encode()


def loads(data: bytes):
    if orjson is not None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:  # NaN, from a file json wrote
            pass
    return json.loads(data)


def _unserialisable(o):
    # recorded, not raised: a value the plugin could not serve either is worth seeing
    return f"<unserialisable {type(o).__name__}: {o!r:.100}>"


# ---- taking a snapshot ----

def api_json(path: str):
    import tb_perfdiag
    try:
        d = tb_perfdiag.diagnose(tb_perfdiag.load(path))
    except tb_perfdiag.TraceError as e:
        return {"error": e.reason}
    except Exception as e:  # noqa: BLE001 - one trace's crash must not end the snapshot
        return {"exception": f"{type(e).__name__}: {e}"}
    # after the refactor to_json() may page the gaps unless asked for all of them
    kw = {"all_gaps": True} if "all_gaps" in inspect.signature(d.to_json).parameters else {}
    return d.to_json(**kw)


def call(service, name: str, params: dict) -> dict:
    fn = getattr(service, name, None)
    if fn is None:
        return {"exception": f"DiagnosisService has no {name}"}
    try:
        try:
            from tb_perfdiag.plugin import answer  # routes take parsed parameters
        except ImportError:
            status, body = fn(params)                  # before route parameters were typed
        else:
            status, body = answer(name[:-len("_json")], fn, params)
    except Exception as e:  # noqa: BLE001 - recorded, so a changed error shows in the compare
        return {"exception": f"{type(e).__name__}: {e}"}
    return {"status": status, "body": body}


def routes_json(catalog, run: str, src) -> dict:
    from tb_perfdiag.cache import DiagnosisCache
    from tb_perfdiag.service import DiagnosisService
    # a fresh service per trace: no answer depends on which trace went before, and never
    # the user's disk cache (it would answer with whatever version wrote it)
    svc = DiagnosisService(catalog, cache=DiagnosisCache(disk_dir=None))
    p = {"run": run, "host": src.host, "span": src.span}
    out = {"diagnosis_json": call(svc, "diagnosis_json", p),
           "diagnosis_json_all": call(svc, "diagnosis_json", {**p, "gaps_limit": "100000"})}
    gaps = (out["diagnosis_json_all"].get("body") or {}).get("gaps") or []
    ids = [g["id"] for g in gaps[:3]] + ([gaps[-1]["id"]] if len(gaps) > 3 else [])
    out["gap_json"] = [{"id": i, **call(svc, "gap_json", {**p, "id": i})} for i in ids]
    out["timeline_json"] = call(svc, "timeline_json",
                                {**p, "start_ns": "0", "end_ns": "1e18", "width": "800"})
    out["overlay_json"] = call(svc, "overlay_json", p)
    out["overlay_json_events"] = call(svc, "overlay_json", {**p, "with_events": "1"})
    # a step's view of the diagnosis (its gaps, its device time by op): the first two and
    # the last step
    steps = [s["id"] for s in (out["diagnosis_json_all"].get("body") or {}).get("steps") or []]
    out["diagnosis_json_steps"] = [
        {"step": s, **call(svc, "diagnosis_json", {**p, "step": str(s)})}
        for s in sorted(set(steps[:2] + steps[-1:]))]
    out["progress_json"] = call(svc, "progress_json", p)
    out["hosts_json"] = call(svc, "hosts_json", {"run": run, "wait": "1"})
    return out


def snapshot(out_dir: str, only: str | None) -> None:
    import tb_perfdiag
    from tb_perfdiag.discovery import Catalog, scan_logdir
    os.makedirs(out_dir, exist_ok=True)
    code = os.path.dirname(os.path.dirname(os.path.abspath(tb_perfdiag.__file__)))
    commit = subprocess.run(["git", "-C", code, "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"tb_perfdiag from {tb_perfdiag.__file__} ({commit or 'no git'})", file=sys.stderr)
    index, t_all = [], time.perf_counter()
    for label, root in ROOTS.items():
        if not os.path.isdir(root):
            print(f"skipping {label}: no {root}", file=sys.stderr)
            continue
        catalog = Catalog(root)
        for run in scan_logdir(root).values():
            for src in sorted(run.sources, key=lambda s: (s.host, s.span)):
                rel = os.path.relpath(src.path, root)
                if only and only not in f"{label}/{rel}":
                    continue
                t0 = time.perf_counter()
                doc = {"file": {"root": label, "path": rel},
                       "api": api_json(src.path), "routes": routes_json(catalog, run.name, src)}
                name = f"{label}__{re.sub(r'[^A-Za-z0-9._-]+', '_', rel)}.json.gz"
                with gzip.open(os.path.join(out_dir, name), "wb", compresslevel=3) as f:
                    f.write(dumps(doc))
                secs = round(time.perf_counter() - t0, 3)
                errors = [k for k, v in doc["routes"].items()
                          for r in (v if isinstance(v, list) else [v]) if "exception" in r]
                index.append({"root": label, "path": rel, "out": name, "seconds": secs,
                              "route_exceptions": errors})
                print(f"{secs:8.2f}s  {label}/{rel}" + (f"  EXC {errors}" if errors else ""),
                      file=sys.stderr)
    # traces the logdir walk does not list (HTA's files are not named *.pt.trace.json,
    # xprof's test XSpace is not under plugins/profile): the API's diagnosis only
    listed = {os.path.join(ROOTS[e["root"]], e["path"]) for e in index}
    for label, root in ROOTS.items():
        for dirpath, _, files in sorted(os.walk(root)) if os.path.isdir(root) else []:
            for fn in sorted(files):
                path = os.path.join(dirpath, fn)
                rel = os.path.relpath(path, root)
                if path in listed or not fn.endswith((".json", ".json.gz", ".xplane.pb")) \
                        or (only and only not in f"{label}/{rel}"):
                    continue
                t0 = time.perf_counter()
                doc = {"file": {"root": label, "path": rel}, "api": api_json(path)}
                name = f"{label}__{re.sub(r'[^A-Za-z0-9._-]+', '_', rel)}.json.gz"
                with gzip.open(os.path.join(out_dir, name), "wb", compresslevel=3) as f:
                    f.write(dumps(doc))
                index.append({"root": label, "path": rel, "out": name,
                              "seconds": round(time.perf_counter() - t0, 3),
                              "route_exceptions": []})
    total = round(time.perf_counter() - t_all, 3)
    with open(os.path.join(out_dir, "index.json"), "w") as f:
        json.dump({"code": tb_perfdiag.__file__, "commit": commit, "only": only,
                   "total_seconds": total, "files": index}, f, indent=1)
    print(f"{len(index)} traces in {total:.1f}s → {out_dir}", file=sys.stderr)


# ---- comparing two snapshots ----

def _equal_scalars(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)
    return a == b


def diff(a, b, path: str, out: list) -> None:
    """Appends (JSON path, value in A, value in B) for every difference."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k in IGNORED_KEYS:
                continue
            if k not in b or k not in a:
                out.append((f"{path}.{k}", a.get(k, "<absent>"), b.get(k, "<absent>")))
            else:
                diff(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append((f"{path}.length", len(a), len(b)))
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{path}[{i}]", out)
    elif type(a) is not type(b) and not (isinstance(a, (int, float)) and
                                          isinstance(b, (int, float))):
        out.append((path, a, b))
    elif not _equal_scalars(a, b):
        out.append((path, a, b))


def _short(v) -> str:
    s = dumps(v).decode() if not isinstance(v, str) else repr(v)
    return s if len(s) <= 200 else s[:197] + "..."


def compare(dir_a: str, dir_b: str) -> int:
    def files(d):
        return {f for f in os.listdir(d) if f.endswith(".json.gz")}
    fa, fb = files(dir_a), files(dir_b)
    differing = 0
    for name in sorted(fa | fb):
        if name not in fa or name not in fb:
            print(f"{name}: only in {dir_a if name in fa else dir_b}")
            differing += 1
            continue
        docs = []
        for d in (dir_a, dir_b):
            with gzip.open(os.path.join(d, name), "rb") as f:
                docs.append(loads(f.read()))
        out: list = []
        diff(docs[0], docs[1], "", out)
        if not out:
            continue
        differing += 1
        # where the differences are, before the first few of them in detail
        by_section: dict = {}
        for path, _, _ in out:
            parts = re.split(r"[.\[]", path.lstrip("."))
            key = ".".join(parts[:2]) if parts[0] == "routes" else parts[0]
            by_section[key] = by_section.get(key, 0) + 1
        print(f"{name}: {len(out)} difference(s): "
              + ", ".join(f"{k} {n}" for k, n in by_section.items()))
        for path, x, y in out[:MAX_LINES]:
            print(f"  {path.lstrip('.')}: A={_short(x)}  B={_short(y)}")
        if len(out) > MAX_LINES:
            print(f"  … and {len(out) - MAX_LINES} more")
    print(f"{len(fa | fb)} files, {differing} differ"
          + (f" (ignoring keys {sorted(IGNORED_KEYS)})" if IGNORED_KEYS else ""))
    return 1 if differing else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="folder to write the snapshot into")
    ap.add_argument("--only", help="only traces whose <root>/<path> contains this")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two snapshots")
    args = ap.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if not args.out:
        ap.error("--out or --compare is required")
    snapshot(args.out, args.only)
    return 0


if __name__ == "__main__":  # guarded: the pod route's worker processes are spawned
    sys.exit(main())
