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
