"""The independent labels in ../shared/truth judge the causes on real traces (GUIDE §4):
the primary cause must be right for ≥ 95 % of the labelled idle time and ≥ 90 % of the
labelled gaps, no trace under 80 %, every duty cycle exact."""
from __future__ import annotations

import importlib.util
import os

import pytest

from conftest import SHARED

CHECKER = os.path.join(SHARED, "..", "truth", "check.py")


def _checker():
    if not os.path.isfile(CHECKER):
        pytest.skip("../shared/truth is absent (a clone outside this workplace)")
    spec = importlib.util.spec_from_file_location("truth_check", CHECKER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_labelled_gap_causes_and_duty(capsys):
    check = _checker()
    passed = check.check_gaps(SHARED, verbose=True)
    out = capsys.readouterr().out
    assert passed, out
