#!/usr/bin/env bash
# What a fresh machine must already have before `make dev` / `make test` install the rest
# (README, "Prerequisites"). One line per missing thing; exit 1 if any is missing.
set -uo pipefail
cd "$(dirname "$0")/.."
missing=0
say() { echo "prerequisite missing: $*" >&2; missing=1; }

[ "$(uname -s)/$(uname -m)" = "Linux/x86_64" ] || say "a Linux amd64 machine (this is $(uname -s)/$(uname -m))"
PY=${PYTHON:-python3}
if ! command -v "$PY" >/dev/null; then
  say "python3 (3.11 or newer) on PATH"
elif ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  say "python3 3.11 or newer ($PY is $("$PY" -V 2>&1))"
elif ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
  say "python3's venv and ensurepip (Debian: apt-get install python3-venv)"
fi
command -v cc >/dev/null || command -v gcc >/dev/null || say "a C compiler for the Cython extensions (Debian: apt-get install gcc)"
"$PY" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null \
  || say "Python's headers for the Cython extensions (Debian: apt-get install python3-dev)"
want_go=$(grep -h '^go ' tests/cluster/*/go.mod | awk '{print $2}' | sort -V | tail -1)
if ! command -v go >/dev/null; then
  say "Go $want_go or newer on PATH (the control plane is built from its Go modules)"
else
  have_go=$(go env GOVERSION | sed 's/^go//')
  [ "$(printf '%s\n%s\n' "$want_go" "$have_go" | sort -V | head -1)" = "$want_go" ] \
    || say "Go $want_go or newer (this is $have_go)"
fi
for tool in git openssl curl; do command -v $tool >/dev/null || say "$tool on PATH"; done
command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null \
  || say "apt-get and dpkg-deb (wrk and libibverbs1 come from Debian's packages)"
[ "$(id -u)" = 0 ] || command -v sudo >/dev/null \
  || say "root, or sudo (real kubelet nodes, network namespaces and bind mounts need root)"
exit $missing
