"""The MIG side of the simulated NVML: GPU instances, compute instances and their MIG devices.

What a MIG-mode card holds, per card UUID: GPU instances (an id, a GPU-instance profile, a placement
in memory slices), each with compute instances (an id, a compute-instance profile), each compute
instance one MIG device with its own ``MIG-…`` UUID.  The rules NVML enforces and the device manager
relies on are modelled:

- a GPU instance is created only at a legal empty-card placement of its profile that overlaps no
  live instance (``NVML_ERROR_INSUFFICIENT_RESOURCES`` otherwise), only on a card in MIG mode;
- compute instances share their GPU instance's compute slices (no more than it has);
- destroying a GPU instance that still has compute instances, or an instance a process runs on, is
  ``NVML_ERROR_IN_USE``; :meth:`MigFunctions.run_process` simulates such a process;
- ids are the lowest free ones, so a destroyed instance's id is reassigned, while a MIG device's
  UUID is new every time an instance is created.

Instances outlive the process that created them, as on hardware: with a state file
(``FakeNvml(profile, state=PATH)``) they are written there after every change and read back on the
next call, so a restarted device manager finds what its predecessor created.
"""

from __future__ import annotations

import ctypes
import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUCCESS = 0
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_NOT_FOUND = 6
ERROR_INSUFFICIENT_SIZE = 7
ERROR_IN_USE = 19
ERROR_INSUFFICIENT_RESOURCES = 23
# NVML_COMPUTE_INSTANCE_PROFILE_* → compute slices (1, 2, 3, 4, 7, 8, 6, 1 rev1)
CI_PROFILE_SLICES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 5: 8, 6: 6, 7: 1}
_MIG_NAMESPACE = uuid.UUID("0b7d3f0e-9d0a-4a8e-8f61-5c3c4f9e2a17")


@dataclass
class SimComputeInstance:
    id: int
    profile_id: int
    slices: int
    uuid: str  # its MIG device's UUID


@dataclass
class SimGpuInstance:
    id: int
    profile_id: int
    start: int
    size: int
    slices: int
    computes: dict[int, SimComputeInstance] = field(default_factory=dict)
    processes: int = 0  # processes running on it: destroying it is IN_USE


class _Handle(ctypes.Structure):
    """What a GPU-instance, compute-instance or MIG-device handle points at."""

    _fields_ = [
        ("kind", ctypes.c_uint),
        ("card", ctypes.c_uint),
        ("gi", ctypes.c_uint),
        ("ci", ctypes.c_uint),
    ]


GPU_INSTANCE, COMPUTE_INSTANCE, MIG_DEVICE = 1, 2, 3


def _out(ref: Any) -> Any:
    return getattr(ref, "_obj", ref)


def _value(arg: Any) -> Any:
    return arg.value if hasattr(arg, "value") else arg


def _address(pointer: Any) -> int:
    try:
        return ctypes.cast(pointer, ctypes.c_void_p).value or 0
    except (ctypes.ArgumentError, TypeError):
        return 0


def _point(pointer: Any, target: ctypes.Structure) -> None:
    ctypes.cast(ctypes.byref(pointer), ctypes.POINTER(ctypes.c_void_p))[0] = ctypes.addressof(target)


def _point_at(array: Any, i: int, target: ctypes.Structure) -> None:
    """Set element ``i`` of a ctypes array of pointers (element access returns a copy)."""
    slot = ctypes.cast(
        ctypes.byref(array, i * ctypes.sizeof(ctypes.c_void_p)), ctypes.POINTER(ctypes.c_void_p)
    )
    slot[0] = ctypes.addressof(target)


class MigFunctions:
    """Mixed into :class:`~.fakenvml.FakeNvml`: the GPU/compute instance functions of NVML."""

    profile: Any
    _devices: list[Any]
    _lock: Any
    _card: Callable[[Any, str], tuple[int, Any]]  # FakeNvml's: (error, the card behind a device handle)
    _nvmlDeviceGetHandleByIndex_v2: Callable[[Any, Any], int]

    def _mig_init(self, state: str | Path | None) -> None:
        self._mig_path = Path(state) if state is not None else None
        self._mig_seen: int | None = None
        self._mig: dict[str, dict[int, SimGpuInstance]] = {}
        self._mig_generation = 0
        self._handles: dict[tuple[int, int, int, int], _Handle] = {}
        self._handle_of: dict[int, tuple[int, int, int, int]] = {}

    # --- persistence ---------------------------------------------------------------------------------
    def _mig_load(self) -> None:
        if self._mig_path is None:
            return
        try:
            seen = self._mig_path.stat().st_mtime_ns
        except OSError:
            return
        if seen == self._mig_seen:
            return
        raw = json.loads(self._mig_path.read_text() or "{}")
        self._mig_generation = int(raw.get("generation", 0))
        self._mig = {
            card: {
                int(gi["id"]): SimGpuInstance(
                    id=int(gi["id"]),
                    profile_id=int(gi["profile"]),
                    start=int(gi["start"]),
                    size=int(gi["size"]),
                    slices=int(gi["slices"]),
                    processes=int(gi.get("processes", 0)),
                    computes={
                        int(ci["id"]): SimComputeInstance(
                            int(ci["id"]), int(ci["profile"]), int(ci["slices"]), str(ci["uuid"])
                        )
                        for ci in gi.get("computes") or ()
                    },
                )
                for gi in instances
            }
            for card, instances in (raw.get("cards") or {}).items()
        }
        self._mig_seen = seen

    def _mig_save(self) -> None:
        if self._mig_path is None:
            return
        raw = {
            "generation": self._mig_generation,
            "cards": {
                card: [
                    {
                        "id": gi.id,
                        "profile": gi.profile_id,
                        "start": gi.start,
                        "size": gi.size,
                        "slices": gi.slices,
                        "processes": gi.processes,
                        "computes": [
                            {"id": ci.id, "profile": ci.profile_id, "slices": ci.slices, "uuid": ci.uuid}
                            for ci in gi.computes.values()
                        ],
                    }
                    for gi in instances.values()
                ]
                for card, instances in self._mig.items()
                if instances
            },
        }
        temporary = self._mig_path.with_name(self._mig_path.name + ".tmp")
        temporary.write_text(json.dumps(raw, indent=1))
        os.replace(temporary, self._mig_path)
        self._mig_seen = self._mig_path.stat().st_mtime_ns

    # --- what tests read and simulate ----------------------------------------------------------------
    def gpu_instances(self, card_uuid: str) -> list[SimGpuInstance]:
        """The card's live GPU instances (a test reads the simulated hardware)."""
        with self._lock:
            self._mig_load()
            return sorted(self._mig.get(card_uuid, {}).values(), key=lambda gi: gi.start)

    def run_process(self, mig_uuid: str, running: bool = True) -> None:
        """Start (or end) a process on the instance of ``mig_uuid``: destroying it is IN_USE meanwhile."""
        with self._lock:
            self._mig_load()
            for _card, gi in self._all_instances():
                if any(ci.uuid == mig_uuid for ci in gi.computes.values()):
                    gi.processes = max(0, gi.processes + (1 if running else -1))
                    self._mig_save()
                    return
        raise KeyError(mig_uuid)

    # --- helpers --------------------------------------------------------------------------------------
    def _all_instances(self) -> Iterator[tuple[str, SimGpuInstance]]:
        for card, instances in self._mig.items():
            for gi in instances.values():
                yield card, gi

    def _handle(self, kind: int, card: int, gi: int = 0, ci: int = 0) -> _Handle:
        key = (kind, card, gi, ci)
        handle = self._handles.get(key)
        if handle is None:
            handle = _Handle(kind, card, gi, ci)
            self._handles[key] = handle
            self._handle_of[ctypes.addressof(handle)] = key
        return handle

    def _resolve(self, pointer: Any, kind: int) -> tuple[int, Any, Any, Any]:
        """(error, card, gpu instance, compute instance) behind a handle of ``kind``."""
        key = self._handle_of.get(_address(pointer))
        if key is None or key[0] != kind:
            return ERROR_INVALID_ARGUMENT, None, None, None
        self._mig_load()
        _kind, index, gi_id, ci_id = key
        if index >= len(self.profile.cards):
            return ERROR_INVALID_ARGUMENT, None, None, None
        card = self.profile.cards[index]
        gi = self._mig.get(card.uuid, {}).get(gi_id)
        if gi is None:
            return ERROR_NOT_FOUND, card, None, None
        if kind == GPU_INSTANCE:
            return SUCCESS, card, gi, None
        ci = gi.computes.get(ci_id)
        return (SUCCESS if ci is not None else ERROR_NOT_FOUND), card, gi, ci

    def _mig_card(self, handle: Any, function: str) -> tuple[int, Any]:
        ret, card = self._card(handle, function)
        if card is None:
            return ret, None
        if not card.partitioned:
            return ERROR_NOT_SUPPORTED, None
        self._mig_load()
        return SUCCESS, card

    def _gi_profile(self, card: Any, profile_id: int) -> Any:
        return next((p for p in card.product.profiles if p.nvml_id == profile_id), None)

    def _mig_devices(self, card: Any) -> list[tuple[SimGpuInstance, SimComputeInstance]]:
        instances = sorted(self._mig.get(card.uuid, {}).values(), key=lambda gi: gi.start)
        return [(gi, ci) for gi in instances for ci in sorted(gi.computes.values(), key=lambda c: c.id)]

    def mig_handle_uuid(self, pointer: Any) -> str | None:
        """The UUID behind a MIG device handle (``None``: not one)."""
        key = self._handle_of.get(_address(pointer))
        if key is None or key[0] != MIG_DEVICE:
            return None
        with self._lock:
            ret, _card, _gi, ci = self._resolve(pointer, MIG_DEVICE)
        return ci.uuid if ret == SUCCESS else ""

    # --- GPU instances --------------------------------------------------------------------------------
    def _nvmlDeviceGetHandleByUUID(self, c_uuid: Any, device: Any) -> int:
        wanted = _value(c_uuid)
        wanted = wanted.decode() if isinstance(wanted, bytes) else str(wanted)
        for card in self.profile.cards:
            if card.uuid == wanted:
                return self._nvmlDeviceGetHandleByIndex_v2(card.index, device)
        return ERROR_NOT_FOUND

    def _create_gi(self, card: Any, profile: Any, start: int, size: int, out: Any) -> int:
        if (start, size) not in profile.placements:
            return ERROR_INVALID_ARGUMENT
        instances = self._mig.setdefault(card.uuid, {})
        if any(start < gi.start + gi.size and gi.start < start + size for gi in instances.values()):
            return ERROR_INSUFFICIENT_RESOURCES
        gi_id = next(i for i in range(1, 64) if i not in instances)
        instances[gi_id] = SimGpuInstance(gi_id, profile.nvml_id, start, size, profile.compute_slices)
        self._mig_save()
        _point(_out(out), self._handle(GPU_INSTANCE, card.index, gi_id))
        return SUCCESS

    def _nvmlDeviceCreateGpuInstanceWithPlacement(
        self, handle: Any, profile_id: Any, placement: Any, out: Any
    ) -> int:
        with self._lock:
            ret, card = self._mig_card(handle, "nvmlDeviceCreateGpuInstanceWithPlacement")
            if card is None:
                return ret
            profile = self._gi_profile(card, int(_value(profile_id)))
            if profile is None:
                return ERROR_NOT_SUPPORTED
            slot = _out(placement)
            return self._create_gi(card, profile, int(slot.start), int(slot.size), out)

    def _nvmlDeviceCreateGpuInstance(self, handle: Any, profile_id: Any, out: Any) -> int:
        with self._lock:
            ret, card = self._mig_card(handle, "nvmlDeviceCreateGpuInstance")
            if card is None:
                return ret
            profile = self._gi_profile(card, int(_value(profile_id)))
            if profile is None:
                return ERROR_NOT_SUPPORTED
            for start, size in profile.placements:
                if self._create_gi(card, profile, start, size, out) == SUCCESS:
                    return SUCCESS
            return ERROR_INSUFFICIENT_RESOURCES

    def _nvmlDeviceGetGpuInstanceById(self, handle: Any, gi_id: Any, out: Any) -> int:
        with self._lock:
            ret, card = self._mig_card(handle, "nvmlDeviceGetGpuInstanceById")
            if card is None:
                return ret
            wanted = int(_value(gi_id))
            if wanted not in self._mig.get(card.uuid, {}):
                return ERROR_NOT_FOUND
            _point(_out(out), self._handle(GPU_INSTANCE, card.index, wanted))
            return SUCCESS

    def _nvmlDeviceGetGpuInstances(self, handle: Any, profile_id: Any, array: Any, count: Any) -> int:
        with self._lock:
            ret, card = self._mig_card(handle, "nvmlDeviceGetGpuInstances")
            if card is None:
                return ret
            wanted = int(_value(profile_id))
            found = [gi for gi in self._mig.get(card.uuid, {}).values() if gi.profile_id == wanted]
            slots = _out(count)
            if array is not None and slots.value < len(found):
                return ERROR_INSUFFICIENT_SIZE
            for i, gi in enumerate(sorted(found, key=lambda g: g.start)):
                if array is not None:
                    _point_at(_out(array), i, self._handle(GPU_INSTANCE, card.index, gi.id))
            slots.value = len(found)
            return SUCCESS

    def _nvmlGpuInstanceGetInfo(self, gpu_instance: Any, info: Any) -> int:
        with self._lock:
            ret, card, gi, _ci = self._resolve(gpu_instance, GPU_INSTANCE)
            if gi is None:
                return ret
            out = _out(info)
            _point(out.device, self._devices[card.index])
            out.id, out.profileId = gi.id, gi.profile_id
            out.placement.start, out.placement.size = gi.start, gi.size
            return SUCCESS

    def _nvmlGpuInstanceDestroy(self, gpu_instance: Any) -> int:
        with self._lock:
            ret, card, gi, _ci = self._resolve(gpu_instance, GPU_INSTANCE)
            if gi is None:
                return ret
            if gi.computes or gi.processes:
                return ERROR_IN_USE
            del self._mig[card.uuid][gi.id]
            self._mig_save()
            return SUCCESS

    # --- compute instances ----------------------------------------------------------------------------
    def _nvmlGpuInstanceGetComputeInstanceProfileInfoV(
        self, gpu_instance: Any, profile_id: Any, engine: Any, info: Any
    ) -> int:
        with self._lock:
            ret, _card, gi, _ci = self._resolve(gpu_instance, GPU_INSTANCE)
            if gi is None:
                return ret
            wanted = int(_value(profile_id))
            slices = CI_PROFILE_SLICES.get(wanted)
            if slices is None or slices > gi.slices or int(_value(engine)) != 0:
                return ERROR_NOT_SUPPORTED
            out = _out(info)
            out.id, out.sliceCount, out.instanceCount = wanted, slices, gi.slices // slices
            out.multiprocessorCount = slices * 16
            if hasattr(out, "name"):
                out.name = f"MIG {slices}c".encode()
            return SUCCESS

    _nvmlGpuInstanceGetComputeInstanceProfileInfo = _nvmlGpuInstanceGetComputeInstanceProfileInfoV

    def _nvmlGpuInstanceCreateComputeInstance(self, gpu_instance: Any, profile_id: Any, out: Any) -> int:
        with self._lock:
            ret, card, gi, _ci = self._resolve(gpu_instance, GPU_INSTANCE)
            if gi is None:
                return ret
            wanted = int(_value(profile_id))
            slices = CI_PROFILE_SLICES.get(wanted)
            if slices is None or slices > gi.slices:
                return ERROR_NOT_SUPPORTED
            if sum(ci.slices for ci in gi.computes.values()) + slices > gi.slices:
                return ERROR_INSUFFICIENT_RESOURCES
            ci_id = next(i for i in range(64) if i not in gi.computes)
            self._mig_generation += 1
            name = f"{card.uuid}/{gi.id}/{ci_id}/{self._mig_generation}"
            gi.computes[ci_id] = SimComputeInstance(
                ci_id, wanted, slices, f"MIG-{uuid.uuid5(_MIG_NAMESPACE, name)}"
            )
            self._mig_save()
            _point(_out(out), self._handle(COMPUTE_INSTANCE, card.index, gi.id, ci_id))
            return SUCCESS

    def _nvmlGpuInstanceGetComputeInstanceById(self, gpu_instance: Any, ci_id: Any, out: Any) -> int:
        with self._lock:
            ret, card, gi, _ci = self._resolve(gpu_instance, GPU_INSTANCE)
            if gi is None:
                return ret
            wanted = int(_value(ci_id))
            if wanted not in gi.computes:
                return ERROR_NOT_FOUND
            _point(_out(out), self._handle(COMPUTE_INSTANCE, card.index, gi.id, wanted))
            return SUCCESS

    def _nvmlGpuInstanceGetComputeInstances(
        self, gpu_instance: Any, profile_id: Any, array: Any, count: Any
    ) -> int:
        with self._lock:
            ret, card, gi, _ci = self._resolve(gpu_instance, GPU_INSTANCE)
            if gi is None:
                return ret
            wanted = int(_value(profile_id))
            found = [ci for ci in gi.computes.values() if ci.profile_id == wanted]
            slots = _out(count)
            if array is not None and slots.value < len(found):
                return ERROR_INSUFFICIENT_SIZE
            for i, ci in enumerate(sorted(found, key=lambda c: c.id)):
                if array is not None:
                    _point_at(_out(array), i, self._handle(COMPUTE_INSTANCE, card.index, gi.id, ci.id))
            slots.value = len(found)
            return SUCCESS

    def _nvmlComputeInstanceGetInfo_v2(self, compute_instance: Any, info: Any) -> int:
        with self._lock:
            ret, card, gi, ci = self._resolve(compute_instance, COMPUTE_INSTANCE)
            if ci is None:
                return ret
            out = _out(info)
            _point(out.device, self._devices[card.index])
            _point(out.gpuInstance, self._handle(GPU_INSTANCE, card.index, gi.id))
            out.id, out.profileId = ci.id, ci.profile_id
            out.placement.start, out.placement.size = 0, ci.slices
            return SUCCESS

    def _nvmlComputeInstanceDestroy(self, compute_instance: Any) -> int:
        with self._lock:
            ret, _card, gi, ci = self._resolve(compute_instance, COMPUTE_INSTANCE)
            if ci is None:
                return ret
            if gi.processes:
                return ERROR_IN_USE
            del gi.computes[ci.id]
            self._mig_save()
            return SUCCESS

    # --- MIG devices ------------------------------------------------------------------------------------
    def _nvmlDeviceGetMaxMigDeviceCount(self, handle: Any, count: Any) -> int:
        ret, card = self._card(handle, "nvmlDeviceGetMaxMigDeviceCount")
        if card is not None:
            _out(count).value = max((p.count for p in card.product.profiles), default=0)
        return ret

    def _nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: Any, out: Any) -> int:
        with self._lock:
            ret, card = self._mig_card(handle, "nvmlDeviceGetMigDeviceHandleByIndex")
            if card is None:
                return ret
            devices = self._mig_devices(card)
            i = int(_value(index))
            if not 0 <= i < len(devices):
                return ERROR_NOT_FOUND
            gi, ci = devices[i]
            _point(_out(out), self._handle(MIG_DEVICE, card.index, gi.id, ci.id))
            return SUCCESS

    def _nvmlDeviceIsMigDeviceHandle(self, handle: Any, out: Any) -> int:
        key = self._handle_of.get(_address(handle))
        _out(out).value = 1 if key is not None and key[0] == MIG_DEVICE else 0
        return SUCCESS

    def _mig_id(self, handle: Any, out: Any, which: int) -> int:
        with self._lock:
            ret, _card, gi, ci = self._resolve(handle, MIG_DEVICE)
            if ci is None:
                return ret
            _out(out).value = gi.id if which == GPU_INSTANCE else ci.id
            return SUCCESS

    def _nvmlDeviceGetGpuInstanceId(self, handle: Any, out: Any) -> int:
        return self._mig_id(handle, out, GPU_INSTANCE)

    def _nvmlDeviceGetComputeInstanceId(self, handle: Any, out: Any) -> int:
        return self._mig_id(handle, out, COMPUTE_INSTANCE)

    def _nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: Any, out: Any) -> int:
        with self._lock:
            ret, card, _gi, ci = self._resolve(handle, MIG_DEVICE)
            if ci is None:
                return ret
            _point(_out(out), self._devices[card.index])
            return SUCCESS
