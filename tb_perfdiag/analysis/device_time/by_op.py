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
from typing import NamedTuple

import numpy as np

from ...trace.classify import frame_name
from ...trace.model import EventKind as K, Trace
from .annotations import _at, _lookup
from ..result import DeviceOpTable, OpClass, Overlap
from ..gaps.shares import LAUNCH_LATENCY_PS
# fill_overlap stays reachable here (``by_op.fill_overlap``)
from .overlap import _BLOCK, fill_overlap, overlap  # noqa: F401
# fold_kernel_name stays reachable here (``by_op.fold_kernel_name``)
from .op_groups import _dense, _labels, _pick, fold_kernel_name  # noqa: F401

try:                      # the optional C extension: one pass for the cells
    from ... import _native
except ImportError:       # pragma: no cover - no compiler where it was installed
    _native = None

_HOST_KINDS = (K.CPU_OP, K.COLLECTIVE, K.TRANSFER_H2D, K.TRANSFER_D2H, K.ALLOC)
_CLIMB = 64                   # enclosing frames searched for the framework op of a launch
_DENSE_CELLS = 1 << 22        # (row × key) tables up to this size are one bincount
# groups kept per (step, device), the rest summed: as many as any caller lists (the agent
# tools' largest ``top``); an XLA step holds every HLO op of its program once, so kept
# whole the cells are as many as the ops
STEP_GROUPS = 1000


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
    ops, op_step, dev, path_of_op, memo = _on_devices(trace, ops, op_step, path_of_op, memo)
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
    short = _short_kernels(trace, kind_of_ops, dur, dev)
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
    r_host, r_path, host_extra = _row_host_and_path(trace, ops, origin, memo, row, dur, n_rows,
                                                    pos, path_of_op, paths)
    if op_rows is not None:
        op_rows.append((ops, row))
    del row
    nc, ov, sov = _table_overlap(trace, ops, dur, label, klass_of, op_step, dev, n_steps,
                                 defer_overlap)
    del label
    c_st = cc.step
    in_step = c_st < n_steps
    if in_step.all():                         # every op launched by a step: no copies
        in_step = slice(None)
    s_cells = _at(ops, cc.pos[in_step])
    n_strings = len(trace.strings)
    table = DeviceOpTable(
        device=(cells // n_lab).astype(np.int32), name=_pick(names, r_lab),
        klass=klass_of[r_lab].astype(np.int8), count=cc.r_count[cells],
        time=cc.r_time[cells], short_count=r_sc, short_time=r_st,
        longest=longest, longest_ts=trace.ts[longest], longest_dur=trace.dur[longest],
        longest_track=trace.track[longest].astype(np.int32, copy=False),
        category=_strs(hcat, lambda x: trace.strings[x] if x >= 0 else ""),
        host_op=_strs(r_host, lambda x: "" if x < 0 else frame_name(
            trace.strings[x] if x < n_strings else host_extra[x - n_strings])),
        annotation=_strs(r_path, lambda x: " › ".join(paths[x]) if x >= 0 else ""),
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


def _on_devices(trace: Trace, ops, op_step, path_of_op, memo):
    """(ops, op_step, device of each op (None with one device, where every op is on
    it), path_of_op, memo) of the ops on a device (the memo is dropped where some are
    not: its lookups are of all the ops)."""
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
    return ops, op_step, dev, path_of_op, memo


def _short_kernels(trace: Trace, kind_of_ops, dur, dev) -> np.ndarray:
    """Per op, whether it is a kernel under the launch latency: a GPU's (TPU and XLA:CPU
    ops are not launched one by one from the host)."""
    gpu = np.array([dv.kind == "gpu" for dv in trace.devices] + [False], bool)
    if not gpu.any():
        short = np.zeros(kind_of_ops.shape[0], bool)
    else:
        short = (kind_of_ops == K.KERNEL) & (dur < LAUNCH_LATENCY_PS)
        if not gpu[:-1].all():
            short &= gpu[dev]
    return short


def _row_host_and_path(trace: Trace, ops, origin, memo, row, dur, n_rows, pos, path_of_op,
                       paths):
    """(per row, the host op and the annotation most of its time came from (−1 none); the
    host op names past ``trace.strings``, ``_host_ops``')."""
    host, host_extra = _host_ops(trace, ops, origin, memo)
    r_host = _dominant(row, host, dur, n_rows, host[pos])
    del host
    if path_of_op is not None and paths:
        r_path = _dominant(row, path_of_op, dur, n_rows, path_of_op[pos])
    else:
        r_path = np.full(n_rows, -1)
    return r_host, r_path, host_extra


def _table_overlap(trace: Trace, ops, dur, label, klass_of, op_step, dev, n_steps,
                   defer_overlap):
    """(the ops that are no compute, for ``fill_overlap``, when deferred; overlap per
    device; overlap per (step, device)): zeros when deferred."""
    n_dev = len(trace.devices)
    S1 = n_steps + 1
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
    return nc, ov, sov


def _strs(ids, make):
    u, inv = np.unique(np.asarray(ids), return_inverse=True)
    return _pick([make(x) for x in u.tolist()], inv.reshape(-1))


