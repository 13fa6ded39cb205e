"""Accelerators' dense peaks per dtype and memory bandwidth, as their datasheets state them.

Dense figures (the datasheets' "with sparsity" figures halved where only those are
given); TFLOP/s per dtype, memory bandwidth in GB/s.  A dtype the device has no dense
matrix path for is absent.  ``patterns``: lower-case substrings of the device names
profilers write (``deviceProperties.name``, a TPU plane's ``device_type_string``) that
select the row, the most specific row first in ``ROWS``.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    key: str                  # the row's name, shown as "datasheet:<key>"
    patterns: tuple           # name substrings (all must occur), lower case
    tflops: dict              # dtype → dense TFLOP/s
    gbytes_per_s: float       # memory bandwidth, GB/s
    datasheet: str            # where the figures come from


def _r(key, patterns, gbs, sheet, **tflops):
    return Row(key, tuple(patterns), tflops, float(gbs), sheet)


_V100 = "NVIDIA Tesla V100 GPU datasheet (2020)"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet (2021)"
_H100 = "NVIDIA H100 Tensor Core GPU datasheet (2023)"
_MI300 = "AMD Instinct MI300X / MI325X accelerator data sheets (2023, 2024)"
_MI350 = "AMD Instinct MI350X / MI355X GPU data sheets (2025)"
_B200 = "NVIDIA HGX B200 datasheet (2024), per GPU"

ROWS = (
    _r("V100S PCIe", ("v100s",), 1134, _V100, fp32=16.4, fp16=130, fp64=8.2),
    _r("V100 PCIe", ("v100", "pcie"), 900, _V100, fp32=14, fp16=112, fp64=7),
    # the DGX Station's V100 (V100-DGXS) runs at the SXM2 part's boost clock (1530 MHz)
    _r("V100 SXM2", ("v100",), 900, _V100, fp32=15.7, fp16=125, fp64=7.8),
    _r("A100 PCIe 80GB", ("a100", "pcie", "80"), 1935, _A100,
       fp32=19.5, tf32=156, bf16=312, fp16=312, int8=624, fp64=19.5),
    _r("A100 SXM 80GB", ("a100", "80"), 2039, _A100,
       fp32=19.5, tf32=156, bf16=312, fp16=312, int8=624, fp64=19.5),
    _r("A100 40GB", ("a100",), 1555, _A100,
       fp32=19.5, tf32=156, bf16=312, fp16=312, int8=624, fp64=19.5),
    _r("H100 PCIe", ("h100", "pcie"), 2000, _H100,
       fp32=51, tf32=378, bf16=756, fp16=756, fp8=1513, int8=1513, fp64=51),
    _r("H100 NVL", ("h100", "nvl"), 3900, _H100,
       fp32=60, tf32=417, bf16=835, fp16=835, fp8=1670, int8=1670, fp64=60),
    _r("H100 SXM", ("h100",), 3350, _H100,
       fp32=67, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9, int8=1978.9, fp64=67),
    # Grace Hopper: an H100-class GPU with its own HBM (the 96 GB HBM3 part's 4 TB/s)
    _r("GH200", ("gh200",), 4000, "NVIDIA GH200 Grace Hopper Superchip datasheet (2023)",
       fp32=67, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9, int8=1978.9, fp64=67),
    _r("H200 SXM", ("h200",), 4800, "NVIDIA H200 Tensor Core GPU datasheet (2024)",
       fp32=67, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9, int8=1978.9, fp64=67),
    # Blackwell: MXFP8 and MXFP6 at the FP8 rate, MXFP4 and NVFP4 at twice it
    _r("GB200", ("gb200",), 8000, "NVIDIA GB200 NVL72 datasheet (2024), per GPU",
       tf32=1250, bf16=2500, fp16=2500, fp8=5000, int8=5000,
       mxfp8=5000, mxfp6=5000, mxfp4=10000, nvfp4=10000),
    _r("B200", ("b200",), 8000, _B200,
       fp32=75, tf32=1100, bf16=2250, fp16=2250, fp8=4500, int8=4500, fp64=37,
       mxfp8=4500, mxfp6=4500, mxfp4=9000, nvfp4=9000),
    _r("L4", ("l4",), 300, "NVIDIA L4 Tensor Core GPU datasheet (2023)",
       fp32=30.3, tf32=60, bf16=121, fp16=121, fp8=242.5, int8=242.5),
    # AWS's A10G has no datasheet of its own: the A10's, whose part it is a variant of
    _r("A10G", ("a10g",), 600, "NVIDIA A10 Tensor Core GPU datasheet (2021)",
       fp32=31.2, tf32=62.5, bf16=125, fp16=125, int8=250),
    _r("A10", ("a10",), 600, "NVIDIA A10 Tensor Core GPU datasheet (2021)",
       fp32=31.2, tf32=62.5, bf16=125, fp16=125, int8=250),
    _r("T4", ("t4",), 320, "NVIDIA T4 Tensor Core GPU datasheet (2019)",
       fp32=8.1, fp16=65, int8=130),
    # Pascal: no tensor cores, fp16 at twice the fp32 rate
    _r("Quadro GP100", ("gp100",), 717, "NVIDIA Quadro GP100 datasheet (2017)",
       fp32=10.3, fp16=20.7, fp64=5.2),
    # CDNA's fp32 matrix cores: the matrix figure, what an fp32 GEMM can reach.  An
    # MI250(X) is two dies the profiler shows as two devices: half the package's figures
    _r("MI100", ("mi100",), 1228.8, "AMD Instinct MI100 accelerator data sheet (2020)",
       fp32=46.1, bf16=92.3, fp16=184.6, int8=184.6, fp64=11.5),
    # one die, the same figures as one die of an MI250 (104 CUs at 1.7 GHz, 64 GB)
    _r("MI210", ("mi210",), 1638.4, "AMD Instinct MI210 accelerator data sheet (2022)",
       fp32=45.3, bf16=181, fp16=181, int8=181, fp64=45.3),
    _r("MI250X", ("mi250x",), 1638.4, "AMD Instinct MI250X accelerator data sheet (2021), "
       "per die", fp32=47.85, bf16=191.5, fp16=191.5, int8=191.5, fp64=47.85),
    _r("MI250", ("mi250",), 1638.4, "AMD Instinct MI250 accelerator data sheet (2021), "
       "per die", fp32=45.25, bf16=181.05, fp16=181.05, int8=181.05, fp64=45.25),
    _r("MI300X", ("mi300x",), 5300, _MI300,
       fp32=163.4, tf32=653.7, bf16=1307.4, fp16=1307.4, fp8=2614.9, int8=2614.9,
       fp64=163.4),
    _r("MI325X", ("mi325x",), 6000, _MI300,
       fp32=163.4, tf32=653.7, bf16=1307.4, fp16=1307.4, fp8=2614.9, int8=2614.9,
       fp64=163.4),
    # the APU: 228 of the MI300X's 304 CUs at the same 2.1 GHz
    _r("MI300A", ("mi300a",), 5300, "AMD Instinct MI300A APU data sheet (2023)",
       fp32=122.6, tf32=490.3, bf16=980.6, fp16=980.6, fp8=1961.2, int8=1961.2,
       fp64=122.6),
    # CDNA 4: MXFP6 and MXFP4 at twice the FP8 rate, MXFP8 at it
    _r("MI355X", ("mi355x",), 8000, _MI350,
       fp32=157.3, bf16=2516.6, fp16=2516.6, fp8=5033.2, int8=5033.2, fp64=78.6,
       mxfp8=5033.2, mxfp6=10066.3, mxfp4=10066.3),
    _r("MI350X", ("mi350x",), 8000, _MI350,
       fp32=144.2, bf16=2306.9, fp16=2306.9, fp8=4613.7, int8=4613.7, fp64=72.1,
       mxfp8=4613.7, mxfp6=9227.5, mxfp4=9227.5),
    # TPUs: the MXU's bf16 peak (an fp32 matmul runs as bf16 passes on it)
    _r("TPU v4", ("tpu", "v4"), 1228, "Google Cloud TPU v4 system architecture",
       bf16=275, int8=275),
    # JAX names a v5e "TPU v5 lite" and a v5p "TPU v5"
    _r("TPU v5e", ("tpu", "v5e"), 819, "Google Cloud TPU v5e system architecture",
       bf16=197, int8=394),
    _r("TPU v5p", ("tpu", "v5"), 2765, "Google Cloud TPU v5p system architecture",
       bf16=459, int8=918),
    # "TPU v6 Lite" is how the profiler names a v6e (Trillium)
    _r("TPU v6e", ("tpu", "v6"), 1640, "Google Cloud TPU v6e (Trillium) system architecture",
       bf16=918, int8=1836),
)


def row_for(device_name: str) -> Row | None:
    """The datasheet row of a device name, the first whose patterns all occur in it."""
    n = device_name.lower()
    if "v5 lite" in n or "v5litepod" in n:
        n += " v5e"
    for r in ROWS:
        if all(p in n for p in r.patterns):
            # "l4" / "t4" / "a10" inside longer words ("tpu v4" has no "l4"; guard anyway)
            if r.key in ("L4", "T4", "A10") and not _word(n, r.patterns[0]):
                continue
            return r
    return None


def _word(name: str, token: str) -> bool:
    import re
    return re.search(rf"(^|[^a-z0-9]){re.escape(token)}($|[^a-z0-9])", name) is not None


def row(key: str) -> Row | None:
    """The row of ``key`` ("MI300X"), None where no row has it."""
    return next((r for r in ROWS if r.key == key), None)
