"""FLOPs and bytes per device op (analysis.efficiency.costs) and device peaks (peaks)."""
from __future__ import annotations

import os
import numpy as np
import pytest

from tb_perfdiag.analysis.efficiency.costs import DTYPES, op_costs
from tb_perfdiag.analysis.efficiency.peaks import device_peak
from tb_perfdiag.render.json import diagnosis_json
from tb_perfdiag.testing.xspace import U64, XSpaceWriter, load_xspace

from conftest import shared_path

TPU = ("public", "xprof", "xprof", "convert", "test_xplanes", "tpu_inference_2.xplane.pb")


def _tpu_trace(peak=918.0, with_costs=True):
    """Two programs that both have a ``fusion.1`` (with different costs) and a dot."""
    w = XSpaceWriter()
    stats = [("peak_teraflops_per_second", "d", peak),
             ("peak_hbm_bw_gigabytes_per_second", "d", 1640.0),
             ("device_type_string", "s", "TPU v6 Lite")] if peak else []
    tpu = w.plane("/device:TPU:0", id=1, stats=stats)
    ops = tpu.line(1, "XLA Ops", timestamp_ns=0)
    def md(prog, fl, mfl, by, cat):
        got = [("program_id", "u", prog), ("hlo_category", "s", cat)]
        if with_costs:
            got += [("flops", "u", fl), ("model_flops", "u", mfl), ("bytes_accessed", "u", by)]
        return got
    t = 0
    for rep in range(3):
        tpu.event(ops, "%fusion.1 = f32[8,8]{1,0} fusion(f32[8,8] %p)", t, 1000,
                  display="fusion.1", md_stats=md(U64(11), 100, 100, 512, "loop fusion"))
        tpu.event(ops, "%fusion.1 = f32[4]{0} fusion(f32[4] %q)#2", t + 2000, 1000,
                  display="fusion.1", md_stats=md(U64(12), 7, 7, 64, "loop fusion"))
        tpu.event(ops, "%convolution.3 = f32[128,256]{1,0} convolution(bf16[128,64] %a, "
                       "bf16[64,256] %b)", t + 4000, 5000, display="convolution.3",
                  md_stats=md(U64(11), 2 * 128 * 64 * 256 + 10, 2 * 128 * 64 * 256,
                              2 * (128 * 64 + 64 * 256 + 128 * 256), "convolution"))
        t += 20000
    return load_xspace(w)


def test_xla_op_stats_per_program_and_op():
    tr = _tpu_trace()
    ev = tr.activity_of(0)
    c = op_costs(tr, ev)
    assert c.source == "xla_op_stats" and c.missing == "" and c.known.all()
    names = [tr.event_name(int(e)) for e in c.event]
    assert names.count("fusion.1") == 6
    # the two programs' fusion.1 keep their own figures
    fus = np.array([n == "fusion.1" for n in names])
    assert sorted(set(c.flops[fus].tolist())) == [7.0, 100.0]
    conv = ~fus
    assert (c.flops[conv] == 2 * 128 * 64 * 256).all()
    assert (c.hw_flops[conv] == 2 * 128 * 64 * 256 + 10).all()     # flops: what ran
    assert c.matmul[conv].all() and not c.matmul[fus].any()
    assert {DTYPES[i] for i in c.dtype[conv]} == {"bf16"}
    assert c.dtype_name() == "bf16"
    assert c.flops.sum() == 3 * (100 + 7 + 2 * 128 * 64 * 256)
    assert c.bytes.sum() == 3 * (512 + 64 + 2 * (128 * 64 + 64 * 256 + 128 * 256))
    assert not c.estimated.any()


def test_xla_ops_without_cost_stats_say_so():
    tr = _tpu_trace(with_costs=False)
    c = op_costs(tr, tr.activity_of(0))
    assert not c.known.any() and c.flops.sum() == 0 and c.missing


def test_tpu_peak_from_plane_and_override():
    tr = _tpu_trace()
    p = device_peak(tr, 0, "bf16")
    assert p.flops_per_s == 918e12 and p.bytes_per_s == 1640e9 and p.source == "trace"
    assert p.device_model == "TPU v6 Lite"
    assert device_peak(tr, 0, "int8").flops_per_s == 1836e12     # the v6e's int8 rate
    assert device_peak(tr, 0, "fp32").flops_per_s == 918e12
    p = device_peak(tr, 0, "bf16", override_tflops=100)
    assert p.flops_per_s == 100e12 and p.source == "option"


def test_tpu_peak_from_datasheet_without_plane_peak():
    w = XSpaceWriter()
    tpu = w.plane("/device:TPU:0", id=1, stats=[("device_type_string", "s", "TPU v5 lite")])
    tpu.event(tpu.line(1, "XLA Ops", 0), "fusion", 0, 10)
    p = device_peak(load_xspace(w), 0, "bf16")
    assert p.source == "datasheet:TPU v5e" and p.flops_per_s == 197e12


def test_gpu_plane_peak_from_its_properties():
    w = XSpaceWriter()
    gpu = w.plane("/device:GPU:0", id=1, stats=[
        ("clock_rate", "u", 1530000), ("core_count", "u", 80),
        ("memory_bandwidth", "u", 898048000000), ("compute_cap_major", "u", 7),
        ("compute_cap_minor", "u", 0)])
    gpu.event(gpu.line(7, "Stream #7", 0), "volta_sgemm_128x64_nn", 0, 10)
    tr = load_xspace(w)
    p = device_peak(tr, 0, "fp32")
    assert p.source.startswith("computed from the plane's 80 SMs × 1.53 GHz (cc 7.0")
    assert p.flops_per_s == pytest.approx(15.67e12, rel=1e-3)
    assert p.bytes_per_s == 898048000000
    assert device_peak(tr, 0, "fp16").flops_per_s == pytest.approx(125.3e12, rel=1e-3)


def test_unknown_device_has_no_peak_and_says_why():
    w = XSpaceWriter()
    dev = w.plane("/device:GPU:0", id=1)
    dev.event(dev.line(7, "Stream #7", 0), "k", 0, 10)
    p = device_peak(load_xspace(w), 0, "fp32")
    assert p.flops_per_s is None and p.missing


def test_real_tpu_trace_flops_and_peak():
    import tb_perfdiag
    tr = tb_perfdiag.load(shared_path(*TPU))
    for d in range(len(tr.devices)):
        c = op_costs(tr, tr.activity_of(d))
        assert c.source == "xla_op_stats" and c.known.all()
        assert c.flops.sum() == pytest.approx(406.68e9, rel=0.01)
        p = device_peak(tr, d, c.dtype_name())
        assert p.flops_per_s == pytest.approx(918e12, rel=0.005)


def test_real_tpu_trace_agrees_with_xprof_roofline(tmp_path):
    """xprof's own roofline (``xprof get_roofline_model``) on the same file: its program
    FLOP rate × time is the FLOPs of all chips."""
    import json
    import os
    import shutil
    import subprocess
    import sys
    pytest.importorskip("xprof")
    src = shared_path(*TPU)
    cli = os.path.join(os.path.dirname(sys.executable), "xprof")
    if not os.path.exists(cli):
        cli = shutil.which("xprof")
    if not cli:
        pytest.skip("the xprof CLI is not installed")
    run = tmp_path / "logs" / "run" / "plugins" / "profile" / "s1"
    run.mkdir(parents=True)
    os.symlink(src, run / "host0.xplane.pb")
    got = subprocess.run([cli, "get_roofline_model", str(tmp_path / "logs" / "run")],
                         capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert got.returncode == 0, got.stderr[-2000:]
    prog = json.loads(got.stdout[got.stdout.index("{"):])["program"]
    theirs = prog["measured_flop_rate_gflops"] * 1e9 * prog["total_time_ms"] / 1e3
    import tb_perfdiag
    tr = tb_perfdiag.load(src)
    ours = sum(op_costs(tr, tr.activity_of(d)).flops.sum() for d in range(len(tr.devices)))
    assert ours == pytest.approx(theirs, rel=0.02)
    # its roofline counts HBM bytes (the ops' memory_access_breakdown) against the HBM
    # bandwidth, over all cores' time: so do ours, the chips' windows summed
    diag = tb_perfdiag.diagnose(tr)
    effs = [diagnosis_json(diag)["devices"][d]["efficiency"] for d in range(len(tr.devices))]
    hbm = sum(e["hbm_bytes"] for e in effs)
    win = sum((lambda ab: (ab[1] - ab[0]) * 1e-12)(diag.devices.window(d))
              for d in range(len(tr.devices)))
    assert all(e["roofline"]["memory_space"] == "hbm" and e["roofline"]["bound"] == "memory"
               for e in effs) and prog["bound_by"] == "HBM"
    assert hbm / win / 2**30 == pytest.approx(prog["hbm_bw_gibs"], rel=0.02)
    share = float(prog["hbm_bw_utilization_percent"].rstrip("%")) / 100
    assert hbm / win / effs[0]["peak_bytes_per_s"] == pytest.approx(share, rel=0.02)
    assert ours / hbm == pytest.approx(prog["bottleneck_operational_intensity_flop_per_byte"],
                                       rel=0.02)
    assert effs[0]["roofline"]["ridge"] == pytest.approx(
        prog["bound_by_ridge_point_flop_per_byte"], rel=0.02)


def _hlo_module():
    """An HloProto: a dot, a convolution, a fusion of a dot and an add, a cuBLAS GEMM
    custom call, and a custom call of unknown target."""
    from tb_perfdiag.analysis.efficiency.hlo_costs import HloProto
    F32, BF16 = 11, 16
    msg = HloProto()
    comps = msg.hlo_module.computations
    fused = comps.add(name="fused_computation", id=2)
    def ins(c, name, opcode, iid, dims, et=F32, ops=()):
        i = c.instructions.add(name=name, opcode=opcode, id=iid)
        i.shape.element_type = et
        i.shape.dimensions.extend(dims)
        i.operand_ids.extend(ops)
        return i
    ins(fused, "p0", "parameter", 101, [64, 32])
    ins(fused, "p1", "parameter", 102, [32, 16])
    d = ins(fused, "dot.9", "dot", 103, [64, 16], ops=(101, 102))
    d.dot_dimension_numbers.lhs_contracting_dimensions.append(1)
    d.dot_dimension_numbers.rhs_contracting_dimensions.append(0)
    ins(fused, "add.9", "add", 104, [64, 16], ops=(103, 103))
    main = comps.add(name="main", id=1)
    ins(main, "a", "parameter", 1, [8, 128, 256], BF16)
    ins(main, "b", "parameter", 2, [8, 256, 64], BF16)
    d = ins(main, "dot.1", "dot", 3, [8, 128, 64], BF16, ops=(1, 2))
    dn = d.dot_dimension_numbers
    dn.lhs_batch_dimensions.append(0)
    dn.rhs_batch_dimensions.append(0)
    dn.lhs_contracting_dimensions.append(2)
    dn.rhs_contracting_dimensions.append(1)
    ins(main, "img", "parameter", 4, [4, 3, 32, 32])
    ins(main, "w", "parameter", 5, [16, 3, 3, 3])
    cv = ins(main, "convolution.2", "convolution", 6, [4, 16, 16, 16], ops=(4, 5))
    cd = cv.convolution_dimension_numbers
    cd.kernel_output_feature_dimension, cd.kernel_input_feature_dimension = 0, 1
    cd.kernel_spatial_dimensions.extend([2, 3])
    ins(main, "x", "parameter", 7, [64, 32])
    ins(main, "y", "parameter", 8, [32, 16])
    fu = ins(main, "fusion.3", "fusion", 9, [64, 16], ops=(7, 8))
    fu.called_computation_ids.append(2)
    gemm = ins(main, "custom-call.4", "custom-call", 10, [], ops=(1, 2))
    gemm.custom_call_target = "__cublas$gemm"
    t0 = gemm.shape.tuple_shapes.add(element_type=BF16)
    t0.dimensions.extend([8, 128, 64])
    gemm.shape.tuple_shapes.add(element_type=6).dimensions.append(1024)    # workspace
    ins(main, "custom-call.5", "custom-call", 11, [8], ops=(1, 2)).custom_call_target = "foo"
    return msg.SerializeToString()


def test_hlo_cost_rules_on_xla_cpu_ops():
    from tb_perfdiag.testing.xspace import Ref
    w = XSpaceWriter()
    md = w.plane("/host:metadata", id=9)
    md.eid("jit_step(7)", md_stats=[("Hlo Proto", "b", _hlo_module())])
    host = w.plane("/host:CPU", id=1)
    ln = host.line(1, "tf_XLAEigen/1", timestamp_ns=0)
    names = ["dot.1", "convolution.2", "fusion.3", "custom-call.4", "custom-call.5",
             "dot.1"]
    for i, n in enumerate(names):
        host.event(ln, n, i * 1000, 500, stats={"hlo_op": n, "hlo_module": Ref("jit_step"),
                                                 "program_id": 7})
    tr = load_xspace(w)
    c = op_costs(tr, tr.activity_of(0))
    assert c.source == "hlo"
    got = {tr.event_name(int(e)): (f, e_, m) for e, f, e_, m in
           zip(c.event, c.flops, c.estimated, c.matmul)}
    bmm = 2 * 8 * 128 * 64 * 256
    assert got["dot.1"] == (bmm, False, True)
    assert got["convolution.2"] == (2 * 4 * 16 * 16 * 16 * 27, False, True)
    assert got["fusion.3"] == (2 * 64 * 16 * 32 + 64 * 16, False, True)   # dot + add
    assert got["custom-call.4"] == (bmm, True, True)                    # from shapes
    assert got["custom-call.5"][0] == 0 and not got["custom-call.5"][2]
    # a custom call of a target with no estimate has no figure, and says which
    assert c.known.tolist() == [n != "custom-call.5" for n in names]
    assert "foo" in c.missing
    assert c.flops[~c.estimated].sum() == \
        2 * bmm + 2 * 4 * 16 * 16 * 16 * 27 + 2 * 64 * 16 * 32 + 64 * 16
    # the dot's bytes: its operands and its result
    k = names.index("dot.1")
    assert c.bytes[k] == 2 * (8 * 128 * 256 + 8 * 256 * 64 + 8 * 128 * 64)
    assert DTYPES[c.dtype[k]] == "bf16"


def _fmha_module():
    """An HloProto of cuDNN fused-attention custom calls: a causal forward in the BTNH
    layout (Q [B, T, N, H]) with its config in a GpuBackendConfig, an unmasked backward
    in the BHSD layout with an older bare config, a forward with K passed transposed,
    one without operands' shapes enough to count; and cuDNN's two convolution
    gradients."""
    import json
    from tb_perfdiag.analysis.efficiency.hlo_costs import HloProto
    BF16 = 16
    msg = HloProto()
    main = msg.hlo_module.computations.add(name="main", id=1)

    def ins(name, opcode, iid, dims, ops=(), target="", cfg=None):
        i = main.instructions.add(name=name, opcode=opcode, id=iid)
        i.shape.element_type = BF16
        i.shape.dimensions.extend(dims)
        i.operand_ids.extend(ops)
        if target:
            i.custom_call_target = target
        if cfg is not None:
            i.backend_config = json.dumps(cfg).encode()
        return i

    def dn(lb, lc, rb, rc):
        return {"lhs_batch_dimensions": [str(x) for x in lb],
                "lhs_contracting_dimensions": [str(x) for x in lc],
                "rhs_batch_dimensions": [str(x) for x in rb],
                "rhs_contracting_dimensions": [str(x) for x in rc]}
    # BTNH: B 2, T 512 (query) / 256 (key), N 8, H 64
    ins("q", "parameter", 1, [2, 512, 8, 64])
    ins("k", "parameter", 2, [2, 256, 8, 64])
    ins("v", "parameter", 3, [2, 256, 8, 64])
    ins("fmha.fwd", "custom-call", 4, [2, 512, 8, 64], (1, 2, 3), "__cudnn$fmhaSoftmax",
        {"operation_queue_id": "0", "cudnn_fmha_backend_config": {
            "bmm1_dot_dimension_numbers": dn([0, 2], [3], [0, 2], [3]),
            "mask_type": "CAUSAL", "fmha_scale": 0.125}})
    # BHSD: B 4, H 6, S 128, D 32; the backward's operands Q, K, V, output, dO
    ins("q2", "parameter", 5, [4, 6, 128, 32])
    ins("k2", "parameter", 6, [4, 6, 128, 32])
    ins("v2", "parameter", 7, [4, 6, 128, 32])
    ins("fmha.bwd", "custom-call", 8, [4, 6, 128, 32], (5, 6, 7, 5, 5),
        "__cudnn$fmhaScaleBiasSoftmaxBackward",
        {"bmm1_grad_gemm1_dot_dimension_numbers": dn([0, 1], [3], [0, 1], [2]),
         "mask_type": "NO_MASK"})
    # K transposed ([B, H, D, S]), as XLA's first fMHA rewrites passed it
    ins("kt", "parameter", 9, [4, 6, 32, 128])
    ins("fmha.kt", "custom-call", 10, [4, 6, 128, 32], (5, 9, 7),
        "__cudnn$fmhaScaleBiasSoftmaxDropout",
        {"bmm1_dot_dimension_numbers": dn([0, 1], [3], [0, 1], [2])})
    ins("fmha.bad", "custom-call", 11, [4], (5, 9), "__cudnn$fmhaSoftmax")
    # cuDNN's convolution gradients, the forward's dimension numbers (NCHW, OIHW):
    # x [4, 3, 32, 32], w [16, 3, 3, 3], dY [4, 16, 30, 30]
    ins("dy", "parameter", 12, [4, 16, 30, 30])
    ins("w", "parameter", 13, [16, 3, 3, 3])
    ins("x", "parameter", 14, [4, 3, 32, 32])
    for name, iid, dims, ops, target in (
            ("conv.dx", 15, [4, 3, 32, 32], (12, 13), "__cudnn$convBackwardInput"),
            ("conv.dw", 16, [16, 3, 3, 3], (14, 12), "__cudnn$convBackwardFilter")):
        c = ins(name, "custom-call", iid, [], ops, target)
        c.shape.tuple_shapes.add(element_type=BF16).dimensions.extend(dims)
        c.shape.tuple_shapes.add(element_type=6).dimensions.append(64)     # workspace
        cd = c.convolution_dimension_numbers
        cd.kernel_output_feature_dimension, cd.kernel_input_feature_dimension = 0, 1
        cd.kernel_spatial_dimensions.extend([2, 3])
    return msg.SerializeToString()


def test_hlo_cudnn_attention_and_convolution_gradients_from_their_shapes():
    from tb_perfdiag.analysis.efficiency.torch_formulas import causal_fraction
    from tb_perfdiag.testing.xspace import Ref
    w = XSpaceWriter()
    md = w.plane("/host:metadata", id=9)
    md.eid("jit_attn(3)", md_stats=[("Hlo Proto", "b", _fmha_module())])
    host = w.plane("/host:CPU", id=1)
    ln = host.line(1, "tf_XLAEigen/1", timestamp_ns=0)
    names = ["fmha.fwd", "fmha.bwd", "fmha.kt", "fmha.bad", "conv.dx", "conv.dw"]
    for i, n in enumerate(names):
        host.event(ln, n, i * 1000, 500, stats={"hlo_op": n, "hlo_module": Ref("jit_attn"),
                                                 "program_id": 3})
    tr = load_xspace(w)
    c = op_costs(tr, tr.activity_of(0))
    got = {tr.event_name(int(e)): (f, est, m) for e, f, est, m in
           zip(c.event, c.flops, c.estimated, c.matmul)}
    fwd = 4 * 2 * 8 * 512 * 256 * 64 * causal_fraction(512, 256)
    assert got["fmha.fwd"] == (pytest.approx(fwd), True, True)
    assert got["fmha.bwd"] == (pytest.approx(2.5 * 4 * 4 * 6 * 128 * 128 * 32), True, True)
    assert got["fmha.kt"] == (pytest.approx(4 * 4 * 6 * 128 * 128 * 32), True, True)
    assert got["fmha.bad"] == (0.0, False, False)
    assert not c.known[names.index("fmha.bad")] and "__cudnn$fmhaSoftmax" in c.missing
    assert DTYPES[c.dtype[0]] == "bf16"
    one = 2 * 4 * 16 * 30 * 30 * 27                     # the forward's count, each gradient
    assert got["conv.dx"] == (one, True, True) and got["conv.dw"] == (one, True, True)


def test_generated_jax_capture_matmul_flops_by_hand():
    """The project's JAX CPU capture: an MLP 256-512-512-10, batches 128 (× 10), 96, 64;
    forward and the weights' gradients of all layers, the inputs' of all but the first."""
    import glob
    import os
    import tb_perfdiag
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "testdata", "captures", "jax_cpu")
    path = glob.glob(os.path.join(root, "**", "*.xplane.pb"), recursive=True)[0]
    tr = tb_perfdiag.load(path)
    c = op_costs(tr, tr.activity_of(0))
    macs = 256 * 512 + 512 * 512 + 512 * 10
    per_sample = 2 * (2 * macs + 512 * 512 + 512 * 10)
    assert c.source == "hlo"
    assert c.flops[c.matmul].sum() == per_sample * (10 * 128 + 96 + 64)


@pytest.mark.parametrize("name,row,bf16", [
    ("Tesla V100-SXM2-16GB", "V100 SXM2", None), ("Tesla V100-PCIE-32GB", "V100 PCIe", None),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB", 312), ("NVIDIA A100-PCIE-40GB", "A100 40GB", 312),
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.4), ("NVIDIA H100 PCIe", "H100 PCIe", 756),
    ("NVIDIA H200", "H200 SXM", 989.4), ("NVIDIA GH200 480GB", "GH200", 989.4),
    ("NVIDIA B200", "B200", 2250), ("NVIDIA L4", "L4", 121), ("NVIDIA A10G", "A10G", 125),
    ("Tesla T4", "T4", None), ("AMD Instinct MI250X", "MI250X", 191.5),
    ("AMD Instinct MI300X", "MI300X", 1307.4), ("AMD Instinct MI325X", "MI325X", 1307.4),
    ("AMD Instinct MI355X", "MI355X", 2516.6), ("TPU v4", "TPU v4", 275),
    ("TPU v5 lite", "TPU v5e", 197), ("TPU v5", "TPU v5p", 459), ("TPU v5p", "TPU v5p", 459),
    ("TPU v6 lite", "TPU v6e", 918), ("NVIDIA L40S", None, None), ("NVIDIA A40", None, None),
])
def test_datasheet_rows_by_name(name, row, bf16):
    from tb_perfdiag.analysis.efficiency.datasheets import row_for
    r = row_for(name)
    assert (r.key if r else None) == row
    if r is not None:
        assert r.datasheet and r.gbytes_per_s > 0 and r.tflops.get("bf16") == bf16


@pytest.mark.parametrize("which", ["abc", "ac", "kc", "kak", "kk", "c", "k"])
def test_distinct_rows_agrees_with_numpy(which):
    """Any mix of varying columns and one-value ones (``k``: the program of a one-program
    capture), wide values and −1s, gives numpy's distinct rows and inverse."""
    from tb_perfdiag.analysis.efficiency.costs import distinct_rows
    rng = np.random.default_rng(3)
    col = {"a": rng.integers(0, 4, 5000),
           "b": rng.choice(np.array([-1, 2**63 - 5, -(2**62), 7]), 5000),
           "c": rng.integers(-1, 300, 5000), "k": np.full(5000, 2**40 + 3)}
    cols = [col[x] for x in which]
    rows, inv = distinct_rows(*cols)
    want, winv = np.unique(np.stack(cols, 1), axis=0, return_inverse=True)
    assert (rows == want).all() and (inv == winv.reshape(-1)).all()
    assert (rows[inv] == np.stack(cols, 1)).all()
    rows, inv = distinct_rows(*(c[:0] for c in cols))
    assert rows.shape == (0, len(cols)) and inv.shape == (0,)


def test_hlo_op_run_as_two_gpu_kernels_counts_once():
    from tb_perfdiag.testing.xspace import Ref
    w = XSpaceWriter()
    md = w.plane("/host:metadata", id=9)
    md.eid("jit_step(7)", md_stats=[("Hlo Proto", "b", _hlo_module())])
    gpu = w.plane("/device:GPU:0", id=1)
    ln = gpu.line(7, "Stream #7", timestamp_ns=0)
    st = {"hlo_op": "dot.1", "hlo_module": Ref("jit_step"), "program_id": 7}
    for i, kname in enumerate(["gemm_kernel", "splitk_reduce", "gemm_kernel"]):
        stats = dict(st, correlation_id=i + 1)
        if i == 2:
            stats["hlo_op"] = "convolution.2"
        gpu.event(ln, kname, i * 1000, 500, stats=stats)
    tr = load_xspace(w)
    c = op_costs(tr, tr.activity_of(0))
    bmm = 2 * 8 * 128 * 64 * 256
    assert c.source == "hlo" and c.flops.tolist() == [bmm / 2, bmm / 2,
                                                      2 * 4 * 16 * 16 * 16 * 27]


def _nested_fusion_module():
    """A fusion whose computation holds a fusion of a dot, a reduce, an elementwise op
    over a tuple element, and an operand id that names no instruction."""
    from tb_perfdiag.analysis.efficiency.hlo_costs import HloProto
    F32, BF16 = 11, 16
    msg = HloProto()
    comps = msg.hlo_module.computations
    def ins(c, name, opcode, iid, dims, et=F32, ops=()):
        i = c.instructions.add(name=name, opcode=opcode, id=iid)
        i.shape.element_type = et
        i.shape.dimensions.extend(dims)
        i.operand_ids.extend(ops)
        return i
    inner = comps.add(name="inner", id=3)
    ins(inner, "q0", "parameter", 301, [16, 8], BF16)
    ins(inner, "q1", "parameter", 302, [8, 4], BF16)
    d = ins(inner, "dot.7", "dot", 303, [16, 4], BF16, ops=(301, 302))
    d.dot_dimension_numbers.lhs_contracting_dimensions.append(1)
    outer = comps.add(name="outer", id=2)
    ins(outer, "r0", "parameter", 201, [16, 8], BF16)
    ins(outer, "r1", "parameter", 202, [8, 4], BF16)
    f = ins(outer, "fusion.in", "fusion", 203, [16, 4], BF16, ops=(201, 202))
    f.called_computation_ids.append(3)
    ins(outer, "reduce.1", "reduce", 204, [16], ops=(203, 999))
    main = comps.add(name="main", id=1)
    ins(main, "m0", "parameter", 1, [16, 8], BF16)
    ins(main, "m1", "parameter", 2, [8, 4], BF16)
    t = ins(main, "tuple.1", "tuple", 3, [], ops=(1, 2))
    t.shape.element_type = 13
    for dims in ([16, 8], [8, 4]):
        t.shape.tuple_shapes.add(element_type=BF16).dimensions.extend(dims)
    ins(main, "multiply.2", "multiply", 4, [16, 8], BF16, ops=(1, 1, 777))
    fo = ins(main, "fusion.out", "fusion", 5, [16], ops=(1, 2))
    fo.called_computation_ids.append(2)
    return msg.SerializeToString()


def _hlo_protos_of_real_captures():
    import glob
    from conftest import SHARED
    base = os.path.join(SHARED, "cpu")
    if not os.path.isdir(base):          # the in-memory modules are checked all the same
        return []
    from tb_perfdiag.trace import load
    out = []
    for f in sorted(glob.glob(os.path.join(base, "**", "*.xplane.pb"), recursive=True)):
        out += list((load(f).metadata.get("hlo_protos") or {}).values())
    return out


def test_native_walk_of_an_hlo_module_gives_upb_figures():
    """Every instruction's (FLOPs, bytes, matmul, dtype, estimated, opaque target) from
    the native walk equals the one read instruction by instruction through upb: dots,
    convolutions, fusions (nested), reduces, tuples, custom calls (cuBLAS, cuDNN attention
    and convolution gradients, unknown targets), operands naming no instruction; on the
    real XLA:CPU and JAX captures too where ../shared is there.  A proto the walk refuses
    falls back to upb, which costs nothing it cannot read."""
    from tb_perfdiag.analysis.efficiency import hlo_costs as H
    from tb_perfdiag.trace.extension import native_fn
    walk = native_fn("hlo_instructions")
    if walk is None:
        pytest.skip("the C extension is not built (or TB_PERFDIAG_NO_NATIVE)")
    raws = [_hlo_module(), _fmha_module(), _nested_fusion_module()] + \
        _hlo_protos_of_real_captures()
    n = 0
    for raw in raws:
        native, upb = H._NativeModule(raw, walk), H._Module(raw)
        assert set(native.row) == set(upb._at)
        for name in upb._at:
            a, b = native.get(name), upb.get(name)
            assert a[2:] == b[2:], name
            assert a[0] == pytest.approx(b[0], rel=1e-12) and a[1] == pytest.approx(b[1]), name
            n += 1
    nest = H._NativeModule(_nested_fusion_module(), walk)
    # the dot, and the reduce of 16 × 4 to 16: its inputs less its outputs (XLA, xprof)
    assert nest.get("fusion.out")[0] == 2 * 16 * 4 * 8 + (16 * 4 - 16)
    assert nest.get("fusion.out")[2:4] == (True, DTYPES.index("bf16"))
    assert nest.get("multiply.2")[1] == 3 * 16 * 8 * 2               # two operands counted
    assert nest.get("tuple.1")[1] == 2 * (16 * 8 + 8 * 4) * 2
    assert n >= 20
    broken = _hlo_module()[:-7]
    with pytest.raises(ValueError):
        walk(broken, H._ELEMENT_SIZES)
    assert isinstance(H._module_of(broken), H._Module)


@pytest.mark.parametrize("traced", ["hlo", "xla_op_stats"])
def test_xspace_costs_a_block_at_a_time_fold_as_whole(traced, monkeypatch):
    """Where the costs are not found ahead (a trace too large to pair stages), an
    XSpace's ops are costed a block at a time, a margin each side: an op run as two
    kernels across a block's edge still counts once, and every sum is the whole's."""
    from tb_perfdiag.analysis.diagnosis import diagnose_trace
    from tb_perfdiag.analysis.efficiency import sums
    from tb_perfdiag.testing.xspace import Ref
    if traced == "hlo":
        w = XSpaceWriter()
        md = w.plane("/host:metadata", id=9)
        md.eid("jit_step(7)", md_stats=[("Hlo Proto", "b", _hlo_module())])
        gpu = w.plane("/device:GPU:0", id=1)
        ln = gpu.line(7, "Stream #7", timestamp_ns=0)
        st = {"hlo_module": Ref("jit_step"), "program_id": 7}
        t = 0
        for rep in range(5):
            for op, kname in (("dot.1", "gemm_kernel"), ("dot.1", "splitk_reduce"),
                              ("convolution.2", "conv_kernel"), ("fusion.3", "fused")):
                gpu.event(ln, kname, t, 500, stats=dict(st, hlo_op=op))
                t += 1000
        make = lambda: load_xspace(w)  # noqa: E731
    else:
        make = _tpu_trace
    whole = diagnose_trace(make()).efficiency
    monkeypatch.setattr(sums, "costs_ahead", lambda *a, **k: None)
    for block, pad in ((1, 1), (3, 1), (2, 4)):
        monkeypatch.setattr(sums, "BLOCK", block)
        monkeypatch.setattr(sums, "RUN_PAD", pad)
        got = diagnose_trace(make()).efficiency
        for name in ("flops", "bytes", "hw_flops", "mfu", "waterfall", "step_flops",
                     "row_flops", "row_bytes"):
            np.testing.assert_allclose(getattr(got, name), getattr(whole, name), rtol=1e-12,
                                       err_msg=f"{name} in blocks of {block}")
    assert np.nansum(whole.flops) > 0


def _padded_conv3d_module():
    """An HloProto of a padded 3-D convolution (NCDHW, OIDHW: size 3, pad 1 each side,
    stride 1), as an HLO op and as cuDNN's forward custom call, with the full dimension
    numbers and window XLA writes."""
    from tb_perfdiag.analysis.efficiency.hlo_costs import HloProto
    F32 = 11
    msg = HloProto()
    main = msg.hlo_module.computations.add(name="main", id=1)

    def ins(name, opcode, iid, dims, ops=()):
        i = main.instructions.add(name=name, opcode=opcode, id=iid)
        i.shape.element_type = F32
        i.shape.dimensions.extend(dims)
        i.operand_ids.extend(ops)
        return i

    def conv(i, stride=1, pad=1):
        cd = i.convolution_dimension_numbers
        cd.input_batch_dimension, cd.input_feature_dimension = 0, 1
        cd.input_spatial_dimensions.extend([2, 3, 4])
        cd.kernel_output_feature_dimension, cd.kernel_input_feature_dimension = 0, 1
        cd.kernel_spatial_dimensions.extend([2, 3, 4])
        cd.output_batch_dimension, cd.output_feature_dimension = 0, 1
        cd.output_spatial_dimensions.extend([2, 3, 4])
        for _ in range(3):
            i.window.dimensions.add(size=3, stride=stride, padding_low=pad, padding_high=pad,
                                    window_dilation=1, base_dilation=1)
    ins("x", "parameter", 1, [2, 4, 8, 8, 8])
    ins("w", "parameter", 2, [8, 4, 3, 3, 3])
    conv(ins("conv.pad", "convolution", 3, [2, 8, 8, 8, 8], (1, 2)))
    conv(ins("conv.valid", "convolution", 4, [2, 8, 6, 6, 6], (1, 2)), pad=0)
    conv(ins("conv.s2", "convolution", 5, [2, 8, 4, 4, 4], (1, 2)), stride=2)
    cc = ins("conv.cudnn", "custom-call", 6, [], (1, 2))
    cc.custom_call_target = "__cudnn$convForward"
    cc.shape.tuple_shapes.add(element_type=F32).dimensions.extend([2, 8, 8, 8, 8])
    cc.shape.tuple_shapes.add(element_type=6).dimensions.append(64)       # workspace
    conv(cc)
    return msg.SerializeToString()


def test_padded_convolution_counts_only_the_taps_that_read_the_input():
    """XLA's cost rule (HloCostAnalysis::HandleConvolution), which xprof's per-op FLOPs
    follow: a tap that falls in the padding does no work."""
    from tb_perfdiag.testing.xspace import Ref
    w = XSpaceWriter()
    md = w.plane("/host:metadata", id=9)
    md.eid("jit_conv(5)", md_stats=[("Hlo Proto", "b", _padded_conv3d_module())])
    host = w.plane("/host:CPU", id=1)
    ln = host.line(1, "tf_XLAEigen/1", timestamp_ns=0)
    names = ["conv.pad", "conv.valid", "conv.s2", "conv.cudnn"]
    for i, n in enumerate(names):
        host.event(ln, n, i * 1000, 500, stats={"hlo_op": n, "hlo_module": Ref("jit_conv"),
                                                 "program_id": 5})
    tr = load_xspace(w)
    c = op_costs(tr, tr.activity_of(0))
    got = {tr.event_name(int(e)): f for e, f in zip(c.event, c.flops)}
    per_tap = 2 * 2 * 4 * 8                 # batch × input features × output features
    # size 3, pad 1, 8 outputs: 8 × 3 taps less the 2 that fall in the padding = 22
    assert got["conv.pad"] == per_tap * 22 ** 3
    assert got["conv.pad"] < 2 * 2 * 8 * 8 ** 3 * 4 * 27 * 0.78     # the old count's 77 %
    assert got["conv.valid"] == per_tap * (6 * 3) ** 3              # no padding: k × o
    # stride 2, pad 1, 4 outputs: positions -1..5 by 2 for each tap; one in the padding
    assert got["conv.s2"] == per_tap * (4 * 3 - 1) ** 3
    assert got["conv.cudnn"] == got["conv.pad"]
