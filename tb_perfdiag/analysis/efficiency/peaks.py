"""A device's peak: dense FLOP/s for the dtype its matmul-class ops ran in, and its memory
bandwidth — from the trace where it says (a TPU plane's ``peak_teraflops_per_second``
and HBM bandwidth; a GPU plane's clock, SM count and compute capability; Kineto's
``deviceProperties``), else from the datasheet table (``datasheets``)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ...trace.model import Trace
from . import datasheets


@dataclass
class Peak:
    flops_per_s: float | None   # dense peak for ``dtype`` (None: unknown, see ``missing``)
    bytes_per_s: float | None   # memory bandwidth
    dtype: str
    source: str                 # "trace" | "datasheet:<row>" | "option" | ""
    device_model: str           # "Tesla V100-DGXS-32GB", "TPU v6 Lite"
    missing: str = ""           # why ``flops_per_s`` is None


# dense FLOPs per SM per clock of NVIDIA parts by compute capability (the CUDA
# programming guide's throughput table; tensor-core figures from the architecture
# whitepapers: Volta 1024 fp16, Ampere GA100 2048 fp16 / 1024 tf32, Hopper 4096 fp16)
_PER_SM_CLOCK = {
    (6, 0): {"fp32": 128, "fp16": 256, "fp64": 64},
    (6, 1): {"fp32": 256, "int8": 1024},
    (7, 0): {"fp32": 128, "fp16": 1024, "fp64": 64},
    (7, 5): {"fp32": 128, "fp16": 512, "int8": 1024},
    (8, 0): {"fp32": 128, "tf32": 1024, "bf16": 2048, "fp16": 2048, "int8": 4096,
             "fp64": 128},
    (8, 6): {"fp32": 256, "tf32": 256, "bf16": 512, "fp16": 512, "int8": 1024},
    (8, 9): {"fp32": 256, "tf32": 256, "bf16": 512, "fp16": 512, "fp8": 1024,
             "int8": 1024},
    (9, 0): {"fp32": 256, "tf32": 2048, "bf16": 4096, "fp16": 4096, "fp8": 8192,
             "int8": 8192, "fp64": 256},
}


def _device_number(name: str) -> int | None:
    m = re.search(r"(\d+)\s*$", name)
    return int(m.group(1)) if m else None


def _kineto_props(trace: Trace, device: int) -> dict | None:
    props = trace.metadata.get("deviceProperties")
    if not isinstance(props, list) or device >= len(trace.devices):
        return None
    d = trace.devices[device]
    want = _device_number(d.source_id) if d.source_id else None
    if want is None:
        want = _device_number(d.name)
    for p in props:
        if isinstance(p, dict) and p.get("id") == want:
            return p
    return None


def _from_row(row, dtype: str, model: str) -> Peak:
    tf = row.tflops.get(dtype) if dtype else None
    if dtype == "tf32" and tf is None:
        tf = row.tflops.get("fp32")      # no TF32 path: fp32 matmuls run at fp32 rate
    if not dtype:
        # no matmul dtype known: the device's headline 16-bit matrix peak
        tf = row.tflops.get("bf16") or row.tflops.get("fp16") or row.tflops.get("fp32")
        dtype = next((k for k in ("bf16", "fp16", "fp32") if k in row.tflops), "")
    return Peak(tf * 1e12 if tf else None, row.gbytes_per_s * 1e9, dtype,
                f"datasheet:{row.key}", model,
                "" if tf else f"the {row.key} datasheet gives no dense {dtype} peak")


def _from_gpu_plane(st: dict, dtype: str, model: str) -> Peak | None:
    """From a GPU plane's properties: SMs × FLOPs per SM per clock × clock."""
    try:
        cc = (int(st["compute_cap_major"]), int(st["compute_cap_minor"]))
        sms, khz = float(st["core_count"]), float(st["clock_rate"])
    except (KeyError, TypeError, ValueError):
        return None
    bw = st.get("memory_bandwidth")
    bw = float(bw) if bw else None
    per = _PER_SM_CLOCK.get(cc)
    want = dtype or ("bf16" if per and "bf16" in per else "fp16")
    got = per.get(want) if per else None
    if got is None and want == "tf32" and per:
        got = per.get("fp32")
    if got is None:
        return Peak(None, bw, want, "trace", model,
                    f"no dense {want} rate known for compute capability {cc[0]}.{cc[1]}")
    return Peak(sms * got * khz * 1e3, bw, want, "trace", model)


def device_peak(trace: Trace, device: int, dtype: str,
                override_tflops: float | None = None) -> Peak:
    """The peak of ``trace.devices[device]`` for ``dtype`` (a ``costs.DTYPES`` name; ""
    when the device's ops have no matmul dtype).  ``override_tflops`` (the user's
    option) wins over the trace and the table."""
    planes = trace.metadata.get("device_planes") or {}
    st = (planes.get(device) or {}).get("plane_stats") or {}
    model = str(st.get("device_type_string") or "")
    props = _kineto_props(trace, device) if trace.format == "kineto" else None
    if props is not None:
        model = str(props.get("name") or "")
    row = datasheets.row_for(model) if model else None
    if row is None and props is not None:
        row = datasheets.row_for_properties(props)
    bw = None
    if st.get("peak_hbm_bw_gigabytes_per_second"):
        bw = float(st["peak_hbm_bw_gigabytes_per_second"]) * 1e9
    elif st.get("memory_bandwidth"):
        bw = float(st["memory_bandwidth"])
    elif row is not None:
        bw = row.gbytes_per_s * 1e9
    if override_tflops is not None:
        return Peak(float(override_tflops) * 1e12, bw, dtype, "option", model)
    if st.get("peak_teraflops_per_second"):
        # a TPU plane's own peak: the MXU's bf16 rate (an fp32 matmul runs as bf16 passes
        # at XLA's default precision); int8 and fp8 at the datasheet's ratio to it
        tf = float(st["peak_teraflops_per_second"])
        if row is not None and dtype in ("int8", "fp8") and row.tflops.get(dtype) and \
                row.tflops.get("bf16"):
            tf *= row.tflops[dtype] / row.tflops["bf16"]
        return Peak(tf * 1e12, bw, dtype or "bf16", "trace", model)
    if row is not None:
        p = _from_row(row, dtype, model)
        if bw is not None:
            p.bytes_per_s = bw
        return p
    got = _from_gpu_plane(st, dtype, model) if st else None
    if got is not None:
        return got
    if props is not None and model:
        why = f"{model!r} is not in the datasheet table"
    elif model:
        why = f"{model!r} is not in the datasheet table"
    else:
        why = "the trace names no device model and has no peak of its own"
    return Peak(None, bw, dtype, "", model, why + " (give the peak with --peak-tflops)")
