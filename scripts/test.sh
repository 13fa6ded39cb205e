#!/usr/bin/env bash
# Installs everything the tests need into .venv and runs the whole suite.
# Used verbatim by .ci/run. Exits non-zero on any failure, including "no tests collected".
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null
.venv/bin/pip install -q -e '.[test]'
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
      || echo "warning: could not install chromium; browser tests will say why"
  else
    echo "warning: /usr/bin/chromium missing and not root; browser tests will skip (fail under CI=true)"
  fi
fi
mkdir -p test-artifacts
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" = 5 ]; then echo "error: no tests were collected"; exit 1; fi
[ "$rc" = 0 ] || exit "$rc"
# the other end of the supported protobuf range: readers and server again on protobuf 6.31
LOW=.venv-protobuf-low
[ -x $LOW/bin/python ] || "$PY" -m venv $LOW
$LOW/bin/pip install -q -e '.[test]' 'protobuf==6.31.1'
$LOW/bin/python -c "import google.protobuf as p; print('protobuf', p.__version__)"
$LOW/bin/python -m pytest tests/test_readers.py tests/test_server.py $(ls tests/test_native_scan.py 2>/dev/null)
