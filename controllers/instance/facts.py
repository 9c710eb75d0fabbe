"""What an Instance's Pod depends on, read just before the Pod is created (instances spec A.7, A.8).

:meth:`FactsReader.read` returns the :class:`~controllers.instance.pod.PodFacts` to render with, or
a :class:`Blocked` naming what is missing — an SSH key, a pull secret or a claim that does not
exist (or whose core object the operator has not written yet), an unbound claim, an InstanceType
whose accelerators are not observed yet, a model volume whose weights cannot be delivered (the
ModelArtifact missing or not ``Resolved``, its claim unbound, no CSIDriver for a hub artifact:
model-delivery §4.3) — so no half-made Pod is ever created.  Core objects (Secrets, claims, volumes,
classes, artifacts) are read directly: Pod creation is rare, and a cluster-wide Secret cache would
cost more than these reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from api import constants, setting_names, ssh
from api.manufacturers import BY_NAME, Manufacturer, manufacturer_of_group
from api.naming import local_queue_name
from controllers.delivery.consumption import Gate, ModelVolume, plan_instance_volume
from controllers.instance.claims import verdict
from controllers.instance.pod import PodFacts, merge_node_selectors
from controllers.settings import SettingsReader
from kube.client import Client
from kube.informer import Informer

SSH_SERVER_IMAGE = setting_names.INSTANCE_SSH_SERVER_IMAGE
OVERCOMMIT = setting_names.INSTANCE_GENERAL_RESOURCES_OVERCOMMIT
PLACEMENT = setting_names.INSTANCE_PERSISTENT_VOLUME_PLACEMENT
DOCKER_CONFIG_JSON = "kubernetes.io/dockerconfigjson"


@dataclass(frozen=True, slots=True)
class Blocked:
    """No Pod yet: ``message`` says what the Instance waits for and what to do."""

    message: str


def entrance(instance_type: Mapping[str, Any]) -> str:
    """The InstanceType's LocalQueue: its ``queue-entrance`` label (the name hash otherwise)."""
    meta = instance_type.get("metadata") or {}
    labels = meta.get("labels") or {}
    return (
        labels.get(constants.LABEL_QUEUE_ENTRANCE)
        or (instance_type.get("status") or {}).get("entrance")
        or local_queue_name(meta.get("name") or "")
    )


def manufacturer(instance_type: Mapping[str, Any]) -> Manufacturer | None:
    """The manufacturer of an accelerated type (observed detail first, else its group's prefix)."""
    spec = instance_type.get("spec") or {}
    observed = ((instance_type.get("status") or {}).get("detail") or {}).get("manufacturer") or ""
    return BY_NAME.get(observed) or manufacturer_of_group(spec.get("acceleratorGroup") or "")


def _owned_by(obj: Mapping[str, Any], owner: Mapping[str, Any] | None) -> bool:
    uid = ((owner or {}).get("metadata") or {}).get("uid")
    return any(ref.get("uid") == uid for ref in (obj.get("metadata") or {}).get("ownerReferences") or [])


class FactsReader:
    def __init__(
        self,
        client: Client,
        settings: SettingsReader,
        nodes: Informer,
        ssh_keys: Informer,
        pull_secrets: Informer,
    ) -> None:
        self.client = client
        self.settings = settings
        self.nodes = nodes
        self.ssh_keys = ssh_keys
        self.pull_secrets = pull_secrets

    def read(self, instance: Mapping[str, Any], instance_type: Mapping[str, Any]) -> PodFacts | Blocked:
        spec = instance.get("spec") or {}
        namespace = (instance.get("metadata") or {}).get("namespace") or ""
        maker = None
        if (instance_type.get("spec") or {}).get("acceleratable"):
            maker = manufacturer(instance_type)
            if maker is None:
                name = (instance_type.get("metadata") or {}).get("name")
                return Blocked(f"InstanceType {name} has not observed its accelerators' manufacturer yet")
        for check in (self._ssh_key, self._pull_secret):
            blocked = check(spec, namespace)
            if blocked is not None:
                return blocked
        models = self._model_volumes(spec, namespace)
        if isinstance(models, Blocked):
            return models
        claims = self._claims(spec, namespace, [m.node_selector for m in models.values()])
        if isinstance(claims, Blocked):
            return claims
        ssh_image = ""
        if (spec.get("sshPublicKey") or {}).get("name"):
            ssh_image = self.settings.image(SSH_SERVER_IMAGE)
        return PodFacts(
            queue_name=entrance(instance_type),
            maker=maker,
            runtime_class=self._runtime_class(maker),
            hostname=self._hostname(spec.get("nodeName") or ""),
            ssh_image=ssh_image,
            overcommit=self.settings.enabled(OVERCOMMIT),
            node_affinity=claims,
            workspace_claim=((spec.get("volume") or {}).get("persistent") or {}).get("name") or "",
            model_volumes={index: (m.source, m.sub_path) for index, m in models.items()},
        )

    # --- each dependency ------------------------------------------------------------------------------

    def _ssh_key(self, spec: Mapping[str, Any], namespace: str) -> Blocked | None:
        name = (spec.get("sshPublicKey") or {}).get("name")
        if not name:
            return None
        key = self.ssh_keys.get(name, namespace)
        if key is None:
            return Blocked(
                f"spec.sshPublicKey: InstanceSSHPublicKey {name} does not exist; create it or clear the field"
            )
        try:
            ssh.parse((key.get("spec") or {}).get("data"))
        except ssh.KeyLineError as error:
            return Blocked(
                f"spec.sshPublicKey: InstanceSSHPublicKey {name} spec.data {error}; put one OpenSSH public "
                "key line there"
            )
        secret = self.client.get("Secret", name, namespace)
        if secret is None or not _owned_by(secret, key):
            return Blocked(f"spec.sshPublicKey: waiting for the Secret {name} of InstanceSSHPublicKey {name}")
        if constants.SSH_AUTHORIZED_KEYS_FILE not in (secret.get("data") or {}):
            return Blocked(f"spec.sshPublicKey: the Secret of InstanceSSHPublicKey {name} holds no key")
        return None

    def _pull_secret(self, spec: Mapping[str, Any], namespace: str) -> Blocked | None:
        name = (spec.get("imagePullSecret") or {}).get("name")
        if not name:
            return None
        owner = self.pull_secrets.get(name, namespace)
        if owner is None:
            return Blocked(
                f"spec.imagePullSecret: InstanceImagePullSecret {name} does not exist; create it or clear the field"
            )
        secret = self.client.get("Secret", name, namespace)
        if secret is None or secret.get("type") != DOCKER_CONFIG_JSON or not _owned_by(secret, owner):
            return Blocked(
                f"spec.imagePullSecret: waiting for the Secret {name} of InstanceImagePullSecret {name} "
                "(it is written once the object carries registry, username and password)"
            )
        return None

    def _model_volumes(self, spec: Mapping[str, Any], namespace: str) -> dict[int, ModelVolume] | Blocked:
        """Each ``additionalVolumes[].model`` entry's volume, or what holds the Pod back."""
        out: dict[int, ModelVolume] = {}
        for index, entry in enumerate(spec.get("additionalVolumes") or []):
            name = ((entry.get("model") or {}).get("artifactRef") or {}).get("name")
            if not name:
                continue
            if entry.get("subPath"):
                return Blocked(
                    f"spec.additionalVolumes[{index}].subPath: a model volume mounts the whole artifact "
                    "read-only; remove subPath (a claim source's path is the artifact's own)"
                )
            artifact = self.client.get("ModelArtifact", name, namespace)
            source = ((artifact or {}).get("spec") or {}).get("source") or {}
            claim_name = (source.get("persistentVolumeClaim") or {}).get("claimName") or ""
            claim = self.client.get("PersistentVolumeClaim", claim_name, namespace) if claim_name else None
            claim_spec = (claim or {}).get("spec") or {}
            volume_name = claim_spec.get("volumeName") or ""
            class_name = claim_spec.get("storageClassName") or ""
            planned = plan_instance_volume(
                artifact,
                name,
                csi_driver_present=self.client.get("CSIDriver", constants.CSI_DRIVER_MODEL) is not None,
                claim=claim,
                storage_class=self.client.get("StorageClass", class_name) if class_name else None,
                volume=self.client.get("PersistentVolume", volume_name) if volume_name else None,
            )
            if isinstance(planned, Gate):
                return Blocked(f"spec.additionalVolumes[{index}].model: {planned.reason}: {planned.message}")
            out[index] = planned
        return out

    def _claims(
        self, spec: Mapping[str, Any], namespace: str, extra: list[Mapping[str, Any] | None]
    ) -> Mapping[str, Any] | Blocked | None:
        names = [((spec.get("volume") or {}).get("persistent") or {}).get("name")]
        names += [(e.get("persistent") or {}).get("name") for e in spec.get("additionalVolumes") or []]
        placement = self.settings.enabled(PLACEMENT)
        selectors = []
        for name in dict.fromkeys(n for n in names if n):
            claim = self.client.get("PersistentVolumeClaim", name, namespace)
            bound_to = ((claim or {}).get("spec") or {}).get("volumeName") or ""
            volume = self.client.get("PersistentVolume", bound_to) if placement and bound_to else None
            class_name = ((claim or {}).get("spec") or {}).get("storageClassName") or ""
            storage_class = self.client.get("StorageClass", class_name) if placement and class_name else None
            result = verdict(name, claim, volume, storage_class, placement=placement)
            if result.blocked:
                return Blocked(result.blocked)
            selectors.append(result.node_selector)
        return merge_node_selectors([*selectors, *extra])

    def _runtime_class(self, maker: Manufacturer | None) -> str:
        if maker is None or not maker.runtime_class:
            return ""
        return maker.runtime_class if self.client.get("RuntimeClass", maker.runtime_class) is not None else ""

    def _hostname(self, node_name: str) -> str:
        if not node_name:
            return ""
        node = self.nodes.get(node_name) or self.client.get("Node", node_name)
        labels = ((node or {}).get("metadata") or {}).get("labels") or {}
        return labels.get(constants.LABEL_HOSTNAME) or node_name
