"""What each host lost in its run's join, and who everyone waited for (GUIDE §4): peer
wait per host and step, last arrivals, the wait each caused and what fixing it alone saves,
the straggler verdict and why it was late."""
from __future__ import annotations

import math

import numpy as np

from .. import causes as C
from .join import DEVICE_COMPUTE, MIN_LEAD_NS, Join

# a straggler is last more often than chance would make it (binomial tail under this)
CHANCE = 0.05
# and causes at least this share of all the peer wait of the run
SHARE = 0.5
# an instance whose wait is this many times the typical instance's (and the clocks'
# resolution) stands out: a late arrival, not the run's jitter
OUTSTANDING = 4.0

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
        # why it was late: only the straggler's is said
        why = why_late(j, np.isin(np.arange(n_i), mine)) if is_str else None
        top = why["cause"] if why else None
        late_steps = [int(x) for x in np.unique(s_of[mine]).tolist() if x >= 0]
        cul = _culprits(j, mine, top, others)
        nx, nxt = _next_straggler(h, saving, last_host, resolved, second_host, lead2)
        by_op, waited = _by_op_and_waited(j, h, cols, kind_names, kind_of, w_inst, iw_inst,
                                          last_host)
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


def _culprits(j: Join, mine, cause, others) -> dict:
    """{culprit: the wait it caused} over the instances ``mine`` late for ``cause``."""
    cul: dict = {}
    for i in mine.tolist():
        if j.culprit[i] and j.cause[i] == cause:
            cul[j.culprit[i]] = cul.get(j.culprit[i], 0.0) + float(others[i])
    return cul


def _next_straggler(h: int, saving, last_host, resolved, second_host, lead2) -> tuple:
    """(who is last once host ``h`` is fixed, each host's saving then): the next-to-last
    of its instances takes its place."""
    nxt = saving.copy()
    nxt[h] = 0.0
    mine_all = np.flatnonzero((last_host == h) & resolved)
    np.add.at(nxt, second_host[mine_all], lead2[mine_all])
    nxt[h] = 0.0
    nx = int(np.argmax(nxt)) if nxt.size and nxt.max() > 0 else None
    return nx, nxt


def _by_op_and_waited(j: Join, h: int, cols, kind_names, kind_of, w_inst, iw_inst,
                      last_host) -> tuple:
    """({op kind: (its wait, its transfer)}, {host: how long host ``h`` waited for it}):
    whom it waited for are the hosts arriving last where it waited."""
    n_i = len(j)
    t_inst = j.transfer[:, cols].mean(axis=1) if n_i else np.zeros(0)
    wk, tk = np.zeros(len(kind_names)), np.zeros(len(kind_names))
    np.add.at(wk, kind_of, w_inst)
    np.add.at(tk, kind_of, t_inst)
    by_op = {k: (wk[i], tk[i]) for i, k in enumerate(kind_names)}
    wh = np.zeros(len(j.hosts))
    np.add.at(wh, last_host, w_inst + iw_inst)
    wh[h] = 0.0
    return by_op, {j.hosts[x]: float(wh[x]) for x in np.flatnonzero(wh > 0).tolist()}


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
