"""The KV-cache webhooks over HTTP at their registered paths, and their entries in the generated
configurations: injection sits in the one mutating configuration after gate 1, fails closed and is
never reinvoked; the frozen-keys guard is Ignore."""

from __future__ import annotations

import base64
import copy

import orjson
import pytest
from starlette.testclient import TestClient

from tests.webhooks.kvcache_objects import backend, binding, pod, ready_pool
from tests.webhooks.reviews import review
from webhooks import configurations, patch, registry, server
from webhooks.lookups import FileLookups

JSON = {"content-type": "application/json"}


def _hook(kind: str, mutating: bool, feature: str = "kvcache") -> registry.Webhook:
    (hook,) = [
        w for w in registry.WEBHOOKS if w.kind == kind and w.mutating == mutating and w.feature == feature
    ]
    return hook


@pytest.fixture
def client():
    with TestClient(server.create_app(FileLookups([backend(), ready_pool(), binding()]))) as test_client:
        yield test_client


def _post(client, hook, obj, **kwargs):
    answer = client.post(hook.path, content=orjson.dumps(review(obj, **kwargs)), headers=JSON)
    assert answer.status_code == 200
    return answer.json()["response"]


def test_injection_over_http(client) -> None:
    response = _post(client, _hook("Pod", True), pod())
    assert response["allowed"] and response["patchType"] == "JSONPatch"
    out = patch.apply(pod(), orjson.loads(base64.b64decode(response["patch"])))
    assert "kvcache.gpustack.ai/client-config" in out["metadata"]["annotations"]
    refused = _post(client, _hook("Pod", True), pod(binding_name="team-b/x"))
    assert refused["status"]["code"] == 422
    assert (
        refused["status"]["details"]["causes"][0]["field"]
        == "metadata.annotations[kvcache.gpustack.ai/binding]"
    )


def test_frozen_keys_over_http(client) -> None:
    old = pod()
    old["metadata"]["annotations"]["kvcache.gpustack.ai/injected"] = "{}"
    new = copy.deepcopy(old)
    new["metadata"]["annotations"]["kvcache.gpustack.ai/injected"] = '{"x":1}'
    response = _post(client, _hook("Pod", False), new, old=old, operation="UPDATE")
    assert not response["allowed"]


@pytest.mark.parametrize(
    ("kind", "obj", "resource"),
    [
        ("KVCacheBackend", backend(connection={}), "kvcachebackends"),
        (
            "KVCachePool",
            ready_pool() | {"spec": {"backends": ["a", "b"], "quota": {"total": "1Gi"}}},
            "kvcachepools",
        ),
        ("KVCachePoolBinding", binding(ceiling="0"), "kvcachepoolbindings"),
    ],
)
def test_kind_validation_over_http(client, kind, obj, resource) -> None:
    response = _post(
        client, _hook(kind, False, ""), obj, kind=kind, group="worker.gpustack.ai", resource=resource
    )
    assert response["status"]["code"] == 422


def test_configuration_entries() -> None:
    mutating, validating = configurations.render(url="https://127.0.0.1:1")
    names = [entry["name"] for entry in mutating["webhooks"]]
    gate1, inject = (
        names.index("mutate.gpustack-worker.core.v1.pod"),
        names.index("mutate.gpustack-worker-kvcache.core.v1.pod"),
    )
    assert gate1 < inject
    entry = mutating["webhooks"][inject]
    assert entry["failurePolicy"] == "Fail" and entry["reinvocationPolicy"] == "Never"
    assert entry["rules"][0]["operations"] == ["CREATE"]
    assert entry["objectSelector"] == {
        "matchExpressions": [{"key": "kvcache.gpustack.ai/inject", "operator": "In", "values": ["true"]}]
    }
    (guard,) = [
        e for e in validating["webhooks"] if e["name"] == "validate.gpustack-worker-kvcache.core.v1.pod"
    ]
    assert guard["failurePolicy"] == "Ignore" and guard["rules"][0]["operations"] == ["UPDATE"]
    kinds = {e["rules"][0]["resources"][0] for e in validating["webhooks"]}
    assert {"kvcachebackends", "kvcachepools", "kvcachepoolbindings"} <= kinds
