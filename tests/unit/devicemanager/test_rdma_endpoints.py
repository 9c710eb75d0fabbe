"""C.4 and C.5: the mode read off the node, the tokens of each key, health and NUMA hints, and how
granted tokens map back to endpoints."""

from __future__ import annotations

import pytest

from api.manufacturers import RDMA_KEYS
from nodeplugins.devicemanager.rdma.endpoints import (
    EXCLUSIVE,
    PARTITIONED,
    SHARED,
    Refusal,
    endpoints,
    granted,
    keys,
    tokens,
)

PLAIN = {"name": "eth0", "rdma": True, "rdmaDevice": "mlx5_0", "numaAffinity": "0", "link": {"state": "ok"}}
BROKEN = {
    "name": "eth1",
    "rdma": True,
    "rdmaDevice": "mlx5_1",
    "numaAffinity": "1",
    "link": {"state": "failed"},
}
PF = {
    "name": "ens2f0",
    "rdma": True,
    "rdmaDevice": "mlx5_2",
    "numaAffinity": "1",
    "sriov": True,
    "virtualFunctions": [
        {"name": "ens2f0v0", "pciBusId": "0000:82:00.2", "rdma": True, "rdmaDevice": "mlx5_3"},
        {
            "name": "ens2f0v1",
            "pciBusId": "0000:82:00.3",
            "numaAffinity": "0",
            "rdma": True,
            "rdmaDevice": "mlx5_4",
        },
        {"name": "0000:82:00.4", "pciBusId": "0000:82:00.4"},  # no RDMA device bound: nothing to hand over
    ],
}
PF_NO_VFS = {"name": "ens3f0", "rdma": True, "rdmaDevice": "mlx5_5", "sriov": True}
NODE = [PLAIN, BROKEN, PF, PF_NO_VFS]


def test_keys_are_the_three_rdma_keys_and_the_switches_drop_families():
    assert [k.name for k in keys()] == list(RDMA_KEYS)
    assert [k.family for k in keys(shared=False, partitioned=False)] == [EXCLUSIVE]
    assert len({k.socket for k in keys()}) == 3


def test_the_mode_is_read_off_the_node():
    # a PF with VFs configured serves only partitioned; a PF without VFs is an ordinary interface
    assert [e.device for e in endpoints(NODE, EXCLUSIVE)] == ["mlx5_0", "mlx5_1", "mlx5_5"]
    assert [e.device for e in endpoints(NODE, SHARED)] == ["mlx5_0", "mlx5_1", "mlx5_5"]
    assert [e.device for e in endpoints(NODE, PARTITIONED)] == ["mlx5_3", "mlx5_4"]


def test_vfs_listed_without_the_sriov_fact_are_not_partitioned():
    odd = {**PF, "sriov": False}
    assert [e.device for e in endpoints([odd], PARTITIONED)] == []
    assert [e.device for e in endpoints([odd], EXCLUSIVE)] == ["mlx5_2"]


def test_tokens_per_endpoint():
    assert len(tokens(NODE, EXCLUSIVE)) == 3
    assert len(tokens(NODE, SHARED)) == 3 * 64
    assert len(tokens(NODE, PARTITIONED)) == 2  # one per VF with a device
    assert len({t for t, _h, _n in tokens(NODE, SHARED)}) == 192


def test_an_endpoint_without_a_device_name_is_advertised_in_no_mode():
    unreadable = {"name": "eth9", "link": {"state": "unverified", "reason": "tree unreadable"}}
    assert all(tokens([unreadable], family) == [] for family in (EXCLUSIVE, SHARED, PARTITIONED))


def test_no_capable_interface_advertises_zero():
    assert tokens([{"name": "lo", "virtual": True}], EXCLUSIVE) == []


def test_a_failed_link_keeps_its_tokens_unhealthy():
    health = {t: h for t, h, _n in tokens(NODE, SHARED)}
    assert health["mlx5_1:0"] is False and health["mlx5_1:63"] is False
    assert health["mlx5_0:0"] is True
    unverified = {**PLAIN, "link": {"state": "unverified"}}
    no_record = {k: v for k, v in PLAIN.items() if k != "link"}
    assert [h for _t, h, _n in tokens([unverified, no_record], EXCLUSIVE)] == [True]  # one device, once


def test_numa_hints_fall_back_to_the_pf_and_are_absent_when_unknown():
    hints = {t: n for t, _h, n in tokens(NODE, PARTITIONED)}
    assert hints == {"mlx5_3": "1", "mlx5_4": "0"}  # v0 blank: its PF's node
    assert {t: n for t, _h, n in tokens([PF_NO_VFS], EXCLUSIVE)} == {"mlx5_5": ""}  # no hint, not 0


def test_shared_tokens_of_one_endpoint_collapse():
    got = granted(NODE, SHARED, ["mlx5_0:3", "mlx5_0:9", "mlx5_5:0"])
    assert [e.device for e in got] == ["mlx5_0", "mlx5_5"]


@pytest.mark.parametrize(
    ("family", "token"),
    [
        (EXCLUSIVE, "mlx5_3"),
        (PARTITIONED, "mlx5_0"),
        (SHARED, "mlx5_0"),
        (SHARED, "mlx5_0:64"),
        (EXCLUSIVE, "nope"),
    ],
)
def test_a_token_of_no_endpoint_of_the_family_is_refused(family, token):
    with pytest.raises(Refusal, match=r"name no .* RDMA endpoint") as refused:
        granted(NODE, family, [token])
    assert repr(token) in str(refusal := refused.value) and "device.gpustack.ai/rdma" in str(refusal)
