"""Admission of the Instance companion kinds (instances spec A.1, A.4): what a user of SSH
workspaces expects each one to refuse.

- ``InstanceSSHPublicKey`` — ``spec.data`` is one OpenSSH public key line that parses
  (:mod:`api.ssh`): a known key type, a base64 blob naming the same type, nothing trailing.
- ``InstanceImagePullSecret`` — ``registry``, ``username`` and ``password`` are written together
  (on create, and on any update that changes the registry or the username); a registry is a host
  with an optional port and path; a username holds no ``:``.  The password is write-only: the
  operator removes it once the backing Secret holds it, and that removal is an update carrying
  none of the three changes.
- ``InstancePersistentVolume`` — ``capacity`` is a positive size; ``type`` names a StorageClass
  (a DNS subdomain).  That the three are fixed is the CRD's own rule.

No refusal echoes a password or a whole key back.
"""

from __future__ import annotations

import re
from typing import Any

from api import ssh
from fastpath import quantity
from webhooks.decision import Decision, FieldError, allow, invalid, reject, required
from webhooks.lookups import Lookups
from webhooks.review import AdmissionRequest

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_REGISTRY = re.compile(
    r"^(https?://)?"  # the legacy Docker Hub key is https://index.docker.io/v1/
    r"([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]+\])"
    r"(:[0-9]{1,5})?(/[^\s]*)?$"
)
CREDENTIALS = ("registry", "username", "password")


def _spec(obj: dict[str, Any] | None) -> dict[str, Any]:
    spec = (obj or {}).get("spec")
    return spec if isinstance(spec, dict) else {}


def _sample(text: str) -> str:
    """The start of a long value, enough to recognise it."""
    return text if len(text) <= 24 else text[:24] + "…"


# --- InstanceSSHPublicKey ---------------------------------------------------------------------------


def ssh_key_errors(spec: dict[str, Any]) -> list[FieldError]:
    data = spec.get("data")
    if data in (None, ""):
        return [
            required(
                "spec.data", "paste one OpenSSH public key line, e.g. the contents of ~/.ssh/id_ed25519.pub"
            )
        ]
    return []


def ssh_key_warnings(spec: dict[str, Any]) -> list[str]:
    """A line that does not parse is admitted with a warning (the seed's own example carries a
    placeholder and must apply unchanged); the controller writes no Secret for it and an Instance
    naming it explains so in its status."""
    data = spec.get("data")
    if not isinstance(data, str) or not data:
        return []
    try:
        ssh.parse(data)
    except ssh.KeyLineError as error:
        return [
            f"spec.data: {_sample(data)!r} {error}: no Instance can use this key until spec.data holds "
            "one OpenSSH public key line, e.g. the contents of ~/.ssh/id_ed25519.pub"
        ]
    return []


async def validate_ssh_public_key(request: AdmissionRequest, lookups: Lookups) -> Decision:
    spec = _spec(request.object)
    errors = ssh_key_errors(spec)
    if errors:
        return reject("InstanceSSHPublicKey", request.display_name, errors)
    return allow(warnings=ssh_key_warnings(spec))


# --- InstanceImagePullSecret --------------------------------------------------------------------------


def _credential_errors(spec: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    errors: list[FieldError] = []
    changes_identity = old is None or any(
        spec.get(k) != old.get(k) for k in ("registry", "username", "email")
    )
    if spec.get("password") or changes_identity:
        for name in CREDENTIALS:
            if not spec.get(name):
                why = (
                    "registry, username and password are written together"
                    if old is None
                    else "changing the registry, username or email needs registry, username and password "
                    "in the same write (the stored password is not readable)"
                )
                errors.append(required(f"spec.{name}", why))
    return errors


def pull_secret_errors(spec: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    errors = _credential_errors(spec, old)
    registry = spec.get("registry")
    if registry and not (isinstance(registry, str) and _REGISTRY.match(registry)):
        errors.append(
            invalid(
                "spec.registry",
                _sample(str(registry)),
                "must be a registry host with an optional port and path, e.g. registry.example.com:5000",
            )
        )
    username = spec.get("username")
    if isinstance(username, str) and (":" in username or any(ch.isspace() for ch in username)):
        errors.append(invalid("spec.username", _sample(username), "must not contain ':' or white space"))
    return errors


async def validate_image_pull_secret(request: AdmissionRequest, lookups: Lookups) -> Decision:
    old = _spec(request.old_object) if request.operation == "UPDATE" else None
    errors = pull_secret_errors(_spec(request.object), old)
    return reject("InstanceImagePullSecret", request.display_name, errors) if errors else allow()


# --- InstancePersistentVolume ---------------------------------------------------------------------------


def persistent_volume_errors(spec: dict[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    capacity = spec.get("capacity")
    if capacity not in (None, ""):
        try:
            positive = quantity.parse(capacity)[0] > 0
        except ValueError:
            positive = False
        if not positive:
            errors.append(invalid("spec.capacity", capacity, "must be a positive size, e.g. 20Gi"))
    storage_class = spec.get("type")
    if storage_class not in (None, "") and not (
        isinstance(storage_class, str) and len(storage_class) <= 253 and _DNS_SUBDOMAIN.match(storage_class)
    ):
        errors.append(
            invalid(
                "spec.type",
                storage_class,
                "must name a StorageClass; `kubectl get storageclasses` lists them",
            )
        )
    return errors


async def validate_persistent_volume(request: AdmissionRequest, lookups: Lookups) -> Decision:
    errors = persistent_volume_errors(_spec(request.object))
    return reject("InstancePersistentVolume", request.display_name, errors) if errors else allow()
