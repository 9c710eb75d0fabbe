"""One backend module per manufacturer of the spec's table (§3.1).

``backend_for(manufacturer, simulate=..., node=...)`` builds the one a ``device-manager serve``
runs: NVIDIA discovers through NVML (the real library, or a fake one serving ``simulate``); the
others read the simulated profile until a real binding lands.
"""

from __future__ import annotations

from pathlib import Path

from nodeplugins.devicemanager.backends import (
    amd,
    ascend,
    cambricon,
    hygon,
    iluvatar,
    metax,
    mthreads,
    nvidia,
    thead,
)
from nodeplugins.devicemanager.backends.base import Backend, DiscoveryError, Grant, Injection
from nodeplugins.devicemanager.backends.profiled import ProfiledBackend
from nodeplugins.devicemanager.backends.simulated import ProfileSource
from nodeplugins.devicemanager.inventory import Inventory

PROFILED: dict[str, type[ProfiledBackend]] = {
    "ascend": ascend.AscendBackend,
    "cambricon": cambricon.CambriconBackend,
    "hygon": hygon.HygonBackend,
    "mthreads": mthreads.MthreadsBackend,
    "metax": metax.MetaxBackend,
    "iluvatar": iluvatar.IluvatarBackend,
    "amd": amd.AmdBackend,
    "thead": thead.TheadBackend,
}
MANUFACTURERS = ("nvidia", *PROFILED)

__all__ = ["MANUFACTURERS", "Backend", "DiscoveryError", "Grant", "Injection", "backend_for"]


class SimulatedNvml:
    """The fake NVML library, re-reading the profile on every pass (edits change the hardware).
    Its GPU instances live in ``<profile>.instances.json`` beside the profile: like a real card's,
    they outlive the device manager that created them."""

    def __init__(self, source: ProfileSource) -> None:
        from nodeplugins.devicemanager.simulation.fakenvml import FakeNvml

        self.source = source
        self.library = FakeNvml(source.read(), state=instances_file(source.path))

    def refresh(self) -> None:
        self.library.serve(self.source.read())


def instances_file(profile: str | Path) -> Path:
    """Where a simulated node keeps its live GPU instances: beside its profile."""
    path = Path(profile)
    return path.with_name(f"{path.stem}.instances.json")


def backend_for(manufacturer: str, *, simulate: str | Path | None = None, node: str = "") -> Backend:
    if manufacturer == "nvidia":
        if simulate is None:
            return nvidia.NvidiaBackend()
        simulated = SimulatedNvml(ProfileSource(simulate, node, manufacturer))
        return _RefreshingNvidia(simulated)
    cls = PROFILED.get(manufacturer)
    if cls is None:
        raise ValueError(
            f"--manufacturer: unknown manufacturer {manufacturer!r}; one of {list(MANUFACTURERS)}"
        )
    return cls(ProfileSource(simulate, node, manufacturer) if simulate is not None else None)


class _RefreshingNvidia(nvidia.NvidiaBackend):
    def __init__(self, simulated: SimulatedNvml) -> None:
        super().__init__(simulated.library)
        self.simulated = simulated

    def discover(self) -> Inventory:
        self.simulated.refresh()
        return super().discover()
