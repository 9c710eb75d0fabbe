"""Thousands of generated and mutated AdmissionReviews thrown at the real app: never a 5xx, and
every 200 is a well-formed AdmissionReview answering the request's uid."""

from __future__ import annotations

import base64
import copy

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from tests.webhooks.reviews import review
from webhooks import registry, server
from webhooks.lookups import FileLookups

ACCEPTED_STATUSES = {200, 400, 405, 413, 415}

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)

_INSTANCE_TYPE = {
    "apiVersion": "worker.gpustack.ai/v1",
    "kind": "InstanceType",
    "metadata": {"name": "gpustack--nvidia-a10g-linux-amd64", "labels": {}},
    "spec": {
        "acceleratable": True,
        "acceleratorGroup": "nvidia-a10g",
        "os": "linux",
        "arch": "amd64",
        "unitResources": {"cpu": "8", "ram": "64Gi"},
        "localStorage": "100Gi",
    },
    "status": {
        "entrance": "gpustack-fnv64-c4680bb149644f1c",
        "detail": {"manufacturer": "nvidia", "memory": "24576Mi"},
    },
}


def _seeds() -> list[tuple[str, dict]]:
    q = {"kueue.x-k8s.io/queue-name": "gpustack-fnv64-c4680bb149644f1c"}
    pods = [
        {"nvidia.com/gpu": "1"},
        {"nvidia.com/gpu.shared": "2"},
        {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "40"},
        {"huawei.com/npu.sliced": "1", "huawei.com/npu.sliced.memory-mib": "16384"},
        {"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-3g.40gb": "1"},
    ]
    seeds = []
    for limits in pods:
        obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "team-a", "labels": q},
            "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]},
        }
        seeds += [
            ("mutate.gpustack-worker.core.v1.pod", review(obj)),
            ("validate.gpustack-worker.core.v1.pod", review(obj)),
        ]
    it = copy.deepcopy(_INSTANCE_TYPE)
    for name in ("mutate", "validate"):
        seeds.append(
            (
                f"{name}.gpustack-worker.worker.gpustack.ai.v1.instancetype",
                review(it, kind="InstanceType", group="worker.gpustack.ai", resource="instancetypes"),
            )
        )
        seeds.append(
            (
                f"{name}.gpustack-worker.worker.gpustack.ai.v1.instancetype",
                review(
                    it,
                    old=copy.deepcopy(it),
                    operation="UPDATE",
                    kind="InstanceType",
                    group="worker.gpustack.ai",
                    resource="instancetypes",
                ),
            )
        )
    instance = {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "Instance",
        "metadata": {"name": "i", "namespace": "team-a"},
        "spec": {
            "type": it["metadata"]["name"],
            "image": "ubuntu",
            "resources": {"accelerator": "1", "acceleratorSlicedMemoryPercentage": 20},
            "volume": {"ephemeral": {"capacity": "1Gi"}},
        },
    }
    for name in ("mutate", "validate"):
        seeds.append(
            (
                f"{name}.gpustack-worker.worker.gpustack.ai.v1.instance",
                review(instance, kind="Instance", group="worker.gpustack.ai", resource="instances"),
            )
        )
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "team-a"},
        "spec": {
            "queueName": "gpustack-fnv64-c4680bb149644f1c",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": copy.deepcopy(
                        {"spec": {"containers": [{"name": "m", "resources": {"limits": pods[2]}}]}}
                    ),
                }
            ],
        },
    }
    seeds.append(
        (
            "mutate.gpustack-worker.kueue.x-k8s.io.v1beta2.workload",
            review(
                workload, kind="Workload", group="kueue.x-k8s.io", version="v1beta2", resource="workloads"
            ),
        )
    )
    return seeds


SEEDS = _seeds()
PATHS = {w.name: w.path for w in registry.WEBHOOKS}


@pytest.fixture(scope="module")
def client():
    app = server.create_app(FileLookups([copy.deepcopy(_INSTANCE_TYPE)]), include_null=True)
    with TestClient(app) as test_client:
        yield test_client


def _paths(doc) -> list[list]:
    found: list[list] = []

    def walk(node, path):
        found.append(path)
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, [*path, key])
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, [*path, index])

    walk(doc, [])
    return found


@st.composite
def mutated(draw):
    name, seed = draw(st.sampled_from(SEEDS))
    doc = copy.deepcopy(seed)
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        if not path:
            continue
        parent = doc
        for token in path[:-1]:
            parent = parent[token]
        action = draw(st.sampled_from(["delete", "replace", "replace"]))
        if action == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(_JSON)
    return name, doc


def _check(response, sent: bytes) -> None:
    assert response.status_code in ACCEPTED_STATUSES, (response.status_code, response.text, sent[:300])
    if response.status_code != 200:
        assert response.text.strip(), "a 4xx must say what was wrong"
        return
    answer = response.json()
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    body = answer["response"]
    assert body["uid"] == orjson.loads(sent)["request"]["uid"]
    assert isinstance(body["allowed"], bool)
    if not body["allowed"]:
        assert body["status"]["code"] >= 400 and body["status"]["message"]
    if "patch" in body:
        assert body["patchType"] == "JSONPatch"
        assert isinstance(orjson.loads(base64.b64decode(body["patch"])), list)


_SETTINGS = settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))


@_SETTINGS
@given(mutated())
def test_mutated_reviews_never_5xx(client, case):
    name, doc = case
    sent = orjson.dumps(doc)
    _check(client.post(PATHS[name], content=sent, headers={"content-type": "application/json"}), sent)


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from([*sorted(PATHS.values()), server.NULL_PATH]), _JSON | st.binary(max_size=64))
def test_arbitrary_bodies_never_5xx(client, path, payload):
    sent = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    response = client.post(path, content=sent, headers={"content-type": "application/json"})
    assert response.status_code in ACCEPTED_STATUSES
    if response.status_code == 200:
        _check(response, sent)
