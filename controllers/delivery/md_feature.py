"""The model-delivery feature of the ModelDeployment controller (model-delivery spec §3.4.1, §4.3,
§5 ``WeightsReady``), built on :mod:`controllers.delivery.consumption` and installed by
:func:`controllers.registry.model_deployment_extensions`.

``resolve`` reads, once per pass, what ``spec.model.artifactRef`` depends on — the ModelArtifact, the
Settings (``model-artifact-delivery-mode``, the Hugging Face endpoint, the proxy pair), the CSIDriver
``model.csi.gpustack.ai``, and for a claim source the claim, its StorageClass and its bound
PersistentVolume — and plans the weights with :func:`~controllers.delivery.consumption.plan_weights`.
A :class:`~controllers.delivery.consumption.Gate` (artifact missing or not ``Resolved``, claim not
bound, ``Node`` without the CSIDriver, patterns or an anchor under ``Engine``, a ReadWriteOnce claim
wanted by several Pods) blocks every create: no Pod is made, ``WeightsReady=False`` says why, the
phase message repeats it, and outdated replicas are left running (``RolloutHeldByWeights``) — a
``Resolved=False`` artifact blocks only new consumption.  Otherwise ``role`` hands each role its
volumes, mounts, engine arguments (the local path or the repository and pinned commit, then
``--served-model-name`` unless the role states it), the Hub env, the ephemeral-storage limit raise
(Engine delivery) and the claim's node affinity (placed on each Pod at creation, outside its
fingerprint).  ``observe`` turns the live Pods and the NodeModelStores of their nodes into
``WeightsReady``.  Nothing here performs I/O: every read goes through the controller's ``reader``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from api import constants
from api import delivery as d
from api.engines import ENGINE_SGLANG
from api.objects import Obj
from api.settings import DELIVERY_MODE, definition
from controllers.delivery import consumption, hub_settings
from controllers.modeldeployment.extensions import (
    Condition,
    DeliveryResolution,
    Reader,
    RoleDelivery,
)
from fastpath import argv
from kube import changes
from readmodels.modeldeployment import SERVED_NAME_FLAG, SERVED_NAME_FLAGS, Deployment, Role

ARTIFACT = "ModelArtifact"
CLAIM = "PersistentVolumeClaim"
VOLUME = "PersistentVolume"
STORAGE_CLASS = "StorageClass"
CSI_DRIVER = "CSIDriver"
STORE = "NodeModelStore"
REASON_NOT_APPLICABLE = "NotApplicable"
REASON_WEIGHTS_NOT_MOUNTED = "WeightsNotMounted"
REASON_DOWNLOADING = "Downloading"
# What a deployment's render and status read of each kind: a change elsewhere wakes nobody.
_READ: dict[str, tuple[tuple[str, ...], ...]] = {
    ARTIFACT: (("metadata", "uid"), ("spec",), ("status", "resolved"), ("status", "conditions")),
    CLAIM: (("spec",), ("status", "phase")),
    VOLUME: (("spec", "claimRef"), ("spec", "nodeAffinity")),
    STORAGE_CLASS: (("provisioner",), ("volumeBindingMode",)),
    CSI_DRIVER: (),
    STORE: (("status", "models"),),
}


def _setting(reader: Reader, name: str) -> str:
    found = reader("Setting", name, constants.SYSTEM_NAMESPACE)
    value = ((found or {}).get("spec") or {}).get("value")
    return (value if isinstance(value, str) else definition(name).default).strip()


def hub_settings_of(reader: Reader) -> consumption.HubSettings:
    return consumption.HubSettings(
        delivery_mode=_setting(reader, DELIVERY_MODE),
        endpoint=_setting(reader, hub_settings.ENDPOINT),
        https_proxy=_setting(reader, hub_settings.PROXY),
        no_proxy=_setting(reader, hub_settings.NO_PROXY),
        csi_driver_present=reader(CSI_DRIVER, d.CSI_DRIVER_MODEL, "") is not None,
    )


def _claim_name(artifact: Mapping[str, Any] | None) -> str:
    source = (((artifact or {}).get("spec") or {}).get("source") or {}).get("persistentVolumeClaim") or {}
    name = source.get("claimName")
    return name if isinstance(name, str) else ""


def _pods_wanted(md: Deployment) -> int:
    return sum(max(role.replicas, 0) * max(role.size, 1) for role in md.roles)


@dataclass(frozen=True)
class Weights:
    """The pass's plan for managed roles and for take-over roles (a Gate is the same for both)."""

    managed: consumption.WeightsPlan | consumption.Gate
    takeover: consumption.WeightsPlan | consumption.Gate


def _as_pinned(artifact: Obj | None) -> Obj | None:
    """An artifact whose access was revoked after it resolved, as it was while ``Resolved``: its
    pinned commit and digest stay in ``status.resolved`` (written once), so replicas rendered from it
    still read as up to date while new ones are held back."""
    resolved = ((artifact or {}).get("status") or {}).get("resolved") or {}
    if artifact is None or not resolved.get("manifestDigest") or consumption.is_resolved(artifact):
        return None
    pinned = copy.deepcopy(artifact)
    pinned["status"]["conditions"] = [{"type": d.RESOLVED, "status": "True", "reason": d.REASON_RESOLVED}]
    return pinned


def plan(md: Deployment, reader: Reader, *, pinned: bool = False) -> Weights | None:
    """The weights of ``md``'s roles, or None without ``spec.model.artifactRef``; with ``pinned``, as
    an artifact revoked after it resolved was (None when it never resolved)."""
    if not md.artifact_ref:
        return None
    artifact = reader(ARTIFACT, md.artifact_ref, md.namespace)
    if pinned:
        artifact = _as_pinned(artifact)
        if artifact is None:
            return None
    settings = hub_settings_of(reader)
    claim = storage_class = volume = None
    claim_name = _claim_name(artifact)
    if claim_name:
        claim = reader(CLAIM, claim_name, md.namespace)
        claim_spec = (claim or {}).get("spec") or {}
        if claim_spec.get("storageClassName"):
            storage_class = reader(STORAGE_CLASS, claim_spec["storageClassName"], "")
        if claim_spec.get("volumeName"):
            volume = reader(VOLUME, claim_spec["volumeName"], "")
    # A ReadWriteOnce claim serves one Pod: every Pod past the first of this deployment conflicts.
    others = _pods_wanted(md) - 1

    def one(takeover: bool) -> consumption.WeightsPlan | consumption.Gate:
        return consumption.plan_weights(
            artifact,
            md.artifact_ref,
            engine=md.engine,
            takeover=takeover,
            settings=settings,
            claim=claim,
            storage_class=storage_class,
            volume=volume,
            pods_on_claim=others,
        )

    return Weights(one(False), one(True))


def _echo(md: Deployment, reader: Reader, weights: Weights) -> Obj | None:
    """``status.model``: the artifact, and what of its resolution and delivery is known."""
    if isinstance(weights.managed, consumption.WeightsPlan):
        return dict(weights.managed.status_model)
    artifact = reader(ARTIFACT, md.artifact_ref, md.namespace)
    if artifact is None:
        return None  # no delivery to name (the field is required)
    echo: Obj = {
        "artifact": md.artifact_ref,
        "delivery": consumption.delivery_of(artifact, _setting(reader, DELIVERY_MODE)),
    }
    resolved = (artifact.get("status") or {}).get("resolved") or {}  # written once, when it resolved
    if resolved.get("revision"):
        echo["revision"] = resolved["revision"]
    if resolved.get("manifestDigest"):
        echo["manifestDigest"] = resolved["manifestDigest"]
    return echo


def _condition(found: Obj) -> Condition:
    return Condition(found["type"], found["status"], found["reason"], found.get("message") or "")


def _engine_model(engine: str, model_args: list[str]) -> tuple[str | None, list[str]]:
    """Split a plan's model arguments into what the engine loads and the arguments after it."""
    if not model_args:
        return None, []
    if engine == ENGINE_SGLANG:  # ["--model-path", <model>, ...]
        return model_args[1], model_args[2:]
    return model_args[0], model_args[1:]


def _leaving(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


class ArtifactDelivery:
    """``spec.model.artifactRef`` for the ModelDeployment controller."""

    kinds = (ARTIFACT, CLAIM, VOLUME, STORAGE_CLASS, CSI_DRIVER, STORE, "Setting")

    def resolve(self, md: Deployment, reader: Reader) -> DeliveryResolution:
        weights = plan(md, reader)
        if weights is None:
            return DeliveryResolution(
                applicable=False,
                conditions=[
                    Condition(d.WEIGHTS_READY, "True", REASON_NOT_APPLICABLE, "no spec.model.artifactRef")
                ],
            )
        echo = _echo(md, reader, weights)
        gate = next((p for p in (weights.managed, weights.takeover) if isinstance(p, consumption.Gate)), None)
        if gate is not None:
            message = f"no replica is created: {gate.message}"
            # What runs keeps its render: a revoked artifact's pinned weights, else none at all.
            rendered = plan(md, reader, pinned=True) if gate.reason == "ArtifactNotResolved" else None
            return DeliveryResolution(
                applicable=True,
                held=True,
                blocked=True,
                blocked_message=message,
                conditions=[Condition(d.WEIGHTS_READY, "False", gate.reason, message)],
                status=echo,
                data=rendered or weights,
            )
        return DeliveryResolution(applicable=True, status=echo, data=weights)

    def role(
        self, resolution: DeliveryResolution, md: Deployment, role: Role, instance_type: Mapping[str, Any]
    ) -> RoleDelivery | None:
        weights = resolution.data
        if not isinstance(weights, Weights):
            return None
        found = weights.managed if role.managed else weights.takeover
        if not isinstance(found, consumption.WeightsPlan):
            return None
        out = RoleDelivery(
            volumes=list(found.volumes),
            mounts=list(found.mounts),
            ephemeral_limit_raise=found.ephemeral_limit_raise,
            node_affinity=found.node_affinity,
        )
        stated = {e.get("name") for e in role.env if isinstance(e, Mapping)}
        out.env = list(found.env) + [e for e in found.env_defaults if e["name"] not in stated]
        if role.managed:
            out.model, out.args = _engine_model(md.engine, found.model_args)
            if not argv.find_owned_args(md.engine, role.extra_args, SERVED_NAME_FLAGS):
                out.args += [SERVED_NAME_FLAG, md.model_name]
        return out

    def observe(
        self, resolution: DeliveryResolution, md: Deployment, pods: list[Obj], reader: Reader
    ) -> list[Condition]:
        weights = resolution.data
        if resolution.blocked or not isinstance(weights, Weights):
            return list(resolution.conditions)
        found = weights.managed
        assert isinstance(found, consumption.WeightsPlan)
        live = [p for p in pods if not _leaving(p)]
        if not live:
            reason = REASON_DOWNLOADING if found.delivery == d.DELIVERY_ENGINE else REASON_WEIGHTS_NOT_MOUNTED
            return [Condition(d.WEIGHTS_READY, "False", reason, "no replica Pod exists yet")]
        nodes = {(p.get("spec") or {}).get("nodeName") or "" for p in live}
        stores = {n: s for n in nodes if n and (s := reader(STORE, n, "")) is not None}
        return [_condition(consumption.weights_ready(found, live, stores))]

    def wakes(
        self, kind: str, event: str, obj: Obj, old: Obj | None, deployments: list[Obj], reader: Reader
    ) -> list[Obj]:
        """The deployments a change of an artifact, claim, volume, class, driver or store concerns."""
        fields = _READ.get(kind)
        if fields is None or not changes.moved(event, obj, old, *fields):
            return []
        name, namespace = changes.name_of(obj), changes.namespace_of(obj)
        out = []
        for md in deployments:
            ref = (((md.get("spec") or {}).get("model") or {}).get("artifactRef") or {}).get("name")
            if not ref:
                continue
            md_namespace = changes.namespace_of(md)
            if kind == ARTIFACT:
                if ref == name and namespace == md_namespace:
                    out.append(md)
                continue
            if kind == CSI_DRIVER:
                if name == d.CSI_DRIVER_MODEL:
                    out.append(md)
                continue
            artifact = reader(ARTIFACT, ref, md_namespace)
            if kind == STORE:
                digest = (((artifact or {}).get("status") or {}).get("resolved") or {}).get("manifestDigest")
                listed = {
                    m.get("digest")
                    for o in (obj, old)
                    for m in ((o or {}).get("status") or {}).get("models") or ()
                    if isinstance(m, Mapping)
                }
                if digest and digest in listed:
                    out.append(md)
                continue
            claim_name = _claim_name(artifact)
            if not claim_name:
                continue
            if kind == CLAIM:
                if claim_name == name and namespace == md_namespace:
                    out.append(md)
                continue
            claim = reader(CLAIM, claim_name, md_namespace)
            claim_spec = (claim or {}).get("spec") or {}
            if (kind == VOLUME and claim_spec.get("volumeName") == name) or (
                kind == STORAGE_CLASS and claim_spec.get("storageClassName") == name
            ):
                out.append(md)
        return out


__all__ = ["ArtifactDelivery", "Weights", "hub_settings_of", "plan"]
