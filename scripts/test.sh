#!/usr/bin/env bash
# make test: four lanes at once, and the run fails if any of them fails (docs/testing.md).
#
#   lint        ruff, ruff format --check, mypy
#   e2e0..e2e2  tests/e2e in three lanes, each against its own local control plane (tests/cluster),
#               each taking the longest module not yet taken until none is left (lanequeue.py)
#   parallel    everything else on two pytest-xdist workers, a module to a worker (the store tests'
#               fixed ports differ per worker: tests/cluster/ports.py, tests/mooncake/conftest.py)
#
# An e2e lane waits on the control plane, kubelets and Kueue for most of its time (about 40 % of
# the machine's two cores measured alone), so the other lanes fill the idle time. Each lane writes
# .dev/test/<lane>.log and .dev/test/<lane>.xml (JUnit, for docs/testing.md's table); the logs are
# printed when all have ended. PYTEST_ADDOPTS reaches both pytest lanes; TEST_LANES=e2e (or
# "lint parallel") runs a subset.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=.dev/test
mkdir -p "$OUT"
rm -f "$OUT"/*.rc

# Bytecode and pytest's rewritten test modules are cached (this machine's environment turns the
# cache off): every pytest process and every worker the tests start would otherwise compile again.
export PYTHONDONTWRITEBYTECODE=
export PYTHONPYCACHEPREFIX="$PWD/.dev/pycache"

# The Go programs the suite starts (six kube-apiservers, etcd, Kueue, the kubelets, kubectl, helm)
# collect garbage at twice the heap growth of Go's default: over test_pool_fill.py and test_pools.py
# the kube-apiserver spent 75-77 CPU-seconds with GOGC=100 and 60 with 200 or 400, the machine
# 173-180 against 149-155 (docs/testing.md). Memory is not what the suite runs short of.
export GOGC=${GOGC:-200}

# Nothing may skip here: the machine `make test` prepared has every tool (tests/conftest.py).
export GPUSTACK_TEST_NO_SKIP=${GPUSTACK_TEST_NO_SKIP:-1}

lanes=${TEST_LANES:-lint e2e parallel}
started=$(date +%s)
e2e_lanes=()
case ${E2E_LANES:=3} in
1 | 2 | 3) ;;
*)
  echo "E2E_LANES must be 1, 2 or 3 (tests/cluster/ports.py has ports for three e2e lanes)" >&2
  exit 2
  ;;
esac
# Terminated: take every lane down with this script (its process group), not just the script.
trap 'trap - INT TERM; kill -TERM 0' INT TERM

run_lane() {
  local name=$1
  shift
  (
    local t0 rc
    t0=$(date +%s)
    "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    echo "$rc $(($(date +%s) - t0))" >"$OUT/$name.rc"
  ) &
}

for lane in $lanes; do
  case $lane in
  lint)
    # mypy's cache lives with the other caches, so a fresh clone checks only what changed (its
    # entries are keyed by each file's content: 16 CPU-seconds cold, under 1 s warm).
    run_lane lint bash -c '.venv/bin/ruff check . && .venv/bin/ruff format --check . >/dev/null &&
      .venv/bin/mypy --cache-dir "${GPUSTACK_CACHE:-$HOME/.cache/gpustack-operator}/mypy"'
    ;;
  e2e)
    # E2E_LANES lanes (default 3), each with its own control plane, ports and state dir, taking
    # modules from one queue, longest first, until none is left (tests/cluster/lanequeue.py).
    rm -rf "$OUT/e2e-queue"
    for ((i = 0; i < E2E_LANES; i++)); do
      run_lane "e2e$i" env GPUSTACK_E2E_SHARD="$i" GPUSTACK_E2E_QUEUE="$OUT/e2e-queue" \
        .venv/bin/python -m pytest -q -m e2e tests/e2e --durations=15 --junitxml="$OUT/e2e$i.xml"
      e2e_lanes+=("e2e$i")
    done
    ;;
  parallel)
    run_lane parallel .venv/bin/python -m pytest -q -m "not e2e" --ignore=tests/e2e -n 2 --dist loadfile \
      --durations=30 --junitxml="$OUT/parallel.xml"
    ;;
  *)
    echo "unknown lane: $lane (lint, e2e, parallel)" >&2
    exit 2
    ;;
  esac
done
wait

failed=0
summary=()
ran=()
for lane in $lanes; do
  if [ "$lane" = e2e ]; then ran+=("${e2e_lanes[@]}"); else ran+=("$lane"); fi
done
for lane in "${ran[@]}"; do
  read -r rc seconds <"$OUT/$lane.rc" || { rc=1 seconds=?; }
  echo
  echo "==================== lane $lane: exit $rc after ${seconds}s ($OUT/$lane.log) ===================="
  cat "$OUT/$lane.log"
  summary+=("$lane: exit $rc, ${seconds}s")
  [ "$rc" = 0 ] || failed=1
done
echo
echo "make test: $(($(date +%s) - started))s in all; ${summary[*]}"
exit $failed
