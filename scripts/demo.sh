#!/usr/bin/env bash
# Set up (see setup.sh) and run the demo on a table it writes under .demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/python scripts/demo.py "$@"
