"""C.3: ``rdma.capable``, ``rdma.distance`` (the bus-distance rules) and ``rdma.numa``."""

from __future__ import annotations

import pytest

from api import constants
from nodeplugins.devicemanager.rdma.labels import Place, accelerator_places, bus_distance, rdma_labels

CAPABLE, DISTANCE, NUMA = (
    constants.LABEL_RDMA_CAPABLE,
    constants.LABEL_RDMA_DISTANCE,
    constants.LABEL_RDMA_NUMA,
)


def place(bus: str, root: str, switches: tuple[str, ...] = (), numa: str = "0") -> Place:
    return Place(bus, root, switches, numa)


@pytest.mark.parametrize(
    ("card", "nic", "want"),
    [
        # behind one innermost bridge
        (
            place("0000:02:00.0", "0000:00:01.0", ("0000:01:00.0", "0000:00:01.0")),
            place("0000:02:01.0", "0000:00:01.0", ("0000:01:00.0", "0000:00:01.0")),
            "PIX",
        ),
        # one bridge subtree, different innermost bridges
        (
            place("0000:03:00.0", "0000:00:02.0", ("0000:02:01.0", "0000:01:00.0", "0000:00:02.0")),
            place("0000:04:00.0", "0000:00:02.0", ("0000:02:02.0", "0000:01:00.0", "0000:00:02.0")),
            "PXB",
        ),
        # a deeper device under the other's innermost bridge: more than one bridge apart
        (
            place("0000:03:00.0", "0000:00:02.0", ("0000:02:01.0", "0000:01:00.0", "0000:00:02.0")),
            place("0000:02:00.0", "0000:00:02.0", ("0000:01:00.0", "0000:00:02.0")),
            "PXB",
        ),
        # no shared bridge, one NUMA node: PHB and NODE cannot be told apart, the further is said
        (
            place("0000:01:00.0", "0000:00:01.0", ("0000:00:01.0",)),
            place("0000:81:00.0", "0000:80:01.0", ("0000:80:01.0",)),
            "NODE",
        ),
        (
            place("0000:01:00.0", "0000:00:01.0", ("0000:00:01.0",), "0"),
            place("0000:81:00.0", "0000:80:01.0", ("0000:80:01.0",), "1"),
            "SYS",
        ),
        # no bridge at all: their own addresses are their roots, NUMA decides
        (place("0000:00:1f.6", "0000:00:1f.6"), place("0000:00:19.0", "0000:00:19.0"), "NODE"),
        # a missing coordinate is UNK, never a distance
        (place("0000:01:00.0", "0000:00:01.0", ("0000:00:01.0",)), Place(numa="0"), "UNK"),
        (Place(numa="0"), place("0000:01:00.0", "0000:00:01.0", ("0000:00:01.0",)), "UNK"),
        (
            place("0000:01:00.0", "0000:00:01.0", ("0000:00:01.0",), ""),
            place("0000:81:00.0", "0000:80:01.0", ("0000:80:01.0",), "0"),
            "UNK",
        ),
        (place("0000:01:00.0", ""), place("0000:02:00.0", "0000:00:01.0", ("0000:00:01.0",)), "UNK"),
    ],
)
def test_bus_distance(card, nic, want):
    assert bus_distance(card, nic) == want
    assert bus_distance(nic, card) == want  # a pair, not a direction
    assert want not in ("SELF", "LINK", "PHB")


def nic(name: str, **fields) -> dict:
    return {"name": name, "bus": "pci", **fields}


ROOT_A = {"pciRootId": "0000:00:01.0", "pciSwitches": ["0000:00:01.0"]}
ROOT_B = {"pciRootId": "0000:80:01.0", "pciSwitches": ["0000:80:01.0"]}


def test_capable_numa_and_the_closest_distance():
    interfaces = [
        nic("eth0", pciBusId="0000:81:00.0", numaAffinity="1", rdma=True, rdmaDevice="mlx5_1", **ROOT_B),
        nic("eth1", pciBusId="0000:02:00.0", numaAffinity="0", rdma=True, rdmaDevice="mlx5_0", **ROOT_A),
        nic("eth2", pciBusId="0000:03:00.0", numaAffinity="3"),  # no RDMA: not counted
    ]
    cards = [place("0000:01:00.0", "0000:00:01.0", ("0000:00:01.0",), "0")]
    assert rdma_labels(interfaces, cards) == {CAPABLE: "true", DISTANCE: "PIX", NUMA: "0_1"}


def test_numa_is_joined_by_underscore_in_numeric_order_and_omitted_when_unknown():
    many = [
        nic(f"eth{n}", rdma=True, rdmaDevice=f"mlx5_{n}", numaAffinity=numa)
        for n, numa in enumerate(["10", "2", "", "2"])
    ]
    assert rdma_labels(many, [])[NUMA] == "2_10"  # a comma would be dropped: {2,10} → 210
    blank = [nic("eth0", rdma=True, rdmaDevice="mlx5_0")]
    assert rdma_labels(blank, []) == {CAPABLE: "true"}  # no affinity read: no member asserted


def test_distance_is_omitted_on_a_node_without_accelerators():
    interfaces = [nic("eth0", pciBusId="0000:02:00.0", rdma=True, rdmaDevice="mlx5_0", **ROOT_A)]
    assert DISTANCE not in rdma_labels(interfaces, [])


def test_distance_is_unk_when_a_coordinate_is_missing():
    interfaces = [{"name": "ub0", "bus": "ub", "rdma": True, "rdmaDevice": "udma0", "numaAffinity": "0"}]
    cards = [place("0000:01:00.0", "0000:00:01.0", ("0000:00:01.0",), "0")]
    assert rdma_labels(interfaces, cards)[DISTANCE] == "UNK"


def test_no_usable_endpoint_withholds_every_rdma_key():
    interfaces = [
        nic("eth0", rdma=True, rdmaDevice="mlx5_0", numaAffinity="0", link={"state": "failed"}),
        nic("eth1", numaAffinity="0"),
        {"name": "lo", "virtual": True},
    ]
    assert rdma_labels(interfaces, [place("0000:01:00.0", "0000:00:01.0")]) == {}
    assert rdma_labels([], []) == {}


def test_a_broken_nic_beside_a_working_one_keeps_the_label():
    interfaces = [
        nic("eth0", rdma=True, rdmaDevice="mlx5_0", link={"state": "failed"}, numaAffinity="0"),
        nic("eth1", rdma=True, rdmaDevice="mlx5_1", link={"state": "ok"}, numaAffinity="1"),
    ]
    assert rdma_labels(interfaces, []) == {CAPABLE: "true", NUMA: "1"}


def test_an_unreadable_tree_counts_as_usable():
    interfaces = [nic("eth0", link={"state": "unverified", "reason": "cannot list"})]
    assert rdma_labels(interfaces, [])[CAPABLE] == "true"


def test_a_node_whose_only_rdma_devices_are_vfs_is_capable_and_vfs_measure_from_the_pf_path():
    pf = nic(
        "ens1f0",
        pciBusId="0000:02:00.0",
        numaAffinity="0",
        sriov=True,
        virtualFunctions=[
            {"name": "ens1f0v0", "pciBusId": "0000:02:00.2", "rdma": True, "rdmaDevice": "mlx5_2"},
            {
                "name": "ens1f0v1",
                "pciBusId": "0000:02:00.3",
                "numaAffinity": "1",
                "rdma": True,
                "rdmaDevice": "mlx5_3",
            },
        ],
        **ROOT_A,
    )
    cards = [place("0000:01:00.0", "0000:00:01.0", ("0000:00:01.0",), "0")]
    assert rdma_labels([pf], cards) == {CAPABLE: "true", DISTANCE: "PIX", NUMA: "0_1"}  # v0: PF's node


def test_accelerator_places_read_the_devices_topology():
    groups = [
        {
            "accelerators": [
                {
                    "topology": {
                        "pciBusId": "0000:01:00.0",
                        "pciRootId": "0000:00:01.0",
                        "pciSwitches": ["0000:00:01.0"],
                        "numaAffinity": "0",
                    }
                },
                {"topology": {"pciBusId": "0000:18:00.0", "pciRootId": "", "numaAffinity": ""}},
            ]
        }
    ]
    assert accelerator_places(groups) == [
        place("0000:01:00.0", "0000:00:01.0", ("0000:00:01.0",), "0"),
        Place("0000:18:00.0", "", (), ""),
    ]
