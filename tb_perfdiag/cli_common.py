"""What every ``tb-perfdiag`` command shares: exit codes, its errors, resolving a path to
its profiles, reading and analysing one file, JSON on stdout."""
from __future__ import annotations

import os
import sys


from .analysis import Options
from .api import is_folder, trace_files
from .discovery import scan_logdir, span_label
from .file_analysis import read_and_analyse
from .render.json import json_bytes
from .render.text import safe
from .storage import max_file_bytes
from .trace import TraceError, load

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
