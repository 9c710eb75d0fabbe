"""Where a PCI function sits: its bus id, its upstream bridge path and the outermost bridge.

One walk for both sides (C.1): the interface inventory and the accelerators' ``topology`` take
``pciRootId`` and ``pciSwitches`` from :func:`coordinates`, so the two compare equal by construction.

A PCI function's sysfs directory is reached through its upstream bridges, e.g.
``devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0``: every PCI address on
that path above the function is a bridge.  ``pciSwitches`` lists them innermost first;
``pciRootId`` is the **outermost bridge** (not the root complex ``pci0000:00``), or the function's
own address when no bridge sits above it, in which case ``pciSwitches`` is absent.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_ADDRESS = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


@dataclass(frozen=True, slots=True)
class Coordinates:
    bus_id: str  # this function's address, e.g. 0000:03:00.0
    root_id: str  # the outermost bridge above it, or bus_id
    switches: tuple[str, ...]  # upstream bridges, innermost first; () when none


def is_address(text: str) -> bool:
    return bool(_ADDRESS.match(text))


def coordinates(parts: Sequence[str]) -> Coordinates | None:
    """The coordinates of the PCI function whose real sysfs directory has path components
    ``parts`` (relative to the sysfs root); ``None`` when its last component is no PCI address."""
    if not parts or not is_address(parts[-1].lower()):
        return None
    chain = [p.lower() for p in parts if is_address(p.lower())]
    bus_id, bridges = chain[-1], chain[:-1]
    return Coordinates(bus_id, bridges[0] if bridges else bus_id, tuple(reversed(bridges)))
