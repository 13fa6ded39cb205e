#!/usr/bin/env python3
"""Real PyTorch-profiler (Kineto) captures of one CPU training job profiled again and again
(issue 62: a run over time): ``schedule(wait, warmup, active, repeat=N)`` with
``tensorboard_trace_handler``, so one worker leaves one ``<worker>.<ms>.pt.trace.json.gz``
per cycle, global ``ProfilerStep#N`` continuing across them.

Run with the generator venv of make_captures.sh (``.gen-venv/torch``: torch 2.13.0 CPU):

    python capture_torch_trend.py --out testdata/captures/torch_trend_cpu [--ground-truth gt.json]

The input comes from a real ``torch.utils.data.DataLoader`` (``num_workers=0``): its
``__next__`` is the fetch the trace shows as ``enumerate(DataLoader)#…__next__``.  The
dataset's ``__getitem__`` does a little numpy work and sleeps ``SLEEP_S`` (an I/O
stand-in); in every step of cycle ``SLOW_CYCLE`` (0-based) it sleeps ``STALL_S``
instead: the input pipeline degrading for one capture and recovering in the next.

Shapes, stacks and memory are not recorded, and each file is gzipped, to keep the run
small (it lives in testdata/captures and every test that walks testdata reads it).
No 0-byte capture here: the trend's handling of one is covered by trend_runs.py.

Known ground truth (also written to --ground-truth): the files in cycle order, the steps
each holds, and which cycle carries the injected ``data_loading`` regression.
"""
from __future__ import annotations

import argparse
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

WORKER = "trendhost"
WAIT, WARMUP, ACTIVE, REPEAT = 1, 1, 3, 8
CYCLE = WAIT + WARMUP + ACTIVE
NUM_STEPS = CYCLE * REPEAT
SLOW_CYCLE = 2                  # the third capture (0-based 2); the fourth recovers
SLEEP_S = 0.005
STALL_S = 0.100                 # far past a loaded 2-core machine's own spread
BATCH, CLASSES, H, W = 4, 5, 16, 16


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 16, 3, padding=1)
        self.head = nn.Conv2d(16, CLASSES, 1)

    def forward(self, x):
        return self.head(F.relu(self.c2(F.relu(self.c1(x)))))


class Batches(torch.utils.data.Dataset):
    """Item i is step i's whole batch (the loader runs with batch_size=None)."""

    def __len__(self):
        return NUM_STEPS

    def __getitem__(self, step):
        rng = np.random.default_rng(step)
        img = rng.standard_normal((BATCH, 3, H, W)).astype(np.float32)
        tgt = rng.integers(0, CLASSES, size=(BATCH, H, W)).astype(np.int64)
        time.sleep(STALL_S if step // CYCLE == SLOW_CYCLE else SLEEP_S)
        return torch.from_numpy(img), torch.from_numpy(tgt)


def ground_truth(files):
    spans = [list(range(c * CYCLE + WAIT + WARMUP, (c + 1) * CYCLE)) for c in range(REPEAT)]
    return {
        "tool": "torch.profiler (Kineto), tensorboard_trace_handler, repeat",
        "torch_version": torch.__version__,
        "worker": WORKER,
        "num_steps": NUM_STEPS,
        "schedule": {"wait": WAIT, "warmup": WARMUP, "active": ACTIVE, "repeat": REPEAT},
        "input": "torch.utils.data.DataLoader(num_workers=0, batch_size=None)",
        "sleep_s": SLEEP_S, "stall_s": STALL_S,
        "files": files,
        "span_files": [{"file": f, "steps": s, "injected": "data_loading" if c == SLOW_CYCLE
                        else ""} for c, (f, s) in enumerate(zip(files, spans))],
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="run folder to (re)create")
    ap.add_argument("--ground-truth", help="write ground truth JSON here")
    args = ap.parse_args(argv)

    torch.manual_seed(0)
    torch.set_num_threads(1)
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(Batches(), batch_size=None, num_workers=0)

    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=REPEAT),
                 on_trace_ready=tensorboard_trace_handler(args.out, worker_name=WORKER,
                                                          use_gzip=True)) as prof:
        for x, y in loader:
            with record_function("forward"):
                loss = F.cross_entropy(model(x), y)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
            prof.step()

    files = sorted((f for f in os.listdir(args.out) if f.endswith(".pt.trace.json.gz")),
                   key=lambda f: int(f.split(".")[1]))
    if len(files) != REPEAT:
        sys.exit(f"expected {REPEAT} trace files, got {files}")
    if args.ground_truth:
        with open(args.ground_truth, "w") as f:
            json.dump(ground_truth(files), f, indent=2)


if __name__ == "__main__":
    main()
