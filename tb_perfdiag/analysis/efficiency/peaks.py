"""A device's peak: dense FLOP/s for the dtype its matmul-class ops ran in, and its memory
bandwidth — from the trace where it says (a TPU plane's ``peak_teraflops_per_second``
and HBM bandwidth; a GPU plane's clock, SM count and compute capability; Kineto's
``deviceProperties``) and the datasheet table (``datasheets``).  A GPU whose name a
datasheet row matches has that row's (marketed) figures; one no row names has SMs ×
clock × the FLOPs per SM per clock of its compute capability (``sm_rates``)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ...trace.model import Trace
from . import datasheets, device_ids, sm_rates


@dataclass
class Peak:
    flops_per_s: float | None   # dense peak for ``dtype`` (None: unknown, see ``missing``)
    bytes_per_s: float | None   # memory bandwidth
    dtype: str
    source: str                 # "trace" | "datasheet:<row>" | "option" |
                                # "computed from …" (SMs × clock, see sm_rates) | ""
    device_model: str           # "Tesla V100-DGXS-32GB", "TPU v6 Lite"
    missing: str = ""           # why ``flops_per_s`` is None
    identified_by: str = ""     # what named a part its name does not ("gfx942, 304 CUs,
                                # 192 GB"); "" where the name says
    converted_from: str = ""    # the format asked for where the part has no units for it
                                # and ``dtype`` is the one it runs at ("mxfp4" → "bf16")


# a format a part has no matrix units for runs at the one it is converted to (GUIDE §4
# "Formats"): MX and NVFP4 weights dequantised to the 16-bit activations, MXFP8 as FP8
CONVERTED = {"mxfp8": ("fp8", "bf16"), "mxfp6": ("bf16",), "mxfp4": ("bf16",),
             "nvfp4": ("bf16",), "fp8": ("bf16", "fp16")}


def _device_number(name: str) -> int | None:
    m = re.search(r"(\d+)\s*$", name)
    return int(m.group(1)) if m else None


def _kineto_props(trace: Trace, device: int) -> tuple[dict | None, str]:
    """The ``deviceProperties`` entry of ``trace.devices[device]`` (``device_ids.
    kineto_entry``: by id, else the one entry, else the one part all entries are), and
    why none."""
    if device >= len(trace.devices):
        return None, ""
    d = trace.devices[device]
    want = _device_number(d.source_id) if d.source_id else None
    if want is None:
        want = _device_number(d.name)
    return device_ids.kineto_entry(trace.metadata.get("deviceProperties"), want)


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


def _computed(sms: float, hz: float, cc: tuple, dtype: str, bw, model: str,
              how: str, note: str = "") -> Peak:
    """SMs × clock × dense FLOPs per SM per clock of compute capability ``cc`` (the rates
    and their whitepapers: ``sm_rates``); ``how`` says whose SMs and clock ("the plane's
    80 SMs × 1.53 GHz"), ``note`` anything more the source must say."""
    r = sm_rates.rates(cc)
    want = dtype or "bf16"
    got = None
    if r is not None:
        want, got = sm_rates.per_clock(r, dtype)
    ccs = f"cc {cc[0]}.{cc[1]}"
    if got is None:
        why = (f"no dense {want} rate known for compute capability {cc[0]}.{cc[1]}"
               + (f" ({r.arch})" if r else ""))
        return Peak(None, bw, want, "", model, why + " (give the peak with --peak-tflops)")
    return Peak(sms * hz * got, bw, want, f"computed from {how} ({ccs}, {r.arch}"
                f"{'; ' + note if note else ''})", model)


def _from_gpu_plane(st: dict, dtype: str, model: str) -> Peak | None:
    """From a GPU XSpace plane's properties: SMs × clock (``clock_rate``, kHz) × FLOPs per
    SM per clock of its compute capability; its ``memory_bandwidth`` (bytes/s)."""
    if str(st.get("device_vendor") or "").lower() == "amd" or \
            str(st.get("gpu_device_name") or "").startswith("gfx"):
        return None                  # a gfx target, not an NVIDIA compute capability
    try:
        cc = (int(st["compute_cap_major"]), int(st["compute_cap_minor"]))
        sms, khz = int(st["core_count"]), float(st["clock_rate"])
    except (KeyError, TypeError, ValueError):
        return None
    if sms <= 0 or khz <= 0:
        return None
    bw = float(st["memory_bandwidth"]) if st.get("memory_bandwidth") else None
    return _computed(sms, khz * 1e3, cc, dtype, bw, model,
                     f"the plane's {sms} SMs × {khz / 1e6:.3g} GHz")


def _from_kineto_props(props: dict, dtype: str, model: str) -> Peak | None:
    """From Kineto's ``deviceProperties`` (``numSms``, ``computeMajor/Minor``): it writes
    no clock, so the boost clock of the known part of that compute capability nearest in
    SM count, named in the source; no memory bandwidth.  None where it says too little."""
    try:
        cc = (int(props["computeMajor"]), int(props["computeMinor"]))
        sms = int(props["numSms"])
    except (KeyError, TypeError, ValueError):
        return None
    if sms <= 0 or cc[0] < 7 or props.get("warpSize") == 64 or \
            "amd" in str(props.get("name") or "").lower():
        return None                  # ROCm writes its own architecture numbers there
    part = sm_rates.nearest_part(cc, sms)
    if part is None:
        said = repr(model) if model else f"an unnamed device ({sms} SMs)"
        return Peak(None, None, dtype, "", model,
                    f"{said} is not in the datasheet table and no boost clock of a compute "
                    f"capability {cc[0]}.{cc[1]} part is known, nor does the trace give one "
                    f"(give the peak with --peak-tflops)")
    ghz = part.boost_mhz / 1e3
    return _computed(sms, part.boost_mhz * 1e6, cc, dtype, None, model,
                     f"deviceProperties' {sms} SMs × {ghz:.3g} GHz",
                     f"the trace gives no clock: the {part.name}'s boost clock")


def _identity(trace: Trace, device: int, st: dict):
    """(props entry or None, ``device_ids.Identity`` or None, why no props): what the
    trace says the device is."""
    if trace.format == "kineto":
        props, why = _kineto_props(trace, device)
        return props, (device_ids.from_properties(props) if props is not None else None), why
    if st and "peak_teraflops_per_second" not in st:
        return None, device_ids.from_plane(st), ""
    return None, None, ""


def device_peak(trace: Trace, device: int, dtype: str,
                override_tflops: float | None = None) -> Peak:
    """The peak of ``trace.devices[device]`` for ``dtype`` (a ``costs.DTYPES`` name; ""
    when the device's ops have no matmul dtype).  ``override_tflops`` (the user's
    option) wins over the trace and the table.  ``identified_by`` says what named a
    part whose own name does not."""
    p = _device_peak(trace, device, dtype, override_tflops)
    for alt in CONVERTED.get(dtype, ()) if p.flops_per_s is None and override_tflops is None \
            else ():
        q = _device_peak(trace, device, alt, None)
        if q.flops_per_s is not None:
            p, p.converted_from = q, dtype
            break
    st = ((trace.metadata.get("device_planes") or {}).get(device) or {}).get("plane_stats") or {}
    props, ident, _ = _identity(trace, device, st)
    if ident is not None and ident.row is not None and not datasheets.row_for(
            str((props or {}).get("name") or st.get("device_type_string") or "")):
        p.identified_by = ident.evidence
    return p


def _device_peak(trace: Trace, device: int, dtype: str, override_tflops) -> Peak:
    planes = trace.metadata.get("device_planes") or {}
    st = (planes.get(device) or {}).get("plane_stats") or {}
    model = str(st.get("device_type_string") or "")
    props, ident, no_props = _identity(trace, device, st)
    row = datasheets.row_for(model) if model else None
    if ident is not None:
        model = ident.model or model
        row = row or ident.row
    # a GPU plane's own clock and SMs give its peak where no name says the part: the
    # identification names it, the computation (below) keeps the plane's clock
    plane_clock = bool(st) and ident is not None and not datasheets.row_for(
        str(st.get("device_type_string") or "")) and \
        (_from_gpu_plane(st, "", model) or Peak(None, None, "", "", "")).flops_per_s is not None
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
    if row is not None and not plane_clock:
        p = _from_row(row, dtype, model)
        if bw is not None:
            p.bytes_per_s = bw
        return p
    # no datasheet row names it: computed from what the trace says of its SMs
    got = _from_gpu_plane(st, dtype, model) if st else None
    if got is None and props is not None:
        got = _from_kineto_props(props, dtype, model)
    if got is not None:
        if got.bytes_per_s is None:
            got.bytes_per_s = bw
        return got
    if ident is not None and ident.missing:
        why = ident.missing
    elif model:
        why = f"{model!r} is not in the datasheet table"
    elif no_props:
        why = f"nothing in the trace identifies the device: {no_props}, nor does it name a model"
    else:
        why = "nothing in the trace identifies the device: it names no model and has no peak of its own"
    return Peak(None, bw, dtype, "", model, why + " (give the peak with --peak-tflops)")


# a TPU plane's on-chip bandwidths, GB/s, in the order of ``opcosts.ONCHIP_RW``: the
# roofs xprof's roofline judges an op's CMEM and VMEM reads and writes against
_ONCHIP_STATS = ("peak_cmem_rd_bw_gigabytes_per_second", "peak_cmem_wr_bw_gigabytes_per_second",
                 "peak_vmem_rd_bw_gigabytes_per_second", "peak_vmem_wr_bw_gigabytes_per_second")


@dataclass
class OnChipPeaks:
    bytes_per_s: tuple          # per ONCHIP_RW: bytes/s, None where the plane gives none (or 0)
    has_cmem: bool              # a CMEM bandwidth is given (xprof's PerfEnv.has_cmem)
    has_merged_vmem: bool       # the plane's ``has_merged_vmem``


def onchip_peaks(trace: Trace, device: int) -> OnChipPeaks:
    """The on-chip memory bandwidths of ``trace.devices[device]``'s plane (TPU planes
    only; none elsewhere).  xprof reads the same stats into its PerfEnv; the plane's
    ``peak_sram_*`` are its GPU roofline's shared-memory roofs, not a TPU's, and are not
    read."""
    planes = trace.metadata.get("device_planes") or {}
    st = (planes.get(device) or {}).get("plane_stats") or {}
    got = []
    for k in _ONCHIP_STATS:
        try:
            v = float(st.get(k) or 0.0)
        except (TypeError, ValueError):
            v = 0.0
        got.append(v * 1e9 if v > 0 else None)
    return OnChipPeaks(tuple(got), bool(got[0] or got[1]), bool(st.get("has_merged_vmem")))
