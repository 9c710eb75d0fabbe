#!/usr/bin/env bash
# Create .venv and install the project with its test extras; a no-op when nothing changed.
# Wheels come from PyPI through pip's cache (~/.cache/pip), so a second machine-local run is fast.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
stamp=.venv/.installed
want=$(cat pyproject.toml setup.py | sha256sum | cut -c1-16)
if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  # Sources may have changed since: rebuild the extensions in place (fast when nothing changed).
  .venv/bin/python setup.py -q build_ext --inplace >/dev/null
  .venv/bin/python -m nodeplugins.protos.generate
  exit 0
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip setuptools wheel "cython>=3.1,<3.4"
.venv/bin/python -m pip install -q -e '.[test]'
.venv/bin/python setup.py -q build_ext --inplace >/dev/null
# The node agents' gRPC modules, generated from nodeplugins/protos/**/*.proto (grpcio-tools).
.venv/bin/python -m nodeplugins.protos.generate
echo "$want" >"$stamp"
