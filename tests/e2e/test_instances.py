"""GPU Instances on the real control plane with the real Kueue (instances spec part A).

The whole worker runs (webhooks and every registered controller, behind its Lease) over a kwok node
with 4 simulated NVIDIA A10G cards, whose publish-only device manager writes its Devices and
NodeFeature (nfd-master labels the node from it); its pools controllers derive the InstanceType
``gpustack--nvidia-a10g-linux-amd64`` — the type the seed's Instance names — with its queues.  The
seed's key and Instance are applied as the seed instructs (``spec.data`` replaced by a real key)
and driven the way a user drives them with ``kubectl``: Ready with a node, IPs and node ports;
stopped (the Pod goes, Kueue's quota is given back, ``Stopped`` is the whole status) and started
again; Pod and Service deleted by hand; a key, pull secret or claim missing; the InstanceType
deactivated; the worker restarted; the Instance deleted.

A kwok node has no kubelet to call its device plugins, so no Pod here gets an allocation record: a card in
``status.allocations`` and the ``sshd`` container receiving its card through the visibility
resource need a real kubelet node, and are checked in ``test_instances_on_nodes``.

The module owns the simulated pools of the cluster it runs on, like ``test_pools``.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gpustack
import harness
import nodes
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from api import constants
from nodeplugins.devicemanager import simulated

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
A10G = simulated.PRODUCTS["NVIDIA A10G"]
POOL = "gpustack--nvidia-a10g-linux-amd64"
SUFFIX = uuid.uuid4().hex[:5]
NODE = f"inst-a10g-{SUFFIX}"
NS = "team-a"  # the seed's namespace
OTHER = f"inst-{SUFFIX}"
NAME = "sliced-demo"
CREDITS = "credits.gpustack.ai/nvidia"
INTERNAL_IP, EXTERNAL_IP = "192.168.50.10", "203.0.113.10"
SLOT = 17  # this module's device-manager port (tests/cluster/nodes.py)
KEY_LINE = (
    ed25519.Ed25519PrivateKey.generate()
    .public_key()
    .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    .decode()
)


def seed(path: str) -> dict[str, Any]:
    (document,) = yaml.safe_load_all((EXAMPLES / path).read_text())
    return document


def get(cluster: harness.ClusterInfo, *args: str) -> dict | None:
    proc = cluster.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def instance(cluster: harness.ClusterInfo, name: str = NAME, ns: str = NS) -> dict:
    obj = get(cluster, "instance", name, "-n", ns)
    assert obj is not None, f"Instance {ns}/{name} is gone"
    return obj


def only_stopped(status: dict) -> bool:
    """``{phase: Stopped}`` and nothing of the last run: only the Ready condition, False, beside it."""
    rest = {k: v for k, v in status.items() if k != "conditions"}
    ready = [(c["type"], c["status"], c["reason"]) for c in status.get("conditions") or []]
    return rest == {"phase": "Stopped"} and ready == [("Ready", "False", "Stopped")]


def wait_phase(
    cluster: harness.ClusterInfo, phase: str, name: str = NAME, ns: str = NS, timeout: float = 120
) -> dict:
    def reached() -> dict | None:
        obj = get(cluster, "instance", name, "-n", ns)
        return obj if obj and (obj.get("status") or {}).get("phase") == phase else None

    try:
        return harness.wait_for(reached, timeout=timeout, what=f"Instance {ns}/{name} {phase}")
    except TimeoutError as error:
        obj = get(cluster, "instance", name, "-n", ns)
        pod = get(cluster, "pod", name, "-n", ns)
        raise TimeoutError(
            f"{error}; status: {json.dumps((obj or {}).get('status'))}; "
            f"pod: {json.dumps((pod or {}).get('status'))[:3000]}"
        ) from None


def patch_instance(cluster: harness.ClusterInfo, body: dict, name: str = NAME, ns: str = NS) -> None:
    cluster.kubectl("patch", "instance", name, "-n", ns, "--type=merge", "-p", json.dumps(body))


def queue_usage(cluster: harness.ClusterInfo) -> tuple[int, int]:
    """(admitted Workloads, credits in use) of the A10G pool's ClusterQueue."""
    queue = get(cluster, "clusterqueues.kueue.x-k8s.io", POOL) or {}
    status = queue.get("status") or {}
    used = 0
    for flavor in status.get("flavorsUsage") or []:
        for resource in flavor.get("resources") or []:
            if resource.get("name") == CREDITS:
                used += int(harness.parse_quantity(resource.get("total") or "0"))
    return int(status.get("admittedWorkloads") or 0), used


def _queue_ready(cluster: harness.ClusterInfo) -> bool:
    queue = get(cluster, "clusterqueues.kueue.x-k8s.io", POOL) or {}
    conditions = {x["type"]: x["status"] for x in (queue.get("status") or {}).get("conditions") or []}
    return conditions.get("Active") == "True"


def create_node(cluster: harness.ClusterInfo) -> nodes.Node:
    """The kwok node, with the addresses and device-plugin capacity a kubelet would report (kwok
    reports none of its own), then its publish-only device manager: the labels and the Devices
    ledger are what that agent and nfd-master publish."""
    node = harness.fake_node_manifest(NODE, capacity=simulated.plugin_capacity(A10G, 4))
    node["status"]["addresses"] = [
        {"type": "InternalIP", "address": INTERNAL_IP},
        {"type": "Hostname", "address": NODE},
        {"type": "ExternalIP", "address": EXTERNAL_IP},
    ]
    cluster.kubectl("create", "-f", "-", input=json.dumps(node))
    harness.wait_for(lambda: harness.node_is_ready(cluster, NODE), timeout=60, what=f"node {NODE} Ready")
    return nodes.start_node(cluster, NODE, "a10g-4.yaml", slot=SLOT, real=False)


@pytest.fixture(scope="module")
def worker(cluster: harness.ClusterInfo) -> Iterator[gpustack.Operator]:
    foreign = [
        n["metadata"]["name"]
        for n in cluster.kubectl_json("get", "nodes", "-l", "gpustack.ai/managed=true")["items"]
    ]
    if foreign:
        raise AssertionError(
            f"e2e instances: the cluster already has managed nodes {foreign}; these tests own the pools"
            + " (an earlier module left them behind)"
        )
    op = gpustack.install(cluster)
    for ns in (NS, OTHER):
        gpustack.ensure_namespace(cluster, ns)
    try:
        create_node(cluster)
        gpustack.start_worker(cluster, op)
        harness.wait_for(
            lambda: ((get(cluster, "instancetype", POOL) or {}).get("status") or {}).get("phase") == "Active",
            timeout=120,
            what=f"InstanceType {POOL} Active",
        )
        harness.wait_for(lambda: _queue_ready(cluster), timeout=60, what="the A10G queue active")
        for ns in (NS, OTHER):
            harness.wait_for_default_service_account(cluster, ns)
        yield op
    finally:
        for ns in (NS, OTHER):
            cluster.kubectl("delete", "instances", "--all", "-n", ns, "--timeout=60s", check=False)
            cluster.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false", check=False)
        nodes.remove_node(cluster, NODE)
        gpustack.take_pools_down(cluster, what="e2e instances teardown")
        gpustack.stop_worker(op)
        gpustack.uninstall_webhooks(cluster)
        cluster.kubectl("delete", "devices", NODE, "--ignore-not-found", check=False)


# --- The companion kinds -----------------------------------------------------------------------------


def test_the_seed_key_placeholder_applies_with_a_warning_and_no_secret(
    cluster: harness.ClusterInfo, worker
) -> None:
    # The seed applies unchanged; kubectl shows why the key is unusable, and no Secret is written.
    result = cluster.kubectl(
        "apply", "-f", str(EXAMPLES / "60-instancesshpublickey-workspace-key.yaml"), check=False
    )
    assert result.returncode == 0, result.stderr
    assert "Warning" in result.stderr and "spec.data" in result.stderr and "not base64" in result.stderr
    harness.wait_for(
        lambda: [
            e
            for e in cluster.kubectl_json("get", "events", "-n", NS)["items"]
            if e.get("reason") == "InvalidKey" and e["involvedObject"]["name"] == "workspace-key"
        ],
        timeout=30,
        what="the InvalidKey event",
    )
    assert get(cluster, "secret", "workspace-key", "-n", NS) is None


def test_seed_key_becomes_its_secret(cluster: harness.ClusterInfo, worker) -> None:
    key = seed("60-instancesshpublickey-workspace-key.yaml")
    key["spec"]["data"] = f"{KEY_LINE} e2e@instances"  # "Replace ... spec.data with your SSH public key"
    cluster.apply(key)
    secret = harness.wait_for(
        lambda: get(cluster, "secret", "workspace-key", "-n", NS), timeout=30, what="the key's Secret"
    )
    assert base64.b64decode(secret["data"]["authorized_keys"]).decode() == f"{KEY_LINE} e2e@instances\n"
    (owner,) = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == (
        "InstanceSSHPublicKey",
        "workspace-key",
        True,
    )


def test_pull_secret_becomes_a_docker_config_and_forgets_its_password(
    cluster: harness.ClusterInfo, worker
) -> None:
    pull = {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "InstanceImagePullSecret",
        "metadata": {"name": "registry", "namespace": OTHER},
        "spec": {"registry": "registry.example.com", "username": "team", "password": "e2e-s3cret"},
    }
    cluster.apply(pull)
    secret = harness.wait_for(
        lambda: get(cluster, "secret", "registry", "-n", OTHER), timeout=30, what="the pull Secret"
    )
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    stored = harness.wait_for(
        lambda: (
            (o := get(cluster, "instanceimagepullsecret", "registry", "-n", OTHER))
            and "password" not in o["spec"]
            and o
        ),
        timeout=30,
        what="the password removed from the object",
    )
    assert stored["spec"] == {"registry": "registry.example.com", "username": "team"}
    assert "e2e-s3cret" not in json.dumps(stored)  # nor in kubectl's last-applied copy


def test_persistent_volume_becomes_its_claim(cluster: harness.ClusterInfo, worker) -> None:
    volume = {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "InstancePersistentVolume",
        "metadata": {"name": "data", "namespace": OTHER},
        "spec": {"capacity": "5Gi", "type": "no-such-class"},
    }
    cluster.apply(volume)
    claim = harness.wait_for(lambda: get(cluster, "pvc", "data", "-n", OTHER), timeout=30, what="the claim")
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    assert claim["spec"]["storageClassName"] == "no-such-class"
    harness.wait_for(
        lambda: (
            (get(cluster, "instancepersistentvolume", "data", "-n", OTHER) or {})
            .get("status", {})
            .get("phase")
            == "Pending"
        ),
        timeout=30,
        what="the volume's status mirroring its claim",
    )
    refused = cluster.kubectl(
        "patch",
        "instancepersistentvolume",
        "data",
        "-n",
        OTHER,
        "--type=merge",
        "-p",
        '{"spec":{"capacity":"9Gi"}}',
        check=False,
    )
    assert refused.returncode != 0 and "immutable" in refused.stderr


# --- The seed's Instance -------------------------------------------------------------------------------


def test_seed_instance_reaches_ready(cluster: harness.ClusterInfo, worker) -> None:
    obj = seed("61-instance-sliced-demo.yaml")
    assert obj["spec"]["type"] == POOL  # "Replace spec.type with that name": it already is the pool's
    cluster.apply(obj)
    ready = wait_phase(cluster, "Ready")
    status = ready["status"]
    assert status["nodeName"] == NODE
    assert status["hostIPs"] == [{"ip": EXTERNAL_IP}, {"ip": INTERNAL_IP}]  # external first
    assert status["podIPs"] == [
        {"ip": ip["ip"]} for ip in get(cluster, "pod", NAME, "-n", NS)["status"]["podIPs"]
    ]
    (port,) = status["ports"]
    assert (port["name"], port["port"], port["protocol"]) == ("ssh", 22, "TCP") and port["nodePort"] > 0
    assert status["accessAddresses"] == [h["ip"] for h in status["hostIPs"]]
    assert constants.FINALIZER_INSTANCE in ready["metadata"]["finalizers"]

    pod = get(cluster, "pod", NAME, "-n", NS)
    entrance = get(cluster, "instancetype", POOL)["metadata"]["labels"][constants.LABEL_QUEUE_ENTRANCE]
    assert pod["metadata"]["labels"][constants.KUEUE_QUEUE_NAME] == entrance
    assert pod["metadata"]["ownerReferences"][0]["uid"] == ready["metadata"]["uid"]
    spec = pod["spec"]
    assert spec["hostIPC"] and spec["shareProcessNamespace"] and spec["automountServiceAccountToken"] is False
    main, sshd = spec["containers"]
    assert main["resources"]["limits"]["nvidia.com/gpu.sliced.memory-percentage"] == "20"
    units = main["resources"]["limits"]["nvidia.com/gpu.sliced.units"]  # the Pod webhook's fold
    assert harness.parse_quantity(units) == 20 * 16_000
    assert sshd["resources"]["limits"] == {"device.gpustack.ai/nvidia.visibility": "1"}
    assert sshd["image"] == "gpustack/ssh-server:v1.3.0"

    service = get(cluster, "service", NAME, "-n", NS)
    assert service["spec"]["type"] == "NodePort"
    assert [(p["name"], p["nodePort"]) for p in service["spec"]["ports"]] == [("tcp-22", port["nodePort"])]
    assert queue_usage(cluster) == (1, 20 * 16_000)


def test_a_hand_edited_allocation_claims_no_card_and_a_deleted_service_returns(
    cluster: harness.ClusterInfo, worker
) -> None:
    (group,) = cluster.kubectl_json("get", "devices", NODE)["status"]["groups"]
    card = group["accelerators"][0]["id"]
    forged = {
        "main": [
            {
                "id": group["id"],
                "manufacturer": "nvidia",
                "accelerators": [{"id": card, "index": 0, "mode": 1}],
            }
        ]
    }
    cluster.kubectl(
        "annotate",
        "pod",
        NAME,
        "-n",
        NS,
        "--overwrite",
        f"{constants.ANNOTATION_ACCELERATOR_ALLOCATED}={json.dumps(forged)}",
    )
    old_port = instance(cluster)["status"]["ports"][0]["nodePort"]
    old_uid = get(cluster, "service", NAME, "-n", NS)["metadata"]["uid"]
    cluster.kubectl("delete", "service", NAME, "-n", NS)
    harness.wait_for(
        lambda: (s := get(cluster, "service", NAME, "-n", NS)) and s["metadata"]["uid"] != old_uid,
        timeout=30,
        what="the Service recreated",
    )
    new_port = get(cluster, "service", NAME, "-n", NS)["spec"]["ports"][0]["nodePort"]
    if new_port != old_port:
        harness.wait_for(
            lambda: instance(cluster)["status"]["ports"][0].get("nodePort") == new_port,
            timeout=30,
            what="the status showing the new node port",
        )
    # The ledger shows card 0 free: the forged record is not believed, and the device manager, which
    # granted the Pod nothing, removes it.
    assert "allocations" not in instance(cluster)["status"]
    harness.wait_for(
        lambda: (
            constants.ANNOTATION_ACCELERATOR_ALLOCATED
            not in (get(cluster, "pod", NAME, "-n", NS)["metadata"].get("annotations") or {})
        ),
        timeout=30,
        what="the device manager removing the record it never wrote",
    )
    assert "allocations" not in instance(cluster)["status"]


def test_stop_frees_the_card_and_leaves_nothing_stale(cluster: harness.ClusterInfo, worker) -> None:
    patch_instance(cluster, {"spec": {"stop": True}})
    stopped = wait_phase(cluster, "Stopped")
    assert only_stopped(stopped["status"])
    assert get(cluster, "pod", NAME, "-n", NS) is None
    harness.wait_for(lambda: queue_usage(cluster) == (0, 0), timeout=60, what="Kueue's quota given back")


def test_clearing_stop_starts_it_again(cluster: harness.ClusterInfo, worker) -> None:
    patch_instance(cluster, {"spec": {"stop": False}})
    ready = wait_phase(cluster, "Ready")
    assert ready["status"]["nodeName"] == NODE
    assert queue_usage(cluster)[0] == 1


def test_a_pod_deleted_by_hand_is_recreated(cluster: harness.ClusterInfo, worker) -> None:
    old = get(cluster, "pod", NAME, "-n", NS)["metadata"]["uid"]
    cluster.kubectl("delete", "pod", NAME, "-n", NS, "--wait=true", "--timeout=60s")
    harness.wait_for(
        lambda: (p := get(cluster, "pod", NAME, "-n", NS)) and p["metadata"]["uid"] != old,
        timeout=60,
        what="a new Pod",
    )
    wait_phase(cluster, "Ready")


# --- Bad input -----------------------------------------------------------------------------------------


def _instance(name: str, **spec: Any) -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "Instance",
        "metadata": {"name": name, "namespace": OTHER},
        "spec": {
            "type": POOL,
            "image": "ubuntu:24.04",
            "resources": {"accelerator": "1", "acceleratorSlicedMemoryPercentage": 10},
            "volume": {"ephemeral": {"capacity": "1Gi"}},
            **spec,
        },
    }


def _message(cluster: harness.ClusterInfo, name: str, fragment: str) -> dict | None:
    obj = get(cluster, "instance", name, "-n", OTHER) or {}
    status = obj.get("status") or {}
    return (
        obj if status.get("phase") == "Pending" and fragment in (status.get("phaseMessage") or "") else None
    )


def test_a_missing_key_pull_secret_or_claim_is_named_and_no_pod_is_made(
    cluster: harness.ClusterInfo, worker
) -> None:
    cases = {
        "no-key": (
            {"sshPublicKey": {"name": "absent-key"}},
            "InstanceSSHPublicKey absent-key does not exist",
        ),
        "no-pull": (
            {"imagePullSecret": {"name": "absent-pull"}},
            "InstanceImagePullSecret absent-pull does not exist",
        ),
        "no-claim": (
            {"volume": {"persistent": {"name": "absent"}}},
            "PersistentVolumeClaim absent does not exist",
        ),
        "unbound": (
            {"volume": {"persistent": {"name": "data"}}},
            "PersistentVolumeClaim data is Pending, not bound",
        ),
        "model": (
            {"additionalVolumes": [{"mountPath": "/model", "model": {"artifactRef": {"name": "qwen"}}}]},
            "ModelArtifact qwen does not exist in this namespace",
        ),
    }
    for name, (spec, _) in cases.items():
        cluster.apply(_instance(name, **spec))
    for name, (_, fragment) in cases.items():
        harness.wait_for(
            lambda n=name, f=fragment: _message(cluster, n, f), timeout=60, what=f"{name}: {fragment}"
        )
        assert get(cluster, "pod", name, "-n", OTHER) is None
    # The key arrives: the Instance starts without being touched.
    key = seed("60-instancesshpublickey-workspace-key.yaml")
    key["metadata"] = {"name": "absent-key", "namespace": OTHER}
    key["spec"]["data"] = KEY_LINE
    cluster.apply(key)
    harness.wait_for(
        lambda: get(cluster, "pod", "no-key", "-n", OTHER), timeout=60, what="the Pod once the key exists"
    )
    wait_phase(cluster, "Ready", "no-key", OTHER)
    # The others are deleted while still blocked: their finalizer goes with no Pod to wait for.
    for name in ("no-pull", "no-claim", "unbound", "model"):
        cluster.kubectl("delete", "instance", name, "-n", OTHER, "--timeout=60s")


# --- The InstanceType and the worker -------------------------------------------------------------------


def test_an_inactive_instance_type_stops_its_instances(cluster: harness.ClusterInfo, worker) -> None:
    cluster.kubectl("patch", "instancetype", POOL, "--type=merge", "-p", '{"spec":{"inactive":true}}')
    try:
        for name, ns in ((NAME, NS), ("no-key", OTHER)):
            stopped = wait_phase(cluster, "Stopped", name, ns)
            assert stopped["spec"]["stop"] is True
            assert only_stopped(stopped["status"])
        events = cluster.kubectl_json(
            "get",
            "events",
            "-n",
            NS,
            "--field-selector",
            f"involvedObject.name={NAME},reason=StoppedByInstanceType",
        )
        assert any("Inactive" in e["message"] for e in events["items"])
    finally:
        cluster.kubectl("patch", "instancetype", POOL, "--type=merge", "-p", '{"spec":{"inactive":false}}')
    harness.wait_for(
        lambda: (get(cluster, "instancetype", POOL) or {}).get("status", {}).get("phase") == "Active",
        timeout=60,
        what="the type active again",
    )
    patch_instance(cluster, {"spec": {"stop": False}})  # "Users restart by clearing stop"
    wait_phase(cluster, "Ready")


def test_a_restarted_worker_changes_nothing(cluster: harness.ClusterInfo, worker) -> None:
    before_pod = get(cluster, "pod", NAME, "-n", NS)["metadata"]["uid"]
    before = instance(cluster)["status"]
    gpustack.stop_worker(worker)
    gpustack.start_worker(cluster, worker)
    # Proof the restarted controllers run: a Service deleted now comes back.
    uid = get(cluster, "service", NAME, "-n", NS)["metadata"]["uid"]
    cluster.kubectl("delete", "service", NAME, "-n", NS)
    harness.wait_for(
        lambda: (s := get(cluster, "service", NAME, "-n", NS)) and s["metadata"]["uid"] != uid,
        timeout=90,
        what="the Service recreated by the restarted worker",
    )
    assert get(cluster, "pod", NAME, "-n", NS)["metadata"]["uid"] == before_pod
    after = wait_phase(cluster, "Ready")["status"]
    assert {k: v for k, v in after.items() if k != "ports"} == {
        k: v for k, v in before.items() if k != "ports"
    }
    assert len(cluster.kubectl_json("get", "pods", "-n", NS)["items"]) == 1


def test_deleting_removes_pod_service_and_finalizer(cluster: harness.ClusterInfo, worker) -> None:
    cluster.kubectl("delete", "instance", NAME, "-n", NS, "--timeout=90s")  # waits for the finalizer
    assert get(cluster, "instance", NAME, "-n", NS) is None
    harness.wait_for(lambda: get(cluster, "pod", NAME, "-n", NS) is None, timeout=30, what="the Pod gone")
    harness.wait_for(
        lambda: get(cluster, "service", NAME, "-n", NS) is None, timeout=30, what="the Service gone"
    )
