"""User-level calls counted once: graph compilations and host↔device transfers.

A compilation is an outermost compile event with a duration on the user's threads
(``XLAGraphExecutor::Compile``, ``backend_compile_and_load``/``backend_compile``): the
HLO passes nested in it and the pieces a compiler thread pool runs for it are part of
it, zero-length pass events are none, and Python-tracer frames (``$pxla.py compile``,
``_compile_bytecode`` of an import) are Python, not XLA.  Its function is the program
the same call goes on to run (the module of the next device run launched from its
thread inside the same outermost call), else the jitted function around it.  It is a
recompilation only when that function was compiled, or ran, before in the trace.

A transfer is an outermost transfer call on the user's threads (``.item()``'s
``TransferFromDevice``, JAX's ``np.asarray(jax.Array)``, ``BufferFromHostBuffer``):
the runtime threads that carry the same copy (the TPU runtime shows one read on three
threads) are not user calls.  An asynchronous prefetch (``copy_to_host_async``) is no
blocking read.
"""
from __future__ import annotations

import re

import numpy as np

from ...trace.build import unique_first
from ...trace.model import EventKind as K, Trace, isin_few
from ..attribution.links import host_side
from ..result import CompilationTable, Direction, TransferTable
from .windows import StepTable, step_of_time

_PY_FRAME = "$"                      # JAX's Python tracer names its frames "$file.py:line f"
_FINGERPRINT = re.compile(r"\(\d+\)$")
_DISPATCH = re.compile(r"^(Pjit|Pmap)Function\((.+)\)$")
_ASYNC_COPY = re.compile(r"copy_to_host_async", re.I)
_MAX_DEPTH = 64
_BLOCK = 1 << 20          # events a pass over all of them reads at a time


def _where_named(trace: Trace, ev: np.ndarray, pred) -> np.ndarray:
    """Mask of the events of ``ev`` whose name satisfies ``pred`` (one test per
    distinct name)."""
    u, inv = np.unique(trace.name[ev], return_inverse=True)
    hit = np.array([bool(pred(trace.strings[x])) for x in u.tolist()], bool)
    return hit[inv.reshape(-1)] if ev.size else np.zeros(0, bool)


def _outermost(trace: Trace, ev: np.ndarray) -> np.ndarray:
    """The events of ``ev`` with no ancestor in ``ev``."""
    mark = np.zeros(trace.n_events, bool)
    mark[ev] = True
    cur = trace.parent[ev].astype(np.int64)
    inner = np.zeros(ev.shape[0], bool)
    for _ in range(_MAX_DEPTH):
        live = cur >= 0
        if not live.any():
            break
        c = np.maximum(cur, 0)
        inner |= live & mark[c]
        cur = np.where(live & ~inner, trace.parent[c], -1)
    return ev[~inner]


def _candidates(trace: Trace, kinds, users: list, extra_names=()) -> np.ndarray:
    """Host events of ``kinds`` (or named ``extra_names``) with a duration, no Python-
    tracer frames, outermost; those on the user's threads when any are there."""
    def pred(lo, hi):
        sel = isin_few(trace.kind[lo:hi], kinds)
        if len(extra_names):
            sel |= np.isin(trace.name[lo:hi], extra_names)
        return sel & (trace.dur[lo:hi] > 0)
    ev = trace.host_events_where(pred)
    if ev.size:
        ev = ev[~_where_named(trace, ev, lambda n: n.startswith(_PY_FRAME))]
    ev = _outermost(trace, ev)
    on_user = np.isin(trace.track[ev], users) if users else np.zeros(ev.shape[0], bool)
    return ev[on_user] if on_user.any() else ev


def _top_ancestor(trace: Trace, ev: np.ndarray) -> np.ndarray:
    cur = ev.astype(np.int64).copy()
    for _ in range(_MAX_DEPTH):
        p = trace.parent[np.maximum(cur, 0)]
        up = (cur >= 0) & (p >= 0)
        if not up.any():
            break
        cur = np.where(up, p, cur)
    return cur


def first_op_of_origins(trace: Trace, root: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ops, origins): each distinct origin (``root``, ≥ 0) of device work and its first
    device op, by origin.  A block of events at a time (the device ops' indices, origins
    and an inverse over all 20 M of them at once were 0.8 GB at 40 M events, at the
    analysis' peak); a mark per event says which origins an earlier block had."""
    host = host_side(trace)
    seen = np.zeros(trace.n_events, bool)
    got_ops, got_launch = [], []
    for lo in range(0, trace.n_events, _BLOCK):
        hi = min(lo + _BLOCK, trace.n_events)
        d = lo + np.flatnonzero(trace.is_device_activity(lo=lo, hi=hi) & ~host[lo:hi])
        r = root[d].astype(np.int64)
        d, r = d[r >= 0], r[r >= 0]
        if not d.size:
            continue
        u, first = unique_first(r)
        new = ~seen[u]
        seen[u[new]] = True
        got_ops.append(d[first[new]])
        got_launch.append(u[new])
    if not got_ops:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    launches = np.concatenate(got_launch)
    o = np.argsort(launches, kind="stable")
    return np.concatenate(got_ops)[o], launches[o]


def _run_launches(trace: Trace, root: np.ndarray) -> tuple[np.ndarray, np.ndarray, list]:
    """(launching host events, the program each ran as an index into the returned names):
    one per distinct user-thread origin of device work whose program is known (an
    ``hlo_module`` stat, else the ``XLA Modules`` event the op ran in)."""
    ops, launches = first_op_of_origins(trace, root)
    if not ops.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), []
    sid = np.full(ops.shape[0], -1, np.int64)          # string id of the program name
    mod = trace.stats.get("hlo_module")
    if mod is not None and mod.is_string and mod.events.size:
        k = np.minimum(np.searchsorted(mod.events, ops), mod.events.shape[0] - 1)
        hit = mod.events[k] == ops
        sid[hit] = mod.take(k[hit])
    for t in np.flatnonzero(np.asarray(trace.track_name, object) == "XLA Modules").tolist():
        lo, hi = trace.track_slices([t])[0]
        m = np.flatnonzero((sid < 0) & (trace.track_device[trace.track[ops]] ==
                                        trace.track_device[t]))
        if hi == lo or m.size == 0:
            continue
        k = np.searchsorted(trace.ts[lo:hi], trace.ts[ops[m]], side="right") - 1 + lo
        inside = (k >= lo) & (trace.ts[ops[m]] < trace.end_of(np.maximum(k, lo)))
        sid[m[inside]] = trace.name[k[inside]]
    keep = sid >= 0
    u, inv = np.unique(sid[keep], return_inverse=True)
    # one program name per distinct string (module events carry a fingerprint suffix)
    names = [_FINGERPRINT.sub("", trace.strings[x]) for x in u.tolist()]
    dedup = {n: i for i, n in reversed(list(enumerate(names)))}
    remap = np.array([dedup[n] for n in names], np.int64)
    return launches[keep], remap[inv.reshape(-1)] if u.size else np.zeros(0, np.int64), names


def _enclosing_function(trace: Trace, e: int) -> str:
    """The jitted function a compile runs in (``PjitFunction(f)`` → ``jit_f``)."""
    for a in reversed(trace.chain(int(e))[:-1]):
        m = _DISPATCH.match(trace.strings[int(trace.name[a])])
        if m:
            return ("jit_" if m.group(1) == "Pjit" else "pmap_") + m.group(2)
    return ""


def compilations(trace: Trace, steps: StepTable, root: np.ndarray,
                 users: list) -> CompilationTable:
    ev = _candidates(trace, (K.COMPILE,), users)
    if ev.size == 0:
        return CompilationTable.empty()
    ev = ev[np.argsort(trace.ts[ev], kind="stable")]
    launches, prog, names = _run_launches(trace, root)
    l_top = _top_ancestor(trace, launches) if launches.size else launches
    c_top = _top_ancestor(trace, ev)
    end = trace.end_of(ev)
    l_track, l_ts = trace.track[launches], trace.ts[launches]
    functions = []
    for j, e in enumerate(ev.tolist()):
        # the program this call compiled is the one it runs next
        nxt = np.flatnonzero((l_track == trace.track[e]) & (l_ts >= end[j]) &
                             (l_top == c_top[j]))
        if nxt.size:
            functions.append(names[int(prog[nxt[np.argmin(l_ts[nxt])]])])
            continue
        name = _enclosing_function(trace, e)
        if not name:
            v = trace.stat_str("graph_hash", e)
            name = f"graph {v}" if v else ""
        functions.append(name)
    # compiled before: an earlier compile in the trace, or a run of it launched before
    # (a capture that starts after warm-up steps holds their runs, not their compiles)
    first_run = np.full(len(names), np.iinfo(np.int64).max, np.int64)
    if prog.size:
        np.minimum.at(first_run, prog, l_ts)
    first_run_of = {n: int(first_run[i]) for i, n in enumerate(names)}
    seen: set = set()
    recompile = np.zeros(ev.shape[0], bool)
    for j, f in enumerate(functions):
        ran = first_run_of.get(f, np.iinfo(np.int64).max) < trace.ts[ev[j]]
        recompile[j] = bool(f) and (f in seen or ran)
        seen.add(f)
    return CompilationTable(ev.astype(np.int64),
                            step_of_time(steps, trace.ts[ev]).astype(np.int32),
                            trace.ts[ev].astype(np.int64), trace.dur[ev].astype(np.int64),
                            functions, recompile)


def transfers(trace: Trace, steps: StepTable, users: list) -> TransferTable:
    ev = _candidates(trace, (K.TRANSFER_D2H, K.TRANSFER_H2D), users)
    if ev.size == 0:
        return TransferTable.empty()
    # a read started by an asynchronous prefetch does not block the caller
    cur = trace.parent[ev].astype(np.int64)
    inside = np.zeros(ev.shape[0], bool)
    for _ in range(_MAX_DEPTH):
        live = np.flatnonzero(cur >= 0)
        if live.size == 0:
            break
        inside[live] |= _where_named(trace, cur[live], _ASYNC_COPY.search)
        cur[live] = trace.parent[cur[live]]
    ev = ev[~inside]
    ev = ev[np.argsort(trace.ts[ev], kind="stable")]
    direction = np.where(trace.kind[ev] == K.TRANSFER_D2H, Direction.D2H,
                         Direction.H2D).astype(np.int8)
    return TransferTable(ev.astype(np.int64),
                         step_of_time(steps, trace.ts[ev]).astype(np.int32),
                         trace.ts[ev].astype(np.int64), trace.dur[ev].astype(np.int64),
                         direction)
