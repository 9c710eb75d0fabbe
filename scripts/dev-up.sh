#!/usr/bin/env bash
# make dev: the local control plane, simulated GPU nodes and the worker (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python tests/cluster/dev.py up
