"""What a managed ``KVCacheBackend`` runs (kv-cache spec §5.1 steps 2, 3, 5, 6): the leader
Deployment and Service, and one member DaemonSet per group.  Pure: the backend object, the
operator namespace and the Setting's image in; Kubernetes objects out.

Every object carries the ownership annotation ``kvcache.gpustack.ai/backend: <name>``, the key
deletion finds and judges by.  Member DaemonSets are ``OnDelete`` and carry a fingerprint of the
Pod template *without* its nodeSelector, so widening a group restarts nothing; the controller
replaces member Pods whose fingerprint differs.
"""

from __future__ import annotations

from typing import Any

from api import kvcache as kv
from api.objects import Obj

FABRIC = ("RDMA", "EFA")
RDMA_SHARED = "device.gpustack.ai/rdma.shared"
RDMA_EXCLUSIVE = "device.gpustack.ai/rdma"
EFA = "vpc.amazonaws.com/efa"
MEMBER_COMMAND = "mc_store_rest_server"
LEADER_COMMAND = "mooncake_master"


def _dict(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def managed(backend: Obj) -> Obj | None:
    found = _dict(_dict(backend.get("spec")).get("connection")).get("managed")
    return found if isinstance(found, dict) else None


def name_of(obj: Obj) -> str:
    return str(_dict(obj.get("metadata")).get("name") or "")


def image_of(backend: Obj, setting_image: str, group: Obj | None = None) -> str:
    """Group image > ``spec.image`` > the Setting."""
    for candidate in (_dict(group).get("image"), _dict(backend.get("spec")).get("image"), setting_image):
        if isinstance(candidate, str) and candidate.strip():
            return candidate.strip()
    return ""


def pull_policy(backend: Obj, image: str) -> str:
    """``spec.imagePullPolicy``, else the tag rule: ``Always`` for ``:latest`` or no tag."""
    declared = _dict(backend.get("spec")).get("imagePullPolicy")
    if declared in ("Always", "IfNotPresent", "Never"):
        return declared
    reference = image.split("@", 1)[0]
    last = reference.rsplit("/", 1)[-1]
    if "@" in image:
        return "IfNotPresent"
    if ":" not in last or last.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def labels(backend: str, role: str, group: int | None = None) -> dict[str, str]:
    out = {kv.LABEL_BACKEND: backend, kv.LABEL_ROLE: role, "app.kubernetes.io/part-of": "gpustack-operator"}
    if group is not None:
        out[kv.LABEL_GROUP] = str(group)
    return out


def meta(name: str, namespace: str, backend: str, object_labels: dict[str, str]) -> Obj:
    return {
        "name": name,
        "namespace": namespace,
        "labels": dict(object_labels),
        "annotations": {kv.ANNOTATION_OWNED_BY_BACKEND: backend},
    }


def owned_by(obj: Obj | None, backend: str) -> bool:
    """Deletion and updates touch only objects carrying this backend's ownership annotation."""
    return (
        _dict(_dict(_dict(obj).get("metadata")).get("annotations")).get(kv.ANNOTATION_OWNED_BY_BACKEND)
        == backend
    )


def client_address(backend: str, namespace: str) -> str:
    return f"{kv.leader_name(backend)}.{namespace}.svc:{kv.CLIENT_PORT}"


def admin_address(backend: str, namespace: str) -> str:
    return f"{kv.leader_name(backend)}.{namespace}.svc:{kv.ADMIN_PORT}"


def has_tier(spec_managed: Obj) -> bool:
    return any(_list(_dict(g).get("localDisks")) for g in _list(spec_managed.get("members")))


def leader_args(spec_managed: Obj) -> list[str]:
    """The master's argv after the command: derived flags, then the user's (which may override the
    lease TTL and metrics host, and nothing the operator relies on: rule B6)."""
    leader = _dict(spec_managed.get("leader"))
    strategy = kv.ALLOCATION_STRATEGY.get(
        str(leader.get("allocationStrategy") or "FreeRatioFirst"), "free_ratio_first"
    )
    args = [
        f"-rpc_port={kv.CLIENT_PORT}",
        f"-metrics_port={kv.ADMIN_PORT}",
        f"-default_kv_lease_ttl={kv.DEFAULT_KV_LEASE_TTL}",
        f"-allocation_strategy={strategy}",
    ]
    if leader.get("multiTenancy") is not False:
        args += [
            "-enable_multi_tenants=true",
            "-tenant_quota_connector_type=file",
            f"-tenant_quota_connector_uri={kv.POLICY_FILE}",
        ]
    if has_tier(spec_managed):
        args += ["-enable_offload=true", "-offload_on_evict=true"]
    return args + [a for a in _list(leader.get("extraArgs")) if isinstance(a, str)]


def _env(entries: Any) -> list[Obj]:
    return [dict(e) for e in _list(entries) if isinstance(e, dict) and isinstance(e.get("name"), str)]


def _seed_script() -> str:
    return (
        f"if [ -s {kv.POLICY_SEED_DIR}/{kv.POLICY_SEED_KEY} ]; then "
        f"cp {kv.POLICY_SEED_DIR}/{kv.POLICY_SEED_KEY} {kv.POLICY_FILE}; "
        f"else printf 'version: 1\\ntenants: []\\n' > {kv.POLICY_FILE}; fi"
    )


def leader_service(backend: Obj, namespace: str) -> Obj:
    name = name_of(backend)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(kv.leader_name(name), namespace, name, labels(name, kv.ROLE_LEADER)),
        "spec": {
            "type": "ClusterIP",
            "selector": labels(name, kv.ROLE_LEADER),
            "ports": [
                {"name": "client", "port": kv.CLIENT_PORT, "targetPort": kv.CLIENT_PORT, "protocol": "TCP"},
                {"name": "admin", "port": kv.ADMIN_PORT, "targetPort": kv.ADMIN_PORT, "protocol": "TCP"},
            ],
        },
    }


def leader_deployment(backend: Obj, namespace: str, setting_image: str) -> Obj:
    name = name_of(backend)
    spec_managed = managed(backend) or {}
    leader = _dict(spec_managed.get("leader"))
    replicas = leader.get("replicas") if isinstance(leader.get("replicas"), int) else 1
    if leader.get("electionBackend") == "None":
        replicas = 1  # without election only one master may run
    image = image_of(backend, setting_image)
    policy = pull_policy(backend, image)
    pod_labels = labels(name, kv.ROLE_LEADER)
    strategy: Obj = (
        {"type": "Recreate"}
        if replicas == 1
        else {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": replicas}}
    )
    probe_port = kv.ADMIN_PORT
    pod_spec: Obj = {
        "initContainers": [
            {
                "name": "quota-policy",
                "image": image,
                "imagePullPolicy": policy,
                "command": ["sh", "-c", _seed_script()],
                "volumeMounts": [
                    {"name": "quota-policy", "mountPath": kv.POLICY_DIR},
                    {"name": "quota-policy-seed", "mountPath": kv.POLICY_SEED_DIR, "readOnly": True},
                ],
            }
        ],
        "containers": [
            {
                "name": "leader",
                "image": image,
                "imagePullPolicy": policy,
                "command": [LEADER_COMMAND],
                "args": leader_args(spec_managed),
                "env": _env(leader.get("extraEnv")),
                "ports": [
                    {"name": "client", "containerPort": kv.CLIENT_PORT, "protocol": "TCP"},
                    {"name": "admin", "containerPort": kv.ADMIN_PORT, "protocol": "TCP"},
                ],
                # Readiness: the segment listing answers 503 until the service is active.  Liveness:
                # /health, never gated, so a starting master is not killed.
                "readinessProbe": {
                    "httpGet": {"path": "/get_all_segments", "port": probe_port},
                    "periodSeconds": 5,
                },
                "livenessProbe": {
                    "httpGet": {"path": "/health", "port": probe_port},
                    "periodSeconds": 10,
                    "failureThreshold": 6,
                },
                "volumeMounts": [{"name": "quota-policy", "mountPath": kv.POLICY_DIR}],
            }
        ],
        "volumes": [
            {"name": "quota-policy", "emptyDir": {}},
            {
                "name": "quota-policy-seed",
                "configMap": {"name": kv.policy_seed_name(name), "optional": True},
            },
        ],
    }
    secrets = pull_secrets(backend)
    if secrets:
        pod_spec["imagePullSecrets"] = secrets
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(kv.leader_name(name), namespace, name, pod_labels),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": pod_labels},
            "strategy": strategy,
            "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
        },
    }


def pull_secrets(backend: Obj) -> list[Obj]:
    found = _dict(backend.get("spec")).get("imagePullSecrets")
    return [dict(s) for s in _list(found) if isinstance(s, dict) and s.get("name")]


def effective_protocol(backend: Obj, group: Obj) -> str:
    """The group's transport (API spelling): its own, else the backend's, else Auto."""
    own = _dict(group.get("transport")).get("protocol")
    default = _dict(_dict(backend.get("spec")).get("transport")).get("protocol")
    return str(own or default or "Auto")
