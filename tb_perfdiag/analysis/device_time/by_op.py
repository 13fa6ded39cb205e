"""What the device is busy with: device time per op group, and how the busy time splits
into compute, copies and collectives.

Every device op (the busy set's: kernels, copies, sets; kernels only under
``kernels_only``) falls in one *group* per device:

- a copy by its direction (``Memcpy HtoD``, ``DtoH``, ``DtoD``, ``PtoP``; `` (pageable)``
  when the copy says its host side was pageable memory), a set as ``Memset``;
- an XLA op (one with an ``hlo_op`` stat: TPU ``XLA Ops``, XLA:GPU kernels, XLA:CPU's HLO
  ops) by its HLO instruction name, the way xprof's HLO op stats count it;
- any other kernel by its name with template arguments and parameters folded:
  ``void at::native::foo<float, 4>(int, float*)`` → ``at::native::foo<…>``.

Groups carry calls, total time, the GPU kernels shorter than the launch latency (the
launch-bound story), their longest instance, the host op that launched most of their
time (``tf_op``; else the XLA program, which for JAX is the jitted function; else the
framework op enclosing the launch: ``aten::…``) and the user annotation most of their
time falls under.  Per step, ops belong to the step that launched them
(``launching_steps``).  Ops are counted once into (device, group, step) cells with
bincounts; no Python object per event.

*Overlap*: per device and per launching step, the busy union split into compute (kernels
and XLA ops that are no collective), copies (memcpy, memset, XLA async copies) and
collectives (``is_collective_kernel``), with how much of the copies and collectives ran
while compute ran (HTA's communication/computation overlap).  The busy union per device
and per launching step is the gap analysis' own; compute covers all of it but what the
copies and collectives alone cover, so only the windows of those few ops are looked at
(``fill_overlap``), each track's ops found by its sorted starts and ends.
"""
from __future__ import annotations

import os
import re
from typing import NamedTuple

import numpy as np

from ...trace.classify import COLLECTIVE_HINTS, COLLECTIVE_NAME, frame_name, memcpy_kind
from ...trace.extension import native_fn
from ...trace.model import DEVICE_ACTIVITY, EventKind as K, Trace, search
from ...trace.strings import take
from .annotations import _at, _lookup
from ..result import DeviceOpTable, OpClass, Overlap
from ..gaps.shares import LAUNCH_LATENCY_PS

try:                      # the optional C extension: one pass for the cells
    from ... import _native
except ImportError:       # pragma: no cover - no compiler where it was installed
    _native = None

_DIRECTION = {"h2d": "HtoD", "d2h": "DtoH", "d2d": "DtoD", "p2p": "PtoP"}
_HOST_KINDS = (K.CPU_OP, K.COLLECTIVE, K.TRANSFER_H2D, K.TRANSFER_D2H, K.ALLOC)
_CLIMB = 64                   # enclosing frames searched for the framework op of a launch
_DENSE_CELLS = 1 << 22        # (row × key) tables up to this size are one bincount
# groups kept per (step, device), the rest summed: as many as any caller lists (the agent
# tools' largest ``top``); an XLA step holds every HLO op of its program once, so kept
# whole the cells are as many as the ops
STEP_GROUPS = 1000
_ANON = "(anonymous namespace)"
# kernels named by their first template argument
_WRAPPER = re.compile(r"^(cutlass::(Kernel\d?|device_kernel)|cute::\w*kernel\w*)<…>$")
_DETAILS_SRC = re.compile(r"kind_src:(\w+)")
_DETAILS_DST = re.compile(r"kind_dst:(\w+)")


def fold_kernel_name(name: str) -> str:
    """A kernel's name without its template arguments, parameters, return type and
    anonymous namespaces: ``void at::native::(anonymous namespace)::foo<float, 4>(int,
    float*)`` → ``at::native::foo<…>``.  Names without templates stay; a wrapper whose
    first template argument is the kernel (``cutlass::Kernel<gemm_64x64…>``) keeps it."""
    if "<" not in name and "(" not in name and " " not in name:
        return name
    out = _fold(name, 0)
    if _WRAPPER.match(out):
        out = _fold(name, 1)
    return out


def _fold(name: str, keep: int) -> str:
    """``name`` with template arguments nested deeper than ``keep`` levels folded."""
    s = name.strip().replace(_ANON, "\x00")
    out, depth = [], 0
    for i, ch in enumerate(s):
        # "operator<" / "a < b" are no template brackets
        if ch == "<" and not (depth == 0 and (i == 0 or s[i - 1] in " =(" or
                                               s[max(0, i - 8):i] == "operator")):
            out.append("<…>" if depth == keep else "<" if depth < keep else "")
            depth += 1
        elif ch == ">" and depth > 0:
            depth -= 1
            if depth < keep:
                out.append(ch)
        elif depth == 0 and ch == "(" and out:
            break                                  # the parameter list
        elif depth <= keep:
            out.append(ch)
    s = "".join(out).strip()
    # the return type ("void", "std::enable_if<…>::type"): up to the last space outside <>
    d, cut = 0, -1
    for i, ch in enumerate(s):
        d += (ch == "<") - (ch == ">")
        if ch == " " and d == 0:
            cut = i
    s = s[cut + 1:]
    return (s or name).replace("\x00::", "").replace("\x00", _ANON)


def _copy_label(kind: int, name: str, detail: str = "") -> str:
    """``Memset``, or ``Memcpy <direction>`` from the copy's name, else from its
    ``memcpy_kind``/``memcpy_details`` stat; `` (pageable)`` when either says so."""
    if kind == K.MEMSET:
        return "Memset"
    d = _DIRECTION.get(memcpy_kind(name), "") or _DIRECTION.get(memcpy_kind(detail), "")
    if not d:
        src, dst = _DETAILS_SRC.search(detail), _DETAILS_DST.search(detail)
        if src and dst:
            host = ("pageable", "pinned", "host", "managed")
            a, b = src.group(1).lower(), dst.group(1).lower()
            d = ("HtoD" if a in host and b == "device" else "DtoH" if a == "device" and
                 b in host else "DtoD" if a == b == "device" else "")
    label = "Memcpy " + d if d else "Memcpy"
    return label + (" (pageable)" if "pageable" in (name + " " + detail).lower() else "")


def _dense(ids: np.ndarray, size: int):
    """(distinct values of ``ids`` ≥ 0 in increasing order, lookup value → dense index)
    for ids below ``size``, without sorting the column."""
    used = np.zeros(size + 1, bool)
    used[(ids if ids.size and ids.min() >= 0 else ids[ids >= 0]).astype(np.intp, copy=False)] = True
    u = np.flatnonzero(used)
    lut = np.full(size + 1, -1, np.int32)
    lut[u] = np.arange(u.shape[0], dtype=np.int32)
    return u, lut


class _Cells(NamedTuple):
    """What ``_cells`` counts.  Per kept cell (in increasing code order): ``step``, ``dl``
    (code = step × n_dl + dl), ``pos`` (int32: the position of its longest op, the
    earliest of equals), ``count``, ``time`` (summed duration).  Per dl (a row to be):
    ``r_count``, ``r_time``, ``r_pos`` (−1 where unused), ``r_short``, ``r_short_time``
    (ops flagged short), ``r_typ_count``, ``r_typ_time`` (over the typical steps).  Per
    step × device + device: ``sd_short``, ``sd_short_time``, and the cells not kept:
    ``sd_rest``, ``sd_rest_count``, ``sd_rest_time``."""
    step: np.ndarray
    dl: np.ndarray
    pos: np.ndarray
    count: np.ndarray
    time: np.ndarray
    r_count: np.ndarray
    r_time: np.ndarray
    r_pos: np.ndarray
    r_short: np.ndarray
    r_short_time: np.ndarray
    r_typ_count: np.ndarray
    r_typ_time: np.ndarray
    sd_short: np.ndarray
    sd_short_time: np.ndarray
    sd_rest: np.ndarray
    sd_rest_count: np.ndarray
    sd_rest_time: np.ndarray


def _cells(label: np.ndarray, step: np.ndarray, dev: np.ndarray | None, dur: np.ndarray,
           short: np.ndarray, typical: np.ndarray, n_steps: int, n_dev: int, n_lab: int,
           keep: int) -> _Cells:
    """The (step, device, group) cells of the ops, by the code (launching step, ``n_steps``
    for none) × ``n_dl`` + device × ``n_lab`` + group, with ``n_dl`` = ``n_dev`` ×
    ``n_lab`` (``dev`` None: one device); the cells folded into rows, the rows' sums over
    the ``typical`` steps (bool per step) and (step, device) short-kernel sums (see
    ``_Cells``).  Of each (step, device) the ``keep`` cells first in its step view (most
    time, then the row with most time, then the lower group; 0: all) are returned, the
    others summed.  One native pass where the extension is built."""
    n_dl = n_dev * n_lab
    size = n_dl * (n_steps + 1)
    native = None if os.environ.get("TB_PERFDIAG_NO_NATIVE") else \
        getattr(_native, "op_cells", None)
    # the native pass holds an int32 per code: as much as 16 bytes an op is less than the
    # numpy path needs (an XLA trace: every HLO op of every step a code of its own)
    if native is not None and size <= max(_DENSE_CELLS * 4, 4 * label.shape[0]) \
            and label.shape[0] < 2 ** 31 - 1:
        # the steps as narrow as they come (int8 where few: no int32 copy of them)
        stp = step if step.dtype in (np.int8, np.int16, np.int32, np.int64) else \
            step.astype(np.int32)
        got = native(np.ascontiguousarray(label, np.int32), np.ascontiguousarray(stp),
                     b"" if dev is None else np.ascontiguousarray(dev, np.int32),
                     np.ascontiguousarray(dur, np.int64), np.ascontiguousarray(short, np.bool_),
                     np.ascontiguousarray(typical, np.bool_), n_steps, n_dev, n_lab, keep)
        return _Cells(*(np.frombuffer(b, np.int32) for b in got[:3]),
                      *(np.frombuffer(b, np.int64) for b in got[3:]))
    st = step.astype(np.int64)
    st[st < 0] = n_steps
    code = st * n_dl + label
    del st
    if dev is not None:
        code += dev.astype(np.int64) * n_lab
    if size <= _DENSE_CELLS * 4:
        sc = np.bincount(code, minlength=size)
        nz = np.flatnonzero(sc)
        lut = np.full(size, -1, np.int32)
        lut[nz] = np.arange(nz.shape[0], dtype=np.int32)
        slot = lut[code]
        del lut
        sc = sc[nz]
    else:
        nz, slot = np.unique(code, return_inverse=True)
        slot = slot.reshape(-1).astype(np.int32)
        sc = np.bincount(slot, minlength=nz.shape[0])
    n_cells = nz.shape[0]
    c_st, c_dl = np.divmod(nz, n_dl)
    stime = _sum(slot, n_cells, dur)
    s_pos = np.empty(n_cells, np.int64)
    if n_cells == code.shape[0]:              # one op per cell (XLA: an HLO op per step)
        smax = stime
        s_pos[slot] = np.arange(n_cells)
    else:
        smax = np.zeros(n_cells, np.int64)
        np.maximum.at(smax, slot, dur)
        at = np.flatnonzero(dur == smax[slot])[::-1]
        s_pos[slot[at]] = at
        del at
    # rows: the earliest op of the row's longest duration
    r_tim = _sum(c_dl, n_dl, stime)
    rmax = np.full(n_dl, -1, np.int64)
    np.maximum.at(rmax, c_dl, smax)
    hit = np.flatnonzero(smax == rmax[c_dl])
    r_pos = np.full(n_dl, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(r_pos, c_dl[hit], s_pos[hit])
    r_pos[rmax < 0] = -1
    k = np.flatnonzero(short)
    k_dl = c_dl[slot[k]]
    n_dv = n_dl // n_lab
    sd = c_st[slot[k]] * n_dv + k_dl // n_lab
    n_sd = (n_steps + 1) * n_dv
    typ = np.append(np.asarray(typical, bool), False)[c_st]
    # the cells in step-view order within each (step, device); those past ``keep`` summed
    c_sd = c_st * n_dv + c_dl // n_lab
    order = np.lexsort((c_dl, -r_tim[c_dl], -stime, c_sd))
    by = c_sd[order]
    rank = np.arange(n_cells) - np.searchsorted(by, by)
    kept = np.zeros(n_cells, bool)
    kept[order[rank < keep] if keep > 0 else order] = True
    out = np.flatnonzero(kept)
    cut = np.flatnonzero(~kept)
    return _Cells(c_st[out].astype(np.int32), c_dl[out].astype(np.int32),
                  s_pos[out].astype(np.int32), sc[out].astype(np.int64), stime[out],
                  _sum(c_dl, n_dl, sc), r_tim, r_pos,
                  _sum(k_dl, n_dl), _sum(k_dl, n_dl, dur[k]),
                  _sum(c_dl[typ], n_dl, sc[typ]), _sum(c_dl[typ], n_dl, stime[typ]),
                  _sum(sd, n_sd), _sum(sd, n_sd, dur[k]),
                  _sum(c_sd[cut], n_sd), _sum(c_sd[cut], n_sd, sc[cut]),
                  _sum(c_sd[cut], n_sd, stime[cut]))


def _sum(key: np.ndarray, n: int, w: np.ndarray | None = None) -> np.ndarray:
    """Exact int64 sums of ``w`` (ones when None) per ``key`` in ``[0, n)``: a bincount's
    float weights would round past 2**53."""
    out = np.zeros(n, np.int64)
    np.add.at(out, key, 1 if w is None else w)
    return out


def _pick(values, idx: np.ndarray) -> list:
    """``[values[i] for i in idx]``, without a Python frame per item (the trace's strings
    decoded in one call)."""
    return take(values, idx.tolist())


def _labels(trace: Trace, ops: np.ndarray, kind: np.ndarray, memo: dict):
    """(label id per op, label strings, op class per label): the group name of each op
    (``kind``: the ops' EventKind).  Names are worked out once per distinct string."""
    hlo = _lookup(trace.stats.get("hlo_op"), ops, memo)
    copy = np.flatnonzero((kind == K.MEMCPY) | (kind == K.MEMSET))
    strings = trace.strings
    covered = hlo >= 0
    covered[copy] = True
    if covered.all():
        # every op an HLO op or a copy (XLA): the instruction is the group; the copies'
        # groups come below
        u, lut = _dense(hlo, len(strings))
        out = _at(lut, hlo)
        labels = _pick(strings, u)
    else:
        name = trace.name[ops]
        # one key per op: its HLO instruction (odd) or its name (even)
        key = np.where(hlo >= 0, hlo.astype(np.int64) * 2 + 1, name.astype(np.int64) * 2)
        u, lut = _dense(key, 2 * len(strings) + 1)
        out = lut[key]
        del key
        # HLO names stand as they are; only kernel names are folded
        labels = _pick(strings, u >> 1)
        for i in np.flatnonzero((u & 1) == 0).tolist():
            labels[i] = fold_kernel_name(labels[i])
    if copy.size:
        # copies and sets by direction, from their name or their memcpy_kind /
        # memcpy_details stat: (kind, name, detail) triples are few
        sub = ops[copy]
        detail = np.full(copy.shape[0], -1, np.int64)
        for st in ("memcpy_details", "memcpy_kind"):
            sv = trace.stats.get(st)
            if sv is not None and sv.is_string:
                v = _lookup(sv, sub, None).astype(np.int64)
                detail = np.where(v >= 0, v, detail)
        trip = np.stack([kind[copy].astype(np.int64), trace.name[sub].astype(np.int64), detail], 1)
        tu, inv = np.unique(trip, axis=0, return_inverse=True)
        cl = [_copy_label(k, strings[n], strings[x] if x >= 0 else "") for k, n, x in tu.tolist()]
        names = list(dict.fromkeys(cl))
        at = {lb: len(labels) + i for i, lb in enumerate(names)}
        labels += names
        out[copy] = np.array([at[lb] for lb in cl], np.int32)[inv.reshape(-1)]
    # the same label from several strings is one group
    index = dict.fromkeys(labels)
    if len(index) < len(labels):
        index = {lb: i for i, lb in enumerate(index)}
        remap = np.array([index[lb] for lb in labels], np.int32)
        out = remap[out]
        labels = list(index)
    klass = _classes(labels)
    coll = trace.stats.get("hlo_collective")
    if coll is not None and ops.size:
        # XLA collectives whose names do not say so (JAX's ``psum.7``): by their opcode
        has = coll.lookup(ops)[1]
        if has.any():
            klass[np.unique(out[has])] = OpClass.COLLECTIVE
    return out, labels, klass


# copies; XLA's asynchronous copies (TPU ``copy-start``/``copy-done``: waits on a DMA) too
_COPY_LABEL = re.compile(r"^(Memcpy\b|copy-(start|done)(\.\d+)?$)", re.M)
_SET_LABEL = re.compile(r"^Memset$", re.M)


def _classes(labels: list) -> np.ndarray:
    """OpClass per label, from all labels joined in one text: collectives by one regex
    pass (only where a hint of one is in the text); copies and sets, which are named
    from a line's start, by finding their first word and matching there."""
    klass = np.zeros(len(labels), np.int8)
    if not labels:
        return klass
    text = "\n".join(labels)
    starts = None
    low = text.lower()
    for rx, c, hints, where, anchored in (
            (COLLECTIVE_NAME, OpClass.COLLECTIVE, COLLECTIVE_HINTS, low, False),
            (_COPY_LABEL, OpClass.MEMCPY, ("Memcpy", "copy-"), text, True),
            (_SET_LABEL, OpClass.MEMSET, ("Memset",), text, True)):
        if not any(x in where for x in hints):      # substring search: no regex pass
            continue
        if anchored:         # a regex pass tries every position: find the words instead
            pos = [i for h in hints for i in _found(where, h) if rx.match(where, i)]
        else:
            pos = [m.start() for m in rx.finditer(where)]
        if 0 < len(pos) <= 16:       # a few: the lines before each, counted in C
            klass[[where.count("\n", 0, i) for i in pos]] = c
        elif pos:
            if starts is None:
                lens = np.fromiter(map(len, labels), np.int64, len(labels))
                starts = np.cumsum(lens + 1) - lens - 1
            klass[np.searchsorted(starts, pos, side="right") - 1] = c
    return klass


def _found(text: str, word: str):
    """Where ``word`` starts a line of ``text``."""
    i = text.find(word)
    while i >= 0:
        if i == 0 or text[i - 1] == "\n":
            yield i
        i = text.find(word, i + 1)


def _host_ops(trace: Trace, ops: np.ndarray, origin: np.ndarray,
              memo: dict) -> tuple[np.ndarray, list]:
    """(string id per op (−1 none) of the host op that launched it: ``tf_op``, else the XLA
    program it ran in (``hlo_module``: the jitted function for JAX), else the framework op
    enclosing the launch call (``aten::…`` around ``cudaLaunchKernel``); the names past
    ``trace.strings`` that ids from ``len(trace.strings)`` up stand for: ops only a graph's
    capture trace holds)."""
    out = _lookup(trace.stats.get("tf_op"), ops, memo).astype(np.int32)
    need = out < 0
    if "hlo_module" in trace.stats and need.any():
        if need.all():                        # no tf_op (JAX, PyTorch/XLA): no mask
            del out, need                     # (not held beside the programs' ids)
            out = _lookup(trace.stats["hlo_module"], ops, memo).astype(np.int32)
        else:
            prog = _lookup(trace.stats["hlo_module"], ops, memo)
            out[need] = prog[need]
            del prog
    need = np.flatnonzero(out < 0)
    if need.size:
        src = origin[ops[need]].astype(np.int64)
        ok = src >= 0
        need, cur = need[ok], src[ok]
        # the launch's own frames upwards to the first framework op (few levels)
        host_kind = np.zeros(256, bool)
        host_kind[list(_HOST_KINDS)] = True
        for _ in range(_CLIMB):
            if not cur.size:
                break
            hit = host_kind[trace.kind[cur].view(np.uint8)]
            out[need[hit]] = trace.name[cur[hit]]
            cur = trace.parent[cur[~hit]].astype(np.int64)
            need = need[~hit]
            up = cur >= 0
            cur, need = cur[up], need[up]
    if trace.format == "kineto":
        # kernels replayed from a CUDA/HIP graph: the op that captured them, or the launch
        from ..efficiency.graphs import replay_host_ops
        at, ids, extra = replay_host_ops(trace, ops)
        if at.size:
            out = out.astype(np.int64) if extra else out
            out[at] = ids
        return out, extra
    return out, []


def _dominant(row: np.ndarray, key: np.ndarray, weight: np.ndarray, n_rows: int,
              own: np.ndarray) -> np.ndarray:
    """Per row, the key (≥ 0, or −1) with the most weight.  ``own``: the key of each
    row's longest instance — the answer for every row whose ops all share it, which
    are counted no further; the others are counted densely (their own key where the
    (row × key) table would be too large)."""
    if not row.size:
        return np.full(n_rows, -1, np.int64)
    out = np.asarray(own, np.int64).copy()
    own = np.asarray(own)
    mixed = np.zeros(n_rows + 1, bool)
    # a block of ops at a time: an intp copy of the rows of 20 M ops, the gather of their
    # own keys and the mask were the analysis' peak at 40 M events
    for i in range(0, row.shape[0], _BLOCK):
        r = row[i:i + _BLOCK].astype(np.intp, copy=False)
        mixed[r[key[i:i + _BLOCK] != own[r]]] = True
    if not mixed.any():
        return out
    sel = np.concatenate([i + np.flatnonzero(mixed[row[i:i + _BLOCK].astype(np.intp, copy=False)])
                          for i in range(0, row.shape[0], _BLOCK)])
    row, key, weight = row[sel].astype(np.intp, copy=False), key[sel], weight[sel]
    u, lut = _dense(key.astype(np.int64), int(max(key.max(), 0)) + 1)
    nk = u.shape[0] + 1
    rows = np.flatnonzero(mixed[:n_rows])
    if rows.shape[0] * nk > _DENSE_CELLS:
        return out
    dense_row = np.zeros(n_rows, np.int64)
    dense_row[rows] = np.arange(rows.shape[0])
    k = np.where(key >= 0, lut[np.maximum(key, 0)] + 1, 0)
    tab = np.bincount(dense_row[row] * nk + k, weights=weight,
                      minlength=rows.shape[0] * nk).reshape(rows.shape[0], nk)
    best = tab.argmax(axis=1)
    vals = np.concatenate(([-1], u))
    out[rows] = np.where(tab.max(axis=1) > 0, vals[best], -1)
    return out


def _union_lengths(s: np.ndarray, e: np.ndarray, key: np.ndarray, n_keys: int) -> np.ndarray:
    """Per key, the length of the union of the intervals, given sorted by (key, start)
    and shifted so that no two keys' intervals touch: each interval adds what reaches
    past the intervals before it."""
    if not s.size:
        return np.zeros(n_keys, np.int64)
    reach = np.maximum.accumulate(e)
    add = np.empty_like(reach)
    add[0] = reach[0] - s[0]
    np.subtract(reach[1:], np.maximum(s[1:], reach[:-1]), out=add[1:])
    if n_keys == 1 or not key.size:
        return np.array([int(add.sum())], np.int64)
    return np.bincount(key, weights=add, minlength=n_keys).astype(np.int64)


def overlap(starts: np.ndarray, ends: np.ndarray, klass: np.ndarray, key: np.ndarray,
            n_keys: int) -> np.ndarray:
    """(n_keys, len(Overlap)) ps: the busy union per key and its split by op class."""
    out = np.zeros((n_keys, len(Overlap)), np.int64)
    if not starts.size:
        return out
    if n_keys > 1:
        # keys laid end to end, each from its own first start: one pass over thousands
        # of steps, where shifting every key by the whole trace's span takes one a key
        first = np.full(n_keys, np.iinfo(np.int64).max, np.int64)
        last = np.full(n_keys, np.iinfo(np.int64).min, np.int64)
        np.minimum.at(first, key, starts)
        np.maximum.at(last, key, ends)
        ext = np.where(last >= first, last - first + 1, 0)
        if int(ext.sum()) < 1 << 62:
            shift = (np.cumsum(ext) - ext - first)[key]
            _overlap_rows(out, starts + shift, ends + shift, klass, key)
            return out
    lo = int(starts.min())
    span = int(ends.max()) - lo + 1
    per = max((1 << 62) // span, 1)               # keys whose shifted times fit in int64
    for k0 in range(0, n_keys, per):
        n = min(per, n_keys - k0)
        sel = np.flatnonzero((key >= k0) & (key < k0 + per)) if n_keys > per else None
        if n == 1:                                 # one key: no shift
            s, e, kl = (starts, ends, klass) if sel is None else \
                (starts[sel], ends[sel], klass[sel])
            kk = np.zeros(0, np.int64)
        else:
            kk = (key if sel is None else key[sel]) - k0
            shift = kk.astype(np.int64) * span
            s = (starts if sel is None else starts[sel]) + shift
            e = (ends if sel is None else ends[sel]) + shift
            del shift
            kl = klass if sel is None else klass[sel]
        _overlap_rows(out[k0:k0 + n], s, e, kl, kk)
    return out


def _overlap_rows(blk: np.ndarray, s: np.ndarray, e: np.ndarray, kl: np.ndarray,
                  kk: np.ndarray) -> None:
    """``overlap``'s rows ``blk`` of the keys ``kk`` (empty: one key), their intervals
    shifted so that no two keys' touch."""
    n = blk.shape[0]
    o = np.argsort(s, kind="stable")              # runs already in order: cheap
    s, e, kl = s[o], e[o], kl[o]
    if kk.size:
        kk = kk[o]
    del o
    fn = native_fn("overlap_unions")
    if fn is not None:
        got = np.frombuffer(fn(s, e, np.ascontiguousarray(kl, np.int8),
                               np.ascontiguousarray(kk, np.int64) if kk.size else b"", n,
                               int(OpClass.COMPUTE), int(OpClass.COLLECTIVE),
                               int(OpClass.MEMCPY), int(OpClass.MEMSET)),
                            np.int64).reshape(n, 6)
        _overlap_columns(blk, *got.T)
        return
    busy = _union_lengths(s, e, kk, n)
    zero = np.zeros(n, np.int64)

    def u(mask):
        # a class that is every op or none needs no pass of its own; a large one is
        # the others as empty intervals (no gathers), a small one its own ops
        cnt = int(np.count_nonzero(mask))
        if not cnt:
            return zero
        if cnt == mask.shape[0]:
            return busy
        if 4 * cnt > mask.shape[0]:
            return _union_lengths(s, np.where(mask, e, s), kk, n)
        return _union_lengths(s[mask], e[mask], kk[mask] if kk.size else kk, n)
    c = kl == OpClass.COMPUTE
    m = (kl == OpClass.MEMCPY) | (kl == OpClass.MEMSET)
    x = kl == OpClass.COLLECTIVE
    u_comp, u_copy, u_coll = u(c), u(m), u(x)
    u_cm = u(c | m) if m.any() else u_comp
    u_cx = u(c | x) if x.any() else u_comp
    _overlap_columns(blk, busy, u_comp, u_copy, u_coll, u_cm, u_cx)


def _overlap_columns(blk, busy, u_comp, u_copy, u_coll, u_cm, u_cx) -> None:
    """The overlap rows from the six unions: all, compute, copies, collectives, compute
    with copies, compute with collectives."""
    blk[:, Overlap.BUSY] = busy
    blk[:, Overlap.COMPUTE] = u_comp
    blk[:, Overlap.COPIES] = u_copy
    blk[:, Overlap.COLLECTIVES] = u_coll
    blk[:, Overlap.COPIES_UNDER_COMPUTE] = u_comp + u_copy - u_cm
    blk[:, Overlap.COLLECTIVES_UNDER_COMPUTE] = u_comp + u_coll - u_cx
    # the exposed parts partition the busy union with compute
    blk[:, Overlap.COPIES_EXPOSED] = u_cm - u_comp
    blk[:, Overlap.COLLECTIVES_EXPOSED] = busy - u_cm


def device_op_table(trace: Trace, ops: np.ndarray, op_step: np.ndarray, n_steps: int,
                    origin: np.ndarray, path_of_op: np.ndarray | None = None,
                    paths: list | None = None, memo: dict | None = None,
                    defer_overlap: bool = False, typical: np.ndarray | None = None,
                    op_rows: list | None = None):
    """``ops``: the busy set's device ops, ascending; ``op_step``: the step that launched
    each (−1 none); ``origin``: the host call behind every event (−1 none);
    ``path_of_op``/``paths``: the user annotation path of each op
    (``annotations.op_paths``), when at hand; ``memo``: that pass's stat lookups on the
    same ``ops``; ``typical``: bool per step, the steps a typical step averages (None:
    all); ``op_rows``: a list to receive (the ops kept, the table row of each), for the
    efficiency sums.  ``defer_overlap``: leave the overlap columns zero and return
    ``(table, (events, OpClass, step, device) of the ops that are no compute)`` for
    ``fill_overlap``, which needs the busy figures the gap analysis computes.

    Ops are counted once, into (device, group, step) cells; rows and their totals,
    longest instances and short kernels come from the cells."""
    n_dev = len(trace.devices)
    # events lie by track and ops ascend: each track's ops are one run
    runs = np.diff(np.searchsorted(ops, trace.track_bounds()))
    dev = None                 # the device of each op: needed with several devices only
    if n_dev > 1 or not (trace.track_device[:runs.shape[0]][runs > 0] >= 0).all():
        dev = np.repeat(trace.track_device, runs)
        keep = dev >= 0
        if not keep.all():
            ops, op_step, dev = ops[keep], op_step[keep], dev[keep]
            if path_of_op is not None:
                path_of_op = path_of_op[keep]
            memo = None
        del keep
    del runs
    if not ops.size:
        z = np.zeros(0, np.int64)
        empty = DeviceOpTable.empty(n_dev, n_steps)
        return (empty, (z, z.astype(np.int8), z, z)) if defer_overlap else empty
    memo = {} if memo is None else memo
    kind_of_ops = trace.kind[ops]
    label, names, klass_of = _labels(trace, ops, kind_of_ops, memo)
    n_lab, S1 = len(names), n_steps + 1
    dur = trace.dur[ops]
    DL = n_dev * n_lab
    # kernels under the launch latency: a GPU's (TPU and XLA:CPU ops are not launched one
    # by one from the host)
    gpu = np.array([dv.kind == "gpu" for dv in trace.devices] + [False], bool)
    if not gpu.any():
        short = np.zeros(ops.shape[0], bool)
    else:
        short = (kind_of_ops == K.KERNEL) & (dur < LAUNCH_LATENCY_PS)
        if not gpu[:-1].all():
            short &= gpu[dev]
    if typical is None:
        typical = np.ones(n_steps, bool)
    cc = _cells(label, op_step, dev if n_dev > 1 else None, dur, short, typical, n_steps,
                n_dev, n_lab, STEP_GROUPS)
    # rows: (device, group) pairs, by device then most time first
    cells = np.flatnonzero(cc.r_count)
    cells = cells[np.lexsort((-cc.r_time[cells], cells // n_lab))]
    n_rows = cells.shape[0]
    row_of = np.full(DL, -1, np.int32)
    row_of[cells] = np.arange(n_rows)
    c_row = _at(row_of, cc.dl)
    r_lab = cells % n_lab
    pos = cc.r_pos[cells]
    longest = ops[pos]
    hcat = _lookup(trace.stats.get("hlo_category"), longest, {}) \
        if "hlo_category" in trace.stats else np.full(n_rows, -1)
    # the host op and the annotation that most of each row's time came from; where the
    # table is too large to count, those of its longest instance
    row = _at(row_of, label) if n_dev == 1 else row_of[dev.astype(np.int64) * n_lab + label]
    # short kernels per row, device and (step, device) (none off GPUs)
    r_sc, r_st = cc.r_short[cells], cc.r_short_time[cells]
    sd_sc = cc.sd_short.reshape(S1, n_dev)
    sd_st = cc.sd_short_time.reshape(S1, n_dev)
    d_short, d_short_t = sd_sc.sum(axis=0), sd_st.sum(axis=0)
    st_short, st_short_t = sd_sc[:n_steps], sd_st[:n_steps]
    del short
    host, host_extra = _host_ops(trace, ops, origin, memo)
    r_host = _dominant(row, host, dur, n_rows, host[pos])
    del host
    if path_of_op is not None and paths:
        r_path = _dominant(row, path_of_op, dur, n_rows, path_of_op[pos])
    else:
        r_path = np.full(n_rows, -1)
    if op_rows is not None:
        op_rows.append((ops, row))
    del row
    # overlap per device and per (step, device)
    nc = None
    if defer_overlap:
        other = klass_of != OpClass.COMPUTE
        sel = np.flatnonzero(_at(other, label)) if other.any() else np.zeros(0, np.int64)
        nc = (ops[sel], klass_of[label[sel]], op_step[sel].astype(np.int64),
              dev[sel] if dev is not None else np.zeros(sel.shape[0], np.int32))
        ov = np.zeros((n_dev, len(Overlap)), np.int64)
        sov = np.zeros((n_steps * n_dev, len(Overlap)), np.int64)
    else:
        kl = klass_of[label]
        ts = trace.ts[ops]
        end = ts + dur
        dv = dev.astype(np.int64) if n_dev > 1 else np.zeros(ts.shape[0], np.int64)
        ov = overlap(ts, end, kl, dv, n_dev)
        st = np.where(op_step < 0, n_steps, op_step).astype(np.int64)
        sk = st * n_dev + dv if n_dev > 1 else st
        sov = overlap(ts, end, kl, sk, S1 * n_dev)[: n_steps * n_dev]
        del ts, end, sk, kl, st
    del label
    c_st = cc.step
    in_step = c_st < n_steps
    if in_step.all():                         # every op launched by a step: no copies
        in_step = slice(None)

    n_strings = len(trace.strings)

    def strs(ids, make):
        u, inv = np.unique(np.asarray(ids), return_inverse=True)
        return _pick([make(x) for x in u.tolist()], inv.reshape(-1))
    s_cells = _at(ops, cc.pos[in_step])
    table = DeviceOpTable(
        device=(cells // n_lab).astype(np.int32), name=_pick(names, r_lab),
        klass=klass_of[r_lab].astype(np.int8), count=cc.r_count[cells],
        time=cc.r_time[cells], short_count=r_sc, short_time=r_st,
        longest=longest, longest_ts=trace.ts[longest], longest_dur=trace.dur[longest],
        longest_track=trace.track[longest].astype(np.int32, copy=False),
        category=strs(hcat, lambda x: trace.strings[x] if x >= 0 else ""),
        host_op=strs(r_host, lambda x: "" if x < 0 else frame_name(
            trace.strings[x] if x < n_strings else host_extra[x - n_strings])),
        annotation=strs(r_path, lambda x: " › ".join(paths[x]) if x >= 0 else ""),
        step_row=c_row[in_step].astype(np.int32), step=c_st[in_step],
        step_count=cc.count[in_step], step_time=cc.time[in_step],
        step_longest=s_cells, step_longest_ts=trace.ts[s_cells],
        step_longest_dur=trace.dur[s_cells],
        step_longest_track=trace.track[s_cells].astype(np.int32, copy=False),
        step_rest=cc.sd_rest.reshape(S1, n_dev)[:n_steps],
        step_rest_count=cc.sd_rest_count.reshape(S1, n_dev)[:n_steps],
        step_rest_time=cc.sd_rest_time.reshape(S1, n_dev)[:n_steps],
        typical_count=cc.r_typ_count[cells], typical_time=cc.r_typ_time[cells],
        overlap=ov, step_overlap=sov.reshape(n_steps, n_dev, len(Overlap)),
        short_count_dev=d_short, short_time_dev=d_short_t,
        step_short_count=np.ascontiguousarray(st_short),
        step_short_time=np.ascontiguousarray(st_short_t),
        latency_ps=int(LAUNCH_LATENCY_PS))
    return (table, nc) if defer_overlap else table


def _window_cover(trace: Trace, slices: list, nc: np.ndarray, a: np.ndarray, b: np.ndarray,
                  win_key: np.ndarray, step_of: np.ndarray | None,
                  kinds) -> np.ndarray:
    """Per window [a, b): the length of it covered by the device's compute ops (of the
    window's step when ``step_of`` is given, ``win_key`` being that step), read off the
    tracks' sorted ends: the device's tracks are serial (their ends are sorted).
    ``slices``: their event ranges (``Trace.track_slices``)."""
    if not a.size:
        return np.zeros(0, np.int64)
    parts_w, parts_e = [], []
    for lo, hi in slices:
        if hi <= lo:
            continue
        st = trace.ts[lo:hi]
        i0 = _search_ends(trace, lo, hi, a)
        i1 = np.maximum(np.searchsorted(st, b, side="left"), i0)
        n = i1 - i0
        w = np.repeat(np.arange(a.shape[0]), n)
        e = lo + i0[w] + (np.arange(w.shape[0]) - np.repeat(np.cumsum(n) - n, n))
        parts_w.append(w)
        parts_e.append(e)
    w = np.concatenate(parts_w) if parts_w else np.zeros(0, np.int64)
    e = np.concatenate(parts_e) if parts_e else np.zeros(0, np.int64)
    ok = np.isin(trace.kind[e], kinds) & ~np.isin(e, nc)
    if step_of is not None:
        ok &= step_of[e] == win_key[w]
    w, e = w[ok], e[ok]
    s = np.maximum(trace.ts[e], a[w])
    t = np.minimum(trace.end_of(e), b[w])
    keep = t > s
    w, s, t = w[keep], s[keep], t[keep]
    if not w.size:
        return np.zeros(a.shape[0], np.int64)
    # one union over all windows, each shifted apart from the others
    sh = w * (int((b - a).max()) + 1) - a[w]
    s, t = s + sh, t + sh
    o = np.argsort(s, kind="stable")
    return _union_lengths(s[o], t[o], w[o], a.shape[0])


_BLOCK = 1 << 20


def _ends_sorted(trace: Trace, lo: int, hi: int) -> bool:
    """Whether the ends of events [lo, hi) never fall, read a block at a time (a 20 M-op
    track's ends were 160 MB at the analysis' peak)."""
    prev = None
    for i in range(lo, hi, _BLOCK):
        j = min(i + _BLOCK, hi)
        en = trace.ts[i:j] + trace.dur[i:j]
        if (prev is not None and en[0] < prev) or not (en[1:] >= en[:-1]).all():
            return False
        prev = en[-1]
    return True


def _search_ends(trace: Trace, lo: int, hi: int, keys: np.ndarray) -> np.ndarray:
    """``np.searchsorted(ends, keys, side="right")`` over the sorted ends of events
    [lo, hi), without a column of them: one binary search for all keys, reading only the
    ends it probes."""
    m = hi - lo
    left = np.zeros(keys.shape[0], np.int64)
    right = np.full(keys.shape[0], m, np.int64)
    while True:
        on = left < right
        if not on.any():
            return left
        mid = (left + right) // 2
        at = lo + np.minimum(mid, m - 1)
        above = (trace.ts[at] + trace.dur[at]) > keys
        right = np.where(on & above, mid, right)
        left = np.where(on & ~above, mid + 1, left)


def fill_overlap(trace: Trace, table: DeviceOpTable, nc, op_step_all: np.ndarray, d: int,
                 ops: np.ndarray, busy: int, step_busy: np.ndarray | None,
                 kernels_only: bool) -> None:
    """Fills device ``d``'s rows of ``table.overlap`` (and of ``step_overlap`` when
    ``step_busy``, the union of the ops each step launched on it, is given) from its busy
    time, its busy set ``ops`` (ascending) and the few ops that are no compute: compute
    covers everything else, so only the windows of copies and collectives need a look at
    the compute ops around them.  A device whose tracks are not serial (TPU ops nest:
    a while loop holds its body's ops) gets the full computation."""
    if busy <= 0:
        return
    nc_ev, nc_cls, nc_step, nc_dev = nc
    mine = nc_dev == d
    ev, cls, stp = nc_ev[mine], nc_cls[mine], nc_step[mine]
    n_steps = table.step_overlap.shape[0]
    slices = trace.track_slices(np.flatnonzero(trace.track_device == d))
    # windows are read off each track's sorted ends
    serial = not ev.size or all(_ends_sorted(trace, lo, hi) for lo, hi in slices)
    if not serial or (step_busy is None and n_steps):
        # a track whose ends are not sorted, or steps by time (no launched union per
        # step): every op of the device
        _full_overlap(trace, table, d, ops, ev, cls, op_step_all, bool(n_steps))
        return
    kinds = (K.KERNEL,) if kernels_only else DEVICE_ACTIVITY
    table.overlap[d] = _overlap_from(trace, slices, ev, cls, np.zeros(ev.shape[0], np.int64),
                                     1, np.array([busy]), None, kinds)[0]
    if step_busy is not None:
        key = np.where(stp >= 0, stp, n_steps).astype(np.int64)
        bz = np.concatenate([np.maximum(step_busy, 0), [0]])
        table.step_overlap[:, d] = _overlap_from(trace, slices, ev, cls, key, n_steps + 1, bz,
                                                 op_step_all, kinds)[:n_steps]


def _overlap_from(trace, slices, ev, cls, key, n_keys, busy, step_of, kinds):
    """One device's overlap rows per key from its busy time per key and its ops that
    are no compute (``ev``, ``cls``, their ``key``); the device's tracks are serial."""
    out = np.zeros((n_keys, len(Overlap)), np.int64)
    out[:, Overlap.BUSY] = busy
    out[:, Overlap.COMPUTE] = busy
    if not ev.size:
        return out
    s, e = trace.ts[ev], trace.end_of(ev)
    exposed = {}
    for name, mask in (("nc", np.ones(ev.shape[0], bool)),
                       ("copy", (cls == OpClass.MEMCPY) | (cls == OpClass.MEMSET)),
                       ("coll", cls == OpClass.COLLECTIVE)):
        if not mask.any():
            exposed[name] = (np.zeros(n_keys, np.int64), np.zeros(n_keys, np.int64))
            continue
        o = np.lexsort((s[mask], key[mask]))
        ks, ss, es = key[mask][o], s[mask][o], e[mask][o]
        # the class's union per key, as windows (keys apart by a shift)
        lo = int(ss.min())
        span = int(es.max()) - lo + 1
        sh = ks * span - lo
        reach = np.maximum.accumulate(es + sh)
        new = np.ones(ss.shape[0], bool)
        new[1:] = (ss[1:] + sh[1:]) > reach[:-1]
        first = np.flatnonzero(new)
        last = np.r_[first[1:], ss.shape[0]] - 1
        a, wk = ss[first], ks[first]
        b = reach[last] - sh[first]
        cov = _window_cover(trace, slices, ev, a, b, wk, step_of, kinds)
        total = np.bincount(wk, weights=b - a, minlength=n_keys).astype(np.int64)
        under = np.bincount(wk, weights=cov, minlength=n_keys).astype(np.int64)
        exposed[name] = (total, total - under)
    nc_exp = exposed["nc"][1]
    comp = busy - nc_exp
    (copy_all, copy_exp), (coll_all, coll_exp) = exposed["copy"], exposed["coll"]
    out[:, Overlap.COMPUTE] = comp
    out[:, Overlap.COPIES] = copy_all
    out[:, Overlap.COLLECTIVES] = coll_all
    out[:, Overlap.COPIES_UNDER_COMPUTE] = copy_all - copy_exp
    out[:, Overlap.COLLECTIVES_UNDER_COMPUTE] = coll_all - coll_exp
    out[:, Overlap.COPIES_EXPOSED] = copy_exp
    out[:, Overlap.COLLECTIVES_EXPOSED] = busy - comp - copy_exp
    return out


def _full_overlap(trace, table, d, ops, nc_ev, nc_cls, op_step_all, per_step):
    """Device ``d``'s overlap rows from every op of its busy set ``ops`` (ascending);
    ``nc_ev``/``nc_cls``: its ops that are no compute, with their class."""
    kl = np.zeros(ops.shape[0], np.int8)
    k = search(ops, nc_ev)
    hit = (k < ops.shape[0]) & (ops[np.minimum(k, ops.shape[0] - 1)] == nc_ev)
    kl[k[hit]] = nc_cls[hit]
    ts, end = trace.ts[ops], trace.end_of(ops)
    table.overlap[d] = overlap(ts, end, kl, np.zeros(ops.shape[0], np.int64), 1)[0]
    if per_step:
        n_steps = table.step_overlap.shape[0]
        st = op_step_all[ops]
        key = np.where(st >= 0, st, n_steps).astype(np.int64)
        table.step_overlap[:, d] = overlap(ts, end, kl, key, n_steps + 1)[:n_steps]
