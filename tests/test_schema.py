"""The diagnosis JSON follows the published JSON Schema, and the CLI prints exactly the
JSON the plugin serves."""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import jsonschema
import pytest

import tb_perfdiag

from conftest import ROOT, TESTDATA, shared_files

SCHEMA = json.load(open(os.path.join(ROOT, "tb_perfdiag", "schema", "diagnosis.schema.json")))


def _files():
    out = sorted(glob.glob(os.path.join(TESTDATA, "**", "*.xplane.pb"), recursive=True) +
                 glob.glob(os.path.join(TESTDATA, "**", "*.pt.trace.json*"), recursive=True))
    picks = ("df_index_resolver", "tpu_inference_2", "nccl_data", "mi250", "cpu_only",
             "resnet50_num_workers_4")
    out += [f for f in shared_files((".json.gz", ".xplane.pb")) if any(p in f for p in picks)][:8]
    return out


@pytest.mark.parametrize("path", _files(), ids=os.path.basename)
def test_diagnosis_matches_schema(path):
    d = tb_perfdiag.diagnose(path).to_json()
    jsonschema.validate(d, SCHEMA)


def test_cli_json_equals_plugin_route(tb_demo):
    _, _, runs = tb_demo.get("/data/plugin/perfdiag/runs")
    run = [r for r in runs["runs"] if "jax_cpu" in r["run"]][0]
    q = f"run={run['run']}&host={run['hosts'][0]['name']}"
    status, _, page = tb_demo.get(f"/data/plugin/perfdiag/diagnosis?{q}")
    assert status == 200
    status, _, served = tb_demo.get(
        f"/data/plugin/perfdiag/diagnosis?{q}&gaps_limit={page['gaps_total']}")
    assert status == 200
    jsonschema.validate(served, SCHEMA)
    path = served["source"]["path"]

    def cli(*extra):
        return json.loads(subprocess.run(
            [sys.executable, "-m", "tb_perfdiag.cli", "diagnose", path, "--json", *extra],
            capture_output=True, text=True, check=True).stdout)
    assert cli() == page                     # the route's default page of gaps
    assert cli("--all-gaps") == served       # every gap
