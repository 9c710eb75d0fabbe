"""The leader election against the real master (kv-cache spec §5.1 step 4, §6.1).

Two facts about ``mooncake_master`` 0.3.13.post1 from its PyPI wheel decide what can run here:

- the **Kubernetes Lease backend is not compiled in**: started with the election flags the operator
  renders, it exits at once with ``UNAVAILABLE_IN_CURRENT_MODE, backend_type=k8s`` (the backend image
  built for the operator carries it; this wheel does not), so the Lease election itself cannot run on
  this host and ``ElectionObserved`` is judged in e2e from a Lease the test writes in the store's place;
- its **etcd backend is**, and the election state machine above the lock is the same: two masters
  sharing one etcd elect one leader, the other stands by with ``service_ready: false`` and a 503
  segment listing, and takes over when the leader goes.  That is what the operator's readings rest
  on (readiness on the gated listing, ``LeaderAvailable`` from ``service_ready``), checked here
  against the etcd the local control plane builds.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from api import kvcache as kv
from controllers.kvcache import admin, backend_status
from controllers.kvcache import election_render as er
from tests.mooncake.conftest import port
from tests.webhooks.kvcache_objects import external

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
import harness
import mooncake


def test_the_wheel_refuses_the_rendered_lease_election(tmp_path: Path) -> None:
    flags = [
        a.replace("$(POD_IP)", "127.0.0.1")
        .replace("$(POD_NAME)", "leader-0")
        .replace("$(POD_NAMESPACE)", "ns")
        for a in er.election_args("mooncake-dram", "gpustack-system")
    ]
    master = mooncake.Master(
        tmp_path,
        rpc_port=port("HA_A_RPC"),
        admin_port=port("HA_A_ADMIN"),
        multi_tenancy=False,
        name="lease-master",
        extra_args=tuple(flags),
    )
    with pytest.raises(mooncake.StoreError) as exited:
        master.start()
    assert "UNAVAILABLE_IN_CURRENT_MODE, backend_type=k8s" in str(exited.value)


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[mooncake.Etcd]:
    binary = harness.bin_dir() / "etcd"
    if not harness.is_built() or not binary.exists():
        pytest.skip(
            "the store's etcd election needs the etcd the local control plane builds (tests/cluster/build.sh)"
        )
    server = mooncake.Etcd(
        tmp_path_factory.mktemp("mooncake-etcd"),
        binary=binary,
        client_port=port("HA_ETCD"),
        peer_port=port("HA_ETCD_PEER"),
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def electing(state: Path, name: str, rpc: int, admin_port: int, etcd: mooncake.Etcd) -> mooncake.Master:
    return mooncake.Master(
        state / name,
        rpc_port=rpc,
        admin_port=admin_port,
        multi_tenancy=False,
        name=name,
        extra_args=("-enable_ha=true", "-ha_backend_type=etcd", f"-ha_backend_connstring={etcd.endpoint}"),
    )


def judged(master: mooncake.Master) -> dict:
    """The backend status the operator derives from this master's admin address."""
    obj = external("ha", client=master.client_address, admin=master.admin_address)
    seen = backend_status.observe(admin.AdminClient(master.admin_address))
    return backend_status.derive(obj, seen, endpoints=[], pods=[], stamp="2026-01-01T00:00:00Z")


def conditions(status: dict) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status["conditions"]}


def test_a_standby_is_not_ready_and_takes_over(tmp_path: Path, etcd: mooncake.Etcd) -> None:
    first = electing(tmp_path, "ha-a", port("HA_A_RPC"), port("HA_A_ADMIN"), etcd)
    second = electing(tmp_path, "ha-b", port("HA_B_RPC"), port("HA_B_ADMIN"), etcd)
    first.start()  # the first to campaign wins
    try:
        second.start(ready=False)
        standby = harness.wait_for(
            lambda: (doc := second.health() or {}).get("leader_address") and doc,
            timeout=30,
            what="the leader's view",
        )
        assert (standby.get("role"), standby.get("service_ready")) == ("standby", False)
        assert standby["leader_address"] == first.client_address  # the winner's rpc_address:rpc_port
        assert mooncake.http_get(f"{second.admin_url}/get_all_segments")[0] == 503  # what readiness reads
        status = judged(second)
        assert status["phase"] == kv.PHASE_PROVISIONING and conditions(status)["LeaderAvailable"] == "False"
        assert "capacity" not in status
        assert conditions(judged(first))["LeaderAvailable"] == "True"
        first.stop()
        second.wait_ready(timeout=60)
        assert (second.health() or {}).get("role") == "leader"
        assert conditions(judged(second))["LeaderAvailable"] == "True"
    finally:
        second.stop()
        first.stop()
