"""The five gates through the real worker process (webhooks and controllers, behind its Lease):
a simulated A10G node becomes a pool, a sliced Pod is folded by gate 1, charged in credits by
Kueue (gate 2), judged per card by gate 3 and bound; whole cards on half-sliced cards are held with
Retry until the cards are freed.  A restarted worker converges to the same objects."""

from __future__ import annotations

import json

import pytest

from api import constants
from nodeplugins.devicemanager import simulated

from .conftest import ensure_namespace, gpustack, harness

pytestmark = pytest.mark.e2e

PRODUCT = simulated.PRODUCTS["NVIDIA A10G"]
NODE = "chain-a10g"
POOL = "gpustack--nvidia-a10g-linux-amd64"
NS = "chain"


def write_devices(cluster, devices) -> None:
    cluster.apply({k: v for k, v in devices.items() if k != "status"})
    cluster.kubectl(
        "patch",
        "devices",
        devices["metadata"]["name"],
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": devices["status"]}),
    )


def half_sliced(devices):
    for card in devices["status"]["groups"][0]["accelerators"]:
        card.update(mode=3, allocated=800_000, remaining=800_000, allocatedSlices=1)
    return devices


def _cleanup(cluster) -> None:
    cluster.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=true", timeout=180)
    cluster.kubectl("delete", "node", NODE, "--ignore-not-found")
    cluster.kubectl("delete", "devices", NODE, "--ignore-not-found")


def _entrance(cluster) -> str | None:
    if cluster.kubectl("get", "instancetype", POOL, check=False).returncode != 0:
        return None
    return cluster.kubectl_json("get", "instancetype", POOL).get("status", {}).get("entrance")


@pytest.fixture(scope="module")
def chain(cluster):
    op = gpustack.install(cluster)
    gpustack.start_worker(cluster, op)  # webhooks and every registered controller
    try:
        labels = simulated.node_labels(NODE, PRODUCT, 4)
        harness.create_fake_node(cluster, NODE, labels=labels, capacity=simulated.plugin_capacity(PRODUCT, 4))
        write_devices(cluster, simulated.devices(NODE, PRODUCT, 4))
        ensure_namespace(cluster, NS)
        entrance = harness.wait_for(
            lambda: _entrance(cluster), timeout=90, what="the A10G InstanceType's entrance"
        )
        harness.wait_for(
            lambda: cluster.kubectl("get", "localqueue", entrance, "-n", NS, check=False).returncode == 0,
            timeout=60,
            what="the LocalQueue in the tenant namespace",
        )
        yield op, entrance
    finally:
        try:
            _cleanup(cluster)
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


def pod(name: str, queue: str, limits: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {constants.KUEUE_QUEUE_NAME: queue}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/none:0",
                    "resources": {
                        "requests": {"cpu": "500m", "memory": "1Gi", **limits},
                        "limits": {"memory": "1Gi", **limits},
                    },
                }
            ],
        },
    }


def bound(cluster, name: str) -> dict | None:
    obj = cluster.kubectl_json("get", "pod", name, "-n", NS)
    return obj if obj["spec"].get("nodeName") and not obj["spec"].get("schedulingGates") else None


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


def test_whole_cards_on_half_sliced_cards_wait_for_free_cards(cluster, chain):
    _, entrance = chain
    write_devices(cluster, half_sliced(simulated.devices(NODE, PRODUCT, 4)))
    cluster.kubectl("create", "-f", "-", input=json.dumps(pod("whole", entrance, {"nvidia.com/gpu": "2"})))
    state = harness.wait_for(
        lambda: (s := check_state(cluster, "whole")) and s["state"] == "Retry" and s,
        timeout=90,
        what="gate 3 answering Retry",
    )
    assert "whole" in state["message"] or "PodSet" in state["message"]
    assert bound(cluster, "whole") is None  # the credits fit, no card does: still gated
    write_devices(cluster, simulated.devices(NODE, PRODUCT, 4))  # the cards are freed
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

    before = snapshot()
    gpustack.stop_worker(op)
    gpustack.start_worker(cluster, op)
    harness.wait_for(
        lambda: (
            cluster.kubectl_json(
                "get", "lease", constants.LEADER_ELECTION_ID, "-n", constants.SYSTEM_NAMESPACE
            )
            .get("spec", {})
            .get("holderIdentity")
        ),
        timeout=60,
        what="a leader",
    )
    import time

    time.sleep(5)  # a full pass over every cache
    assert snapshot() == before
