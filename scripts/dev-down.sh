#!/usr/bin/env bash
# make dev-down: stop what make dev started.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python tests/cluster/dev.py down
