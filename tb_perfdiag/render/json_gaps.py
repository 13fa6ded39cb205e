"""The gap records of the JSON faces: each gap's cause shares and evidence, its host ops,
syncs and chains, the events it names."""
from __future__ import annotations

import numpy as np

from ..analysis import causes as C
from ..analysis.attribution.links import VIA_NAMES
from ..analysis.attribution.culprits import readable
from ..analysis.diagnosis import no_cyclic_gc
from ..analysis.device_time.by_op import fold_kernel_name
from ..analysis.result import Diagnosis, EventRefs, HostOps
from ..trace.model import EventKind as K
from .json_ids import _dur, _outside, _short_chain, ns, ns_list


# …and a chain's outermost and innermost frames (Python stacks run 100 frames deep); the
# frames between them are one "… N more frames" entry, the gap route gives them all
CHAIN_OUTER, CHAIN_INNER = 2, 10


_KIND_NAMES = {int(k): k.name.lower() for k in K}


_SYNC_I = C.ALL.index(C.HOST_SYNC)
_DEVICE_I = tuple(C.ALL.index(c) for c in C.DEVICE_SIDE)
_COLL_I = C.ALL.index(C.COLLECTIVE_WAIT)
_LOWER = [C.LABELS[c].lower() for c in C.ALL]


def _evidence_parts(shares: np.ndarray, total: np.ndarray) -> list:
    """Per gap (rows of ``shares``, ns): the share columns its evidence names, largest
    first — those of at least 1 % of the gap, four at most, else the largest one."""
    n, m = shares.shape
    if n == 0:
        return []
    order = np.argsort(-shares, axis=1, kind="stable")        # ties: lower column first
    sh = np.take_along_axis(shares, order, axis=1)
    big = (sh > 0) & (sh >= 0.01 * np.asarray(total, np.float64)[:, None])
    big[:, 4:] = False
    # nothing big enough: the largest share alone
    lone = ~big.any(axis=1) & (sh[:, 0] > 0)
    big[lone, 0] = True
    cols = np.where(big, order, -1)
    return [[c for c in row if c >= 0] for row in cols[:, :4].tolist()]


def _evidence(sh: list, keep: list, cause: int, names: tuple, idle_first: bool) -> str:
    """The gap's split in words (``sh`` in ns, ``keep`` the columns to name; ``names``:
    next op, issuing call, blocking call, culprit chain, the op that launched the next op
    while its graph was captured, with None where there is none)."""
    nxt, wf, blk, cul, cap = names
    parts = []
    for i in keep:
        t = _dur(sh[i] * 1000.0)
        if i == _SYNC_I:
            parts.append(f"{t} exposed by {blk}" if blk else f"{t} host sync")
        elif i in _DEVICE_I:
            what = "waiting for peers at" if i == _COLL_I else "device-side wait for"
            if wf is None:
                how = " (no launch in the trace: the device was running behind the host)"
            elif idle_first:
                how = f", issued by {wf} before the device went idle"
            else:
                how = f", issued by {wf}"
            under = f" (captured under {cap})" if cap and cap != nxt else ""
            parts.append(f"{t} {what} {nxt!r}{under}{how}")
        else:
            parts.append(f"{t} {_LOWER[i]}" + (f" ({cul})" if cul and i == cause else ""))
    return ", ".join(parts)


def _captured_op(R: EventRefs, r: int):
    """A replayed op's row: the op that launched it while its graph was captured."""
    cap = R.captured_of(r) if r >= 0 and R.captured_rows.size else None
    return readable(cap[1]) if cap and cap[1] else None


def evidence_text(diag: Diagnosis, r: int) -> str:
    """Gap ``r``'s split in words: '48.0 ms data loading (DataLoader › aten::div), 12 µs
    exposed by cudaStreamSynchronize'."""
    return gap_records(diag, [r], evidence_only=True)[0]


def _tracelens(sh: list, total: int, drained: bool) -> dict:
    """TraceLens' two axes: how the queue ran dry, and what the CPU did meanwhile."""
    dev = sum(sh[i] for i in _DEVICE_I)
    idle = C.DEVICE_SIDE_WAIT if dev * 2 > total else (C.SYNC_DRAIN if drained else C.STARVED)
    host = [(v, i) for i, v in enumerate(sh) if i not in _DEVICE_I and i != _SYNC_I and v > 0]
    return {"idle_type": idle, "cpu": C.ALL[max(host)[1]] if host else C.UNTRACED}


def tracelens(diag: Diagnosis, r: int) -> dict:
    g = diag.gaps
    return _tracelens(ns_list(g.shares[r]), ns(g.end[r] - g.start[r]), bool(g.drained[r]))


class _Events:
    """Records of cited events, memoised (a device op ends one gap and starts the next);
    the refs' columns are read as Python lists once."""

    def __init__(self, refs: EventRefs, labels: list, chain_cap: bool = False):
        self.labels = labels
        self.chain_cap = chain_cap
        self._ops: dict = {}
        self._waited: dict = {}
        self._T = None
        self._tables: dict = {}
        self._chains: dict = {}
        self.refs = refs

    def _table(self, R: EventRefs):
        t = self._tables.get(id(R))
        if t is None:
            t = self._tables[id(R)] = (
                dict(zip(R.event.tolist(), range(R.event.shape[0]))),
                [R.strings[i] for i in R.name.tolist()], ns_list(R.ts), ns_list(R.dur),
                ns_list(R.ts + R.dur), R.track.tolist(), R.hlo_op.tolist(),
                R.annotation.tolist(), R.kind.tolist(), R)
        return t

    def _chain(self, T, r, key=None):
        """The chain's names; events with one chain share one (read-only) list."""
        R = T[-1]
        key = R.chain[r] if key is None else key
        got = self._chains.get(key)
        if got is None:
            # a chain reads like the op table: C++ signatures folded (the op's own name
            # stays whole beside it)
            if self.chain_cap and len(key) > CHAIN_OUTER + CHAIN_INNER + 1:
                cut = len(key) - CHAIN_OUTER - CHAIN_INNER
                got = [readable(R.strings[i]) for i in key[:CHAIN_OUTER]] + \
                    [f"… {cut} more frames"] + \
                    [readable(R.strings[i]) for i in key[-CHAIN_INNER:]]
                self._chains[key] = got
            else:
                got = self._chains[key] = [readable(R.strings[i]) for i in key]
        return got

    def op(self, e: int):
        if e < 0:
            return None
        got = self._ops.get(e)
        if got is None:
            T = self._own()
            r = T[0][e]
            hlo, ann, R = T[6][r], T[7][r], T[-1]
            got = self._ops[e] = {
                "name": T[1][r], "label": fold_kernel_name(T[1][r]),
                "start_ns": T[2][r], "duration_ns": T[3][r],
                "hlo_op": R.strings[hlo] if hlo >= 0 else None,
                "annotation": R.strings[ann] if ann >= 0 else None,
                "track": self.labels[T[5][r]]}
            cap = self.captured(r)
            if cap is not None:
                got["captured"] = cap
        return got

    def captured(self, r: int):
        """Where a replayed device op was launched while its graph was captured: the
        capture's chain (frames, ops, annotations), its framework op and annotations."""
        R = self._own()[-1]
        k = int(np.searchsorted(R.captured_rows, r)) if R.captured_rows.size else 0
        if k >= R.captured_rows.shape[0] or int(R.captured_rows[k]) != r:
            return None
        op = int(R.captured_op[k])
        return {"op": readable(R.strings[op]) if op >= 0 else None,
                "chain": self._chain(self._own(), r, R.captured_chain[k]),
                "annotations": [R.strings[i] for i in R.captured_annotations[k]]}

    def waited(self, e: int, via: int):
        if e < 0:
            return None
        key = e * 64 + via + 1                     # via: a small code, −1 none
        got = self._waited.get(key)
        if got is None:
            T = self._own()
            r = T[0][e]
            got = {"name": T[1][r], "chain": self._chain(T, r), "thread": self.labels[T[5][r]],
                   "start_ns": T[2][r], "duration_ns": T[3][r]}
            if via >= 0:
                got["found_via"] = VIA_NAMES.get(via, "link")
            self._waited[key] = got
        return got

    def _own(self):
        if self._T is None:
            self._T = self._table(self.refs)
        return self._T

    def host_op(self, t: int, e: int, self_ps: int, refs: EventRefs | None = None) -> dict:
        T = self._table(refs or self.refs)
        r = T[0][e]
        return {"thread": self.labels[t], "name": T[1][r], "chain": self._chain(T, r),
                "self_ns": ns(self_ps), "start_ns": T[2][r], "duration_ns": T[3][r],
                "kind": _KIND_NAMES.get(T[8][r], "other")}

    def sync(self, t: int, e: int, refs: EventRefs | None = None) -> dict:
        T = self._table(refs or self.refs)
        r = T[0][e]
        return {"thread": self.labels[t], "name": T[1][r], "chain": self._chain(T, r),
                "start_ns": T[2][r], "end_ns": T[4][r]}


def _detail_of(diag: Diagnosis, detail: HostOps, refs: EventRefs, ev: _Events,
               host_ops: int | None = None) -> dict:
    """gap row → (host_ops, syncs, how many host ops in all, how many syncs) records; the
    first ``host_ops`` host ops (most self time first) and syncs when given, else all."""
    out = {}
    # each row's host ops are the next run of equal values of ``detail.gap`` (a row with
    # none has no run): the runs' bounds found once, not by a step through every op
    g = np.asarray(detail.gap)
    cut = np.flatnonzero(g[1:] != g[:-1]) + 1 if g.shape[0] else np.zeros(0, np.int64)
    run_lo = [0] + cut.tolist() if g.shape[0] else []
    run_hi = run_lo[1:] + [g.shape[0]] if g.shape[0] else []
    run_val = g[run_lo].tolist() if g.shape[0] else []
    q = 0
    track, event, self_t = detail.track, detail.event, detail.self_time
    for j, r in enumerate(detail.rows.tolist()):
        if q < len(run_val) and run_val[q] == r:
            k0, k1 = run_lo[q], run_hi[q]
            q += 1
        else:
            k0 = k1 = run_lo[q] if q < len(run_lo) else g.shape[0]
        k2 = k1 if host_ops is None else min(k1, k0 + host_ops)
        ops = [ev.host_op(t, e, s, refs) for t, e, s in zip(
            track[k0:k2].tolist(), event[k0:k2].tolist(), self_t[k0:k2].tolist())]
        syncs = detail.syncs[j]
        out[r] = (ops, [ev.sync(t, e, refs) for t, e in (
            syncs if host_ops is None else syncs[:host_ops])], k1 - k0, len(syncs))
    return out


def gap_records(diag: Diagnosis, rows, extra_detail=None, evidence_only: bool = False,
                host_ops: int | None = None) -> list:
    """One JSON record per gap row; ``extra_detail`` = (HostOps, EventRefs) of rows whose
    detail was computed on demand; ``host_ops``: each gap's first that many host ops
    (all when None).  Columns are converted once for the whole page (a page can hold every
    gap of a trace: no numpy scalar per field)."""
    with no_cyclic_gc():
        return _gap_records(diag, rows, extra_detail, evidence_only, host_ops)


def _gap_records(diag: Diagnosis, rows, extra_detail, evidence_only: bool,
                 host_ops: int | None) -> list:
    g = diag.gaps
    rows = np.asarray(rows, np.int64)
    if rows.size == 0:
        return []
    R, labels = diag.refs, diag.track_labels
    strings = R.strings
    ev = _Events(R, labels, chain_cap=host_ops is not None)
    start, end = g.start[rows], g.end[rows]
    dur = ns_list(end - start)
    sh_ns = np.rint(g.shares[rows] / 1000).astype(np.int64)
    shares = sh_ns.tolist()
    cause = g.cause[rows].tolist()
    idle_first = (g.rest_end[rows] <= start).tolist()
    # names of the cited events, looked up once per column
    cols = {}
    for key in ("next_op", "waited_for", "blocking", "culprit", "prev_op"):
        rr = R.row(getattr(g, key)[rows])
        cols[key] = rr.tolist()
    name = lambda r: readable(strings[int(R.name[r])]) if r >= 0 else None  # noqa: E731

    chain_memo: dict = {}

    def short(r):
        if r < 0:
            return None
        c = chain_memo.get(r)
        if c is None:
            c = chain_memo[r] = _short_chain([readable(strings[i]) for i in R.chain[r]])
        return c

    keep = _evidence_parts(sh_ns, np.asarray(dur, np.int64))
    evid = [_evidence(sh, kp, c, (name(nx), name(wf), name(bk), short(cu),
                                  _captured_op(R, nx)), fi)
            for sh, kp, c, nx, wf, bk, cu, fi in zip(
                shares, keep, cause, cols["next_op"], cols["waited_for"], cols["blocking"],
                cols["culprit"], idle_first)]
    # TraceLens' axes for the page at once
    sh_np = g.shares[rows]
    dev_side = sh_np[:, list(_DEVICE_I)].sum(axis=1)
    host_cols = [i for i in range(len(C.ALL)) if i not in _DEVICE_I and i != _SYNC_I]
    host = sh_np[:, host_cols]
    cpu = np.where(host.max(axis=1) > 0, np.array(host_cols)[np.argmax(host, axis=1)],
                   C.ALL.index(C.UNTRACED)).tolist()
    idle_type = np.where(dev_side * 2 > (end - start), 2, np.where(g.drained[rows], 0, 1)).tolist()
    kinds = (C.SYNC_DRAIN, C.STARVED, C.DEVICE_SIDE_WAIT)
    if evidence_only:
        return evid
    own = _detail_of(diag, diag.detail, R, ev, host_ops) if diag.detail.rows.size else {}
    if extra_detail is not None:
        own.update(_detail_of(diag, extra_detail[0], extra_detail[1], ev, host_ops))
    ids = diag.steps.ids
    st = g.step[rows]
    steps = np.where(st >= 0, ids[np.maximum(st, 0)] if ids.size else -1, -1).tolist()
    dev = g.device[rows].tolist()
    s0, e0 = ns_list(start), ns_list(end)
    thread, followed = g.thread[rows].tolist(), g.followed[rows].tolist()
    via = g.found_via[rows].tolist()
    raw = {k: getattr(g, k)[rows].tolist() for k in ("prev_op", "next_op", "waited_for",
                                                     "blocking", "culprit")}
    # every field as a column first; the records are made in one comprehension
    label = [C.LABELS[c] for c in C.ALL]
    hta = [C.HTA[c] for c in C.ALL]
    tl_memo: dict = {}

    def tracelens_of(it: int, cp: int) -> dict:
        got = tl_memo.get((it, cp))
        if got is None:
            got = tl_memo[(it, cp)] = {"idle_type": kinds[it], "cpu": C.ALL[cp]}
        return got

    rl = rows.tolist()
    names = C.ALL
    cols_out = (
        [f"{d}-{s}" for d, s in zip(dev, s0)], rl, dev,
        [x if x >= 0 else None for x in steps], [_outside(x) for x in st.tolist()],
        s0, e0, dur, cause, evid,
        [{names[i]: v for i, v in enumerate(sh) if v} for sh in shares],
        [tracelens_of(a, b) for a, b in zip(idle_type, cpu)],
        [ev.waited(b, -1) if b >= 0 else None for b in raw["blocking"]],
        [ev.waited(b, -1) if b >= 0 else None for b in raw["culprit"]],
        [labels[t] if t >= 0 else None for t in thread],
        [labels[t] if t >= 0 else None for t in followed],
        [ev.op(x) for x in raw["prev_op"]], [ev.op(x) for x in raw["next_op"]],
        [ev.waited(w, v) for w, v in zip(raw["waited_for"], via)],
        [own.get(r) for r in rl] if own else [None] * len(rl))
    return [{
        "id": i_, "rank": r, "device": d, "step": st_, **({"outside": out_} if out_ else {}),
        "start_ns": a, "end_ns": b,
        "duration_ns": du, "cause": names[c], "cause_label": label[c], "hta_category": hta[c],
        "evidence": evi, "shares_ns": sh, "tracelens": tl, "blocking": bl, "culprit": cu,
        "analysed_thread": at, "followed_thread": fo, "prev_op": po, "next_op": no,
        "waited_for": wf, "host_ops": det[0] if det else [],
        "host_ops_total": det[2] if det else 0, "syncs": det[1] if det else [],
        "syncs_total": det[3] if det else 0,
        "detail": det is not None,
    } for (i_, r, d, st_, out_, a, b, du, c, evi, sh, tl, bl, cu, at, fo, po, no, wf, det)
        in zip(*cols_out)]
