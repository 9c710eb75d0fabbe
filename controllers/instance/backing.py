"""The reconcilers that keep each companion object's core object (:mod:`.companions`) written.

Keyed by ``(namespace, name)`` of the companion object.  Each watches its kind and the core objects
it owns (by the owner label), so a backing object deleted or edited by hand is written again.  A
core object of the same name that the companion does not own is never touched: the companion gets
a ``NameTaken`` event instead.  Deleting a companion deletes its core object through the owner
reference (the garbage collector; a claim still mounted stays until its Pod is gone).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import cast

from api import constants, ssh
from api.objects import Obj
from controllers.instance import companions as cp
from kube import changes
from kube.client import ApiError
from kube.events import NORMAL, WARNING
from kube.informer import Informer
from kube.manager import Controller, Manager, Watch
from kube.status import replacing

log = logging.getLogger("controllers.instance.backing")

Key = tuple[str, str]


class _Backing(Controller):
    """A companion kind and the core kind backing it."""

    kind = ""
    core_kind = ""

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager)
        self.owners = self.informer(self.kind)
        self.selector = f"{constants.LABEL_OWNED_BY_INSTANCES}={cp.PLURALS[self.kind]}"
        self.backed: Informer = manager.informer(self.core_kind, label_selector=self.selector)

    def watches(self) -> list[Watch]:
        def owner(event: str, obj: Obj, old: Obj | None) -> list[Key]:
            return [(changes.namespace_of(obj), changes.name_of(obj))]

        def core(event: str, obj: Obj, old: Obj | None) -> list[Key]:
            key = cp.owner_key(obj, self.kind)
            return [key] if key else []

        return [Watch(self.kind, owner), Watch(self.core_kind, core, label_selector=self.selector)]

    def reconcile(self, key: Hashable) -> float | None:
        namespace, name = cast(Key, key)
        owner = self.owners.get(name, namespace)
        if owner is None or (owner.get("metadata") or {}).get("deletionTimestamp"):
            return None
        owner = {**owner, "kind": self.kind}
        live = self.backed.get(name, namespace)
        if live is not None and not cp.owned_by(live, owner):
            live = None  # another object's, or a stale copy of a deleted namesake's: read afresh
        return self.sync(owner, live)

    def sync(self, owner: Obj, live: Obj | None) -> float | None:
        raise NotImplementedError

    def _create(self, owner: Obj, desired: Obj) -> bool:
        """Create ``desired``; False (with a ``NameTaken`` event) when another object has the name."""
        try:
            self.client.create(desired)
        except ApiError as error:
            if not error.conflict:
                raise
            other = self.client.get(self.core_kind, changes.name_of(desired), changes.namespace_of(desired))
            if other is not None and not cp.owned_by(other, owner):
                self.recorder.event(
                    owner,
                    WARNING,
                    "NameTaken",
                    f"a {self.core_kind} named {changes.name_of(desired)} exists that this "
                    f"{self.kind} does not own; delete or rename one of them",
                )
            return False
        self.recorder.event(owner, NORMAL, "Created", f"created {self.core_kind} {changes.name_of(desired)}")
        return True

    def _write_secret(self, owner: Obj, desired: Obj, live: Obj | None) -> None:
        if live is None:
            self._create(owner, desired)
        elif live.get("type") != desired["type"]:
            # A Secret's type is immutable: replace it.
            self.client.delete("Secret", changes.name_of(live), changes.namespace_of(live))
            self._create(owner, desired)
        elif live.get("data") != desired["data"]:
            self.client.update({**live, "data": desired["data"]})


class SSHPublicKeyReconciler(_Backing):
    """``InstanceSSHPublicKey`` → its ``authorized_keys`` Secret."""

    name = "instance-ssh-public-keys"
    kind = "InstanceSSHPublicKey"
    core_kind = "Secret"

    def sync(self, owner: Obj, live: Obj | None) -> float | None:
        try:
            desired = cp.ssh_key_secret(owner)
        except ssh.KeyLineError as error:
            self.recorder.event(owner, WARNING, "InvalidKey", f"spec.data {error}; no Secret is written")
            return None
        self._write_secret(owner, desired, live)
        return None


class ImagePullSecretReconciler(_Backing):
    """``InstanceImagePullSecret`` → its dockerconfigjson Secret; the password then leaves the object."""

    name = "instance-image-pull-secrets"
    kind = "InstanceImagePullSecret"
    core_kind = "Secret"

    def sync(self, owner: Obj, live: Obj | None) -> float | None:
        desired = cp.pull_secret(owner)
        if desired is None:
            if live is None:
                self.recorder.event(
                    owner,
                    WARNING,
                    "PasswordNeeded",
                    "no Secret holds these credentials any more; apply the object again with "
                    "registry, username and password",
                )
            return None
        self._write_secret(owner, desired, live)
        try:
            self.client.patch(
                self.kind,
                changes.name_of(owner),
                cp.strip_password(owner),
                namespace=changes.namespace_of(owner),
            )
        except ApiError as error:
            if error.conflict:
                return 0.5  # changed meanwhile: write the newer credentials first
            if not error.not_found:
                raise
        return None


class PersistentVolumeReconciler(_Backing):
    """``InstancePersistentVolume`` → its PersistentVolumeClaim; status mirrors the claim."""

    name = "instance-persistent-volumes"
    kind = "InstancePersistentVolume"
    core_kind = "PersistentVolumeClaim"

    def sync(self, owner: Obj, live: Obj | None) -> float | None:
        if live is None:
            self._create(owner, cp.persistent_claim(owner))
            return None
        status = cp.volume_status(live)
        current = owner.get("status") or {}
        if status != current:
            body = replacing(current, status)
            self.client.patch(
                self.kind,
                changes.name_of(owner),
                {"status": body},
                namespace=changes.namespace_of(owner),
                subresource="status",
            )
        return None
