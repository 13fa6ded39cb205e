"""One way to write a duration, for every face (terminal report, check, compare, pod
table, findings' prose, MCP): whole ns below 1 µs, µs below 1 ms, ms below 1 s, s above,
with three significant digits (at least the whole part: 125 s, never 125.4 s): 6.53 s, never
"6525 ms".
``frontend/format.js`` ``formatNs`` writes the same strings (``tests/test_frontend_logic``
holds them to it): values are rounded half away from zero, as JavaScript's ``toFixed``."""
from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

_STEPS = ((1e9, 1e9, "s"), (1e6, 1e6, "ms"), (1e3, 1e3, "µs"))
_PLACES = [Decimal(1), Decimal("0.1"), Decimal("0.01")]


def _fixed(x: float, places: int) -> str:
    """``x.toFixed(places)``: the float's exact value rounded half away from zero."""
    return str(Decimal(x).quantize(_PLACES[places], rounding=ROUND_HALF_UP))


def _sig3(x: float) -> str:
    # three digits of the value as rounded: 9.999 is "10.0", never "10.00"
    for places in (2, 1):
        t = _fixed(x, places)
        if abs(float(t)) < 10 ** (3 - places):
            return t
    return _fixed(x, 0)


def duration(ns) -> str:
    """Nanoseconds as text by the one unit rule: 640 → "640 ns", 1500 → "1.50 µs",
    3_379_400_000 → "3.38 s", 12_500_000_000 → "12.5 s"; None or NaN → "–"."""
    if ns is None:
        return "–"
    v = float(ns) + 0.0           # -0.0 → 0.0: "0 ns", as toFixed writes it
    if math.isnan(v):
        return "–"
    a = abs(v)
    for at, scale, unit in _STEPS:
        # what rounds up to a thousand of the smaller unit is written in this one
        if a >= at * 0.9995:
            return f"{_sig3(v / scale)} {unit}"
    return f"{_fixed(v, 0)} ns"


def duration_ps(ps) -> str:
    """``duration`` of picoseconds (the trace model's unit)."""
    return duration(None if ps is None else float(ps) / 1000)
