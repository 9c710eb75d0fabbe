"""The two ModelDeployment webhooks over HTTP, at their registered paths: a JSON patch from the mutating
half, one 422 with causes[] from the validating half, and a failed read answered as a retryable
denial rather than a field error."""

from __future__ import annotations

import base64

import orjson
import pytest
from starlette.testclient import TestClient

from tests.webhooks.model_deployments import cluster, md, role
from tests.webhooks.reviews import review
from webhooks import registry, server
from webhooks.lookups import FileLookups, LookupFailed

JSON = {"content-type": "application/json"}


def _path(mutating: bool) -> str:
    (hook,) = [w for w in registry.WEBHOOKS if w.kind == "ModelDeployment" and w.mutating == mutating]
    return hook.path


def _post(client, obj, *, mutating, old=None):
    sent = review(
        obj,
        old=old,
        operation="UPDATE" if old else "CREATE",
        kind="ModelDeployment",
        group="worker.gpustack.ai",
        resource="modeldeployments",
    )
    answer = client.post(_path(mutating), content=orjson.dumps(sent), headers=JSON)
    assert answer.status_code == 200
    return answer.json()["response"]


@pytest.fixture
def client():
    with TestClient(server.create_app(FileLookups(cluster()))) as test_client:
        yield test_client


def test_mutating_answers_a_json_patch(client):
    response = _post(client, md(role(resources=None)), mutating=True)
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    assert orjson.loads(base64.b64decode(response["patch"])) == [
        {"op": "add", "path": "/spec/roles/0/resources", "value": {"accelerator": "1"}}
    ]


def test_validating_answers_one_422_with_every_cause(client):
    obj = md(role(env=[{"name": "GPUSTACK_MEMBER_INDEX", "value": "0"}], instanceType="typo"))
    response = _post(client, obj, mutating=False)
    status = response["status"]
    assert response["allowed"] is False and status["code"] == 422 and status["reason"] == "Invalid"
    assert [c["field"] for c in status["details"]["causes"]] == [
        "spec.roles[0].env[0]",
        "spec.roles[0].instanceType",
    ]
    assert [c["reason"] for c in status["details"]["causes"]] == ["FieldValueForbidden", "FieldValueNotFound"]


class _Down(FileLookups):
    async def get(self, kind, name, namespace="", *, fresh=False):
        if kind == "InstanceType":
            raise LookupFailed("the apiserver did not answer within 6s")
        return await super().get(kind, name, namespace, fresh=fresh)


@pytest.mark.parametrize("mutating", [True, False])
def test_a_failed_read_is_a_retryable_internal_error(mutating):
    with TestClient(server.create_app(_Down(cluster()))) as down:
        response = _post(down, md(role(resources=None)), mutating=mutating)
    assert response["allowed"] is False
    assert response["status"]["code"] == 500 and response["status"]["reason"] == "InternalError"
    assert "retry" in response["status"]["message"] and "details" not in response["status"]


def test_a_deleting_update_reaches_both_handlers_and_passes(client):
    old = md(role(instanceType="gone"))
    old["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    old["metadata"]["finalizers"] = ["worker.gpustack.ai/model-deployment-protection"]
    new = md(role(instanceType="gone"))
    new["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    for mutating in (True, False):
        response = _post(client, new, mutating=mutating, old=old)
        assert response["allowed"] is True and "patch" not in response
