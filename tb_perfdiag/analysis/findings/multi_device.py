"""Devices of one file: skew (one busier than the others) and devices running in turn instead
of together."""
from __future__ import annotations

import numpy as np

from ...trace.classify import is_collective_kernel
from ...trace.model import Trace
from .fixes import fix_for
from ..steps.capture_notes import kernels_per_device
from ..result import Finding, FindingKind as FK
from .common import _fmt, Scope


# events looked at a block at a time where a column over them all is not needed (the
# multi-device finding's masks and gathers over 40 M events were 0.45 GB, at the process'
# peak)
_BLOCK = 1 << 20


def _collective_ps(trace: Trace, d: int) -> int:
    """Time of device ``d``'s collective kernels (its activity whose name is one), each
    distinct name classified once, the ops read a block at a time."""
    ops = trace.activity_of(d)
    seen = np.zeros(len(trace.strings), bool)
    for i in range(0, ops.shape[0], _BLOCK):
        seen[trace.name[ops[i:i + _BLOCK].astype(np.intp)]] = True
    u = np.flatnonzero(seen)
    is_c = seen
    is_c[u] = [is_collective_kernel(trace.strings[x]) for x in u.tolist()]
    total = 0
    for i in range(0, ops.shape[0], _BLOCK):
        blk = ops[i:i + _BLOCK].astype(np.intp)
        total += int(trace.dur[blk[is_c[trace.name[blk]]]].sum())
    return total


def _multi_device(trace: Trace, diag, n_steps: int, fw: str) -> list:
    D = diag.devices
    # devices that compute: a copy-only device is not "skewed" against a compute one
    kern = kernels_per_device(trace, len(D))
    devs = [d for d in np.flatnonzero(D.ops > 0).tolist() if kern[d] > 0]
    if len(devs) < 2:
        return []
    out = []
    busy_ns = np.rint(D.busy / 1000).astype(np.int64)
    busy = busy_ns[devs].astype(float)
    skew = busy.max() - busy.min()
    slow = D.name[devs[int(np.argmax(busy))]]
    coll = {D.name[d]: _collective_ps(trace, d) // 1000 for d in devs}
    S = diag.steps
    win_ns = np.rint(S.win_end / 1000).astype(np.int64) - np.rint(S.win_start / 1000).astype(
        np.int64)
    per_step_dev = {D.name[d]: win_ns[:, d].tolist() for d in devs if len(S)}
    detail = (f"Busy time differs by {_fmt(skew)} across {len(devs)} devices "
              f"({slow} is busiest). Collective time per device: " +
              ", ".join(f"{k}: {_fmt(v)}" for k, v in coll.items()) + ".")
    none = np.zeros(0, np.int32)
    # per step: how much longer the busiest device worked than the least busy one, inside
    # the step (the whole-trace difference may lie outside every step)
    in_steps = int(np.rint((S.busy[:, devs].max(axis=1) - S.busy[:, devs].min(axis=1))
                           / 1000).sum()) if len(S) else int(skew)
    if busy.max() > 0 and skew / busy.max() > 0.05:
        out.append(Finding(FK.DEVICE_SKEW, f"Device skew: {slow} does more work", detail,
                           fix_for("device_skew", "*", fw),
                           "medium", int(skew), int(min(skew, in_steps) / n_steps), [], none,
                           extra={"per_device_busy_ns": {D.name[d]: int(busy_ns[d])
                                                         for d in devs},
                                  "collective_ns": coll,
                                  "per_device_step_ns": {k: int(np.mean(v))
                                                         for k, v in per_step_dev.items()}}))
    # devices running in turn: little overlap of busy time between devices
    lo_ns = np.rint(D.lo / 1000).astype(np.int64)
    hi_ns = np.rint(D.hi / 1000).astype(np.int64)
    spans = [(int(lo_ns[d]), int(hi_ns[d])) for d in devs]
    overlap = max(0, min(e for _, e in spans) - max(s for s, _ in spans))
    longest = max(e - s for s, e in spans)
    if longest and overlap < 0.2 * longest:
        # the wall-clock time running together would save: the union of the spans less
        # the longest; per step, the same within the steps' windows
        lost = _union_ns(spans) - longest
        inside = lost
        if len(S):
            w0 = int(np.rint(S.win_start[:, devs].min() / 1000))
            w1 = int(np.rint(S.win_end[:, devs].max() / 1000))
            cl = [(max(a, w0), min(b, w1)) for a, b in spans]
            cl = [(a, b) for a, b in cl if b > a]
            inside = _union_ns(cl) - max((b - a for a, b in cl), default=0)
        extra = {"outside_steps_ns": int(lost - inside)} if inside < lost else {}
        out.append(Finding(FK.SERIALIZED_DEVICES, "Devices run in turn, not together",
                           "The devices' active spans barely overlap.",
                           fix_for("serialized_devices", "*", fw),
                           "medium", int(lost), int(inside / n_steps), [], none,
                           ranges=[list(x) for x in spans], extra=extra))
    return out


def _union_ns(spans: list) -> int:
    """Length of the union of (start, end) spans."""
    total, end = 0, None
    for a, b in sorted(spans):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def detect(s: Scope) -> None:
    s.made(_multi_device(s.trace, s.diag, s.n_steps, s.fw))
