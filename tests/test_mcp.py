"""``tb-perfdiag mcp LOGDIR``: the server started as a subprocess and driven over stdio by
the MCP SDK's own client, its answers checked against ``tb_perfdiag.diagnose``; paging to
the end, answers within 64 KB, and clear tool errors (the server answering on) for an
unknown run, paths out of LOGDIR, a corrupt file and a gzip bomb."""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

from conftest import IN_CI, ROOT, gzip_bomb
from test_collectives_faces import STEPS, write_run

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import demo_logdir  # noqa: E402

import tb_perfdiag  # noqa: E402
from tb_perfdiag.analysis import causes as C  # noqa: E402
from tb_perfdiag.analysis.compare.budgets import Budgets, check as check_budgets  # noqa: E402

LIMIT = 64 * 1024
TOOLS = {"list_runs", "summary", "gaps", "gap", "findings", "device_ops", "compare", "check",
         "collectives", "trend"}
INPUT, LAUNCH, NONZERO = ("01_pytorch_gpu_input_bound", "07_pytorch_gpu_launch_bound",
                          "03_pytorch_gpu_nonzero_sync")
TWO_DEVICES = "05_tpu_two_devices_h2d_collective/2026_11_22_06_01_00"   # <folder>/<capture>
JAX = "11_real_jax_cpu/2026_11_22_05_09_01"
BROKEN = "broken_run/2026_01_01_00_00_00"
RANKS = "ranks_slow"       # 4 ranks, one GPU each, rank2 late 600 µs at every all-reduce


def _need_mcp():
    try:
        import mcp.client.stdio  # noqa: F401
    except ImportError:
        if IN_CI:
            pytest.fail("the mcp package is required in CI (pip install -e '.[test]')")
        pytest.skip("the mcp package is not installed (pip install 'tb-perfdiag[mcp]')")


class ToolFailed(Exception):
    pass


class Session:
    """Blocking calls into a ``ClientSession`` running in an anyio portal; every answer's
    size is checked against the limit it was asked under."""

    def __init__(self, portal, session):
        self.portal, self.session = portal, session
        self.sizes = []

    def tools(self):
        return self.portal.call(self.session.list_tools).tools

    def raw(self, name, **args):
        return self.portal.call(lambda: self.session.call_tool(name, args))

    def __call__(self, name, **args):
        r = self.raw(name, **args)
        assert len(r.content) == 1 and r.content[0].type == "text"
        text = r.content[0].text
        n = len(text.encode("utf-8"))
        self.sizes.append(n)
        assert n <= args.get("max_bytes", LIMIT), (name, args, n)
        if r.is_error:
            raise ToolFailed(text)
        return json.loads(text)

    def error(self, name, **args) -> str:
        with pytest.raises(ToolFailed) as e:
            self(name, **args)
        assert "Traceback" not in str(e.value)
        return str(e.value)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    """The demo logdir, with a corrupt file, a gzip bomb and runs and files linked into it
    from outside (read where they lead)."""
    root = tmp_path_factory.mktemp("mcp")
    ld = root / "logdir"
    demo_logdir.build(str(ld))
    bad = ld / "broken_run" / "plugins" / "profile" / "2026_01_01_00_00_00"
    bad.mkdir(parents=True)
    (bad / "badhost.xplane.pb").write_bytes(b"\x0a\xff\xff\xff\x7f garbage")
    (ld / "bomb").mkdir()
    gzip_bomb(ld / "bomb" / "w0.1.pt.trace.json.gz", 64)      # 64 MB out of ~64 KB
    outside = root / "outside"
    outside.mkdir()
    one = glob.glob(str(ld / INPUT / "*.pt.trace.json"))[0]
    secret = outside / "w0.1700000000000.pt.trace.json"
    secret.write_bytes(open(one, "rb").read())
    os.symlink(outside, ld / "escape")                       # a run folder linked out
    write_run(ld / RANKS, 4, 2, 600)
    (ld / "links").mkdir()
    os.link(one, ld / "links" / "w0.1700000000000.pt.trace.json")
    os.symlink(secret, ld / "links" / "w1.1700000000000.pt.trace.json")   # a file linked out
    return ld


@pytest.fixture(scope="module")
def server(logdir, tmp_path_factory):
    _need_mcp()
    from anyio.from_thread import start_blocking_portal
    from mcp import ClientSession, StdioServerParameters, stdio_client
    env = dict(os.environ, TB_PERFDIAG_MAX_FILE_MB="8",
               TB_PERFDIAG_CACHE_DIR=str(tmp_path_factory.mktemp("mcp-cache")))
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "tb_perfdiag.cli", "mcp", str(logdir)],
                                   env=env, cwd=ROOT)
    errlog = open(tmp_path_factory.mktemp("mcp-log") / "stderr.log", "w+")
    with start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(stdio_client(params, errlog=errlog)) as streams:
            read, write = streams
            with portal.wrap_async_context_manager(ClientSession(read, write)) as session:
                portal.call(session.initialize)
                yield Session(portal, session)
    errlog.seek(0)
    assert "Traceback" not in errlog.read()


def _file(logdir, run):
    """The file of a run's only host (a profile-layout run is named <folder>/<capture>)."""
    folder, _, capture = run.partition("/")
    return sorted(p for p in glob.glob(str(logdir / folder / "**" / "*.*"), recursive=True)
                  if p.endswith((".xplane.pb", ".json", ".json.gz")) and capture in p)[-1]


@pytest.fixture(scope="module")
def truth(logdir):
    """tb_perfdiag.diagnose of a run's file, its JSON with every gap."""
    got = {}

    def of(run):
        if run not in got:
            rep = tb_perfdiag.diagnose(_file(logdir, run))
            got[run] = (rep, rep.to_json())
        return got[run]
    return of


def test_tools_are_listed_with_one_line_and_typed_parameters(server):
    tools = {t.name: t for t in server.tools()}
    assert set(tools) == TOOLS
    for t in tools.values():
        assert t.description and "\n" not in t.description, t.name
        assert t.annotations.read_only_hint is True
        props = t.input_schema["properties"]
        assert "max_bytes" in props, t.name
        for name, p in props.items():
            assert "type" in p or "anyOf" in p, (t.name, name, p)
    assert tools["gaps"].input_schema["properties"]["limit"]["type"] == "integer"
    assert set(tools["summary"].input_schema["required"]) == {"run"}


def test_list_runs_names_what_is_in_the_logdir_only(server):
    doc = server("list_runs")
    names = {r["run"] for r in doc["runs"]}
    assert {INPUT, LAUNCH, TWO_DEVICES, BROKEN, JAX, "bomb", "links"} <= names
    assert "escape" in names                        # a run folder linked in is listed
    links = next(r for r in doc["runs"] if r["run"] == "links")
    assert [h["name"] for h in links["hosts"]] == ["w0", "w1"]   # and a file linked in
    assert doc["total"] == len(doc["runs"]) and doc["next_offset"] is None
    small = server("list_runs", max_bytes=2048)
    assert small["returned"] < small["total"] and small["cut_by_max_bytes"]
    seen, off = [], 0
    while off is not None:
        d = server("list_runs", offset=off, max_bytes=2048)
        seen += [r["run"] for r in d["runs"]]
        off = d["next_offset"]
    assert seen == [r["run"] for r in doc["runs"]]


def test_summary_is_the_diagnosis(server, truth):
    for run in (INPUT, TWO_DEVICES):
        rep, full = truth(run)
        doc = server("summary", run=run, top=2)
        assert [(d["name"], d["duty_cycle"], d["idle_by_cause_ns"]) for d in doc["devices"]] == \
            [(d["name"], d["duty_cycle"], d["idle_by_cause_ns"]) for d in full["devices"]]
        assert doc["gaps_total"] == len(rep.gaps) == len(full["gaps"])
        assert doc["findings"] == full["findings"][:2]
        assert doc["findings_total"] == len(full["findings"])
        assert doc["steps"] == len(full["steps"]) and doc["hta"] == full["hta"]
    assert server("summary", run=INPUT)["devices"][0]["idle_by_cause_ns"]["data_loading"] > 0


def test_gaps_page_to_the_end_with_the_same_ids_and_shares(server, truth):
    _, full = truth(LAUNCH)
    assert len(full["gaps"]) > 100
    seen, off, pages = [], 0, 0
    while off is not None:
        d = server("gaps", run=LAUNCH, offset=off, limit=40, max_bytes=16384)
        assert d["total"] == len(full["gaps"]) and d["offset"] == off
        assert d["returned"] == len(d["gaps"]) <= 40
        seen += d["gaps"]
        off, pages = d["next_offset"], pages + 1
    assert pages > len(full["gaps"]) // 40            # the byte budget cut pages too
    assert [g["id"] for g in seen] == [g["id"] for g in full["gaps"]]
    assert [g["shares_ns"] for g in seen] == [g["shares_ns"] for g in full["gaps"]]
    assert [g["cause"] for g in seen] == [g["cause"] for g in full["gaps"]]
    assert all(g["host_ops_count"] == len(f["host_ops"]) for g, f in zip(seen, full["gaps"]))
    # the default page fits in 64 KB with every gap's host ops, and says where to go on
    d = server("gaps", run=LAUNCH, limit=1000, detail=True)
    assert d["cut_by_max_bytes"] and d["next_offset"] == d["returned"] < d["total"]
    assert d["gaps"] == full["gaps"][:d["returned"]]


def test_gaps_filter_by_cause_step_and_device(server, truth):
    _, full = truth(TWO_DEVICES)
    for key, value in (("cause", full["gaps"][0]["cause"]), ("device", 1),
                       ("step", full["gaps"][-1]["step"])):
        d = server("gaps", run=TWO_DEVICES, **{key: value})
        want = [g["id"] for g in full["gaps"] if g[key] == value]
        assert want and [g["id"] for g in d["gaps"]] == want, key
        assert d["filter"][key] == value
    assert "cause must be one of" in server.error("gaps", run=TWO_DEVICES, cause="gremlins")


def test_gap_is_the_record_with_its_host_ops(server, truth):
    _, full = truth(INPUT)
    for rec in full["gaps"]:
        d = server("gap", run=INPUT, id=rec["id"])
        for k in ("id", "cause", "shares_ns", "waited_for", "next_op", "evidence", "host_ops",
                  "syncs", "duration_ns"):
            assert d[k] == rec[k], k
    assert any(r["host_ops"] for r in full["gaps"])
    assert "no gap" in server.error("gap", run=INPUT, id="0-1")


def test_a_large_record_is_trimmed_and_says_so(server, truth):
    _, full = truth(LAUNCH)
    rec = max(full["gaps"], key=lambda g: len(json.dumps(g)))
    d = server("gap", run=LAUNCH, id=rec["id"], max_bytes=3072)   # the record carries its fix text too
    cut = {c["path"]: c for c in d["trimmed"]["lists"]}
    assert cut and all(c["kept"] < c["total"] for c in cut.values())
    for path, c in cut.items():
        if path in rec:
            assert c["total"] == len(rec[path]) and d[path] == rec[path][:c["kept"]]
    assert d["shares_ns"] == rec["shares_ns"]


def test_findings_page_to_the_end(server, truth):
    _, full = truth(JAX)
    seen, off = [], 0
    while off is not None:
        d = server("findings", run=JAX, offset=off, limit=3)
        seen += d["findings"]
        off = d["next_offset"]
    assert seen == full["findings"] and len(seen) > 3


def test_device_ops_is_the_diagnosis_table(server, truth, logdir):
    from tb_perfdiag.render.device_ops import device_ops_json
    rep, full = truth(LAUNCH)
    doc = server("device_ops", run=LAUNCH)
    assert doc["run"] == LAUNCH and doc["step"] is None
    assert doc["devices"] == full["device_ops"]["devices"]
    gpu = doc["devices"][0]
    assert gpu["ops"] and gpu["short_kernels"]["calls"] > 0      # launch-bound: tiny kernels
    few = server("device_ops", run=LAUNCH, top=2)
    assert [len(d["ops"]) for d in few["devices"]] == [min(2, d["groups"]) for d in
                                                        doc["devices"]]
    assert few["devices"][0]["other"]["groups"] == gpu["groups"] - 2
    step = full["steps"][1]["id"]
    one = server("device_ops", run=LAUNCH, step=step)
    assert one["step"] == step
    assert one["devices"] == device_ops_json(rep.diagnosis, step)["devices"]
    assert sum(o["total_ns"] for o in one["devices"][0]["ops"]) < \
        sum(o["total_ns"] for o in gpu["ops"])
    _, two = truth(TWO_DEVICES)
    d1 = server("device_ops", run=TWO_DEVICES, device=1)
    assert [d["device"] for d in d1["devices"]] == [1]
    assert d1["devices"][0] == two["device_ops"]["devices"][1]
    assert "no step 987654" in server.error("device_ops", run=LAUNCH, step=987654)
    assert "is a path" in server.error("device_ops", run="../outside")


def test_compare_is_the_api_comparison(server, logdir):
    doc = server("compare", run=NONZERO, base_run=INPUT)
    want = tb_perfdiag.compare(_file(logdir, INPUT), _file(logdir, NONZERO)).to_json(
        with_steps=False)
    for k in ("devices", "findings", "highlights"):
        if k in want:
            assert doc[k] == want[k], k
    assert doc["before"]["run"] == INPUT and doc["after"]["run"] == NONZERO
    assert "step_chart" not in doc["after"]


def test_check_passes_and_fails_as_the_budgets_say(server, truth):
    rep, _ = truth(INPUT)
    want = check_budgets(rep.diagnosis, Budgets(0.5, {"data_loading": 0.05}))
    doc = server("check", run=INPUT, min_duty=0.5, max_idle={"data_loading": 0.05})
    got = doc["profiles"][0]["checks"]
    assert [(c["budget"], c["ok"], c["value"]) for c in got] == \
        [(r.budget, r.ok, r.value) for r in want]
    assert doc["failed"] == sum(not r.ok for r in want) > 0     # data loading is over 5 %
    ok = server("check", run=INPUT, min_duty=0.01)
    assert ok["failed"] == 0 and ok["errors"] == 0
    reg = server("check", run=NONZERO, baseline_run=INPUT, max_regression=10.0)
    assert reg["profiles"][0]["checks"][0]["budget"] == "max_regression"
    assert "nothing to check" in server.error("check", run=INPUT)
    assert "go together" in server.error("check", run=INPUT, max_regression=0.05)
    assert "no cause" in server.error("check", run=INPUT, max_idle={"gremlins": 0.1})
    bad = server("check", run=BROKEN, min_duty=0.5)      # one unreadable host: said
    assert bad["errors"] == 1 and "badhost.xplane.pb" in bad["profiles"][0]["error"]


def test_collectives_name_whom_everyone_waits_for(server):
    run = server("collectives", run=RANKS)
    coll = run["collectives"]
    assert coll["hosts"] == 4 and coll["instances"] == STEPS
    assert coll["ops"]["all-reduce"]["last_arrivers"] == {"rank2": STEPS}
    rows = {r["host"]: r for r in run["hosts"]}
    assert run["total"] == 4 and run["hosts"][0]["host"] == "rank2"      # the straggler first
    assert [s["host"] for s in run["stragglers"]] == ["rank2"]
    assert rows["rank2"]["straggler"] and rows["rank2"]["last_arrivals"] == STEPS
    assert rows["rank2"]["peer_wait_ns"] == 0
    for h in ("rank0", "rank1", "rank3"):          # each waits 600 µs a step, for rank2
        assert not rows[h]["straggler"]
        assert abs(rows[h]["peer_wait_ns"] - 600_000) < 12_000
        assert next(iter(rows[h]["waited_for"])) == "rank2"
    one = server("collectives", run=RANKS, host="rank0")
    assert one["state"] == "joined" and one["ops"][0]["waited_for"][0]["host"] == "rank2"
    assert [s["step"] for s in one["step_peer_wait_ns"]] == list(range(STEPS))
    # within it (the card holds the straggler's saving, why it was late and the clocks)
    small = server("collectives", run=RANKS, host="rank0", max_bytes=3072)
    assert small["state"] == "joined" and small["ops"]
    paged = server("collectives", run=RANKS, limit=1)
    assert paged["returned"] == 1 and paged["next_offset"] == 1
    alone = server("collectives", run=INPUT)          # no collectives at all: said
    assert alone["collectives"] is None and "no collectives" in alone["note"]
    chk = server("check", run=RANKS, max_peer_wait=0.2)
    ok = {p["label"].split(" · ")[1]: p["checks"][0]["ok"] for p in chk["profiles"]}
    assert ok == {"rank0": False, "rank1": False, "rank2": True, "rank3": False}
    assert "no run" in server.error("collectives", run="no_such_run")
    assert "is a path" in server.error("collectives", run=RANKS, host="../x")


def test_clear_errors_and_the_server_answers_on(server):
    cases = [
        (dict(run="no_such_run"), ["not found", "no run 'no_such_run'", "list_runs"]),
        (dict(run="../outside"), ["is a path", "nothing outside LOGDIR"]),
        (dict(run=INPUT + "/../../outside"), ["is a path"]),
        (dict(run="/etc"), ["is a path"]),
        (dict(run=INPUT, host="/etc/passwd"), ["is a path"]),
        (dict(run="links", host="w9"), ["not found", "no host 'w9'"]),
        (dict(run=BROKEN), ["unreadable file", "badhost.xplane.pb"]),
        (dict(run="bomb"), ["too large", "8 MB budget", "w0.1.pt.trace.json.gz"]),
    ]
    for args, needles in cases:
        for tool in ("summary", "gaps", "findings"):
            msg = server.error(tool, **args)
            for n in needles:
                assert n in msg, (tool, args, msg)
            assert str(os.sep + "outside" + os.sep) not in msg
            assert server("list_runs")["runs"]                     # still answering
    assert "is a path" in server.error("compare", run=INPUT, base_run="../outside")
    assert "too large" in server.error("gap", run="bomb", id="0-1")


def test_every_answer_fits_in_64_kb(server):
    assert server.sizes and max(server.sizes) <= LIMIT


def test_help_prints_the_skill_guide():
    r = subprocess.run([sys.executable, "-m", "tb_perfdiag.cli", "mcp", "--help"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "from \"my step is slow\" to the fix" in r.stdout
    for cause in C.ALL:
        assert f"`{cause}`" in r.stdout, cause
    for cmd in ("tb-perfdiag diagnose", "--json", "tb-perfdiag compare", "tb-perfdiag check"):
        assert cmd in r.stdout
    for name in TOOLS:
        assert f"`{name}" in r.stdout, name


def test_mcp_needs_a_folder(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tb_perfdiag.cli", "mcp", str(tmp_path / "nope")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 3 and "no such file or folder" in r.stderr


def test_without_the_mcp_package_it_says_how_to_install_it(tmp_path):
    fake = tmp_path / "hide" / "mcp"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('hidden for this test')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "hide") + os.pathsep + ROOT)
    r = subprocess.run([sys.executable, "-m", "tb_perfdiag.cli", "mcp", str(tmp_path)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2 and "pip install 'tb-perfdiag[mcp]'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
