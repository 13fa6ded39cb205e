"""CUDA/HIP graph replays aligned with their capture (GUIDE §4 "Graph replays"): on
traces built in memory, the alignment's rules (in order, skipped capture launches,
copies by kind, a mismatch that must not match, replays of one graph each costed
whole), the capture files beside a trace; on the public vLLM and xDiT traces, every
replayed kernel matched and the FLOPs of graphs.json."""
import json
import os

import numpy as np
import pytest

from conftest import shared_path
from tb_perfdiag import diagnose
from tb_perfdiag.analysis.efficiency.costs import op_costs
from tb_perfdiag.analysis.efficiency.graphs import align, graph_match, summary
from tb_perfdiag.graph_captures import CaptureFile, beside
from tb_perfdiag.testing.kineto import load_kineto
from tb_perfdiag.trace.model import EventKind

BF16 = ["c10::BFloat16", "c10::BFloat16"]
HOST = dict(pid=1, tid=1)


def X(cat, name, ts, dur, **args):
    e = {"ph": "X", "cat": cat, "name": name, **HOST, "ts": ts, "dur": dur}
    if args:
        e["args"] = args
    return e


def op(name, ts, dur, dims):
    return X("cpu_op", name, ts, dur, **{"Input Dims": dims, "Input type": BF16[:len(dims)]})


def launch(ts, kernel, corr, call="hipLaunchKernel"):
    return X("cuda_runtime", call, ts, 2, correlation=corr, **({"kernel": kernel} if kernel else {}))


# the graph: mm(64×128 · 128×256), an add, a launch that the replay does not run,
# mm(64×256 · 256×32), a copy
MM1 = 2 * 64 * 128 * 256
MM2 = 2 * 64 * 256 * 32


def capture_events(t0=0, extra=True):
    ev = [X("cuda_runtime", "hipStreamBeginCapture", t0, 1),
          op("aten::mm", t0 + 10, 10, [[64, 128], [128, 256]]), launch(t0 + 12, "gemm_a", 1),
          op("aten::add", t0 + 30, 10, [[64, 256], [64, 256]]), launch(t0 + 32, "add_k", 2)]
    if extra:
        ev += [launch(t0 + 45, "never_replayed", 3)]
    ev += [op("aten::mm", t0 + 50, 10, [[64, 256], [256, 32]]), launch(t0 + 52, "gemm_b", 4),
           launch(t0 + 70, "", 5, "hipMemcpyAsync"),
           X("cuda_runtime", "hipStreamEndCapture", t0 + 80, 1)]
    return ev


def kernel(name, ts, dur, corr, cat="kernel"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": corr}}


def replay_events(t0, corr, names=("gemm_a", "add_k", "gemm_b")):
    ev = [X("cuda_runtime", "hipGraphLaunch", t0, 5, correlation=corr)]
    t = t0 + 10
    for n in names:
        ev.append(kernel(n, t, 20, corr))
        t += 25
    ev.append(kernel("Memcpy DtoD (Device -> Device)", t, 5, corr, cat="gpu_memcpy"))
    return ev


def execution(replays=2, names=("gemm_a", "add_k", "gemm_b"), capture=None):
    ev = []
    for r in range(replays):
        ev += replay_events(1000 + 200 * r, 100 + r, names)
    t = load_kineto(ev)
    if capture is not None:
        t.captures = [CaptureFile(load_kineto(capture), "capture.json", -1, "")]
    return t


def replay_costs(t):
    dev = np.flatnonzero(np.isin(t.kind, (EventKind.KERNEL, EventKind.MEMCPY)))
    c = op_costs(t, dev)
    out = {}
    for k in np.argsort(t.ts[dev], kind="stable").tolist():   # each name's, in time order
        out.setdefault(t.event_name(dev[k]), []).append((c.flops[k], bool(c.known[k])))
    return out


def test_align_in_order_skips_launches_that_match_none():
    # replayed a, b, a against launches a, x, b, a: the x is skipped, order kept
    assert align(np.array([0, 1, 0]), np.array([0, 9, 1, 0])).tolist() == [0, 2, 3]
    # an event with no launch after the previous match matches none and moves nothing
    assert align(np.array([1, 0, 1]), np.array([0, 1])).tolist() == [1, -1, -1]


def test_replayed_kernels_take_the_captured_ops_figures():
    t = execution(capture=capture_events())
    got = replay_costs(t)
    # each replay of the graph carries the ops' whole figures
    assert got["gemm_a"] == [(MM1, True)] * 2
    assert got["gemm_b"] == [(MM2, True)] * 2
    assert got["add_k"] == [(0.0, True)] * 2                       # by bytes
    m = graph_match(t)
    assert (m.matched, m.total) == (8, 8)                          # the copies by kind
    assert m.missing.tolist() == [1, 1]                            # the launch never replayed


def test_a_replay_recorded_in_full_leaves_no_launch_unrecorded():
    t = execution(capture=capture_events(extra=False))
    m = graph_match(t)
    assert m.missing.tolist() == [0, 0]
    s = summary(t, len(t.devices))
    assert (s.matched[0], s.total[0], s.replays[0], s.unrecorded[0]) == (8, 8, 2, 0)


def test_a_kernel_the_capture_never_launched_does_not_match():
    # same times, same count: only the names tell, and "other_k" was never captured
    t = execution(names=("gemm_a", "other_k", "gemm_b"), capture=capture_events())
    m = graph_match(t)
    names = [t.event_name(e) for e in m.event]
    assert all(m.launch[i] < 0 for i, n in enumerate(names) if n == "other_k")
    assert m.matched == 6 and m.total == 8
    got = replay_costs(t)
    assert got["other_k"] == [(0.0, False)] * 2


def test_without_a_capture_replays_are_counted_and_named():
    t = execution()
    m = graph_match(t)
    assert (m.matched, m.total) == (0, 8)
    d = diagnose(t).to_json()
    e = d["devices"][0]["efficiency"]
    assert (e["graph_kernels_matched"], e["graph_kernels_total"]) == (0, 8)
    assert any("no capture" in w for w in d["warnings"])


def test_capture_windows_in_the_same_trace():
    ev = capture_events(t0=0)
    for r in range(2):
        ev += replay_events(1000 + 200 * r, 100 + r)
    t = load_kineto(ev)
    m = graph_match(t)
    assert (m.matched, m.total) == (8, 8)
    got = replay_costs(t)
    assert got["gemm_b"] == [(MM2, True)] * 2


def test_under_recorded_replays_are_a_note_and_a_lower_bound():
    t = execution(capture=capture_events())
    d = diagnose(t).to_json()
    e = d["devices"][0]["efficiency"]
    assert e["graph_launches_unrecorded"] == 2
    assert any("fewer device events than their capture" in w for w in d["warnings"])


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def test_capture_files_beside_a_trace(tmp_path):
    run = tmp_path / "run"
    _write(str(run / "capture_traces" / "cap_a.json"), "{}")
    _write(str(run / "capture_traces" / "cap_b.json"), "{}")
    details = [{"file": "cap_b.json", "batch_size": 64, "mode": "FULL"},
               {"file": "../outside.json", "batch_size": 1, "mode": "FULL"}]
    _write(str(run / "capture_traces" / "execution_details.json"), json.dumps(details))
    got = beside(str(run / "exec.json"))
    # the details' files only, never a path out of the folder
    assert [(os.path.basename(p), b, m) for p, b, m in got] == [("cap_b.json", 64, "FULL")]
    os.remove(str(run / "capture_traces" / "execution_details.json"))
    assert sorted(os.path.basename(p) for p, _, _ in beside(str(run / "exec.json"))) == \
        ["cap_a.json", "cap_b.json"]
    assert beside(str(tmp_path / "elsewhere" / "x.json")) == []


GRAPH_TRACES = ["inference/vllm_prefilldecode_piecewise/graph_execution.json.gz",
                "inference/xdit_flux.1_aiter_sage/profile_trace_rank_0.json.gz"]


@pytest.mark.parametrize("rel", GRAPH_TRACES)
def test_public_graph_traces_match_their_capture(rel):
    path = shared_path("public", "TraceLens", "tests", "traces", *rel.split("/"))
    truth = os.path.join(os.path.dirname(shared_path()), "truth", "graphs.json")
    import tb_perfdiag
    t = tb_perfdiag.load(path)
    m = graph_match(t)
    assert len(t.captures) == 1 and m.total > 0 and m.matched == m.total
    want = json.load(open(truth))["traces"]["public/TraceLens/tests/traces/" + rel]
    d = diagnose(t).to_json()
    x = max(d["devices"], key=lambda v: v.get("busy_ns") or 0)
    f = x["efficiency"]["flops"]
    assert abs(f - want["flops"]) <= want["flops_tolerance"] * want["flops"]
    # the annotations only the capture has name replayed device time
    from tb_perfdiag.analysis.device_time.annotations import is_annotation
    from tb_perfdiag.trace.classify import frame_name

    def annotations(tr):
        return {frame_name(tr.strings[i]) for i in np.unique(tr.name[is_annotation(tr)]).tolist()}
    only = annotations(t.captures[0].trace) - annotations(t)
    assert only and any(set(a["path"]) & only for a in d["annotations"])
    # and no compiled region by its hash where a place is named
    shown = json.dumps([d["findings"], d["annotations"], d["device_ops"]])
    assert "## Call CompiledFxGraph" not in shown


def test_the_plugin_reads_the_capture_beside_a_run_and_lists_it_as_no_run(tmp_path):
    from conftest import call
    from tb_perfdiag.cache import DiagnosisCache
    from tb_perfdiag.discovery import Catalog, scan_logdir
    from tb_perfdiag.service import DiagnosisService
    from tb_perfdiag.testing.kineto import kineto_bytes
    run = tmp_path / "logs" / "run"
    ev = []
    for r in range(2):
        ev += replay_events(1000 + 200 * r, 100 + r)
    os.makedirs(str(run / "capture_traces"))
    (run / "host.1.pt.trace.json").write_bytes(kineto_bytes(ev))
    (run / "capture_traces" / "host.0.pt.trace.json").write_bytes(kineto_bytes(capture_events()))
    assert list(scan_logdir(str(tmp_path / "logs"))) == ["run"]
    svc = DiagnosisService(Catalog(str(tmp_path / "logs")), DiagnosisCache(disk_dir=None))
    status, body = call(svc, "diagnosis", {"run": "run", "host": "host"})
    assert status == 200
    e = body["devices"][0]["efficiency"]
    assert (e["graph_kernels_matched"], e["graph_kernels_total"]) == (8, 8)
    assert e["flops"] == 2 * (MM1 + MM2)
    # the capture removed: another diagnosis, not the cached one (the folder's listing is
    # part of the key)
    os.remove(str(run / "capture_traces" / "host.0.pt.trace.json"))
    status, body = call(svc, "diagnosis", {"run": "run", "host": "host"})
    e = body["devices"][0]["efficiency"]
    assert status == 200 and (e["graph_kernels_matched"], e["graph_kernels_total"]) == (0, 8)


def test_ragged_attention_takes_the_sums_of_vllm_step_name():
    # two context requests (q 3, k 3; q 2, k 5) and one decode (q 1, k 7): Σq·k = 9 + 10
    # + 7, Σq² of the context ones = 9 + 4; 4 query heads of 8, values of 8
    step = "execute_8_context_2(sq5sk8sqsq13sqsk19)_generation_1(sq1sk7sqsq1sqsk7)"
    q, kv = [6, 4, 8], [6, 2, 8]
    ev = [X("user_annotation", step, 0, 100),
          X("cpu_op", "vllm::unified_attention_with_output", 10, 50,
            **{"Input Dims": [q, kv, kv, q], "Input type": ["c10::BFloat16"] * 4}),
          launch(12, "", 7),
          kernel("kernel_unified_attention_2d", 30, 20, 7)]
    t = load_kineto(ev)
    got = replay_costs(t)["kernel_unified_attention_2d"]
    assert got == [(4 * 2 * (8 + 8) * 26 - 4 * (8 + 8) * 13, True)]
    # without the step's sums the packed shapes tell no lengths: no figure
    t = load_kineto(ev[1:])
    assert replay_costs(t)["kernel_unified_attention_2d"][0][1] is False


def test_cli_capture_names_the_capture(tmp_path, capsys):
    from tb_perfdiag.cli import main
    from tb_perfdiag.testing.kineto import kineto_bytes
    ev = []
    for r in range(2):
        ev += replay_events(1000 + 200 * r, 100 + r)
    (tmp_path / "exec.json").write_bytes(kineto_bytes(ev))
    (tmp_path / "cap.json").write_bytes(kineto_bytes(capture_events()))
    main(["diagnose", str(tmp_path / "exec.json"), "--json", "--capture", str(tmp_path / "cap.json")])
    e = json.loads(capsys.readouterr().out)["devices"][0]["efficiency"]
    assert (e["graph_kernels_matched"], e["graph_kernels_total"]) == (8, 8)
    main(["diagnose", str(tmp_path / "exec.json")])
    assert "0 of 8 replayed kernels matched" in capsys.readouterr().out


def test_the_graph_counts_survive_the_result_store():
    from tb_perfdiag.codec import decode, encode
    diag = diagnose(execution(capture=capture_events())).diagnosis
    back = decode(encode(diag))
    g, h = diag.efficiency.graphs, back.efficiency.graphs
    assert (h.matched.tolist(), h.total.tolist(), h.unrecorded.tolist()) == \
        (g.matched.tolist(), g.total.tolist(), g.unrecorded.tolist()) == ([8], [8], [2])


def test_the_capture_route_parameter_over_http(tmp_path):
    """A capture file named on the route, below the logdir: its diagnosis and the file's
    alone are kept apart (memory and result store), and a path out of the logdir is
    refused with a clear error."""
    from conftest import TensorBoard
    from tb_perfdiag.testing.kineto import kineto_bytes
    logs = tmp_path / "logs"
    ev = []
    for r in range(2):
        ev += replay_events(1000 + 200 * r, 100 + r)
    os.makedirs(str(logs / "run"))
    os.makedirs(str(logs / "graphs"))
    (logs / "run" / "host.1.pt.trace.json").write_bytes(kineto_bytes(ev))
    (logs / "graphs" / "cap.json").write_bytes(kineto_bytes(capture_events()))
    tb = TensorBoard(logs)
    try:
        base = "/data/plugin/perfdiag/diagnosis?run=run&host=host"

        def counts(query):
            status, _, body = tb.get(base + query)
            assert status == 200, body
            e = body["devices"][0]["efficiency"]
            return e["graph_kernels_matched"], e["graph_kernels_total"], e["flops"]
        assert counts("")[:2] == (0, 8)
        assert counts("&capture=graphs/cap.json") == (8, 8, 2 * (MM1 + MM2))
        assert counts("")[:2] == (0, 8)          # never the capture's cache entry
        status, _, body = tb.get("/data/plugin/perfdiag/gap?run=run&host=host&id=0"
                                 "&capture=graphs/cap.json")
        assert status in (200, 404)               # the route takes it (a gap may not exist)
        for bad in ("../../etc/passwd", "/etc/passwd", "graphs/../../x.json",
                    "file:///etc/passwd"):
            status, _, body = tb.get(base + "&capture=" + bad.replace("/", "%2F"))
            assert status == 400 and "capture must be a file's path relative to the logdir" \
                in body["error"], (bad, body)
            assert "root:" not in json.dumps(body)
        status, _, body = tb.get(base + "&capture=graphs%2Fnone.json")
        assert status == 404 and "capture" in json.dumps(body)
        status, _, body = tb.get(base + "&capture=graphs")     # a folder is no capture file
        assert status == 400 and "capture" in body["error"]
    finally:
        tb.stop()


def _found(doc, key):
    """Every value of ``key`` in a JSON document, in document order."""
    out = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += [v] if k == key else _found(v, key)
    elif isinstance(doc, list):
        for v in doc:
            out += _found(v, key)
    return out


def test_compare_and_pod_rows_carry_the_graph_counts():
    import jsonschema
    from conftest import ROOT
    from tb_perfdiag.analysis.compare.diff import compare
    from tb_perfdiag.render.compare import comparison_json
    from tb_perfdiag.render.pod import host_stats
    alone = diagnose(execution()).diagnosis
    matched = diagnose(execution(capture=capture_events())).diagnosis
    doc = json.loads(json.dumps(comparison_json(compare(alone, matched)), default=float))
    schema = json.load(open(os.path.join(ROOT, "tb_perfdiag", "schema", "comparison.schema.json")))
    jsonschema.validate(doc, schema)
    m, t = _found(doc, "graph_kernels_matched"), _found(doc, "graph_kernels_total")
    assert m and m[:2] == [0, 8] and t[:2] == [8, 8]       # before alone, after with capture
    from tb_perfdiag.render.compare import report
    assert "replayed kernels matched to their capture: 0 of 8 → 8 of 8" in \
        report(compare(alone, matched))
    row = json.loads(json.dumps(host_stats(matched), default=float))
    assert (row["graph_kernels_matched"], row["graph_kernels_total"]) == (8, 8)
    assert row["devices"][0]["graph_kernels_matched"] == 8
    assert host_stats(alone)["graph_kernels_matched"] == 0
    # a side without replays says none, not zero
    plain = diagnose(load_kineto(capture_events(extra=False))).diagnosis
    assert host_stats(plain)["graph_kernels_total"] is None
    pod = json.load(open(os.path.join(ROOT, "tb_perfdiag", "schema", "pod.schema.json")))
    jsonschema.validate({**row, "host": "h"}, {"$ref": "#/$defs/host", "$defs": pod["$defs"]})


def test_replayed_kernels_carry_the_captured_annotations():
    """The annotation around a launch while the graph was captured names the replayed
    kernel's device time (by annotation, and in the op table), below the annotation
    around the graph's launch; a kernel the capture left unannotated keeps the replay's."""
    cap = capture_events()
    cap.append(X("user_annotation", "attention_block", 9, 40))     # encloses gemm_a, add_k
    ev = [X("user_annotation", "decode_step", 990, 600)]
    for r in range(2):
        ev += replay_events(1000 + 200 * r, 100 + r)
    t = load_kineto(ev)
    t.captures = [CaptureFile(load_kineto(cap), "capture.json", -1, "")]
    d = diagnose(t).to_json()
    paths = {tuple(a["path"]): a["ops"] for a in d["annotations"]}
    # 2 replays × gemm_a, add_k under the captured annotation; gemm_b and the copy not
    assert paths == {("decode_step",): 8, ("decode_step", "attention_block"): 4}
    by_op = {r["name"]: r["annotation"] for r in d["device_ops"]["devices"][0]["ops"]}
    assert by_op["gemm_a"] == by_op["add_k"] == "decode_step › attention_block"
    assert by_op["gemm_b"] == "decode_step"
    # the op that launched each while the graph was captured, a name only the capture has
    host = {r["name"]: r["host_op"] for r in d["device_ops"]["devices"][0]["ops"]}
    assert (host["gemm_a"], host["add_k"], host["gemm_b"]) == ("aten::mm", "aten::add", "aten::mm")
    # without the capture, nothing names it
    assert "attention_block" not in json.dumps(diagnose(load_kineto(ev)).to_json())


HASHED = "## Call CompiledFxGraph fjs75i4jmhjizyb52gwp7gln7sgi42fcmh5xdwningderuqcuslv ##"


def test_compiled_regions_are_named_by_their_frame_not_their_hash():
    ev = []
    for s in range(3):
        t0 = 1000 * s
        ev += [X("user_annotation", "Torch-Compiled Region: 0/0", t0, 300),
               X("user_annotation", HASHED, t0 + 10, 280),
               launch(t0 + 20, "triton_poi_fused_add_0", 10 + s, "cudaLaunchKernel"),
               kernel("triton_poi_fused_add_0", t0 + 30, 50, 10 + s),
               # the host idles 600 µs after each region: a finding names where
               X("cpu_op", "aten::item", t0 + 300, 600)]
    d = diagnose(load_kineto(ev)).to_json()
    # what names a place reads the frame; a gap's host event keeps the trace's own name
    # (``name``: the event the trace viewer shows), its chain the frame
    shown = {k: v for k, v in d.items() if k != "gaps"}
    shown["chains"] = [h["chain"] for g in d["gaps"] for h in g["host_ops"]]
    assert d["findings"] and "fjs75i4j" not in json.dumps(shown)
    assert "CompiledFxGraph" in json.dumps(shown["chains"])
    row = d["device_ops"]["devices"][0]["ops"][0]
    assert row["name"] == "triton_poi_fused_add_0"
    assert row["annotation"] == "Torch-Compiled Region: 0/0 › CompiledFxGraph"
    assert ["Torch-Compiled Region: 0/0", "CompiledFxGraph"] in [a["path"] for a in d["annotations"]]
    from tb_perfdiag.trace.classify import frame_name
    assert frame_name(HASHED) == "CompiledFxGraph"
    assert frame_name("## Call something else ##") == "## Call something else ##"


def test_a_capture_whose_launches_name_no_kernel_matches_nothing_and_breaks_nothing():
    # a reader without the launch's kernel name (or a capture of launches only): the
    # windows are there, no launch can be matched
    cap = [X("cuda_runtime", "hipStreamBeginCapture", 0, 1), launch(12, "", 1),
           launch(32, "", 2), X("cuda_runtime", "hipStreamEndCapture", 80, 1)]
    t = execution(capture=cap)
    d = diagnose(t).to_json()
    e = d["devices"][0]["efficiency"]
    assert (e["graph_kernels_matched"], e["graph_kernels_total"]) == (0, 8)


def _stalled_replays():
    """Two replays of the capture's graph, the second's add_k held up 300 µs on the
    device (a device-side wait before a replayed kernel), the capture's launches under a
    Python frame and a user annotation."""
    cap = capture_events()
    cap += [X("python_function", "model.py(12): forward", 5, 70),
            X("user_annotation", "attention_block", 9, 40)]
    ev = replay_events(1000, 100)
    ev += [X("cuda_runtime", "hipGraphLaunch", 1200, 5, correlation=101),
           X("python_function", "serve.py(40): step", 1190, 30)]
    ev += [kernel("gemm_a", 1210, 20, 101), kernel("add_k", 1560, 20, 101),
           kernel("gemm_b", 1585, 20, 101),
           kernel("Memcpy DtoD (Device -> Device)", 1610, 5, 101, cat="gpu_memcpy")]
    # the host is busy with something else meanwhile: the device had add_k and waited
    ev += [X("cpu_op", "aten::busy", 1206, 600)]
    return ev, cap


def test_gaps_and_findings_say_where_a_replayed_op_was_captured():
    ev, cap = _stalled_replays()
    t = load_kineto(ev)
    t.captures = [CaptureFile(load_kineto(cap), "capture.json", -1, "")]
    d = diagnose(t).to_json()
    g = max(d["gaps"], key=lambda x: x["duration_ns"])
    assert g["next_op"]["name"] == "add_k" and g["cause"] == "device_wait"
    # the replay's own launch and the frame above it
    assert g["waited_for"]["name"] == "hipGraphLaunch"
    assert g["waited_for"]["chain"][-2:] == ["serve.py(40): step", "hipGraphLaunch"]
    # where add_k was launched while the graph was captured
    c = g["next_op"]["captured"]
    assert c["op"] == "aten::add" and c["annotations"] == ["attention_block"]
    assert c["chain"] == ["model.py(12): forward", "attention_block", "aten::add",
                          "hipLaunchKernel"]
    assert "'add_k' (captured under aten::add), issued by hipGraphLaunch" in g["evidence"]
    f = next(x for x in d["findings"] if x["kind"] == "device_wait")
    assert f["captured"]["op"] == "aten::add" and f["captured"]["where"] == "model.py:12 forward"
    assert f["sync"] == "waiting to run add_k (captured under aten::add)"
    assert "aten::add launched it at model.py:12 forward (annotations: attention_block)" \
        in f["detail"]
    import jsonschema
    from conftest import ROOT
    schema = json.load(open(os.path.join(ROOT, "tb_perfdiag", "schema",
                                         "diagnosis.schema.json")))
    jsonschema.validate(json.loads(json.dumps(d, default=float)), schema)
    # the text face names it too
    from tb_perfdiag.render.text import report
    assert "captured: model.py(12): forward › attention_block › aten::add › hipLaunchKernel " \
        "(annotations: attention_block)" in report("t", diagnose(t).diagnosis, 5)


def test_without_a_capture_a_replayed_op_says_no_captured_place():
    ev, _ = _stalled_replays()
    d = diagnose(load_kineto(ev)).to_json()
    g = max(d["gaps"], key=lambda x: x["duration_ns"])
    assert g["waited_for"]["name"] == "hipGraphLaunch" and "captured" not in g["next_op"]
    assert "captured under" not in g["evidence"]
    assert all("captured" not in f for f in d["findings"])


def test_captured_places_survive_the_result_store():
    from tb_perfdiag.codec import decode, encode
    ev, cap = _stalled_replays()
    t = load_kineto(ev)
    t.captures = [CaptureFile(load_kineto(cap), "capture.json", -1, "")]
    diag = diagnose(t).diagnosis
    back = decode(encode(diag))
    R = back.refs
    rows = R.captured_rows.tolist()
    assert rows and [R.captured_of(r) for r in rows] == [diag.refs.captured_of(r) for r in rows]


def test_public_vllm_gaps_name_the_captured_op():
    path = shared_path("public", "TraceLens", "tests", "traces", "inference",
                       "vllm_prefilldecode_piecewise", "graph_execution.json.gz")
    import tb_perfdiag
    d = diagnose(tb_perfdiag.load(path)).to_json()
    replayed = [g for g in d["gaps"] if g["waited_for"] and
                g["waited_for"]["name"] == "hipGraphLaunch"]
    assert replayed
    for g in replayed:
        c = g["next_op"]["captured"]
        # captured by vLLM's model runner, under its piecewise capture annotation
        assert c["chain"][-1] == "hipModuleLaunchKernel" and c["op"]
        assert any(a.startswith("capture_") for a in c["annotations"])
    # a gap before an op vLLM launched eagerly has no captured place
    assert any(g["next_op"] and "captured" not in g["next_op"] for g in d["gaps"])


def test_the_diagnosis_offers_capture_files_and_mcp_takes_one(tmp_path):
    """Where a file replays graphs, the /diagnosis answer lists the capture files it may
    be aligned with (capture_traces/ beside it, the run's other traces); MCP's file tools
    take one as ``capture``, confined to the logdir like every parameter."""
    from conftest import call
    from tb_perfdiag.agent_tools import Tools
    from tb_perfdiag.cache import DiagnosisCache
    from tb_perfdiag.discovery import Catalog
    from tb_perfdiag.errors import BadRequest
    from tb_perfdiag.service import DiagnosisService
    from tb_perfdiag.testing.kineto import kineto_bytes
    logs = tmp_path / "logs"
    run = logs / "run"
    ev = []
    for r in range(2):
        ev += replay_events(1000 + 200 * r, 100 + r)
    os.makedirs(str(run / "capture_traces"))
    (run / "host.1.pt.trace.json").write_bytes(kineto_bytes(ev))
    # beside it, a capture of another graph (no replayed kernel matches it); in the run, the
    # capture of this one recorded as a trace of its own
    other = [X("cuda_runtime", "hipStreamBeginCapture", 0, 1), launch(5, "unrelated_k", 9),
             X("cuda_runtime", "hipStreamEndCapture", 80, 1)]
    (run / "capture_traces" / "other.json").write_bytes(kineto_bytes(other))
    (run / "cap.1.pt.trace.json").write_bytes(kineto_bytes(capture_events()))
    svc = DiagnosisService(Catalog(str(logs)), DiagnosisCache(disk_dir=None))
    status, body = call(svc, "diagnosis", {"run": "run", "host": "host"})
    assert status == 200
    gc = body["graph_captures"]
    assert gc["chosen"] is None and gc["files_read"] == 1
    assert gc["choices"] == ["run/capture_traces/other.json", "run/cap.1.pt.trace.json"]
    e = body["devices"][0]["efficiency"]
    assert (e["graph_kernels_matched"], e["graph_kernels_total"]) == (0, 8)
    status, body = call(svc, "diagnosis", {"run": "run", "host": "host",
                                           "capture": gc["choices"][1]})
    e = body["devices"][0]["efficiency"]
    assert (e["graph_kernels_matched"], e["graph_kernels_total"]) == (8, 8)
    assert body["graph_captures"]["chosen"] == "run/cap.1.pt.trace.json"
    import jsonschema
    from conftest import ROOT
    jsonschema.validate(body, json.load(open(os.path.join(
        ROOT, "tb_perfdiag", "schema", "diagnosis.schema.json"))))
    tools = Tools(svc)
    s = tools.summary("run", host="host", capture="run/cap.1.pt.trace.json")
    assert s["devices"][0]["efficiency"]["graph_kernels_matched"] == 8
    assert s["graph_captures"]["choices"] == gc["choices"]
    g = tools.gaps("run", host="host", capture="run/cap.1.pt.trace.json", limit=50)
    assert any((x["next_op"] or {}).get("captured") for x in g["gaps"])
    assert tools.summary("run", host="host")["devices"][0]["efficiency"][
        "graph_kernels_matched"] == 0
    for bad in ("../outside.json", "/etc/passwd"):
        with pytest.raises(BadRequest):
            tools.findings("run", host="host", capture=bad)
    # a file without replays offers nothing
    status, body = call(svc, "diagnosis", {"run": "run", "host": "cap"})
    assert status == 200 and "graph_captures" not in body


# torch ≥ 2.15 on CUDA ≥ 12: Kineto writes "graph id" and "graph node id" into the args of
# every kernel, copy and set (pytorch/kineto libkineto/src/CuptiActivity.cpp,
# getGraphNodeMetadata; 0 for work launched one by one), and torch's graph annotations
# (torch.cuda.graph(enable_annotations=True) with mark_kernels) are written into the args
# of the events with a nonzero "graph node id", a bare name under "name"
# (pytorch/pytorch torch/cuda/_annotate_cuda_graph_trace.py, annotate_trace).
def annotated_replay(t0, corr):
    ev = [X("cuda_runtime", "cudaGraphLaunch", t0, 5, correlation=corr)]
    for i, (n, ann) in enumerate((("gemm_a", "linear_fwd"), ("add_k", "residual_add"),
                                  ("gemm_b", None))):
        k = kernel(n, t0 + 10 + 25 * i, 20, corr)
        k["args"].update({"graph id": 3, "graph node id": 11 + i})
        if ann:
            k["args"]["name"] = ann
        ev.append(k)
    return ev


def test_graph_node_ids_and_annotations_are_read_by_both_scanners():
    from tb_perfdiag.trace import kineto, native_scan
    from tb_perfdiag.testing.kineto import kineto_bytes
    ev = annotated_replay(1000, 100)
    # a kernel launched one by one (node id 0) with a "name" arg: no annotation of ours
    k = kernel("eager_k", 2000, 10, 200)
    k["args"].update({"graph id": 0, "graph node id": 0, "name": "not_a_graph_annotation"})
    ev += [X("cuda_runtime", "cudaLaunchKernel", 1990, 5, correlation=200), k]
    raw = kineto_bytes(ev)
    ref = kineto.scan_python("t.json", raw)
    got = [ref]
    try:
        got.append(native_scan.scan_kineto(raw))
    except ImportError:     # pragma: no cover - the extension is built in every checkout
        pass
    for scan in got:
        idx, vals = scan["stats"]["graph_node_id"]
        assert sorted(np.asarray(vals).tolist()) == [0, 11, 12, 13]
        idx, ids = scan["string_stats"]["graph_annotation"]
        texts = [json.loads(scan["stat_strings"][i]) for i in np.asarray(ids).tolist()]
        assert sorted(texts) == ["linear_fwd", "residual_add"]
    t = load_kineto(ev)
    dev = np.flatnonzero(t.kind == EventKind.KERNEL)
    v, has = t.stats["graph_node_id"].lookup(dev)
    assert dict(zip([t.event_name(e) for e in dev], np.asarray(v)[has].tolist())) == \
        {"gemm_a": 11, "add_k": 12, "gemm_b": 13, "eager_k": 0}


def test_an_annotated_graph_kernel_takes_its_annotation():
    ev = [X("user_annotation", "decode_step", 990, 600)]
    for r in range(2):
        ev += annotated_replay(1000 + 200 * r, 100 + r)
    d = diagnose(load_kineto(ev)).to_json()
    paths = {tuple(a["path"]): a["ops"] for a in d["annotations"]}
    # below the annotation around the graph's launch, 2 replays each
    assert paths[("decode_step", "linear_fwd")] == 2
    assert paths[("decode_step", "residual_add")] == 2
    by_op = {r["name"]: r["annotation"] for r in d["device_ops"]["devices"][0]["ops"]}
    assert by_op["gemm_a"] == "decode_step › linear_fwd" and by_op["gemm_b"] == "decode_step"
    # a gap before an annotated kernel names its annotation
    named = {g["next_op"]["name"]: g["next_op"]["annotation"] for g in d["gaps"]
             if g["next_op"]}
    assert named.get("add_k") == "residual_add" and named.get("gemm_b") is None
