"""A real XLA:CPU XSpace of padded convolutions (testdata/generators/capture_jax_conv.py):
each convolution's FLOPs follow XLA's cost rule (``HloCostAnalysis::GetConvolutionFlops``:
only the (kernel tap, output position) pairs that read the input count; taps in the
padding do no work), held beside what the Profile plugin's own CLI says of the same HLO.

xprof's ``get_hlo_stats`` has no rows for an XLA:CPU capture (its op stats come from
device planes; "No HLO stats records found").  Its per-instruction FLOPs for this HLO
come from ``xprof query_hlo_graph`` (the HLO graph DB), whose convolution estimate is
2 × output elements × kernel elements / output features: every tap, the padding's too.
There XLA's rule and xprof disagree, and XLA's rule (the one a TPU or GPU profile's op
stats carry) is the one ours follows.  For the reduces xprof agrees with XLA (input
elements − output elements, XPROF_REDUCE below), and so do ours (they counted input
elements, one more per output element, until issue 63's stop).
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

import tb_perfdiag
from conftest import TESTDATA

with open(os.path.join(TESTDATA, "captures", "MANIFEST.json")) as f:
    CAP = next(c for c in json.load(f)["captures"] if c["name"] == "jax_conv")
TRUTH = CAP["ground_truth"]
XSPACE = os.path.join(TESTDATA, "captures", CAP["files"][0]["path"])
# HLO instruction names in jit_step's module, in the generator's order
HLO_NAME = {"conv3d": "convolution", "conv2d": "convolution.1",
            "conv2d_strided": "convolution.2"}

# From `xprof query_hlo_graph --logdir <copy of testdata/captures/jax_conv_cpu>
#   --session_id 2026_12_07_22_16_39 --module_name 'jit_step(10)' --mode sql
#   --sql "SELECT name, opcode, flops FROM instructions WHERE flops > 0"`,
# xprof 2.24.2, on this file, 2026-12-07 22:16 UTC.
XPROF_CONV = {"convolution": 1769472.0, "convolution.1": 3276800.0, "convolution.2": 186624.0}
XPROF_REDUCE = {"ynn_fusion": 8191.0, "ynn_fusion.1": 8191.0, "wrapped_reduce": 1295.0}


def _ours() -> dict:
    """HLO op → FLOPs per call, as the diagnosis' device-time-by-op rows give them."""
    d = tb_perfdiag.diagnose(XSPACE).to_json()
    (dev,) = d["device_ops"]["devices"]
    return {o["name"]: o["roofline"]["flops"] / o["calls"] for o in dev["ops"]}


def test_a_padded_convolutions_flops_leave_out_the_taps_in_the_padding():
    ours = _ours()
    for conv, name in HLO_NAME.items():
        t = TRUTH["convolutions"][conv]
        assert t["xla_flops"] < t["every_tap_flops"]          # the padding holds taps
        assert ours[name] == t["xla_flops"], conv
        # xprof's graph DB counts every tap: it is the count without XLA's rule
        assert XPROF_CONV[name] == t["every_tap_flops"], conv


@pytest.mark.parametrize("native", [True, False])
def test_a_reduce_counts_its_inputs_less_its_outputs_as_xprof(native, monkeypatch):
    if not native:
        monkeypatch.setenv("TB_PERFDIAG_NO_NATIVE", "1")
    ours = _ours()
    for name, flops in XPROF_REDUCE.items():
        assert ours[name] == flops, name


def _xprof() -> str | None:
    exe = os.path.join(os.path.dirname(sys.executable), "xprof")
    return exe if os.access(exe, os.X_OK) else shutil.which("xprof")


@pytest.mark.skipif(_xprof() is None, reason="the Profile plugin's xprof CLI is not installed")
def test_xprofs_own_figures_for_this_hlo_are_the_recorded_ones(tmp_path):
    """The recorded figures above still come out of the installed xprof (on a copy: the
    CLI writes its caches beside the XSpace)."""
    run = tmp_path / "jax_conv_cpu"
    shutil.copytree(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(XSPACE)))),
                    run)
    (session,) = os.listdir(run / "plugins" / "profile")
    out = subprocess.run(
        [_xprof(), "query_hlo_graph", "--logdir", str(run), "--session_id", session,
         "--module_name", "jit_step(10)", "--mode", "sql",
         "--sql", "SELECT name, opcode, flops FROM instructions WHERE flops > 0"],
        capture_output=True, text=True, timeout=120, check=True).stdout
    rows = {r["name"]: r["flops"] for r in json.loads(out[out.index("{"):])["rows"]}
    assert {n: rows[n] for n in XPROF_CONV} == XPROF_CONV
    assert {n: rows[n] for n in XPROF_REDUCE} == XPROF_REDUCE
