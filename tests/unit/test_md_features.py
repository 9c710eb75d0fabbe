"""The ModelDeployment controller with its features installed — the KV cache
(controllers.kvcache.md_feature) and model delivery (controllers.delivery.md_feature) — one pass at
a time over the recording API of tests.unit.md_world: what the Pods carry, what the Binding is told,
what the status says, what wakes a deployment, and what deletion releases."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from api import constants
from api.objects import Obj
from controllers.delivery.md_feature import ArtifactDelivery
from controllers.kvcache.md_feature import KVCacheFeature
from controllers.modeldeployment.controller import FINALIZER, ModelDeploymentReconciler
from tests.unit.md_fixtures import NS, deployment, instance_type, role
from tests.unit.md_world import RecordingClient, admitted_workload, controller_on, informer_of
from tests.webhooks.kvcache_objects import backend, binding, ready_pool

COMMIT = "c" * 40
DIGEST = "sha256:" + "ab" * 32
GiB = 1 << 30
ENTRY = {"kind": "ModelDeployment", "namespace": NS, "name": "qwen"}


class ApplyingClient(RecordingClient):
    """The recording API, where a status apply of a Binding's ``usedBy`` lands the way the
    apiserver's server-side apply lands it: each field manager owns its own list entries."""

    def __init__(self) -> None:
        super().__init__()
        self.applied: list[tuple[Obj, str, str]] = []
        self.owned: dict[tuple[str, str, str], dict[str, list[Obj]]] = {}

    def apply(self, obj: Obj, *, field_manager: str = "", subresource: str = "", **_: Any) -> Obj:
        self.writes.append(
            ("apply" + (f"/{subresource}" if subresource else ""), obj["kind"], obj["metadata"]["name"])
        )
        self.applied.append((copy.deepcopy(obj), field_manager, subresource))
        where = (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if subresource == "status" and "usedBy" in obj.get("status", {}) and where in self.objects:
            owned = self.owned.setdefault(where, {})
            owned[field_manager] = list(obj["status"]["usedBy"])
            stored = self.objects[where]
            stored.setdefault("status", {})["usedBy"] = [e for entries in owned.values() for e in entries]
        return obj


@pytest.fixture
def world():
    client = ApplyingClient()
    controller = controller_on(client)
    put(client, controller, instance_type())
    return client, controller


def put(
    client: RecordingClient, controller: ModelDeploymentReconciler, obj: Obj, event: str = "ADDED"
) -> None:
    """Store ``obj`` on the API and in the controller's cache of its kind, as a watch would."""
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    meta.setdefault("resourceVersion", str(len(client.objects) + 1000))
    client.objects[(obj["kind"], meta.get("namespace", ""), meta["name"])] = obj
    informer_of(controller, obj["kind"])._store(event, copy.deepcopy(obj))  # the cache is its own copy


def refresh(
    client: RecordingClient, controller: ModelDeploymentReconciler, kind: str, name: str, ns: str = ""
) -> None:
    """The watch delivers what the API now holds (a new resourceVersion)."""
    obj = copy.deepcopy(client.objects[(kind, ns, name)])
    obj["metadata"]["resourceVersion"] = str(int(obj["metadata"].get("resourceVersion", "0")) + 1)
    put(client, controller, obj, "MODIFIED")


def drain(controller: ModelDeploymentReconciler) -> set[Any]:
    keys = set()
    while (k := controller.queue.get(timeout=0.01)) is not None:
        keys.add(k)
        controller.queue.done(k)
    return keys


def statuses(client: RecordingClient) -> list[Obj]:
    """Capture every status update (the recording client's update only logs it)."""
    captured: list[Obj] = []
    original = client.update

    def update(body: Obj, *, subresource: str = "") -> Obj:
        if subresource == "status":
            captured.append(copy.deepcopy(body["status"]))
            stored = client.objects.get(
                ("ModelDeployment", body["metadata"]["namespace"], body["metadata"]["name"])
            )
            if stored is not None:
                stored["status"] = copy.deepcopy(body["status"])
        return original(body, subresource=subresource)

    client.update = update  # type: ignore[method-assign]
    return captured


def condition(status: Obj, kind: str) -> tuple[str, str, str]:
    found = next(x for x in status["conditions"] if x["type"] == kind)
    return found["status"], found["reason"], found["message"]


def pods(client: RecordingClient) -> list[Obj]:
    return [o for (k, _, _), o in client.objects.items() if k == "Pod"]


def settle(client: RecordingClient, controller: ModelDeploymentReconciler) -> None:
    """The watches deliver the deletions the API made: cached Pods and Workloads it no longer holds go."""
    for informer in (controller.pods, controller.workloads):
        for obj in informer.list():
            meta = obj["metadata"]
            if (
                obj.get("kind", informer.kind),
                meta.get("namespace", ""),
                meta["name"],
            ) not in client.objects:
                informer._store("DELETED", obj)


def reconcile(client: RecordingClient, controller: ModelDeploymentReconciler, name: str = "qwen") -> None:
    """One pass over the deployment as the API holds it now (its caches brought up to date first)."""
    settle(client, controller)
    stored = copy.deepcopy(client.objects[("ModelDeployment", NS, name)])
    put(client, controller, stored, "MODIFIED")
    drain(controller)
    controller.reconcile((NS, name))


def admit(client: RecordingClient, controller: ModelDeploymentReconciler, *conditions: str) -> None:
    """Kueue and the kubelet: every Pod Ready (and any extra Pod conditions), its group admitted."""
    for obj in pods(client):
        obj["spec"]["nodeName"] = "node-a"
        obj["status"] = {
            "phase": "Running",
            "conditions": [{"type": t, "status": "True"} for t in ("Ready", *conditions)],
        }
        put(client, controller, obj, "MODIFIED")
        put(client, controller, admitted_workload(obj))


def main(pod: Obj) -> Obj:
    return next(ct for ct in pod["spec"]["containers"] if ct["name"] == "main")


def cached(obj: Obj) -> Obj:
    return {**obj, "metadata": {**obj["metadata"], "finalizers": [FINALIZER]}}


def test_the_features_installed_are_the_real_ones(world) -> None:
    _, controller = world
    assert isinstance(controller.extensions.cache, KVCacheFeature)
    assert isinstance(controller.extensions.delivery, ArtifactDelivery)
    watched = {w.kind for w in controller.watches()}
    assert {
        "KVCachePoolBinding",
        "KVCachePool",
        "KVCacheBackend",
        "ModelArtifact",
        "NodeModelStore",
    } <= watched
    assert {"CSIDriver", "PersistentVolumeClaim", "PersistentVolume", "StorageClass"} <= watched


# --- the KV cache ------------------------------------------------------------------------------------


def cache_world(client: ApplyingClient, controller: ModelDeploymentReconciler, **binding_status: Any) -> None:
    b = binding()
    if binding_status:
        b["status"] = binding_status
    for obj in (b, ready_pool(), backend()):
        put(client, controller, obj)
    put(client, controller, cached(deployment(kvCache={"poolRef": {"name": "qwen-cache"}})))


def test_a_resolved_binding_renders_the_client_and_registers_the_deployment(world) -> None:
    client, controller = world
    cache_world(client, controller)
    seen = statuses(client)
    reconcile(client, controller)
    (pod,) = pods(client)
    annotation = pod["metadata"]["annotations"][constants.ANNOTATION_KVCACHE_CLIENT_CONFIG]
    assert json.loads(annotation)["master_server_address"] == "mooncake-dram-leader.gpustack-system.svc:50051"
    container = main(pod)
    line = container["command"]
    transfer = json.loads(line[line.index("--kv-transfer-config") + 1])
    assert transfer == {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both"}
    assert line[line.index("--kv-cache-dtype") + 1] == "bfloat16"
    assert {"name": "MOONCAKE_CONFIG_PATH", "value": "/etc/gpustack/kvcache/mooncake.json"} in container[
        "env"
    ]
    volume = next(v for v in pod["spec"]["volumes"] if "downwardAPI" in v)
    assert volume["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"] == (
        f"metadata.annotations['{constants.ANNOTATION_KVCACHE_CLIENT_CONFIG}']"
    )
    # The registration: one status apply on the Binding under the deployment's own field manager.
    (body, manager, subresource) = next(a for a in client.applied if a[0]["kind"] == "KVCachePoolBinding")
    assert subresource == "status" and body["status"] == {"usedBy": [ENTRY]}
    assert manager == "worker.gpustack.ai/model-deployment-kv-cache/team-a/qwen"
    assert condition(seen[-1], "DomainRegistered")[:2] == ("False", "BindingNotReady")  # pending
    assert seen[-1]["kvCache"] == {
        "binding": "qwen-cache",
        "pool": "shared-dram",
        "domain": {"name": "default", "dtype": "bfloat16", "blockSize": 64},
    }
    # The Binding now lists it (the watch brings that); the next pass says Registered, sends nothing.
    refresh(client, controller, "KVCachePoolBinding", "qwen-cache", NS)
    assert drain(controller) == {(NS, "qwen")}
    client.applied.clear()
    reconcile(client, controller)
    assert condition(seen[-1], "DomainRegistered")[:2] == ("True", "Registered")
    assert not [a for a in client.applied if a[0]["kind"] == "KVCachePoolBinding"]


def test_cache_attached_follows_the_stores_charge(world) -> None:
    client, controller = world
    cache_world(client, controller, usedBy=[ENTRY], usage="0")
    seen = statuses(client)
    reconcile(client, controller)
    assert condition(seen[-1], "CacheAttached")[:2] == ("Unknown", "NoReplicaReady")
    admit(client, controller)
    reconcile(client, controller)  # judged on the replica this very pass found ready
    assert condition(seen[-1], "CacheAttached")[:2] == ("Unknown", "NoObservationAvailable")
    charged = copy.deepcopy(client.objects[("KVCachePoolBinding", NS, "qwen-cache")])
    charged["status"]["usage"] = "2Mi"
    put(client, controller, charged, "MODIFIED")
    assert drain(controller) == {(NS, "qwen")}
    reconcile(client, controller)
    assert condition(seen[-1], "CacheAttached")[:2] == ("True", "CacheActive")


def test_a_pool_endpoint_change_wakes_the_deployment_and_rolls_it(world) -> None:
    client, controller = world
    cache_world(client, controller, usedBy=[ENTRY])
    seen = statuses(client)
    reconcile(client, controller)
    admit(client, controller)
    reconcile(client, controller)
    (before,) = pods(client)
    moved = ready_pool(endpoint="mooncake-2.gpustack-system.svc:50051")
    moved["metadata"]["resourceVersion"] = "9000"
    put(client, controller, moved, "MODIFIED")
    assert drain(controller) == {(NS, "qwen")}
    client.writes.clear()
    reconcile(client, controller)
    assert ("delete", "Pod", before["metadata"]["name"]) in client.writes  # one replica turned over
    assert condition(seen[-1], "ReplicasUpToDate")[:2] == ("False", "RolloutInProgress")
    reconcile(client, controller)  # the ordinal reads empty: the replacement carries the new endpoint
    (after,) = pods(client)
    config = json.loads(after["metadata"]["annotations"][constants.ANNOTATION_KVCACHE_CLIENT_CONFIG])
    assert config["master_server_address"] == "mooncake-2.gpustack-system.svc:50051"
    # A status rewrite that moves nothing the deployment reads wakes nobody.
    quiet = copy.deepcopy(client.objects[("KVCachePool", "", "shared-dram")])
    quiet["status"]["usage"] = {"total": "1Mi"}
    quiet["metadata"]["resourceVersion"] = "9001"
    put(client, controller, quiet, "MODIFIED")
    assert drain(controller) == set()


def test_without_a_binding_nothing_is_rendered_and_rollouts_are_held(world) -> None:
    client, controller = world
    put(client, controller, cached(deployment(kvCache={"poolRef": {"name": "qwen-cache"}})))
    seen = statuses(client)
    reconcile(client, controller)
    (pod,) = pods(client)  # a new ordinal proceeds, without a connector
    assert constants.ANNOTATION_KVCACHE_CLIENT_CONFIG not in pod["metadata"]["annotations"]
    assert condition(seen[-1], "DomainRegistered")[:2] == ("False", "BindingNotFound")
    assert "kvCache" not in seen[-1]
    assert not [a for a in client.applied if a[0]["kind"] == "KVCachePoolBinding"]
    admit(client, controller)
    client.objects[("ModelDeployment", NS, "qwen")]["spec"]["roles"][0]["extraArgs"] = ["--max-num-seqs", "8"]
    client.writes.clear()
    reconcile(client, controller)
    assert [w for w in client.writes if w[1] == "Pod"] == []  # the edit waits for a connection
    assert condition(seen[-1], "ReplicasUpToDate")[:2] == ("False", "RolloutHeldByCache")


def test_deletion_releases_the_registration(world) -> None:
    client, controller = world
    cache_world(client, controller)
    reconcile(client, controller)
    assert client.objects[("KVCachePoolBinding", NS, "qwen-cache")]["status"]["usedBy"] == [ENTRY]
    for obj in pods(client):
        client.objects.pop(("Pod", NS, obj["metadata"]["name"]))
    gone = client.objects[("ModelDeployment", NS, "qwen")]
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    client.patch = lambda kind, name, body, **kw: client.writes.append(("patch", kind, name)) or {}  # type: ignore[method-assign]
    reconcile(client, controller)
    release = [a for a in client.applied if a[0]["kind"] == "KVCachePoolBinding"][-1]
    assert release[0]["status"] == {"usedBy": []} and release[2] == "status"
    assert client.objects[("KVCachePoolBinding", NS, "qwen-cache")]["status"]["usedBy"] == []
    assert client.writes[-1] == ("patch", "ModelDeployment", "qwen")  # then the finalizer goes


# --- model delivery ----------------------------------------------------------------------------------


def artifact(*, resolved: bool = True, source: Obj | None = None, **spec: Any) -> Obj:
    status: Obj = {"conditions": [{"type": "Resolved", "status": "True" if resolved else "False"}]}
    if resolved:
        status["resolved"] = {"revision": COMMIT, "manifestDigest": DIGEST, "sizeBytes": 2 * GiB}
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "ModelArtifact",
        "metadata": {"name": "qwen-7b", "namespace": NS, "uid": "art-uid"},
        "spec": {"source": source or {"huggingFace": {"repository": "Qwen/Qwen2.5-7B-Instruct"}}, **spec},
        "status": status,
    }


def setting(name: str, value: str) -> Obj:
    return {
        "apiVersion": "gpustack.ai/v1",
        "kind": "Setting",
        "metadata": {"name": name, "namespace": constants.SYSTEM_NAMESPACE},
        "spec": {"value": value},
    }


CSI = {
    "apiVersion": "storage.k8s.io/v1",
    "kind": "CSIDriver",
    "metadata": {"name": constants.CSI_DRIVER_MODEL},
}


def weights_deployment(*roles: Obj) -> Obj:
    obj = cached(deployment(*roles))
    obj["spec"]["model"]["artifactRef"] = {"name": "qwen-7b"}
    return obj


def test_an_unresolved_artifact_creates_no_pod_and_says_why(world) -> None:
    client, controller = world
    put(client, controller, weights_deployment())
    seen = statuses(client)
    reconcile(client, controller)
    assert pods(client) == []
    assert condition(seen[-1], "WeightsReady")[:2] == ("False", "ArtifactNotFound")
    assert "model" not in seen[-1]
    put(client, controller, artifact(resolved=False))
    assert drain(controller) == {(NS, "qwen")}  # the artifact's arrival wakes the deployment
    reconcile(client, controller)
    assert pods(client) == []
    status, reason, message = condition(seen[-1], "WeightsReady")
    assert (status, reason) == ("False", "ArtifactNotResolved") and "qwen-7b" in message
    assert "no replica is created" in seen[-1]["phaseMessage"]
    assert seen[-1]["model"] == {"artifact": "qwen-7b", "delivery": "Engine"}


def test_node_delivery_mounts_the_csi_volume_and_reports_weights(world) -> None:
    client, controller = world
    put(client, controller, setting("model-artifact-delivery-mode", "Node"))
    put(client, controller, CSI)
    put(client, controller, artifact())
    put(client, controller, weights_deployment())
    seen = statuses(client)
    reconcile(client, controller)
    (pod,) = pods(client)
    container = main(pod)
    assert container["command"][:5] == [
        "vllm",
        "serve",
        "/var/lib/gpustack/model",
        "--served-model-name",
        "Qwen/Qwen2.5-7B-Instruct",
    ]
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "gpustack-model")
    assert volume["csi"] == {
        "driver": "model.csi.gpustack.ai",
        "readOnly": True,
        "volumeAttributes": {"artifact": "qwen-7b", "artifactUID": "art-uid", "manifestDigest": DIGEST},
    }
    assert {"name": "gpustack-model", "mountPath": "/var/lib/gpustack/model", "readOnly": True} in container[
        "volumeMounts"
    ]
    assert not any(e["name"].startswith("HF_") for e in container["env"])
    assert seen[-1]["model"] == {
        "artifact": "qwen-7b",
        "delivery": "Node",
        "revision": COMMIT,
        "manifestDigest": DIGEST,
    }
    admit(client, controller)  # Ready but not PodReadyToStartContainers
    put(
        client,
        controller,
        {
            "apiVersion": "worker.gpustack.ai/v1",
            "kind": "NodeModelStore",
            "metadata": {"name": "node-a"},
            "status": {"models": [{"digest": DIGEST, "state": "Downloading"}]},
        },
    )
    assert drain(controller) == {(NS, "qwen")}  # the node's store lists the digest
    reconcile(client, controller)
    assert condition(seen[-1], "WeightsReady")[:2] == ("False", "Materializing")
    ready = copy.deepcopy(client.objects[("NodeModelStore", "", "node-a")])
    ready["status"]["models"][0]["state"] = "Ready"
    ready["metadata"]["resourceVersion"] = "9100"
    put(client, controller, ready, "MODIFIED")
    admit(client, controller, "PodReadyToStartContainers")
    reconcile(client, controller)
    assert condition(seen[-1], "WeightsReady")[:2] == ("True", "Mounted")


def test_node_delivery_without_the_csi_driver_is_unavailable(world) -> None:
    client, controller = world
    put(client, controller, setting("model-artifact-delivery-mode", "Node"))
    put(client, controller, artifact())
    put(client, controller, weights_deployment())
    seen = statuses(client)
    reconcile(client, controller)
    assert pods(client) == []
    assert condition(seen[-1], "WeightsReady")[:2] == ("False", "NodeDeliveryUnavailable")
    put(client, controller, CSI)
    assert drain(controller) == {(NS, "qwen")}
    reconcile(client, controller)
    assert len(pods(client)) == 1


def test_engine_delivery_pins_the_commit_and_raises_the_storage_limit_only(world) -> None:
    client, controller = world
    put(client, controller, setting("model-artifact-huggingface-endpoint", "http://hub.local:8080"))
    put(client, controller, artifact())
    put(client, controller, weights_deployment())
    seen = statuses(client)
    reconcile(client, controller)
    (pod,) = pods(client)
    container = main(pod)
    assert container["command"][:6] == [
        "vllm",
        "serve",
        "Qwen/Qwen2.5-7B-Instruct",
        "--revision",
        COMMIT,
        "--served-model-name",
    ]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HF_HOME"] == "/var/lib/gpustack/model-cache" and env["HF_ENDPOINT"] == "http://hub.local:8080"
    room = 2 * GiB + GiB  # the manifest and max(size/10, 1 GiB)
    cache = next(v for v in pod["spec"]["volumes"] if v["name"] == "gpustack-model-cache")
    assert cache["emptyDir"] == {"sizeLimit": str(room)}
    # The InstanceType's localStorage is 100Gi per card: the limit grows, the request does not.
    assert container["resources"]["limits"]["ephemeral-storage"] == "103Gi"
    assert container["resources"]["requests"]["ephemeral-storage"] == "12800Mi"
    assert seen[-1]["model"]["delivery"] == "Engine"
    assert condition(seen[-1], "WeightsReady")[:2] == ("False", "Downloading")


def test_a_role_stating_its_served_name_keeps_it(world) -> None:
    client, controller = world
    put(client, controller, artifact())
    put(
        client,
        controller,
        weights_deployment(role(extraArgs=["--served-model-name=Qwen/Qwen2.5-7B-Instruct"])),
    )
    reconcile(client, controller)
    (pod,) = pods(client)
    line = main(pod)["command"]
    assert line.count("--served-model-name") == 0 and "--served-model-name=Qwen/Qwen2.5-7B-Instruct" in line


def test_revoked_weights_hold_edited_replicas_and_create_nothing(world) -> None:
    client, controller = world
    put(client, controller, artifact())
    put(client, controller, weights_deployment(role(replicas=2)))
    seen = statuses(client)
    reconcile(client, controller)
    admit(client, controller)
    reconcile(client, controller)
    assert len(pods(client)) == 2
    revoked = artifact()  # access revoked after it resolved: the pinned commit and digest stay
    revoked["status"]["conditions"] = [{"type": "Resolved", "status": "False", "reason": "AccessDenied"}]
    put(client, controller, revoked, "MODIFIED")
    client.writes.clear()
    reconcile(client, controller)
    assert [w for w in client.writes if w[1] == "Pod"] == []  # what runs keeps running, unedited
    assert condition(seen[-1], "ReplicasUpToDate")[:2] == ("True", "UpToDate")
    assert seen[-1]["model"]["revision"] == COMMIT
    edited = client.objects[("ModelDeployment", NS, "qwen")]
    edited["spec"]["roles"][0]["extraArgs"] = ["--max-model-len", "4096"]
    edited["spec"]["roles"][0]["replicas"] = 3
    client.writes.clear()
    reconcile(client, controller)
    assert [w for w in client.writes if w[1] == "Pod"] == []  # no delete, no scale-up
    assert condition(seen[-1], "ReplicasUpToDate")[:2] == ("False", "RolloutHeldByWeights")
    status, reason, message = condition(seen[-1], "WeightsReady")
    assert (status, reason) == ("False", "ArtifactNotResolved") and "AccessDenied" in message


def claim_world(client: ApplyingClient, controller: ModelDeploymentReconciler, node: str) -> None:
    put(
        client,
        controller,
        artifact(source={"persistentVolumeClaim": {"claimName": "weights", "path": "qwen"}}),
    )
    put(
        client,
        controller,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "weights", "namespace": NS},
            "spec": {"accessModes": ["ReadOnlyMany"], "volumeName": "pv-weights"},
            "status": {"phase": "Bound"},
        },
    )
    put(client, controller, volume(node))


def volume(node: str) -> Obj:
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "pv-weights"},
        "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [term]}}},
    }


def test_a_bound_claim_places_the_pod_outside_its_fingerprint(world) -> None:
    client, controller = world
    claim_world(client, controller, "node-a")
    put(client, controller, weights_deployment())
    seen = statuses(client)
    reconcile(client, controller)
    (pod,) = pods(client)
    required = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["node-a"]
    mount = next(m for m in main(pod)["volumeMounts"] if m["name"] == "gpustack-model")
    assert mount == {
        "name": "gpustack-model",
        "mountPath": "/var/lib/gpustack/model",
        "readOnly": True,
        "subPath": "qwen",
    }
    assert seen[-1]["model"]["delivery"] == "PVC"
    # The volume's placement is outside the hash: a change to it rolls nothing.
    admit(client, controller)
    put(
        client,
        controller,
        {**volume("node-b"), "metadata": {"name": "pv-weights", "resourceVersion": "9200"}},
        "MODIFIED",
    )
    assert drain(controller) == {(NS, "qwen")}
    client.writes.clear()
    reconcile(client, controller)
    assert [w for w in client.writes if w[1] == "Pod"] == []
    assert condition(seen[-1], "ReplicasUpToDate")[:2] == ("True", "UpToDate")


def test_an_unbound_claim_and_a_shared_read_write_once_claim_block_creation(world) -> None:
    client, controller = world
    claim_world(client, controller, "node-a")
    pending = copy.deepcopy(client.objects[("PersistentVolumeClaim", NS, "weights")])
    pending["spec"] = {"accessModes": ["ReadOnlyMany"]}
    pending["status"] = {"phase": "Pending"}
    put(client, controller, pending, "MODIFIED")
    put(client, controller, weights_deployment())
    seen = statuses(client)
    reconcile(client, controller)
    assert pods(client) == [] and condition(seen[-1], "WeightsReady")[1] == "ClaimNotBound"
    rwo = copy.deepcopy(pending)
    rwo["spec"] = {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-weights"}
    rwo["status"] = {"phase": "Bound"}
    rwo["metadata"]["resourceVersion"] = "9300"
    put(client, controller, rwo, "MODIFIED")
    two = client.objects[("ModelDeployment", NS, "qwen")]
    two["spec"]["roles"][0]["replicas"] = 2
    reconcile(client, controller)
    assert pods(client) == [] and condition(seen[-1], "WeightsReady")[1] == "AccessModeConflict"


def test_a_deployment_without_an_artifact_reports_weights_not_applicable(world) -> None:
    client, controller = world
    put(client, controller, cached(deployment()))
    seen = statuses(client)
    reconcile(client, controller)
    assert condition(seen[-1], "WeightsReady")[:2] == ("True", "NotApplicable")
    assert "model" not in seen[-1] and len(pods(client)) == 1
