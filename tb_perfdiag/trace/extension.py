"""The optional C extension's passes, looked up by name."""
from __future__ import annotations

import os


def native_fn(name: str):
    """The extension's function ``name``, or None (not built, or TB_PERFDIAG_NO_NATIVE)."""
    if os.environ.get("TB_PERFDIAG_NO_NATIVE"):
        return None
    try:
        from .. import _native
    except ImportError:
        return None
    return getattr(_native, name, None)


NATIVE = "native"
PURE_PYTHON = ("pure Python — the C extension was not built: install a C compiler and "
               "reinstall for ~4× speed")


def reader_kind() -> str:
    """Which readers run, in words a person can act on: ``NATIVE``, or ``PURE_PYTHON``
    (the extension is not built, or TB_PERFDIAG_NO_NATIVE turns it off)."""
    if os.environ.get("TB_PERFDIAG_NO_NATIVE"):
        return "pure Python — the C extension is turned off (TB_PERFDIAG_NO_NATIVE)"
    try:
        from .. import _native  # noqa: F401
    except ImportError:
        return PURE_PYTHON
    return NATIVE
