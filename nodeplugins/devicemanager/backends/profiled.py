"""A backend whose discovery reads a node profile (the manufacturers without a real binding here)."""

from __future__ import annotations

from nodeplugins.devicemanager.backends.base import Backend, DiscoveryError
from nodeplugins.devicemanager.backends.simulated import ProfileSource, inventory_of
from nodeplugins.devicemanager.inventory import Inventory


class ProfiledBackend(Backend):
    def __init__(self, source: ProfileSource | None = None) -> None:
        self.source = source

    def discover(self) -> Inventory:
        if self.source is None:
            raise DiscoveryError(
                f"no {self.manufacturer} management library is bound in this build: start the device "
                "manager with --simulate PROFILE.yaml"
            )
        return inventory_of(self.source.read(), self.device_node)
