"""The webhook server over HTTP: codec, bad input, internal errors, health and metrics."""

from __future__ import annotations

import base64

import orjson
import pytest
from starlette.testclient import TestClient

from tests.webhooks.reviews import body, pod, review
from webhooks import registry, server
from webhooks.decision import allow, reject, required
from webhooks.lookups import FileLookups

JSON = {"content-type": "application/json"}


async def _boom(request, lookups):
    raise RuntimeError("kaboom")


async def _refuse(request, lookups):
    return reject(
        "Pod", request.name, [required("spec.containers[0].image", "every container names an image")]
    )


async def _mutate(request, lookups):
    return allow([{"op": "add", "path": "/metadata/labels/x", "value": "y"}], ["a warning"])


def _webhook(handler, *, mutating=True, kind="Pod"):
    return registry.Webhook(mutating, "", "v1", "pods", kind, handler)


class _Unsynced(FileLookups):
    def synced(self) -> bool:
        return False


@pytest.fixture
def client():
    hooks = (_webhook(_mutate), _webhook(_refuse, mutating=False), _webhook(_boom, kind="Node"))
    app = server.create_app(FileLookups(), include_null=True, webhooks=hooks)
    with TestClient(app) as test_client:
        yield test_client


MUTATE = "/mutate-gpustack-worker-core-v1-pod"
VALIDATE = "/validate-gpustack-worker-core-v1-pod"
BOOM = "/mutate-gpustack-worker-core-v1-node"


def test_allowed_with_patch_and_warnings_echoes_uid(client):
    response = client.post(MUTATE, content=body(pod(), uid="abc"), headers=JSON)
    assert response.status_code == 200
    answer = response.json()
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == "abc"
    assert answer["response"]["allowed"] is True
    assert answer["response"]["patchType"] == "JSONPatch"
    assert orjson.loads(base64.b64decode(answer["response"]["patch"])) == [
        {"op": "add", "path": "/metadata/labels/x", "value": "y"}
    ]
    assert answer["response"]["warnings"] == ["a warning"]


def test_denial_carries_field_path_and_status(client):
    answer = client.post(VALIDATE, content=body(pod("web")), headers=JSON).json()["response"]
    assert answer["allowed"] is False
    status = answer["status"]
    assert status["code"] == 422 and status["reason"] == "Invalid"
    assert (
        status["message"]
        == 'Pod "web" is invalid: spec.containers[0].image: Required value: every container names an image'
    )
    assert status["details"]["causes"][0]["field"] == "spec.containers[0].image"


def test_exception_in_decision_is_a_denial_not_a_500(client):
    answer = client.post(
        BOOM,
        content=body({"kind": "Node", "metadata": {"name": "n"}}, kind="Node", resource="nodes"),
        headers=JSON,
    )
    assert answer.status_code == 200
    response = answer.json()["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 500
    assert "internal error" in response["status"]["message"]
    assert "RuntimeError" in response["status"]["message"]


@pytest.mark.parametrize(
    ("payload", "headers", "status", "fragment"),
    [
        (b"{not json", JSON, 400, "not valid JSON"),
        (b"[]", JSON, 400, "JSON object"),
        (
            orjson.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}),
            JSON,
            400,
            "apiVersion",
        ),
        (orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "Pod"}), JSON, 400, "kind must be"),
        (
            orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
            JSON,
            400,
            "request is missing",
        ),
        (body(pod(), uid=""), JSON, 400, "request.uid"),
        (body(pod(), operation="PATCH"), JSON, 400, "request.operation"),
        (body(pod()), {"content-type": "text/plain"}, 415, "application/json"),
        (body(pod()), {}, 415, "application/json"),
        (body({"kind": "Node", "metadata": {"name": "n"}}, kind="Node"), JSON, 400, "admits Pod objects"),
        (body({"kind": "Service", "metadata": {"name": "n"}}), JSON, 400, "request.object is a 'Service'"),
    ],
)
def test_bad_input_gets_a_4xx_saying_what_is_wrong(client, payload, headers, status, fragment):
    response = client.post(MUTATE, content=payload, headers=headers)
    assert response.status_code == status
    assert fragment in response.text


def test_body_over_the_cap_is_413():
    app = server.create_app(FileLookups(), max_body=1024, webhooks=(_webhook(_mutate),))
    with TestClient(app) as test_client:
        big = body(pod(labels={"x": "y" * 4000}))
        response = test_client.post(MUTATE, content=big, headers=JSON)
        assert response.status_code == 413
        assert "1024-byte limit" in response.text


def test_only_post(client):
    response = client.get(MUTATE)
    assert response.status_code == 405


def test_null_endpoint_decodes_and_allows(client):
    answer = client.post(server.NULL_PATH, content=body(pod(), uid="n1"), headers=JSON).json()
    assert answer["response"] == {"uid": "n1", "allowed": True}
    assert client.post(server.NULL_PATH, content=b"nope", headers=JSON).status_code == 400


def test_health_ready_and_metrics(client):
    assert client.get("/healthz").text == "ok\n"
    assert client.get("/readyz").status_code == 200
    client.post(VALIDATE, content=body(pod()), headers=JSON)
    client.post(MUTATE, content=b"{", headers=JSON)
    metrics = client.get("/metrics").text
    assert (
        'gpustack_webhook_requests_total{code="422",outcome="denied",webhook="validate.gpustack-worker.core.v1.pod"}'
        in metrics
    )
    assert 'outcome="bad_request"' in metrics
    assert (
        'gpustack_webhook_request_duration_seconds_bucket{le="0.0005",webhook="validate.gpustack-worker.core.v1.pod"}'
        in metrics
    )


def test_readyz_waits_for_lookups():
    app = server.create_app(_Unsynced(), webhooks=())
    with TestClient(app) as test_client:
        response = test_client.get("/readyz")
        assert response.status_code == 503
        assert "not synced" in response.text


def test_review_builder_is_a_valid_request():
    assert review(pod())["request"]["kind"]["kind"] == "Pod"


async def _not_ready(request, lookups):
    from webhooks.decision import retry_later

    return retry_later("InstanceType x has not observed its accelerators yet")


@pytest.mark.parametrize("log_denials", [False, True])
def test_denials_are_logged_on_request_retryable_ones_always(caplog, log_denials):
    hooks = (_webhook(_refuse, mutating=False), _webhook(_not_ready, kind="Node"))
    app = server.create_app(FileLookups(), webhooks=hooks, log_denials=log_denials)
    with caplog.at_level("INFO", logger="webhooks.server"), TestClient(app) as test_client:
        test_client.post(VALIDATE, content=body(pod("web")), headers=JSON)
        test_client.post(
            BOOM, content=body({"kind": "Node", "metadata": {"name": "n"}}, kind="Node"), headers=JSON
        )
    denied = [r for r in caplog.records if r.msg == "denied"]
    codes = sorted(r.code for r in denied)
    assert codes == ([422, 500] if log_denials else [500])
