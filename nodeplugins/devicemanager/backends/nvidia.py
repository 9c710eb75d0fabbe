"""NVIDIA: discovery through NVML (``pynvml`` from ``nvidia-ml-py``) and the container injection.

The same code runs on a GPU host (the real ``libnvidia-ml.so.1``) and on simulated cards (``--simulate
PROFILE.yaml`` installs a :class:`~..simulation.fakenvml.FakeNvml` under pynvml's own wrappers).

Per card: UUID, name, memory, CUDA cores, compute capability, architecture (the family), PCI bus and
NUMA node, the NVLink fabric domain once registered, MIG mode and — when MIG is on — the
GPU-instance profiles with their empty-card placements; driver and CUDA versions once per node.  A
card NVML answers an error for is logged and left out of this pass; an NVML that does not
initialise fails the pass (the last state is kept).
Critical Xid events mark a card unhealthy until the process restarts.

A partitioned grant is handed its MIG device, materialised through :mod:`.mig` at ``Allocate``
(:meth:`NvidiaBackend.partitions`): ``NVIDIA_VISIBLE_DEVICES`` names the MIG UUID, never the parent
card, for the container and for its SSH sidecar alike.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nodeplugins.devicemanager.backends.base import FAMILY_PARTITIONED, Backend, DiscoveryError, Grant
from nodeplugins.devicemanager.inventory import Card, Fabric, Inventory, PartitionProfile
from nodeplugins.devicemanager.partitions import Markers, Partitions

log = logging.getLogger("devicemanager.nvidia")

ARCHITECTURES = {
    2: "kepler",
    3: "maxwell",
    4: "pascal",
    5: "volta",
    6: "turing",
    7: "ampere",
    8: "ada",
    9: "hopper",
    10: "blackwell",
    13: "rubin",
}
GPU_INSTANCE_PROFILES = range(0x12)  # NVML_GPU_INSTANCE_PROFILE_COUNT
MAX_PLACEMENTS = 8
XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError
# Xids that say nothing about the card (application faults), as NVIDIA's own device plugin skips them.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})


def _pynvml() -> Any:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import pynvml

    return pynvml


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvidiaBackend(Backend):
    manufacturer = "nvidia"
    visible_env = ("NVIDIA_VISIBLE_DEVICES",)
    visible_by_uuid = True

    def __init__(self, library: Any = None) -> None:
        """``library``: an NVML library object (the simulated one) or ``None`` for the real one."""
        self.library = library
        self._unhealthy: set[str] = set()
        self._lock = threading.Lock()

    # --- discovery ----------------------------------------------------------------------------------------
    def discover(self) -> Inventory:
        nvml = _pynvml()
        if self.library is not None:
            from nodeplugins.devicemanager.simulation.fakenvml import install

            install(self.library)
        with self._lock:
            try:
                nvml.nvmlInit()
            except nvml.NVMLError as error:
                raise DiscoveryError(f"NVML did not initialise: {error}") from None
            try:
                return self._pass(nvml)
            finally:
                with contextlib.suppress(nvml.NVMLError):
                    nvml.nvmlShutdown()

    def _pass(self, nvml: Any) -> Inventory:
        try:
            driver = _text(nvml.nvmlSystemGetDriverVersion())
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as error:
            raise DiscoveryError(f"NVML could not enumerate the cards: {error}") from None
        try:
            cuda = nvml.nvmlSystemGetCudaDriverVersion()
            runtime = f"{cuda // 1000}.{cuda % 1000 // 10}"
        except nvml.NVMLError:
            runtime = ""
        handles = []
        cards: list[Card] = []
        for position in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(position)
                card = self._card(nvml, handle, position, len(cards))
            except nvml.NVMLError as error:
                log.warning(
                    "NVML failed on a card; it is left out of this detection pass",
                    extra={"nvmlIndex": position, "error": str(error)},
                )
                continue
            handles.append((handle, card.id))
            cards.append(card)
        self._drain_xids(nvml, handles)
        cards = [
            card if card.id not in self._unhealthy or card.unhealthy else _unhealthy(card) for card in cards
        ]
        return Inventory("nvidia", driver, runtime, tuple(cards))

    def _card(self, nvml: Any, handle: Any, position: int, index: int) -> Card:
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        name = _text(nvml.nvmlDeviceGetName(handle))
        memory_mib = nvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024)
        pci = nvml.nvmlDeviceGetPciInfo(handle)
        cores = _optional(nvml, nvml.nvmlDeviceGetNumGpuCores, handle, 0)
        capability = _optional(nvml, nvml.nvmlDeviceGetCudaComputeCapability, handle, None)
        architecture = _optional(nvml, nvml.nvmlDeviceGetArchitecture, handle, None)
        numa = _optional(nvml, nvml.nvmlDeviceGetNumaNodeId, handle, None)
        minor = _optional(nvml, nvml.nvmlDeviceGetMinorNumber, handle, position)
        mig = _optional(nvml, nvml.nvmlDeviceGetMigMode, handle, None)
        partitioned = bool(mig and mig[0] == 1)
        profiles = self._profiles(nvml, handle) if partitioned else ()
        return Card(
            id=uuid,
            index=index,
            physical_index=position,
            product=name,
            memory_mib=int(memory_mib),
            cores=int(cores or 0),
            compute_capability=f"{capability[0]}.{capability[1]}" if capability else "",
            family=ARCHITECTURES.get(architecture, "") if architecture is not None else "",
            pci_bus_id=_text(pci.busId),
            numa=str(numa) if numa is not None and numa >= 0 else "",
            partitioned=partitioned,
            profiles=profiles,
            device_nodes=(f"/dev/nvidia{minor}",),
            fabric=_fabric(nvml, handle, uuid),
        )

    def _profiles(self, nvml: Any, handle: Any) -> tuple[PartitionProfile, ...]:
        out = []
        for profile_id in GPU_INSTANCE_PROFILES:
            try:
                info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile_id)
                array = (nvml.c_nvmlGpuInstancePlacement_t * MAX_PLACEMENTS)()
                count = ctypes.c_uint(MAX_PLACEMENTS)
                nvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, info.id, array, ctypes.byref(count))
            except nvml.NVMLError:
                continue  # not offered on this card
            placements = tuple((array[i].start, array[i].size) for i in range(count.value))
            if not placements or not info.instanceCount:
                continue
            name = _text(info.name).removeprefix("MIG ").strip()
            out.append(
                PartitionProfile(
                    name=name,
                    memory_mib=int(info.memorySizeMB),
                    compute_slices=int(info.sliceCount),
                    memory_slices=placements[0][1],
                    count=int(info.instanceCount),
                    placements=placements,
                )
            )
        return tuple(out)

    def _drain_xids(self, nvml: Any, handles: list[tuple[Any, str]]) -> None:
        """Read pending critical Xid events; their cards stay unhealthy until a restart."""
        if not handles:
            return
        try:
            events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError:
            return
        try:
            for handle, _uuid in handles:
                try:
                    nvml.nvmlDeviceRegisterEvents(handle, XID_CRITICAL, events)
                except nvml.NVMLError:
                    continue
            for _ in range(len(handles) * 4):
                try:
                    data = nvml.nvmlEventSetWait_v2(events, 0)
                except nvml.NVMLError:
                    break  # timeout: nothing pending
                if data.eventType != XID_CRITICAL or data.eventData in APPLICATION_XIDS:
                    continue
                try:
                    uuid = _text(nvml.nvmlDeviceGetUUID(data.device))
                except nvml.NVMLError:
                    continue
                if uuid not in self._unhealthy:
                    log.warning(
                        "critical Xid: card marked unhealthy", extra={"card": uuid, "xid": data.eventData}
                    )
                self._unhealthy.add(uuid)
        finally:
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlEventSetFree(events)

    # --- injection -------------------------------------------------------------------------------------------
    def slice_env(self, grants: Sequence[Grant]) -> dict[str, str]:
        """HAMi-core's caps: per visible card its VRAM budget, the SM share, quiet logging, and the
        PCI-bus order that makes CUDA ordinals match NVML's (positions ascend by card index)."""
        env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "LIBCUDA_LOG_LEVEL": "0"}
        for position, grant in enumerate(sorted(grants, key=lambda g: g.card.index)):
            env[f"CUDA_DEVICE_MEMORY_LIMIT_{position}"] = (
                f"{max(1, grant.card.memory_mib * grant.units // 1_600_000)}m"
            )
        env["CUDA_DEVICE_SM_LIMIT"] = str(max(g.cores_percentage for g in grants))
        return env

    def partitions(self, state_dir: str | Path) -> Partitions:
        from nodeplugins.devicemanager.backends.mig import NvmlMig

        return Partitions(NvmlMig(self.library), Markers(Path(state_dir) / "partitions"))

    def inject(self, family: str, grants: Sequence[Grant], container_env: Any = None) -> Any:
        injection = super().inject(family, grants, container_env)
        # The NVIDIA container runtime turns NVIDIA_VISIBLE_DEVICES into device nodes; the
        # allocator contributes none of its own.
        injection.devices = []
        cards = sorted({g.card.index for g in grants})
        injection.envs["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(cards)))
        instances = [g.device for g in sorted(grants, key=lambda g: g.card.index) if g.device]
        if instances:  # a partition (its container's, or the owner's for the sidecar): the MIG device only
            injection.envs["NVIDIA_VISIBLE_DEVICES"] = ",".join(instances)
            injection.envs["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(instances)))
        elif family == FAMILY_PARTITIONED:
            # No instance behind the grant: name no whole card (fail closed).
            injection.envs["NVIDIA_VISIBLE_DEVICES"] = "none"
            injection.envs.pop("CUDA_VISIBLE_DEVICES", None)
        return injection


def _fabric(nvml: Any, handle: Any, card: str) -> Fabric | None:
    """The card's NVLink domain, only once the fabric manager has registered it: a card that has no
    fabric, has not started or is still negotiating (or answers not-supported and zeros, as an
    ordinary card does) has no cluster yet, and a registration that completed with an error or an
    all-zero cluster UUID identifies none — publishing any of these would hand every such machine
    one shared domain."""
    info = nvml.c_nvmlGpuFabricInfo_t()
    try:
        nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
    except nvml.NVMLError:
        return None  # no fabric query on this generation or driver
    uuid = bytes(info.clusterUuid)
    if info.state != nvml.NVML_GPU_FABRIC_STATE_COMPLETED:
        return None
    if info.status != nvml.NVML_SUCCESS or not any(uuid):
        log.debug(
            "NVLink fabric registration completed without a cluster; no domain recorded",
            extra={"card": card, "fabricStatus": int(info.status), "clusterUuid": uuid.hex()},
        )
        return None
    return Fabric(kind="nvlink", id=uuid.hex(), clique=str(int(info.cliqueId)))


def _optional(nvml: Any, function: Any, handle: Any, default: Any) -> Any:
    try:
        return function(handle)
    except nvml.NVMLError:
        return default


def _unhealthy(card: Card) -> Card:
    from dataclasses import replace

    return replace(card, unhealthy=True)
