#!/usr/bin/env bash
# Set up (see setup.sh), fetch the Spark jars (see fetch_jars.sh), lint, and run the test suite. Extra arguments go to
# pytest. Without arguments (CI, .ci/run), tests/install runs first a second time in .venv-floor (see setup_floor.sh):
# a plain install (no extras, no pyspark) on the lowest declared Airflow. DELTABERG_FLOOR_TESTS=1 runs it with
# arguments too, =0 never.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ "${DELTABERG_FLOOR_TESTS:-$([ $# -eq 0 ] && echo 1 || echo 0)}" = 1 ]; then
  scripts/setup_floor.sh
  DELTABERG_FLOOR_VENV=1 .venv-floor/bin/python -m pytest -p no:cacheprovider tests/install
fi
scripts/fetch_jars.sh >/dev/null  # the Spark jars tests/spark needs (cached in .jars/)
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
