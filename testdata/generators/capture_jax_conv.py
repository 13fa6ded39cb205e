#!/usr/bin/env python3
"""Real JAX-profiler (XSpace) capture of padded convolutions on XLA:CPU (issue 64 item 3:
a convolution's FLOPs follow XLA's cost rule, where taps that fall in the padding do no
work; our figure is held to ``xprof get_hlo_stats``' on this capture).

Run with the generator venv of make_captures.sh (``.gen-venv/jax``: jax/jaxlib 0.10.2):

    python capture_jax_conv.py --out testdata/captures/jax_conv_cpu [--ground-truth gt.json]

Writes ``<out>/plugins/profile/<run>/cpuhost.xplane.pb``.  One jitted function runs
``STEPS`` times, each a ``StepTraceAnnotation``; it holds three convolutions, each with
taps in the padding:

* ``conv3d``: NCDHW (2, 4, 8, 8, 8) * OIDHW (8, 4, 3, 3, 3), SAME padding (1 each side);
* ``conv2d``: NCHW (2, 8, 16, 16) * OIHW (16, 8, 5, 5), padding 2, stride 1;
* ``conv2d_strided``: NCHW (2, 8, 16, 16) * OIHW (8, 8, 3, 3), padding (1, 2), stride 2.

The ground truth holds, per convolution, the FLOPs of XLA's rule (2 × batch × input
features × output features × the (tap, output) pairs that read the input) worked out
here from the shapes alone, and the count without that rule (every tap counted).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

import numpy as np
import jax
import jax.numpy as jnp
from jax import lax

STEPS = 4
HOST_FILE = "cpuhost.xplane.pb"
# name: (input shape, kernel shape, strides, padding per spatial dim)
CONVS = {
    "conv3d": ((2, 4, 8, 8, 8), (8, 4, 3, 3, 3), (1, 1, 1), ((1, 1),) * 3),
    "conv2d": ((2, 8, 16, 16), (16, 8, 5, 5), (1, 1), ((2, 2),) * 2),
    "conv2d_strided": ((2, 8, 16, 16), (8, 8, 3, 3), (2, 2), ((1, 2), (1, 2))),
}
DIMS = {3: ("NCDHW", "OIDHW", "NCDHW"), 2: ("NCHW", "OIHW", "NCHW")}


def _conv(x, k, strides, padding):
    with jax.named_scope(f"conv{len(strides)}d"):
        return lax.conv_general_dilated(x, k, strides, padding,
                                        dimension_numbers=DIMS[len(strides)])


@jax.jit
def step(xs, ks):
    # a sum after each convolution keeps XLA from fusing them away from one another
    return [jnp.sum(_conv(x, k, c[2], c[3])) for x, k, c in zip(xs, ks, CONVS.values())]


def _taps(n, k, s, lo, hi):
    o = (n + lo + hi - k) // s + 1
    valid = sum(1 for i in range(o) for t in range(k) if 0 <= i * s - lo + t < n)
    return o, valid


def expected():
    out = {}
    for name, (xs, ks, strides, pad) in CONVS.items():
        valid, every = 1, 1
        for n, k, s, (lo, hi) in zip(xs[2:], ks[2:], strides, pad):
            o, v = _taps(n, k, s, lo, hi)
            valid, every = valid * v, every * o * k
        base = 2 * xs[0] * ks[1] * ks[0]
        out[name] = {"input": list(xs), "kernel": list(ks), "strides": list(strides),
                     "padding": [list(p) for p in pad], "xla_flops": base * valid,
                     "every_tap_flops": base * every}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="log dir to (re)create")
    ap.add_argument("--ground-truth", help="write ground truth JSON here")
    args = ap.parse_args(argv)

    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    rng = np.random.default_rng(0)
    xs = [jnp.asarray(rng.standard_normal(c[0]), jnp.float32) for c in CONVS.values()]
    ks = [jnp.asarray(rng.standard_normal(c[1]), jnp.float32) for c in CONVS.values()]
    jax.block_until_ready(step(xs, ks))          # compiled before the capture

    opts = jax.profiler.ProfileOptions()
    opts.python_tracer_level = 0
    with jax.profiler.trace(args.out, profiler_options=opts):
        for i in range(STEPS):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                jax.block_until_ready(step(xs, ks))

    prof_root = os.path.join(args.out, "plugins", "profile")
    (run,) = os.listdir(prof_root)
    run_dir = os.path.join(prof_root, run)
    xplanes = [f for f in os.listdir(run_dir) if f.endswith(".xplane.pb")]
    if len(xplanes) != 1:
        sys.exit(f"expected one .xplane.pb, got {os.listdir(run_dir)}")
    for f in os.listdir(run_dir):
        if not f.endswith(".xplane.pb"):
            os.remove(os.path.join(run_dir, f))   # the lossy trace.json.gz duplicate
    if xplanes[0] != HOST_FILE:
        os.rename(os.path.join(run_dir, xplanes[0]), os.path.join(run_dir, HOST_FILE))

    if args.ground_truth:
        with open(args.ground_truth, "w") as f:
            json.dump({"tool": "jax.profiler.trace (XSpace), python tracer off",
                       "jax_version": jax.__version__, "steps": STEPS,
                       "convolutions": expected(),
                       "files": [os.path.join("plugins", "profile", run, HOST_FILE)]},
                      f, indent=2)


if __name__ == "__main__":
    main()
