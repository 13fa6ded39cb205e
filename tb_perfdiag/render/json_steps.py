"""The steps sections of the JSON faces: the step rows and bins, and what happens per
step (annotations, user scopes, compilations, transfers)."""
from __future__ import annotations

import numpy as np

from ..analysis import causes as C
from ..analysis.result import Diagnosis, Direction
from . import efficiency as eff_json
from .json_devices import _by_cause
from .json_ids import ns, ns_list


def _step_devices(diag: Diagnosis, devices=None) -> list:
    """The devices with step figures (of ``devices`` only, when given)."""
    devs = np.flatnonzero(diag.steps.has_device).tolist()
    return devs if devices is None else [d for d in devs if d in devices]


def _recompiles_per_step(diag: Diagnosis) -> np.ndarray:
    """Per step, how many of its compiles compiled a function again."""
    n, T = len(diag.steps), diag.compilations
    if T is None or not len(T):
        return np.zeros(n, np.int64)
    st = T.step[(T.step >= 0) & np.asarray(T.recompile, bool)]
    return np.bincount(st, minlength=n)[:n]


def steps_json(diag: Diagnosis, rows=None, devices=None) -> list:
    """One record per step (those of ``rows``, step indices in order, when given), with the
    figures of every device (of ``devices`` only, when given)."""
    S = diag.steps
    devs = _step_devices(diag, devices)
    again = _recompiles_per_step(diag)
    out = []
    for s in (range(len(S)) if rows is None else np.asarray(rows, np.int64).tolist()):
        per_dev = {}
        for d in devs:
            a, b = int(S.win_start[s, d]), int(S.win_end[s, d])
            w = max(b - a, 0)
            bz = int(S.busy[s, d])
            lau = int(S.launched[s, d]) if S.launched is not None else -1
            per_dev[str(d)] = {"duty_cycle": bz / w if w else None, "start_ns": ns(a),
                               "end_ns": ns(b), "busy_ns": ns(bz), "idle_ns": ns(w - bz),
                               "launched_ns": ns(lau) if lau >= 0 else None,
                               "idle_by_cause_ns": _by_cause(S.idle_by_cause[s, d]),
                               "small_gaps": {"count": int(S.small_count[s, d]),
                                              "total_ns": ns(S.small_total[s, d])},
                               **eff_json.step_json(diag, s, d)}
        out.append({"id": int(S.ids[s]), "start_ns": ns(S.host_start[s]),
                    "end_ns": ns(S.host_end[s]), "devices": per_dev,
                    "compile": {"count": int(S.compile_count[s]),
                                "total_ns": ns(S.compile_total[s]),
                                "recompiles": int(again[s])},
                    "outlier": bool(S.outlier[s])})
    return out


# Above STEP_ROWS steps the first answer draws the chart from STEP_BINS bins of
# consecutive steps and lists only the rows a reader looks for first: the step asked for,
# the SLOWEST_STEPS slowest, the slowest MARKED_STEPS outliers and compiling steps, and
# the first and last step (the capture's bounds); the steps route serves the others.
STEP_ROWS = 500
STEP_CELLS = 2_000       # …or above this many step × device figures
STEP_BINS = 200
MIN_STEP_BINS = 20
SLOWEST_STEPS = 20
MARKED_STEPS = 50


def _step_ns(diag: Diagnosis) -> np.ndarray:
    S = diag.steps
    return np.asarray(ns_list(S.host_end), np.int64) - np.asarray(ns_list(S.host_start),
                                                                  np.int64)


def _mean_ns(total_ps: np.ndarray, count: np.ndarray, lists: bool = True):
    """``ns(total / count)`` of each element (the mean cut to whole ps, then rounded to ns
    half to even, as ``ns`` does one value)."""
    out = np.rint(np.trunc(total_ps / count) / 1000).astype(np.int64)
    return out.tolist() if lists else out


def step_bins_json(diag: Diagnosis, bins: int = STEP_BINS, devices=None) -> list:
    """The steps in ``bins`` runs of consecutive steps: per bin its steps' time (min,
    median, mean, max; the slowest step's id), how many are outliers or compile, and per
    device (of ``devices`` only, when given) the mean step's split (busy, idle by cause),
    which the chart draws as a bar."""
    S = diag.steps
    n = len(S)
    if n == 0:
        return []
    edges = np.unique(np.linspace(0, n, min(bins, n) + 1).astype(np.int64))
    lo, hi = edges[:-1], edges[1:]
    cnt = hi - lo
    dur = _step_ns(diag)
    ids = S.ids.astype(np.int64)
    again = _recompiles_per_step(diag)
    sums = lambda x: np.add.reduceat(np.asarray(x, np.int64), lo)  # noqa: E731
    outl, comp = sums(S.outlier.astype(np.int64)), sums(S.compile_count > 0)
    recomp = sums(again > 0)
    devs = _step_devices(diag, devices)
    per, mfu = {}, {}
    for d in devs:
        w = np.maximum(S.win_end[:, d] - S.win_start[:, d], 0)
        bz, ww = sums(S.busy[:, d]), sums(w)
        ib = np.add.reduceat(S.idle_by_cause[:, d, :], lo, axis=0)
        duty = (bz / np.maximum(ww, 1)).tolist()
        mfu[d] = eff_json.bin_mfu(diag, d, lo, ww)
        per[d] = ((ww > 0).tolist(), duty, _mean_ns(bz, cnt), _mean_ns(ww - bz, cnt),
                  [{C.ALL[i]: v for i, v in zip(np.flatnonzero(m).tolist(), r[m].tolist())}
                   for m, r in zip(ib > 0, _mean_ns(ib, cnt[:, None], lists=False))])
    # each bin's figures at once (Python per bin only to write its record): the steps
    # sorted within their bins give the medians, the first of each bin's largest its
    # slowest step
    dur = np.asarray(dur, np.int64)
    nb = lo.shape[0]
    bin_of = np.repeat(np.arange(nb), cnt)
    srt = dur[np.lexsort((dur, bin_of))]
    mid = (srt[lo + (cnt - 1) // 2].astype(np.float64) + srt[lo + cnt // 2]) / 2
    top = np.maximum.reduceat(dur, lo)
    at_top = np.flatnonzero(dur == top[bin_of])
    first_top = at_top[np.unique(bin_of[at_top], return_index=True)[1]]
    cols = zip(lo.tolist(), hi.tolist(), cnt.tolist(), np.minimum.reduceat(dur, lo).tolist(),
               mid.astype(np.int64).tolist(), np.add.reduceat(dur, lo).tolist(), top.tolist(),
               ids[first_top].tolist(), ns_list(S.host_start[lo]), ns_list(S.host_end[hi - 1]),
               ids[lo].tolist(), ids[hi - 1].tolist(), outl.tolist(), comp.tolist(),
               recomp.tolist())
    out = []
    for k, (a, b, c, mn, med, tot, mx, slow, st, en, first, last, no, nc, nr) in enumerate(cols):
        devices = {}
        for d in devs:
            has, duty, busy, idle, by_cause = per[d]
            devices[str(d)] = {"duty_cycle": duty[k] if has[k] else None,
                               "busy_ns": busy[k], "idle_ns": idle[k],
                               "idle_by_cause_ns": by_cause[k],
                               "mfu": mfu[d][k] if mfu[d] is not None else None}
        out.append({"first": first, "last": last, "steps": c, "start_ns": st, "end_ns": en,
                    "min_ns": mn, "median_ns": med, "mean_ns": int(round(tot / c)),
                    "max_ns": mx, "slowest": slow, "outliers": no, "compiling": nc,
                    "recompiling": nr, "devices": devices})
    return out


def step_rows_shown(diag: Diagnosis, step: int | None = None) -> np.ndarray:
    """Indices of the step rows the first answer lists when the steps are binned."""
    S = diag.steps
    n = len(S)
    dur = _step_ns(diag)
    by_time = np.argsort(-dur, kind="stable")
    marked = np.flatnonzero(np.asarray(S.outlier, bool) | (S.compile_count > 0))
    marked = marked[np.argsort(-dur[marked], kind="stable")][:MARKED_STEPS]
    keep = [by_time[:SLOWEST_STEPS], marked, np.array([0, n - 1], np.int64)]
    if step is not None:
        keep.append(np.flatnonzero(S.ids == step))
    return np.unique(np.concatenate([np.asarray(k, np.int64) for k in keep]))


def steps_page(diag: Diagnosis, offset: int, limit: int) -> dict:
    """Step rows ``[offset, offset + limit)``, with how many there are in all."""
    n = len(diag.steps)
    rows = np.arange(min(offset, n), min(offset + limit, n))
    return {"steps": steps_json(diag, rows), "steps_total": n, "steps_offset": offset,
            "steps_limit": limit}


def _of_steps(present: np.ndarray, steps) -> np.ndarray:
    """Step indices where ``present`` holds, only those of ``steps`` (indices) when given."""
    got = np.flatnonzero(present)
    return got if steps is None else np.intersect1d(got, steps)


def annotations_json(diag: Diagnosis, steps=None) -> list:
    """Per annotation path its device time, per step too (only the step indices ``steps``
    when given)."""
    A = diag.annotations
    ids = diag.steps.ids.tolist()
    out = []
    for a, path in enumerate(A.paths):
        inc, exc = A.per_step_inclusive[a], A.per_step_exclusive[a]
        out.append({
            "path": list(path), "name": path[-1], "depth": len(path) - 1,
            "inclusive_ns": int(A.inclusive[a] // 1000),
            "exclusive_ns": int(A.exclusive[a] // 1000),
            "ops": int(A.ops[a]), "device_runs": int(A.device_runs[a]),
            "scattered": bool(A.scattered[a]),
            "interleaved_with": list(A.interleaved_with[a]),
            "user_scope": A.user_scope[a] if a < len(A.user_scope) else path[-1],
            "per_step": {str(int(ids[s])): {"inclusive_ns": int(inc[s] // 1000),
                                            "exclusive_ns": int(exc[s] // 1000)}
                         for s in _of_steps(inc > 0, steps).tolist()},
        })
    return out


def unscoped_json(diag: Diagnosis, steps=None) -> dict:
    """Device time of the ops under no user scope (summed over devices, as the rows); per
    step only for the step indices ``steps`` when given."""
    A = diag.annotations
    ids = diag.steps.ids.tolist()
    per = np.asarray(A.unscoped_per_step)
    return {"device_ns": int(A.unscoped // 1000), "ops": int(A.unscoped_ops),
            "per_step": {str(int(ids[s])): int(per[s] // 1000)
                         for s in _of_steps(per > 0, steps).tolist() if s < len(ids)}}


def user_scopes_json(diag: Diagnosis) -> list:
    """Device time per user scope name over the whole tree (JAX's ``jvp(forward)`` and
    ``transpose(jvp(forward))`` count as ``forward``), largest first."""
    A = diag.annotations
    rows = [{"name": nm, "device_ns": int(A.scope_inclusive[i] // 1000),
             "ops": int(A.scope_ops[i])} for i, nm in enumerate(A.scope_names)]
    return sorted(rows, key=lambda r: (-r["device_ns"], r["name"]))


def _step_id(diag: Diagnosis, k: int):
    return int(diag.steps.ids[k]) if k >= 0 else None


def _in_steps(step_col: np.ndarray, steps) -> list:
    """Rows of a per-call table: all, or (``steps`` given) those outside any step or in one
    of the step indices ``steps``."""
    if steps is None:
        return list(range(step_col.shape[0]))
    return np.flatnonzero((step_col < 0) | np.isin(step_col, steps)).tolist()


def compilations_json(diag: Diagnosis, steps=None) -> list:
    """One record per outermost compilation (those outside steps or in the step indices
    ``steps`` when given); ``recompile`` only when the same function was compiled before
    (a first compile is a one-time cost)."""
    T = diag.compilations
    if T is None:
        return []
    i = np.asarray(_in_steps(np.asarray(T.step), steps), np.int64)
    return [{"step": st, "start_ns": s, "duration_ns": d, "function": T.function[k] or None,
             "recompile": rc, "event": nm or None}
            for k, st, s, d, rc, nm in zip(i.tolist(), _step_ids(diag, T.step, i),
                                           ns_list(T.start[i]), ns_list(T.duration[i]),
                                           np.asarray(T.recompile, bool)[i].tolist(),
                                           diag.refs.names_of(T.event[i]))]


def transfers_json(diag: Diagnosis, steps=None) -> list:
    """One record per user-level host↔device transfer call (those outside steps or in the
    step indices ``steps`` when given)."""
    T = diag.transfers
    if T is None:
        return []
    i = np.asarray(_in_steps(np.asarray(T.step), steps), np.int64)
    d2h = (np.asarray(T.direction)[i] == Direction.D2H).tolist()
    return [{"step": st, "start_ns": s, "duration_ns": d, "direction": "d2h" if x else "h2d",
             "event": nm or None}
            for st, s, d, x, nm in zip(_step_ids(diag, T.step, i), ns_list(T.start[i]),
                                       ns_list(T.duration[i]), d2h,
                                       diag.refs.names_of(T.event[i]))]


def _step_ids(diag: Diagnosis, step_col, rows: np.ndarray) -> list:
    """``_step_id`` of each of ``rows`` of a per-call table's step column."""
    k = np.asarray(step_col, np.int64)[rows]
    ids = diag.steps.ids
    got = np.asarray(ids, np.int64)[np.maximum(k, 0)] if ids.shape[0] else np.zeros_like(k)
    return [int(v) if kk >= 0 else None for v, kk in zip(got.tolist(), k.tolist())]
