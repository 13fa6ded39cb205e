"""One measurement in its own process:  python _child.py WHAT PATH

Prints one JSON line: seconds (wall time of the timed part), cpu_seconds (user + system
CPU time of this process over the same part: steadier on a busy machine), parts (sub-timings), peak_mb (this
process's ru_maxrss when the timed part ended: interpreter, imports and the raw file
included), events, and what was timed.  Imports happen before the clock starts.  Runs
under the project's venv, or (WHAT = hta) under benchmarks/.venv-hta.

WHAT:
  json.loads / orjson.loads   bare decode of the (gunzipped) bytes; reading and gunzip untimed
  ParseFromString             XSpace().ParseFromString(bytes) (tb_perfdiag/trace/xplane_pb.py)
  ParseFromString+walk        the same, then every event's fields and stats read into Python
                              objects (upb parses lazily into C structures; this is the
                              decode "into Python objects" that json.loads does for JSON)
  load                        tb_perfdiag.load(path), reading the file included
  diagnose-no-efficiency      diagnose with the efficiency stage given no cost sums (what
                              the FLOPs, MFU and roofline add is diagnose less this)
  diagnose                    tb_perfdiag.diagnose(path), reading the file included; then
                              .to_json(all_gaps=False) as JSON bytes (what the /diagnosis
                              route serves, the page's first answer: answer_bytes its
                              size) and .to_json() (every gap's record in full)
                              (parts: diagnose, to_json, to_json_all; checkpoints for each)
  pod-serial                  PATH = a logdir with one pod run: every host diagnosed and
                              summarised in this one process, one after the other (the anchor)
  pod-dask                    the same summary with every host a task on a LocalCluster that
                              this process starts (timed), filling an empty result store; then
                              again from the filled store; worker_peak_mb is the largest
                              worker process's peak
  host-dask                   PATH = one XSpace as a task on a one-worker LocalCluster: seconds
                              and the worker's peak memory for a host of that size
  gunzip                      read + gunzip of the file into one bytes object (the floor for
                              any reader of a gzipped trace)
  gunzip-stream               read + gunzip of the file a chunk at a time, each chunk dropped
                              (ISA-L, the read block and chunk size of tb_perfdiag.storage):
                              the floor for a streaming reader
  xprof                       the Profile plugin's trace-viewer conversion of an XSpace
                              (xprof.convert.raw_to_tool_data.xspace_to_tool_data(…,
                              "trace_viewer", use_saved_result=False)): what its first
                              trace-viewer open computes
  hta                         HTA TraceAnalysis(trace_dir=PATH) (HTA's own parsing of the one
                              file in that dir), get_idle_time_breakdown(all ranks,
                              visualize=False); then get_cuda_kernel_launch_stats and
                              get_temporal_breakdown (checkpoints after each)
"""
import gzip
import json
import os
import resource
import sys
import time


def cpu():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def read_raw(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return raw


def main():
    what, path = sys.argv[1], sys.argv[2]
    rep = {"what": what, "pid": os.getpid()}
    clock = time.perf_counter
    if what in ("json.loads", "orjson.loads"):
        if what == "orjson.loads":
            import orjson
            loads = orjson.loads
        else:
            loads = json.loads
        rep["import_mb"] = peak_mb()
        raw = read_raw(path)
        t, c = clock(), cpu()
        doc = loads(raw)
        rep["seconds"], rep["cpu_seconds"] = clock() - t, cpu() - c
        rep["events"] = len(doc["traceEvents"])
        rep["peak_mb"] = peak_mb()
    elif what in ("ParseFromString", "ParseFromString+walk"):
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from tb_perfdiag.trace.xplane_pb import XSpace
        from google.protobuf.internal import api_implementation
        rep["import_mb"] = peak_mb()
        raw = read_raw(path)
        t, c = clock(), cpu()
        s = XSpace()
        s.ParseFromString(raw)
        if what == "ParseFromString+walk":
            for p in s.planes:
                for ln in p.lines:
                    for e in ln.events:
                        (e.metadata_id, e.offset_ps, e.duration_ps,
                         [(st.metadata_id, getattr(st, st.WhichOneof("value") or "int64_value"))
                          for st in e.stats])
        rep["seconds"], rep["cpu_seconds"] = clock() - t, cpu() - c
        rep["peak_mb"] = peak_mb()
        rep["protobuf_impl"] = api_implementation.Type()
        rep["events"] = sum(len(ln.events) for p in s.planes for ln in p.lines)
    elif what in ("load", "diagnose", "diagnose-no-efficiency"):
        import tb_perfdiag
        import_analysis()
        if what == "diagnose-no-efficiency":
            # the same analysis with the efficiency stage's input left out (no costs, no
            # sums: the efficiency table is then empty): what the FLOPs, MFU and roofline
            # cost, on the same tree and the same machine load
            from tb_perfdiag.analysis.efficiency import sums as _sums
            _sums.gather = _sums.costs_ahead = lambda *a, **k: None
        native = native_probe()
        rep["import_mb"] = peak_mb()
        t, c = clock(), cpu()
        if what == "load":
            tr = tb_perfdiag.load(path)
            rep["seconds"], rep["cpu_seconds"] = clock() - t, cpu() - c
            rep["peak_mb"] = peak_mb()
            rep["events"] = int(tr.n_events)
        else:
            d = tb_perfdiag.diagnose(path)
            t1, c1 = clock(), cpu()
            rep["peak_mb"] = peak_mb()
            # what the /diagnosis route serves, as the bytes it sends (before gzip): the
            # page's first answer, a page of gaps with their largest host ops, step bins
            # above 500 steps
            from tb_perfdiag.render.json import json_bytes
            j = d.to_json(all_gaps=False)
            rep["answer_bytes"] = len(json_bytes(j))
            t2, c2 = clock(), cpu()
            peak_page = peak_mb()
            # every gap's record (to_json() with no arguments; the CLI's --all-gaps)
            every = d.to_json()
            t3, c3 = clock(), cpu()
            rep["seconds"], rep["cpu_seconds"] = t1 - t, c1 - c
            rep["parts"] = {"diagnose": t1 - t, "to_json": t2 - t1, "to_json_all": t3 - t2}
            rep["checkpoints"] = {"diagnose": [t1 - t, rep["peak_mb"], c1 - c],
                                  "diagnose+to_json": [t2 - t, peak_page, c2 - c],
                                  "diagnose+to_json_all": [t1 - t + t3 - t2, peak_mb(),
                                                           c1 - c + c3 - c2]}
            rep["events"] = d.source.get("events")
            rep["gaps"] = len(every["gaps"])
            rep["hta_compat_ns"] = j["hta"]
        rep["native"] = native()
    elif what == "pod-serial":
        # PATH is a logdir holding one pod run: every host diagnosed and summarised one
        # after the other in this one process (no cluster, no store): the anchor
        import glob
        import tb_perfdiag
        from tb_perfdiag.render.pod import pod_summary, summary_row
        files = sorted(glob.glob(os.path.join(path, "**", "*.xplane.pb"), recursive=True))
        c, t = cpu(), clock()
        rows = [summary_row(os.path.basename(f)[:-len(".xplane.pb")], "",
                            tb_perfdiag.diagnose(f).diagnosis) for f in files]
        body = pod_summary(rows)
        rep["seconds"], rep["cpu_seconds"] = clock() - t, cpu() - c
        rep["peak_mb"] = peak_mb()
        rep["workers"], rep["hosts"] = 1, len(files)
        pod_report(rep, body)
    elif what == "pod-dask":
        # PATH is a logdir holding one pod run: the summary as TensorBoard and the CLI make
        # it, every host a task on a LocalCluster (TB_PERFDIAG_WORKERS / _WORKER_MEMORY_MB size it)
        # filling an empty result store; then the same summary again from the filled store
        # (a second server: no analysis).  Cluster start-up is timed (TensorBoard pays it
        # on its first summary).
        import shutil
        import tempfile
        from tb_perfdiag.analysis import Options
        from tb_perfdiag.pod import Engine, diagnose_pod
        store = tempfile.mkdtemp(prefix="bench_pod_store_")
        engine = Engine("")
        try:
            c, t = cpu(), clock()
            (body,) = diagnose_pod(path, Options(), results=store, engine=engine).values()
            rep["seconds"] = clock() - t
            rep["workers"] = engine.describe().get("workers")
            rep["memory_limit_mb"] = (engine.describe().get("memory_limit_bytes") or 0) / 1e6
            t2 = clock()
            (again,) = diagnose_pod(path, Options(), results=store, engine=engine).values()
            rep["from_store_seconds"] = clock() - t2
            rep["from_store_analysed"] = again["analysed"]
        finally:
            engine.close()
            shutil.rmtree(store, ignore_errors=True)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        rep["cpu_seconds"] = cpu() - c + kids.ru_utime + kids.ru_stime
        rep["peak_mb"] = peak_mb()
        rep["worker_peak_mb"] = kids.ru_maxrss / 1024
        rep["hosts"] = body["total"]
        pod_report(rep, body)
    elif what == "host-dask":
        # one host as a task on a one-worker LocalCluster (memory limit TB_PERFDIAG_WORKER_MEMORY_MB):
        # what a cluster's worker spends on a host of this size, and its peak memory
        import shutil
        import tempfile
        from tb_perfdiag.analysis import Options
        from tb_perfdiag.pod import Engine, diagnose_pod
        run = tempfile.mkdtemp(prefix="bench_host_")
        folder = os.path.join(run, "one", "plugins", "profile", "r")
        os.makedirs(folder)
        try:                                         # a hard link: no copy of a large file
            os.link(os.path.abspath(path), os.path.join(folder, "h0.xplane.pb"))
        except OSError:
            shutil.copy(path, os.path.join(folder, "h0.xplane.pb"))
        engine = Engine("")
        try:
            engine.client()                          # start-up not timed here
            c, t = cpu(), clock()
            (body,) = diagnose_pod(run, Options(), results=os.path.join(run, "store"),
                                   engine=engine).values()
            rep["seconds"] = clock() - t
        finally:
            engine.close()
            shutil.rmtree(run, ignore_errors=True)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        rep["cpu_seconds"] = cpu() - c + kids.ru_utime + kids.ru_stime
        rep["peak_mb"] = peak_mb()
        rep["worker_peak_mb"] = kids.ru_maxrss / 1024
        rep["bytes"] = os.path.getsize(path)
        rep["row_status"] = body["hosts"][0]["status"]
        rep["row_error"] = body["hosts"][0].get("error")
    elif what == "gunzip":
        rep["import_mb"] = peak_mb()
        t, c = clock(), cpu()
        raw = read_raw(path)
        rep["seconds"], rep["cpu_seconds"] = clock() - t, cpu() - c
        rep["peak_mb"] = peak_mb()
        rep["bytes"] = len(raw)
    elif what == "gunzip-stream":
        from isal import isal_zlib
        rep["import_mb"] = peak_mb()
        t, c = clock(), cpu()
        d = isal_zlib.decompressobj(16 + isal_zlib.MAX_WBITS)
        n = 0
        with open(path, "rb") as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                while b:
                    out = d.decompress(b, 4 << 20)
                    n += len(out)
                    b = d.unconsumed_tail
                    if d.eof or (not b and len(out) < 4 << 20):
                        break
        rep["seconds"], rep["cpu_seconds"] = clock() - t, cpu() - c
        rep["peak_mb"] = peak_mb()
        rep["bytes"] = n
    elif what == "xprof":
        from xprof.convert import raw_to_tool_data
        rep["import_mb"] = peak_mb()
        t, c = clock(), cpu()
        data, _ = raw_to_tool_data.xspace_to_tool_data([path], "trace_viewer",
                                                        {"use_saved_result": False})
        rep["seconds"], rep["cpu_seconds"] = clock() - t, cpu() - c
        rep["peak_mb"] = peak_mb()
        if not data:
            raise SystemExit("xprof returned no trace-viewer data")
        rep["output_bytes"] = len(data)
    elif what == "hta":
        import logging
        logging.disable(logging.WARNING)
        from hta.trace_analysis import TraceAnalysis
        from importlib.metadata import version
        rep["hta_version"] = version("HolisticTraceAnalysis")
        cps = {}
        rep["import_mb"] = peak_mb()
        t, c = clock(), cpu()
        a = TraceAnalysis(trace_dir=path)
        t_parse = clock()
        cps["parse"] = [t_parse - t, peak_mb(), cpu() - c]
        ranks = sorted(a.t.traces.keys())
        idle, _ = a.get_idle_time_breakdown(ranks=ranks, visualize=False)
        t_idle = clock()
        cps["parse+idle"] = [t_idle - t, peak_mb(), cpu() - c]
        a.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
        t_launch = clock()
        a.get_temporal_breakdown(visualize=False)
        t_temp = clock()
        cps["parse+idle+launch+temporal"] = [t_temp - t, peak_mb(), cpu() - c]
        rep["seconds"], rep["cpu_seconds"] = t_idle - t, cps["parse+idle"][2]
        rep["peak_mb"] = cps["parse+idle"][1]
        rep["parts"] = {"parse": t_parse - t, "idle": t_idle - t_parse,
                        "launch_stats": t_launch - t_idle, "temporal": t_temp - t_launch}
        rep["checkpoints"] = cps
        rep["ranks"] = ranks
        rep["events"] = int(sum(len(a.t.get_trace(r)) for r in ranks))
        rep["idle_ns_by_category"] = {
            str(k): int(v * 1000) for k, v in
            idle.groupby("idle_category")["idle_time"].sum().items()}
    else:
        raise SystemExit(f"unknown WHAT {what!r}")
    print(json.dumps(rep))


def pod_report(rep, body):
    rep["failed"] = sum(r["status"] != 200 for r in body["hosts"])
    rep["stragglers"] = [x["host"] for x in body["stragglers"]]
    rep["straggler_causes"] = sorted({x["cause"] for x in body["stragglers"]})


def import_analysis():
    """Imports every module of the reader, the analysis and the renderers, so that the
    ones the analysis imports where first used (the cost sources, the peak tables) are
    not timed: with no byte code cache (PYTHONDONTWRITEBYTECODE, a fresh checkout) their
    compilation was 30 ms of a 0.8 s diagnose, and more the more modules a tree has."""
    import importlib
    import pkgutil
    import tb_perfdiag
    for sub in ("trace", "analysis", "render"):
        pkg = importlib.import_module(f"tb_perfdiag.{sub}")
        for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            try:
                importlib.import_module(m.name)
            except Exception:        # noqa: BLE001 - a module of an optional part
                pass
    return tb_perfdiag


def native_probe():
    """Wrap the native scanners (if importable and not disabled) to see whether the read
    actually went through them; returns a function giving 'used', 'fallback', 'disabled'
    or 'absent'."""
    if os.environ.get("TB_PERFDIAG_NO_NATIVE"):
        return lambda: "disabled"
    try:
        from tb_perfdiag.trace import native_scan
    except ImportError:
        return lambda: "absent"
    state = {"calls": 0, "ok": 0}

    def wrap(fn):
        def inner(*a, **k):
            state["calls"] += 1
            r = fn(*a, **k)
            state["ok"] += 1
            return r
        return inner

    for name in ("scan_kineto", "scan_xspace"):
        if hasattr(native_scan, name):
            setattr(native_scan, name, wrap(getattr(native_scan, name)))
    return lambda: ("used" if state["ok"] else "fallback" if state["calls"] else "not called")


if __name__ == "__main__":
    main()
