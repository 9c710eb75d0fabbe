"""How a consuming Pod gets an artifact's weights (model-delivery spec §4.3, §5 ``WeightsReady``),
as pure functions for the ModelDeployment (and Instance) renderers to call.

:func:`plan_weights` answers either a :class:`Gate` (no Pod may be created: ``WeightsReady=False``
with its reason) or a :class:`WeightsPlan` — the delivery (``PVC``, ``Engine``, ``Node``, ``Image``),
volumes, mounts, the engine's model arguments, owned and defaulted env, the ephemeral-storage limit
raise, the claim's node affinity, the fingerprint part, and the ``status.model`` echo.
:func:`weights_ready` reads the Pods (and the NodeModelStores of their nodes) into the condition.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from api import delivery as d
from api.engines import ENGINE_SGLANG, ENGINE_VLLM
from api.objects import Obj

GiB = 1 << 30
HF_HOME = "HF_HOME"
HF_ENDPOINT = "HF_ENDPOINT"
HF_TOKEN = "HF_TOKEN"
CACHE_VOLUME = "gpustack-model-cache"


@dataclass(frozen=True)
class Gate:
    reason: str
    message: str


@dataclass(frozen=True)
class HubSettings:
    delivery_mode: str  # model-artifact-delivery-mode: Engine | Node
    endpoint: str
    https_proxy: str = ""
    no_proxy: str = ""
    csi_driver_present: bool = False


@dataclass
class WeightsPlan:
    delivery: str
    volumes: list[Obj] = field(default_factory=list)
    mounts: list[Obj] = field(default_factory=list)
    model_args: list[str] = field(default_factory=list)
    env: list[Obj] = field(default_factory=list)  # owned: the role's own value never wins
    env_defaults: list[Obj] = field(default_factory=list)  # not owned: the role's value wins
    ephemeral_limit_raise: int = 0  # bytes added to the container's ephemeral-storage limit only
    node_affinity: Obj | None = None  # claim placement, outside the Pod fingerprint
    fingerprint: str = ""
    status_model: Obj = field(default_factory=dict)


def _conditions_true(obj: Mapping[str, Any] | None, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in ((obj or {}).get("status") or {}).get("conditions") or []
    )


def is_resolved(artifact: Mapping[str, Any] | None) -> bool:
    """The artifact reports ``Resolved=True``."""
    return _conditions_true(artifact, d.RESOLVED)


def _hub(source: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return source.get("huggingFace") or source.get("modelScope")


def delivery_of(artifact: Mapping[str, Any], mode: str) -> str:
    source = (artifact.get("spec") or {}).get("source") or {}
    if source.get("persistentVolumeClaim") is not None:
        return d.DELIVERY_PVC
    if source.get("image") is not None:
        return d.DELIVERY_IMAGE
    return d.DELIVERY_NODE if mode == d.DELIVERY_NODE else d.DELIVERY_ENGINE


def _model_args(engine: str, local: bool, repository: str, commit: str) -> list[str]:
    if engine == ENGINE_SGLANG:
        return (
            ["--model-path", d.MODEL_MOUNT_PATH]
            if local
            else ["--model-path", repository, "--revision", commit]
        )
    return [d.MODEL_MOUNT_PATH] if local else [repository, "--revision", commit]


def plan_weights(
    artifact: Mapping[str, Any] | None,
    name: str,
    *,
    engine: str,
    takeover: bool,
    settings: HubSettings,
    claim: Mapping[str, Any] | None = None,
    storage_class: Mapping[str, Any] | None = None,
    volume: Mapping[str, Any] | None = None,
    pods_on_claim: int = 0,
) -> WeightsPlan | Gate:
    """What a replica of a role needs, or the gate that holds its creation.

    ``claim``/``storage_class``/``volume``: the claim of a claim source, its class and bound PV;
    ``pods_on_claim``: Pods (of others) already using a ReadWriteOnce claim."""
    if artifact is None:
        return Gate("ArtifactNotFound", f"ModelArtifact {name} does not exist in this namespace")
    if not is_resolved(artifact):
        reason = next(
            (
                f" ({x.get('reason')}: {x.get('message')})" if x.get("message") else f" ({x.get('reason')})"
                for x in ((artifact.get("status") or {}).get("conditions") or [])
                if x.get("type") == d.RESOLVED and x.get("reason")
            ),
            "",
        )
        return Gate("ArtifactNotResolved", f"ModelArtifact {name} is not Resolved{reason}")
    spec = artifact.get("spec") or {}
    source = spec.get("source") or {}
    resolved = (artifact.get("status") or {}).get("resolved") or {}
    delivery = delivery_of(artifact, settings.delivery_mode)
    echo = {"artifact": name, "delivery": delivery}
    if resolved.get("revision"):
        echo["revision"] = resolved["revision"]
    if resolved.get("manifestDigest"):
        echo["manifestDigest"] = resolved["manifestDigest"]
    if delivery == d.DELIVERY_PVC:
        return _claim_plan(
            source["persistentVolumeClaim"],
            engine,
            takeover,
            echo,
            claim,
            storage_class,
            volume,
            pods_on_claim,
        )
    if delivery == d.DELIVERY_IMAGE:
        plan = WeightsPlan(delivery, fingerprint=delivery, status_model=echo)
        plan.volumes.append(
            {
                "name": d.VOLUME_NAME,
                "image": {"reference": source["image"]["reference"], "pullPolicy": "IfNotPresent"},
            }
        )
        plan.mounts.append({"name": d.VOLUME_NAME, "mountPath": d.MODEL_MOUNT_PATH, "readOnly": True})
        plan.model_args = [] if takeover else _model_args(engine, True, "", "")
        return plan
    hub = _hub(source) or {}
    secret = (hub.get("secretRef") or {}).get("name")
    if delivery == d.DELIVERY_NODE:
        if not settings.csi_driver_present:
            return Gate(
                "NodeDeliveryUnavailable",
                f"Node delivery needs the CSIDriver {d.CSI_DRIVER_MODEL}, which does not exist",
            )
        csi: Obj = {
            "driver": d.CSI_DRIVER_MODEL,
            "readOnly": True,
            "volumeAttributes": {
                d.ATTR_ARTIFACT: name,
                d.ATTR_ARTIFACT_UID: (artifact.get("metadata") or {}).get("uid", ""),
                d.ATTR_MANIFEST_DIGEST: resolved.get("manifestDigest", ""),
            },
        }
        if secret:
            csi["nodePublishSecretRef"] = {"name": secret}
        plan = WeightsPlan(delivery, fingerprint=delivery, status_model=echo)
        plan.volumes.append({"name": d.VOLUME_NAME, "csi": csi})
        plan.mounts.append({"name": d.VOLUME_NAME, "mountPath": d.MODEL_MOUNT_PATH, "readOnly": True})
        plan.model_args = [] if takeover else _model_args(engine, True, "", "")
        return plan
    # Engine delivery: the engine downloads the pinned commit itself.
    if spec.get("allowPatterns") or spec.get("ignorePatterns"):
        return Gate(
            "FilterNeedsNodeDelivery",
            "file patterns are honoured only by Node delivery; set model-artifact-delivery-mode to Node",
        )
    if resolved.get("digestSource") == d.DIGEST_SOURCE_EXPECTED:
        return Gate(
            "AnchorNeedsNodeDelivery",
            "an anchored artifact resolved without the hub is delivered only by Node delivery",
        )
    plan = WeightsPlan(delivery, status_model=echo)
    plan.fingerprint = "|".join((delivery, settings.endpoint, settings.https_proxy, settings.no_proxy))
    if takeover:
        return plan
    size = int(resolved.get("sizeBytes") or 0)
    room = size + max(size // 10, GiB)
    plan.volumes.append({"name": CACHE_VOLUME, "emptyDir": {"sizeLimit": str(room)}})
    plan.mounts.append({"name": CACHE_VOLUME, "mountPath": d.MODEL_CACHE_MOUNT_PATH})
    plan.ephemeral_limit_raise = room
    plan.model_args = _model_args(engine, False, hub.get("repository", ""), resolved.get("revision", ""))
    plan.env = [
        {"name": HF_HOME, "value": d.MODEL_CACHE_MOUNT_PATH},
        {"name": HF_ENDPOINT, "value": settings.endpoint},
    ]
    if secret:
        plan.env.append(
            {"name": HF_TOKEN, "valueFrom": {"secretKeyRef": {"name": secret, "key": d.SECRET_TOKEN_KEY}}}
        )
    if settings.https_proxy:
        plan.env_defaults.append({"name": "HTTPS_PROXY", "value": settings.https_proxy})
    if settings.no_proxy:
        plan.env_defaults.append({"name": "NO_PROXY", "value": settings.no_proxy})
    return plan


def _claim_plan(
    source: Mapping[str, Any],
    engine: str,
    takeover: bool,
    echo: Obj,
    claim: Mapping[str, Any] | None,
    storage_class: Mapping[str, Any] | None,
    volume: Mapping[str, Any] | None,
    pods_on_claim: int,
) -> WeightsPlan | Gate:
    name = source.get("claimName", "")
    if claim is None:
        return Gate("ArtifactNotResolved", f"PersistentVolumeClaim {name} does not exist")
    modes = (claim.get("spec") or {}).get("accessModes") or []
    if modes == ["ReadWriteOnce"] and pods_on_claim > 0:
        return Gate(
            "AccessModeConflict", f"PersistentVolumeClaim {name} is ReadWriteOnce and another Pod uses it"
        )
    plan = WeightsPlan(d.DELIVERY_PVC, fingerprint=d.DELIVERY_PVC, status_model=echo)
    phase = (claim.get("status") or {}).get("phase")
    if phase == "Bound":
        required = (((volume or {}).get("spec") or {}).get("nodeAffinity") or {}).get("required")
        if required:
            plan.node_affinity = {"requiredDuringSchedulingIgnoredDuringExecution": required}
    else:
        binding = (storage_class or {}).get("volumeBindingMode")
        provisioner = (storage_class or {}).get("provisioner")
        if (
            binding != "WaitForFirstConsumer"
            or not provisioner
            or provisioner == "kubernetes.io/no-provisioner"
        ):
            return Gate(
                "ClaimNotBound",
                f"PersistentVolumeClaim {name} is not bound and nothing will bind it for a Pod",
            )
    volume_source: Obj = {"persistentVolumeClaim": {"claimName": name, "readOnly": True}}
    plan.volumes.append({"name": d.VOLUME_NAME, **volume_source})
    mount: Obj = {"name": d.VOLUME_NAME, "mountPath": d.MODEL_MOUNT_PATH, "readOnly": True}
    if source.get("path"):
        mount["subPath"] = source["path"]
    plan.mounts.append(mount)
    plan.model_args = [] if takeover else _model_args(engine, True, "", "")
    return plan


@dataclass(frozen=True)
class ModelVolume:
    """An Instance's ``additionalVolumes[].model`` (§4.3, Instance): the Pod volume's source, the
    mount's ``subPath`` (a claim source's path), and a bound claim's required node selector."""

    source: Obj
    sub_path: str = ""
    node_selector: Obj | None = None
    delivery: str = ""


def plan_instance_volume(
    artifact: Mapping[str, Any] | None,
    name: str,
    *,
    csi_driver_present: bool,
    claim: Mapping[str, Any] | None = None,
    storage_class: Mapping[str, Any] | None = None,
    volume: Mapping[str, Any] | None = None,
) -> ModelVolume | Gate:
    """An Instance mounts weights only (nothing of the engine's): hub artifacts always through the
    CSI plugin whatever ``model-artifact-delivery-mode`` says (no CSIDriver is a Gate), claims as a
    read-only claim with the volume's placement, images as an image volume."""
    plan = plan_weights(
        artifact,
        name,
        engine=ENGINE_VLLM,
        takeover=True,
        settings=HubSettings(d.DELIVERY_NODE, "", csi_driver_present=csi_driver_present),
        claim=claim,
        storage_class=storage_class,
        volume=volume,
    )
    if isinstance(plan, Gate):
        return plan
    (found,) = plan.volumes
    (mount,) = plan.mounts
    selector = (plan.node_affinity or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    return ModelVolume(
        {k: v for k, v in found.items() if k != "name"}, mount.get("subPath", ""), selector, plan.delivery
    )


def _digest_entry(store: Mapping[str, Any] | None, digest: str) -> Mapping[str, Any] | None:
    for model in ((store or {}).get("status") or {}).get("models") or []:
        if model.get("digest") == digest:
            return model
    return None


def weights_ready(
    plan: WeightsPlan | Gate | None,
    pods: Sequence[Mapping[str, Any]],
    stores: Mapping[str, Mapping[str, Any]],
) -> Obj:
    """``WeightsReady`` (§5): ``stores`` maps node name to its NodeModelStore."""
    if plan is None:
        return {"type": d.WEIGHTS_READY, "status": "True", "reason": "NotApplicable", "message": ""}
    if isinstance(plan, Gate):
        return {"type": d.WEIGHTS_READY, "status": "False", "reason": plan.reason, "message": plan.message}
    digest = plan.status_model.get("manifestDigest", "")
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName") or ""
        name = (pod.get("metadata") or {}).get("name", "")
        if plan.delivery == d.DELIVERY_NODE and node:
            entry = _digest_entry(stores.get(node), digest)
            if entry and entry.get("state") == d.STATE_DOWNLOADING:
                return _false("Materializing", f"node {node} is downloading {digest} for Pod {name}")
            if entry and entry.get("state") == d.STATE_FAILED:
                retry = f"; retry at {entry['retryTime']}" if entry.get("retryTime") else ""
                return _false(
                    "MaterializationFailed",
                    f"node {node}: {entry.get('reason')}: {entry.get('message', '')}{retry}",
                )
        if plan.delivery == d.DELIVERY_ENGINE:
            if not _conditions_true(pod, "Ready"):
                return _false("Downloading", f"Pod {name} is not Ready: its engine is fetching the weights")
        elif not _conditions_true(pod, "PodReadyToStartContainers"):
            return _false("WeightsNotMounted", f"Pod {name} has not mounted its weights yet")
    reason = "Downloaded" if plan.delivery == d.DELIVERY_ENGINE else "Mounted"
    return {"type": d.WEIGHTS_READY, "status": "True", "reason": reason, "message": ""}


def _false(reason: str, message: str) -> Obj:
    return {"type": d.WEIGHTS_READY, "status": "False", "reason": reason, "message": message}


def kv_reuse_prefix(artifact: Mapping[str, Any]) -> str:
    """[R] the KV reuse identity: ``m-`` and 32 hex of the manifest digest (claim and image
    sources: of SHA-256 of the artifact UID)."""
    digest = ((artifact.get("status") or {}).get("resolved") or {}).get("manifestDigest") or ""
    if digest:
        return "m-" + digest.removeprefix("sha256:")[:32]
    uid = (artifact.get("metadata") or {}).get("uid", "")
    return "m-" + hashlib.sha256(uid.encode()).hexdigest()[:32]


__all__ = [
    "ENGINE_SGLANG",
    "ENGINE_VLLM",
    "Gate",
    "HubSettings",
    "ModelVolume",
    "WeightsPlan",
    "delivery_of",
    "is_resolved",
    "kv_reuse_prefix",
    "plan_instance_volume",
    "plan_weights",
    "weights_ready",
]
