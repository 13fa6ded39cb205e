"""The split of each device's idle by cause into a loss per typical step and a loss paid
once (``analysis/steps/losses.py``), on step tables written here."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from tb_perfdiag.analysis import causes as C
from tb_perfdiag.analysis.result import StepNumbers
from tb_perfdiag.analysis.steps.losses import device_losses

MS = 1_000_000_000       # ps
UNTRACED = C.ALL.index(C.UNTRACED)
DATA = C.ALL.index(C.DATA_LOADING)


def _diag(step_idle: np.ndarray, total_idle: np.ndarray, step_ps: int = 784 * MS):
    """One device; ``step_idle``: (n_steps, n_causes) ps inside each step, ``total_idle``:
    (n_causes,) ps over the device's whole window."""
    n = step_idle.shape[0]
    z = np.zeros((n, 1), np.int64)
    start = np.arange(n, dtype=np.int64) * step_ps
    steps = StepNumbers(np.arange(n), start, start + step_ps, "test", np.ones(1, bool), z, z, z,
                        step_idle[:, None, :], z, z, np.zeros(n, np.int64),
                        np.zeros(n, np.int64), np.zeros(n, bool))
    return SimpleNamespace(devices=SimpleNamespace(idle_by_cause=total_idle[None, :]),
                           steps=steps)


def test_a_loss_paid_once_with_a_trace_of_it_in_the_steps_is_said_once():
    # the TPU sample: 5369 ms untraced before the first step, 1 ns of it in each of 100 steps
    per = np.zeros((100, len(C.ALL)), np.int64)
    per[:, UNTRACED] = 1_000                      # 1 ns
    per[:, DATA] = 2 * MS                         # a real rate: 2 ms of a 784 ms step
    total = np.zeros(len(C.ALL), np.int64)
    total[UNTRACED] = 5369 * MS
    total[DATA] = 200 * MS + 50 * MS
    L = device_losses(_diag(per, total))
    assert L.per_step[0, UNTRACED] == 0 and L.once[0, UNTRACED] == 5369 * MS
    assert L.per_step[0, DATA] == 2 * MS and L.once[0, DATA] == 50 * MS
    # nothing lost in the split: per step × steps + once is the whole
    assert np.allclose(L.per_step[0] * L.typical_steps + L.once[0], total)


def test_a_small_rate_that_is_most_of_its_cause_stays_a_rate():
    per = np.zeros((100, len(C.ALL)), np.int64)
    per[:, UNTRACED] = 1_000                      # 1 ns a step, nothing outside the steps
    total = np.zeros(len(C.ALL), np.int64)
    total[UNTRACED] = 100 * 1_000
    L = device_losses(_diag(per, total))
    assert L.per_step[0, UNTRACED] == 1_000 and L.once[0, UNTRACED] == 0
