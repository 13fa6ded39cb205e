"""Typed results ↔ bytes, for the result store: no pickle, nothing executable.

A stored result is a ``Diagnosis`` (``analysis/result.py``) or a ``Failure`` (a file that
is not a readable trace).  ``encode`` writes the object tree as JSON — dataclasses and
enums by name, tuples, dicts with any keys, non-finite floats — and every numpy column as
raw bytes after it (numeric and bool dtypes only), the whole zlib-compressed behind a
magic line.  ``decode`` rebuilds only the types listed here, checks each field against
its declared type, each array's dtype and length against its bytes, and caps what it
decompresses; anything else is a ``CorruptEntry`` (the store drops such an entry and the
result is computed again).  A store that others can write (a shared bucket) can therefore
make a diagnosis wrong, never run code in TensorBoard.
"""
from __future__ import annotations

import dataclasses
import enum
import itertools
import json
import math
import struct
import zlib
from dataclasses import dataclass

import numpy as np

from .analysis import result as R

try:  # ISA-L's deflate is several times zlib's at level 1; same format
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - optional speed-up
    _zlib = zlib

MAGIC = b"TBPD-RESULT-1\n"
FORMAT = 1                          # part of every store key: a new format is a new key
_DTYPE_KINDS = "biuf"               # bool, signed, unsigned, float
_MAX_DEPTH = 64


class CorruptEntry(ValueError):
    """Bytes that are not a result this code wrote."""


@dataclass
class Failure:
    """A file that is not a readable trace, as the store keeps it (same content, same
    answer: not analysed again)."""

    file: str
    reason: str
    status: int = 422          # 413: over the file budget

    def nbytes(self) -> int:
        return 100 + len(self.reason)


def _registry() -> tuple[dict, dict]:
    classes, enums = {"Failure": Failure}, {}
    for name in dir(R):
        obj = getattr(R, name)
        if isinstance(obj, type) and obj.__module__ == R.__name__:
            if dataclasses.is_dataclass(obj):
                classes[name] = obj
            elif issubclass(obj, enum.Enum):
                enums[name] = obj
    return classes, enums


_CLASSES, _ENUMS = _registry()
_PLAIN = {"np.ndarray": (np.ndarray,), "list": (list,), "dict": (dict,), "str": (str,),
          "int": (int,), "float": (int, float), "bool": (bool, np.bool_),
          "None": (type(None),), "tuple": (tuple,)}


def _allowed(annotation: str):
    """The types a field declared as ``annotation`` may hold, or None (not checked)."""
    out = []
    for part in str(annotation).split("|"):
        part = part.strip()
        if part in _PLAIN:
            out.extend(_PLAIN[part])
        elif part in _CLASSES:
            out.append(_CLASSES[part])
        elif part in _ENUMS:
            out.append(_ENUMS[part])
        else:
            return None
    return tuple(out)


_FIELDS = {name: [(f.name, _allowed(f.type)) for f in dataclasses.fields(cls)]
           for name, cls in _CLASSES.items()}


# ---- encode ----
def encode(value, level: int = 1) -> bytes:
    """``value`` (a Diagnosis or Failure) as bytes for the store."""
    if type(value).__name__ not in _CLASSES:
        raise TypeError(f"cannot store a {type(value).__name__}")
    arrays: list = []

    def enc(x):
        if isinstance(x, np.ndarray):
            if x.dtype.kind not in _DTYPE_KINDS:
                raise TypeError(f"cannot store an array of {x.dtype}")
            arrays.append(np.ascontiguousarray(x))
            return {"@a": len(arrays) - 1}
        if isinstance(x, enum.Enum):
            return {"@e": type(x).__name__, "v": enc(x.value)}
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            return {"@d": type(x).__name__,
                    "f": {f.name: enc(getattr(x, f.name)) for f in dataclasses.fields(x)}}
        if isinstance(x, np.generic):
            x = x.item()
        if x is None or isinstance(x, (bool, str)):
            return x
        if isinstance(x, int):
            return x
        if isinstance(x, float):
            return x if math.isfinite(x) else {"@f": repr(x)}
        if isinstance(x, list):
            if len(x) > 16 and _int_tuples(x):
                # call chains: one tuple of string ids per cited event (10⁵ of them)
                lens = np.fromiter(map(len, x), np.int64, len(x))
                flat = np.fromiter(itertools.chain.from_iterable(x), np.int64, int(lens.sum()))
                return {"@r": [enc(lens), enc(flat)]}
            return [enc(v) for v in x]
        if isinstance(x, tuple):
            return {"@t": [enc(v) for v in x]}
        if isinstance(x, dict):
            return {"@m": [[enc(k), enc(v)] for k, v in x.items()]}
        raise TypeError(f"cannot store a {type(x).__name__}")

    tree = enc(value)
    header = json.dumps({"v": tree, "a": [[a.dtype.str, list(a.shape)] for a in arrays]},
                        separators=(",", ":"), allow_nan=False).encode()
    parts = [struct.pack("<Q", len(header)), header] + [a.tobytes() for a in arrays]
    return MAGIC + _zlib.compress(b"".join(parts), level)


# ---- decode ----
def decode(blob: bytes, max_bytes: int = 4 << 30):
    """The result ``encode`` wrote; ``CorruptEntry`` for anything else (wrong magic,
    torn or flipped bytes, over ``max_bytes`` once decompressed, unknown types, fields
    of the wrong type)."""
    if not blob.startswith(MAGIC):
        raise CorruptEntry("not a tb-perfdiag result")
    try:
        d = zlib.decompressobj()
        raw = d.decompress(memoryview(blob)[len(MAGIC):], max_bytes)
        if d.unconsumed_tail:
            raise CorruptEntry(f"larger than {max_bytes} bytes")
        if not d.eof:
            raise CorruptEntry("truncated")
    except zlib.error as e:
        raise CorruptEntry(f"damaged: {e}") from None
    if len(raw) < 8:
        raise CorruptEntry("truncated")
    (n,) = struct.unpack_from("<Q", raw)
    if n > len(raw) - 8:
        raise CorruptEntry("truncated header")
    try:
        head = json.loads(bytes(raw[8:8 + n]))
    except (ValueError, RecursionError) as e:
        raise CorruptEntry(f"bad header: {e}") from None
    if not isinstance(head, dict) or not isinstance(head.get("a"), list):
        raise CorruptEntry("bad header")
    arrays, pos = [], 8 + n
    for spec in head["a"]:
        try:
            dt, shape = np.dtype(spec[0]), tuple(int(s) for s in spec[1])
        except (TypeError, ValueError, IndexError) as e:
            raise CorruptEntry(f"bad array: {e}") from None
        if dt.kind not in _DTYPE_KINDS or dt.hasobject or any(s < 0 for s in shape):
            raise CorruptEntry(f"bad array {spec!r}")
        size = dt.itemsize * math.prod(shape)
        if pos + size > len(raw):
            raise CorruptEntry("truncated arrays")
        arrays.append(np.frombuffer(raw, dt, math.prod(shape), pos).reshape(shape).copy())
        pos += size
    if pos != len(raw):
        raise CorruptEntry("trailing bytes")
    value = _dec(head.get("v"), arrays, 0)
    if type(value).__name__ not in _CLASSES or not dataclasses.is_dataclass(value):
        raise CorruptEntry("not a result")
    return value


def _dec(x, arrays, depth):
    if depth > _MAX_DEPTH:
        raise CorruptEntry("nested too deep")
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, list):
        return [_dec(v, arrays, depth + 1) for v in x]
    if not isinstance(x, dict) or len(x) not in (1, 2):
        raise CorruptEntry("bad node")
    try:
        if "@a" in x:
            return arrays[x["@a"]]
        if "@r" in x:
            lens, flat = (_dec(v, arrays, depth + 1) for v in x["@r"])
            if not (isinstance(lens, np.ndarray) and isinstance(flat, np.ndarray)) or \
                    lens.ndim != 1 or flat.ndim != 1 or (lens < 0).any() or \
                    int(lens.sum()) != flat.shape[0]:
                raise CorruptEntry("bad ragged list")
            vals, ends = flat.tolist(), np.cumsum(lens).tolist()
            return [tuple(vals[e - n:e]) for e, n in zip(ends, lens.tolist())]
        if "@t" in x:
            return tuple(_dec(v, arrays, depth + 1) for v in x["@t"])
        if "@m" in x:
            return {_hashable(_dec(k, arrays, depth + 1)): _dec(v, arrays, depth + 1)
                    for k, v in x["@m"]}
        if "@f" in x:
            if x["@f"] not in ("nan", "inf", "-inf"):
                raise CorruptEntry("bad float")
            return float(x["@f"])
        if "@e" in x:
            return _ENUMS[x["@e"]](_dec(x["v"], arrays, depth + 1))
        if "@d" in x:
            return _dataclass(x["@d"], x["f"], arrays, depth)
    except (KeyError, IndexError, TypeError, ValueError) as e:
        if isinstance(e, CorruptEntry):
            raise
        raise CorruptEntry(f"bad node: {type(e).__name__}") from None
    raise CorruptEntry("bad node")


def _int_tuples(x: list) -> bool:
    return all(type(t) is tuple for t in x) and \
        all(type(v) is int for t in x for v in t)


def _hashable(k):
    if isinstance(k, (list, dict)):
        raise CorruptEntry("bad key")
    return k


def _dataclass(name, fields, arrays, depth):
    spec = _FIELDS[name]
    if not isinstance(fields, dict) or set(fields) - {f for f, _ in spec}:
        raise CorruptEntry(f"bad fields for {name}")
    values = {}
    for f, allowed in spec:
        if f not in fields:
            continue            # a field with a default, written by older code
        v = _dec(fields[f], arrays, depth + 1)
        if allowed is not None and not isinstance(v, allowed):
            raise CorruptEntry(f"{name}.{f} is a {type(v).__name__}")
        values[f] = v
    try:
        return _CLASSES[name](**values)
    except TypeError as e:
        raise CorruptEntry(f"bad {name}: {e}") from None
