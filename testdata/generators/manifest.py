"""Write every small scenario under testdata/synthetic/logdir/ and the ground truth in
testdata/synthetic/MANIFEST.json."""
from __future__ import annotations

import json
from pathlib import Path

from export import write_kineto_file, write_xspace_file
from scenarios_kineto import KINETO_SCENARIOS, kineto_scope
from scenarios_xla import XSPACE_SCENARIOS
from sim import GAP_MIN_NS
from truth import DEFINITIONS, ground_truth

ROOT = Path(__file__).resolve().parents[2]
OUT_DIR = ROOT / "testdata" / "synthetic"
LOGDIR = OUT_DIR / "logdir"
MANIFEST = OUT_DIR / "MANIFEST.json"


def _entry(name, fmt, rel_path, desc, gt, tl, extra=None):
    hosts = sorted({t.info["label"] for t in tl.tracks.values() if t.side == "host"})
    e = {"name": name, "path": rel_path, "format": fmt, "description": desc,
         "host_threads": hosts,
         "devices": gt["devices"],
         "expected_causes": sorted({g["cause"] for g in gt["gaps"]}),
         "steps": gt["steps"],
         "gaps": gt["gaps"],
         "whole_trace": gt["whole_trace"]}
    for k in ("launch_overhead_gaps", "annotation_device_time"):
        if k in gt:
            e[k] = gt[k]
    if extra:
        e.update(extra)
    return e


def build_small(verbose=True):
    entries = []
    for i, (name, fn) in enumerate(KINETO_SCENARIOS):
        sim, desc, _ = fn()
        ms = 1_795_400_000_000 + i * 61_000
        path = LOGDIR / name / f"worker0.{ms}.pt.trace.json"
        for old in (path.parent.glob("*.pt.trace.json*") if path.parent.exists() else ()):
            if old != path:
                old.unlink()
        t0 = 4_462_354_505_660_805 + i * 7_919_000_123
        write_kineto_file(sim, path, t0_ns=t0, base_ns=1_790_857_026_000_000_000)
        gt = ground_truth(sim.tl, sim.steps, annotation=kineto_scope)
        extra = {"annotation_definition": (
            "device ops launched (correlation) by host ops enclosed on the same thread by a "
            "user_annotation (record_function) other than ProfilerStep#N; per step; sum_ns "
            "= sum of op durations, union_ns = length of their union. Ops launched from the "
            "autograd thread have no enclosing annotation.")}
        entries.append(_entry(name, "kineto", str(path.relative_to(OUT_DIR)), desc, gt,
                              sim.tl, extra))
    for i, (name, fn) in enumerate(XSPACE_SCENARIOS):
        tl, steps, desc, extra = fn()
        run = f"2026_11_22_06_0{i}_00"
        path = LOGDIR / name / "plugins" / "profile" / run / "synthhost.xplane.pb"
        prof = path.parent.parent
        if prof.exists():
            for old in prof.rglob("*"):
                if old.is_file() and old != path:
                    old.unlink()
            for d in sorted(prof.iterdir()):
                if d.is_dir() and d != path.parent and not any(d.iterdir()):
                    d.rmdir()
        write_xspace_file(tl, path, extra["plane_order"], plane_stats=extra.get("plane_stats"),
                          metadata_events=extra.get("metadata_events", ()),
                          offset_ns=1_250_000 + i * 333_000,
                          profile_start_epoch_ns=1_795_400_000_000_000_000 + i * 10 ** 11)
        gt = ground_truth(tl, steps, device_steps=extra.get("device_steps"),
                          annotation=extra.get("scope"))
        ex = {}
        if "annotation_definition" in extra:
            ex["annotation_definition"] = extra["annotation_definition"]
        ex["step_source"] = "device Steps line" if extra.get("device_steps") else \
            "host train_step events (step_num, _r=1)"
        entries.append(_entry(name, "xspace", str(path.relative_to(OUT_DIR)), desc, gt, tl, ex))
    for e in entries:
        e["bytes"] = (OUT_DIR / e["path"]).stat().st_size
    manifest = {"about": "Synthetic traces with injected device idle gaps and their known "
                         "causes, written by testdata/generators/synthetic.py (fixed seeds; "
                         "rerunning rewrites identical bytes). Ground truth is computed by the "
                         "generator with plain interval arithmetic over the events it wrote.",
                "generator": "testdata/generators/synthetic.py",
                "gap_threshold_ns": GAP_MIN_NS,
                "definitions": DEFINITIONS,
                "files": entries}
    MANIFEST.write_text(dump_manifest(manifest))
    if verbose:
        total = 0
        for e in entries:
            total += e["bytes"]
            causes = {}
            for g in e["gaps"]:
                causes[g["cause"]] = causes.get(g["cause"], 0) + 1
            print(f"{e['path']}: {e['bytes']:,} bytes, "
                  f"{sum(d['events'] for d in e['devices'])} device events, gaps {causes}, "
                  f"duty {[round(v['duty_cycle'], 3) for v in e['whole_trace'].values()]}")
        print(f"total {total:,} bytes + MANIFEST.json {MANIFEST.stat().st_size:,} bytes")
    return entries


def dump_manifest(m) -> str:
    """Readable JSON with one gap (and one step) per line."""
    def enc(o, ind):
        pad = "  " * ind
        if isinstance(o, dict):
            if not o:
                return "{}"
            items = []
            for k, v in o.items():
                if k in ("gaps", "steps") and isinstance(v, list):
                    inner = ",\n".join(pad + "    " + json.dumps(x, ensure_ascii=False)
                                       for x in v)
                    items.append(f'{pad}  {json.dumps(k)}: [\n{inner}\n{pad}  ]' if v
                                 else f'{pad}  {json.dumps(k)}: []')
                else:
                    items.append(f"{pad}  {json.dumps(k)}: {enc(v, ind + 1)}")
            return "{\n" + ",\n".join(items) + "\n" + pad + "}"
        if isinstance(o, list) and o and any(isinstance(x, (dict, list)) for x in o):
            return "[\n" + ",\n".join(pad + "  " + enc(x, ind + 1) for x in o) + "\n" + pad + "]"
        return json.dumps(o, ensure_ascii=False)
    return enc(m, 0) + "\n"
