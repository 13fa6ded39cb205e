#!/usr/bin/env bash
# Installs the plugin into .venv and starts TensorBoard with the Diagnose tab on the
# bundled demo logdir (real CPU captures + synthetic GPU/TPU traces from testdata/).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q -e . tensorboard-plugin-profile
exec .venv/bin/tensorboard --logdir testdata --port "${PORT:-6006}" --bind_all "$@"
