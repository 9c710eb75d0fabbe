"""The leader Deployment of a managed ``KVCacheBackend`` (kv-cache spec §5.1 steps 2–4).

The master's argv: derived flags (RPC and admin ports, the ``5m`` lease TTL, allocation strategy,
the tenant ledger and its policy file, the offload pair iff a group declares a tier, the election
group unless ``electionBackend: None``), then the user's ``extraArgs``.  Probes: readiness on the
gated segment listing, liveness on the ungated ``/health``.  Strategy: ``Recreate`` at one replica,
``RollingUpdate{maxSurge: 1, maxUnavailable: replicas}`` above (``replicas-1`` stalls: exactly one
replica is ever available).  The quota policy file lives in an ``emptyDir`` the master rewrites,
seeded by an init container from the pool controller's ConfigMap (``optional``) or the empty
document.  Pure.
"""

from __future__ import annotations

from typing import Any

from api import kvcache as kv
from api.objects import Obj
from controllers.kvcache import election_render as er
from controllers.kvcache.backend_render import (
    LEADER_COMMAND,
    has_tier,
    image_of,
    labels,
    managed,
    meta,
    name_of,
    pull_policy,
    pull_secrets,
)


def _dict(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _env(entries: Any) -> list[Obj]:
    return [dict(e) for e in _list(entries) if isinstance(e, dict) and isinstance(e.get("name"), str)]


def _seed_script() -> str:
    return (
        f"if [ -s {kv.POLICY_SEED_DIR}/{kv.POLICY_SEED_KEY} ]; then "
        f"cp {kv.POLICY_SEED_DIR}/{kv.POLICY_SEED_KEY} {kv.POLICY_FILE}; "
        f"else printf 'version: 1\\ntenants: []\\n' > {kv.POLICY_FILE}; fi"
    )


def leader_args(backend: Obj, namespace: str) -> list[str]:
    """The master's argv after the command: derived flags, then the user's (which may override the
    lease TTL and metrics host, and nothing the operator relies on: rule B6)."""
    spec_managed = managed(backend) or {}
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
    if er.elected(spec_managed):
        args += er.election_args(name_of(backend), namespace)
    return args + [a for a in _list(leader.get("extraArgs")) if isinstance(a, str)]


def leader_deployment(backend: Obj, namespace: str, setting_image: str, replicas: int | None = None) -> Obj:
    """The leader Deployment at ``replicas`` (default: the spec's, one without an election; the
    reconciler passes :func:`election_render.leader_replicas`'s count while a 1→N step holds)."""
    name = name_of(backend)
    spec_managed = managed(backend) or {}
    leader = _dict(spec_managed.get("leader"))
    if replicas is None:
        replicas = er.desired_replicas(spec_managed)
    election = er.elected(spec_managed)
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
                "args": leader_args(backend, namespace),
                "env": (er.election_env() if election else []) + _env(leader.get("extraEnv")),
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
    if election:
        pod_spec["serviceAccountName"] = kv.leader_name(name)
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
