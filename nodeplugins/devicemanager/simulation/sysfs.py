"""A simulated sysfs tree: the RDMA hardware of a node without any, laid out as the kernel does.

Tests and ``make dev`` build one under a directory of their own and point the device manager at it
(``--sysfs-root``); the real discovery code then reads it exactly as it reads ``/sys``::

    devices/pci0000:00/0000:00:01.0/                     a bridge (root port)
    devices/pci0000:00/0000:00:01.0/0000:01:00.0/        a NIC: vendor, device, numa_node,
        local_cpulist, subsystem -> bus/pci, net/<ifname>/device -> the function,
        infiniband/<mlx5_0>/ports/<n>/{state,phys_state}, infiniband_verbs/uverbs<N>/ibdev,
        sriov_totalvfs, sriov_numvfs, virtfn<i> -> a VF (its physfn -> back)
    devices/virtual/net/<ifname>/                        a virtual interface (no device)
    class/net/<ifname>, class/infiniband/<dev>, class/infiniband_verbs/uverbs<N>,
    bus/pci/devices/<address>                            relative symlinks, as in /sys

Character devices for ``Allocate`` live under a separate dev root (``--dev-root``): empty files
named ``infiniband/uverbs<N>`` and ``infiniband/rdma_cm`` (the CRI fake opens nothing).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

ACTIVE = ("4: ACTIVE", "5: LinkUp")
DOWN = ("1: DOWN", "3: Disabled")
ACTIVE_DEFER = ("5: ACTIVE_DEFER", "5: LinkUp")


class SysfsTree:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._uverbs = 0
        self._places: dict[str, Path] = {}  # PCI address -> its directory

    # --- plumbing ----------------------------------------------------------------------------
    def write(self, rel: str | Path, text: str) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
        return path

    def link(self, rel: str | Path, target: str | Path) -> Path:
        """A relative symlink at ``rel`` to ``target`` (both relative to the root)."""
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.exists():
            path.unlink()
        os.symlink(os.path.relpath(self.root / target, path.parent), path)
        return path

    def place(self, address: str) -> Path:
        """The directory (relative to the root) of a PCI function or bridge created earlier."""
        return self._places[address]

    # --- PCI -----------------------------------------------------------------------------------
    def function(
        self,
        address: str,
        *,
        under: str | None = None,
        numa: int | None = None,
        cpulist: str = "",
        vendor: str = "0x15b3",
        device: str = "0x101d",
        domain_root: str = "pci0000:00",
    ) -> Path:
        """A PCI function (or bridge) at ``address``, below bridge ``under`` or the root complex."""
        parent = self._places[under] if under else Path("devices") / domain_root
        rel = parent / address
        self._places[address] = rel
        (self.root / rel).mkdir(parents=True, exist_ok=True)
        self.write(rel / "vendor", vendor)
        self.write(rel / "device", device)
        self.write(rel / "numa_node", str(-1 if numa is None else numa))
        if cpulist:
            self.write(rel / "local_cpulist", cpulist)
        self.link(rel / "subsystem", "bus/pci")
        self.link(Path("bus/pci/devices") / address, rel)
        return rel

    def bridge(self, address: str, *, under: str | None = None, numa: int | None = None) -> Path:
        return self.function(address, under=under, numa=numa, vendor="0x8086", device="0x2030")

    def accelerator(self, address: str, *, under: str | None = None, numa: int | None = None) -> Path:
        return self.function(address, under=under, numa=numa, vendor="0x10de", device="0x2330")

    # --- network -------------------------------------------------------------------------------
    def netdev(self, name: str, function: Path) -> Path:
        rel = function / "net" / name
        (self.root / rel).mkdir(parents=True, exist_ok=True)
        self.link(rel / "device", function)
        self.link(Path("class/net") / name, rel)
        return rel

    def virtual(self, name: str) -> Path:
        rel = Path("devices/virtual/net") / name
        (self.root / rel).mkdir(parents=True, exist_ok=True)
        self.link(Path("class/net") / name, rel)
        return rel

    def rdma(
        self, function: Path, device: str, ports: Sequence[tuple[str, str]] = (ACTIVE,), *, verbs: bool = True
    ) -> Path:
        """RDMA device ``device`` bound to ``function``, its ports and (``verbs``) its uverbs node."""
        rel = function / "infiniband" / device
        for n, (state, phys) in enumerate(ports, start=1):
            self.write(rel / "ports" / str(n) / "state", state)
            self.write(rel / "ports" / str(n) / "phys_state", phys)
        (self.root / rel / "ports").mkdir(parents=True, exist_ok=True)
        self.link(Path("class/infiniband") / device, rel)
        if verbs:
            uverbs = f"uverbs{self._uverbs}"
            self._uverbs += 1
            self.write(function / "infiniband_verbs" / uverbs / "ibdev", device)
            self.link(Path("class/infiniband_verbs") / uverbs, function / "infiniband_verbs" / uverbs)
        return rel

    def set_ports(self, function: Path, device: str, ports: Sequence[tuple[str, str]]) -> None:
        """Change a bound device's port states (a cable pulled, a link back)."""
        base = function / "infiniband" / device / "ports"
        for n, (state, phys) in enumerate(ports, start=1):
            self.write(base / str(n) / "state", state)
            self.write(base / str(n) / "phys_state", phys)

    def nic(
        self,
        name: str,
        address: str,
        *,
        under: str | None = None,
        numa: int | None = None,
        cpulist: str = "",
        rdma: str = "",
        ports: Sequence[tuple[str, str]] = (ACTIVE,),
    ) -> Path:
        """A PCI NIC with interface ``name`` and, when ``rdma`` names one, its RDMA device."""
        function = self.function(address, under=under, numa=numa, cpulist=cpulist)
        self.netdev(name, function)
        if rdma:
            self.rdma(function, rdma, ports)
        return function

    def sriov(self, pf: str, total: int = 8) -> None:
        """Mark the function at ``pf`` as an SR-IOV physical function (no VF configured yet)."""
        rel = self._places[pf]
        self.write(rel / "sriov_totalvfs", str(total))
        self.write(rel / "sriov_numvfs", "0")

    def vf(
        self,
        pf: str,
        address: str,
        *,
        name: str = "",
        numa: int | None = None,
        rdma: str = "",
        ports: Sequence[tuple[str, str]] = (ACTIVE,),
    ) -> Path:
        """A virtual function of ``pf`` (a sibling directory, linked both ways)."""
        parent = self._places[pf]
        rel = parent.parent / address
        self._places[address] = rel
        (self.root / rel).mkdir(parents=True, exist_ok=True)
        self.write(rel / "vendor", "0x15b3")
        self.write(rel / "device", "0x101e")
        self.write(rel / "numa_node", str(-1 if numa is None else numa))
        self.link(rel / "subsystem", "bus/pci")
        self.link(rel / "physfn", parent)
        self.link(Path("bus/pci/devices") / address, rel)
        index = sum(1 for p in (self.root / parent).iterdir() if p.name.startswith("virtfn"))
        self.link(parent / f"virtfn{index}", rel)
        self.write(parent / "sriov_numvfs", str(index + 1))
        if name:
            self.netdev(name, rel)
        if rdma:
            self.rdma(rel, rdma, ports)
        return rel


def character_devices(dev_root: str | Path, count: int, *, rdma_cm: bool = True) -> None:
    """Stand-ins for ``/dev/infiniband/uverbs0..count-1`` (and ``rdma_cm``) under ``dev_root``."""
    directory = Path(dev_root) / "infiniband"
    directory.mkdir(parents=True, exist_ok=True)
    for n in range(count):
        (directory / f"uverbs{n}").touch()
    if rdma_cm:
        (directory / "rdma_cm").touch()
