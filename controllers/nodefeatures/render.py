"""Pure rendering of the worker's node features (§2.0, §3.1).

- :func:`general_key` — ``<gKey>`` = ``<cpuManufacturer>-<sanitized cpu name>`` (``amd-epyc-7763``),
  else ``<cpuManufacturer>-<family>-<id>`` from NFD's cpu-model labels, ``generic`` only when NFD
  reports no CPU identity at all.  Never encodes os/arch.
- :func:`worker_labels` — the labels of NodeFeature ``<node>-gpustack-worker``:
  ``gpustack.ai/managed: "true"`` (unless ``node-management-manual``),
  ``general.feature.gpustack.ai/<cpuMfr>``, ``…/<gKey>`` and ``…/<gKey>.count`` (cores), and
  ``feature.gpustack.ai/cpu-only: "true"`` on accelerator-less nodes when
  ``instance-type-mixed-on-node`` is false.
- :func:`cpu_info_rule` — the ``gpustack-cpu-info`` NodeFeatureRule: CPU detail annotations from
  ``cpu.model``, and ``feature.gpustack.ai/acceleratable: "false"`` on nodes with no PCI device of a
  managed manufacturer in the acceleratable classes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from api import constants
from api.manufacturers import MANUFACTURERS
from kube.resources import NFD, NFD_VERSION

NFD_NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
CPU_VENDOR_LABEL = "feature.node.kubernetes.io/cpu-model.vendor_id"
CPU_FAMILY_LABEL = "feature.node.kubernetes.io/cpu-model.family"
CPU_ID_LABEL = "feature.node.kubernetes.io/cpu-model.id"
CPU_NAME_ANNOTATION = constants.PREFIX_CPU_ANNOTATION + "name"
PCI_CLASS_PREFIXES = ("02", "03", "0b", "12")
CPU_DETAILS = (
    "name", "family", "physical-cores", "threads-per-core", "logical-cores", "stepping", "cache-line",
    "hz", "boost-freq", "cache-l1i", "cache-l1d", "cache-l2", "cache-l3",
)  # fmt: skip
MAX_KEY = 57  # "<gKey>.count" must fit a 63-character label name
_TRADEMARKS = re.compile(r"\((?:R|TM|C)\)|®|™", re.IGNORECASE)
_TAIL = re.compile(r"\s+(?:CPU\s*)?@.*$|\s+\d+-Core\s+Processor.*$|\s+Processor\s*$", re.IGNORECASE)


def _sanitize(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def cpu_manufacturer(vendor_id: str | None) -> str:
    """cpuid's vendor name lower-cased (``Intel`` → ``intel``); ``generic`` when unknown."""
    name = _sanitize(vendor_id or "")
    return "generic" if name in ("", "vendorunknown", "unknown") else name


def _reported(value: str | None) -> str:
    """An NFD value, or ``""`` for none (a value starting with ``@`` is an unresolved template)."""
    return "" if not value or value.startswith("@") else value


def general_key(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    vendor = _reported(labels.get(CPU_VENDOR_LABEL))
    maker = cpu_manufacturer(vendor)
    name = _reported(annotations.get(CPU_NAME_ANNOTATION))
    if name:
        cleaned = _sanitize(_TAIL.sub("", _TRADEMARKS.sub("", name)))
        if maker != "generic" and cleaned.startswith(maker + "-"):
            cleaned = cleaned[len(maker) + 1 :]
        if cleaned and cleaned != maker:
            return f"{maker}-{cleaned}"[:MAX_KEY].rstrip("-")
    family, model = _reported(labels.get(CPU_FAMILY_LABEL)), _reported(labels.get(CPU_ID_LABEL))
    if family or model or vendor:
        parts = [maker, _sanitize(family), _sanitize(model)]
        return "-".join(p for p in parts if p)[:MAX_KEY].rstrip("-")
    return constants.GENERIC_GROUP


def _cores(node: Mapping[str, Any]) -> int:
    raw = str((((node.get("status") or {}).get("capacity") or {}).get("cpu")) or "0")
    try:
        return int(raw[:-1]) // 1000 if raw.endswith("m") else int(raw)
    except ValueError:
        return 0


def worker_labels(node: Mapping[str, Any], *, manual: bool, mixed_on_node: bool) -> dict[str, str]:
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    out: dict[str, str] = {}
    if not manual:
        out[constants.LABEL_MANAGED] = "true"
    gkey = general_key(labels, annotations)
    maker = cpu_manufacturer(_reported(labels.get(CPU_VENDOR_LABEL)))
    if maker != "generic":
        out[constants.label_general_group(maker)] = "true"
    out[constants.label_general_group(gkey)] = "true"
    out[f"{constants.PREFIX_GENERAL}{gkey}.count"] = str(_cores(node))
    if not mixed_on_node and labels.get(constants.LABEL_ACCELERATABLE) == "false":
        out[constants.LABEL_CPU_ONLY] = "true"
    return out


def node_feature(
    node: Mapping[str, Any], labels: Mapping[str, str], namespace: str = constants.SYSTEM_NAMESPACE
) -> dict[str, Any]:
    meta = node.get("metadata") or {}
    name = meta.get("name") or ""
    return {
        "apiVersion": f"{NFD}/{NFD_VERSION}",
        "kind": "NodeFeature",
        "metadata": {
            "name": f"{name}-gpustack-worker",
            "namespace": namespace,
            "labels": {NFD_NODE_NAME_LABEL: name},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": meta.get("uid")}],
        },
        "spec": {"labels": dict(labels)},
    }


def cpu_info_rule(vendor_ids: Iterable[str] | None = None) -> dict[str, Any]:
    vendors = sorted(set(vendor_ids if vendor_ids is not None else (m.pci_vendor_id for m in MANUFACTURERS)))
    annotations = {
        constants.PREFIX_CPU_ANNOTATION + item: "@cpu.model." + item.replace("-", "_") for item in CPU_DETAILS
    }
    return {
        "apiVersion": f"{NFD}/{NFD_VERSION}",
        "kind": "NodeFeatureRule",
        "metadata": {
            "name": constants.NODE_FEATURE_RULE_CPU,
            "labels": {constants.LABEL_PART_OF: "gpustack-operator"},
        },
        "spec": {
            "rules": [
                {
                    "name": "cpu detail annotations",
                    "annotations": annotations,
                    "matchFeatures": [
                        {"feature": "cpu.model", "matchExpressions": {"vendor_id": {"op": "Exists"}}}
                    ],
                },
                {
                    "name": "node has an acceleratable device",
                    "vars": {"has-acceleratable-devices": "true"},
                    "matchFeatures": [
                        {
                            "feature": "pci.device",
                            "matchExpressions": {
                                "class": {"op": "InRegexp", "value": [f"^{p}" for p in PCI_CLASS_PREFIXES]},
                                "vendor": {"op": "In", "value": vendors},
                            },
                        }
                    ],
                },
                {
                    "name": "node without an acceleratable device",
                    "labels": {constants.LABEL_ACCELERATABLE: "false"},
                    "matchFeatures": [
                        {
                            "feature": "rule.matched",
                            "matchExpressions": {"has-acceleratable-devices": {"op": "DoesNotExist"}},
                        }
                    ],
                },
            ]
        },
    }
