#!/usr/bin/env bash
# Set up (see setup.sh), lint, and run the test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/ruff check airflow_deltaberg tests benchmarks dags_examples scripts
.venv/bin/python -m pytest "$@"
