#!/usr/bin/env bash
# The demo: the event-driven example DAG run end to end with dag.test() on a Delta table it writes under .demo/,
# then again after an append (see scripts/demo.py). Sets up .venv first (see setup.sh). Spark runs locally through
# spark-submit: it needs Java 17, no extra jars (the regeneration reads the Delta log with Spark's own readers).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${JAVA_HOME:-}" ] && ! command -v java >/dev/null 2>&1; then
  echo "the demo runs Spark, which needs Java 17: put java on the PATH or set JAVA_HOME" >&2
  exit 1
fi
unset PYTHONDONTWRITEBYTECODE  # Python caches what it compiles (setup.sh installs .venv without bytecode)
scripts/setup.sh
.venv/bin/python scripts/demo.py
