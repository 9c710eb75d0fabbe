"""Reading a deployment's live Pods and Workloads as replicas (model-deployment.md §9.2–§9.4).

A replica is one (role, ordinal): ``size`` Pods and the Kueue Workload their group composes.  The
Pods come from a list on the API server (never the cache: a create decision must see every Pod that
still exists, terminating ones included); a Workload is found by its name, which Kueue gives the
group, or by owning one of the replica's Pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from api import constants
from api.objects import Obj
from controllers.modeldeployment import labels

EMPTY = "empty"  # no Pod of the ordinal reads on the API server
COMPLETE = "complete"  # every member present, none leaving or failed
BROKEN = "broken"  # a member missing, leaving or failed: the whole replica is replaced


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def pod_labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return meta(pod).get("labels") or {}


def leaving(pod: Mapping[str, Any]) -> bool:
    return bool(meta(pod).get("deletionTimestamp"))


def evicted(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("reason") == "Evicted"


def failed(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded")


def pod_ready(pod: Mapping[str, Any]) -> bool:
    if leaving(pod) or failed(pod):
        return False
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def restarts(pod: Mapping[str, Any]) -> int:
    status = pod.get("status") or {}
    total = 0
    for key in ("containerStatuses", "initContainerStatuses"):
        for entry in status.get(key) or ():
            count = entry.get("restartCount")
            if isinstance(count, int):
                total += count
    return total


def ordinal_of(pod: Mapping[str, Any]) -> int | None:
    raw = pod_labels(pod).get(constants.LABEL_POD_ORDINAL, "")
    return int(raw) if raw.isdigit() else None


def member_of(pod: Mapping[str, Any]) -> int | None:
    raw = pod_labels(pod).get(constants.LABEL_MEMBER_INDEX)
    if raw is None:
        return 0  # absent means member 0
    return int(raw) if raw.isdigit() else None


def condition(obj: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any] | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or ():
        if cond.get("type") == kind:
            return cond
    return None


def is_true(obj: Mapping[str, Any] | None, kind: str) -> bool:
    cond = condition(obj, kind)
    return cond is not None and cond.get("status") == "True"


def quota_reserved(workload: Mapping[str, Any] | None) -> bool:
    return workload is not None and is_true(workload, "QuotaReserved") and not leaving(workload)


def admitted(workload: Mapping[str, Any] | None) -> bool:
    return workload is not None and is_true(workload, "Admitted") and not leaving(workload)


def parked(workload: Mapping[str, Any] | None) -> bool:
    return workload is not None and (workload.get("spec") or {}).get("active") is False


def preempted(workload: Mapping[str, Any] | None) -> bool:
    cond = condition(workload, "Evicted")
    return (
        cond is not None
        and cond.get("status") == "True"
        and cond.get("reason") in ("Preempted", "InCohortReclamation")
    )


@dataclass
class Replica:
    role: str
    ordinal: int
    size: int
    pods: list[Obj] = field(default_factory=list)
    workload: Obj | None = None

    @property
    def state(self) -> str:
        if not self.pods:
            return EMPTY
        members = [member_of(p) for p in self.pods]
        if (
            len(self.pods) == self.size
            and sorted(m for m in members if m is not None) == list(range(self.size))
            and not any(leaving(p) or failed(p) for p in self.pods)
        ):
            return COMPLETE
        return BROKEN

    @property
    def ready(self) -> bool:
        return self.state == COMPLETE and all(pod_ready(p) for p in self.pods)

    def hashes(self) -> dict[int, str]:
        return {m: labels.live_hash(p) for p in self.pods if (m := member_of(p)) is not None}


def workload_index(workloads: Iterable[Obj]) -> tuple[dict[str, Obj], dict[str, Obj]]:
    """Workloads by name and by the uid of each Pod that owns them."""
    by_name: dict[str, Obj] = {}
    by_owner: dict[str, Obj] = {}
    for wl in workloads:
        by_name[meta(wl).get("name", "")] = wl
        for owner in meta(wl).get("ownerReferences") or ():
            if owner.get("kind") == "Pod" and owner.get("uid"):
                by_owner[owner["uid"]] = wl
    return by_name, by_owner


def group(
    pods: Iterable[Obj],
    workloads: Iterable[Obj],
    sizes: Mapping[str, int],
) -> tuple[dict[tuple[str, int], Replica], list[Obj]]:
    """The replicas the live Pods form, keyed by (role, ordinal), and the Pods no declared role or
    readable ordinal claims (stray: removed)."""
    by_name, by_owner = workload_index(workloads)
    replicas: dict[tuple[str, int], Replica] = {}
    stray: list[Obj] = []
    for pod in pods:
        role = pod_labels(pod).get(constants.LABEL_APP_COMPONENT, "")
        ordinal = ordinal_of(pod)
        if role not in sizes or ordinal is None:
            stray.append(pod)
            continue
        replica = replicas.setdefault((role, ordinal), Replica(role, ordinal, sizes[role]))
        replica.pods.append(pod)
    for replica in replicas.values():
        for pod in replica.pods:
            group_name = pod_labels(pod).get(constants.KUEUE_POD_GROUP_NAME, "")
            found = by_name.get(group_name) or by_owner.get(meta(pod).get("uid", ""))
            if found is not None:
                replica.workload = found
                break
    return replicas, stray
