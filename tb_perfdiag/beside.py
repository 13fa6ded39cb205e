"""One piece of an analysis run on a thread of its own while the caller goes on.

The analysis of a large trace is mostly numpy and C passes, which let go of the GIL: two
whole analyses of the 20 M-event Kineto trace run side by side took 1.25× one, not 2×.
A stage that nothing before a later point needs (the host timelines) can so run on the
second core.  The thread runs in a copy of the caller's context, so that numpy's arrays
made there come from the same recycled pages (``trace.pages``) as the caller's.
"""
from __future__ import annotations

import contextvars
import threading

# what the stages run beside hold on top of the caller's, per event of the trace (the host
# side of an analysis, its timelines and their temporaries, the device time by annotation
# beside the device time by op…: the process' peak paired against one after the other,
# 36, 25, 20 and 3 B measured on the 2 M-event XSpace, the 2.2 M-event Kineto, the TPU ×80
# and the 20 M-event Kineto traces), and the most they may hold.  Past it every stage runs
# one after the other: at 40 M events the host side beside the steps raised the analysis'
# peak by 875 MB, over the 3 GB that trace is held to, for a few seconds of a 30 s analysis
SIDE_BYTES_PER_EVENT = 36
SIDE_MAX_BYTES = 512 << 20


def side_by_side(n_events: int) -> bool:
    """Whether a trace of ``n_events`` events has stages run side by side."""
    return n_events * SIDE_BYTES_PER_EVENT <= SIDE_MAX_BYTES


class Beside:
    """``fn(*args)`` started now on a thread; ``result()`` waits for it and gives its
    value or raises its exception.  ``wait()`` only waits, as leaving a ``with`` block
    on it does (a caller that fails meanwhile leaves no thread working on its data)."""

    def __init__(self, fn, *args):
        self._value = self._error = None
        ctx = contextvars.copy_context()

        def run():
            try:
                self._value = ctx.run(fn, *args)
            except BaseException as e:  # noqa: BLE001 - raised in the caller by result()
                self._error = e
        self._thread = threading.Thread(target=run, name="tb-perfdiag-beside", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        self._thread.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.wait()

    def result(self):
        """Its value, handed over once (this object keeps no reference to it)."""
        self._thread.join()
        if self._error is not None:
            err, self._error = self._error, None
            raise err
        value, self._value = self._value, None
        return value
