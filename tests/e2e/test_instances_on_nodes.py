"""GPU Instances on a real kubelet node: what a user gets on the node (instances spec A.6, A.7,
A.9.10; devices spec §6.5 visibility).

One real kubelet node over the CRI fake runtime, running the device manager on 8 simulated
H100 80GB cards, the last two in MIG mode (``h100-8-mig2.yaml``): its pool offers whole cards,
logical slices and MIG partitions.  The whole worker runs (webhooks and every controller) with the
real Kueue; Instances are applied with ``kubectl`` and go through all five gates.  For each kind
of request — a whole card, a slice, a partition — the Instance reaches ``Ready`` and:

- ``status.allocations`` is what the device manager allocated: the Pod's allocation record for
  ``main``, each card held in that mode in the node's ``Devices`` ledger;
- the ``main`` container the kubelet asked the fake runtime to create carries that card's env
  (``NVIDIA_VISIBLE_DEVICES``; a slice's memory cap; a partition's MIG device, never its parent);
- the ``sshd`` sidecar's container carries the same card — or, for a partition, the same MIG
  device — through the visibility resource, never another and never the parent GPU.

``stop: true`` frees the card (the InstanceType's ``remaining`` grows back in the status the pools
controller writes, and the ledger shows the card free), clearing it retakes one, and deleting the
Instance releases it (a partition's GPU instance is destroyed on the simulated card).

The module owns the cluster's pools while it runs, like ``test_instances``, and leaves no node,
namespace or InstanceType behind.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from typing import Any

import gpustack
import harness
import nodes
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from api import allocation, constants
from nodeplugins.devicemanager import tokens
from nodeplugins.devicemanager.backends import instances_file

pytestmark = pytest.mark.e2e

SUFFIX = uuid.uuid4().hex[:5]
NODE = f"inst-h100-{SUFFIX}"
NS = f"inst-nodes-{SUFFIX}"
POOL = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"
KEY = "workspace-key"
VISIBILITY = "device.gpustack.ai/nvidia.visibility"
WAIT = 180
KEY_LINE = (
    ed25519.Ed25519PrivateKey.generate()
    .public_key()
    .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    .decode()
)


# --- reading the cluster and the node -------------------------------------------------------------


def get(cluster: harness.ClusterInfo, *args: str) -> dict | None:
    proc = cluster.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def instance_type(cluster: harness.ClusterInfo) -> dict:
    return get(cluster, "instancetype", POOL) or {}


def remaining(cluster: harness.ClusterInfo, view: str = "accelerator") -> int:
    """A view's ``remaining`` in the InstanceType status the pools controller writes."""
    status = instance_type(cluster).get("status") or {}
    return int(harness.parse_quantity((status.get(view) or {}).get("remaining") or "0"))


def remaining_profile(cluster: harness.ClusterInfo, profile: str) -> int:
    partitioned = (instance_type(cluster).get("status") or {}).get("acceleratorPartitioned") or {}
    counts = {p["name"]: int(p.get("count") or 0) for p in partitioned.get("remainingProfiles") or []}
    return counts.get(profile, 0)


def ledger(cluster: harness.ClusterInfo) -> dict[str, dict]:
    """The node's ``Devices`` status rows by card id (written by the device manager)."""
    devices = get(cluster, "devices", NODE) or {}
    return {
        row["id"]: row for g in (devices.get("status") or {}).get("groups") or [] for row in g["accelerators"]
    }


def partitioned_cards(cluster: harness.ClusterInfo) -> set[str]:
    """The node's MIG-mode cards, as the device manager discovered them (``Devices`` spec)."""
    devices = get(cluster, "devices", NODE) or {}
    return {
        card["id"]
        for g in (devices.get("spec") or {}).get("groups") or []
        for card in g["accelerators"]
        if (card.get("status") or {}).get("physicalSliced")
    }


def recorded(node: nodes.Node, pod_uid: str, container: str) -> dict[str, str]:
    """The env the kubelet handed the fake runtime for ``container`` of the Pod ``pod_uid``."""
    entries = [r for r in node.containers() if r["podUid"] == pod_uid and r["container"] == container]
    assert entries, f"the fake runtime recorded no {container} container of Pod {pod_uid}"
    return {kv["key"]: kv["value"] for kv in entries[-1]["env"]}


def gpu_instances(node: nodes.Node, card: str) -> list[dict]:
    """The simulated card's live GPU instances (the hardware's state; only read here)."""
    path = instances_file(node.profile)
    state = json.loads(path.read_text()) if path.exists() else {}
    return (state.get("cards") or {}).get(card, [])


def entries_of(groups: list[dict]) -> list[dict]:
    return [a for g in groups for a in g.get("accelerators") or []]


# --- driving Instances ----------------------------------------------------------------------------


def instance_manifest(name: str, resources: dict[str, Any]) -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "Instance",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "type": POOL,
            "image": "ubuntu:24.04",
            "resources": resources,
            "volume": {"ephemeral": {"capacity": "1Gi"}},
            "sshPublicKey": {"name": KEY},
        },
    }


def instance(cluster: harness.ClusterInfo, name: str) -> dict:
    obj = get(cluster, "instance", name, "-n", NS)
    assert obj is not None, f"Instance {NS}/{name} is gone"
    return obj


def only_stopped(status: dict) -> bool:
    """``{phase: Stopped}`` and nothing of the last run: only the Ready condition, False, beside it."""
    rest = {k: v for k, v in status.items() if k != "conditions"}
    ready = [(c["type"], c["status"], c["reason"]) for c in status.get("conditions") or []]
    return rest == {"phase": "Stopped"} and ready == [("Ready", "False", "Stopped")]


def wait_phase(cluster: harness.ClusterInfo, name: str, phase: str, timeout: float = WAIT) -> dict:
    def reached() -> dict | None:
        obj = get(cluster, "instance", name, "-n", NS)
        return obj if obj and (obj.get("status") or {}).get("phase") == phase else None

    try:
        return harness.wait_for(reached, timeout=timeout, what=f"Instance {NS}/{name} {phase}")
    except TimeoutError as error:
        obj = get(cluster, "instance", name, "-n", NS) or {}
        pod = get(cluster, "pod", name, "-n", NS) or {}
        # Kueue's own word on the Pod's Workload (why it is not admitted) and what the node offers.
        workloads = [
            {"name": w["metadata"]["name"], "conditions": (w.get("status") or {}).get("conditions")}
            for w in (get(cluster, "workloads", "-n", NS) or {}).get("items") or []
            if name in [o.get("name") for o in w["metadata"].get("ownerReferences") or []]
        ]
        node = get(cluster, "node", NODE) or {}
        allocatable = {
            k: v for k, v in ((node.get("status") or {}).get("allocatable") or {}).items() if "/" in k
        }
        raise TimeoutError(
            f"{error}; status: {json.dumps(obj.get('status'))}; pod: {json.dumps(pod.get('status'))[:3000]}; "
            f"workloads: {json.dumps(workloads)[:3000]}; {NODE} allocatable: {json.dumps(allocatable)}"
        ) from None


def ready_with_allocations(cluster: harness.ClusterInfo, name: str) -> tuple[dict, dict]:
    """The Instance once ``Ready`` with its allocations shown, and its Pod."""

    def shown() -> tuple[dict, dict] | None:
        obj = get(cluster, "instance", name, "-n", NS) or {}
        status = obj.get("status") or {}
        if status.get("phase") != "Ready" or not status.get("allocations"):
            return None
        pod = get(cluster, "pod", name, "-n", NS)
        return (obj, pod) if pod else None

    wait_phase(cluster, name, "Ready")
    return harness.wait_for(shown, timeout=60, what=f"Instance {name} showing its allocations")


def set_stop(cluster: harness.ClusterInfo, name: str, stop: bool) -> None:
    body = json.dumps({"spec": {"stop": stop}})
    cluster.kubectl("patch", "instance", name, "-n", NS, "--type=merge", "-p", body)


def delete(cluster: harness.ClusterInfo, name: str) -> None:
    cluster.kubectl("delete", "instance", name, "-n", NS, "--ignore-not-found", "--timeout=120s", timeout=150)
    harness.wait_for(
        lambda: get(cluster, "pod", name, "-n", NS) is None, timeout=120, what=f"the Pod of {name} gone"
    )


def check_allocations(cluster: harness.ClusterInfo, obj: dict, pod: dict, mode: int) -> list[dict]:
    """``status.allocations`` is the record the device manager wrote for ``main``, each card
    charged in ``mode`` in the node's ledger; returns the allocated entries."""
    record = allocation.record_of(pod)
    shown = obj["status"]["allocations"]
    entries = entries_of(shown)
    assert entries and {e["mode"] for e in entries} == {mode}, shown
    assert [e["id"] for e in entries] == [e["id"] for e in entries_of(record["main"])]
    assert [g["id"] for g in shown] == [g["id"] for g in record["main"]]
    harness.wait_for(
        lambda: all(ledger(cluster)[e["id"]]["mode"] == mode for e in entries),
        timeout=30,
        what="the Devices ledger charging the cards",
    )
    # The sidecar's own grant is recorded too, and it names the owner's card, in visibility mode.
    sidecar = entries_of(record.get(constants.INSTANCE_CONTAINER_SSHD) or [])
    assert [e["id"] for e in sidecar] == [e["id"] for e in entries]
    assert {e["mode"] for e in sidecar} == {constants.DEVICE_MODE_VISIBILITY}
    return entries


# --- the module's cluster -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def h100(cluster: harness.ClusterInfo) -> Iterator[nodes.Node]:
    foreign = [
        n["metadata"]["name"]
        for n in cluster.kubectl_json("get", "nodes", "-l", "gpustack.ai/managed=true")["items"]
    ]
    if foreign:
        raise AssertionError(
            f"e2e instances on nodes: the cluster already has managed nodes {foreign}; these tests own the"
            " pools (an earlier module left them behind)"
        )
    op = gpustack.install(cluster)
    gpustack.start_worker(cluster, op)
    started: list[nodes.Node] = []
    try:
        node = nodes.start_node(cluster, NODE, "h100-8-mig2.yaml", slot=0)
        started.append(node)
        gpustack.ensure_namespace(cluster, NS)
        harness.wait_for_default_service_account(cluster, NS)
        harness.wait_for(
            lambda: (instance_type(cluster).get("status") or {}).get("phase") == "Active",
            timeout=WAIT,
            what=f"InstanceType {POOL} Active",
        )
        harness.wait_for(
            lambda: remaining(cluster) == 6 and remaining_profile(cluster, "3g.40gb") > 0,
            timeout=WAIT,
            what="the pool's whole cards and partitions in the InstanceType status",
        )
        harness.wait_for(
            lambda: (
                get(cluster, "localqueue", instance_type(cluster)["status"]["entrance"], "-n", NS) is not None
            ),
            timeout=60,
            what="the LocalQueue in the tenant namespace",
        )
        cluster.apply(
            {
                "apiVersion": "worker.gpustack.ai/v1",
                "kind": "InstanceSSHPublicKey",
                "metadata": {"name": KEY, "namespace": NS},
                "spec": {"data": f"{KEY_LINE} e2e@instances-on-nodes"},
            }
        )
        harness.wait_for(lambda: get(cluster, "secret", KEY, "-n", NS), timeout=30, what="the key's Secret")
        yield node
    finally:
        cluster.kubectl("delete", "instances", "--all", "-n", NS, "--timeout=120s", check=False)
        harness.delete_namespace(cluster, NS, timeout=180)
        for node in started:
            nodes.stop_node(node)
            cluster.kubectl("delete", "node", node.name, "--ignore-not-found", check=False)
            cluster.kubectl(
                "delete",
                "nodefeature",
                node.name,
                "-n",
                nodes.NFD_NAMESPACE,
                "--ignore-not-found",
                check=False,
            )
        gpustack.take_pools_down(cluster, what="e2e instances on nodes teardown")
        gpustack.stop_worker(op)
        gpustack.uninstall_webhooks(cluster)
        with contextlib.suppress(harness.ClusterError):
            cluster.kubectl("delete", "devices", NODE, "--ignore-not-found")


# --- a whole card ---------------------------------------------------------------------------------


def test_a_whole_card_instance_and_its_sidecar_get_the_card_the_device_manager_allocated(
    cluster: harness.ClusterInfo, h100: nodes.Node
) -> None:
    before = remaining(cluster)
    cluster.apply(instance_manifest("whole", {"accelerator": "1"}))
    obj, pod = ready_with_allocations(cluster, "whole")
    assert obj["status"]["nodeName"] == NODE and pod["spec"]["nodeName"] == NODE
    ssh = harness.wait_for(
        lambda: [p for p in instance(cluster, "whole")["status"].get("ports") or [] if p.get("nodePort")],
        timeout=60,
        what="the ssh port with its node port",
    )
    assert [(p["name"], p["port"]) for p in ssh] == [("ssh", 22)]
    [entry] = check_allocations(cluster, obj, pod, constants.DEVICE_MODE_EXCLUSIVE)
    card = entry["id"]
    assert len(partitioned_cards(cluster)) == 2
    assert card.startswith("GPU-") and card not in partitioned_cards(cluster)
    uid = pod["metadata"]["uid"]
    main = recorded(h100, uid, constants.INSTANCE_CONTAINER_MAIN)
    sshd = recorded(h100, uid, constants.INSTANCE_CONTAINER_SSHD)
    assert main["NVIDIA_VISIBLE_DEVICES"] == card
    assert sshd["NVIDIA_VISIBLE_DEVICES"] == card  # the same card, and no other
    assert main["CUDA_VISIBLE_DEVICES"] == sshd["CUDA_VISIBLE_DEVICES"] == "0"
    harness.wait_for(lambda: remaining(cluster) == before - 1, timeout=60, what="the EX view charged")
    # The sidecar asked for visibility only: no card of its own was taken for it.
    sidecar = next(c for c in pod["spec"]["containers"] if c["name"] == constants.INSTANCE_CONTAINER_SSHD)
    assert sidecar["resources"]["limits"] == {VISIBILITY: "1"}


def test_a_hand_edited_allocation_never_shows_a_card_the_ledger_does_not(
    cluster: harness.ClusterInfo, h100: nodes.Node
) -> None:
    """The record claims a free card for ``main``: the device manager writes back what it holds,
    and the status keeps showing the allocated card, never the forged one."""
    obj = instance(cluster, "whole")
    [card] = [e["id"] for e in entries_of(obj["status"]["allocations"])]
    pod = get(cluster, "pod", "whole", "-n", NS)
    true_record = allocation.record_of(pod)
    free = next(
        cid
        for cid, row in sorted(ledger(cluster).items())
        if row["mode"] == 0 and cid not in partitioned_cards(cluster)
    )
    forged = json.loads(json.dumps(true_record))
    forged["main"][0]["accelerators"][0]["id"] = free
    cluster.kubectl(
        "annotate", "pod", "whole", "-n", NS, "--overwrite",
        f"{constants.ANNOTATION_ACCELERATOR_ALLOCATED}={json.dumps(forged)}",
    )  # fmt: skip

    def restored() -> bool:
        shown = [e["id"] for e in entries_of(instance(cluster, "whole")["status"].get("allocations") or [])]
        assert free not in shown, f"the status claims {free}, which the ledger shows free"
        assert ledger(cluster)[free]["mode"] == 0, "the forged record charged a card"
        current = allocation.record_of(get(cluster, "pod", "whole", "-n", NS))
        return current == true_record and shown == [card]

    try:
        harness.wait_for(restored, timeout=60, what="the device manager restoring the record it holds")
    except TimeoutError as error:
        current = allocation.record_of(get(cluster, "pod", "whole", "-n", NS))
        status = instance(cluster, "whole")["status"]
        raise TimeoutError(
            f"{error}; held {json.dumps(true_record)}; on the Pod {json.dumps(current)}; "
            f"status {json.dumps(status)}; ledger row {json.dumps(ledger(cluster)[card])}"
        ) from None


def test_stop_frees_the_card_and_start_retakes_one(cluster: harness.ClusterInfo, h100: nodes.Node) -> None:
    obj, _ = ready_with_allocations(cluster, "whole")  # the status may still be catching up
    [card] = [e["id"] for e in entries_of(obj["status"]["allocations"])]
    held = remaining(cluster)
    set_stop(cluster, "whole", True)
    stopped = wait_phase(cluster, "whole", "Stopped")
    assert only_stopped(stopped["status"])  # no stale allocation survives
    harness.wait_for(lambda: get(cluster, "pod", "whole", "-n", NS) is None, timeout=60, what="the Pod gone")
    harness.wait_for(lambda: ledger(cluster)[card]["mode"] == 0, timeout=60, what="the card free in Devices")
    harness.wait_for(
        lambda: remaining(cluster) == held + 1, timeout=60, what="the InstanceType's EX view grown back"
    )

    set_stop(cluster, "whole", False)
    obj, pod = ready_with_allocations(cluster, "whole")
    [entry] = check_allocations(cluster, obj, pod, constants.DEVICE_MODE_EXCLUSIVE)
    uid = pod["metadata"]["uid"]
    assert recorded(h100, uid, constants.INSTANCE_CONTAINER_MAIN)["NVIDIA_VISIBLE_DEVICES"] == entry["id"]
    assert recorded(h100, uid, constants.INSTANCE_CONTAINER_SSHD)["NVIDIA_VISIBLE_DEVICES"] == entry["id"]
    harness.wait_for(lambda: remaining(cluster) == held, timeout=60, what="the EX view charged again")


def test_a_pinned_two_card_instance_shows_its_sidecar_both_cards(
    cluster: harness.ClusterInfo, h100: nodes.Node
) -> None:
    before = remaining(cluster)
    pinned = instance_manifest("pair", {"accelerator": "2"})
    pinned["spec"]["nodeName"] = NODE  # selected by the node's own hostname label, which the kubelet set
    cluster.apply(pinned)
    obj, pod = ready_with_allocations(cluster, "pair")
    assert pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] == NODE  # beside the flavor's (Kueue)
    entries = check_allocations(cluster, obj, pod, constants.DEVICE_MODE_EXCLUSIVE)
    cards = sorted(e["id"] for e in entries)
    assert len(cards) == 2 and not set(cards) & {
        e["id"] for e in entries_of(instance(cluster, "whole")["status"]["allocations"])
    }
    sidecar = next(c for c in pod["spec"]["containers"] if c["name"] == constants.INSTANCE_CONTAINER_SSHD)
    assert sidecar["resources"]["limits"] == {VISIBILITY: "2"}  # main's count
    uid = pod["metadata"]["uid"]
    main = recorded(h100, uid, constants.INSTANCE_CONTAINER_MAIN)
    sshd = recorded(h100, uid, constants.INSTANCE_CONTAINER_SSHD)
    assert sorted(main["NVIDIA_VISIBLE_DEVICES"].split(",")) == cards
    assert sshd["NVIDIA_VISIBLE_DEVICES"] == main["NVIDIA_VISIBLE_DEVICES"]
    assert main["CUDA_VISIBLE_DEVICES"] == sshd["CUDA_VISIBLE_DEVICES"] == "0,1"
    harness.wait_for(lambda: remaining(cluster) == before - 2, timeout=60, what="the EX view charged twice")
    delete(cluster, "pair")
    harness.wait_for(
        lambda: all(ledger(cluster)[c]["mode"] == 0 for c in cards), timeout=60, what="both cards free"
    )
    harness.wait_for(lambda: remaining(cluster) == before, timeout=60, what="the EX view grown back")


def test_a_kubelet_restart_keeps_the_instance_and_its_card(
    cluster: harness.ClusterInfo, h100: nodes.Node
) -> None:
    """The kubelet restarts under a running Instance: the device manager registers again, the Pod
    and its cards stay, and the next Instance is given another card (and its sidecar that one)."""
    obj = instance(cluster, "whole")
    pod = get(cluster, "pod", "whole", "-n", NS)
    [card] = [e["id"] for e in entries_of(obj["status"]["allocations"])]
    log = h100.log_file("device-manager")
    registered = log.read_text().count("registered with the kubelet")
    nodes.restart_kubelet(cluster, h100)
    harness.wait_for(
        lambda: (
            log.read_text().count("registered with the kubelet")
            >= registered + len(tokens.resources("nvidia"))
        ),
        timeout=90,
        what="the device manager registering every plugin with the restarted kubelet",
    )
    harness.wait_for(lambda: harness.node_is_ready(cluster, NODE), timeout=90, what="the node Ready again")
    after = wait_phase(cluster, "whole", "Ready")
    assert get(cluster, "pod", "whole", "-n", NS)["metadata"]["uid"] == pod["metadata"]["uid"]
    assert [e["id"] for e in entries_of(after["status"]["allocations"])] == [card]

    cluster.apply(instance_manifest("after-restart", {"accelerator": "1"}))
    obj, pod = ready_with_allocations(cluster, "after-restart")
    [entry] = check_allocations(cluster, obj, pod, constants.DEVICE_MODE_EXCLUSIVE)
    assert entry["id"] != card
    uid = pod["metadata"]["uid"]
    assert recorded(h100, uid, constants.INSTANCE_CONTAINER_SSHD)["NVIDIA_VISIBLE_DEVICES"] == entry["id"]
    delete(cluster, "after-restart")


# --- a slice --------------------------------------------------------------------------------------


def test_a_sliced_instance_and_its_sidecar_share_one_card(
    cluster: harness.ClusterInfo, h100: nodes.Node
) -> None:
    sliced = (
        ((instance_type(cluster).get("status") or {}).get("detail") or {}).get("slicedDetail") or {}
    ).get("logical") or {}
    assert int(sliced.get("count") or 0), f"the pool {POOL} offers no logical slices: {sliced}"
    sliced_before = remaining(cluster, "acceleratorSliced")
    cluster.apply(instance_manifest("slice", {"accelerator": "1", "acceleratorSlicedMemoryPercentage": 40}))
    obj, pod = ready_with_allocations(cluster, "slice")
    [entry] = check_allocations(cluster, obj, pod, constants.DEVICE_MODE_SLICED)
    assert entry["allocated"] == 40 * 16_000  # 40 % of the card's units
    card = entry["id"]
    uid = pod["metadata"]["uid"]
    main = recorded(h100, uid, constants.INSTANCE_CONTAINER_MAIN)
    sshd = recorded(h100, uid, constants.INSTANCE_CONTAINER_SSHD)
    assert main["NVIDIA_VISIBLE_DEVICES"] == card and sshd["NVIDIA_VISIBLE_DEVICES"] == card
    assert main["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{81920 * 40 // 100}m"
    harness.wait_for(
        lambda: remaining(cluster, "acceleratorSliced") < sliced_before,
        timeout=60,
        what="the SL view charged",
    )
    delete(cluster, "slice")
    harness.wait_for(
        lambda: ledger(cluster)[card]["mode"] == 0, timeout=60, what="the slice's card free in Devices"
    )
    harness.wait_for(
        lambda: remaining(cluster, "acceleratorSliced") == sliced_before, timeout=60, what="the SL view back"
    )


# --- a partition ----------------------------------------------------------------------------------


PROFILE = "3g.40gb"


def partition_device(cluster: harness.ClusterInfo, node: nodes.Node, name: str) -> tuple[str, str]:
    """The Ready partitioned Instance ``name``: checks its allocation and both containers' env,
    returns (parent card, MIG device)."""
    obj, pod = ready_with_allocations(cluster, name)
    [entry] = check_allocations(cluster, obj, pod, constants.DEVICE_MODE_PARTITIONED)
    assert entry["allocatedPhysicalProfile"] == PROFILE
    parent = entry["id"]
    assert parent in partitioned_cards(cluster)  # one of the two MIG-mode cards
    [placement] = entry["allocatedPhysicalPlacements"]
    [gpu_instance] = [
        gi
        for gi in gpu_instances(node, parent)
        if (gi["start"], gi["size"]) == (placement["start"], placement["length"])
    ]
    [compute] = gpu_instance["computes"]
    uid = pod["metadata"]["uid"]
    main = recorded(node, uid, constants.INSTANCE_CONTAINER_MAIN)
    sshd = recorded(node, uid, constants.INSTANCE_CONTAINER_SSHD)
    assert main["NVIDIA_VISIBLE_DEVICES"] == compute["uuid"] and compute["uuid"].startswith("MIG-")
    assert sshd["NVIDIA_VISIBLE_DEVICES"] == compute["uuid"]  # the partition main holds, not the parent
    assert main["CUDA_VISIBLE_DEVICES"] == sshd["CUDA_VISIBLE_DEVICES"] == "0"
    return parent, compute["uuid"]


def live_devices(cluster: harness.ClusterInfo, node: nodes.Node) -> set[str]:
    """The MIG devices alive on the node's partitioned cards."""
    return {
        c["uuid"]
        for card in partitioned_cards(cluster)
        for gi in gpu_instances(node, card)
        for c in gi["computes"]
    }


def test_a_partitioned_instance_and_its_sidecar_get_the_mig_device_never_the_parent(
    cluster: harness.ClusterInfo, h100: nodes.Node
) -> None:
    before = remaining_profile(cluster, PROFILE)
    cluster.apply(
        instance_manifest("partition", {"accelerator": "1", "acceleratorPartitionedProfile": PROFILE})
    )
    parent, device = partition_device(cluster, h100, "partition")
    harness.wait_for(
        lambda: remaining_profile(cluster, PROFILE) == before - 1, timeout=60, what="the PT view charged"
    )

    # Stopped, the partition goes back to the card; started, a new one is made and shown to both.
    set_stop(cluster, "partition", True)
    wait_phase(cluster, "partition", "Stopped")
    harness.wait_for(
        lambda: device not in live_devices(cluster, h100), timeout=60, what="the MIG device destroyed"
    )
    harness.wait_for(
        lambda: remaining_profile(cluster, PROFILE) == before, timeout=60, what="the PT view grown back"
    )
    set_stop(cluster, "partition", False)
    parent, device = partition_device(cluster, h100, "partition")
    assert device in live_devices(cluster, h100)

    delete(cluster, "partition")
    harness.wait_for(
        lambda: not gpu_instances(h100, parent), timeout=60, what="the GPU instance destroyed on the card"
    )
    harness.wait_for(
        lambda: not ledger(cluster)[parent].get("allocatedProfiles"), timeout=60, what="the partition freed"
    )
    harness.wait_for(
        lambda: remaining_profile(cluster, PROFILE) == before, timeout=60, what="the PT view grown back"
    )


# --- deletion -------------------------------------------------------------------------------------


def test_deleting_the_instance_releases_its_card(cluster: harness.ClusterInfo, h100: nodes.Node) -> None:
    [card] = [e["id"] for e in entries_of(instance(cluster, "whole")["status"]["allocations"])]
    held = remaining(cluster)
    delete(cluster, "whole")
    assert get(cluster, "instance", "whole", "-n", NS) is None
    harness.wait_for(
        lambda: get(cluster, "service", "whole", "-n", NS) is None, timeout=30, what="the Service gone"
    )
    harness.wait_for(lambda: ledger(cluster)[card]["mode"] == 0, timeout=60, what="the card free in Devices")
    harness.wait_for(lambda: remaining(cluster) == held + 1, timeout=60, what="the EX view grown back")
