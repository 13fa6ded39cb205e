"""Peer wait (GUIDE §4): the one place a participant's wait in its run's join
(``Join.wait``: min(its op's duration, last arrival − its arrival), per instance and
participant) is summed for a file — per device over every instance, and per (step, device)
over the instances each step launched.  Every face reads these sums: the waterfalls
(``run.waterfalls``), the per-step cells of compare and check, the Collectives card."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class JoinWait:
    """One file's waits in a run's join, ns: per device (every instance) and per (step
    row, device) (the instances the step launched); ``dur``: those instances' durations
    (wait + transfer)."""

    wait: np.ndarray            # (n_dev,)
    dur: np.ndarray             # (n_dev,)
    step_wait: np.ndarray       # (n_steps, n_dev)
    step_dur: np.ndarray        # (n_steps, n_dev)
    hosts: int                  # the run's files in the join


def join_wait(j, host: str, names: list, step_ids) -> JoinWait | None:
    """``host``'s waits in the join ``j``, its devices matched by name (``names``: the
    file's device names, in its order) and its instances' steps by id (``step_ids``: the
    file's step ids, in row order); None when it takes part in no joined instance."""
    taking_part = j.devices_of(host, list(names)) if j is not None else []
    if not taking_part:
        return None
    ids = np.asarray(step_ids, np.int64).reshape(-1)
    order = np.argsort(ids, kind="stable")
    n_s, n_d = ids.size, len(names)
    out = JoinWait(np.zeros(n_d), np.zeros(n_d), np.zeros((n_s, n_d)), np.zeros((n_s, n_d)),
                   len(j.hosts))
    dur = (j.wait + j.transfer).astype(np.float64)
    for c, d, hit in taking_part:
        w, du = j.wait[hit, c].astype(np.float64), dur[hit, c]
        out.wait[d] += w.sum()
        out.dur[d] += du.sum()
        if not n_s:
            continue
        st = j.step[hit, c]
        at = np.clip(np.searchsorted(ids[order], st), 0, n_s - 1)
        ok = ids[order][at] == st
        row = order[at[ok]]
        np.add.at(out.step_wait[:, d], row, w[ok])
        np.add.at(out.step_dur[:, d], row, du[ok])
    return out


def peer_wait_cells(j, host: str, diag) -> np.ndarray | None:
    """(n_steps, n_devices) ps: the peer wait of ``host``'s devices in each step of its
    diagnosis (``join_wait``'s per-step sums), matched by step id and device name; None
    when ``host`` takes part in no joined instance.  Instances launched outside any step
    count in no cell."""
    jw = join_wait(j, host, list(diag.devices.name), diag.steps.ids)
    return None if jw is None else jw.step_wait * 1000
