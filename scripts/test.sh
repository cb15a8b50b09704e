#!/usr/bin/env bash
# Set up (see setup.sh), fetch the Spark jars (see fetch_jars.sh), lint, and run the test suite. Extra arguments go to
# pytest. Without arguments (CI, .ci/run), the suite runs in two pytest-xdist workers (DELTABERG_TEST_WORKERS), and
# tests/install runs a second time in .venv-floor (see setup_floor.sh): a plain install (no extras, no pyspark) on the
# lowest declared Airflow; that venv is built, and its tests run, while the main suite runs (niced: they take the
# CPU the two workers leave idle, e.g. once one of them has no module left). DELTABERG_FLOOR_TESTS=1 runs it with
# arguments too, =0 never.
set -euo pipefail
cd "$(dirname "$0")/.."
# Python caches the bytecode it compiles (.venv is installed without it, see setup.sh): the suite's first process to
# import a module compiles it, the hundreds started after it read it, also where the caller sets this.
unset PYTHONDONTWRITEBYTECODE
mkdir -p .cache
# The Spark jars tests/spark needs (cached in .jars/; Maven starts a JVM per artifact), fetched while .venv is set up.
scripts/fetch_jars.sh > .cache/fetch_jars.log 2>&1 &
jars=$!
# Headless Chromium for the browser test (skipped when installed), in the background too; the test waits for it.
scripts/install_chromium.sh > .cache/install_chromium.log 2>&1 &
scripts/setup.sh
floor=${DELTABERG_FLOOR_TESTS:-$([ $# -eq 0 ] && echo 1 || echo 0)}
if [ "$floor" = 1 ]; then
  # Its own basetemp: pytest's numbered folders under the default one are shared with the main run.
  (nice -n 10 scripts/setup_floor.sh && DELTABERG_FLOOR_VENV=1 exec nice -n 10 \
     .venv-floor/bin/python -m pytest \
     -p no:cacheprovider --basetemp=.cache/pytest-floor tests/install) > .cache/floor.log 2>&1 &
  floor_job=$!
fi
if ! wait "$jars"; then
  cat .cache/fetch_jars.log >&2
  exit 1
fi
.venv/bin/ruff check .
if [ $# -eq 0 ]; then
  # Two workers on CI's 2 cores: a single process keeps one core idle while its tests wait on JVMs and subprocesses.
  # A module is one unit of work (its module fixtures start once), handed out in collection order, where the modules
  # with Spark tests come first (tests/support/plugin.py); each worker has its own Airflow home and Spark session.
  set -- -n "${DELTABERG_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder
fi
status=0
.venv/bin/python -m pytest "$@" || status=$?
if [ $status != 0 ]; then
  # A full disk fails hundreds of tests at once (every tmp_path, every Spark shuffle): say how full it was.
  df -h . "${TMPDIR:-/tmp}" >&2 || true
fi
if [ "$floor" = 1 ]; then
  if wait "$floor_job"; then
    tail -n 1 .cache/floor.log
  else
    echo "tests/install in .venv-floor failed (.cache/floor.log):" >&2
    tail -n 80 .cache/floor.log >&2
    status=1
  fi
fi
exit $status
