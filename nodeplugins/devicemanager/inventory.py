"""What one discovery pass found on a node: plain, immutable values every backend produces.

A backend (NVML, or a simulated profile for the manufacturers without a real binding here) turns the
hardware into an :class:`Inventory`; :mod:`nodeplugins.devicemanager.devices` renders it into the
``Devices`` spec and the node-feature labels, and the allocator serves its cards.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class PartitionProfile:
    """One hardware partition profile a card offers (vendor spelling, e.g. ``3g.40gb``)."""

    name: str
    memory_mib: int
    compute_slices: int
    memory_slices: int
    count: int  # instances an empty card can host
    placements: tuple[tuple[int, int], ...]  # (start, length) in memory slices, empty-card legal slots


@dataclass(frozen=True, slots=True)
class Fabric:
    """The scale-up fabric domain a card reports (NVLink/MNNVL, an Ascend super pod over UB).

    ``id`` is comparable across nodes; ``clique`` is the partition inside the domain whose members
    can address one another ("" when the manufacturer reports none); ``members`` the domain's size
    (0 when not reported).  A backend records one only once the domain is established."""

    kind: str  # the interconnect: nvlink, ub, xgmi (ids of different kinds share no namespace)
    id: str
    clique: str = ""
    members: int = 0


@dataclass(frozen=True, slots=True)
class Card:
    """One accelerator as detected."""

    id: str  # universally unique (a UUID, never a PCI address)
    index: int  # logical, from 0, in enumeration order
    physical_index: int  # the driver's own numbering (NVML index, minor number, ...)
    product: str
    memory_mib: int
    cores: int = 0
    compute_capability: str = ""
    family: str = ""
    pci_bus_id: str = ""
    numa: str = ""
    cpu_affinity: str = ""
    unhealthy: bool = False
    partitioned: bool = False  # in a hardware partitioning mode (MIG on)
    profiles: tuple[PartitionProfile, ...] = ()  # offered when partitioned
    device_nodes: tuple[str, ...] = ()  # host device nodes a container needs for this card
    fabric: Fabric | None = None  # its scale-up fabric domain, once established


@dataclass(frozen=True, slots=True)
class Inventory:
    """One manufacturer's cards on the node, with the driver stack they share."""

    manufacturer: str
    driver_version: str = ""
    runtime_version: str = ""
    cards: tuple[Card, ...] = field(default_factory=tuple)
    control_nodes: tuple[str, ...] = ()  # node-level device nodes every container of this vendor needs

    def card(self, card_id: str) -> Card | None:
        for card in self.cards:
            if card.id == card_id:
                return card
        return None
