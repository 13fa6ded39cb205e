"""The page as a reader sees it, checked against ``invariants`` (issue 63): one run opened
by a link in a tab (Playwright), its text read once it has settled, and the diagnosis the
page drew from, fetched from the same server.  Shared by ``tests/test_browser_figures.py``
and ``scripts/sweep_pages.py``; needs Playwright only when called."""
from __future__ import annotations

import re
import time
import urllib.parse

from . import invariants as I
from ..units import duration

ROOT_JS = "document.getElementById('perfdiag-root')"
# settled: the run's diagnosis drawn and its Collectives answer in (a host page), or the
# hosts table complete (a pod's summary), or an error shown
SETTLED = ("(run) => { const d = " + ROOT_JS + "?.dataset; if (!d) return false;"
           " const l = d.loaded || ''; if (!l.startsWith(run + '|')) return false;"
           " if (l.endsWith('|error')) return true;"
           " if (l.endsWith('|pod')) return !!document.querySelector('.pd-compare[data-complete]');"
           " return !!d.collectives && d.collectives !== 'loading' && d.collectives !== 'pending'; }")
TEXT = "() => [...document.querySelectorAll('.pd-header, .pd-body')].map((e) => e.innerText).join('\\n')"
# what the page drew from: its selection and the /diagnosis answer for it
DOC = ("async () => { const l = (" + ROOT_JS + ".dataset.loaded || '').split('|');"
       " if (l[1] === '*' || l[3] === 'error') return null;"
       " const u = new URL('diagnosis', document.baseURI);"
       " u.searchParams.set('run', l[0]); u.searchParams.set('host', l[1]);"
       " const r = await fetch(u); return r.ok ? await r.json() : null; }")
PART = "(sel) => { const e = document.querySelector(sel); return e ? e.innerText : ''; }"


def open_run(page, base_url: str, run: str, frame_of, timeout_ms: int = 180000) -> dict:
    """Opens ``run`` by a link in ``page`` (a fresh load) and reads it: {run, text,
    headline, typical, collectives, doc, pod, error}.  ``frame_of(page)`` finds the
    Diagnose iframe (the tests' ``plugin_frame``)."""
    page.goto("about:blank")
    page.goto(base_url + "/#perfdiag&p.perfdiag.run=" + urllib.parse.quote(run, safe=""))
    frame = frame_of(page)
    t0 = time.time()
    frame.wait_for_function(SETTLED, arg=run, timeout=timeout_ms)
    loaded = frame.evaluate("() => " + ROOT_JS + ".dataset.loaded")
    return {"run": run, "seconds": time.time() - t0, "loaded": loaded,
            "pod": loaded.endswith("|pod"), "error": loaded.endswith("|error"),
            "text": frame.evaluate(TEXT), "headline": frame.evaluate(PART, "#pd-headline"),
            "typical": frame.evaluate(PART, ".pd-typical-step"),
            "collectives": frame.evaluate(PART, "#pd-collectives"),
            "doc": frame.evaluate(DOC)}


_HEAD = re.compile(r"^(.*?): duty")
_PEER = re.compile(r"waiting for [^(]*\((\d[\d,]*(?:\.\d+)?)\s?(ns|µs|ms|s) per step")


def problems(p: dict) -> list:
    """What the read page ``p`` says that no page may: JS's empty values, shares over
    100 %, a loss per step above the typical step, a typical step other than the
    diagnosis', a headline on another device than the one that computes and loses most,
    a peer wait per step the Collectives card does not say."""
    out = [f"absurd: {x}" for x in I.absurd(p["text"])]
    doc = p.get("doc")
    if p["pod"] or p["error"] or not doc:
        return out
    step = doc.get("typical_step_ns")
    if step and p["typical"] and p["typical"].strip() != duration(step):
        out.append(f"typical step shown {p['typical']!r}, the diagnosis' {duration(step)!r}")
    if step:
        out += [f"headline: {x}" for x in I.per_step_over_step(p["headline"], step)]
        out += [f"headline: {x}" for x in I.points_agree(p["headline"], step)]
    out += [f"diagnosis: {x}" for x in I.diagnosis(doc)]
    m = _HEAD.match(p["headline"] or "")
    prim = doc.get("primary_device")
    names = {d["id"]: d["name"] for d in doc.get("devices") or []}
    if m and prim is not None and m.group(1).strip() != names.get(prim):
        out.append(f"headline on {m.group(1)!r}, the device that matters is {names.get(prim)!r}")
    pm = _PEER.search(p["headline"] or "")
    if pm:
        said = f"{pm.group(1)} {pm.group(2)}"
        if said not in p["collectives"]:
            out.append(f"headline peer wait {said} per step is not in the Collectives card")
    return out
