"""Render what discovery found into the ``Devices`` spec and the device manager's node features.

Pure functions of an :class:`~nodeplugins.devicemanager.inventory.Inventory` (§2.0, §2.1):

- :func:`spec_groups` — ``spec.groups``: one group per model (``<aKey>``, split by VRAM under
  ``GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY``), cards by index, each with its topology and slicing
  capability (a partitioned card reports ``logicalSliced.count = 0`` plus profiles, an unpartitioned
  one the reverse), and the group's summed ``acceleratorSlicedDetail``;
- :func:`feature_labels` — the ``acceleratable.feature.gpustack.ai/...`` labels of the NodeFeature
  ``<node>-gpustack-device-manager``;
- :func:`devices_labels` — the flavor selector labels the ``Devices`` object carries.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from api import constants
from api.booleans import env_bool
from api.manufacturers import BY_NAME
from nodeplugins.devicemanager.fabric import fabric_labels
from nodeplugins.devicemanager.inventory import Card, Inventory
from nodeplugins.devicemanager.rdma.pci import Coordinates

ENV_GROUP_ID_WITH_MEMORY = "GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY"
DEFAULT_SLICES = 16  # manufacturers whose logical slice count the docs do not state
PCI_CLASS_3D = "0302"
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9._-]+")


def sanitize(text: str) -> str:
    """Lower-case; runs of anything but letters and digits become one ``-``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def accelerator_group(manufacturer: str, product: str) -> str:
    """``<aKey>`` = ``<manufacturer>-<sanitized product>`` (≤63 chars), e.g. ``nvidia-a10g``."""
    name = sanitize(product)
    if name.startswith(manufacturer + "-"):
        name = name[len(manufacturer) + 1 :]
    return f"{manufacturer}-{name}"[:63].rstrip("-")


def label_value(text: str) -> str:
    """A label value: ≤63 chars of ``[A-Za-z0-9._-]``, alphanumeric at both ends."""
    return _LABEL_VALUE.sub("-", text)[:63].strip("-._")


def memory_quantity(mib: int) -> str:
    """VRAM at the largest binary unit that keeps it whole-ish: ``24576`` → ``24Gi``."""
    if mib >= 1024 * 1024 and mib % (1024 * 1024) == 0:
        return f"{mib // (1024 * 1024)}Ti"
    if mib >= 1024:
        return f"{mib // 1024}Gi"
    return f"{mib}Mi"


def group_id_with_memory(env: Mapping[str, str] | None = None) -> bool:
    """``GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY`` (default false), read by the one boolean parser."""
    return env_bool(ENV_GROUP_ID_WITH_MEMORY, False, env)


def group_id(card: Card, manufacturer: str, env: Mapping[str, str] | None = None) -> str:
    base = accelerator_group(manufacturer, card.product)
    if group_id_with_memory(env):
        return f"{base}-{max(1, round(card.memory_mib / 1024))}g"
    return base


def _pci_bus_id(raw: str) -> str:
    """``00000000:18:00.0`` (NVML) → ``0000:18:00.0``, lower-case."""
    raw = raw.strip().lower()
    domain, sep, rest = raw.partition(":")
    if sep and len(domain) > 4:
        domain = domain[-4:]
    return f"{domain}{sep}{rest}" if sep else raw


def _slices(manufacturer: str) -> int:
    return BY_NAME[manufacturer].slices_per_card or DEFAULT_SLICES


def _card_spec(card: Card, manufacturer: str, places: Mapping[str, Coordinates]) -> dict[str, Any]:
    maker = BY_NAME[manufacturer]
    status: dict[str, Any] = {"unhealthy": card.unhealthy}
    if card.partitioned and card.profiles:
        status["logicalSliced"] = {"count": 0}
        status["physicalSliced"] = {
            "count": max(p.count for p in card.profiles),
            "profiles": [
                {
                    "name": p.name,
                    "memoryMib": p.memory_mib,
                    "computeSlices": p.compute_slices,
                    "memorySlices": p.memory_slices,
                    "count": p.count,
                    "placements": [{"start": s, "length": n} for s, n in p.placements],
                }
                for p in card.profiles
            ],
        }
    else:
        status["logicalSliced"] = {
            "coresPercentageOvercommit": bool(maker.compute_overcommit),
            "count": _slices(manufacturer),
        }
    bus = _pci_bus_id(card.pci_bus_id)
    place = places.get(bus)
    topology: dict[str, Any] = {
        "pciBusId": bus,
        "pciRootId": place.root_id if place is not None else "",
        "pciClass": PCI_CLASS_3D,
        "numaAffinity": card.numa,
        "cpuAffinity": card.cpu_affinity,
    }
    if place is not None and place.switches:
        topology["pciSwitches"] = list(place.switches)
    if card.fabric is not None:
        fabric: dict[str, Any] = {"kind": card.fabric.kind, "id": card.fabric.id}
        if card.fabric.clique:
            fabric["cliqueId"] = card.fabric.clique
        if card.fabric.members:
            fabric["memberCount"] = card.fabric.members
        topology["fabric"] = fabric
    return {
        "id": card.id,
        "index": card.index,
        "physicalIndexes": [card.physical_index],
        "topology": topology,
        "status": status,
    }


def _sliced_detail(cards: list[Card], manufacturer: str) -> dict[str, Any]:
    maker = BY_NAME[manufacturer]
    logical = sum(_slices(manufacturer) for card in cards if not (card.partitioned and card.profiles))
    physical_count = 0
    profiles: dict[str, dict[str, Any]] = {}
    for card in cards:
        if not (card.partitioned and card.profiles):
            continue
        physical_count += max(p.count for p in card.profiles)
        for p in card.profiles:
            entry = profiles.setdefault(p.name, {"name": p.name, "count": 0, "memoryMib": p.memory_mib})
            entry["count"] += p.count
    detail: dict[str, Any] = {"logical": {"count": logical}, "physical": {"count": physical_count}}
    if logical:
        detail["logical"]["coresPercentageOvercommit"] = bool(maker.compute_overcommit)
    if profiles:
        detail["physical"]["profiles"] = list(profiles.values())
    return detail


def pci_addresses(inventory: Inventory) -> list[str]:
    """The cards' PCI addresses as the ``Devices`` topology spells them (``0000:18:00.0``)."""
    return [_pci_bus_id(card.pci_bus_id) for card in inventory.cards if card.pci_bus_id]


def spec_groups(
    inventory: Inventory,
    env: Mapping[str, str] | None = None,
    places: Mapping[str, Coordinates] | None = None,
) -> list[dict[str, Any]]:
    """``spec.groups`` for one manufacturer's inventory (groups in order of their first card).
    ``places`` are the cards' PCI coordinates by address (the sysfs walk the RDMA inventory uses:
    ``pciRootId`` is the outermost bridge, ``pciSwitches`` the bridge path); a card not found there
    has an unknown (empty) ``pciRootId`` and no ``pciSwitches``."""
    grouped: dict[str, list[Card]] = {}
    for card in sorted(inventory.cards, key=lambda c: c.index):
        grouped.setdefault(group_id(card, inventory.manufacturer, env), []).append(card)
    groups = []
    for gid, cards in grouped.items():
        first = cards[0]
        group: dict[str, Any] = {
            "id": gid,
            "manufacturer": inventory.manufacturer,
            "name": first.product,
            "memory": first.memory_mib,
        }
        optional = {
            "cores": first.cores,
            "driverVersion": inventory.driver_version,
            "runtimeVersion": inventory.runtime_version,
            "computeCapability": first.compute_capability,
            "family": first.family,
        }
        group.update({k: v for k, v in optional.items() if v})
        group["accelerators"] = [_card_spec(card, inventory.manufacturer, places or {}) for card in cards]
        group["acceleratorSlicedDetail"] = _sliced_detail(cards, inventory.manufacturer)
        groups.append(group)
    return groups


def canonical_groups(groups: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Groups by manufacturer then first card index, cards by index (§2.1's stored order)."""

    def first_index(group: Mapping[str, Any]) -> int:
        cards = group.get("accelerators") or []
        return min((int(card.get("index", 0)) for card in cards), default=0)

    out = []
    for group in sorted(groups, key=lambda g: (str(g.get("manufacturer", "")), first_index(g))):
        copy = dict(group)
        copy["accelerators"] = sorted(group.get("accelerators") or [], key=lambda a: int(a.get("index", 0)))
        out.append(copy)
    return out


def feature_labels(inventories: Iterable[Inventory], env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The NodeFeature labels for what was detected (empty when nothing was)."""
    prefix = constants.PREFIX_ACCELERATABLE
    labels: dict[str, str] = {}
    for inventory in inventories:
        if not inventory.cards:
            continue
        mfr = inventory.manufacturer
        labels[f"{prefix}{mfr}"] = "true"
        if inventory.driver_version:
            labels[f"{prefix}{mfr}.driver-version"] = label_value(inventory.driver_version)
        if inventory.runtime_version:
            labels[f"{prefix}{mfr}.runtime-version"] = label_value(inventory.runtime_version)
        for group in spec_groups(inventory, env):
            key = accelerator_group(mfr, group["name"])
            labels[f"{prefix}{key}"] = "true"
            labels[f"{prefix}{key}.product"] = label_value(sanitize(group["name"]))
            labels[f"{prefix}{key}.memory"] = memory_quantity(int(group["memory"]))
            if group.get("cores"):
                labels[f"{prefix}{key}.cores"] = str(group["cores"])
            count = len(group["accelerators"]) + int(labels.get(f"{prefix}{key}.count", "0"))
            labels[f"{prefix}{key}.count"] = str(count)
            if group.get("family"):
                labels[f"{prefix}{key}.family"] = label_value(group["family"])
            if group.get("computeCapability"):
                labels[f"{prefix}{key}.comcap"] = label_value(group["computeCapability"])
    if labels:
        labels[constants.LABEL_ACCELERATABLE] = "true"
    return labels


def node_labels(inventory: Inventory, groups: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The NodeFeature labels besides the ``rdma.`` ones: the accelerator features of the inventory
    and the fabric domain its published ``groups`` agree on."""
    return {**feature_labels([inventory]), **fabric_labels(groups)}


def devices_labels(groups: Iterable[Mapping[str, Any]], node_labels: Mapping[str, str]) -> dict[str, str]:
    """The labels the device manager stamps on ``Devices``: os/arch and the general group copied
    from the Node (the worker mirrors ``gpustack.ai/managed`` and the topology profile itself), and
    ``acceleratable.feature.gpustack.ai/<aKey>: "true"`` per group."""
    labels = {k: node_labels[k] for k in (constants.LABEL_OS, constants.LABEL_ARCH) if node_labels.get(k)}
    for key, value in node_labels.items():
        if (
            key.startswith(constants.PREFIX_GENERAL)
            and value == "true"
            and "." not in key[len(constants.PREFIX_GENERAL) :]
        ):
            labels[key] = "true"
    for group in groups:
        labels[constants.label_accelerator_group(accelerator_group(group["manufacturer"], group["name"]))] = (
            "true"
        )
    return labels
