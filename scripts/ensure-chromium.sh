#!/usr/bin/env bash
# Headless Chromium for the dashboard's browser tests and benchmark (tests/e2e/test_gateway.py,
# loadtests/bench_dashboard.py): Debian's chromium package (apt caches the .deb under
# /var/cache/apt). Idempotent: nothing to do once /usr/bin/chromium runs. Prints its path.
set -euo pipefail
found() { command -v chromium >/dev/null && chromium --version >/dev/null 2>&1; }
if ! found; then
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >/dev/null 2>&1 ||
    { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >/dev/null; }
fi
found
command -v chromium
