"""tf.data in the user's terms: which stage of the input pipeline a data-loading gap
waited for, and how long that stage took per batch.

The thread that issued the step only waits in ``IteratorGetNext › Iterator::Root ›
Iterator::<op>``; the work runs on tf.data's own threads (``tf_data_*``), where the
gap's culprit is the slowest stage's op (``shares.slowest_stage``).  A TF user names a
stage by its dataset op and what it runs: ``MapAndBatch › PyFunc``.
"""
from __future__ import annotations

import re

import numpy as np

from ...units import duration
from ...trace.classify import is_input_pipeline_thread, iterator_stage
from ...trace.strings import contains_text
from ...trace.model import Trace
from ..intervals import union

# per batch the consumer calls get_next once (a Keras multi-step call: once per step)
_GET_NEXT = re.compile(r"^Iterator\w*GetNext\w*Op::DoCompute$|^IteratorGetNext\w*Op::DoCompute$")
_PYTHON_STAGE = re.compile(r"^(PyFunc|EagerPyFunc|PyFuncStateless)$")
STAGE_LABEL = "slowest tf.data stage"
STAGE_KIND = {"py_function": "Python function", "tf_ops": "TF ops"}


def _get_next_ids(trace: Trace) -> list:
    """String ids of tf.data's get_next ops: one search of all strings at once (a test
    per string costs more than the rest of this module on a trace without tf.data)."""
    if not contains_text(trace.strings, "GetNext"):
        return []
    return [i for i, n in enumerate(trace.strings) if "GetNext" in n and _GET_NEXT.match(n)]


def get_next_spans(trace: Trace) -> tuple:
    """(starts, ends): the union of the times a tf.data get_next op ran on a host thread
    (the consumer blocked until its batch existed); empty for a trace without tf.data."""
    if trace.format == "kineto":
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    ids = _get_next_ids(trace)
    ev = np.flatnonzero(np.isin(trace.name, ids)) if ids else np.zeros(0, np.int64)
    ev = ev[trace.track_kind[trace.track[ev]] == 0]
    return union(trace.ts[ev], trace.end_of(ev))


def fix_key(label: str) -> str:
    """The fix key of a stage label ('' when it names no tf.data stage)."""
    if not label.startswith(STAGE_LABEL):
        return ""
    return "py_function" if STAGE_KIND["py_function"] in label else "tf_ops"


def _iterator_at(trace: Trace, lines: dict, first: int, t: int) -> str:
    """The innermost dataset op the pipeline's consumer was in at ``t`` (issuing thread
    first, then tf.data's iterator threads)."""
    order = [first] + [x for x in lines if x != first and
                       is_input_pipeline_thread(trace.track_name[x])]
    for tr in order:
        line = lines.get(tr)
        if line is None:
            continue
        e = line.inner_at(t)
        if e < 0:
            continue
        for i in reversed(trace.chain(e)):
            st = iterator_stage(trace.event_name(int(i)))
            if st and st != "Root":
                return st
    return ""


def on_pipeline_threads(trace: Trace, evs) -> np.ndarray:
    """Per event (−1: none): whether it ran on one of tf.data's threads, the events
    ``stage`` names a stage for."""
    tracks = np.flatnonzero([is_input_pipeline_thread(n) for n in trace.track_name])
    e = np.asarray(evs, np.int64)
    return (e >= 0) & np.isin(trace.track[np.maximum(e, 0)], tracks)


def stage(trace: Trace, lines: dict, thread: int, gs: int, ge: int, ev: int):
    """(ops, label, fix key) naming the pipeline stage ``ev`` (an op on a tf.data thread)
    that a data-loading gap [gs, ge) (ps) waited for; None when ``ev`` is no such op."""
    if ev < 0 or not is_input_pipeline_thread(trace.track_name[int(trace.track[ev])]):
        return None
    op = trace.event_name(ev)
    it = _iterator_at(trace, lines, thread, (gs + ge) // 2)
    # the stage's own time in the gap on all of tf.data's threads, per get_next call
    same = np.flatnonzero(trace.name == trace.name[ev])
    s, e = trace.ts[same], trace.end_of(same)
    took = int(np.maximum(np.minimum(e, ge) - np.maximum(s, gs), 0).sum())
    ids = _get_next_ids(trace)
    g = np.flatnonzero(np.isin(trace.name, ids)) if ids else np.zeros(0, np.int64)
    calls = int(((trace.ts[g] < ge) & (trace.end_of(g) > gs)).sum())
    per = took / max(calls, 1) / 1000.0                      # ns
    ops = (it, op) if it else (op,)
    key = "py_function" if _PYTHON_STAGE.match(op) else "tf_ops"
    return ops, f"{STAGE_LABEL} ({STAGE_KIND[key]}), {_fmt(per)} a batch", key


_fmt = duration            # the one unit rule (units.py)
