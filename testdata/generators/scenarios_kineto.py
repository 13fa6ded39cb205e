"""The Kineto scenarios: a PyTorch host (main + autograd threads) and one GPU, each
scenario injecting one kind of device idle gap."""
from __future__ import annotations

import random
from contextlib import contextmanager

from sim import (ACTIVITY, DATA_LOADING, H2D_TRANSFER, HOST_COMPUTE, HOST_SYNC, LAUNCH_OVERHEAD,
                 MS, US, Host, Stream, Timeline)


# ---- kernels and ops of a small segmentation network (names as CUDA 12 / PyTorch 2.x write them)
KN = {
    # bf16 under autocast: cuDNN's implicit-GEMM convolutions on the tensor cores
    "conv": "sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x32"
            "_stage4_warpsize2x2x1_g1_tensor16x8x16_kernel",
    "dgrad": "sm80_xmma_dgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x32"
             "_stage4_warpsize2x2x1_g1_tensor16x8x16_kernel",
    "wgrad": "sm80_xmma_wgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x32"
             "_stage4_warpsize2x2x1_g1_tensor16x8x16_kernel",
    "bn": "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>"
          "(cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, "
          "float const*, float, float, float*, float*, float*, float*, float, float)",
    "bn_bwd": "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>(float, "
              "float, float, float, cudnnTensorStruct, float const*, cudnnTensorStruct, "
              "float const*, cudnnTensorStruct, float*, float const*, float*, float*, "
              "float const*, float const*, float)",
    "relu": "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous "
            "namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
            "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}"
            "::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, ...)",
    "relu_bwd": "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous "
                "namespace)::threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)"
                "::{lambda(float, float)#1}, at::detail::Array<char*, 3> >(int, ...)",
    "upsample": "void at::native::(anonymous namespace)::upsample_bilinear2d_out_frame<float, "
                "float>(int, float, float, bool, at::GenericPackedTensorAccessor<float, 4ul, "
                "at::DefaultPtrTraits, long>, at::GenericPackedTensorAccessor<float, 4ul, "
                "at::DefaultPtrTraits, long>)",
    "upsample_bwd": "void at::native::(anonymous namespace)::upsample_bilinear2d_backward_out_"
                    "frame<float, float>(unsigned long, int, int, int, int, int, int, float, "
                    "float, bool, float*, float const*)",
    "ne": "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)"
          "::CompareFunctor<long>, at::detail::Array<char*, 3> >(int, at::native::(anonymous "
          "namespace)::CompareFunctor<long>, at::detail::Array<char*, 3>)",
    "cub_count": "void at_cuda_detail::cub::DeviceReduceSingleTileKernel<at_cuda_detail::cub::"
                 "DeviceReducePolicy<int, int, at_cuda_detail::cub::Sum>::Policy600, "
                 "at_cuda_detail::cub::TransformInputIterator<bool, at::native::(anonymous "
                 "namespace)::NonZeroOp<bool>, bool const*, long>, int*, int, "
                 "at_cuda_detail::cub::Sum, int, int>(...)",
    "index": "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<"
             "at::native::index_kernel_impl<at::native::OpaqueType<4> >(at::TensorIteratorBase&,"
             " c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1}>"
             "(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, ...)"
             "::{lambda(int)#1}>(long, ...)",
    "log_softmax": "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float,"
                   " float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*,"
                   " float const*, int)",
    "nll": "void at::native::(anonymous namespace)::nll_loss2d_forward_kernel<float, float>"
           "(float*, float*, float const*, long const*, float const*, int, int, int, int, long)",
    "mean": "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
            "at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> >"
            "(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, "
            "unsigned int, float, 4>)",
    "fill": "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
            "at::detail::Array<char*, 1>)",
    "nll_bwd": "void at::native::(anonymous namespace)::nll_loss2d_backward_kernel<float>(float*,"
               " float const*, long const*, float const*, float const*, bool, int, int, int, "
               "int, long)",
    "log_softmax_bwd": "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, "
                       "float, float, at::native::(anonymous namespace)::LogSoftMaxBackward"
                       "Epilogue>(float*, float const*, float const*, int)",
    "index_put": "void at::native::(anonymous namespace)::indexing_backward_kernel<float, 4>("
                 "long const*, long const*, float const*, float*, long, long, long, long, bool)",
    "adamw": "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::("
             "anonymous namespace)::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous "
             "namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, "
             "float*, double, double, double, double, double, bool, float const*, float const*>"
             "(...)",
    "foreach_mul": "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
                   "(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous "
                   "namespace)::BinaryOpScalarFunctor<float, 2, 1, 1>, std::multiplies<float>, "
                   "float>(...)",
    "foreach_add": "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
                   "(anonymous namespace)::TensorListMetadata<3>, at::native::(anonymous "
                   "namespace)::BinaryOpListAlphaFunctor<float, 3, 2, 0>, std::plus<float>, "
                   "float>(...)",
    "norm": "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
            "at::native::NormTwoOps<float, float, float>, unsigned int, float, 4> >"
            "(at::native::ReduceOp<float, at::native::NormTwoOps<float, float, float>, "
            "unsigned int, float, 4>)",
    "cat": "void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<at::"
           "native::(anonymous namespace)::OpaqueType<4u>, unsigned int, 1, 128, 1>(...)",
    "clamp": "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)"
             "::clamp_max_scalar_kernel_impl(at::TensorIteratorBase&, c10::Scalar)::{lambda()#1}"
             "::operator()() const::{lambda()#8}::operator()() const::{lambda(float)#1}, "
             "at::detail::Array<char*, 2> >(int, ...)",
    "gemm": "ampere_sgemm_64x32_sliced1x4_tn",
    "gemm_bwd": "ampere_sgemm_32x128_nt",
    "bias_relu": "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous "
                 "namespace)::launch_clamp_scalar(...)::{lambda(float)#1}, "
                 "at::detail::Array<char*, 2> >(int, ...)",
}
MEMCPY_H2D_PINNED = "Memcpy HtoD (Pinned -> Device)"
MEMCPY_H2D_PAGEABLE = "Memcpy HtoD (Pageable -> Device)"
MEMCPY_D2H_PAGEABLE = "Memcpy DtoH (Device -> Pageable)"
DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"

# forward op kinds: (aten chain, [(kernel key, (lo µs, hi µs))], backward fn, backward chain,
# backward kernels)
FWD_OPS = {
    "conv": (["aten::conv2d", "aten::convolution", "aten::_convolution",
              "aten::cudnn_convolution"], [("conv", (150, 320))],
             "ConvolutionBackward0", ["aten::convolution_backward"],
             [("dgrad", (160, 330)), ("wgrad", (170, 340))]),
    "bn": (["aten::batch_norm", "aten::_batch_norm_impl_index", "aten::cudnn_batch_norm"],
           [("bn", (55, 95))], "CudnnBatchNormBackward0", ["aten::cudnn_batch_norm_backward"],
           [("bn_bwd", (70, 120))]),
    "relu": (["aten::relu_", "aten::clamp_min_"], [("relu", (32, 50))],
             "ReluBackward0", ["aten::threshold_backward"], [("relu_bwd", (34, 55))]),
    "upsample": (["aten::upsample_bilinear2d"], [("upsample", (60, 110))],
                 "UpsampleBilinear2DBackward0", ["aten::upsample_bilinear2d_backward"],
                 [("fill", (8, 12)), ("upsample_bwd", (70, 120))]),
}
SEG_MODEL = ["conv", "bn", "relu"] * 2 + ["conv", "upsample"]

# record_shapes=True: each op's Input Dims / Input type / Concrete Inputs as PyTorch 2.x
# writes them.  bf16 autocast activations [8, 256, 64, 64] through 3×3 convolutions of
# 256 channels (stride 1, padding 1): 38.7 GFLOP each forward, so a 150-320 µs kernel
# runs at 40-80 % of an A100's 312 TFLOP/s bf16 peak, and the elementwise ops move their
# 17-50 MB at under 80 % of its 2 TB/s.  Written without drawing from the random
# stream: the timings (and the ground truth) do not depend on them.
ACT, CH, OUT_HW = [8, 256, 64, 64], 256, 128
BF16 = "c10::BFloat16"
_L = "ScalarList"


def _a(dims, types, conc):
    return {"Concrete Inputs": conc, "Input type": types, "Input Dims": dims}


def _conv_args(name):
    w, b = [CH, CH, 3, 3], [CH]
    one = "[1, 1]"
    if name == "aten::conv2d":
        return _a([ACT, w, b, [], [], [], []], [BF16] * 3 + [_L] * 3 + ["Scalar"],
                  ["", "", "", one, one, one, "1"])
    if name == "aten::convolution":
        return _a([ACT, w, b] + [[]] * 6, [BF16] * 3 + [_L] * 3 + ["Scalar", _L, "Scalar"],
                  ["", "", "", one, one, one, "False", "[0, 0]", "1"])
    if name == "aten::_convolution":
        return _a([ACT, w, b] + [[]] * 10, [BF16] * 3 + [_L] * 3 + ["Scalar", _L] +
                  ["Scalar"] * 5, ["", "", "", one, one, one, "False", "[0, 0]", "1",
                                   "False", "False", "True", "True"])
    # aten::cudnn_convolution(input, weight, padding, stride, dilation, groups, benchmark,
    # deterministic, allow_tf32)
    return _a([ACT, w] + [[]] * 7, [BF16] * 2 + [_L] * 3 + ["Scalar"] * 4,
              ["", "", one, one, one, "1", "False", "False", "True"])


def _bn_args(name):
    c = [CH]
    if name == "aten::cudnn_batch_norm":
        return _a([ACT, c, c, c, c, [], [], []], [BF16] + ["float"] * 4 + ["Scalar"] * 3,
                  ["", "", "", "", "", "True", "0.1", "1e-05"])
    return _a([ACT, c, c, c, c, [], [], [], []], [BF16] + ["float"] * 4 + ["Scalar"] * 4,
              ["", "", "", "", "", "True", "0.1", "1e-05", "True"])


def _fwd_args(kind, name):
    if kind == "conv":
        return _conv_args(name)
    if kind == "bn":
        return _bn_args(name)
    if kind == "relu":
        return (_a([ACT], [BF16], [""]) if name == "aten::relu_" else
                _a([ACT, []], [BF16, "Scalar"], ["", "0"]))
    if kind == "upsample":
        return _a([ACT, [], [], []], [BF16, _L, "Scalar", _L],
                  ["", f"[{OUT_HW}, {OUT_HW}]", "False", ""])
    return None


def _bwd_args(kind, name):
    out = ACT[:2] + [OUT_HW, OUT_HW]
    if kind == "conv":
        # (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
        # output_padding, groups, output_mask)
        return _a([ACT, ACT, [CH, CH, 3, 3]] + [[]] * 8,
                  [BF16] * 3 + [_L] * 4 + ["Scalar", _L, "Scalar", _L],
                  ["", "", "", f"[{CH}]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]",
                   "1", "[True, True, True]"])
    if kind == "bn":
        c = [CH]
        return _a([ACT, ACT, c, c, c, c, c, [], [], []],
                  [BF16, BF16] + ["float"] * 5 + ["Scalar", "Scalar", BF16],
                  ["", "", "", "", "", "", "", "True", "1e-05", ""])
    if kind == "relu":
        return _a([ACT, ACT, []], [BF16, BF16, "Scalar"], ["", "", "0"])
    if kind == "upsample":
        return _a([out, [], [], [], []], [BF16, _L, _L, "Scalar", _L],
                  ["", f"[{OUT_HW}, {OUT_HW}]", str(ACT), "False", ""])
    return None
TINY_SEG_MODEL = ["conv", "relu"]


class KinetoSim:
    """Host (main + autograd thread) and one GPU for the Kineto scenarios."""

    def __init__(self, seed: int, pid: int, streams=(7,)):
        self.rng = random.Random(seed)
        self.tl = Timeline(self.rng)
        self.pid = pid
        tl = self.tl
        self.main = Host(tl, tl.track(("h", pid), "host", pid=pid, tid=pid,
                                      label=f"thread {pid} (python)"))
        atid = pid + 161
        self.ag = Host(tl, tl.track(("h", atid), "host", pid=pid, tid=atid,
                                    label=f"thread {atid} (python)"))
        self.streams = {s: Stream(tl, tl.track(("d", 0, s), "device", "GPU 0", pid=0, tid=s,
                                               label=f"stream {s}")) for s in streams}
        self.s7 = self.streams[streams[0]]
        self.steps = []             # (step id, host start, host end)
        self.fwd_done = []          # forward op kinds of the current step (for backward)

    def r(self, lo_us, hi_us) -> int:
        return self.rng.randint(int(lo_us * US), int(hi_us * US))

    # ---- building blocks ----
    def op(self, h: Host, chain, kernels, stream=None, pre=(2.0, 5.0), post=(0.8, 2.0),
           launch_us=(4.5, 7.5), not_before=None, shapes=None):
        for name in chain:
            h.open(name, "cpu_op", args=shapes(name) if shapes else None)
            h.adv(self.r(*pre))
        devs = []
        for key, (lo, hi) in kernels:
            rt, dev = h.launch(stream or self.s7, KN.get(key, key), self.r(lo, hi),
                               api_dur=self.r(*launch_us), not_before=not_before)
            rt.meta = "flow"
            devs.append(dev)
            h.adv(self.r(0.5, 1.5))
        for _ in chain:
            h.close(self.r(*post))
        return devs

    def cpu(self, h: Host, name, lo, hi, cat="cpu_op"):
        return h.leaf(name, cat, self.r(lo, hi))

    def runtime(self, h: Host, name, lo, hi):
        ev = h.leaf(name, "cuda_runtime", self.r(lo, hi))
        ev.corr = self.tl.next_corr()
        ev.meta = "flow"
        return ev

    def dataloader(self, dur_us=(80, 130)):
        h = self.main
        total = self.r(*dur_us)
        with h.span(DATALOADER, "user_annotation") as dl:
            end = dl.ts + total
            h.adv(self.r(8, 15))
            n = 0
            while h.t < end - 40 * US or n == 0:
                with h.span("aten::stack", "cpu_op"):
                    h.adv(self.r(3, 6))
                    with h.span("aten::cat", "cpu_op"):
                        h.adv(self.r(8, 30) if total < 1 * MS else self.r(200, 900))
                    h.adv(self.r(1, 3))
                n += 1
                if total >= 1 * MS:
                    self.cpu(h, "aten::to", 15, 40)
                    h.adv(self.r(100, 600))          # Python-side decode / augment
            h.t = max(h.t, end - 5 * US)
            h.adv(self.r(2, 5))

    def h2d(self, name_bytes, pageable, stage_us=None):
        """aten::to(device) of a host tensor: returns the copy's runtime call."""
        h = self.main
        with h.span("aten::to", "cpu_op", pre=self.r(2, 4), post=self.r(1, 2)):
            with h.span("aten::_to_copy", "cpu_op", pre=self.r(2, 4), post=self.r(1, 2)):
                self.cpu(h, "aten::empty_strided", 4, 9)
                with h.span("aten::copy_", "cpu_op", pre=self.r(3, 6), post=self.r(1, 3)):
                    nbytes = name_bytes
                    if pageable and stage_us:
                        stage = self.r(*stage_us)
                        dma = max(2 * US, int(nbytes / 24e9 * 1e9))      # ~24 GB/s
                        rt, dev = h.launch(self.s7, MEMCPY_H2D_PAGEABLE, dma, kind="memcpy",
                                           api="cudaMemcpyAsync", api_dur=stage,
                                           delay=stage - dma + self.r(120, 160),
                                           dev_args={"bytes": nbytes,
                                                     "memory bandwidth (GB/s)": round(
                                                         nbytes / dma, 6)})
                    else:
                        dma = max(1500, int(nbytes / 20e9 * 1e9))
                        rt, dev = h.launch(self.s7, MEMCPY_H2D_PAGEABLE if pageable
                                           else MEMCPY_H2D_PINNED, dma, kind="memcpy",
                                           api="cudaMemcpyAsync", api_dur=self.r(6, 11),
                                           dev_args={"bytes": nbytes,
                                                     "memory bandwidth (GB/s)": round(
                                                         nbytes / dma, 6)})
                    rt.meta = "flow"
        return rt, dev

    def forward(self, model=SEG_MODEL, scale=1.0, name="forward"):
        h = self.main
        self.fwd_done = []
        with h.span(name, "user_annotation", pre=self.r(3, 6), post=self.r(2, 4)):
            for kind in model:
                chain, kernels, *_ = FWD_OPS[kind]
                ks = [(k, (lo * scale, hi * scale)) for k, (lo, hi) in kernels]
                self.op(h, chain, ks, shapes=lambda n, k=kind: _fwd_args(k, n))
                self.fwd_done.append((kind, scale))
                h.adv(self.r(1, 4))

    def plain_loss(self):
        h = self.main
        with h.span("aten::cross_entropy_loss", "cpu_op", pre=self.r(2, 4)):
            self.op(h, ["aten::log_softmax", "aten::_log_softmax"],
                    [("log_softmax", (45, 70))])
            self.op(h, ["aten::nll_loss_nd", "aten::nll_loss2d", "aten::nll_loss2d_forward"],
                    [("nll", (40, 60))])
        self.loss_bwd = [("NllLoss2DBackward0", ["aten::nll_loss2d_backward"],
                          [("fill", (9, 14)), ("nll_bwd", (40, 60))]),
                         ("LogSoftmaxBackward0", ["aten::_log_softmax_backward_data"],
                          [("log_softmax_bwd", (45, 70))])]

    def backward(self, scale=1.0):
        """loss.backward(): the autograd engine's device thread runs the backward ops."""
        m, a = self.main, self.ag
        a.t = max(a.t, m.t + self.r(10, 18))
        items = [it + (None,) for it in self.loss_bwd]
        for kind, sc in reversed(self.fwd_done):
            _, _, fn, chain, kernels = FWD_OPS[kind]
            items.append((fn, chain, [(k, (lo * sc, hi * sc)) for k, (lo, hi) in kernels],
                          lambda n, k=kind: _bwd_args(k, n)))
        for fn, chain, kernels, shapes in items:
            with a.span(f"autograd::engine::evaluate_function: {fn}", "cpu_op",
                        pre=self.r(2, 4), post=self.r(1, 2)):
                with a.span(fn, "cpu_op", pre=self.r(1.5, 3), post=self.r(0.5, 1.5)):
                    self.op(a, chain, kernels, shapes=shapes)
            a.adv(self.r(2, 5))
        m.t = a.t + self.r(6, 12)

    def optimizer(self, n_kernels=2, dur=(180, 320), name="Optimizer.step#AdamW.step"):
        h = self.main
        with h.span(name, "user_annotation", pre=self.r(6, 12), post=self.r(3, 6)):
            self.op(h, ["aten::_fused_adamw_"], [("adamw", dur)] * n_kernels,
                    pre=(8, 14))
        with h.span("Optimizer.zero_grad#AdamW.zero_grad", "user_annotation",
                    pre=self.r(12, 22), post=self.r(1, 3)):
            pass

    # ---- steps ----
    @contextmanager
    def step(self, n):
        h = self.main
        self.tl.step = n
        with h.span(f"ProfilerStep#{n}", "user_annotation", pre=self.r(3, 6),
                    post=self.r(4, 9)) as ev:
            yield ev
        self.steps.append((n, ev.ts, ev.end))

    def gpu_user_annotations(self, names):
        """Kineto's projection of record_function ranges onto the GPU streams."""
        tl = self.tl
        launched = {}
        for e in list(tl.events):
            if e.kind in ACTIVITY and e.launch is not None:
                p = e.launch.parent
                while p is not None:
                    if p.name in names:
                        launched.setdefault((p.idx, e.track.key), [p, e.track, []])[2].append(e)
                    p = p.parent
        for (_, _), (ann, track, devs) in sorted(launched.items(), key=lambda kv: kv[0]):
            s = min(d.ts for d in devs)
            e = max(d.end for d in devs)
            ev = tl.add(track, ann.name, "gpu_user_annotation", s, e - s, "dev_other")
            ev.ext = ann.ext


# ---- Kineto scenarios ------------------------------------------------------------------

def _masked_loss(sim: KinetoSim):
    """MaskedLoss.forward › non_zero › aten::nonzero › cudaMemcpyAsync (D2H) +
    cudaStreamSynchronize; then aten::index launches the kernel that ends the gap."""
    h, tl, s7 = sim.main, sim.tl, sim.s7
    with h.span("MaskedLoss.forward", "user_annotation", pre=sim.r(4, 8), post=sim.r(2, 4)):
        sim.op(h, ["aten::ne"], [("ne", (30, 45))])
        h.adv(sim.r(2, 5))
        with h.span("non_zero", "user_annotation", pre=sim.r(3, 6), post=sim.r(2, 4)):
            with h.span("aten::nonzero", "cpu_op", pre=sim.r(4, 8), post=sim.r(2, 4)):
                rt, _ = h.launch(s7, KN["cub_count"], sim.r(6, 10), api_dur=sim.r(5, 7))
                rt.meta = "flow"
                h.adv(sim.r(2, 4))
                # the count goes to pageable host memory: the copy waits for the queue
                rt, mc = h.launch(s7, MEMCPY_D2H_PAGEABLE, sim.r(1.5, 2.5), kind="memcpy",
                                  api="cudaMemcpyAsync", blocking_ret=sim.r(5, 9),
                                  dev_args={"bytes": 8, "memory bandwidth (GB/s)": 0.004})
                rt.meta = "flow"
                sync = sim.runtime(h, "cudaStreamSynchronize", 3, 6)
                ds = max(mc.end, sync.ts)
                ev = tl.add(s7.track, "Stream Sync", "cuda_sync", ds, sync.end - ds, "dev_other")
                ev.launch, ev.corr = sync, sync.corr
                h.adv(sim.r(3, 6))
                sim.cpu(h, "aten::empty", 4, 8)
                h.adv(sim.r(2, 4))
                sim.cpu(h, "aten::resize_", 8, 14)
                h.adv(sim.r(25, 60))            # host-side bookkeeping of the result
        h.adv(sim.r(3, 6))
        # the next device op waits for all of the above: the injected host_sync gap
        tl.expect(HOST_SYNC)
        with h.span("aten::index", "cpu_op", pre=sim.r(4, 8), post=sim.r(2, 4)):
            sim.cpu(h, "aten::expand", 5, 9)
            h.adv(sim.r(2, 4))
            sim.cpu(h, "aten::_reshape_alias", 3, 6)
            h.adv(sim.r(30, 70))                # index computation on the host
            rt, _ = h.launch(s7, KN["index"], sim.r(70, 110))
            rt.meta = "flow"
            h.adv(sim.r(1, 3))
        sim.plain_loss()
        sim.op(h, ["aten::mean"], [("mean", (35, 50))])
    sim.loss_bwd = [("MeanBackward0", ["aten::div"], [("fill", (30, 42))])] + sim.loss_bwd + [
        ("IndexBackward0", ["aten::index_put_", "aten::_index_put_impl_"],
         [("fill", (30, 40)), ("index_put", (60, 90))])]


def scenario_kineto_sync_nonzero():
    sim = KinetoSim(seed=1101, pid=28417, streams=(7, 20))
    h = sim.main
    for n in range(10, 15):
        with sim.step(n):
            sim.dataloader()
            sim.h2d(8 * 3 * 256 * 256 * 4, pageable=False)
            sim.h2d(8 * 256 * 256 * 8, pageable=False)
            sim.forward()
            _masked_loss(sim)
            sim.backward()
            sim.optimizer()
            with h.span("ema_update", "user_annotation", pre=sim.r(4, 8), post=sim.r(2, 4)):
                sim.runtime(h, "cudaEventRecord", 2, 4)
                sim.runtime(h, "cudaStreamWaitEvent", 2, 3)
                nb = sim.s7.free
                sim.op(h, ["aten::_foreach_mul_"], [("foreach_mul", (40, 60))],
                       stream=sim.streams[20], not_before=nb)
                sim.op(h, ["aten::_foreach_add_"], [("foreach_add", (50, 70))],
                       stream=sim.streams[20])
    sim.gpu_user_annotations({"forward", "MaskedLoss.forward", "non_zero", "ema_update",
                              "Optimizer.step#AdamW.step"})
    desc = ("5 steps (ProfilerStep#10-14) of a small segmentation CNN on GPU 0 (stream 7, plus "
            "stream 20 for an EMA update that overlaps the next step). In every step "
            "MaskedLoss.forward › non_zero › aten::nonzero copies a count to pageable host "
            "memory (cudaMemcpyAsync D2H, blocking until the queue drains) and calls "
            "cudaStreamSynchronize; the GPU finishes the tiny D2H memcpy and then idles while the "
            "host finishes nonzero on the CPU and aten::index launches the next kernel.")
    return sim, desc, None


def scenario_kineto_data_loading():
    sim = KinetoSim(seed=2202, pid=31337)
    for i, n in enumerate(range(40, 45)):
        with sim.step(n):
            sim.dataloader(dur_us=(3500, 6500))
            if i > 0:
                sim.tl.expect(DATA_LOADING)
            sim.forward()
            sim.plain_loss()
            sim.backward()
            sim.optimizer()
    sim.gpu_user_annotations({"forward", "Optimizer.step#AdamW.step"})
    desc = ("5 steps (ProfilerStep#40-44). Each step starts with "
            f"{DATALOADER} taking 3.5-6.5 ms on the host (collate + decode, CPU only); the GPU "
            "drains the previous step's tail and idles until the first cudaLaunchKernel of the "
            "step's forward. Step 40's data loading precedes the first device activity, so it "
            "is not a gap by definition.")
    return sim, desc, None


def scenario_kineto_h2d_copy():
    sim = KinetoSim(seed=3303, pid=41999)
    for i, n in enumerate(range(100, 105)):
        with sim.step(n):
            sim.dataloader()
            if i > 0:
                sim.tl.expect(H2D_TRANSFER)
            sim.h2d(16 * 3 * 320 * 320 * 4, pageable=True, stage_us=(5500, 7000))
            sim.h2d(16 * 64 * 64 * 8, pageable=True)
            sim.forward()
            sim.plain_loss()
            sim.backward()
            sim.optimizer()
    sim.gpu_user_annotations({"forward", "Optimizer.step#AdamW.step"})
    desc = ("5 steps (ProfilerStep#100-104). Each step copies a 20 MB batch from pageable host "
            "memory: aten::to › aten::_to_copy › aten::copy_ › cudaMemcpyAsync stages it on the "
            "host for 5.5-7 ms while the GPU idles, then 'Memcpy HtoD (Pageable -> Device)' "
            "runs (its DMA outlives the call by ~0.15 ms). Step 100's copy precedes the first "
            "device activity, so it is not a gap by definition.")
    return sim, desc, None


def scenario_kineto_launch_bound():
    sim = KinetoSim(seed=4404, pid=52018)
    h, tl = sim.main, sim.tl
    n_params = 50
    for n in range(7, 11):
        with sim.step(n):
            sim.dataloader()
            sim.forward(model=TINY_SEG_MODEL)
            sim.plain_loss()
            sim.backward()
            with h.span("clip_gradients", "user_annotation", pre=sim.r(4, 8), post=sim.r(2, 4)):
                # Python-side grouping of the gradients while the GPU finishes backward
                lag = sim.s7.free - h.t
                h.adv(max(sim.r(15, 30), lag - sim.r(25, 45)))
                for p in range(n_params):
                    # the launch call is most of the host's time per op: the gaps between
                    # the tiny kernels are mostly launch overhead (GUIDE §4 shares)
                    tl.expect(LAUNCH_OVERHEAD, optional=True)
                    sim.op(h, ["aten::linalg_vector_norm"], [("norm", (2.0, 3.0))],
                           pre=(0.6, 1.2), post=(0.3, 0.6), launch_us=(8.0, 10.0))
                    h.adv(sim.r(0.3, 0.8))
                for chain, k, rng_ in ((["aten::stack", "aten::cat"], "cat", (5, 8)),
                                       (["aten::_foreach_mul_"], "foreach_mul", (25, 35))):
                    # stack/cat and the foreach op spend longer in the framework than
                    # in their launch: those gaps are host compute
                    tl.expect(HOST_COMPUTE, optional=True)
                    sim.op(h, chain, [(k, rng_)], launch_us=(8.0, 10.0))
                    h.adv(sim.r(1, 3))
            tl.expect(HOST_COMPUTE, optional=True)     # the fused optimizer's own host time
            sim.optimizer(n_kernels=1, dur=(500, 640))
            tl.pending = None
    sim.gpu_user_annotations({"forward", "clip_gradients", "Optimizer.step#AdamW.step"})
    desc = (f"4 steps (ProfilerStep#7-10). After backward, clip_gradients computes a norm per "
            f"parameter without foreach: {n_params} aten::linalg_vector_norm ops, each launching "
            "one 2-3 µs reduce kernel with an 8-10 µs cudaLaunchKernel; the GPU runs ahead of "
            "the host and idles ~10 µs between kernels (launch overhead). Every such gap of "
            ">= 5 µs is listed; the first few kernels of the stretch still run from the "
            "backlog of backward, so they leave no gap.")
    return sim, desc, None


def kineto_scope(e):
    if e.launch is None:
        return None
    out = []
    p = e.launch.parent
    while p is not None:
        if p.cat == "user_annotation" and not p.name.startswith("ProfilerStep#"):
            out.append(p.name)
        p = p.parent
    return out[::-1]


KINETO_SCENARIOS = [
    ("kineto_sync_nonzero", scenario_kineto_sync_nonzero),
    ("kineto_data_loading", scenario_kineto_data_loading),
    ("kineto_h2d_copy", scenario_kineto_h2d_copy),
    ("kineto_launch_bound", scenario_kineto_launch_bound),
]
