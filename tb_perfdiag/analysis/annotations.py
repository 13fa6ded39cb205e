"""Device time per user annotation, carried over from the host to the device ops.

CUDA: kernel → its launch (correlation) → the user annotations enclosing the launch.
XLA: the ``op_name`` scope of each executed HLO op (``train_step/forward/…``), else its
``tf_op``.  Device time is the sum of op durations (streams can overlap).  An
annotation whose ops the compiler scattered shows as several separate runs on the
device, interleaved with other annotations.
"""
from __future__ import annotations

import re

import numpy as np

from ..trace.build import unique_inverse
from ..trace.model import EventKind as K, Trace
from .result import AnnotationTable

_SUFFIX = re.compile(r"\.\d+$")
MAX_PATHS = 400
MAX_INTERLEAVED = 100       # scattered annotations whose neighbours are listed


def _scope_parts(op_name: str) -> tuple:
    parts = [p for p in op_name.split("/") if p]
    return tuple(_SUFFIX.sub("", p) for p in parts[:-1])


def op_paths(trace: Trace, ops: np.ndarray, origin: np.ndarray) -> tuple[np.ndarray, list]:
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

    scope = trace.stats.get("op_name") or trace.stats.get("tf_op")
    if scope is not None:
        # the scope of each op: a lookup in the sparse stat, no dense column over all events
        if scope.events.shape == ops.shape and np.array_equal(scope.events, ops):
            sid = scope.values                     # every op has a scope
        else:
            k = np.minimum(np.searchsorted(scope.events, ops),
                           max(scope.events.shape[0] - 1, 0))
            hit = scope.events[k] == ops if scope.events.size else np.zeros(ops.shape[0], bool)
            sid = np.where(hit, scope.values[k] if scope.events.size else -1, -1)
            del k, hit
        u, inv = unique_inverse(sid)
        mapped = np.array([intern(_scope_parts(trace.strings[x])) if x >= 0 else -1
                           for x in u.tolist()], np.int32)
        pid = mapped[inv.reshape(-1)]
        empty = index.get(())
        if empty is not None:
            pid[pid == empty] = -1
    # CUDA and anything unscoped: annotations enclosing the launching host op
    need = (pid < 0) & (origin[ops] >= 0)
    if need.any():
        ann = nearest_annotation(trace)
        a = ann[origin[ops[need]]]
        u, inv = unique_inverse(a)
        memo: dict = {}
        mapped = np.array([intern(annotation_path(trace, x, memo)) if x >= 0 else -1
                           for x in u.tolist()], np.int32)
        got = mapped[inv.reshape(-1)]
        pid[np.flatnonzero(need)] = got
        empty = index.get(())
        if empty is not None:
            pid[pid == empty] = -1
    return pid, paths


def is_annotation(trace: Trace) -> np.ndarray:
    return np.isin(trace.kind, (K.ANNOTATION, K.DATA)) & \
        (trace.track_kind[trace.track] == 0)


def nearest_annotation(trace: Trace) -> np.ndarray:
    """For every event, the innermost user annotation enclosing it (itself included)."""
    ann = np.full(trace.n_events, -1, np.int32)
    own = np.flatnonzero(is_annotation(trace))
    ann[own] = own
    del own
    for idx, p in trace.nested_levels():
        take = ann[idx] < 0
        ann[idx[take]] = ann[p[take]]
    return ann


_ANN_KINDS = (int(K.ANNOTATION), int(K.DATA))


def annotation_path(trace: Trace, e: int, memo: dict | None = None) -> tuple:
    """Names of the user annotations enclosing ``e`` (itself included), outermost first."""
    memo = {} if memo is None else memo
    pending = []
    while e >= 0 and e not in memo:
        pending.append(e)
        e = int(trace.parent[e])
    base = memo.get(e, ()) if e >= 0 else ()
    for x in reversed(pending):
        if int(trace.kind[x]) in _ANN_KINDS:
            base = base + (trace.strings[int(trace.name[x])],)
        memo[x] = base
    return base


def _expand(flat: np.ndarray, off: np.ndarray, cnt: np.ndarray, x: np.ndarray):
    """(row, item): every element of ``x`` (a path id) paired with each of its prefixes."""
    reps = cnt[x]
    row = np.repeat(np.arange(x.shape[0]), reps)
    within = np.arange(row.shape[0]) - np.repeat(np.cumsum(reps) - reps, reps)
    return row, flat[off[x][row] + within]


def device_time(trace: Trace, ops: np.ndarray, op_step: np.ndarray, step_ids: np.ndarray,
                origin: np.ndarray) -> AnnotationTable:
    n_steps = step_ids.shape[0]
    if ops.size == 0:
        return empty_table(n_steps)
    pid, paths = op_paths(trace, ops, origin)
    has = pid >= 0
    if not has.any():
        return empty_table(n_steps)
    n_paths = len(paths)
    dur = trace.dur[ops]
    dev = trace.track_device[trace.track[ops]]
    # every prefix of a path is an annotation too
    prefix_index: dict = {}
    for p in paths:
        for k in range(1, len(p) + 1):
            prefix_index.setdefault(p[:k], len(prefix_index))
    if len(prefix_index) > MAX_PATHS:
        keep = sorted(prefix_index, key=len)[:MAX_PATHS]
        prefix_index = {p: i for i, p in enumerate(keep)}
    n_ann = len(prefix_index)
    ann_list = list(prefix_index)
    ann_depth = np.array([len(a) for a in ann_list], np.int64)
    # path → the annotations it belongs to (its kept prefixes), as a flat ragged array
    prefixes = [[prefix_index[p[:k]] for k in range(1, len(p) + 1) if p[:k] in prefix_index]
                for p in paths]
    pcnt = np.array([len(x) for x in prefixes], np.int64)
    poff = np.concatenate(([0], np.cumsum(pcnt)[:-1])).astype(np.int64)
    pflat = np.array([a for x in prefixes for a in x], np.int64)
    prow, pann = _expand(pflat, poff, pcnt, np.arange(n_paths))   # (path, annotation) pairs

    # sums per (path, step) first — a few thousand cells — then onto the annotations
    p_ok, d_ok = pid[has].astype(np.int64), dur[has]
    st = op_step[has]
    st = np.where(st >= 0, st, n_steps)
    cell = p_ok * (n_steps + 1) + st
    size = n_paths * (n_steps + 1)
    path_step_dur = np.rint(np.bincount(cell, weights=d_ok, minlength=size)) \
        .astype(np.int64).reshape(n_paths, n_steps + 1)
    path_ops = np.bincount(p_ok, minlength=n_paths).astype(np.int64)
    per_step_incl = np.zeros((n_ann, n_steps + 1), np.int64)
    np.add.at(per_step_incl, pann, path_step_dur[prow])
    incl = per_step_incl.sum(axis=1)
    n_ops = np.bincount(pann, weights=path_ops[prow], minlength=n_ann).astype(np.int64)
    own = np.array([prefix_index.get(p, -1) for p in paths], np.int64)
    per_step_excl = np.zeros((n_ann, n_steps + 1), np.int64)
    mine = own >= 0
    np.add.at(per_step_excl, own[mine], path_step_dur[mine])
    excl = per_step_excl.sum(axis=1)

    # scattering: separate runs of consecutive ops (device order) per (device, step).
    # Walk the device order as segments of equal (device, step, path); at a segment
    # boundary the annotations deeper than the common prefix of the previous and the
    # next path start a new run.
    order = np.lexsort((trace.ts[ops], dev))
    key = dev[order].astype(np.int64) * (n_steps + 2) + \
        np.where(op_step[order] >= 0, op_step[order], n_steps)
    seq = pid[order]
    brk = np.ones(seq.shape[0], bool)
    brk[1:] = (key[1:] != key[:-1]) | (seq[1:] != seq[:-1])
    seg_at = np.flatnonzero(brk)
    seg_pid, seg_key = seq[seg_at], key[seg_at]
    prev_pid = np.full(seg_at.shape[0], -1, np.int64)
    prev_pid[1:] = np.where(seg_key[1:] == seg_key[:-1], seg_pid[:-1], -1)
    live = seg_pid >= 0
    codes, counts = np.unique((prev_pid[live] + 1) * (n_paths + 1) + seg_pid[live],
                              return_counts=True)
    prev_u, cur_u = codes // (n_paths + 1) - 1, codes % (n_paths + 1)
    common = np.zeros(codes.shape[0], np.int64)
    for i, (a, b) in enumerate(zip(prev_u.tolist(), cur_u.tolist())):
        if a >= 0:
            pa, pb = paths[a], paths[b]
            n = 0
            while n < min(len(pa), len(pb)) and pa[n] == pb[n]:
                n += 1
            common[i] = n
    row, ann = _expand(pflat, poff, pcnt, cur_u)
    starts = ann_depth[ann] > common[row]
    runs = np.bincount(ann[starts], weights=counts[row[starts]], minlength=n_ann).astype(np.int64)
    # (device, step) groups each annotation has ops in
    kp = np.unique(seg_key[live] * (n_paths + 1) + seg_pid[live])
    row, ann = _expand(pflat, poff, pcnt, kp % (n_paths + 1))
    kmax = int(key.max()) + 1
    steps_with = np.bincount(np.unique(ann * kmax + kp[row] // (n_paths + 1)) // kmax,
                             minlength=n_ann)
    # neighbours of the scattered ones: the paths between an annotation's first and last
    # segment in device order, at the same depth
    inter: list = [set() for _ in range(n_ann)]
    scattered = np.flatnonzero(runs > steps_with)[:MAX_INTERLEAVED]
    if scattered.size:
        seg_idx = np.arange(seg_at.shape[0])
        first = np.full(n_paths, seg_at.shape[0], np.int64)
        last = np.full(n_paths, -1, np.int64)
        np.minimum.at(first, seg_pid[live], seg_idx[live])
        np.maximum.at(last, seg_pid[live], seg_idx[live])
        for a in scattered.tolist():
            with_a = prow[pann == a]
            lo, hi = int(first[with_a].min()), int(last[with_a].max())
            window = seg_pid[lo:hi + 1]
            if window.shape[0] > 200_000:
                window = window[:: window.shape[0] // 200_000 + 1]
            others = np.unique(window)
            depth = len(ann_list[a])
            for o in others[others >= 0].tolist()[:200]:
                p = paths[o]
                if len(p) >= depth and p[:depth] != ann_list[a]:
                    inter[a].add("/".join(p[:depth]))
    order = sorted(range(n_ann), key=lambda a: ann_list[a])
    o = np.array(order, np.int64)
    steps_with_ops = np.maximum((per_step_incl[:, :n_steps] > 0).sum(axis=1), 1)
    return AnnotationTable(
        paths=[ann_list[a] for a in order], inclusive=incl[o], exclusive=excl[o],
        ops=n_ops[o], device_runs=runs[o], scattered=(runs > steps_with_ops)[o],
        interleaved_with=[sorted(inter[a])[:10] for a in order],
        per_step_inclusive=per_step_incl[o, :n_steps], per_step_exclusive=per_step_excl[o, :n_steps])


def empty_table(n_steps: int) -> AnnotationTable:
    z = np.zeros(0, np.int64)
    return AnnotationTable([], z, z, z, z, z.astype(bool), [], np.zeros((0, n_steps), np.int64),
                           np.zeros((0, n_steps), np.int64))
