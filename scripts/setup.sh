#!/usr/bin/env bash
# Create .venv and install the project with its test dependencies (idempotent, skipped when unchanged).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.deltaberg-installed
want=$(cat pyproject.toml scripts/setup.sh scripts/uv.sh | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setting up .venv (the first run takes a minute or two; log in .venv/install.log)" >&2
  # No --compile-bytecode: it compiled all 15k modules (33 of the 66 CPU s of a fresh .venv), the tests import ~3k of
  # them; scripts/test.sh and demo.sh let Python write what it compiles. pyspark is an sdist, built into a wheel of
  # 477 MB (its jars) at every install: stored, not deflated (11 CPU s instead of 30), for uv to unpack at once.
  if ! scripts/uv.sh .venv/bin/python pip install --python .venv/bin/python -e '.[test]' \
      --config-settings-package 'pyspark:--build-option=--compression=stored' \
      > .venv/install.log 2>&1
  then
    tail -n 40 .venv/install.log >&2
    exit 1
  fi
  echo "$want" > "$stamp"
fi
