"""Fixtures for end-to-end tests against the local control plane (tests/cluster).

The session-scoped ``cluster`` fixture builds the upstream binaries if the
cache lacks them (tens of minutes the first time, see tests/cluster/README.md),
starts etcd, kube-apiserver, controller-manager, scheduler, Kueue and kwok once
per test run (reusing a cluster already running at the same state dir), and
stops it at the end only if it started it.

Environment:
  GPUSTACK_CLUSTER_DIR   state dir (default .dev/e2e; `make dev` uses .dev/cluster)
  GPUSTACK_*_PORT        the e2e ranges of tests/cluster/ports.py unless exported
  GPUSTACK_CLUSTER_KEEP  =1 leaves a cluster this run started running
  GPUSTACK_E2E_QUEUE     a directory the lanes of one run share: each runs the modules it takes
                         from it (tests/cluster/lanequeue.py), not all it collected
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cluster"))
import ports

# The e2e suite runs its own control plane (state dir and port block), so `make test` never
# disturbs a `make dev` cluster running beside it; exported values win.
for _name, _port in ports.e2e_block().items():
    os.environ.setdefault(f"GPUSTACK_{_name}_PORT", str(_port))
# The process node's Service stand-in, and the ports it hands its Pods (tests/cluster/chart.py).
os.environ.setdefault("GPUSTACK_HOST_SERVICE_PORT", str(ports.e2e("host")))
os.environ.setdefault("GPUSTACK_HOST_PORT_BASE", str(ports.e2e("host", 1)))
# Real kubelet nodes take three ports each from here (kubelet, its healthz, the device manager);
# kwok nodes' publish-only device managers one each.
os.environ.setdefault("GPUSTACK_NODE_PORT_BASE", str(ports.e2e("nodes")))
os.environ.setdefault("GPUSTACK_KWOK_DM_PORT_BASE", str(ports.e2e("kwok-dm")))
# Gate 3's Retry back-off (30 s, the spec's) configured short for the workers the tests start, so
# a Workload that lost a race for a card is placed again after 5 s (controllers/nodedevices/check.py).
os.environ.setdefault("GPUSTACK_NODE_DEVICES_RETRY_SECONDS", "5")
# Each e2e lane its own state dir: .dev/e2e, .dev/e2e1.
os.environ.setdefault(
    "GPUSTACK_CLUSTER_DIR", str(Path(__file__).resolve().parents[2] / ".dev" / ports.e2e_prefix())
)

import gpustack  # noqa: E402  (tests/cluster/gpustack.py)
import harness  # noqa: E402
import lanequeue  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    # Also declared in pyproject.toml; repeated so this dir works on its own.
    config.addinivalue_line("markers", "e2e: drives a real local control plane (tests/cluster)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """With GPUSTACK_E2E_QUEUE set (scripts/test.sh), run the modules this lane takes from the
    queue the lanes share (tests/cluster/lanequeue.py); else pytest's own loop."""
    queue = os.environ.get(lanequeue.ENV)
    return lanequeue.run(session, queue) if queue else None


@pytest.fixture(scope="session")
def cluster() -> harness.ClusterInfo:
    if shutil.which("go") is None and not harness.is_built():
        pytest.skip("e2e: no Go toolchain to build the control plane and no cached binaries")
    state_dir = harness.default_state_dir()
    keep = os.environ.get("GPUSTACK_CLUSTER_KEEP", "") in ("1", "true", "yes")
    if not harness.is_running(state_dir) and state_dir.exists():
        harness.stop(state_dir, purge=True)  # a stopped cluster's leftovers would leak into this run
    info = harness.start(state_dir)
    try:
        yield info
    finally:
        if info.started and not keep:
            harness.stop(state_dir, purge=True)


@pytest.fixture(scope="module")
def webhooks(cluster: harness.ClusterInfo):
    """The operator's CRDs and webhook configurations installed, and a worker serving the webhooks
    only (no controllers, so the objects a test writes are the only ones in play)."""
    op = gpustack.install(cluster)
    gpustack.start_worker(cluster, op, "--webhooks-only")
    try:
        yield op
    finally:
        gpustack.stop_worker(op)
        gpustack.uninstall_webhooks(cluster)


def ensure_namespace(cluster: harness.ClusterInfo, name: str) -> None:
    gpustack.ensure_namespace(cluster, name)
    harness.wait_for_default_service_account(cluster, name)
