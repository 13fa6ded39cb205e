#!/usr/bin/env python3
"""Print each device's FLOPs, bytes and peak as analysis.efficiency sees them (a debug
aid, no CLI of the product): ``python scripts/op_costs.py [--kernels N] TRACE…``.

``--kernels N``: also the N matmul-class kernel names of each device with the highest
hardware FLOP/s over their summed time, against the peak of the dtype each ran in (a
kernel above its roof is a figure split over the wrong kernels, or an algorithm doing
fewer multiplies than it is counted for)."""
from __future__ import annotations

import sys

import numpy as np

import tb_perfdiag
from tb_perfdiag.analysis.efficiency.costs import DTYPES, op_costs
from tb_perfdiag.analysis.efficiency.peaks import device_peak


def kernels(trace, d: int, ev, c, top: int) -> None:
    """The ``top`` matmul-class kernel names by hardware FLOP/s, each against its peak."""
    rows = []
    for dt in np.unique(c.dtype[c.matmul]).tolist():
        peak = device_peak(trace, d, DTYPES[dt]).flops_per_s
        m = c.matmul & (c.dtype == dt)
        u, inv = np.unique(trace.name[ev[m]], return_inverse=True)
        fl = np.bincount(inv, weights=c.hw_flops[m])
        t = np.bincount(inv, weights=trace.dur[ev[m]].astype(np.float64)) * 1e-12
        n = np.bincount(inv)
        rows += [(f / s, f, s, k, DTYPES[dt], peak, trace.strings[i])
                 for i, f, s, k in zip(u.tolist(), fl, t, n) if s > 0]
    for rate, f, s, k, dt, peak, name in sorted(rows, reverse=True)[:top]:
        share = f"{rate / peak:5.0%}" if peak else "    -"
        print(f"  {rate / 1e12:7.2f} TFLOP/s {share} of {dt} peak  {f / 1e9:9.2f} GFLOP "
              f"{s * 1e3:8.2f} ms ×{k:<5d} {name[:90]}")


def main(paths) -> None:
    top = 0
    if paths[:1] == ["--kernels"]:
        top, paths = int(paths[1]), paths[2:]
    for path in paths:
        trace = tb_perfdiag.load(path)
        steps = len(trace.steps_hint())
        for d, dev in enumerate(trace.devices):
            ev = trace.activity_of(d)
            if not ev.size:
                continue
            c = op_costs(trace, ev)
            p = device_peak(trace, d, c.dtype_name())
            model = c.flops[~c.estimated].sum()
            print(f"{path} · {dev.name}: {model / 1e9:.2f} GFLOP"
                  f"{f' ({model / steps / 1e9:.2f} a step of {steps})' if steps else ''}, "
                  f"estimated {c.flops[c.estimated].sum() / 1e9:.2f}, "
                  f"{c.bytes.sum() / 1e9:.2f} GB"
                  f"{'' if np.isnan(c.hbm_bytes).all() else f' ({np.nansum(c.hbm_bytes) / 1e9:.2f} in HBM)'}, "
                  f"{c.known.mean():.0%} of ops known, "
                  f"source {c.source or '-'}, dtype {c.dtype_name() or '-'}; peak "
                  f"{'-' if p.flops_per_s is None else f'{p.flops_per_s / 1e12:g} TFLOP/s'}"
                  f" ({p.source or p.missing}){'; ' + c.missing if c.missing else ''}")
            if top:
                kernels(trace, d, ev, c, top)


if __name__ == "__main__":
    main(sys.argv[1:])
