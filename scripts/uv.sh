#!/usr/bin/env bash
# scripts/uv.sh PYTHON ARGS...: run `uv ARGS...`, installing uv first (from PyPI, with PYTHON's pip, a venv's) into
# .cache/uv-<version> when it is not there yet. setup.sh and setup_floor.sh install with `uv pip install`: the same
# pins as pip resolves, fetched and unpacked in parallel (a fresh .venv in about a minute instead of two to four).
# pip's settings of the environment carry over: find-links and the certificate bundle.
set -euo pipefail
cd "$(dirname "$0")/.."
UV_VERSION=0.13.9
dir=.cache/uv-$UV_VERSION
python=$1
shift
if [ ! -x "$dir/bin/uv" ]; then
  rm -rf "$dir.partial"
  "$python" -m pip install --quiet --disable-pip-version-check --target "$dir.partial" "uv==$UV_VERSION"
  rm -rf "$dir"
  mv "$dir.partial" "$dir"
fi
if [ -n "${PIP_FIND_LINKS:-}" ] && [ -z "${UV_FIND_LINKS:-}" ]; then
  export UV_FIND_LINKS=$PIP_FIND_LINKS
fi
if [ -n "${PIP_CERT:-}" ] && [ -z "${SSL_CERT_FILE:-}" ]; then
  export SSL_CERT_FILE=$PIP_CERT
fi
exec "$dir/bin/uv" "$@"
