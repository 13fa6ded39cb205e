"""The join of a run's collective tables (GUIDE §4): instances matched across the
participants (devices of one file, ranks, hosts), each clock's offset estimated from the
instances' ends, and per instance and participant the arrival, peer wait, transfer, the
last arriver and its lateness.  A pure function of the host tables (``collectives.instances
.from_row``): it runs from stored pod rows, never from a trace."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from .. import causes as C

DEVICE_COMPUTE = "device_compute"
# an estimated clock offset is applied past this many times its residual spread (and 20 µs)
OFFSET_NOISE = 3.0
MIN_OFFSET_PS = 20_000_000
# a last arrival names its arriver when it leads the next one by this many times the
# clocks' resolution (and at least MIN_LEAD_NS)
RESOLVE = 2.0
MIN_LEAD_NS = 20_000
# files whose instances' ends agree within this (nine in ten instances) share one clock:
# one collective's kernels end within 1-7 µs of each other on one host (the DLRM's eight
# ranks), while clocks of different hosts agree to tens of µs at best (NTP)
SAME_CLOCK_NS = 10_000
_NONE = np.iinfo(np.int64).min   # no step start


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
    tie_ns: np.ndarray | None = None    # per instance: readiness closer than this is a tie

    def __len__(self) -> int:
        return len(self.keys)

    def awaited(self, i: int, c: int) -> list:
        """The participants ``c`` waited for at instance ``i``: the last one where it leads
        the next by more than the clocks tell apart; else every participant ready within
        that margin of the last (they arrived together and no one of them is named). []
        where ``c`` is one of those itself: what it waited is below the resolution."""
        last = int(self.last[i])
        if c == last:
            return []
        if self.resolved is None or self.resolved[i] or self.tie_ns is None:
            return [last]
        row = self.lateness[i]
        ok = self.present[i] if self.present is not None else np.ones(row.shape, bool)
        tied = np.flatnonzero(ok & (row >= row[last] - self.tie_ns[i]))
        return [] if c in tied else tied.tolist()

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
    parts, seqs = _sequences(tables, base)
    inst_key, inst_kind, inst_ord, blocks, unmatched = _match(tables, parts, seqs)
    n_i, n_p = len(inst_key), len(parts)
    if not n_i:
        return None
    arr, end, sstart, step, idle, cul, present, step_t0 = _fill(tables, parts, blocks, n_i, n_p,
                                                                base)
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
    clocks, off_p, offsets, clock_of = _clock_offsets(tables, parts, host_of, end)
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
    ex, exb, exs, ext, has_t0, cause, culprit = _why_last(tables, parts, arr, sstart, idle, cul,
                                                          step_t0, last, rows)
    participants = [Participant(ti, tables[ti].devices[d] if d < len(tables[ti].devices) else str(d))
                    for ti, d in parts]
    return Join([t.host for t in tables], participants, inst_key, inst_kind,
                np.asarray(inst_ord, np.int64), arr, end, wait, transfer, lateness, last,
                step, offsets, noisy, unmatched, cause, culprit, base, present, resolved,
                int(round(across)), idle_wait=idle_wait, second=second_p, lead=lead,
                clock_of=clock_of, clocks=clocks, idle_excess=ex, busy_excess=exb,
                span_start_excess=exs, step_start_excess=ext, has_step_start=has_t0,
                step_first=_first_step(tables, host_of, step), tie_ns=thr)


def _sequences(tables: list, base: int) -> tuple:
    """(participants as (table, device), {key name: {participant: (its rows of that key
    in ordinal order, its clock shift)}})."""
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
    return parts, seqs


def _match(tables: list, parts: list, seqs: dict) -> tuple:
    """The complete instances of each key across its participants, aligned by their ends:
    (key, kind and ordinal per instance, per key (participants, their rows), unmatched)."""
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
    return inst_key, inst_kind, inst_ord, blocks, unmatched


def _fill(tables: list, parts: list, blocks: list, n_i: int, n_p: int, base: int) -> tuple:
    """(instance × participant) columns: arrival, end, span start, step id, idle by
    cause, culprit, presence and the launching step's host start, on the common base."""
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
    return arr, end, sstart, step, idle, cul, present, step_t0


def _clock_offsets(tables: list, parts: list, host_of, end) -> tuple:
    """(the clocks, each participant's offset, per host its clock's figures, each
    participant's clock)."""
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
    return clocks, off_p, offsets, clock_of


def _why_last(tables, parts, arr, sstart, idle, cul, step_t0, last, rows) -> tuple:
    """Per instance, the last arriver's excess over the median participant: idle by
    cause, device compute, span start and step start (where every one has it), and the
    cause and culprit that excess names."""
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
    return ex, exb, exs, ext, has_t0, cause, culprit


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
