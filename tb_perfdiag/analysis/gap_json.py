"""Gap tables → JSON records.

Base fields are built column-wise for every gap; the host-op detail (every thread's
ops with self time and chains, the syncs in flight) is computed for the largest gaps
up front and for any other gap on demand (``gap_detail``), so a trace with tens of
thousands of gaps does not pay for detail nobody opens.
"""
from __future__ import annotations

import numpy as np

from ..trace.build import unique_inverse
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
        self._parent = None          # Python lists: scalar numpy indexing is slow in loops
        self._shared: dict = {}
        self._name = None
        self._scope = {}
        for key in ("hlo_op", "op_name", "tf_op"):
            st = trace.stats.get(key)
            self._scope[key] = st

    def chain(self, e: int) -> list:
        """Names from the outermost enclosing op down to ``e`` (shared prefixes memoised)."""
        c = self._chain.get(e)
        if c is not None:
            return c
        if self._parent is None:
            self._parent = self.t.parent.tolist()
            self._name = self.t.name.tolist()
        parent, name, strings, memo = self._parent, self._name, self.t.strings, self._chain
        shared = self._shared
        pending = []
        while e >= 0 and e not in memo:
            pending.append(e)
            e = parent[e]
        base = memo.get(e, []) if e >= 0 else []
        for x in reversed(pending):
            # events with the same chain of names share one (read-only) list
            key = (id(base), name[x])
            c = shared.get(key)
            if c is None:
                c = shared[key] = base + [strings[name[x]]]
            base = memo[x] = c
        return base

    def stat(self, key: str, events: np.ndarray) -> list:
        st = self._scope.get(key)
        if st is None or events.size == 0:
            return [None] * int(events.size)
        k = np.minimum(np.searchsorted(st.events, events), st.events.shape[0] - 1)
        hit = st.events[k] == events
        strings = self.t.strings
        return [strings[int(v)] if h else None for v, h in zip(st.values[k].tolist(), hit.tolist())]

    def ops(self, events: np.ndarray) -> list:
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
    prev_j, next_j = names.ops(prev), names.ops(nxt)
    via_names = [VIA_NAMES.get(v, "link") for v in via[np.maximum(nxt, 0)].tolist()]
    # waited-for columns gathered once, not per gap
    w_ok = wf >= 0
    w_i = np.where(w_ok, wf, 0)
    w_name = [trace.strings[i] for i in trace.name[w_i].tolist()]
    w_thread = [trace.track_label[i] for i in trace.track[w_i].tolist()]
    w_start, w_dur = _ns_list(trace.ts[w_i]), _ns_list(trace.dur[w_i])
    labels = [trace.track_label[i] if i >= 0 else None for i in thread.tolist()]
    dev_l, cause_l, wf_l, w_ok_l = dev.tolist(), cause.tolist(), wf.tolist(), w_ok.tolist()
    out = []
    cause_info = [(c, C.LABELS[c], C.HTA[c]) for c in C.ALL]
    for r in range(order.shape[0]):
        c, label, hta = cause_info[cause_l[r]]
        g = {
            "id": f"{dev_l[r]}-{s_ns[r]}", "rank": r, "device": dev_l[r],
            "step": steps[r] if steps[r] >= 0 else None,
            "start_ns": s_ns[r], "end_ns": e_ns[r], "duration_ns": d_ns[r],
            "cause": c, "cause_label": label, "hta_category": hta,
            "evidence": evidence[r],
            "host_time_by_cause_ns": dict(zip(BUCKETS, bt_ns[r])),
            "analysed_thread": labels[r],
            "prev_op": prev_j[r], "next_op": next_j[r],
            "waited_for": {
                "name": w_name[r], "chain": names.chain(wf_l[r]), "thread": w_thread[r],
                "start_ns": w_start[r], "duration_ns": w_dur[r],
                "found_via": via_names[r]} if w_ok_l[r] else None,
            "host_ops": [], "syncs": [], "detail": False,
        }
        if r < detail_limit:
            add_detail(trace, g, int(start[r]), int(end[r]), lines, names)
        out.append(g)
    return out


def add_detail(trace: Trace, g: dict, a: int, b: int, lines: dict, names=None) -> dict:
    """Fill ``host_ops`` (per thread, by self time in [a, b)) and ``syncs`` of one gap."""
    names = names or _Names(trace)
    host_ops, syncs = [], []
    for t, line in lines.items():
        s, e, inner = line.segments(a, b)
        ok = inner >= 0
        if ok.any():
            u, inv = unique_inverse(inner[ok])
            self_t = np.bincount(inv.reshape(-1), weights=(e - s)[ok])
            for j in np.argsort(-self_t)[:HOST_OPS_PER_THREAD].tolist():
                ev = int(u[j])
                host_ops.append({"thread": trace.track_label[t],
                                 "name": trace.strings[int(trace.name[ev])],
                                 "chain": names.chain(ev), "self_ns": int(round(self_t[j] / 1000)),
                                 "start_ns": int(round(int(trace.ts[ev]) / 1000)),
                                 "duration_ns": int(round(int(trace.dur[ev]) / 1000)),
                                 "kind": _KIND_NAMES.get(int(trace.kind[ev]), "other")})
        # the blocking call in flight as the device went idle (or that just returned)
        for probe in (a, a - 1000):
            ev = line.inner_at(probe)
            found = False
            while ev >= 0:
                k = int(trace.kind[ev])
                if k == _SYNC or k == _D2H or (
                        k == _LAUNCH and trace.dur[ev] > 20_000_000 and
                        "memcpy" in trace.strings[int(trace.name[ev])].lower()):
                    syncs.append({"thread": trace.track_label[t],
                                  "name": trace.strings[int(trace.name[ev])],
                                  "chain": names.chain(ev),
                                  "start_ns": int(round(int(trace.ts[ev]) / 1000)),
                                  "end_ns": int(round(int(trace.ts[ev] + trace.dur[ev]) / 1000))})
                    found = True
                    break
                ev = int(trace.parent[ev])
            if found:
                break
    host_ops.sort(key=lambda h: -h["self_ns"])
    g["host_ops"] = host_ops
    g["syncs"] = syncs
    g["detail"] = True
    return g
