#!/usr/bin/env bash
# Installs everything the tests need into .venv and runs the whole suite.
# Used verbatim by .ci/run. Exits non-zero on any failure, including "no tests collected".
#
#   bash scripts/test.sh               everything, then readers and server on protobuf 6.31
#   bash scripts/test.sh --quick       the edit-test loop: no browser, server, subprocess or
#                                      real-trace sweeps (tests marked `slow`), no second pass
#   bash scripts/test.sh tests/x.py    any pytest arguments pass through
#
# The tests run in parallel (pytest-xdist, one worker per CPU; TEST_WORKERS=N sets how many,
# 0 runs them in this one process). --dist worksteal hands each worker a contiguous half of
# the files and lets an idle one take tests from the end of the other's: a file's tests mostly
# stay on one worker, so its module-scoped servers and browsers start about once.
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=
if [ "${1:-}" = "--quick" ]; then QUICK=1; shift; fi
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null
.venv/bin/pip install -q -e '.[test]'
if [ ! -x /usr/bin/chromium ] && [ -z "$QUICK" ]; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
      || echo "warning: could not install chromium; browser tests will say why"
  else
    echo "warning: /usr/bin/chromium missing and not root; browser tests will skip (fail under CI=true)"
  fi
fi
mkdir -p test-artifacts
PARALLEL=(-n "${TEST_WORKERS:-logical}" --dist worksteal)
check() {   # pytest's exit status 5 is "no tests were collected": a failure here
  local rc=$1
  if [ "$rc" = 5 ]; then echo "error: no tests were collected"; exit 1; fi
  [ "$rc" = 0 ] || exit "$rc"
}
set +e
.venv/bin/python -m pytest "${PARALLEL[@]}" ${QUICK:+--quick} "$@"
check $?
set -e
[ -z "$QUICK" ] || exit 0
# the other end of the supported protobuf range: readers and server again on protobuf 6.31
LOW=.venv-protobuf-low
[ -x $LOW/bin/python ] || "$PY" -m venv $LOW
$LOW/bin/pip install -q -e '.[test]' 'protobuf==6.31.1'
$LOW/bin/python -c "import google.protobuf as p; print('protobuf', p.__version__)"
set +e
$LOW/bin/python -m pytest "${PARALLEL[@]}" tests/test_readers.py tests/test_server.py \
  $(ls tests/test_native_scan.py 2>/dev/null)
check $?
