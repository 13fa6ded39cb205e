#!/usr/bin/env python3
"""Real multi-process JAX captures (one XSpace per process) of a data-parallel training
job whose gradient is all-reduced over gloo every step, in the TPU-pod layout.

Run with the generator venv (jax/jaxlib 0.10.2), normally via make_captures.sh:

    python capture_jax_pod.py --out testdata/captures/jax_pod [--ground-truth gt.json]
                              [--only SCENARIO ...]

For each scenario it starts ``PROCESSES`` Python processes on this machine that form one
JAX job on XLA:CPU (``jax_cpu_collectives_implementation="gloo"``,
``jax.distributed.initialize`` on 127.0.0.1), each with one CPU device; the mesh holds all
of them.  The jitted step (``shard_map`` over the mesh) computes the local gradient of a
small MLP on the process's local batch and all-reduces it (``lax.psum``: one HLO
``all-reduce`` per step, which gloo runs on the thread that executes the program: a
process that arrives early waits inside it).  One warm-up step compiles before the
profiler starts; then ``NUM_STEPS`` steps run under ``jax.profiler.trace``, each a
``StepTraceAnnotation('train', step_num=i)`` that starts with
``TraceAnnotation('data_loading')`` around ``load_batch`` and then ``update_running_stats``
(host numpy work) before the step is dispatched and awaited (``block_until_ready``).

Each scenario is written to ``<out>/<scenario>/plugins/profile/<run>/host<i>.xplane.pb``
(process i), with the XSpace ``hostnames`` set to ``host<i>`` (all processes run on one
machine, whose name they would otherwise share).  The lossy ``.trace.json.gz`` duplicates
are deleted; the Python tracer is off to keep the files small.

Scenarios (the straggler is the process the others wait for):
  data_loading_straggler  host2's load_batch sleeps 30 ms a step (inside data_loading)
  host_compute_straggler  host1's update_running_stats runs 30 ms of numpy a step
  compute_imbalance       host3's local batch is 256x the others' (the step pads every local
                          batch to the largest and a lax.cond on the local row count runs
                          the larger gradient only where it is needed): more device compute
                          before the all-reduce on host3 only
  intermittent            host0 saves a checkpoint (save_checkpoint: 40 ms) in steps 3 and
                          7 only
  none                    nothing injected; four processes share the machine's cores, so
                          someone is always a little late
  clock_shifted           data_loading_straggler, and host1's clock is 250 ms ahead: its
                          XSpace's profile_start_time/profile_stop_time (the wall-clock
                          origin of all its relative event times) are rewritten +250 ms
                          after the capture; its event times relative to that origin are
                          what its own clock measured, so they stay as they are

Ground truth (in --ground-truth, per scenario): the injected design (straggler, cause,
delay per step, clock shifts) and what the capture shows, computed here from the raw
XSpaces with the true clocks (every process reads the same machine clock; the injected
shift is known and taken back): the collective instances (HLO ops whose opcode in the
module's Hlo Proto is a collective, matched across hosts by ``run_id`` and HLO op name),
and per host and step the arrival (op start), the peer wait (min(op duration, last
arrival - own arrival), GUIDE §4) and whether it arrived last.  A capture whose measured
waits do not show its design (the straggler last in its steps, the others waiting at
least half the injected delay there) is retaken, up to ``--tries`` times, so a capture
disturbed by other load on the machine is not committed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

PROCESSES = 4
NUM_STEPS = 10
ROWS = 32                     # local batch (rows) on every host ...
BIG_ROWS = 8192               # ... but host3's in compute_imbalance (every batch padded to it there)
SIZES = (128, 256, 10)        # MLP widths
LR = 0.05
DELAY_S = 0.030
CKPT_S = 0.040
CKPT_STEPS = (3, 7)
CLOCK_SHIFT_NS = 250_000_000
RUN_NAME = "2026_11_28_18_00_00"
COLLECTIVE_OPCODES = ("all-reduce", "all-reduce-start", "all-gather", "all-gather-start",
                      "reduce-scatter", "all-to-all", "collective-permute",
                      "collective-permute-start")

# scenario -> design: who is slowed, how, in which steps, by how much
SCENARIOS = {
    "data_loading_straggler": {"straggler": 2, "cause": "data_loading", "delay_s": DELAY_S,
                               "culprit": "load_batch"},
    "host_compute_straggler": {"straggler": 1, "cause": "host_compute", "delay_s": DELAY_S,
                               "culprit": "update_running_stats"},
    "compute_imbalance": {"straggler": 3, "cause": "device_compute", "rows": BIG_ROWS,
                          "expect_wait_s": 0.020},
    "intermittent": {"straggler": 0, "cause": "host_compute", "delay_s": CKPT_S,
                     "steps": list(CKPT_STEPS), "culprit": "save_checkpoint"},
    "none": {"straggler": None, "cause": None},
    "clock_shifted": {"straggler": 2, "cause": "data_loading", "delay_s": DELAY_S,
                      "culprit": "load_batch", "clock_shift_ns": {"1": CLOCK_SHIFT_NS}},
}


# --------------------------------------------------------------------------- worker

def load_batch(data, rows, padded, slow_s):
    """The input: ``rows`` rows of the in-memory data set, padded to ``padded``; ``slow_s``
    of slow storage.  (Copies only, so a larger batch costs the host next to nothing.)"""
    import numpy as np
    x = np.zeros((padded, SIZES[0]), np.float32)
    x[:rows] = data[0][:rows]
    y = np.zeros((padded,), np.int32)
    y[:rows] = data[1][:rows]
    if slow_s:
        time.sleep(slow_s)
    return x, y, np.array([rows], np.int32)


def update_running_stats(stats, x, busy_s):
    """Host numpy work: one pass on every host, repeated for ``busy_s`` on a slow one."""
    import numpy as np
    until = time.perf_counter() + busy_s
    while True:
        stats["mean"] = 0.9 * stats["mean"] + 0.1 * x.mean(axis=0)
        np.sort(x, axis=0)
        if time.perf_counter() >= until:
            return


def save_checkpoint(params):
    import numpy as np
    import jax
    blob = [np.asarray(a).tobytes() for a in jax.tree_util.tree_leaves(params)]
    time.sleep(CKPT_S)                            # writing it out
    return sum(map(len, blob))


def worker(scenario: str, pid: int, port: int, out: str) -> None:
    import numpy as np
    import jax
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}",
                               num_processes=PROCESSES, process_id=pid)
    import jax.flatten_util  # noqa: F401  (ravel_pytree)
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    design = SCENARIOS[scenario]
    me = design["straggler"] == pid
    mesh = Mesh(np.array(jax.devices()), ("hosts",))
    rep, per_host = NamedSharding(mesh, P()), NamedSharding(mesh, P("hosts"))

    def mlp_loss(params, x, y):
        (w1, b1), (w2, b2) = params
        logits = jax.nn.relu(x @ w1 + b1) @ w2 + b2
        logp = jax.nn.log_softmax(logits)
        return -jnp.sum(jnp.take_along_axis(logp, y[:, None], axis=1))

    def local_step(params, x, y, n):
        # every local batch is padded to the largest one; only a host holding more than ROWS
        # real rows runs the gradient over all of them (the cond picks one branch per host)
        grads = jax.lax.cond(
            n[0] > ROWS,
            lambda: jax.grad(mlp_loss)(params, x, y),
            lambda: jax.grad(mlp_loss)(params, x[:ROWS], y[:ROWS]))
        flat, unravel = jax.flatten_util.ravel_pytree(grads)
        total = jax.lax.psum(jnp.concatenate([flat, n.astype(flat.dtype)]), "hosts")
        g = unravel(total[:-1] / total[-1])
        return jax.tree_util.tree_map(lambda p, d: p - LR * d, params, g)

    step = jax.jit(jax.shard_map(local_step, mesh=mesh,
                                 in_specs=(P(), P("hosts"), P("hosts"), P("hosts")),
                                 out_specs=P(), check_vma=False))

    rng = np.random.default_rng(pid)
    params = []
    for din, dout in zip(SIZES[:-1], SIZES[1:]):
        params.append((rng.standard_normal((din, dout)).astype(np.float32) / np.sqrt(din),
                       np.zeros((dout,), np.float32)))
    params = jax.tree_util.tree_map(
        lambda a: jax.make_array_from_process_local_data(rep, a), params)
    rows = design.get("rows", ROWS) if me else ROWS
    data = (rng.standard_normal((rows, SIZES[0])).astype(np.float32),
            rng.integers(0, SIZES[-1], size=rows).astype(np.int32))
    padded = design.get("rows", ROWS)            # one global shape: every host pads to it
    stats = {"mean": np.zeros(SIZES[0], np.float32)}
    injected = {}

    # the user's functions, traced under their own names (the profiler's culprit frames)
    load = jax.profiler.annotate_function(load_batch)
    running_stats = jax.profiler.annotate_function(update_running_stats)
    checkpoint = jax.profiler.annotate_function(save_checkpoint)
    slow_input = design["delay_s"] if me and design["cause"] == "data_loading" else 0.0
    slow_stats = (design["delay_s"] if me and design["cause"] == "host_compute"
                  and "steps" not in design else 0.0)

    def one_step(i, params):
        with jax.profiler.TraceAnnotation("data_loading"):
            x, y, n = load(data, rows, padded, slow_input)
        running_stats(stats, x[:ROWS], slow_stats)
        if me and i in design.get("steps", ()):
            checkpoint(params)
            injected[i] = CKPT_S
        elif slow_input or slow_stats:
            injected[i] = slow_input or slow_stats
        args = [jax.make_array_from_process_local_data(per_host, a) for a in (x, y, n)]
        params = step(params, *args)
        jax.block_until_ready(params)
        return params

    params = one_step(-1, params)          # compiles before the profiler starts
    injected.clear()
    opts = jax.profiler.ProfileOptions()
    opts.python_tracer_level = 0
    with jax.profiler.trace(out, profiler_options=opts):
        for i in range(NUM_STEPS):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                params = one_step(i, params)
    with open(os.path.join(out, "worker.json"), "w") as f:
        json.dump({"injected_s": {str(k): v for k, v in sorted(injected.items())},
                   "local_rows": rows, "jax_version": jax.__version__}, f)
    jax.distributed.shutdown()


# --------------------------------------------------------------------------- XSpace

def _xspace_classes():
    """The project's XSpace classes and Hlo Proto reader, loaded by file: they need only
    protobuf, and the package's __init__ would pull in the whole analysis stack."""
    import importlib.util
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    mods = {}
    for name in ("xplane_pb", "hlo"):
        spec = importlib.util.spec_from_file_location(
            f"_pod_gen_{name}", os.path.join(root, "tb_perfdiag", "trace", f"{name}.py"))
        mods[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mods[name])
    return mods["xplane_pb"].XSpace, mods["hlo"].hlo_op_metadata


def _stat_value(st):
    which = st.WhichOneof("value")
    return getattr(st, which) if which else None


def _set_env_times(space, shift_ns: int) -> None:
    for plane in space.planes:
        if plane.name != "Task Environment":
            continue
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for st in plane.stats:
            if names.get(st.metadata_id) in ("profile_start_time", "profile_stop_time"):
                if st.WhichOneof("value") == "int64_value":
                    st.int64_value += shift_ns
                else:
                    st.uint64_value += shift_ns


def _profile_start_ns(space) -> int:
    for plane in space.planes:
        if plane.name == "Task Environment":
            names = {k: v.name for k, v in plane.stat_metadata.items()}
            for st in plane.stats:
                if names.get(st.metadata_id) == "profile_start_time":
                    return int(_stat_value(st))
    raise SystemExit("no profile_start_time in the XSpace")


def collective_ops(space, hlo_op_metadata) -> list:
    """[(run_id, hlo_op, opcode, start_ns, dur_ns)] of the collective HLO ops, in the
    process's own clock (profile_start_time + line timestamp + offset)."""
    opcode = {}
    for plane in space.planes:
        if plane.name != "/host:metadata":
            continue
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for md in plane.event_metadata.values():
            for st in md.stats:
                if names.get(st.metadata_id) == "Hlo Proto":
                    for (mod, _, op), meta in hlo_op_metadata(md.name, st.bytes_value).items():
                        opcode[(mod, op)] = meta[3]
    origin = _profile_start_ns(space)
    out = []
    for plane in space.planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            for ev in line.events:
                s = {names.get(st.metadata_id): st for st in ev.stats}
                if "hlo_op" not in s or "run_id" not in s:
                    continue
                op = plane.stat_metadata[s["hlo_op"].ref_value].name \
                    if s["hlo_op"].WhichOneof("value") == "ref_value" else _stat_value(s["hlo_op"])
                mod = s.get("hlo_module")
                mod = (plane.stat_metadata[mod.ref_value].name
                       if mod is not None and mod.WhichOneof("value") == "ref_value"
                       else _stat_value(mod) if mod is not None else "")
                code = opcode.get((mod, op), "")
                if code in COLLECTIVE_OPCODES:
                    start = origin + line.timestamp_ns + ev.offset_ps / 1000
                    out.append((int(_stat_value(s["run_id"])), op, code, start,
                                ev.duration_ps / 1000))
    return out


def _median(xs):
    s = sorted(xs)
    return (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2


def measure(spaces, shifts_ns, hlo_op_metadata) -> dict:
    """What the capture shows, with the true clocks: per instance and host, arrival,
    peer wait and the last arriver; per host and step, the wait and the last arrivals."""
    per_host = []
    for h, space in enumerate(spaces):
        ops = collective_ops(space, hlo_op_metadata)
        per_host.append({(r, op): (code, s - shifts_ns.get(h, 0), d) for r, op, code, s, d in ops})
    keys = set(per_host[0])
    for ops in per_host[1:]:
        keys &= set(ops)
    unmatched = [len(set(ops) - keys) for ops in per_host]
    runs = sorted({r for r, _ in keys})
    if len(runs) != NUM_STEPS:
        raise SystemExit(f"{len(runs)} programme runs with collectives, expected {NUM_STEPS}")
    step_of = {r: i for i, r in enumerate(runs)}
    n = len(spaces)
    wait = [[0.0] * NUM_STEPS for _ in range(n)]
    last = [[0] * NUM_STEPS for _ in range(n)]
    caused = [0.0] * n                    # wait of the others at instances a host came last to
    end_dev = [[] for _ in range(n)]      # end - median end, for the §4 clock estimate
    instances = []
    for key in sorted(keys, key=lambda k: (per_host[0][k][1], k)):
        arr = [per_host[h][key][1] for h in range(n)]
        dur = [per_host[h][key][2] for h in range(n)]
        ends = [a + d for a, d in zip(arr, dur)]
        t_last = max(arr)
        who = arr.index(t_last)
        w = [min(dur[h], t_last - arr[h]) for h in range(n)]
        st = step_of[key[0]]
        for h in range(n):
            wait[h][st] += w[h]
            end_dev[h].append(ends[h] - _median(ends))
        last[who][st] += 1
        caused[who] += sum(w)
        instances.append({"step": st, "run_id": key[0], "hlo_op": key[1],
                          "opcode": per_host[0][key][0], "last_arriver": f"host{who}",
                          "arrival_ns": [round(a - min(arr)) for a in arr],
                          "lateness_ns": round(t_last - _median(arr)),
                          "duration_ns": [round(d) for d in dur],
                          "peer_wait_ns": [round(x) for x in w],
                          "end_spread_ns": round(max(ends) - min(ends))})
    # The §4 offset estimate (median over instances of end - median end) on the true clocks:
    # how far from the truth a reader's clock alignment can land on this capture.
    est_err = [_median(d) for d in end_dev]
    top = max(range(n), key=lambda h: caused[h])
    hosts = {}
    for h in range(n):
        hosts[f"host{h}"] = {
            "peer_wait_ns_by_step": [round(x) for x in wait[h]],
            "peer_wait_total_ns": round(sum(wait[h])),
            "peer_wait_median_ns": round(_median(wait[h])),
            "last_arrivals": sum(last[h]),
            "last_arrival_steps": [i for i in range(NUM_STEPS) if last[h][i]],
            "wait_caused_ns": round(caused[h]),
            "clock_estimate_error_ns": round(est_err[h]),
            "unmatched_ops": unmatched[h]}
    return {"instances_matched": len(keys), "collective_ops": sorted({k[1] for k in keys}),
            "most_waited_for": f"host{top}",
            "most_waited_for_consistently_last": sum(last[top]) >= 0.6 * len(keys),
            "clock_resolution_ns": round(max(est_err) - min(est_err)),
            "hosts": hosts, "instances": instances}


def shows_design(design, m) -> str:
    """'' when the measured capture shows the scenario's design, else why not."""
    s = design["straggler"]
    if s is None:
        return ""
    steps = design.get("steps", range(NUM_STEPS))
    name = f"host{s}"
    late = [i for i in steps if i in m["hosts"][name]["last_arrival_steps"]]
    if len(late) < len(steps) * 0.8:
        return f"{name} last in steps {late} only, of {list(steps)}"
    expect = design.get("delay_s", design.get("expect_wait_s", 0.0)) * 1e9 * 0.5
    for h, row in m["hosts"].items():
        if h == name:
            continue
        short = [i for i in steps if row["peer_wait_ns_by_step"][i] < expect]
        if len(short) > len(steps) * 0.2:
            return f"{h} waited under {expect / 1e6:.0f} ms in steps {short}"
    return ""


# --------------------------------------------------------------------------- driver

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def capture(scenario: str, tmp: str, timeout_s: float) -> list:
    port = _free_port()
    env = dict(os.environ, XLA_FLAGS="--xla_cpu_multi_thread_eigen=false",
               TF_CPP_MIN_LOG_LEVEL="2")
    procs, dirs = [], []
    for i in range(PROCESSES):
        d = os.path.join(tmp, f"p{i}")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        dirs.append(d)
        log = open(os.path.join(tmp, f"p{i}.log"), "w")
        procs.append((subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", scenario, str(i), str(port),
             d], stdout=log, stderr=subprocess.STDOUT, env=env), log))
    deadline = time.monotonic() + timeout_s
    failed = []
    for i, (p, log) in enumerate(procs):
        try:
            rc = p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
        log.close()
        if rc != 0:
            failed.append(i)
    if failed:
        for i in failed:
            with open(os.path.join(tmp, f"p{i}.log")) as f:
                sys.stderr.write(f"--- process {i}\n" + f.read()[-3000:])
        raise SystemExit(f"{scenario}: processes {failed} failed")
    return dirs


def collect(dirs: list, dest: str, shifts_ns: dict, XSpace) -> tuple:
    os.makedirs(dest)
    spaces, files, workers = [], [], []
    for i, d in enumerate(dirs):
        prof = os.path.join(d, "plugins", "profile")
        runs = os.listdir(prof)
        if len(runs) != 1:
            raise SystemExit(f"process {i}: expected one profile run folder, got {runs}")
        run = os.path.join(prof, runs[0])
        xp = [f for f in os.listdir(run) if f.endswith(".xplane.pb")]
        if len(xp) != 1:
            raise SystemExit(f"process {i}: expected one .xplane.pb, got {os.listdir(run)}")
        space = XSpace()
        with open(os.path.join(run, xp[0]), "rb") as f:
            space.ParseFromString(f.read())
        del space.hostnames[:]
        space.hostnames.append(f"host{i}")
        if shifts_ns.get(i):
            _set_env_times(space, shifts_ns[i])
        path = os.path.join(dest, f"host{i}.xplane.pb")
        with open(path, "wb") as f:
            f.write(space.SerializeToString())
        spaces.append(space)
        files.append(path)
        with open(os.path.join(d, "worker.json")) as f:
            workers.append(json.load(f))
    return spaces, files, workers


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="folder for the scenarios (each scenario's is recreated)")
    ap.add_argument("--ground-truth", help="write ground truth JSON here")
    ap.add_argument("--only", nargs="+", choices=sorted(SCENARIOS),
                    help="these scenarios only (the ground truth then holds only them)")
    ap.add_argument("--tries", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per capture")
    ap.add_argument("--worker", nargs=4, metavar=("SCENARIO", "ID", "PORT", "DIR"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        sc, pid, port, d = args.worker
        worker(sc, int(pid), int(port), d)
        return
    if not args.out:
        ap.error("--out is required")
    XSpace, hlo_op_metadata = _xspace_classes()
    names = args.only or list(SCENARIOS)
    gt = {"tool": "jax.profiler.trace (XSpace) in each of 4 processes, python tracer off",
          "processes": PROCESSES, "num_steps": NUM_STEPS,
          "collectives": "gloo (jax_cpu_collectives_implementation), one CPU device a process",
          "step_annotation": "StepTraceAnnotation('train', step_num=i) on the 'python' line",
          "annotations_per_step": ["data_loading > load_batch", "update_running_stats"],
          "local_rows": ROWS, "mlp_sizes": list(SIZES),
          "layout": "<scenario>/plugins/profile/<run>/host<i>.xplane.pb",
          "peer_wait_definition": "min(op duration, last arrival - own arrival), arrival = "
                                  "op start, true clocks; per host and step summed over the "
                                  "step's collective instances",
          "scenarios": {}, "files": []}
    if not args.only:
        shutil.rmtree(args.out, ignore_errors=True)    # no scenario of an earlier layout stays
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="jax_pod_") as tmp:
        for sc in names:
            design = SCENARIOS[sc]
            shifts = {int(k): v for k, v in design.get("clock_shift_ns", {}).items()}
            dest_root = os.path.join(args.out, sc)
            for attempt in range(1, args.tries + 1):
                t0 = time.monotonic()
                dirs = capture(sc, tmp, args.timeout)
                shutil.rmtree(dest_root, ignore_errors=True)
                dest = os.path.join(dest_root, "plugins", "profile", RUN_NAME)
                spaces, files, workers = collect(dirs, dest, shifts, XSpace)
                m = measure(spaces, shifts, hlo_op_metadata)
                why = shows_design(design, m)
                print(f"{sc}: try {attempt}, {time.monotonic() - t0:.0f} s, "
                      + ", ".join(f"{h} wait {r['peer_wait_median_ns'] / 1e6:.1f} ms/step "
                                  f"last {r['last_arrivals']}" for h, r in m["hosts"].items())
                      + (f" -- retake: {why}" if why else ""), flush=True)
                if not why:
                    break
            else:
                raise SystemExit(f"{sc}: no capture showed the design in {args.tries} tries")
            s = design["straggler"]
            entry = {"design": {
                "straggler": None if s is None else f"host{s}",
                "straggler_cause": design["cause"],
                "culprit": design.get("culprit"),
                "injected_s_by_step": {f"host{i}": w["injected_s"] for i, w in
                                       enumerate(workers) if w["injected_s"]},
                "local_rows": {f"host{i}": w["local_rows"] for i, w in enumerate(workers)},
                "clock_shift_ns": {f"host{k}": v for k, v in shifts.items()},
                "late_steps": design.get("steps", list(range(NUM_STEPS)) if s is not None
                                         else [])},
                "measured": m}
            gt["scenarios"][sc] = entry
            gt["jax_version"] = workers[0]["jax_version"]
    for sc in gt["scenarios"]:
        d = os.path.join(sc, "plugins", "profile", RUN_NAME)
        gt["files"] += [os.path.join(d, f"host{i}.xplane.pb") for i in range(PROCESSES)]
    if args.ground_truth:
        with open(args.ground_truth, "w") as f:
            json.dump(gt, f, indent=1)


if __name__ == "__main__":
    main()
