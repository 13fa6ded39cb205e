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
    pid = np.full(ops.shape[0], -1, np.int64)

    def intern(p):
        i = index.get(p)
        if i is None:
            i = index[p] = len(paths)
            paths.append(p)
        return i

    scope = trace.stats.get("op_name") or trace.stats.get("tf_op")
    if scope is not None:
        col = np.full(trace.n_events, -1, np.int64)
        col[scope.events] = scope.values
        sid = col[ops]
        u, inv = unique_inverse(sid)
        mapped = np.array([intern(_scope_parts(trace.strings[x])) if x >= 0 else -1
                           for x in u.tolist()], np.int64)
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
                           for x in u.tolist()], np.int64)
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
    ann = np.where(is_annotation(trace), np.arange(trace.n_events), -1)
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


def device_time(trace: Trace, ops: np.ndarray, op_step: np.ndarray, step_ids: np.ndarray,
                origin: np.ndarray, device_names: list) -> list:
    if ops.size == 0:
        return []
    pid, paths = op_paths(trace, ops, origin)
    has = pid >= 0
    if not has.any():
        return []
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
    # op → each prefix (inclusive) and its own path (exclusive)
    rows_op, rows_ann = [], []
    path_prefixes = [[prefix_index[p[:k]] for k in range(1, len(p) + 1) if p[:k] in prefix_index]
                     for p in paths]
    ops_by_path = np.argsort(pid, kind="stable")
    sorted_pid = pid[ops_by_path]
    bounds = np.searchsorted(sorted_pid, np.arange(len(paths) + 1))
    for p_i in range(len(paths)):
        members = ops_by_path[bounds[p_i]:bounds[p_i + 1]]
        for a in path_prefixes[p_i]:
            rows_op.append(members)
            rows_ann.append(np.full(members.shape[0], a, np.int64))
    rows_op = np.concatenate(rows_op) if rows_op else np.zeros(0, np.int64)
    rows_ann = np.concatenate(rows_ann) if rows_ann else np.zeros(0, np.int64)
    incl = np.bincount(rows_ann, weights=dur[rows_op], minlength=n_ann)
    n_ops = np.bincount(rows_ann, minlength=n_ann)
    own = np.array([prefix_index.get(p, -1) for p in paths], np.int64)
    ex_ann = own[pid[has]]
    ok = ex_ann >= 0
    excl = np.bincount(ex_ann[ok], weights=dur[has][ok], minlength=n_ann)

    n_steps = step_ids.shape[0]
    st = np.where(op_step[rows_op] >= 0, op_step[rows_op], n_steps)
    per_step_incl = np.bincount(rows_ann * (n_steps + 1) + st, weights=dur[rows_op],
                                minlength=n_ann * (n_steps + 1)).reshape(n_ann, n_steps + 1)
    ex_st = np.where(op_step[has][ok] >= 0, op_step[has][ok], n_steps)
    per_step_excl = np.bincount(ex_ann[ok] * (n_steps + 1) + ex_st, weights=dur[has][ok],
                                minlength=n_ann * (n_steps + 1)).reshape(n_ann, n_steps + 1)

    # scattering: separate runs of consecutive ops (device order) per (device, step).
    # A member op starts a run unless the op just before it on the same device and step
    # belongs to the same annotation: one sort over (annotation, position) pairs.
    n_ops_all = ops.shape[0]
    order = np.lexsort((trace.ts[ops], dev))
    pos_in_order = np.empty(n_ops_all, np.int64)
    pos_in_order[order] = np.arange(n_ops_all)
    key = dev[order].astype(np.int64) * (n_steps + 2) + \
        np.where(op_step[order] >= 0, op_step[order], n_steps)
    pos = pos_in_order[rows_op]
    pair = rows_ann * (n_ops_all + 1) + pos
    pair_sorted = np.sort(pair)
    prev = pair - 1
    k = np.minimum(np.searchsorted(pair_sorted, prev), pair_sorted.shape[0] - 1)
    prev_member = (pos > 0) & (pair_sorted[k] == prev)
    same_key = np.zeros(pos.shape[0], bool)
    same_key[pos > 0] = key[pos[pos > 0]] == key[pos[pos > 0] - 1]
    starts_run = ~(prev_member & same_key)
    runs = np.bincount(rows_ann, weights=starts_run, minlength=n_ann).astype(np.int64)
    keys_with = np.unique(rows_ann * (int(key.max()) + 1 if key.size else 1) +
                          key[pos]) // ((int(key.max()) + 1) if key.size else 1)
    steps_with = np.bincount(keys_with, minlength=n_ann)
    inter: list = [set() for _ in range(n_ann)]
    member_rows = np.argsort(rows_ann, kind="stable")
    mb = np.searchsorted(rows_ann[member_rows], np.arange(n_ann + 1))
    for a in np.flatnonzero(runs > steps_with)[:MAX_INTERLEAVED].tolist():
        # which other annotations sit between this one's runs (same depth)
        members = pos[member_rows[mb[a]:mb[a + 1]]]
        lo, hi = int(members.min()), int(members.max())
        window = order[lo:hi + 1]
        if window.shape[0] > 200_000:
            window = window[:: window.shape[0] // 200_000 + 1]
        others = np.unique(pid[window])
        depth = len(ann_list[a])
        for o in others[others >= 0].tolist()[:200]:
            p = paths[o]
            if len(p) >= depth and p[:depth] != ann_list[a]:
                inter[a].add("/".join(p[:depth]))
    out = []
    for a, path in enumerate(ann_list):
        steps_with_ops = int((per_step_incl[a, :n_steps] > 0).sum()) or 1
        out.append({
            "path": list(path), "name": path[-1], "depth": len(path) - 1,
            "inclusive_ns": int(incl[a] // 1000), "exclusive_ns": int(excl[a] // 1000),
            "ops": int(n_ops[a]), "device_runs": int(runs[a]),
            "scattered": bool(runs[a] > steps_with_ops),
            "interleaved_with": sorted(inter[a])[:10],
            "per_step": {str(int(step_ids[s])): {"inclusive_ns": int(per_step_incl[a, s] // 1000),
                                                 "exclusive_ns": int(per_step_excl[a, s] // 1000)}
                         for s in range(n_steps) if per_step_incl[a, s] > 0},
        })
    out.sort(key=lambda r: r["path"])
    return out
