#!/usr/bin/env bash
# Set up (see setup.sh), fetch the Spark jars (see fetch_jars.sh), lint, and run the test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/fetch_jars.sh >/dev/null  # the Spark jars tests/spark needs (cached in .jars/)
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
