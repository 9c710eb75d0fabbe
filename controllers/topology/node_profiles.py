"""``NodeTopologyReconciler``: each Node's topology profile (topology spec B.4 steps 1-3).

Per Node: :func:`controllers.topology.profiles.node_profile` picks the one Ready TopologySource
that selects it (else the hostname-only hierarchy) and hashes the ordered keys; the profile goes
into the worker's own NodeFeature ``<node>-gpustack-worker`` as ``topology.gpustack.ai/profile``,
under a field manager of its own (the NodeFeature reconciler owns the object's other labels), and
NFD projects it onto the Node.  ``DevicesLabelReconciler`` mirrors it onto the ``Devices`` ledger,
and the pool reconcilers turn profiles into Topologies and profile-pinned flavors.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Any

from api import constants
from api import topology as topo
from controllers.nodefeatures import render as features
from controllers.topology.profiles import NodeProfile, node_profile
from kube import changes
from kube.client import ApiError
from kube.events import NORMAL, WARNING
from kube.manager import Controller, Manager, Watch

log = logging.getLogger("controllers.topology.node_profiles")

FIELD_MANAGER = "gpustack-operator/topology-profile"
NAMESPACE = constants.SYSTEM_NAMESPACE
CRD_RETRY_SECONDS = 5.0


def worker_feature_name(node: str) -> str:
    return f"{node}-gpustack-worker"


def _ready_state(obj: dict | None) -> Any:
    for cond in changes.path(obj, "status", "conditions") or []:
        if cond.get("type") == topo.CONDITION_READY:
            return cond.get("status")
    return None


class NodeTopologyReconciler(Controller):
    name = "node-topology"
    workers = 2

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager)
        self.nodes = self.informer("Node")
        self.sources = self.informer("TopologySource")
        self.features = self.informer("NodeFeature", NAMESPACE)
        self._told: dict[str, NodeProfile] = {}

    def _every_node(self) -> list[Hashable]:
        return [changes.name_of(n) for n in self.nodes.list()]

    def watches(self) -> list[Watch]:
        def nodes(event: str, obj: dict, old: dict | None) -> list[Hashable]:
            if event == "DELETED":
                self._told.pop(changes.name_of(obj), None)
                return []
            if event == "ADDED" or changes.resync(obj, old):
                return [changes.name_of(obj)]
            if changes.path(obj, "metadata", "labels") != changes.path(old, "metadata", "labels"):
                return [changes.name_of(obj)]
            return []

        def sources(event: str, obj: dict, old: dict | None) -> list[Hashable]:
            if changes.moved(event, obj, old, ("spec",), ("metadata", "deletionTimestamp")):
                return self._every_node()
            if _ready_state(obj) != _ready_state(old):
                return self._every_node()
            return []

        def worker_features(event: str, obj: dict, old: dict | None) -> list[Hashable]:
            name = changes.name_of(obj)
            node = changes.path(obj, "metadata", "labels", features.NFD_NODE_NAME_LABEL) or ""
            if node and name == worker_feature_name(node):
                profile = changes.path(obj, "spec", "labels", constants.LABEL_TOPOLOGY_PROFILE)
                if (
                    event == "DELETED"
                    or profile != changes.path(old, "spec", "labels", constants.LABEL_TOPOLOGY_PROFILE)
                    or changes.resync(obj, old)
                ):
                    return [node]
            return []

        return [
            Watch("Node", nodes),
            Watch("TopologySource", sources),
            Watch("NodeFeature", worker_features, namespace=NAMESPACE),
        ]

    def reconcile(self, key: Hashable) -> float | None:
        name = str(key)
        node = self.nodes.get(name)
        if node is None or changes.path(node, "metadata", "deletionTimestamp"):
            return None
        chosen = node_profile(node, self.sources.list())
        self._tell(node, chosen)
        current = self.features.get(worker_feature_name(name), NAMESPACE)
        if changes.path(current, "spec", "labels", constants.LABEL_TOPOLOGY_PROFILE) == chosen.profile:
            return None
        body = features.node_feature(node, {constants.LABEL_TOPOLOGY_PROFILE: chosen.profile}, NAMESPACE)
        try:
            self.client.apply(body, field_manager=FIELD_MANAGER)
        except ApiError as error:
            if error.status == 404:  # NFD's CRD is not served (yet)
                return CRD_RETRY_SECONDS
            raise
        log.info(
            "node topology profile",
            extra={
                "node": name,
                "profile": chosen.profile,
                "keys": list(chosen.keys),
                "source": chosen.source,
            },
        )
        return None

    def _tell(self, node: dict, chosen: NodeProfile) -> None:
        """One Event per change of a node's profile (or of why it is hostname-only)."""
        name = changes.name_of(node)
        if self._told.get(name) == chosen:
            return
        first = name not in self._told
        self._told[name] = chosen
        if chosen.reason:
            self.recorder.event(
                node, WARNING, "TopologyFallback", f"hostname-only profile {chosen.profile}: {chosen.reason}"
            )
        elif not first or chosen.source:
            described = f"from TopologySource {chosen.source}" if chosen.source else "hostname-only"
            self.recorder.event(
                node,
                NORMAL,
                "TopologyProfile",
                f"profile {chosen.profile} {described}: {', '.join(chosen.keys)}",
            )
