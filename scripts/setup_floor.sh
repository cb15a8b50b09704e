#!/usr/bin/env bash
# Create .venv-floor: the package with NO extras on the lowest Airflow and Spark provider pyproject.toml declares
# (so no pyspark), plus what tests/install needs. Idempotent, skipped when unchanged (as scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=.venv-floor
# The declared floors (tests/install/test_floor.py checks these equal pyproject's), and structlog as Airflow
# 3.1.0's constraints file pins it: structlog 25.5 dropped `structlog.dev.Styles`, which Airflow 3.1.0 imports.
FLOOR=(apache-airflow==3.1.0 apache-airflow-providers-apache-spark==6.0.0 structlog==25.4.0)
# What the install tests use to build and read tables (never pyspark).
TEST=(pytest deltalake==1.6.6)
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
stamp=$VENV/.deltaberg-installed
want=$(cat pyproject.toml scripts/setup_floor.sh | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setting up $VENV (the lowest declared Airflow, no extras; log in $VENV/install.log)" >&2
  if ! { "$VENV/bin/python" -m pip install --upgrade pip \
         && "$VENV/bin/python" -m pip install -e . "${FLOOR[@]}" "${TEST[@]}"; } > "$VENV/install.log" 2>&1; then
    tail -n 40 "$VENV/install.log" >&2
    exit 1
  fi
  echo "$want" > "$stamp"
fi
