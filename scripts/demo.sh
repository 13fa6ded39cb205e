#!/usr/bin/env bash
# Installs the plugin into .venv and starts TensorBoard with the Diagnose tab on the demo
# logdir: the bundled traces (synthetic GPU/TPU traces with known causes, real CPU captures)
# laid out most telling first by scripts/demo_logdir.py, so the tab opens on a GPU run
# that loses a third of its time to data loading.
#
#   PORT=6007 bash scripts/demo.sh          # another port (default 6006)
#   HOST=0.0.0.0 bash scripts/demo.sh       # listen beyond this machine (default 127.0.0.1)
#   bash scripts/demo.sh --bind_all         # extra arguments go to tensorboard; a --host
#                                           # or --bind_all of theirs replaces HOST
#   DEMO_LOGDIR=/tmp/demo PYTHON=python3.11 bash scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# the editable install only changes with the package's metadata or its C sources: a
# stamp of those skips the 30 s reinstall when nothing changed since the last start
STAMP=.venv/.tb_perfdiag_install
SUM=$( { cat setup.py MANIFEST.in native/*.c native/*.h 2>/dev/null || true; } | cksum)
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$SUM" ] || ! .venv/bin/python -c "import tb_perfdiag" 2>/dev/null; then
  .venv/bin/pip install -q -e .
  printf '%s' "$SUM" > "$STAMP"
fi
LOGDIR=${DEMO_LOGDIR:-.demo-logdir}
.venv/bin/python scripts/demo_logdir.py "$LOGDIR" >/dev/null
echo "tb-perfdiag is in .venv/bin (source .venv/bin/activate puts it on PATH):" \
     ".venv/bin/tb-perfdiag diagnose $LOGDIR/01_pytorch_gpu_input_bound" >&2
BIND=(--host "${HOST:-127.0.0.1}")
for a in "$@"; do
  case "$a" in --host|--host=*|--bind_all|--bind_all=*) BIND=() ;; esac
done
exec .venv/bin/tensorboard --logdir "$LOGDIR" --port "${PORT:-6006}" "${BIND[@]}" "$@"
