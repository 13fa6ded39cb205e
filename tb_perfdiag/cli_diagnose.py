"""``tb-perfdiag info`` and ``diagnose`` (one file, a folder of hosts or ranks, a pod
on a Dask cluster)."""
from __future__ import annotations

import os
import sys


from .analysis.result import Diagnosis
from .analysis.steps.windows import unknown_step
from .api import is_folder
from .discovery import latest, scan_logdir
from .params import DEFAULT_GAPS_PAGE
from .render import text
from .render.json import diagnosis_json, unknown_device
from .render.text import safe
from .storage import max_file_bytes
from .trace import TraceError
from .units import duration_ps
from .trace.extension import reader_kind
from .cli_common import (DEFAULT_TOP, INPUT, OK, OUT_OF_MEMORY, FileInputError, InputError,
                         UsageError, _diagnose, _dump, _exists, _load, _options, _profiles)


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
