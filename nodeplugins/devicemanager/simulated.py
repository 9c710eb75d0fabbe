"""Simulated accelerators: what discovery would report for a node holding N cards of a product.

``make dev``, the e2e tests and the scale benchmarks create nodes from these profiles; the device
manager's simulated mode reports them as if NVML had.  Everything here is a pure function of the
product and the count, so a simulated node and its ``Devices`` ledger always agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from api import API_VERSION, constants
from api.manufacturers import BY_NAME, SHARES_PER_CARD, UNITS_PER_CARD, VISIBILITY_TOKENS_PER_CARD
from api.naming import topology_profile
from nodeplugins.devicemanager.devices import DEFAULT_SLICES, accelerator_group, sanitize

HOSTNAME_PROFILE = topology_profile([constants.LABEL_HOSTNAME])


@dataclass(frozen=True, slots=True)
class Profile:
    """One hardware partition profile: name, VRAM, and the slots it occupies on an empty card."""

    name: str
    memory_mib: int
    compute_slices: int
    memory_slices: int
    count: int  # instances an empty card can host


@dataclass(frozen=True, slots=True)
class Product:
    manufacturer: str
    product: str
    memory_mib: int
    cores: int
    family: str
    compute_capability: str = ""
    driver_version: str = "570.124.06"
    runtime_version: str = "12.8"
    profiles: tuple[Profile, ...] = field(default_factory=tuple)

    @property
    def group(self) -> str:
        """``<manufacturer>-<sanitized product>``, e.g. ``nvidia-h100-80gb-hbm3``."""
        return accelerator_group(self.manufacturer, self.product)


_H100_MIG = (
    Profile("1g.10gb", 9856, 1, 1, 7),
    Profile("1g.20gb", 19968, 1, 2, 4),
    Profile("2g.20gb", 19968, 2, 2, 3),
    Profile("3g.40gb", 40192, 3, 4, 2),
    Profile("4g.40gb", 40192, 4, 4, 1),
    Profile("7g.80gb", 80896, 7, 8, 1),
)

PRODUCTS: dict[str, Product] = {
    "NVIDIA H100 80GB HBM3": Product(
        "nvidia", "NVIDIA H100 80GB HBM3", 81920, 16896, "hopper", "9.0", profiles=_H100_MIG
    ),
    "NVIDIA A10G": Product("nvidia", "NVIDIA A10G", 24576, 9216, "ampere", "8.6"),
    "Tesla T4": Product("nvidia", "Tesla T4", 16384, 2560, "turing", "7.5"),
    "Ascend 910B": Product("ascend", "Ascend 910B", 65536, 24, "910B", runtime_version="8.0"),
}


def _card_id(node: str, product: Product, index: int) -> str:
    return f"{sanitize(node)}-{product.group}-{index}"


def devices(
    node: str, product: Product, count: int, *, partitioned: bool = False, profile: str = HOSTNAME_PROFILE
) -> dict[str, Any]:
    """The ``Devices`` object of a node: spec (capability) and a fresh ledger (every card free)."""
    partitioned = partitioned and bool(product.profiles)
    cards, ledger = [], []
    for index in range(count):
        card, entry = _card(node, product, index, partitioned)
        cards.append(card)
        ledger.append(entry)
    group = product.group
    return {
        "apiVersion": API_VERSION,
        "kind": "Devices",
        "metadata": {
            "name": node,
            "labels": {
                constants.LABEL_OS: "linux",
                constants.LABEL_ARCH: "amd64",
                constants.LABEL_MANAGED: "true",
                constants.label_general_group("generic"): "true",
                constants.label_accelerator_group(group): "true",
                constants.LABEL_TOPOLOGY_PROFILE: profile,
            },
        },
        "spec": {
            "groups": [
                {
                    "id": group,
                    "manufacturer": product.manufacturer,
                    "name": product.product,
                    "memory": product.memory_mib,
                    "cores": product.cores,
                    "driverVersion": product.driver_version,
                    "runtimeVersion": product.runtime_version,
                    "computeCapability": product.compute_capability,
                    "family": product.family,
                    "accelerators": cards,
                    "acceleratorSlicedDetail": _sliced_detail(product, count, partitioned),
                }
            ]
        },
        "status": {"groups": [{"id": group, "manufacturer": product.manufacturer, "accelerators": ledger}]},
    }


def _slices(product: Product) -> int:
    return BY_NAME[product.manufacturer].slices_per_card or DEFAULT_SLICES


def _card(
    node: str, product: Product, index: int, partitioned: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One card of ``spec`` (its topology and slicing capability) and its free ledger entry."""
    status: dict[str, Any] = {"unhealthy": False}
    entry: dict[str, Any] = {"id": _card_id(node, product, index), "index": index, "mode": 0}
    if partitioned:
        status["logicalSliced"] = {"count": 0}
        status["physicalSliced"] = _physical_sliced(product)
        entry.update(
            allocated=0,
            remaining=UNITS_PER_CARD,
            allocatedProfiles=[],
            remainingProfiles=[{"name": p.name, "count": p.count} for p in product.profiles],
        )
    else:
        status["logicalSliced"] = {
            "coresPercentageOvercommit": bool(BY_NAME[product.manufacturer].compute_overcommit),
            "count": _slices(product),
        }
        entry.update(allocated=0, remaining=UNITS_PER_CARD, allocatedSlices=0)
    card = {
        "id": entry["id"],
        "index": index,
        "physicalIndexes": [index],
        "topology": {
            "pciBusId": f"0000:{0x18 + index:02x}:00.0",
            "pciRootId": f"pci0000:{index // 4:02x}",
            "pciClass": "0302",
            "numaAffinity": str(index // 4),
            "cpuAffinity": "",
        },
        "status": status,
    }
    return card, entry


def _physical_sliced(product: Product) -> dict[str, Any]:
    """An empty card's partition capability: every profile with its placements."""
    return {
        "count": max(p.count for p in product.profiles),
        "profiles": [
            {
                "name": p.name,
                "memoryMib": p.memory_mib,
                "computeSlices": p.compute_slices,
                "memorySlices": p.memory_slices,
                "count": p.count,
                "placements": [
                    {"start": s * p.memory_slices, "length": p.memory_slices} for s in range(p.count)
                ],
            }
            for p in product.profiles
        ],
    }


def _sliced_detail(product: Product, count: int, partitioned: bool) -> dict[str, Any]:
    """The group's ``acceleratorSlicedDetail``: the cards' slicing summed."""
    if partitioned:
        return {
            "logical": {"count": 0},
            "physical": {
                "count": count * max(p.count for p in product.profiles),
                "profiles": [
                    {"name": p.name, "count": count * p.count, "memoryMib": p.memory_mib}
                    for p in product.profiles
                ],
            },
        }
    maker = BY_NAME[product.manufacturer]
    return {
        "logical": {
            "coresPercentageOvercommit": bool(maker.compute_overcommit),
            "count": count * _slices(product),
        },
        "physical": {"count": 0},
    }


def node_labels(
    node: str, product: Product, count: int, *, cpu_cores: int = 64, profile: str = HOSTNAME_PROFILE
) -> dict[str, str]:
    """The labels NFD, the device manager and the worker would put on such a node."""
    maker = BY_NAME[product.manufacturer]
    group = product.group
    prefix = constants.PREFIX_ACCELERATABLE
    memory_gi = product.memory_mib // 1024
    return {
        constants.LABEL_OS: "linux",
        constants.LABEL_ARCH: "amd64",
        constants.LABEL_HOSTNAME: node,
        constants.LABEL_MANAGED: "true",
        constants.LABEL_ACCELERATABLE: "true",
        constants.NFD_PCI_PRESENT.format(vendor=maker.pci_vendor_id): "true",
        f"{prefix}{product.manufacturer}": "true",
        f"{prefix}{product.manufacturer}.driver-version": product.driver_version,
        f"{prefix}{product.manufacturer}.runtime-version": product.runtime_version,
        f"{prefix}{group}": "true",
        f"{prefix}{group}.product": sanitize(product.product),
        f"{prefix}{group}.memory": f"{memory_gi}Gi",
        f"{prefix}{group}.cores": str(product.cores),
        f"{prefix}{group}.count": str(count),
        f"{prefix}{group}.family": product.family,
        constants.label_general_group("generic"): "true",
        f"{constants.PREFIX_GENERAL}generic.count": str(cpu_cores),
        constants.LABEL_TOPOLOGY_PROFILE: profile,
    }


def plugin_capacity(product: Product, count: int, *, partitioned: bool = False) -> dict[str, str]:
    """The device-plugin resources the node advertises (the counting keys are the worker's)."""
    maker = BY_NAME[product.manufacturer]
    base = maker.base
    if partitioned and product.profiles:
        capacity = {
            base: "0",
            f"{base}.shared": "0",
            f"{base}.sliced": "0",
            f"{base}.partitioned": str(count * max(p.count for p in product.profiles)),
        }
    else:
        capacity = {
            base: str(count),
            f"{base}.shared": str(count * SHARES_PER_CARD),
            f"{base}.sliced": str(count * _slices(product)),
        }
    capacity[maker.visibility_key] = str(count * VISIBILITY_TOKENS_PER_CARD)
    return capacity
