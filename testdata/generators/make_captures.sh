#!/usr/bin/env bash
# Regenerate the project's own real profiler captures in testdata/captures/.
#
#   bash testdata/generators/make_captures.sh            # all of them
#   ONLY="torch jax" bash testdata/generators/make_captures.sh   # a subset
#
# Pinned versions (one virtualenv per generator under .gen-venv/<name>/, git-ignored):
#   torch      torch==2.13.0 (CPU build)              numpy==2.4.6   -> captures/torch_cpu/
#   jax        jax==0.10.2 jaxlib==0.10.2             numpy==2.4.6   -> captures/jax_cpu/
#   jax_pod    the jax venv (+ protobuf==7.36.2 to rewrite and measure the XSpaces)
#              -> captures/jax_pod/<scenario>/ (4 processes, gloo all-reduce; ~1 min)
#   torch_xla  torch==2.9.0 torch_xla==2.9.0          numpy==2.4.6   -> captures/torch_xla_cpu/
#   torch_trend the torch venv -> captures/torch_trend_cpu/ (6 spans of one worker, repeat=6;
#              a data-loading stall in the third)
#   jax_conv   the jax venv    -> captures/jax_conv_cpu/ (padded 3-D and 2-D convolutions)
#   tf         tensorflow-cpu==2.21.0 tensorboard==2.21.0 numpy==2.4.6 (keras 3; TensorBoard for
#              Keras' profiling callback)   -> captures/tf_cpu/<capture>/
# Python 3.11 (python3 on PATH, or $PYTHON).
#
# Notes on the installs:
#  * torch 2.13.0 must be the CPU build.  On this workplace's machines pip finds
#    torch-2.13.0+cpu on local disk; elsewhere set TORCH_CPU_INDEX to a CPU wheel
#    index (passed to pip as --index-url).  The script refuses to go on when pip
#    would pull nvidia-* packages for that venv.
#  * torch_xla 2.9.0 needs torch 2.9.0, whose x86_64 PyPI wheel is the CUDA build:
#    about 4 GB of downloads (nvidia-* wheels; torch needs them to import), ~7 GB
#    in the venv.  The capture itself runs on PJRT CPU.
#  * Installs run one after the other (they are heavy on a 2-core machine).
#
# Each generator replaces only its own folder; MANIFEST.json keeps the entries of
# captures that were not regenerated.  Files in testdata/captures/ that belong to
# no capture are removed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
VENVS="$ROOT/.gen-venv"
GEN="testdata/generators"
CAPS="testdata/captures"
ONLY="${ONLY:-torch torch_flops torch_trend jax jax_pod jax_conv torch_xla tf}"
NUMPY_PIN="numpy==2.4.6"

declare -A PKGS=(
  [torch]="torch==2.13.0 $NUMPY_PIN"
  [jax]="jax==0.10.2 jaxlib==0.10.2 $NUMPY_PIN protobuf==7.36.2"
  [torch_xla]="torch==2.9.0 torch_xla==2.9.0 $NUMPY_PIN"
  [tf]="tensorflow-cpu==2.21.0 tensorboard==2.21.0 $NUMPY_PIN"
)
# name -> "module==version ..." that must import with exactly these versions
declare -A CHECK=(
  [torch]="torch==2.13.0+cpu numpy==2.4.6"
  [jax]="jax==0.10.2 jaxlib==0.10.2 numpy==2.4.6 google.protobuf==7.36.2"
  [torch_xla]="torch==2.9.0 torch_xla==2.9.0 numpy==2.4.6"
  [tf]="tensorflow==2.21.0 tensorboard==2.21.0 numpy==2.4.6"
)
declare -A SCRIPT=( [torch]=capture_torch.py [jax]=capture_jax.py [torch_xla]=capture_torch_xla.py
                    [tf]=capture_tf.py [jax_pod]=capture_jax_pod.py
                    [torch_flops]=capture_torch_flops.py [torch_trend]=capture_torch_trend.py
                    [jax_conv]=capture_jax_conv.py )
declare -A OUTDIR=( [torch]=torch_cpu [jax]=jax_cpu [torch_xla]=torch_xla_cpu [tf]=tf_cpu
                    [jax_pod]=jax_pod [torch_flops]=torch_flops_cpu
                    [torch_trend]=torch_trend_cpu [jax_conv]=jax_conv_cpu )
# generators that run in another one's venv
declare -A VENV=( [jax_pod]=jax [torch_flops]=torch [torch_trend]=torch [jax_conv]=jax )

log() { printf '\n== %s\n' "$*" >&2; }

have_versions() {  # venv_python "mod==ver ..."
  local py="$1"; shift
  "$py" - "$@" <<'EOF' >/dev/null 2>&1
import importlib, sys
for spec in sys.argv[1].split():
    mod, want = spec.split("==")
    got = importlib.import_module(mod).__version__
    if "+" not in want:
        got = got.split("+")[0]          # torch 2.9.0 from PyPI reports 2.9.0+cu128
    if got != want:
        sys.exit(1)
EOF
}

ensure_venv() {
  local name="$1" venv="$VENVS/$1" py="$VENVS/$1/bin/python"
  if [[ ! -x "$py" ]]; then
    log "creating venv $venv"
    "$PYTHON" -m venv "$venv"
  fi
  if have_versions "$py" "${CHECK[$name]}"; then
    log "venv $name already has ${CHECK[$name]}"
    return
  fi
  local extra=()
  if [[ "$name" == torch && -n "${TORCH_CPU_INDEX:-}" ]]; then
    extra=(--index-url "$TORCH_CPU_INDEX")
  fi
  if [[ "$name" == torch ]]; then
    # Refuse a CUDA build of torch 2.13.0 (several GB) before downloading anything.
    local report
    report="$("$py" -m pip install --dry-run --quiet --report - "${extra[@]}" ${PKGS[$name]})"
    if grep -q '"name": *"nvidia-' <<<"$report"; then
      echo "pip would install a CUDA build of torch for the 'torch' venv; set TORCH_CPU_INDEX" \
           "to a CPU wheel index (or make torch-2.13.0+cpu available to pip)" >&2
      exit 1
    fi
  fi
  log "installing into $name: ${PKGS[$name]}"
  "$py" -m pip install "${extra[@]}" ${PKGS[$name]}
  have_versions "$py" "${CHECK[$name]}" || { echo "venv $name lacks ${CHECK[$name]}" >&2; exit 1; }
}

GT_DIR="$(mktemp -d)"
trap 'rm -rf "$GT_DIR"' EXIT
mkdir -p "$CAPS"

declare -A ENSURED=()
for name in $ONLY; do
  [[ -n "${SCRIPT[$name]:-}" ]] || { echo "unknown generator: $name" >&2; exit 2; }
  venv="${VENV[$name]:-$name}"
  [[ -n "${ENSURED[$venv]:-}" ]] || ensure_venv "$venv"
  ENSURED[$venv]=1
done

for name in $ONLY; do
  log "capturing $name -> $CAPS/${OUTDIR[$name]}"
  env=()
  if [[ "$name" == torch_xla ]]; then
    env=(PJRT_DEVICE=CPU XLA_HLO_DEBUG=1 XLA_IR_DEBUG=1)
  fi
  env "${env[@]}" "$VENVS/${VENV[$name]:-$name}/bin/python" "$GEN/${SCRIPT[$name]}" \
      --out "$CAPS/${OUTDIR[$name]}" --ground-truth "$GT_DIR/$name.json"
done

log "writing $CAPS/MANIFEST.json"
"$PYTHON" - "$CAPS" "$GT_DIR" $ONLY <<'EOF'
import hashlib, json, os, shutil, sys

caps, gt_dir, names = sys.argv[1], sys.argv[2], sys.argv[3:]
OUTDIR = {"torch": "torch_cpu", "jax": "jax_cpu", "torch_xla": "torch_xla_cpu", "tf": "tf_cpu",
          "jax_pod": "jax_pod", "torch_flops": "torch_flops_cpu",
          "torch_trend": "torch_trend_cpu", "jax_conv": "jax_conv_cpu"}
SCRIPT = {"torch": "capture_torch.py", "jax": "capture_jax.py",
          "torch_xla": "capture_torch_xla.py", "tf": "capture_tf.py",
          "jax_pod": "capture_jax_pod.py", "torch_flops": "capture_torch_flops.py",
          "torch_trend": "capture_torch_trend.py", "jax_conv": "capture_jax_conv.py"}
path = os.path.join(caps, "MANIFEST.json")
old = {}
if os.path.exists(path):
    with open(path) as f:
        old = {c["name"]: c for c in json.load(f).get("captures", [])}

captures = dict(old)
for name in names:
    with open(os.path.join(gt_dir, name + ".json")) as f:
        gt = json.load(f)
    folder = OUTDIR[name]
    files = []
    for rel in gt.pop("files"):
        full = os.path.join(caps, folder, rel)
        with open(full, "rb") as fh:
            data = fh.read()
        files.append({"path": f"{folder}/{rel}", "bytes": len(data),
                      "sha256": hashlib.sha256(data).hexdigest()})
    captures[name] = {"name": name, "folder": folder,
                      "generator": f"testdata/generators/{SCRIPT[name]}",
                      "files": files, "ground_truth": gt}

# Drop whatever in testdata/captures belongs to no capture.
keep = {"MANIFEST.json"} | {c["folder"] for c in captures.values()}
for entry in os.listdir(caps):
    if entry not in keep:
        p = os.path.join(caps, entry)
        shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
for c in captures.values():
    listed = {f["path"] for f in c["files"]}
    for dirpath, _, fnames in os.walk(os.path.join(caps, c["folder"])):
        for fn in fnames:
            rel = os.path.relpath(os.path.join(dirpath, fn), caps)
            if rel not in listed:
                sys.exit(f"unlisted file in captures: {rel}")

order = [n for n in ("torch", "torch_flops", "torch_trend", "jax", "jax_pod", "jax_conv",
                     "torch_xla", "tf")
         if n in captures]
with open(path, "w") as f:
    json.dump({"about": "Real profiler captures made by this project's generators "
                        "(testdata/generators/make_captures.sh) on a CPU-only machine. "
                        "ground_truth is what each generator's program does by construction; "
                        "observed_compile_steps is what the framework reported in process.",
               "captures": [captures[n] for n in order]}, f, indent=2)
    f.write("\n")
total = sum(fi["bytes"] for c in captures.values() for fi in c["files"])
print(f"{len(captures)} captures, {total / 1e6:.2f} MB")
EOF
du -sh "$CAPS"
