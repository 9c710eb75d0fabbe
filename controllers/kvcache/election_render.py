"""The leader election of a managed ``KVCacheBackend`` (kv-cache spec §5.1 step 4, §6.1).

``leader.electionBackend`` defaults to ``Kubernetes``, even at one replica: every leader campaigns
for the Lease ``<backend>-leader`` in the operator namespace (the store's ``-enable_ha`` with its
``k8s`` backend) and advertises its own Pod IP, which is both its identity in the election and the
address written into the Lease.  ``None`` renders none of it and clamps the Deployment to one
replica.  Pure: objects in, objects and verdicts out.

- Both roles get a ServiceAccount of their own: the leader's may create the Lease, read and renew it
  and label its own Pod; the member's may only read the Lease (a shared account would let a member
  take the Lease from the leader it follows).
- ``memberAddressing: Lease`` hands members ``k8s://<namespace>/<lease>`` instead of the Service
  address, only while an election runs.
- Rising past one replica on a live Deployment whose template does not elect first rolls an
  elected template at one replica, then scales (:func:`leader_replicas`): the Deployment controller
  applies a replica change to the active ReplicaSet before any strategy, so one update would start
  unelected masters beside the serving one.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from api import kvcache as kv
from api.objects import Obj
from controllers.conditions import FALSE, TRUE, Verdict
from controllers.kvcache import backend_render as br

LEASE_GROUP = "coordination.k8s.io"
ELECTION_FLAG = "-enable_ha=true"


def _dict(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def elected(spec_managed: Obj) -> bool:
    """An election runs unless ``electionBackend: None`` (the schema defaults it to Kubernetes)."""
    return _dict(spec_managed.get("leader")).get("electionBackend") != kv.ELECTION_NONE


def desired_replicas(spec_managed: Obj) -> int:
    """``leader.replicas`` (1..5), one without an election whatever the spec says."""
    leader = _dict(spec_managed.get("leader"))
    replicas = leader.get("replicas")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
        replicas = 1
    return 1 if not elected(spec_managed) else replicas


def election_args(backend_name: str, namespace: str) -> list[str]:
    """The store's election flags, one group or none: ``-enable_ha`` without its connection string
    exits at start-up.  ``-rpc_address`` is the Pod IP because the store campaigns with
    ``rpc_address:rpc_port`` and writes that into the Lease for members to dial; ``-cluster_id`` keeps
    two backends' store namespaces apart (its default is one fixed string)."""
    lease = kv.leader_name(backend_name)
    return [
        ELECTION_FLAG,
        f"-ha_backend_type={kv.HA_BACKEND}",
        f"-ha_backend_connstring={namespace}/{lease}",
        f"-rpc_address=$({kv.ENV_POD_IP})",
        f"-cluster_id={lease}",
        f"-pod_name=$({kv.ENV_POD_NAME})",
        f"-pod_namespace=$({kv.ENV_POD_NAMESPACE})",
    ]


def election_env() -> list[Obj]:
    """The downward-API variables the election flags refer to."""
    return [
        {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
        for name, path in (
            (kv.ENV_POD_NAME, "metadata.name"),
            (kv.ENV_POD_NAMESPACE, "metadata.namespace"),
            (kv.ENV_POD_IP, "status.podIP"),
        )
    ]


def member_master(backend: Obj, namespace: str) -> str:
    """``MOONCAKE_MASTER``: the leader Service, or the Lease's coordinates under Lease addressing
    while an election runs (without one, ``Lease`` renders the Service address too)."""
    name = br.name_of(backend)
    spec_managed = br.managed(backend) or {}
    addressing = _dict(spec_managed.get("leader")).get("memberAddressing")
    if elected(spec_managed) and addressing == kv.MEMBER_ADDRESSING_LEASE:
        return f"{kv.LEASE_MASTER_SCHEME}{namespace}/{kv.leader_name(name)}"
    return br.client_address(name, namespace)


def _account(backend_name: str, namespace: str, name: str, role: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": br.meta(name, namespace, backend_name, br.labels(backend_name, role)),
    }


def _role(backend_name: str, namespace: str, name: str, role: str, rules: list[Obj]) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": br.meta(name, namespace, backend_name, br.labels(backend_name, role)),
        "rules": rules,
    }


def _binding(backend_name: str, namespace: str, name: str, role: str) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": br.meta(name, namespace, backend_name, br.labels(backend_name, role)),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }


def accounts(backend: Obj, namespace: str) -> list[Obj]:
    """ServiceAccount, Role and RoleBinding per role while an election runs; none without one.

    The leader may create the Lease (create cannot be narrowed to a name), read and renew only its
    own, and patch Pods (the store labels the winner ``mooncake.io/store-role=leader``); a member may
    only read the Lease."""
    spec_managed = br.managed(backend)
    if spec_managed is None or not elected(spec_managed):
        return []
    name = br.name_of(backend)
    lease = kv.leader_name(name)
    leader_rules = [
        {"apiGroups": [LEASE_GROUP], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": [LEASE_GROUP],
            "resources": ["leases"],
            "resourceNames": [lease],
            "verbs": ["get", "update"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]},
    ]
    member_rules = [
        {"apiGroups": [LEASE_GROUP], "resources": ["leases"], "resourceNames": [lease], "verbs": ["get"]}
    ]
    member = kv.member_account_name(name)
    return [
        _account(name, namespace, lease, kv.ROLE_LEADER),
        _role(name, namespace, lease, kv.ROLE_LEADER, leader_rules),
        _binding(name, namespace, lease, kv.ROLE_LEADER),
        _account(name, namespace, member, kv.ROLE_MEMBER),
        _role(name, namespace, member, kv.ROLE_MEMBER, member_rules),
        _binding(name, namespace, member, kv.ROLE_MEMBER),
    ]


def template_elects(deployment: Obj | None) -> bool:
    """Whether a (live) leader Deployment's Pod template campaigns."""
    spec = _dict(_dict(_dict(_dict(deployment).get("spec")).get("template")).get("spec"))
    return any(ELECTION_FLAG in _list(_dict(c).get("args")) for c in _list(spec.get("containers")))


def rolled_out(deployment: Obj | None) -> bool:
    """The Deployment controller has observed the latest spec and every replica runs its template
    (standbys are never ready, so readiness is not asked)."""
    obj = _dict(deployment)
    generation = _dict(obj.get("metadata")).get("generation")
    status = _dict(obj.get("status"))
    observed = status.get("observedGeneration")
    if not isinstance(observed, int) or (isinstance(generation, int) and observed < generation):
        return False
    wanted = _dict(obj.get("spec")).get("replicas", 1)
    updated = status.get("updatedReplicas") or 0
    total = status.get("replicas") or 0
    return updated == wanted and total == updated


def leader_replicas(backend: Obj, live: Obj | None) -> tuple[int, str | None]:
    """The replica count this pass renders, and why it holds below the spec (``None`` when not).

    Raising past one on a live Deployment that is not yet elected-and-rolled-out renders one
    replica of the elected template first; the next passes scale once it has rolled out."""
    spec_managed = br.managed(backend) or {}
    desired = desired_replicas(spec_managed)
    if desired == 1 or live is None:
        return desired, None
    live_replicas = _dict(live.get("spec")).get("replicas", 1)
    if isinstance(live_replicas, int) and live_replicas > 1 and template_elects(live):
        return desired, None  # already scaled past one under an elected template
    if not template_elects(live):
        return 1, (
            f"the live leader runs a template without election: it rolls to an elected one at 1 replica "
            f"before scaling to {desired}"
        )
    if not rolled_out(live):
        return 1, f"the elected leader template is rolling out at 1 replica; it scales to {desired} once done"
    return desired, None


def _epoch(stamp: Any) -> float | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _holder_pod(holder: str, pods: list[Obj]) -> str:
    host = holder.rsplit(":", 1)[0].strip("[]") if ":" in holder else holder
    for pod in pods:
        name = str(_dict(pod.get("metadata")).get("name") or "")
        ip = str(_dict(pod.get("status")).get("podIP") or "")
        if holder == name or (ip and host == ip):
            return name
    return ""


def election_observed(lease: Obj | None, leader_pods: list[Obj], now: float) -> Verdict:
    """``ElectionObserved``: the Lease has a holder that still renews it.  ``now`` is epoch seconds."""
    c = kv.COND_ELECTION_OBSERVED
    if lease is None:
        return Verdict(
            c,
            FALSE,
            kv.REASON_LEASE_NOT_FOUND,
            "no leader has created the election Lease yet; the leader's image must carry the store's "
            "Kubernetes Lease backend",
        )
    spec = _dict(lease.get("spec"))
    holder = str(spec.get("holderIdentity") or "")
    if not holder:
        return Verdict(
            c, FALSE, kv.REASON_NO_HOLDER, "the election Lease has no holder: no replica has won it"
        )
    renewed = _epoch(spec.get("renewTime")) or _epoch(spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds")
    if renewed is not None and isinstance(duration, int) and renewed + duration < now:
        return Verdict(
            c,
            FALSE,
            kv.REASON_HOLDER_EXPIRED,
            f"{holder} stopped renewing the election Lease (last renewed {spec.get('renewTime')}, "
            f"{duration}s lease)",
        )
    pod = _holder_pod(holder, leader_pods)
    return Verdict(
        c, TRUE, kv.REASON_ELECTED, f"{holder} holds the election Lease" + (f" (Pod {pod})" if pod else "")
    )
