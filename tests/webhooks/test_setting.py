"""Setting admission (operations spec D.8): registered names only, each value judged by its own
validator (appendix), the watermarks against each other, ``Node`` delivery against the CSIDriver,
no deletion; and the worker's own writes exempted by a matchCondition in the configuration."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from api import settings as registry
from tests.webhooks.reviews import review
from webhooks import configurations, setting
from webhooks import registry as webhook_registry
from webhooks.lookups import FileLookups
from webhooks.review import request_from_review

NS = "gpustack-system"


def obj(name: str, value: Any = None, *, namespace: str = NS) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "gpustack.ai/v1",
        "kind": "Setting",
        "metadata": {"name": name, "namespace": namespace},
    }
    if value is not None:
        body["spec"] = {"value": value}
    return body


def run(new, *, old=None, operation="UPDATE", cluster=(), user="admin"):
    raw = review(new, old=old, operation=operation, kind="Setting", group="gpustack.ai", resource="settings")
    raw["request"]["userInfo"] = {"username": user}
    if new is None and old is not None:
        raw["request"]["name"] = old["metadata"]["name"]
        raw["request"]["namespace"] = old["metadata"]["namespace"]
    return asyncio.run(setting.validate(request_from_review(raw), FileLookups(list(cluster))))


def message(decision) -> str:
    return decision.message


def test_a_valid_update_is_allowed():
    old = obj("workload-fit-affinity", "true")
    assert run(obj("workload-fit-affinity", "false"), old=old).allowed


@pytest.mark.parametrize(
    ("name", "value", "rule"),
    [
        ("instance-privileged-allowed", "yes", "must be a boolean"),
        ("model-store-download-concurrency", "65", "between 1 and 64"),
        ("model-store-download-concurrency", "eight", "must be an integer"),
        ("model-artifact-revalidate-interval", "30s", "at least 1m"),
        ("model-artifact-https-proxy", "http://user:pw@proxy:3128", "must not carry credentials"),
        ("model-artifact-huggingface-endpoint", "huggingface.co", "absolute http or https URL"),
        ("image-pull-policy", "Sometimes", "one of Always, IfNotPresent, Never"),
        ("instance-ssh-server-image", "Not An Image", "container image reference"),
        ("model-artifact-delivery-mode", "Disk", "one of Engine, Node"),
        ("model-store-download-bandwidth", "fast", "quantity of bytes per second"),
    ],
)
def test_an_invalid_update_names_the_setting_and_the_rule(name, value, rule):
    old = obj(name, registry.SETTINGS[name].default)
    decision = run(obj(name, value), old=old)
    assert not decision.allowed and decision.code == 422
    assert f'Setting "{name}" is invalid' in decision.message
    assert decision.causes[0].path == "spec.value"
    assert name in decision.causes[0].message and rule in decision.causes[0].message


def test_watermarks_are_judged_against_each_other():
    cluster = [obj("model-store-high-watermark", "80"), obj("model-store-low-watermark", "70")]
    refused = run(obj("model-store-high-watermark", "60"), old=cluster[0], cluster=cluster)
    assert not refused.allowed and "above model-store-low-watermark (70)" in refused.message
    assert run(obj("model-store-low-watermark", "50"), old=cluster[1], cluster=cluster).allowed
    lowered = [obj("model-store-high-watermark", "80"), obj("model-store-low-watermark", "50")]
    assert run(obj("model-store-high-watermark", "60"), old=lowered[0], cluster=lowered).allowed


def test_node_delivery_needs_the_csi_driver():
    old = obj("model-artifact-delivery-mode", "Engine")
    refused = run(obj("model-artifact-delivery-mode", "Node"), old=old)
    assert not refused.allowed and "CSIDriver model.csi.gpustack.ai" in refused.message
    driver = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {"name": setting.CSI_DRIVER},
    }
    assert run(obj("model-artifact-delivery-mode", "Node"), old=old, cluster=[driver]).allowed


def test_an_unchanged_value_is_not_judged_again():
    stored = obj("instance-privileged-allowed", "yes")  # stored before validation existed
    relabelled = obj("instance-privileged-allowed", "yes")
    relabelled["metadata"]["labels"] = {"team": "infra"}
    assert run(relabelled, old=stored).allowed


def test_creating_an_unknown_setting_is_refused_with_the_list():
    decision = run(obj("gpu-turbo-mode", "true"), operation="CREATE")
    assert not decision.allowed and decision.causes[0].path == "metadata.name"
    assert "no such setting" in decision.message and "workload-fit-affinity" in decision.message


def test_creating_a_known_setting_elsewhere_is_refused():
    decision = run(obj("workload-fit-affinity", "true", namespace="team-a"), operation="CREATE")
    assert not decision.allowed and decision.causes[0].path == "metadata.namespace"
    assert "gpustack-system" in decision.message


def test_creating_a_known_setting_is_judged_like_a_seed():
    assert run(obj("workload-fit-affinity", "false"), operation="CREATE").allowed
    assert not run(obj("workload-fit-affinity", "maybe"), operation="CREATE").allowed


def test_deleting_a_setting_is_refused_and_says_what_to_do():
    decision = run(None, old=obj("workload-fit-affinity", "true"), operation="DELETE")
    assert not decision.allowed and decision.code == 422
    assert "cannot be deleted" in decision.message and "kubectl -n gpustack-system patch" in decision.message


def test_the_namespace_controller_may_delete_with_the_namespace():
    old = obj("workload-fit-affinity", "true")
    user = "system:serviceaccount:kube-system:namespace-controller"
    assert run(None, old=old, operation="DELETE", user=user).allowed


def test_a_value_may_be_cleared_back_to_the_default():
    assert run(obj("workload-fit-affinity"), old=obj("workload-fit-affinity", "false")).allowed


def test_the_configuration_exempts_only_the_worker_and_covers_delete():
    hooks = [w for w in webhook_registry.WEBHOOKS if w.kind == "Setting"]
    assert len(hooks) == 1 and set(hooks[0].operations) == {"CREATE", "UPDATE", "DELETE"}
    _, validating = configurations.render(
        url="https://127.0.0.1:31443",
        ca_bundle=b"ca",
        worker_identity="system:serviceaccount:gpustack-system:gpustack-operator-worker",
    )
    entry = next(e for e in validating["webhooks"] if e["name"] == hooks[0].name)
    assert entry["rules"][0]["apiGroups"] == ["gpustack.ai"] and entry["failurePolicy"] == "Fail"
    assert entry["matchConditions"] == [
        {
            "name": "not-the-worker",
            "expression": "request.userInfo.username != "
            "'system:serviceaccount:gpustack-system:gpustack-operator-worker'",
        }
    ]
    exempted = {w.name for w in webhook_registry.WEBHOOKS if w.exempts_worker}
    assert exempted == {hooks[0].name, "validate.gpustack-worker.worker.gpustack.ai.v1.instancetypeflavor"}
    others = [e for e in validating["webhooks"] if e["name"] not in exempted]
    assert all("not-the-worker" not in str(e.get("matchConditions")) for e in others)


def test_a_delete_review_over_http_is_answered_not_crashed():
    from starlette.testclient import TestClient

    from tests.webhooks.reviews import body
    from webhooks import server

    hook = next(w for w in webhook_registry.WEBHOOKS if w.kind == "Setting")
    app = server.create_app(FileLookups([]), webhooks=(hook,))
    with TestClient(app) as client:
        answer = client.post(
            hook.path,
            content=body(
                None,
                old=obj("workload-fit-affinity", "true"),
                operation="DELETE",
                kind="Setting",
                group="gpustack.ai",
                resource="settings",
            ),
            headers={"content-type": "application/json"},
        ).json()["response"]
    assert answer["allowed"] is False and "cannot be deleted" in answer["status"]["message"]
