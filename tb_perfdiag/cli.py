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


from ._version import __version__
from .analysis import causes as C
from .api import is_folder
from .errors import StorageError
from .params import DEFAULT_GAPS_PAGE, MAX_GAPS_PAGE, PARAMS
from .render.text import safe
from .trace.extension import reader_kind
from .cli_common import (DEFAULT_TOP, INPUT, OK, OUT_OF_MEMORY, PIPE, USAGE, InputError,
                         UsageError, _exists)
from .cli_compare import cmd_check, cmd_compare
from .cli_diagnose import PodProgress, cmd_diagnose, cmd_info  # noqa: F401 (PodProgress: tests)
from .cli_run import cmd_scalars, cmd_trend


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


def _add_info(sub) -> None:
    pi = sub.add_parser("info", help="tracks, event counts, time span and steps of a trace")
    pi.add_argument("path")
    pi.set_defaults(fn=cmd_info)


def _add_diagnose(sub) -> None:
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


def _add_compare(sub) -> None:
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


def _add_check(sub) -> None:
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


def _add_trend(sub) -> None:
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
    _run_options(pt)
    pt.set_defaults(fn=cmd_trend)


def _run_options(p) -> None:
    """A run-level command's result store and analysis options (trend, scalars)."""
    p.add_argument("--results", metavar="FOLDER_OR_URL",
                   help="the result store (default $TB_PERFDIAG_RESULTS, else the user's "
                        "cache folder)")
    _analysis_options(p)


def _add_scalars(sub) -> None:
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
    _run_options(ps)
    ps.set_defaults(fn=cmd_scalars)


def _add_mcp(sub) -> None:
    from .mcp_server import skill_text
    pm = sub.add_parser(
        "mcp", help="serve the diagnosis to an assistant: a Model Context Protocol server on "
                    "stdio, read-only and confined to LOGDIR (pip install 'tb-perfdiag[mcp]')",
        description=skill_text(), formatter_class=argparse.RawDescriptionHelpFormatter)
    pm.add_argument("logdir", help="the folder (or URL) TensorBoard is given with --logdir")
    pm.set_defaults(fn=cmd_mcp)


def parser() -> argparse.ArgumentParser:
    p = _parser(prog="tb-perfdiag", description=__doc__.split("\n")[0],
                epilog=__doc__.split("\n", 1)[1])
    p.add_argument("--version", action="version",
                   version=f"{__version__} (reader: {reader_kind()})")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    _add_info(sub)
    _add_diagnose(sub)
    _add_compare(sub)
    _add_check(sub)
    _add_trend(sub)
    _add_scalars(sub)
    _add_mcp(sub)
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