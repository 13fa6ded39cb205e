"""``tb-perfdiag scalars``: a run's trend as TensorBoard scalars, written with
TensorBoard's own event-file writer (no TensorFlow or torch needed) into a sibling run
``<run>/perfdiag`` the Scalars dashboard shows beside the run's own scalars.

Writing is idempotent by rewriting: the points of a run are written whole into a new
``events.out.tfevents.*.perfdiag`` file and the older files of ours in that folder are
removed, and nothing is written when the points already there are the same; so a second
``scalars`` (or a ``--watch`` round with no new capture) leaves the same points, never
duplicates.  A TensorBoard that read the older file meanwhile sees the new one restart
at the first step, and drops its older points of those steps (its out-of-order purge).
Only files named ``*.perfdiag`` are ever removed, and only in that folder.
"""
from __future__ import annotations

import glob
import os

import numpy as np

from .render.scalars import Point

SUFFIX = ".perfdiag"
FOLDER = "perfdiag"


def _ours(folder: str) -> list:
    return sorted(glob.glob(os.path.join(glob.escape(folder), f"events.out.tfevents.*{SUFFIX}")))


def read_points(folder: str) -> list:
    """[Point] in the files of ours in ``folder``, as written."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util
    out = []
    for path in _ours(folder):
        for ev in EventFileLoader(path).Load():
            for v in ev.summary.value:
                x = float(tensor_util.make_ndarray(v.tensor)) if v.HasField("tensor") \
                    else float(v.simple_value)
                out.append(Point(v.tag, int(ev.step), float(ev.wall_time), x))
    return out


def _event(p: Point):
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.plugins.scalar import metadata
    from tensorboard.util import tensor_util
    value = summary_pb2.Summary.Value(tag=p.tag, metadata=metadata.create_summary_metadata(
        display_name=p.tag, description=""), tensor=tensor_util.make_tensor_proto(p.value))
    return event_pb2.Event(wall_time=p.wall_time, step=p.step,
                           summary=summary_pb2.Summary(value=[value]))


def write(folder: str, points: list) -> bool:
    """Make ``folder``'s points ``points``; whether anything was written."""
    # a scalar is stored as float32: compared as stored
    key = lambda p: (p.tag, p.step, p.wall_time, float(np.float32(p.value)))  # noqa: E731
    old = _ours(folder)
    if old and sorted(map(key, read_points(folder))) == sorted(map(key, points)):
        return False
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    os.makedirs(folder, exist_ok=True)
    w = EventFileWriter(folder, filename_suffix=SUFFIX)
    try:
        for p in points:
            w.add_event(_event(p))
    finally:
        w.close()
    for path in old:        # a new file's name is unique (time, host, pid, a counter)
        os.remove(path)
    return True
