"""``tb-perfdiag compare`` and ``check``: two runs side by side, a run against its budgets
(each host with its run's peer wait)."""
from __future__ import annotations

import sys
import time


from .analysis import Options
from .analysis.compare.budgets import Budgets, check as check_budgets
from .analysis.compare.diff import compare as compare_diagnoses
from .render import check as check_render
from .render import compare as compare_render
from .render.text import safe_text
from .cli_common import (BREACH, DEFAULT_TOP, INPUT, OK, InputError, UsageError, _diagnose,
                         _dump, _latest_per_host, _latest_sources, _options)
from .cli_run import _check_trend


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
