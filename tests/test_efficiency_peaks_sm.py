"""Peaks of NVIDIA GPUs no datasheet row names: SMs × clock × dense FLOPs per SM per
clock of the compute capability (``analysis.efficiency.sm_rates``), from a GPU XSpace
plane's properties or Kineto's ``deviceProperties`` (no clock there: the boost clock of
the nearest known part of that compute capability, named in ``peak_source``)."""
from __future__ import annotations

import pytest

from tb_perfdiag.analysis.efficiency.peaks import device_peak
from tb_perfdiag.testing.kineto import A100, load_kineto
from tb_perfdiag.testing.xspace import XSpaceWriter, load_xspace


def _plane(sms, mhz, cc, bw=900_000_000_000, name=""):
    w = XSpaceWriter()
    st = [("clock_rate", "u", int(mhz * 1000)), ("core_count", "u", sms),
          ("memory_bandwidth", "u", bw), ("compute_cap_major", "u", cc[0]),
          ("compute_cap_minor", "u", cc[1])]
    if name:
        st.append(("device_type_string", "s", name))
    gpu = w.plane("/device:GPU:0", id=1, stats=st)
    gpu.event(gpu.line(7, "Stream #7", 0), "sm80_xmma_gemm", 0, 10)
    return load_xspace(w)


# the datasheets' marketed figures, reproduced from SMs × boost clock × per-SM rates
@pytest.mark.parametrize("sms, mhz, cc, dtype, tflops", [
    (80, 1530, (7, 0), "fp32", 15.7), (80, 1530, (7, 0), "fp16", 125),        # V100 SXM2
    (108, 1410, (8, 0), "fp32", 19.5), (108, 1410, (8, 0), "fp16", 312),      # A100
    (108, 1410, (8, 0), "bf16", 312), (108, 1410, (8, 0), "tf32", 156),
    (132, 1830, (9, 0), "bf16", 989.4), (132, 1830, (9, 0), "fp8", 1978.9),   # H100 SXM
    (40, 1590, (7, 5), "fp16", 65), (40, 1590, (7, 5), "fp32", 8.1),          # T4
    (72, 1695, (8, 6), "fp16", 125), (72, 1695, (8, 6), "fp32", 31.2),        # A10
    (58, 2040, (8, 9), "fp8", 242.5), (58, 2040, (8, 9), "bf16", 121),        # L4
])
def test_plane_peak_reproduces_the_datasheet(sms, mhz, cc, dtype, tflops):
    p = device_peak(_plane(sms, mhz, cc), 0, dtype)
    assert p.flops_per_s == pytest.approx(tflops * 1e12, rel=0.01)
    assert p.dtype == dtype and p.bytes_per_s == 900e9
    assert p.source.startswith(f"computed from the plane's {sms} SMs × {mhz / 1000:.3g} GHz "
                               f"(cc {cc[0]}.{cc[1]}")


def test_datasheet_row_wins_where_the_name_matches():
    # a plane that names its part: the marketed figure, not SMs × clock
    p = device_peak(_plane(132, 1980, (9, 0), name="NVIDIA H100 80GB HBM3"), 0, "bf16")
    assert p.source == "datasheet:H100 SXM" and p.flops_per_s == pytest.approx(989.4e12)


def test_plane_peak_without_a_rate_for_the_dtype_says_why():
    p = device_peak(_plane(80, 1530, (7, 0)), 0, "bf16")         # Volta has no bf16 path
    assert p.flops_per_s is None and "7.0" in p.missing and p.bytes_per_s == 900e9
    p = device_peak(_plane(80, 1530, (7, 0)), 0, "tf32")         # nor TF32: the fp32 rate
    assert p.flops_per_s == pytest.approx(15.67e12, rel=1e-3)
    p = device_peak(_plane(10, 1000, (5, 2)), 0, "fp32")         # Maxwell: not in the table
    assert p.flops_per_s is None and "5.2" in p.missing


def _kineto(props):
    ev = [{"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn", "pid": 0, "tid": 7,
           "ts": 10.0, "dur": 5.0, "args": {"device": 0, "stream": 7, "correlation": 1}}]
    return load_kineto(ev, deviceProperties=[props])


def test_kineto_unknown_name_peak_from_its_sms_and_a_known_parts_clock():
    # an RTX A6000 (GA102, 84 SMs): not in the table; the A40's boost clock (84 SMs)
    tr = _kineto(dict(A100, name="NVIDIA RTX A6000", computeMajor=8, computeMinor=6,
                      numSms=84))
    p = device_peak(tr, 0, "fp32")
    assert p.flops_per_s == pytest.approx(84 * 1.74e9 * 256)
    assert p.source.startswith("computed from deviceProperties' 84 SMs × 1.74 GHz (cc 8.6")
    assert "A40's boost clock" in p.source and "no clock" in p.source
    assert p.bytes_per_s is None and p.device_model == "NVIDIA RTX A6000"
    # an H100 name the table matches keeps the datasheet's figure
    tr = _kineto(dict(A100, name="NVIDIA H100 80GB HBM3", computeMajor=9, computeMinor=0,
                      numSms=132))
    assert device_peak(tr, 0, "bf16").source == "datasheet:H100 SXM"


def test_kineto_no_known_clock_no_peak():
    # cc 10.0: no part of it has a published boost clock, and Kineto gives none
    tr = _kineto(dict(A100, name="NVIDIA Mystery Blackwell", computeMajor=10, computeMinor=0,
                      numSms=148))
    p = device_peak(tr, 0, "bf16")
    assert p.flops_per_s is None and "no boost clock" in p.missing and "10.0" in p.missing
