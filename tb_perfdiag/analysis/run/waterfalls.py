"""The MFU waterfall of one file as part of its run: peer wait from the run's collective join.

A file's own waterfall (``mfu.efficiency_table``) knows peer wait only where the peers
are devices of the same trace; in a distributed PyTorch job each rank writes its own
file, so all of a rank's exposed collective time falls in ``no_matmul_work``.  The run's
join (``run.join``, across its files) knows each participant's wait at every
instance.  Here the collectives' points of each window (``EfficiencyTable.coll_points``,
``step_coll_points``) are split again at the share of the rank's matched collective time
spent waiting for the last peer (``waterfall.with_peer_wait``):

- per device, over its steps window (every instance of the device: the window holds all
  of its activity);
- per (step, device), over the step's window (the instances the step launched).

Computed where the run's join is, never in the per-file diagnosis: the cached diagnosis of
a file stays a function of that file alone.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..efficiency import waterfall as W
from .peer_wait import join_wait


def _frac(w, d):
    w, d = np.asarray(w, np.float64), np.asarray(d, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(d > 0, w / np.where(d > 0, d, 1), np.nan)


def device_rows(rows, coll, wait, dur):
    """(waterfall rows (n_dev, n_parts) with the run's peer wait, the devices the join
    covers (bool)) from a file's device waterfalls ``rows``, their collectives' points
    ``coll`` and the devices' ``wait`` and ``dur`` in the join (``JoinWait``); a device
    the join does not cover keeps its own row."""
    f = _frac(wait, dur)
    return W.with_peer_wait(rows, coll, f), np.isfinite(f)


def step_rows(rows, coll, wait, dur):
    """``device_rows`` of the (step, device) waterfalls: rows (n_steps, n_dev, n_parts)."""
    rows = np.asarray(rows, np.float64)
    n_s, n_d, n_p = rows.shape
    f = _frac(wait, dur)
    out = W.with_peer_wait(rows.reshape(-1, n_p), np.asarray(coll, np.float64).reshape(-1),
                           f.reshape(-1))
    return out.reshape(n_s, n_d, n_p), np.isfinite(f)


@dataclass
class RunWaterfall:
    """A diagnosis' waterfalls with the peer wait its run's join gives (``joined``: the
    cells the join covers; elsewhere the file's own rows)."""

    waterfall: np.ndarray        # (n_dev, n_parts)
    joined: np.ndarray           # (n_dev,) bool
    step_waterfall: np.ndarray   # (n_steps, n_dev, n_parts)
    step_joined: np.ndarray      # (n_steps, n_dev) bool
    hosts: int                   # the run's files in the join


def run_waterfall(diag, j, host: str) -> RunWaterfall | None:
    """The run-aware waterfalls of ``diag`` (the file of ``host`` in the join ``j``);
    None without an efficiency table or where the join does not hold the host."""
    E = getattr(diag, "efficiency", None)
    if E is None or E.coll_points is None or len(E.coll_points) != len(E.mfu):
        return None
    jw = join_wait(j, host, list(diag.devices.name), diag.steps.ids)
    if jw is None:
        return None
    wf, ok = device_rows(E.waterfall, E.coll_points, jw.wait, jw.dur)
    if E.step_coll_points.shape != E.step_mfu.shape:
        swf, sok = np.asarray(E.step_waterfall, np.float64), np.zeros(E.step_mfu.shape, bool)
    else:
        swf, sok = step_rows(E.step_waterfall, E.step_coll_points, jw.step_wait, jw.step_dur)
    return RunWaterfall(wf, ok, swf, sok, jw.hosts)
