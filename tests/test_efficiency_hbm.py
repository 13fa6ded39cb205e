"""Bytes by memory space: a TPU op's ``memory_access_breakdown`` (XLA's bytes per memory
space) read into ``OpCosts.hbm_bytes``/``onchip_bytes``, and the roofline counting HBM
bytes against the HBM bandwidth where the trace has the split (as xprof's roofline
does), all bytes where it does not."""
from __future__ import annotations

import os

import numpy as np
import pytest

from tb_perfdiag.analysis.diagnosis import diagnose_trace
from tb_perfdiag.analysis.efficiency.costs import op_costs
from tb_perfdiag.render.json import diagnosis_json
from tb_perfdiag.testing.xspace import U64, XSpaceWriter, load_xspace, memory_breakdown

from conftest import shared_path

TPU = ("public", "xprof", "xprof", "convert", "test_xplanes", "tpu_inference_2.xplane.pb")
READ, WRITE = 1, 2
HBM, VMEM = 1, 3
BW = 1640e9                                   # the plane's HBM bandwidth, bytes/s
N = 10


def _trace(split=True):
    """N × (a fusion: 4000 FLOPs, 3000 bytes, of which 1000 read and 1000 written in HBM
    and 1000 read from VMEM; an async copy start: 500 bytes, none in any space listed)."""
    w = XSpaceWriter()
    tpu = w.plane("/device:TPU:0", id=1, stats=[("peak_teraflops_per_second", "d", 918.0),
                                                 ("peak_hbm_bw_gigabytes_per_second", "d", BW / 1e9),
                                                 ("device_type_string", "s", "TPU v6 Lite")])
    ops = tpu.line(1, "XLA Ops", timestamp_ns=0)

    def md(fl, by, cat, accesses):
        got = [("program_id", "u", U64(1)), ("hlo_category", "s", cat), ("flops", "u", fl),
               ("model_flops", "u", fl), ("bytes_accessed", "u", by)]
        if split:
            got.append(("memory_access_breakdown", "b", memory_breakdown(*accesses)))
        return got
    t = 0
    for _ in range(N):
        tpu.event(ops, "%fusion.1 = bf16[32,32]{1,0} fusion(bf16[32,32] %p)", t, 1_000_000,
                  display="fusion.1", md_stats=md(4000, 3000, "loop fusion", [
                      (READ, HBM, 1000), (WRITE, HBM, 1000), (READ, VMEM, 1000)]))
        tpu.event(ops, "%copy-start.1 = (bf16[32,32]{1,0}, u32[]) copy-start(bf16[32,32] %p)",
                  t + 2_000_000, 1_000_000, display="copy-start.1",
                  md_stats=md(0, 500, "copy-start", []))
        t += 5_000_000
    return load_xspace(w)


def test_breakdown_splits_an_ops_bytes_by_memory_space():
    tr = _trace()
    c = op_costs(tr, tr.activity_of(0))
    names = np.array([tr.event_name(int(e)) for e in c.event])
    fus = names == "fusion.1"
    assert fus.sum() == N and (~fus).sum() == N
    assert (c.bytes[fus] == 3000).all() and (c.hbm_bytes[fus] == 2000).all()
    assert (c.onchip_bytes[fus] == 1000).all()
    # an empty breakdown: XLA places none of its bytes in HBM or on chip
    assert (c.bytes[~fus] == 500).all() and (c.hbm_bytes[~fus] == 0).all()
    assert (c.onchip_bytes[~fus] == 0).all()


def test_no_breakdown_no_split():
    tr = _trace(split=False)
    c = op_costs(tr, tr.activity_of(0))
    assert c.known.all() and np.isnan(c.hbm_bytes).all() and np.isnan(c.onchip_bytes).all()


def _rows(doc):
    return {o["name"]: o["roofline"] for o in doc["device_ops"]["devices"][0]["ops"]}


def test_roofline_counts_hbm_bytes_against_hbm_bandwidth_where_split():
    diag = diagnose_trace(_trace())
    doc = diagnosis_json(diag)
    e = doc["devices"][0]["efficiency"]
    assert e["bytes"] == N * 3500 and e["hbm_bytes"] == N * 2000 and e["onchip_bytes"] == N * 1000
    rf = e["roofline"]
    assert rf["memory_space"] == "hbm" and rf["bound"] == "memory"
    assert rf["intensity"] == pytest.approx(N * 4000 / (N * 2000))
    a, b = diag.devices.window(0)
    assert rf["efficiency"] == pytest.approx(N * 2000 / ((b - a) * 1e-12) / BW, rel=1e-9)
    rows = _rows(doc)
    f = rows["fusion.1"]
    assert f["memory_space"] == "hbm" and f["hbm_bytes"] == N * 2000 and f["bytes"] == N * 3000
    assert f["intensity"] == pytest.approx(2.0)
    # bytes/s over the group's summed op time (N × 1 µs): HBM bytes
    assert f["bytes_per_s"] == pytest.approx(N * 2000 / (N * 1e-6))
    assert f["efficiency"] == pytest.approx(2000 / 1e-6 / BW)
    # a breakdown that lists no access: xprof's per-op roofline counts all the op's bytes
    # against HBM (its rule for an op without one); the device's sum counts the listed ones
    cs = rows["copy-start.1"]
    assert cs["hbm_bytes"] == N * 500 and cs["intensity"] == 0 and cs["bound"] == "memory"
    assert cs["bound_by"] == "hbm" and cs["efficiency"] == pytest.approx(500 / 1e-6 / BW)


def test_roofline_counts_all_bytes_without_split():
    diag = diagnose_trace(_trace(split=False))
    doc = diagnosis_json(diag)
    e = doc["devices"][0]["efficiency"]
    assert e["hbm_bytes"] is None and e["onchip_bytes"] is None
    rf = e["roofline"]
    assert rf["memory_space"] == "all"
    assert rf["intensity"] == pytest.approx(4000 / 3500)
    a, b = diag.devices.window(0)
    assert rf["efficiency"] == pytest.approx(N * 3500 / ((b - a) * 1e-12) / BW, rel=1e-9)
    f = _rows(doc)["fusion.1"]
    assert f["memory_space"] == "all" and f["hbm_bytes"] is None
    assert f["intensity"] == pytest.approx(4000 / 3000)


# tpu_inference_2, by hand from its raw stats (each op's flops, bytes_accessed and
# memory_access_breakdown on its metadata × its events on the "XLA Ops" line), G = 5 GiB:
# per chip and step (100 steps) three broadcast_add_fusions read and write G in HBM
# (1.25 GiB FLOPs each), copy-done/.2/.4 write G and copy-start.1/.3/.5 read G there; the
# other copy ops list no HBM access but G of bytes each; three all-reduces read and write
# G (1.25 GiB FLOPs each); TPU 0 also runs one broadcast.2 (writes G).
G = 5 * 2**30
HAND = {0: dict(hbm=1207 * G, all=1807 * G), 1: dict(hbm=1206 * G, all=1806 * G)}
FLOPS = 303 * 1.25 * 2**30                   # per chip: 406.68 GFLOP
# what ``xprof get_roofline_model`` (xprof 2.24.2) says of the file's program, all chips
XPROF_HBM_SHARE, XPROF_INTENSITY = 0.0435, 0.0628


def test_real_tpu_trace_hbm_roofline_by_hand():
    path = shared_path(*TPU)
    if not os.path.exists(path):
        pytest.skip("../shared/traces is absent (the public TPU capture)")
    import tb_perfdiag
    diag = tb_perfdiag.diagnose(tb_perfdiag.load(path))
    doc = diagnosis_json(diag)
    hbm = win = 0.0
    for d, dev in enumerate(doc["devices"]):
        e = dev["efficiency"]
        want = HAND[min(d, 1)]
        assert e["flops"] == pytest.approx(FLOPS, rel=1e-12)
        assert e["bytes"] == want["all"] and e["hbm_bytes"] == want["hbm"]
        assert e["onchip_bytes"] == 0
        rf = e["roofline"]
        assert rf["memory_space"] == "hbm" and rf["bound"] == "memory"
        assert rf["intensity"] == pytest.approx(FLOPS / want["hbm"], rel=1e-9)
        assert rf["ridge"] == pytest.approx(918e12 / 1637.993152512e9, rel=1e-9)
        a, b = diag.devices.window(d)
        assert rf["efficiency"] == pytest.approx(want["hbm"] / ((b - a) * 1e-12) /
                                                 e["peak_bytes_per_s"], rel=1e-9)
        hbm += want["hbm"]
        win += (b - a) * 1e-12
    # the chips together (xprof's program level: all cores' bytes over all cores' time)
    assert hbm / win / 1637.993152512e9 == pytest.approx(XPROF_HBM_SHARE, rel=0.02)
    assert 4 * FLOPS / hbm == pytest.approx(XPROF_INTENSITY, rel=0.02)
