"""One member DaemonSet per group of a managed backend (kv-cache spec §5.1 steps 4–7).

A member is ``mc_store_rest_server``: its whole configuration is ``MOONCAKE_*`` variables (note
``META_DATA``; ``MOONCAKE_DEVICE`` never set), its ``extraArgs`` become ``-D key=value``, and it
serves HTTP on ``8080 + index``, which readiness probes (the entrypoint mounts the segment before it
serves).  A DRAM group requests ``capacityPerMember + localBufferSize`` of memory and blanks every
vendor's visibility variable; a VRAM group requests the buffer only and no accelerator.

Fabrics follow the group's effective protocol: ``RDMA``/``EFA`` take the host network, add
``IPC_LOCK`` and ``SYS_RESOURCE`` (never ``privileged``; a declared ``securityContext`` is merged
over them with ``capabilities.add`` unioned) and request the fabric's device — RDMA one interface
as ``device.gpustack.ai/rdma.shared``, N as N exclusive ``device.gpustack.ai/rdma``, EFA N
``vpc.amazonaws.com/efa``; ``/dev/infiniband`` is never mounted (the plugin injects what it grants).
Under an election members run as the member ServiceAccount, and follow the Lease under Lease
addressing (``election_render``).  A group's disk tier is ``tier_render``.

DaemonSets are ``OnDelete`` and carry a fingerprint of the Pod template *without* its nodeSelector,
so widening a group restarts nothing; the controller replaces member Pods whose fingerprint differs.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from api import kvcache as kv
from api.objects import Obj
from controllers.kvcache import backend_render as br
from controllers.kvcache import election_render as er
from controllers.kvcache import tier_render as tr
from controllers.kvcache.figures import to_bytes, to_quantity

FABRIC_CAPABILITIES = ("IPC_LOCK", "SYS_RESOURCE")


def _dict(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def fingerprint(template: Obj) -> str:
    """SHA-256 of the Pod template without its nodeSelector (and without this annotation)."""
    body = copy.deepcopy(template)
    _dict(body.get("spec")).pop("nodeSelector", None)
    _dict(_dict(body.get("metadata")).get("annotations")).pop(kv.ANNOTATION_POD_SPEC_HASH, None)
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _member_env(backend: Obj, namespace: str, group: Obj) -> list[Obj]:
    buffer = to_bytes(group.get("localBufferSize") or kv.DEFAULT_LOCAL_BUFFER_SIZE) or 0
    env: list[Obj] = [
        {"name": kv.ENV_LOCAL_HOSTNAME, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": kv.ENV_METADATA_SERVER, "value": kv.METADATA_SERVER},
        {"name": kv.ENV_MASTER, "value": er.member_master(backend, namespace)},
        {"name": kv.ENV_PROTOCOL, "value": kv.store_protocol(br.effective_protocol(backend, group))},
        {"name": kv.ENV_GLOBAL_SEGMENT_SIZE, "value": str(to_bytes(group.get("capacityPerMember")) or 0)},
        {"name": kv.ENV_LOCAL_BUFFER_SIZE, "value": str(buffer)},
        {"name": kv.ENV_TE_METRIC, "value": "1"},
    ]
    if group.get("medium") != "VRAM":
        env += [{"name": variable, "value": "void"} for variable in kv.VISIBILITY_VARIABLES]
    return env + [dict(e) for e in _list(group.get("extraEnv")) if isinstance(e, dict)]


def _resources(group: Obj, protocol: str) -> Obj:
    capacity = to_bytes(group.get("capacityPerMember")) or 0
    buffer = to_bytes(group.get("localBufferSize") or kv.DEFAULT_LOCAL_BUFFER_SIZE) or 0
    memory = buffer if group.get("medium") == "VRAM" else capacity + buffer
    resources: Obj = {"requests": {"memory": to_quantity(memory)}}
    count = group.get("fabricInterfaceCount") if isinstance(group.get("fabricInterfaceCount"), int) else 1
    device: dict[str, str] = {}
    if protocol == "RDMA":
        device = {br.RDMA_SHARED: "1"} if count == 1 else {br.RDMA_EXCLUSIVE: str(count)}
    elif protocol == "EFA":
        device = {br.EFA: str(count)}
    if device:
        resources["requests"].update(device)
        resources["limits"] = dict(device)
    return resources


def _security_context(group: Obj, protocol: str) -> Obj | None:
    """The fabric's grant merged with the group's own, ``capabilities.add`` unioned."""
    merged: Obj = {"capabilities": {"add": list(FABRIC_CAPABILITIES)}} if protocol in br.FABRIC else {}
    declared = _dict(group.get("securityContext"))
    for key, value in declared.items():
        if key == "capabilities" and isinstance(value, dict):
            caps = dict(_dict(merged.get("capabilities")))
            for part, items in value.items():
                if part == "add":
                    caps["add"] = list(dict.fromkeys([*_list(caps.get("add")), *_list(items)]))
                else:
                    caps[part] = items
            merged["capabilities"] = caps
        else:
            merged[key] = value
    return merged or None


def _host_paths(group: Obj) -> tuple[list[Obj], list[Obj]]:
    volumes, mounts = [], []
    for index, entry in enumerate(_list(group.get("hostPaths"))):
        entry = _dict(entry)
        host: Obj = {"path": entry.get("path")}
        if entry.get("type"):
            host["type"] = entry["type"]
        volumes.append({"name": f"host-{index}", "hostPath": host})
        mounts.append(
            {
                "name": f"host-{index}",
                "mountPath": entry.get("mountPath"),
                "readOnly": bool(entry.get("readOnly")),
            }
        )
    return volumes, mounts


def member_template(backend: Obj, namespace: str, setting_image: str, index: int, group: Obj) -> Obj:
    name = br.name_of(backend)
    image = br.image_of(backend, setting_image, group)
    protocol = br.effective_protocol(backend, group)
    port = kv.MEMBER_HTTP_PORT_BASE + index
    args = ["--port", str(port)]
    for arg in _list(group.get("extraArgs")):
        if isinstance(arg, str) and "=" in arg:
            args += ["-D", arg.lstrip("-")]
    volumes, mounts = _host_paths(group)
    container: Obj = {
        "name": "member",
        "image": image,
        "imagePullPolicy": br.pull_policy(backend, image),
        "command": [br.MEMBER_COMMAND],
        "args": args,
        "env": _member_env(backend, namespace, group),
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 5},
        "resources": _resources(group, protocol),
    }
    if mounts:
        container["volumeMounts"] = mounts
    security = _security_context(group, protocol)
    if security:
        container["securityContext"] = security
    spec: Obj = {"nodeSelector": dict(_dict(group.get("nodeSelector"))), "containers": [container]}
    if volumes:
        spec["volumes"] = volumes
    if protocol in br.FABRIC:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    if group.get("runtimeClassName"):
        spec["runtimeClassName"] = group["runtimeClassName"]
    if er.elected(br.managed(backend) or {}):
        spec["serviceAccountName"] = kv.member_account_name(name)
    tr.apply_tier(backend, index, group, image, br.pull_policy(backend, image), spec)
    secrets = br.pull_secrets(backend)
    if secrets:
        spec["imagePullSecrets"] = secrets
    template: Obj = {
        "metadata": {"labels": br.labels(name, kv.ROLE_MEMBER, index), "annotations": {}},
        "spec": spec,
    }
    template["metadata"]["annotations"][kv.ANNOTATION_POD_SPEC_HASH] = fingerprint(template)
    return template


def member_daemonsets(backend: Obj, namespace: str, setting_image: str) -> list[Obj]:
    name = br.name_of(backend)
    out = []
    for index, group in enumerate(_list((br.managed(backend) or {}).get("members"))):
        template = member_template(backend, namespace, setting_image, index, _dict(group))
        selector = br.labels(name, kv.ROLE_MEMBER, index)
        out.append(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": br.meta(kv.member_name(name, index), namespace, name, selector),
                "spec": {
                    "selector": {"matchLabels": selector},
                    "updateStrategy": {"type": "OnDelete"},
                    "template": template,
                },
            }
        )
    return out


def stale_members(daemonsets: list[Obj], pods: list[Obj]) -> list[Obj]:
    """Member Pods whose fingerprint differs from their group's template (``OnDelete`` replacement)."""
    wanted = {
        _dict(_dict(ds["spec"]["template"]).get("metadata")).get("labels", {}).get(kv.LABEL_GROUP): ds[
            "spec"
        ]["template"]["metadata"]["annotations"][kv.ANNOTATION_POD_SPEC_HASH]
        for ds in daemonsets
    }
    stale = []
    for pod in pods:
        meta = _dict(pod.get("metadata"))
        group = _dict(meta.get("labels")).get(kv.LABEL_GROUP)
        if meta.get("deletionTimestamp") or group not in wanted:
            continue
        if _dict(meta.get("annotations")).get(kv.ANNOTATION_POD_SPEC_HASH) != wanted[group]:
            stale.append(pod)
    return stale
