"""The errors a request or a file can end in, at the bottom of the import graph so that
every layer can raise them.

``ApiError`` carries an HTTP status, a message and extra JSON fields; ``plugin.py``
turns it into a response in one place.  ``TraceError`` is a file that is not a readable
trace (``TraceTooLarge``: over the size budget; ``FileGone``: deleted since the
listing): the readers, the CLI and the Python API raise it too, so it is no HTTP error
by itself; ``trace_error``/``as_api_error`` are the one place it becomes one (422, 413 or
404, naming the file).
"""
from __future__ import annotations

import os


class TraceError(Exception):
    """A file is not a readable trace.  ``path`` names it, ``reason`` says why."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


class TraceTooLarge(TraceError):
    """A file over the size budget: on disk, or once decompressed."""


class FileGone(TraceError):
    """A listed file that is no longer there (deleted or renamed since the listing)."""


class StorageError(Exception):
    """A logdir or file that cannot be reached at all: an fsspec URL whose backend
    package is missing, an unknown protocol.  Its message is one line for a person."""


class ApiError(Exception):
    """A request's failure: ``status`` and the JSON body ``{"error": message, **extra}``."""

    def __init__(self, status: int, message: str, **extra):
        super().__init__(message)
        self.status = int(status)
        self.message = str(message)
        self.extra = extra

    def body(self) -> dict:
        return {"error": self.message, **self.extra}


class _FixedStatus(ApiError):
    STATUS = 500

    def __init__(self, message: str, **extra):
        super().__init__(self.STATUS, message, **extra)


class BadRequest(_FixedStatus, ValueError):
    """A parameter is missing, of the wrong type, out of range or too long."""
    STATUS = 400


class NotFound(_FixedStatus):
    """No such run, host, span, gap or file (any more)."""
    STATUS = 404


class TooLarge(_FixedStatus):
    """A file over the size budget."""
    STATUS = 413


class Unprocessable(_FixedStatus):
    """A file that is not a readable trace."""
    STATUS = 422


class Unavailable(_FixedStatus):
    """Not now: no memory or analysis slot came free in time, memory ran out, or the
    logdir's storage cannot be reached.  Worth trying again."""
    STATUS = 503


def trace_error(e: TraceError, **extra) -> ApiError:
    """The answer for a file that cannot be analysed: 413 over the budget, 404 gone since
    the listing, else 422 unreadable; its reason, and the file by name (never its path)."""
    cls = TooLarge if isinstance(e, TraceTooLarge) else \
        NotFound if isinstance(e, FileGone) else Unprocessable
    return cls(e.reason, file=os.path.basename(e.path), **extra)


def as_api_error(e: BaseException) -> ApiError:
    """Any exception as the ``ApiError`` a route answers with: itself; for a
    ``TraceError`` 413 (over the budget), 404 (gone since the listing) or 422 (not a
    readable trace), naming the file; 503 for a storage that cannot be reached or memory
    that ran out; else a 500 whose message names only the exception's type (the details
    belong in the log, not in a response)."""
    if isinstance(e, ApiError):
        return e
    if isinstance(e, TraceError):
        return trace_error(e)
    if isinstance(e, StorageError):
        return Unavailable(str(e))
    if isinstance(e, MemoryError):
        return Unavailable("not enough memory for this request now; try again, or lower "
                           "TB_PERFDIAG_MEMORY_MB so that fewer analyses run at once")
    return ApiError(500, f"internal error ({type(e).__name__}); the TensorBoard log has "
                         f"the details")
