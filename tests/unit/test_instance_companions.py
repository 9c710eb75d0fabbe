"""The core objects behind InstanceSSHPublicKey, InstanceImagePullSecret and
InstancePersistentVolume (instances spec A.1, A.4), rendered purely."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from api import ssh
from controllers.instance import companions as cp

KEY_LINE = (
    ed25519.Ed25519PrivateKey.generate()
    .public_key()
    .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    .decode()
)


def _obj(kind: str, spec: dict, **meta) -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": kind,
        "metadata": {
            "name": "workspace-key",
            "namespace": "team-a",
            "uid": "u-1",
            "resourceVersion": "7",
            **meta,
        },
        "spec": spec,
    }


def test_ssh_key_secret_holds_the_canonical_line() -> None:
    secret = cp.ssh_key_secret(_obj("InstanceSSHPublicKey", {"data": f"  {KEY_LINE}   me@host \n"}))
    assert secret["type"] == "Opaque"
    assert base64.b64decode(secret["data"]["authorized_keys"]).decode() == f"{KEY_LINE} me@host\n"
    meta = secret["metadata"]
    assert (meta["name"], meta["namespace"]) == ("workspace-key", "team-a")
    assert meta["labels"] == {"instance.gpustack.ai/owned-by": "instancesshpublickeys"}
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "worker.gpustack.ai/v1",
            "kind": "InstanceSSHPublicKey",
            "name": "workspace-key",
            "uid": "u-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def test_an_unparseable_key_writes_no_secret() -> None:
    with pytest.raises(ssh.KeyLineError):
        cp.ssh_key_secret(_obj("InstanceSSHPublicKey", {"data": "ssh-ed25519 <paste-your-public-key-here>"}))


def test_pull_secret_is_a_docker_config_for_its_registry() -> None:
    owner = _obj(
        "InstanceImagePullSecret",
        {
            "registry": "registry.example.com",
            "username": "bob",
            "password": "s3cret",
            "email": "b@example.com",
        },
    )
    secret = cp.pull_secret(owner)
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    config = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))
    assert config == {
        "auths": {
            "registry.example.com": {
                "username": "bob",
                "password": "s3cret",
                "email": "b@example.com",
                "auth": base64.b64encode(b"bob:s3cret").decode(),
            }
        }
    }
    assert secret["metadata"]["labels"] == {"instance.gpustack.ai/owned-by": "instanceimagepullsecrets"}


def test_without_the_password_nothing_is_written() -> None:
    assert cp.pull_secret(_obj("InstanceImagePullSecret", {"registry": "r.io", "username": "bob"})) is None


def test_the_consumed_password_leaves_spec_and_the_last_applied_copy() -> None:
    applied = {
        "apiVersion": "worker.gpustack.ai/v1",
        "spec": {"registry": "r.io", "username": "bob", "password": "s3cret"},
    }
    owner = _obj(
        "InstanceImagePullSecret",
        applied["spec"],
        annotations={cp.LAST_APPLIED: json.dumps(applied)},
    )
    patch = cp.strip_password(owner)
    assert patch["spec"] == {"password": None}
    assert patch["metadata"]["resourceVersion"] == "7"
    scrubbed = json.loads(patch["metadata"]["annotations"][cp.LAST_APPLIED])
    assert scrubbed["spec"] == {"registry": "r.io", "username": "bob"}
    assert "s3cret" not in json.dumps(patch)


def test_strip_password_leaves_a_foreign_annotation_alone() -> None:
    owner = _obj("InstanceImagePullSecret", {"password": "x"}, annotations={cp.LAST_APPLIED: "not json"})
    assert "annotations" not in cp.strip_password(owner)["metadata"]


def test_persistent_claim_from_the_volume() -> None:
    owner = _obj(
        "InstancePersistentVolume", {"type": "fast", "capacity": "50Gi", "accessMode": "ReadWriteMany"}
    )
    claim = cp.persistent_claim(owner)
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "50Gi"}},
        "storageClassName": "fast",
    }
    assert claim["metadata"]["labels"] == {"instance.gpustack.ai/owned-by": "instancepersistentvolumes"}
    defaulted = cp.persistent_claim(_obj("InstancePersistentVolume", {}))
    assert defaulted["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "20Gi"}},
    }


def test_volume_status_mirrors_the_claim() -> None:
    assert cp.volume_status(None) == {}
    assert cp.volume_status({"spec": {}, "status": {}}) == {"phase": "Pending"}
    bound = {"spec": {"volumeName": "pv-9"}, "status": {"phase": "Bound"}}
    assert cp.volume_status(bound) == {
        "phase": "Bound",
        "volume": {"apiVersion": "v1", "kind": "PersistentVolume", "name": "pv-9"},
    }


def test_owner_key_and_owned_by() -> None:
    secret = cp.ssh_key_secret(_obj("InstanceSSHPublicKey", {"data": KEY_LINE}))
    assert cp.owner_key(secret, "InstanceSSHPublicKey") == ("team-a", "workspace-key")
    assert cp.owner_key(secret, "InstanceImagePullSecret") is None
    assert cp.owned_by(secret, {"metadata": {"uid": "u-1"}})
    assert not cp.owned_by(secret, {"metadata": {"uid": "u-2"}})
