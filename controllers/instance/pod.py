"""The Instance's Pod, purely (instances spec A.7, A.8).

:func:`render_pod` turns an Instance and the facts read around it (:class:`PodFacts`) into the Pod
the controller creates.  The Pod is named after the Instance, queued on its InstanceType's entrance
(``kueue.x-k8s.io/queue-name``), owned by it (controller reference), and shares IPC and the process
namespace so the ``sshd`` sidecar can enter ``main`` per login.  It never sets ``spec.nodeName``:
a pinned Instance selects its node by the node's own hostname label, so the scheduler and Kueue
still decide.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from api import API_VERSION, constants
from api.manufacturers import Manufacturer
from api.objects import Obj
from controllers.instance.resources import accelerator_request, general_limits, general_requests

PART_OF_VALUE = "instances"  # LABEL_OWNED_BY_INSTANCES on the Pod and the Service
WORKSPACE = "workspace"
SSHD_KEYS_VOLUME = "sshd-authorized-keys"
SSHD_KEYS_MODE = 0o600
SSHD_CAPABILITIES = ("SYS_ADMIN", "SYS_PTRACE")
_PORT_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # IANA_SVC_NAME


@dataclass(frozen=True, slots=True)
class PodFacts:
    """What the Pod depends on besides the Instance itself, read by the reconciler."""

    queue_name: str  # the InstanceType's entrance (its LocalQueue)
    maker: Manufacturer | None = None  # the type's manufacturer; None for a general type
    runtime_class: str = ""  # the manufacturer's RuntimeClass, only when it exists
    hostname: str = ""  # the pinned Node's kubernetes.io/hostname label
    ssh_image: str = ""  # instance-ssh-server-image, rewritten by the registry Settings
    overcommit: bool = True  # instance-general-resources-overcommit
    node_affinity: Mapping[str, Any] | None = None  # required NodeSelector of the bound claims
    workspace_claim: str = ""  # the workspace PersistentVolumeClaim (volume.persistent)
    # additionalVolumes index -> (volume source, subPath) of each model entry (model-delivery §4.3)
    model_volumes: Mapping[int, tuple[Obj, str]] = field(default_factory=dict)


def owner_reference(instance: Mapping[str, Any]) -> Obj:
    meta = instance.get("metadata") or {}
    return {
        "apiVersion": API_VERSION,
        "kind": "Instance",
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod_labels(instance: Mapping[str, Any], queue_name: str) -> dict[str, str]:
    """The labels the controller sets; the Service selects exactly these."""
    meta = instance.get("metadata") or {}
    return {
        constants.KUEUE_QUEUE_NAME: queue_name,
        constants.LABEL_PART_OF: str(meta.get("uid") or ""),
        constants.LABEL_OWNED_BY_INSTANCES: PART_OF_VALUE,
    }


def merge_node_selectors(selectors: Iterable[Mapping[str, Any] | None]) -> Obj | None:
    """Several required NodeSelectors ANDed into one: terms are ORed within a selector, so the
    result's terms are the cross product, each joining one term of every selector."""
    terms: list[Obj] | None = None
    for selector in selectors:
        own = [dict(t) for t in (selector or {}).get("nodeSelectorTerms") or []]
        if not own:
            continue
        if terms is None:
            terms = own
            continue
        terms = [
            {
                key: [*(left.get(key) or []), *(right.get(key) or [])]
                for key in ("matchExpressions", "matchFields")
                if left.get(key) or right.get(key)
            }
            for left in terms
            for right in own
        ]
    return {"nodeSelectorTerms": terms} if terms else None


def _additional_source(entry: Mapping[str, Any]) -> Obj:
    if entry.get("persistent"):
        source: Obj = {"claimName": entry["persistent"].get("name")}
        if entry.get("readOnly"):
            source["readOnly"] = True
        return {"persistentVolumeClaim": source}
    if entry.get("configMap"):
        return {"configMap": {"name": entry["configMap"].get("name")}}
    if entry.get("secret"):
        return {"secret": {"secretName": entry["secret"].get("name")}}
    if entry.get("hostPath"):
        return {"hostPath": dict(entry["hostPath"])}
    raise ValueError(f"additional volume at {entry.get('mountPath')!r} has no source this renderer serves")


def _volumes(spec: Mapping[str, Any], facts: PodFacts) -> tuple[list[Obj], list[Obj]]:
    """Pod volumes, and ``main``'s mounts of them."""
    volume = spec.get("volume") or {}
    workspace: Obj
    if facts.workspace_claim:
        workspace = {"name": WORKSPACE, "persistentVolumeClaim": {"claimName": facts.workspace_claim}}
    else:
        capacity = ((volume.get("ephemeral") or {}).get("capacity")) or None
        workspace = {"name": WORKSPACE, "emptyDir": {"sizeLimit": str(capacity)} if capacity else {}}
    volumes = [workspace]
    mounts = [{"name": WORKSPACE, "mountPath": spec.get("volumeMount") or "/workspace"}]
    for index, entry in enumerate(spec.get("additionalVolumes") or []):
        name = f"additional-{index}"
        mount: Obj = {"name": name, "mountPath": entry.get("mountPath")}
        if entry.get("model") and index in facts.model_volumes:
            # Weights: always read-only; the only subPath is a claim source's own path.
            source, sub_path = facts.model_volumes[index]
            volumes.append({"name": name, **source})
            mount["readOnly"] = True
            if sub_path:
                mount["subPath"] = sub_path
            mounts.append(mount)
            continue
        volumes.append({"name": name, **_additional_source(entry)})
        if entry.get("readOnly"):
            mount["readOnly"] = True
        if entry.get("subPath"):
            mount["subPath"] = entry["subPath"]
        mounts.append(mount)
    return volumes, mounts


def _ports(spec: Mapping[str, Any]) -> list[Obj]:
    ports = []
    for port in spec.get("ports") or []:
        entry: Obj = {"containerPort": port.get("port"), "protocol": port.get("protocol") or "TCP"}
        name = port.get("name") or ""
        if name and len(name) <= 15 and _PORT_NAME.match(name):
            entry["name"] = name
        ports.append(entry)
    return ports


def _main(spec: Mapping[str, Any], facts: PodFacts, mounts: Sequence[Obj]) -> Obj:
    resources = spec.get("resources") or {}
    accel = accelerator_request(resources, facts.maker)
    limits = general_limits(resources)
    requests = general_requests(
        limits, accelerated=facts.maker is not None, cards=accel.cards, overcommit=facts.overcommit
    )
    security: Obj = {"runAsUser": 0}
    if spec.get("privileged"):
        security["privileged"] = True
    container: Obj = {
        "name": constants.INSTANCE_CONTAINER_MAIN,
        "image": spec.get("image"),
        "imagePullPolicy": spec.get("imagePullPolicy") or "IfNotPresent",
    }
    if spec.get("command"):
        container["command"] = list(spec["command"])
    if spec.get("env"):
        container["env"] = [{"name": e.get("name"), "value": e.get("value", "")} for e in spec["env"]]
    if spec.get("ports"):
        container["ports"] = _ports(spec)
    container["securityContext"] = security
    container["volumeMounts"] = list(mounts)
    container["resources"] = {
        "limits": {**limits, **accel.keys},
        "requests": {**requests, **accel.keys},
    }
    return container


def _sshd(spec: Mapping[str, Any], facts: PodFacts) -> Obj:
    accel = accelerator_request(spec.get("resources") or {}, facts.maker)
    container: Obj = {
        "name": constants.INSTANCE_CONTAINER_SSHD,
        "image": facts.ssh_image,
        "stdin": True,
        "tty": True,
        "env": [{"name": "VOLUME_MOUNT_PATH", "value": spec.get("volumeMount") or "/workspace"}],
        "ports": [{"name": "ssh", "containerPort": constants.SSH_PORT, "protocol": "TCP"}],
        "securityContext": {"runAsUser": 0, "capabilities": {"add": list(SSHD_CAPABILITIES)}},
        "volumeMounts": [
            {"name": SSHD_KEYS_VOLUME, "mountPath": constants.SSH_AUTHORIZED_KEYS_MOUNT, "readOnly": True}
        ],
    }
    if facts.maker is not None and accel.cards > 0:
        visibility = {facts.maker.visibility_key: str(accel.cards)}
        container["resources"] = {"limits": dict(visibility), "requests": dict(visibility)}
    return container


def render_pod(instance: Mapping[str, Any], facts: PodFacts) -> Obj:
    """The Pod of ``instance`` (already admitted and sized by the Instance webhook)."""
    meta = instance.get("metadata") or {}
    spec = instance.get("spec") or {}
    volumes, mounts = _volumes(spec, facts)
    containers = [_main(spec, facts, mounts)]
    ssh_key = (spec.get("sshPublicKey") or {}).get("name")
    if ssh_key:
        volumes.append(
            {
                "name": SSHD_KEYS_VOLUME,
                "secret": {
                    "secretName": ssh_key,
                    "defaultMode": SSHD_KEYS_MODE,
                    "items": [
                        {
                            "key": constants.SSH_AUTHORIZED_KEYS_FILE,
                            "path": constants.SSH_AUTHORIZED_KEYS_FILE,
                        }
                    ],
                },
            }
        )
        containers.append(_sshd(spec, facts))
    pod_spec: Obj = {
        "hostIPC": True,
        "shareProcessNamespace": True,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": containers,
        "volumes": volumes,
    }
    pull_secret = (spec.get("imagePullSecret") or {}).get("name")
    if pull_secret:
        pod_spec["imagePullSecrets"] = [{"name": pull_secret}]
    if facts.runtime_class:
        pod_spec["runtimeClassName"] = facts.runtime_class
    if facts.hostname:
        pod_spec["nodeSelector"] = {constants.LABEL_HOSTNAME: facts.hostname}
    if facts.node_affinity:
        pod_spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": dict(facts.node_affinity)}
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "labels": pod_labels(instance, facts.queue_name),
            "ownerReferences": [owner_reference(instance)],
        },
        "spec": pod_spec,
    }
