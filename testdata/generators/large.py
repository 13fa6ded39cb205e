"""--large: one big realistic file for benchmarks, generated and written step by step
(only the current step's events are held; XSpace lines are serialized in chunks)."""
from __future__ import annotations

import gzip
import random
from pathlib import Path

from export import KinetoWriter
from scenarios_kineto import DATALOADER, KN, MEMCPY_D2H_PAGEABLE, MEMCPY_H2D_PINNED, KinetoSim
from scenarios_xla import XlaHost
from sim import ACTIVITY, MS, US, Host, Stream, Timeline
from tb_perfdiag.testing.kineto import A100
from tb_perfdiag.testing.xspace import (
    PlaneBuilder,
    XLine,
    XPlane,
    hlo_proto,
    pb_len,
    pb_str,
    varint,
)


TRANSFORMER_FWD = [
    (["aten::layer_norm", "aten::native_layer_norm"], "layer_norm", (18, 30)),
    (["aten::linear", "aten::addmm"], "gemm_qkv", (60, 110)),
    (["aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
      "aten::_flash_attention_forward"], "flash_fwd", (90, 160)),
    (["aten::linear", "aten::addmm"], "gemm_out", (30, 60)),
    (["aten::add"], "add", (10, 18)),
    (["aten::layer_norm", "aten::native_layer_norm"], "layer_norm", (18, 30)),
    (["aten::linear", "aten::addmm"], "gemm_fc1", (110, 190)),
    (["aten::gelu"], "gelu", (20, 35)),
    (["aten::linear", "aten::addmm"], "gemm_fc2", (110, 190)),
    (["aten::add"], "add", (10, 18)),
]
TRANSFORMER_BWD = [
    ("AddBackward0", [], []),
    ("AddmmBackward0", ["aten::mm"], [("gemm_bwd_fc2", (110, 190)), ("gemm_wgrad_fc2", (110, 190))]),
    ("GeluBackward0", ["aten::gelu_backward"], [("gelu_bwd", (25, 40))]),
    ("AddmmBackward0", ["aten::mm"], [("gemm_bwd_fc1", (110, 190)), ("gemm_wgrad_fc1", (110, 190))]),
    ("NativeLayerNormBackward0", ["aten::native_layer_norm_backward"], [("ln_bwd", (30, 50))]),
    ("AddmmBackward0", ["aten::mm"], [("gemm_bwd_out", (30, 60)), ("gemm_wgrad_out", (30, 60))]),
    ("ScaledDotProductFlashAttentionBackward0", ["aten::_scaled_dot_product_flash_attention_backward",
                                                 "aten::_flash_attention_backward"],
     [("flash_bwd", (200, 330))]),
    ("AddmmBackward0", ["aten::mm"], [("gemm_bwd_qkv", (60, 110)), ("gemm_wgrad_qkv", (60, 110))]),
    ("NativeLayerNormBackward0", ["aten::native_layer_norm_backward"], [("ln_bwd", (30, 50))]),
]
LARGE_KN = {
    "layer_norm": "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
    "gemm_qkv": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "gemm_out": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "gemm_fc1": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas",
    "gemm_fc2": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_on_kernel__5x_cublas",
    "flash_fwd": "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
    "flash_bwd": "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<pytorch_flash::Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, false, true, false, false, false, false>(pytorch_flash::Flash_bwd_params)",
    "add": "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)",
    "gelu": "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >(int, ...)",
    "gelu_bwd": "void at::native::vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, at::detail::Array<char*, 3> >(int, ...)",
    "ln_bwd": "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::BFloat16, float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16 const*, c10::BFloat16*, int)",
    "nccl": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "adamw": KN["adamw"],
    "ce": "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, c10::BFloat16 const*, int)",
}
for _k in ("gemm_bwd_fc2", "gemm_wgrad_fc2", "gemm_bwd_fc1", "gemm_wgrad_fc1", "gemm_bwd_out",
           "gemm_wgrad_out", "gemm_bwd_qkv", "gemm_wgrad_qkv"):
    LARGE_KN[_k] = LARGE_KN["gemm_fc1" if "fc" in _k else "gemm_qkv"].replace(
        "_tn_", "_nn_" if "bwd" in _k else "_nt_")


class LargeKineto:
    """A GPT-like training job with data-parallel all-reduce, streamed step by step."""

    def __init__(self, f, seed, n_events):
        self.rng = random.Random(seed)
        self.tl = Timeline(self.rng)
        pid = 3117
        self.sim = KinetoSim.__new__(KinetoSim)
        sim = self.sim
        sim.rng, sim.tl, sim.pid = self.rng, self.tl, pid
        tl = self.tl
        sim.main = Host(tl, tl.track(("h", pid), "host", pid=pid, tid=pid,
                                     label=f"thread {pid} (python)"))
        sim.ag = Host(tl, tl.track(("h", pid + 161), "host", pid=pid, tid=pid + 161,
                                   label=f"thread {pid + 161} (python)"))
        self.pin = Host(tl, tl.track(("h", pid + 97), "host", pid=pid, tid=pid + 97,
                                     label=f"thread {pid + 97} (python)"))
        sim.streams = {s: Stream(tl, tl.track(("d", 0, s), "device", "GPU 0", pid=0, tid=s,
                                              label=f"stream {s}")) for s in (7, 20, 24)}
        sim.s7 = sim.streams[7]
        sim.steps, sim.fwd_done = [], []
        self.layers = 24
        per_mb = self.layers * 136 + 15            # events per micro-batch (measured)
        total_mb = max(4, n_events // per_mb)
        self.micro = max(1, min(16, total_mb // 8))
        self.target = n_events
        self.writer = KinetoWriter(f, pid, 4_462_354_505_660_805, 1_790_857_026_000_000_000,
                                   "large", device_props=[dict(A100, name="NVIDIA H100 80GB HBM3",
                                                               computeMajor=9, numSms=132)])
        threads = [(pid, f"thread {pid} (python)"), (pid + 97, f"thread {pid + 97} (python)"),
                   (pid + 161, f"thread {pid + 161} (python)")]
        self.writer.metadata(threads, [(0, 7), (0, 20), (0, 24)])
        self.written = 6 + 2 * 3 + 2 * 3

    def op(self, h, chain, kernels, stream=None, not_before=None):
        sim = self.sim
        for name in chain:
            h.open(name, "cpu_op")
            h.adv(sim.r(2.0, 5.0))
        for key, (lo, hi) in kernels:
            # a small model: the GPU is only slightly faster than the host can feed it
            rt, _ = h.launch(stream or sim.s7, LARGE_KN[key], sim.r(lo * 0.22, hi * 0.22),
                             api_dur=sim.r(4.0, 7.0), not_before=not_before)
            rt.meta = "flow"
            h.adv(sim.r(0.5, 1.5))
        for _ in chain:
            h.close(sim.r(0.8, 2.0))

    def micro_batch(self, step, mb):
        sim, h, a = self.sim, self.sim.main, self.sim.ag
        with h.span(f"micro_batch_{mb}", "user_annotation", pre=sim.r(3, 6), post=sim.r(2, 4)):
            with h.span(DATALOADER, "user_annotation", pre=sim.r(10, 20), post=sim.r(3, 6)):
                # every 10th batch the input pipeline stalls
                h.adv(sim.r(30, 80) if (step * self.micro + mb) % 10 != 4 else
                      sim.r(3000, 6000))
            p = self.pin
            p.t = max(p.t, h.t - sim.r(200, 400))
            with p.span("aten::pin_memory", "cpu_op", pre=sim.r(3, 6), post=sim.r(2, 4)):
                with p.span("aten::_pin_memory", "cpu_op", pre=sim.r(5, 10), post=sim.r(2, 4)):
                    p.leaf("aten::copy_", "cpu_op", sim.r(60, 140))
            with h.span("aten::to", "cpu_op", pre=sim.r(2, 4), post=sim.r(1, 2)):
                with h.span("aten::_to_copy", "cpu_op", pre=sim.r(2, 4), post=sim.r(1, 2)):
                    with h.span("aten::copy_", "cpu_op", pre=sim.r(3, 6), post=sim.r(1, 3)):
                        rt, _ = h.launch(sim.streams[24], MEMCPY_H2D_PINNED, sim.r(20, 40),
                                         kind="memcpy", api="cudaMemcpyAsync",
                                         api_dur=sim.r(6, 10),
                                         dev_args={"bytes": 1 << 20,
                                                   "memory bandwidth (GB/s)": 35.2})
                        rt.meta = "flow"
            fwd = []
            with h.span("forward", "user_annotation", pre=sim.r(4, 8), post=sim.r(2, 4)):
                for li in range(self.layers):
                    with h.span(f"TransformerBlock_{li}", "user_annotation", pre=sim.r(2, 4),
                                post=sim.r(1, 3)):
                        for chain, k, rng_ in TRANSFORMER_FWD:
                            self.op(h, chain, [(k, rng_)])
                            h.adv(sim.r(1, 3))
                    fwd.append(li)
                self.op(h, ["aten::cross_entropy_loss", "aten::log_softmax",
                            "aten::_log_softmax"], [("ce", (80, 120))])
            a.t = max(a.t, h.t + sim.r(10, 18))
            for li in reversed(fwd):
                for fn, chain, kernels in TRANSFORMER_BWD:
                    with a.span(f"autograd::engine::evaluate_function: {fn}", "cpu_op",
                                pre=sim.r(2, 4), post=sim.r(1, 2)):
                        with a.span(fn, "cpu_op", pre=sim.r(1.5, 3), post=sim.r(0.5, 1.5)):
                            if kernels:
                                self.op(a, chain, kernels)
                    a.adv(sim.r(2, 5))
                if li % 4 == 0:
                    with a.span("nccl:all_reduce", "user_annotation", pre=sim.r(3, 6),
                                post=sim.r(2, 4)):
                        with a.span("record_param_comms", "cpu_op", pre=sim.r(4, 8),
                                    post=sim.r(2, 4)):
                            self.op(a, [], [("nccl", (300, 700))], stream=sim.streams[20],
                                    not_before=sim.s7.free)
            h.t = a.t + sim.r(6, 12)
            if (step * self.micro + mb) % 7 == 3:
                # loss.item() for logging: a device→host sync
                with h.span("aten::item", "cpu_op", pre=sim.r(2, 4), post=sim.r(1, 2)):
                    with h.span("aten::_local_scalar_dense", "cpu_op", pre=sim.r(2, 4),
                                post=sim.r(1, 2)):
                        rt, mc = h.launch(sim.s7, MEMCPY_D2H_PAGEABLE, sim.r(1.5, 2.5),
                                          kind="memcpy", api="cudaMemcpyAsync",
                                          blocking_ret=sim.r(5, 9),
                                          dev_args={"bytes": 4, "memory bandwidth (GB/s)": 0.002})
                        rt.meta = "flow"
                        sim.runtime(h, "cudaStreamSynchronize", 3, 6)

    def run(self):
        sim, h = self.sim, self.sim.main
        n = self.written
        k = 0
        while k < 4 or n < self.target:
            k += 1
            with sim.step(1000 + k):
                for mb in range(self.micro):
                    self.micro_batch(k, mb)
                with h.span("Optimizer.step#AdamW.step", "user_annotation", pre=sim.r(6, 12),
                            post=sim.r(3, 6)):
                    self.op(h, ["aten::_fused_adamw_"], [("adamw", (400, 700))] * 6)
                with h.span("Optimizer.zero_grad#AdamW.zero_grad", "user_annotation",
                            pre=sim.r(12, 22), post=sim.r(1, 3)):
                    pass
            n += self.flush()
        span = max(sim.s7.free, sim.streams[20].free or 0, h.t)
        self.writer.footer(span, "large")
        return n + 4

    def flush(self):
        evs = self.tl.events
        n = len(evs) + sum(1 for e in evs if e.meta == "flow") + \
            sum(1 for e in evs if e.kind in ACTIVITY and e.launch is not None)
        self.writer.events(evs)
        self.tl.events = []
        return n


class LargeXSpace:
    """PyTorch/XLA on one GPU, written line by line in serialized chunks."""

    CHUNK = 20_000

    def __init__(self, seed, n_events, stall_us=0, hostname="synthhost"):
        self.XPlane, self.XLine = XPlane, XLine
        self.stall_ns = int(stall_us * US)     # extra host time in data_loading per step
        self.hostname = hostname
        self.rng = random.Random(seed)
        self.tl = Timeline(self.rng)
        self.xh = XlaHost(self.tl)
        tl = self.tl
        self.ag = Host(tl, tl.track(("h", "ag"), "host", plane="/host:CPU",
                                    line_id=140209146426944, line="pt_autograd_0",
                                    label="pt_autograd_0", order=2))
        plane = "/device:GPU:0"
        self.streams = {}
        for order, (sid, nm) in enumerate(((7, "Stream #7(Kernel)"), (14, "Stream #14(Kernel)"),
                                           (21, "Stream #21(MemcpyH2D)"))):
            self.streams[sid] = Stream(tl, tl.track(("d", sid), "device", "GPU 0", plane=plane,
                                                    line_id=sid, line=nm, label=nm, order=order))
        self.layers = 24
        self.steps = max(4, min(60, n_events // 60_000))
        per_step = n_events / self.steps
        self.kernels_per_layer = max(4, int((per_step - 30 - 4 * self.layers) / 2 / self.layers))
        self.planes = {"/host:CPU": XPlane(id=0, name="/host:CPU"),
                       plane: XPlane(id=1, name=plane)}
        self.builders = {k: PlaneBuilder(v) for k, v in self.planes.items()}
        self.lines = {}         # track key -> [header XLine, chunk XLine, [bytes]]
        self.base_ns = 1_000_000
        self.module = "SyncTensorsGraph.1337"
        self.ops = []           # (hlo name, op_name, op_type)
        self.count = 0

    def _line(self, t):
        ln = self.lines.get(t.key)
        if ln is None:
            hdr = self.XLine(id=t.info["line_id"], name=t.info["line"],
                             timestamp_ns=self.base_ns)
            if t.side == "host":
                hdr.display_name = t.info["line"]
            ln = self.lines[t.key] = [hdr, self.XLine(), [], t]
        return ln

    def flush_events(self, force=False):
        tl = self.tl
        for e in sorted(tl.events, key=lambda e: (e.ts, e.idx)):
            pb = self.builders[e.track.info["plane"]]
            ln = self._line(e.track)
            meta = e.meta if isinstance(e.meta, dict) else {}
            pb.event(ln[1], e.name, e.ts * 1000, e.dur * 1000, e.stats or (),
                     meta.get("display", ""), meta.get("md_stats", ()))
            if len(ln[1].events) >= self.CHUNK:
                ln[2].append(ln[1].SerializeToString())
                ln[1] = self.XLine()
        self.count += len(tl.events)
        tl.events = []
        if force:
            for ln in self.lines.values():
                if len(ln[1].events):
                    ln[2].append(ln[1].SerializeToString())
                    ln[1] = self.XLine()

    def step(self, k):
        xh, py, px, tl = self.xh, self.xh.py, self.xh.px, self.tl
        s7, s14, s21 = self.streams[7], self.streams[14], self.streams[21]
        with xh.train_step(k):
            with py.span("data_loading", "xla", pre=xh.r(300, 600) + self.stall_ns,
                         post=xh.r(5, 10)):
                xh.transfer(0, stream=s21, nbytes=64 * 2048 * 4)
                xh.transfer(0, stream=s21, nbytes=64 * 2048 * 4)
            with py.span("forward", "xla", pre=xh.r(10, 20), post=xh.r(5, 10)):
                for li in range(self.layers):
                    with py.span(f"layer_{li}", "xla", pre=xh.r(5, 10), post=xh.r(2, 5)):
                        with py.span("attention", "xla", pre=xh.r(20, 40), post=xh.r(2, 5)):
                            pass
                        with py.span("mlp", "xla", pre=xh.r(15, 30), post=xh.r(2, 5)):
                            pass
            if k % 5 == 2:
                a = self.ag
                a.t = max(a.t, py.t + xh.r(5, 10))
                with a.span("PjRtComputationClient::TransferToDevice", "xla", pre=xh.r(10, 20),
                            post=xh.r(3, 6)):
                    a.adv(xh.r(15, 30))
            xh.trace_block("backward", 400, 600)
            xh.trace_block("optimizer", 200, 300)
            with xh.step_marker(compile_ms=150 if k == 0 else None,
                                graph_hash="0d1f2e3c4b5a69788796a5b4c3d2e1f0") as sm:
                with xh.gpu_execute(sm["flow"]):
                    last7 = None
                    j = 0
                    for phase, n_l in (("forward", 0.35), ("backward", 0.5),
                                       ("optimizer", 0.15)):
                        for li in range(self.layers):
                            for _ in range(max(1, int(self.kernels_per_layer * n_l))):
                                if k == 0:
                                    self.ops.append((f"fusion.{j}", f"train_step/{phase}/"
                                                     f"layer_{li}/op_{j % 7}", "fusion"))
                                st = 14 if (phase == "backward" and j % 3 == 0) else 7
                                nb = last7.ts if (st == 14 and last7 is not None) else None
                                rt, dev = px.launch(
                                    self.streams[st], f"fusion_{j}", xh.r(4, 18),
                                    api="cuLaunchKernel", api_dur=xh.r(2, 4),
                                    corr_stat="correlation_id", not_before=nb,
                                    dev_stats=[("hlo_op", "r", f"fusion.{j}"),
                                               ("hlo_module", "r", self.module),
                                               ("program_id", "i", 1)])
                                if st == 7:
                                    last7 = dev
                                px.adv(xh.r(0.5, 1.5))
                                j += 1

    def run(self, path: Path):
        for k in range(self.steps):
            self.step(k)
            self.flush_events()
        self.flush_events(force=True)
        meta = self.XPlane(id=0, name="/host:metadata")
        mb = PlaneBuilder(meta)
        ins = [(name, "fusion", op_type, op_name, "/workspace/train.py", 100 + i)
               for i, (name, op_name, op_type) in enumerate(self.ops)]
        mb.eid(f"{self.module}(1)", md_stats=[("Hlo Proto", "b", hlo_proto(self.module, ins))])
        env = self.XPlane(id=0, name="Task Environment")
        PlaneBuilder(env).stats(env.stats, [
            ("profile_start_time", "u", 1_795_400_000_000_000_000),
            ("profile_stop_time", "u",
             1_795_400_000_000_000_000 + self.base_ns + self.xh.py.t + 10 * MS)])
        with open(path, "wb") as f:
            f.write(pb_len(1, meta.SerializeToString(deterministic=True)))
            for pname, pl in self.planes.items():
                header = pl.SerializeToString(deterministic=True)
                lines = []
                for ln in sorted((v for v in self.lines.values()
                                  if v[3].info["plane"] == pname),
                                 key=lambda v: v[3].info.get("order", 0)):
                    body = ln[0].SerializeToString()
                    size = len(body) + sum(len(c) for c in ln[2])
                    lines.append((varint((3 << 3) | 2) + varint(size) + body, ln[2]))
                total = len(header) + sum(len(h) + sum(len(c) for c in cs) for h, cs in lines)
                f.write(varint((1 << 3) | 2) + varint(total))
                f.write(header)
                for h, cs in lines:
                    f.write(h)
                    for c in cs:
                        f.write(c)
                    cs.clear()
            f.write(pb_len(1, env.SerializeToString(deterministic=True)))
            f.write(pb_str(4, self.hostname))
        return self.count


def write_large(path: Path, n_events: int, fmt: str, seed: int = 12345) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "kineto":
        # OUT ending in .gz is written gzipped (level 1: the generator stays the bottleneck)
        opener = (lambda: gzip.open(path, "wb", compresslevel=1)) if path.suffix == ".gz" \
            else (lambda: open(path, "wb"))
        with opener() as f:
            return LargeKineto(f, seed, n_events).run()
    return LargeXSpace(seed, n_events).run(path)
