"""LocalQueues: every pool's entrance in every tenant namespace (``NodeQueueEntranceReconciler``, §8).

Keyed by namespace.  A tenant namespace (not kube-system, kube-public, kube-node-lease,
gpustack-system or kueue-system, not terminating) holds one ``gpustack-fnv64-<hash>`` LocalQueue
per live ClusterQueue of ours, annotated ``schedule.gpustack.ai/queue: <ClusterQueue>``; ours whose
queue is gone or going are deleted.
"""

from __future__ import annotations

from collections.abc import Hashable

from controllers.pools import render
from kube import changes
from kube.manager import Controller, Manager, Watch

FIELD_MANAGER = "gpustack-operator/local-queues"


class LocalQueueReconciler(Controller):
    name = "local-queues"

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager)
        self.namespaces = self.informer("Namespace")
        self.queues = self.informer("ClusterQueue")
        self.local_queues = manager.informer(
            "LocalQueue", indexes={"namespace": lambda o: [changes.namespace_of(o)]}
        )

    def watches(self) -> list[Watch]:
        def namespace(event: str, obj: dict, old: dict | None) -> list[str]:
            if changes.moved(event, obj, old, ("status", "phase"), ("metadata", "deletionTimestamp")):
                return [render.name_of(obj)]
            return []

        def every_namespace(event: str, obj: dict, old: dict | None) -> list[str]:
            if not render.owned_cluster_queue(obj) and not render.owned_cluster_queue(old or {}):
                return []
            if not changes.moved(event, obj, old, ("metadata", "deletionTimestamp")):
                return []
            return [render.name_of(n) for n in self.namespaces.list() if render.tenant_namespace(n)]

        def local_queue(event: str, obj: dict, old: dict | None) -> list[str]:
            return [changes.namespace_of(obj)] if render.owned_local_queue(obj) else []

        return [
            Watch("Namespace", namespace),
            Watch("ClusterQueue", every_namespace),
            Watch("LocalQueue", local_queue),
        ]

    def reconcile(self, key: Hashable) -> float | None:
        namespace = self.namespaces.get(str(key))
        if namespace is None:
            return None  # gone: its LocalQueues went with it
        wanted = [
            render.name_of(q)
            for q in self.queues.list()
            if render.owned_cluster_queue(q) and not render.deleting(q)
        ]
        existing = self.local_queues.by_index("namespace", str(key))
        apply, delete = render.local_queue_plan(wanted, namespace, existing)
        for body in apply:
            self.client.apply(body, field_manager=FIELD_MANAGER)
        for name in delete:
            self.client.delete("LocalQueue", name, str(key))
        return None
