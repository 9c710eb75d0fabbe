"""Per-card fit labels on Nodes (``NodeFitLabelReconciler``, devices spec §6.6), keyed by node.

``sliced-max-free-units.fit.gpustack.ai/<aKey>`` is the largest ``remaining`` over the group's cards
that can take a slice and have a free slot (``0`` when all are full); ``shared-free-cards.fit.
gpustack.ai/<aKey>`` counts the group's cards that can still grant a share.  They are computed with
gate 3's own predicates (``fastpath.fit_labels``), removed when the group has no such card or the node is
not managed, patched onto the Node directly (not through NFD), and written only on change after a
3-second coalescing window, so a burst of ledger updates costs one Node write.  The Workload fit pin
(``webhooks.workload``) reads them; without them a pinned Workload would fit no node.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from api import constants
from fastpath import fit_labels, ledger
from kube import changes
from kube.client import ApiError
from kube.manager import Controller, Manager, Watch

FIELD_MANAGER = "gpustack-operator/node-fit-labels"
COALESCE_SECONDS = 3.0
is_fit_label = constants.is_fit_label


def desired_fit_labels(node: Mapping[str, Any], devices: Mapping[str, Any] | None) -> dict[str, str]:
    """The fit labels the node should carry (none when unmanaged or without a ledger)."""
    labels = changes.path(node, "metadata", "labels") or {}
    if devices is None or labels.get(constants.LABEL_MANAGED) != "true":
        return {}
    return dict(fit_labels.fit_labels(ledger.node_ledger(dict(devices))))


def fit_label_patch(node: Mapping[str, Any], want: Mapping[str, str]) -> dict[str, str | None]:
    """A merge patch of ``metadata.labels``: set what differs, delete what is stale."""
    have = {k: v for k, v in (changes.path(node, "metadata", "labels") or {}).items() if is_fit_label(k)}
    patch: dict[str, str | None] = {k: v for k, v in want.items() if have.get(k) != v}
    patch.update({k: None for k in have if k not in want})
    return patch


class NodeFitLabelReconciler(Controller):
    name = "node-fit-labels"
    workers = 2

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager)
        self.nodes = self.informer("Node")
        self.devices = self.informer("Devices")

    def watches(self) -> list[Watch]:
        def later(name: str) -> list[str]:
            self.queue.add_after(name, COALESCE_SECONDS)
            return []

        def nodes(event: str, obj: dict, old: dict | None) -> list[str]:
            if event == "DELETED":
                return []
            if changes.resync(obj, old) or event == "ADDED":
                return [changes.name_of(obj)]
            # Our own label writes wake nothing; a managed flip or a stray edit of ours does.
            if changes.labels_moved(obj, old, lambda k: k == constants.LABEL_MANAGED or is_fit_label(k)):
                return later(changes.name_of(obj))
            return []

        def devices(event: str, obj: dict, old: dict | None) -> list[str]:
            if changes.moved(event, obj, old, ("spec",), ("status",)):
                return later(changes.name_of(obj))
            return []

        return [Watch("Node", nodes), Watch("Devices", devices)]

    def reconcile(self, key: Hashable) -> float | None:
        name = str(key)
        node = self.nodes.get(name)
        if node is None:
            return None
        patch = fit_label_patch(node, desired_fit_labels(node, self.devices.get(name)))
        if not patch:
            return None
        try:
            self.client.patch("Node", name, {"metadata": {"labels": patch}}, field_manager=FIELD_MANAGER)
        except ApiError as error:
            if not error.not_found:
                raise
        return None
