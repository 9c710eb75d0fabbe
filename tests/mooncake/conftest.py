"""The real Mooncake master on loopback (tests/cluster/mooncake.py), for the admin-API reader.

Ports come from ``GPUSTACK_MOONCAKE_<NAME>_PORT`` (RPC, ADMIN, MEMBER, MEMBER_HTTP, SPARE_RPC,
SPARE_ADMIN; the disk tier's TIER_RPC, TIER_ADMIN, TIER_MEMBER_HTTP and TIER_LIMIT_{RPC,ADMIN,
MEMBER_HTTP}; the election's HA_ETCD,
HA_ETCD_PEER, HA_A_RPC, HA_A_ADMIN, HA_B_RPC, HA_B_ADMIN); the defaults come from the "store-tests" range of tests/cluster/ports.py.  The binaries are installed on first use by
``scripts/ensure-mooncake.sh`` (cached under ~/.cache).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
import mooncake
import ports

# Each store port from the "store-tests" range of tests/cluster/ports.py, in this order.
NAMES = (
    "RPC",
    "ADMIN",
    "MEMBER",
    "MEMBER_HTTP",
    "SPARE_RPC",
    "SPARE_ADMIN",
    "TIER_RPC",
    "TIER_ADMIN",
    "TIER_MEMBER_HTTP",
    "TIER_LIMIT_RPC",
    "TIER_LIMIT_ADMIN",
    "TIER_LIMIT_MEMBER_HTTP",
    "HA_ETCD",
    "HA_ETCD_PEER",
    "HA_A_RPC",
    "HA_A_ADMIN",
    "HA_B_RPC",
    "HA_B_ADMIN",
    "DOOMED_RPC",
    "DOOMED_ADMIN",
    "SEEDED_RPC",
    "SEEDED_ADMIN",
)
# pytest-xdist's workers (make test's parallel lane) each take their own 50 of the range.
WORKER_PORTS = 50
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
assert len(NAMES) <= WORKER_PORTS
DEFAULTS = {name: ports.port("store-tests", WORKER_PORTS * _WORKER + i) for i, name in enumerate(NAMES)}


def port(name: str) -> int:
    return mooncake.port(name, DEFAULTS[name])


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[mooncake.Master, mooncake.Member]]:
    """A multi-tenant master with one member mounting a 64 MiB DRAM segment."""
    state = tmp_path_factory.mktemp("mooncake")
    master = mooncake.Master(state, rpc_port=port("RPC"), admin_port=port("ADMIN"))
    member = mooncake.Member(state, master=master, port=port("MEMBER"), http_port=port("MEMBER_HTTP"))
    master.start(fresh_policy=True)
    try:
        member.start()
        yield master, member
    finally:
        member.stop()
        master.stop()


@pytest.fixture(scope="module")
def single_tenant(tmp_path_factory: pytest.TempPathFactory) -> Iterator[mooncake.Master]:
    """A master started without multi-tenancy (no ledger)."""
    state = tmp_path_factory.mktemp("mooncake-single")
    master = mooncake.Master(
        state,
        rpc_port=port("SPARE_RPC"),
        admin_port=port("SPARE_ADMIN"),
        multi_tenancy=False,
        name="single-master",
    )
    master.start()
    try:
        yield master
    finally:
        master.stop()
