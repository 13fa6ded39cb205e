"""Device time per user annotation, carried over from the host to the device ops.

CUDA: kernel → its launch (correlation) → the user annotations enclosing the launch.
XLA: the ``op_name`` scope of each executed HLO op (``train_step/forward/…``), else its
``tf_op``; an HLO op's scope comes from the compiler's metadata only (the host call that
dispatched a whole program says nothing about one op's scope).  Ops with no user scope are
the *unscoped* share.  Device time is the sum of op durations (streams can overlap).

A scope is *scattered* when its ops interleave on the device with a sibling scope's ops
(same parent) within one program run of one step: the compiler or the runtime reordered
them.  A root running after another root, or a scope whose sibling runs on in the next
step, is not scattered.
"""
from __future__ import annotations

import re

import numpy as np

from ...trace.build import distinct, map_distinct, unique_inverse, unique_rows
from ...trace.model import Trace, TrackKind, search
from ..result import AnnotationTable
from .annotation_paths import (_annotation_paths, _captured_paths, _graph_kernel_paths,  # noqa: F401 - importable here
                               is_annotation, nearest_annotation)

_SUFFIX = re.compile(r"\.\d+$")
# torch_xla names the IR op inside the user's scopes (``train_step.1/forward.2/aten__add.5/
# aten__add``; backward ops carry bare ``aten__mm``): the user's scope ends before it
_FRAMEWORK_OP = re.compile(r"^(aten|xla|prim|torch|c10d|_c10d_functional|torchvision|"
                           r"quantized|fbgemm)__\w")
# JAX's transformation wrappers name the user's scope they transform: ``jvp(forward)``,
# ``transpose(jvp(forward))`` are the user's ``forward``.  ``jit(f)`` is a function
# boundary of its own, kept as a scope.
_TRANSFORM = re.compile(r"^(?:jvp|vjp|transpose|linearize|vmap|pmap|xmap|shard_map|remat|"
                        r"checkpoint|custom_jvp_call|custom_vjp_call)\((.*)\)$")
_FUNCTION = re.compile(r"^p?jit\(")
MAX_PATHS = 400
MAX_INTERLEAVED = 100       # scattered annotations whose neighbours are listed


def _scope_parts(op_name: str) -> tuple:
    """The user's scopes of an XLA op name, outermost first (its last part is the op)."""
    out = []
    for p in [p for p in op_name.split("/") if p][:-1]:
        p = _SUFFIX.sub("", p)
        if _FRAMEWORK_OP.match(p):
            break
        out.append(p)
    return tuple(out)


def user_scope(name: str) -> str:
    """The user's scope behind JAX's transformation wrappers: ``transpose(jvp(forward))``
    → ``forward``."""
    m = _TRANSFORM.match(name)
    while m:
        name = m.group(1)
        m = _TRANSFORM.match(name)
    return name


def _at(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``values[idx]`` for an int32 ``idx``: numpy gathers through an index of another
    width than intp about four times slower than a cast and an intp gather (2.4: 6.7 ms
    against 1.1 + 1.7 ms for 1 M)."""
    return values[idx.astype(np.intp, copy=False)]


def _lookup(stat, ops: np.ndarray, memo: dict | None = None) -> np.ndarray:
    """The stat's value on each op (−1 where absent), without a dense column.  ``memo``
    keeps the search per event column: the stats of HLO ops share one."""
    if stat is not None and stat.spread:        # read in place: no event index to search
        got, has = stat.lookup(ops)
        got[~has] = -1
        return got
    if stat is None or not stat.events.size:
        return np.full(ops.shape[0], -1, np.int32)
    if stat.events.shape == ops.shape and np.array_equal(stat.events, ops):
        return stat.values
    found = memo.get(id(stat.events)) if memo is not None else None
    if found is None or found[0] is not stat.events:
        k = np.minimum(search(stat.events, ops), stat.events.shape[0] - 1)
        if k.shape[0] and stat.events.shape[0] < 2**31:
            k = k.astype(np.int32)
        found = (stat.events, k, stat.events[k] == ops)
        if memo is not None:
            memo[id(stat.events)] = found
    _, k, hit = found
    # a block at a time: an intp copy of the positions of 20 M ops (160 MB) was the
    # device-op table's peak at 40 M events
    first = stat.take(k[:_BLOCK].astype(np.intp, copy=False))
    out = np.empty(k.shape[0], first.dtype)
    out[:first.shape[0]] = first
    for i in range(_BLOCK, k.shape[0], _BLOCK):
        out[i:i + _BLOCK] = stat.take(k[i:i + _BLOCK].astype(np.intp, copy=False))
    out[~hit] = -1
    return out


def op_paths(trace: Trace, ops: np.ndarray, origin: np.ndarray,
             memo: dict | None = None) -> tuple[np.ndarray, list]:
    """(path id per op (−1 none), list of paths as tuples of names)."""
    paths: list = []
    index: dict = {}
    pid = np.full(ops.shape[0], -1, np.int32)

    def intern(p):
        i = index.get(p)
        if i is None:
            i = index[p] = len(paths)
            paths.append(p)
        return i

    sid = _lookup(trace.stats.get("op_name"), ops, memo)
    if "tf_op" in trace.stats and (sid < 0).any():
        sid = np.where(sid >= 0, sid, _lookup(trace.stats["tf_op"], ops, memo))
    sid = sid.astype(np.int32, copy=False)
    if (sid >= 0).any():
        pid = map_distinct(sid, lambda u: np.array(
            [intern(_scope_parts(trace.strings[x])) if x >= 0 else -1 for x in u.tolist()],
            np.int32))
        empty = index.get(())
        if empty is not None:
            pid[pid == empty] = -1
    # CUDA kernels: the annotations enclosing the launching host op.  An HLO op's scope is
    # its metadata's alone: no metadata scope means unscoped
    need = (pid < 0) & (origin[ops] >= 0)
    hlo = trace.stats.get("hlo_op")
    if hlo is not None and need.any():
        need &= _lookup(hlo, ops, memo) < 0
    if need.any():
        ann = nearest_annotation(trace)
        a = ann[origin[ops[need]]]
        u, inv = unique_inverse(a)
        mapped = np.full(u.shape[0], -1, np.int32)
        mapped[u >= 0] = _annotation_paths(trace, ann, u[u >= 0], intern)
        got = mapped[inv.reshape(-1)]
        pid[np.flatnonzero(need)] = got
        empty = index.get(())
        if empty is not None:
            pid[pid == empty] = -1
    if trace.format == "kineto":
        _captured_paths(trace, ops, pid, paths, intern)
        _graph_kernel_paths(trace, ops, pid, paths, intern)
    return pid, paths


def _expand(flat: np.ndarray, off: np.ndarray, cnt: np.ndarray, x: np.ndarray):
    """(row, item): every element of ``x`` (a path id) paired with each of its prefixes."""
    reps = cnt[x]
    row = np.repeat(np.arange(x.shape[0]), reps)
    within = np.arange(row.shape[0]) - np.repeat(np.cumsum(reps) - reps, reps)
    return row, flat[off[x][row] + within]


def op_runs(trace: Trace, ops: np.ndarray, memo: dict | None = None):
    """A key of the program run each op belongs to (−1 unknown), None when all ops have
    the same: its ``run_id``, else the ``XLA Modules`` event it ran under on its device,
    else its ``program_id`` (XLA:CPU under torch_xla: runs of one program in one step
    are not told apart).  The host origin is no run key: XLA:CPU's flows reach the
    thunks of a run one by one."""
    run = _lookup(trace.stats.get("run_id"), ops, memo).astype(np.int64)
    need = run < 0
    modules = [t for t in np.flatnonzero(trace.track_kind == TrackKind.DEVICE).tolist()
               if trace.track_name[t] == "XLA Modules"]
    if modules and need.any():
        rows = np.flatnonzero(need)
        dev = trace.track_device[trace.track[ops[rows]]]
        for t in modules:
            lo, hi = trace.track_slices([t])[0]
            if hi <= lo:
                continue
            sel = rows[dev == trace.track_device[t]]
            k = search(trace.ts[lo:hi], trace.ts[ops[sel]], side="right") - 1
            ok = (k >= 0) & (trace.ts[ops[sel]] < trace.end_of(lo + np.maximum(k, 0)))
            run[sel[ok]] = (1 << 40) + lo + k[ok]      # apart from run ids
        need = run < 0
    if need.any():
        # over all ops with masks, not an index of those in need: with no run ids that
        # is every op (20 M: two gathers and a scatter less)
        key = _lookup(trace.stats.get("program_id"), ops, memo).astype(np.int64)
        keyed = key >= 0
        key &= (1 << 40) - 1
        key += 2 << 40
        key[~keyed] = -1
        np.copyto(run, key, where=need)
    return None if not run.size or run.min() == run.max() else run


# ops per block where a pass over all of a device's ops is cut into blocks: an int64
# column of a block stays under the 32 MB from which arrays take pages of their own
# (``trace.pages``; malloc's heap reuses smaller ones without faulting them in again)
_BLOCK = (1 << 22) - (1 << 12)


def _rising(x: np.ndarray, at: np.ndarray | None = None) -> bool:
    """``x`` (or ``x[at]``) non-decreasing, looked at a block at a time (no 20 M-element
    temporaries, and no gather of ``x[at]`` whole)."""
    n = x.shape[0] if at is None else at.shape[0]
    for i in range(0, n - 1, _BLOCK):
        j = min(i + _BLOCK, n - 1)
        v = x[i:j + 1] if at is None else x[at[i:j + 1]]
        if not (v[1:] >= v[:-1]).all():
            return False
    return True


def _by_group_then_time(group: np.ndarray, ts: np.ndarray, ops: np.ndarray | None):
    """``np.lexsort((ts[ops], group))`` (``ts`` itself without ``ops``): one stable sort of
    a key that holds both, made a block of ops at a time, where both fit 62 bits (the
    ops' starts gathered whole and lexsort's own copies were 0.5 GB at 20 M ops, the
    analysis' peak at 40 M events); else the lexsort."""
    n = group.shape[0]
    if n == 0:
        return np.zeros(0, np.intp)

    def starts(i):
        return ts[i:i + _BLOCK] if ops is None else ts[ops[i:i + _BLOCK]]
    t_lo = min(int(starts(i).min()) for i in range(0, n, _BLOCK))
    t_span = max(int(starts(i).max()) for i in range(0, n, _BLOCK)) - t_lo
    g_lo, g_span = int(group.min()), int(group.max()) - int(group.min())
    shift = t_span.bit_length()
    if g_span.bit_length() + shift > 62:
        return np.lexsort((ts[ops] if ops is not None else ts, group))
    key = np.empty(n, np.int64)
    for i in range(0, n, _BLOCK):
        k = key[i:i + _BLOCK]
        np.subtract(group[i:i + _BLOCK], g_lo, out=k, casting="unsafe")
        k <<= shift
        k += starts(i)
        k -= t_lo
    return np.argsort(key, kind="stable")


def _scattering(paths: list, prefix_index: dict, n_ann: int, pid: np.ndarray,
                groups: list, ts: np.ndarray, ops: np.ndarray | None = None):
    """Per annotation: separate runs of its ops among its siblings', how many (group)
    blocks it has ops in, and the siblings its runs border (pairs of annotation ids).

    At each depth k the ops under a common parent (a path prefix of length k) are taken
    in time order per group (device, step, program run); a child's runs are maximal
    stretches of its ops there.  ``groups``: a list holding the ops' group column alone,
    taken out of it here so that it is freed once sorted (a 160 MB column at 20 M ops,
    at the analysis' peak); ``ts[ops]``: the ops' starts (``ts`` itself without ``ops``),
    gathered only where the time order must be sorted.
    """
    group = groups.pop()
    runs = np.zeros(n_ann, np.int64)
    blocks = np.zeros(n_ann, np.int64)
    pairs = []
    has = pid >= 0
    if not has.any():
        return runs, blocks, np.zeros((0, 2), np.int64)
    if has.all() and _rising(ts, ops):
        # ops in time order (one track per device, the usual XLA trace): the sort by
        # (group, time) is a stable sort by group, and none at all when groups follow
        # time as steps and runs do (20 M ops: a 0.45 s lexsort and two 160 MB copies)
        if _rising(group):
            g, p = group, pid
        else:
            order = np.argsort(group, kind="stable")
            g, p = group[order], pid[order]
            del order
    elif has.all():
        # every op scoped: the keys sorted as they are, with no index of the scoped ops
        # and no gathered copies of the keys by it
        order = _by_group_then_time(group, ts, ops)
        g = group[order]
        del group
        p = pid[order]
        del order
    else:
        order = np.flatnonzero(has)
        order = order[np.lexsort((ts[order if ops is None else ops[order]], group[order]))]
        g = group[order]
        del group
        p = pid[order]
        del order
    # segments of equal (group, path): the unit of everything below; groups renumbered
    # densely in sorted order (each new group starts a segment: the count of new groups
    # up to a segment is a running sum over the segments alone)
    new = np.ones(g.shape[0], bool)
    new[1:] = g[1:] != g[:-1]
    seg = new.copy()
    seg[1:] |= p[1:] != p[:-1]
    g = np.cumsum(new[seg]) - 1
    del new
    p = p[seg].astype(np.int64)
    del seg
    depth = max(len(x) for x in paths)
    n_paths = len(paths)
    # annotation id of each path's prefix of length k+1 (n_ann: a prefix not kept)
    at = np.full((n_paths, depth + 1), -1, np.int64)
    for i, x in enumerate(paths):
        for k in range(len(x)):
            at[i, k + 1] = prefix_index.get(x[:k + 1], n_ann)
    at[:, 0] = n_ann + 1                                 # the common root
    plen = np.array([len(x) for x in paths], np.int64)
    for k in range(depth):
        s = plen[p] > k
        if not s.any():
            continue
        child, parent, gg = at[p[s], k + 1], at[p[s], k], g[s]
        key = gg * (n_ann + 2) + parent
        if not (key[1:] >= key[:-1]).all():
            o = np.argsort(key, kind="stable")          # time order kept within a block
            key, child = key[o], child[o]
        start = np.ones(key.shape[0], bool)
        start[1:] = (key[1:] != key[:-1]) | (child[1:] != child[:-1])
        real = child < n_ann
        runs += np.bincount(child[start & real], minlength=n_ann + 1)[:n_ann]
        kc = distinct(key[real] * (n_ann + 1) + child[real])
        blocks += np.bincount(kc % (n_ann + 1), minlength=n_ann + 1)[:n_ann]
        # siblings between two runs of a child: at a boundary inside a block, the run
        # before it is interleaved with the next one unless it was its child's last run
        # there, and the run after it with the previous one unless it is its first
        rk, rc = key[start], child[start]
        code = rk * (n_ann + 1) + rc
        _, first = np.unique(code, return_index=True)
        _, last = np.unique(code[::-1], return_index=True)
        is_first = np.zeros(code.shape[0], bool)
        is_first[first] = True
        is_last = np.zeros(code.shape[0], bool)
        is_last[code.shape[0] - 1 - last] = True
        b = np.flatnonzero(rk[1:] == rk[:-1])
        if b.size:
            pairs.append(np.stack([rc[b], rc[b + 1]], axis=1)[~is_last[b]])
            pairs.append(np.stack([rc[b + 1], rc[b]], axis=1)[~is_first[b + 1]])
    pairs = np.unique(np.concatenate(pairs), axis=0) if pairs else np.zeros((0, 2), np.int64)
    return runs, blocks, pairs


def _op_groups(trace: Trace, ops: np.ndarray, st_all: np.ndarray, n_steps: int,
               run: np.ndarray | None) -> np.ndarray:
    """The (device, step, program run) group of each op as one key (int32 where every
    key fits, else int64), written a block of ops at a time: the whole-column expression
    made four 160 MB temporaries at 20 M ops."""
    n = ops.shape[0]
    lo = span = 1
    if run is not None and n:
        lo = int(run.min())
        span = int(run.max()) - lo + 1
        if span * (len(trace.devices) + 1) * (n_steps + 1) >= 2**62:
            # too many runs to fold into one number: the (group, run) pairs numbered
            key = (trace.track_device[trace.track[ops]].astype(np.int64) * (n_steps + 1)
                   + st_all)
            return unique_rows(np.stack([key, run], axis=1))[1]
    # int32 where every key fits (a step per op and a few devices): 80 MB fewer at 20 M
    # ops, held through the sort below
    top = (len(trace.devices) + 1) * (n_steps + 1) * (span if run is not None else 1)
    out = np.empty(n, np.int32 if top < 2**31 else np.int64)
    for i in range(0, n, _BLOCK):
        o = out[i:i + _BLOCK]
        np.copyto(o, trace.track_device[trace.track[ops[i:i + _BLOCK]]])
        o *= n_steps + 1
        o += st_all[i:i + _BLOCK]
        if run is not None:
            o *= span
            o += run[i:i + _BLOCK] - lo
    return out


def device_time(trace: Trace, ops: np.ndarray, op_step: np.ndarray, step_ids: np.ndarray,
                origin: np.ndarray, found: tuple | None = None) -> AnnotationTable:
    """``found``: ``(pid, paths, memo)`` of an ``op_paths`` already run on ``ops`` and
    ``origin`` (the memo is added to)."""
    n_steps = step_ids.shape[0]
    if ops.size == 0:
        return empty_table(n_steps)
    if found is None:
        memo: dict = {}
        pid, paths = op_paths(trace, ops, origin, memo)
    else:
        pid, paths, memo = found
    run = op_runs(trace, ops, memo) if paths else None
    del memo
    st_all = np.where(op_step >= 0, op_step, n_steps).astype(np.int32)
    n_paths = len(paths)
    step_sums, path_ops, unscoped = _path_step_sums(trace, ops, pid, st_all, n_paths, n_steps)
    if unscoped[1] == ops.shape[0]:
        return empty_table(n_steps, unscoped)
    prefix_index = _annotations_of(paths)
    n_ann = len(prefix_index)
    ann_list = list(prefix_index)
    # path → the annotations it belongs to (its kept prefixes), as a flat ragged array
    prefixes = [[prefix_index[p[:k]] for k in range(1, len(p) + 1) if p[:k] in prefix_index]
                for p in paths]
    pcnt = np.array([len(x) for x in prefixes], np.int64)
    pflat = np.array([a for x in prefixes for a in x], np.int64)
    poff = np.concatenate(([0], np.cumsum(pcnt)[:-1])).astype(np.int64)
    prow, pann = _expand(pflat, poff, pcnt, np.arange(n_paths))   # (path, annotation) pairs

    # sums per (path, step) first — a few thousand cells — then onto the annotations
    path_step_dur = np.rint(step_sums).astype(np.int64).reshape(n_paths, n_steps + 1)
    del step_sums
    per_step_incl = np.zeros((n_ann, n_steps + 1), np.int64)
    np.add.at(per_step_incl, pann, path_step_dur[prow])
    incl = per_step_incl.sum(axis=1)
    n_ops = np.bincount(pann, weights=path_ops[prow], minlength=n_ann).astype(np.int64)
    own = np.array([prefix_index.get(p, -1) for p in paths], np.int64)
    per_step_excl = np.zeros((n_ann, n_steps + 1), np.int64)
    mine = own >= 0
    np.add.at(per_step_excl, own[mine], path_step_dur[mine])
    excl = per_step_excl.sum(axis=1)

    # scattering among siblings, per (device, step, program run)
    group = _op_groups(trace, ops, st_all, n_steps, run)
    del st_all, run
    groups = [group]
    del group                   # _scattering frees it once sorted
    runs, blocks, pairs = _scattering(paths, prefix_index, n_ann, pid, groups, trace.ts, ops)
    scattered = runs > blocks
    inter: list = [set() for _ in range(n_ann)]
    listed = set(np.flatnonzero(scattered)[:MAX_INTERLEAVED].tolist())
    for a, b in pairs.tolist():
        if a in listed and b < n_ann and a != b:
            inter[a].add("/".join(ann_list[b]))

    names, scope_time, scope_ops = _user_scopes(paths, path_step_dur, path_ops)

    order = sorted(range(n_ann), key=lambda a: ann_list[a])
    o = np.array(order, np.int64)
    return AnnotationTable(
        paths=[ann_list[a] for a in order], inclusive=incl[o], exclusive=excl[o],
        ops=n_ops[o], device_runs=runs[o], scattered=scattered[o],
        interleaved_with=[sorted(inter[a])[:10] for a in order],
        per_step_inclusive=per_step_incl[o, :n_steps], per_step_exclusive=per_step_excl[o, :n_steps],
        unscoped=unscoped[0], unscoped_ops=unscoped[1], unscoped_per_step=unscoped[2],
        user_scope=[user_scope(ann_list[a][-1]) for a in order],
        scope_names=list(names), scope_inclusive=np.rint(scope_time).astype(np.int64),
        scope_ops=scope_ops.astype(np.int64))


def _path_step_sums(trace: Trace, ops, pid, st_all, n_paths: int, n_steps: int):
    """(time per (path, step) (float, flat), ops per path, (time, ops, time per step) of
    the unscoped ops)."""
    # time and ops per (path, step), and per step of the unscoped ops, a block of ops at a
    # time: no column of all the ops' durations, cells and paths (three of 160 MB at 40 M
    # events, each fresh pages).  Durations are whole picoseconds: the float sums are
    # exact, so the blocks' order does not matter
    size = n_paths * (n_steps + 1)
    step_sums = np.zeros(size, np.float64)
    path_ops = np.zeros(n_paths, np.int64)
    un_ps = np.zeros(n_steps + 1, np.float64)
    un_t = un_n = 0
    for i in range(0, ops.shape[0], _BLOCK):
        p, st = pid[i:i + _BLOCK], st_all[i:i + _BLOCK]
        d = trace.dur[ops[i:i + _BLOCK]]
        has = p >= 0
        if not has.all():           # every op scoped (XLA): no masked copies
            no = ~has
            un_ps += np.bincount(st[no], weights=d[no], minlength=n_steps + 1)
            un_t += int(d[no].sum())
            un_n += int(no.sum())
            p, st, d = p[has], st[has], d[has]
        p = p.astype(np.int64)
        step_sums += np.bincount(p * (n_steps + 1) + st, weights=d, minlength=size)
        path_ops += np.bincount(p, minlength=n_paths)
    del p, st, d, has
    unscoped = (un_t, un_n, np.rint(un_ps[:n_steps]).astype(np.int64))
    return step_sums, path_ops, unscoped


def _annotations_of(paths: list) -> dict:
    """{annotation path: index}: every prefix of a path is an annotation too (the
    shortest ``MAX_PATHS`` where there are more)."""
    prefix_index: dict = {}
    for p in paths:
        for k in range(1, len(p) + 1):
            prefix_index.setdefault(p[:k], len(prefix_index))
    if len(prefix_index) > MAX_PATHS:
        keep = sorted(prefix_index, key=len)[:MAX_PATHS]
        prefix_index = {p: i for i, p in enumerate(keep)}
    return prefix_index


def _user_scopes(paths: list, path_step_dur, path_ops):
    """({scope name: index}, time per scope, ops per scope): the user's scopes behind
    JAX's wrappers, each op counted once per scope name."""
    names: dict = {}
    pair_path, pair_name = [], []
    for i, p in enumerate(paths):
        for nm in dict.fromkeys(user_scope(x) for x in p if not _FUNCTION.match(x)):
            pair_path.append(i)
            pair_name.append(names.setdefault(nm, len(names)))
    pp, pn = np.asarray(pair_path, np.int64), np.asarray(pair_name, np.int64)
    path_total = path_step_dur.sum(axis=1)
    scope_time = np.bincount(pn, weights=path_total[pp], minlength=len(names)) \
        if pp.size else np.zeros(0)
    scope_ops = np.bincount(pn, weights=path_ops[pp], minlength=len(names)) \
        if pp.size else np.zeros(0)
    return names, scope_time, scope_ops


def empty_table(n_steps: int, unscoped=(0, 0, None)) -> AnnotationTable:
    z = np.zeros(0, np.int64)
    per_step = unscoped[2] if unscoped[2] is not None else np.zeros(n_steps, np.int64)
    return AnnotationTable([], z, z, z, z, z.astype(bool), [], np.zeros((0, n_steps), np.int64),
                           np.zeros((0, n_steps), np.int64), unscoped=unscoped[0],
                           unscoped_ops=unscoped[1], unscoped_per_step=per_step)
