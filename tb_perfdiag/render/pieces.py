"""JSON in pieces an assistant can hold: a list paged, a record trimmed, to a byte budget.

What is left out is always said in the answer: a page carries ``next_offset`` (None at
the end) and ``returned``; a record whose lists were cut carries ``trimmed`` (each cut
list's path, how many items were kept of how many) — never a silent cut.  Sizes are those
of the compact UTF-8 JSON (``json.json_bytes``) the answer is sent as.
"""
from __future__ import annotations

import numpy as np

from ..errors import TooLarge
from .json import json_bytes

DEFAULT_MAX_BYTES = 64 * 1024
MIN_MAX_BYTES = 2048
TRIMMED_NOTE = ("lists cut to fit max_bytes (kept of total per path); ask again with a larger "
                "max_bytes, or use the CLI (tb-perfdiag diagnose --json) for the whole record")


def size(doc) -> int:
    return len(json_bytes(doc))


def _lists(x, path: str = "", skip: str | None = None):
    """(path, parent, key, list) of every list inside ``x`` (but under its key ``skip``)."""
    if isinstance(x, dict):
        for k, v in x.items():
            if k == skip:
                continue
            p = f"{path}.{k}" if path else str(k)
            if isinstance(v, list):
                yield p, x, k, v
            if isinstance(v, (dict, list)):
                yield from _lists(v, p)
    elif isinstance(x, list):
        for i, v in enumerate(x):
            p = f"{path}[{i}]"
            if isinstance(v, list):
                yield p, x, i, v
            if isinstance(v, (dict, list)):
                yield from _lists(v, p)


def _mark(doc: dict, cuts: dict) -> None:
    doc["trimmed"] = {"note": TRIMMED_NOTE, "lists": [{"path": p, "kept": k, "total": n}
                                                      for p, (k, n) in cuts.items()]}


def trim(doc: dict, max_bytes: int) -> dict:
    """``doc`` (a dict, changed in place) within ``max_bytes``: its largest list cut to
    the longest prefix that fits (else halved, and the next largest cut too), each cut
    listed under ``trimmed``; raises ``TooLarge`` when cutting every list still leaves
    it over (a huge string)."""
    if size(doc) <= max_bytes:
        return doc
    cuts: dict = {}
    while True:
        _mark(doc, cuts)
        if size(doc) <= max_bytes:
            return doc
        best = None
        for p, parent, key, lst in _lists(doc, skip="trimmed"):
            if lst:
                n = size(lst)
                if best is None or n > best[0]:
                    best = (n, p, parent, key, lst)
        if best is None:
            raise TooLarge(f"this answer does not fit max_bytes={max_bytes} even with every "
                           f"list cut; ask with a larger max_bytes")
        _, p, parent, key, lst = best
        cuts[p] = (0, cuts[p][1] if p in cuts else len(lst))
        # the longest prefix of this list that fits, once its cut is said; else half of
        # it, and the next largest list is cut too
        lo, hi = 0, len(lst) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            parent[key] = lst[:mid]
            cuts[p] = (mid, cuts[p][1])
            _mark(doc, cuts)
            lo, hi = (mid, hi) if size(doc) <= max_bytes else (lo, mid - 1)
        keep = lo
        parent[key] = lst[:keep]
        cuts[p] = (keep, cuts[p][1])
        _mark(doc, cuts)
        if size(doc) <= max_bytes:
            return doc
        parent[key] = lst[:len(lst) // 2]
        cuts[p] = (len(lst) // 2, cuts[p][1])


def page(doc: dict, key: str, items: list, offset: int, total: int, max_bytes: int) -> dict:
    """``doc`` with ``doc[key]`` = as many of ``items`` (those from ``offset`` of ``total``)
    as fit in ``max_bytes``, and ``offset``/``returned``/``total``/``next_offset`` (None
    once the last is in).  An item too large alone is trimmed (``trim``)."""
    def fill(n: int, first=None) -> dict:
        doc[key] = ([first] + items[1:n]) if first is not None else items[:n]
        doc.pop("cut_by_max_bytes", None)
        nxt = offset + n
        doc.update(offset=offset, returned=n, total=total,
                   next_offset=nxt if nxt < total else None)
        if n < len(items):
            doc["cut_by_max_bytes"] = True
        return doc
    base = size(fill(0)) + 32            # next_offset's digits and the cut flag
    sizes = np.array([size(x) + 1 for x in items], np.int64)
    n = int(np.searchsorted(np.cumsum(sizes), max_bytes - base, side="right"))
    if n == 0 and items:
        room = max_bytes - base
        first = trim(dict(items[0]), max(room, MIN_MAX_BYTES // 2)) \
            if isinstance(items[0], dict) else items[0]
        out = fill(1, first)
        if size(out) > max_bytes:
            raise TooLarge(f"one item does not fit max_bytes={max_bytes} even trimmed; ask "
                           f"with a larger max_bytes")
        return out
    out = fill(n)
    while n > 0 and size(out) > max_bytes:  # the estimate of the envelope was short
        n -= 1
        out = fill(n)
    return out
