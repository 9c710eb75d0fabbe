"""The joint admission check ``gpustack-model-deployment-joint`` (model-deployment.md §7.7).

Every operator ClusterQueue lists this AdmissionCheck (the pool controllers add it once it is
``Active``), so Kueue adds its entry to every Workload and, once the Workload reserves quota, waits
for this controller.  The controller:

1. applies the AdmissionCheck (``spec.controllerName: worker.gpustack.ai/model-deployment-joint``)
   and keeps it ``Active`` — retried until Kueue's CRD is served;
2. per Workload that holds a reservation, is neither evicted, finished, inactive nor admitted, and
   carries the check: resolves the deployment through its Pods.  Unknown Pods or deployment ⇒
   requeue in 15 s (never opened on doubt).  Not a ModelDeployment, or fewer than two groups ⇒
   ``Ready``.  Else ``Ready`` iff every group's Workload holds a reservation, otherwise ``Pending``
   naming the groups (by role and ordinal) that wait.  Never ``Retry`` (Kueue would evict and
   ping-pong the quota), never rejected.

The state is written through the status subresource by server-side apply, field manager
``worker.gpustack.ai/model-deployment-joint``, only when it changes.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from api import constants
from api.objects import Obj
from controllers import admission_checks
from controllers.modeldeployment import names
from controllers.modeldeployment import replicas as rp
from controllers.modeldeployment.members import INDEX_INSTANCE, instance_index
from kube.client import ApiError
from kube.informer import key_of
from kube.manager import Controller, Manager, Watch

log = logging.getLogger("controllers.modeldeployment.joint")

CHECK = constants.ADMISSION_CHECK_JOINT
CONTROLLER_NAME = constants.ADMISSION_CHECK_JOINT_CONTROLLER
FIELD_MANAGER = constants.ADMISSION_CHECK_JOINT_CONTROLLER
READY, PENDING = "Ready", "Pending"
UNRESOLVED_REQUEUE_SECONDS = 15.0
PARK_AFTER_SECONDS = 1800.0
PARKED = "parked rather than held"
CRD_RETRY_SECONDS = 5.0
CHECK_KEY: tuple[str, str] = ("", "admissioncheck/" + CHECK)
INDEX_GROUP = "pod-group"


@dataclass(frozen=True)
class Verdict:
    state: str
    message: str
    complete: bool = False  # every group of the deployment has a Workload (the set is assembled)


class Unresolved(Exception):
    """The Workload's deployment cannot be told yet: requeue, never answer."""


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_entry(workload: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for entry in (workload.get("status") or {}).get("admissionChecks") or ():
        if isinstance(entry, Mapping) and entry.get("name") == CHECK:
            return entry
    return None


def holds_reservation(workload: Mapping[str, Any] | None) -> bool:
    if workload is None or rp.leaving(workload):
        return False
    return bool((workload.get("status") or {}).get("admission")) and rp.is_true(workload, "QuotaReserved")


def needs_answer(workload: Mapping[str, Any]) -> bool:
    return (
        check_entry(workload) is not None
        and holds_reservation(workload)
        and not rp.is_true(workload, "Evicted")
        and not rp.is_true(workload, "Finished")
        and not rp.is_true(workload, "Admitted")
        and (workload.get("spec") or {}).get("active") is not False
    )


def owner_pods(workload: Mapping[str, Any]) -> list[str]:
    return [
        o.get("name", "")
        for o in (workload.get("metadata") or {}).get("ownerReferences") or ()
        if o.get("kind") == "Pod" and o.get("name")
    ]


def _replicas(role: Mapping[str, Any]) -> int:
    value = role.get("replicas")
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def decide(
    workload: Mapping[str, Any],
    pod: Callable[[str, str], Obj | None],
    deployment: Callable[[str, str], Obj | None],
    workload_named: Callable[[str, str], Obj | None],
) -> Verdict:
    """The check's answer for ``workload``; raises :class:`Unresolved` when the deployment behind it
    cannot be told from the caches."""
    meta = workload.get("metadata") or {}
    namespace = meta.get("namespace", "")
    owners = owner_pods(workload)
    if not owners:
        return Verdict(READY, "not a ModelDeployment replica: nothing to hold it for")
    found = [p for name in owners if (p := pod(name, namespace)) is not None]
    if not found:
        raise Unresolved(f"the Pods of Workload {namespace}/{meta.get('name')} are not observed yet")
    labels = rp.pod_labels(found[0])
    if labels.get(constants.LABEL_APP_NAME) != constants.APP_NAME_MODEL_DEPLOYMENT:
        return Verdict(READY, "not a ModelDeployment replica: nothing to hold it for")
    md_name = labels.get(constants.LABEL_APP_INSTANCE, "")
    md = deployment(md_name, namespace)
    if md is None:
        raise Unresolved(f"ModelDeployment {namespace}/{md_name} is not observed")
    roles = [r for r in ((md.get("spec") or {}).get("roles") or ()) if isinstance(r, Mapping)]
    groups = [(str(r.get("name", "")), k) for r in roles for k in range(_replicas(r))]
    if len(groups) < 2:
        return Verdict(READY, f"ModelDeployment {md_name} has one group: nothing to assemble")
    by_group = {
        (role, k): workload_named(names.pod_group_name(namespace, md_name, role, k), namespace)
        for role, k in groups
    }
    waiting = [f"{role}/r{k}" for (role, k), wl in by_group.items() if not holds_reservation(wl)]
    if waiting:
        shown = ", ".join(waiting[:20]) + (f" and {len(waiting) - 20} more" if len(waiting) > 20 else "")
        return Verdict(
            PENDING,
            f"held until every group of ModelDeployment {md_name} reserves quota; waiting for {shown}",
            complete=all(wl is not None for wl in by_group.values()),
        )
    return Verdict(
        READY, f"every one of the {len(groups)} groups of ModelDeployment {md_name} reserved quota"
    )


def _seconds(stamp: str) -> float | None:
    try:
        return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()
    except (TypeError, ValueError):
        return None


def park_in(workload: Mapping[str, Any], verdict: Verdict, now: float) -> float | None:
    """Seconds until a held Workload is parked (0: park now), or None when it is not to be parked:
    held ``Pending`` for 30 minutes (from the entry's ``lastTransitionTime``) with every group of the
    set assembled (§7.7 (3))."""
    if verdict.state != PENDING or not verdict.complete:
        return None
    entry = check_entry(workload) or {}
    since = _seconds(entry.get("lastTransitionTime", "")) if entry.get("state") == PENDING else None
    if since is None:
        return PARK_AFTER_SECONDS
    return max(PARK_AFTER_SECONDS - (now - since), 0.0)


def status_patch(workload: Mapping[str, Any], verdict: Verdict, now: str) -> Obj | None:
    """The apply body recording ``verdict`` in the Workload's entry, or None when it says so already."""
    current = check_entry(workload) or {}
    if current.get("state") == verdict.state and current.get("message") == verdict.message:
        return None
    transition = current.get("lastTransitionTime") if current.get("state") == verdict.state else None
    return admission_checks.entry_apply(
        workload,
        {
            "name": CHECK,
            "state": verdict.state,
            "message": verdict.message[:1024],
            "lastTransitionTime": transition or now,
        },
    )


def admission_check() -> Obj:
    return admission_checks.admission_check(CHECK, CONTROLLER_NAME)


def apply_admission_check(client: Any) -> bool:
    """Apply the AdmissionCheck and mark it ``Active`` unless it is; False while Kueue's CRD is not
    served (the caller retries)."""
    return admission_checks.apply_active(
        client, CHECK, CONTROLLER_NAME, field_manager=FIELD_MANAGER, reason="Ready", log=log
    )


def group_index(pod: Obj) -> list[str]:
    meta = pod.get("metadata") or {}
    group = (meta.get("labels") or {}).get(constants.KUEUE_POD_GROUP_NAME)
    return [f"{meta.get('namespace', '')}/{group}"] if group else []


class JointAdmissionCheck(Controller):
    """Answers ``gpustack-model-deployment-joint`` for every Workload that carries it."""

    name = "model-deployment-joint"
    workers = 1

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager)
        self.workloads = self.informer("Workload")
        self.pods = manager.informer(
            "Pod",
            label_selector=f"{constants.LABEL_APP_NAME}={constants.APP_NAME_MODEL_DEPLOYMENT}",
            indexes={INDEX_GROUP: group_index, INDEX_INSTANCE: instance_index},
        )
        self.deployments = self.informer("ModelDeployment")
        self.queue.add(CHECK_KEY)

    def watches(self) -> list[Watch]:
        return [
            Watch("Workload", self._on_workload),
            Watch("AdmissionCheck", self._on_check),
            Watch("ModelDeployment", self._on_deployment),
        ]

    def _siblings(self, namespace: str, md: str) -> list[tuple[str, str]]:
        keys = []
        for pod in self.pods.by_index(INDEX_INSTANCE, f"{namespace}/{md}"):
            group = rp.pod_labels(pod).get(constants.KUEUE_POD_GROUP_NAME)
            if group:
                keys.append((namespace, group))
        return keys

    def _on_workload(self, event: str, obj: Obj, old: Obj | None) -> Iterable[Hashable]:
        key = key_of(obj)
        wake: list[Hashable] = [key] if event != "DELETED" and needs_answer(obj) else []
        # A reservation gained or lost moves every sibling group's answer.
        if old is None or event == "DELETED" or holds_reservation(obj) != holds_reservation(old):
            for pod in self.pods.by_index(INDEX_GROUP, f"{key[0]}/{key[1]}"):
                md = rp.pod_labels(pod).get(constants.LABEL_APP_INSTANCE, "")
                for sibling in self._siblings(key[0], md):
                    found = self.workloads.get(sibling[1], sibling[0])
                    if found is not None and needs_answer(found):
                        wake.append(sibling)
                break
        return wake

    def _on_deployment(self, event: str, obj: Obj, old: Obj | None) -> Iterable[Hashable]:
        if old is not None and (obj.get("spec") or {}) == (old.get("spec") or {}) and event != "ADDED":
            return ()
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace", "")
        return [
            key
            for key in self._siblings(namespace, meta.get("name", ""))
            if (found := self.workloads.get(key[1], key[0])) is not None and needs_answer(found)
        ]

    def _on_check(self, event: str, obj: Obj, old: Obj | None) -> Iterable[Hashable]:
        return [CHECK_KEY] if (obj.get("metadata") or {}).get("name") == CHECK else ()

    def _pod(self, name: str, namespace: str) -> Obj | None:
        """A Workload's Pod: from the cache of deployment Pods, else one uncached read (a Pod of
        any other workload is not in that cache, and is answered once)."""
        found = self.pods.get(name, namespace)
        return found if found is not None else self.client.get("Pod", name, namespace)

    def reconcile(self, key: Hashable) -> float | None:
        if key == CHECK_KEY:
            return None if apply_admission_check(self.client) else CRD_RETRY_SECONDS
        namespace, name = cast(tuple[str, str], key)
        workload = self.workloads.get(name, namespace)
        if workload is None or not needs_answer(workload):
            return None
        try:
            verdict = decide(
                workload,
                self._pod,
                lambda n, ns: self.deployments.get(n, ns),
                lambda n, ns: self.workloads.get(n, ns),
            )
        except Unresolved as error:
            log.info(
                "joint check requeued", extra={"namespace": namespace, "workload": name, "why": str(error)}
            )
            return UNRESOLVED_REQUEUE_SECONDS
        left = park_in(workload, verdict, dt.datetime.now(dt.UTC).timestamp())
        if left == 0.0:
            verdict = Verdict(
                PENDING,
                f"{PARKED}: the set did not assemble within {int(PARK_AFTER_SECONDS // 60)} minutes, so "
                f"this Workload is deactivated to free its quota; {verdict.message}",
            )
            self.client.patch("Workload", name, {"spec": {"active": False}}, namespace=namespace)
        body = status_patch(workload, verdict, _now())
        if body is None:
            return left or None
        try:
            self.client.apply(body, field_manager=FIELD_MANAGER, subresource="status")
        except ApiError as error:
            if error.conflict or error.not_found:
                return 1.0  # the Workload moved on since the cache read: judge its new state
            raise
        log.info(
            "joint check answered",
            extra={
                "namespace": namespace,
                "workload": name,
                "state": verdict.state,
                "verdict": verdict.message,
            },
        )
        return left or None
