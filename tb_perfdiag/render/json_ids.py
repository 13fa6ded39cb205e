"""What every JSON section shares: times in whole ns, gap ids and references, a chain
cut short."""
from __future__ import annotations

import numpy as np

from ..units import duration_ps
from ..analysis.result import Diagnosis
from ..analysis.steps.windows import AFTER_LAST


def ns(ps) -> int:
    """ps → ns as reported everywhere (half to even)."""
    return int(round(int(ps) / 1000))


def ns_list(ps) -> list:
    return np.rint(np.asarray(ps, np.float64) / 1000).astype(np.int64).tolist()


def gap_ids(diag: Diagnosis, rows) -> list:
    rows = np.asarray(rows, np.int64)
    return [f"{d}-{s}" for d, s in zip(diag.gaps.device[rows].tolist(),
                                       ns_list(diag.gaps.start[rows]))]


def _outside(st: int):
    """Where a gap in no step lies (``GapTable.step`` −1, −2), as the JSON says it."""
    return None if st >= 0 else ("after_last_step" if st == AFTER_LAST else "before_first_step")


def gap_refs(diag: Diagnosis, rows) -> list:
    """What a reader needs to pick a cited gap out ("8.6 ms in step 41 on TPU:1"), beside
    the id the page links with."""
    rows = np.asarray(rows, np.int64)
    g = diag.gaps
    ids = diag.steps.ids
    st = g.step[rows]
    steps = np.where(st >= 0, ids[np.maximum(st, 0)] if ids.size else -1, -1).tolist()
    names = diag.devices.name
    return [{"id": i, "duration_ns": d, "step": s if s >= 0 else None, "device": names[v],
             **({"outside": _outside(r)} if r < 0 else {})}
            for i, d, s, v, r in zip(gap_ids(diag, rows), ns_list(g.end[rows] - g.start[rows]),
                                     steps, g.device[rows].tolist(), st.tolist())]


def gap_row(diag: Diagnosis, gap_id: str) -> int:
    """Row of the gap named ``device-start_ns`` (−1 when there is none)."""
    try:
        d, s = (int(x) for x in gap_id.split("-", 1))
    except ValueError:
        return -1
    g = diag.gaps
    hit = np.flatnonzero((g.device == d) & (np.rint(g.start / 1000).astype(np.int64) == s))
    return int(hit[0]) if hit.size else -1


_dur = duration_ps         # the one unit rule (units.py)


def _typical_step_ns(diag: Diagnosis) -> int | None:
    """The step time the page and every face show (``TYPICAL_STEP``)."""
    t = diag.steps.typical_step_ps()
    return None if t is None else int(round(t / 1000))


def _short_chain(chain: list, frames: int = 3) -> str:
    chain = [c for c in chain if not c.startswith("ProfilerStep#")] or chain
    return " › ".join(chain[-frames:])
