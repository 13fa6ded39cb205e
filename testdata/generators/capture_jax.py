#!/usr/bin/env python3
"""Real JAX-profiler (XSpace) capture of a jitted MLP training loop on XLA:CPU.

Run with the generator venv (jax/jaxlib 0.10.2), normally via make_captures.sh:

    python capture_jax.py --out testdata/captures/jax_cpu [--ground-truth gt.json]

Writes ``<out>/plugins/profile/<run>/cpuhost.xplane.pb`` (the TensorBoard
profile-plugin layout).  The profiler names the file after the machine's host
name; it is renamed to ``cpuhost.xplane.pb`` so that reruns give stable paths.
The lossy ``.trace.json.gz`` duplicate that JAX writes next to it is deleted.
The Python tracer is off (``python_tracer_level=0``) to keep the file small.

Known ground truth (also written to --ground-truth):
  * NUM_STEPS steps, each a ``StepTraceAnnotation('train', step_num=i)``;
  * every step starts with ``TraceAnnotation('data_loading')``: numpy work plus
    ``time.sleep(SLEEP_S)``;
  * the jitted ``train_step`` has ``jax.named_scope`` blocks ``forward``,
    ``loss``, ``backward``, ``optimizer`` (they appear in the HLO op metadata);
  * steps where ``step % 3 == 2`` run ``TraceAnnotation('log_metrics')`` inside
    the step, calling ``float(loss)`` (a blocking device->host sync);
  * step 0 compiles ``train_step``; steps 5 and 9 use other batch sizes, which
    forces a recompilation (``backend_compile_and_load``) in those steps.
    Every other step reuses a cached executable.

The generator also records, in process, in which steps the framework really
compiled (jax.monitoring ``/jax/core/compile/backend_compile_duration``
events) and exits with an error if that differs from the expected steps; the
result is written to the ground truth as ``observed_compile_steps``.
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
import jax.numpy as jnp

NUM_STEPS = 12
SLEEP_S = 0.010
BATCH = 128
ODD_BATCH = {5: 96, 9: 64}       # steps with another batch size -> recompilation
LOG_EVERY = 3                    # log_metrics on steps where step % 3 == 2
SIZES = (256, 512, 512, 10)       # MLP layer widths
LR = 0.05
HOST_FILE = "cpuhost.xplane.pb"
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def init_params(key):
    params = []
    for din, dout in zip(SIZES[:-1], SIZES[1:]):
        key, k = jax.random.split(key)
        params.append((jax.random.normal(k, (din, dout), jnp.float32) / np.sqrt(din),
                       jnp.zeros((dout,), jnp.float32)))
    return params


def mlp(params, x):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def loss_fn(params, x, y):
    with jax.named_scope("forward"):
        logits = mlp(params, x)
    with jax.named_scope("loss"):
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))


@jax.jit
def train_step(params, x, y):
    with jax.named_scope("backward"):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    with jax.named_scope("optimizer"):
        params = jax.tree_util.tree_map(lambda p, g: p - LR * g, params, grads)
    return params, loss


def load_batch(rng: np.random.Generator, batch: int):
    """Fake data loading: some numpy work plus a short sleep (I/O stand-in)."""
    x = rng.standard_normal((batch, SIZES[0])).astype(np.float32)
    x = (x - x.mean(axis=0)) / (x.std(axis=0) + 1e-6)
    y = rng.integers(0, SIZES[-1], size=(batch,)).astype(np.int32)
    time.sleep(SLEEP_S)
    return x, y


def ground_truth():
    return {
        "tool": "jax.profiler.trace (XSpace), python tracer off",
        "jax_version": jax.__version__,
        "num_steps": NUM_STEPS,
        "step_annotation": "StepTraceAnnotation('train', step_num=i) on the 'python' line",
        "annotations_per_step": ["data_loading"],
        "named_scopes_in_jit": ["forward", "loss", "backward", "optimizer"],
        "batch_size": BATCH,
        "batch_size_by_step": {str(s): b for s, b in ODD_BATCH.items()},
        "compile_steps": [0] + sorted(ODD_BATCH),
        "recompile_steps": sorted(ODD_BATCH),
        "compile_event": "backend_compile_and_load",
        "log_metrics_steps": [s for s in range(NUM_STEPS) if s % LOG_EVERY == LOG_EVERY - 1],
        "log_metrics_sync": "float(loss) inside TraceAnnotation('log_metrics'), inside the step",
        "data_loading_sleep_s": SLEEP_S,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="log dir to (re)create")
    ap.add_argument("--ground-truth", help="write ground truth JSON here")
    args = ap.parse_args(argv)

    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    rng = np.random.default_rng(0)
    params = init_params(jax.random.PRNGKey(0))
    jax.block_until_ready(params)

    # Observe, in process, which steps really compile (cross-check of the capture).
    current_step = [None]
    compiled_in = []

    def on_duration(event, duration_secs, **kwargs):
        if event == BACKEND_COMPILE_EVENT and current_step[0] is not None:
            compiled_in.append(current_step[0])

    jax.monitoring.register_event_duration_secs_listener(on_duration)

    opts = jax.profiler.ProfileOptions()
    opts.python_tracer_level = 0
    with jax.profiler.trace(args.out, profiler_options=opts):
        for step in range(NUM_STEPS):
            current_step[0] = step
            with jax.profiler.StepTraceAnnotation("train", step_num=step):
                with jax.profiler.TraceAnnotation("data_loading"):
                    x, y = load_batch(rng, ODD_BATCH.get(step, BATCH))
                params, loss = train_step(params, x, y)
                if step % LOG_EVERY == LOG_EVERY - 1:
                    with jax.profiler.TraceAnnotation("log_metrics"):
                        print(f"step {step} loss {float(loss):.4f}", flush=True)
        jax.block_until_ready(params)
    current_step[0] = None
    expected = ground_truth()["compile_steps"]
    if compiled_in != expected:
        sys.exit(f"backend compiles happened in steps {compiled_in}, expected {expected}")

    prof_root = os.path.join(args.out, "plugins", "profile")
    runs = os.listdir(prof_root)
    if len(runs) != 1:
        sys.exit(f"expected one profile run folder, got {runs}")
    run_dir = os.path.join(prof_root, runs[0])
    xplanes = [f for f in os.listdir(run_dir) if f.endswith(".xplane.pb")]
    if len(xplanes) != 1:
        sys.exit(f"expected one .xplane.pb, got {os.listdir(run_dir)}")
    for f in os.listdir(run_dir):
        if f.endswith(".trace.json.gz"):
            os.remove(os.path.join(run_dir, f))   # lossy duplicate of the XSpace
    if xplanes[0] != HOST_FILE:
        os.rename(os.path.join(run_dir, xplanes[0]), os.path.join(run_dir, HOST_FILE))

    if args.ground_truth:
        gt = ground_truth()
        gt["observed_compile_steps"] = compiled_in
        gt["files"] = [os.path.join("plugins", "profile", runs[0], HOST_FILE)]
        with open(args.ground_truth, "w") as f:
            json.dump(gt, f, indent=2)


if __name__ == "__main__":
    main()
