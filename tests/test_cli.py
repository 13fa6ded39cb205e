"""The console command: the same diagnosis the plugin serves, a before/after compare, a CI
gate with documented exit codes, and manners in a pipeline."""
from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import jsonschema
import pytest
import xmlschema

from conftest import ROOT, TESTDATA

from test_compare import training

JUNIT = xmlschema.XMLSchema(os.path.join(ROOT, "tests", "junit.xsd"))
COMPARISON = json.load(open(os.path.join(ROOT, "tb_perfdiag", "schema",
                                         "comparison.schema.json")))
OK, BREACH, USAGE, INPUT = 0, 1, 2, 3


def _run(*args, **kw):
    return subprocess.run([sys.executable, "-m", "tb_perfdiag.cli", *args], capture_output=True,
                          text=True, timeout=300, **kw)


def one_line_error(r, code, *needles):
    """Exit ``code``, nothing on stdout, one line on stderr holding ``needles``."""
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("tb-perfdiag")
    for n in needles:
        assert n in lines[0], (n, lines[0])


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Two runs of one training loop as files and folders: 'slow' loads each batch for
    3 ms on the main thread (GPU 0 about 35 % busy), 'fast' does not (about 97 %)."""
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for name, loader in (("slow", 3000), ("fast", 0), ("slower", 6000)):
        d = root / name
        d.mkdir()
        f = d / "worker0.1700000000000.pt.trace.json"
        f.write_bytes(training(loader).to_bytes())
        out[name] = str(f)
    two = root / "two_hosts"
    two.mkdir()
    for host in ("a", "b"):
        (two / f"{host}.1700000000000.pt.trace.json").write_bytes(training(0).to_bytes())
    out["two_hosts"] = str(two)
    bad = root / "bad"
    bad.mkdir()
    (bad / "worker0.1.pt.trace.json").write_text("{not json")
    out["bad"] = str(bad / "worker0.1.pt.trace.json")
    out["root"] = str(root)
    return out


# ---- info and diagnose ----

def test_info_lists_tracks_and_steps():
    r = _run("info", os.path.join(TESTDATA, "captures", "torch_xla_cpu"))
    assert r.returncode == 0, r.stderr
    assert "CPU (XLA)" in r.stdout and "steps: 12 (0..11)" in r.stdout
    assert "python" in r.stdout


def test_diagnose_report_and_json():
    path = os.path.join(TESTDATA, "captures", "jax_cpu")
    r = _run("diagnose", path)
    assert r.returncode == 0, r.stderr
    assert "duty cycle" in r.stdout and "recompilation" in r.stdout.lower() and "fix:" in r.stdout
    j = _run("diagnose", path, "--json", "--threshold-us", "10")
    d = json.loads(j.stdout)
    assert d["schema_version"] == 1 and d["options"]["threshold_us"] == 10
    assert all(g["duration_ns"] >= 10_000 for g in d["gaps"])
    one = _run("diagnose", path, "--json", "--step", "5")
    assert {g["step"] for g in json.loads(one.stdout)["gaps"]} <= {5}


def test_diagnose_json_pages_gaps_and_honours_top():
    path = os.path.join(TESTDATA, "captures", "torch_xla_cpu")
    full = json.loads(_run("diagnose", path, "--json", "--all-gaps").stdout)
    total = full["gaps_total"]
    assert total > 5 and len(full["gaps"]) == total == full["gaps_limit"]
    page = json.loads(_run("diagnose", path, "--json").stdout)
    assert page["gaps_limit"] == 200 and len(page["gaps"]) == min(total, 200)
    three = json.loads(_run("diagnose", path, "--json", "--gaps", "3").stdout)
    assert [g["id"] for g in three["gaps"]] == [g["id"] for g in full["gaps"][:3]]
    assert three["gaps_total"] == total and len(three["findings"]) == len(full["findings"])
    top = json.loads(_run("diagnose", path, "--json", "--top", "2").stdout)
    assert len(top["gaps"]) == 2 and len(top["findings"]) == 2
    assert top["findings_total"] == len(full["findings"]) > 2
    # --top cuts findings, --gaps still sets the page
    both = json.loads(_run("diagnose", path, "--json", "--top", "1", "--gaps", "4").stdout)
    assert len(both["gaps"]) == 4 and len(both["findings"]) == 1
    # compact into a pipe (one line), indented on request
    assert _run("diagnose", path, "--json").stdout.count("\n") == 1
    assert _run("diagnose", path, "--json", "--pretty").stdout.count("\n") > 100
    one_line_error(_run("diagnose", path, "--json", "--gaps", "3", "--all-gaps"), USAGE,
                   "not allowed with")


def test_bad_file_exit_code(pair):
    # the README's promise: a file that cannot be read is one line on stderr, exit 3
    for cmd in ("diagnose", "info"):
        one_line_error(_run(cmd, pair["bad"]), INPUT, "JSON")
        assert _run(cmd, pair["bad"]).stdout == ""
    # --json: the error object stays on stdout (a pipeline reads it), the line goes to stderr
    r = _run("diagnose", pair["bad"], "--json")
    assert r.returncode == INPUT and "JSON" in json.loads(r.stdout)["error"]
    assert len(r.stderr.strip().splitlines()) == 1 and "JSON" in r.stderr


def test_bad_file_beside_good_ones_is_said_on_stderr_and_the_rest_reported(pair, tmp_path):
    import shutil
    shutil.copy(pair["bad"], tmp_path / "bad.pt.trace.json")
    shutil.copy(pair["slow"], tmp_path / "good.pt.trace.json")
    r = _run("diagnose", str(tmp_path))
    assert r.returncode == INPUT
    assert "bad.pt.trace.json" in r.stderr and "JSON" in r.stderr
    (line,) = r.stderr.strip().splitlines()
    # the file named once: its path holds its name
    assert line.count("bad.pt.trace.json") == 1, line
    # two workers of one run: the run's summary, the bad one a row that says why
    rows = {x.split()[0]: x for x in r.stdout.splitlines()[1:] if x.split()}
    assert "ERROR" in rows["bad"] and "JSON" in rows["bad"] and "ERROR" not in rows["good"]
    per = _run("diagnose", str(tmp_path), "--per-file")
    assert per.returncode == INPUT and len(per.stderr.strip().splitlines()) == 1
    assert "· good" in per.stdout and "· bad" not in per.stdout


def test_an_unreadable_file_is_named_once(tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "empty.pt.trace.json").write_bytes(b"")
    for cmd, where in (("diagnose", "bad/"), ("diagnose", "bad/empty.pt.trace.json"),
                       ("info", "bad/")):
        r = _run(cmd, where, cwd=str(tmp_path))
        one_line_error(r, INPUT, "empty file")
        assert r.stderr.count("empty.pt.trace.json") == 1, r.stderr


POD_RUN = os.path.join(TESTDATA, "captures", "jax_pod", "data_loading_straggler")


def test_a_folder_of_hosts_leads_with_the_runs_summary():
    """A run of several hosts (the 4-process JAX job whose host2 loads data 30 ms a step):
    the straggler, the peer wait and the hosts table, analysed in this process, without
    --scheduler; each host's report only with --per-file."""
    r = _run("diagnose", POD_RUN)
    assert r.returncode == OK, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("== ") and "4 hosts or ranks" in lines[0] and "--per-file" in lines[0]
    assert "points of it waiting for peers at collectives" in lines[1]
    assert "1 straggler(s):" in r.stdout
    (strag,) = [x for x in lines if x.startswith("  host2: ")]
    assert "the others wait" in strag and "load_batch" in strag
    table = lines[lines.index(next(x for x in lines if x.startswith("host "))) + 1:]
    assert sorted(x.split()[0] for x in table) == ["host0", "host1", "host2", "host3"]
    assert table[0].startswith("host2")                  # stragglers first
    assert "largest gaps" not in r.stdout and "findings:" not in r.stdout
    per = _run("diagnose", POD_RUN, "--per-file")
    assert per.returncode == OK
    assert per.stdout.count("\n== ") + per.stdout.startswith("== ") == 4
    assert "straggler(s)" not in per.stdout and "largest gaps" in per.stdout
    # the JSON stays each file's document, as the route serves it
    doc = json.loads(_run("diagnose", POD_RUN, "--json").stdout)
    assert len(doc) == 4 and all("gaps" in d for d in doc.values())


def test_dlrm_ranks_lead_with_the_straggler():
    from conftest import shared_path
    path = shared_path("public", "param", "et_replay", "tests", "inputs", "dlrm_kineto")
    r = _run("diagnose", path)
    assert r.returncode == OK, r.stderr
    assert r.stdout.startswith("== dlrm_kineto: 8 hosts or ranks")
    assert len(r.stdout.splitlines()) < 30            # not 722 lines of per-rank reports
    assert "  worker7_step_12: the others wait" in r.stdout


def test_unknown_step_is_a_usage_error_naming_the_steps(pair):
    steps = json.loads(_run("diagnose", pair["slow"], "--json").stdout)["steps"]
    ids = [s["id"] for s in steps]
    r = _run("diagnose", pair["slow"], "--step", "99999")
    one_line_error(r, USAGE, "no step 99999", f"{min(ids)}–{max(ids)}")
    assert r.stdout == ""
    one_line_error(_run("diagnose", pair["slow"], "--step", "99999", "--json"), USAGE,
                   "no step 99999")
    # a step it has still answers
    assert _run("diagnose", pair["slow"], "--step", str(ids[1])).returncode == OK


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e308", "-1", "five"])
def test_bad_threshold_is_a_one_line_usage_error(value):
    path = os.path.join(TESTDATA, "captures", "jax_cpu")
    one_line_error(_run("diagnose", path, "--threshold-us", value), USAGE, "--threshold-us")


def test_missing_path_is_an_input_error(tmp_path):
    for cmd in ("info", "diagnose"):
        one_line_error(_run(cmd, str(tmp_path / "nope")), INPUT, "no such file or folder")
    one_line_error(_run("info", str(tmp_path)), INPUT, "no profiles found")


def test_closed_pipe_ends_quietly():
    path = os.path.join(TESTDATA, "captures", "torch_xla_cpu")
    for args in (("diagnose", path, "--top", "200"),
                 ("diagnose", path, "--json", "--all-gaps", "--pretty")):
        p = subprocess.Popen([sys.executable, "-m", "tb_perfdiag.cli", *args],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # a one-page pipe (the child takes a second to import before it writes): the
        # report cannot fit in it whole, so the child is still writing when we close
        fcntl.fcntl(p.stdout.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), 4096)
        got = os.read(p.stdout.fileno(), 64)
        p.stdout.close()                          # the reader goes away (… | head -c 64)
        rc = p.wait(120)
        err = p.stderr.read().decode()
        assert got and err == "", err             # no traceback, no "Exception ignored"
        assert rc == 141                          # as a SIGPIPE'd command exits


# ---- compare ----

def test_compare_text_and_json(pair):
    r = _run("compare", pair["slow"], pair["fast"])
    assert r.returncode == OK, r.stderr
    assert r.stdout.startswith("== compare: worker0.1700000000000.pt.trace.json")
    assert "data loading / input idle per typical step 3.00 ms → 0 ns" in r.stdout
    assert "gone" in r.stdout
    j = _run("compare", os.path.dirname(pair["slow"]), os.path.dirname(pair["fast"]), "--json")
    doc = json.loads(j.stdout)
    jsonschema.validate(doc, COMPARISON)
    assert doc["before"]["label"] == "slow · worker0 · 2023-11-14 22:13:20.000 UTC"
    assert doc["step_time"]["delta_ns"] == -3_000_000
    assert "step_chart" not in json.loads(_run("compare", pair["slow"], pair["fast"], "--json",
                                               "--no-steps").stdout)["before"]
    top = json.loads(_run("compare", pair["slow"], pair["fast"], "--json", "--top", "1").stdout)
    assert top["ops"]["limit"] == 1 and len(top["ops"]["by_count"]) <= 1


def test_compare_errors(pair, tmp_path):
    one_line_error(_run("compare", pair["two_hosts"], pair["fast"]), USAGE, "2 profiles",
                   "--host")
    r = _run("compare", pair["two_hosts"], pair["two_hosts"], "--host", "b")
    assert r.returncode == OK and "two_hosts · b" in r.stdout
    one_line_error(_run("compare", pair["two_hosts"], pair["fast"], "--host", "zz"), USAGE,
                   "no host 'zz'")
    one_line_error(_run("compare", pair["slow"], str(tmp_path / "nope")), INPUT,
                   "no such file or folder")
    one_line_error(_run("compare", pair["slow"], pair["bad"]), INPUT, "worker0.1.pt.trace.json")


# ---- check: the CI gate ----

def junit_of(path) -> ET.Element:
    JUNIT.validate(str(path))
    return ET.parse(path).getroot()


def test_check_passes_within_budgets(pair, tmp_path):
    out = tmp_path / "junit.xml"
    r = _run("check", pair["fast"], "--min-duty", "90%", "--max-idle-cause", "data_loading=1%",
             "--max-idle-cause", "host_sync=0.5%", "--baseline", pair["slow"],
             "--max-regression", "5%", "--junit", str(out), "--github")
    assert r.returncode == OK, r.stdout + r.stderr
    assert r.stdout.count("PASS") == 4 and "FAIL" not in r.stdout and "::error" not in r.stdout
    assert r.stdout.rstrip().endswith("0 of 4 budget check(s) failed")
    root = junit_of(out)
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("4", "0", "0")
    names = [c.get("name") for c in root.iter("testcase")]
    assert "GPU 0 duty cycle per typical step ≥ 90.0%" in names


def test_check_min_duty_breach(pair, tmp_path):
    out = tmp_path / "junit.xml"
    r = _run("check", pair["slow"], "--min-duty", "0.8", "--junit", str(out), "--github")
    assert r.returncode == BREACH
    assert "FAIL  GPU 0 duty cycle per typical step 34.1% < 80.0%" in r.stdout
    gh = [x for x in r.stdout.splitlines() if x.startswith("::error")]
    assert len(gh) == 1 and f"file={pair['slow']}" in gh[0]
    assert "title=tb-perfdiag%3A GPU 0 duty cycle per typical step ≥ 80.0%25::" in gh[0]
    root = junit_of(out)
    (case,) = root.iter("testcase")
    fail = case.find("failure")
    assert fail is not None and fail.get("type") == "min_duty" and "34.1%" in fail.get("message")


def test_check_idle_cause_breach(pair, tmp_path):
    out = tmp_path / "junit.xml"
    r = _run("check", pair["slow"], "--max-idle-cause", "data_loading=5%",
             "--max-idle-cause", "host_sync=5%", "--junit", str(out))
    assert r.returncode == BREACH
    # the share is of the window it is over, said (issue 63: not "of the step" beside
    # another step time)
    assert "FAIL  GPU 0 data loading / input idle 3.00 ms per typical step = 64.7% of its " \
           "4.64 ms window per typical step > 5.0%" in r.stdout
    assert "PASS  GPU 0 host sync / device→host read idle" in r.stdout
    root = junit_of(out)
    assert (root.get("tests"), root.get("failures")) == ("2", "1")


def test_check_regression_breach_names_what_grew(pair, tmp_path):
    out = tmp_path / "junit.xml"
    r = _run("check", pair["slower"], "--baseline", pair["slow"], "--max-regression", "5%",
             "--junit", str(out), "--json")
    assert r.returncode == BREACH
    doc = json.loads(r.stdout)
    (chk,) = doc["profiles"][0]["checks"]
    assert chk["budget"] == "max_regression" and not chk["ok"]
    assert chk["value"] == pytest.approx(3000 / 4640, rel=0.01)     # +3 ms on 4.64 ms
    assert "grew: data loading / input idle +3.00 ms per step on GPU 0" in chk["message"]
    assert doc["failed"] == 1 and doc["errors"] == 0
    junit_of(out)


def test_check_unreadable_or_missing_profile(pair, tmp_path):
    out = tmp_path / "junit.xml"
    r = _run("check", pair["bad"], "--min-duty", "0.5", "--junit", str(out), "--github")
    assert r.returncode == INPUT
    assert "ERROR" in r.stdout and "JSON" in r.stdout
    assert any(x.startswith("::error") and "unreadable profile" in x for x in r.stdout.splitlines())
    root = junit_of(out)
    assert root.get("errors") == "1" and root.find("testsuite/testcase/error") is not None
    missing = tmp_path / "nope"
    r = _run("check", str(missing), "--min-duty", "0.5", "--junit", str(out))
    assert r.returncode == INPUT and "no such file or folder" in r.stdout
    assert junit_of(out).get("errors") == "1"
    # one bad host of two: the other is still checked, and the exit code says input error
    both = tmp_path / "both"
    both.mkdir()
    (both / "good.1.pt.trace.json").write_bytes(training(0).to_bytes())
    (both / "bad.1.pt.trace.json").write_text("{not json")
    r = _run("check", str(both), "--min-duty", "0.99", "--junit", str(out))
    assert r.returncode == INPUT and "FAIL" in r.stdout and "ERROR" in r.stdout
    root = junit_of(out)
    assert (root.get("failures"), root.get("errors")) == ("1", "1")


@pytest.mark.parametrize("args,needle", [
    ((), "nothing to check"),
    (("--max-idle-cause", "io=5%"), "CAUSE one of host_sync"),
    (("--max-idle-cause", "host_sync"), "CAUSE=P%"),
    (("--min-duty", "120%"), "between 0 and 1"),
    (("--min-duty", "nan"), "finite"),
    (("--max-regression", "5%"), "--baseline and --max-regression go together"),
    (("--baseline", "x"), "--baseline and --max-regression go together"),
    (("--min-duty", "0.5", "--threshold-us", "inf"), "finite"),
])
def test_check_usage_errors(pair, args, needle):
    one_line_error(_run("check", pair["fast"], *args), USAGE, needle)


def test_check_every_host_of_a_folder(pair):
    r = _run("check", pair["two_hosts"], "--min-duty", "0.5")
    assert r.returncode == OK and r.stdout.count("PASS") == 2
    assert "two_hosts · a" in r.stdout and "two_hosts · b" in r.stdout


# ---- hostile input (issue 19): one line, an exit code, no traceback ----

ESC = "\x1b[2J\x1b]0;pwned\x07\x1b[31m"      # clear screen, retitle, red


def _no_traceback(r):
    assert "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr


def test_gzip_bomb_under_a_memory_limit_is_one_line(tmp_path):
    import resource
    from conftest import gzip_bomb
    bomb = tmp_path / "w0.1.pt.trace.json.gz"
    gzip_bomb(bomb, 3072)                   # 3 GiB out of 3 MB
    limit = 1 << 30                         # 1 GiB of address space

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    for cmd in ("diagnose", "info"):
        r = _run(cmd, str(bomb), preexec_fn=cap)
        _no_traceback(r)
        assert r.returncode == INPUT, (r.stdout, r.stderr)
        errors = [line for line in r.stderr.splitlines() if "error" in line]
        # read as a stream, the 3 GiB (within the 4096 MB file budget) never needs the
        # memory: the answer is what the bytes are, zeros, not JSON
        assert len(errors) == 1 and "not valid JSON" in errors[0], r.stderr


SPACES_BOMB = (b'{"traceEvents": [', b" ")   # JSON as far as it goes: only the budget stops it


def test_spaces_bomb_is_refused_as_too_large_and_the_other_files_go_on(tmp_path):
    """A gzip whose text is the start of an events list and then nothing but spaces is
    refused as over the file budget (``TB_PERFDIAG_MAX_FILE_MB``, as the server's 413),
    one line, once that much is decompressed; a trace beside it is still reported.
    Under the budget the same text is what it is: a document cut short."""
    from conftest import gzip_bomb
    logdir = tmp_path / "ld"
    (logdir / "bomb").mkdir(parents=True)
    (logdir / "good").mkdir()
    gzip_bomb(logdir / "bomb" / "w0.1.pt.trace.json.gz", 48, *SPACES_BOMB)   # 48 MiB out
    good = os.path.join(TESTDATA, "synthetic", "logdir", "kineto_launch_bound",
                        "worker0.1795400183000.pt.trace.json")
    with open(good, "rb") as src, open(logdir / "good" / "w0.1.pt.trace.json", "wb") as dst:
        dst.write(src.read())
    env = dict(os.environ, TB_PERFDIAG_MAX_FILE_MB="16")
    bomb = str(logdir / "bomb" / "w0.1.pt.trace.json.gz")
    for cmd in ("diagnose", "info"):
        r = _run(cmd, bomb, env=env)
        one_line_error(r, INPUT, "w0.1.pt.trace.json.gz",
                       "decompresses to more than the 16 MB budget", "TB_PERFDIAG_MAX_FILE_MB")
    r = _run("info", str(logdir), env=env)
    _no_traceback(r)
    assert r.returncode == INPUT
    errors = [line for line in r.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "decompresses to more than the 16 MB budget" in errors[0]
    assert "kineto_launch_bound" not in r.stdout and "format: kineto" in r.stdout, r.stdout
    r = _run("diagnose", bomb)             # the default budget: 4096 MB, far above 48 MiB
    one_line_error(r, INPUT, "not valid JSON")


def test_s3_without_s3fs_is_one_line(tmp_path):
    # s3fs is a test dependency (the result-store tests): hidden from the CLI's process
    # by a package of that name that fails to import, as a missing one does
    (tmp_path / "s3fs").mkdir()
    (tmp_path / "s3fs" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 's3fs'\", name='s3fs')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tmp_path)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    for cmd in ("diagnose", "info"):
        for url in ("s3://bucket/run/w0.1.pt.trace.json", "s3://bucket/logdir/"):
            r = _run(cmd, url, env=env)
            _no_traceback(r)
            assert r.stdout == ""
            one_line_error(r, INPUT, "s3fs", "s3://")


def test_escape_sequences_in_trace_names_are_shown_safely(tmp_path):
    from tb_perfdiag.testing import TraceBuilder
    b = TraceBuilder()
    main = b.thread(f"main{ESC}thread")
    s7 = b.stream(gpu=0, stream=7)
    with b.step(main, 1, 0, 1000):
        b.launch(main, "cudaLaunchKernel", 10, 5, kernel=b.kernel(s7, f"gemm{ESC}", 20, 100))
        b.op(main, f"aten::nonzero{ESC}", 130, 400, cat="cpu_op")
        b.op(main, "cudaStreamSynchronize", 140, 380, cat="cuda_runtime")
        b.launch(main, "cudaLaunchKernel", 530, 5, kernel=b.kernel(s7, "relu", 540, 50))
    run = tmp_path / f"run{ESC}"
    run.mkdir()
    f = run / "w0.1.pt.trace.json"
    f.write_bytes(b.to_bytes())
    for args in (("diagnose", str(tmp_path)), ("info", str(tmp_path)),
                 ("compare", str(f), str(f))):
        r = _run(*args)
        _no_traceback(r)
        assert r.returncode == OK, r.stderr
        assert "\x1b" not in r.stdout and "\x07" not in r.stdout
        if args[0] != "compare":          # the same file twice: no name is listed
            assert "\\x1b[2J" in r.stdout and "\\x07" in r.stdout
    # the names are intact in JSON, where JSON itself escapes them
    j = _run("diagnose", str(f), "--json")
    assert "\x1b" not in j.stdout and "\\u001b[2J" in j.stdout
    assert ESC in json.loads(j.stdout)["gaps"][0]["host_ops"][0]["thread"]
    # a path with escapes in an error message
    r = _run("diagnose", str(tmp_path / f"missing{ESC}"))
    _no_traceback(r)
    assert "\x1b" not in r.stderr and "\\x1b[2J" in r.stderr and r.returncode == INPUT


def test_one_step_time_on_every_face(pair):
    """The typical step (definitions.typical_step: the mean over the steps that neither
    compile nor last 1.5× the median) is the figure diagnose, its JSON, compare, check and
    the hosts summary all show."""
    from tb_perfdiag.units import duration
    doc = json.loads(_run("diagnose", pair["slow"], "--json").stdout)
    t = doc["typical_step_ns"]
    assert t and "mean" in doc["definitions"]["typical_step"]
    assert f"typical step {duration(t)}:" in _run("diagnose", pair["slow"]).stdout
    cmp = json.loads(_run("compare", pair["slow"], pair["fast"], "--json").stdout)
    assert cmp["step_time"]["before_ns"] == t
    assert cmp["definitions"]["typical_step"] == doc["definitions"]["typical_step"]
    r = _run("check", pair["fast"], "--baseline", pair["slow"], "--max-regression", "5%")
    assert f"typical step {duration(t)} (baseline" in r.stdout
    two = _run("diagnose", pair["two_hosts"]).stdout
    alone = json.loads(_run("diagnose", os.path.join(pair["two_hosts"], "a.1700000000000.pt.trace.json"),
                            "--json").stdout)["typical_step_ns"]
    assert f"typical step {duration(alone)}" in two.splitlines()[1]
