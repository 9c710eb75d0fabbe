"""An NVML library object that serves a node profile, for pynvml's own wrappers to run on.

pynvml (``nvidia-ml-py``) loads ``libnvidia-ml.so.1`` with ctypes and calls its C functions by name
(``_nvmlGetFunctionPointer``: ``getattr(nvmlLib, name)``), passing ctypes out-parameters.  Setting
``pynvml.nvmlLib`` to a :class:`FakeNvml` skips loading the real library, so every wrapper —
argument marshalling, struct layouts, error mapping — is the real one and only the C side is
simulated.  Each attribute is a plain function (pynvml sets ``restype`` on some of them, which a
bound method would refuse).

Served: init/shutdown, driver and CUDA versions, count and handles, name, UUID, memory, cores,
compute capability, architecture, PCI info, index, minor number, NUMA node, NVLink fabric info,
MIG mode, GPU-instance profile info and possible placements, GPU and compute instances with their
MIG devices (:mod:`.fakemig`: creation at a placement, destruction, ``IN_USE``), and Xid events (a
card the profile marks ``unhealthy`` reports one critical Xid).  A card listing a function under ``failing`` answers it with
``NVML_ERROR_UNKNOWN``; anything not served is ``NVML_ERROR_FUNCTION_NOT_FOUND`` in pynvml.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodeplugins.devicemanager.simulation.fakemig import MigFunctions
from nodeplugins.devicemanager.simulation.profile import FABRIC_STATES, NodeProfile, SimCard

SUCCESS = 0
ERROR_UNINITIALIZED = 1
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_NOT_FOUND = 6
ERROR_INSUFFICIENT_SIZE = 7
ERROR_TIMEOUT = 10
ERROR_UNKNOWN = 999
MIG_CAPABLE_ARCHITECTURES = (7, 9, 10)  # Ampere, Hopper, Blackwell
XID_CRITICAL_EVENT = 0x8
XID_FALLEN_OFF_THE_BUS = 79

_ERROR_STRINGS = {
    SUCCESS: b"Success",
    ERROR_UNINITIALIZED: b"Uninitialized",
    ERROR_INVALID_ARGUMENT: b"Invalid Argument",
    ERROR_NOT_SUPPORTED: b"Not Supported",
    ERROR_NOT_FOUND: b"Not Found",
    ERROR_INSUFFICIENT_SIZE: b"Insufficient Size",
    ERROR_TIMEOUT: b"Timeout",
    19: b"In use by another client",
    23: b"Insufficient resources",
    ERROR_UNKNOWN: b"Unknown Error",
}


class _Device(ctypes.Structure):
    """What a device handle points at: the card's position in the profile."""

    _fields_ = [("index", ctypes.c_uint)]


def _set_pointer(pointer: Any, target: ctypes.Structure) -> None:
    """Point a ctypes pointer of any pointee type (pynvml's opaque handle) at ``target``."""
    ctypes.cast(ctypes.byref(pointer), ctypes.POINTER(ctypes.c_void_p))[0] = ctypes.addressof(target)


def _address(pointer: Any) -> int | None:
    try:
        return ctypes.cast(pointer, ctypes.c_void_p).value
    except (ctypes.ArgumentError, TypeError):
        return None


def _out(ref: Any) -> Any:
    """The ctypes object behind ``byref(x)`` (or ``x`` itself)."""
    return getattr(ref, "_obj", ref)


def _value(arg: Any) -> Any:
    return arg.value if hasattr(arg, "value") else arg


def _put_string(buffer: Any, length: Any, text: str) -> int:
    data = text.encode()
    if len(data) + 1 > int(_value(length)):
        return ERROR_INSUFFICIENT_SIZE
    buffer.value = data
    return SUCCESS


class FakeNvml(MigFunctions):
    """The C side of NVML for one profile (replace it with :meth:`serve` to change the hardware);
    ``state``: the file its GPU instances persist in (they outlive the process, as on hardware)."""

    def __init__(self, profile: NodeProfile, state: str | Path | None = None) -> None:
        self._lock = threading.Lock()
        self._mig_init(state)
        self._initialized = 0
        self._reported_xid: set[str] = set()
        self._devices: list[_Device] = []
        self._by_address: dict[int, int] = {}
        self.serve(profile)
        for name in dir(self):
            if name.startswith("_nvml"):
                setattr(self, name[1:], self._function(getattr(self, name)))

    def serve(self, profile: NodeProfile) -> None:
        """Swap the simulated hardware (cards added, removed, turned unhealthy)."""
        with self._lock:
            self.profile = profile
            self._devices = [_Device(card.index) for card in profile.cards]
            self._by_address = {ctypes.addressof(d): d.index for d in self._devices}

    @staticmethod
    def _function(method: Callable[..., int]) -> Callable[..., int]:
        def call(*args: Any) -> Any:
            return method(*args)

        call.__name__ = method.__name__[1:]
        return call

    # --- helpers --------------------------------------------------------------------------------------
    def _card(self, handle: Any, function: str) -> tuple[int, SimCard | None]:
        if not self._initialized:
            return ERROR_UNINITIALIZED, None
        index = self._by_address.get(_address(handle) or 0)
        if index is None:
            return ERROR_INVALID_ARGUMENT, None
        card = self.profile.cards[index]
        if function in card.failing:
            return ERROR_UNKNOWN, None
        return SUCCESS, card

    # --- library --------------------------------------------------------------------------------------
    def _nvmlInitWithFlags(self, flags: Any) -> int:
        self._initialized += 1
        return SUCCESS

    def _nvmlInit_v2(self) -> int:
        return self._nvmlInitWithFlags(0)

    def _nvmlShutdown(self) -> int:
        if not self._initialized:
            return ERROR_UNINITIALIZED
        self._initialized -= 1
        return SUCCESS

    def _nvmlErrorString(self, result: Any) -> bytes:
        return _ERROR_STRINGS.get(int(_value(result)), b"Unknown Error")

    def _nvmlSystemGetDriverVersion(self, buffer: Any, length: Any) -> int:
        return _put_string(buffer, length, self.profile.driver_version)

    def _nvmlSystemGetCudaDriverVersion(self, version: Any) -> int:
        major, _, minor = self.profile.runtime_version.partition(".")
        try:
            _out(version).value = int(major) * 1000 + int(minor or 0) * 10
        except ValueError:
            return ERROR_NOT_SUPPORTED
        return SUCCESS

    _nvmlSystemGetCudaDriverVersion_v2 = _nvmlSystemGetCudaDriverVersion

    # --- enumeration ----------------------------------------------------------------------------------
    def _nvmlDeviceGetCount_v2(self, count: Any) -> int:
        if not self._initialized:
            return ERROR_UNINITIALIZED
        _out(count).value = len(self.profile.cards)
        return SUCCESS

    def _nvmlDeviceGetHandleByIndex_v2(self, index: Any, device: Any) -> int:
        if not self._initialized:
            return ERROR_UNINITIALIZED
        i = int(_value(index))
        if not 0 <= i < len(self._devices):
            return ERROR_INVALID_ARGUMENT
        _set_pointer(_out(device), self._devices[i])
        return SUCCESS

    # --- identity ---------------------------------------------------------------------------------------
    def _nvmlDeviceGetName(self, handle: Any, buffer: Any, length: Any) -> int:
        ret, card = self._card(handle, "nvmlDeviceGetName")
        return ret if card is None else _put_string(buffer, length, card.product.name)

    def _nvmlDeviceGetUUID(self, handle: Any, buffer: Any, length: Any) -> int:
        mig = self.mig_handle_uuid(handle)
        if mig is not None:
            return _put_string(buffer, length, mig) if mig else ERROR_NOT_FOUND
        ret, card = self._card(handle, "nvmlDeviceGetUUID")
        return ret if card is None else _put_string(buffer, length, card.uuid)

    def _nvmlDeviceGetIndex(self, handle: Any, index: Any) -> int:
        ret, card = self._card(handle, "nvmlDeviceGetIndex")
        if card is not None:
            _out(index).value = card.index
        return ret

    def _nvmlDeviceGetMinorNumber(self, handle: Any, minor: Any) -> int:
        ret, card = self._card(handle, "nvmlDeviceGetMinorNumber")
        if card is not None:
            _out(minor).value = card.index
        return ret

    def _nvmlDeviceGetMemoryInfo(self, handle: Any, memory: Any) -> int:
        ret, card = self._card(handle, "nvmlDeviceGetMemoryInfo")
        if card is not None:
            info = _out(memory)
            info.total = card.product.memory_mib * 1024 * 1024
            info.used = 0
            info.free = info.total
        return ret

    _nvmlDeviceGetMemoryInfo_v2 = _nvmlDeviceGetMemoryInfo

    def _nvmlDeviceGetNumGpuCores(self, handle: Any, cores: Any) -> int:
        ret, card = self._card(handle, "nvmlDeviceGetNumGpuCores")
        if card is not None:
            if not card.product.cores:
                return ERROR_NOT_SUPPORTED
            _out(cores).value = card.product.cores
        return ret

    def _nvmlDeviceGetCudaComputeCapability(self, handle: Any, major: Any, minor: Any) -> int:
        ret, card = self._card(handle, "nvmlDeviceGetCudaComputeCapability")
        if card is not None:
            high, _, low = card.product.compute_capability.partition(".")
            if not high.isdigit():
                return ERROR_NOT_SUPPORTED
            _out(major).value = int(high)
            _out(minor).value = int(low or 0)
        return ret

    def _nvmlDeviceGetArchitecture(self, handle: Any, arch: Any) -> int:
        ret, card = self._card(handle, "nvmlDeviceGetArchitecture")
        if card is not None:
            _out(arch).value = card.product.architecture
        return ret

    def _nvmlDeviceGetPciInfo_v3(self, handle: Any, info: Any) -> int:
        ret, card = self._card(handle, "nvmlDeviceGetPciInfo_v3")
        if card is not None:
            pci = _out(info)
            domain, bus, rest = card.pci_bus_id.split(":")
            pci.busId = card.pci_bus_id.encode()
            pci.busIdLegacy = card.pci_bus_id[4:].encode()
            pci.domain = int(domain, 16)
            pci.bus = int(bus, 16)
            pci.device = int(rest.split(".")[0], 16)
            pci.pciDeviceId = card.product.pci_device_id
        return ret

    def _nvmlDeviceGetNumaNodeId(self, handle: Any, node: Any) -> int:
        ret, card = self._card(handle, "nvmlDeviceGetNumaNodeId")
        if card is not None:
            _out(node).value = card.numa
        return ret

    def _nvmlDeviceGetGpuFabricInfo(self, handle: Any, info: Any) -> int:
        """The card's NVLink fabric registration; a card without one answers as an ordinary card
        does: the not-supported state and zeros."""
        ret, card = self._card(handle, "nvmlDeviceGetGpuFabricInfo")
        if card is None:
            return ret
        out = _out(info)
        fabric = card.fabric
        uuid = bytes.fromhex(fabric.id) if fabric is not None else bytes(16)
        for i in range(16):
            out.clusterUuid[i] = uuid[i]
        out.state = FABRIC_STATES[fabric.state] if fabric is not None else 0
        out.status = ERROR_UNKNOWN if fabric is not None and fabric.failed else SUCCESS
        out.cliqueId = (fabric.clique or 0) if fabric is not None else 0
        return SUCCESS

    # --- MIG ---------------------------------------------------------------------------------------------
    def _nvmlDeviceGetMigMode(self, handle: Any, current: Any, pending: Any) -> int:
        ret, card = self._card(handle, "nvmlDeviceGetMigMode")
        if card is None:
            return ret
        if not card.product.profiles:
            return ERROR_NOT_SUPPORTED
        _out(current).value = _out(pending).value = 1 if card.partitioned else 0
        return SUCCESS

    def _profile(self, handle: Any, profile_id: Any, function: str) -> tuple[int, Any]:
        ret, card = self._card(handle, function)
        if card is None:
            return ret, None
        if not card.partitioned:
            return ERROR_NOT_SUPPORTED, None
        wanted = int(_value(profile_id))
        for profile in card.product.profiles:
            if profile.nvml_id == wanted:
                return SUCCESS, profile
        return ERROR_NOT_SUPPORTED, None

    def _nvmlDeviceGetGpuInstanceProfileInfoV(self, handle: Any, profile_id: Any, info: Any) -> int:
        ret, profile = self._profile(handle, profile_id, "nvmlDeviceGetGpuInstanceProfileInfoV")
        if profile is not None:
            out = _out(info)
            out.id = profile.nvml_id
            out.sliceCount = profile.compute_slices
            out.instanceCount = profile.count
            out.memorySizeMB = profile.memory_mib
            out.name = f"MIG {profile.name}".encode()
        return ret

    def _nvmlDeviceGetGpuInstancePossiblePlacements_v2(
        self, handle: Any, profile_id: Any, placements: Any, count: Any
    ) -> int:
        ret, profile = self._profile(handle, profile_id, "nvmlDeviceGetGpuInstancePossiblePlacements_v2")
        if profile is None:
            return ret
        slots = _out(count)
        if placements is None:
            slots.value = len(profile.placements)
            return SUCCESS
        if slots.value < len(profile.placements):
            return ERROR_INSUFFICIENT_SIZE
        array = _out(placements)
        for i, (start, length) in enumerate(profile.placements):
            array[i].start = start
            array[i].size = length
        slots.value = len(profile.placements)
        return SUCCESS

    # --- events --------------------------------------------------------------------------------------------
    def _nvmlEventSetCreate(self, event_set: Any) -> int:
        return SUCCESS if self._initialized else ERROR_UNINITIALIZED

    def _nvmlDeviceRegisterEvents(self, handle: Any, types: Any, event_set: Any) -> int:
        ret, _card = self._card(handle, "nvmlDeviceRegisterEvents")
        return ret

    def _nvmlEventSetWait_v2(self, event_set: Any, data: Any, timeout: Any) -> int:
        """One critical Xid per card the profile marks unhealthy, then timeouts."""
        with self._lock:
            for card in self.profile.cards:
                if card.unhealthy and card.uuid not in self._reported_xid:
                    self._reported_xid.add(card.uuid)
                    event = _out(data)
                    _set_pointer(event.device, self._devices[card.index])
                    event.eventType = XID_CRITICAL_EVENT
                    event.eventData = XID_FALLEN_OFF_THE_BUS
                    return SUCCESS
        return ERROR_TIMEOUT

    def _nvmlEventSetFree(self, event_set: Any) -> int:
        return SUCCESS


def install(library: FakeNvml | None) -> None:
    """Make pynvml call ``library`` (``None``: the real ``libnvidia-ml.so.1`` on the next init)."""
    import pynvml

    with pynvml.libLoadLock:
        pynvml.nvmlLib = library
        pynvml._nvmlGetFunctionPointer_cache.clear()
