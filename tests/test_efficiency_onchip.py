"""The roofline against the on-chip roofs: a TPU op's bytes per memory space and
direction (its ``memory_access_breakdown``) judged, as xprof's roofline judges them,
against compute, HBM and the plane's CMEM and VMEM read and write bandwidths — bound by
the largest utilisation, the share of roofline the largest of those xprof counts."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tb_perfdiag.analysis.diagnosis import diagnose_trace
from tb_perfdiag.analysis.efficiency.costs import op_costs
from tb_perfdiag.render.efficiency import text_lines
from tb_perfdiag.render.json import diagnosis_json
from tb_perfdiag.testing.xspace import U64, XSpaceWriter, load_xspace, memory_breakdown

from conftest import shared_path

TPU = ("public", "xprof", "xprof", "convert", "test_xplanes", "tpu_inference_2.xplane.pb")
READ, WRITE = 1, 2
HBM, CMEM, VMEM = 1, 2, 3
PEAK, HBM_BW, VMEM_RD, VMEM_WR = 918e12, 1638e9, 23296e9, 16128e9
CMEM_RD, CMEM_WR = 8000e9, 4000e9
DUR = 1_000_000                                # ps: every op runs 1 µs
STEPS = 5
# name: (category, FLOPs, accesses (direction, space, bytes))
VMEM_OPS = {
    # VMEM writes at 8 MB/µs = 49.6 % of 16.128 TB/s: above its VMEM reads (38.6 %),
    # HBM (30.5 %) and compute (10.9 %)
    "fusion.w": ("loop fusion", 100_000_000,
                 [(READ, HBM, 500_000), (READ, VMEM, 9_000_000), (WRITE, VMEM, 8_000_000)]),
    # VMEM reads at 20 MB/µs = 85.9 % of 23.296 TB/s
    "fusion.r": ("loop fusion", 10_000_000,
                 [(READ, HBM, 300_000), (WRITE, HBM, 200_000), (READ, VMEM, 20_000_000),
                  (WRITE, VMEM, 1_000_000)]),
    # 800 MFLOP/µs = 87.1 % of 918 TFLOP/s, above its HBM bytes (61.1 %)
    "convolution.c": ("convolution", 800_000_000,
                      [(READ, HBM, 1_000_000), (READ, VMEM, 2_000_000), (WRITE, VMEM, 1_000_000)]),
}
# on a device with CMEM (and its VMEM roofs given, no merged VMEM)
CMEM_OPS = {
    # CMEM reads at 6 MB/µs = 75 % of 8 TB/s
    "fusion.c": ("loop fusion", 1_000_000, [(READ, HBM, 100_000), (READ, CMEM, 6_000_000),
                                            (WRITE, CMEM, 1_000_000)]),
    # VMEM writes at 12 MB/µs = 74.4 %: what bounds it, but xprof's share counts the CMEM
    # roofs alone on a device with CMEM: its share is its HBM one, 500 kB/µs = 30.5 %
    "fusion.v": ("loop fusion", 1_000_000, [(READ, HBM, 500_000), (WRITE, VMEM, 12_000_000)]),
}


def _writer(ops: dict, cmem: bool = False) -> XSpaceWriter:
    """A TPU plane with its roofs (v6e-like: merged VMEM; ``cmem``: CMEM roofs, VMEM
    ones given but not merged) and STEPS × the ops, 1 µs each, 0.1 µs apart."""
    w = XSpaceWriter()
    tpu = w.plane("/device:TPU:0", id=1, stats=[
        ("peak_teraflops_per_second", "d", PEAK / 1e12),
        ("peak_hbm_bw_gigabytes_per_second", "d", HBM_BW / 1e9),
        ("peak_cmem_rd_bw_gigabytes_per_second", "d", CMEM_RD / 1e9 if cmem else 0.0),
        ("peak_cmem_wr_bw_gigabytes_per_second", "d", CMEM_WR / 1e9 if cmem else 0.0),
        ("peak_vmem_rd_bw_gigabytes_per_second", "d", VMEM_RD / 1e9),
        ("peak_vmem_wr_bw_gigabytes_per_second", "d", VMEM_WR / 1e9),
        ("has_merged_vmem", "i", 0 if cmem else 1), ("has_megacore", "i", 0),
        ("device_type_string", "s", "TPU v4" if cmem else "TPU v6 Lite")])
    mods = tpu.line(1, "XLA Modules", timestamp_ns=0)
    line = tpu.line(2, "XLA Ops", timestamp_ns=0)
    span = len(ops) * 1_100_000
    for s in range(STEPS):
        t = s * (span + 1_000_000)
        tpu.event(mods, "jit_f(1)", t, span, md_stats=[("program_id", "u", U64(1))])
        for k, (name, (cat, fl, acc)) in enumerate(ops.items()):
            by = sum(n for _, _, n in acc)
            tpu.event(line, f"%{name} = bf16[32,32]{{1,0}} fusion(bf16[32,32] %p)", t, DUR,
                      display=name,
                      stats=[("device_offset_ps", "u", t), ("device_duration_ps", "u", DUR)],
                      md_stats=[("program_id", "u", U64(1)), ("symbol_id", "u", U64(k + 1)),
                                ("hlo_category", "s", cat), ("flops", "u", fl),
                                ("model_flops", "u", fl), ("bytes_accessed", "u", by),
                                ("memory_access_breakdown", "b", memory_breakdown(*acc))])
            t += 1_100_000
    return w


def _by_hand(cat_fl_acc, cmem: bool):
    """(utilisation per resource, bound_by, share) of one op over 1 µs, by hand."""
    _cat, fl, acc = cat_fl_acc
    s = lambda sp, d=None: sum(n for o, p, n in acc if p == sp and (d is None or o == d))  # noqa: E731
    t = DUR * 1e-12
    u = {"compute": fl / t / PEAK, "hbm": s(HBM) / t / HBM_BW,
         "vmem_read": s(VMEM, READ) / t / VMEM_RD, "vmem_write": s(VMEM, WRITE) / t / VMEM_WR}
    if cmem:
        u.update(cmem_read=s(CMEM, READ) / t / CMEM_RD, cmem_write=s(CMEM, WRITE) / t / CMEM_WR)
    counted = ["compute", "hbm"] + (["cmem_read", "cmem_write"] if cmem else
                                    ["vmem_read", "vmem_write"])
    return u, max(u, key=u.get), max(u[k] for k in counted)


def _rows(doc):
    return {o["name"]: o["roofline"] for o in doc["device_ops"]["devices"][0]["ops"]}


def test_breakdown_keeps_bytes_per_space_and_direction():
    tr = load_xspace(_writer({**VMEM_OPS, **CMEM_OPS}))
    c = op_costs(tr, tr.activity_of(0))
    names = np.array([tr.event_name(int(e)) for e in c.event])
    for name, (_cat, _fl, acc) in {**VMEM_OPS, **CMEM_OPS}.items():
        at = names == name
        assert at.sum() == STEPS
        for attr, space, d in (("cmem_read_bytes", CMEM, READ), ("cmem_write_bytes", CMEM, WRITE),
                               ("vmem_read_bytes", VMEM, READ), ("vmem_write_bytes", VMEM, WRITE)):
            want = sum(n for o, p, n in acc if p == space and o == d)
            assert (getattr(c, attr)[at] == want).all(), (name, attr)
        assert (c.onchip_bytes[at] == sum(n for _, p, n in acc if p != HBM)).all()
    # held once per op, not as a column over events
    assert c.held("vmem_write_bytes").shape[0] < len(c)


@pytest.mark.parametrize("cmem", [False, True])
def test_op_groups_bound_by_and_share_by_hand(cmem):
    ops = CMEM_OPS if cmem else VMEM_OPS
    doc = diagnosis_json(diagnose_trace(load_xspace(_writer(ops, cmem))))
    rows = _rows(doc)
    for name, op in ops.items():
        u, bound_by, share = _by_hand(op, cmem)
        r = rows[name]
        assert r["bound_by"] == bound_by, name
        assert r["bound"] == ("compute" if bound_by == "compute" else "memory")
        assert r["efficiency"] == pytest.approx(share, rel=1e-9), name
        for k, v in u.items():
            assert r["utilisation"][k] == pytest.approx(v, rel=1e-9), (name, k)
        # the attainable rate: the achieved one over the share (xprof's optimal FLOP rate)
        assert r["attainable_flops_per_s"] == pytest.approx(op[1] / 1e-6 / share, rel=1e-9)
    want = {"fusion.w": "vmem_write", "fusion.r": "vmem_read", "convolution.c": "compute",
            "fusion.c": "cmem_read", "fusion.v": "vmem_write"}
    assert {n: rows[n]["bound_by"] for n in ops} == {n: want[n] for n in ops}
    if cmem:
        # bound by VMEM writes, its share left to the roofs xprof counts with CMEM: HBM
        assert rows["fusion.v"]["efficiency"] == pytest.approx(rows["fusion.v"]["utilisation"]["hbm"])


def test_device_roofline_and_text_name_the_bounding_roof():
    diag = diagnose_trace(load_xspace(_writer(VMEM_OPS)))
    rf = diagnosis_json(diag)["devices"][0]["efficiency"]["roofline"]
    a, b = diag.devices.window(0)
    t = (b - a) * 1e-12
    vr = STEPS * sum(n for op in VMEM_OPS.values() for o, p, n in op[2] if p == VMEM and o == READ)
    vw = STEPS * sum(n for op in VMEM_OPS.values() for o, p, n in op[2] if p == VMEM and o == WRITE)
    hbm = STEPS * sum(n for op in VMEM_OPS.values() for _, p, n in op[2] if p == HBM)
    fl = STEPS * sum(op[1] for op in VMEM_OPS.values())
    assert rf["onchip_bytes_by_space"] == {"cmem_read": 0, "cmem_write": 0, "vmem_read": vr,
                                           "vmem_write": vw}
    assert rf["utilisation"]["vmem_read"] == pytest.approx(vr / t / VMEM_RD, rel=1e-9)
    assert rf["utilisation"]["vmem_write"] == pytest.approx(vw / t / VMEM_WR, rel=1e-9)
    assert rf["utilisation"]["hbm"] == pytest.approx(hbm / t / HBM_BW, rel=1e-9)
    assert rf["utilisation"]["compute"] == pytest.approx(fl / t / PEAK, rel=1e-9)
    assert rf["bound_by"] == "vmem_read" and rf["bound"] == "memory"
    assert rf["efficiency"] == pytest.approx(vr / t / VMEM_RD, rel=1e-9)
    assert rf["onchip_peaks_bytes_per_s"]["vmem_write"] == pytest.approx(VMEM_WR)
    assert rf["onchip_peaks_bytes_per_s"]["cmem_read"] is None
    line = text_lines(diag)[0]
    from tb_perfdiag.render.efficiency import pct
    assert f"VMEM-read-bound, {pct(rf['efficiency'])} of roofline" in line


def test_no_split_no_onchip_roofs():
    """A trace without a breakdown: no on-chip figures; bound by compute or memory."""
    from test_efficiency_hbm import _trace
    doc = diagnosis_json(diagnose_trace(_trace(split=False)))
    rf = doc["devices"][0]["efficiency"]["roofline"]
    assert rf["onchip_bytes_by_space"] is None and set(rf["utilisation"]) == {"compute", "hbm"}
    assert rf["bound_by"] == "hbm" and rf["memory_space"] == "all"
    line = text_lines(diagnose_trace(_trace(split=False)))[0]
    assert "memory-bound" in line and "HBM-bound" not in line


def _xprof(tmp_path, src: str = "", raw: bytes = b""):
    """``xprof get_roofline_model`` on a run dir holding the file (skip without the CLI)."""
    pytest.importorskip("xprof")
    cli = os.path.join(os.path.dirname(sys.executable), "xprof")
    if not os.path.exists(cli):
        cli = shutil.which("xprof")
    if not cli:
        pytest.skip("the xprof CLI is not installed")
    run = tmp_path / "logs" / "run" / "plugins" / "profile" / "s1"
    run.mkdir(parents=True)
    if src:
        os.symlink(src, run / "host0.xplane.pb")
    else:
        (run / "host0.xplane.pb").write_bytes(raw)
    got = subprocess.run([cli, "get_roofline_model", str(tmp_path / "logs" / "run"),
                          "--top_n", "100", "--bypass_cache"],
                         capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert got.returncode == 0, got.stderr[-2000:]
    return json.loads(got.stdout[got.stdout.index("{"):])


_XPROF_BOUND = {"Compute": "compute", "HBM": "hbm", "CMEM Read": "cmem_read",
                "CMEM Write": "cmem_write", "VMEM Read": "vmem_read", "VMEM Write": "vmem_write"}


def _pct(s: str) -> float:
    return float(s.rstrip("%")) / 100


@pytest.mark.parametrize("cmem", [False, True])
def test_generated_capture_agrees_with_xprof(tmp_path, cmem):
    ops = CMEM_OPS if cmem else VMEM_OPS
    w = _writer(ops, cmem)
    theirs = _xprof(tmp_path, raw=w.to_bytes(hostnames=["host0"]))
    diag = diagnose_trace(load_xspace(w))
    doc = diagnosis_json(diag)
    rows = _rows(doc)
    assert {o["name"] for o in theirs["top_operations"]} == set(ops)
    for o in theirs["top_operations"]:
        r = rows[o["name"]]
        assert r["bound_by"] == _XPROF_BOUND[o["bound_by"]], o["name"]
        assert r["efficiency"] == pytest.approx(_pct(o["roofline_efficiency_percent"]), abs=1e-4)
        assert r["utilisation"]["compute"] == pytest.approx(_pct(o["compute_efficiency_percent"]),
                                                            abs=1e-4)
    prog, rf = theirs["program"], doc["devices"][0]["efficiency"]["roofline"]
    assert rf["bound_by"] == _XPROF_BOUND[prog["bound_by"]]
    # its program time is the ops' span, ours the device's window (the module's end too)
    assert rf["efficiency"] == pytest.approx(_pct(prog["roofline_efficiency_percent"]), rel=0.02)


def test_real_tpu_trace_op_groups_agree_with_xprof(tmp_path):
    """Every op group of tpu_inference_2: xprof's bound_by, and its share of roofline
    within 2 % where our op time is xprof's (within 1 %); everywhere the bytes its share
    stands for (share × time × bandwidth) within 2 %.  Where the times differ, xprof timed
    the ops by their ``device_duration_ps`` stat, not the events' durations we read."""
    src = shared_path(*TPU)
    if not os.path.exists(src):
        pytest.skip("../shared/traces is absent (the public TPU capture)")
    theirs = _xprof(tmp_path, src=src)
    import tb_perfdiag
    diag = tb_perfdiag.diagnose(tb_perfdiag.load(src))
    doc = diagnosis_json(diag)
    bw = doc["devices"][0]["efficiency"]["peak_bytes_per_s"]
    ours: dict = {}
    for dev in doc["device_ops"]["devices"]:
        for o in dev["ops"]:
            r = o["roofline"]
            if r and (r.get("bound_by") or r.get("above_roof")):
                got = ours.setdefault(o["name"], {"t": 0, "hbm": 0, "bound_by": set(),
                                                  "above_roof": False})
                got["t"] += o["total_ns"] * 1e-9
                got["hbm"] += r["hbm_bytes"]
                got["above_roof"] |= bool(r.get("above_roof"))
                if r.get("bound_by"):
                    got["bound_by"].add(r["bound_by"])
    same_time = 0
    for o in theirs["top_operations"]:
        mine = ours[o["name"]]
        # an async copy's bytes over its own event's time can exceed the roof (it moves
        # them outside that time): no share and no bound said then (issue 63); its bytes
        # still agree below
        if not mine["above_roof"]:
            assert mine["bound_by"] == {_XPROF_BOUND[o["bound_by"]]}, o["name"]
        t = o["total_self_time_ms"] * 1e-3
        share = _pct(o["roofline_efficiency_percent"])
        if t > 1e-3:          # the µs ones have too few digits in the CLI's ms
            assert mine["hbm"] == pytest.approx(share * t * bw, rel=0.02), o["name"]
            if mine["t"] == pytest.approx(t, rel=0.01) and not mine["above_roof"]:
                same_time += 1
                assert mine["hbm"] / mine["t"] / bw == pytest.approx(share, rel=0.02), o["name"]
    assert same_time >= 5
    for d in doc["devices"]:
        assert d["efficiency"]["roofline"]["bound_by"] == _XPROF_BOUND[theirs["program"]["bound_by"]]


@pytest.mark.parametrize("cmem", [False, True])
def test_onchip_figures_match_schema(cmem):
    import jsonschema
    from conftest import ROOT
    schema = json.load(open(os.path.join(ROOT, "tb_perfdiag", "schema", "diagnosis.schema.json")))
    diag = diagnose_trace(load_xspace(_writer(CMEM_OPS if cmem else VMEM_OPS, cmem)))
    jsonschema.validate(diagnosis_json(diag), schema)


def test_browser_names_the_onchip_roof(tmp_path, artifacts_dir):
    """The page's op table and roofline tooltip say what bounds each group."""
    pytest.importorskip("playwright.sync_api")
    import urllib.parse
    from conftest import IN_CI, TensorBoard
    if not os.path.exists("/usr/bin/chromium"):
        if IN_CI:
            pytest.fail("/usr/bin/chromium is required in CI")
        pytest.skip("/usr/bin/chromium is absent (apt-get install chromium)")
    from test_browser import open_diagnose, wait_loaded
    from playwright.sync_api import sync_playwright
    folder = tmp_path / "tpu_vmem" / "plugins" / "profile" / "2026_12_01_00_00_00"
    folder.mkdir(parents=True)
    (folder / "tpuhost.xplane.pb").write_bytes(_writer(VMEM_OPS).to_bytes())
    tb = TensorBoard(tmp_path)
    try:
        with sync_playwright() as p:
            br = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            page = br.new_page()
            run = "tpu_vmem/2026_12_01_00_00_00"
            frame = open_diagnose(page, tb, "&p.perfdiag.run=" + urllib.parse.quote(run))
            wait_loaded(frame, run)
            frame.wait_for_selector("#pd-roofline .pd-roof-point")
            cells = frame.locator(".dop-roof").all_inner_texts()
            assert any(c == "VMEM-write · 50%" for c in cells), cells
            assert any(c == "VMEM-read · 86%" for c in cells), cells
            assert any(c == "compute · 87%" for c in cells), cells
            tips = [frame.locator("#pd-roofline .pd-roof-point title").nth(i).text_content()
                    for i in range(frame.locator("#pd-roofline .pd-roof-point").count())]
            w = [t for t in tips if t.startswith("fusion.w")]
            assert w and "VMEM-write-bound" in w[0] and "utilisation: VMEM-write 50%, VMEM-read 39%" in w[0]
            assert "purple: bound by an on-chip memory" in frame.inner_text("#pd-roofline-key")
            frame.locator("#pd-roofline").screenshot(path=os.path.join(artifacts_dir, "roofline-vmem.png"))
            br.close()
    finally:
        tb.stop()
