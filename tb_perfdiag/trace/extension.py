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
