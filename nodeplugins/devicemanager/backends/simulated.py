"""Discovery from a node profile, for the manufacturers without a real binding in this build."""

from __future__ import annotations

from pathlib import Path

from nodeplugins.devicemanager.backends.base import DiscoveryError
from nodeplugins.devicemanager.fabric import KINDS
from nodeplugins.devicemanager.inventory import Card, Fabric, Inventory, PartitionProfile
from nodeplugins.devicemanager.simulation import profile as profiles


def inventory_of(profile: profiles.NodeProfile, device_node: str = "") -> Inventory:
    """The inventory a node profile describes (healthy cards as they are, failing ones skipped)."""
    cards: list[Card] = []
    for sim in profile.cards:
        if sim.failing:
            continue  # the vendor library answers an error for this card: not detected this pass
        cards.append(
            Card(
                id=sim.uuid,
                index=len(cards),
                physical_index=sim.index,
                product=sim.product.name,
                memory_mib=sim.product.memory_mib,
                cores=sim.product.cores,
                compute_capability=sim.product.compute_capability,
                family=sim.product.family,
                pci_bus_id=sim.pci_bus_id,
                numa=str(sim.numa),
                unhealthy=sim.unhealthy,
                partitioned=sim.partitioned,
                profiles=tuple(
                    PartitionProfile(
                        p.name, p.memory_mib, p.compute_slices, p.placements[0][1], p.count, p.placements
                    )
                    for p in sim.product.profiles
                )
                if sim.partitioned
                else (),
                device_nodes=(device_node.format(index=sim.index),) if device_node else (),
                fabric=_fabric(profile.manufacturer, sim.fabric),
            )
        )
    return Inventory(profile.manufacturer, profile.driver_version, profile.runtime_version, tuple(cards))


def _fabric(manufacturer: str, sim: profiles.SimFabric | None) -> Fabric | None:
    """The domain a card's vendor library reports, once established (the profile said so)."""
    if sim is None or not sim.established:
        return None
    return Fabric(
        kind=KINDS[manufacturer],
        id=sim.id,
        clique="" if sim.clique is None else str(sim.clique),
        members=sim.members,
    )


class ProfileSource:
    """Re-reads the profile file on every pass, so editing it changes the simulated hardware."""

    def __init__(self, path: str | Path, node: str, manufacturer: str) -> None:
        self.path = Path(path)
        self.node = node
        self.manufacturer = manufacturer

    def read(self) -> profiles.NodeProfile:
        try:
            profile = profiles.load(self.path, node=self.node)
        except profiles.ProfileError as error:
            raise DiscoveryError(str(error)) from None
        if profile.manufacturer != self.manufacturer:
            raise DiscoveryError(
                f"{self.path}: manufacturer: the profile describes {profile.manufacturer!r} cards but this "
                f"device manager serves {self.manufacturer!r}; start it with --manufacturer "
                f"{profile.manufacturer}"
            )
        return profile
