"""What each device loses to each cause of idle time, split the way every face says it:
per typical step (the mean over the steps the typical step is the mean of, so a loss per
step never exceeds the step) and once (the rest of the device's window: the steps that
compile or stall, start-up, work outside the steps).  Also which device a host's page
opens on.  Pure: reads a ``Diagnosis``, never a trace."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..result import Diagnosis, OpClass


NEGLIGIBLE = 1e-4   # of the typical step: a per-step part below this is no rate worth saying


@dataclass
class DeviceLosses:
    per_step: np.ndarray    # (n_dev, n_causes) float64 ps: mean idle per typical step
    once: np.ndarray        # (n_dev, n_causes) int64 ps: idle outside the typical steps
    typical_steps: int      # how many steps the per-step figures average over
    # (n_dev,) float64 ps: each device's own window per typical step (its step windows'
    # mean), what its per-step losses are parts of; it differs from the host's typical
    # step where the device runs behind the host (None without steps)
    step_window: np.ndarray | None = None


def device_losses(diag: Diagnosis) -> DeviceLosses:
    """Each device's idle by cause (``DeviceTable.idle_by_cause``, over its window) split
    into the mean over the typical steps and the rest, paid once."""
    D, S = diag.devices, diag.steps
    total = np.asarray(D.idle_by_cause, np.int64)
    n_dev = total.shape[0]
    if not len(S) or S.idle_by_cause.shape[1] != n_dev:
        return DeviceLosses(np.zeros(total.shape), total.copy(), 0, None)
    typ = S.typical()
    k = int(typ.sum())
    inside = np.asarray(S.idle_by_cause, np.int64)[typ].sum(axis=0) if k else np.zeros_like(total)
    # the steps' windows on a device can reach past its own window (idle before its first
    # op counts in a step): the typical steps' part is capped at the device's total
    inside = np.minimum(inside, total)
    per = inside / k if k else np.zeros(total.shape)
    # a loss paid mostly once whose per-step part is a trace of the step (1 ns of a 784 ms
    # step) is said once: "5369 ms once", not "1 ns per step, 5369 ms once"
    step = S.typical_step_ps() or 0.0
    trace = (per < NEGLIGIBLE * step) & (total - inside > inside)
    inside = np.where(trace, 0, inside)
    per = np.where(trace, 0.0, per)
    win = np.maximum(np.asarray(S.win_end, np.int64) - np.asarray(S.win_start, np.int64), 0)
    window = win[typ].sum(axis=0) / k if k else None
    return DeviceLosses(per, total - inside, k, window)


def compute_devices(diag: Diagnosis) -> np.ndarray:
    """bool per device: it ran compute ops (not copies or collectives alone)."""
    n = len(diag.devices)
    T = diag.device_ops
    if T is None or not len(T):
        return np.asarray(diag.devices.ops, np.int64) > 0
    c = np.asarray(T.klass) == OpClass.COMPUTE
    t = np.bincount(np.asarray(T.device, np.int64)[c],
                    weights=np.asarray(T.time, np.float64)[c], minlength=n)[:n]
    return t > 0


def primary_device(diag: Diagnosis, losses: DeviceLosses | None = None) -> int | None:
    """The device a host's page opens on: one that computes (a copy-only GPU beside it
    tells nothing), of those the one losing most per step (the straggler), then the
    most once; None without device activity."""
    act = np.asarray(diag.devices.ops, np.int64) > 0
    if not act.any():
        return None
    L = losses or device_losses(diag)
    comp = compute_devices(diag) & act
    pool = np.flatnonzero(comp if comp.any() else act)
    per = L.per_step.sum(axis=1)[pool]
    once = L.once.sum(axis=1)[pool].astype(np.float64)
    # lexsort: the last key leads; the lowest id wins a tie
    order = np.lexsort((pool, -once, -np.round(per, -3)))
    return int(pool[order[0]])
