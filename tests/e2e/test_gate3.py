"""Gate 3 against the real Kueue: the ``gpustack-node-devices`` AdmissionCheck holds a Workload
whose whole cards Kueue's scalar credits let through, and releases it once the cards are free.

The controller (and the node counting keys, which Kueue's topology-aware check counts) runs in
this process (leader election off) over the local control plane: a kwok node with 8 simulated A10G
cards whose publish-only device manager writes the ``Devices`` ledger and the NodeFeature that
nfd-master turns into the node's labels, a topology-aware ResourceFlavor / ClusterQueue (credits in
``credits.gpustack.ai/nvidia``, ``admissionChecksStrategy`` listing ``gpustack-node-devices``) and a
LocalQueue.  A 30 % slice fits at once.  Then the simulated hardware reports six cards unhealthy
(the node's profile edited, as Xids would): the ledger says so at once while the node's capacity
still counts 8 (the kubelet's view lags; on kwok it never moves), so four whole cards (6,400,000
credits — Kueue has them, and TAS finds the node) are answered ``Retry`` naming the PodSet and stay
gated; the cards replaced (and the agent restarted: a critical Xid sticks) turn the check ``Ready``
and Kueue admits and ungates the Pod.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import harness
import nodes
import pytest

from api import constants
from controllers.nodedevices import check
from controllers.pools.node_capacity_keys import NodeCapacityReconciler
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
SLOT = 24  # this module's device-manager port (tests/cluster/nodes.py)


@pytest.fixture(scope="module")
def gate3(cluster: harness.ClusterInfo):
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(DEVICES_CRD))
    cluster.kubectl("wait", "--for=condition=Established", "crd/devices.worker.gpustack.ai", "--timeout=60s")
    client = Client(load_api_client(str(cluster.kubeconfig)))
    manager = Manager(client, leader_election=False)
    controller = manager.add(check.NodeDevicesCheck)
    assert isinstance(controller, check.NodeDevicesCheck)
    controller.retry_after_seconds = BACKOFF
    manager.add(NodeCapacityReconciler)
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


def _unhealthy_in_ledger(client: Client, node: str) -> int:
    devices = client.get("Devices", node) or {}
    rows = [row for g in (devices.get("spec") or {}).get("groups") or [] for row in g["accelerators"]]
    return sum(1 for row in rows if (row.get("status") or {}).get("unhealthy")) if len(rows) == 8 else -1


def test_gate3_holds_whole_cards_that_credits_let_through(
    cluster: harness.ClusterInfo, gate3, tmp_path: Path
) -> None:
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
    # This test's own pool: the node by name, and the accelerator keys its labels carry.
    flavor_keys = (
        constants.LABEL_HOSTNAME,
        constants.label_accelerator_group(A10G.group),
        constants.label_accelerator_count(A10G.group),
    )
    profile = tmp_path / "a10g-8.yaml"
    profile.write_text(nodes.cards_profile(A10G.product, 8))
    try:
        cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        simulated = nodes.start_node(cluster, node, profile, slot=SLOT, real=False)
        labels = harness.wait_for(
            lambda: (
                (n := client.get("Node", node))
                and (got := n["metadata"].get("labels") or {})
                and got.get(constants.label_accelerator_count(A10G.group)) == "8"
                and "nvidia.com/gpu.sliced.units" in (n["status"].get("capacity") or {})
                and got
            ),
            timeout=60,
            what="the node labelled from its device manager's NodeFeature and its slice units counted",
        )
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
                                # Kueue v0.19 ignores what a queue does not declare: the
                                # credits are the quota.
                                "coveredResources": [CREDITS],
                                "flavors": [
                                    {
                                        "name": rf,
                                        "resources": [{"name": CREDITS, "nominalQuota": str(8 * M)}],
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

        # Six cards go bad in the hardware; the device manager re-detects and the ledger says so.
        simulated.profile.write_text(nodes.cards_profile(A10G.product, 8, unhealthy=6))
        harness.wait_for(
            lambda: _unhealthy_in_ledger(client, node) == 6, timeout=60, what="six cards unhealthy"
        )
        # Four whole cards: Kueue has the credits and the node's capacity still counts 8; two cards
        # are healthy.
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
        assert "of 2 cards whole and free" in event["message"], event["message"]
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

        # The cards are replaced. A critical Xid keeps a card unhealthy for the agent's lifetime (as
        # NVIDIA's own plugin does), so the device manager is restarted and republishes the ledger.
        simulated.profile.write_text(nodes.cards_profile(A10G.product, 8))
        nodes.stop_component(simulated, "device-manager")
        nodes.start_device_manager(cluster, simulated)
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
        harness.delete_namespace(cluster, ns, timeout=90)
        for kind, obj in (("clusterqueue", cq), ("resourceflavor", rf), ("topology", topology)):
            cluster.kubectl(
                "delete", f"{kind}.kueue.x-k8s.io", obj, "--ignore-not-found", "--wait=false", check=False
            )
        nodes.remove_node(cluster, node)
