"""Say why a Workload can never be admitted (``NodeDevicesFitReport``), keyed by Workload.

Kueue keeps a Workload whose PodSet asks more of one node than any node of its pool has — nine
whole cards per Pod on eight-card nodes — pending, with its own message about topology domains
("excluded: affinity"), and does not loop on it.  This controller adds the cause in the pool's own
terms: :func:`controllers.nodedevices.fit.never_fits` names the PodSet, what it asks per Pod, the
most a node of the pool could ever offer in that mode and the most that is free now.  It posts one
``Warning`` Event ``NeverFits`` on the Workload, on each Pod it owns (``kubectl describe pod`` shows
it) and on the ModelDeployment those Pods are replicas of, once per Workload and message; it
writes nothing else.

A Workload is looked at while it holds no reservation and names a LocalQueue of an InstanceType's
ClusterQueue (``resource.gpustack.ai/type: instancetypes``).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterable
from typing import cast

from api import constants
from api.objects import Obj
from controllers.nodedevices import fit
from kube import changes
from kube.events import WARNING
from kube.informer import key_of
from kube.manager import Controller, Manager, Watch

REASON = "NeverFits"


class NodeDevicesFitReport(Controller):
    name = "node-devices-fit-report"
    workers = 1

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager)
        self.workloads = self.informer("Workload")
        self.local_queues = self.informer("LocalQueue")
        self.cluster_queues = self.informer("ClusterQueue")
        self.flavors = self.informer("ResourceFlavor")
        self.nodes = self.informer("Node")
        self.devices = self.informer("Devices")
        self._lock = threading.Lock()
        self._reported: dict[tuple[str, str], tuple[str, str]] = {}  # key -> (uid, message)
        # Which Nodes each flavor's pool holds, kept between Workloads (one worker: no lock).
        self.pools = fit.DecisionCache()

    def watches(self) -> list[Watch]:
        def workloads(event: str, obj: Obj, old: Obj | None) -> Iterable[Hashable]:
            key = key_of(obj)
            if event == "DELETED":
                with self._lock:
                    self._reported.pop(key, None)
                return []
            if fit.holds_reservation(obj) or not (obj.get("spec") or {}).get("queueName"):
                return []
            if event == "ADDED" or changes.resync(obj, old) or (old or {}).get("spec") != obj.get("spec"):
                return [key]
            return []

        return [Watch("Workload", workloads)]

    def pool_of(self, workload: Obj) -> tuple[str, list[Obj]] | None:
        """The InstanceType (ClusterQueue) name and the ResourceFlavors of the Workload's queue."""
        meta = workload.get("metadata") or {}
        local = self.local_queues.get(
            (workload.get("spec") or {}).get("queueName") or "", meta.get("namespace") or ""
        )
        name = ((local or {}).get("spec") or {}).get("clusterQueue")
        queue = self.cluster_queues.get(name) if name else None
        labels = ((queue or {}).get("metadata") or {}).get("labels") or {}
        if (
            queue is None
            or labels.get(constants.LABEL_RESOURCE_TYPE) != constants.RESOURCE_TYPE_INSTANCE_TYPES
        ):
            return None
        flavors = []
        for group in (queue.get("spec") or {}).get("resourceGroups") or ():
            for entry in group.get("flavors") or ():
                flavor = self.flavors.get(entry.get("name") or "")
                if flavor is not None:
                    flavors.append(flavor)
        return cast(str, name), flavors

    def reconcile(self, key: Hashable) -> float | None:
        namespace, name = cast(tuple[str, str], key)
        workload = self.workloads.get(name, namespace)
        if workload is None or fit.holds_reservation(workload):
            return None
        pool = self.pool_of(workload)
        if pool is None:
            return None
        message = fit.never_fits(
            workload,
            pool=pool[0],
            flavors=pool[1],
            nodes=self.nodes.by_name(),
            devices=self.devices.by_name(),
            cache=self.pools,
        )
        uid = (workload.get("metadata") or {}).get("uid") or ""
        with self._lock:
            if not message or self._reported.get((namespace, name)) == (uid, message):
                return None
            self._reported[(namespace, name)] = (uid, message)
        self.recorder.event(workload, WARNING, REASON, message)
        deployments: dict[str, Obj] = {}
        for owner in (workload.get("metadata") or {}).get("ownerReferences") or ():
            if owner.get("kind") != "Pod" or owner.get("apiVersion") != "v1":
                continue
            self.recorder.event(_referenced(owner, namespace), WARNING, REASON, message)
            # A ModelDeployment's replica: say it where its user looks (kubectl describe md).
            pod = self.client.get("Pod", owner.get("name") or "", namespace) or {}
            for up in (pod.get("metadata") or {}).get("ownerReferences") or ():
                if up.get("kind") == "ModelDeployment" and up.get("controller"):
                    deployments[up.get("uid") or ""] = _referenced(up, namespace)
        for deployment in deployments.values():
            self.recorder.event(deployment, WARNING, REASON, message)
        return None


def _referenced(owner: Obj, namespace: str) -> Obj:
    """The object an owner reference names, as the event recorder needs it."""
    return {
        "apiVersion": owner.get("apiVersion"),
        "kind": owner.get("kind"),
        "metadata": {"name": owner.get("name"), "namespace": namespace, "uid": owner.get("uid")},
    }
