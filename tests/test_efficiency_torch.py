"""PyTorch FLOPs and bytes from the host ops' shapes (analysis.efficiency.torch_shapes),
carried to the kernels they launched, and Kineto device peaks."""
from __future__ import annotations

import glob
import os

import numpy as np
import pytest

import tb_perfdiag
from tb_perfdiag.analysis.efficiency.costs import DTYPES, op_costs
from tb_perfdiag.analysis.efficiency.peaks import device_peak
from tb_perfdiag.analysis.efficiency.torch_formulas import causal_fraction
from tb_perfdiag.analysis.efficiency.torch_shapes import NO_SHAPES
from tb_perfdiag.testing.kineto import A100, kineto_bytes

from conftest import shared_path

V100 = dict(A100, name="Tesla V100-SXM2-16GB", computeMajor=7, computeMinor=0, numSms=80)


class _Trace:
    """Host ops (nested by time) on one thread, each leaf launching one kernel."""

    def __init__(self):
        self.events, self.t, self.ext, self.corr = [], 0, 1, 1

    def op(self, name, dims=None, types=None, conc=None, kernels=1, children=(),
           kernel="volta_sgemm_128x64_nn", flops=None, durs=None):
        """An op of ``kernels`` launches after its ``children`` (callables adding ops);
        ``durs``: the kernels' durations (µs, 2 each unless given)."""
        start = self.t
        self.t += 1
        for c in children:
            c()
        names = kernel if isinstance(kernel, list) else [kernel] * kernels
        for kname, kdur in zip(names, durs or [2] * len(names)):
            self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                                "pid": 1, "tid": 1, "ts": self.t, "dur": 1,
                                "args": {"correlation": self.corr, "External id": self.ext}})
            self.events.append({"ph": "X", "cat": "kernel", "name": kname, "pid": 0,
                                "tid": 7, "ts": self.t + 1, "dur": kdur,
                                "args": {"device": 0, "stream": 7,
                                         "correlation": self.corr}})
            self.corr += 1
            self.t += kdur + 1
        args = {"External id": self.ext}
        if dims is not None:
            args["Input Dims"] = dims
        if types is not None:
            args["Input type"] = types
        if conc is not None:
            args["Concrete Inputs"] = conc
        if flops is not None:
            args["flops"] = flops
        self.ext += 1
        self.events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1,
                            "ts": start, "dur": self.t - start + 1, "args": args})
        self.t += 2

    def load(self, tmp_path, props=(V100,)):
        p = os.path.join(str(tmp_path), "w.pt.trace.json")
        with open(p, "wb") as f:
            f.write(kineto_bytes(self.events, deviceProperties=[dict(x) for x in props]))
        return tb_perfdiag.load(p)


def _costs(tr):
    c = op_costs(tr, tr.activity_of(0))
    return c, [tr.event_name(int(e)) for e in c.event]


F32, BF16 = ["float", "float"], ["c10::BFloat16", "c10::BFloat16"]


@pytest.mark.parametrize("name,dims,flops", [
    ("aten::mm", [[64, 128], [128, 32]], 2 * 64 * 128 * 32),
    ("aten::addmm", [[32], [64, 128], [128, 32], [], []], 2 * 64 * 128 * 32),
    ("aten::bmm", [[4, 64, 128], [4, 128, 32]], 2 * 4 * 64 * 128 * 32),
    ("aten::baddbmm", [[4, 64, 32], [4, 64, 128], [4, 128, 32], [], []],
     2 * 4 * 64 * 128 * 32),
    ("aten::matmul", [[2, 3, 64, 128], [128, 32]], 2 * 6 * 64 * 128 * 32),
    ("aten::matmul", [[128], [128, 32]], 2 * 128 * 32),
    ("aten::linear", [[8, 16, 128], [32, 128], [32]], 2 * 8 * 16 * 128 * 32),
    ("aten::_scaled_mm", [[64, 128], [128, 32], [], []], 2 * 64 * 128 * 32),
])
def test_gemm_spellings(tmp_path, name, dims, flops):
    b = _Trace()
    b.op(name, dims, BF16 + [""] * (len(dims) - 2), kernel="sm90_xmma_gemm_bf16bf16")
    c, _ = _costs(b.load(tmp_path))
    assert c.source == "shapes" and c.known.all()
    assert c.flops.sum() == flops and c.hw_flops.sum() == flops
    assert c.matmul.all() and DTYPES[c.dtype[0]] == "bf16" and c.bytes.sum() > 0


def test_fp8_scaled_mm_runs_in_fp8(tmp_path):
    b = _Trace()
    b.op("aten::_scaled_mm", [[64, 128], [128, 32], [], []],
         ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float", "float"])
    c, _ = _costs(b.load(tmp_path))
    assert c.dtype_name() == "fp8"


def test_one_op_split_over_its_kernels_counted_once_through_nesting(tmp_path):
    b = _Trace()
    dims = [[8, 3, 32, 32], [16, 3, 3, 3], [16], [], [], [], []]
    conc = ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"]
    inner = lambda: b.op("aten::cudnn_convolution", [[8, 3, 32, 32], [16, 3, 3, 3]],   # noqa
                         kernels=3)
    mid = lambda: b.op("aten::convolution", dims, children=[inner], kernels=0)        # noqa
    b.op("aten::conv2d", dims, F32, conc, children=[mid], kernels=1)
    c, _ = _costs(b.load(tmp_path))
    want = 2 * 8 * 16 * 16 * 16 * 3 * 9
    assert len(c) == 4 and c.flops.sum() == pytest.approx(want)
    assert np.allclose(c.flops, want / 4)            # equal durations: equal shares


def test_conv_output_from_the_next_op_or_unknown(tmp_path):
    b = _Trace()
    b.op("aten::conv2d", [[8, 3, 32, 32], [16, 3, 5, 5], [], [], [], [], []])
    b.op("aten::batch_norm", [[8, 16, 14, 14], [16], [16], [16], [16]], kernels=1,
         kernel="bn_fw_tr_1C11_kernel_NCHW<float, float, int>")
    b.op("aten::conv2d", [[8, 16, 14, 14], [4, 16, 3, 3], [], [], [], [], []])
    b.op("aten::sum", [[1]], kernels=0)              # not the conv's output: no figure
    c, names = _costs(b.load(tmp_path))
    conv = np.array([n.startswith("volta") for n in names])
    assert c.flops[conv][0] == 2 * 8 * 16 * 14 * 14 * 3 * 25
    assert not c.known[conv][1]                      # never guessed
    bn = ~conv
    assert c.flops[bn].sum() == 0 and not c.matmul[bn].any()
    # no Input type: the kernel's element type (float) sizes the bytes
    assert c.bytes[bn][0] == (2 * 8 * 16 * 14 * 14 + 4 * 16) * 4


def test_conv_output_from_its_backward(tmp_path):
    b = _Trace()
    b.op("aten::conv2d", [[8, 3, 32, 32], [16, 3, 3, 3], [], [], [], [], []])
    b.op("aten::cudnn_convolution_backward",
         [[8, 3, 32, 32], [8, 16, 30, 30], [16, 3, 3, 3], [], [], [], [], [], [], [], []])
    c, _ = _costs(b.load(tmp_path))
    one = 2 * 8 * 16 * 30 * 30 * 27
    assert c.known.all() and c.flops.sum() == 3 * one


@pytest.mark.parametrize("mask,mult", [("[True, True, True]", 2), ("[False, True, True]", 1),
                                       ("[True, False, False]", 1)])
def test_convolution_backward_output_mask(tmp_path, mask, mult):
    b = _Trace()
    conc = [""] * 3 + ["[16]", "[1, 1]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1", mask]
    b.op("aten::convolution_backward",
         [[8, 16, 30, 30], [8, 3, 32, 32], [16, 3, 3, 3]] + [[]] * 8, F32, conc)
    c, _ = _costs(b.load(tmp_path))
    assert c.flops.sum() == mult * 2 * 8 * 16 * 30 * 30 * 27


def test_2021_backward_mask_from_its_children(tmp_path):
    b = _Trace()
    w = lambda: b.op("aten::cudnn_convolution_backward_weight",             # noqa: E731
                     [[], [8, 16, 30, 30], [8, 3, 32, 32]], kernels=2)
    b.op("aten::cudnn_convolution_backward",
         [[8, 3, 32, 32], [8, 16, 30, 30], [16, 3, 3, 3]], children=[w], kernels=0)
    i = lambda: b.op("aten::cudnn_convolution_backward_input",              # noqa: E731
                     [[], [8, 16, 30, 30], [16, 3, 3, 3]])
    b.op("aten::cudnn_convolution_backward",
         [[8, 3, 32, 32], [8, 16, 30, 30], [16, 3, 3, 3]], children=[w, i], kernels=0)
    c, _ = _costs(b.load(tmp_path))
    one = 2 * 8 * 16 * 30 * 30 * 27
    assert c.flops.sum() == pytest.approx(one + 2 * one)


@pytest.mark.parametrize("name", ["aten::miopen_convolution", "aten::cudnn_convolution",
                                  "aten::mkldnn_convolution"])
def test_library_convolutions_with_their_scalars(tmp_path, name):
    b = _Trace()
    # miopen/mkldnn: (input, weight, bias, padding, stride, …); cudnn: (…, padding 2, stride 3)
    conc = (["", "", "", "[1, 1]", "[2, 2]", "[1, 1]", "1"] if "cudnn" not in name else
            ["", "", "[1, 1]", "[2, 2]", "[1, 1]", "1"])
    b.op(name, [[8, 3, 32, 32], [16, 3, 3, 3]] + [[]] * 5, F32, conc)
    c, _ = _costs(b.load(tmp_path))
    assert c.flops.sum() == 2 * 8 * 16 * 16 * 16 * 27


def test_transposed_convolution_counts_its_input(tmp_path):
    b = _Trace()
    b.op("aten::conv_transpose2d", [[8, 32, 16, 16], [32, 16, 2, 2]] + [[]] * 6)
    c, _ = _costs(b.load(tmp_path))
    assert c.flops.sum() == 2 * 8 * 32 * 16 * 16 * 16 * 4


@pytest.mark.parametrize("name,qkv,conc,causal,bwd", [
    ("aten::scaled_dot_product_attention", (0, 1, 2), ["", "", "", "", "0.", "False"],
     False, False),
    ("aten::scaled_dot_product_attention", (0, 1, 2), ["", "", "", "", "0.", "True"],
     True, False),
    ("aten::_scaled_dot_product_flash_attention", (0, 1, 2), ["", "", "", "0.", "True"],
     True, False),
    ("aten::_scaled_dot_product_efficient_attention", (0, 1, 2),
     ["", "", "", "", "True", "0.", "False"], False, False),
    ("aten::_scaled_dot_product_cudnn_attention", (0, 1, 2),
     ["", "", "", "", "True", "0.", "True"], True, False),
    ("aten::_scaled_dot_product_flash_attention_backward", (1, 2, 3),
     [""] * 11 + ["True"], True, True),
    ("aten::_scaled_dot_product_efficient_attention_backward", (1, 2, 3),
     [""] * 11 + ["False"], False, True),
    ("aten::_scaled_dot_product_cudnn_attention_backward", (1, 2, 3),
     [""] * 14 + ["True"], True, True),
])
def test_attention_spellings(tmp_path, name, qkv, conc, causal, bwd):
    B, H, L, E = 2, 8, 256, 64
    dims = [[B, H, L, E]] * 16
    b = _Trace()
    b.op(name, dims, ["c10::Half"] * 16, conc, kernel="flash_fwd_kernel")
    c, _ = _costs(b.load(tmp_path))
    want = 4.0 * B * H * L * L * E * (causal_fraction(L, L) if causal else 1) * \
        (2.5 if bwd else 1)
    assert c.flops.sum() == pytest.approx(want) and c.matmul.all()
    assert c.dtype_name() == "fp16"


def test_flash_attention_kernel_layout_and_causal_fraction(tmp_path):
    B, L, H, E = 2, 128, 4, 64
    b = _Trace()
    b.op("aten::_flash_attention_forward", [[B, L, H, E]] * 3 + [[]] * 6,
         ["c10::BFloat16"] * 3, [""] * 8 + ["True"])
    c, _ = _costs(b.load(tmp_path))
    assert c.flops.sum() == pytest.approx(4.0 * B * H * L * L * E * (L + 1) / (2 * L))
    assert causal_fraction(4, 2) == (1 + 2 + 2 + 2) / 8


def test_elementwise_and_reductions_are_bytes(tmp_path):
    b = _Trace()
    b.op("aten::add", [[1024, 1024], [1024, 1024], []], ["c10::BFloat16"] * 2 + ["Scalar"],
         kernel="vectorized_elementwise_kernel")
    b.op("aten::sum", [[1024, 1024]], ["float"], kernel="reduce_kernel")
    c, names = _costs(b.load(tmp_path))
    assert c.flops.sum() == 0 and not c.matmul.any() and c.known.all()
    assert c.bytes[0] == 3 * 1024 * 1024 * 2 and c.bytes[1] == 1024 * 1024 * 4


def test_copy_and_fill_count_the_written_tensor_once(tmp_path):
    """``copy_`` reads its source and writes ``self`` (not read: 2 tensors, not add_'s
    3); ``fill_``/``zero_`` only write: a copy-heavy step is not shown above the HBM
    roof by bytes that never moved."""
    b = _Trace()
    b.op("aten::copy_", [[1024, 1024], [1024, 1024], []], ["float", "c10::Half", "Scalar"],
         kernel="unrolled_elementwise_kernel")
    b.op("aten::copy_", [[4096, 256], [1, 256], []], ["float", "float", "Scalar"],
         kernel="elementwise_kernel")                           # a broadcast source
    b.op("aten::fill_", [[2048], []], ["float", "Scalar"], kernel="vectorized_elementwise_kernel")
    b.op("aten::zero_", [[512]], ["float"], kernel="vectorized_elementwise_kernel")
    b.op("aten::add_", [[1024], [1024], []], ["float", "float", "Scalar"],
         kernel="vectorized_elementwise_kernel")
    c, _ = _costs(b.load(tmp_path))
    assert c.known.all() and c.flops.sum() == 0
    assert c.bytes.tolist() == [2 * 1024 * 1024 * 4, (4096 * 256 + 256) * 4, 2048 * 4,
                                512 * 4, 3 * 1024 * 4]


def test_profiler_flops_arg_wins_for_matmuls(tmp_path):
    b = _Trace()
    b.op("aten::mm", [[64, 128], [128, 32]], F32, flops=1000)
    b.op("aten::mul", [[64], [64]], F32, flops=64, kernel="elementwise_kernel")
    c, _ = _costs(b.load(tmp_path))
    assert c.source == "kineto_flops_arg" and c.flops.tolist() == [1000.0, 0.0]


def test_checkpoint_recompute_is_hardware_flops(tmp_path):
    b = _Trace()
    b.op("aten::linear", [[64, 128], [32, 128], []], F32)
    lin = lambda: b.op("aten::linear", [[64, 128], [32, 128], []], F32)    # noqa: E731
    b.op("CheckpointFunctionBackward", children=[lin], kernels=0)
    c, _ = _costs(b.load(tmp_path))
    one = 2 * 64 * 128 * 32
    assert c.flops.tolist() == [one, 0.0] and c.hw_flops.tolist() == [one, one]


def test_a_trace_without_shapes_says_so(tmp_path):
    b = _Trace()
    b.op("aten::mm")
    c, _ = _costs(b.load(tmp_path))
    assert not c.known.any() and c.flops.sum() == 0 and c.missing == NO_SHAPES


@pytest.mark.parametrize("props,dtype,tflops,source", [
    (V100, "fp32", 15.7, "datasheet:V100 SXM2"),
    (A100, "bf16", 312, "datasheet:A100 SXM 80GB"),
    (A100, "tf32", 156, "datasheet:A100 SXM 80GB"),
    (dict(A100, name="NVIDIA H100 80GB HBM3"), "bf16", 989.4, "datasheet:H100 SXM"),
    (dict(A100, name="NVIDIA H100 PCIe"), "bf16", 756, "datasheet:H100 PCIe"),
    (dict(A100, name="AMD Instinct MI300X"), "bf16", 1307.4, "datasheet:MI300X"),
    (dict(A100, name="Tesla T4"), "fp16", 65, "datasheet:T4"),
    (dict(A100, name="NVIDIA L4"), "fp8", 242.5, "datasheet:L4"),
])
def test_kineto_peaks_from_the_datasheet(tmp_path, props, dtype, tflops, source):
    b = _Trace()
    b.op("aten::mm")
    p = device_peak(b.load(tmp_path, props=(props,)), 0, dtype)
    assert p.flops_per_s == pytest.approx(tflops * 1e12) and p.source == source
    assert p.bytes_per_s and p.device_model == props["name"]


def test_kineto_unknown_device_has_no_peak(tmp_path):
    b = _Trace()
    b.op("aten::mm")
    # a name no datasheet row has and no compute capability to compute a peak from
    mystery = {k: v for k, v in A100.items() if k not in ("computeMajor", "computeMinor")}
    tr = b.load(tmp_path, props=(dict(mystery, name="Mystery Accelerator 9000"),))
    p = device_peak(tr, 0, "fp32")
    assert p.flops_per_s is None and "Mystery" in p.missing
    assert device_peak(tr, 0, "fp32", override_tflops=50).flops_per_s == 50e12


RESNET = ("public", "kineto", "tb_plugin", "samples")


@pytest.mark.parametrize("run", ["resnet50_num_workers_0", "resnet50_num_workers_4"])
def test_resnet50_samples_flops_per_step(run):
    files = sorted(glob.glob(os.path.join(shared_path(*RESNET, run), "*.pt.trace.json.gz")))
    assert files
    for f in files:
        tr = tb_perfdiag.load(f)
        c = op_costs(tr, tr.activity_of(0))
        steps = [s for s in tr.steps_hint()]
        assert c.source == "shapes" and c.dtype_name() == "fp32"
        assert c.flops.sum() / len(steps) == pytest.approx(777.57e9, rel=0.03)
        p = device_peak(tr, 0, c.dtype_name())
        assert 14e12 <= p.flops_per_s <= 16.4e12


def _capture():
    import json
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "testdata", "captures")
    with open(os.path.join(root, "MANIFEST.json")) as f:
        cap = next(c for c in json.load(f)["captures"] if c["name"] == "torch_flops")
    return os.path.join(root, cap["files"][0]["path"]), cap["ground_truth"]


def test_generated_capture_shape_formulas_match_torch_and_the_known_counts():
    """A real torch CPU profile (record_shapes, with_flops) of ops of known work, one
    layer under activation checkpointing."""
    from tb_perfdiag.analysis.efficiency.torch_shapes import host_costs
    path, gt = _capture()
    tr = tb_perfdiag.load(path)
    h = host_costs(tr)
    assert not isinstance(h, str)
    # torch's own count of each op it counts (first call of the name)
    for name, want in gt["profiler_flops"].items():
        k = int(np.flatnonzero(h.name == tr.strings.index(name))[0])
        if h.matmul[k]:
            assert h.flops_shapes[k] == want, name
    # per record_function block, the outermost counted ops give the known FLOPs
    top = h.outermost(tr)
    want = dict(gt["flops_by_block"])
    recomputed = want.pop("recomputed")
    want["backward"] = want.pop("conv_backward") + want.pop("linear_backward") + \
        want.pop("ckpt_backward") + recomputed
    ids = [tr.strings.index(b) for b in want]
    block_of = {int(i): tr.event_name(int(i)) for i in np.flatnonzero(np.isin(tr.name, ids))}
    assert sorted(block_of.values()) == sorted(want)
    got = {}
    for k in np.flatnonzero(top).tolist():
        for anc in tr.chain(int(h.event[k])):
            if anc in block_of:
                got[block_of[anc]] = got.get(block_of[anc], 0.0) + h.flops_shapes[k]
    assert got == pytest.approx(want, rel=1e-9)
    # the checkpointed layer's forward, run again inside the backward: hardware FLOPs
    assert h.flops_shapes[top & h.recompute].sum() == recomputed


def test_amd_die_known_by_its_compute_units(tmp_path):
    """ROCm names an MI250's die "AMD Radeon Graphics": its 104 units and 64 GiB say."""
    b = _Trace()
    b.op("aten::mm")
    props = dict(A100, name="AMD Radeon Graphics", computeMajor=9, numSms=104,
                 totalGlobalMem=68702699520)
    p = device_peak(b.load(tmp_path, props=(props,)), 0, "fp32")
    assert p.source == "datasheet:MI250" and p.flops_per_s == pytest.approx(45.25e12)


def test_the_file_is_not_read_again(tmp_path, monkeypatch):
    """The ops' shapes are the reader's string stats: costing them opens no file."""
    from tb_perfdiag import storage
    b = _Trace()
    b.op("aten::mm", [[64, 128], [128, 32]], F32)
    tr = b.load(tmp_path)
    assert tr.stats["input_dims"].is_string
    reads = []
    real = storage.open_file
    monkeypatch.setattr(storage, "open_file", lambda *a, **k: reads.append(1) or real(*a, **k))
    first = op_costs(tr, tr.activity_of(0))
    again = op_costs(tr, tr.activity_of(0))
    assert not reads and first.flops.tolist() == again.flops.tolist() == [2 * 64 * 128 * 32]


def test_shapes_after_hundreds_of_ops_without_are_costed(tmp_path):
    """No op is taken to speak for the file: the one op with shapes, after 300 without,
    is costed."""
    b = _Trace()
    for _ in range(300):
        b.op("aten::mm")
    b.op("aten::mm", [[64, 128], [128, 32]], F32)
    c, _ = _costs(b.load(tmp_path))
    assert c.flops.sum() == 2 * 64 * 128 * 32 and c.known.sum() == 1


def _mixed_ops():
    """Ops of every kind of inference: a convolution whose output is its next op's
    input, a backward with its children, attention, a profiler count, scalars with
    escapes, and the same shapes written with other spacing."""
    b = _Trace()
    x, w = [8, 3, 32, 32], [16, 3, 3, 3]
    b.op("aten::conv2d", [x, w, [], [], [], [], []], F32,
         children=[lambda: b.op("aten::cudnn_convolution", [x, w] + [[]] * 6, F32)])
    b.op("aten::relu_", [[8, 16, 30, 30]], ["float"])
    b.op("aten::cudnn_convolution_backward", [x, [8, 16, 30, 30], w] + [[]] * 8, F32,
         children=[lambda: b.op("aten::cudnn_convolution_backward_weight",
                                [[4], [8, 16, 30, 30], x] + [[]] * 6, F32)])
    b.op("aten::_scaled_dot_product_flash_attention", [[2, 4, 128, 64]] * 3 + [[]] * 4,
         ["c10::BFloat16"] * 3, ["", "", "", "0.0", "True", "False", ""],
         kernel="flash_fwd_kernel")
    b.op("aten::addmm", [[32], [64, 128], [128, 32], [], []], F32, flops=999)
    b.op("aten::add", [[64, 32], [64, 32], []], ["float", "float", "Scalar"],
         ['"a\\b" é', "", "1"])
    b.op("aten::mm", [[64, 128], [128, 32]], F32)
    return b


def test_both_readers_give_the_same_costs(tmp_path, monkeypatch):
    """The C scanner keeps the file's text of a shape, the reference orjson's: each is
    parsed, and the figures are the same."""
    b = _mixed_ops()
    p = os.path.join(str(tmp_path), "w.pt.trace.json")
    text = kineto_bytes(b.events, deviceProperties=[dict(V100)])
    # the file's own spacing and escapes, as another writer might put them
    for plain, other in ((b'[[64,128],[128,32]]', b'[ [64,128] ,\n [128, 32] ]'),
                         (b'"float","float"]', b'"flo\\u0061t", "float"]')):
        assert plain in text
        text = text.replace(plain, other)
    with open(p, "wb") as f:
        f.write(text)
    got = {}
    for native in (True, False):
        if native:
            monkeypatch.delenv("TB_PERFDIAG_NO_NATIVE", raising=False)
        else:
            monkeypatch.setenv("TB_PERFDIAG_NO_NATIVE", "1")
        tr = tb_perfdiag.load(p)
        got[native] = op_costs(tr, tr.activity_of(0))
    a, r = got[True], got[False]
    for what in ("flops", "hw_flops", "bytes", "dtype", "matmul", "known"):
        assert np.array_equal(getattr(a, what), getattr(r, what)), what
    assert a.flops.sum() > 0 and a.source == r.source == "kineto_flops_arg"


@pytest.mark.parametrize("run", ["resnet50_num_workers_0"])
def test_resnet50_sample_same_costs_from_both_readers(run, monkeypatch):
    files = sorted(glob.glob(os.path.join(shared_path(*RESNET, run), "*.pt.trace.json.gz")))
    assert files
    got = []
    for native in (True, False):
        if native:
            monkeypatch.delenv("TB_PERFDIAG_NO_NATIVE", raising=False)
        else:
            monkeypatch.setenv("TB_PERFDIAG_NO_NATIVE", "1")
        tr = tb_perfdiag.load(files[0])
        got.append(op_costs(tr, tr.activity_of(0)))
    for what in ("flops", "hw_flops", "bytes", "dtype", "matmul", "known"):
        assert np.array_equal(getattr(got[0], what), getattr(got[1], what)), what


def test_a_gemm_workspace_memset_takes_none_of_its_flops(tmp_path):
    b = _Trace()
    b.op("aten::mm", [[64, 128], [128, 32]], F32)
    # a memset launched inside the same op (as cuBLAS does for its workspace)
    mm = b.events[-1]
    ext, corr = mm["args"]["External id"], b.corr
    b.events.insert(0, {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemsetAsync",
                        "pid": 1, "tid": 1, "ts": mm["ts"] + 0.5, "dur": 0.2,
                        "args": {"correlation": corr, "External id": ext}})
    b.events.append({"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0,
                     "tid": 7, "ts": mm["ts"] + 0.6, "dur": 0.1,
                     "args": {"device": 0, "stream": 7, "correlation": corr, "bytes": 4096}})
    c, names = _costs(b.load(tmp_path))
    k = names.index("volta_sgemm_128x64_nn")
    assert len(c) == 2 and c.flops[k] == 2 * 64 * 128 * 32 and c.flops.sum() == c.flops[k]
    assert c.bytes[1 - k] == 4096 and not c.matmul[1 - k]


def test_fp32_conv_on_tf32_kernels_runs_in_tf32(tmp_path):
    b = _Trace()
    b.op("aten::cudnn_convolution", [[8, 3, 32, 32], [16, 3, 3, 3]] + [[]] * 6, F32,
         ["", "", "[1, 1]", "[2, 2]", "[1, 1]", "1"],
         kernel="sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw")
    b.op("aten::mm", [[64, 128], [128, 32]], F32, kernel="ampere_sgemm_128x64_nn")
    c, _ = _costs(b.load(tmp_path))
    assert [DTYPES[d] for d in c.dtype] == ["tf32", "fp32"]


def test_a_gemm_op_s_flops_go_to_its_gemm_kernel_not_the_copy_beside_it(tmp_path):
    b = _Trace()
    b.op("aten::linear", [[64, 128], [32, 128], [32]], F32,
         kernel=["void at::native::elementwise_kernel<128, 2>", "ampere_sgemm_64x64_nn"])
    c, names = _costs(b.load(tmp_path))
    assert c.flops.tolist() == [0.0, 2 * 64 * 128 * 32] and c.matmul.tolist() == [False, True]


def test_a_backward_s_parts_go_to_the_child_ops_kernels_not_by_time(tmp_path):
    # 2021 traces: the input's gradient is computed inside ``*_backward_input``, the
    # weight's inside ``*_backward_weight``; a short GEMM must not take the long one's FLOPs
    b = _Trace()
    sh = [[8, 3, 32, 32], [8, 16, 30, 30], [16, 3, 3, 3]]
    i = lambda: b.op("aten::cudnn_convolution_backward_input", [[], sh[1], sh[2]],  # noqa
                     kernel="volta_sgemm_64x64_nt", durs=[10])
    w = lambda: b.op("aten::cudnn_convolution_backward_weight", [[], sh[1], sh[0]],  # noqa
                     kernel=["volta_sgemm_64x64_nt", "cudnn::winograd_nonfused::"
                             "winogradWgradOutput4x4<float, float>"], durs=[2, 8])
    b.op("aten::cudnn_convolution_backward", sh, F32, children=[i, w], kernels=0)
    c, names = _costs(b.load(tmp_path))
    one = 2 * 8 * 16 * 30 * 30 * 27
    assert c.flops.tolist() == [one, one, 0.0]
    assert c.matmul.tolist() == [True, True, False]
    assert c.bytes[2] > 0                        # a transform moves bytes


@pytest.mark.parametrize("mask,want", [("[True, True, False]", (1, 1)),
                                       ("[False, True, False]", (0, 1)),
                                       ("[True, False, False]", (1, 0))])
def test_a_backward_s_parts_go_to_its_dgrad_and_wgrad_kernels_by_name(tmp_path, mask, want):
    b = _Trace()
    conc = [""] * 3 + ["[16]", "[1, 1]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1", mask]
    names = ["sm80_xmma_dgrad_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nchw",
             "sm80_xmma_wgrad_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nchw"]
    names = [n for n, w in zip(names, want) if w]
    b.op("aten::convolution_backward", [[8, 16, 30, 30], [8, 3, 32, 32], [16, 3, 3, 3]] +
         [[]] * 8, F32, conc, kernel=names, durs=[9, 1][:len(names)])
    c, _ = _costs(b.load(tmp_path))
    one = 2 * 8 * 16 * 30 * 30 * 27
    assert c.flops.tolist() == [one] * len(names)


def test_a_backward_whose_kernels_do_not_say_splits_by_time(tmp_path):
    b = _Trace()
    conc = [""] * 3 + ["[16]", "[1, 1]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1",
                       "[True, True, False]"]
    b.op("aten::convolution_backward", [[8, 16, 30, 30], [8, 3, 32, 32], [16, 3, 3, 3]] +
         [[]] * 8, F32, conc, kernel=["volta_sgemm_64x64_nt", "volta_sgemm_128x64_nn"],
         durs=[3, 1])
    c, _ = _costs(b.load(tmp_path))
    one = 2 * 8 * 16 * 30 * 30 * 27
    assert c.flops.tolist() == pytest.approx([1.5 * one, 0.5 * one])


def test_winograd_transforms_take_bytes_and_the_gemm_its_tiled_hardware_count(tmp_path):
    b = _Trace()
    t = "cudnn::winograd_nonfused::winogradForward{}4x4<float, float>"
    b.op("aten::cudnn_convolution", [[8, 16, 14, 14], [32, 16, 3, 3]] + [[]] * 7, F32,
         ["", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"],
         kernel=[t.format("Data"), t.format("Filter"), "volta_sgemm_64x64_nn",
                 t.format("Output")], durs=[6, 1, 2, 6])
    c, _ = _costs(b.load(tmp_path))
    model = 2 * 8 * 32 * 14 * 14 * 16 * 9
    assert c.flops.tolist() == [0.0, 0.0, model, 0.0]
    assert c.matmul.tolist() == [False, False, True, False]
    # F(4×4, 3×3): 36 products per 4×4 output tile, ⌈14/4⌉² = 16 tiles of 196 outputs
    assert c.hw_flops[2] == pytest.approx(model * 36 * 16 / (9 * 196))
    assert (c.bytes > 0).all()
    assert c.bytes.sum() == pytest.approx((8 * 16 * 196 + 32 * 16 * 9 + 8 * 32 * 196) * 4)


def test_a_fused_winograd_kernel_s_hardware_count_is_f2x2_s(tmp_path):
    b = _Trace()
    b.op("aten::cudnn_convolution", [[8, 16, 14, 14], [32, 16, 3, 3]] + [[]] * 7, F32,
         ["", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"],
         kernel=["void cudnn::winograd::generateWinogradTilesKernel<0, float, float>",
                 "volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1"])
    c, _ = _costs(b.load(tmp_path))
    model = 2 * 8 * 32 * 14 * 14 * 16 * 9
    assert c.flops.tolist() == [0.0, model]
    assert c.hw_flops[1] == pytest.approx(model * 16 * 49 / (9 * 196))


def _kernel_rates(tr):
    """(kernel name, hardware FLOP/s over its summed time, the peak of its dtype) per
    matmul-class kernel name of device 0."""
    ev = tr.activity_of(0)
    c = op_costs(tr, ev)
    out = []
    for dt in np.unique(c.dtype[c.matmul]).tolist():
        peak = device_peak(tr, 0, DTYPES[dt]).flops_per_s
        m = c.matmul & (c.dtype == dt)
        u, inv = np.unique(tr.name[ev[m]], return_inverse=True)
        fl = np.bincount(inv, weights=c.hw_flops[m])
        t = np.bincount(inv, weights=tr.dur[ev[m]].astype(np.float64)) * 1e-12
        out += [(tr.strings[k], f / s, peak) for k, f, s in zip(u.tolist(), fl, t) if s > 0]
    return out


@pytest.mark.parametrize("run", ["resnet50_num_workers_0", "resnet50_num_workers_4"])
def test_resnet50_no_kernel_above_its_peak(run):
    files = sorted(glob.glob(os.path.join(shared_path(*RESNET, run), "*.pt.trace.json.gz")))
    assert files
    for f in files:
        rates = _kernel_rates(tb_perfdiag.load(f))
        assert len(rates) > 20
        over = [(n, r / p) for n, r, p in rates if r > p * 1.05]
        assert not over, over


def test_real_traces_with_shapes_no_kernel_above_its_peak():
    root = shared_path("public")
    seen = 0
    files = {f for ext in ("*.json.gz", "*.json") for f in
             glob.glob(os.path.join(root, "**", ext), recursive=True)}
    for f in sorted(files):
        try:
            tr = tb_perfdiag.load(f)
        except Exception:                    # noqa: BLE001 - not every file is a trace
            continue
        if tr.format != "kineto" or not tr.devices:
            continue
        rates = [(n, r / p) for n, r, p in _kernel_rates(tr) if p]
        seen += bool(rates)
        over = [x for x in rates if x[1] > 1.05]
        assert not over, (f, over)
    assert seen >= 10             # the ResNet, DLRM and HTA captures with shapes


@pytest.mark.parametrize("kernel, dtype", [
    ("void cutlass::Kernel<cutlass_80_tensorop_f16_s16816gemm_f16_256x128_64x3_nn_align8>", "fp16"),
    ("void cutlass::Kernel2<cutlass::gemm::GemmUniversal<cutlass::half_t, cutlass::layout::RowMajor>>", "fp16"),
    ("void cutlass::Kernel2<cutlass::gemm::GemmUniversal<cutlass::bfloat16_t, cutlass::layout::RowMajor>>", "bf16"),
    ("void cutlass::Kernel2<cutlass::gemm::GemmUniversal<cutlass::tfloat32_t, cutlass::layout::RowMajor>>", "tf32"),
    ("volta_sgemm_128x64_nn", "fp32"),
    ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn", "fp16"),
])
def test_a_kernel_name_tells_its_dtype(kernel, dtype):
    """The dtype a GEMM kernel ran in, from its name where the op has no types: CUTLASS's
    element type names (``cutlass::half_t``, ``tfloat32_t``) as well as cuBLAS' tiles."""
    from tb_perfdiag.analysis.efficiency.torch_shapes import _KERNEL_DTYPE
    got = next((d for rx, d in _KERNEL_DTYPE if rx.search(kernel)), "")
    assert got == dtype


def test_inductor_kernels_costed_in_bytes_from_their_buffers(tmp_path):
    """torch.compile's Triton kernels: the host op of each launch lists the compiled
    graph's buffers (two inputs and the output, an fp32 [10, 10] each) and the element
    count as a scalar: each buffer read or written once, no FLOPs."""
    b = _Trace()
    for name in ("triton_poi_fused_add_cos_sin_0", "triton_red_fused_sum_1",
                 "triton_per_fused_softmax_2"):
        b.op(name, [[10, 10], [10, 10], [10, 10], []], ["float", "float", "float", "Scalar"],
             conc=["", "", "", "100"], kernel=name)
    c, names = _costs(b.load(tmp_path))
    assert c.known.all() and c.flops.sum() == 0 and not c.matmul.any()
    assert c.bytes.tolist() == [1200.0] * 3


def test_triton_example_trace_is_costed_in_bytes():
    tr = tb_perfdiag.load(shared_path("public", "HolisticTraceAnalysis", "tests", "data",
                                      "triton_example", "triton_example.json.gz"))
    c = op_costs(tr, tr.activity_of(0))
    assert c.known.all() and c.bytes.sum() == 3 * 100 * 4
