#!/usr/bin/env python3
"""Real PyTorch-profiler (Kineto) capture with known FLOPs: a CPU profile with
``record_shapes=True`` and ``with_flops=True`` of ops whose work is known by construction.

Run with the generator venv (torch 2.13.0 CPU build), normally via make_captures.sh:

    python capture_torch_flops.py --out testdata/captures/torch_flops_cpu [--ground-truth gt.json]

The program, each op once inside ``record_function`` blocks named as below, then a
backward pass through the convolution and the linear layer (the input needs no
gradient, so the convolution's backward computes only its weight's and bias' gradients):

    linear   nn.Linear(256, 128) on [32, 256]                 2·32·256·128
    conv     nn.Conv2d(3, 16, 3, stride=2, padding=1), [4, 3, 32, 32] -> [4, 16, 16, 16]
                                                                2·4·16·16·16·(3·3·3)
    bmm      torch.bmm([8, 64, 32], [8, 32, 16])                2·8·64·32·16
    matmul   torch.matmul([2, 8, 64, 32], [32, 48])             2·16·64·32·48
    sdpa     causal SDPA, q = k = v = [2, 4, 128, 32]           4·2·4·128·128·32 · 129/256
    ckpt     a second nn.Linear(256, 128) under torch.utils.checkpoint (non-reentrant)
    backward the convolution's weight gradient (= its forward), each linear layer's
             weight gradient (= its forward; their inputs need no gradient either), and
             the checkpointed layer's forward run again (recomputed: hardware FLOPs)

The ground truth (also written to --ground-truth) holds these FLOPs, computed here from
the layers' sizes: the independent count the project's shape formulas are checked
against; and the profiler's own counts (``FunctionEvent.flops``, by op name), which
torch 2.13's Chrome-trace export leaves out of the file.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils.checkpoint import checkpoint

FILE = "flops.pt.trace.json.gz"


def expected() -> dict:
    lin = 2 * 32 * 256 * 128
    conv = 2 * 4 * 16 * 16 * 16 * 3 * 3 * 3
    return {
        "linear": lin,
        "conv": conv,
        "bmm": 2 * 8 * 64 * 32 * 16,
        "matmul": 2 * 16 * 64 * 32 * 48,
        "sdpa": 4 * 2 * 4 * 128 * 128 * 32 * 129 / 256,
        "conv_backward": conv,          # the weight's gradient only
        "linear_backward": lin,         # the weight's gradient only
        "ckpt": lin,
        "ckpt_backward": lin,           # its weight's gradient
        "recomputed": lin,              # its forward, run again inside the backward
    }


def profiler_flops(prof) -> dict:
    """{op name: torch's own FLOP count of its first call} where torch counts one."""
    out = {}
    for e in prof.events():
        if e.flops and e.name not in out:
            out[e.name] = int(e.flops)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--ground-truth")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    lin = nn.Linear(256, 128)
    lin2 = nn.Linear(256, 128)
    conv = nn.Conv2d(3, 16, 3, stride=2, padding=1)
    x = torch.randn(32, 256)
    img = torch.randn(4, 3, 32, 32)
    a3, b3 = torch.randn(8, 64, 32), torch.randn(8, 32, 16)
    a4, b2 = torch.randn(2, 8, 64, 32), torch.randn(32, 48)
    q = torch.randn(2, 4, 128, 32)
    for _ in range(2):              # warm-up: first calls pick their kernels
        (lin(x).sum() + conv(img).sum() + checkpoint(lin2, x, use_reentrant=False).sum()
         ).backward()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 with_flops=True) as prof:
        with record_function("linear"):
            y = lin(x)
        with record_function("conv"):
            z = conv(img)
        with record_function("bmm"):
            torch.bmm(a3, b3)
        with record_function("matmul"):
            torch.matmul(a4, b2)
        with record_function("sdpa"):
            F.scaled_dot_product_attention(q, q, q, is_causal=True)
        with record_function("ckpt"):
            y2 = checkpoint(lin2, x, use_reentrant=False)
        with record_function("backward"):
            (y.sum() + z.sum() + y2.sum()).backward()
    if os.path.isdir(a.out):
        shutil.rmtree(a.out)
    os.makedirs(a.out)
    raw = os.path.join(a.out, "flops.pt.trace.json")
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as f, open(os.path.join(a.out, FILE), "wb") as g:
        g.write(gzip.compress(f.read(), mtime=0))
    os.remove(raw)
    if a.ground_truth:
        with open(a.ground_truth, "w") as f:
            json.dump({"files": [FILE], "tool": "torch.profiler (Kineto)",
                       "torch_version": torch.__version__,
                       "record_shapes": True, "with_flops": True,
                       "flops_by_block": expected(),
                       "profiler_flops": profiler_flops(prof)}, f, indent=2)


if __name__ == "__main__":
    main()
