"""C.1 on sysfs trees built here (:mod:`nodeplugins.devicemanager.simulation.sysfs`) and real links in
a network namespace created here: the interface records (PCI coordinates, NUMA, CPU list, SR-IOV
VFs nested under their PF, the RDMA binding and its verdict, MTU and state through pyroute2), the
refusals (a symlink out of the root, a 1 GiB attribute), and the recorded list across passes
(sorted, first-seen kept, a failed enumeration keeps it, an empty one empties it)."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from nodeplugins.devicemanager.rdma.discovery import EnumerationError, discover, pci_place
from nodeplugins.devicemanager.rdma.inventory import Interfaces
from nodeplugins.devicemanager.rdma.netlink import LinkReader, NetlinkError, link_facts
from nodeplugins.devicemanager.rdma.pci import Coordinates
from nodeplugins.devicemanager.rdma.sysfs import Sysfs
from nodeplugins.devicemanager.simulation.sysfs import ACTIVE, DOWN, SysfsTree
from tests import netns

NS = f"gps-rdma-unit-{os.getpid()}"


@pytest.fixture(scope="module")
def links():
    """rdma0 (MTU 4000, up), rdma1 (down) and rdma2v0 (MTU 9000, up), each with a peer, in a
    namespace of this module's own."""
    why = netns.available()
    if why:
        pytest.skip(why)
    with netns.namespace(NS) as ns:
        ns.veth("rdma0", "rdma0p", mtu=4000)
        ns.veth("rdma1", "rdma1p", up=False)
        ns.veth("rdma2v0", "rdma2v0p", mtu=9000)
        yield ns


def build(root) -> SysfsTree:
    tree = SysfsTree(root)
    tree.bridge("0000:00:01.0", numa=0)
    tree.bridge("0000:01:00.0", under="0000:00:01.0", numa=0)
    tree.bridge("0000:02:08.0", under="0000:01:00.0", numa=0)
    tree.bridge("0000:02:10.0", under="0000:01:00.0", numa=0)
    tree.accelerator("0000:03:00.0", under="0000:02:08.0", numa=0)
    tree.nic("rdma0", "0000:04:00.0", under="0000:02:10.0", numa=0, cpulist="0-7", rdma="mlx5_0")
    tree.bridge("0000:80:01.0", numa=1)
    tree.nic("rdma1", "0000:81:00.0", under="0000:80:01.0", numa=1, rdma="mlx5_1", ports=[DOWN, DOWN])
    tree.bridge("0000:80:02.0", numa=1)
    tree.nic("rdma2", "0000:82:00.0", under="0000:80:02.0", numa=1, cpulist="8-15", rdma="mlx5_2")
    tree.sriov("0000:82:00.0")
    tree.vf("0000:82:00.0", "0000:82:00.3", rdma="mlx5_4", numa=1)  # no netdev (e.g. moved away)
    tree.vf("0000:82:00.0", "0000:82:00.2", name="rdma2v0", rdma="mlx5_3")
    tree.virtual("lo")
    # an interface on another bus: no PCI function behind it
    tree.write("devices/platform/ub.0/uevent", "")
    tree.write("bus/platform/drivers_autoprobe", "1")
    tree.link("devices/platform/ub.0/subsystem", "bus/platform")
    tree.netdev("ub0", Path("devices/platform/ub.0"))
    return tree


def by_name(records):
    return {r["name"]: r for r in records}


def test_the_interfaces_as_recorded(tmp_path, links):
    build(tmp_path / "sys")
    records = discover(Sysfs(tmp_path / "sys"), link_facts(NS))
    assert [r["name"] for r in records] == ["lo", "rdma0", "rdma1", "rdma2", "ub0"]  # VFs nested only
    got = by_name(records)
    assert got["rdma0"] == {
        "name": "rdma0",
        "bus": "pci",
        "pciBusId": "0000:04:00.0",
        "pciRootId": "0000:00:01.0",  # the outermost bridge, not the root complex pci0000:00
        "pciSwitches": ["0000:02:10.0", "0000:01:00.0", "0000:00:01.0"],  # innermost first
        "pciVendor": "15b3",
        "pciDevice": "101d",
        "numaAffinity": "0",
        "cpuAffinity": "0-7",
        "mtu": 4000,  # from netlink
        "up": True,
        "rdma": True,
        "rdmaDevice": "mlx5_0",
        "link": {"state": "ok"},
    }
    assert "up" not in got["rdma1"] and got["rdma1"]["link"]["state"] == "failed"
    assert "'1: DOWN'" in got["rdma1"]["link"]["reason"]
    assert got["lo"] == {"name": "lo", "virtual": True, "mtu": 65536}  # recorded and marked, not dropped
    assert got["ub0"] == {"name": "ub0", "bus": "platform"}  # its own bus, no PCI field


def test_vfs_are_nested_under_their_pf(tmp_path, links):
    build(tmp_path / "sys")
    pf = by_name(discover(Sysfs(tmp_path / "sys"), link_facts(NS)))["rdma2"]
    assert pf["sriov"] is True and pf["rdmaDevice"] == "mlx5_2" and pf["numaAffinity"] == "1"
    assert pf["pciRootId"] == "0000:80:02.0" and pf["pciSwitches"] == ["0000:80:02.0"]
    assert pf["virtualFunctions"] == [  # by address; the PF's path is not repeated on them
        {
            "name": "rdma2v0",
            "pciBusId": "0000:82:00.2",
            "mtu": 9000,
            "up": True,
            "rdma": True,
            "rdmaDevice": "mlx5_3",
            "link": {"state": "ok"},
        },
        {
            "name": "0000:82:00.3",  # no netdev here: named by its address
            "pciBusId": "0000:82:00.3",
            "numaAffinity": "1",
            "rdma": True,
            "rdmaDevice": "mlx5_4",
            "link": {"state": "ok"},
        },
    ]


def test_a_pf_without_vfs_configured_is_still_a_pf(tmp_path):
    tree = SysfsTree(tmp_path / "sys")
    tree.nic("ens1", "0000:01:00.0", rdma="mlx5_0")
    tree.sriov("0000:01:00.0")
    [record] = discover(Sysfs(tree.root), {})
    assert record["sriov"] is True and "virtualFunctions" not in record
    assert record["pciRootId"] == "0000:01:00.0" and "pciSwitches" not in record  # no bridge above it


def test_two_passes_over_unchanged_hardware_are_equal(tmp_path, links):
    build(tmp_path / "sys")
    sysfs = Sysfs(tmp_path / "sys")
    assert discover(sysfs, link_facts(NS)) == discover(sysfs, link_facts(NS))


def test_a_device_link_escaping_the_root_is_refused_and_logged_not_followed(tmp_path, caplog):
    tree = SysfsTree(tmp_path / "sys")
    outside = tmp_path / "elsewhere"
    (outside / "infiniband/mlx5_9/ports/1").mkdir(parents=True)
    (outside / "numa_node").write_text("3\n")
    function = tree.function("0000:05:00.0")
    net = function / "net/evil0"
    (tree.root / net).mkdir(parents=True)
    os.symlink(str(outside), tree.root / net / "device")
    tree.link("class/net/evil0", net)
    with caplog.at_level(logging.ERROR, logger="devicemanager.rdma.sysfs"):
        [record] = discover(Sysfs(tree.root), {})
    assert record == {"name": "evil0"}  # nothing read from outside: no NUMA 3, no mlx5_9
    assert any("points outside the sysfs root" in r.reason for r in caplog.records if hasattr(r, "reason"))


def test_an_rdma_tree_that_cannot_be_read_is_unverified_and_unbound(tmp_path):
    tree = SysfsTree(tmp_path / "sys")
    function = tree.nic("eth0", "0000:01:00.0")
    os.symlink("/proc", tree.root / function / "infiniband")
    [record] = discover(Sysfs(tree.root), {})
    assert "rdma" not in record and record["link"]["state"] == "unverified"
    assert "could not be read" in record["link"]["reason"]


def test_a_1_gib_attribute_leaves_its_field_unknown(tmp_path, caplog):
    tree = SysfsTree(tmp_path / "sys")
    function = tree.nic("eth0", "0000:01:00.0", numa=0, rdma="mlx5_0")
    with (tree.root / function / "numa_node").open("wb") as f:
        f.truncate(1 << 30)
    with (tree.root / function / "infiniband/mlx5_0/ports/1/state").open("wb") as f:
        f.truncate(1 << 30)
    with caplog.at_level(logging.ERROR, logger="devicemanager.rdma.sysfs"):
        [record] = discover(Sysfs(tree.root), {})
    assert "numaAffinity" not in record  # unknown, never 0
    assert record["link"]["state"] == "unverified"  # an unreadable port is no "down"
    assert "larger than 64 KiB" in record["link"]["reason"]
    assert sum(r.getMessage() == "sysfs read refused" for r in caplog.records) == 2


def test_active_defer_is_not_active(tmp_path):
    tree = SysfsTree(tmp_path / "sys")
    tree.nic("eth0", "0000:01:00.0", rdma="mlx5_0", ports=[("5: ACTIVE_DEFER", "5: LinkUp")])
    [record] = discover(Sysfs(tree.root), {})
    assert record["link"]["state"] == "failed"


def test_the_accelerators_coordinates_come_from_the_same_walk(tmp_path):
    build(tmp_path / "sys")
    sysfs = Sysfs(tmp_path / "sys")
    assert pci_place(sysfs, "0000:03:00.0") == Coordinates(
        "0000:03:00.0", "0000:00:01.0", ("0000:02:08.0", "0000:01:00.0", "0000:00:01.0")
    )
    assert pci_place(sysfs, "0000:18:00.0") is None  # not in this tree
    assert pci_place(sysfs, "../../etc") is None


def test_an_unlistable_class_net_is_an_enumeration_failure(tmp_path):
    tree = SysfsTree(tmp_path / "sys")
    with pytest.raises(EnumerationError, match="class/net does not exist"):
        discover(Sysfs(tree.root), {})
    os.symlink("/etc", tree.root / "class")
    with pytest.raises(EnumerationError, match="cannot be listed"):
        discover(Sysfs(tree.root), {})


class Clock:
    def __init__(self) -> None:
        self.minute = 0

    def __call__(self) -> str:
        self.minute += 1
        return f"2026-01-01T00:{self.minute:02d}:00Z"


def test_the_recorded_list_across_passes(tmp_path, links, caplog):
    tree = build(tmp_path / "sys")
    interfaces = Interfaces(Sysfs(tree.root), NS, clock=Clock())
    assert interfaces.recorded is None
    assert interfaces.refresh() is True
    first = interfaces.current()
    failed_since = by_name(first)["rdma1"]["link"]["firstSeenTime"]
    assert failed_since == "2026-01-01T00:01:00Z"
    assert interfaces.refresh() is False  # unchanged hardware, a later clock: equal after the merge
    assert by_name(interfaces.current())["rdma1"]["link"]["firstSeenTime"] == failed_since
    # the enumeration fails: the recorded list is kept, logged at error
    shutil.move(tree.root / "class/net", tmp_path / "net-away")
    with caplog.at_level(logging.ERROR, logger="devicemanager.rdma"):
        assert interfaces.refresh() is False
    assert interfaces.current() == first and interfaces.failures == 1
    assert any("keeping the recorded list" in r.getMessage() for r in caplog.records)
    shutil.move(tmp_path / "net-away", tree.root / "class/net")
    # the link heals: the first-seen time goes with the failure
    tree.set_ports(tree.place("0000:81:00.0"), "mlx5_1", [ACTIVE])
    assert interfaces.refresh() is True
    assert by_name(interfaces.current())["rdma1"]["link"] == {"state": "ok"}
    # a pass that enumerated and found nothing records the empty list
    for entry in (tree.root / "class/net").iterdir():
        entry.unlink()
    assert interfaces.refresh() is True and interfaces.current() == [] and interfaces.recorded == []


def test_a_failing_netlink_keeps_the_list_and_creates_no_namespace(tmp_path):
    tree = SysfsTree(tmp_path / "sys")
    tree.virtual("lo")
    missing = f"gps-rdma-missing-{os.getpid()}"
    with pytest.raises(NetlinkError):
        link_facts(missing)
    assert not os.path.exists(f"/var/run/netns/{missing}")
    interfaces = Interfaces(Sysfs(tree.root), missing)  # the agent's reader: one socket kept
    assert interfaces.refresh() is False and interfaces.recorded is None
    assert not os.path.exists(f"/var/run/netns/{missing}")
    interfaces.seed([{"name": "eth0", "mtu": 1500}])
    assert interfaces.refresh() is False and interfaces.current() == [{"name": "eth0", "mtu": 1500}]


def test_seed_takes_the_live_list_once_and_refuses_a_malformed_one(tmp_path):
    interfaces = Interfaces(Sysfs(tmp_path), "")
    interfaces.seed([{"name": "eth0", "mtu": "lots"}])  # wrong-typed: ignored, logged
    assert interfaces.recorded is None
    interfaces.seed("not a list")
    assert interfaces.recorded is None
    interfaces.seed([{"name": "eth0", "link": {"state": "failed", "firstSeenTime": "2026-01-01T00:00:00Z"}}])
    interfaces.seed([{"name": "eth1"}])
    assert interfaces.current() == [
        {"name": "eth0", "link": {"state": "failed", "firstSeenTime": "2026-01-01T00:00:00Z"}}
    ]


def test_garbage_attributes_are_unknown_not_copied(tmp_path):
    tree = SysfsTree(tmp_path / "sys")
    function = tree.nic("eth0", "0000:01:00.0", numa=0, cpulist="0-3", rdma="mlx5_0")
    tree.write(function / "local_cpulist", "not a cpu list")
    tree.write(function / "numa_node", "zero")
    tree.write(function / "vendor", "0xZZZZ")
    tree.write(function / "infiniband/mlx5_0/ports/1/state", "X" * 5000)
    [record] = discover(Sysfs(tree.root), {})
    assert "cpuAffinity" not in record and "numaAffinity" not in record and "pciVendor" not in record
    assert record["link"]["state"] == "failed" and len(record["link"]["reason"]) < 300  # raw, but cut


def test_a_strange_rdma_device_name_is_not_bound(tmp_path):
    tree = SysfsTree(tmp_path / "sys")
    function = tree.nic("eth0", "0000:01:00.0")
    (tree.root / function / "infiniband" / "mlx5 0,evil").mkdir(parents=True)
    [record] = discover(Sysfs(tree.root), {})
    assert "rdmaDevice" not in record and record["link"]["state"] == "unverified"


def test_one_socket_serves_every_pass_and_sees_changes(links):
    reader = LinkReader(NS)
    try:
        assert reader()["rdma0"].up is True
        links.set("rdma0", "mtu", "4100")
        assert reader()["rdma0"].mtu == 4100  # the same socket, a fresh dump
        links.set("rdma0", "mtu", "4000")
    finally:
        reader.close()
