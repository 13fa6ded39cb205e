#!/usr/bin/env python3
"""Real PyTorch-profiler (Kineto) capture of a toy segmentation training loop on the CPU.

Run with the generator venv (torch 2.13.0 CPU build), normally via make_captures.sh:

    python capture_torch.py --out testdata/captures/torch_cpu [--ground-truth gt.json]

The output folder is one *run* in the PyTorch TensorBoard layout: it holds
``toyhost.<ts>.pt.trace.json`` files, one per profiler window ("span").  The
schedule wait=1, warmup=2, active=3, repeat=2 gives two spans over 12 steps:

    step:   0    1  2    3  4  5    6    7  8    9  10 11
            wait warmup  ACTIVE     wait warmup  ACTIVE

The first span's file is left as plain JSON, the second is gzipped
(``.pt.trace.json.gz``) so that readers see both forms.

Known ground truth (also written to --ground-truth):
  * every step: ``data_loading`` (numpy work + time.sleep(SLEEP_S)), ``forward``
    (with the ``MaskedLoss`` blocks ``create mask`` / ``unique`` / ``mask`` /
    ``calc loss``), ``backward``, ``optimizer``;
  * odd steps additionally run ``log_metrics`` which calls ``loss.item()``;
  * ``torch.nonzero`` / ``torch.unique`` / boolean masking are data-dependent
    shapes (host syncs on an accelerator; on the CPU they just run);
  * no device events: this is a CPU-only run.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

WORKER = "toyhost"
NUM_STEPS = 12
WAIT, WARMUP, ACTIVE, REPEAT = 1, 2, 3, 2
SLEEP_S = 0.010
LOG_EVERY = 2          # log_metrics (loss.item()) on steps where step % LOG_EVERY == 1
BATCH, CLASSES, H, W = 4, 5, 32, 32
IGNORE_INDEX = 255


class ToySegNet(nn.Module):
    def __init__(self, classes: int = CLASSES):
        super().__init__()
        self.enc1 = nn.Conv2d(3, 16, 3, padding=1)
        self.enc2 = nn.Conv2d(16, 32, 3, padding=1, stride=2)
        self.dec1 = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.head = nn.Conv2d(16, classes, 1)

    def forward(self, x):
        x = F.relu(self.enc1(x))
        x = F.relu(self.enc2(x))
        x = F.relu(self.dec1(x))
        return self.head(x)


class MaskedLoss(nn.Module):
    """Cross-entropy over the labelled pixels only (data-dependent shapes)."""

    def __init__(self, ignore_index: int = IGNORE_INDEX):
        super().__init__()
        self.ignore_index = ignore_index

    def forward(self, logits, target):
        with record_function("create mask"):
            valid = target != self.ignore_index
            idx = torch.nonzero(valid)                       # data-dependent size
        with record_function("unique"):
            present = torch.unique(target[idx[:, 0], idx[:, 1], idx[:, 2]])
        with record_function("mask"):
            flat_logits = logits.permute(0, 2, 3, 1)[valid]  # boolean-mask indexing
            flat_target = target[valid]
        with record_function("calc loss"):
            weight = torch.zeros(logits.shape[1])
            weight[present] = 1.0
            loss = F.cross_entropy(flat_logits, flat_target, weight=weight)
        return loss


def load_batch(rng: np.random.Generator):
    """Fake data loading: some numpy work plus a short sleep (I/O stand-in)."""
    img = rng.standard_normal((BATCH, 3, H, W)).astype(np.float32)
    img = (img - img.mean(axis=(2, 3), keepdims=True)) / (img.std(axis=(2, 3), keepdims=True) + 1e-6)
    tgt = rng.integers(0, CLASSES, size=(BATCH, H, W)).astype(np.int64)
    tgt[rng.random((BATCH, H, W)) < 0.3] = IGNORE_INDEX
    time.sleep(SLEEP_S)
    return torch.from_numpy(img), torch.from_numpy(tgt)


def ground_truth():
    spans = []
    cycle = WAIT + WARMUP + ACTIVE
    for r in range(REPEAT):
        first = r * cycle + WAIT + WARMUP
        spans.append(list(range(first, first + ACTIVE)))
    return {
        "tool": "torch.profiler (Kineto)",
        "torch_version": torch.__version__,
        "worker": WORKER,
        "num_steps": NUM_STEPS,
        "schedule": {"wait": WAIT, "warmup": WARMUP, "active": ACTIVE, "repeat": REPEAT},
        "profiled_steps_per_span": spans,
        "step_annotation": "ProfilerStep#<n> (cat user_annotation)",
        "annotations_per_step": ["data_loading", "forward", "create mask", "unique", "mask",
                                 "calc loss", "backward", "optimizer"],
        "log_metrics_steps": [s for s in range(NUM_STEPS) if s % LOG_EVERY == 1],
        "log_metrics_steps_in_capture": [s for span in spans for s in span if s % LOG_EVERY == 1],
        "log_metrics_sync": "loss.item() inside record_function('log_metrics')",
        "data_loading_sleep_s": SLEEP_S,
        "recompile_steps": [],
        "batch_shape": [BATCH, 3, H, W],
        "device_events": False,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="run folder to (re)create")
    ap.add_argument("--ground-truth", help="write ground truth JSON here")
    args = ap.parse_args(argv)

    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)

    model = ToySegNet()
    crit = MaskedLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=REPEAT),
        on_trace_ready=tensorboard_trace_handler(args.out, worker_name=WORKER, use_gzip=False),
        record_shapes=True,
        with_stack=True,
        profile_memory=True,
    ) as prof:
        for step in range(NUM_STEPS):
            with record_function("data_loading"):
                x, y = load_batch(rng)
            with record_function("forward"):
                logits = model(x)
                loss = crit(logits, y)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
            if step % LOG_EVERY == 1:
                with record_function("log_metrics"):
                    print(f"step {step} loss {loss.item():.4f}", flush=True)
            prof.step()

    files = sorted(f for f in os.listdir(args.out) if f.endswith(".pt.trace.json"))
    if len(files) != REPEAT:
        sys.exit(f"expected {REPEAT} trace files, got {files}")
    # Keep the first span plain and gzip the second, so both forms are covered.
    # Files are named <worker>.<ns timestamp>.pt.trace.json; sort by timestamp.
    files.sort(key=lambda f: int(f.split(".")[1]))
    last = os.path.join(args.out, files[-1])
    with open(last, "rb") as src, gzip.GzipFile(last + ".gz", "wb", mtime=0) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(last)

    if args.ground_truth:
        gt = ground_truth()
        gt["files"] = [files[0], files[-1] + ".gz"]
        gt["span_files"] = [{"file": f, "steps": steps}
                            for f, steps in zip(gt["files"], gt["profiled_steps_per_span"])]
        with open(args.ground_truth, "w") as f:
            json.dump(gt, f, indent=2)


if __name__ == "__main__":
    main()
