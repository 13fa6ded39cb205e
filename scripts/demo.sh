#!/usr/bin/env bash
# Installs the plugin into .venv and starts TensorBoard with the Diagnose tab on the demo
# logdir: the bundled traces (synthetic GPU/TPU traces with known causes, real CPU captures)
# laid out most telling first by scripts/demo_logdir.py, so the tab opens on a GPU run
# that loses a third of its time to data loading.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q -e .
LOGDIR=${DEMO_LOGDIR:-.demo-logdir}
.venv/bin/python scripts/demo_logdir.py "$LOGDIR" >/dev/null
echo "tb-perfdiag is in .venv/bin (source .venv/bin/activate puts it on PATH):" \
     ".venv/bin/tb-perfdiag diagnose $LOGDIR/01_pytorch_gpu_input_bound" >&2
exec .venv/bin/tensorboard --logdir "$LOGDIR" --port "${PORT:-6006}" --bind_all "$@"
