#!/usr/bin/env bash
# Headless Chromium from Debian's packages for the browser test (tests/deployment): skipped when /usr/bin/chromium
# is there; needs root (apt-get). Playwright drives it; no browser is downloaded by anything else. Idempotent.
# While it runs, .cache/install_chromium.lock exists: the test waits for it instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x /usr/bin/chromium ] && exit 0
mkdir -p .cache
lock=.cache/install_chromium.lock
touch "$lock"
trap 'rm -f "$lock"' EXIT
if [ "$(id -u)" != 0 ]; then
  echo "install_chromium.sh: not root, cannot apt-get install chromium (the browser test will skip outside CI)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core
