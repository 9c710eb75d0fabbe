"""The RDMA half of one device manager, as the agent composes it.

It owns the interface inventory (:class:`~.inventory.Interfaces`), says what the ``Devices`` spec
and the NodeFeature carry for RDMA, and builds the three device-plugin servers.  Labels while
nothing is known (no pass has succeeded and the live ``Devices`` held no list) are the ones already
published: a failed read withholds nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from nodeplugins.devicemanager.plugin import Watchers
from nodeplugins.devicemanager.rdma import endpoints, labels
from nodeplugins.devicemanager.rdma.discovery import pci_place
from nodeplugins.devicemanager.rdma.inventory import Interfaces
from nodeplugins.devicemanager.rdma.netlink import LinkFacts
from nodeplugins.devicemanager.rdma.pci import Coordinates
from nodeplugins.devicemanager.rdma.plugin import RdmaPlugin
from nodeplugins.devicemanager.rdma.sysfs import Sysfs


class RdmaService:
    def __init__(
        self,
        sysfs_root: str | Path = "/sys",
        dev_root: str | Path = "/dev",
        netns: str = "",
        *,
        shared: bool = True,
        partitioned: bool = True,
        facts: Callable[[], Mapping[str, LinkFacts]] | None = None,
    ) -> None:
        self.sysfs = Sysfs(sysfs_root)
        self.dev_root = Path(dev_root)
        self.interfaces = Interfaces(self.sysfs, netns, facts=facts)
        self.keys = endpoints.keys(shared=shared, partitioned=partitioned)

    def refresh(self) -> bool:
        return self.interfaces.refresh()

    def seed(self, devices: Mapping[str, Any] | None) -> None:
        """Adopt the list a live ``Devices`` object already records (a restarted agent)."""
        if devices is not None:
            self.interfaces.seed((devices.get("spec") or {}).get("interfaces"))

    def spec_interfaces(self) -> list[dict[str, Any]] | None:
        """``Devices.spec.interfaces`` to publish; ``None`` while nothing is known."""
        return None if self.interfaces.recorded is None else self.interfaces.current()

    def labels(self, groups: Iterable[Mapping[str, Any]], published: Mapping[str, str]) -> dict[str, str]:
        """The ``rdma.`` labels of the NodeFeature; ``published`` are its live labels."""
        if self.interfaces.recorded is None:
            return {k: v for k, v in published.items() if labels.is_rdma_label(k)}
        return labels.rdma_labels(self.interfaces.current(), labels.accelerator_places(groups))

    def pci_places(self, addresses: Iterable[str]) -> dict[str, Coordinates]:
        """Accelerators' coordinates by the same walk as the interfaces' (for their topology)."""
        out = {}
        for address in addresses:
            place = pci_place(self.sysfs, address)
            if place is not None:
                out[address] = place
        return out

    def plugins(self, watchers: Watchers) -> list[RdmaPlugin]:
        """One server per key, on every Linux node (none elsewhere: no RDMA subsystem)."""
        if not sys.platform.startswith("linux"):
            return []
        return [
            RdmaPlugin(key, self.interfaces.current, self.sysfs, self.dev_root, watchers) for key in self.keys
        ]
