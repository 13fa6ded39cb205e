"""Route parameters: every bad value is a 400 with a message that names the parameter,
through the real HTTP server and through the service; other failures keep their status."""
from __future__ import annotations

import json
import logging
import os
import re
from urllib.parse import parse_qsl

import pytest
from werkzeug.datastructures import MultiDict

from conftest import ROOT, call
from tb_perfdiag.cache import DiagnosisCache
from tb_perfdiag.discovery import Catalog
from tb_perfdiag.errors import ApiError, BadRequest, NotFound, TraceError
from tb_perfdiag.params import PARAMS, ROUTES, parse
from tb_perfdiag.plugin import answer
from tb_perfdiag.service import DiagnosisService

FILE = "run=r&host=h"       # well-formed; parameters are checked before any lookup

# (route, query, the message it must give)
BAD = [
    ("diagnosis", "host=h", "run is required"),
    ("diagnosis", "", "run and host are required"),
    ("gap", FILE, "id is required"),
    ("diagnosis", f"{FILE}&threshold_us=abc", "threshold_us must be a number"),
    ("diagnosis", f"{FILE}&threshold_us=0x10", "threshold_us must be a number"),
    ("diagnosis", f"{FILE}&step=two", "step must be an integer"),
    ("diagnosis", f"{FILE}&gaps_limit=1.5", "gaps_limit must be an integer"),
    ("diagnosis", f"{FILE}&kernels_only=maybe", "kernels_only must be 1, 0, true or false"),
    ("hosts", "run=r&wait=2", "wait must be 1, 0, true or false"),
    ("diagnosis", f"{FILE}&threshold_us=nan", "threshold_us must be a finite number"),
    ("diagnosis", f"{FILE}&threshold_us=-Infinity", "threshold_us must be a finite number"),
    ("timeline", f"{FILE}&start_ns=1e999", "start_ns must be a finite number"),
    ("overlay", f"{FILE}&with_events=1&end_us=inf", "end_us must be a finite number"),
    ("diagnosis", f"{FILE}&threshold_us=-1", "threshold_us must be between 0 and 10000000"),
    ("diagnosis", f"{FILE}&gaps_limit=100001", "gaps_limit must be between 0 and 100000"),
    ("diagnosis", f"{FILE}&gaps_offset=-1", "gaps_offset must be between 0 and"),
    ("timeline", f"{FILE}&width=15", "width must be between 16 and 4000"),
    ("timeline", f"{FILE}&start_ns=5&end_ns=1", "end_ns must be after start_ns"),
    ("diagnosis", "run=" + "a" * 1025 + "&host=h", "parameter 'run' is too long"),
    ("gap", f"{FILE}&id=" + "g" * 65, "parameter 'id' is too long (over 64 characters)"),
    ("diagnosis", f"{FILE}&" + "x" * 65 + "=1", "parameter name 'xxx"),
    ("diagnosis", "run=a%00b&host=h", "parameter 'run' contains a NUL byte"),
    ("version", "whatever=a%00b", "parameter 'whatever' contains a NUL byte"),
    ("diagnosis", f"{FILE}&run=s", "run is given more than once"),
]
IDS = [f"{r}:{m[:40]}" for r, _, m in BAD]


def _query(q: str) -> MultiDict:
    return MultiDict(parse_qsl(q, keep_blank_values=True))


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    ld = tmp_path_factory.mktemp("ld")
    return DiagnosisService(Catalog(str(ld)), DiagnosisCache(disk_dir=None))


@pytest.mark.parametrize("route,query,message", BAD, ids=IDS)
def test_parse_rejects(route, query, message):
    with pytest.raises(BadRequest) as e:
        parse(route, _query(query))
    assert e.value.status == 400 and message in e.value.message


@pytest.mark.parametrize("route,query,message", BAD, ids=IDS)
def test_service_answers_400(svc, route, query, message):
    fn = getattr(svc, f"{route}_json", lambda p: {})
    status, body = answer(route, fn, _query(query))
    assert status == 400 and message in body["error"], body


@pytest.mark.parametrize("route,query,message", BAD, ids=IDS)
def test_http_answers_400(tb_demo, route, query, message):
    status, headers, body = tb_demo.get(f"/data/plugin/perfdiag/{route}?{query}")
    assert status == 400 and headers["Content-Type"].startswith("application/json")
    assert message in body["error"] and set(body) == {"error"}, body


def test_values_are_typed_and_defaulted():
    p = parse("diagnosis", {"run": "r", "host": "h", "kernels_only": "TRUE", "step": "-3",
                            "threshold_us": "2.5e1", "gaps_offset": "", "_": "123"})
    assert (p.run, p.host, p.span, p.kernels_only, p.step) == ("r", "h", None, True, -3)
    assert (p.threshold_us, p.gaps_offset, p.gaps_limit) == (25.0, 0, 200)
    assert not hasattr(p, "width") and not hasattr(p, "_")
    t = parse("timeline", {"run": "r", "host": "h", "start_ns": "-5.5", "end_ns": "1e+17"})
    assert (t.start_ns, t.end_ns, t.width) == (-5.5, 1e17, 1200)
    with pytest.raises(Exception):
        p.run = "other"                                     # frozen
    assert parse("runs", {"refresh": "1"}).refresh is True
    assert parse("hosts", {"run": "r", "wait": "0"}).wait is False


def test_every_route_and_parameter_is_declared():
    from tb_perfdiag.plugin import DiagnosePlugin
    plugin = DiagnosePlugin.__new__(DiagnosePlugin)
    plugin._static_files, plugin._service, plugin._catalog = set(), None, None
    assert {r.lstrip("/") for r in plugin.get_plugin_apps()} == set(ROUTES)
    used = {n for r in ROUTES.values() for n in r.params}
    assert used == set(PARAMS)
    for p in PARAMS.values():
        assert p.type in ("str", "int", "float", "bool", "choice", "path")
        assert (p.lo is not None and p.lo < p.hi) == (p.type in ("int", "float")), p.name
        assert not (p.required and p.default is not None), p.name


def test_every_parameter_the_page_sends_is_declared():
    """The keys of ``this.params({...})`` / ``{ run, ... }`` objects handed to getJSON
    and routeUrl in the page's code belong to the route they are sent to."""
    base = ("run", "host", "span")                  # what App.params() always sends
    seen = 0
    for name in os.listdir(os.path.join(ROOT, "frontend")):
        if not name.endswith(".js"):
            continue
        src = open(os.path.join(ROOT, "frontend", name), encoding="utf-8").read()
        for m in re.finditer(r'(?:getJSON|routeUrl)\("(\w+)"(?:, *(this\.params\()?'
                             r'(?:\{([^}]*)\})?)?', src):
            route, via_params, obj = m.group(1), m.group(2), m.group(3) or ""
            keys = [k.split(":")[0].strip() for k in obj.split(",") if k.strip()]
            keys += list(base) if via_params else []
            for k in keys:
                assert k in ROUTES[route].params, (name, route, k)
            seen += 1
    assert seen >= 8


def test_service_raises_its_errors(svc):
    with pytest.raises(NotFound) as e:
        svc.diagnosis_json(parse("diagnosis", {"run": "nope", "host": "h"}))
    assert e.value.body() == {"error": "no such run/host/span in the logdir",
                              "run": "nope", "host": "h"}
    with pytest.raises(NotFound, match="no such run"):
        svc.hosts_json(parse("hosts", {"run": "nope"}))
    status, body = call(svc, "progress", {"run": "nope", "host": "h"})
    assert status == 404 and body["run"] == "nope"


def test_unreadable_file_is_422_naming_the_file_only(tmp_path):
    run = tmp_path / "ld" / "r"
    run.mkdir(parents=True)
    (run / "w.1.pt.trace.json").write_bytes(b'{"traceEvents": 1')
    svc = DiagnosisService(Catalog(str(tmp_path / "ld")), DiagnosisCache(disk_dir=None))
    for route in ("diagnosis", "timeline", "overlay", "progress"):
        status, body = call(svc, route, {"run": "r", "host": "w"})
        if route == "progress":
            assert status == 200
            continue
        assert status == 422 and body["file"] == "w.1.pt.trace.json", (route, body)
        assert str(tmp_path) not in json.dumps(body)

    def unreadable(_):
        raise TraceError("/secret/dir/x.pb", "bad")
    assert answer("status", unreadable, {}) == (422, {"error": "bad", "file": "x.pb"})


def test_unexpected_exception_is_a_short_500_and_logged(caplog):
    def boom(_):
        raise KeyError("/secret/path")
    with caplog.at_level(logging.ERROR, logger="tb_perfdiag.plugin"):
        status, body = answer("version", boom, {})
    assert status == 500 and set(body) == {"error"}
    assert "KeyError" in body["error"] and "secret" not in body["error"]
    assert "Traceback" not in json.dumps(body)
    assert any(r.exc_info for r in caplog.records)


def test_api_error_keeps_its_status_and_fields():
    def conflict(_):
        raise ApiError(409, "busy", retry_s=3)
    assert answer(None, conflict, {"anything": "goes"}) == (409, {"error": "busy", "retry_s": 3})



def test_a_path_parameter_stays_below_the_logdir():
    q = {"run": "r", "host": "h"}
    assert parse("diagnosis", {**q, "capture": "graphs/cap.json"}).capture == "graphs/cap.json"
    assert parse("diagnosis", q).capture is None
    for bad in ("../../etc/passwd", "/etc/passwd", "a/../../b", "a//b", "./a", "a/", "a\\..\\b",
                "gs://bucket/x", "C:/x", "a/.."):
        with pytest.raises(BadRequest, match="capture must be a file's path relative"):
            parse("diagnosis", {**q, "capture": bad})
