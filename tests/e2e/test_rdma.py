"""RDMA on a real kubelet node (spec part C): a simulated sysfs tree in the node's state directory
and real veth links in a network namespace made here.  The device manager's inventory reaches
``Devices.spec.interfaces[]``, its ``rdma.*`` labels reach the Node through nfd-master, kubelet
reports the three RDMA keys, and Pods asking for them are allocated by kubelet calling our plugins:
the fake runtime's record shows the ``uverbs`` device, ``rdma_cm`` and ``NCCL_IB_HCA``.  A failed
enumeration changes nothing; a kubelet restart gets the keys registered again; links that all fail
withhold the labels and turn the tokens Unhealthy without removing them; healed, everything comes
back.

Nothing here writes what a component of ours writes: the test only builds hardware (the tree, the
links) and Pods.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import ssl
import urllib.request

import nodes
import pytest

from api import constants
from nodeplugins.devicemanager.simulation.sysfs import ACTIVE, DOWN, SysfsTree, character_devices
from tests import netns
from tests.e2e.objects import requesting

from .conftest import ensure_namespace, gpustack, harness

pytestmark = pytest.mark.e2e

NODE = "rdma-sim-0"
NS = "rdma-e2e"
NETNS = f"gps-rdma-e2e-{os.getpid()}"
SLOT = 4
KEY, SHARED, PARTITIONED = (
    "device.gpustack.ai/rdma",
    "device.gpustack.ai/rdma.shared",
    "device.gpustack.ai/rdma.partitioned",
)
CAPABLE, DISTANCE, NUMA = (
    constants.LABEL_RDMA_CAPABLE,
    constants.LABEL_RDMA_DISTANCE,
    constants.LABEL_RDMA_NUMA,
)
GPU0 = "0000:18:00.0"  # the first simulated A10G's address (profiles: 0x18 + index)


def build_tree(tree: SysfsTree) -> dict[str, str]:
    """GPU 0 and rdma0 behind one switch port (PIX); rdma1 on the other socket with its link down;
    rdma2 an SR-IOV PF with two VFs (one without a netdev).  Returns the verbs node of each device."""
    tree.bridge("0000:00:01.0", numa=0)
    tree.bridge("0000:16:00.0", under="0000:00:01.0", numa=0)
    tree.bridge("0000:17:00.0", under="0000:16:00.0", numa=0)
    tree.accelerator(GPU0, under="0000:17:00.0", numa=0)
    tree.nic("rdma0", "0000:18:00.1", under="0000:17:00.0", numa=0, cpulist="0-15", rdma="mlx5_0")
    tree.bridge("0000:80:01.0", numa=1)
    tree.nic("rdma1", "0000:81:00.0", under="0000:80:01.0", numa=1, rdma="mlx5_1", ports=[DOWN])
    tree.bridge("0000:80:02.0", numa=1)
    tree.nic("rdma2", "0000:82:00.0", under="0000:80:02.0", numa=1, cpulist="16-31", rdma="mlx5_2")
    tree.sriov("0000:82:00.0")
    tree.vf("0000:82:00.0", "0000:82:00.2", name="rdma2v0", rdma="mlx5_3")
    tree.vf("0000:82:00.0", "0000:82:00.3", rdma="mlx5_4")
    tree.virtual("lo")
    return {f"mlx5_{n}": f"uverbs{n}" for n in range(5)}


@pytest.fixture(scope="module")
def rdma(cluster):
    why = netns.available()
    if why:
        pytest.skip(why)
    gpustack.install_crds(cluster)
    gpustack.ensure_namespace(cluster, constants.SYSTEM_NAMESPACE)
    directory = nodes.node_directory(cluster, NODE)
    shutil.rmtree(directory / "sys", ignore_errors=True)
    shutil.rmtree(directory / "dev", ignore_errors=True)
    tree = SysfsTree(directory / "sys")
    verbs = build_tree(tree)
    character_devices(directory / "dev", len(verbs))
    node = None
    with netns.namespace(NETNS) as links:
        links.veth("rdma0", "rdma0p", mtu=4000)
        links.veth("rdma1", "rdma1p")
        links.veth("rdma2", "rdma2p", mtu=9000)
        links.veth("rdma2v0", "rdma2v0p", mtu=9000)
        try:
            node = nodes.start_node(
                cluster,
                NODE,
                "a10g-4.yaml",
                slot=SLOT,
                dm_args=[
                    "--sysfs-root",
                    str(tree.root),
                    "--dev-root",
                    str(directory / "dev"),
                    "--netns",
                    NETNS,
                ],
            )
            ensure_namespace(cluster, NS)
            yield {"node": node, "tree": tree, "verbs": verbs, "dev": directory / "dev", "links": links}
        finally:
            harness.delete_namespace(cluster, NS, timeout=180)
            if node is not None:
                nodes.stop_node(node)
            cluster.kubectl("delete", "node", NODE, "--ignore-not-found", check=False)


# --- reading the cluster --------------------------------------------------------------------------
def labels(cluster) -> dict[str, str]:
    return cluster.kubectl_json("get", "node", NODE)["metadata"].get("labels") or {}


def rdma_labels(cluster) -> dict[str, str]:
    return {k: v for k, v in labels(cluster).items() if k.startswith("feature.gpustack.ai/rdma.")}


def node_status(cluster) -> dict:
    return cluster.kubectl_json("get", "node", NODE).get("status") or {}


def rdma_resources(cluster, which: str) -> dict[str, str]:
    found = node_status(cluster).get(which) or {}
    return {k: found[k] for k in (KEY, SHARED, PARTITIONED) if k in found}


def interfaces(cluster) -> dict[str, dict]:
    spec = cluster.kubectl_json("get", "devices", NODE).get("spec") or {}
    return {r["name"]: r for r in spec.get("interfaces") or []}


def detections(node: nodes.Node, result: str = "ok") -> float:
    """The device manager's own count of interface passes (its /metrics)."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with urllib.request.urlopen(
        f"https://127.0.0.1:{node.dm_port}/metrics", context=context, timeout=5
    ) as answer:
        text = answer.read().decode()
    found = re.search(
        rf'^gpustack_device_manager_interface_passes_total{{result="{result}"}} (\S+)$', text, re.M
    )
    return float(found.group(1)) if found else 0.0


def two_more_passes(node: nodes.Node, result: str = "ok") -> None:
    start = detections(node, result)
    harness.wait_for(
        lambda: detections(node, result) >= start + 2, timeout=60, what=f"two more {result} passes"
    )


def pod(name: str, limits: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {CAPABLE: "true"},  # the gate label, as a workload would select it
            "containers": [requesting(limits)],
        },
    }


def run_pod(cluster, name: str, limits: dict[str, str]) -> None:
    cluster.kubectl("create", "-f", "-", input=json.dumps(pod(name, limits)))
    harness.wait_for(
        lambda: (
            (cluster.kubectl_json("get", "pod", name, "-n", NS).get("status") or {}).get("phase") == "Running"
        ),
        timeout=180,
        what=f"{name} Running",
    )


def recorded(node: nodes.Node, name: str) -> dict:
    entries = [r for r in node.containers() if r["podName"] == name and r["podNamespace"] == NS]
    assert entries, f"the fake runtime recorded no container of {name}"
    return entries[-1]


def env_of(record: dict) -> dict[str, str]:
    return {kv["key"]: kv["value"] for kv in record["env"]}


def delete_pod(cluster, name: str) -> None:
    cluster.kubectl(
        "delete", "pod", name, "-n", NS, "--ignore-not-found", "--wait=true", timeout=120, check=False
    )


# --- tests ------------------------------------------------------------------------------------------
def test_the_inventory_reaches_devices(cluster, rdma):
    found = harness.wait_for(
        lambda: (i := interfaces(cluster)) and "rdma2" in i and i, timeout=90, what="interfaces"
    )
    assert sorted(found) == ["lo", "rdma0", "rdma1", "rdma2"]  # the VFs are nested, not listed
    rdma0 = found["rdma0"]
    assert rdma0["pciBusId"] == "0000:18:00.1" and rdma0["pciRootId"] == "0000:00:01.0"
    assert rdma0["pciSwitches"] == ["0000:17:00.0", "0000:16:00.0", "0000:00:01.0"]
    assert rdma0["numaAffinity"] == "0" and rdma0["cpuAffinity"] == "0-15"
    assert rdma0["mtu"] == 4000 and rdma0["up"] is True  # from the namespace's links, through pyroute2
    assert rdma0["rdmaDevice"] == "mlx5_0" and rdma0["link"] == {"state": "ok"}
    assert found["rdma1"]["link"]["state"] == "failed" and found["rdma1"]["link"]["firstSeenTime"]
    pf = found["rdma2"]
    assert pf["sriov"] is True and [vf["name"] for vf in pf["virtualFunctions"]] == [
        "rdma2v0",
        "0000:82:00.3",
    ]
    assert pf["virtualFunctions"][0]["mtu"] == 9000
    assert found["lo"]["virtual"] is True
    card = cluster.kubectl_json("get", "devices", NODE)["spec"]["groups"][0]["accelerators"][0]
    assert card["topology"]["pciBusId"] == GPU0  # the same walk as the interfaces'
    assert card["topology"]["pciRootId"] == "0000:00:01.0"
    assert card["topology"]["pciSwitches"] == ["0000:17:00.0", "0000:16:00.0", "0000:00:01.0"]


def test_labels_and_keys_reach_the_node(cluster, rdma):
    got = harness.wait_for(
        lambda: (r := rdma_labels(cluster)) and DISTANCE in r and r, timeout=90, what="labels"
    )
    assert got == {CAPABLE: "true", DISTANCE: "PIX", NUMA: "0_1"}
    capacity = harness.wait_for(
        lambda: (r := rdma_resources(cluster, "capacity")) and len(r) == 3 and r,
        timeout=90,
        what="RDMA capacity",
    )
    # exclusive and shared: rdma0 and rdma1 (the PF with VFs serves only partitioned: its two VFs)
    assert capacity == {KEY: "2", SHARED: "128", PARTITIONED: "2"}
    # rdma1's link failed: its tokens stay (capacity) but are Unhealthy (not allocatable)
    assert rdma_resources(cluster, "allocatable") == {KEY: "1", SHARED: "64", PARTITIONED: "2"}


def test_a_shared_rdma_pod_gets_its_verbs_device_and_nccl_ib_hca(cluster, rdma):
    run_pod(cluster, "shared", {SHARED: "1"})
    record = recorded(rdma["node"], "shared")
    dev = rdma["dev"] / "infiniband"
    devices = [(d["containerPath"], d["hostPath"]) for d in record["devices"]]
    assert devices == [
        ("/dev/infiniband/uverbs0", str(dev / "uverbs0")),
        ("/dev/infiniband/rdma_cm", str(dev / "rdma_cm")),
    ]  # one node at a time, never the /dev/infiniband directory
    assert env_of(record)["NCCL_IB_HCA"] == "mlx5_0"
    delete_pod(cluster, "shared")


def test_an_accelerator_and_an_interface_in_one_container(cluster, rdma):
    run_pod(cluster, "gpu-and-nic", {"nvidia.com/gpu": "1", KEY: "1"})
    record = recorded(rdma["node"], "gpu-and-nic")
    env = env_of(record)
    assert env["NCCL_IB_HCA"] == "mlx5_0"  # the only healthy whole interface
    assert env["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")
    assert ("/dev/infiniband/uverbs0", str(rdma["dev"] / "infiniband/uverbs0")) in [
        (d["containerPath"], d["hostPath"]) for d in record["devices"]
    ]
    delete_pod(cluster, "gpu-and-nic")


def test_a_partitioned_pod_gets_one_virtual_function(cluster, rdma):
    run_pod(cluster, "vf", {PARTITIONED: "1"})
    record = recorded(rdma["node"], "vf")
    hca = env_of(record)["NCCL_IB_HCA"]
    assert hca in ("mlx5_3", "mlx5_4")
    assert [d["containerPath"] for d in record["devices"]] == [
        f"/dev/infiniband/{rdma['verbs'][hca]}",
        "/dev/infiniband/rdma_cm",
    ]
    delete_pod(cluster, "vf")


def test_a_kubelet_restart_re_registers_the_rdma_keys(cluster, rdma):
    node: nodes.Node = rdma["node"]
    log = node.log_file("device-manager")

    def registrations() -> int:
        lines = log.read_text().splitlines()
        return sum("registered with the kubelet" in line and f'"{SHARED}"' in line for line in lines)

    before = registrations()
    nodes.restart_kubelet(cluster, node)  # kubelet wipes every plugin socket when it starts
    harness.wait_for(lambda: registrations() > before, timeout=90, what="the RDMA keys registered again")
    harness.wait_for(lambda: harness.node_is_ready(cluster, NODE), timeout=90, what="the node Ready again")
    harness.wait_for(
        lambda: rdma_resources(cluster, "allocatable") == {KEY: "1", SHARED: "64", PARTITIONED: "2"},
        timeout=90,
        what="the RDMA keys allocatable again",
    )
    run_pod(cluster, "after-restart", {SHARED: "1"})
    assert env_of(recorded(node, "after-restart"))["NCCL_IB_HCA"] == "mlx5_0"
    delete_pod(cluster, "after-restart")


def test_an_unchanged_node_is_not_rewritten(cluster, rdma):
    before = cluster.kubectl_json("get", "devices", NODE)["metadata"]["resourceVersion"]
    two_more_passes(rdma["node"])
    assert cluster.kubectl_json("get", "devices", NODE)["metadata"]["resourceVersion"] == before


def test_a_failed_enumeration_keeps_the_list_and_the_labels(cluster, rdma):
    tree: SysfsTree = rdma["tree"]
    recorded_before = interfaces(cluster)
    away = tree.root.parent / "class-net-away"
    shutil.move(tree.root / "class/net", away)
    try:
        two_more_passes(rdma["node"], "failed")
        assert interfaces(cluster) == recorded_before
        assert rdma_labels(cluster) == {CAPABLE: "true", DISTANCE: "PIX", NUMA: "0_1"}
    finally:
        shutil.move(away, tree.root / "class/net")
    two_more_passes(rdma["node"])


def test_links_that_all_fail_withhold_the_labels_and_keep_the_tokens(cluster, rdma):
    tree: SysfsTree = rdma["tree"]
    devices = {
        "0000:18:00.1": "mlx5_0",
        "0000:82:00.0": "mlx5_2",
        "0000:82:00.2": "mlx5_3",
        "0000:82:00.3": "mlx5_4",
    }
    for address, device in devices.items():
        tree.set_ports(tree.place(address), device, [DOWN])
    try:
        harness.wait_for(lambda: not rdma_labels(cluster), timeout=90, what="every rdma. label removed")
        harness.wait_for(
            lambda: rdma_resources(cluster, "allocatable") == {KEY: "0", SHARED: "0", PARTITIONED: "0"},
            timeout=90,
            what="every RDMA token Unhealthy",
        )
        assert rdma_resources(cluster, "capacity") == {KEY: "2", SHARED: "128", PARTITIONED: "2"}  # kept
        found = interfaces(cluster)
        assert found["rdma0"]["link"]["state"] == "failed" and "'1: DOWN'" in found["rdma0"]["link"]["reason"]
    finally:
        for address, device in devices.items():
            tree.set_ports(tree.place(address), device, [ACTIVE])
    got = harness.wait_for(
        lambda: (r := rdma_labels(cluster)) and DISTANCE in r and r, timeout=90, what="labels back"
    )
    assert got == {CAPABLE: "true", DISTANCE: "PIX", NUMA: "0_1"}
    harness.wait_for(
        lambda: rdma_resources(cluster, "allocatable") == {KEY: "1", SHARED: "64", PARTITIONED: "2"},
        timeout=90,
        what="healthy tokens back",
    )
