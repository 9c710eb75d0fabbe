"""``NodeFeatureReconciler``: the worker's NodeFeature per Node and the ``gpustack-cpu-info`` rule.

Per Node: apply NodeFeature ``<node>-gpustack-worker`` (system namespace, owned by the Node) with
:func:`render.worker_labels`; nfd-master turns it into node labels.  Re-rendered when the Node's CPU
identity, cores or ``acceleratable`` marker move, or when a Setting changes.  The rule is applied
once at start (retried while NFD's CRD is not served, as the worker's Prepare step 7 does).  Writes
happen only when what would be applied changed since the last successful apply.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Any

from api import constants, setting_names
from controllers.nodefeatures import render
from controllers.settings import MIXED_ON_NODE, SettingsReader
from kube import changes
from kube.client import ApiError
from kube.manager import Controller, Manager, Watch

log = logging.getLogger("controllers.nodefeatures")

FIELD_MANAGER = "gpustack-worker-nodefeatures"
MANAGEMENT_MANUAL = setting_names.NODE_MANAGEMENT_MANUAL
RULE_KEY = ("NodeFeatureRule", constants.NODE_FEATURE_RULE_CPU)
_INPUT_LABELS = (
    render.CPU_VENDOR_LABEL,
    render.CPU_FAMILY_LABEL,
    render.CPU_ID_LABEL,
    constants.LABEL_ACCELERATABLE,
)


def _inputs(node: dict[str, Any] | None) -> tuple[Any, ...]:
    labels = changes.path(node, "metadata", "labels") or {}
    annotations = changes.path(node, "metadata", "annotations") or {}
    return (
        tuple(labels.get(k) for k in _INPUT_LABELS),
        annotations.get(render.CPU_NAME_ANNOTATION),
        changes.path(node, "status", "capacity", "cpu"),
        changes.path(node, "metadata", "uid"),
    )


class NodeFeatureReconciler(Controller):
    name = "node-features"
    workers = 2
    crd_retry_seconds = 5.0

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager)
        self.nodes = self.informer("Node")
        self.settings = SettingsReader(self.informer("Setting", constants.SYSTEM_NAMESPACE))
        self._applied: dict[str, dict[str, str]] = {}
        self.queue.add(RULE_KEY)

    def watches(self) -> list[Watch]:
        def nodes(event: str, obj: dict, old: dict | None) -> list[Hashable]:
            if event == "DELETED":
                self._applied.pop(changes.path(obj, "metadata", "name") or "", None)
                return []
            if event == "ADDED" or changes.resync(obj, old) or _inputs(obj) != _inputs(old):
                return [changes.path(obj, "metadata", "name")]
            return []

        def settings(event: str, obj: dict, old: dict | None) -> list[Hashable]:
            name = changes.path(obj, "metadata", "name")
            if name in (MANAGEMENT_MANUAL, MIXED_ON_NODE):
                return [changes.path(n, "metadata", "name") for n in self.nodes.list()]
            return []

        return [Watch("Node", nodes), Watch("Setting", settings, namespace=constants.SYSTEM_NAMESPACE)]

    def reconcile(self, key: Hashable) -> float | None:
        if key == RULE_KEY:
            return self.ensure_rule()
        name = str(key)
        node = self.nodes.get(name)
        if node is None or changes.path(node, "metadata", "deletionTimestamp"):
            return None
        labels = render.worker_labels(
            node,
            manual=self.settings.enabled(MANAGEMENT_MANUAL),
            mixed_on_node=self.settings.enabled(MIXED_ON_NODE),
        )
        if self._applied.get(name) == labels:
            return None
        try:
            self.client.apply(render.node_feature(node, labels), field_manager=FIELD_MANAGER)
        except ApiError as error:
            if error.status == 404:  # NFD's CRD is not served (yet)
                return self.crd_retry_seconds
            raise
        self._applied[name] = labels
        return None

    def ensure_rule(self) -> float | None:
        try:
            self.client.apply(render.cpu_info_rule(), field_manager=FIELD_MANAGER)
        except ApiError as error:
            if error.status == 404:
                log.info("NFD's NodeFeatureRule CRD is not served yet; retrying")
                return self.crd_retry_seconds
            raise
        log.info("applied the NodeFeatureRule", extra={"rule": constants.NODE_FEATURE_RULE_CPU})
        return None
