"""Gap tables → JSON records.

Base fields are built column-wise for every gap; the host-op detail (every thread's
ops with self time and chains, the syncs in flight) is computed for the largest gaps
up front and for any other gap on demand (``gap_detail``), so a trace with tens of
thousands of gaps does not pay for detail nobody opens.
"""
from __future__ import annotations

import numpy as np

from ..trace.build import unique_inverse, unique_rows
from ..trace.model import EventKind as K, Trace
from . import causes as C
from .attribution import VIA_NAMES
from .hostline import BUCKETS

HOST_OPS_PER_THREAD = 8
_SYNC, _D2H, _LAUNCH = int(K.SYNC), int(K.TRANSFER_D2H), int(K.LAUNCH)
_KIND_NAMES = {int(k): k.name.lower() for k in K}


def _ns_list(ps: np.ndarray) -> list:
    return np.rint(np.asarray(ps, np.float64) / 1000).astype(np.int64).tolist()


class _Names:
    """Memoised per-event strings: chains and op records repeat across gaps."""

    def __init__(self, trace: Trace):
        self.t = trace
        self._chain: dict = {}
        self._shared: dict = {}
        self._scope = {}
        for key in ("hlo_op", "op_name", "tf_op"):
            st = trace.stats.get(key)
            self._scope[key] = st

    def chain(self, e: int) -> list:
        """Names from the outermost enclosing op down to ``e`` (shared prefixes memoised)."""
        c = self._chain.get(e)
        if c is not None:
            return c
        # scalar reads from the columns: a few thousand chains per diagnosis, whereas
        # .tolist() of whole columns costs 50 ms and 70 MB on a 2 M-event trace
        parent, name, strings, memo = self.t.parent, self.t.name, self.t.strings, self._chain
        shared = self._shared
        pending = []
        while e >= 0 and e not in memo:
            pending.append(e)
            e = int(parent[e])
        base = memo.get(e, []) if e >= 0 else []
        for x in reversed(pending):
            # events with the same chain of names share one (read-only) list
            nm = int(name[x])
            key = (id(base), nm)
            c = shared.get(key)
            if c is None:
                c = shared[key] = base + [strings[nm]]
            base = memo[x] = c
        return base

    def chains(self, events: np.ndarray) -> list:
        """``chain`` of many events at once: the ancestors' names as rows of a matrix,
        one list per distinct row (chains repeat from step to step)."""
        t = self.t
        events = np.asarray(events, np.int64)
        if events.size == 0:
            return []
        cols, cur = [], events
        while (cur >= 0).any():
            cols.append(np.where(cur >= 0, t.name[np.maximum(cur, 0)], -1))
            cur = np.where(cur >= 0, t.parent[np.maximum(cur, 0)], -1)
        if not cols:
            return [[] for _ in range(events.shape[0])]
        rows = np.stack(cols[::-1], axis=1).astype(np.int64)       # outermost first
        u, inv = unique_rows(rows)
        strings = t.strings
        made = [[strings[x] for x in r if x >= 0] for r in u.tolist()]
        return [made[i] for i in inv.tolist()]

    def stat(self, key: str, events: np.ndarray) -> list:
        st = self._scope.get(key)
        if st is None or events.size == 0:
            return [None] * int(events.size)
        k = np.minimum(np.searchsorted(st.events, events), st.events.shape[0] - 1)
        hit = st.events[k] == events
        strings = self.t.strings
        return [strings[int(v)] if h else None for v, h in zip(st.values[k].tolist(), hit.tolist())]

    def ops(self, events: np.ndarray) -> list:
        """One record per event (None for −1); an event listed twice shares its record
        (a device op between two gaps is the next op of one and the previous of the other)."""
        u, inv = unique_inverse(np.asarray(events, np.int64))
        made = self._ops(u)
        return [made[i] for i in inv.reshape(-1).tolist()]

    def _ops(self, events: np.ndarray) -> list:
        t = self.t
        ok = events >= 0
        e = np.where(ok, events, 0)
        names = [t.strings[i] for i in t.name[e].tolist()]
        starts, durs = _ns_list(t.ts[e]), _ns_list(t.dur[e])
        hlo = self.stat("hlo_op", e)
        scope = self.stat("op_name", e)
        tf = self.stat("tf_op", e)
        labels = [t.track_label[i] for i in t.track[e].tolist()]
        out = []
        for j, good in enumerate(ok.tolist()):
            out.append({"name": names[j], "start_ns": starts[j], "duration_ns": durs[j],
                        "hlo_op": hlo[j], "annotation": scope[j] or tf[j],
                        "track": labels[j]} if good else None)
        return out


def gaps_json(trace: Trace, gaps_all: list, gap_step: list, step_ids: np.ndarray, via,
              lines: dict, detail_limit: int) -> list:
    """All gaps, largest first (ties: earlier first)."""
    if not gaps_all or not sum(len(g) for g in gaps_all):
        return []
    cat = lambda name: np.concatenate([getattr(g, name) for g in gaps_all])  # noqa: E731
    dev, start, end = cat("device"), cat("start"), cat("end")
    prev, nxt, wf, cause = cat("prev_op"), cat("next_op"), cat("waited_for"), cat("cause")
    thread, btime = cat("thread"), np.concatenate([g.bucket_time for g in gaps_all])
    evidence = [e for g in gaps_all for e in g.evidence]
    step_idx = np.concatenate(gap_step)
    order = np.lexsort((start, -(end - start)))
    names = _Names(trace)
    dev, start, end = dev[order], start[order], end[order]
    prev, nxt, wf, cause = prev[order], nxt[order], wf[order], cause[order]
    thread, btime, step_idx = thread[order], btime[order], step_idx[order]
    evidence = [evidence[i] for i in order.tolist()]
    s_ns, e_ns = _ns_list(start), _ns_list(end)
    d_ns = _ns_list(end - start)
    bt_ns = np.rint(btime / 1000).astype(np.int64).tolist()
    steps = np.where(step_idx >= 0, step_ids[np.maximum(step_idx, 0)], -1).tolist()
    both = names.ops(np.concatenate((prev, nxt)))
    prev_j, next_j = both[:prev.shape[0]], both[prev.shape[0]:]
    via_names = [VIA_NAMES.get(v, "link") for v in via[np.maximum(nxt, 0)].tolist()]
    # waited-for columns gathered once, not per gap
    w_ok = wf >= 0
    w_i = np.where(w_ok, wf, 0)
    w_name = [trace.strings[i] for i in trace.name[w_i].tolist()]
    w_thread = [trace.track_label[i] for i in trace.track[w_i].tolist()]
    w_start, w_dur = _ns_list(trace.ts[w_i]), _ns_list(trace.dur[w_i])
    labels = [trace.track_label[i] if i >= 0 else None for i in thread.tolist()]
    w_chain = names.chains(np.where(w_ok, wf, -1))
    cause_info = [(c, C.LABELS[c], C.HTA[c]) for c in C.ALL]
    out = []
    # one pass over the columns as Python lists: no per-gap indexing
    for r, (d, s0, e0, du, st, ci, ev, bt, lab, pj, nj, wok, wn, wc, wt, ws, wd, vn) in \
            enumerate(zip(dev.tolist(), s_ns, e_ns, d_ns, steps, cause.tolist(), evidence,
                          bt_ns, labels, prev_j, next_j, w_ok.tolist(), w_name, w_chain,
                          w_thread, w_start, w_dur, via_names)):
        c, label, hta = cause_info[ci]
        out.append({
            "id": f"{d}-{s0}", "rank": r, "device": d,
            "step": st if st >= 0 else None,
            "start_ns": s0, "end_ns": e0, "duration_ns": du,
            "cause": c, "cause_label": label, "hta_category": hta,
            "evidence": ev,
            "host_time_by_cause_ns": dict(zip(BUCKETS, bt)),
            "analysed_thread": lab,
            "prev_op": pj, "next_op": nj,
            "waited_for": {"name": wn, "chain": wc, "thread": wt, "start_ns": ws,
                           "duration_ns": wd, "found_via": vn} if wok else None,
            "host_ops": [], "syncs": [], "detail": False,
        })
    m = min(detail_limit, len(out))
    if m:
        add_details(trace, out[:m], start[:m], end[:m], lines, names)
    return out


def add_detail(trace: Trace, g: dict, a: int, b: int, lines: dict, names=None) -> dict:
    """Fill ``host_ops`` (per thread, by self time in [a, b)) and ``syncs`` of one gap."""
    add_details(trace, [g], np.array([a], np.int64), np.array([b], np.int64), lines, names)
    return g


def add_details(trace: Trace, gaps: list, a: np.ndarray, b: np.ndarray, lines: dict,
                names=None) -> None:
    """``add_detail`` for many gaps at once: one pass per host thread over the segments
    inside all the gaps' windows."""
    names = names or _Names(trace)
    n = len(gaps)
    host_ops = [[] for _ in range(n)]
    syncs = [[] for _ in range(n)]
    strings, name_col, kind_col = trace.strings, trace.name, trace.kind
    for t, line in lines.items():
        label = trace.track_label[t]
        starts, inner_col = line.seg_start, line.seg_inner
        n_seg = starts.shape[0]
        lo = np.maximum(np.searchsorted(starts, a, side="right") - 1, 0)
        hi = np.searchsorted(starts, b, side="left")
        cnt = np.maximum(hi - lo, 0)
        gi = np.repeat(np.arange(n), cnt)
        k = lo[gi] + (np.arange(gi.shape[0]) - np.repeat(np.cumsum(cnt) - cnt, cnt))
        s = np.maximum(starts[k], a[gi])
        nxt = np.minimum(k + 1, n_seg - 1)
        e = np.where(k + 1 < n_seg, starts[nxt], np.iinfo(np.int64).max)
        e = np.minimum(e, b[gi])
        inner = inner_col[k]
        keep = (e > s) & (inner >= 0)
        gi, inner, ln = gi[keep], inner[keep], (e - s)[keep]
        if gi.size:
            # self time per (gap, op), then each gap's 8 largest (ties: earlier op first)
            o = np.lexsort((inner, gi))
            gi, inner, ln = gi[o], inner[o], ln[o]
            first = np.ones(gi.shape[0], bool)
            first[1:] = (gi[1:] != gi[:-1]) | (inner[1:] != inner[:-1])
            at = np.flatnonzero(first)
            g_u, op_u, self_u = gi[at], inner[at], np.add.reduceat(ln, at)
            o = np.lexsort((op_u, -self_u, g_u))
            g_u, op_u, self_u = g_u[o], op_u[o], self_u[o]
            gfirst = np.searchsorted(g_u, g_u, side="left")
            top = (np.arange(g_u.shape[0]) - gfirst) < HOST_OPS_PER_THREAD
            g_u, op_u, self_u = g_u[top], op_u[top], self_u[top]
            for gg, ev, st, ts, du in zip(g_u.tolist(), op_u.tolist(), self_u.tolist(),
                                          trace.ts[op_u].tolist(), trace.dur[op_u].tolist()):
                host_ops[gg].append({"thread": label, "name": strings[int(name_col[ev])],
                                     "chain": names.chain(ev), "self_ns": int(round(st / 1000)),
                                     "start_ns": int(round(ts / 1000)),
                                     "duration_ns": int(round(du / 1000)),
                                     "kind": _KIND_NAMES.get(int(kind_col[ev]), "other")})
        # the blocking call in flight as the device went idle (or that just returned)
        probes = []
        for t0 in (a, a - 1000):
            kk = np.searchsorted(starts, t0, side="right") - 1
            probes.append(np.where(kk >= 0, inner_col[np.maximum(kk, 0)], -1).tolist())
        for gg in range(n):
            for ev in (probes[0][gg], probes[1][gg]):
                found = False
                while ev >= 0:
                    kd = int(kind_col[ev])
                    if kd == _SYNC or kd == _D2H or (
                            kd == _LAUNCH and trace.dur[ev] > 20_000_000 and
                            "memcpy" in strings[int(name_col[ev])].lower()):
                        syncs[gg].append({"thread": label, "name": strings[int(name_col[ev])],
                                          "chain": names.chain(ev),
                                          "start_ns": int(round(int(trace.ts[ev]) / 1000)),
                                          "end_ns": int(round(int(trace.ts[ev] + trace.dur[ev])
                                                              / 1000))})
                        found = True
                        break
                    ev = int(trace.parent[ev])
                if found:
                    break
    for g, h, sy in zip(gaps, host_ops, syncs):
        h.sort(key=lambda r: -r["self_ns"])
        g["host_ops"] = h
        g["syncs"] = sy
        g["detail"] = True
