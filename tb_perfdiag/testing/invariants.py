"""What no face may say (issue 63), as checks shared by the browser tests, the CLI tests
and ``scripts/sweep_pages.py``: a loss per step above the step, a share above 100 %, two
values of one figure, a page opening on a copy-only device while another computes, and
JavaScript's empty values.  Each check returns the problems it found as short strings
(empty: none), so a caller can assert, count or print them."""
from __future__ import annotations

import re

# what no card may show: JS's empty values, a share over 100 %; and, but in a change
# (compare's "−803 µs"), a negative duration (a list's "- 5.72 ms" bullet is none)
ABSURD = re.compile(r"\bnull\b|\bundefined\b|\bNaN\b|Infinity"
                    r"|(?<![\d.,])(?:[1-9]\d{0,2}(?:,\d{3})+|[1-9]\d{3,}|[2-9]\d\d|1[1-9]\d|10[1-9]"
                    r"|100\.\d*[1-9])(?:\.\d+)?\s?%")
NEGATIVE = re.compile(r"(?<![\w)])[-−]\d[\d.,]*\s?(?:ns|µs|ms|s)\b")
_UNIT = {"ns": 1.0, "µs": 1e3, "ms": 1e6, "s": 1e9}
_DUR = r"(\d[\d,]*(?:\.\d+)?)\s?(ns|µs|ms|s)\b"
# a loss said per step on the page or in the CLI: "2.85 ms per step", "19.9 ms/step"
# ("2.85 ms of its 6.57 ms per step": the 6.57 ms is the device's own step, no loss)
PER_STEP = re.compile(r"(?<!of its )(?<![\d.,])" + _DUR + r"\s?(?:per step|/step|per typical step|lost per step)")
# a headline's loss in points of its window beside its figure per step
HEAD_POINTS = re.compile(r"(\d+(?:\.\d+)?) points idle in [^(]*\(" + _DUR + r" (?:of its " + _DUR
                         + r" )?per step(, [^)]*once)?\)")
TYPICAL = re.compile(r"(?:typical step|Typical step)[^\d\n]{0,40}?" + _DUR)
# a rounding step of three significant digits, and a device's step window reaching a
# little past the host's step (its last op ends after the host moved on)
SLACK = 1.10


def ns_of(number: str, unit: str) -> float:
    return float(number.replace(",", "")) * _UNIT[unit]


def absurd(text: str, changes: bool = False) -> list:
    """Every null/NaN/undefined and share over 100 % in ``text``, and every negative
    duration unless it says ``changes`` (a comparison)."""
    hits = list(ABSURD.finditer(text)) + ([] if changes else list(NEGATIVE.finditer(text)))
    return [text[max(0, m.start() - 60):m.end() + 20].replace("\n", " ") for m in hits]


def per_step_over_step(text: str, step_ns: float | None = None) -> list:
    """Every "X per step" of ``text`` above the typical step (``step_ns``, else the first
    "typical step N" the text says)."""
    if step_ns is None:
        m = TYPICAL.search(text)
        if not m:
            return []
        step_ns = ns_of(m.group(1), m.group(2))
    out = []
    for m in PER_STEP.finditer(text):
        v = ns_of(m.group(1), m.group(2))
        if v > SLACK * step_ns:
            out.append(f"{text[max(0, m.start() - 80):m.end()]!r} > step {step_ns / 1e6:.3g} ms")
    return out


def points_agree(headline: str, step_ns: float) -> list:
    """A headline's "43 points idle in X (2.85 ms of its 6.57 ms per step)" says the
    points its two durations make (the device's own step where it names one, else the
    typical step ``step_ns``): one value of one figure.  A loss also paid once has points
    over the whole window and is not held to it."""
    m = HEAD_POINTS.search(headline or "")
    if not m or m.group(6) or not step_ns:
        return []
    per = ns_of(m.group(2), m.group(3))
    window = ns_of(m.group(4), m.group(5)) if m.group(4) else step_ns
    points, want = float(m.group(1)), 100.0 * per / window
    # rounding of three significant digits, and the 3 % a window may differ unsaid
    if abs(points - want) > 1.0 + 0.04 * want:
        return [f"{headline!r}: {points:g} points, but {m.group(2)} {m.group(3)} of a "
                f"{window / 1e6:.3g} ms step is {want:.1f}"]
    return []


def _window_per_typical_step(doc: dict, dev: str) -> float:
    """The mean window of device ``dev`` over the typical steps of a diagnosis document
    (0 where the steps hold none)."""
    rows = [s for s in doc.get("steps") or [] if not s.get("outlier")] or doc.get("steps") or []
    w = [(s["devices"][dev]["end_ns"] - s["devices"][dev]["start_ns"]) for s in rows
         if dev in (s.get("devices") or {}) and s["devices"][dev].get("end_ns") is not None]
    return sum(w) / len(w) if w else 0.0


def diagnosis(doc: dict) -> list:
    """The invariants of one diagnosis document (``diagnose --json``, the page's
    /diagnosis answer): each device's loss per step within its step, every share of a
    roof, duty cycle and MFU at most 1, the headline's device one that computes."""
    out = []
    step = doc.get("typical_step_ns") or 0
    for d in doc.get("devices") or []:
        if not d.get("ops"):
            continue
        room = SLACK * max(step, _window_per_typical_step(doc, str(d["id"])))
        per = d.get("idle_per_step_ns") or {}
        if step and sum(per.values()) > room:
            out.append(f"{d['name']}: idle per step {sum(per.values()) / 1e6:.3g} ms > step "
                       f"{room / 1e6 / SLACK:.3g} ms")
        for k in ("duty_cycle",):
            if d.get(k) is not None and d[k] > 1 + 1e-9:
                out.append(f"{d['name']}: {k} {d[k]}")
        e = d.get("efficiency") or {}
        if e.get("mfu") is not None and e["mfu"] > 1:
            out.append(f"{d['name']}: MFU {e['mfu']:.3g} > 1 (peak {e.get('peak_flops_per_s')})")
        r = e.get("roofline") or {}
        if r.get("efficiency") is not None and r["efficiency"] > 1 + 1e-9:
            out.append(f"{d['name']}: roofline share {r['efficiency']:.3g}")
    for dev in (doc.get("device_ops") or {}).get("devices") or []:
        for o in dev.get("ops") or []:
            r = o.get("roofline") or {}
            if r.get("efficiency") is not None and r["efficiency"] > 1 + 1e-9:
                out.append(f"{dev['name']} · {o['name']}: roofline share {r['efficiency']:.3g}")
    for f in doc.get("findings") or []:
        per = f.get("time_lost_ns_per_step") or 0
        if step and per > SLACK * step and not (f.get("one_time") or f.get("once")):
            out.append(f"finding {f['title'][:80]!r}: {per / 1e6:.3g} ms per step > step "
                       f"{step / 1e6:.3g} ms")
    out += primary_computes(doc)
    return out


def primary_computes(doc: dict) -> list:
    """The device the page opens on computes where another device of the host does."""
    p = doc.get("primary_device")
    ops = (doc.get("device_ops") or {}).get("devices") or []
    computes = {x["device"] for x in ops
                if any(o.get("class") == "compute" and o.get("total_ns", 0) > 0
                       for o in x.get("ops") or [])}
    if p is None or not computes or p in computes:
        return []
    names = {d["id"]: d["name"] for d in doc.get("devices") or []}
    return [f"opens on {names.get(p, p)}, which runs no compute, while "
            f"{', '.join(str(names.get(c, c)) for c in sorted(computes))} do"]
