#!/usr/bin/env bash
# The benchmark's load generator, from Debian's packages (apt caches the .deb under /var/cache/apt).
set -euo pipefail
command -v wrk >/dev/null && exit 0
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
$SUDO apt-get install -y -q wrk >/dev/null 2>&1 || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q wrk >/dev/null; }
command -v wrk >/dev/null
