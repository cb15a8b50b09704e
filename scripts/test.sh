#!/usr/bin/env bash
# Set up (see setup.sh), fetch the Spark jars (see fetch_jars.sh), lint, and run the test suite. Extra arguments go to
# pytest. Without arguments (CI, .ci/run), tests/install runs a second time in .venv-floor (see setup_floor.sh): a
# plain install (no extras, no pyspark) on the lowest declared Airflow; that venv is built while the main suite runs
# (its install is mostly download and unpacking). DELTABERG_FLOOR_TESTS=1 runs it with arguments too, =0 never.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
floor=${DELTABERG_FLOOR_TESTS:-$([ $# -eq 0 ] && echo 1 || echo 0)}
if [ "$floor" = 1 ]; then
  mkdir -p .cache
  scripts/setup_floor.sh > .cache/setup_floor.log 2>&1 &
  floor_setup=$!
fi
scripts/fetch_jars.sh >/dev/null  # the Spark jars tests/spark needs (cached in .jars/)
.venv/bin/ruff check .
status=0
.venv/bin/python -m pytest "$@" || status=$?
if [ "$floor" = 1 ]; then
  if ! wait "$floor_setup"; then
    cat .cache/setup_floor.log >&2
    exit 1
  fi
  DELTABERG_FLOOR_VENV=1 .venv-floor/bin/python -m pytest -p no:cacheprovider tests/install || status=$?
fi
exit $status
