"""``tb-perfdiag trend``, ``scalars`` and ``check --trend``: a run over time, through the
result store."""
from __future__ import annotations

import os
import time


from ._version import __version__
from .api import is_folder
from .render import check as check_render
from .render.text import safe, safe_text
from .cli_common import BREACH, OK, InputError, UsageError, _dump, _exists, _options, _profiles


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
