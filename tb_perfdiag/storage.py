"""Reading bytes from local paths and fsspec URLs (gs://, s3://, memory://)."""
from __future__ import annotations

import gzip
import os
import zlib

try:  # ISA-L's inflate is about 1.6× zlib's; same format, same errors
    from isal import isal_zlib as _fast_zlib
except ImportError:  # pragma: no cover - optional speed-up
    _fast_zlib = zlib

from .errors import TraceError
from .progress import NULL

GZIP_MAGIC = b"\x1f\x8b"


def is_remote(path: str) -> bool:
    return "://" in str(path) and not str(path).startswith("file://")


def filesystem(path: str):
    """(fsspec filesystem, path inside it) for a URL, or (None, path) for local paths."""
    if not is_remote(path):
        p = str(path)
        return None, p[len("file://"):] if p.startswith("file://") else p
    import fsspec  # only needed for remote logdirs
    fs, inner = fsspec.core.url_to_fs(str(path))
    return fs, inner


def read_bytes(path: str, limit: int | None = None, progress=NULL) -> bytes:
    """Whole file, gunzipped when it is gzip.  ``limit`` caps the decompressed size."""
    fs, inner = filesystem(path)
    try:
        if fs is None:
            with open(inner, "rb") as f:
                raw = f.read()
        else:
            with fs.open(inner, "rb") as f:
                raw = f.read()
    except FileNotFoundError:
        raise TraceError(path, "file not found") from None
    except IsADirectoryError:
        raise TraceError(path, "is a directory, not a file") from None
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
    if raw[:2] == GZIP_MAGIC:
        progress.phase("decompressing", f"{len(raw) / 1e6:.0f} MB of gzip")
        if not limit and len(raw) > 18:
            # the gzip trailer holds the size (mod 4 GiB): allocate the output once
            # instead of growing it, which would briefly need far more memory
            size = int.from_bytes(raw[-4:], "little")
            try:
                return _fast_zlib.decompress(raw, 16 + zlib.MAX_WBITS, max(size, 1 << 16))
            except (zlib.error, _fast_zlib.error):
                pass      # the incremental path below names the problem
        try:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out = d.decompress(raw, limit or 0) if limit else d.decompress(raw)
            if limit and d.unconsumed_tail:
                raise TraceError(path, f"decompresses to more than {limit} bytes")
            if not d.eof:
                raise TraceError(path, "truncated gzip stream (file cut short or still being written)")
            return out
        except (zlib.error, gzip.BadGzipFile, EOFError) as e:
            raise TraceError(path, f"corrupt gzip data: {e}") from None
    if str(path).endswith(".gz"):
        raise TraceError(path, "named .gz but is not gzip-compressed")
    return raw


def is_blank(raw: bytes) -> bool:
    """True for an empty or whitespace-only buffer, without copying a large one."""
    if not raw:
        return True
    if raw[:256].strip():
        return False
    return not raw.strip()


def file_identity(path: str) -> tuple:
    """(path, size, mtime) — what a cached result is keyed by."""
    fs, inner = filesystem(path)
    if fs is None:
        st = os.stat(inner)
        return (os.path.abspath(inner), st.st_size, st.st_mtime_ns)
    info = fs.info(inner)
    mtime = info.get("mtime") or info.get("updated") or info.get("LastModified") or info.get("created")
    return (str(path), int(info.get("size") or 0), str(mtime))
