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

Groups carry calls, total time, the calls shorter than the launch latency (the
launch-bound story), their longest instance, the host op that launched most of their
time (the framework op enclosing the launch: ``aten::…``; else ``tf_op``; else the XLA
program, which for JAX is the jitted function) and the user annotation most of their time
falls under.  Per step, ops belong to the step that launched them (``launching_steps``).

*Overlap*: per device and per launching step, the busy union split into compute (kernels
and XLA ops that are no collective), copies (memcpy and memset) and collectives
(``is_collective_kernel``), with how much of the copies and collectives ran while compute
ran (HTA's communication/computation overlap).  One ordering of the ops per key (device;
device and step) and a handful of linear passes: no Python object per event.
"""
from __future__ import annotations

import re

import numpy as np

from ..trace.classify import is_collective_kernel, memcpy_kind
from ..trace.model import EventKind as K, Trace
from .annotations import _lookup
from .result import DeviceOpTable, OpClass, Overlap
from .shares import LAUNCH_LATENCY_PS

_DIRECTION = {"h2d": "HtoD", "d2h": "DtoH", "d2d": "DtoD", "p2p": "PtoP"}
_HOST_KINDS = (K.CPU_OP, K.COLLECTIVE, K.TRANSFER_H2D, K.TRANSFER_D2H, K.ALLOC)
_CLIMB = 64                   # enclosing frames searched for the framework op of a launch
_DENSE_CELLS = 1 << 22        # (row × key) tables up to this size are one bincount
_ANON = "(anonymous namespace)"
# kernels named by their first template argument
_WRAPPER = re.compile(r"^(cutlass::(Kernel\d?|device_kernel)|cute::\w*kernel\w*)<…>$")
# XLA's asynchronous copies (TPU ``copy-start``/``copy-done``: waits on a DMA) are copies
_ASYNC_COPY = re.compile(r"^copy-(start|done)(\.\d+)?$")
_DETAILS_SRC = re.compile(r"kind_src:(\w+)")
_DETAILS_DST = re.compile(r"kind_dst:(\w+)")


def fold_kernel_name(name: str) -> str:
    """A kernel's name without its template arguments, parameters, return type and
    anonymous namespaces: ``void at::native::(anonymous namespace)::foo<float, 4>(int,
    float*)`` → ``at::native::foo<…>``.  Names without templates stay; a wrapper whose
    first template argument is the kernel (``cutlass::Kernel<gemm_64x64…>``) keeps it."""
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
    used[ids[ids >= 0]] = True
    u = np.flatnonzero(used)
    lut = np.full(size + 1, -1, np.int32)
    lut[u] = np.arange(u.shape[0], dtype=np.int32)
    return u, lut


def _labels(trace: Trace, ops: np.ndarray, kind: np.ndarray, memo: dict):
    """(label id per op, label strings, op class per label): the group name of each op
    (``kind``: the ops' EventKind)."""
    name = trace.name[ops]
    hlo = _lookup(trace.stats.get("hlo_op"), ops, memo).astype(np.int64)
    copy = (kind == K.MEMCPY) | (kind == K.MEMSET)
    hlo = np.where(copy, -1, hlo)
    # a copy's direction: its name, else Kineto's memcpy_kind or XSpace's memcpy_details
    detail = np.full(ops.shape[0], -1, np.int64)
    for st in ("memcpy_details", "memcpy_kind"):
        s = trace.stats.get(st)
        if s is not None and s.is_string and copy.any():
            v = _lookup(s, ops, memo).astype(np.int64)
            detail = np.where(copy & (v >= 0), v, detail)
    labels: list = []
    index: dict = {}

    def intern(lbl):
        i = index.get(lbl)
        if i is None:
            i = index[lbl] = len(labels)
            labels.append(lbl)
        return i

    n_str = len(trace.strings)
    out = np.full(ops.shape[0], -1, np.int32)
    # XLA ops by their HLO instruction
    h = hlo >= 0
    if h.any():
        u, lut = _dense(hlo[h], n_str)
        m = np.array([intern(trace.strings[x]) for x in u.tolist()], np.int32)
        out[h] = m[lut[hlo[h]]]
    # copies and sets by direction: (kind, name, detail) triples are few
    if copy.any():
        trip = np.stack([kind[copy].astype(np.int64), name[copy].astype(np.int64),
                         detail[copy]], axis=1)
        u, inv = np.unique(trip, axis=0, return_inverse=True)
        m = np.array([intern(_copy_label(k, trace.strings[n], trace.strings[x] if x >= 0 else ""))
                      for k, n, x in u.tolist()], np.int32)
        out[copy] = m[inv.reshape(-1)]
    rest = out < 0
    if rest.any():
        u, lut = _dense(name[rest].astype(np.int64), n_str)
        m = np.array([intern(fold_kernel_name(trace.strings[x])) for x in u.tolist()], np.int32)
        out[rest] = m[lut[name[rest]]]
    klass = np.zeros(len(labels), np.int8)
    for lbl, i in index.items():
        klass[i] = (OpClass.MEMSET if lbl == "Memset" else
                    OpClass.MEMCPY if lbl.startswith("Memcpy") or _ASYNC_COPY.match(lbl) else
                    OpClass.COLLECTIVE if is_collective_kernel(lbl) else OpClass.COMPUTE)
    return out, labels, klass


def _host_ops(trace: Trace, ops: np.ndarray, origin: np.ndarray, memo: dict) -> np.ndarray:
    """String id per op (−1 none) of the host op that launched it: ``tf_op``, else the XLA
    program it ran in (``hlo_module``: the jitted function for JAX), else the framework op
    enclosing the launch call (``aten::…`` around ``cudaLaunchKernel``)."""
    out = _lookup(trace.stats.get("tf_op"), ops, memo).astype(np.int32)
    need = out < 0
    if need.any() and "hlo_module" in trace.stats:
        out[need] = _lookup(trace.stats["hlo_module"], ops, memo)[need]
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
    return out


def _dominant(row: np.ndarray, key: np.ndarray, weight: np.ndarray, n_rows: int,
              fallback: np.ndarray) -> np.ndarray:
    """Per row, the key (≥ 0, or −1) with the most weight; ``fallback`` per row where the
    (row × key) table would be too large to count densely."""
    if not row.size:
        return np.full(n_rows, -1, np.int64)
    u, lut = _dense(key.astype(np.int64), int(max(key.max(), 0)) + 1)
    nk = u.shape[0] + 1
    if n_rows * nk > _DENSE_CELLS:
        return fallback
    k = np.where(key >= 0, lut[np.maximum(key, 0)] + 1, 0)
    tab = np.bincount(row.astype(np.int64) * nk + k, weights=weight,
                      minlength=n_rows * nk).reshape(n_rows, nk)
    best = tab.argmax(axis=1)
    vals = np.concatenate(([-1], u))
    return np.where(tab.max(axis=1) > 0, vals[best], -1)


def _union_lengths(s: np.ndarray, e: np.ndarray, key: np.ndarray, n_keys: int) -> np.ndarray:
    """Per key, the length of the union of the intervals, given sorted by (key, start)
    and shifted so that no two keys' intervals touch."""
    if not s.size:
        return np.zeros(n_keys, np.int64)
    run_end = np.maximum.accumulate(e)
    new = np.empty(s.shape[0], bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.concatenate((first[1:], [s.shape[0]])) - 1
    return np.bincount(key[first], weights=(run_end[last] - s[first]).astype(np.float64),
                       minlength=n_keys).astype(np.int64)


def overlap(starts: np.ndarray, ends: np.ndarray, klass: np.ndarray, key: np.ndarray,
            n_keys: int) -> np.ndarray:
    """(n_keys, len(Overlap)) ps: the busy union per key and its split by op class."""
    out = np.zeros((n_keys, len(Overlap)), np.int64)
    if not starts.size:
        return out
    lo = int(starts.min())
    span = int(ends.max()) - lo + 1
    per = max((1 << 62) // span, 1)               # keys whose shifted times fit in int64
    comp = klass == OpClass.COMPUTE
    copy = (klass == OpClass.MEMCPY) | (klass == OpClass.MEMSET)
    coll = klass == OpClass.COLLECTIVE
    for k0 in range(0, n_keys, per):
        sel = np.flatnonzero((key >= k0) & (key < k0 + per)) if n_keys > per else None
        kk = key if sel is None else key[sel]
        shift = (kk - k0).astype(np.int64) * span - lo
        s = (starts if sel is None else starts[sel]) + shift
        e = (ends if sel is None else ends[sel]) + shift
        o = np.argsort(s, kind="stable")          # runs already in order: cheap
        s, e, kk = s[o], e[o], (kk - k0)[o]
        cl = [m if sel is None else m[sel] for m in (comp, copy, coll)]
        cl = [m[o] for m in cl]
        n = min(per, n_keys - k0)

        busy = _union_lengths(s, e, kk, n)
        zero = np.zeros(n, np.int64)

        def u(mask):
            # a class that is every op or none needs no pass of its own
            if not mask.any():
                return zero
            if mask.all():
                return busy
            return _union_lengths(s[mask], e[mask], kk[mask], n)
        c, m, x = cl
        u_comp, u_copy, u_coll = u(c), u(m), u(x)
        u_cm = u(c | m) if m.any() else u_comp
        u_cx = u(c | x) if x.any() else u_comp
        blk = out[k0:k0 + n]
        blk[:, Overlap.BUSY] = busy
        blk[:, Overlap.COMPUTE] = u_comp
        blk[:, Overlap.COPIES] = u_copy
        blk[:, Overlap.COLLECTIVES] = u_coll
        blk[:, Overlap.COPIES_UNDER_COMPUTE] = u_comp + u_copy - u_cm
        blk[:, Overlap.COLLECTIVES_UNDER_COMPUTE] = u_comp + u_coll - u_cx
        # the exposed parts partition the busy union with compute
        blk[:, Overlap.COPIES_EXPOSED] = u_cm - u_comp
        blk[:, Overlap.COLLECTIVES_EXPOSED] = busy - u_cm
    return out


def device_op_table(trace: Trace, ops: np.ndarray, op_step: np.ndarray, n_steps: int,
                    origin: np.ndarray, path_of_op: np.ndarray | None = None,
                    paths: list | None = None, memo: dict | None = None) -> DeviceOpTable:
    """``ops``: the busy set's device ops; ``op_step``: the step that launched each (−1
    none); ``origin``: the host call behind every event (−1 none); ``path_of_op``/``paths``:
    the user annotation path of each op (``annotations.op_paths``), when at hand; ``memo``:
    that pass's stat lookups on the same ``ops``."""
    n_dev = len(trace.devices)
    dev = trace.track_device[trace.track[ops]]
    keep = dev >= 0
    if not keep.all():
        ops, op_step, dev = ops[keep], op_step[keep], dev[keep]
        if path_of_op is not None:
            path_of_op = path_of_op[keep]
        memo = None
    if not ops.size:
        return DeviceOpTable.empty(n_dev, n_steps)
    memo = {} if memo is None else memo
    kind_of_ops = trace.kind[ops]
    label, names, klass_of = _labels(trace, ops, kind_of_ops, memo)
    n_lab = len(names)
    ts, dur = trace.ts[ops], trace.dur[ops]
    dev = dev.astype(np.int64)
    # rows: (device, label) pairs with ops, by device then most time first
    cell = dev * n_lab + label
    cnt = np.bincount(cell, minlength=n_dev * n_lab)
    tim = np.bincount(cell, weights=dur, minlength=n_dev * n_lab)
    short = (kind_of_ops == K.KERNEL) & (dur < LAUNCH_LATENCY_PS)
    s_cnt = np.bincount(cell[short], minlength=n_dev * n_lab)
    s_tim = np.bincount(cell[short], weights=dur[short], minlength=n_dev * n_lab)
    cells = np.flatnonzero(cnt)
    cells = cells[np.lexsort((-tim[cells], cells // n_lab))]
    n_rows = cells.shape[0]
    row_of = np.full(n_dev * n_lab, -1, np.int64)
    row_of[cells] = np.arange(n_rows)
    row = row_of[cell]
    del cell, row_of
    r_lab = cells % n_lab
    # longest instance of each row
    gmax = np.zeros(n_rows, np.int64)
    np.maximum.at(gmax, row, dur)
    longest = np.full(n_rows, -1, np.int64)
    at = np.flatnonzero(dur == gmax[row])
    longest[row[at[::-1]]] = ops[at[::-1]]         # the earliest such instance
    hcat = _lookup(trace.stats.get("hlo_category"), longest, {}) \
        if "hlo_category" in trace.stats else np.full(n_rows, -1)
    # the host op and the annotation that most of each row's time came from; where the
    # table is too large to count, those of its longest instance
    host = _host_ops(trace, ops, origin, memo)
    pos = np.searchsorted(ops, longest) if _sorted(ops) else None
    fb_host = host[pos] if pos is not None else np.full(n_rows, -1)
    r_host = _dominant(row, host, dur, n_rows, fb_host)
    if path_of_op is not None and paths:
        fb_path = path_of_op[pos] if pos is not None else np.full(n_rows, -1)
        r_path = _dominant(row, path_of_op, dur, n_rows, fb_path)
    else:
        r_path = np.full(n_rows, -1)
    del host
    # per launching step, sparse: (row, step) cells with ops
    st = np.where(op_step >= 0, op_step, n_steps).astype(np.int64)
    code = row * (n_steps + 1) + st
    size = n_rows * (n_steps + 1)
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
        slot = slot.reshape(-1)
        sc = np.bincount(slot, minlength=nz.shape[0])
    stime = np.bincount(slot, weights=dur, minlength=nz.shape[0])
    in_step = (nz % (n_steps + 1)) < n_steps
    # longest instance per (row, step)
    smax = np.zeros(nz.shape[0], np.int64)
    np.maximum.at(smax, slot, dur)
    at = np.flatnonzero(dur == smax[slot])
    s_long = np.full(nz.shape[0], -1, np.int64)
    s_long[slot[at[::-1]]] = ops[at[::-1]]
    del code, slot, at
    # overlap and short kernels, per device and per (step, device)
    kl = klass_of[label]
    end = ts + dur
    ov = overlap(ts, end, kl, dev, n_dev)
    sk = np.where(op_step >= 0, op_step, n_steps).astype(np.int64) * n_dev + dev
    sov = overlap(ts, end, kl, sk, (n_steps + 1) * n_dev)[: n_steps * n_dev]
    d_short = np.bincount(dev[short], minlength=n_dev)
    d_short_t = np.bincount(dev[short], weights=dur[short], minlength=n_dev)
    st_short = np.bincount(sk[short], minlength=(n_steps + 1) * n_dev)[: n_steps * n_dev]
    st_short_t = np.bincount(sk[short], weights=dur[short],
                             minlength=(n_steps + 1) * n_dev)[: n_steps * n_dev]
    return DeviceOpTable(
        device=(cells // n_lab).astype(np.int32), name=[names[i] for i in r_lab.tolist()],
        klass=klass_of[r_lab].astype(np.int8), count=cnt[cells].astype(np.int64),
        time=np.rint(tim[cells]).astype(np.int64),
        short_count=s_cnt[cells].astype(np.int64), short_time=np.rint(s_tim[cells]).astype(np.int64),
        longest=longest, longest_ts=trace.ts[longest], longest_dur=trace.dur[longest],
        longest_track=trace.track[longest].astype(np.int32),
        category=[trace.strings[int(x)] if x >= 0 else "" for x in np.asarray(hcat).tolist()],
        host_op=[trace.strings[int(x)] if x >= 0 else "" for x in r_host.tolist()],
        annotation=[" › ".join(paths[int(x)]) if x >= 0 else "" for x in r_path.tolist()],
        step_row=(nz[in_step] // (n_steps + 1)).astype(np.int32),
        step=(nz[in_step] % (n_steps + 1)).astype(np.int32),
        step_count=sc[in_step].astype(np.int64), step_time=np.rint(stime[in_step]).astype(np.int64),
        step_longest=s_long[in_step],
        step_longest_ts=trace.ts[s_long[in_step]], step_longest_dur=trace.dur[s_long[in_step]],
        step_longest_track=trace.track[s_long[in_step]].astype(np.int32),
        overlap=ov, step_overlap=sov.reshape(n_steps, n_dev, len(Overlap)),
        short_count_dev=d_short.astype(np.int64), short_time_dev=np.rint(d_short_t).astype(np.int64),
        step_short_count=st_short.reshape(n_steps, n_dev).astype(np.int64),
        step_short_time=np.rint(st_short_t).astype(np.int64).reshape(n_steps, n_dev),
        latency_ps=int(LAUNCH_LATENCY_PS))


def _sorted(a: np.ndarray) -> bool:
    return bool(a.shape[0] < 2 or (a[1:] >= a[:-1]).all())
