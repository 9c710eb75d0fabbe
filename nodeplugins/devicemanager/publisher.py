"""What the device manager writes to the API: the ``Devices`` object and its NodeFeature (§2.0, §2.1).

Server-side apply with the field manager ``gpustack-device-manager``, so the labels the worker mirrors
onto ``Devices`` (``gpustack.ai/managed``, the topology profile) stay the worker's.  Both objects
are owned by the Node (cluster → cluster for ``Devices``; the NodeFeature lives in the system
namespace), so the garbage collector removes them with it.  The status write is skipped when the
rows are what was last written.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from api import API_VERSION, constants
from kube.client import ApiError, Client
from kube.resources import NFD, NFD_VERSION

log = logging.getLogger("devicemanager.publisher")

FIELD_MANAGER = "gpustack-device-manager"
NFD_NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"


def node_feature_name(node: str) -> str:
    return f"{node}-gpustack-device-manager"


def owner(node: Mapping[str, Any]) -> dict[str, Any]:
    meta = node.get("metadata") or {}
    return {"apiVersion": "v1", "kind": "Node", "name": meta.get("name"), "uid": meta.get("uid")}


def devices_object(
    node: Mapping[str, Any],
    groups: list[dict[str, Any]],
    labels: Mapping[str, str],
    interfaces: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """``interfaces`` is the RDMA inventory; ``None`` (nothing known yet) leaves the field out."""
    name = (node.get("metadata") or {}).get("name")
    spec: dict[str, Any] = {"groups": groups}
    if interfaces is not None:
        spec["interfaces"] = interfaces
    return {
        "apiVersion": API_VERSION,
        "kind": "Devices",
        "metadata": {"name": name, "labels": dict(labels), "ownerReferences": [owner(node)]},
        "spec": spec,
    }


def node_feature_object(node: Mapping[str, Any], labels: Mapping[str, str], namespace: str) -> dict[str, Any]:
    name = (node.get("metadata") or {}).get("name") or ""
    return {
        "apiVersion": f"{NFD}/{NFD_VERSION}",
        "kind": "NodeFeature",
        "metadata": {
            "name": node_feature_name(name),
            "namespace": namespace,
            "labels": {NFD_NODE_NAME_LABEL: name},
            "ownerReferences": [owner(node)],
        },
        "spec": {"labels": dict(labels)},
    }


class Publisher:
    def __init__(self, client: Client, namespace: str = constants.SYSTEM_NAMESPACE) -> None:
        self.client = client
        self.namespace = namespace
        self._last_status: list[dict[str, Any]] | None = None
        self._last_spec: tuple[Any, ...] | None = None

    def spec(
        self,
        node: Mapping[str, Any],
        groups: list[dict[str, Any]],
        devices_labels: Mapping[str, str],
        features: Mapping[str, str],
        *,
        interfaces: list[dict[str, Any]] | None = None,
    ) -> None:
        """The ``Devices`` spec and labels, and the NodeFeature (applied only when they changed).
        The NodeFeature's labels are applied whole: a key no longer sent (a withheld ``rdma.``
        label) is deleted from it."""
        key = (
            groups,
            dict(devices_labels),
            dict(features),
            interfaces,
            (node.get("metadata") or {}).get("uid"),
        )
        if key == self._last_spec:
            return
        self.client.apply(
            devices_object(node, groups, devices_labels, interfaces), field_manager=FIELD_MANAGER
        )
        self.client.apply(node_feature_object(node, features, self.namespace), field_manager=FIELD_MANAGER)
        self._last_spec = key
        self._last_status = None  # a new spec may have reset what the status subresource holds
        log.info(
            "published Devices spec and NodeFeature",
            extra={
                "groups": [g["id"] for g in groups],
                "interfaces": None if interfaces is None else len(interfaces),
            },
        )

    def status(self, node: str, rows: list[dict[str, Any]]) -> bool:
        """The ledger; returns True when a write happened."""
        if rows == self._last_status:
            return False
        body = {
            "apiVersion": API_VERSION,
            "kind": "Devices",
            "metadata": {"name": node},
            "status": {"groups": rows},
        }
        try:
            self.client.apply(body, field_manager=FIELD_MANAGER, subresource="status")
        except ApiError as error:
            if error.not_found:
                self._last_spec = None  # deleted under us: the next pass re-creates it
            raise
        self._last_status = rows
        return True
