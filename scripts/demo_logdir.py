"""Lays out the demo logdir: the bundled traces under names that sort the most telling
example first, so the Diagnose tab opens on a GPU run losing a third of its time to data
loading, not on a CPU-only capture.

    python scripts/demo_logdir.py DEST      # DEST is emptied of earlier demo runs first

Files are hard-linked where the filesystem allows (copied otherwise), so the demo costs
no space and never writes into testdata/.
"""
from __future__ import annotations

import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYN = os.path.join(ROOT, "testdata", "synthetic", "logdir")
CAP = os.path.join(ROOT, "testdata", "captures")

# (demo run name, source folder): most telling first (a GPU run losing a third to its input,
# then a pod whose hosts wait for one); real CPU captures, then host-only last
ORDER = [
    ("01_pytorch_gpu_input_bound", os.path.join(SYN, "kineto_data_loading")),
    # a real 4-process JAX job (gloo all-reduce): three hosts wait ~30 ms a step for host2's input
    ("01b_real_jax_pod_straggler", os.path.join(CAP, "jax_pod", "data_loading_straggler")),
    ("02_tpu_input_bound", os.path.join(SYN, "xla_tpu_data_loading")),
    ("03_pytorch_gpu_nonzero_sync", os.path.join(SYN, "kineto_sync_nonzero")),
    ("04_xla_gpu_recompilation", os.path.join(SYN, "xla_gpu_recompile")),
    ("05_tpu_two_devices_h2d_collective", os.path.join(SYN, "xla_tpu_two_devices")),
    ("06_pytorch_gpu_h2d_copy", os.path.join(SYN, "kineto_h2d_copy")),
    ("07_pytorch_gpu_launch_bound", os.path.join(SYN, "kineto_launch_bound")),
    ("10_real_torch_xla_cpu", os.path.join(CAP, "torch_xla_cpu")),
    ("11_real_jax_cpu", os.path.join(CAP, "jax_cpu")),
    ("12_real_tf_data_input_bound_cpu", os.path.join(CAP, "tf_cpu", "input_bound")),
    ("13_real_pytorch_cpu_host_only", os.path.join(CAP, "torch_cpu")),
]


def _place(src: str, dst: str) -> None:
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def build(dest: str) -> list:
    """Writes the demo runs under ``dest``; returns their folder names in order."""
    os.makedirs(dest, exist_ok=True)
    names = []
    for name, src in ORDER:
        if not os.path.isdir(src):
            continue
        out = os.path.join(dest, name)
        shutil.rmtree(out, ignore_errors=True)
        for dirpath, _, files in os.walk(src):
            for f in files:
                if not f.endswith((".xplane.pb", ".json", ".json.gz")):
                    continue          # the Profile plugin's caches are its own to write
                s = os.path.join(dirpath, f)
                _place(s, os.path.join(out, os.path.relpath(s, src)))
        names.append(name)
    return names


if __name__ == "__main__":
    if len(sys.argv) > 2 or sys.argv[1:2] and sys.argv[1].startswith("-"):
        # an option is no folder to lay out (``--help`` once made a folder of that name)
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        sys.exit(0 if sys.argv[1] in ("-h", "--help") else 2)
    dest = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, ".demo-logdir")
    for n in build(dest):
        print(n)
