"""The page as a user sees it: time from opening the tab to the gap list drawn, in
Chromium, beside the Profile plugin's trace viewer on the same file.

    python benchmarks/bench_page.py [--files tpu,kineto] [--tpu FILE] [--kineto FILE]
                                    [--repeat N] [--viewer-page] [--json OUT]

Defaults: ``tpu_inference_2`` tiled ×80 (2.14 M events, 65 MB) and ``df_index_resolver``
tiled ×10 (2.16 M events), made once by ``tile_xspace.py``/``tile_kineto.py`` into the
temp dir.  Each file is hard-linked (never copied into the repo) into a fresh logdir in
the layout both plugins read, ``plugins/profile/<run>/<host>.xplane.pb`` (a Kineto file
as ``plugins/profile/<run>/<host>.pt.trace.json.gz``), and a real TensorBoard with both
plugins (``tensorboard --logdir``) is started on it with an empty result store, so the
first request is cold.  /usr/bin/chromium is driven by Playwright, a fresh browser
context (empty HTTP cache) per measurement:

* ours: ``/#perfdiag&p.perfdiag.run=R&p.perfdiag.host=H`` opened; the clock stops when
  the first gap row is in the Diagnose frame's DOM.  Cold: the first request after
  TensorBoard started (read + analysis + first answer + drawing); warm: the same again
  (the answer built, the analysis cached).
* theirs: the Profile tab opened on the same run, host and its trace viewer tool
  (``/?run=R&tag=trace_viewer@&host=H#profile``, the hand-off the Diagnose page links);
  the tab embeds ``/data/plugin/profile/trace_viewer_index.html?is_streaming=true`` with
  ``trace_data_url=/data/plugin/profile/data?run=R&tag=trace_viewer@&host=H``, and the
  clock stops when that frame's ``tf-trace-viewer`` has a model with slices and the next
  two animation frames have run (the canvas drew them).  Its own TensorBoard, so neither
  warms the other's caches; cold: the Profile plugin's first conversion of the file (its
  caches are written into the run folder, which is made anew for each cold start).
  With ``--viewer-page``, beside it the trace viewer's page alone (no TensorBoard shell),
  with its trace-data request's own time.

Each measurement's seconds and the ratio ours/theirs (the Profile tab); ``--repeat N`` starts everything N times (the median is reported).  The
Profile plugin lists no PyTorch run: for Kineto the row says "does not open" with what
its runs route answered.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TPU_SRC = os.path.normpath(os.path.join(C.ROOT, "..", "shared", "traces", "public", "xprof",
                                        "xprof", "convert", "test_xplanes",
                                        "tpu_inference_2.xplane.pb"))
RUN, HOST = "bench", "host0"
TIMEOUT_S = 600

# the trace viewer's model has slices (the tests read the same model)
VIEWER_DRAWN = """() => {
  const tv = document.querySelector('tf-trace-viewer');
  const m = tv && tv._traceViewer && tv._traceViewer.model;
  if (!m) return 0;
  let n = 0;
  for (const p of Object.values(m.processes))
    for (const t of Object.values(p.threads)) n += t.sliceGroup.slices.length;
  return n;
}"""
NEXT_FRAME = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(1))))"


def tiled(kind: str) -> str:
    """The default file of ``kind``, tiled once into the temp dir."""
    os.makedirs(C.TMP, exist_ok=True)
    if kind == "tpu":
        out = os.path.join(C.TMP, "tpu_inference_2_x80.xplane.pb")
        cmd = ["tile_xspace.py", TPU_SRC, out, "--copies", "80"]
    else:
        out = os.path.join(C.TMP, "df_index_resolver_x10.pt.trace.json.gz")
        cmd = ["tile_kineto.py", C.DF, out, "--copies", "10"]
    if not os.path.exists(out):
        if not os.path.exists(cmd[1]):
            raise FileNotFoundError(f"{cmd[1]} is absent (../shared/traces)")
        subprocess.run([C.MAIN_PY, os.path.join(C.HERE, cmd[0])] + cmd[1:], check=True,
                       cwd=C.ROOT, stdout=subprocess.DEVNULL)
    return out


def logdir_for(path: str, kind: str) -> str:
    """A fresh logdir holding ``path`` (a hard link; a copy across file systems) where
    both plugins look."""
    root = tempfile.mkdtemp(prefix="bench_page_", dir=C.TMP)
    run = os.path.join(root, "plugins", "profile", RUN)
    os.makedirs(run)
    dst = os.path.join(run, HOST + (".xplane.pb" if kind == "tpu" else ".pt.trace.json.gz"))
    try:
        os.link(path, dst)
    except OSError:
        shutil.copyfile(path, dst)
    return root


class TensorBoard:
    def __init__(self, logdir: str):
        self.port = C.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.store = tempfile.mkdtemp(prefix="bench_page_store_", dir=C.TMP)
        env = dict(os.environ, TB_PERFDIAG_RESULTS=self.store, TB_PERFDIAG_CACHE_DIR=self.store)
        self.log = open(os.path.join(self.store, "tensorboard.log"), "w")
        self.proc = subprocess.Popen(
            [C.MAIN_PY, "-m", "tensorboard.main", "--logdir", logdir, "--port",
             str(self.port), "--host", "127.0.0.1", "--reload_interval", "0"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=C.ROOT)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("tensorboard exited early: " + self.tail())
            try:
                urllib.request.urlopen(self.url + "/data/plugins_listing", timeout=2)
                return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError("tensorboard did not start in 120 s")

    def get(self, path: str):
        try:
            with urllib.request.urlopen(self.url + path, timeout=120) as r:
                body = r.read()
                if r.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                return r.status, json.loads(body or b"null")
        except urllib.error.HTTPError as e:
            return e.code, e.read()[:300].decode(errors="replace")

    def tail(self) -> str:
        try:
            with open(self.log.name) as f:
                return " | ".join(f.read().strip().splitlines()[-3:])
        except OSError:
            return "?"

    def stop(self):
        C.stop(self.proc)
        self.log.close()
        shutil.rmtree(self.store, ignore_errors=True)


def our_run(tb) -> tuple:
    """(run, host) of the file as the Diagnose tab lists it."""
    status, body = tb.get("/data/plugin/perfdiag/runs")
    if status != 200 or not body["runs"]:
        raise RuntimeError(f"Diagnose lists no run: {status} {body}")
    r = body["runs"][0]
    return r["run"], r["hosts"][0]["name"]


def time_ours(browser, tb, run: str, host: str) -> float:
    """Seconds from opening the Diagnose URL to its first gap row in the DOM."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = ctx.new_page()
        url = (f"{tb.url}/#perfdiag&p.perfdiag.run={urllib.parse.quote(run)}"
               f"&p.perfdiag.host={urllib.parse.quote(host)}")
        t0 = time.perf_counter()
        page.goto(url)
        frame = None
        while frame is None:
            frame = next((f for f in page.frames if "plugin_entry.html" in f.url
                          and "name=perfdiag" in f.url), None)
            if frame is None:
                if time.perf_counter() - t0 > TIMEOUT_S:
                    raise TimeoutError("the Diagnose frame never loaded")
                page.wait_for_timeout(20)
        frame.wait_for_selector("#pd-gaps .gap-row", timeout=TIMEOUT_S * 1000, state="attached")
        return time.perf_counter() - t0
    finally:
        ctx.close()


def profile_host(tb, run: str) -> tuple:
    """(run, host, tools) as the Profile plugin lists them, or None with what it said."""
    status, runs = tb.get("/data/plugin/profile/runs")
    if status != 200 or not runs:
        return None, f"its runs route answered {status} {str(runs)[:200]}"
    name = next((r for r in runs if r == run or r.endswith("/" + run)), runs[0])
    status, tools = tb.get("/data/plugin/profile/run_tools?" + urllib.parse.urlencode(
        {"run": name}))
    if status != 200 or not any(t in (tools or []) for t in ("trace_viewer@", "trace_viewer")):
        return None, f"run {name!r}: its tools are {tools} ({status})"
    tool = "trace_viewer@" if "trace_viewer@" in tools else "trace_viewer"
    status, hosts = tb.get("/data/plugin/profile/hosts?" + urllib.parse.urlencode(
        {"run": name, "tag": tool}))
    if status != 200 or not hosts:
        return None, f"run {name!r} {tool}: hosts {status} {str(hosts)[:200]}"
    h = hosts[0]["hostname"] if isinstance(hosts[0], dict) else hosts[0]
    return (name, h, tool), ""


def time_theirs(browser, tb, run: str, host: str, tool: str) -> dict:
    """Seconds from opening the trace viewer to its first drawn slices, and the trace-data
    request's own seconds."""
    data = "/data/plugin/profile/data?" + urllib.parse.urlencode(
        {"run": run, "tag": tool, "host": host})
    url = (f"{tb.url}/data/plugin/profile/trace_viewer_index.html?is_streaming="
           f"{'true' if tool.endswith('@') else 'false'}&is_oss=true&trace_data_url="
           + urllib.parse.quote(data, safe=""))
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = ctx.new_page()
        seen = {}
        page.on("requestfinished", lambda r: seen.setdefault(
            "data_s", time.perf_counter() - t0) if "/data/plugin/profile/data" in r.url else None)
        t0 = time.perf_counter()
        page.goto(url)
        page.wait_for_function(VIEWER_DRAWN, timeout=TIMEOUT_S * 1000, polling=20)
        page.evaluate(NEXT_FRAME)
        out = {"seconds": time.perf_counter() - t0, "slices": page.evaluate(VIEWER_DRAWN)}
        out["data_request_s"] = seen.get("data_s")
        return out
    finally:
        ctx.close()


def time_theirs_tab(browser, tb, run: str, host: str, tool: str) -> float:
    """Seconds from opening the Profile tab on the run, host and trace viewer tool (the URL
    the Diagnose page hands over with) to the trace viewer's first drawn slices in the
    frame the tab embeds."""
    url = f"{tb.url}/?" + urllib.parse.urlencode({"run": run, "tag": tool, "host": host}) \
        + "#profile"
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = ctx.new_page()
        t0 = time.perf_counter()
        page.goto(url)
        while True:
            for f in page.frames:
                if "trace_viewer_index.html" not in f.url:
                    continue
                try:
                    drawn = f.evaluate(VIEWER_DRAWN)
                except Exception:  # noqa: BLE001 - the frame is still navigating
                    drawn = 0
                if drawn:
                    f.evaluate(NEXT_FRAME)
                    return time.perf_counter() - t0
            if time.perf_counter() - t0 > TIMEOUT_S:
                raise TimeoutError("the Profile tab's trace viewer drew nothing")
            page.wait_for_timeout(20)
    finally:
        ctx.close()


def one_round(browser, path: str, kind: str, viewer_page: bool = False) -> dict:
    """Cold and warm of ours, then of theirs, each in a TensorBoard of its own."""
    out = {}
    logdir = logdir_for(path, kind)
    tb = TensorBoard(logdir)
    try:
        run, host = our_run(tb)
        out["ours_cold_s"] = time_ours(browser, tb, run, host)
        out["ours_warm_s"] = time_ours(browser, tb, run, host)
    finally:
        tb.stop()
        shutil.rmtree(logdir, ignore_errors=True)
    logdir = logdir_for(path, kind)        # no cache of the Profile plugin's in it
    tb = TensorBoard(logdir)
    try:
        got, why = profile_host(tb, RUN)
        if got is None:
            out["theirs"] = f"does not open: {why}"
        else:
            out.update(theirs_cold_s=time_theirs_tab(browser, tb, *got),
                       theirs_warm_s=time_theirs_tab(browser, tb, *got), theirs_tool=got[2])
    finally:
        tb.stop()
        shutil.rmtree(logdir, ignore_errors=True)
    if "theirs" in out or not viewer_page:
        return out
    # the viewer's page alone (no TensorBoard shell, no Profile tab), cold again
    logdir = logdir_for(path, kind)
    tb = TensorBoard(logdir)
    try:
        got, _ = profile_host(tb, RUN)
        cold = time_theirs(browser, tb, *got)
        warm = time_theirs(browser, tb, *got)
        out.update(viewer_cold_s=cold["seconds"], viewer_cold_data_s=cold["data_request_s"],
                   viewer_warm_s=warm["seconds"], viewer_warm_data_s=warm["data_request_s"],
                   viewer_slices=cold["slices"])
    finally:
        tb.stop()
        shutil.rmtree(logdir, ignore_errors=True)
    return out


def median(rounds: list, key: str):
    xs = [r[key] for r in rounds if isinstance(r.get(key), (int, float))]
    return statistics.median(xs) if xs else None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", default="tpu,kineto", help="which of tpu,kineto")
    ap.add_argument("--tpu", help="an XSpace instead of tpu_inference_2 ×80")
    ap.add_argument("--kineto", help="a Kineto .pt.trace.json.gz instead of df_index_resolver ×10")
    ap.add_argument("--repeat", type=int, default=1, help="rounds (fresh TensorBoards each)")
    ap.add_argument("--viewer-page", action="store_true",
                    help="also time the trace viewer's page alone, cold and warm (on the TPU "
                         "file its cold conversion adds a minute or more)")
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args(argv)
    errors, rows = [], []
    if not os.path.exists(CHROMIUM):
        sys.exit(f"{CHROMIUM} is absent (apt-get install chromium)")
    from playwright.sync_api import sync_playwright
    print(f"# bench_page  load avg {C.load_avg()}  (seconds from opening to drawn; medians of "
          f"{a.repeat})")
    print(f"{'file':40} {'ours cold':>9} {'ours warm':>9} {'theirs cold':>11} "
          f"{'theirs warm':>11} {'cold ×':>7} {'warm ×':>7}")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            for kind in [k.strip() for k in a.files.split(",") if k.strip()]:
                try:
                    path = getattr(a, kind) or tiled(kind)
                except (OSError, subprocess.CalledProcessError) as e:
                    errors.append(f"{kind}: {e}")
                    continue
                rounds = []
                for _ in range(max(1, a.repeat)):
                    try:
                        rounds.append(one_round(browser, path, kind, a.viewer_page))
                    except Exception as e:  # noqa: BLE001 - a row fails, the rest go on
                        errors.append(f"{kind}: {type(e).__name__}: {str(e)[:300]}")
                if not rounds:
                    continue
                row = {"file": os.path.basename(path), "kind": kind, "rounds": rounds}
                for k in ("ours_cold_s", "ours_warm_s", "theirs_cold_s", "theirs_warm_s",
                          "viewer_cold_s", "viewer_warm_s", "viewer_cold_data_s",
                          "viewer_warm_data_s"):
                    row[k] = median(rounds, k)
                for k in ("cold", "warm"):
                    o, t = row[f"ours_{k}_s"], row[f"theirs_{k}_s"]
                    row[f"ratio_{k}"] = o / t if o and t else None
                note = next((r["theirs"] for r in rounds if "theirs" in r), None)
                row["theirs_note"] = note
                rows.append(row)
                f = lambda x, w: f"{x:{w}.2f}" if isinstance(x, float) else f"{'—':>{w}}"  # noqa: E731
                print(f"{row['file'][:40]:40} {f(row['ours_cold_s'], 9)} {f(row['ours_warm_s'], 9)} "
                      f"{f(row['theirs_cold_s'], 11)} {f(row['theirs_warm_s'], 11)} "
                      f"{f(row['ratio_cold'], 7)} {f(row['ratio_warm'], 7)}")
                if note:
                    print(f"  Profile plugin: {note}")
                elif row.get("viewer_cold_s"):
                    print(f"  its trace viewer's page alone (no TensorBoard shell): "
                          f"{row['viewer_cold_s']:.2f} s cold, {row['viewer_warm_s']:.2f} s "
                          f"warm (trace data {row['viewer_cold_data_s']:.2f}, "
                          f"{row['viewer_warm_data_s']:.2f} s); "
                          f"{rounds[0].get('viewer_slices')} slices in its model")
        finally:
            browser.close()
    C.finish(errors, a.json, {"rows": rows, "load_avg": C.load_avg()})


if __name__ == "__main__":
    main()
