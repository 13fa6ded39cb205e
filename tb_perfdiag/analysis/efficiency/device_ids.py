"""Which accelerator a trace ran on, where its name says too little (GUIDE §4 "Graph
replays, devices and formats"): the datasheet row a device's vendor, compute capability
(an AMD part's gfx target), compute-unit / SM count and memory select, and the
``deviceProperties`` entry that describes a Kineto device.

ROCm names parts "AMD Radeon Graphics", "" or "AMD Instinct MI300X VF" (a virtual
function), and its kernels carry the physical ordinal (``device`` 2) while
``deviceProperties`` lists the visible devices from id 0; a list of one entry describes
the one device in use.  The identification says what identified the part ("gfx942, 304
CUs, 192 GB") or what is missing to tell it, so no reader sees "the device".
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from . import datasheets


@dataclass(frozen=True)
class Identity:
    model: str                  # what a reader reads: "AMD Instinct MI300X"
    row: object | None          # its ``datasheets.Row`` (None: not identified)
    evidence: str               # what identified it, or what the trace says of it
    missing: str = ""           # why no row, where ``row`` is None


# AMD parts by (gfx major, minor, compute units): (the model, its row) or, where one
# count has several parts, those told apart by memory (GB, the largest part first).
# gfx90a (9.0.a) and gfx908 (9.0.8) both read 9.0: their CU counts differ.  An MI210
# and one die of an MI250 (104 CUs, 64 GB) have the same figures: one row stands for both
_AMD = {
    (9, 0, 120): (("AMD Instinct MI100", "MI100"),),
    (9, 0, 104): (("AMD Instinct MI250 (one die) or MI210", "MI250"),),
    (9, 0, 110): (("AMD Instinct MI250X (one die)", "MI250X"),),
    (9, 4, 304): ((224, "AMD Instinct MI325X", "MI325X"), (0, "AMD Instinct MI300X", "MI300X")),
    (9, 4, 228): (("AMD Instinct MI300A", "MI300A"),),
}
# gfx950 parts: the same 256 CUs and 288 GB; the engine clock (XSpace planes) tells them
_GFX950 = ((2300e3, "AMD Instinct MI355X", "MI355X"), (0, "AMD Instinct MI350X", "MI350X"))

# NVIDIA parts a name does not give, by (compute capability, SMs) and memory (GB): the
# datasheet row of the one part they fit
_NVIDIA = {
    # a V100's SXM2 and PCIe cards share 80 SMs: the SXM2's figures (a plane's own clock
    # gives its peak where it has one)
    (7, 0, 80): ((0, "NVIDIA V100", "V100 SXM2"),),
    (7, 5, 40): ((0, "NVIDIA T4", "T4"),),
    (8, 0, 108): ((56, "NVIDIA A100 80GB", "A100 SXM 80GB"), (0, "NVIDIA A100 40GB", "A100 40GB")),
    (8, 6, 72): ((0, "NVIDIA A10", "A10"),),
    (8, 6, 80): ((0, "NVIDIA A10G", "A10G"),),
    (8, 9, 58): ((0, "NVIDIA L4", "L4"),),
    (9, 0, 114): ((0, "NVIDIA H100 PCIe", "H100 PCIe"),),
    (9, 0, 132): ((120, "NVIDIA H200", "H200 SXM"), (90, "NVIDIA GH200", "GH200"),
                  (85, "NVIDIA H100 NVL", "H100 NVL"), (0, "NVIDIA H100 SXM", "H100 SXM")),
    (10, 0, 148): ((170, "NVIDIA B200", "B200"),),
}


def _gb(mem) -> float:
    """GiB: what vendors market as "GB" of HBM (an MI300X's 192, an A100's 80)."""
    try:
        return float(mem) / 2**30
    except (TypeError, ValueError):
        return 0.0


def _pick(parts, value: float):
    """The first of ``parts`` ((threshold, model, key)…, largest threshold first) whose
    threshold ``value`` reaches."""
    return next(((m, k) for t, m, k in parts if value >= t), None)


def _gfx(cc, units: int) -> str:
    """The gfx target a ROCm ``computeMajor.computeMinor`` is (its stepping is not
    written: told by the CU count where the table knows the part)."""
    if tuple(cc) == (9, 0):
        return {120: "gfx908", 104: "gfx90a", 110: "gfx90a"}.get(units, "gfx90x")
    return {(9, 4): "gfx942", (9, 5): "gfx950"}.get(tuple(cc), f"gfx{cc[0]}.{cc[1]}")


def _facts(vendor: str, cc, units: int, gb: float, arch: str = "") -> str:
    unit = "CUs" if vendor == "amd" else "SMs"
    head = arch or (_gfx(cc, units) if vendor == "amd" and cc else
                    f"compute capability {cc[0]}.{cc[1]}" if cc else "")
    bits = [b for b in (head, f"{units} {unit}" if units else "",
                        f"{gb:.0f} GB" if gb else "") if b]
    return ", ".join(bits)


def _vendor(name: str, vendor: str, cc, units: int) -> str:
    """"amd" or "nvidia": from the name, else as said, else the tables' keys and the gfx
    targets NVIDIA has no part of."""
    if re.search(r"\bamd\b|radeon|instinct", name, re.I):
        return "amd"
    if re.search(r"nvidia|tesla|quadro|geforce", name, re.I):
        return "nvidia"
    if vendor in ("amd", "nvidia"):
        return vendor
    if cc and ((*cc, units) in _AMD or tuple(cc) in ((9, 4), (9, 5))):
        return "amd"
    return "nvidia" if cc else ""


def identify(name: str, vendor: str, cc, units: int, mem, clock_khz: float = 0.0,
             arch: str = "") -> Identity:
    """The part a device's name, vendor ("amd", "nvidia" or ""), compute capability
    ((major, minor) or None), unit count, memory (bytes) and clock (kHz, 0 unknown)
    say it is.  A name a datasheet row matches wins; else the tables."""
    gb = _gb(mem)
    cc = (int(cc[0]), int(cc[1])) if cc else None
    vendor = _vendor(name, vendor.lower(), cc, units)
    facts = _facts(vendor, cc, units, gb, arch)
    row = datasheets.row_for(name) if name else None
    if row is not None:
        return Identity(name, row, facts)
    said = f"{name!r}" if name else "an unnamed device"
    if not cc or not units:
        lack = " or ".join(w for w, ok in (("compute capability", cc), ("unit count", units))
                           if not ok)
        return Identity(name, None, facts, f"{said}{f' ({facts})' if facts else ''} is not "
                        f"in the datasheet table and the trace gives no {lack} to identify "
                        f"it by")
    if vendor == "nvidia":
        got = _pick(_NVIDIA.get((*cc, units), ()), gb)
        if got is None:
            return Identity(name, None, facts, f"{said} ({facts}) is no part of the "
                            f"datasheet table")
        model, key = got
        return Identity(name or model, datasheets.row(key), facts)
    if cc == (9, 5) and units == 256:
        if clock_khz:
            model, key = _pick(_GFX950, clock_khz)
            return Identity(model, datasheets.row(key), f"{facts}, {clock_khz / 1e6:.2g} GHz")
        return Identity("AMD Instinct MI350X or MI355X", None, facts,
                        f"{facts}: an MI350X (2,307 TFLOP/s bf16) or an MI355X (2,517), "
                        f"which differ only in clock, and the trace gives no clock")
    parts = _AMD.get((*cc, units))
    if parts is None:
        return Identity(name, None, facts, f"{said} ({facts}) is no AMD part of the "
                        f"datasheet table")
    model, key = parts[0] if len(parts[0]) == 2 else _pick(parts, gb)
    return Identity(model, datasheets.row(key), facts)


def from_properties(props: dict) -> Identity:
    """A Kineto ``deviceProperties`` entry's part.  AMD parts write a 64-wide warp
    (``warpSize``) and their gfx target as ``computeMajor/Minor``."""
    name = str(props.get("name") or "").strip()
    vendor = "amd" if props.get("warpSize") == 64 else "nvidia" if props.get("warpSize") == 32 \
        else ""
    try:
        cc = (int(props["computeMajor"]), int(props["computeMinor"]))
    except (KeyError, TypeError, ValueError):
        cc = None
    try:
        units = int(props.get("numSms") or 0)
    except (TypeError, ValueError):
        units = 0
    got = identify(name, vendor, cc, units, props.get("totalGlobalMem"))
    return got


def from_plane(st: dict) -> Identity | None:
    """A GPU XSpace plane's part (its ``device_vendor``, ``gpu_device_name`` — a gfx
    target on ROCm —, ``compute_cap_*``, ``core_count``, ``memory_size``,
    ``clock_rate``); None for a plane with none of them (a TPU, a CPU)."""
    if not any(k in st for k in ("core_count", "compute_cap_major", "device_vendor")):
        return None
    vendor = str(st.get("device_vendor") or "").lower()
    gname = str(st.get("gpu_device_name") or "")
    arch = gname if re.match(r"gfx\d", gname) else ""
    if arch:
        vendor = "amd"
    try:
        cc = (int(st["compute_cap_major"]), int(st.get("compute_cap_minor") or 0))
    except (KeyError, TypeError, ValueError):
        cc = None
    name = str(st.get("device_type_string") or ("" if arch else gname))
    return identify(name, vendor, cc, int(st.get("core_count") or 0), st.get("memory_size"),
                    float(st.get("clock_rate") or 0.0), arch)


def kineto_entry(props, device_number: int | None):
    """The ``deviceProperties`` entry (a list of dicts) describing the device numbered
    ``device_number`` in the events: the entry of that id; else the one entry of a list
    of one; else the first where every entry describes the same part (ROCm lists the
    visible devices from 0 while kernels carry physical ordinals).  (entry or None, why
    none)."""
    if not isinstance(props, list):
        return None, "it has no deviceProperties"
    ents = [p for p in props if isinstance(p, dict)]
    if not ents:
        return None, "its deviceProperties list is empty"
    hit = next((p for p in ents if p.get("id") == device_number), None)
    if hit is not None:
        return hit, ""
    if len(ents) == 1:
        return ents[0], ""
    same = {tuple((k, str(v)) for k, v in sorted(p.items()) if k != "id") for p in ents}
    if len(same) == 1:
        return ents[0], ""
    ids = ", ".join(str(p.get("id")) for p in ents)
    return None, (f"deviceProperties lists devices {ids} of different parts and none is "
                  f"device {device_number}, on which the kernels ran")
