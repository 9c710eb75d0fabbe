"""``RolloutComplete`` of a managed backend (kv-cache spec §6.1): every leader replica and every
member runs the current template.  Pure.

Readiness is not asked: an elected leader's standbys are never ready (that keeps them out of the
Service), so ``3 desired / 1 ready`` is a finished rollout.  The leader is judged by its
Deployment's own status (observed generation, updated and total replicas), a member group by its
DaemonSet's (``updatedNumberScheduled`` against ``desiredNumberScheduled``) and by the operator's
fingerprint on each member Pod (``OnDelete``: the operator replaces stale Pods itself).  A 1→N step
the election holds reads ``ReplicasPending`` with its reason.  The condition never moves the phase.
"""

from __future__ import annotations

from typing import Any

from api import kvcache as kv
from api.objects import Obj
from controllers.conditions import FALSE, TRUE, Verdict
from controllers.kvcache.members_render import stale_members


def _dict(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _name(obj: Obj) -> str:
    return str(_dict(obj.get("metadata")).get("name") or "")


def _observed(obj: Obj) -> bool:
    generation = _dict(obj.get("metadata")).get("generation")
    observed = _dict(obj.get("status")).get("observedGeneration")
    return isinstance(observed, int) and not (isinstance(generation, int) and observed < generation)


def _leader(wanted: Obj, live: Obj | None) -> list[str]:
    replicas = _dict(wanted.get("spec")).get("replicas", 1)
    if live is None:
        return [f"the leader Deployment {_name(wanted)} is not created yet"]
    if not _observed(live):
        return ["the Deployment controller has not observed the leader's latest spec"]
    if _dict(live.get("spec")).get("replicas") != replicas:
        return [f"the leader Deployment does not read {replicas} replicas yet"]
    status = _dict(live.get("status"))
    updated, total = status.get("updatedReplicas") or 0, status.get("replicas") or 0
    if updated < replicas or total > updated:
        older = f", {total - updated} on an older one" if total > updated else ""
        return [f"{updated} of {replicas} leader replicas run the current template{older}"]
    return []


def _members(wanted: list[Obj], live: dict[str, Obj], pods: list[Obj]) -> list[str]:
    pending = []
    for ds in wanted:
        name = _name(ds)
        current = live.get(name)
        if current is None:
            pending.append(f"the member DaemonSet {name} is not created yet")
            continue
        if not _observed(current):
            pending.append(f"the DaemonSet controller has not observed {name}'s latest spec")
            continue
        status = _dict(current.get("status"))
        desired, updated = (
            status.get("desiredNumberScheduled") or 0,
            status.get("updatedNumberScheduled") or 0,
        )
        if updated < desired:
            pending.append(f"{name}: {updated} of {desired} members run the current template")
    stale: dict[str, int] = {}
    for pod in stale_members(wanted, pods):
        group = _dict(_dict(pod.get("metadata")).get("labels")).get(kv.LABEL_GROUP, "?")
        stale[group] = stale.get(group, 0) + 1
    for group, count in sorted(stale.items()):
        pending.append(f"group {group}: {count} member Pod(s) on an older template, being replaced")
    return pending


def rollout_complete(
    leader_wanted: Obj,
    leader_live: Obj | None,
    members_wanted: list[Obj],
    members_live: list[Obj],
    pods: list[Obj],
    hold: str | None = None,
) -> Verdict:
    """The verdict from what this pass rendered (``*_wanted``) and what the cluster reports."""
    pending = [hold] if hold else []
    pending += _leader(leader_wanted, leader_live)
    pending += _members(members_wanted, {_name(d): d for d in members_live}, pods)
    if pending:
        return Verdict(kv.COND_ROLLOUT_COMPLETE, FALSE, kv.REASON_REPLICAS_PENDING, "; ".join(pending))
    return Verdict(
        kv.COND_ROLLOUT_COMPLETE,
        TRUE,
        kv.REASON_ROLLOUT_DONE,
        "every leader replica and every member runs the current template",
    )
