#!/usr/bin/env python3
"""Real JAX-profiler captures of one training job on XLA:CPU, profiled again and again
(issue 62: a run over time): one Profile-plugin session per capture, as a periodic
``jax.profiler.start_trace``/``stop_trace`` leaves them.

Run with the generator venv of make_captures.sh (``.gen-venv/jax``: jax/jaxlib 0.10.2):

    python capture_jax_trend.py --out /tmp/jax_trend [--captures 12] [--steps 3]
    TB_PERFDIAG_TREND_CAPTURES=/tmp/jax_trend pytest tests/test_trend.py -k real

The captures are not bundled in testdata/captures (about 3 MB, a 0-byte file among them,
and every test that walks testdata reads every trace there): tests/test_trend.py reads
them where ``TB_PERFDIAG_TREND_CAPTURES`` says, and skips without.

Writes ``<out>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/cpuhost.xplane.pb`` per capture (a
second apart: the session name is the capture's UTC start) and the ground truth
(``--ground-truth``, else ``<out>/TREND_TRUTH.json``):
which capture carries which injected regression —

* ``data_loading``: every step's ``TraceAnnotation('data_loading')`` sleeps
  ``STALL_S`` instead of ``SLEEP_S`` (the input pipeline degrading);
* ``compilation``: every step's batch has a new size, so ``train_step`` compiles again in
  every step (a recompilation storm, as when a sequence length starts to vary);
* ``empty``: the capture's file is truncated to 0 bytes after the capture (what JAX leaves
  when a space exceeds 2 GB: it writes a 0-byte ``.xplane.pb`` and reports success).

The job is compiled before the first capture, so the other captures are its steady state.
Steps are ``StepTraceAnnotation('train', step_num=<global step>)``, continuing across
captures (a few steps run unprofiled between them).  The Python tracer is off.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

import numpy as np
import jax

from capture_jax import BATCH, HOST_FILE, SIZES, init_params, train_step

SLEEP_S = 0.003
STALL_S = 0.250                  # well past a loaded 2-core machine's own spread
BETWEEN = 3                      # steps run unprofiled between two captures


def plan(n: int) -> dict:
    out = {i: "" for i in range(n)}
    out[n // 4] = "data_loading"
    out[n // 2 + 1] = "empty"
    out[n - 2] = "compilation"
    return out


def batch(rng, size: int):
    x = rng.standard_normal((size, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], size=(size,)).astype(np.int32)
    return x, y


def capture(out: str, first_step: int, steps: int, kind: str, params, rng):
    before = set(_sessions(out))
    opts = jax.profiler.ProfileOptions()
    opts.python_tracer_level = 0
    jax.profiler.start_trace(out, profiler_options=opts)
    for k in range(steps):
        step = first_step + k
        with jax.profiler.StepTraceAnnotation("train", step_num=step):
            with jax.profiler.TraceAnnotation("data_loading"):
                size = 64 + step % 60 if kind == "compilation" else BATCH
                x, y = batch(rng, size)
                time.sleep(STALL_S if kind == "data_loading" else SLEEP_S)
            params, loss = train_step(params, x, y)
            jax.block_until_ready(loss)
    jax.profiler.stop_trace()
    new = sorted(set(_sessions(out)) - before)
    if len(new) != 1:
        sys.exit(f"expected one new session, got {new}")
    d = os.path.join(out, "plugins", "profile", new[0])
    for f in os.listdir(d):
        if f.endswith(".trace.json.gz"):
            os.remove(os.path.join(d, f))         # the lossy duplicate of the XSpace
        elif f.endswith(".xplane.pb") and f != HOST_FILE:
            os.rename(os.path.join(d, f), os.path.join(d, HOST_FILE))
    if kind == "empty":
        open(os.path.join(d, HOST_FILE), "wb").close()
    return new[0], params


def _sessions(out: str) -> list:
    root = os.path.join(out, "plugins", "profile")
    return os.listdir(root) if os.path.isdir(root) else []


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="log dir to (re)create")
    ap.add_argument("--captures", type=int, default=12)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--ground-truth", help="write the ground truth JSON here (else into "
                                           "<out>/TREND_TRUTH.json)")
    a = ap.parse_args(argv)
    if os.path.isdir(a.out):
        shutil.rmtree(a.out)
    os.makedirs(a.out)
    rng = np.random.default_rng(0)
    params = init_params(jax.random.PRNGKey(0))
    x, y = batch(rng, BATCH)
    params, loss = train_step(params, x, y)      # compiled before any capture
    jax.block_until_ready(loss)
    truth, step = {}, 1
    for i, kind in plan(a.captures).items():
        time.sleep(1.05)                         # a session name per second
        name, params = capture(a.out, step, a.steps, kind, params, rng)
        truth[name] = {"injected": kind, "first_step": step}
        step += a.steps
        for _ in range(BETWEEN):
            x, y = batch(rng, BATCH)
            params, loss = train_step(params, x, y)
        step += BETWEEN
    gt = {"tool": "jax.profiler.start_trace/stop_trace (XSpace) per capture, python tracer off",
          "jax_version": jax.__version__, "steps_per_capture": a.steps,
          "step_annotation": "StepTraceAnnotation('train', step_num=<global step>)",
          "data_loading_sleep_s": SLEEP_S, "stall_s": STALL_S, "captures": truth,
          "files": [os.path.join("plugins", "profile", s, HOST_FILE) for s in sorted(truth)]}
    with open(a.ground_truth or os.path.join(a.out, "TREND_TRUTH.json"), "w") as f:
        json.dump(gt, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
