"""Collectives (GUIDE §4 "waiting for peers is not work"): each host's table of collective
op instances, and the row it is kept in.

``collective_table(trace, …)`` runs in each host's analysis and keeps, per collective op
on each device, what the join needs: its matching key and ordinal, start and end, the
step that launched it, and what the device did between the previous collective and this
one (idle by cause, from the host's own gap split, with the culprit of the largest gap).
``to_row``/``from_row`` keep it in a pod row.  The join of the tables across a run's
participants is ``analysis.run.join``; what each host lost in it, ``analysis.run.stragglers``.
"""
from __future__ import annotations

import base64
import binascii
import re
import zlib
from dataclasses import dataclass, field

import numpy as np

from ...trace.build import map_distinct
from ...trace.classify import is_collective_kernel
from .. import causes as C
from ..result import CollectiveTable

_NCCL = re.compile(r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.I)
_XLA = re.compile(r"(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|"
                  r"collective-broadcast|megascale[\w-]*)", re.I)
_CAMEL = {"allreduce": "all-reduce", "allgather": "all-gather", "reducescatter": "reduce-scatter",
          "alltoall": "all-to-all", "sendrecv": "send-recv", "broadcast": "broadcast",
          "reduce": "reduce", "send": "send", "recv": "recv"}
MAX_INSTANCES = 4096          # per host table (the first ones): a few KB to 100 KB a row


def is_collective(name: str) -> bool:
    return is_collective_kernel(name)


def op_key(name: str) -> tuple[str, str, int]:
    """(matching key, op kind, async part: 0 sync, 1 ``-start``, 2 ``-done``) of a
    collective op's name: NCCL/RCCL kernels by their name without the parameter list
    (``ncclKernel_AllReduce_RING_LL_Sum_float``), XLA ops by their HLO instruction."""
    base = name.split("(", 1)[0].strip()
    m = _NCCL.match(base)
    if m:
        op = m.group(1).lower()
        return base, _CAMEL.get(op, op), 0
    low = base.lower()
    part = 1 if "-start" in low else 2 if "-done" in low else 0
    m = _XLA.search(low)
    kind = m.group(1) if m else low
    if kind.startswith("megascale"):
        kind = "megascale"
    return base, kind, part


def _key_of(name: str, opcode: int, strings) -> tuple[str, str, int]:
    """``op_key`` of a name, its kind and async part from the HLO opcode when known."""
    if opcode < 0:
        return op_key(name)
    code = strings[opcode]
    part = 1 if code.endswith("-start") else 2 if code.endswith("-done") else 0
    return name.split("(", 1)[0].strip(), code.removesuffix("-start").removesuffix("-done"), part


def _opcodes(trace, ops: np.ndarray) -> np.ndarray:
    """Each op's HLO collective opcode as a string id (−1 none): the XSpace reader keeps it
    for XLA collectives, whose names (``psum.7``) need not say what they are."""
    st = trace.stats.get("hlo_collective")
    if st is None or ops.size == 0:
        return np.full(ops.size, -1, np.int64)
    v, has = st.lookup(ops)
    return np.where(has, np.asarray(v, np.int64), -1)


def collective_ops(trace, dev_ops: np.ndarray) -> np.ndarray:
    """The collective ops among ``dev_ops``: by name (classified once per distinct name)
    or by their HLO opcode."""
    if dev_ops.size == 0:
        return dev_ops
    # a table over the name ids, not a sort of them (0.18 s of 6.6 M kernels)
    hit = map_distinct(trace.name[dev_ops], lambda u: np.fromiter(
        (is_collective(trace.strings[int(x)]) for x in u.tolist()), bool, u.size))
    return dev_ops[hit | (_opcodes(trace, dev_ops) >= 0)]


def collective_table(trace, ops: np.ndarray, op_step: np.ndarray, gaps, dev_lo: np.ndarray,
                     culprit_name) -> CollectiveTable:
    """The table of ``ops`` (collective device ops, ``collective_ops``) launched by
    ``op_step``; ``gaps``: the host's GapTable (its shares say why the device idled
    between collectives); ``culprit_name(event) → str``."""
    n_causes = len(C.ALL)
    if ops.size == 0:
        return CollectiveTable.empty(n_causes)
    hostnames = trace.metadata.get("hostnames") or []
    clock = str(hostnames[0]) if hostnames else ""
    ops = np.asarray(ops, np.int64)
    opc = _opcodes(trace, ops)
    # one key per (name, opcode): an XLA op's opcode says its kind where its name does not
    pair = trace.name[ops].astype(np.int64) * (len(trace.strings) + 1) + (opc + 1)
    u, inv = np.unique(pair, return_inverse=True)
    inv = inv.reshape(-1)
    parsed = [_key_of(trace.strings[int(x) // (len(trace.strings) + 1)],
                      int(x) % (len(trace.strings) + 1) - 1, trace.strings) for x in u.tolist()]
    part = np.array([p[2] for p in parsed], np.int8)[inv]
    kind_names = sorted({p[1] for p in parsed})
    kind_of = np.array([kind_names.index(p[1]) for p in parsed], np.int32)[inv]
    dev = trace.track_device[trace.track[ops]].astype(np.int32)
    start = trace.ts[ops].astype(np.int64)
    end = start + trace.dur[ops]
    step = np.asarray(op_step, np.int64).astype(np.int32)
    # an async pair is one instance: a ``-done`` ends the earliest open ``-start`` of its
    # kind on its device (k-th start ↔ k-th done)
    keep = part != 2
    if (part == 2).any():
        for d in np.unique(dev).tolist():
            for k in np.unique(kind_of[(dev == d) & (part != 0)]).tolist():
                s = np.flatnonzero((dev == d) & (kind_of == k) & (part == 1))
                e = np.flatnonzero((dev == d) & (kind_of == k) & (part == 2))
                s, e = s[np.argsort(start[s], kind="stable")], e[np.argsort(start[e], kind="stable")]
                m = min(s.size, e.size)
                end[s[:m]] = np.maximum(end[s[:m]], end[e[:m]])
    key_ids = np.unique(inv[keep])
    keys = [parsed[int(x)][0] for x in key_ids.tolist()]
    kinds = [parsed[int(x)][1] for x in key_ids.tolist()]
    key = np.searchsorted(key_ids, inv).astype(np.int32)
    sel = np.flatnonzero(keep)
    dev, key, start, end, step = dev[sel], key[sel], start[sel], end[sel], step[sel]
    order = np.lexsort((start, dev))
    dev, key, start, end, step = dev[order], key[order], start[order], end[order], step[order]
    dropped = max(int(order.size) - MAX_INSTANCES, 0)
    if dropped:
        first = np.argsort(start, kind="stable")[:MAX_INSTANCES]
        first.sort()
        dev, key, start, end, step = dev[first], key[first], start[first], end[first], step[first]
    n = start.size
    # k-th op of its key on its device
    o = np.lexsort((start, key, dev))
    grp = np.r_[True, (dev[o][1:] != dev[o][:-1]) | (key[o][1:] != key[o][:-1])]
    starts = np.flatnonzero(grp)
    ordinal = np.empty(n, np.int32)
    ordinal[o] = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    # the span since the previous collective on the device (its first: since the
    # device's first activity)
    span_start = np.empty(n, np.int64)
    span_idle = np.zeros((n, n_causes), np.int64)
    culprit = np.full(n, -1, np.int32)
    names: list = []
    for d in np.unique(dev).tolist():
        at = np.flatnonzero(dev == d)          # in start order
        prev_end = np.maximum.accumulate(end[at])
        lo = int(dev_lo[d]) if d < dev_lo.shape[0] and dev_lo[d] >= 0 else int(start[at[0]])
        span_start[at] = np.minimum(np.r_[lo, prev_end[:-1]], start[at])
        if gaps is None or not len(gaps):
            continue
        g = np.flatnonzero(gaps.device == d)
        if g.size == 0:
            continue
        g = g[np.argsort(gaps.start[g], kind="stable")]
        # the instance each gap precedes: the first arrival at or after the gap's end
        j = np.searchsorted(start[at], gaps.end[g], side="left")
        ok = j < at.size
        ok[ok] &= gaps.start[g[ok]] >= span_start[at[j[ok]]]
        g, j = g[ok], j[ok]
        if g.size == 0:
            continue
        np.add.at(span_idle, at[j], gaps.shares[g])
        # the largest gap's culprit names what the device waited on
        big = np.lexsort((gaps.end[g] - gaps.start[g], j))
        last = np.r_[j[big][1:] != j[big][:-1], True]
        for gi, ji in zip(g[big][last].tolist(), j[big][last].tolist()):
            ev = int(gaps.culprit[gi])
            if ev >= 0:
                nm = culprit_name(ev)
                if nm:
                    if nm not in names:
                        names.append(nm)
                    culprit[at[ji]] = names.index(nm)
    return CollectiveTable(dev, key, ordinal, start, end, step, span_start, span_idle, culprit,
                           keys, kinds, names, clock, dropped)


# ------------------------------------------------------------------ the table in a pod row
def clock_origin_ps(source: dict) -> int:
    """A trace's origin on its host's wall clock (ps since 1970): XLA:CPU writes event
    times relative to the profile's start, which the XSpace gives as
    ``profile_start_time``; other traces' origins are already absolute."""
    origin = int(source.get("origin_ps") or 0)
    start = int(source.get("profile_start_ps") or 0)
    return origin + start if start and origin < start // 2 else origin


_INT_COLS = ("device", "key", "ordinal", "step", "culprit")
_TIME_COLS = ("start", "end", "span_start")


def to_row(t: CollectiveTable, origin_ps: int, device_names: list) -> dict:
    """The table as the pod row keeps it (the join runs from rows): names as JSON, the
    columns packed (``_pack``: a few KB for hundreds of instances); times in ns after
    ``origin`` (its absolute ps as a decimal string)."""
    nz = t.span_idle.any(axis=0)
    cols = [t.device, t.key, t.ordinal, t.step, t.culprit,
            t.start // 1000, t.end // 1000, t.span_start // 1000,
            *(t.span_idle[:, nz] // 1000).T]
    return {"origin_ps": str(int(origin_ps)), "clock": t.clock, "dropped": t.dropped,
            "devices": list(device_names), "keys": list(t.keys), "kinds": list(t.kinds),
            "names": list(t.names), "n": len(t),
            "idle_causes": [C.ALL[i] for i in np.flatnonzero(nz).tolist()],
            "packed": _pack(cols)}


def _pack(cols: list) -> str:
    """Int columns as one zlib-compressed, base64 string: each column delta-coded (times
    a step apart and small ids compress to a byte or two an instance)."""
    if not cols or not len(cols[0]):
        return ""
    m = np.stack([np.asarray(c, np.int64) for c in cols])
    d = np.diff(m, axis=1, prepend=0)
    return base64.b64encode(zlib.compress(d.astype("<i8").tobytes(), 6)).decode("ascii")


def _unpack(text: str, n_cols: int, n: int) -> np.ndarray:
    if n == 0:
        return np.zeros((n_cols, 0), np.int64)
    raw = zlib.decompress(base64.b64decode(text.encode("ascii")), bufsize=n_cols * n * 8 + 16)
    d = np.frombuffer(raw, "<i8")
    if d.size != n_cols * n:
        raise ValueError("packed collective table of the wrong size")
    return np.cumsum(d.reshape(n_cols, n), axis=1)


@dataclass
class HostTable:
    """One participant file's table as the join reads it (from a row or a Diagnosis):
    times in ns relative to ``origin_ns``."""

    host: str
    origin_ns: int
    clock: str
    devices: list
    keys: list
    kinds: list
    names: list
    device: np.ndarray
    key: np.ndarray
    ordinal: np.ndarray
    start: np.ndarray
    end: np.ndarray
    step: np.ndarray
    span_start: np.ndarray
    idle: np.ndarray            # (n, n_causes) ns
    culprit: np.ndarray
    step_ids: list = field(default_factory=list)   # Diagnosis step index → step id
    dropped: int = 0
    step_starts: list = field(default_factory=list)  # per step: its host start, ns from origin


def from_row(host: str, row: dict) -> HostTable | None:
    """A row's table (``to_row``), or None when it has none or it is malformed."""
    c = row.get("collectives_table")
    if not isinstance(c, dict):
        return None
    try:
        n = int(c["n"])
        causes = [x for x in c.get("idle_causes", [])]
        m = _unpack(c["packed"], len(_INT_COLS) + len(_TIME_COLS) + len(causes), n)
        idle = np.zeros((n, len(C.ALL)), np.int64)
        for i, name in enumerate(causes):
            if name in C.ALL:
                idle[:, C.ALL.index(name)] = m[len(_INT_COLS) + len(_TIME_COLS) + i]
        cols = dict(zip(_INT_COLS + _TIME_COLS, m))
        return HostTable(host, int(c["origin_ps"]) // 1000, str(c.get("clock") or ""),
                         list(c["devices"]), list(c["keys"]), list(c["kinds"]),
                         list(c.get("names", [])), idle=idle,
                         step_ids=list(row.get("step_ids") or []),
                         step_starts=[int(x) for x in row.get("step_start_ns") or []],
                         dropped=int(c.get("dropped") or 0), **cols)
    except (KeyError, TypeError, ValueError, AttributeError, zlib.error, binascii.Error):
        return None
