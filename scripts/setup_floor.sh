#!/usr/bin/env bash
# Create .venv-floor: the package with NO extras on the lowest Airflow and Spark provider pyproject.toml declares
# (so no pyspark), plus what tests/install needs. Idempotent, skipped when unchanged (as scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=.venv-floor
# The declared floors (tests/install/test_plain_install.py checks they equal pyproject's), and the libraries that
# broke Airflow 3.1.0 since its release, held at releases of its time, as its constraints file would (Airflow is
# meant to be installed with one; that file was not reachable from here to copy its exact pins):
# structlog 25.5 dropped `structlog.dev.Styles`, which 3.1.0 imports; FastAPI from 0.118 (which cadwyn 6+ needs) no
# longer reads the execution API's JSON bodies sent without a content type (dag.test() fails with a 422).
FLOOR=(apache-airflow==3.1.0 apache-airflow-providers-apache-spark==6.0.0 structlog==25.4.0 fastapi==0.117.1
       cadwyn==5.4.6)
# What the install tests use to build and read tables (never pyspark).
TEST=(pytest deltalake==1.6.6)
if [ ! -x "$VENV/bin/python" ]; then
  # Without pip (ensurepip costs ~9 CPU s; uv installs into it): uv itself comes from .cache, or from .venv's pip.
  "$PYTHON" -m venv --without-pip "$VENV"
fi
pip_python=$PYTHON
if [ -x .venv/bin/python ]; then
  pip_python=.venv/bin/python
fi
stamp=$VENV/.deltaberg-installed
want=$(cat pyproject.toml scripts/setup_floor.sh scripts/uv.sh | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setting up $VENV (the lowest declared Airflow, no extras; log in $VENV/install.log)" >&2
  # No --compile-bytecode (unlike setup.sh): compiling all of it took 24 CPU s of the 28 this install costs, and only
  # tests/install runs here, whose processes import a small part; scripts/test.sh lets them write what they compile.
  if ! scripts/uv.sh "$pip_python" pip install --python "$VENV/bin/python" -e . \
      "${FLOOR[@]}" "${TEST[@]}" \
      > "$VENV/install.log" 2>&1; then
    tail -n 40 "$VENV/install.log" >&2
    exit 1
  fi
  echo "$want" > "$stamp"
fi
