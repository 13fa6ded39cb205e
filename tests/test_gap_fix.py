"""The /gap route names what to change for its gap: the fix of the finding that cites it,
else of the finding about its cause (the gap panel shows it, no trip back to the findings)."""
from __future__ import annotations

import os

import jsonschema
import pytest

from tb_perfdiag.cache import DiagnosisCache
from tb_perfdiag.discovery import Catalog
from tb_perfdiag.params import parse
from tb_perfdiag.service import DiagnosisService

from conftest import TESTDATA
from test_schema import SCHEMA

SYN = os.path.join(TESTDATA, "synthetic", "logdir")


@pytest.fixture(scope="module")
def svc():
    if not os.path.isdir(SYN):
        pytest.skip(f"{SYN} is absent")
    return DiagnosisService(Catalog(SYN), cache=DiagnosisCache(disk_dir=None))


def _all_gaps(svc, run):
    p = parse("diagnosis", {"run": run, "host": "worker0", "gaps_limit": "200"})
    return svc.diagnosis_json(p)


@pytest.mark.parametrize("run", ["kineto_sync_nonzero", "kineto_data_loading"])
def test_every_gap_carries_its_findings_fix(svc, run):
    d = _all_gaps(svc, run)
    assert d["gaps"] and d["findings"]
    gap_schema = {**SCHEMA["$defs"]["gap"], "$defs": SCHEMA["$defs"]}
    vias = set()
    for g in d["gaps"]:
        got = svc.gap_json(parse("gap", {"run": run, "host": "worker0", "id": g["id"]}))
        jsonschema.validate(got, gap_schema)
        citing = [f for f in d["findings"] if g["id"] in f["evidence"]["gaps"] and f["fix"]]
        fix = got["fix"]
        if citing:
            assert fix["via"] == "gap" and fix["text"] == citing[0]["fix"]
            assert d["findings"][fix["finding"]]["title"] == fix["title"]
        elif fix is not None:
            # cited past the listed evidence, or about the gap's cause
            f = d["findings"][fix["finding"]]
            assert f["fix"] == fix["text"]
            assert fix["via"] == "gap" or f.get("cause") == g["cause"]
        vias.add(fix and fix["via"])
    assert "gap" in vias
