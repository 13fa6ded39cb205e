"""Attention over a ragged batch (vLLM: requests of different lengths packed into one
token dimension): the op's shapes give only the packed token count, the step's name the
sums that the FLOPs need (GUIDE §4, "Ragged attention").

vLLM names each step ``execute_<T>_context_<n>(sq<Σq>sk<Σk>sqsq<Σq²>sqsk<Σq·k>)_
generation_<m>(…)`` (per request q = new tokens, k = tokens attended to).  Attention
FLOPs = H_q·2·(d_qk + d_v)·Σq·k over all requests, less H_q·(d_qk + d_v)·Σq² for the
causal part of the context requests.  Shapes: q ``[T, H_q, d_qk]``, v ``[T, H_kv, d_v]``.
"""
from __future__ import annotations

import re

import numpy as np

from . import torch_formulas as F

# the ragged attention ops: positions of q, k, v in Input Dims
OPS = {"vllm::unified_attention_with_output": (0, 1, 2), "vllm::unified_attention": (0, 1, 2)}
_STEP = re.compile(r"^execute_\d+_")
_PART = re.compile(r"(context|generation)_\d+\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)")


def step_sums(name: str):
    """(Σq·k over all requests, Σq² over the context requests) of a vLLM step name;
    None where the name gives none."""
    if not _STEP.match(name):
        return None
    qk = qq = 0
    seen = False
    for part, _sq, _sk, sqsq, sqsk in _PART.findall(name):
        seen = True
        qk += int(sqsk)
        if part == "context":
            qq += int(sqsq)
    return (qk, qq) if seen else None


def flops(q, v, sums) -> float | None:
    """The FLOPs of one ragged attention op from its q and v shapes and the step's sums."""
    if not (F._is_shape(q) and F._is_shape(v)) or len(q) < 3 or len(v) < 2:
        return None
    h, dqk, dv = q[-2], q[-1], v[-1]
    qk, qq = sums
    return float(h * 2 * (dqk + dv) * qk - h * (dqk + dv) * qq)


def step_names(trace, ev: np.ndarray) -> np.ndarray:
    """Per op of ``ev``: the name id of the innermost vLLM step annotation around it
    (−1 none), along its parents."""
    ids = np.array([i for i, s in enumerate(trace.strings)
                    if s.startswith("execute_") and step_sums(s) is not None], np.int64)
    out = np.full(ev.shape[0], -1, np.int64)
    if not ids.size:
        return out
    cur = trace.parent[ev].astype(np.int64)
    live = np.arange(ev.shape[0])
    for _ in range(256):
        ok = cur >= 0
        live, cur = live[ok], cur[ok]
        if not live.size:
            break
        nm = trace.name[cur].astype(np.int64)
        hit = np.isin(nm, ids)
        out[live[hit]] = nm[hit]
        live, cur = live[~hit], trace.parent[cur[~hit]].astype(np.int64)
    return out


def apply(trace, ev, names, dims_ids, types_ids, parsed, has, op_fl, op_by, op_mm, op_dt,
          dtypes) -> None:
    """Put the ragged attention ops' figures into the per-op columns, in place, where
    the step around them gives the sums; the others as they are."""
    want = np.array([trace.strings[int(i)] in OPS for i in names.tolist()], bool) \
        if names.size < 4096 else np.isin(names, [i for i, s in enumerate(trace.strings)
                                                 if s in OPS])
    rows = np.flatnonzero(want)
    if not rows.size:
        return
    step = step_names(trace, ev[rows])
    memo: dict = {}
    for r, st in zip(rows.tolist(), step.tolist()):
        if st < 0:
            continue
        key = (int(names[r]), int(dims_ids[r]), int(types_ids[r]), st)
        got = memo.get(key)
        if got is None:
            got = memo[key] = _cost(trace.strings[int(names[r])], parsed(int(dims_ids[r])),
                                    parsed(int(types_ids[r])), trace.strings[st])
        if got is None:
            continue
        op_fl[r], op_by[r] = got.flops, got.bytes
        has[r], op_mm[r] = True, True
        op_dt[r] = dtypes.index(got.dtype) if got.dtype in dtypes else dtypes.index("")


def _cost(name, dims, types, step):
    qi, ki, vi = OPS[name]
    sums = step_sums(step)
    if sums is None or max(qi, ki, vi) >= len(dims):
        return None
    fl = flops(dims[qi], dims[vi], sums)
    if fl is None or fl < 0:
        return None
    dt, size = F.dtype_of(types)
    q, k, v = dims[qi], dims[ki], dims[vi]
    by = 0.0
    if size and all(F._is_shape(x) for x in (q, k, v)):
        by = float((F._prod(q) + F._prod(k) + F._prod(v) + F._prod(q[:-1]) * v[-1]) * size)
    return F.Cost(fl, by, True, dt)
