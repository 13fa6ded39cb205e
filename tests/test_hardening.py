"""Bad input never escapes as anything but TraceError, never hangs, never silently
gives wrong numbers; the fuzz corpus lives in tests/fuzz_corpus."""
from __future__ import annotations

import gzip
import json
import os
import signal
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import call

import tb_perfdiag
from tb_perfdiag.trace import TraceError
from tb_perfdiag.trace.xplane_pb import XSpace

CORPUS = os.path.join(os.path.dirname(__file__), "fuzz_corpus")
SEEDS = {f: open(os.path.join(CORPUS, f), "rb").read() for f in sorted(os.listdir(CORPUS))}


@contextmanager
def deadline(seconds: int):
    def boom(*_):
        raise TimeoutError(f"took longer than {seconds} s")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _check(tmp_path, name: str, data: bytes):
    """Load and diagnose; only TraceError may escape, within 20 s."""
    p = tmp_path / name
    p.write_bytes(data)
    with deadline(20):
        try:
            tr = tb_perfdiag.load(str(p))
        except TraceError as e:
            assert e.reason and e.path == str(p)
            return None
        d = tb_perfdiag.diagnose(tr).to_json()
        json.dumps(d)
        for dev in d["devices"]:
            assert dev["duty_cycle"] is None or 0 <= dev["duty_cycle"] <= 1
        return d


def _kineto(events, **top):
    return json.dumps({"traceEvents": events, **top}).encode()


K = json.loads(SEEDS["seed_kineto.json"])["traceEvents"]


def _with(i, **kw):
    ev = [dict(e) for e in K]
    ev[i].update(kw)
    return ev


BAD_FILES = [
    ("truncated json", "t.pt.trace.json", SEEDS["seed_kineto.json"][:-40], "error"),
    ("empty", "e.pt.trace.json", b"", "error"),
    ("zero-length gz", "z.pt.trace.json.gz", b"", "error"),
    ("random bytes", "r.xplane.pb", bytes(range(256)) * 4, "error"),
    ("wrongly gzipped", "w.pt.trace.json.gz", b"\x1f\x8b\x08\x00garbage-not-deflate", "error"),
    ("not gzip but .gz", "n.pt.trace.json.gz", SEEDS["seed_kineto.json"], "error"),
    ("traceEvents not a list", "l.pt.trace.json", _kineto({}), "error"),
    ("ts is a string", "s.pt.trace.json", _kineto(_with(5, ts="abc")), "warn"),
    ("dur is null", "d.pt.trace.json", _kineto(_with(5, dur=None)), "warn"),
    ("event is a list", "v.pt.trace.json", _kineto(K + [[1, 2, 3]]), "warn"),
    ("huge integers", "h.pt.trace.json", _kineto(_with(5, ts=10**30, dur=10**25)), "warn"),
    ("negative duration", "g.pt.trace.json", _kineto(_with(5, dur=-5)), "warn"),
    ("out of order", "o.pt.trace.json", _kineto(list(reversed(K))), "ok"),
    ("overlap on one stream", "p.pt.trace.json", _kineto(_with(6, ts=1009)), "ok"),
    ("clock skew (kernel before launch)", "c.pt.trace.json", _kineto(_with(5, ts=900)), "ok"),
    ("one event at time zero among epoch times", "z.pt.trace.json",
     _kineto([dict(e, ts=e["ts"] + 1.7e15) if "ts" in e else e for e in K] + [K[5] | {"ts": 0}]),
     "warn"),
    ("protobuf unknown fields", "u.xplane.pb",
     SEEDS["seed_xspace.xplane.pb"] + b"\xa2\x06\x03abc", "ok"),
    ("protobuf truncated", "x.xplane.pb", SEEDS["seed_xspace.xplane.pb"][:-7], "error"),
    ("still being written (half)", "half.xplane.pb",
     SEEDS["seed_xspace.xplane.pb"][: len(SEEDS["seed_xspace.xplane.pb"]) // 2], "error"),
    ("empty XSpace (capture recorded nothing)", "n.xplane.pb", b"", "error"),
    ("chakra execution trace", "et.pt.trace.json", json.dumps(
        {"schema": "1.0", "pid": 1, "nodes": []}).encode(), "error"),
    ("memory snapshot", "m.pt.trace.json", b"[1, 2, 3]", "error"),
]


@pytest.mark.parametrize("label,name,data,expect", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_file_table(tmp_path, label, name, data, expect):
    d = _check(tmp_path, name, data)
    if expect == "error":
        assert d is None, label
    elif expect == "warn":
        assert d is not None and d["warnings"], label
    else:
        assert d is not None, label


def test_unknown_fields_do_not_change_numbers(tmp_path):
    a = _check(tmp_path, "a.xplane.pb", SEEDS["seed_xspace.xplane.pb"])
    b = _check(tmp_path, "b.xplane.pb", SEEDS["seed_xspace.xplane.pb"] + b"\xa2\x06\x03abc")
    assert a["devices"] == b["devices"] and a["gaps"] == b["gaps"]


def test_file_rewritten_while_served_is_reread(tmp_path):
    from tb_perfdiag.cache import DiagnosisCache
    from tb_perfdiag.discovery import Catalog
    from tb_perfdiag.service import DiagnosisService
    run = tmp_path / "ld" / "r"
    run.mkdir(parents=True)
    f = run / "w.1.pt.trace.json"
    f.write_bytes(SEEDS["seed_kineto.json"][:50])            # still being written
    svc = DiagnosisService(Catalog(str(tmp_path / "ld"), ttl=0), DiagnosisCache(disk_dir=None))
    q = {"run": "r", "host": "w"}
    assert call(svc, "diagnosis", q)[0] == 422
    f.write_bytes(SEEDS["seed_kineto.json"])
    os.utime(f, (1e9 + 10, 1e9 + 10))
    status, d = call(svc, "diagnosis", q)
    assert status == 200 and d["devices"][0]["ops"] == 2


def test_file_over_memory_budget_is_refused(tmp_path):
    from tb_perfdiag.cache import DiagnosisCache
    from tb_perfdiag.discovery import Catalog
    from tb_perfdiag.service import DiagnosisService
    run = tmp_path / "ld" / "r"
    run.mkdir(parents=True)
    (run / "w.1.pt.trace.json").write_bytes(SEEDS["seed_kineto.json"] + b" " * 2_000_000)
    svc = DiagnosisService(Catalog(str(tmp_path / "ld")), DiagnosisCache(disk_dir=None),
                           max_file_mb=1)
    status, body = call(svc, "diagnosis", {"run": "r", "host": "w"})
    assert status == 413 and "TB_PERFDIAG_MAX_FILE_MB" in body["error"]


def _mutate(data: bytes, flips, cut):
    b = bytearray(data)
    for pos, val in flips:
        if b:
            b[pos % len(b)] = val
    return bytes(b[: cut % (len(b) + 1)]) if cut >= 0 else bytes(b)


FUZZ = settings(max_examples=int(os.environ.get("TB_PERFDIAG_FUZZ_EXAMPLES", "150")),
                deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(seed=st.sampled_from(sorted(SEEDS)),
       flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=8),
       cut=st.integers(-1, 4000), gz=st.booleans())
def test_fuzz_mutated_seeds(tmp_path, seed, flips, cut, gz):
    data = _mutate(SEEDS[seed], flips, cut)
    if gz:
        data = gzip.compress(data)
    name = seed if not gz else seed + ".gz"
    if seed.endswith(".json"):
        name = ("f.pt.trace.json.gz" if gz else "f.pt.trace.json")
    _check(tmp_path, name, data)


@FUZZ
@given(st.binary(max_size=2048), st.sampled_from(["a.xplane.pb", "a.pt.trace.json"]))
def test_fuzz_random_bytes(tmp_path, data, name):
    _check(tmp_path, name, data)


@FUZZ
@given(st.lists(st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "X", "X", "M", "i", "B"]),
     "cat": st.sampled_from(["kernel", "cpu_op", "cuda_runtime", "gpu_memcpy", "user_annotation"]),
     "name": st.one_of(st.text(max_size=8), st.integers(), st.none()),
     "pid": st.one_of(st.integers(-2, 3), st.text(max_size=3)),
     "tid": st.integers(-2, 9),
     "ts": st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**6, 10**16)),
     "dur": st.one_of(st.floats(-10, 1e6), st.integers(-5, 10**6)),
     "args": st.fixed_dictionaries({"correlation": st.integers(0, 5)})}), max_size=40))
def test_fuzz_structured_kineto(tmp_path, events):
    _check(tmp_path, "s.pt.trace.json", json.dumps({"traceEvents": events}).encode())


def test_xspace_seed_is_valid():
    s = XSpace()
    s.ParseFromString(SEEDS["seed_xspace.xplane.pb"])
    tr = tb_perfdiag.load(os.path.join(CORPUS, "seed_xspace.xplane.pb"))
    assert tr.link_src.size == 3 and np.isin(tr.kind, [1]).sum() == 3
