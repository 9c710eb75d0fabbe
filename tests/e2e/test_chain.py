"""The five gates through the real worker process (webhooks and controllers, behind its Lease):
a real kubelet node with 4 simulated A10G cards (its device manager publishes the labels and the
``Devices`` ledger) becomes a pool, a sliced Pod is folded by gate 1, charged in credits by Kueue
(gate 2), judged per card by gate 3, bound and allocated (gate 5); whole cards on cards that running
slices hold are answered Retry until those Pods go.  A restarted worker converges to the same
objects."""

from __future__ import annotations

import json

import nodes
import pytest

from api import constants
from tests.e2e.objects import requesting, wait_for_entrance

from .conftest import ensure_namespace, gpustack, harness

pytestmark = pytest.mark.e2e

NODE = "chain-a10g"
SLOT = 5  # this module's node ports (tests/cluster/nodes.py)
POOL = "gpustack--nvidia-a10g-linux-amd64"
A10G_GROUP = "nvidia-a10g"
NS = "chain"


def _cleanup(cluster, node) -> None:
    harness.delete_namespace(cluster, NS, timeout=180)
    if node is not None:
        nodes.stop_node(node)
    cluster.kubectl("delete", "node", NODE, "--ignore-not-found")
    cluster.kubectl("delete", "devices", NODE, "--ignore-not-found")


@pytest.fixture(scope="module")
def chain(cluster):
    op = gpustack.install(cluster)
    gpustack.start_worker(cluster, op)  # webhooks and every registered controller
    node = None
    try:
        node = nodes.start_node(cluster, NODE, "a10g-4.yaml", slot=SLOT)
        ensure_namespace(cluster, NS)
        entrance = wait_for_entrance(cluster, POOL, NS, timeout=90, what="the A10G InstanceType's entrance")
        yield op, entrance
    finally:
        try:
            _cleanup(cluster, node)
            # The pool's flavors go with its last node (the derived InstanceType stays, Inactive), so
            # modules after this one see no managed node of ours.
            harness.wait_for(
                lambda: (
                    not [
                        f
                        for f in cluster.kubectl_json("get", "resourceflavors")["items"]
                        if "nvidia-a10g" in f["metadata"]["name"]
                    ]
                ),
                timeout=180,
                what="the pool's flavors to go",
            )
        finally:
            gpustack.stop_worker(op)
            gpustack.uninstall_webhooks(cluster)


def pod(name: str, queue: str | None, limits: dict[str, str], node: str | None = None) -> dict:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {constants.KUEUE_QUEUE_NAME: queue} if queue else {},
        },
        "spec": {
            **({"nodeName": node} if node else {}),
            "restartPolicy": "Never",
            "containers": [requesting(limits)],
        },
    }
    return body


def bound(cluster, name: str) -> dict | None:
    obj = cluster.kubectl_json("get", "pod", name, "-n", NS)
    return obj if obj["spec"].get("nodeName") and not obj["spec"].get("schedulingGates") else None


def held_back(cluster, pod_name: str) -> str | None:
    """Why the Pod's Workload is held: gate 3's Retry message, or Kueue's QuotaReserved=False."""
    for workload in cluster.kubectl_json("get", "workloads", "-n", NS)["items"]:
        owners = workload["metadata"].get("ownerReferences") or []
        if not any(o.get("name") == pod_name for o in owners):
            continue
        status = workload.get("status") or {}
        for state in status.get("admissionChecks") or []:
            if state["name"] == constants.ADMISSION_CHECK_NODE_DEVICES and state["state"] == "Retry":
                return state.get("message") or "Retry"
        for condition in status.get("conditions") or []:
            if (
                condition["type"] == "QuotaReserved"
                and condition["status"] == "False"
                and condition.get("message")
            ):
                return condition["message"]
    return None


def check_state(cluster, pod_name: str) -> dict | None:
    for workload in cluster.kubectl_json("get", "workloads", "-n", NS)["items"]:
        owners = workload["metadata"].get("ownerReferences") or []
        if any(o.get("name") == pod_name for o in owners):
            for state in (workload.get("status") or {}).get("admissionChecks") or []:
                if state["name"] == constants.ADMISSION_CHECK_NODE_DEVICES:
                    return state
    return None


def test_a_sliced_pod_passes_all_gates(cluster, chain):
    _, entrance = chain
    cluster.kubectl(
        "create",
        "-f",
        "-",
        input=json.dumps(
            pod(
                "slice",
                entrance,
                {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "40"},
            )
        ),
    )
    stored = cluster.kubectl_json("get", "pod", "slice", "-n", NS)
    assert stored["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu.sliced.units"] == "640k"
    placed = harness.wait_for(lambda: bound(cluster, "slice"), timeout=90, what="the sliced Pod bound")
    assert placed["spec"]["nodeName"] == NODE
    assert check_state(cluster, "slice")["state"] == "Ready"


def test_whole_cards_on_sliced_cards_wait_for_free_cards(cluster, chain):
    _, entrance = chain
    cluster.kubectl("delete", "pod", "slice", "-n", NS, "--ignore-not-found", "--wait=true")
    # Four 60 % slices, bound straight to the node (past gates 1-4): the device manager gives each
    # its own card, so no card is whole.
    slice60 = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "960000"}
    for i in range(4):
        cluster.kubectl("create", "-f", "-", input=json.dumps(pod(f"s60-{i}", None, slice60, node=NODE)))
    harness.wait_for(
        lambda: all(
            (cluster.kubectl_json("get", "pod", f"s60-{i}", "-n", NS).get("status") or {}).get("phase")
            == "Running"
            for i in range(4)
        ),
        timeout=120,
        what="the four slices running",
    )
    harness.wait_for(
        lambda: all(
            row["mode"] == 3
            for g in cluster.kubectl_json("get", "devices", NODE).get("status", {}).get("groups", [])
            for row in g["accelerators"]
        ),
        timeout=60,
        what="every card sliced in the ledger",
    )
    cluster.kubectl("create", "-f", "-", input=json.dumps(pod("whole", entrance, {"nvidia.com/gpu": "2"})))
    # The credits fit, no card is whole: the node's fit label says 0 whole cards free, so the
    # Workload's fit pin excludes it (spec §6.6); had Kueue seen the node first, the device
    # manager's Unhealthy whole-card tokens keep topology-aware placement off it (gate 2), and gate 3
    # would answer Retry if it got that far. Whichever came first, the Pod stays gated and unbound.
    held = harness.wait_for(
        lambda: held_back(cluster, "whole"), timeout=90, what="the whole-card Workload held back"
    )
    assert any(why in held for why in ("nvidia.com/gpu", "whole", "PodSet", "excluded: affinity")), held
    # The fit-label controller follows the ledger on its own event: the label reaches 0 (a held
    # Workload does not say it already has).
    free = constants.label_fit_exclusive_free_cards(A10G_GROUP)
    harness.wait_for(
        lambda: cluster.kubectl_json("get", "node", NODE)["metadata"]["labels"].get(free) == "0",
        timeout=60,
        what=f"{free}=0 on {NODE}",
    )
    assert bound(cluster, "whole") is None
    for i in range(4):  # the slices go: their cards are free again
        cluster.kubectl("delete", "pod", f"s60-{i}", "-n", NS, "--wait=true")
    harness.wait_for(
        lambda: bound(cluster, "whole"), timeout=120, what="the whole-card Pod admitted once freed"
    )


def test_a_restarted_worker_converges_without_duplicates(cluster, chain):
    op, _ = chain

    def snapshot() -> dict:
        out = {}
        for kind in ("resourceflavors", "clusterqueues", "instancetypes"):
            for item in cluster.kubectl_json("get", kind)["items"]:
                out[(kind, item["metadata"]["name"])] = item["metadata"]["uid"]
        for item in cluster.kubectl_json("get", "localqueues", "-n", NS)["items"]:
            out[("localqueues", item["metadata"]["name"])] = item["metadata"]["uid"]
        return out

    def holder() -> str:
        lease = cluster.kubectl_json(
            "get", "lease", constants.LEADER_ELECTION_ID, "-n", constants.SYSTEM_NAMESPACE
        )
        return lease.get("spec", {}).get("holderIdentity") or ""

    before = snapshot()
    assert holder()
    gpustack.stop_worker(op)
    # SIGTERM ends the worker through its shutdown: the Lease is given up, so the next worker
    # leads at once instead of waiting out the lease duration.
    assert holder() == ""
    gpustack.start_worker(cluster, op)
    harness.wait_for(holder, timeout=60, what="a leader")
    harness.wait_for(lambda: gpustack.controllers_settled(op), timeout=60, what="a full reconcile pass")
    assert snapshot() == before
