"""The XSpace scenarios: PyTorch/XLA host threads (python, tf_pytorchxla) driving one
GPU or one/two TPU cores, each scenario injecting its kind of device idle gap."""
from __future__ import annotations

import random
from contextlib import contextmanager

from sim import (COLLECTIVE_WAIT, COMPILATION, DATA_LOADING, GAP_MIN_NS, H2D_TRANSFER, MS,
                 US, Host, Stream, Timeline)
from hlo_shapes import mlp_program


class XlaHost:
    """The python and tf_pytorchxla threads of a PyTorch/XLA process (/host:CPU)."""

    def __init__(self, tl: Timeline):
        self.tl = tl
        self.rng = tl.rng
        self.py = Host(tl, tl.track(("h", "python"), "host", plane="/host:CPU",
                                    line_id=140213541771072, line="python", label="python",
                                    order=0))
        self.px = Host(tl, tl.track(("h", "px"), "host", plane="/host:CPU",
                                    line_id=140209163212352,
                                    line="tf_pytorchxla/140209163212352",
                                    label="tf_pytorchxla/140209163212352", order=1))
        self.flow = 1 << 20
        self.steps = []

    def r(self, lo_us, hi_us) -> int:
        return self.rng.randint(int(lo_us * US), int(hi_us * US))

    def next_flow(self) -> int:
        self.flow += self.rng.randint(1, 5)
        return self.flow

    @contextmanager
    def train_step(self, k):
        py = self.py
        self.tl.step = k
        with py.span("train_step", "xla", pre=self.r(20, 40), post=self.r(10, 25),
                     stats=[("_r", "i", 1), ("step_num", "i", k)]) as ev:
            yield ev
        self.steps.append((k, ev.ts, ev.end))

    def trace_block(self, name, lo_us, hi_us, children=()):
        py = self.py
        with py.span(name, "xla", pre=self.r(5, 15), post=self.r(3, 8)):
            if children:
                per = (lo_us + hi_us) / 2 / len(children)
                for c in children:
                    with py.span(c, "xla", pre=self.r(per * 0.7, per * 1.1), post=self.r(2, 5)):
                        pass
            else:
                py.adv(self.r(lo_us, hi_us))

    def transfer(self, dur_us, stream=None, nbytes=0, corr_stat="correlation_id"):
        """PjRtComputationClient::TransferToDevice (with its memcpy on a GPU stream)."""
        py = self.py
        with py.span("PjRtComputationClient::TransferToDevice", "xla", pre=self.r(6, 12),
                     post=self.r(3, 6)) as ev:
            if stream is not None:
                dma = max(2 * US, int(nbytes / 20e9 * 1e9))
                rt, dev = py.launch(stream, "MemcpyH2D", dma, kind="memcpy",
                                    api="cuMemcpyHtoDAsync", api_dur=self.r(5, 9),
                                    corr_stat=corr_stat,
                                    dev_stats=[("memcpy_details", "s",
                                                f"kind_src:pageable kind_dst:device "
                                                f"size:{nbytes} dest:0 async:1")])
                py.adv(self.r(3, 8))
            else:
                py.adv(self.r(dur_us * 0.95, dur_us * 1.05))
        return ev

    @contextmanager
    def step_marker(self, compile_ms=None, transfer_ms=None, graph_hash=None):
        """StepMarker › … › SyncTensorsGraphInternal; yields inside ScheduleSyncTensorsGraph
        right after ThreadpoolListener::Record, with the flow id for the executor thread."""
        py = self.py
        out = {}
        with py.span("StepMarker", "xla", pre=self.r(6, 12), post=self.r(4, 9)):
            with py.span("SyncLiveTensorsGraph", "xla", pre=self.r(3, 6), post=self.r(2, 4)):
                with py.span("SyncTensorsGraph", "xla", pre=self.r(4, 9), post=self.r(1, 3)):
                    with py.span("SyncTensorsGraphInternal", "xla", pre=self.r(1, 3),
                                 post=self.r(4, 9)):
                        py.leaf("CollectSyncTensors", "xla", self.r(15, 35))
                        py.adv(self.r(3, 8))
                        with py.span("ExtractIRAndPrepareXlaData_", "xla", pre=self.r(20, 40),
                                     post=self.r(8, 20)):
                            if transfer_ms:
                                out["transfer"] = self.transfer(transfer_ms * 1000)
                        py.adv(self.r(2, 6))
                        py.leaf("RunPostOrder", "xla", self.r(70, 140))
                        py.adv(self.r(5, 15))
                        if compile_ms:
                            with py.span("XLAGraphExecutor::Compile", "xla",
                                         stats=[("graph_hash", "r", graph_hash)]) as c:
                                out["compile"] = c
                                total = int(compile_ms * MS)
                                py.adv(self.r(1500, 3000))
                                with py.span("PjRtComputationClient::Compile", "xla",
                                             pre=self.r(200, 400), post=self.r(300, 600)):
                                    with py.span("PjRtStreamExecutorClient::Compile", "xla",
                                                 pre=self.r(100, 300), post=self.r(100, 200)):
                                        rest = total - 6 * MS
                                        py.leaf("GpuCompiler::RunHloPasses", "xla",
                                                int(rest * 0.58))
                                        py.adv(self.r(50, 120))
                                        with py.span("GpuCompiler::RunBackend", "xla",
                                                     pre=self.r(500, 900), post=self.r(200, 400)):
                                            py.leaf("NVPTXCompiler::CompileTargetBinary", "xla",
                                                    int(rest * 0.36))
                                py.adv(self.r(800, 1500))
                        with py.span("ScheduleSyncTensorsGraph", "xla", pre=self.r(3, 6),
                                     post=self.r(2, 5)):
                            py.leaf("TensorCollectionBarrier", "xla", self.r(10, 30))
                            py.adv(self.r(5, 12))
                            fid = self.next_flow()
                            py.leaf("ThreadpoolListener::Record", "xla", 0,
                                    stats=[("_pt", "i", 15), ("_p", "i", fid)])
                            out["flow"] = fid
                            yield out
                        # bookkeeping goes on while the executor thread launches
                        py.t = max(py.t, self.px.t + self.r(10, 25))

    def executor_region(self, fid):
        px = self.px
        px.t = max(px.t, self.py.t + self.r(15, 30))
        px.leaf("ThreadpoolListener::StartRegion", "xla", 0,
                stats=[("_ct", "i", 15), ("_c", "i", fid)])
        px.adv(self.r(20, 60))

    @contextmanager
    def gpu_execute(self, fid):
        """The executor thread picks up flow ``fid`` and runs the graph on the GPU: yields
        inside ExecuteComputation › PjRtStreamExecutorLoadedExecutable::Execute, where
        the kernels are launched."""
        px = self.px
        self.executor_region(fid)
        with px.span("PjRtComputationClient::ExecuteComputation", "xla",
                     pre=self.r(20, 40), post=self.r(10, 20)):
            with px.span("PjRtStreamExecutorLoadedExecutable::Execute", "xla",
                         pre=self.r(30, 60), post=self.r(8, 15)):
                yield px
        px.leaf("ThreadpoolListener::StopRegion", "xla", 0)


# ---- XLA on GPU: recompilation --------------------------------------------------------

def gpu_program(scale):
    """(hlo op, kernel name, stream, lo µs, hi µs, op_name, op_type) in device order; the
    scheduler moves the updates of dense_3/dense_2 next to their gradients."""
    ops = []

    def add(hlo, stream, lo, hi, op_name, op_type):
        ops.append((hlo, hlo.replace(".", "_"), stream, lo * scale, hi * scale, op_name, op_type))

    for i in range(4):
        add(f"gemm_fusion_dot.{10 + i}", 7, 300, 420, f"train_step/forward/dense_{i}/dot_general",
            "dot_general")
        add(f"loop_add_fusion.{20 + i}", 7, 70, 100, f"train_step/forward/dense_{i}/gelu", "add")
    add("input_reduce_fusion.3", 7, 60, 90, "train_step/forward/loss/log_softmax", "reduce")
    add("loop_select_fusion.1", 7, 50, 80, "train_step/forward/loss/nll_loss", "select")
    add("copy.7", 7, 45, 70, "", "")
    for i in (3, 2, 1, 0):
        add(f"loop_multiply_fusion.{30 + i}", 7, 70, 100,
            f"train_step/backward/dense_{i}/gelu_grad", "multiply")
        add(f"gemm_fusion_dot.{40 + i}", 7, 300, 420,
            f"train_step/backward/dense_{i}/dot_general", "dot_general")
        add(f"gemm_fusion_dot.{50 + i}", 14 if i % 2 else 7, 280, 400,
            f"train_step/backward/dense_{i}/dot_general.1", "dot_general")
        add(f"input_reduce_fusion.{60 + i}", 7, 50, 80,
            f"train_step/backward/dense_{i}/reduce_sum", "reduce")
        if i >= 2:
            add(f"loop_adam_fusion.{70 + i}", 7, 90, 140,
                f"train_step/optimizer/adamw/dense_{i}/update", "add")
    for i in (1, 0):
        add(f"loop_adam_fusion.{70 + i}", 7, 90, 140,
            f"train_step/optimizer/adamw/dense_{i}/update", "add")
    return ops


def scenario_xla_gpu_recompile():
    rng = random.Random(5505)
    tl = Timeline(rng)
    xh = XlaHost(tl)
    py, px = xh.py, xh.px
    plane = "/device:GPU:0"
    s7 = Stream(tl, tl.track(("d", 7), "device", "GPU 0", plane=plane, line_id=7,
                             line="Stream #7(Kernel)", label="Stream #7(Kernel)", order=0))
    s14 = Stream(tl, tl.track(("d", 14), "device", "GPU 0", plane=plane, line_id=14,
                              line="Stream #14(Kernel)", label="Stream #14(Kernel)", order=1))
    s21 = Stream(tl, tl.track(("d", 21), "device", "GPU 0", plane=plane, line_id=21,
                              line="Stream #21(MemcpyH2D)", label="Stream #21(MemcpyH2D)",
                              order=2))
    streams = {7: s7, 14: s14}
    # a new input shape compiles the same graph again under a new program id (real
    # torch_xla captures keep the graph's name, SyncTensorsGraph.N, across shapes)
    programs = {1: ("SyncTensorsGraph.412", gpu_program(1.0)),
                2: ("SyncTensorsGraph.412", gpu_program(1.18))}
    # the tokens of a step (its batch × sequence) in each program: the new input shape
    # is 1.18× the work, as its kernels' times are
    tokens = {1: 8192, 2: 9728}
    compile_ms = {0: 300, 3: 250}
    hashes = {1: "9c1e5b07a3d24f6e81b2c4d5e6f70812", 2: "4a7d93e0c1b25f68d9e0a1b2c3d4e5f6"}
    for k in range(6):
        prog = 1 if k < 3 else 2
        module, ops = programs[prog]
        with xh.train_step(k):
            with py.span("data_loading", "xla", pre=xh.r(500, 800), post=xh.r(5, 10)):
                xh.transfer(0, stream=s21, nbytes=32 * 3 * 224 * 224 * 4)
                py.adv(xh.r(5, 10))
                xh.transfer(0, stream=s21, nbytes=32 * 8)
            xh.trace_block("forward", 900, 1100, children=("dense_0", "dense_1", "dense_2",
                                                           "dense_3", "loss"))
            xh.trace_block("backward", 650, 850)
            xh.trace_block("optimizer", 300, 420)
            with xh.step_marker(compile_ms=compile_ms.get(k), graph_hash=hashes[prog]) as sm:
                with xh.gpu_execute(sm["flow"]):
                    last7 = None
                    for j, (hlo, kname, st, lo, hi, op_name, op_type) in enumerate(ops):
                        if j == 0 and k in compile_ms:
                            tl.expect(COMPILATION, note=(
                                "the python thread is in StepMarker › … › "
                                "XLAGraphExecutor::Compile › PjRtComputationClient::"
                                "Compile (%s)" % ("first compilation of the step graph"
                                                  if k == 0 else
                                                  "recompilation: new input shape")))
                        stats = [("hlo_op", "r", hlo), ("hlo_module", "r", module),
                                 ("program_id", "i", prog),
                                 ("kernel_details", "s",
                                  "regs:64 static_shared:0 dynamic_shared:49152 "
                                  "grid:216,1,1 block:256,1,1 occ_pct:50.0")]
                        nb = last7.ts if (st == 14 and last7 is not None) else None
                        rt, dev = px.launch(streams[st], kname, xh.r(lo, hi),
                                            api="cuLaunchKernel", api_dur=xh.r(3, 5),
                                            corr_stat="correlation_id", dev_stats=stats,
                                            not_before=nb)
                        dev.meta = {"op_name": op_name}
                        if st == 7:
                            last7 = dev
                        px.adv(xh.r(1, 3))
    meta = []
    for prog, (module, ops) in programs.items():
        # shapes and fused computations, as XLA records them: the ops' FLOPs and bytes
        # (a bf16 MLP of hidden size 2048: 68.7 GFLOP a matmul at 53-73 % of an A100)
        meta.append((f"{module}({prog})", [("Hlo Proto", "b", mlp_program(
            module, ops, tokens[prog], 2048))]))
    desc = ("PyTorch/XLA on one GPU, 6 steps (train_step step_num 0-5, _r=1) with xp.Trace "
            "blocks data_loading/forward/backward/optimizer. StepMarker › … › "
            "XLAGraphExecutor::Compile › PjRtComputationClient::Compile runs on steps 0 "
            "(300 ms) and 3 (250 ms: a new input shape compiles SyncTensorsGraph.412 again as "
            "program 2); the GPU "
            "idles until the tf_pytorchxla thread's first cuLaunchKernel after the compile. "
            "Step 0's gap starts after the input MemcpyH2D (the first device activity). "
            "Kernels carry correlation_id (= their cuLaunchKernel's), hlo_op, hlo_module, "
            "program_id; /host:metadata holds one Hlo Proto per module whose op_name scopes "
            "(train_step/<scope>/…) give the annotation device time. The XLA scheduler "
            "interleaves optimizer updates of dense_3/dense_2 with backward ops, and "
            "Stream #14 runs some weight-gradient GEMMs concurrently with Stream #7.")

    def scope(e):
        on = (e.meta or {}).get("op_name") if isinstance(e.meta, dict) else None
        if not on:
            return None
        parts = on.split("/")
        return [parts[1]] if len(parts) > 1 else None

    extra = {"plane_order": [(0, "/host:metadata"), (0, "/host:CPU"), (1, plane),
                             (0, "Task Environment")],
             "metadata_events": meta, "scope": scope,
             "plane_stats": {plane: [("device_type_string", "s", "NVIDIA A100-SXM4-80GB"),
                                     ("devcap_cores_per_sm", "u", 64),
                                     ("devcap_num_sms", "u", 108)]},
             "annotation_definition": (
                 "device ops whose HLO op_name (from the /host:metadata Hlo Proto joined on "
                 "(hlo_module, program_id, hlo_op)) has this second path component "
                 "(train_step/<scope>/…); per step (the step that launched the op); sum_ns = "
                 "sum of op durations, union_ns = length of their union (Stream #14 overlaps "
                 "Stream #7). copy.7 has no op_name and is not attributed.")}
    return tl, xh.steps, desc, extra


# ---- XLA on TPU: two devices, collective wait, one host→device transfer ------------------

def _hlo_text(name, category, shape="bf16[256,1024]{1,0:T(8,128)(2,1)}"):
    op = {"all-reduce": "all-reduce", "convolution fusion": "fusion",
          "loop fusion": "fusion", "output fusion": "fusion"}.get(category, "fusion")
    if op == "all-reduce":
        return (f"%{name} = f32[4096,1024]{{1,0:T(8,128)}} all-reduce(f32[4096,1024]"
                f"{{1,0:T(8,128)}} %fusion.61), replica_groups={{{{0,1}}}}, to_apply=%add.1")
    return f"%{name} = {shape} fusion({shape} %param.{len(name)}), kind=kOutput, calls=%fused_computation.{name.split('.')[-1]}"


TPU_OPS = [("fusion.%d" % (10 + j), cat, lo, hi) for j, (cat, lo, hi) in enumerate(
    [("convolution fusion", 700, 900), ("loop fusion", 150, 250), ("convolution fusion", 800, 1000),
     ("output fusion", 300, 400), ("convolution fusion", 700, 900), ("loop fusion", 150, 250),
     ("convolution fusion", 900, 1100), ("output fusion", 300, 400),
     ("convolution fusion", 800, 1000), ("loop fusion", 200, 300),
     ("convolution fusion", 900, 1100), ("output fusion", 350, 450),
     ("convolution fusion", 800, 1000), ("loop fusion", 150, 250)])]


class TpuDevice:
    def __init__(self, tl, d, steps_line=True):
        plane = f"/device:TPU:{d}"
        self.name = f"TPU {d}"
        self.plane = plane
        self.ops = Stream(tl, tl.track(("tpu", d, "ops"), "device", self.name, plane=plane,
                                       line_id=3, line="XLA Ops", label="XLA Ops", order=2),
                          gap=(300, 1500))
        self.mod = tl.track(("tpu", d, "mod"), "device", self.name, plane=plane, line_id=2,
                            line="XLA Modules", label="XLA Modules", order=1)
        self.steps = tl.track(("tpu", d, "steps"), "device", self.name, plane=plane,
                              line_id=1, line="Steps", label="Steps", order=0) \
            if steps_line else None
        self.traceme = tl.track(("tpu", d, "traceme"), "device", self.name, plane=plane,
                                line_id=6, line="XLA TraceMe", label="XLA TraceMe", order=3)
        self.free = None
        self.module_ends = {}


TPU_PLANE_STATS = [("device_type_string", "s", "TPU v5 lite"),
                   ("peak_teraflops_per_second", "d", 197.0),
                   ("peak_hbm_bw_gigabytes_per_second", "d", 819.0)]
TPU_PEAK_FLOPS, TPU_PEAK_BW = 197e12, 819e9
# what each op's nominal time achieves on the fastest core: (share of the FLOP/s peak,
# FLOPs per byte) for the matmul fusions, share of the HBM bandwidth for the loop fusions
_TPU_RATE = {"convolution fusion": (0.62, 400.0), "output fusion": (0.35, 120.0)}
_TPU_LOOP_BW = 0.6


def _tpu_cost_stats(cat, lo_us, hi_us, scale):
    """XLA's cost figures of one op as a TPU XSpace keeps them on its metadata (flops,
    model_flops, bytes_accessed), sized to the op's nominal time so that the figures
    are those of a busy TPU v5e: never drawn from the random stream."""
    t = (lo_us + hi_us) / 2 * 1e-6 * scale
    if cat == "all-reduce":
        fl, by = 4096 * 1024, 2 * 4 * 4096 * 1024
    elif cat in _TPU_RATE:
        share, intensity = _TPU_RATE[cat]
        fl = share * TPU_PEAK_FLOPS * t
        by = fl / intensity
    else:
        by = _TPU_LOOP_BW * TPU_PEAK_BW * t
        fl = by / 2                           # an add or a multiply per bf16 element
    fl, by = float(round(fl)), float(round(by))
    return [("flops", "d", fl), ("model_flops", "d", fl), ("bytes_accessed", "d", by)]


def _tpu_module(tl, xh, devs, k, module, prog, run_id, execs, op_scale, collective,
                first_markers=None):
    """Run one module on each TPU: compute ops, then (if ``collective``) a synchronized
    all-reduce; record module events.  execs[d] is the host launch for device d."""
    rng = tl.rng
    base = [rng.randint(lo * US, hi * US) for _, _, lo, hi in TPU_OPS]
    ready = {}
    starts = {}
    for di, dev in enumerate(devs):
        ex = execs[di]
        t0 = ex.end + rng.randint(6 * US, 12 * US)
        if dev.ops.free is not None:
            t0 = max(t0, dev.ops.free + rng.randint(2 * US, 4 * US))
        starts[di] = t0
        for j, (name, cat, _, _) in enumerate(TPU_OPS):
            if j == 0 and first_markers:
                tl.pending = dict(first_markers)
            ev = dev.ops.run(_hlo_text(name, cat), int(base[j] * op_scale[di]),
                             t0 if j == 0 else 0)
            ev.meta = {"display": name, "md_stats": [("hlo_category", "s", cat),
                                                     ("program_id", "u", prog)] +
                       _tpu_cost_stats(cat, *TPU_OPS[j][2:], min(op_scale))}
            ev.stats = [("hlo_op", "s", name), ("hlo_module", "r", module),
                        ("program_id", "u", prog), ("run_id", "u", run_id)]
            ev.launch = ex
        ready[di] = dev.ops.free
    if collective:
        # both cores enter the all-reduce together, once the slower one is ready
        ar_start = max(ready.values()) + rng.randint(1600, 2400)
        dur = rng.randint(700 * US, 800 * US)
        for di, dev in enumerate(devs):
            if ar_start - ready[di] >= GAP_MIN_NS:
                tl.expect(COLLECTIVE_WAIT, note=(
                    f"{devs[1 - di].name} is still computing (its ops run 20% longer); "
                    f"all-reduce.5 was enqueued by TpuExecutable::Execute long before"))
                bar = tl.add(dev.traceme, "barrier-cores", "", ready[di], ar_start - ready[di],
                             "dev_other")
            ev = dev.ops.run(_hlo_text("all-reduce.5", "all-reduce"), dur, 0,
                             not_before=ar_start)
            assert ev.ts == ar_start
            ev.meta = {"display": "all-reduce.5", "md_stats": [("hlo_category", "s", "all-reduce"),
                                                               ("program_id", "u", prog)] +
                       _tpu_cost_stats("all-reduce", 0, 0, 1)}
            ev.stats = [("hlo_op", "s", "all-reduce.5"), ("hlo_module", "r", module),
                        ("program_id", "u", prog), ("run_id", "u", run_id),
                        ("all_reduce_unique_id", "u", 65537 + k)]
            ev.launch = execs[di]
    tl.pending = None
    for di, dev in enumerate(devs):
        end = dev.ops.free + rng.randint(1 * US, 3 * US)
        m = tl.add(dev.mod, f"{module}({prog})", "", starts[di] - rng.randint(300, 900),
                   end - starts[di], "dev_other")
        m.stats = [("run_id", "u", run_id), ("program_id", "u", prog), ("queue_id", "u", 0),
                   ("_ct", "i", 12), ("_c", "i", execs[di].meta["flow"])]
        m.step = k
        dev.module_ends[k] = dev.ops.free


def _tpu_execute(xh, fid, n_devices, run_id, replicated):
    px = xh.px
    xh.executor_region(fid)
    execs = []
    outer = "PjRtComputationClient::ExecuteReplicated" if replicated else \
        "PjRtComputationClient::ExecuteComputation"
    with px.span(outer, "xla", pre=xh.r(15, 30), post=xh.r(8, 15)):
        for d in range(n_devices):
            pflow = (run_id << 8) | (d + 1) | (1 << 40)
            ex = px.leaf("TpuExecutable::Execute", "xla", xh.r(30, 50),
                         stats=[("device_ordinal", "i", d), ("run_id", "i", run_id),
                                ("_pt", "i", 12), ("_p", "i", pflow)])
            ex.meta = {"flow": pflow}
            execs.append(ex)
            px.adv(xh.r(3, 8))
    px.leaf("ThreadpoolListener::StopRegion", "xla", 0)
    return execs


def _steps_line(tl, dev, step_ids):
    out = []
    prev = None
    for k in step_ids:
        end = dev.module_ends[k]
        start = prev if prev is not None else min(
            e.ts for e in tl.events if e.track is dev.ops.track)
        ev = tl.add(dev.steps, str(k), "", start, end - start, "dev_other")
        ev.stats = [("step_num", "i", k), ("group_id", "i", k)]
        out.append((k, start, end))
        prev = end
    return out


def scenario_xla_tpu_two_devices():
    rng = random.Random(6606)
    tl = Timeline(rng)
    xh = XlaHost(tl)
    py = xh.py
    devs = [TpuDevice(tl, 0), TpuDevice(tl, 1)]
    module, prog = "SyncTensorsGraph.220", 7
    steps = list(range(20, 25))
    h2d_step = 23
    for i, k in enumerate(steps):
        with xh.train_step(k):
            with py.span("data_loading", "xla", pre=xh.r(3600, 4200), post=xh.r(5, 10)):
                xh.transfer(40)
            xh.trace_block("forward", 1000, 1300, children=("encoder", "head", "loss"))
            xh.trace_block("backward", 700, 900)
            xh.trace_block("optimizer", 300, 450)
            with xh.step_marker(transfer_ms=30 if k == h2d_step else None) as sm:
                run_id = 300 + i
                execs = _tpu_execute(xh, sm["flow"], 2, run_id, replicated=True)
                first = None
                if k == h2d_step:
                    first = {"cause": H2D_TRANSFER, "culprit": sm["transfer"],
                             "optional": False,
                             "note": ("StepMarker › … › ExtractIRAndPrepareXlaData_ › "
                                      "PjRtComputationClient::TransferToDevice uploads a "
                                      "1.5 GB host tensor before the execution can be "
                                      "scheduled; the op that ends the gap was launched by "
                                      "TpuExecutable::Execute right after it")}
                _tpu_module(tl, xh, devs, k, module, prog, run_id, execs, (1.0, 1.2),
                            collective=True, first_markers=first)
    dsteps = {d.name: _steps_line(tl, d, steps) for d in devs}
    desc = ("PyTorch/XLA on two TPU cores, 5 steps (step_num 20-24; device 'Steps' lines, "
            "one event per step named by its number). Each step's module "
            "(SyncTensorsGraph.220, launched by ExecuteReplicated › TpuExecutable::Execute "
            "per core, flows _pt/_p=12 → XLA Modules _ct/_c) runs 14 fusions and ends with "
            "all-reduce.5 on both cores; TPU 1's fusions run 20% longer, so TPU 0 idles "
            "before every all-reduce (collective_wait; an XLA TraceMe 'barrier-cores' spans "
            "it). In step 23, StepMarker › … › ExtractIRAndPrepareXlaData_ › "
            "PjRtComputationClient::TransferToDevice takes 30 ms; both cores drain their "
            "queue during it and idle until the transfer completes (h2d_transfer).")
    extra = {"plane_order": [(0, "/host:metadata"), (0, "/host:CPU"), (1, "/device:TPU:0"),
                             (2, "/device:TPU:1"), (0, "Task Environment")],
             "device_steps": dsteps,
             "plane_stats": {"/device:TPU:0": TPU_PLANE_STATS,
                             "/device:TPU:1": TPU_PLANE_STATS}}
    return tl, xh.steps, desc, extra


def scenario_xla_tpu_data_loading():
    rng = random.Random(7707)
    tl = Timeline(rng)
    xh = XlaHost(tl)
    py = xh.py
    dev = TpuDevice(tl, 0, steps_line=False)
    module, prog = "SyncTensorsGraph.97", 3
    steps = list(range(100, 105))
    for i, k in enumerate(steps):
        with xh.train_step(k):
            with py.span("data_loading", "xla", pre=xh.r(19200, 20800), post=xh.r(5, 10)):
                xh.transfer(40)
            xh.trace_block("forward", 450, 550, children=("encoder", "head"))
            xh.trace_block("backward", 300, 400)
            xh.trace_block("optimizer", 150, 250)
            with xh.step_marker() as sm:
                run_id = 900 + i
                execs = _tpu_execute(xh, sm["flow"], 1, run_id, replicated=False)
                first = None
                if i > 0:
                    first = {"cause": DATA_LOADING, "waited_for": None, "optional": False,
                             "note": ("the python thread spends ~20 ms in the data_loading "
                                      "xp.Trace at the start of the step")}
                _tpu_module(tl, xh, [dev], k, module, prog, run_id, execs, (0.62,),
                            collective=False, first_markers=first)
    desc = ("PyTorch/XLA on one TPU core, 5 steps (step_num 100-104, no device 'Steps' "
            "line: steps come from the host's train_step events). Each step starts with a "
            "20 ms data_loading xp.Trace (ending in a tiny TransferToDevice); the module "
            "(ExecuteComputation › TpuExecutable::Execute, ~6 ms of ops) is launched after "
            "it, so the core idles ~15 ms per step (data_loading). Step 100's data loading "
            "precedes the first device activity, so it is not a gap by definition.")
    extra = {"plane_order": [(0, "/host:metadata"), (0, "/host:CPU"), (1, "/device:TPU:0"),
                             (0, "Task Environment")],
             "plane_stats": {"/device:TPU:0": TPU_PLANE_STATS}}
    return tl, xh.steps, desc, extra


XSPACE_SCENARIOS = [
    ("xla_gpu_recompile", scenario_xla_gpu_recompile),
    ("xla_tpu_two_devices", scenario_xla_tpu_two_devices),
    ("xla_tpu_data_loading", scenario_xla_tpu_data_loading),
]
