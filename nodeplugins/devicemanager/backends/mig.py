"""NVIDIA MIG through NVML: the :class:`~nodeplugins.devicemanager.partitions.Hardware` of NVIDIA.

A partition is one GPU instance at the reserved placement plus one compute instance covering all of
its compute slices (never a subdivided one), addressed by the UUID of the MIG device NVML reports
for that pair.  The calls are pynvml's own wrappers, on the real ``libnvidia-ml.so.1`` or on the
simulated library (:mod:`..simulation.fakemig`), exactly as discovery runs:

- create: ``nvmlDeviceCreateGpuInstanceWithPlacement``, ``nvmlGpuInstanceGetInfo``, the compute
  profile whose slice count equals the GPU instance's, ``nvmlGpuInstanceCreateComputeInstance``,
  then the MIG device handle of that pair and its UUID; a failure part-way destroys what was made;
- alive: the GPU instance id still exists and one of its MIG devices carries the recorded UUID;
- destroy: compute instance(s) then the GPU instance, only while it still is the recorded one
  (same placement, no foreign compute instance); ``NVML_ERROR_IN_USE`` becomes :class:`InUse`.

NVML is initialised once for the backend's lifetime (NVML counts its initialisations, so the
discovery passes' own init/shutdown pairs leave it up).
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from typing import Any

from nodeplugins.devicemanager.partitions import Instance, InUse, PartitionError

GPU_INSTANCE_PROFILES = range(0x12)  # NVML_GPU_INSTANCE_PROFILE_COUNT
COMPUTE_INSTANCE_PROFILES = range(0x9)  # NVML_COMPUTE_INSTANCE_PROFILE_COUNT
ENGINE_SHARED = 0  # NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
MAX_INSTANCES = 8


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlMig:
    def __init__(self, library: Any = None) -> None:
        """``library``: the simulated NVML library object, or ``None`` for the real one."""
        self.library = library
        self._lock = threading.Lock()
        self._initialized = False
        self._profiles: dict[tuple[str, str], tuple[int, int]] = {}  # (card, name) → (NVML id, slices)

    def _nvml(self) -> Any:
        from nodeplugins.devicemanager.backends.nvidia import _pynvml

        nvml = _pynvml()
        with self._lock:
            if self.library is not None and nvml.nvmlLib is not self.library:
                from nodeplugins.devicemanager.simulation.fakenvml import install

                install(self.library)
            if not self._initialized:
                try:
                    nvml.nvmlInit()
                except nvml.NVMLError as error:
                    raise PartitionError(f"NVML did not initialise: {error}") from None
                self._initialized = True
        return nvml

    def close(self) -> None:
        if self._initialized:
            nvml = self._nvml()
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()
            self._initialized = False

    def _device(self, nvml: Any, card: str) -> Any:
        try:
            return nvml.nvmlDeviceGetHandleByUUID(card)
        except nvml.NVMLError as error:
            raise PartitionError(f"NVML does not know card {card}: {error}") from None

    def _card_profiles(self, nvml: Any, device: Any, card: str) -> dict[str, tuple[int, int]]:
        """The card's GPU-instance profiles: name → (NVML profile id, compute slices), read once."""
        known = {name: ids for (c, name), ids in self._profiles.items() if c == card}
        if known:
            return known
        for profile_id in GPU_INSTANCE_PROFILES:
            try:
                info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(device, profile_id)
            except nvml.NVMLError:
                continue  # not offered on this card
            name = _text(info.name).removeprefix("MIG ").strip()
            known[name] = (int(info.id), int(info.sliceCount))
        for name, ids in known.items():
            self._profiles[(card, name)] = ids
        return known

    def _gi_profile(self, nvml: Any, device: Any, card: str, profile: str) -> tuple[int, int]:
        found = self._card_profiles(nvml, device, card).get(profile)
        if found is None:
            raise PartitionError(f"card {card} does not offer MIG profile {profile}")
        return found

    def _mig_devices(self, nvml: Any, device: Any) -> dict[tuple[int, int], str]:
        """(GPU instance id, compute instance id) → MIG device UUID, for every MIG device of the card."""
        out: dict[tuple[int, int], str] = {}
        try:
            count = nvml.nvmlDeviceGetMaxMigDeviceCount(device)
        except nvml.NVMLError:
            return out
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(device, index)
                pair = (nvml.nvmlDeviceGetGpuInstanceId(handle), nvml.nvmlDeviceGetComputeInstanceId(handle))
                out[pair] = _text(nvml.nvmlDeviceGetUUID(handle))
            except nvml.NVMLError:
                continue  # no MIG device at this index
        return out

    # --- Hardware -----------------------------------------------------------------------------------
    def create(self, card: str, profile: str, start: int, length: int) -> Instance:
        nvml = self._nvml()
        device = self._device(nvml, card)
        profile_id, slices = self._gi_profile(nvml, device, card, profile)
        placement = nvml.c_nvmlGpuInstancePlacement_t(start, length)
        try:
            gpu_instance = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(
                device, profile_id, ctypes.byref(placement)
            )
        except nvml.NVMLError as error:
            raise PartitionError(
                f"NVML could not create a {profile} GPU instance at memory slices {start}-{start + length - 1} "
                f"of card {card}: {error}"
            ) from None
        compute = None
        try:
            gi_id = int(nvml.nvmlGpuInstanceGetInfo(gpu_instance).id)
            compute = nvml.nvmlGpuInstanceCreateComputeInstance(
                gpu_instance, self._whole_compute_profile(nvml, gpu_instance, slices)
            )
            ci_id = int(nvml.nvmlComputeInstanceGetInfo(compute).id)
            uuid = self._mig_devices(nvml, device).get((gi_id, ci_id))
            if not uuid:
                raise PartitionError(f"NVML reports no MIG device for GPU instance {gi_id} on card {card}")
        except (nvml.NVMLError, PartitionError) as error:
            with contextlib.suppress(nvml.NVMLError):
                if compute is not None:
                    nvml.nvmlComputeInstanceDestroy(compute)
                nvml.nvmlGpuInstanceDestroy(gpu_instance)
            raise PartitionError(
                f"NVML could not complete the {profile} instance on card {card}: {error}"
            ) from None
        return Instance(card, profile, start, length, gi_id, ci_id, uuid)

    def _whole_compute_profile(self, nvml: Any, gpu_instance: Any, slices: int) -> int:
        for profile_id in COMPUTE_INSTANCE_PROFILES:
            try:
                info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gpu_instance, profile_id, ENGINE_SHARED
                )
            except nvml.NVMLError:
                continue
            if int(info.sliceCount) == slices:
                return int(info.id)
        raise PartitionError(f"no compute-instance profile covers all {slices} compute slices")

    def _gpu_instances(self, nvml: Any, device: Any, card: str) -> list[tuple[str, Any]]:
        """(profile name, GPU instance handle) of every GPU instance on the card."""
        out: list[tuple[str, Any]] = []
        for name, (profile_id, _slices) in self._card_profiles(nvml, device, card).items():
            array = (nvml.c_nvmlGpuInstance_t * MAX_INSTANCES)()
            count = ctypes.c_uint(MAX_INSTANCES)
            try:
                nvml.nvmlDeviceGetGpuInstances(device, profile_id, array, ctypes.byref(count))
            except nvml.NVMLError:
                continue
            out.extend((name, array[i]) for i in range(count.value))
        return out

    def instances(self, card: str) -> list[Instance]:
        nvml = self._nvml()
        device = self._device(nvml, card)
        devices = self._mig_devices(nvml, device)
        out = []
        for name, handle in self._gpu_instances(nvml, device, card):
            try:
                info = nvml.nvmlGpuInstanceGetInfo(handle)
            except nvml.NVMLError:
                continue
            gi_id = int(info.id)
            computes = [(ci, uuid) for (gi, ci), uuid in devices.items() if gi == gi_id]
            ci_id, uuid = computes[0] if len(computes) == 1 else (-1, "")
            out.append(
                Instance(card, name, int(info.placement.start), int(info.placement.size), gi_id, ci_id, uuid)
            )
        return sorted(out, key=lambda i: i.start)

    def alive(self, instance: Instance) -> bool:
        nvml = self._nvml()
        device = self._device(nvml, instance.card)
        try:
            nvml.nvmlDeviceGetGpuInstanceById(device, instance.gpu_instance)
        except nvml.NVMLError:
            return False
        devices = self._mig_devices(nvml, device)
        return devices.get((instance.gpu_instance, instance.compute_instance)) == instance.device

    def destroy(self, instance: Instance) -> bool:
        nvml = self._nvml()
        device = self._device(nvml, instance.card)
        try:
            gpu_instance = nvml.nvmlDeviceGetGpuInstanceById(device, instance.gpu_instance)
            info = nvml.nvmlGpuInstanceGetInfo(gpu_instance)
        except nvml.NVMLError:
            return False  # gone already
        if (int(info.placement.start), int(info.placement.size)) != (instance.start, instance.length):
            return False  # the id was reassigned to an instance somebody else made
        computes = {
            ci: uuid
            for (gi, ci), uuid in self._mig_devices(nvml, device).items()
            if gi == instance.gpu_instance
        }
        if instance.device and computes and instance.device not in computes.values():
            return False  # recreated by somebody else at the same place
        try:
            for ci_id in computes:
                nvml.nvmlComputeInstanceDestroy(
                    nvml.nvmlGpuInstanceGetComputeInstanceById(gpu_instance, ci_id)
                )
            nvml.nvmlGpuInstanceDestroy(gpu_instance)
        except nvml.NVMLError as error:
            if error.value == nvml.NVML_ERROR_IN_USE:
                raise InUse(
                    f"card {instance.card}: GPU instance {instance.gpu_instance} ({instance.device}) is in use"
                ) from None
            raise PartitionError(
                f"NVML could not destroy GPU instance {instance.gpu_instance} on card {instance.card}: {error}"
            ) from None
        return True
