"""Node counting keys on ``Node.status`` (``NodeCapacityReconciler``, §3.2, gate 4), keyed by node.

The keys are decided by ``controllers.pools.node_capacity`` from the node's capacity and its ``Devices``
object and written with a merge patch of the status subresource (capacity and allocatable alike,
as a kubelet would mirror them), only when something changed; stale keys are removed.

``GPUSTACK_NODE_CREDITS_CAPACITY`` (default ``false``, read at start; the chart sets it from
``kueue.version``) adds the credits capacity a Kueue without the fix of kubernetes-sigs/kueue#12005
needs; see ``controllers.pools.node_capacity``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from api.booleans import env_bool
from controllers.pools import render
from controllers.pools.node_capacity import capacity_patch, node_capacity
from kube import changes
from kube.client import ApiError
from kube.manager import Controller, Manager, Watch

FIELD_MANAGER = "gpustack-operator/node-capacity"
ENV_CREDITS = "GPUSTACK_NODE_CREDITS_CAPACITY"


def credits_enabled(env: Mapping[str, str] | None = None) -> bool:
    return env_bool(ENV_CREDITS, False, env)


class NodeCapacityReconciler(Controller):
    name = "node-capacity"
    # One key per node: independent, I/O bound. At 10,000 nodes written by 16 writer threads, 4
    # workers left 4,130 nodes queued at the last write (13 s to drain); 8 kept the queue under 75.
    workers = 8

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager)
        self.nodes = self.informer("Node")
        self.devices = self.informer("Devices")
        self.credits = credits_enabled()

    def watches(self) -> list[Watch]:
        def nodes(event: str, obj: dict, old: dict | None) -> list[str]:
            if event == "DELETED":
                return []
            if changes.moved(event, obj, old, ("status", "capacity"), ("status", "allocatable")):
                return [render.name_of(obj)]
            return []

        def devices(event: str, obj: dict, old: dict | None) -> list[str]:
            if event != "DELETED" and changes.moved(event, obj, old, ("spec",), ("status",)):
                return [render.name_of(obj)]
            return []

        return [Watch("Node", nodes), Watch("Devices", devices)]

    def reconcile(self, key: Hashable) -> float | None:
        name = str(key)
        node, devices = self.nodes.get(name), self.devices.get(name)
        if node is None or devices is None:
            return None
        patch = capacity_patch(node, node_capacity(node, devices, credits=self.credits).keys)
        if not patch:
            return None
        try:
            self.client.patch(
                "Node",
                name,
                {"status": {"capacity": patch, "allocatable": patch}},
                subresource="status",
                field_manager=FIELD_MANAGER,
            )
        except ApiError as error:
            if not error.not_found:
                raise
        return None
