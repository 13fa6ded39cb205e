#!/usr/bin/env python3
"""Print each device's FLOPs, bytes and peak as analysis.efficiency sees them (a debug
aid, no CLI of the product): ``python scripts/op_costs.py TRACE…``."""
from __future__ import annotations

import sys

import numpy as np

import tb_perfdiag
from tb_perfdiag.analysis.efficiency.costs import op_costs
from tb_perfdiag.analysis.efficiency.peaks import device_peak


def main(paths) -> None:
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


if __name__ == "__main__":
    main(sys.argv[1:])
