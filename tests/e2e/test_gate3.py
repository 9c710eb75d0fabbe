"""Gate 3 against the real Kueue: the ``gpustack-node-devices`` AdmissionCheck holds a Workload
whose whole cards Kueue's scalar credits let through, and releases it once the cards are free.

The controller runs in this process (leader election off) over the local control plane: a kwok
node with 8 simulated A10G cards whose ``Devices`` ledger holds a 50 % slice on every card (mode 3,
remaining 800,000), a topology-aware ResourceFlavor / ClusterQueue (credits in
``credits.gpustack.ai/nvidia``, ``admissionChecksStrategy`` listing ``gpustack-node-devices``) and a
LocalQueue.  A 30 % slice fits at once; four whole cards (6,400,000 credits — Kueue has them) are
answered ``Retry`` naming the PodSet and stay gated; freeing the cards in the ledger turns the
check ``Ready`` and Kueue admits and ungates the Pod.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import harness
import pytest

from api import constants
from controllers.nodedevices import check
from kube.client import Client, load_api_client
from kube.manager import Manager
from nodeplugins.devicemanager import simulated as sim

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DEVICES_CRD = REPO / "charts" / "gpustack-operator" / "crds" / "devices.worker.gpustack.ai.yaml"
M = 1_600_000
A10G = sim.PRODUCTS["NVIDIA A10G"]
CREDITS = "credits.gpustack.ai/nvidia"
KUEUE = "kueue.x-k8s.io/v1beta2"
BACKOFF = 3  # seconds Kueue waits before re-reserving a Retry-ed Workload (30 in production)


@pytest.fixture(scope="module")
def gate3(cluster: harness.ClusterInfo):
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(DEVICES_CRD))
    cluster.kubectl("wait", "--for=condition=Established", "crd/devices.worker.gpustack.ai", "--timeout=60s")
    client = Client(load_api_client(str(cluster.kubeconfig)))
    manager = Manager(client, leader_election=False)
    controller = manager.add(check.NodeDevicesCheck)
    assert isinstance(controller, check.NodeDevicesCheck)
    controller.retry_after_seconds = BACKOFF
    manager.start(sync_timeout=60)
    try:
        yield client, controller
    finally:
        manager.stop()


def _pod(ns: str, name: str, queue: str, limits: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {constants.KUEUE_QUEUE_NAME: queue}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/none:0",
                    "resources": {"requests": {"cpu": "100m", **limits}, "limits": limits},
                }
            ]
        },
    }


def _workload_of(client: Client, ns: str, pod: str) -> dict | None:
    items, _ = client.list("Workload", ns)
    for wl in items:
        owners = (wl.get("metadata") or {}).get("ownerReferences") or []
        if any(o.get("kind") == "Pod" and o.get("name") == pod for o in owners):
            return wl
    return None


def _check(wl: dict | None) -> dict:
    for entry in ((wl or {}).get("status") or {}).get("admissionChecks") or ():
        if entry.get("name") == check.CHECK:
            return entry
    return {}


def _events(client: Client, ns: str, name: str, reason: str) -> list[dict]:
    items, _ = client.list("Event", ns, field_selector=f"involvedObject.name={name},reason={reason}")
    return items


def _wait(client: Client, ns: str, predicate, *, timeout: float, what: str):
    """``harness.wait_for`` that shows the namespace's Workloads when it times out."""
    try:
        return harness.wait_for(predicate, timeout=timeout, what=what)
    except TimeoutError as error:
        items, _ = client.list("Workload", ns)
        states = {w["metadata"]["name"]: w.get("status") for w in items}
        raise TimeoutError(f"{error}; workloads: {json.dumps(states)[:6000]}") from None


def _ledger(node: str, rows: dict[int, dict[str, Any]]) -> dict:
    obj = sim.devices(node, A10G, 8)
    for i, row in rows.items():
        obj["status"]["groups"][0]["accelerators"][i].update(row)
    return obj


def test_gate3_holds_whole_cards_that_credits_let_through(cluster: harness.ClusterInfo, gate3) -> None:
    client, _controller = gate3
    suffix = uuid.uuid4().hex[:6]
    ns, node, topology, rf, cq, lq = (
        f"gate3-{suffix}",
        f"gate3-gpu-{suffix}",
        f"gate3-host-{suffix}",
        f"gate3-rf-{suffix}",
        f"gate3-cq-{suffix}",
        "gate3-lq",
    )
    labels = sim.node_labels(node, A10G, 8)
    labels[constants.LABEL_TOPOLOGY_PROFILE] = suffix  # this test's own pool
    flavor_keys = (
        constants.LABEL_OS,
        constants.LABEL_ARCH,
        constants.LABEL_MANAGED,
        constants.label_general_group("generic"),
        constants.label_accelerator_group(A10G.group),
        constants.label_accelerator_count(A10G.group),
        constants.LABEL_TOPOLOGY_PROFILE,
    )
    try:
        cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        harness.create_fake_node(
            cluster,
            node,
            labels=labels,
            capacity={
                "nvidia.com/gpu": 8,
                "nvidia.com/gpu.sliced": 8 * 128,
                "nvidia.com/gpu.sliced.units": 8 * M,
                # Kueue v0.17.0 re-checks a TAS placement against the node with the *transformed*
                # quota requests, so a node without this key never fits ("Workload no longer fits
                # after processing another workload"); the fake node carries it.
                CREDITS: 8 * M,
            },
        )
        devices = _ledger(
            node,
            {
                i: {"mode": 3, "allocated": M // 2, "remaining": M // 2, "allocatedSlices": 1}
                for i in range(8)
            },
        )
        devices["metadata"]["labels"][constants.LABEL_TOPOLOGY_PROFILE] = suffix
        status = devices.pop("status")
        client.create(devices)
        client.apply({**_meta(devices), "status": status}, field_manager="gate3-e2e", subresource="status")
        cluster.apply(
            [
                {
                    "apiVersion": KUEUE,
                    "kind": "Topology",
                    "metadata": {"name": topology},
                    "spec": {"levels": [{"nodeLabel": constants.LABEL_HOSTNAME}]},
                },
                {
                    "apiVersion": KUEUE,
                    "kind": "ResourceFlavor",
                    "metadata": {"name": rf},
                    "spec": {
                        "nodeLabels": {k: labels[k] for k in flavor_keys},
                        "tolerations": [{"operator": "Exists"}],
                        "topologyName": topology,
                    },
                },
                {
                    "apiVersion": KUEUE,
                    "kind": "ClusterQueue",
                    "metadata": {"name": cq},
                    "spec": {
                        "namespaceSelector": {},
                        "admissionChecksStrategy": {"admissionChecks": [{"name": check.CHECK}]},
                        "resourceGroups": [
                            {
                                # Kueue v0.17.0 has no quotaCheckStrategy IgnoreUndeclared: the
                                # slice token must be covered too.
                                "coveredResources": ["cpu", "memory", CREDITS, "nvidia.com/gpu.sliced"],
                                "flavors": [
                                    {
                                        "name": rf,
                                        "resources": [
                                            {"name": "cpu", "nominalQuota": "8"},
                                            {"name": "memory", "nominalQuota": "64Gi"},
                                            {"name": CREDITS, "nominalQuota": str(8 * M)},
                                            {"name": "nvidia.com/gpu.sliced", "nominalQuota": str(8 * 128)},
                                        ],
                                    }
                                ],
                            }
                        ],
                    },
                },
                {
                    "apiVersion": KUEUE,
                    "kind": "LocalQueue",
                    "metadata": {"name": lq, "namespace": ns},
                    "spec": {"clusterQueue": cq},
                },
            ]
        )
        # The controller applied the AdmissionCheck and keeps it Active; the queue goes active on it.
        admission_check = harness.wait_for(
            lambda: (
                (obj := client.get("AdmissionCheck", check.CHECK))
                and any(
                    x["type"] == "Active" and x["status"] == "True"
                    for x in obj.get("status", {}).get("conditions", [])
                )
                and obj
            ),
            timeout=60,
            what="AdmissionCheck gpustack-node-devices Active",
        )
        assert admission_check["spec"]["controllerName"] == constants.ADMISSION_CHECK_NODE_DEVICES_CONTROLLER
        harness.wait_for(
            lambda: any(
                x["type"] == "Active" and x["status"] == "True"
                for x in (client.get("ClusterQueue", cq) or {}).get("status", {}).get("conditions", [])
            ),
            timeout=60,
            what="ClusterQueue active",
        )
        harness.wait_for_default_service_account(cluster, ns)

        # A 30 % slice fits on a card that holds 50 %: Ready at once, admitted, ungated, bound.
        slice_limits = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": str(30 * 16_000)}
        cluster.kubectl("create", "-f", "-", input=json.dumps(_pod(ns, "slice", lq, slice_limits)))
        bound = _wait(
            client,
            ns,
            lambda: (p := client.get("Pod", "slice", ns)) and p["spec"].get("nodeName") and p,
            timeout=90,
            what="the slice Pod admitted and bound",
        )
        assert bound["spec"]["nodeName"] == node and not bound["spec"].get("schedulingGates")
        assert _check(_workload_of(client, ns, "slice"))["state"] == "Ready"

        # Four whole cards: Kueue has the credits (8 x 800,000 free), no card is whole.
        cluster.kubectl("create", "-f", "-", input=json.dumps(_pod(ns, "whole", lq, {"nvidia.com/gpu": "4"})))
        wl = harness.wait_for(lambda: _workload_of(client, ns, "whole"), timeout=30, what="workload of whole")
        name = wl["metadata"]["name"]
        (event,) = _wait(
            client,
            ns,
            lambda: _events(client, ns, name, check.REASON_RETRY),
            timeout=90,
            what="a Retry verdict",
        )
        assert 'PodSet "main"' in event["message"], event["message"]
        assert "4 whole nvidia-a10g cards" in event["message"], event["message"]
        assert "0 of 8 cards whole and free" in event["message"], event["message"]
        # Kueue reserved the quota — that is what gate 3 is for — yet the Pod stays gated and unbound,
        # and it stays held when Kueue re-reserves after the back-off while no card is whole.
        retried = _wait(
            client,
            ns,
            lambda: [
                e for e in _events(client, ns, name, check.REASON_RETRY) if int(e.get("count") or 1) >= 2
            ],
            timeout=90,
            what="a second Retry after Kueue re-reserved the quota",
        )
        assert retried
        whole = client.get("Pod", "whole", ns)
        assert not whole["spec"].get("nodeName")
        assert "kueue.x-k8s.io/admission" in [g["name"] for g in whole["spec"].get("schedulingGates", [])]
        assert not any(
            x["type"] == "Admitted" and x["status"] == "True"
            for x in (_workload_of(client, ns, "whole") or {}).get("status", {}).get("conditions", [])
        )

        # Free the cards: the device manager would republish the ledger like this.
        free = _ledger(node, {})["status"]
        client.apply({**_meta(devices), "status": free}, field_manager="gate3-e2e", subresource="status")
        bound = _wait(
            client,
            ns,
            lambda: (p := client.get("Pod", "whole", ns)) and p["spec"].get("nodeName") and p,
            timeout=120,
            what="the whole-card Pod admitted after the cards were freed",
        )
        assert bound["spec"]["nodeName"] == node and not bound["spec"].get("schedulingGates")
        final = _workload_of(client, ns, "whole")
        assert _check(final)["state"] == "Ready", _check(final)
        assert any(x["type"] == "Admitted" and x["status"] == "True" for x in final["status"]["conditions"])
        assert _events(client, ns, name, check.REASON_READY)
    finally:
        cluster.kubectl(
            "delete", "namespace", ns, "--ignore-not-found", "--wait=true", "--timeout=90s", check=False
        )
        for kind, obj in (("clusterqueue", cq), ("resourceflavor", rf), ("topology", topology)):
            cluster.kubectl(
                "delete", f"{kind}.kueue.x-k8s.io", obj, "--ignore-not-found", "--wait=false", check=False
            )
        cluster.kubectl("delete", "devices.worker.gpustack.ai", node, "--ignore-not-found", check=False)
        harness.delete_fake_node(cluster, node)


def _meta(obj: dict) -> dict:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {"name": obj["metadata"]["name"]},
    }
