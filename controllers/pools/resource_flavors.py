"""ResourceFlavors and Topologies of the pools (``NodeFlavorReconciler``, §8, B.4).

One key for the whole cluster: every pass renders the flavors of all managed nodes from the Node
cache (pure, ``controllers.pools.render``), applies those that differ, deletes ours that no node
contributes to any more, creates the Topology each flavor references (hostname-only, or one a
TopologySource's levels explain) and deletes ours no flavor references.  Flavor topology fields and
Topology levels are immutable: drift is reported as an Event, never edited.  Node events coalesce
on the single key, so a burst of node changes costs one pass.

A live profile change (B.4 step 7) renames a flavor (the profile is part of its identity): the
replacement is created at once, and the flavor whose nodes all moved is labelled
``topology.gpustack.ai/retiring`` and kept while a ClusterQueue still lists it, so the queue plan
can drain before it swaps; it is deleted once no queue lists it.  A flavor whose nodes left the
cluster has no replacement and is deleted at once (the queue drops it in place).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable, Mapping
from typing import Any

from api import constants
from controllers.pools import render
from controllers.settings import AWARE_CPU, MIXED_ON_NODE, SettingsReader
from kube import changes
from kube.client import ApiError
from kube.events import NORMAL, WARNING
from kube.manager import Controller, Manager, Watch

log = logging.getLogger("controllers.pools.resource_flavors")

FIELD_MANAGER = "gpustack-operator/resource-flavors"
KEY = "pools"

_NODE_LABEL_PREFIXES = (
    constants.PREFIX_GENERAL,
    constants.PREFIX_ACCELERATABLE,
    constants.LABEL_MANAGED,
    constants.LABEL_OS,
    constants.LABEL_ARCH,
    constants.LABEL_TOPOLOGY_PROFILE,
    constants.LABEL_CPU_ONLY,
)


def node_pool_labels(key: str) -> bool:
    return key.startswith(_NODE_LABEL_PREFIXES)


def flavor_differs(desired: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    want, have = desired["metadata"], current.get("metadata") or {}
    have_labels = have.get("labels") or {}
    if any(have_labels.get(k) != v for k, v in want["labels"].items()):
        return True
    if any(node_pool_labels(k) and k not in want["labels"] for k in have_labels):
        return True
    have_notes = {
        k: v for k, v in (have.get("annotations") or {}).items() if k.startswith(constants.PREFIX_NOTE)
    }
    if have_notes != want["annotations"]:
        return True
    if constants.LABEL_FLAVOR_RETIRING in have_labels:
        return True
    spec, have_spec = desired["spec"], current.get("spec") or {}
    return any(spec[f] != have_spec.get(f) for f in ("nodeLabels", "tolerations", "topologyName"))


class ResourceFlavorReconciler(Controller):
    name = "resource-flavors"

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager)
        self.nodes = self.informer("Node")
        self.flavors = self.informer("ResourceFlavor")
        self.topologies = self.informer("Topology")
        self.queues = self.informer("ClusterQueue")
        self.sources = self.informer("TopologySource")
        self.settings = SettingsReader(self.informer("Setting", constants.SYSTEM_NAMESPACE))
        self._reported: set[tuple[str, str]] = set()
        self.node_facts = render.NodeFactsMemo()

    def watches(self) -> list[Watch]:
        def nodes(event: str, obj: dict, old: dict | None) -> list[str]:
            if event in ("ADDED", "DELETED") or changes.resync(obj, old):
                return [KEY]
            if changes.labels_moved(obj, old, node_pool_labels):
                return [KEY]
            if changes.path(obj, "status", "capacity", "cpu") != changes.path(
                old, "status", "capacity", "cpu"
            ):
                return [KEY]
            return []

        def ours(event: str, obj: dict, old: dict | None) -> list[str]:
            return [KEY] if changes.path(obj, "metadata", "labels", constants.LABEL_RESOURCE_TYPE) else []

        def always(event: str, obj: dict, old: dict | None) -> list[str]:
            return [KEY]

        def queues(event: str, obj: dict, old: dict | None) -> list[str]:
            if changes.moved(event, obj, old, ("spec", "resourceGroups")):
                return [KEY]
            return []

        def sources(event: str, obj: dict, old: dict | None) -> list[str]:
            return [KEY] if changes.moved(event, obj, old, ("spec", "levels")) else []

        return [
            Watch("Node", nodes),
            Watch("ResourceFlavor", ours),
            Watch("Topology", ours),
            Watch("ClusterQueue", queues),
            Watch("TopologySource", sources),
            Watch("Setting", always, namespace=constants.SYSTEM_NAMESPACE),
        ]

    def _report(self, obj: dict, reason: str, message: str) -> None:
        if (render.name_of(obj), message) in self._reported:
            return
        self._reported.add((render.name_of(obj), message))
        log.warning(message, extra={"object": render.name_of(obj), "reason": reason})
        self.recorder.event(obj, WARNING, reason, message)

    def reconcile(self, key: Hashable) -> float | None:
        mixed = self.settings.enabled(MIXED_ON_NODE)
        aware = self.settings.enabled(AWARE_CPU)
        groups = self.node_facts.groups(self.nodes.list(), mixed_on_node=mixed)
        desired = {
            name: render.render_flavor(group, aware_cpu=aware, mixed_on_node=mixed)
            for name, group in groups.items()
        }
        self._sync_topologies({g.key.profile for g in groups.values()})
        for name, body in desired.items():
            current = self.flavors.get(name)
            if current is not None and not flavor_differs(body, current):
                continue
            if current is not None:
                drift = render.flavor_spec_drift(body, current)
                if drift:
                    self._report(
                        current,
                        "FlavorDrift",
                        f"flavor {name}: {', '.join(drift)} differ from the node pool's and are immutable; "
                        "delete the flavor to have it re-created",
                    )
                    body = {**body, "spec": {f: (current.get("spec") or {}).get(f) for f in body["spec"]}}
            if current is not None and render.retiring(current):
                self.client.patch(
                    "ResourceFlavor", name, {"metadata": {"labels": {constants.LABEL_FLAVOR_RETIRING: None}}}
                )
                self.recorder.event(current, NORMAL, "Restored", "nodes carry this flavor's profile again")
            self.client.apply(body, field_manager=FIELD_MANAGER)
            if current is None:
                self.recorder.event(body, NORMAL, "Created", f"flavor for {len(groups[name].nodes)} node(s)")
        self._retire_flavors(desired)
        return self._retire_topologies({body["spec"]["topologyName"] for body in desired.values()})

    def _retire_flavors(self, desired: dict[str, dict]) -> None:
        """Ours that no node contributes to: kept (labelled retiring) while a queue lists them and a
        replacement of the same hardware in another profile exists, else deleted."""
        listed = {
            f.get("name")
            for q in self.queues.list()
            for g in (q.get("spec") or {}).get("resourceGroups") or []
            for f in g.get("flavors") or []
        }
        replacements = {render.hardware_identity(body) for body in desired.values()}
        for flavor in self.flavors.list():
            name = render.name_of(flavor)
            if not render.owned_flavor(flavor) or name in desired or render.deleting(flavor):
                continue
            if name in listed and render.hardware_identity(flavor) in replacements:
                if not render.retiring(flavor):
                    log.info(
                        "retiring flavor: its nodes moved to another topology profile", extra={"flavor": name}
                    )
                    self.client.patch(
                        "ResourceFlavor",
                        name,
                        {"metadata": {"labels": {constants.LABEL_FLAVOR_RETIRING: "true"}}},
                    )
                    self.recorder.event(
                        flavor,
                        NORMAL,
                        "Retiring",
                        "its nodes moved to another topology profile; kept until no ClusterQueue lists it",
                    )
                continue
            log.info("deleting flavor without nodes", extra={"flavor": name})
            self.client.delete("ResourceFlavor", name)

    def _sync_topologies(self, profiles: set[str]) -> None:
        sources = self.sources.list()
        for profile in sorted(profiles):
            levels = render.topology_levels(profile, sources)
            name = render.topology_name(profile)
            current = self.topologies.get(name)
            if levels is None:
                if current is None:
                    log.warning(
                        "no TopologySource explains profile; flavors wait", extra={"profile": profile}
                    )
                continue
            body = render.render_topology(profile, levels)
            if current is None:
                try:
                    self.client.create(body)
                except ApiError as error:
                    if not error.conflict:
                        raise
            elif render.topology_drift(body, current):
                self._report(
                    current, "TopologyDrift", f"Topology {name} levels differ from profile {profile}'s"
                )

    def _retire_topologies(self, wanted: set[str]) -> float | None:
        """Delete ours no flavor names; nudge Kueue about deleted ones it still holds (requeued)."""
        referenced = set(wanted)
        for flavor in self.flavors.list():
            referenced.add((flavor.get("spec") or {}).get("topologyName") or "")
        requeue: float | None = None
        for topology in self.topologies.list():
            name = render.name_of(topology)
            if not render.owned_flavor(topology):
                continue
            if name not in referenced and not render.deleting(topology):
                self.client.delete("Topology", name)
            elif render.held_by_kueue(topology, referenced):
                now = time.time()
                if render.nudge_due(topology, now):
                    log.info(
                        "nudging Kueue about a deleted Topology it still holds", extra={"topology": name}
                    )
                    self.client.patch("Topology", name, render.nudge_patch(now))
                requeue = render.KUEUE_NUDGE_SECONDS
        return requeue
