"""Budget results (``analysis/compare/budgets.py``) → terminal lines, JSON, JUnit XML and GitHub
Actions annotations, for ``tb-perfdiag check``.

A checked profile is (label, file, [Result]) or (label, file, error message) when it
could not be read."""
from __future__ import annotations

import datetime
import socket
from xml.etree import ElementTree as ET

from ..units import duration_ps
from ..analysis import causes as C
from ..analysis.compare.budgets import Result
from .efficiency import pct, si


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


_ms = duration_ps          # the one unit rule (units.py)


def title(r: Result) -> str:
    """The budget in a few words: the test case's name."""
    if r.budget == "min_duty":
        return f"{r.subject or 'device'} duty cycle per typical step ≥ {_pct(r.limit)}"
    if r.budget == "max_idle":
        cause, dev = r.detail.get("cause", ""), r.detail.get("device", "")
        return f"{dev} {C.LABELS.get(cause, cause).lower()} idle ≤ {_pct(r.limit)} of its step window"
    if r.budget == "max_peer_wait":
        return f"{r.subject} peer wait at collectives ≤ {_pct(r.limit)} of its step window"
    if r.budget == "min_mfu":
        return f"{r.subject} MFU per typical step ≥ {_pct(r.limit)}"
    if r.budget == "max_trend_regression":
        return f"latest trusted capture at most {_pct(r.limit)} slower than the run's median"
    return f"typical step at most {_pct(r.limit)} slower than the baseline"


def message(r: Result) -> str:
    """What was measured, and against what."""
    if r.budget == "min_duty":
        if r.value is None:
            return f"no device activity: the duty cycle budget of {_pct(r.limit)} cannot be met"
        d = r.detail
        return (f"{r.subject} duty cycle per typical step {_pct(r.value)} "
                f"{'≥' if r.ok else '<'} {_pct(r.limit)} (busy {_ms(d['busy_ps'])} of "
                f"its {_ms(d['window_ps'])} window per typical step, {d['steps']} typical "
                f"steps)")
    if r.budget == "max_idle":
        d = r.detail
        # the share is of the device's window per typical step (what its duty cycle is
        # over), which is not the host's typical step: the label names it
        return (f"{d['device']} {C.LABELS[d['cause']].lower()} idle {_ms(d['idle_ps'])} per "
                f"typical step = {_pct(r.value)} of its {_ms(d['window_ps'])} window per "
                f"typical step {'≤' if r.ok else '>'} {_pct(r.limit)}")
    if r.budget == "min_mfu":
        d = r.detail
        if r.value is None:
            return (f"{d['device']} MFU cannot be measured ({d['reason']}): the budget of "
                    f"{_pct(r.limit)} is not met")
        if r.value > 1:
            return (f"{d['device']} MFU per typical step {100 * r.value:.3g}%: over 100%, the "
                    f"peak of {d['peak_flops_per_s'] / 1e12:,.3g} TFLOP/s is below what ran "
                    f"(check --peak-tflops)")
        # the figures by the rules of every face: SI FLOPs, the one duration rule
        return (f"{d['device']} MFU per typical step {pct(r.value)} "
                f"{'≥' if r.ok else '<'} {_pct(r.limit)} ({si(d['flops'], 'FLOP')} in "
                f"{duration_ps(d['window_s'] * 1e12)} at {si(d['peak_flops_per_s'], 'FLOP/s')}"
                + (f", {d['steps']} typical steps)" if d["steps"] else ")"))
    if r.budget == "max_peer_wait":
        d = r.detail
        if r.value is None:
            return (f"{d['device']} peer wait at collectives cannot be measured ({d['reason']}): "
                    f"the budget of {_pct(r.limit)} of the step is not met")
        return (f"{d['device']} peer wait at collectives {_ms(d['peer_wait_ps'])} per typical "
                f"step = {_pct(r.value)} of its {_ms(d['window_ps'])} window per typical step "
                f"{'≤' if r.ok else '>'} {_pct(r.limit)} "
                f"(busy time waiting for the last participant"
                + (f", mostly for {d['waited_for']}" if d.get("waited_for") and r.value else "")
                + f", {d['steps']} typical steps)")
    if r.budget == "max_trend_regression":
        d = r.detail
        if r.value is None:
            return (f"none of the run's {d['captures']} captures is trusted: the budget of "
                    f"{_pct(r.limit)} cannot be checked")
        return (f"typical step of the latest trusted capture ({d['latest']}) "
                f"{_ms(d['latest_ps'])} against the median {_ms(d['median_ps'])} of the "
                f"run's trusted captures: {'+' if r.value >= 0 else '−'}"
                f"{abs(r.value) * 100:.1f}% {'≤' if r.ok else '>'} {_pct(r.limit)}"
                + (f" ({d['flagged']} of {d['captures']} captures not trusted, left out)"
                   if d["flagged"] else ""))
    d = r.detail
    grew = "; ".join(f"{'device busy' if what == 'busy' else C.LABELS[what].lower() + ' idle'}"
                     f" +{_ms(ps)} per step on {dev}" for ps, what, dev in d.get("grew", []))
    return (f"typical step {_ms(d['before_ps'])} (baseline {d['baseline']}) → "
            f"{_ms(d['after_ps'])}: {'+' if r.value >= 0 else '−'}{abs(r.value) * 100:.1f}% "
            f"{'≤' if r.ok else '>'} {_pct(r.limit)}" + (f"; grew: {grew}" if grew else ""))


def text(checked: list) -> str:
    lines = []
    n = bad = 0
    for label, _, res in checked:
        lines.append(f"== {label}")
        if isinstance(res, str):
            lines.append(f"   ERROR {res}")
            continue
        for r in res:
            n += 1
            bad += not r.ok
            lines.append(f"   {'PASS' if r.ok else 'FAIL'}  {message(r)}")
    errors = sum(isinstance(res, str) for _, _, res in checked)
    lines.append(f"{bad} of {n} budget check(s) failed" + (f", {errors} profile(s) unreadable"
                                                           if errors else ""))
    return "\n".join(lines)


def as_json(checked: list) -> dict:
    out = []
    for label, path, res in checked:
        if isinstance(res, str):
            out.append({"label": label, "file": path, "error": res})
            continue
        out.append({"label": label, "file": path, "checks": [
            {"budget": r.budget, "subject": r.subject, "value": r.value, "limit": r.limit,
             "ok": r.ok, "title": title(r), "message": message(r)} for r in res]})
    return {"profiles": out,
            "failed": sum(not r.ok for _, _, res in checked if not isinstance(res, str)
                          for r in res),
            "errors": sum(isinstance(res, str) for _, _, res in checked)}


def junit(checked: list, elapsed_s: float = 0.0) -> bytes:
    """JUnit XML: one test suite per profile, one test case per budget check (a failure
    when breached); an unreadable profile is a suite with one errored case."""
    root = ET.Element("testsuites", name="tb-perfdiag check")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    stamp = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    host = socket.gethostname() or "localhost"
    for label, path, res in checked:
        suite = ET.SubElement(root, "testsuite", name=label, timestamp=stamp, hostname=host)
        cases = []
        if isinstance(res, str):
            case = ET.SubElement(suite, "testcase", classname="tb-perfdiag.check",
                                 name="read the profile", time="0")
            ET.SubElement(case, "error", message=res, type="unreadable").text = f"{path}: {res}"
            cases.append((0, 1))
        else:
            for r in res:
                case = ET.SubElement(suite, "testcase", classname="tb-perfdiag.check",
                                     name=title(r), time="0")
                if not r.ok:
                    ET.SubElement(case, "failure", message=message(r),
                                  type=r.budget).text = f"{path}\n{message(r)}"
                cases.append((0 if r.ok else 1, 0))
        t, f, e = len(cases), sum(c[0] for c in cases), sum(c[1] for c in cases)
        suite.set("tests", str(t))
        suite.set("failures", str(f))
        suite.set("errors", str(e))
        suite.set("skipped", "0")
        suite.set("time", f"{elapsed_s:.3f}")
        totals["tests"] += t
        totals["failures"] += f
        totals["errors"] += e
    for k, v in totals.items():
        root.set(k, str(v))
    root.set("time", f"{elapsed_s:.3f}")
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def _gh_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_prop(s: str) -> str:
    return _gh_data(s).replace(":", "%3A").replace(",", "%2C")


def github(checked: list) -> str:
    """GitHub Actions workflow commands: an ``::error`` per breach or unreadable profile
    (shown on the run's summary and, with ``file``, on the changed file)."""
    lines = []
    for label, path, res in checked:
        if isinstance(res, str):
            lines.append(f"::error file={_gh_prop(path)},title={_gh_prop('tb-perfdiag: unreadable profile')}"
                         f"::{_gh_data(f'{label}: {res}')}")
            continue
        for r in res:
            if not r.ok:
                lines.append(f"::error file={_gh_prop(path)},title={_gh_prop('tb-perfdiag: ' + title(r))}"
                             f"::{_gh_data(f'{label}: {message(r)}')}")
    return "\n".join(lines)
