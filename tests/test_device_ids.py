"""Which accelerator a trace ran on where its name says too little (GUIDE §4 "Graph
replays, devices and formats"): ROCm's empty names, "AMD Radeon Graphics" and virtual
functions, its physical ordinals, NVIDIA parts by SMs and compute capability, and GPU
XSpace planes of JAX/XLA on ROCm and CUDA."""
from __future__ import annotations

import pytest

from tb_perfdiag.analysis.efficiency import device_ids
from tb_perfdiag.analysis.efficiency.peaks import device_peak
from tb_perfdiag.testing.kineto import A100, load_kineto
from tb_perfdiag.testing.xspace import XSpaceWriter, load_xspace

GiB = 2**30
# an MI300X as ROCm's Kineto writes it (vLLM's traces: an empty name)
MI300X = {"id": 0, "name": "", "totalGlobalMem": 206141652992, "computeMajor": 9,
          "computeMinor": 4, "maxThreadsPerBlock": 1024, "warpSize": 64, "numSms": 304}


@pytest.mark.parametrize("name, cc, units, gib, model, key", [
    ("", (9, 4), 304, 192, "AMD Instinct MI300X", "MI300X"),
    ("AMD Instinct MI300X VF", (9, 4), 304, 191.4, "AMD Instinct MI300X VF", "MI300X"),
    ("", (9, 4), 304, 256, "AMD Instinct MI325X", "MI325X"),
    ("", (9, 4), 228, 128, "AMD Instinct MI300A", "MI300A"),
    ("AMD Radeon Graphics", (9, 0), 104, 64, "AMD Instinct MI250 (one die) or MI210", "MI250"),
    ("AMD Radeon Graphics", (9, 0), 110, 64, "AMD Instinct MI250X (one die)", "MI250X"),
    ("", (9, 0), 120, 32, "AMD Instinct MI100", "MI100"),
    ("AMD Instinct MI355X", (9, 5), 256, 288, "AMD Instinct MI355X", "MI355X"),
])
def test_amd_parts_from_gfx_target_units_and_memory(name, cc, units, gib, model, key):
    props = dict(MI300X, name=name, computeMajor=cc[0], computeMinor=cc[1], numSms=units,
                 totalGlobalMem=int(gib * GiB))
    got = device_ids.from_properties(props)
    assert got.model == model and got.row is not None and got.row.key == key
    assert got.row.datasheet


def test_gfx950_without_a_clock_names_both_parts_and_no_peak():
    """An MI350X and an MI355X differ only in clock: Kineto writes none."""
    props = dict(MI300X, computeMinor=5, numSms=256, totalGlobalMem=288 * GiB)
    got = device_ids.from_properties(props)
    assert got.row is None and "MI350X" in got.missing and "MI355X" in got.missing
    assert "gfx950, 256 CUs, 288 GB" in got.missing and "clock" in got.missing


@pytest.mark.parametrize("cc, sms, gib, key", [
    ((9, 0), 132, 79.2, "H100 SXM"), ((9, 0), 132, 139.8, "H200 SXM"),
    ((9, 0), 114, 79.2, "H100 PCIe"), ((8, 0), 108, 79.2, "A100 SXM 80GB"),
    ((8, 0), 108, 39.4, "A100 40GB"), ((10, 0), 148, 178, "B200"), ((8, 9), 58, 22, "L4"),
])
def test_nvidia_parts_from_sms_and_compute_capability(cc, sms, gib, key):
    props = dict(A100, name="", computeMajor=cc[0], computeMinor=cc[1], numSms=sms,
                 totalGlobalMem=int(gib * GiB))
    got = device_ids.from_properties(props)
    assert got.row is not None and got.row.key == key and got.model.startswith("NVIDIA")


def test_an_unknown_part_says_what_the_trace_gives():
    props = dict(A100, name="", computeMajor=8, computeMinor=7, numSms=12,
                 totalGlobalMem=16 * GiB)
    got = device_ids.from_properties(props)
    assert got.row is None
    assert "an unnamed device (compute capability 8.7, 12 SMs, 16 GB)" in got.missing
    assert "the device" not in got.missing


def _kernel(device):
    return [{"ph": "X", "cat": "kernel", "name": "Cijk_Ailk_Bljk_BBS_BH_MT128x128x64",
             "pid": device, "tid": 7, "ts": 10.0, "dur": 5.0,
             "args": {"device": device, "stream": 7, "correlation": 1}}]


def test_one_entry_describes_the_device_on_its_physical_ordinal():
    """ROCm lists its one visible device as id 0; the kernels run on device 2."""
    tr = load_kineto(_kernel(2), deviceProperties=[MI300X])
    p = device_peak(tr, 0, "bf16")
    assert p.device_model == "AMD Instinct MI300X" and p.source == "datasheet:MI300X"
    assert p.flops_per_s == pytest.approx(1307.4e12) and p.bytes_per_s == pytest.approx(5.3e12)
    assert p.identified_by == "gfx942, 304 CUs, 192 GB"


def test_entries_of_one_part_describe_a_device_none_of_them_numbers():
    tr = load_kineto(_kernel(9), deviceProperties=[dict(MI300X, id=i) for i in range(8)])
    assert device_peak(tr, 0, "bf16").source == "datasheet:MI300X"


def test_entries_of_different_parts_and_none_of_its_id_say_so():
    props = [dict(MI300X, id=0), dict(MI300X, id=1, numSms=228, totalGlobalMem=128 * GiB)]
    p = device_peak(load_kineto(_kernel(5), deviceProperties=props), 0, "bf16")
    assert p.flops_per_s is None and "none is device 5" in p.missing and not p.device_model


def test_a_trace_without_properties_says_nothing_identifies_it():
    p = device_peak(load_kineto(_kernel(0)), 0, "bf16")
    assert p.flops_per_s is None and "no deviceProperties" in p.missing
    assert "the device" not in p.missing.replace("identifies the device", "")


def _plane(stats):
    w = XSpaceWriter()
    gpu = w.plane("/device:GPU:0", id=1, stats=stats)
    gpu.event(gpu.line(7, "Stream #7", 0), "Cijk_gemm", 0, 10)
    return load_xspace(w)


def test_rocm_plane_named_by_its_gfx_target_and_units():
    """XLA's ROCm tracer: vendor AMD, the agent name (gfx942), its CUs, memory, clock."""
    tr = _plane([("device_vendor", "s", "AMD"), ("gpu_device_name", "s", "gfx942"),
                 ("core_count", "u", 304), ("clock_rate", "u", 2_100_000),
                 ("memory_size", "u", 192 * GiB), ("compute_cap_major", "u", 9),
                 ("compute_cap_minor", "u", 4)])
    p = device_peak(tr, 0, "bf16")
    assert p.device_model == "AMD Instinct MI300X" and p.source == "datasheet:MI300X"
    assert p.identified_by.startswith("gfx942, 304 CUs")


def test_rocm_gfx950_plane_told_apart_by_its_clock():
    base = [("device_vendor", "s", "AMD"), ("gpu_device_name", "s", "gfx950"),
            ("core_count", "u", 256), ("memory_size", "u", 288 * GiB),
            ("compute_cap_major", "u", 9), ("compute_cap_minor", "u", 5)]
    fast = device_peak(_plane(base + [("clock_rate", "u", 2_400_000)]), 0, "bf16")
    slow = device_peak(_plane(base + [("clock_rate", "u", 2_200_000)]), 0, "bf16")
    assert (fast.source, slow.source) == ("datasheet:MI355X", "datasheet:MI350X")
    assert fast.flops_per_s == pytest.approx(2516.6e12)


def test_cuda_plane_is_named_and_keeps_its_own_clock():
    tr = _plane([("device_vendor", "s", "Nvidia"), ("core_count", "u", 132),
                 ("clock_rate", "u", 1_830_000), ("memory_size", "u", 85_000_000_000),
                 ("memory_bandwidth", "u", 3_350_000_000_000),
                 ("compute_cap_major", "u", 9), ("compute_cap_minor", "u", 0)])
    p = device_peak(tr, 0, "bf16")
    assert p.device_model == "NVIDIA H100 SXM"
    assert p.source.startswith("computed from the plane's 132 SMs")
    assert p.flops_per_s == pytest.approx(989.4e12, rel=0.01)
