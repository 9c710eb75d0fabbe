"""C.5 and C.6 over real gRPC on unix sockets, with the stand-in kubelet registration server of
``test_plugin_grpc``: the three RDMA keys registered (zero devices when nothing is capable), tokens
with health and NUMA hints, health re-sent when a link fails, ``Allocate`` handing each endpoint's
``uverbs`` node (either sysfs layout), ``rdma_cm`` once and ``NCCL_IB_HCA``, the refusals, and
re-registration after a kubelet restart."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import grpc
import pytest

from api.manufacturers import RDMA_KEYS
from nodeplugins.devicemanager.kubelet import KubeletLink
from nodeplugins.devicemanager.plugin import Watchers, pb, pb_grpc
from nodeplugins.devicemanager.rdma.endpoints import EXCLUSIVE, PARTITIONED, SHARED, keys
from nodeplugins.devicemanager.rdma.inventory import Interfaces
from nodeplugins.devicemanager.rdma.plugin import RdmaPlugin
from nodeplugins.devicemanager.rdma.sysfs import Sysfs
from nodeplugins.devicemanager.simulation.sysfs import DOWN, SysfsTree, character_devices
from tests.unit.devicemanager.test_plugin_grpc import Kubelet, wait


def no_links() -> dict:
    return {}


@pytest.fixture
def node():
    """Sockets and the sysfs tree under one short directory (unix paths are limited to 107 bytes)."""
    base = Path(tempfile.mkdtemp(prefix="rd", dir="/tmp"))
    tree = SysfsTree(base / "sys")
    tree.nic("rdma0", "0000:01:00.0", numa=0, rdma="mlx5_0")  # uverbs0
    tree.nic("rdma1", "0000:81:00.0", numa=1, rdma="mlx5_1", ports=[DOWN])  # uverbs1, failed
    tree.nic("rdma2", "0000:82:00.0", numa=1, rdma="mlx5_2")  # uverbs2
    tree.sriov("0000:82:00.0")
    tree.vf("0000:82:00.0", "0000:82:00.2", name="rdma2v0", rdma="mlx5_3")  # uverbs3, PF's NUMA
    tree.vf("0000:82:00.0", "0000:82:00.3", name="rdma2v1", rdma="mlx5_4")  # uverbs4
    tree.nic("rdma3", "0000:83:00.0", rdma="mlx5_5")  # uverbs5: only under its parent (below)
    (tree.root / "class/infiniband_verbs/uverbs5").unlink()
    function = tree.function("0000:84:00.0")
    tree.netdev("rdma4", function)
    tree.rdma(function, "mlx5_6", verbs=False)  # no verbs device at all
    character_devices(base / "dev", 6)
    plugin_dir = base / "dp"
    plugin_dir.mkdir()
    kubelet = Kubelet(plugin_dir / "kubelet.sock")
    kubelet.start()
    interfaces = Interfaces(Sysfs(tree.root), facts=no_links)
    interfaces.refresh()
    watchers = Watchers()
    plugins = [RdmaPlugin(k, interfaces.current, interfaces.sysfs, base / "dev", watchers) for k in keys()]
    link = KubeletLink(plugins, kubelet.socket, poll=0.1)
    link.start()
    wait(lambda: len(kubelet.requests) == 3)
    yield {"base": base, "tree": tree, "kubelet": kubelet, "plugins": plugins, "interfaces": interfaces,
           "watchers": watchers}  # fmt: skip
    link.stop()
    watchers.close()
    kubelet.server.stop(0)
    shutil.rmtree(base, ignore_errors=True)


def stub(node, family: str):
    plugin = next(p for p in node["plugins"] if p.resource.family == family)
    channel = grpc.insecure_channel(f"unix://{node['base'] / 'dp' / plugin.resource.socket}")
    return channel, pb_grpc.DevicePluginStub(channel)


def listed(node, family: str):
    channel, dp = stub(node, family)
    stream = dp.ListAndWatch(pb.Empty())
    first = next(stream)
    return channel, stream, {d.ID: (d.health, [n.ID for n in d.topology.nodes]) for d in first.devices}


def allocate(node, family: str, ids: list[str]):
    channel, dp = stub(node, family)
    try:
        return dp.Allocate(
            pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)])
        ).container_responses[0]
    finally:
        channel.close()


def test_the_three_keys_register_without_preferred_allocation(node):
    assert [r.resource_name for r in node["kubelet"].requests] == list(RDMA_KEYS)
    assert not any(r.options.get_preferred_allocation_available for r in node["kubelet"].requests)


def test_tokens_health_and_numa_hints(node):
    channel, _s, exclusive = listed(node, EXCLUSIVE)
    assert exclusive == {
        "mlx5_0": ("Healthy", [0]),
        "mlx5_1": ("Unhealthy", [1]),  # a failed link keeps its token, Unhealthy
        "mlx5_5": ("Healthy", []),  # no NUMA node known: no hint, never node 0
        "mlx5_6": ("Healthy", []),
    }
    channel.close()
    channel, _s, shared = listed(node, SHARED)
    assert len(shared) == 4 * 64 and shared["mlx5_0:63"] == ("Healthy", [0])
    channel.close()
    channel, _s, partitioned = listed(node, PARTITIONED)
    assert partitioned == {"mlx5_3": ("Healthy", [1]), "mlx5_4": ("Healthy", [1])}  # the PF's node
    channel.close()


def test_health_is_re_sent_when_a_link_fails(node):
    channel, stream, before = listed(node, EXCLUSIVE)
    assert before["mlx5_0"][0] == "Healthy"
    node["tree"].set_ports(node["tree"].place("0000:01:00.0"), "mlx5_0", [DOWN])
    assert node["interfaces"].refresh()
    node["watchers"].bump()
    update = {d.ID: d.health for d in next(stream).devices}
    assert update["mlx5_0"] == "Unhealthy" and len(update) == 4
    channel.close()


def test_allocate_hands_each_verbs_node_rdma_cm_once_and_nccl_ib_hca(node):
    dev = node["base"] / "dev" / "infiniband"
    answer = allocate(node, SHARED, ["mlx5_0:4", "mlx5_0:17", "mlx5_5:0"])
    devices = [(d.container_path, d.host_path, d.permissions) for d in answer.devices]
    assert devices == [
        ("/dev/infiniband/uverbs0", str(dev / "uverbs0"), "rw"),
        ("/dev/infiniband/uverbs5", str(dev / "uverbs5"), "rw"),  # found under its hardware parent
        ("/dev/infiniband/rdma_cm", str(dev / "rdma_cm"), "rw"),
    ]  # two shared tokens of one interface: one endpoint; never the /dev/infiniband directory
    assert dict(answer.envs) == {"NCCL_IB_HCA": "mlx5_0,mlx5_5"}
    vf = allocate(node, PARTITIONED, ["mlx5_4"])
    assert [d.container_path for d in vf.devices] == ["/dev/infiniband/uverbs4", "/dev/infiniband/rdma_cm"]
    assert dict(vf.envs) == {"NCCL_IB_HCA": "mlx5_4"}


def test_rdma_cm_is_handed_only_where_the_host_has_it(node):
    (node["base"] / "dev/infiniband/rdma_cm").unlink()
    answer = allocate(node, EXCLUSIVE, ["mlx5_0"])
    assert [d.container_path for d in answer.devices] == ["/dev/infiniband/uverbs0"]


@pytest.mark.parametrize(
    ("family", "ids", "fragment"),
    [
        (EXCLUSIVE, ["mlx5_6"], "neither"),  # no verbs device: both layouts named
        (EXCLUSIVE, ["mlx5_3"], "name no exclusive RDMA endpoint"),  # a VF: partitioned only
        (PARTITIONED, ["mlx5_0"], "name no partitioned RDMA endpoint"),
        (SHARED, ["mlx5_0"], "name no shared RDMA endpoint"),
    ],
)
def test_refusals_are_failed_precondition(node, family, ids, fragment):
    with pytest.raises(grpc.RpcError) as refused:
        allocate(node, family, ids)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert fragment in refused.value.details()
    if fragment == "neither":
        assert (
            "class/infiniband_verbs" in refused.value.details()
            and "infiniband_verbs;" in refused.value.details()
        )


def test_a_node_without_rdma_registers_every_key_with_zero_devices():
    base = Path(tempfile.mkdtemp(prefix="rd", dir="/tmp"))
    try:
        tree = SysfsTree(base / "sys")
        tree.virtual("lo")
        tree.nic("eth0", "0000:01:00.0")
        kubelet = Kubelet(base / "kubelet.sock")
        kubelet.start()
        interfaces = Interfaces(Sysfs(tree.root), facts=no_links)
        interfaces.refresh()
        watchers = Watchers()
        plugins = [
            RdmaPlugin(k, interfaces.current, interfaces.sysfs, base / "dev", watchers) for k in keys()
        ]
        link = KubeletLink(plugins, kubelet.socket, poll=0.1)
        link.start()
        wait(lambda: len(kubelet.requests) == 3)
        for plugin in plugins:
            channel = grpc.insecure_channel(f"unix://{base / plugin.resource.socket}")
            first = next(pb_grpc.DevicePluginStub(channel).ListAndWatch(pb.Empty()))
            assert list(first.devices) == []
            channel.close()
        link.stop()
        watchers.close()
        kubelet.server.stop(0)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_restarted_kubelet_gets_the_rdma_keys_registered_again(node):
    node["kubelet"].restart()  # wipes every socket in the plugin directory
    plugin_dir = node["base"] / "dp"
    # A round the link began while the restart was wiping the directory registers with the new
    # kubelet sockets that are then gone, and a second round follows: whole rounds, the last the keys.
    wait(
        lambda: (
            len(node["kubelet"].requests) >= 6
            and len(node["kubelet"].requests) % 3 == 0
            and all((plugin_dir / p.resource.socket).exists() for p in node["plugins"])
        )
    )
    assert [r.resource_name for r in node["kubelet"].requests[-3:]] == list(RDMA_KEYS)
    answer = allocate(node, EXCLUSIVE, ["mlx5_0"])
    assert answer.envs["NCCL_IB_HCA"] == "mlx5_0"
