"""The errors a request or a file can end in, at the bottom of the import graph so that
every layer can raise them.

``ApiError`` carries an HTTP status, a message and extra JSON fields; ``plugin.py``
turns it into a response in one place.  ``TraceError`` is a file that is not a readable
trace: the readers, the CLI and the Python API raise it too, so it is no HTTP error by
itself; ``as_api_error`` is the one place it becomes one (422, naming the file).
"""
from __future__ import annotations

import os


class TraceError(Exception):
    """A file is not a readable trace.  ``path`` names it, ``reason`` says why."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


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


def trace_error(e: TraceError, **extra) -> Unprocessable:
    """The 422 of an unreadable file: its reason, and the file by name (never its path)."""
    return Unprocessable(e.reason, file=os.path.basename(e.path), **extra)


def as_api_error(e: BaseException) -> ApiError:
    """Any exception as the ``ApiError`` a route answers with: itself, 422 for a
    ``TraceError``, else a 500 whose message names only the exception's type (the
    details belong in the log, not in a response)."""
    if isinstance(e, ApiError):
        return e
    if isinstance(e, TraceError):
        return trace_error(e)
    return ApiError(500, f"internal error ({type(e).__name__}); the TensorBoard log has "
                         f"the details")
