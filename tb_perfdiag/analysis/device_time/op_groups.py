"""The group each device op is counted in: a copy by its direction, an XLA op by its HLO
instruction, any other kernel by its name with template arguments and parameters folded
(``fold_kernel_name``), and the class of each group (compute, copy, collective)."""
from __future__ import annotations

import re

import numpy as np

from ...trace.classify import COLLECTIVE_HINTS, COLLECTIVE_NAME, memcpy_kind
from ...trace.model import EventKind as K, Trace
from ...trace.strings import take
from .annotations import _at, _lookup
from ..result import OpClass


_DIRECTION = {"h2d": "HtoD", "d2h": "DtoH", "d2d": "DtoD", "p2p": "PtoP"}


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
