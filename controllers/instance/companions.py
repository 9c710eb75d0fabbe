"""The core objects behind the Instance companion kinds, purely (instances spec A.1, A.4).

Each companion object is backed by a core object of the **same name** in its namespace, owned by
it (controller reference, so deleting the companion deletes it) and labelled
``instance.gpustack.ai/owned-by: <plural>``:

- ``InstanceSSHPublicKey`` → an ``Opaque`` Secret whose ``authorized_keys`` holds the key line
  (mounted read-only, mode 0600, into the ``sshd`` sidecar);
- ``InstanceImagePullSecret`` → a ``kubernetes.io/dockerconfigjson`` Secret for its registry
  (named by the Pod's ``imagePullSecrets``); written only while the object carries the password,
  which the operator then removes from it (write-only input);
- ``InstancePersistentVolume`` → a PersistentVolumeClaim of ``capacity`` in StorageClass ``type``
  (the default class when unset) with ``accessMode`` (``ReadWriteOnce`` when unset), mounted as
  ``claimName``; the companion's status mirrors the claim's phase and bound volume.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from api import API_VERSION, constants, ssh
from api.models.instance import InstanceImagePullSecret, InstancePersistentVolume, InstanceSSHPublicKey
from api.objects import Obj

DOCKER_CONFIG_JSON = "kubernetes.io/dockerconfigjson"
DOCKER_CONFIG_KEY = ".dockerconfigjson"
PLURALS = {
    cls.__crd__.kind: cls.__crd__.plural
    for cls in (InstanceSSHPublicKey, InstanceImagePullSecret, InstancePersistentVolume)
}
DEFAULT_ACCESS_MODE = "ReadWriteOnce"
DEFAULT_CAPACITY = "20Gi"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def backing_metadata(owner: Mapping[str, Any]) -> Obj:
    """Name, namespace, owner label and controller reference of ``owner``'s core object."""
    meta = owner.get("metadata") or {}
    kind = owner.get("kind") or ""
    return {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "labels": {constants.LABEL_OWNED_BY_INSTANCES: PLURALS[kind]},
        "ownerReferences": [
            {
                "apiVersion": API_VERSION,
                "kind": kind,
                "name": meta.get("name"),
                "uid": meta.get("uid"),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }


def owned_by(obj: Mapping[str, Any] | None, owner: Mapping[str, Any]) -> bool:
    uid = (owner.get("metadata") or {}).get("uid")
    refs = ((obj or {}).get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == uid and ref.get("controller") for ref in refs)


def owner_key(obj: Mapping[str, Any], kind: str) -> tuple[str, str] | None:
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == kind and ref.get("controller"):
            return (meta.get("namespace") or "", ref.get("name") or "")
    return None


# --- InstanceSSHPublicKey ------------------------------------------------------------------------------


def ssh_key_secret(key: Mapping[str, Any]) -> Obj:
    """The Secret of an ``InstanceSSHPublicKey``; :class:`api.ssh.KeyLineError` when its
    ``spec.data`` is not one OpenSSH public key line."""
    parsed = ssh.parse((key.get("spec") or {}).get("data"))
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": backing_metadata(key),
        "type": "Opaque",
        "data": {constants.SSH_AUTHORIZED_KEYS_FILE: _b64(f"{parsed.line}\n".encode())},
    }


# --- InstanceImagePullSecret ----------------------------------------------------------------------------


def docker_config(registry: str, username: str, password: str, email: str = "") -> bytes:
    """The ``.dockerconfigjson`` document for one registry."""
    entry: Obj = {
        "username": username,
        "password": password,
        "auth": _b64(f"{username}:{password}".encode()),
    }
    if email:
        entry["email"] = email
    return json.dumps({"auths": {registry: entry}}, sort_keys=True).encode()


def pull_secret(owner: Mapping[str, Any]) -> Obj | None:
    """The dockerconfigjson Secret, or ``None`` when the object no longer carries the password."""
    spec = owner.get("spec") or {}
    if not spec.get("password"):
        return None
    config = docker_config(
        spec.get("registry") or "", spec.get("username") or "", spec["password"], spec.get("email") or ""
    )
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": backing_metadata(owner),
        "type": DOCKER_CONFIG_JSON,
        "data": {DOCKER_CONFIG_KEY: _b64(config)},
    }


def strip_password(owner: Mapping[str, Any]) -> Obj:
    """A merge patch removing the consumed password — from ``spec`` and from the copy
    ``kubectl apply`` keeps in its last-applied annotation — conditional on the resourceVersion."""
    meta = owner.get("metadata") or {}
    patch: Obj = {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "spec": {"password": None}}
    applied = (meta.get("annotations") or {}).get(LAST_APPLIED)
    if applied:
        try:
            document = json.loads(applied)
        except ValueError:
            document = None
        if (
            isinstance(document, dict)
            and isinstance(document.get("spec"), dict)
            and "password" in document["spec"]
        ):
            document["spec"].pop("password")
            patch["metadata"]["annotations"] = {
                LAST_APPLIED: json.dumps(document, separators=(",", ":")) + "\n"
            }
    return patch


# --- InstancePersistentVolume ---------------------------------------------------------------------------


def persistent_claim(volume: Mapping[str, Any]) -> Obj:
    """The PersistentVolumeClaim of an ``InstancePersistentVolume``."""
    spec = volume.get("spec") or {}
    claim_spec: Obj = {
        "accessModes": [spec.get("accessMode") or DEFAULT_ACCESS_MODE],
        "resources": {"requests": {"storage": str(spec.get("capacity") or DEFAULT_CAPACITY)}},
    }
    if spec.get("type"):
        claim_spec["storageClassName"] = spec["type"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": backing_metadata(volume),
        "spec": claim_spec,
    }


def volume_status(claim: Mapping[str, Any] | None) -> Obj:
    """The companion's status from its claim: phase and the bound PersistentVolume."""
    if claim is None:
        return {}
    status: Obj = {"phase": (claim.get("status") or {}).get("phase") or "Pending"}
    bound = (claim.get("spec") or {}).get("volumeName")
    if bound:
        status["volume"] = {"apiVersion": "v1", "kind": "PersistentVolume", "name": bound}
    return status
