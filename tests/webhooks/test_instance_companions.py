"""Admission of InstanceSSHPublicKey, InstanceImagePullSecret and InstancePersistentVolume, over
HTTP through the worker's webhook app (the routes the registry declares)."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from starlette.testclient import TestClient

from tests.webhooks.reviews import body
from webhooks import registry, server
from webhooks.lookups import FileLookups

JSON = {"content-type": "application/json"}
KEY_LINE = (
    ed25519.Ed25519PrivateKey.generate()
    .public_key()
    .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    .decode()
)
KINDS = {
    "InstanceSSHPublicKey": "instancesshpublickeys",
    "InstanceImagePullSecret": "instanceimagepullsecrets",
    "InstancePersistentVolume": "instancepersistentvolumes",
}


@pytest.fixture(scope="module")
def client():
    with TestClient(server.create_app(FileLookups())) as test_client:
        yield test_client


def _path(kind: str) -> str:
    (hook,) = [w for w in registry.WEBHOOKS if w.kind == kind and not w.mutating]
    assert hook.resource == KINDS[kind] and hook.failure_policy == "Fail"
    return hook.path


def _obj(kind: str, spec: dict | None) -> dict:
    obj = {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": kind,
        "metadata": {"name": "x", "namespace": "team-a"},
    }
    if spec is not None:
        obj["spec"] = spec
    return obj


def admit(client, kind: str, spec: dict | None, *, old: dict | None = None) -> dict:
    obj = _obj(kind, spec)
    payload = body(
        obj,
        kind=kind,
        group="worker.gpustack.ai",
        resource=KINDS[kind],
        operation="UPDATE" if old is not None else "CREATE",
        old=_obj(kind, old) if old is not None else None,
    )
    response = client.post(_path(kind), content=payload, headers=JSON)
    assert response.status_code == 200
    return response.json()["response"]


def causes(answer: dict) -> list[str]:
    return [c["field"] for c in answer["status"]["details"]["causes"]]


# --- InstanceSSHPublicKey ----------------------------------------------------------------------------


def test_a_real_key_is_admitted(client) -> None:
    assert admit(client, "InstanceSSHPublicKey", {"data": f"{KEY_LINE} alice@laptop"})["allowed"]


def test_the_seed_placeholder_is_admitted_with_a_warning_naming_spec_data(client) -> None:
    # The seed's example must apply unchanged; kubectl shows the warning, and no Instance can use
    # the key until it parses (the controller writes no Secret for it).
    answer = admit(client, "InstanceSSHPublicKey", {"data": "ssh-ed25519 <paste-your-public-key-here>"})
    assert answer["allowed"]
    (warning,) = answer["warnings"]
    assert warning.startswith("spec.data:") and "not base64" in warning


@pytest.mark.parametrize("spec", [None, {}, {"data": ""}], ids=["no-spec", "empty-spec", "blank"])
def test_a_key_without_data_is_refused(client, spec) -> None:
    answer = admit(client, "InstanceSSHPublicKey", spec)
    assert not answer["allowed"] and causes(answer) == ["spec.data"]
    assert answer["status"]["code"] == 422


def test_a_wrong_typed_key_is_a_refusal_not_an_error(client) -> None:
    answer = admit(client, "InstanceSSHPublicKey", {"data": ["ssh-ed25519", "AAAA"]})
    assert not answer["allowed"] and answer["status"]["code"] == 422 and causes(answer) == ["spec.data"]


# --- InstanceImagePullSecret -----------------------------------------------------------------------


GOOD = {"registry": "registry.example.com:5000", "username": "bob", "password": "s3cret"}


def test_complete_credentials_are_admitted(client) -> None:
    assert admit(client, "InstanceImagePullSecret", {**GOOD, "email": "bob@example.com"})["allowed"]
    assert admit(client, "InstanceImagePullSecret", {**GOOD, "registry": "https://index.docker.io/v1/"})[
        "allowed"
    ]


def test_credentials_come_together_on_create(client) -> None:
    answer = admit(client, "InstanceImagePullSecret", {"registry": "r.io", "username": "bob"})
    assert not answer["allowed"] and causes(answer) == ["spec.password"]
    assert "s3cret" not in str(admit(client, "InstanceImagePullSecret", {"password": "s3cret"}))


def test_the_operator_removing_the_consumed_password_is_admitted(client) -> None:
    after = {k: v for k, v in GOOD.items() if k != "password"}
    assert admit(client, "InstanceImagePullSecret", after, old=GOOD)["allowed"]
    # ...and so is an edit of the display name later on.
    assert admit(client, "InstanceImagePullSecret", {**after, "displayName": "team"}, old=after)["allowed"]


def test_changing_the_registry_needs_the_password_again(client) -> None:
    stored = {"registry": "r.io", "username": "bob"}
    answer = admit(client, "InstanceImagePullSecret", {"registry": "other.io", "username": "bob"}, old=stored)
    assert not answer["allowed"] and causes(answer) == ["spec.password"]
    moved = {"registry": "other.io", "username": "bob", "password": "new"}
    assert admit(client, "InstanceImagePullSecret", moved, old=stored)["allowed"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("registry", "not a registry"),
        ("registry", "r.io/a b"),
        ("username", "bob:admin"),
        ("username", "bo b"),
    ],
)
def test_malformed_registry_or_username(client, field, value) -> None:
    answer = admit(client, "InstanceImagePullSecret", {**GOOD, field: value})
    assert not answer["allowed"] and causes(answer) == [f"spec.{field}"]


# --- InstancePersistentVolume ------------------------------------------------------------------------


def test_a_claim_size_is_admitted(client) -> None:
    assert admit(client, "InstancePersistentVolume", {"capacity": "50Gi", "type": "local-path"})["allowed"]


@pytest.mark.parametrize("capacity", ["0", "-1Gi", "0Mi", "lots"])
def test_a_non_positive_size_is_refused(client, capacity) -> None:
    answer = admit(client, "InstancePersistentVolume", {"capacity": capacity})
    assert not answer["allowed"] and causes(answer) == ["spec.capacity"]


def test_a_storage_class_name_is_a_dns_subdomain(client) -> None:
    answer = admit(client, "InstancePersistentVolume", {"capacity": "1Gi", "type": "Fast_SSD"})
    assert not answer["allowed"] and causes(answer) == ["spec.type"]
