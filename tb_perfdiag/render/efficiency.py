"""EfficiencyTable → the ``efficiency`` JSON of each device and step, the roofline rows
beside the device-op table, and the terminal lines.  NaN figures are written as null."""
from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

import numpy as np

from ..analysis import causes as C
from ..analysis.efficiency import waterfall as W
from ..analysis.efficiency.opcosts import ONCHIP_RW
from ..analysis.efficiency.roofline import RESOURCES, above_roof
from ..analysis.result import Bound, Diagnosis

ROOFLINE_POINTS = 200          # op groups per device on the roofline chart (most time first)
_SPACE = ("all", "hbm")          # EfficiencyTable.row_bytes_space
_BOUND = {int(Bound.UNKNOWN): None, int(Bound.COMPUTE): "compute", int(Bound.MEMORY): "memory"}
# how the text names what bounds a group (xprof's "HBM", "VMEM Read", …); the HBM roof
# of a trace without a split by memory space is the device memory's: "memory"
_RESOURCE_LABELS = {"compute": "compute", "hbm": "HBM", "cmem_read": "CMEM-read",
                    "cmem_write": "CMEM-write", "vmem_read": "VMEM-read",
                    "vmem_write": "VMEM-write"}


def bound_label(bound_by: str | None, memory_space: str | None) -> str | None:
    """"HBM", "VMEM-write", "compute", "memory" (the HBM roof of all-space bytes)."""
    if not bound_by:
        return None
    return "memory" if bound_by == "hbm" and memory_space != "hbm" else _RESOURCE_LABELS[bound_by]


def _bound_by(i) -> str | None:
    i = int(i)
    return RESOURCES[i] if 0 <= i < len(RESOURCES) else None


def _utilisation(u) -> dict:
    """{resource: rate ÷ its peak} of the resources with a figure."""
    return {k: float(v) for k, v in zip(RESOURCES, np.asarray(u).tolist()) if math.isfinite(v)}


def _by_space(x) -> dict | None:
    """{cmem_read …: bytes or bytes/s} (None where there is no figure: no split)."""
    x = np.asarray(x, np.float64)
    if not np.isfinite(x).any():
        return None
    return {k: _n(v) for k, v in zip(ONCHIP_RW, x.tolist())}


def _has(E, name: str, i: int) -> bool:
    v = getattr(E, name, None)
    return v is not None and i < len(v)
DEFINITION = (
    "MFU of a window = model FLOPs of the ops it launched ÷ (window × peak), the peak being "
    "the device's dense peak for the dtype its matmul-class ops ran in. The waterfall splits "
    "the window's time at peak into points adding up to 100: idle by cause (and gaps under "
    "the threshold), peer wait at collectives, busy time in ops with no matmul work "
    "(elementwise, copies, collective transfer), matmul-class ops' time above what their "
    "FLOPs take at peak, and the MFU. Roofline of an op group (whole capture): intensity = "
    "FLOPs ÷ bytes (those in HBM where the trace splits them by memory space, all of them "
    "where it does not: memory_space), attainable = min(peak, intensity × bandwidth), compute-bound at or "
    "above the ridge point (peak ÷ bandwidth), efficiency = achieved ÷ attainable. Where the trace has "
    "on-chip bytes and roofs (a TPU's CMEM and VMEM reads and writes) each resource's utilisation is its "
    "rate ÷ its peak, bound_by the largest and the share of roofline the largest counted, as xprof's "
    "roofline judges an op.")



# the waterfall's parts as the text names them (an idle part is its cause's label)
_PART_LABELS = {W.SMALL: "gaps under the threshold", W.PEER: "peer wait at collectives",
                W.NO_MM: "busy, no matmul work", W.SHORT: "matmul-class ops below peak",
                W.MFU: "achieved MFU"}


def part_label(part: str) -> str:
    return _PART_LABELS.get(part) or f"idle: {C.LABELS.get(part, part)}"


_SI = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def si(x, unit: str) -> str:
    """A count or rate with an SI prefix and three significant digits, as the page writes
    it (``frontend/format.js`` ``formatSi``): 4.665e12 → "4.67 TFLOP", 1.04e8 → "104
    MFLOP"; a small figure keeps its digits ("0.00 TFLOP/s" says nothing); None → "–"."""
    if x is None or not math.isfinite(float(x)):
        return "–"
    v, a, pre = float(x), abs(float(x)), ""
    for scale, p in _SI:
        if a >= scale * 0.9995:            # 999.96 G is written 1.00 T, never 1000 G
            v, pre = v / scale, p
            break
    d = 0 if abs(v) >= 99.95 else 1 if abs(v) >= 9.995 else 2
    return f"{_half_up(v, d)} {pre}{unit}"


def _half_up(x: float, places: int) -> str:
    """``x.toFixed(places)`` as the page writes it: the float's exact value rounded half
    away from zero (45.25 → "45.3" on both faces; Python's format would write "45.2")."""
    q = Decimal(1).scaleb(-places)
    return str(Decimal(x).quantize(q, rounding=ROUND_HALF_UP))


def _sig2(x: float) -> str:
    """Two significant digits, trailing zeros dropped (``Number(x.toPrecision(2))``)."""
    places = 1 - math.floor(math.log10(abs(x)))
    return format(Decimal(_half_up(x, places)).normalize(), "f")


def pct(frac) -> str:
    """A share (MFU, share of the roofline) as a percentage a reader can use: one decimal
    from 10 %, two from 1 %, two significant digits below, "<0.001%" under that (never
    "0.000%" or an exponent; ``frontend/format.js`` ``formatShare`` writes the same)."""
    if frac is None or not math.isfinite(float(frac)):
        return "–"
    p = 100 * float(frac)
    a = abs(p)
    if a == 0:
        return "0%"
    if a >= 9.995:
        return f"{_half_up(p, 1)}%"
    if a >= 0.9995:
        return f"{_half_up(p, 2)}%"
    if a >= 0.001:
        return f"{_sig2(p)}%"
    return "<0.001%"


def points(v: float) -> str:
    """A waterfall part's points: one decimal, two significant digits under 0.05."""
    if v <= 0:
        return "0"
    return _half_up(v, 1) if v >= 0.05 else _sig2(v) if v >= 0.001 else "<0.001"


def source_text(src: str | None) -> str:
    """Where a peak comes from, in words ("datasheet:V100 SXM2" → "V100 SXM2 datasheet")."""
    s = str(src or "")
    if s.startswith("datasheet:"):
        return f"{s[len('datasheet:'):]} datasheet"
    return {"trace": "from the trace", "option": "--peak-tflops"}.get(s, s)

def _f(x):
    """A finite float, else None."""
    x = float(x)
    return x if math.isfinite(x) else None


def _n(x):
    """A FLOP or byte count as a number JSON keeps exactly enough (None when absent)."""
    x = float(x)
    return (int(round(x)) if abs(x) < 2**53 else x) if math.isfinite(x) else None


def device_json(diag: Diagnosis, d: int) -> dict | None:
    """``devices[d].efficiency`` (None where the diagnosis has no efficiency table)."""
    E = getattr(diag, "efficiency", None)
    if E is None or d >= len(E.flops):
        return None
    est = _n(E.flops_estimated[d])
    return {"flops": _n(E.flops[d]),
            "flops_estimated": est, "hw_flops": _n(E.hw_flops[d]),
            "bytes": _n(E.bytes[d]), "hbm_bytes": _n(E.hbm_bytes[d]),
            "onchip_bytes": _n(E.onchip_bytes[d]), "flops_source": E.flops_source[d] or None,
            "op_time_with_figures": _f(E.known_time[d] / E.op_time[d]) if E.op_time[d] else None,
            "peak_flops_per_s": _f(E.peak_flops[d]), "peak_dtype": E.peak_dtype[d] or None,
            "peak_source": E.peak_source[d] or None, "peak_bytes_per_s": _f(E.peak_bytes[d]),
            "device_model": E.device_model[d] or None,
            "device_identified_by": (E.device_identified_by[d] or None)
            if d < len(E.device_identified_by) else None,
            "achieved_flops_per_s": _achieved(diag, d),
            "mfu": _f(E.mfu[d]),
            "mfu_lower_bound": bool(E.mfu_lower_bound[d]) if d < len(E.mfu_lower_bound) else False,
            "waterfall": W.as_dict(E.waterfall[d]),
            "roofline": {"memory_space": E.bytes_space[d],
                         "intensity": _f(E.intensity[d]), "ridge": _f(E.ridge[d]),
                         "attainable_flops_per_s": _f(E.attainable[d]),
                         "efficiency": _f(E.roofline_efficiency[d]),
                         "bound": _BOUND[int(E.bound[d])], **_onchip(E, d)},
            "bandwidth_utilisation": _f(E.bandwidth_utilisation[d])
            if _has(E, "bandwidth_utilisation", d) else None,
            "matmul_memory_bound": bool(E.matmul_memory_bound[d])
            if _has(E, "matmul_memory_bound", d) else False,
            "formats": _formats(E, d),
            **_graphs(E, d),
            "missing": E.missing[d] or None}


def _formats(E, d: int) -> list:
    """A device's matmul-class work per format (GUIDE §4 "Formats"), most FLOPs first:
    each against the peak of the format it ran in (the one it is converted to where the
    part has no units for it); the MFU parts add up to the MFU where formats mix."""
    if not _has(E, "format_flops", d):
        return []
    fl = E.format_flops[d]
    out = []
    for j in np.argsort(-fl, kind="stable").tolist():
        if not fl[j] > 0:
            break
        out.append({"format": E.format_names[j] or None, "flops": _n(fl[j]),
                    "matmul_time_ns": int(E.format_time[d, j] // 1000),
                    "peak_flops_per_s": _f(E.format_peak[d, j]),
                    "peak_dtype": E.format_peak_dtype[d][j] or None,
                    "mfu": _f(E.format_mfu[d, j])})
    return out


def _graphs(E, d: int) -> dict:
    """The device's graph replays: kernels matched to their capture's launches, of all
    replayed; captured launches the replays did not record (None: no replay)."""
    g = getattr(E, "graphs", None)
    if g is None or d >= g.total.shape[0] or not g.total[d]:
        return {"graph_kernels_matched": None, "graph_kernels_total": None}
    return {"graph_kernels_matched": int(g.matched[d]), "graph_kernels_total": int(g.total[d]),
            "graph_replays": int(g.replays[d]), "graph_launches_unrecorded": int(g.unrecorded[d])}


def _onchip(E, d: int) -> dict:
    """A device's roofline beyond compute and HBM: what bounds it, each resource's
    utilisation, its on-chip bytes and roofs per (space, direction)."""
    if not _has(E, "bound_by", d):
        return {}
    return {"bound_by": _bound_by(E.bound_by[d]), "utilisation": _utilisation(E.utilisation[d]),
            "onchip_bytes_by_space": _by_space(E.onchip_rw[d]),
            "onchip_peaks_bytes_per_s": _by_space(E.onchip_peak[d])}


def _achieved(diag: Diagnosis, d: int):
    """Model FLOP/s over the device's steps window (what an unknown device shows)."""
    E = diag.efficiency
    a, b = diag.devices.window(d)
    f = float(np.nan_to_num(E.flops[d]) + np.nan_to_num(E.flops_estimated[d]))
    return _f(f / ((b - a) * 1e-12)) if b > a and f > 0 else None


def step_json(diag: Diagnosis, s: int, d: int) -> dict:
    """The efficiency figures of step row ``s`` on device ``d``: flops, mfu, waterfall."""
    E = getattr(diag, "efficiency", None)
    if E is None or s >= E.step_flops.shape[0]:
        return {}
    return {"flops": _n(E.step_flops[s, d]), "mfu": _f(E.step_mfu[s, d]),
            # two decimals: a step's row is repeated per step and device in the page's answer
            "waterfall": W.as_dict(E.step_waterfall[s, d].astype(np.float64), digits=2)}


def run_files(n: int) -> str:
    """Where a run's peer wait comes from, in words: its files, or one file's devices."""
    return "among this file's devices" if n == 1 else f"of the run's {n} files (ranks or hosts)"


RUN_NOTE = ("peer wait from the collectives {files}: at each "
            "instance, min(op duration, last arrival − own arrival), as a share of the "
            "device's matched collective time in the window; the rest of the collectives "
            "is transfer, in no_matmul_work")


def run_json(diag: Diagnosis, rw) -> dict | None:
    """The waterfalls of ``diag`` as part of its run (``run_peer.RunWaterfall``): per
    device its steps window's, per step id and device its step's, only where the run's
    join covers the cell (elsewhere the diagnosis' own rows stand); None without one."""
    E = getattr(diag, "efficiency", None)
    if rw is None or E is None:
        return None
    D, S = diag.devices, diag.steps
    # the cells with a waterfall (FLOP figures and a peak) only; none: None
    act = np.asarray(D.ops) > 0
    has = np.isfinite(rw.waterfall).all(axis=1)
    devs = {str(d): {"name": D.name[d], "mfu": _f(E.mfu[d]),
                     "waterfall": W.as_dict(rw.waterfall[d])}
            for d in np.flatnonzero(act & rw.joined & has).tolist()}
    steps: dict = {}
    s_has = np.isfinite(rw.step_waterfall).all(axis=2) & rw.step_joined & act[None, :]
    for s, d in np.argwhere(s_has).tolist():
        steps.setdefault(str(int(S.ids[s])), {})[str(d)] = \
            W.as_dict(rw.step_waterfall[s, d], digits=2)
    if not devs and not steps:
        return None
    return {"hosts": int(rw.hosts), "note": RUN_NOTE.format(files=run_files(int(rw.hosts))),
            "devices": devs, "steps": steps}


def run_text_lines(doc: dict | None) -> list:
    """The terminal lines of ``run_json``: per device its waterfall with the run's peer
    wait, as ``text_lines`` writes a file's own."""
    if not doc:
        return []
    L = []
    for x in doc["devices"].values():
        if not x["waterfall"]:
            continue
        parts = sorted(x["waterfall"].items(), key=lambda kv: -kv[1])
        L.append(f"with the peer wait from the collectives {run_files(doc['hosts'])}: " + ", ".join(
            f"{part_label(k)} {points(v)}" for k, v in parts if v >= 0.05 or k in (W.MFU, W.PEER)))
    return L


def bin_mfu(diag: Diagnosis, d: int, lo: np.ndarray, windows: np.ndarray) -> list | None:
    """Per bin of consecutive steps (starting at the step rows ``lo``, their windows'
    sums ``windows`` ps): the bin's FLOPs over its windows at peak (None where absent)."""
    E = getattr(diag, "efficiency", None)
    if E is None or d >= E.step_flops.shape[1] or not np.isfinite(E.peak_flops[d]):
        return None
    fl = np.add.reduceat(np.nan_to_num(E.step_flops[:, d]), lo)
    with np.errstate(divide="ignore", invalid="ignore"):
        m = fl / (np.asarray(windows, np.float64) * 1e-12 * float(E.peak_flops[d]))
    return [_f(x) if x > 0 else None for x in m.tolist()]


def op_roofline(diag: Diagnosis, r: int) -> dict | None:
    """The roofline figures of device-op-table row ``r`` (whole capture)."""
    E = getattr(diag, "efficiency", None)
    if E is None or r >= len(E.row_flops):
        return None
    return {"flops": _n(E.row_flops[r]), "hw_flops": _n(E.row_hw_flops[r]),
            "bytes": _n(E.row_bytes[r]), "hbm_bytes": _n(E.row_hbm_bytes[r]),
            "memory_space": _SPACE[int(E.row_bytes_space[r])], "matmul": bool(E.row_matmul[r]),
            "flops_per_s": _f(E.row_flops_per_s[r]), "bytes_per_s": _f(E.row_bytes_per_s[r]),
            "intensity": _f(E.row_intensity[r]),
            "attainable_flops_per_s": _f(E.row_attainable[r]),
            "efficiency": _f(E.row_efficiency[r]), "bound": _BOUND[int(E.row_bound[r])],
            **({"bound_by": _bound_by(E.row_bound_by[r]),
                "above_roof": bool(above_roof(E.row_utilisation[r][None])[0]),
                "utilisation": _utilisation(E.row_utilisation[r]),
                "onchip_bytes_by_space": _by_space(E.row_onchip_rw[r])}
               if _has(E, "row_bound_by", r) else {})}


def roofline_json(diag: Diagnosis, d: int) -> dict | None:
    """Device ``d``'s roofline: its roofs and its op groups with FLOPs or bytes (the
    ``ROOFLINE_POINTS`` with most time), each naming its device-op-table row."""
    E = getattr(diag, "efficiency", None)
    T = diag.device_ops
    if E is None or T is None or d >= len(E.flops):
        return None
    rows = np.flatnonzero((T.device == d) & ((E.row_hw_flops > 0) | (E.row_bytes > 0))
                          & (E.row_bound >= 0))
    rows = rows[np.lexsort((rows, -T.time[rows]))][:ROOFLINE_POINTS]
    busy = max(int(diag.devices.busy[d]), 1)
    pts = [{"row": int(r), "name": T.name[r], "total_ns": int(np.rint(T.time[r] / 1000)),
            "share_of_busy": float(T.time[r]) / busy, **op_roofline(diag, r)}
           for r in rows.tolist()]
    return {"peak_flops_per_s": _f(E.peak_flops[d]), "peak_bytes_per_s": _f(E.peak_bytes[d]),
            "memory_space": E.bytes_space[d], "ridge": _f(E.ridge[d]), "dtype": E.peak_dtype[d] or None,
            "onchip_peaks_bytes_per_s": _by_space(E.onchip_peak[d]) if _has(E, "onchip_peak", d) else None,
            "points": pts}


def text_lines(diag: Diagnosis, run: dict | None = None) -> list:
    """The terminal report's efficiency lines: per device MFU and its waterfall, and the
    waterfall with the run's peer wait under it where ``run`` (``run_json``) has one."""
    E = getattr(diag, "efficiency", None)
    if E is None:
        return []
    L = []
    for d in np.flatnonzero(diag.devices.ops > 0).tolist():
        e = device_json(diag, d)
        name = diag.devices.name[d]
        if e.get("device_model"):
            name += f" ({e['device_model']})"
        fl = (e["flops"] or 0) + (e["flops_estimated"] or 0)
        if not fl:
            L.append(f"efficiency, {name}: no FLOP figures ({e['missing'] or 'none'})")
            if e.get("graph_kernels_total"):
                L.append("  " + graph_text(e))
            continue
        pk = e["peak_flops_per_s"]
        head = (f"efficiency, {name}: {si(fl, 'FLOP')}"
                + (f" ({si(e['flops_estimated'], 'FLOP')} estimated)" if e["flops_estimated"] else ""))
        if pk:
            # ops with no cost figure count no FLOPs: the MFU is then a floor ("≥")
            m = pct(e["mfu"])
            head += (f", MFU {'≥' if e['mfu_lower_bound'] and not m.startswith('<') else ''}{m} of "
                     f"{si(pk, 'FLOP/s')} {e['peak_dtype']} "
                     f"({source_text(e['peak_source'])}"
                     + (f", identified by {e['device_identified_by']}"
                        if e.get("device_identified_by") else "") + ")")
        elif e["achieved_flops_per_s"]:
            head += f", {si(e['achieved_flops_per_s'], 'FLOP/s')} achieved, no peak known"
        if e["matmul_memory_bound"] and e["bandwidth_utilisation"] is not None:
            # memory-bound matmuls (decode): bytes moved are what the device can do
            head += (f"; bandwidth {pct(e['bandwidth_utilisation'])} of "
                     f"{si(e['peak_bytes_per_s'], 'B/s')} (its matmuls are memory-bound)")
        rf = e["roofline"]
        if rf["bound"]:
            what = bound_label(rf.get("bound_by"), rf["memory_space"]) or rf["bound"]
            # the roofline plots hardware FLOPs: a Winograd convolution does fewer than the
            # model counts, so its share of the roofline can sit below the MFU
            hw, model = e["hw_flops"] or 0, fl
            head += (f"; {what}-bound, {pct(rf['efficiency'] or 0)} of roofline"
                     + (f" (of its {si(hw, 'FLOP')} hardware FLOPs, fewer than the model "
                        f"counts: fast algorithms such as Winograd)" if 0 < hw < 0.99 * model
                        else ""))
        L.append(head)
        if len(e.get("formats") or []) > 1 and "+" in str(e["peak_dtype"] or ""):
            L.append("  formats (each against its own peak): " + "; ".join(
                f"{f['format']} {si(f['flops'], 'FLOP')}, MFU {pct(f['mfu'] or 0)} of "
                f"{si(f['peak_flops_per_s'] or 0, 'FLOP/s')}"
                + (f" (as {f['peak_dtype']})" if f["peak_dtype"] != f["format"] else "")
                for f in e["formats"] if f["peak_flops_per_s"]))
        if e["waterfall"]:
            parts = sorted(e["waterfall"].items(), key=lambda kv: -kv[1])
            L.append("  waterfall (points of the window at peak): " + ", ".join(
                f"{part_label(k)} {points(v)}" for k, v in parts if v >= 0.05 or k == "mfu"))
            mine = ((run or {}).get("devices") or {}).get(str(d))
            if mine:
                L += ["  " + x for x in run_text_lines({**run, "devices": {str(d): mine}})]
        if e.get("graph_kernels_total"):
            L.append("  " + graph_text(e))
        if e["missing"]:
            L.append(f"  missing: {e['missing']}")
    return L


def graph_text(e: dict) -> str:
    """The line on a device's graph replays: how many replayed kernels took their
    figures from the capture, and the work the replays did not record."""
    m, t, r = e["graph_kernels_matched"], e["graph_kernels_total"], e["graph_replays"]
    s = (f"graph replays: {r}, {m} of {t} replayed kernels matched to the ops that captured "
         f"them" + ("" if m else " (no capture read: the replayed kernels have no cost figure)"))
    u = e.get("graph_launches_unrecorded") or 0
    if u:
        s += (f"; {u} captured launches not recorded in the replays: duty cycle and MFU are "
              f"lower bounds")
    return s
