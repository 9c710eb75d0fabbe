"""What every manufacturer backend provides: discovery, and what a container is handed.

A backend's :meth:`Backend.discover` returns an :class:`~..inventory.Inventory` or raises
:class:`DiscoveryError` — a pass that could not measure, never "no accelerators" (§2.0, §11.21).
:meth:`Backend.inject` turns the cards one container was granted into the environment, device
nodes and mounts the kubelet hands it (``Allocate``'s ``ContainerAllocateResponse``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from api.manufacturers import UNITS_PER_CARD
from nodeplugins.devicemanager.inventory import Card, Inventory

if TYPE_CHECKING:
    from nodeplugins.devicemanager.partitions import Partitions

FAMILY_EXCLUSIVE = "exclusive"
FAMILY_SHARED = "shared"
FAMILY_SLICED = "sliced"
FAMILY_PARTITIONED = "partitioned"
FAMILY_VISIBILITY = "visibility"


class DiscoveryError(RuntimeError):
    """This pass could not measure (driver absent or failing): keep the last detected state."""


@dataclass(frozen=True, slots=True)
class Grant:
    """What one container takes from one card."""

    card: Card
    units: int  # out of M = 1,600,000
    profile: str = ""  # partitions: the vendor profile
    start: int | None = None  # partitions: the memory-slice placement
    length: int | None = None
    cores_percentage: int = 100  # slices: the compute cap
    device: str = ""  # partitions: the materialised instance's own device id (a MIG UUID)


@dataclass
class Injection:
    """A container's share of an ``Allocate`` response."""

    envs: dict[str, str] = field(default_factory=dict)
    devices: list[tuple[str, str, str]] = field(default_factory=list)  # container path, host path, perms
    mounts: list[tuple[str, str, bool]] = field(default_factory=list)  # container path, host path, ro
    annotations: dict[str, str] = field(default_factory=dict)


def slice_memory_mib(grant: Grant) -> int:
    """The VRAM a slice of ``grant.units`` may use on its card (floored, at least 1 MiB)."""
    return max(1, grant.card.memory_mib * grant.units // UNITS_PER_CARD)


class Backend:
    """One manufacturer.  Subclasses name the visibility env and device nodes; discovery of the
    manufacturers without a real binding here reads a simulated profile (see ``simulated``)."""

    manufacturer: str = ""
    visible_env: tuple[str, ...] = ()  # env vars naming the granted cards
    visible_by_uuid: bool = False  # uuid (True) or the driver's index (False)
    device_node: str = ""  # host device node per card, formatted with {index}
    control_nodes: tuple[str, ...] = ()  # node-level device nodes every grant needs

    def discover(self) -> Inventory:  # pragma: no cover - every backend overrides it
        raise NotImplementedError

    def partitions(self, state_dir: str | Path) -> Partitions | None:
        """What materialises this manufacturer's partitions (ownership markers under
        ``state_dir``); ``None``: its partitioned grants name no instance of their own."""
        return None

    def _names(self, grants: Sequence[Grant]) -> str:
        cards = sorted({g.card.index: g.card for g in grants}.values(), key=lambda c: c.index)
        if self.visible_by_uuid:
            return ",".join(c.id for c in cards)
        return ",".join(str(c.physical_index) for c in cards)

    def inject(
        self, family: str, grants: Sequence[Grant], container_env: Mapping[str, str] | None = None
    ) -> Injection:
        """The visibility env plus device nodes; slices add their caps (:meth:`slice_env`)."""
        injection = Injection()
        names = self._names(grants)
        for env in self.visible_env:
            injection.envs[env] = names
        cards = sorted({g.card.index: g.card for g in grants}.values(), key=lambda c: c.index)
        for card in cards:
            nodes = card.device_nodes or (
                (self.device_node.format(index=card.physical_index),) if self.device_node else ()
            )
            for node in nodes:
                injection.devices.append((node, node, "rw"))
        for node in self.control_nodes:
            injection.devices.append((node, node, "rw"))
        if family == FAMILY_SLICED:
            own = container_env or {}
            for key, value in self.slice_env(grants).items():
                if key not in own:  # never overwrite what the workload set itself
                    injection.envs[key] = value
        return injection

    def slice_env(self, grants: Sequence[Grant]) -> dict[str, str]:
        """The slice's memory and compute caps, by manufacturer (none by default)."""
        return {}
