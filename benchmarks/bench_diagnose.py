#!/usr/bin/env python3
"""Full diagnosis vs. bare decode vs. Holistic Trace Analysis, each in its own process.

    python benchmarks/bench_diagnose.py [--quick] [--repeat N] [--json OUT]
                                        [--wait-generator SECONDS] [--no-pure]

Files:
  (a) df_index_resolver.json.gz (216k events; shared/traces, HTA's own test data)
  (b) that trace tiled ×10 by tile_kineto.py (2.16 M events; written to the temp dir)
  (c) a 2 M-event XSpace from testdata/generators/synthetic.py --large (temp dir)
--quick runs (a) only.

Rows (seconds = only the timed part; see _child.py; imports are never timed):
  json.loads / orjson.loads   decode of the already gunzipped bytes
  ParseFromString             XSpace.ParseFromString of the already read bytes (XSpace only)
  ParseFromString+walk        the same, then every event's fields read into Python objects
  tb-perfdiag diagnose        tb_perfdiag.diagnose(path): reading + gunzip + scan + model
                              + analysis → Diagnosis
  … +to_json                  the same, then to_json(all_gaps=False) as JSON bytes: what
                              the plugin's /diagnosis route serves, the page's first answer
                              (its size printed below the table)
  … +to_json every gap        diagnose, then to_json(): every gap's record (CLI --all-gaps)
  HTA idle                    TraceAnalysis(trace_dir=DIR) — HTA parsing the one file in
                              DIR — then get_idle_time_breakdown(ranks=all, visualize=False)
  HTA idle+launch+temporal    then also get_cuda_kernel_launch_stats and
                              get_temporal_breakdown (the work of GUIDE §6's HTA anchor)
tb-perfdiag rows run with the native scanner when it imports, and again with
TB_PERFDIAG_NO_NATIVE=1 (pure Python) unless --no-pure.
cpu s: user + system CPU seconds of the child over the same part (steadier than wall
time when the machine is shared; the ratios and PASS/MISS use wall time).
Peak MB: the child's ru_maxrss when that row's work ended (a high-water mark: it includes
the interpreter, imports and the raw bytes the decode rows read before the clock starts).
Targets (the issue): diagnose ≤ json.loads time, ≥ 10× faster than HTA idle, peak ≤ 1/3
of HTA's.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

TILED = os.path.join(C.TMP, "df_index_resolver_x10.json.gz")


def tiled_file(log) -> str:
    tiler = os.path.join(C.HERE, "tile_kineto.py")
    if not (os.path.exists(TILED) and os.path.getmtime(TILED) >= os.path.getmtime(tiler)):
        os.makedirs(C.TMP, exist_ok=True)
        log("  tiling df_index_resolver ×10 into", TILED)
        import subprocess
        subprocess.run([C.MAIN_PY, tiler, C.DF, TILED, "--copies", "10"], check=True)
    return TILED


def hta_dir(path: str) -> str:
    """A folder holding only ``path`` (as a symlink), for TraceAnalysis(trace_dir=…)."""
    d = os.path.join(C.TMP, "hta_" + os.path.basename(path).split(".")[0])
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    os.symlink(os.path.abspath(path), os.path.join(d, os.path.basename(path)))
    return d


def measure(label, path, kind, repeat, native, pure, log):
    """Rows for one file: list of dicts (label, tool, seconds, peak_mb, extra)."""
    rows, errors = [], []

    def row(tool, seconds, peak, **extra):
        rows.append({"file": label, "tool": tool, "seconds": seconds, "peak_mb": peak,
                     "import_mb": r.get("import_mb"), **extra})

    def attempt(tool, fn):
        log(f"  {label}: {tool} …")
        try:
            return fn()
        except C.ChildFailed as e:
            errors.append(f"{label}: {tool}: {e}")
            rows.append({"file": label, "tool": tool, "seconds": None, "peak_mb": None,
                         "error": str(e)})
            return None

    decodes = ["ParseFromString", "ParseFromString+walk"] if kind == "xspace" \
        else ["json.loads", "orjson.loads"]
    for d in decodes:
        r = attempt(d, lambda: C.run_best(d, path, repeat))
        if r:
            extra = {"protobuf": r["protobuf_impl"]} if "protobuf_impl" in r else {}
            row(d, r["seconds"], r["peak_mb"], cpu_s=r["cpu_seconds"], events=r["events"],
                runs=r["runs"], **extra)
    modes = ([("native", {})] if native == "active" else []) + \
            ([("pure Python", {"TB_PERFDIAG_NO_NATIVE": "1"})] if pure or native != "active"
             else [])
    for name, env in modes:
        r = attempt(f"tb-perfdiag diagnose ({name})",
                    lambda: C.run_best("diagnose", path, repeat, env=env))
        if r:
            cp = r["checkpoints"]
            row(f"tb-perfdiag diagnose ({name})", r["seconds"], cp["diagnose"][1],
                cpu_s=cp["diagnose"][2], native=r["native"], runs=r["runs"], gaps=r["gaps"], ours=True,
                hta_compat_ns=r["hta_compat_ns"])
            row(f"tb-perfdiag diagnose+to_json ({name})", cp["diagnose+to_json"][0],
                cp["diagnose+to_json"][1], cpu_s=cp["diagnose+to_json"][2], native=r["native"],
                to_json_s=r["parts"]["to_json"], answer_bytes=r.get("answer_bytes"), ours=True)
            if "diagnose+to_json_all" in cp:
                row(f"tb-perfdiag diagnose+to_json every gap ({name})",
                    cp["diagnose+to_json_all"][0], cp["diagnose+to_json_all"][1],
                    cpu_s=cp["diagnose+to_json_all"][2], native=r["native"],
                    to_json_s=r["parts"]["to_json_all"], ours=True)
    if kind == "kineto":
        if not os.path.exists(C.HTA_PY):
            errors.append(f"{label}: HTA: {C.HTA_PY} missing (see benchmarks/README.md)")
        else:
            d = hta_dir(path)
            r = attempt("HTA idle", lambda: C.run_best("hta", d, repeat, python=C.HTA_PY,
                                                        timeout=900))
            if r:
                cp = r["checkpoints"]
                row("HTA idle", r["seconds"], cp["parse+idle"][1], cpu_s=cp["parse+idle"][2],
                    hta=True,
                    parse_s=r["parts"]["parse"], idle_s=r["parts"]["idle"], runs=r["runs"],
                    idle_ns_by_category=r["idle_ns_by_category"], hta_version=r["hta_version"])
                row("HTA idle+launch+temporal", cp["parse+idle+launch+temporal"][0],
                    cp["parse+idle+launch+temporal"][1],
                    cpu_s=cp["parse+idle+launch+temporal"][2], hta_all=True)
    return rows, errors


def ratios(rows):
    by_file = {}
    for r in rows:
        by_file.setdefault(r["file"], []).append(r)
    for rs in by_file.values():
        base = next((r for r in rs if r["tool"] in ("json.loads", "ParseFromString")
                     and r["seconds"]), None)
        hta = next((r for r in rs if r.get("hta") and r["seconds"]), None)
        for r in rs:
            if r["seconds"] is None:
                continue
            r["x_decode"] = r["seconds"] / base["seconds"] if base else None
            r["x_hta"] = r["seconds"] / hta["seconds"] if hta else None
            r["mem_x_hta"] = r["peak_mb"] / hta["peak_mb"] if hta else None
            r["cpu_x_decode"] = r["cpu_s"] / base["cpu_s"] if base else None
            r["cpu_x_hta"] = r["cpu_s"] / hta["cpu_s"] if hta else None
    return by_file


def fmt(v, spec):
    return format(v, spec) if v is not None else "—".rjust(int(spec.split(".")[0] or 0))


def print_table(rows, out=sys.stdout):
    by_file = ratios(rows)
    print(f"{'file':24} {'tool':44} {'seconds':>8} {'cpu s':>7} {'peak MB':>8} {'×decode':>8} "
          f"{'×HTA time':>9} {'×HTA mem':>8} {'import MB':>9}", file=out)
    for f, rs in by_file.items():
        for r in rs:
            if r["seconds"] is None:
                print(f"{f:24} {r['tool']:44} FAILED: {r['error'][:80]}", file=out)
                continue
            print(f"{f:24} {r['tool']:44} {r['seconds']:8.3f} {r['cpu_s']:7.2f} {r['peak_mb']:8.0f} "
                  f"{fmt(r['x_decode'], '8.2f')} {fmt(r['x_hta'], '9.3f')} "
                  f"{fmt(r['mem_x_hta'], '8.2f')} {fmt(r.get('import_mb'), '9.0f')}", file=out)
    print(file=out)
    print("Targets (tb-perfdiag diagnose, reading included, vs. this run's json.loads / "
          "HTA idle):", file=out)
    for f, rs in by_file.items():
        for r in rs:
            if not r.get("ours") or r["seconds"] is None or "to_json" in r["tool"]:
                continue
            checks = []
            if r.get("x_decode") is not None:
                base = "json.loads" if f.find("xspace") < 0 else "ParseFromString"
                checks.append((f"≤ {base}", r["x_decode"] <= 1.0,
                               f"{r['x_decode']:.2f}× wall, {r['cpu_x_decode']:.2f}× cpu"))
            walk = next((w for w in rs if w["tool"] == "ParseFromString+walk" and w["seconds"]),
                        None)
            if walk:
                x = r["seconds"] / walk["seconds"]
                checks.append(("≤ ParseFromString+walk", x <= 1.0, f"{x:.2f}× wall"))
            if r.get("x_hta") is not None:
                checks.append(("≥10× faster than HTA", r["x_hta"] <= 0.1,
                               f"{1 / r['x_hta']:.1f}× wall, {1 / r['cpu_x_hta']:.1f}× cpu"))
                checks.append(("≤ 1/3 HTA peak", r["mem_x_hta"] <= 1 / 3,
                               f"{r['mem_x_hta']:.2f}×"))
            s = "; ".join(f"{name} {'PASS' if ok else 'MISS'} ({v})" for name, ok, v in checks)
            print(f"  {f} {r['tool'][len('tb-perfdiag '):]}: {s}", file=out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="only (a), the 216k-event file")
    ap.add_argument("--repeat", type=int, default=None,
                    help="runs per row, fastest kept (default 3 for (a), 1 for the 2 M files)")
    ap.add_argument("--no-pure", action="store_true",
                    help="skip the pure-Python (TB_PERFDIAG_NO_NATIVE=1) rows when native exists")
    ap.add_argument("--wait-generator", type=float, default=0, metavar="S",
                    help="retry a missing/failing XSpace generator once a minute for S seconds")
    ap.add_argument("--json", metavar="OUT", help="also write the rows as JSON")
    a = ap.parse_args(argv)

    def log(*x, **k):
        print(*x, file=sys.stderr, flush=True)

    if not os.path.exists(C.DF):
        raise SystemExit(f"missing {C.DF}")
    native = C.native_status()
    print(f"# bench_diagnose  {datetime.datetime.now().isoformat(timespec='seconds')}  "
          f"{platform.node()}  cpus={os.cpu_count()}  load avg {C.load_avg()}")
    print(f"# native scanner: {native}")
    rows, errors = [], []
    plan = [("(a) df_216k", C.DF, "kineto", a.repeat or 3)]
    notes = []
    if not a.quick:
        plan.append(("(b) df_x10_2.16M", tiled_file(log), "kineto", a.repeat or 1))
        xs, note = C.generated_file("xspace", 2_000_000, poll_s=a.wait_generator, log=log)
        if xs:
            plan.append(("(c) synth_xspace_2M", xs, "xspace", a.repeat or 1))
            notes.append(f"(c) {os.path.getsize(xs) / 2**20:.0f} MiB: {note}")
        else:
            errors.append(f"(c) XSpace 2M: not run: {note}")
    for label, path, kind, rep in plan:
        r, e = measure(label, path, kind, rep, native, not a.no_pure, log)
        rows += r
        errors += e
    print()
    print_table(rows)
    hta = [r for r in rows if r.get("hta") and r["seconds"]]
    for r in hta:
        print(f"  {r['file']} HTA {r['hta_version']}: parse {r['parse_s']:.3f} s + idle "
              f"breakdown {r['idle_s']:.3f} s; idle by category (ns, summed over streams) "
              f"{r['idle_ns_by_category']}")
    seen = set()
    for r in rows:
        if r.get("hta_compat_ns") and r["file"] not in seen:
            seen.add(r["file"])
            print(f"  {r['file']} tb-perfdiag: {r['gaps']} gaps; HTA-style idle (ns, device "
                  f"level) {r['hta_compat_ns']}")
    for r in rows:
        if r.get("to_json_s") is not None:
            print(f"  {r['file']} {r['tool']}: to_json alone {r['to_json_s']:.3f} s" + (
                f", the first answer {r['answer_bytes'] / 1e6:.2f} MB of JSON"
                if r.get("answer_bytes") else ""))
        if r.get("protobuf"):
            print(f"  {r['file']} ParseFromString: protobuf implementation {r['protobuf']}, "
                  f"{r['events']} events")
        if r["tool"] == "json.loads" and r.get("events"):
            print(f"  {r['file']}: {r['events']} trace events")
    for n in notes:
        print("  " + n)
    C.finish(errors, a.json, {"native": native, "rows": rows, "errors": errors})
    return rows, errors


if __name__ == "__main__":
    main()
