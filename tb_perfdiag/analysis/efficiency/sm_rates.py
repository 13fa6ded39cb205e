"""Dense FLOPs per SM per clock of NVIDIA GPUs by compute capability, and the boost
clocks of known parts: a device the datasheet table does not name still has a peak,
SMs × clock × FLOPs per SM per clock, from what its trace says of it (a GPU XSpace
plane's ``core_count``, ``clock_rate``, ``compute_cap_*``; Kineto's ``numSms`` and
``computeMajor/Minor``, with the boost clock of the nearest known part of that compute
capability, Kineto writing no clock).

An FMA is 2 FLOPs.  Tensor-core figures are the dense (no sparsity) rates of the
data-center and professional parts; GeForce parts of 8.6, 8.9 and 12.0 run fp16/bf16
with fp32 accumulation and TF32 at half of them (their whitepapers' tables), so a
computed peak of such a part is at most 2× high for those dtypes.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SmRates:
    arch: str               # "Volta GV100"
    per_clock: dict         # dtype → dense FLOPs per SM per clock
    source: str             # where the figures come from


@dataclass(frozen=True)
class Part:
    name: str               # "V100 SXM2"
    sms: int
    boost_mhz: float
    source: str


_RATES = {
    # 64 FP32 / 32 FP64 cores and 8 tensor cores (64 fp16 FMA a clock each) per SM
    (7, 0): SmRates("Volta GV100", {"fp32": 128, "fp16": 1024, "fp64": 64},
                    "NVIDIA Tesla V100 GPU Architecture whitepaper (2017)"),
    # 64 FP32 cores, 8 tensor cores (64 fp16 FMA, 128 int8 ops a clock each)
    (7, 5): SmRates("Turing TU10x", {"fp32": 128, "fp16": 1024, "int8": 2048},
                    "NVIDIA Turing GPU Architecture whitepaper (2018)"),
    # 64 FP32 cores, 4 third-generation tensor cores (256 fp16 FMA a clock each);
    # fp64 on the tensor cores
    (8, 0): SmRates("Ampere GA100", {"fp32": 128, "tf32": 1024, "bf16": 2048, "fp16": 2048,
                                     "int8": 4096, "fp64": 128},
                    "NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020)"),
    # 128 FP32 cores, 4 tensor cores (128 fp16 FMA a clock each): the A10 / A40 rates
    (8, 6): SmRates("Ampere GA10x", {"fp32": 256, "tf32": 512, "bf16": 1024, "fp16": 1024,
                                     "int8": 2048},
                    "NVIDIA Ampere GA102 GPU Architecture whitepaper (2020)"),
    # Orin's GPU: 128 FP32 cores; 85 dense int8 TOPS (170 sparse) on 16 SMs at 1.3 GHz
    # = 4096 a clock, fp16/bf16 at the Ampere tensor cores' int8 : fp16 ratio of 2
    (8, 7): SmRates("Ampere GA10B (Orin)", {"fp32": 256, "bf16": 2048, "fp16": 2048,
                                            "int8": 4096},
                    "NVIDIA Jetson AGX Orin Series Technical Brief (2022)"),
    # 128 FP32 cores, 4 fourth-generation tensor cores: the L4 / L40S rates
    (8, 9): SmRates("Ada AD10x", {"fp32": 256, "tf32": 512, "bf16": 1024, "fp16": 1024,
                                  "fp8": 2048, "int8": 2048},
                    "NVIDIA Ada GPU Architecture whitepaper (2022)"),
    # 128 FP32 cores, 4 fourth-generation tensor cores (512 fp16 FMA a clock each)
    (9, 0): SmRates("Hopper GH100", {"fp32": 256, "tf32": 2048, "bf16": 4096, "fp16": 4096,
                                     "fp8": 8192, "int8": 8192, "fp64": 256},
                    "NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022)"),
    # fifth-generation tensor cores at twice Hopper's rate per SM: the HGX B200
    # datasheet's dense figures over its 148 SMs (the brief gives no per-SM table)
    # MXFP8 and MXFP6 at the FP8 rate, MXFP4 and NVFP4 at twice it
    (10, 0): SmRates("Blackwell GB100", {"fp32": 256, "tf32": 4096, "bf16": 8192,
                                         "fp16": 8192, "fp8": 16384, "int8": 16384,
                                         "mxfp8": 16384, "mxfp6": 16384, "mxfp4": 32768,
                                         "nvfp4": 32768},
                     "NVIDIA Blackwell Architecture Technical Brief (2024) and HGX B200 "
                     "datasheet (2024)"),
    (12, 0): SmRates("Blackwell GB20x", {"fp32": 256, "tf32": 512, "bf16": 1024,
                                         "fp16": 1024, "fp8": 2048, "int8": 2048},
                     "NVIDIA RTX Blackwell GPU Architecture whitepaper (2025)"),
}

# known parts per compute capability, for the clock a trace does not give; none of
# 10.0: NVIDIA publishes no boost clock of the B200
_PARTS = {
    (7, 0): (Part("V100 SXM2", 80, 1530, "NVIDIA Tesla V100 GPU datasheet (2020)"),),
    (7, 5): (Part("T4", 40, 1590, "NVIDIA T4 Tensor Core GPU datasheet (2019)"),),
    (8, 0): (Part("A100", 108, 1410, "NVIDIA A100 Tensor Core GPU datasheet (2021)"),),
    (8, 6): (Part("A10", 72, 1695, "NVIDIA A10 Tensor Core GPU datasheet (2021)"),
             Part("A40", 84, 1740, "NVIDIA A40 datasheet (2021)")),
    (8, 7): (Part("Jetson AGX Orin 64GB", 16, 1300,
                  "NVIDIA Jetson AGX Orin Series Technical Brief (2022)"),),
    (8, 9): (Part("L4", 58, 2040, "NVIDIA L4 Tensor Core GPU datasheet (2023)"),
             Part("L40S", 142, 2520, "NVIDIA L40S datasheet (2023)")),
    # the clock the datasheet's tensor-core figures are at (989.4 bf16 TFLOP/s)
    (9, 0): (Part("H100 SXM", 132, 1830,
                  "NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022)"),),
    (12, 0): (Part("GeForce RTX 5090", 170, 2410, "NVIDIA GeForce RTX 5090 specifications"),),
}


def rates(cc: tuple) -> SmRates | None:
    """The per-SM rates of compute capability ``cc`` ((major, minor)); None unknown."""
    return _RATES.get(tuple(cc))


def nearest_part(cc: tuple, sms: int) -> Part | None:
    """The known part of ``cc`` whose SM count is nearest ``sms`` (None: none known)."""
    parts = _PARTS.get(tuple(cc))
    if not parts:
        return None
    return min(parts, key=lambda p: (abs(p.sms - sms), p.sms))


def per_clock(r: SmRates, dtype: str) -> tuple[str, float | None]:
    """(the dtype whose rate applies, dense FLOPs per SM per clock or None) for
    ``dtype``: TF32 where the part has no TF32 path runs at the fp32 rate; "" (no
    matmul dtype known) is the part's headline 16-bit matrix rate."""
    if not dtype:
        dtype = "bf16" if "bf16" in r.per_clock else "fp16"
    got = r.per_clock.get(dtype)
    if got is None and dtype == "tf32":
        got = r.per_clock.get("fp32")
    return dtype, got
