# The two commands a newcomer needs are `make dev` and `make test`; the rest are parts of them.
SHELL := /bin/bash
PY := .venv/bin/python

help:                      ## list the targets, one line each
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z0-9-]+):.*## (.*)/\1\t\2/' | expand -t 18

.PHONY: help dev examples-check dev-down test test-unit test-e2e lint crds bench bench-report locust bootstrap cluster-binaries mooncake wrk images container-tools chromium

bootstrap:                 ## .venv with the project and its test and bench extras, extensions built in place
	@scripts/bootstrap.sh

cluster-binaries: bootstrap  ## kube-apiserver, etcd, kubectl, Kueue, kubelet, NFD... from Go modules (cached in ~/.cache); the chart's Kueue and NFD dependencies
	@tests/cluster/build.sh
	@tests/cluster/build-node.sh >/dev/null
	@$(PY) scripts/chart-dependencies.py >/dev/null

container-tools:           ## containerd, runc, CNI plugins, socat, mmdebstrap, umoci from Debian's packages
	@scripts/ensure-container-tools.sh

images: bootstrap cluster-binaries container-tools  ## the operator, ssh-server and pause images as OCI archives (images/build.py), cached by content
	@$(PY) -m images.build

wrk:                       ## the benchmark's load generator, from Debian's packages
	@scripts/ensure-wrk.sh

chromium:                  ## headless Chromium for the dashboard's browser test and benchmark, from Debian's packages
	@scripts/ensure-chromium.sh >/dev/null

mooncake:                  ## the real Mooncake master/member (PyPI wheel + Debian libibverbs1), cached in ~/.cache
	@scripts/ensure-mooncake.sh >/dev/null

dev: bootstrap cluster-binaries mooncake images   ## local control plane + simulated GPU nodes + the worker
	@scripts/dev-up.sh

examples-check: bootstrap cluster-binaries mooncake images  ## make dev, then a new user's `kubectl apply -f examples/`: every example ready and answering within 10 minutes (tests/cluster/examples_check.py)
	@scripts/dev-up.sh
	@$(PY) tests/cluster/examples_check.py

dev-down:                  ## stop everything `make dev` started
	@scripts/dev-down.sh

test: bootstrap cluster-binaries mooncake wrk images chromium  ## lint, the e2e lane (real control plane) and the parallel lane, at once
	@scripts/test.sh

test-unit: bootstrap mooncake wrk       ## unit and webhook tests only (no control plane)
	@TEST_LANES=parallel scripts/test.sh

test-e2e: bootstrap cluster-binaries mooncake images chromium  ## the e2e tests alone, against their own local control plane
	@TEST_LANES=e2e scripts/test.sh

lint: bootstrap            ## ruff and the type checker
	@.venv/bin/ruff check . && .venv/bin/ruff format --check .
	@.venv/bin/mypy

crds: bootstrap            ## regenerate charts/gpustack-operator/crds from the API models
	@.venv/bin/gpustack-operator crds --write charts/gpustack-operator/crds

bench: bootstrap wrk       ## webhook and fastpath benchmarks (prints figures, asserts nothing)
	@$(PY) -m loadtests.bench

SERIES ?= .dev/bench-series
REPORT ?= .dev/bench-report
bench-report: bootstrap    ## PNG plots (matplotlib) of the series the benchmarks wrote with --series-out .dev/bench-series, into .dev/bench-report (SERIES=, REPORT=)
	@$(PY) -m loadtests.report --series $(SERIES) --out $(REPORT)

locust: bootstrap          ## locust users headless against a local worker (zero failures expected)
	@$(PY) -m loadtests.run_locust
