"""The RDMA half as the agent composes it: what the ``Devices`` spec and the NodeFeature carry (a
read that failed withholds nothing, links that all fail withhold every ``rdma.`` key), the cards'
coordinates from the same PCI walk, and ``device-manager detect`` printing the same pass."""

from __future__ import annotations

import json

from api import constants
from gpustack_operator import cli
from nodeplugins.devicemanager import devices
from nodeplugins.devicemanager.inventory import Card, Inventory
from nodeplugins.devicemanager.publisher import devices_object
from nodeplugins.devicemanager.rdma.service import RdmaService
from nodeplugins.devicemanager.simulation.sysfs import DOWN, SysfsTree

PUBLISHED = {
    constants.LABEL_RDMA_CAPABLE: "true",
    constants.LABEL_RDMA_NUMA: "0",
    "acceleratable.feature.gpustack.ai/nvidia": "true",
}
NODE = {"metadata": {"name": "n1", "uid": "u1"}}


def tree_with_one_nic(root, ports=None) -> SysfsTree:
    tree = SysfsTree(root)
    tree.bridge("0000:00:01.0", numa=0)
    tree.accelerator("0000:18:00.0", under="0000:00:01.0", numa=0)
    tree.nic(
        "rdma0",
        "0000:19:00.0",
        under="0000:00:01.0",
        numa=0,
        rdma="mlx5_0",
        **({"ports": ports} if ports else {}),
    )
    return tree


def service(root) -> RdmaService:
    return RdmaService(root, facts=dict)  # no links here: link facts are another test's


def test_while_nothing_is_known_the_published_rdma_labels_stay(tmp_path):
    rdma = service(tmp_path / "missing")  # no class/net: the pass fails
    assert rdma.refresh() is False
    assert rdma.spec_interfaces() is None
    assert rdma.labels([], PUBLISHED) == {
        constants.LABEL_RDMA_CAPABLE: "true",
        constants.LABEL_RDMA_NUMA: "0",
    }
    body = devices_object(NODE, [], {}, rdma.spec_interfaces())
    assert "interfaces" not in body["spec"]  # nothing known: the field is not touched


def test_a_seeded_list_survives_a_failing_pass(tmp_path):
    rdma = service(tmp_path / "missing")
    rdma.seed(
        {"spec": {"groups": [], "interfaces": [{"name": "eth0", "rdma": True, "rdmaDevice": "mlx5_0"}]}}
    )
    assert rdma.refresh() is False
    assert rdma.labels([], {}) == {constants.LABEL_RDMA_CAPABLE: "true"}
    assert devices_object(NODE, [], {}, rdma.spec_interfaces())["spec"]["interfaces"] == [
        {"name": "eth0", "rdma": True, "rdmaDevice": "mlx5_0"}
    ]


def test_labels_with_the_cards_coordinates_from_the_same_walk(tmp_path):
    tree = tree_with_one_nic(tmp_path / "sys")
    rdma = service(tree.root)
    assert rdma.refresh() is True
    places = rdma.pci_places(["0000:18:00.0", "0000:1a:00.0"])
    assert list(places) == ["0000:18:00.0"]
    card = Card("GPU-1", 0, 0, "NVIDIA A10G", 23028, pci_bus_id="00000000:18:00.0", numa="0")
    inventory = Inventory("nvidia", cards=(card,))
    groups = devices.spec_groups(inventory, {}, places)
    topology = groups[0]["accelerators"][0]["topology"]
    assert topology["pciRootId"] == "0000:00:01.0" and topology["pciSwitches"] == ["0000:00:01.0"]
    assert rdma.labels(groups, {}) == {
        constants.LABEL_RDMA_CAPABLE: "true",
        constants.LABEL_RDMA_DISTANCE: "PIX",
        constants.LABEL_RDMA_NUMA: "0",
    }
    unplaced = devices.spec_groups(inventory, {})[0]["accelerators"][0]["topology"]
    assert unplaced["pciRootId"] == "" and "pciSwitches" not in unplaced  # unknown, not made up
    assert rdma.labels(devices.spec_groups(inventory, {}), {})[constants.LABEL_RDMA_DISTANCE] == "UNK"


def test_links_that_all_fail_withhold_every_rdma_key(tmp_path):
    tree = tree_with_one_nic(tmp_path / "sys", ports=[DOWN])
    rdma = service(tree.root)
    assert rdma.refresh() is True
    assert rdma.labels([], PUBLISHED) == {}  # the publisher stops sending them: they are deleted


def test_detect_prints_the_interfaces_and_rdma_labels_of_the_same_pass(tmp_path, capsys):
    tree = tree_with_one_nic(tmp_path / "sys")
    profile = tmp_path / "node.yaml"
    profile.write_text("manufacturer: nvidia\ncards:\n  - {product: NVIDIA A10G, count: 1}\n")
    argv = [
        "dm",
        "detect",
        "--manufacturer",
        "nvidia",
        "--simulate",
        str(profile),
        "--sysfs-root",
        str(tree.root),
    ]
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    [rdma0] = out["spec"]["interfaces"]
    assert rdma0["name"] == "rdma0" and rdma0["rdmaDevice"] == "mlx5_0" and rdma0["link"] == {"state": "ok"}
    # the simulated card sits at 0000:18:00.0, which this tree holds behind the NIC's bridge
    assert out["spec"]["groups"][0]["accelerators"][0]["topology"]["pciRootId"] == "0000:00:01.0"
    assert out["labels"][constants.LABEL_RDMA_DISTANCE] == "PIX"
