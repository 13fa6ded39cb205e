"""A run seen across its files: the one place a run's collectives are joined and the
figures that follow from the join are taken (each host's figures and straggler verdict,
its peer wait per step and device, whom it waited for, its waterfalls with that wait).

Every face — the CLI, the routes, the pod summary, compare, check and MCP — builds a
``RunView`` with ``run_view`` from the run's pod rows (``render.pod.summary_row`` of each
diagnosed file, or the rows a pod job stored) and asks it; none joins by hand.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..collectives.instances import from_row
from .join import Join, join
from .peer_wait import peer_wait_cells
from .stragglers import host_figures
from .waterfalls import RunWaterfall, run_waterfall


@dataclass
class RunView:
    """The join of a run's collectives (None when no two participants share one) and,
    per host name, its figures in it (``stragglers.host_figures``)."""

    join: Join | None
    figures: dict = field(default_factory=dict)

    def joined(self, host: str) -> bool:
        """Whether ``host`` takes part in a joined instance."""
        return self.join is not None and host in self.figures

    def waited_for(self, host: str) -> str | None:
        """Whom ``host`` waited for most, or None."""
        return next(iter((self.figures.get(host) or {}).get("waited_for") or {}), None)

    def peer_cells(self, host: str, diag):
        """``host``'s peer wait per step and device, ps (``peer_wait_cells``), or None."""
        if self.join is None or diag is None:
            return None
        return peer_wait_cells(self.join, host, diag)

    def waterfall(self, host: str, diag) -> RunWaterfall | None:
        """``diag``'s waterfalls with its peer wait in this run, or None."""
        if self.join is None or diag is None:
            return None
        return run_waterfall(diag, self.join, host)


def joinable(rows: list) -> list:
    """The analysed rows that carry a collectives table."""
    return [r for r in rows if r.get("status") == 200 and r.get("collectives_table")]


def run_view(rows: list) -> RunView:
    """The ``RunView`` of a run's rows (analysed or not: failed and pending rows take no
    part)."""
    ok = joinable(rows)
    j = join([from_row(r["host"], r) for r in ok]) if ok else None
    if j is None:
        return RunView(None)
    steps = {r["host"]: r.get("steps") for r in rows if r.get("status") == 200}
    return RunView(j, host_figures(j, steps))
