#!/usr/bin/env bash
# Set up (see setup.sh), lint, and run the test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
