"""Compilation findings: recompilation of the same function with new shapes, and the one-time
first compiles."""
from __future__ import annotations

from collections import defaultdict


from .. import causes as C
from .fixes import fix_for
from .common import Scope



def _compile_summary(trace, diag, steps, compile_ev, compile_step, out, fw) -> None:
    """Say on the compilation findings how many compiles ran in which steps.  Only the
    same function compiled again is a recompilation (new shapes); the first compile of
    each function is a one-time cost."""
    comp = [f for f in out if f.extra.get("cause") == C.COMPILATION]
    T = diag.compilations
    if T is None or not len(T):
        return
    ids = diag.steps.ids
    sid = [int(ids[s]) if s >= 0 and ids.size else None for s in T.step.tolist()]
    per_step = defaultdict(lambda: [0, 0])
    for s, d in zip(sid, T.duration.tolist()):
        if s is not None:
            per_step[s][0] += 1
            per_step[s][1] += int(d)
    again = sorted({s for s, r in zip(sid, T.recompile.tolist()) if r and s is not None})
    grows = bool(T.recompile.any())
    funcs = sorted({f for f in T.function if f})
    for f in comp:
        f.fix = fix_for(f.kind.value, "*", fw)
        f.detail += (f" {len(T)} compilation(s) of {len(funcs) or 'unnamed'} function(s) in "
                     f"steps {sorted(per_step)}"
                     + (f"; compiled again in steps {again}: the program changes between "
                        "steps (new shapes)." if grows else ": first compiles, a one-time cost."))
        f.extra.update(compile_steps=sorted(per_step), recompile_steps=again,
                       grows_with_steps=grows,
                       per_step={str(k): {"count": v[0], "total_ns": v[1] // 1000}
                                 for k, v in per_step.items()})


def detect(s: Scope) -> None:
    _compile_summary(s.trace, s.diag, s.steps, s.compile_ev, s.compile_step, s.out, s.fw)
