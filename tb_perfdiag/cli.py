"""tb-perfdiag info|diagnose|compare|check|trend|scalars|mcp: in a terminal, a pipeline, CI or an assistant.

Exit codes (every command):
  0  done (check: every budget met)
  1  check: a budget was breached
  2  usage: an unknown option, a bad value (--threshold-us nan), nothing to check
  3  input: a path that does not exist, holds no profile, or a file that cannot be read
     (or no memory is left to read it), a URL whose fsspec backend is not installed
A closed pipe (... | head) ends the command quietly with 141, as SIGPIPE would.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time


from ._version import __version__
from .analysis import Options
from .analysis import causes as C
from .analysis.compare.budgets import Budgets, check as check_budgets
from .analysis.compare.diff import compare as compare_diagnoses
from .analysis.result import Diagnosis
from .analysis.steps.windows import unknown_step
from .api import is_folder, trace_files
from .discovery import latest, scan_logdir, span_label
from .errors import StorageError
from .file_analysis import read_and_analyse
from .params import DEFAULT_GAPS_PAGE, MAX_GAPS_PAGE, PARAMS
from .render import check as check_render
from .render import compare as compare_render
from .render import text
from .render.json import diagnosis_json, json_bytes, unknown_device
from .render.text import safe, safe_text
from .storage import max_file_bytes
from .trace import TraceError, load
from .units import duration_ps
from .trace.extension import reader_kind

OK, BREACH, USAGE, INPUT, PIPE = 0, 1, 2, 3, 141
DEFAULT_TOP = 8
OUT_OF_MEMORY = "not enough memory to read and analyse it (a decompression bomb, or a " \
                "trace larger than this machine or its memory limit holds)"


class UsageError(Exception):
    """A command line that cannot run (exit 2)."""


class InputError(Exception):
    """A path or file that cannot be read (exit 3)."""


class FileInputError(InputError):
    """A file that cannot be read: ``path: reason``, the file named once."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


class _Parser(argparse.ArgumentParser):
    """argparse, with an error on one line (no usage block) and exit code 2."""

    def error(self, message):
        self.exit(USAGE, f"{self.prog}: error: {message}\n")


# ---- option values ----

def _number(name: str, lo: float, hi: float, integer: bool = False):
    def conv(s: str):
        try:
            x = int(s) if integer else float(s)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{s!r} is not {'an integer' if integer else 'a number'}") from None
        if not math.isfinite(x):
            raise argparse.ArgumentTypeError(f"{s!r}: must be a finite number")
        if not lo <= x <= hi:
            raise argparse.ArgumentTypeError(f"{s!r}: must be between {lo:g} and {hi:g}")
        return x
    conv.__name__ = name
    return conv


def _share(s: str, example: str, at_most_one: bool) -> float:
    """'80%' or '0.8' → 0.8 (``example``: the fraction the message shows)."""
    t = s.strip()
    pct = t.endswith("%")
    try:
        x = float(t[:-1] if pct else t)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{s!r} is not a fraction ({example}) or a percentage ({float(example):.0%})") \
            from None
    if at_most_one:
        if not math.isfinite(x):
            raise argparse.ArgumentTypeError(f"{s!r}: must be a finite number")
    elif not math.isfinite(x) or x < 0:
        raise argparse.ArgumentTypeError(f"{s!r}: must be a finite number ≥ 0")
    x = x / 100 if pct else x
    if at_most_one and not 0 <= x <= 1:
        raise argparse.ArgumentTypeError(f"{s!r}: must be between 0 and 1 (0% and 100%)")
    return x


def _fraction(s: str) -> float:
    """A share of a whole: '80%' or '0.8' → 0.8."""
    return _share(s, "0.8", True)


def _growth(s: str) -> float:
    """A relative change, which may exceed 100 %: '5%' or '0.05' → 0.05."""
    return _share(s, "0.05", False)


def _idle_budget(s: str) -> tuple:
    """'host_sync=5%' → ('host_sync', 0.05)."""
    cause, sep, val = s.partition("=")
    cause = cause.strip()
    if not sep or cause not in C.ALL:
        raise argparse.ArgumentTypeError(
            f"{s!r}: expected CAUSE=P% with CAUSE one of {', '.join(C.ALL)}")
    return cause, _fraction(val)


_T = PARAMS["threshold_us"]
_threshold = _number("threshold", _T.lo, _T.hi)
_P = PARAMS["peak_tflops"]
_peak = _number("peak", _P.lo, _P.hi)


# ---- resolving paths ----

def _exists(path: str) -> None:
    if "://" not in path and not os.path.exists(path):
        raise InputError(f"no such file or folder: {path}")


WHAT_IS_READ = "*.xplane.pb under <run>/plugins/profile/<session>/, *.pt.trace.json[.gz]"


def _skipped_said(path: str, found: bool, skipped: list) -> None:
    """What a folder held that looks like a profile but was not read, and why: in the
    error when nothing else was found, else one note a file on stderr."""
    if not skipped:
        if not found:
            raise InputError(f"no profiles found under {path} ({WHAT_IS_READ})")
        return
    if not found:
        more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
        raise InputError(f"no profiles found under {path} ({WHAT_IS_READ}); skipped: " +
                         "; ".join(f"{s.path}: {s.reason}" for s in skipped[:3]) + more)
    for s in skipped:
        print(safe(f"tb-perfdiag: note: skipped {s.path}: {s.reason}"), file=sys.stderr)


def _profiles(path: str) -> list:
    """Every profile under ``path`` as (label, file), or raise InputError."""
    _exists(path)
    skipped: list = []
    found = trace_files(path, skipped)
    _skipped_said(path, bool(found), skipped)
    return found


def _latest_per_host(path: str, host: str | None = None) -> list:
    """[(host, label, file)]: a file as it is; a folder: the newest span of each host (as
    the tab opens it), only ``host`` when given."""
    return [x[1:] for x in _latest_sources(path, host)]


def _latest_sources(path: str, host: str | None = None) -> list:
    """[(run, host, label, file)] as ``_latest_per_host`` (run and host None for a file)."""
    _exists(path)
    if not is_folder(path):                 # any logdir URL TensorBoard takes (api.is_folder)
        return [(None, None, os.path.basename(path.rstrip("/")), path)]
    skipped: list = []
    runs = scan_logdir(path, skipped)
    _skipped_said(path, any(r.sources for r in runs.values()), skipped)
    best = {}
    for run in runs.values():
        for s in run.sources:
            k = (run.name, s.host)
            if k not in best or s.order_key > best[k].order_key:     # discovery.SPAN_RULE
                best[k] = s
    out = [(run, h, f"{run} · {h}" + (f" · {span_label(s)}" if s.span else ""), s.path)
           for (run, h), s in sorted(best.items())]
    if host is not None:
        out = [x for x in out if x[1] == host]
        if not out:
            raise UsageError(f"no host {host!r} under {path}; hosts: "
                             f"{', '.join(sorted({h for _, h in best}))}")
    return out


def _load(path: str):
    """A file read within the server's budget (``TB_PERFDIAG_MAX_FILE_MB``, on disk and
    decompressed): a gzip bomb is refused as too large once that much is out, not read
    to its end (6 GiB of spaces: minutes, then "not valid JSON")."""
    return load(path, max_bytes=max_file_bytes())


def _diagnose(path: str, opt: Options, captures=None):
    try:
        return read_and_analyse(path, opt, max_bytes=max_file_bytes(), captures=captures)[0]
    except TraceError as e:
        raise FileInputError(path, e.reason) from None
    except OSError as e:
        raise FileInputError(path, str(e.strerror or e)) from None
    except MemoryError:
        raise FileInputError(path, OUT_OF_MEMORY) from None


def _options(args) -> Options:
    return Options(threshold_us=args.threshold_us, kernels_only=args.kernels_only,
                   peak_tflops=getattr(args, "peak_tflops", None))


def _dump(doc, args) -> None:
    """JSON on stdout with orjson: indented for a terminal, compact into a pipe or file
    (``--pretty``/``--compact`` choose)."""
    pretty = args.pretty if args.pretty is not None else sys.stdout.isatty()
    sys.stdout.flush()
    out, view = sys.stdout.buffer, memoryview(json_bytes(doc, pretty) + b"\n")
    # a large write into a pipe whose reader left returns short instead of failing:
    # write the rest until the closed pipe says so (BrokenPipeError → exit 141)
    while view:
        n = out.write(view)
        if not n:
            raise BrokenPipeError
        view = view[n:]
    out.flush()


# ---- commands ----

def cmd_info(args) -> int:
    rc = OK
    for label, path in _profiles(args.path):
        try:
            tr = _load(path)
        except (TraceError, OSError) as e:
            _file_error(path, str(getattr(e, 'reason', None) or getattr(e, 'strerror', None)
                                  or e))
            rc = INPUT
            continue
        except MemoryError:
            _file_error(path, OUT_OF_MEMORY)
            rc = INPUT
            continue
        s = tr.summary()
        lo, hi = s["span_ps"]
        # names from the file (and the file's own name) are shown as text, escapes visible
        print(safe(label))
        print(safe(f"  file: {path}"))
        print(safe(f"  format: {s['format']}, {s['events']} events, span {duration_ps(hi - lo)}, "
                   f"devices: {', '.join(s['devices']) or 'none'}"))
        print(f"  reader: {reader_kind()}")
        steps = s["steps"]
        print(f"  steps: {len(steps)}" + (f" ({steps[0]}..{steps[-1]})" if steps else ""))
        for t in s["tracks"]:
            print(safe(f"  {t['kind']:6} {t['events']:9d}  {t['label']}"))
        for w in s["warnings"]:
            print(safe(f"  warning: {w}"))
    return rc


def _json_doc(diag, args) -> dict:
    """The route's JSON: one page of gaps (``--gaps``, default the route's page; ``--top``
    when given; every gap with ``--all-gaps``), findings cut to ``--top`` when given; with
    ``--full`` each gap's every host op and every step row, which the route leaves to its
    gap and steps routes."""
    if args.all_gaps:
        limit = None
    elif args.gaps is not None:
        limit = args.gaps
    elif args.top is not None:
        limit = args.top
    else:
        limit = DEFAULT_GAPS_PAGE
    doc = diagnosis_json(diag, 0, limit, args.step, paged=True, light=not args.full,
                         device=args.device)
    if args.top is not None:
        doc.setdefault("findings_total", len(doc["findings"]))
        doc["findings"] = doc["findings"][:args.top]
    return doc


class PodProgress:
    """Hosts done per run, on ``stream``: one line rewritten in place on a terminal; in a
    pipe or a CI log (no carriage returns there), a line only when another tenth of the
    hosts is done — every host when there are ten or fewer."""

    def __init__(self, stream):
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.said: dict = {}

    def __call__(self, run: str, done: int, total: int) -> None:
        # the job reports every second whether or not a host finished: say changes only
        mark = done if self.tty else (done * 10 // total if total else 10)
        if self.said.get(run) == mark:
            return
        self.said[run] = mark
        line = safe(f"{run}: {done}/{total} hosts")      # safe() escapes control characters
        if self.tty:
            print("\r" + line, end="\n" if done == total else "", file=self.stream, flush=True)
        else:
            print(line, file=self.stream, flush=True)


def cmd_pod(args) -> int:
    """``diagnose LOGDIR --scheduler …``: every host a Dask task, rows and diagnoses into
    the result store; prints each run's pod summary."""
    from .pod import ClusterUnreachable, diagnose_pod
    from .render.pod import text_table
    _exists(args.path)
    opt = _options(args)
    sched = args.scheduler or os.environ.get("TB_PERFDIAG_DASK_SCHEDULER") or "local"
    try:
        out = diagnose_pod(args.path, opt, sched, args.results, PodProgress(sys.stderr),
                           connect_timeout=args.connect_timeout,
                           max_file_mb=max_file_bytes() / 1e6)
    except ClusterUnreachable as e:       # one line, no table of identical error rows
        raise InputError(str(e)) from None
    if not out:
        raise InputError(f"no profiles found under {args.path}")
    if args.json:
        _dump(out, args)
    else:
        top = DEFAULT_TOP if args.top is None else args.top
        for run, summary in out.items():
            print(safe(f"== {run}"))
            print(text_table(summary, top))
    return INPUT if any(s["failed"] for s in out.values()) else OK


def _file_error(name: str, err: str) -> None:
    """A file that could not be read: one line on stderr naming it once (its path, which
    holds the report's label), while the other files' reports go on."""
    print(safe(f"tb-perfdiag: error: {name}: {err}"), file=sys.stderr)


def _multi_host_runs(path: str) -> tuple:
    """({run: [(host, label, file)]}, every file of those runs) of the runs under
    ``path`` with several hosts or ranks, each host's newest span (as the tab and the pod
    summary open them); ({}, set()) for a file."""
    _exists(path)
    if not is_folder(path):
        return {}, set()
    runs = scan_logdir(path)          # what it skips is said once, by _profiles
    many = {}
    for name, run in runs.items():
        hosts = run.hosts()
        if len(hosts) > 1:
            newest = [latest([s for s in run.sources if s.host == h]) for h in hosts]
            many[name] = [(s.host, f"{name} · {s.host}", s.path) for s in newest]
    return many, {s.path for name in many for s in runs[name].sources}


def _run_summary(members: list, diags: dict) -> dict:
    """The pod summary of one run (stragglers, peer wait, the hosts table) from its
    hosts' diagnoses {file: Diagnosis or why not}, analysed in this process: the rows
    ``diagnose --scheduler`` has its workers make."""
    from .render.pod import error_row, pod_summary, summary_row
    rows = []
    for host, _, file in members:
        d = diags.get(file)
        rows.append(summary_row(host, "", d) if isinstance(d, Diagnosis) else
                    error_row(host, "", 422, d or "not analysed"))
    return pod_summary(rows)


def cmd_diagnose(args) -> int:
    if args.scheduler or args.results:
        return cmd_pod(args)
    opt = _options(args)
    results, rc = [], OK
    # a folder of ranks or hosts leads with the run's summary; each file's report (every
    # span of it) with --per-file, --step or --device, and in the JSON
    detailed = args.json or args.per_file or args.step is not None or args.device is not None
    many, in_many = _multi_host_runs(args.path)
    runs, summarised = (many, in_many) if not detailed else ({}, set())
    latest = {file for xs in runs.values() for _, _, file in xs}
    analysed = []                    # the file of each of ``results``
    for label, path in _profiles(args.path):
        if path in summarised and path not in latest:
            continue                 # an older span of a summarised host: not shown
        analysed.append(path)
        try:
            results.append((label, _diagnose(path, opt, args.capture or None), None))
        except FileInputError as e:
            results.append((label, None, {"error": e.reason, "file": path}))
            _file_error(path, e.reason)
            rc = INPUT
    if args.step is not None:
        # a step no capture has is a usage error (naming the steps there are), never a
        # whole-trace report without gaps
        diags = [(label, d) for label, d, _ in results if d is not None]
        why = [(label, unknown_step(d.steps.ids, args.step)) for label, d in diags]
        if diags and all(w for _, w in why):
            raise UsageError(why[0][1] if len(why) == 1 else "; ".join(
                f"{label}: {w}" for label, w in why[:6]))
    if args.device is not None:
        diags = [(label, d) for label, d, _ in results if d is not None]
        why = [(label, unknown_device(d, args.device)) for label, d in diags]
        if diags and any(w for _, w in why):
            raise UsageError("; ".join(f"{label}: {w}" for label, w in why if w)[:2000])
    # each rank's waterfall with its peer wait from the run's other files (the figures of
    # the run summary, /collectives and the page): beside each file's own report
    run_eff = _run_efficiency(many, {p: d for (_, d, _), p in zip(results, analysed)}) \
        if detailed and many else {}
    if args.json:
        docs = [(label, err if diag is None else _json_doc(diag, args))
                for label, diag, err in results]
        for (_, doc), path in zip(docs, analysed):
            if run_eff.get(path) is not None:
                doc["run_efficiency"] = run_eff[path]
        _dump(docs[0][1] if len(docs) == 1 else dict(docs), args)
        return rc
    top = DEFAULT_TOP if args.top is None else args.top
    if runs:
        from .render.pod import text_table
        by_file = {path: diag if diag is not None else err["error"]
                   for (_, diag, err), path in zip(results, analysed)}
    for run, members in runs.items():
        print(safe(f"== {run}: {len(members)} hosts or ranks, the run's summary (each "
                   f"one's report: --per-file)"))
        print(text_table(_run_summary(members, by_file), top))
    for (label, diag, _), path in zip(results, analysed):
        if diag is not None and path not in summarised:   # a failed file was said on stderr
            print(text.report(label, diag, top, args.step, all_steps=args.steps == "all",
                              run_efficiency=run_eff.get(path)))
    return rc


def _run_efficiency(runs: dict, diags: dict) -> dict:
    """{file: ``/collectives``' ``efficiency`` of it} for the newest file of each host of
    the runs ``runs`` (``_multi_host_runs``) among the diagnosed ``diags`` {file: Diagnosis
    or None}: its waterfalls with the peer wait of the run's collective join."""
    from .analysis.run.view import run_view
    from .render.efficiency import run_json
    from .render.pod import summary_row
    out = {}
    for members in runs.values():
        have = [(host, file, diags.get(file)) for host, _, file in members]
        have = [(h, f, d) for h, f, d in have if isinstance(d, Diagnosis)]
        view = run_view([summary_row(h, "", d) for h, _, d in have])
        for h, f, d in have:
            out[f] = run_json(d, view.waterfall(h, d)) if view.join is not None else None
    return out


def _peer_waits(diags: dict) -> dict:
    """{(run, host): (peer wait per step and device or None, why None, whom it waited for
    most, the step waterfalls with that peer wait or None)} of diagnosed hosts {(run, host):
    diagnosis}: each run's collectives joined across its hosts (a file alone: across its
    own devices), as the pod summary joins them."""
    from .analysis.run.view import run_view
    from .render.collectives import ALONE_SHORT
    from .render.pod import summary_row
    by_run: dict = {}
    for (run, host), diag in diags.items():
        by_run.setdefault(run, []).append((host, diag))
    out = {}
    for run, members in by_run.items():
        view = run_view([summary_row(host or "", "", diag) for host, diag in members
                         if diag is not None])
        for host, diag in members:
            cells = view.peer_cells(host or "", diag)
            who = view.waited_for(host or "")
            rw = view.waterfall(host or "", diag)
            out[(run, host)] = (cells, "" if cells is not None else ALONE_SHORT, who,
                                rw.step_waterfall if rw is not None else None)
    return out


def _run_diagnoses(path: str, run, opt: Options, have: dict) -> dict:
    """{(run, host): diagnosis or None} of every host of ``run`` under ``path`` (its
    latest spans; ``have``: those already diagnosed); a host that cannot be read is None."""
    out = dict(have)
    if run is None:
        return out
    for r, h, _, p in _latest_sources(path):
        if r == run and (r, h) not in out:
            try:
                out[(r, h)] = _diagnose(p, opt)
            except InputError:
                out[(r, h)] = None
    return out


def _compared_side(path: str, host, what: str, opt: Options) -> tuple:
    """(label, diagnosis, (peer wait cells or None, step waterfalls with that peer wait or
    None)) of one side of ``compare``."""
    got = _latest_sources(path, host)
    if len(got) > 1:
        raise UsageError(f"{what} {path} holds {len(got)} profiles "
                         f"({', '.join(x[2] for x in got[:6])}): pass one file, or "
                         f"a host with --host")
    run, h, label, file = got[0]
    diag = _diagnose(file, opt)
    diags = _run_diagnoses(path, run, opt, {(run, h): diag}) if diag.collectives is not None \
        and len(diag.collectives) else {(run, h): diag}
    got = _peer_waits(diags)[(run, h)]
    return label, diag, (got[0], got[3])


def cmd_compare(args) -> int:
    opt = _options(args)
    la, da, peer_a = _compared_side(args.before, args.host, "BEFORE", opt)
    lb, db, peer_b = _compared_side(args.after, args.host, "AFTER", opt)
    cmp = compare_diagnoses(da, db, (la, lb), (peer_a[0], peer_b[0]), (peer_a[1], peer_b[1]))
    top = DEFAULT_TOP if args.top is None else args.top
    if args.json:
        _dump(compare_render.comparison_json(cmp, top if args.top is not None else
                                             compare_render.DEFAULT_TOP,
                                             with_steps=args.steps), args)
    else:
        print(safe_text(compare_render.report(cmp, top)))
    return OK


def cmd_check(args) -> int:
    budgets = Budgets(args.min_duty, dict(args.max_idle_cause or []), args.max_regression,
                      args.max_peer_wait, args.min_mfu)
    if args.trend:
        return _check_trend(args)
    if (args.baseline is None) != (args.max_regression is None):
        raise UsageError("--baseline and --max-regression go together")
    if budgets.empty():
        raise UsageError("nothing to check: give --min-duty, --max-idle-cause, "
                         "--max-peer-wait, --min-mfu or --baseline with --max-regression")
    opt = _options(args)
    t0 = time.perf_counter()
    checked = []
    try:
        targets = _latest_sources(args.path, args.host)
        base = _latest_per_host(args.baseline, None) if args.baseline else []
    except InputError as e:          # still reported in every output, JUnit included
        targets, base = [], []
        checked.append((args.path, args.path, str(e)))
    peers, diags = {}, {}
    if budgets.max_peer_wait is not None and targets:
        # peer wait needs every host of a run, checked or not (--host checks one)
        for run, host, _, path in targets:
            try:
                diags[(run, host)] = _diagnose(path, opt)
            except InputError:
                diags[(run, host)] = None
        for run in {t[0] for t in targets}:
            diags = _run_diagnoses(args.path, run, opt, diags)
        peers = _peer_waits(diags)
    for run, host, label, path in targets:
        cmp = None
        if base:
            bh = [b for b in base if b[0] == host] or (base if len(base) == 1 else [])
            if not bh:
                raise UsageError(f"the baseline {args.baseline} holds several profiles and "
                                 f"none of host {host!r}: pass one file")
        try:
            diag = diags.get((run, host)) or _diagnose(path, opt)
            if base:
                cmp = compare_diagnoses(_diagnose(bh[0][2], opt), diag, (bh[0][1], label))
            cells, why, who, _ = peers.get((run, host), (None, "", None, None))
            checked.append((label, path, check_budgets(diag, budgets, cmp, cells, why, who)))
        except InputError as e:      # under its label: the file's reason alone
            checked.append((label, path, getattr(e, "reason", None) or str(e)))
    elapsed = time.perf_counter() - t0
    if args.junit:
        with open(args.junit, "wb") as f:
            f.write(check_render.junit(checked, elapsed))
    if args.json:
        _dump(check_render.as_json(checked), args)
    else:
        print(safe_text(check_render.text(checked)))
    if args.github:
        gh = check_render.github(checked)
        if gh:
            print(safe_text(gh))
    # the report keeps every unreadable profile in its place (CI reads it); the error is
    # also said where every other subcommand says its errors
    for label, path, res in checked:
        if isinstance(res, str):
            print(safe_text(f"tb-perfdiag: error: {res}" if label == path else
                            f"tb-perfdiag: error: {label}: {res}"), file=sys.stderr)
    if any(isinstance(res, str) for _, _, res in checked):
        return INPUT
    return BREACH if any(not r.ok for _, _, res in checked for r in res) else OK


# ---- a run over time ----

def _trend_service(path: str, results: str | None):
    """A ``DiagnosisService`` over the folder ``path`` whose diagnoses go through the result
    store (``results``, else the default one): each capture is analysed once, by any
    process sharing the store."""
    from .cache import DiagnosisCache
    from .discovery import Catalog
    from .service import DiagnosisService
    _exists(path)
    if not is_folder(path):
        raise UsageError(f"{path} is not a folder: RUN is a run's folder (its PyTorch traces, "
                         f"or the TensorBoard run holding plugins/profile/<session>/)")
    return DiagnosisService(Catalog(path), DiagnosisCache(version=__version__,
                                                          disk_dir=results or ""))


def _trend_name(svc, path: str, run: str | None) -> str:
    from .run_captures import trend_runs
    names = trend_runs(svc.catalog.runs())
    if run is not None:
        return run
    if not names:
        _profiles(path)                  # says what was found instead
        raise InputError(f"no profiles under {path}")
    if len(names) > 1:
        raise UsageError(f"{path} holds {len(names)} runs ({', '.join(names[:8])}): name one "
                         f"with --run")
    return names[0]


def _trend(args):
    from .errors import ApiError
    svc = _trend_service(args.path, getattr(args, "results", None))
    name = _trend_name(svc, args.path, getattr(args, "run", None))
    try:
        t = svc.trend(name, _options(args), getattr(args, "baseline", None))
    except ApiError as e:
        raise UsageError(str(e)) from None
    svc.cache.flush()            # the results stored before the command ends
    if t.run == ".":
        t.run = os.path.basename(os.path.abspath(args.path.rstrip("/")))
    return svc, t


def cmd_trend(args) -> int:
    from .render import trend as trend_render
    _, t = _trend(args)
    if args.json:
        _dump(trend_render.trend_json(t), args)
    else:
        print(safe_text(trend_render.text(t)))
    return OK


def cmd_scalars(args) -> int:
    """Each trend run under LOGDIR as scalars in its sibling run ``<run>/perfdiag`` (or
    ``--out``/<run>/perfdiag); with ``--watch``, again every ``--interval`` seconds."""
    from . import scalars
    from .render.scalars import points
    from .run_captures import run_folder, trend_runs
    svc = _trend_service(args.logdir, args.results)
    rounds = 0
    while True:
        runs = svc.catalog.runs(refresh=rounds > 0)
        for name in trend_runs(runs):
            t = svc.trend(name, _options(args))
            svc.cache.flush()
            if args.out:
                folder = os.path.join(args.out, "" if name == "." else name, scalars.FOLDER)
            else:
                base = run_folder(runs, name)
                if base is None:
                    raise UsageError(f"{args.logdir} is not local: give --out DIR")
                folder = os.path.join(base, scalars.FOLDER)
            pts = points(t)
            wrote = scalars.write(folder, pts)
            n = sum(c.ok for c in t.captures)
            print(safe(f"{name}: {n} trusted of {len(t.captures)} captures, {len(pts)} points "
                       f"{'written to' if wrote else 'unchanged in'} {folder}"), flush=True)
        rounds += 1
        if not args.watch or (args.rounds and rounds >= args.rounds):
            return OK
        time.sleep(args.interval)


def _check_trend(args) -> int:
    """``check RUN --trend --max-regression P%``: the latest trusted capture against the
    run's median."""
    from .analysis.run.trend import regression_check
    if args.max_regression is None or args.baseline is not None:
        raise UsageError("--trend goes with --max-regression (and no --baseline): the "
                         "latest trusted capture is checked against the run's median")
    t0 = time.perf_counter()
    _, t = _trend(args)
    checked = [(f"{t.run} (trend of {len(t.captures)} captures)", args.path,
                [regression_check(t, args.max_regression)])]
    if args.junit:
        with open(args.junit, "wb") as f:
            f.write(check_render.junit(checked, time.perf_counter() - t0))
    if args.json:
        _dump(check_render.as_json(checked), args)
    else:
        print(safe_text(check_render.text(checked)))
    if args.github and (gh := check_render.github(checked)):
        print(safe_text(gh))
    return BREACH if any(not r.ok for _, _, res in checked for r in res) else OK


def cmd_mcp(args) -> int:
    """``mcp LOGDIR``: the Model Context Protocol server on stdin/stdout until the client
    closes it."""
    _exists(args.logdir)
    if not is_folder(args.logdir):
        raise InputError(f"{args.logdir} is not a folder: LOGDIR is the folder TensorBoard "
                         f"is given (--logdir)")
    from . import mcp_server
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError:
        raise UsageError(mcp_server.INSTALL_HINT) from None
    mcp_server.serve(args.logdir)
    return OK


# ---- the parser ----

def _json_layout(p) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--compact", dest="pretty", action="store_false", default=None,
                   help="JSON on one line (the default into a pipe or a file)")
    g.add_argument("--pretty", dest="pretty", action="store_true",
                   help="indented JSON (the default on a terminal)")


def _analysis_options(p) -> None:
    p.add_argument("--threshold-us", type=_threshold, default=_T.default,
                   help=f"smallest listed gap, µs (default {_T.default:g})")
    p.add_argument("--kernels-only", action="store_true", help="busy = kernels only")
    p.add_argument("--peak-tflops", type=_peak, default=None, metavar="TFLOPS",
                   help="the peak MFU is taken against, TFLOP/s (default: the device's, from "
                        "the trace or its datasheet)")


def parser() -> argparse.ArgumentParser:
    p = _parser(prog="tb-perfdiag", description=__doc__.split("\n")[0],
                epilog=__doc__.split("\n", 1)[1])
    p.add_argument("--version", action="version",
                   version=f"{__version__} (reader: {reader_kind()})")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    pi = sub.add_parser("info", help="tracks, event counts, time span and steps of a trace")
    pi.add_argument("path")
    pi.set_defaults(fn=cmd_info)

    pd = sub.add_parser("diagnose", help="duty cycle, idle gaps with causes, findings")
    pd.add_argument("path")
    pd.add_argument("--json", action="store_true", help="print the JSON the plugin serves")
    pd.add_argument("--capture", action="append", metavar="PATH", default=[],
                    help="a trace recorded while the run's CUDA/HIP graphs were captured "
                         "(repeatable; default: capture_traces/ beside the file): the "
                         "replayed kernels take the captured ops' shapes and FLOPs")
    _json_layout(pd)
    pd.add_argument("--step", type=_number("step", -2**63, 2**63 - 1, True), default=None,
                    help="only this step's gaps")
    pd.add_argument("--device", type=_number("device", 0, 2**31 - 1, True), default=None,
                    help="--json: only this device's gaps (its id in devices), as the "
                         "route's device=")
    pd.add_argument("--per-file", action="store_true",
                    help="a folder of several hosts or ranks: each file's report instead of "
                         "the run's summary (stragglers, peer wait, the hosts table) it "
                         "leads with; --step and --device print them too")
    pd.add_argument("--steps", choices=("summary", "all"), default="summary",
                    help="text: a long step list as its median, slowest steps and outliers "
                         "(summary, the default), or every step (all)")
    pd.add_argument("--top", type=_number("top", 0, 10**6, True), default=None,
                    help=f"findings and gaps to print (default {DEFAULT_TOP}; with --json: "
                         "findings, and gaps unless --gaps/--all-gaps)")
    g = pd.add_mutually_exclusive_group()
    g.add_argument("--gaps", type=_number("gaps", 0, MAX_GAPS_PAGE, True), default=None,
                   help=f"--json: gaps in the page (default {DEFAULT_GAPS_PAGE}, as the route)")
    g.add_argument("--all-gaps", action="store_true", help="--json: every gap")
    pd.add_argument("--full", action="store_true",
                    help="--json: every host op of each gap and every step row (the route, "
                         "as the page's first answer, lists a gap's 5 largest host ops and, "
                         "above 500 steps, step bins and a few rows)")
    _analysis_options(pd)
    pd.add_argument("--scheduler", metavar="ADDRESS",
                    help="analyse every host of every run as a Dask task on this cluster "
                         "(tcp://host:8786, or 'local': one started here) and fill the result "
                         "store; prints each run's pod summary")
    pd.add_argument("--connect-timeout", type=_number("connect-timeout", 0.1, 3600),
                    default=10.0, metavar="SECONDS",
                    help="with --scheduler ADDRESS: give up on a scheduler that does not "
                         "answer within this (default 10)")
    pd.add_argument("--results", metavar="FOLDER_OR_URL",
                    help="the result store to fill (default $TB_PERFDIAG_RESULTS, else the "
                         "user's cache folder); a TensorBoard on the same store answers from it")
    pd.set_defaults(fn=cmd_diagnose)

    pc = sub.add_parser("compare", help="what changed between two runs (before → after)")
    pc.add_argument("before", help="a trace file, or a folder with one profile")
    pc.add_argument("after")
    pc.add_argument("--host", help="the host to compare when a folder holds several")
    pc.add_argument("--json", action="store_true", help="print the JSON the compare route serves")
    _json_layout(pc)
    pc.add_argument("--no-steps", dest="steps", action="store_false",
                    help="--json: leave out each run's per-step chart data")
    pc.add_argument("--top", type=_number("top", 0, 10**6, True), default=None,
                    help="changes, findings, ops and annotations to list")
    _analysis_options(pc)
    pc.set_defaults(fn=cmd_compare)

    pk = sub.add_parser(
        "check", help="fail a CI job when a run breaks its idle-time budgets",
        description="Check every host of PATH (its newest span) against budgets, per device "
                    "and typical step (compiling and outlier steps left out). Exit 0 when "
                    "every budget is met, 1 on a breach, 2 on a usage error, 3 when a path "
                    "or file cannot be read.")
    pk.add_argument("path")
    pk.add_argument("--min-duty", type=_fraction, metavar="F",
                    help="least duty cycle per typical step, on every device (0.8 or 80%%)")
    pk.add_argument("--max-idle-cause", type=_idle_budget, action="append", metavar="CAUSE=P%",
                    help="most idle of CAUSE per typical step, as a share of the step "
                         f"(repeatable; causes: {', '.join(C.ALL)})")
    pk.add_argument("--max-peer-wait", type=_fraction, metavar="P%",
                    help="most busy time spent waiting for peers at collectives per typical "
                         "step, as a share of the step, on every device (the run's hosts "
                         "matched as the pod summary does; 10%%)")
    pk.add_argument("--min-mfu", type=_fraction, metavar="P%",
                    help="least MFU per typical step (model FLOPs ÷ window × peak), on every "
                         "device (40%%); a device with no FLOP figures or peak fails")
    pk.add_argument("--baseline", metavar="OLD", help="a run to compare with")
    pk.add_argument("--max-regression", type=_growth, metavar="P%",
                    help="with --baseline: most the typical step may slow down (5%%)")
    pk.add_argument("--trend", action="store_true",
                    help="with --max-regression: fail when the latest trusted capture of the "
                         "run PATH is slower than the median of its trusted captures by more "
                         "than that (tb-perfdiag trend PATH shows them)")
    pk.add_argument("--run", help="--trend: the run, when PATH holds several")
    pk.add_argument("--results", metavar="FOLDER_OR_URL",
                    help="--trend: the result store (default $TB_PERFDIAG_RESULTS, else the "
                         "user's cache folder)")
    pk.add_argument("--host", help="check only this host")
    pk.add_argument("--junit", metavar="FILE", help="also write JUnit XML here")
    pk.add_argument("--github", action="store_true",
                    help="also print GitHub Actions ::error annotations for breaches")
    pk.add_argument("--json", action="store_true", help="print the results as JSON")
    _json_layout(pk)
    _analysis_options(pk)
    pk.set_defaults(fn=cmd_check)

    pt = sub.add_parser(
        "trend", help="a run over time: every capture's step time, duty cycle, MFU, idle by "
                      "cause and trust, and what changed between captures",
        description="RUN: a run's folder (PyTorch traces, one per schedule(..., repeat=N) "
                    "cycle; or a TensorBoard run holding plugins/profile/<session>/). Each "
                    "capture is analysed once through the result store.")
    pt.add_argument("path", metavar="RUN")
    pt.add_argument("--run", help="the run, when RUN holds several")
    pt.add_argument("--baseline", metavar="SESSION",
                    help="compare every capture with this one (default: each with the previous)")
    pt.add_argument("--json", action="store_true", help="print the JSON the trend route serves")
    _json_layout(pt)
    pt.add_argument("--results", metavar="FOLDER_OR_URL",
                    help="the result store (default $TB_PERFDIAG_RESULTS, else the user's "
                         "cache folder)")
    _analysis_options(pt)
    pt.set_defaults(fn=cmd_trend)

    ps = sub.add_parser(
        "scalars", help="write each run's trend as TensorBoard scalars (perfdiag/step_time_ms, "
                        "duty_cycle, mfu, idle/<cause>) into a sibling run <run>/perfdiag",
        description="One point per trusted capture at its first global step (else its index) "
                    "and its start time, with TensorBoard's own event-file writer. Writing "
                    "again gives the same points (the run's file is rewritten whole, or left "
                    "as it is), never duplicates.")
    ps.add_argument("logdir", metavar="LOGDIR")
    ps.add_argument("--out", metavar="DIR", help="write <DIR>/<run>/perfdiag instead")
    ps.add_argument("--watch", action="store_true",
                    help="keep going: add captures as they land (every --interval seconds)")
    ps.add_argument("--interval", type=_number("interval", 0.1, 86400), default=30.0,
                    metavar="SECONDS", help="--watch: seconds between rounds (default 30)")
    ps.add_argument("--rounds", type=_number("rounds", 1, 10**9, True), default=None,
                    help=argparse.SUPPRESS)
    ps.add_argument("--results", metavar="FOLDER_OR_URL",
                    help="the result store (default $TB_PERFDIAG_RESULTS, else the user's "
                         "cache folder)")
    _analysis_options(ps)
    ps.set_defaults(fn=cmd_scalars)

    from .mcp_server import skill_text
    pm = sub.add_parser(
        "mcp", help="serve the diagnosis to an assistant: a Model Context Protocol server on "
                    "stdio, read-only and confined to LOGDIR (pip install 'tb-perfdiag[mcp]')",
        description=skill_text(), formatter_class=argparse.RawDescriptionHelpFormatter)
    pm.add_argument("logdir", help="the folder (or URL) TensorBoard is given with --logdir")
    pm.set_defaults(fn=cmd_mcp)
    return p


def _parser(**kw) -> _Parser:
    return _Parser(formatter_class=argparse.RawDescriptionHelpFormatter, **kw)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.fn(args)
    except BrokenPipeError:
        # the reader went away (… | head): nothing more to say, and no traceback
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except OSError:
            pass
        return PIPE
    except UsageError as e:
        print(safe(f"tb-perfdiag: error: {e}"), file=sys.stderr)
        return USAGE
    except InputError as e:
        print(safe(f"tb-perfdiag: error: {e}"), file=sys.stderr)
        return INPUT
    except StorageError as e:       # an s3:// or gs:// path whose fsspec backend is missing
        print(safe(f"tb-perfdiag: error: {e}"), file=sys.stderr)
        return INPUT
    except MemoryError:
        print(f"tb-perfdiag: error: {OUT_OF_MEMORY}", file=sys.stderr)
        return INPUT
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
