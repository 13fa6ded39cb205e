#!/usr/bin/env python3
"""Runs of many captures with regressions injected in known captures (issue 62: a run's
trend), written with tb_perfdiag.testing's writers (no torch, no jax needed).

    python testdata/generators/trend_runs.py OUT [--captures N] [--steps S]

writes
  OUT/torch_repeat/trainer.<ms>.pt.trace.json   a PyTorch job on one GPU profiled with
        schedule(wait, warmup, active, repeat=N) and tensorboard_trace_handler: one file
        per cycle, global ProfilerStep#N continuing across files;
  OUT/jax_cpu/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/cpuhost.xplane.pb   a JAX job on
        XLA:CPU profiled every few minutes (start_trace/stop_trace): one session per
        capture, steps as StepTraceAnnotation (step_num), HLO ops on an XLA worker thread;
and returns (and writes to OUT/TREND_TRUTH.json) which capture carries which regression:
  * ``data_loading``: every step of the capture waits ``STALL_US`` in the input pipeline
    before its device work (the DataLoader fetch / a ``data_loading`` annotation);
  * ``host_sync``: every step of the capture blocks in ``.item()`` while the device
    drains its queue, then works ``SYNC_WORK_US`` before it launches the rest: the lead the
    sync destroyed leaves the device idle (PyTorch run only);
  * ``empty``: a 0-byte file (JAX writes one when a capture exceeds 2 GB).
The captures between are the steady state, with a small seeded jitter (±2 % of the
device work) so the run has a capture-to-capture spread of its own.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tb_perfdiag.testing.builder import TraceBuilder  # noqa: E402

T0 = 1_796_000_000.0            # the first capture's start (s since the epoch, 2026-11)
EVERY_S = 300.0                 # a capture every 5 minutes
KERNEL_US = 300.0               # one kernel's duration (the steady step is ~10 kernels)
KERNELS = 10
STALL_US = 12_000.0             # the injected regression's wait per step
SYNC_WORK_US = 1_500.0          # host work after the injected sync, before the next launch
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def plan(n: int) -> dict:
    """Capture index → injected regression ("" none)."""
    out = {i: "" for i in range(n)}
    out[n // 3] = "data_loading"
    out[n // 3 + 3] = "empty"
    out[n - 2] = "host_sync"
    return out


def _torch_capture(first_step: int, steps: int, kind: str, rng) -> bytes:
    b = TraceBuilder("kineto")
    main = b.thread("python main")
    s7 = b.stream(gpu=0, stream=7)
    t = 0.0
    for k in range(steps):
        start = t
        t += 20.0
        if kind == "data_loading":
            b.op(main, LOADER, t, STALL_US, "user_annotation")
            t += STALL_US + 5.0
        dev = t + 10.0
        for j in range(KERNELS):
            dur = KERNEL_US * (1 + rng.uniform(-0.02, 0.02))
            b.launch(main, "cudaLaunchKernel", t, 5.0, kernel=b.kernel(s7, f"gemm_{j}", dev, dur))
            t += 8.0
            dev += dur + 1.0
            if kind == "host_sync" and j == KERNELS // 2:
                # .item() of a busy device: the host waits for the queue to drain (its lead
                # destroyed), then works SYNC_WORK_US before it launches the rest
                b.op(main, "aten::item", t, dev - t + 20.0)
                b.op(main, "cudaStreamSynchronize", t + 2, dev - t + 10.0, "cuda_runtime")
                t = dev + 25.0
                b.op(main, "aten::nonzero", t, SYNC_WORK_US)
                t += SYNC_WORK_US + 5.0
                dev = t + 10.0
        t = max(t, dev) + 10.0
        b.step(main, first_step + k, start, t - start)
        t += 5.0
    return b.to_bytes()


def _jax_capture(first_step: int, steps: int, kind: str, rng) -> bytes:
    b = TraceBuilder("xspace")
    py = b.thread("python")
    xla = b.thread("tf_XLAEigen/1")
    b.hlo_module("jit_train_step", 1, {f"fusion.{j}": f"train/dense_{j}" for j in range(KERNELS)})
    t = 0.0
    for k in range(steps):
        start = t
        t += 20.0
        if kind == "data_loading":
            b.op(py, "data_loading", t, STALL_US)
            t += STALL_US + 5.0
        run = b.op(py, "PjitFunction(train_step)", t, 15.0)
        t += 20.0
        for j in range(KERNELS):
            dur = KERNEL_US * (1 + rng.uniform(-0.02, 0.02))
            op = b.op(xla, f"fusion.{j}", t, dur,
                      stats={"hlo_op": f"fusion.{j}", "hlo_module": "jit_train_step",
                             "program_id": 1, "run_id": k + 1})
            if j == 0:
                b.flow(run, op)
            t += dur + 1.0
        t += 10.0
        b.step(py, first_step + k, start, t - start, name="train")
        t += 5.0
    return b.to_bytes()


def write_torch(out: Path, n: int = 8, steps: int = 6, seed: int = 62) -> dict:
    rng, truth = random.Random(seed), plan(n)
    out.mkdir(parents=True, exist_ok=True)
    for i, kind in truth.items():
        ms = int((T0 + i * EVERY_S) * 1000)
        data = b"" if kind == "empty" else _torch_capture(1 + i * 10, steps, kind, rng)
        (out / f"trainer.{ms}.pt.trace.json").write_bytes(data)
    return {f"trainer.{int((T0 + i * EVERY_S) * 1000)}"[len("trainer."):]: k
            for i, k in truth.items()}


def session_name(t: float) -> str:
    import time
    return time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime(t))


def write_jax(out: Path, n: int = 8, steps: int = 6, seed: int = 63) -> dict:
    rng, truth = random.Random(seed), plan(n)
    truth = {i: ("data_loading" if k == "host_sync" else k) for i, k in truth.items()}
    names = {}
    for i, kind in truth.items():
        name = session_name(T0 + i * EVERY_S)
        d = out / "plugins" / "profile" / name
        d.mkdir(parents=True, exist_ok=True)
        data = b"" if kind == "empty" else _jax_capture(1 + i * 10, steps, kind, rng)
        (d / "cpuhost.xplane.pb").write_bytes(data)
        names[name] = kind
    return names


def write_all(out: Path, n: int = 8, steps: int = 6) -> dict:
    truth = {"torch_repeat": write_torch(out / "torch_repeat", n, steps),
             "jax_cpu": write_jax(out / "jax_cpu", n, steps)}
    (out / "TREND_TRUTH.json").write_text(json.dumps(truth, indent=1, sort_keys=True))
    return truth


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--captures", type=int, default=8)
    p.add_argument("--steps", type=int, default=6)
    a = p.parse_args(argv)
    truth = write_all(a.out, a.captures, a.steps)
    print(json.dumps(truth, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
