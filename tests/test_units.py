"""One unit rule for durations on every face (``tb_perfdiag/units.py``; the page's
``formatNs`` is held to the same strings in ``test_frontend_logic``)."""
from __future__ import annotations

import math

from tb_perfdiag.units import duration, duration_ps

# (ns, text): whole ns below 1 µs, µs below 1 ms, ms below 1 s, s above, three
# significant digits (the whole part at least)
CASES = [
    (0, "0 ns"), (640, "640 ns"), (999, "999 ns"), (1500, "1.50 µs"), (101_000, "101 µs"),
    (1_234_567, "1.23 ms"), (12_345_678, "12.3 ms"), (1_750_000_000, "1.75 s"),
    (3_379_400_000, "3.38 s"), (6_525_000_000, "6.53 s"), (9_999_000_000, "10.0 s"),
    (999_000_000, "999 ms"), (999_600_000, "1.00 s"), (999_400_000, "999 ms"), (999_700, "1.00 ms"), (1_000_000_000, "1.00 s"),
    (10_000_000_000, "10.0 s"),
    (125_000_000_000, "125 s"), (1_125_000, "1.13 ms"), (-2_500_000, "-2.50 ms"),
    (None, "–"), (math.nan, "–"),
]


def test_the_unit_rule():
    for ns, text in CASES:
        assert duration(ns) == text, (ns, duration(ns))
    assert duration_ps(3_379_400_000_000) == "3.38 s" and duration_ps(None) == "–"


def test_no_face_writes_ms_beside_s():
    """No face writes its own units ("3379.4 ms" beside "1.75 s"): the text renderers and
    the findings' prose all take their durations from units."""
    import os
    import re
    from conftest import ROOT
    hand_made = re.compile(r"/ ?1e[369]:[.+]\d*f\}(\s|\")*(ms|µs|s)\b")
    for sub in ("render", "analysis"):
        base = os.path.join(ROOT, "tb_perfdiag", sub)
        for f in os.listdir(base):
            if f.endswith(".py"):
                text = open(os.path.join(base, f), encoding="utf-8").read()
                hit = hand_made.search(text)
                assert not hit, (f, hit.group() if hit else None)
