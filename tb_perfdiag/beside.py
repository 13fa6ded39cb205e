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
