"""Wrong-typed or absurd fields get a field error naming the path and the type expected, from every
registered webhook, through the HTTP server — never an internal error, never a traceback."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
from starlette.testclient import TestClient

from fastpath import pure, shape
from tests.webhooks import kvcache_objects as kv
from tests.webhooks import objects
from tests.webhooks.reviews import body, pod
from webhooks import registry, server
from webhooks.lookups import FileLookups

JSON = {"content-type": "application/json"}


class _Nested:
    """A quantity nested ``depth`` arrays deep, spliced into the JSON text (encoders refuse it)."""

    def __init__(self, depth: int) -> None:
        self.depth = depth

    def __repr__(self) -> str:
        return f"nested{self.depth}"


def _nested(depth: int) -> _Nested:
    return _Nested(depth)


def _encode(obj: dict, **kwargs: Any) -> bytes:
    marker = "__NESTED__"
    found: list[_Nested] = []

    def swap(value: Any) -> Any:
        if isinstance(value, _Nested):
            found.append(value)
            return marker
        if isinstance(value, dict):
            return {k: swap(v) for k, v in value.items()}
        if isinstance(value, list):
            return [swap(v) for v in value]
        return value

    text = body(swap(obj), **kwargs)
    for nested in found:
        text = text.replace(
            b'"' + marker.encode() + b'"', b"[" * nested.depth + b'"1"' + b"]" * nested.depth, 1
        )
    return text


def _instance() -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "Instance",
        "metadata": {"name": "demo", "namespace": "team-a"},
        "spec": {
            "type": objects.A10G["metadata"]["name"],
            "image": "x",
            "volume": {"ephemeral": {"capacity": "1Gi"}},
            "resources": {},
        },
    }


def _workload() -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "team-a"},
        "spec": {
            "queueName": "gpustack-fnv64-c4680bb149644f1c",
            "podSets": [{"name": "main", "count": 1, "template": {"spec": pod()["spec"]}}],
        },
    }


def _deployment() -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "ModelDeployment",
        "metadata": {"name": "md", "namespace": "team-a"},
        "spec": {
            "engine": {"name": "vLLM"},
            "model": {"name": "m"},
            "roles": [{"name": "server", "type": "t"}],
        },
    }


def _companion(kind: str, spec: dict) -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": kind,
        "metadata": {"name": "c", "namespace": "team-a"},
        "spec": spec,
    }


SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHv0w9T6p6bJ2n0n0n0n0n0n0n0n0n0n0n0n0n0n0n0n alice@laptop"


def _instance_type() -> dict:
    obj = copy.deepcopy(objects.A10G)
    obj.pop("status", None)
    return obj


def _artifact() -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "ModelArtifact",
        "metadata": {"name": "qwen", "namespace": "team-a"},
        "spec": {"source": {"huggingFace": {"repository": "Qwen/Qwen2.5-7B-Instruct", "revision": "main"}}},
    }


def _node_store() -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "NodeModelStore",
        "metadata": {"name": "gpu-node-01"},
        "spec": {"watermarks": {"highPercent": 80, "lowPercent": 70}},
        "status": {"capacity": {"totalBytes": 100, "storedBytes": 10, "usedPercent": 10}},
    }


def _delivery(kind: str, spec: dict, namespace: str | None = None) -> dict:
    """A ModelStore (cluster-scoped), ModelStoreBinding or ModelPrefetch of the delivery pool kinds."""
    meta: dict[str, Any] = {"name": "grant" if namespace else "a10g"}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": kind, "metadata": meta, "spec": spec}


MODELSTORES = ("worker.gpustack.ai", "v1", "modelstores")
MODELSTOREBINDINGS = ("worker.gpustack.ai", "v1", "modelstorebindings")
MODELPREFETCHES = ("worker.gpustack.ai", "v1", "modelprefetches")


def _topology_source() -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "TopologySource",
        "metadata": {"name": "cloud-zones"},
        "spec": {"nodeSelector": {}, "levels": ["topology.kubernetes.io/zone"], "nodeLabels": {}},
    }


SAMPLES = {
    "InstanceTypeFlavor": (
        {
            "apiVersion": "worker.gpustack.ai/v1",
            "kind": "InstanceTypeFlavor",
            "metadata": {"name": "gpustack--nvidia-a10g"},
            "spec": {"acceleratable": True, "acceleratorGroup": "nvidia-a10g", "manufacturer": "nvidia"},
        },
        "worker.gpustack.ai",
        "v1",
        "instancetypeflavors",
    ),
    "TopologySource": (_topology_source(), "worker.gpustack.ai", "v1", "topologysources"),
    "ModelArtifact": (_artifact(), "worker.gpustack.ai", "v1", "modelartifacts"),
    "NodeModelStore": (_node_store(), "worker.gpustack.ai", "v1", "nodemodelstores"),
    "ModelStore": (
        _delivery("ModelStore", {"nodeSelector": {"matchLabels": {"pool": "a10g"}}}),
        *MODELSTORES,
    ),
    "ModelStoreBinding": (
        _delivery(
            "ModelStoreBinding", {"storeRefs": [{"name": "a10g"}], "quota": {"bytes": "100Gi"}}, "team-a"
        ),
        *MODELSTOREBINDINGS,
    ),
    "ModelPrefetch": (
        _delivery(
            "ModelPrefetch", {"artifactRef": {"name": "qwen"}, "bindingRef": {"name": "grant"}}, "team-a"
        ),
        *MODELPREFETCHES,
    ),
    "Pod": (pod(labels={"kueue.x-k8s.io/queue-name": "q"}), "", "v1", "pods"),
    "Workload": (_workload(), "kueue.x-k8s.io", "v1beta2", "workloads"),
    "Instance": (_instance(), "worker.gpustack.ai", "v1", "instances"),
    "InstanceType": (_instance_type(), "worker.gpustack.ai", "v1", "instancetypes"),
    "ModelDeployment": (_deployment(), "worker.gpustack.ai", "v1", "modeldeployments"),
    "KVCacheBackend": (kv.backend(), "worker.gpustack.ai", "v1", "kvcachebackends"),
    "KVCachePool": (kv.pool(), "worker.gpustack.ai", "v1", "kvcachepools"),
    "KVCachePoolBinding": (kv.binding(), "worker.gpustack.ai", "v1", "kvcachepoolbindings"),
    "InstanceSSHPublicKey": (
        _companion("InstanceSSHPublicKey", {"data": SSH_KEY}),
        "worker.gpustack.ai",
        "v1",
        "instancesshpublickeys",
    ),
    "InstanceImagePullSecret": (
        _companion("InstanceImagePullSecret", {"registry": "r.io", "username": "u", "password": "p"}),
        "worker.gpustack.ai",
        "v1",
        "instanceimagepullsecrets",
    ),
    "InstancePersistentVolume": (
        _companion("InstancePersistentVolume", {"capacity": "1Gi"}),
        "worker.gpustack.ai",
        "v1",
        "instancepersistentvolumes",
    ),
    "Setting": (
        {
            "apiVersion": "gpustack.ai/v1",
            "kind": "Setting",
            "metadata": {"name": "workload-fit-affinity", "namespace": "gpustack-system"},
            "spec": {"value": "true"},
        },
        "gpustack.ai",
        "v1",
        "settings",
    ),
}

# (path to set, value, field path expected in the refusal, type expected)
COMMON = [
    (("metadata", "labels"), "x", "metadata.labels", "object"),
    (("metadata", "name"), 5, "metadata.name", "string"),
    (("spec",), "x", "spec", "object"),
]
SPECIFIC = {
    "Setting": [(("spec", "value"), 5, "spec.value", "string")],
    "Pod": [
        (
            ("spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"),
            _nested(1000),
            "spec.containers[0].resources.limits[nvidia.com/gpu]",
            "integer or string",
        ),
        (("spec", "containers"), {"a": 1}, "spec.containers", "array"),
    ],
    "Workload": [
        (
            ("spec", "podSets", 0, "template", "spec", "containers", 0, "resources"),
            "1",
            "spec.podSets[0].template.spec.containers[0].resources",
            "object",
        ),
    ],
    "Instance": [
        (("spec", "type"), ["a"], "spec.type", "string"),
        (("spec", "resources"), "1", "spec.resources", "object"),
        (("spec", "resources", "cpu"), _nested(1000), "spec.resources.cpu", "integer or string"),
    ],
    "InstanceType": [
        (("spec", "unitResources", "cpu"), _nested(1000), "spec.unitResources.cpu", "string"),
        (("spec", "unitResources"), [1], "spec.unitResources", "object"),
    ],
    "KVCacheBackend": [
        (("spec", "connection"), "x", "spec.connection", "object"),
        (("spec", "connection", "managed", "members"), {"a": 1}, "spec.connection.managed.members", "array"),
    ],
    "KVCachePool": [(("spec", "backends"), "x", "spec.backends", "array")],
    "TopologySource": [
        (("spec", "levels"), "topology.kubernetes.io/zone", "spec.levels", "array"),
        (("spec", "levels", 0), _nested(1000), "spec.levels[0]", "string"),
        (("spec", "nodeSelector", "matchLabels"), ["a"], "spec.nodeSelector.matchLabels", "object"),
    ],
    "ModelArtifact": [
        (
            ("spec", "source", "huggingFace", "repository"),
            ["a"],
            "spec.source.huggingFace.repository",
            "string",
        )
    ],
    "NodeModelStore": [
        (("status", "capacity", "usedPercent"), "ten", "status.capacity.usedPercent", "integer")
    ],
    "KVCachePoolBinding": [
        (("spec", "quota", "ceiling"), _nested(1000), "spec.quota.ceiling", "integer or string"),
        (("spec", "domain", "blockSize"), "64", "spec.domain.blockSize", "integer"),
    ],
    "InstanceSSHPublicKey": [(("spec", "data"), ["ssh-ed25519", "AAAA"], "spec.data", "string")],
    "InstanceImagePullSecret": [(("spec", "password"), 1234, "spec.password", "string")],
    "InstancePersistentVolume": [(("spec", "capacity"), _nested(1000), "spec.capacity", "integer or string")],
    "ModelDeployment": [
        (("spec", "roles"), "x", "spec.roles", "array"),
        (("spec", "roles", 0, "replicas"), "two", "spec.roles[0].replicas", "integer"),
    ],
}


def _set(obj: dict, path: tuple, value: Any) -> dict:
    out = copy.deepcopy(obj)
    target: Any = out
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return out


@pytest.fixture(scope="module")
def client():
    with TestClient(server.create_app(FileLookups(objects.cluster()))) as test_client:
        yield test_client


CASES = [(hook, case) for hook in registry.WEBHOOKS for case in COMMON + SPECIFIC.get(hook.kind, [])]


@pytest.mark.parametrize(("hook", "case"), CASES, ids=lambda v: v.name if hasattr(v, "name") else str(v[2]))
def test_wrong_types_are_field_errors(client, caplog, hook, case) -> None:
    sample, group, version, resource = SAMPLES[hook.kind]
    path, value, field, expected = case
    obj = _set(sample, path, value)
    caplog.set_level(logging.INFO)
    response = client.post(
        hook.path,
        content=_encode(obj, kind=hook.kind, group=group, version=version, resource=resource),
        headers=JSON,
    )
    assert response.status_code == 200
    answer = response.json()["response"]
    assert answer["allowed"] is False, answer
    status = answer["status"]
    assert status["code"] == 422 and status["reason"] == "Invalid", status
    assert "internal error" not in status["message"]
    causes = {c["field"]: c["message"] for c in status["details"]["causes"]}
    assert field in causes and f"must be of type {expected}" in causes[field], causes
    assert len(status["message"]) < 4096
    assert not [r for r in caplog.records if r.exc_info], "no traceback is logged"


def test_well_typed_samples_pass_the_shape_check() -> None:
    from tests.webhooks.reviews import review
    from webhooks import shapes
    from webhooks.review import request_from_review

    for kind, (sample, group, version, resource) in SAMPLES.items():
        request = request_from_review(
            review(sample, kind=kind, group=group, version=version, resource=resource)
        )
        assert shapes.errors(request) == [], kind


def test_compiled_and_interpreted_walks_agree() -> None:
    twin = pure.load("shape")
    assert shape.__file__.endswith(".so")
    for kind, (sample, _, _, _) in SAMPLES.items():
        for path, value, _, _ in COMMON + SPECIFIC.get(kind, []):
            if isinstance(value, _Nested):
                continue
            obj = _set(sample, path, value)
            node = shape.POD if kind == "Pod" else shape.WORKLOAD if kind == "Workload" else None
            if node is None:
                continue
            compiled = shape.check(obj, node)
            interpreted = twin.check(obj, twin.POD if kind == "Pod" else twin.WORKLOAD)
            assert compiled == interpreted
