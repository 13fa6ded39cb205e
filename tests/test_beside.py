"""Stages run beside the caller (tb_perfdiag.beside): the value or the exception comes
back to the caller, the thread sees the caller's context (numpy's recycled pages), and
an analysis that fails leaves no thread working."""
import threading
import time

import numpy as np
import pytest

from tb_perfdiag.beside import Beside
from tb_perfdiag.trace import pages


def test_the_value_comes_back_once():
    job = Beside(lambda a, b: a + b, 2, 3)
    assert job.result() == 5
    assert job._value is None      # handed over: large results are not kept twice


def test_the_exception_is_raised_in_the_caller():
    def boom():
        raise ValueError("from the side")
    job = Beside(boom)
    with pytest.raises(ValueError, match="from the side"):
        job.result()


def test_it_runs_while_the_caller_works():
    started = threading.Event()
    go = threading.Event()

    def side():
        started.set()
        go.wait(5)
        return threading.current_thread().name
    job = Beside(side)
    assert started.wait(5)              # running before the caller asks for it
    go.set()
    assert job.result() == "tb-perfdiag-beside"


def test_leaving_the_block_waits_for_it():
    done = []

    def slow():
        time.sleep(0.2)
        done.append(True)
    with pytest.raises(RuntimeError):
        with Beside(slow):
            raise RuntimeError("the caller failed")
    assert done == [True]


@pytest.mark.skipif(not pages.available(), reason="the C extension is not built here")
def test_the_thread_uses_the_callers_pages():
    from numpy._core.multiarray import get_handler_name
    with pages.recycled_pages():
        inside = Beside(lambda: get_handler_name(np.zeros(1 << 23))).result()
    outside = Beside(lambda: get_handler_name(np.zeros(1 << 23))).result()
    assert inside == "tb_perfdiag_recycled_pages"
    assert outside != "tb_perfdiag_recycled_pages"


SIDE_BY_SIDE_TRACES = [
    "testdata/captures/torch_xla_cpu/plugins/profile/2026_11_22_05_09_13/cpuhost.xplane.pb",
    "testdata/captures/torch_cpu/toyhost.1795324137232776410.pt.trace.json",
    "testdata/captures/tf_cpu/input_bound",
    "testdata/synthetic/logdir/kineto_h2d_copy",
    "testdata/synthetic/logdir/xla_tpu_two_devices",
]


@pytest.mark.parametrize("rel", SIDE_BY_SIDE_TRACES)
def test_stages_side_by_side_give_the_answer_one_after_the_other_gives(rel, monkeypatch):
    """The read's and the analysis' stages paired on two threads (the stats moved by both,
    the links beside the steps, the device time by annotation beside the device time by
    op, a device's overlap beside its gaps…) give the model and the diagnosis that the
    same stages give one after the other, byte for byte."""
    import glob
    import os

    from conftest import ROOT
    from tb_perfdiag import beside
    from tb_perfdiag.file_analysis import read_and_analyse
    from tb_perfdiag.render.json import diagnosis_json, json_bytes

    path = os.path.join(ROOT, rel)
    if os.path.isdir(path):
        path = sorted(f for f in glob.glob(os.path.join(path, "**", "*"), recursive=True)
                      if f.endswith((".xplane.pb", ".pt.trace.json", ".pt.trace.json.gz")))[0]

    def answer():
        diag, ctx = read_and_analyse(path)
        stats = {k: (type(s._held).__name__, s.take(np.arange(s.events.shape[0]))
                     if s.events is not None else None) for k, s in ctx.trace.stats.items()}
        return json_bytes(diagnosis_json(diag)), stats

    assert beside.side_by_side(1000)
    paired, paired_stats = answer()
    monkeypatch.setattr(beside, "SIDE_MAX_BYTES", 0)
    assert not beside.side_by_side(1000)
    serial, serial_stats = answer()
    assert paired == serial
    assert list(paired_stats) == list(serial_stats)
    for k in paired_stats:
        assert paired_stats[k][0] == serial_stats[k][0], k
        if paired_stats[k][1] is not None:
            assert np.array_equal(paired_stats[k][1], serial_stats[k][1]), k
