"""Device→host transfers the user's code asked for (``.item()``, ``np.asarray``,
``TransferFromDevice``)."""
from __future__ import annotations

import numpy as np

from .. import causes as C
from ..attribution.culprits import (
    clean,
)
from .fixes import fix_for
from ..result import FindingKind as FK
from .common import _fmt, MAX_EVIDENCE, Scope


def _transfers(trace, diag, G, steps, fw, add, out) -> None:
    """Device→host reads the user's code makes (counted once per call, even when they
    open no gap).  The sync findings that cite the gaps they exposed say so; reads that
    exposed none get a finding of their own that costs nothing."""
    T = diag.transfers
    if T is None or not len(T):
        return
    from ..result import Direction
    sel = np.flatnonzero(T.direction == Direction.D2H)
    if not sel.size:
        return
    ev = T.event[sel]
    names = sorted({clean(trace.event_name(e)) for e in ev.tolist()})
    ids = diag.steps.ids
    hit_steps = sorted({int(ids[s]) for s in T.step[sel].tolist() if s >= 0})
    g = G.g
    hs = C.ALL.index(C.HOST_SYNC)
    # a gap a read exposed: its blocking call ran inside the read, on the same thread
    b = g.blocking
    rows = np.flatnonzero((b >= 0) & (G.share_ns[:, hs] > 0))
    o = np.argsort(T.start[sel], kind="stable")
    ts, te, tt = T.start[sel][o], (T.start + T.duration)[sel][o], trace.track[ev[o]]
    k = np.searchsorted(ts, trace.ts[b[rows]], side="right") - 1
    inside = (k >= 0) & (trace.ts[b[rows]] < te[np.maximum(k, 0)]) & \
        (tt[np.maximum(k, 0)] == trace.track[b[rows]])
    exposed = rows[inside]
    blocked = int(T.duration[sel].sum() // 1000)
    said = (f"{sel.size} device→host read(s) ({', '.join(names[:3])}) in {len(hit_steps)} "
            f"step(s); the host waited {_fmt(blocked)} in them in total.")
    owners = [f for f in out if f.kind == FK.HOST_SYNC and exposed.size
              and np.isin(f.gaps, exposed).any()]
    for f in owners:
        f.detail += " " + said
        f.extra["transfer_steps"] = hit_steps
    if owners:
        return
    add(FK.D2H_TRANSFER, f"{sel.size} device→host read(s) ({', '.join(names[:3])}) in "
        f"{len(hit_steps)} step(s), none exposing device idle", np.zeros(0, np.int32),
        fix_for("d2h_transfer", "*", fw), said + " The device had other work meanwhile, so "
        "they cost no idle here.", 0, -1, confidence="high", steps_hit=hit_steps,
        events=ev[:MAX_EVIDENCE])


def detect(s: Scope) -> None:
    _transfers(s.trace, s.diag, s.G, s.steps, s.fw, s.add, s.out)
