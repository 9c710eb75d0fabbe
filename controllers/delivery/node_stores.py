"""The worker's NodeModelStore writer (model-delivery spec §4.4), keyed by node name.

- Create ``NodeModelStore/<node>`` (owner: the Node) once the node's ``CSINode`` lists
  ``model.csi.gpustack.ai``; recreate it when deleted while the node runs the plugin.
- Never delete one because the driver left ``CSINode`` for a moment (every plugin restart does
  that); delete **all** of them while the ``CSIDriver`` object does not exist.
- ``spec`` is the cluster Settings (§6) under the node's pool layer (§2.3, §4.4 item 2): the
  ``ModelStore`` whose selector matches the node — the alphabetically first when several do — overrides
  the watermarks and download limits it states, field by field (``bytesPerSecond: 0`` is unlimited on
  that pool), and its name lands in ``spec.store``. ``spec.peerSync`` carries the Setting
  ``model-store-peer-sync``. It is applied with this controller's field manager so that
  ``spec.pinned`` (the prefetch controller's) and ``status`` (the plugin's) are left alone; hand
  edits of the fields it owns are overwritten. A Setting or ModelStore change rewrites every object.
  A value that fails its check is never written: a Setting's default is, a store's override is
  skipped, and the refusal is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from typing import Any

from api import GROUP, VERSION, constants, setting_names
from api.booleans import parse_bool
from api.prefetch import pool_layer
from api.settings import SETTINGS, cross_check, definition
from controllers.settings import SettingsReader
from fastpath.quantity import parse as parse_quantity
from kube import changes
from kube.manager import Controller, Manager, Watch

log = logging.getLogger("controllers.delivery.node_stores")
FIELD_MANAGER = "gpustack-operator/node-model-stores"
ALL = "*"
SPEC_SETTINGS = (
    setting_names.MODEL_STORE_HIGH_WATERMARK,
    setting_names.MODEL_STORE_LOW_WATERMARK,
    setting_names.MODEL_STORE_DOWNLOAD_CONCURRENCY,
    setting_names.MODEL_STORE_DOWNLOAD_BANDWIDTH,
    setting_names.MODEL_ARTIFACT_HUGGINGFACE_ENDPOINT,
    setting_names.MODEL_ARTIFACT_HTTPS_PROXY,
    setting_names.MODEL_ARTIFACT_NO_PROXY,
    setting_names.MODEL_ARTIFACT_CA_BUNDLE,
    setting_names.MODEL_STORE_PEER_SYNC,
)


def checked_values(read: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """Each spec Setting's value, its default where the value fails its check; and the refusals."""
    values: dict[str, str] = {}
    problems: list[str] = []
    for name in SPEC_SETTINGS:
        value = read.get(name, definition(name).default).strip()
        problem = SETTINGS[name].validator(value)
        if problem:
            problems.append(f"{name}: {problem}")
            value = definition(name).default
        values[name] = value
    for name, problem in cross_check(values):  # the pair clashes: both take their defaults
        problems.append(f"{name}: {problem}")
        values[name] = definition(name).default
    return values, problems


def _whole(value: Any, low: int, high: int | None = None) -> bool:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value >= low
        and (high is None or value <= high)
    )


def store_overrides(store: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The overrides a ModelStore states that pass their checks (``{section: {field: value}}``), and
    the ones skipped. Watermarks override as a pair."""
    spec = store.get("spec") or {}
    out: dict[str, Any] = {}
    skipped: list[str] = []
    marks = spec.get("watermarks")
    if isinstance(marks, Mapping):
        high, low = marks.get("highPercent"), marks.get("lowPercent")
        if (
            isinstance(high, int)
            and isinstance(low, int)
            and _whole(high, 2, 95)
            and _whole(low, 1, 94)
            and low < high
        ):
            out["watermarks"] = {"highPercent": high, "lowPercent": low}
        else:
            skipped.append("spec.watermarks")
    download = spec.get("download")
    if isinstance(download, Mapping):
        section: dict[str, Any] = {}
        if "concurrency" in download and download["concurrency"] is not None:
            if _whole(download["concurrency"], 1, 64):
                section["concurrency"] = download["concurrency"]
            else:
                skipped.append("spec.download.concurrency")
        if "bytesPerSecond" in download and download["bytesPerSecond"] is not None:
            if _whole(download["bytesPerSecond"], 0):
                section["bytesPerSecond"] = download["bytesPerSecond"]
            else:
                skipped.append("spec.download.bytesPerSecond")
        if section:
            out["download"] = section
    return out, skipped


def render_spec(values: Mapping[str, str], store: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The node's spec: the checked Settings, then the winning store's overrides and name."""
    spec = _settings_spec(values)
    spec["peerSync"] = parse_bool(values.get(setting_names.MODEL_STORE_PEER_SYNC, "true"))
    if store is not None:
        overrides, _ = store_overrides(store)
        for section, fields in overrides.items():
            spec[section] = {**spec[section], **fields}
        spec["store"] = (store.get("metadata") or {}).get("name")
    return spec


def _settings_spec(values: Mapping[str, str]) -> dict[str, Any]:
    numerator, denominator = parse_quantity(values[setting_names.MODEL_STORE_DOWNLOAD_BANDWIDTH])
    return {
        "watermarks": {
            "highPercent": int(values[setting_names.MODEL_STORE_HIGH_WATERMARK]),
            "lowPercent": int(values[setting_names.MODEL_STORE_LOW_WATERMARK]),
        },
        "download": {
            "concurrency": int(values[setting_names.MODEL_STORE_DOWNLOAD_CONCURRENCY]),
            "bytesPerSecond": max(numerator // denominator, 0),
        },
        "hub": {
            "huggingFaceEndpoint": values[setting_names.MODEL_ARTIFACT_HUGGINGFACE_ENDPOINT],
            "httpsProxy": values[setting_names.MODEL_ARTIFACT_HTTPS_PROXY],
            "noProxy": values[setting_names.MODEL_ARTIFACT_NO_PROXY],
            "caBundleConfigMap": values[setting_names.MODEL_ARTIFACT_CA_BUNDLE],
        },
    }


def render_store(node: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    meta = node.get("metadata") or {}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeModelStore",
        "metadata": {
            "name": meta.get("name"),
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": meta.get("name"), "uid": meta.get("uid")}
            ],
        },
        "spec": dict(spec),
    }


def lists_driver(csinode: Mapping[str, Any] | None) -> bool:
    drivers = ((csinode or {}).get("spec") or {}).get("drivers") or []
    return any(isinstance(d, Mapping) and d.get("name") == constants.CSI_DRIVER_MODEL for d in drivers)


class NodeModelStoreWriter(Controller):
    name = "node-model-stores"

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager)
        self.nodes = self.informer("Node")
        self.csinodes = self.informer("CSINode")
        self.drivers = self.informer("CSIDriver")
        self.stores = self.informer("NodeModelStore")
        self.model_stores = self.informer("ModelStore")
        self.settings = SettingsReader(self.informer("Setting", constants.SYSTEM_NAMESPACE))
        self._reported: tuple[str, ...] = ()

    def watches(self) -> list[Watch]:
        def by_name(event: str, obj: dict, old: dict | None) -> list[str]:
            return [changes.name_of(obj)]

        def everything(event: str, obj: dict, old: dict | None) -> list[str]:
            return [ALL]

        def driver(event: str, obj: dict, old: dict | None) -> list[str]:
            return [ALL] if changes.name_of(obj) == constants.CSI_DRIVER_MODEL else []

        def setting(event: str, obj: dict, old: dict | None) -> list[str]:
            return [ALL] if changes.name_of(obj) in SPEC_SETTINGS else []

        return [
            Watch("CSINode", by_name),
            Watch("Node", by_name),
            Watch("NodeModelStore", by_name),
            Watch("CSIDriver", driver),
            Watch("ModelStore", everything),
            Watch("Setting", setting, namespace=constants.SYSTEM_NAMESPACE),
        ]

    def reconcile(self, key: Hashable) -> float | None:
        if key == ALL:
            names = {changes.name_of(o) for o in (*self.nodes.list(), *self.stores.list())}
            for name in sorted(names):
                self.queue.add(name)
            return None
        node_name = str(key)
        existing = self.stores.get(node_name)
        if self.drivers.get(constants.CSI_DRIVER_MODEL) is None:
            if existing is not None:
                self.client.delete("NodeModelStore", node_name)
            return None
        node = self.nodes.get(node_name)
        if node is None:
            return None  # the Node is gone: its NodeModelStore goes with it (owner reference)
        if existing is None and not lists_driver(self.csinodes.get(node_name)):
            return None
        values, problems = checked_values({name: self.settings.value(name) for name in SPEC_SETTINGS})
        layer = pool_layer(node, self.model_stores.list())
        store = self.model_stores.get(layer.winner) if layer.winner else None
        if store is not None:
            problems += [
                f"ModelStore {layer.winner} {path}: fails its check; skipped"
                for path in store_overrides(store)[1]
            ]
        if tuple(problems) != self._reported and problems:
            log.warning(
                "settings refused for NodeModelStore spec; defaults written", extra={"problems": problems}
            )
        self._reported = tuple(problems)
        wanted = render_store(node, render_spec(values, store))
        if existing is not None and _owns(existing, wanted):
            return None
        self.client.apply(wanted, field_manager=FIELD_MANAGER)
        return None


def _owns(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether ``existing`` already carries every field ``wanted`` sets (and no store it dropped)."""
    spec = existing.get("spec") or {}
    for key, value in wanted["spec"].items():
        if isinstance(value, Mapping):
            have = spec.get(key) or {}
            if any(have.get(k) != v for k, v in value.items()):
                return False
        elif spec.get(key) != value:
            return False
    if "store" not in wanted["spec"] and spec.get("store"):
        return False
    owners = (existing.get("metadata") or {}).get("ownerReferences") or []
    return any(o.get("uid") == wanted["metadata"]["ownerReferences"][0]["uid"] for o in owners)
