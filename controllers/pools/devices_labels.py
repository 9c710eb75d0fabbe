"""The ``Devices`` ledger's labels, kept in step with its Node (``NodeDevicesReconciler``, §2.1).

The device manager writes the object; the worker mirrors ``gpustack.ai/managed`` and
``topology.gpustack.ai/profile`` from the same-named Node (a label the Node lacks is removed), so a
pool's flavor selector labels find its ledgers, and deletes the object once an **uncached** read
shows the Node gone (a cold or lagging cache never deletes a live node's ledger).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from typing import Any

from api import constants
from controllers.pools import render
from kube import changes
from kube.client import ApiError
from kube.events import NORMAL
from kube.manager import Controller, Manager, Watch

log = logging.getLogger("controllers.pools.devices_labels")

MIRRORED = (constants.LABEL_MANAGED, constants.LABEL_TOPOLOGY_PROFILE)


def label_patch(devices: Mapping[str, Any], node: Mapping[str, Any]) -> dict[str, str | None]:
    """The label merge-patch that makes ``devices`` mirror ``node`` (``None`` removes)."""
    have = changes.path(devices, "metadata", "labels") or {}
    want = changes.path(node, "metadata", "labels") or {}
    return {k: want.get(k) for k in MIRRORED if have.get(k) != want.get(k)}


class DevicesLabelReconciler(Controller):
    name = "devices-labels"
    workers = 4  # one key per node: independent, I/O bound

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager)
        self.nodes = self.informer("Node")
        self.devices = self.informer("Devices")

    def watches(self) -> list[Watch]:
        def nodes(event: str, obj: dict, old: dict | None) -> list[str]:
            if event == "DELETED" or changes.labels_moved(obj, old, lambda k: k in MIRRORED):
                return [render.name_of(obj)]
            return [render.name_of(obj)] if event == "ADDED" or changes.resync(obj, old) else []

        def devices(event: str, obj: dict, old: dict | None) -> list[str]:
            if event == "DELETED":
                return []
            if changes.moved(event, obj, old) or changes.labels_moved(obj, old, lambda k: k in MIRRORED):
                return [render.name_of(obj)]
            return []

        return [Watch("Node", nodes), Watch("Devices", devices)]

    def reconcile(self, key: Hashable) -> float | None:
        name = str(key)
        devices = self.devices.get(name)
        if devices is None:
            return None
        node = self.nodes.get(name)
        if node is None:
            node = self.client.get("Node", name)
            if node is None:
                log.info("deleting the ledger of a node that is gone", extra={"devices": name})
                self.recorder.event(devices, NORMAL, "NodeGone", f"Node {name} no longer exists")
                self.client.delete("Devices", name)
                return None
        patch = label_patch(devices, node)
        if patch:
            try:
                self.client.patch("Devices", name, {"metadata": {"labels": patch}})
            except ApiError as error:
                if not error.not_found:
                    raise
        return None
