"""XLA's own cost figures of each op, as a TPU XSpace keeps them on the op's metadata
(``flops``, ``model_flops``, ``bytes_accessed`` and its split by memory space,
``memory_access_breakdown``; the reader keeps one row per op of a program in ``Trace.metadata["device_planes"][device]["op_costs"]``)."""
from __future__ import annotations

import numpy as np

from ...trace.model import Trace, lookup_together
from .opcosts import DTYPES, ONCHIP_RW, UNKNOWN_DTYPE, OpCosts, distinct_rows

# XLA op categories (``hlo_category``) whose work is matrix-unit work
_MATMUL_CATEGORIES = ("convolution", "convolution fusion", "convolution-base", "dot",
                      "matmul", "output fusion")
# element types of the HLO shape text, to the dtype a dot ran in
_ELEMENT_DTYPE = {"f32": "fp32", "bf16": "bf16", "f16": "fp16", "f8e4m3fn": "fp8",
                  "f4e2m1fn": "mxfp4", "f6e2m3fn": "mxfp6", "f6e3m2fn": "mxfp6",
                  "f8e5m2": "fp8", "f8e4m3": "fp8", "f8e4m3b11fnuz": "fp8", "s8": "int8",
                  "u8": "int8", "f64": "fp64"}


def _key_codes(trace: Trace, events: np.ndarray, device_of: np.ndarray):
    """Per event, a code of its (device, program, hlo_op, hlo_category), and the distinct
    keys; None where no op has an ``hlo_op``."""
    if trace.stats.get("hlo_op") is None:
        return None
    cols = [device_of]
    for got in lookup_together([trace.stats.get(s) for s in _KEY_STATS], events):
        cols.append(np.full(events.shape[0], -1, np.int64) if got is None else
                    np.where(got[1], got[0], -1))
    return distinct_rows(*cols)


# the op's key: its program's and its own name, and its category (a key's op class)
_KEY_STATS = ("program_id", "hlo_op", "hlo_category")


def from_op_stats(trace: Trace, events: np.ndarray) -> OpCosts | None:
    """Costs from the ops' XLA cost stats, held per distinct op; None where no device
    plane carries them."""
    planes = trace.metadata.get("device_planes") or {}
    tables = {d: f["op_costs"] for d, f in planes.items() if "op_costs" in f}
    if not tables or events.shape[0] == 0:
        return None
    device_of = trace.track_device[trace.track[events]]
    got = _key_codes(trace, events, device_of)
    if got is None:
        return None
    uniq, inv = got
    # per device: {(program, hlo_op): row}; a program id absent on the metadata (-1)
    # matches the op by name alone
    lookup = {}
    for d, (ops, prog, *_r) in tables.items():
        lookup[d] = {(int(p), o): i for i, (o, p) in enumerate(zip(ops, prog.tolist()))}
    nk = uniq.shape[0]
    dt = np.full(nk, UNKNOWN_DTYPE, np.int8)
    fl = np.zeros(nk)
    mfl = np.zeros(nk)
    by = np.zeros(nk)
    hbm, onchip = np.full(nk, np.nan), np.full(nk, np.nan)
    rw = np.full((nk, len(ONCHIP_RW)), np.nan)
    known = np.zeros(nk, bool)
    for k, (d, p, o, _c) in enumerate(uniq.tolist()):   # one per distinct op, not event
        if o < 0 or d not in lookup:
            continue
        name = trace.strings[o]
        row = lookup[d].get((p, name))
        if row is None:
            row = lookup[d].get((-1, name))
        if row is None:
            continue
        _, _, f, mf, b, shape, *split = tables[d]
        fl[k], mfl[k], by[k] = f[row], mf[row], b[row]
        if split:
            hbm[k], onchip[k] = split[0][row], split[1][row]
            if len(split) > 2:
                rw[k] = split[2][row]
        dt[k] = DTYPES.index(element_dtype(shape[row]))
        known[k] = True
    # model FLOPs where XLA gives them; its ``flops`` count what the hardware ran
    hw = np.where(np.isnan(fl), np.where(np.isnan(mfl), 0.0, mfl), fl)
    model = np.where(np.isnan(mfl), hw, mfl)
    by = np.nan_to_num(by)
    matmul = _matmul(trace, uniq[:, 3])
    dtype = np.where(matmul, dt, UNKNOWN_DTYPE).astype(np.int8)
    return OpCosts(events, model, hw, by, np.zeros(nk, bool), matmul, dtype, known,
                   "xla_op_stats", "" if known.all() else "some ops carry no XLA cost figures",
                   code=inv.reshape(-1), hbm_bytes=hbm, onchip_bytes=onchip,
                   **{f"{k}_bytes": rw[:, j] for j, k in enumerate(ONCHIP_RW)})


def _matmul(trace: Trace, category: np.ndarray) -> np.ndarray:
    """Matmul class from the op's XLA category (``hlo_category`` string ids, −1 none)."""
    return np.array([c >= 0 and any(w in trace.strings[c].lower() for w in _MATMUL_CATEGORIES)
                     for c in category.tolist()], bool)


def element_dtype(shape_text: str) -> str:
    """The DTYPES name of an HLO shape text's first element type ("" unknown)."""
    t = shape_text.lstrip("(").split("[", 1)[0].strip()
    return _ELEMENT_DTYPE.get(t, "")
