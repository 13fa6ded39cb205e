"""The analysis returns a typed result; renderers turn it into JSON.  Findings never
depend on how many gaps a page shows."""
from __future__ import annotations

import glob
import os

import numpy as np

import tb_perfdiag
from tb_perfdiag.analysis import Cause, Diagnosis, FindingKind, Options, diagnose_trace
from tb_perfdiag.render.json import diagnosis_json

from conftest import TESTDATA


def _sync_nonzero():
    (path,) = glob.glob(os.path.join(TESTDATA, "synthetic", "logdir", "kineto_sync_nonzero",
                                     "*.pt.trace.json*"))
    return tb_perfdiag.load(path)


def _findings(diag: Diagnosis) -> list:
    return [(f.kind, f.title, f.fix, f.time_lost_ns, f.gaps.tolist())
            for f in diag.findings]


def test_findings_do_not_depend_on_the_detail_limit():
    trace = _sync_nonzero()
    got = [_findings(diagnose_trace(trace, Options(detail_limit=k))) for k in (200, 3, 0)]
    assert got[0] == got[1] == got[2]
    titles = [t for _, t, *_ in got[0]]
    assert any("torch.nonzero" in t for t in titles), titles
    # one finding for the nonzero culprit, citing every host-sync gap
    diag = diagnose_trace(trace, Options(detail_limit=0))
    syncs = [f for f in diag.findings if f.kind == FindingKind.HOST_SYNC]
    cited = np.concatenate([f.gaps for f in syncs])
    assert sorted(cited.tolist()) == np.flatnonzero(diag.gaps.cause == Cause.HOST_SYNC).tolist()


def test_result_is_typed_and_rendered_json_pages_gaps():
    trace = _sync_nonzero()
    diag = diagnose_trace(trace)
    g = diag.gaps
    assert isinstance(g.start, np.ndarray) and g.start.dtype == np.int64
    assert (np.diff(g.end - g.start) <= 0).all()            # largest first
    assert g.blocking.shape == g.start.shape                 # every gap has the column
    page = diagnosis_json(diag, gaps_offset=1, gaps_limit=2, paged=True)
    assert page["gaps_total"] == len(g) and len(page["gaps"]) == min(2, len(g) - 1)
    assert page["gaps"][0]["rank"] == 1
    full = tb_perfdiag.diagnose(trace).to_json(all_gaps=True)
    assert len(full["gaps"]) == len(g) and "gaps_total" not in full


def test_diagnosis_pickles_without_the_trace():
    import pickle
    diag = diagnose_trace(_sync_nonzero())
    back = pickle.loads(pickle.dumps(diag))
    assert diagnosis_json(back) == diagnosis_json(diag)
    assert diag.nbytes() > 0
