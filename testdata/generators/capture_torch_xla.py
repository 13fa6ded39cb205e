#!/usr/bin/env python3
"""Real PyTorch/XLA-profiler (XSpace) capture of a small Transformer classifier on PJRT CPU.

Run with the generator venv (torch 2.9.0 + torch_xla 2.9.0), normally via
make_captures.sh, which also sets the environment:

    PJRT_DEVICE=CPU XLA_HLO_DEBUG=1 XLA_IR_DEBUG=1 \
        python capture_torch_xla.py --out testdata/captures/torch_xla_cpu [--ground-truth gt.json]

(The script sets those three variables itself when they are missing.)

Writes ``<out>/plugins/profile/<run>/cpuhost.xplane.pb``.  The profiler names
the file after the machine's host name; it is renamed to ``cpuhost.xplane.pb``
so that reruns give stable paths.  The lossy ``.trace.json.gz`` duplicate
written next to it is deleted.  Captured with ``xp.start_trace`` /
``xp.stop_trace`` around the whole loop.

Known ground truth (also written to --ground-truth):
  * NUM_STEPS steps, each ``xp.StepTrace('train_step', step_num=i)`` (its exit
    runs ``torch_xla.sync()``, shown as ``StepMarker``) with nested
    ``xp.Trace`` blocks ``data_loading`` (numpy work + ``time.sleep(SLEEP_S)``),
    ``forward``, ``backward``, ``optimizer``;
  * steps where ``step % 3 == 2`` are followed by ``xp.Trace('log_metrics')``
    right after the step's StepTrace closes; it calls ``loss.item()``
    (``PjRtComputationClient::TransferFromDevice``, a device->host sync);
  * graph compilations (``XLAGraphExecutor::Compile``, inside ``StepMarker``):
    step 0 (first graph), step 1 (SGD's momentum buffers, created in step 0,
    are now graph inputs: a new graph), and steps 5 and 9, whose batch sizes
    differ (ODD_BATCH).  All other steps hit the graph cache.

The generator also records, in process, in which steps the framework really
compiled (the ``CompileTime`` metric of ``torch_xla.debug.metrics``) and
exits with an error if that differs from the expected steps; the result is
written to the ground truth as ``observed_compile_steps``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

for _k, _v in (("PJRT_DEVICE", "CPU"), ("XLA_HLO_DEBUG", "1"), ("XLA_IR_DEBUG", "1")):
    os.environ.setdefault(_k, _v)

import numpy as np
import torch
import torch.nn as nn
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.debug.profiler as xp

NUM_STEPS = 12
SLEEP_S = 0.030
BATCH = 16
ODD_BATCH = {5: 12, 9: 8}        # steps with another batch size -> recompilation
LOG_EVERY = 3                    # log_metrics after steps where step % 3 == 2
SEQ, VOCAB, D_MODEL, NHEAD, FF, CLASSES = 16, 100, 32, 2, 64, 4
HOST_FILE = "cpuhost.xplane.pb"


class TinyTransformerClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        self.encoder = nn.TransformerEncoderLayer(D_MODEL, NHEAD, dim_feedforward=FF,
                                                  dropout=0.0, batch_first=True)
        self.head = nn.Linear(D_MODEL, CLASSES)

    def forward(self, tokens):
        h = self.encoder(self.embed(tokens))
        return self.head(h.mean(dim=1))


def load_batch(rng: np.random.Generator, batch: int):
    """Fake data loading: some numpy work plus a sleep (I/O stand-in)."""
    tokens = rng.integers(0, VOCAB, size=(batch, SEQ))
    tokens = np.sort(tokens, axis=1)               # a bit of real CPU work
    labels = (tokens.sum(axis=1) % CLASSES).astype(np.int64)
    time.sleep(SLEEP_S)
    return torch.from_numpy(tokens), torch.from_numpy(labels)


def ground_truth():
    return {
        "tool": "torch_xla.debug.profiler start_trace/stop_trace (XSpace), PJRT_DEVICE=CPU "
                "XLA_HLO_DEBUG=1 XLA_IR_DEBUG=1",
        "torch_version": torch.__version__,
        "torch_xla_version": torch_xla.__version__,
        "num_steps": NUM_STEPS,
        "step_annotation": "StepTrace('train_step', step_num=i) on the 'python' line",
        "annotations_per_step": ["data_loading", "forward", "backward", "optimizer"],
        "batch_size": BATCH,
        "batch_size_by_step": {str(s): b for s, b in ODD_BATCH.items()},
        "compile_steps": [0, 1] + sorted(ODD_BATCH),
        "recompile_steps": [1] + sorted(ODD_BATCH),
        "recompile_causes": {"1": "SGD momentum buffers (created in step 0) become graph inputs",
                             **{str(s): f"batch size {b} instead of {BATCH}"
                                for s, b in ODD_BATCH.items()}},
        "compile_event": "XLAGraphExecutor::Compile > PjRtComputationClient::Compile "
                         "(under StepMarker at the end of the step)",
        "log_metrics_after_steps": [s for s in range(NUM_STEPS) if s % LOG_EVERY == LOG_EVERY - 1],
        "log_metrics_sync": "loss.item() inside xp.Trace('log_metrics'), right after the step's "
                            "StepTrace (outside it) -> PjRtComputationClient::TransferFromDevice",
        "data_loading_sleep_s": SLEEP_S,
        "model": {"kind": "TransformerEncoderLayer classifier", "seq": SEQ, "d_model": D_MODEL,
                  "nhead": NHEAD, "dim_feedforward": FF, "classes": CLASSES},
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="log dir to (re)create")
    ap.add_argument("--ground-truth", help="write ground truth JSON here")
    args = ap.parse_args(argv)

    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    device = torch_xla.device()
    model = TinyTransformerClassifier().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    torch_xla.sync()

    # Observe, in process, which steps really compile (cross-check of the capture).
    def compile_count():
        data = met.metric_data("CompileTime")
        return data[0] if data else 0

    compiled_in = []
    xp.start_trace(args.out)
    try:
        for step in range(NUM_STEPS):
            before = compile_count()
            with xp.StepTrace("train_step", step_num=step):
                with xp.Trace("data_loading"):
                    tokens, labels = load_batch(rng, ODD_BATCH.get(step, BATCH))
                    tokens, labels = tokens.to(device), labels.to(device)
                with xp.Trace("forward"):
                    loss = loss_fn(model(tokens), labels)
                with xp.Trace("backward"):
                    loss.backward()
                with xp.Trace("optimizer"):
                    opt.step()
                    opt.zero_grad(set_to_none=True)
            if step % LOG_EVERY == LOG_EVERY - 1:
                with xp.Trace("log_metrics"):
                    print(f"step {step} loss {loss.item():.4f}", flush=True)
            compiled_in += [step] * (compile_count() - before)
        xm.wait_device_ops()
    finally:
        xp.stop_trace()
    expected = ground_truth()["compile_steps"]
    if compiled_in != expected:
        sys.exit(f"graph compiles happened in steps {compiled_in}, expected {expected}")

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
