"""ModelArtifact admission (§3.1) and the delivery status guards (§3.2), from the spec's accepted and
rejected examples; and over HTTP through the registry's routes."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.webhooks.reviews import review
from webhooks import delivery_status, modelartifact, patch, registry, server
from webhooks.lookups import FileLookups
from webhooks.review import request_from_review

GROUP = "worker.gpustack.ai"
SHA = "sha256:" + "ab" * 32


def artifact(source: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ModelArtifact",
        "metadata": {"name": "qwen", "namespace": "team-a"},
        "spec": {
            "source": source if source is not None else {"huggingFace": {"repository": "Qwen/Qwen2.5-7B"}},
            **spec,
        },
    }


def run(handler, obj, *, old=None, operation="CREATE", user=None, sub_resource="", lookups=None, name=""):
    body = review(
        obj, old=old, operation=operation, kind="ModelArtifact", group=GROUP, resource="modelartifacts"
    )
    if user is not None:
        body["request"]["userInfo"] = user
    if sub_resource:
        body["request"]["subResource"] = sub_resource
    if name:
        body["request"]["name"] = name
    return asyncio.run(handler(request_from_review(body), lookups or FileLookups()))


def messages(decision) -> str:
    return decision.message


# --- defaulting -----------------------------------------------------------------------------------


def test_revision_defaults_to_main_for_hugging_face_and_master_for_modelscope() -> None:
    obj = artifact()
    decision = run(modelartifact.default, obj)
    assert patch.apply(obj, decision.patch)["spec"]["source"]["huggingFace"]["revision"] == "main"
    ms = artifact({"modelScope": {"repository": "qwen/Qwen2.5-7B"}})
    assert (
        patch.apply(ms, run(modelartifact.default, ms).patch)["spec"]["source"]["modelScope"]["revision"]
        == "master"
    )


def test_a_stated_revision_is_kept_and_claims_get_none() -> None:
    obj = artifact({"huggingFace": {"repository": "Qwen/Qwen2.5-7B", "revision": "v2"}})
    assert run(modelartifact.default, obj).patch == []
    claim = artifact({"persistentVolumeClaim": {"claimName": "weights"}})
    assert run(modelartifact.default, claim).patch == []


def test_reapplying_without_revision_on_update_is_defaulted_so_the_spec_does_not_change() -> None:
    stored = artifact({"huggingFace": {"repository": "Qwen/Qwen2.5-7B", "revision": "main"}})
    applied = artifact()
    after = patch.apply(applied, run(modelartifact.default, applied, old=stored, operation="UPDATE").patch)
    assert run(modelartifact.validate, after, old=stored, operation="UPDATE").allowed


# --- validation -----------------------------------------------------------------------------------


ACCEPTED = [
    artifact(),
    artifact(allowPatterns=["*.safetensors"], ignorePatterns=["original/"]),
    artifact({"huggingFace": {"repository": "gpt2", "secretRef": {"name": "not-yet-created"}}}),
    artifact({"persistentVolumeClaim": {"claimName": "weights", "path": "qwen"}}),
    artifact({"persistentVolumeClaim": {"claimName": "weights"}}),
    artifact(expectedDigest=SHA),
    artifact({"image": {"reference": "registry.example.com/models/qwen@sha256:" + "0" * 64}}),
    artifact({"image": {"reference": "qwen@sha256:" + "0" * 64}}),
    artifact({"image": {"reference": "localhost:5000/models/qwen:v1@sha256:" + "0" * 64}}),
    artifact({"image": {"reference": "docker.io/library/qwen_2.5-7b@sha256:" + "0" * 64}}),
    artifact({"huggingFace": {"repository": "a/b", "revision": "refs/pr/1"}}),
    artifact({"huggingFace": {"repository": "a/b", "revision": "a" * 40}}),
]


@pytest.mark.parametrize("obj", ACCEPTED)
def test_accepted(obj) -> None:
    decision = run(modelartifact.validate, obj)
    assert decision.allowed, decision.message


REJECTED = [
    (
        artifact({"huggingFace": {"repository": "a/b"}, "persistentVolumeClaim": {"claimName": "c"}}),
        "spec.source",
    ),
    (artifact({}), "spec.source"),
    (
        artifact({"persistentVolumeClaim": {"claimName": "w"}}, allowPatterns=["*.safetensors"]),
        "spec.allowPatterns",
    ),
    (
        artifact({"persistentVolumeClaim": {"claimName": "w", "path": "../other"}}),
        "spec.source.persistentVolumeClaim.path",
    ),
    (
        artifact({"persistentVolumeClaim": {"claimName": "w", "path": "/abs"}}),
        "spec.source.persistentVolumeClaim.path",
    ),
    (artifact({"image": {"reference": "repo:v1"}}), "spec.source.image.reference"),
    (artifact({"image": {"reference": "r@sha256:" + "0" * 64}}, expectedDigest=SHA), "spec.expectedDigest"),
    (artifact(expectedDigest="sha256:" + "AB" * 32), "spec.expectedDigest"),
    (artifact(allowPatterns=[""]), "spec.allowPatterns[0]"),
    (artifact(allowPatterns=["a\nb"]), "spec.allowPatterns[0]"),
    (artifact(ignorePatterns=["x" * 257]), "spec.ignorePatterns[0]"),
    (artifact(allowPatterns=[f"p{i}" for i in range(33)]), "spec.allowPatterns"),
    (artifact(allowPatterns="*.safetensors"), "spec.allowPatterns"),
    (artifact(allowPatterns=[7]), "spec.allowPatterns[0]"),
    (artifact({"huggingFace": {"repository": "a/../b"}}), "spec.source.huggingFace.repository"),
    (artifact({"huggingFace": {"repository": "/abs"}}), "spec.source.huggingFace.repository"),
    (artifact({"huggingFace": {"repository": 12}}), "spec.source.huggingFace.repository"),
    (artifact({"huggingFace": {}}), "spec.source.huggingFace.repository"),
    (artifact({"huggingFace": "Qwen/Qwen2.5-7B"}), "spec.source.huggingFace"),
    (artifact({"huggingFace": {"repository": "a/b", "revision": 3}}), "spec.source.huggingFace.revision"),
    (
        artifact({"huggingFace": {"repository": "a/b", "secretRef": {"name": "Bad_Name"}}}),
        "spec.source.huggingFace.secretRef.name",
    ),
    ({**artifact(), "spec": "nope"}, "spec"),
    # A revision is a branch, tag or commit: none holds whitespace, inside or around it.
    (
        artifact({"huggingFace": {"repository": "a/b", "revision": "my branch"}}),
        "spec.source.huggingFace.revision",
    ),
    (
        artifact({"huggingFace": {"repository": "a/b", "revision": "v1\t"}}),
        "spec.source.huggingFace.revision",
    ),
    (
        artifact({"modelScope": {"repository": "a/b", "revision": " master"}}),
        "spec.source.modelScope.revision",
    ),
    (
        artifact({"huggingFace": {"repository": "a/b", "revision": "v\u00a02"}}),
        "spec.source.huggingFace.revision",
    ),
    # An image reference names the repository the digest belongs to.
    (artifact({"image": {"reference": "@sha256:" + "0" * 64}}), "spec.source.image.reference"),
    (artifact({"image": {"reference": "sha256:" + "0" * 64}}), "spec.source.image.reference"),
    (
        artifact({"image": {"reference": "registry.example.com/@sha256:" + "0" * 64}}),
        "spec.source.image.reference",
    ),
    (artifact({"image": {"reference": "Repo/Name@sha256:" + "0" * 64}}), "spec.source.image.reference"),
    (artifact({"image": {"reference": " repo@sha256:" + "0" * 64}}), "spec.source.image.reference"),
]


@pytest.mark.parametrize(("obj", "path"), REJECTED)
def test_rejected_names_the_field(obj, path: str) -> None:
    decision = run(modelartifact.validate, obj)
    assert not decision.allowed and decision.code == 422
    assert any(cause.path == path for cause in decision.causes), decision.message


def test_spec_is_immutable_but_labels_may_change() -> None:
    stored = artifact({"huggingFace": {"repository": "a/b", "revision": "main"}})
    relabeled = copy.deepcopy(stored)
    relabeled["metadata"]["labels"] = {"team": "x"}
    assert run(modelartifact.validate, relabeled, old=stored, operation="UPDATE").allowed
    moved = copy.deepcopy(stored)
    moved["spec"]["source"]["huggingFace"]["revision"] = "v2"
    decision = run(modelartifact.validate, moved, old=stored, operation="UPDATE")
    assert not decision.allowed and "immutable" in decision.message and "create another" in decision.message


# --- status guards ------------------------------------------------------------------------------------


def test_only_the_worker_writes_an_artifacts_status(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(delivery_status.ENV_WORKER_IDENTITY, "system:serviceaccount:gpustack-system:worker")
    ok = run(
        delivery_status.guard_artifact_status,
        artifact(),
        old=artifact(),
        operation="UPDATE",
        user={"username": "system:serviceaccount:gpustack-system:worker"},
        sub_resource="status",
    )
    assert ok.allowed
    tenant = run(
        delivery_status.guard_artifact_status,
        artifact(),
        old=artifact(),
        operation="UPDATE",
        user={"username": "alice"},
        sub_resource="status",
    )
    assert not tenant.allowed and tenant.code == 403 and "only the worker" in tenant.message


def test_without_a_learned_identity_every_status_write_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(delivery_status.ENV_WORKER_IDENTITY, raising=False)
    decision = run(
        delivery_status.guard_artifact_status,
        artifact(),
        old=artifact(),
        operation="UPDATE",
        user={"username": ""},
        sub_resource="status",
    )
    assert not decision.allowed


PLUGIN = "system:serviceaccount:gpustack-system:gpustack-model-manager"


def store(node: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1", "kind": "NodeModelStore", "metadata": {"name": node}, "spec": {}}


def plugin_user(node: str | None, pod: str = "mm-abc", uid: str = "u-1") -> dict[str, Any]:
    extra = {delivery_status.EXTRA_POD_NAME: [pod], delivery_status.EXTRA_POD_UID: [uid]}
    if node:
        extra[delivery_status.EXTRA_NODE_NAME] = [node]
    return {"username": PLUGIN, "extra": extra}


def guard(node: str, user: dict[str, Any], lookups=None):
    return run(
        delivery_status.guard_store_status,
        store(node),
        old=store(node),
        operation="UPDATE",
        user=user,
        sub_resource="status",
        lookups=lookups,
        name=node,
    )


def test_plugin_writes_its_own_nodes_status_only() -> None:
    assert guard("gpu-node-01", plugin_user("gpu-node-01")).allowed
    other = guard("gpu-node-02", plugin_user("gpu-node-01"))
    assert not other.allowed and "node its Pod runs on" in other.message


def test_another_identity_is_refused_by_the_first_rule() -> None:
    decision = guard("gpu-node-01", {"username": "alice", "extra": plugin_user("gpu-node-01")["extra"]})
    assert not decision.allowed and "only the model-manager plugin" in decision.message


def test_a_token_not_bound_to_a_pod_is_refused() -> None:
    decision = guard("gpu-node-01", {"username": PLUGIN})
    assert not decision.allowed and "bound to its Pod" in decision.message


def test_without_a_node_claim_the_pod_is_looked_up() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "mm-abc", "namespace": "gpustack-system", "uid": "u-1"},
        "spec": {"nodeName": "gpu-node-01"},
    }
    lookups = FileLookups([pod])
    assert guard("gpu-node-01", plugin_user(None), lookups).allowed
    assert not guard("gpu-node-02", plugin_user(None), lookups).allowed
    assert not guard("gpu-node-01", plugin_user(None, uid="u-other"), lookups).allowed


# --- registry and HTTP -----------------------------------------------------------------------------


def test_registry_routes_the_status_guards_to_the_subresource() -> None:
    hooks = {w.name: w for w in registry.WEBHOOKS}
    status = hooks["validate.gpustack-worker.worker.gpustack.ai.v1.modelartifact-status"]
    assert status.rule_resource == "modelartifacts/status" and status.operations == ("UPDATE",)
    spec = hooks["validate.gpustack-worker.worker.gpustack.ai.v1.modelartifact"]
    assert spec.rule_resource == "modelartifacts"
    assert "validate.gpustack-worker.worker.gpustack.ai.v1.nodemodelstore-status" in hooks


def test_over_http(monkeypatch: pytest.MonkeyPatch) -> None:
    client = TestClient(server.create_app(FileLookups()))
    path = next(w.path for w in registry.WEBHOOKS if w.handler is modelartifact.validate)
    bad = review(
        artifact({"image": {"reference": "repo:v1"}}),
        kind="ModelArtifact",
        group=GROUP,
        resource="modelartifacts",
    )
    answer = client.post(path, json=bad).json()["response"]
    assert answer["allowed"] is False and "spec.source.image.reference" in answer["status"]["message"]
