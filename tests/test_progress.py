"""Progress of a long analysis: phases in order, a bar that only moves forward, a route
that says running / done / idle, and a cached second open."""
from __future__ import annotations

import glob
import os
import threading

import pytest

from conftest import TESTDATA, call
from tb_perfdiag.analysis import Options, diagnose_trace
from tb_perfdiag.cache import DiagnosisCache
from tb_perfdiag.discovery import Catalog
from tb_perfdiag.progress import Progress
from tb_perfdiag import service as service_mod
from tb_perfdiag.service import DiagnosisService
from tb_perfdiag.trace import load


class Recorder(Progress):
    def __init__(self):
        super().__init__("x")
        self.seen = []

    def phase(self, name, detail=""):
        super().phase(name, detail)
        self.seen.append((name, self.snapshot()["fraction"]))

    def within(self, fraction, detail=None):
        super().within(fraction, detail)
        self.seen.append((self.snapshot()["phase"], self.snapshot()["fraction"]))


def _one(pattern):
    return sorted(glob.glob(os.path.join(TESTDATA, pattern), recursive=True))[0]


@pytest.mark.parametrize("pattern,phases", [
    ("synthetic/logdir/xla_tpu_data_loading/**/*.xplane.pb",
     ["reading", "scanning", "building", "analysing"]),
    ("captures/torch_cpu/**/*.pt.trace.json.gz",       # decompressed as it is scanned
     ["reading", "scanning", "building", "analysing"]),
    ("synthetic/logdir/kineto_data_loading/*.pt.trace.json",
     ["reading", "scanning", "building", "analysing"]),
])
def test_phases_in_order_and_the_bar_only_moves_forward(pattern, phases):
    rec = Recorder()
    diagnose_trace(load(_one(pattern), rec), Options(), rec)
    rec.done()
    order = []
    for name, _ in rec.seen:
        if not order or order[-1] != name:
            order.append(name)
    assert order == phases
    # building the trace model is long on large files: the bar moves inside it too
    assert sum(1 for name, _ in rec.seen if name == "building") >= 4
    fractions = [f for _, f in rec.seen]
    assert fractions == sorted(fractions) and 0 <= fractions[0] and fractions[-1] < 1
    assert rec.snapshot() | {"elapsed_s": 0} == {"phase": "done", "text": "done", "fraction": 1.0,
                                                 "elapsed_s": 0, "done": True}


def test_route_reports_running_then_done_and_the_second_open_is_cached(monkeypatch, tmp_path):
    import shutil
    src = _one("synthetic/logdir/xla_tpu_data_loading/**/*.xplane.pb")
    dst = tmp_path / "ld" / "run1" / "plugins" / "profile" / "s1"
    dst.mkdir(parents=True)
    shutil.copy(src, dst / "h1.xplane.pb")
    svc = DiagnosisService(Catalog(str(tmp_path / "ld")), DiagnosisCache(disk_dir=None))
    (run,) = svc.catalog.runs(refresh=True)
    q = {"run": run, "host": "h1"}
    assert call(svc, "progress", q)[1]["state"] == "idle"

    # hold the analysis at its start so the route is seen mid-flight
    entered, release = threading.Event(), threading.Event()
    real = service_mod.analyse

    def gated(trace, opt, progress):
        progress.phase("analysing", "call chains")
        entered.set()
        assert release.wait(30)
        return real(trace, opt, progress)
    monkeypatch.setattr(service_mod, "analyse", gated)   # where the service's analysis runs
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", call(svc, "diagnosis", q)))
    t.start()
    assert entered.wait(30)
    status, p = call(svc, "progress", q)
    assert status == 200 and p["state"] == "running" and p["phase"] == "analysing"
    assert p["file"] == "h1.xplane.pb" and 0.5 < p["fraction"] < 1 and "analysing" in p["text"]
    release.set()
    t.join(30)
    assert out["r"][0] == 200
    assert call(svc, "progress", q)[1]["state"] == "done"
    assert svc.cache.computations == 1
    assert call(svc, "diagnosis", q)[0] == 200 and svc.cache.computations == 1
    # other options are another analysis
    assert call(svc, "progress", {**q, "threshold_us": "50"})[1]["state"] == "idle"
    assert call(svc, "progress", {"run": run, "host": "nope"})[0] == 404
