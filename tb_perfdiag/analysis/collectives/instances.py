"""Collectives (GUIDE §4 "waiting for peers is not work"): each host's table of collective
op instances, and the join of those tables across the participants of a run.

``collective_table(trace, …)`` runs in each host's analysis and keeps, per collective op
on each device, what the join needs: its matching key and ordinal, start and end, the
step that launched it, and what the device did between the previous collective and this
one (idle by cause, from the host's own gap split, with the culprit of the largest gap).
``join(tables)`` is a pure function of those tables (it runs from stored pod rows, no
trace): it matches instances across participants (devices of one file, ranks, hosts),
estimates each clock's offset from the instances' ends, and gives per instance and
participant the arrival, peer wait, transfer, the last arriver and its lateness; per
participant the straggler verdict and why it was late.
"""
from __future__ import annotations

import base64
import binascii
import math
import re
import zlib
from dataclasses import dataclass, field

import numpy as np

from ...trace.build import map_distinct
from .. import causes as C
from ..result import CollectiveTable

# trace.classify.is_collective_kernel's names, and TPU Megascale ops
_COLLECTIVE = re.compile(r"[nr]ccl|all-?reduce|all-?gather|reduce-?scatter|all-?to-?all|"
                         r"collective-permute|megascale", re.I)
_NCCL = re.compile(r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.I)
_XLA = re.compile(r"(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|"
                  r"collective-broadcast|megascale[\w-]*)", re.I)
_CAMEL = {"allreduce": "all-reduce", "allgather": "all-gather", "reducescatter": "reduce-scatter",
          "alltoall": "all-to-all", "sendrecv": "send-recv", "broadcast": "broadcast",
          "reduce": "reduce", "send": "send", "recv": "recv"}
MAX_INSTANCES = 4096          # per host table (the first ones): a few KB to 100 KB a row
DEVICE_COMPUTE = "device_compute"
# a straggler is last more often than chance would make it (binomial tail under this)
CHANCE = 0.05
# and causes at least this share of all the peer wait of the run
SHARE = 0.5
# an estimated clock offset is applied past this many times its residual spread (and 20 µs)
OFFSET_NOISE = 3.0
MIN_OFFSET_PS = 20_000_000
# a last arrival names its arriver when it leads the next one by this many times the
# clocks' resolution (and at least MIN_LEAD_NS)
RESOLVE = 2.0
# an instance whose wait is this many times the typical instance's (and the clocks'
# resolution) stands out: a late arrival, not the run's jitter
OUTSTANDING = 4.0
MIN_LEAD_NS = 20_000
# files whose instances' ends agree within this (nine in ten instances) share one clock:
# one collective's kernels end within 1-7 µs of each other on one host (the DLRM's eight
# ranks), while clocks of different hosts agree to tens of µs at best (NTP)
SAME_CLOCK_NS = 10_000
_NONE = np.iinfo(np.int64).min   # no step start


def is_collective(name: str) -> bool:
    return bool(_COLLECTIVE.search(name))


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


# ------------------------------------------------------------------------------- the join
@dataclass
class Participant:
    host: int                   # index into Join.hosts
    device: str


@dataclass
class Join:
    """The instances matched across participants, and what each participant lost.

    ``arrival``, ``wait``, ``transfer``, ``lateness``: (n_instances, n_participants) ns,
    arrivals on the common clock (offsets applied) relative to ``base_ns``; −1 in
    ``present`` cells is a participant without this instance (only complete instances
    are kept: ``unmatched`` says how many were not)."""

    hosts: list                 # host names
    participants: list          # [Participant]
    keys: list                  # per instance: matching key
    kinds: list                 # per instance: op kind
    ordinal: np.ndarray         # per instance
    arrival: np.ndarray
    end: np.ndarray
    wait: np.ndarray
    transfer: np.ndarray
    lateness: np.ndarray
    last: np.ndarray            # per instance: participant index of the last arrival
    step: np.ndarray            # (n_inst, n_part) step id launched it (−1 none)
    offsets_ns: dict            # host → {"estimated_ns", "applied", "residual_ns", "clock"}
    noisy: bool                 # the offsets are too noisy to order arrivals
    unmatched: list             # [{"host", "device", "key", "count", "matched"}]
    cause: list                 # per instance: why the last arriver was late (§4 / device_compute)
    culprit: list               # per instance: the culprit name ("" none)
    base_ns: int = 0
    present: np.ndarray | None = None   # (n_inst, n_part) bool: the participant has this op
    resolved: np.ndarray | None = None  # per instance: its last arrival leads the next by
    #                                     more than the clocks' resolution
    resolution_ns: int = 0              # across clocks: the spread of the aligned ends
    idle_wait: np.ndarray | None = None  # (n_inst, n_part) ns: collective-wait idle before the
    #                                      op, while the last participant was not yet ready
    second: np.ndarray | None = None    # per instance: the next-to-last arriver
    lead: np.ndarray | None = None      # per instance: the last one's lead over it, ns
    clock_of: np.ndarray | None = None  # per participant: index into ``clocks``
    clocks: list = field(default_factory=list)   # [{"tables", "basis", "resolution_ns", …}]
    idle_excess: np.ndarray | None = None   # (n_inst, n_causes): the last one's idle over the median
    busy_excess: np.ndarray | None = None   # its device compute over the median's
    span_start_excess: np.ndarray | None = None  # where its span began, after the median's
    step_start_excess: np.ndarray | None = None  # where its step began, after the median's
    has_step_start: np.ndarray | None = None
    step_first: np.ndarray | None = None    # the instance lies in each one's first captured step

    def __len__(self) -> int:
        return len(self.keys)

    def devices_of(self, host: str, names: list) -> list:
        """[(participant column, index in ``names``, the instances it has)] of ``host``'s
        devices that are in ``names`` (a file's device names); [] when the host takes
        part in no joined instance."""
        if host not in self.hosts or not len(self):
            return []
        h = self.hosts.index(host)
        out = []
        for c, p in enumerate(self.participants):
            if p.host != h or p.device not in names:
                continue
            hit = np.flatnonzero(self.present[:, c])
            if hit.size:
                out.append((c, names.index(p.device), hit))
        return out


def _align(ends: list) -> tuple:
    """Shift per sequence against the longest one (``ends``: per participant its end
    times in ns): the shift whose ends agree best (least spread of the differences)."""
    ref = max(range(len(ends)), key=lambda i: len(ends[i]))
    r = ends[ref]
    out = []
    for i, e in enumerate(ends):
        if i == ref or len(e) == len(r) or len(e) == 0:
            out.append(0)
            continue
        if len(e) > len(r):
            out.append(0)
            continue
        best, bs = None, 0
        for s in range(0, min(len(r) - len(e), 64) + 1):
            d = r[s:s + len(e)] - e
            spread = float(np.median(np.abs(d - np.median(d))))
            if best is None or spread < best:
                best, bs = spread, s
        out.append(bs)
    return out, ref


def join(tables: list) -> Join | None:
    """Instances matched across every participant of these host tables (None when
    fewer than two participants share any collective)."""
    tables = [t for t in tables if t is not None and t.start.shape[0]]
    if not tables:
        return None
    base = min(t.origin_ns for t in tables)
    parts, seqs = [], {}        # (table i, device) → participant index
    for ti, t in enumerate(tables):
        for d in np.unique(t.device).tolist():
            parts.append((ti, int(d)))
    pidx = {p: i for i, p in enumerate(parts)}
    # per key (name): each participant's ops of that key in ordinal order
    for ti, t in enumerate(tables):
        shift = t.origin_ns - base
        for k in np.unique(t.key).tolist():
            kname = t.keys[k]
            for d in np.unique(t.device[t.key == k]).tolist():
                rows = np.flatnonzero((t.key == k) & (t.device == d))
                rows = rows[np.argsort(t.ordinal[rows], kind="stable")]
                seqs.setdefault(kname, {})[pidx[(ti, d)]] = (rows, shift)
    inst_key, inst_kind, inst_ord = [], [], []
    blocks = []                 # per key: (participants, their rows of its complete instances)
    unmatched = []
    for kname, by_p in seqs.items():
        if len(by_p) < 2:
            continue
        ps = sorted(by_p)
        ends = [tables[parts[p][0]].end[by_p[p][0]] + by_p[p][1] for p in ps]
        shifts, ref = _align(ends)
        n_ref = len(ends[ref])
        slots = np.full((n_ref, len(ps)), -1, np.int64)
        for j, p in enumerate(ps):
            rows = by_p[p][0][:n_ref - shifts[j]]
            slots[shifts[j]:shifts[j] + rows.size, j] = rows
            if rows.size != n_ref:
                t = tables[parts[p][0]]
                unmatched.append({"host": t.host, "device": t.devices[parts[p][1]]
                                  if parts[p][1] < len(t.devices) else str(parts[p][1]),
                                  "key": kname, "count": int(by_p[p][0].size),
                                  "instances": n_ref})
        complete = (slots >= 0).all(axis=1)
        t0 = tables[parts[ps[0]][0]]
        kind = t0.kinds[t0.keys.index(kname)]
        done = np.flatnonzero(complete)
        inst_key += [kname] * done.size
        inst_kind += [kind] * done.size
        inst_ord += done.tolist()
        blocks.append((ps, slots[done]))
        if (~complete).any():
            unmatched.append({"key": kname, "incomplete_instances": int((~complete).sum()),
                              "instances": n_ref})
    n_i, n_p = len(inst_key), len(parts)
    if not n_i:
        return None
    arr = np.full((n_i, n_p), -1, np.int64)
    end = np.full((n_i, n_p), -1, np.int64)
    sstart = np.full((n_i, n_p), -1, np.int64)
    step = np.full((n_i, n_p), -1, np.int64)
    idle = np.zeros((n_i, n_p, len(C.ALL)), np.int64)
    cul = np.full((n_i, n_p), -1, np.int64)
    present = np.zeros((n_i, n_p), bool)
    step_t0 = np.full((n_i, n_p), _NONE, np.int64)    # the launching step's host start
    at = 0
    for ps, rows_of in blocks:
        ii = np.arange(at, at + rows_of.shape[0])
        at += rows_of.shape[0]
        for j, p in enumerate(ps):
            t = tables[parts[p][0]]
            rows = rows_of[:, j]
            shift = t.origin_ns - base
            arr[ii, p] = t.start[rows] + shift
            end[ii, p] = t.end[rows] + shift
            sstart[ii, p] = t.span_start[rows] + shift
            idle[ii, p] = t.idle[rows]
            cul[ii, p] = t.culprit[rows]
            st = t.step[rows]
            if len(t.step_starts) == len(t.step_ids) and t.step_starts:
                t0 = np.asarray(t.step_starts, np.int64)
                ok = (st >= 0) & (st < t0.size)
                step_t0[ii, p] = np.where(ok, t0[np.clip(st, 0, t0.size - 1)] + shift, _NONE)
            if t.step_ids:
                ids = np.asarray(t.step_ids, np.int64)
                ok = (st >= 0) & (st < ids.size)
                step[ii, p] = np.where(ok, ids[np.clip(st, 0, ids.size - 1)], -1)
            else:
                step[ii, p] = st
            present[ii, p] = True
    # drop participants that share no instance (their collectives matched no one)
    used = present.any(axis=0)
    if used.sum() < 2:
        return None
    keep = np.flatnonzero(used)
    parts = [parts[i] for i in keep.tolist()]
    arr, end, sstart, step, idle, cul, present, step_t0 = (
        a[:, keep] for a in (arr, end, sstart, step, idle, cul, present, step_t0))
    host_of = np.array([ti for ti, _ in parts], np.int64)
    # ---- clocks: which participants share one (no offset among them), and per other
    # clock the median of (end − the instance's median end)
    clocks = _clocks(tables, host_of, end)
    med_end = np.median(end, axis=1)
    resid = end - med_end[:, None]
    off_p = np.zeros(len(parts), np.int64)
    offsets = {}
    clock_of = np.zeros(len(parts), np.int64)
    ck_of_table = np.zeros(len(tables), np.int64)
    for ci, ck in enumerate(clocks):
        ck_of_table[ck["tables"]] = ci
    clock_of[:] = ck_of_table[host_of]
    order_p = np.argsort(clock_of, kind="stable")
    bounds = np.searchsorted(clock_of[order_p], np.arange(len(clocks) + 1))
    for ci, ck in enumerate(clocks):
        cols = order_p[bounds[ci]:bounds[ci + 1]]
        r = resid[:, cols].reshape(-1)
        est = float(np.median(r)) if r.size else 0.0
        spread = float(np.median(np.abs(r - est))) if r.size else 0.0
        # one clock for every participant: nothing to align
        applied = len(clocks) > 1 and abs(est) > max(OFFSET_NOISE * spread, MIN_OFFSET_PS / 1000)
        if applied:
            off_p[cols] = int(round(est))
        ck.update(estimated_ns=int(round(est)), residual_ns=int(round(spread)), applied=bool(applied))
        for ti in ck["tables"]:
            offsets[tables[ti].host] = {
                "clock": tables[ti].clock, "estimated_ns": ck["estimated_ns"],
                "residual_ns": ck["residual_ns"], "applied": ck["applied"],
                # how many other files share its clock (``clocks`` names them: a list
                # here would be quadratic in a pod of one host)
                "shared_with": len(ck["tables"]) - 1, "basis": ck["basis"]}
    arr, end, sstart = arr - off_p[None, :], end - off_p[None, :], sstart - off_p[None, :]
    step_t0 = np.where(step_t0 == _NONE, _NONE, step_t0 - off_p[None, :])
    dur = end - arr
    # a device that already had the collective and idled (§4 split: collective_wait) was
    # ready for it before it started: it waited for a peer outside the op (devices of one
    # process whose ops start together once the last one is ready)
    cw = idle[:, :, C.ALL.index(C.COLLECTIVE_WAIT)]
    ready = arr - np.minimum(cw, np.maximum(arr - sstart, 0))
    last = np.argmax(ready, axis=1)
    rows = np.arange(n_i)
    last_ready = ready[rows, last]
    last_arr = arr[rows, last]
    wait = np.clip(np.minimum(dur, last_arr[:, None] - arr), 0, None)
    # the idle part: what of its collective-wait idle came before the last one was ready
    idle_wait = np.clip(np.minimum(arr - ready, last_ready[:, None] - ready), 0, None)
    transfer = dur - wait
    lateness = ready - np.median(ready, axis=1)[:, None]
    # how finely the last arrival is told from the next: on one clock, at its ends'
    # agreement (ties at the clock itself are ties); across clocks, at the spread of the
    # aligned ends
    order = np.argsort(ready, axis=1, kind="stable")
    second_p = order[:, -2]
    second = ready[rows, second_p]
    lead = last_ready - second
    across = float(np.median([ck["residual_ns"] for ck in clocks])) if len(clocks) > 1 else 0.0
    same = clock_of[last] == clock_of[second_p]
    res_same = np.array([ck["resolution_ns"] for ck in clocks], np.float64)[clock_of[last]]
    thr = np.where(same, np.maximum(RESOLVE * res_same, 0), max(RESOLVE * across, MIN_LEAD_NS))
    resolved = lead > thr
    noisy = bool(len(clocks) > 1 and n_i and resolved.sum() < 0.5 * n_i)
    # ---- why the last arriver was late: its span since the previous instance against
    # the median participant's (idle by cause, device compute), and where its span (and
    # its step) began against theirs
    span = arr - sstart
    busy = span - idle.sum(axis=2)
    ex = idle[rows, last] - np.median(idle, axis=1)            # (n_i, n_causes)
    exb = busy[rows, last] - np.median(busy, axis=1)
    exs = sstart[rows, last] - np.median(sstart, axis=1)
    has_t0 = (step_t0 != _NONE).all(axis=1)
    ext = np.where(has_t0, step_t0[rows, last] - np.median(np.where(has_t0[:, None], step_t0, 0),
                                                          axis=1), 0)
    top = np.argmax(ex, axis=1)
    ex_top = ex[rows, top]
    cause, culprit = [], []
    for i, p, c, e, b in zip(rows.tolist(), last.tolist(), top.tolist(), ex_top.tolist(),
                             exb.tolist()):
        if e <= 0 and b <= 0:
            cause.append("")
            culprit.append("")
        elif e >= b:
            cause.append(C.ALL[c])
            names = tables[parts[p][0]].names
            ci = int(cul[i, p])
            culprit.append(names[ci] if 0 <= ci < len(names) else "")
        else:
            cause.append(DEVICE_COMPUTE)
            culprit.append("")
    participants = [Participant(ti, tables[ti].devices[d] if d < len(tables[ti].devices) else str(d))
                    for ti, d in parts]
    return Join([t.host for t in tables], participants, inst_key, inst_kind,
                np.asarray(inst_ord, np.int64), arr, end, wait, transfer, lateness, last,
                step, offsets, noisy, unmatched, cause, culprit, base, present, resolved,
                int(round(across)), idle_wait=idle_wait, second=second_p, lead=lead,
                clock_of=clock_of, clocks=clocks, idle_excess=ex, busy_excess=exb,
                span_start_excess=exs, step_start_excess=ext, has_step_start=has_t0,
                step_first=_first_step(tables, host_of, step))


def _first_step(tables, host_of, step) -> np.ndarray:
    """Per instance: its step is the first step of every participant's capture."""
    firsts = np.array([min(t.step_ids) if t.step_ids else -1 for t in tables], np.int64)
    return (step == firsts[host_of][None, :]).all(axis=1)


_KINETO_WORKER = re.compile(r"^(.+)_\d+$")


def _clock_name(t) -> str:
    """The host a file's clock is named by: the XSpace's hostname, else the Kineto
    worker name's host part (``torch.profiler``'s ``<hostname>_<pid>``); "" none."""
    if t.clock:
        return t.clock
    m = _KINETO_WORKER.match(t.host or "")
    return m.group(1) if m else ""


def _clocks(tables, host_of, end) -> list:
    """The participants' clocks: [{"tables": [table index], "basis", "resolution_ns"}].
    Devices of one file share its clock; files of one named host share it unless their
    ends say otherwise (a gap between them past what an estimate would apply); and files
    whose instances' ends agree within SAME_CLOCK_NS are one clock whatever their names.
    ``resolution_ns``: how closely one instance's ends agree on that clock (the median
    absolute deviation of its participants' ends), the finest lead it can order."""
    n_t = len(tables)
    # the join keeps complete instances only: every cell is present
    med_end = np.median(end, axis=1)
    # per file, per instance: its participants' median end (one device: its own)
    f_end = np.full((end.shape[0], n_t), np.nan)
    count = np.bincount(host_of, minlength=n_t)
    one = count[host_of] == 1
    f_end[:, host_of[one]] = end[:, one]
    for ti in np.flatnonzero(count > 1).tolist():
        f_end[:, ti] = np.median(end[:, host_of == ti], axis=1)
    # each file's offset from the instances' median ends, and its spread
    f_est = np.median(f_end - med_end[:, None], axis=0)
    f_spread = np.median(np.abs(f_end - med_end[:, None] - f_est[None, :]), axis=0)
    parent = list(range(n_t))

    def root(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    basis = {}
    named: dict = {}
    for ti in np.unique(host_of).tolist():
        nm = _clock_name(tables[ti])
        if nm:
            named.setdefault(nm, []).append(ti)
    for nm, tis in named.items():
        if len(tis) < 2:
            continue
        est, spread = f_est[tis], f_spread[tis]
        ok = np.abs(est - np.median(est)) <= np.maximum(OFFSET_NOISE * spread, MIN_OFFSET_PS / 1000)
        members = [ti for ti, o in zip(tis, ok.tolist()) if o]
        for ti in members[1:]:
            parent[root(ti)] = root(members[0])
        for ti in members:
            basis[ti] = f"one host ({nm})"
    # ends that agree: most instances' ends within SAME_CLOCK_NS of each other.  Files
    # whose ends agree have nearly the same offset estimate, so only neighbours in the
    # order of their estimates are compared (a pod of a thousand files: a thousand pairs)
    tis = np.unique(host_of).tolist()
    est_of = {ti: float(f_est[ti]) for ti in tis}
    by_est = sorted(tis, key=est_of.get)
    for a, b in zip(by_est[:-1], by_est[1:]):
        if root(a) == root(b) or est_of[b] - est_of[a] > SAME_CLOCK_NS:
            continue
        d = np.abs(f_end[:, a] - f_end[:, b])
        d = d[~np.isnan(d)]
        if d.size and float(np.percentile(d, 90)) <= SAME_CLOCK_NS:
            parent[root(b)] = root(a)
            for x in (a, b):
                basis.setdefault(x, "ends agree")
    groups: dict = {}
    for ti in tis:
        groups.setdefault(root(ti), []).append(ti)
    out = []
    for g in groups.values():
        res = 0.0
        if len(g) > 1 or count[g[0]] > 1:
            e = end[:, np.isin(host_of, g)]
            dev = np.abs(e - np.median(e, axis=1)[:, None])
            res = float(np.median(np.median(dev, axis=1)))
        one = len(g) == 1
        b = "one process" if one else (
            "ends agree" if any(basis.get(x) == "ends agree" for x in g) else basis.get(g[0], ""))
        out.append({"tables": g, "basis": b, "resolution_ns": int(round(res))})
    return out


# ------------------------------------------------------------------- per host from a join
def _binom_tail(n: int, k: int, p: float) -> float:
    """P(X ≥ k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k, n + 1))


LATE_START = "late_start"         # its span (its step) began after the median participant's
NOT_IN_TRACE = "not_in_trace"     # nothing the trace holds explains it
EXPLAINS = 0.5                    # a cause is named when it explains this share of the lateness


def why_late(j: Join, mine: np.ndarray) -> dict:
    """Why the last arriver of the instances ``mine`` was late (GUIDE §4): its own idle
    by cause against the median participant's when that explains at least half of its
    lateness; else where the rest comes from — a later start of its span (its step began
    after the others': before the capture when it is the capture's first step), more
    device compute (imbalance), or nothing the trace holds."""
    rows = np.arange(len(j))[mine]
    last = j.last[rows]
    late = float(np.clip(j.lateness[rows, last], 0, None).sum())
    out = {"instances": int(rows.size), "lateness_ns": int(round(late)), "cause": None,
           "idle_cause": None, "idle_excess_ns": 0, "busy_excess_ns": 0, "start_excess_ns": 0,
           "step_start_excess_ns": None, "before_capture": False}
    if not rows.size or late <= 0:
        return out
    ex = np.clip(j.idle_excess[rows], 0, None).sum(axis=0)
    top = int(np.argmax(ex))
    busy = float(np.clip(j.busy_excess[rows], 0, None).sum())
    start = float(np.clip(j.span_start_excess[rows], 0, None).sum())
    out.update(idle_cause=C.ALL[top] if ex[top] > 0 else None, idle_excess_ns=int(round(ex[top])),
               busy_excess_ns=int(round(busy)), start_excess_ns=int(round(start)))
    # where its span began late: the instance opens the capture's collectives, and its
    # step's start says how much later it began
    began = rows[j.span_start_excess[rows] > 0]
    has = began[j.has_step_start[began]] if j.has_step_start is not None else began[:0]
    if has.size:
        out["step_start_excess_ns"] = int(round(float(np.median(j.step_start_excess[has]))))
        out["before_capture"] = bool(j.step_first[has].all())
    if ex[top] >= EXPLAINS * late:
        out["cause"] = C.ALL[top]
        return out
    rest = late - float(ex[top])
    if start >= busy and start >= EXPLAINS * rest:
        out["cause"] = LATE_START
    elif busy >= EXPLAINS * rest:
        out["cause"] = DEVICE_COMPUTE
    else:
        out["cause"] = NOT_IN_TRACE
    return out


def per_step_median(step_of, v, n_steps: int) -> float | None:
    """The peer wait per typical step that every face says (the host's, each device's):
    the median over the steps of ``v`` per instance summed by its step (``step_of``; steps
    without a collective wait 0, instances outside the steps count in no step)."""
    v = np.asarray(v, np.float64)
    ids, inv = np.unique(np.asarray(step_of, np.int64), return_inverse=True)
    per = np.zeros(ids.size)
    np.add.at(per, inv.reshape(-1), v)
    per = per[ids >= 0]
    if per.size and n_steps > per.size:
        per = np.r_[per, np.zeros(n_steps - per.size)]
    return float(np.median(per)) if per.size else (
        float(v.sum()) / n_steps if n_steps else None)


def host_figures(j: Join, steps_of: dict) -> dict:
    """Per host name: peer wait (total and per typical step, per device: the mean over its
    participating devices), last arrivals, the wait it caused and what fixing it alone
    saves, straggler verdict and why it was late.  ``steps_of``: host → number of steps
    its capture has (per-step figures)."""
    n_h = len(j.hosts)
    host_of = np.array([p.host for p in j.participants], np.int64)
    n_i = len(j)
    out = {}
    last_host = host_of[j.last] if n_i else np.zeros(0, np.int64)
    resolved = j.resolved if j.resolved is not None else np.ones(n_i, bool)
    n_res = int(resolved.sum())
    idle_wait = j.idle_wait if j.idle_wait is not None else np.zeros_like(j.wait)
    # the wait each instance's last arriver caused: the mean over the others (inside the
    # op, and idle before it where a device already had the op)
    others = (j.wait + idle_wait).sum(axis=1) / max(len(j.participants) - 1, 1)
    hosts_in = np.unique(host_of)
    caused = np.zeros(n_h)
    np.add.at(caused, last_host, others)
    total_caused = float(others.sum())
    # what fixing the last one alone saves: its lead over the next-to-last arrival (then
    # that one is last), where the clocks can tell the two apart
    lead = j.lead if j.lead is not None else np.zeros(n_i)
    saving = np.zeros(n_h)
    np.add.at(saving, last_host[resolved], lead[resolved])
    srt = np.sort(j.lateness, axis=1) if n_i else np.zeros((0, 1))
    lead2 = srt[:, -2] - srt[:, -3] if srt.shape[1] > 2 else np.zeros(n_i)
    second_host = host_of[j.second] if j.second is not None and n_i else last_host
    p_last = 1.0 / max(hosts_in.size, 1)
    typical = float(np.median(others)) if n_i else 0.0
    outstanding = resolved & (others > OUTSTANDING * max(typical, j.resolution_ns, MIN_LEAD_NS))
    kind_names = sorted(set(j.kinds))
    kind_of = np.array([kind_names.index(k) for k in j.kinds], np.int64)
    s_all = j.step.max(axis=1) if n_i else np.zeros(0, np.int64)
    all_steps = [int(x) for x in np.unique(s_all).tolist() if x >= 0]
    for h in hosts_in.tolist():
        cols = np.flatnonzero(host_of == h)
        w_inst = j.wait[:, cols].mean(axis=1) if n_i else np.zeros(0)
        iw_inst = idle_wait[:, cols].mean(axis=1) if n_i else np.zeros(0)
        w_total = float(w_inst.sum())
        lasts = int((last_host == h).sum())
        lasts_res = int(((last_host == h) & resolved).sum())
        n_steps = max(int(steps_of.get(j.hosts[h]) or 0), 0)
        s_of = j.step[:, cols].max(axis=1) if n_i else np.zeros(0, np.int64)
        pw_step = per_step_median(s_of, w_inst, n_steps)
        iw_step = per_step_median(s_of, iw_inst, n_steps)
        mine = np.flatnonzero(last_host == h)
        # the one the others wait for: last, by more than the clocks can blur, more often
        # than chance and in most such instances, and the cause of most of the wait
        often = 2 * lasts_res >= n_res and _binom_tail(n_res, lasts_res, p_last) < CHANCE
        # or last where it matters: most of the instances whose wait stands far above the
        # typical one's (a straggler in a few steps only)
        out_h = int((outstanding & (last_host == h)).sum())
        rare = out_h >= 2 and 2 * out_h > int(outstanding.sum())
        is_str = bool(hosts_in.size > 1 and lasts_res >= 2 and (often or rare) and
                      total_caused > 0 and caused[h] >= SHARE * total_caused)
        if is_str:
            # the instances it is blamed for: those it was last to by more than the clocks
            # blur; where some of its waits stand out (a straggler of a few steps), those
            mine = mine[outstanding[mine] if out_h >= 2 else resolved[mine]]
        else:
            mine = mine[resolved[mine]]
        why = None
        if is_str:              # why it was late: only the straggler's is said
            blame = np.zeros(n_i, bool)
            blame[mine] = True
            why = why_late(j, blame)
        top = why["cause"] if why else None
        late_steps = [int(x) for x in np.unique(s_of[mine]).tolist() if x >= 0]
        cul = {}
        for i in mine.tolist():
            if j.culprit[i] and j.cause[i] == top:
                cul[j.culprit[i]] = cul.get(j.culprit[i], 0.0) + float(others[i])
        # fixed, who is last then: the next-to-last of its instances takes its place
        nxt = saving.copy()
        nxt[h] = 0.0
        mine_all = np.flatnonzero((last_host == h) & resolved)
        np.add.at(nxt, second_host[mine_all], lead2[mine_all])
        nxt[h] = 0.0
        nx = int(np.argmax(nxt)) if nxt.size and nxt.max() > 0 else None
        t_inst = j.transfer[:, cols].mean(axis=1) if n_i else np.zeros(0)
        wk, tk = np.zeros(len(kind_names)), np.zeros(len(kind_names))
        np.add.at(wk, kind_of, w_inst)
        np.add.at(tk, kind_of, t_inst)
        by_op = {k: (wk[i], tk[i]) for i, k in enumerate(kind_names)}
        # whom it waited for: the hosts arriving last where it waited
        wh = np.zeros(n_h)
        np.add.at(wh, last_host, w_inst + iw_inst)
        wh[h] = 0.0
        waited = {j.hosts[x]: float(wh[x]) for x in np.flatnonzero(wh > 0).tolist()}
        n_per = max(len(all_steps), 1)
        out[j.hosts[h]] = {
            "peer_wait_total_ns": int(round(w_total)),
            "peer_wait_ns": int(round(pw_step)) if pw_step is not None else None,
            "idle_wait_total_ns": int(round(float(iw_inst.sum()))),
            "idle_wait_ns": int(round(iw_step)) if iw_step is not None else None,
            "last_arrivals": lasts,
            "last_arrivals_resolved": lasts_res,
            "caused_wait_ns": int(round(caused[h])),
            "caused_wait_per_step_ns": int(round(caused[h] / n_per)),
            "saving_ns": int(round(saving[h])),
            "saving_per_step_ns": int(round(saving[h] / n_per)),
            "next_straggler": j.hosts[nx] if is_str and nx is not None else None,
            "next_saving_per_step_ns": int(round(nxt[nx] / n_per))
            if is_str and nx is not None else None,
            "straggler": is_str,
            "straggler_cause": top if is_str else None,
            "late_why": why if is_str else None,
            "late_steps": late_steps,
            "intermittent": bool(is_str and all_steps and len(late_steps) < 0.5 * len(all_steps)),
            "culprit": max(cul, key=cul.get) if cul and top in C.ALL else None,
            "waited_for": {k: int(round(v)) for k, v in
                           sorted(waited.items(), key=lambda x: -x[1])},
            "wait_by_op": {k: {"wait_ns": int(round(v[0])), "transfer_ns": int(round(v[1]))}
                           for k, v in by_op.items()},
        }
    return out


def step_peer_wait(j: Join, host: str) -> dict:
    """{step id: peer wait ns} of one host (the mean over its participating devices)."""
    if host not in j.hosts:
        return {}
    h = j.hosts.index(host)
    cols = np.flatnonzero(np.array([p.host for p in j.participants]) == h)
    if not len(j) or not cols.size:
        return {}
    ids, inv = np.unique(j.step[:, cols].max(axis=1), return_inverse=True)
    per = np.zeros(ids.size)
    np.add.at(per, inv.reshape(-1), j.wait[:, cols].mean(axis=1))
    return {int(k): int(round(v)) for k, v in zip(ids.tolist(), per.tolist())}
