"""Opens every real trace of ../shared/traces as a run of the Diagnose tab and checks what
the page says (issue 63): no null/NaN/undefined, no share over 100 %, no loss per step
above the step, one typical step, a headline on the device that computes and loses most,
the headline's peer wait the Collectives card's (``tb_perfdiag.testing.page_checks``).
Outside the test suite: it takes minutes.

    python scripts/sweep_pages.py [TRACES_DIR] [--only SUBSTRING] [--keep LOGDIR]

Each folder holding profiles is one run (XSpace files under <run>/plugins/profile/<session>/),
its files linked, never copied into the repository.  Prints one line per run and a summary;
exit 1 when a page breaks an invariant, 2 when the browser or TensorBoard cannot start."""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tb_perfdiag.testing import page_checks  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
PROFILE = (".xplane.pb", ".pt.trace.json", ".pt.trace.json.gz", ".json", ".json.gz")


def layout(traces: str, dest: str, only: str = "") -> list:
    """Links every folder of profiles under ``traces`` in as one run of ``dest``; returns
    the run names."""
    runs = []
    for dirpath, _, files in sorted(os.walk(traces)):
        mine = [f for f in sorted(files) if f.endswith(PROFILE) and "truth" not in dirpath]
        if not mine:
            continue
        rel = os.path.relpath(dirpath, traces)
        if only and only not in rel:
            continue
        parts = rel.split(os.sep)
        if "plugins" in parts:          # <run>/plugins/profile/<session>/
            run = "__".join(parts[:parts.index("plugins")])
            out = os.path.join(dest, run, *parts[parts.index("plugins"):])
        elif any(f.endswith(".xplane.pb") for f in mine):   # XSpace needs the layout
            run = "__".join(parts)
            out = os.path.join(dest, run, "plugins", "profile", "capture")
        else:
            run = "__".join(parts)
            out = os.path.join(dest, run)
        os.makedirs(out, exist_ok=True)
        for f in mine:
            if not os.path.exists(os.path.join(out, f)):
                os.symlink(os.path.join(dirpath, f), os.path.join(out, f))
        if run not in runs:
            runs.append(run)
    return runs


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_tensorboard(logdir: str) -> tuple:
    port = _port()
    env = dict(os.environ, TB_PERFDIAG_CACHE_DIR=logdir + ".cache",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", logdir,
                             "--port", str(port), "--host", "127.0.0.1",
                             "--reload_interval", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("tensorboard exited early")
        try:
            urllib.request.urlopen(url + "/data/plugins_listing", timeout=2)
            return proc, url
        except OSError:
            time.sleep(0.3)
    proc.terminate()
    raise RuntimeError("tensorboard did not start in 90 s")


def plugin_frame(page, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        for f in page.frames:
            if "plugin_entry.html" in f.url and "name=perfdiag" in f.url:
                return f
        page.wait_for_timeout(100)
    raise RuntimeError("the Diagnose iframe never loaded")


def sweep(url: str, runs: list) -> tuple:
    from playwright.sync_api import sync_playwright
    bad, lines = 0, []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--no-sandbox", "--disable-gpu", "--no-first-run"])
        ctx = b.new_context(viewport={"width": 1600, "height": 1000})
        page = ctx.new_page()
        for run in runs:
            try:
                got = page_checks.open_run(page, url, run, plugin_frame)
                probs = page_checks.problems(got)
                kind = "pod" if got["pod"] else "error" if got["error"] else "host"
                secs = got["seconds"]
            except Exception as e:  # noqa: BLE001 — a run that never settles is a finding too
                probs, kind, secs = [f"did not settle: {type(e).__name__}: {str(e)[:160]}"], "?", 0.0
            bad += bool(probs)
            lines.append(f"{'BAD ' if probs else 'ok  '} {run} ({kind}, {secs:.1f} s)")
            lines += [f"       {x}" for x in probs[:8]]
            print(lines[-1 - min(len(probs), 8)], flush=True)
            for x in probs[:8]:
                print(f"       {x}", flush=True)
        b.close()
    return bad, lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="?", default=os.path.join(ROOT, "..", "shared", "traces"))
    ap.add_argument("--only", default="", help="runs whose path holds this text")
    ap.add_argument("--keep", default="", help="lay the runs out here and keep them")
    a = ap.parse_args(argv)
    if not os.path.isdir(a.traces):
        print(f"sweep_pages: no traces at {a.traces}", file=sys.stderr)
        return 2
    dest = a.keep or tempfile.mkdtemp(prefix="sweep-pages-")
    runs = layout(os.path.abspath(a.traces), dest, a.only)
    print(f"{len(runs)} runs under {dest}", flush=True)
    try:
        proc, url = start_tensorboard(dest)
    except RuntimeError as e:
        print(f"sweep_pages: {e}", file=sys.stderr)
        return 2
    try:
        # the runs as the server names them (an XSpace run is <run>/<session>)
        import json
        with urllib.request.urlopen(url + "/data/plugin/perfdiag/runs", timeout=300) as r:
            listed = [x["run"] for x in json.loads(r.read()).get("runs", [])]
        bad, _ = sweep(url, listed or runs)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        if not a.keep:
            shutil.rmtree(dest, ignore_errors=True)
            shutil.rmtree(dest + ".cache", ignore_errors=True)
    print(f"{len(runs)} runs: {len(runs) - bad} pass every page check, {bad} break one")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
