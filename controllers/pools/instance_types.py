"""InstanceTypes: derived ones authored, every one's status kept, finalizer and teardown
(``InstanceTypeReconciler`` and the authoring half of ``NodeFlavorReconciler``, §2.2, §8).

Keys are InstanceType names, plus :data:`DERIVE` for authoring:

- **derive** — under ``instance-type-derived-from-node`` every pool a live generated flavor calls
  for gets its InstanceType, created once (a POST; an existing type, admin- or operator-authored,
  is never touched) with the unit preset of its product tier; a deleted one is authored again;
- **status** — phase, entrance, detail and the four views (``controllers.pools.instance_type_status``),
  written through the status subresource only when it changed;
- **finalizer** ``gpustack.ai/controlled`` on every type; on deletion the type reads ``Inactive``,
  its ClusterQueue is deleted once (the queue reconciler drains it), and the finalizer goes when an
  uncached read shows the queue gone.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Any

from api import API_VERSION, constants
from controllers.pools import render
from controllers.pools.instance_type_status import NodeLedgerMemo, pool_nodes, render_status, status_changed
from controllers.settings import AWARE_CPU, DERIVED_FROM_NODE, MIXED_ON_NODE, SettingsReader
from kube import changes
from kube.client import ApiError
from kube.events import NORMAL
from kube.manager import Controller, Manager, Watch

log = logging.getLogger("controllers.pools.instance_types")

FIELD_MANAGER = "gpustack-operator/instance-types"
DERIVE = "*derive*"  # not a valid object name: cannot collide with an InstanceType's
TEARDOWN_POLL_SECONDS = 2.0


def _devices_groups(obj: dict) -> set[str]:
    labels = changes.path(obj, "metadata", "labels") or {}
    prefix = constants.PREFIX_ACCELERATABLE
    return {k[len(prefix) :] for k, v in labels.items() if k.startswith(prefix) and v == "true"}


class InstanceTypeReconciler(Controller):
    name = "instance-types"

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager)
        self.types = self.informer("InstanceType")
        self.flavors = self.informer("ResourceFlavor")
        self.nodes = self.informer("Node")
        self.devices = self.informer("Devices")
        self.queues = self.informer("ClusterQueue")
        self.settings = SettingsReader(self.informer("Setting", constants.SYSTEM_NAMESPACE))
        self.node_facts = render.NodeFactsMemo()
        self.node_ledgers = NodeLedgerMemo()

    def watches(self) -> list[Watch]:
        def types(event: str, obj: dict, old: dict | None) -> list[str]:
            return [render.name_of(obj), DERIVE] if event == "DELETED" else [render.name_of(obj)]

        def every_type(event: str, obj: dict, old: dict | None) -> list[str]:
            return [DERIVE, *(render.name_of(t) for t in self.types.list())]

        def flavors(event: str, obj: dict, old: dict | None) -> list[str]:
            if not render.owned_flavor(obj):
                return []
            if not changes.moved(event, obj, old, ("metadata", "labels"), ("metadata", "deletionTimestamp")):
                return []
            return every_type(event, obj, old)

        def queues(event: str, obj: dict, old: dict | None) -> list[str]:
            # Only what the phase reads: Kueue rewrites queue status on every workload change.
            if changes.moved(
                event,
                obj,
                old,
                ("spec", "stopPolicy"),
                ("metadata", "annotations"),
                ("metadata", "deletionTimestamp"),
                ("status", "reservingWorkloads"),
                ("status", "admittedWorkloads"),
            ):
                return [render.name_of(obj)]
            return []

        def devices(event: str, obj: dict, old: dict | None) -> list[str]:
            if not changes.moved(event, obj, old, ("status",), ("spec",), ("metadata", "labels")):
                return []
            groups = _devices_groups(obj) | _devices_groups(old or {})
            out = []
            for t in self.types.list():
                spec = t.get("spec") or {}
                if spec.get("acceleratable") and spec.get("acceleratorGroup") in groups:
                    out.append(render.name_of(t))
            return out

        return [
            Watch("InstanceType", types),
            Watch("ResourceFlavor", flavors),
            Watch("ClusterQueue", queues),
            Watch("Devices", devices),
            Watch("Setting", every_type, namespace=constants.SYSTEM_NAMESPACE),
        ]

    def reconcile(self, key: Hashable) -> float | None:
        if key == DERIVE:
            self.derive()
            return None
        instance_type = self.types.get(str(key))
        if instance_type is None:
            return None
        if render.deleting(instance_type):
            return self.teardown(instance_type)
        self._ensure_finalizer(instance_type)
        self.write_status(instance_type)
        return None

    # --- authoring ------------------------------------------------------------------------------------

    def derive(self) -> None:
        if not self.settings.enabled(DERIVED_FROM_NODE):
            return
        aware = self.settings.enabled(AWARE_CPU)
        for name, pool in sorted(render.derived_pools(self.flavors.list(), aware_cpu=aware).items()):
            if self.types.get(name) is not None:
                continue
            body = render.derived_instance_type(pool, aware_cpu=aware)
            try:
                created = self.client.create(body)
            except ApiError as error:
                if error.conflict:
                    continue  # created meanwhile (by us or an admin): create-only
                raise
            log.info("authored InstanceType", extra={"instance_type": name})
            self.recorder.event(
                created, NORMAL, "Derived", f"authored from the node pool ({pool.accelerator_group or 'cpu'})"
            )

    # --- finalizer and teardown -----------------------------------------------------------------------

    def _ensure_finalizer(self, instance_type: dict) -> None:
        meta = instance_type.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        if constants.FINALIZER_CONTROLLED in finalizers:
            return
        self.client.patch(
            "InstanceType",
            meta["name"],
            {
                "metadata": {
                    "finalizers": [*finalizers, constants.FINALIZER_CONTROLLED],
                    "resourceVersion": meta.get("resourceVersion"),
                }
            },
        )

    def teardown(self, instance_type: dict) -> float | None:
        meta = instance_type.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        if constants.FINALIZER_CONTROLLED not in finalizers:
            return None
        name = meta["name"]
        self.write_status(instance_type)
        queue = self.client.get("ClusterQueue", name)
        if queue is not None:
            if not render.deleting(queue):
                self.client.delete("ClusterQueue", name)
                self.recorder.event(
                    instance_type, NORMAL, "TearingDown", f"deleted ClusterQueue {name}; waiting for it to go"
                )
            return TEARDOWN_POLL_SECONDS
        remaining = [f for f in finalizers if f != constants.FINALIZER_CONTROLLED]
        try:
            self.client.patch(
                "InstanceType",
                name,
                {"metadata": {"finalizers": remaining, "resourceVersion": meta.get("resourceVersion")}},
            )
        except ApiError as error:
            if not error.not_found:
                raise
        return None

    # --- status ---------------------------------------------------------------------------------------

    def desired_status(self, instance_type: dict) -> dict[str, Any]:
        aware = self.settings.enabled(AWARE_CPU)
        mixed = self.settings.enabled(MIXED_ON_NODE)
        nodes = self.nodes.by_name()
        groups = self.node_facts.groups(nodes.values(), mixed_on_node=mixed)
        names = pool_nodes(instance_type, groups, self.flavors.list(), aware_cpu=aware, mixed_on_node=mixed)
        facts = [self.node_facts.facts(nodes[n]) for n in names if n in nodes]
        devices = {n: d for n in names if (d := self.devices.get(n)) is not None}
        if len(self.node_ledgers) > 2 * len(nodes) + 64:  # nodes gone
            self.node_ledgers.keep_only(nodes)
        queue = self.queues.get(render.name_of(instance_type))
        return render_status(instance_type, queue, facts, devices, self.node_ledgers)

    def write_status(self, instance_type: dict) -> None:
        status = self.desired_status(instance_type)
        if not status_changed(instance_type.get("status"), status):
            return
        body = {
            "apiVersion": API_VERSION,
            "kind": "InstanceType",
            "metadata": {"name": render.name_of(instance_type)},
            "status": status,
        }
        try:
            self.client.apply(body, field_manager=FIELD_MANAGER, subresource="status")
        except ApiError as error:
            if not error.not_found:
                raise
