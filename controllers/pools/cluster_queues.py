"""ClusterQueues of the pools (``InstanceTypeReconciler``'s queue half and ``NodeQueueReconciler``,
§8, B.4): one per InstanceType, keyed by name.

The whole queue is decided by ``controllers.pools.queue_plan.plan_queue`` — existence, labels, isolation,
resource groups, admission checks, the stop policy (``Hold``↔``None`` mirroring ``inactive``, the
empty-plan hold, ``HoldAndDrain`` before emptying or on removal, the Setting's policy before a live
profile change's swap) — and applied with one field
manager, so no two writers race over the stop policy.  ``TopologyReady`` goes to the queue's
status; an orphaned queue (its InstanceType gone) is drained and deleted.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Hashable

from api import constants
from controllers.pools import render
from controllers.pools.queue_plan import QueueSettings, plan_queue
from controllers.settings import (
    AWARE_CPU,
    DERIVED_FROM_NODE,
    DRAIN_WHEN_NO_FLAVORS,
    PROFILE_CHANGE_STOP_POLICY,
    SettingsReader,
)
from kube import changes
from kube.client import ApiError
from kube.manager import Controller, Manager, Watch

log = logging.getLogger("controllers.pools.cluster_queues")

FIELD_MANAGER = "gpustack-operator/cluster-queues"


def active_check(obj: dict) -> bool:
    for cond in changes.path(obj, "status", "conditions") or []:
        if cond.get("type") == "Active":
            return cond.get("status") == "True"
    return False


class ClusterQueueReconciler(Controller):
    name = "cluster-queues"

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager)
        self.types = self.informer("InstanceType")
        self.queues = self.informer("ClusterQueue")
        self.flavors = self.informer("ResourceFlavor")
        self.topologies = self.informer("Topology")
        self.checks = self.informer("AdmissionCheck")
        self.settings = SettingsReader(self.informer("Setting", constants.SYSTEM_NAMESPACE))

    def watches(self) -> list[Watch]:
        def by_name(event: str, obj: dict, old: dict | None) -> list[str]:
            return [render.name_of(obj)]

        def every_queue(event: str, obj: dict, old: dict | None) -> list[str]:
            names = {render.name_of(t) for t in self.types.list()}
            names.update(render.name_of(q) for q in self.queues.list() if render.owned_cluster_queue(q))
            return sorted(names)

        def flavors(event: str, obj: dict, old: dict | None) -> list[str]:
            if not render.owned_flavor(obj):
                return []
            if not changes.moved(event, obj, old, ("metadata",), ("spec",)):
                return []
            return every_queue(event, obj, old)

        def checks(event: str, obj: dict, old: dict | None) -> list[str]:
            if event not in ("ADDED", "DELETED") and active_check(obj) == active_check(old or {}):
                return [] if not changes.resync(obj, old) else every_queue(event, obj, old)
            return every_queue(event, obj, old)

        return [
            Watch("InstanceType", by_name),
            Watch("ClusterQueue", by_name),
            Watch("ResourceFlavor", flavors),
            Watch("Topology", every_queue),
            Watch("AdmissionCheck", checks),
            Watch("Setting", every_queue, namespace=constants.SYSTEM_NAMESPACE),
        ]

    def reconcile(self, key: Hashable) -> float | None:
        name = str(key)
        instance_type = self.types.get(name)
        queue = self.queues.get(name)
        settings = QueueSettings(
            derived_from_node=self.settings.enabled(DERIVED_FROM_NODE),
            drain_when_no_flavors=self.settings.enabled(DRAIN_WHEN_NO_FLAVORS),
            aware_cpu=self.settings.enabled(AWARE_CPU),
            profile_change_stop_policy=self.settings.valid(PROFILE_CHANGE_STOP_POLICY),
        )
        plan = plan_queue(
            name,
            instance_type,
            queue,
            self.flavors.list(),
            {render.name_of(t) for t in self.topologies.list() if not render.deleting(t)},
            {render.name_of(a) for a in self.checks.list() if active_check(a)},
            settings,
        )
        if plan.backfill_inactive and instance_type is not None:
            self.client.patch("InstanceType", name, {"spec": {"inactive": True}})
        applied = None
        if plan.apply is not None:
            applied = self.client.apply(plan.apply, field_manager=FIELD_MANAGER)
            if queue is None:
                log.info("created ClusterQueue", extra={"queue": name})
        target = applied or queue
        for kind, reason, message in plan.events:
            if target is not None:
                self.recorder.event(target, kind, reason, message)
        if plan.delete:
            self.client.delete("ClusterQueue", name)
        if plan.condition is not None and queue is not None:
            self._write_condition(queue, plan.condition)
        return plan.requeue

    def _write_condition(self, queue: dict, condition: dict) -> None:
        previous = next(
            (
                x
                for x in changes.path(queue, "status", "conditions") or []
                if x.get("type") == condition["type"]
            ),
            None,
        )
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if previous is not None and previous.get("status") == condition["status"]:
            stamp = previous.get("lastTransitionTime") or stamp
        body = {
            "apiVersion": constants.KUEUE_API_VERSION,
            "kind": "ClusterQueue",
            "metadata": {"name": render.name_of(queue)},
            "status": {"conditions": [{**condition, "lastTransitionTime": stamp}]},
        }
        try:
            self.client.apply(body, field_manager=FIELD_MANAGER + "-status", subresource="status")
        except ApiError as error:
            if not (error.not_found or error.conflict):
                raise
