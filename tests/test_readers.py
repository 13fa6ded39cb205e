"""Every real and bundled trace loads (or raises TraceError), and its event counts
equal an independent count made straight from the JSON or the protobuf."""
from __future__ import annotations

import gzip
import json
import os
from collections import Counter

import numpy as np
import pytest

import tb_perfdiag
from tb_perfdiag.trace import EventKind, TraceError, TrackKind
from tb_perfdiag.trace.xplane_pb import XSpace

from conftest import SHARED, TESTDATA, shared_files, shared_path

KINETO_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz", ".json.gz", ".json")
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync",
               "Kernel", "Memcpy", "Memset", "mtia_ccp_events"}


def _all_files():
    files = shared_files(KINETO_SUFFIXES + (".xplane.pb",))
    for dirpath, _, names in os.walk(TESTDATA):
        for n in sorted(names):
            if n.endswith(KINETO_SUFFIXES + (".xplane.pb",)) and n != "MANIFEST.json":
                files.append(os.path.join(dirpath, n))
    return files


def _id(p):
    return os.path.relpath(p, os.path.dirname(SHARED) if p.startswith(SHARED) else TESTDATA)


def kineto_counts(path):
    raw = open(path, "rb").read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw)
    ev = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"
          and e.get("cat") != "Trace" and e.get("pid") not in ("Spans", "Traces")
          and isinstance(e.get("ts"), (int, float)) and not isinstance(e.get("ts"), bool)]
    dev_keys = {(e.get("pid"), e.get("tid")) for e in ev if e.get("cat") in DEVICE_CATS}
    device = Counter()
    host = 0
    for e in ev:
        if (e.get("pid"), e.get("tid")) in dev_keys:
            device[str(e.get("pid"))] += 1
        else:
            host += 1
    return device, host


def xspace_counts(path):
    s = XSpace()
    s.ParseFromString(open(path, "rb").read())
    device, host = Counter(), 0
    for p in s.planes:
        hlo_ids = {k for k, v in p.stat_metadata.items() if v.name == "hlo_op"}
        for line in p.lines:
            for e in line.events:
                if p.name.startswith("/device:"):
                    device[p.name] += 1
                elif any(st.metadata_id in hlo_ids for st in e.stats):
                    device["CPU (XLA)"] += 1
                else:
                    host += 1
    return device, host


@pytest.mark.parametrize("path", _all_files(), ids=_id)
def test_loads_and_counts_match(path):
    try:
        tr = tb_perfdiag.load(path)
    except TraceError as e:
        assert e.path == path and e.reason
        # only files that are genuinely not traces may fail
        assert not path.endswith(".xplane.pb") or os.path.getsize(path) < 200, e.reason
        return
    dev_of_event = tr.track_device[tr.track]
    is_host = tr.track_kind[tr.track] == TrackKind.HOST
    if path.endswith(".xplane.pb"):
        device, host = xspace_counts(path)
        got = Counter({tr.devices[d].source_id if tr.devices[d].source_id.startswith("/")
                       else tr.devices[d].name: int(c)
                       for d, c in zip(*np.unique(dev_of_event[~is_host], return_counts=True))})
    else:
        device, host = kineto_counts(path)
        got = Counter({tr.devices[d].source_id: int(c)
                       for d, c in zip(*np.unique(dev_of_event[~is_host], return_counts=True))})
    assert int(is_host.sum()) == host
    assert sum(got.values()) == sum(device.values())
    if not path.endswith(".xplane.pb") and all(k.isdigit() for k in device):
        assert got == device
    elif path.endswith(".xplane.pb"):
        assert got == device
    # model invariants
    assert (tr.dur >= 0).all()
    assert tr.n_events == 0 or tr.ts.min() >= 0
    par = tr.parent[tr.parent >= 0]
    kids = np.flatnonzero(tr.parent >= 0)
    assert (tr.track[par] == tr.track[kids]).all()
    assert (tr.depth[kids] == tr.depth[par] + 1).all()


NOT_TRACES = [
    ("public/HolisticTraceAnalysis/tests/data/execution_trace/benchmark_simple_add_et.json.gz",
     "Chakra"),
    ("public/HolisticTraceAnalysis/tests/data/memory_analysis/memory_timeline.raw.gz",
     "memory snapshot"),
]


@pytest.mark.parametrize("rel,hint", NOT_TRACES)
def test_foreign_files_raise_documented_error(rel, hint):
    path = shared_path(rel)
    with pytest.raises(TraceError) as ei:
        tb_perfdiag.load(path)
    assert hint in ei.value.reason and ei.value.path == path


@pytest.mark.parametrize("data,reason", [
    (b"", "empty"),
    (os.urandom(64), ""),
    (b'{"traceEvents": [{"ph": "X", "ts": 1', "JSON"),
    (gzip.compress(b'{"traceEvents": []}')[:-9], "gzip"),
], ids=["empty", "random", "cut JSON", "cut gzip"])   # xdist's workers must collect the same names
def test_bad_bytes_raise_trace_error(tmp_path, data, reason):
    for name in ("x.pt.trace.json", "x.xplane.pb", "x.bin"):
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(TraceError) as ei:
            tb_perfdiag.load(str(p))
        assert ei.value.reason
        if not name.endswith(".xplane.pb"):
            assert reason in ei.value.reason


def test_nanosecond_timestamps_are_exact():
    """ns-resolution float timestamps keep all their decimals; json.loads's float64 does not."""
    import re
    from decimal import Decimal
    path = shared_path("public", "HolisticTraceAnalysis", "tests", "data", "ns_resolution_trace",
                       "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    raw = gzip.open(path).read()
    tr = tb_perfdiag.load(path)
    text = re.search(rb'"cat": "kernel"[^{}]*?"ts": ([0-9.]+)', raw).group(1).decode()
    assert Decimal(text) != Decimal(repr(float(text)))     # float64 would lose it
    kernels = np.flatnonzero(tr.kind == EventKind.KERNEL)
    exact = {Decimal(tr.origin_ps + int(t)) / Decimal(10**6) for t in tr.ts[kernels].tolist()}
    assert Decimal(text) in exact
    assert Decimal(repr(float(text))) not in exact


def test_kineto_2021_format_and_links():
    path = shared_path("public", "kineto", "tb_plugin", "samples", "resnet50_num_workers_0",
                       "worker0.1623143089861.pt.trace.json.gz")
    tr = tb_perfdiag.load(path)
    assert [d.kind for d in tr.devices] == ["gpu"]
    assert (tr.kind == EventKind.KERNEL).sum() == 8772
    assert len(tr.steps_hint()) == 6
    # every kernel is linked to its runtime launch through the correlation id
    kernels = np.flatnonzero(tr.kind == EventKind.KERNEL)
    assert np.isin(kernels, tr.link_dst).mean() > 0.99


def test_amd_hip_names():
    path = shared_path("public", "HolisticTraceAnalysis", "tests", "data", "amd_trace",
                       "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    tr = tb_perfdiag.load(path)
    launches = np.flatnonzero(tr.kind == EventKind.LAUNCH)
    assert any(tr.event_name(e).startswith("hip") for e in launches)
    assert tr.link_src.size >= 14


def test_xla_cpu_ops_become_device_with_hlo_metadata():
    import glob
    path = glob.glob(shared_path("cpu", "torch_xla", "full_run") + "/plugins/profile/*/*.xplane.pb")[0]
    tr = tb_perfdiag.load(path)
    assert [d.name for d in tr.devices] == ["CPU (XLA)"]
    ops = np.flatnonzero(tr.kind == EventKind.KERNEL)
    assert ops.size == len(tr.stats["hlo_op"].events)
    share = len(tr.stats["op_name"].events) / ops.size
    assert 0.6 < share <= 1.0          # about 70 % of executed ops carry an op_name
    assert any("forward" in tr.strings[v] for v in tr.stats["op_name"].values[:500])
    assert tr.link_src.size > 1000     # producer/consumer flows
    assert [n for n, _ in tr.steps_hint()] == list(range(12))


def test_tpu_planes():
    path = shared_path("public", "xprof", "xprof", "convert", "test_xplanes",
                       "tpu_inference_2.xplane.pb")
    tr = tb_perfdiag.load(path)
    assert [d.name for d in tr.devices] == ["TPU 0", "TPU 1", "TPU 2", "TPU 3"]
    for d in range(4):
        ops = (tr.kind == EventKind.KERNEL) & (tr.track_device[tr.track] == d)
        assert ops.sum() in (1503, 1504)
