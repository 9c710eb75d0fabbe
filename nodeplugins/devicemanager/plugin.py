"""The kubelet device-plugin API (v1beta1) for one resource, over the allocator.

``ListAndWatch`` streams the resource's tokens with their health, re-sent whenever the ledger moves
(a reservation or release, a health change); ``GetPreferredAllocation`` and ``Allocate`` defer to the
:class:`~nodeplugins.devicemanager.allocator.Allocator`.  A refusal is ``FAILED_PRECONDITION`` with
the allocator's message; the kubelet then fails the Pod with ``UnexpectedAdmissionError``.  After a
grant, ``record`` (the agent's) writes the Pod annotation outside the mutex.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from prometheus_client import Counter, Histogram

from nodeplugins.devicemanager import tokens as tk
from nodeplugins.devicemanager.allocator import Allocator, Held, Refusal
from nodeplugins.devicemanager.backends.base import FAMILY_PARTITIONED, Backend
from nodeplugins.protos import load

log = logging.getLogger("devicemanager.plugin")
pb = load("kubelet.deviceplugin.v1beta1.api_pb2")
pb_grpc = load("kubelet.deviceplugin.v1beta1.api_pb2_grpc")

API_VERSION = "v1beta1"
_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)
ALLOCATIONS = Counter("gpustack_device_plugin_allocations", "Containers granted devices", ["resource"])
REFUSALS = Counter(
    "gpustack_device_plugin_refusals", "Allocate calls refused (FailedPrecondition)", ["resource"]
)
ALLOCATE_SECONDS = Histogram(
    "gpustack_device_plugin_allocate_seconds",
    "Allocate latency, annotation write included",
    ["resource"],
    buckets=_BUCKETS,
)
PREFERRED_SECONDS = Histogram(
    "gpustack_device_plugin_preferred_allocation_seconds",
    "GetPreferredAllocation latency",
    ["resource"],
    buckets=_BUCKETS,
)
Recorder = Callable[[Held], None]


class Watchers:
    """A version counter the ``ListAndWatch`` streams wait on."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.version = 0
        self.closed = False

    def bump(self) -> None:
        with self._cond:
            self.version += 1
            self._cond.notify_all()

    def follow(self, allocator: Allocator) -> None:
        """Wake the streams on an allocator change only when its health stamp moved: most
        reservations and Pod events leave every token's health as it was, and waking each of the
        node's streams to find that out cost a thread switch per stream per grant (a quarter of the
        plugins' CPU under 8 concurrent callers).  The stamp is read under the condition, so of two
        changes racing, the later check sees the later state and no move goes unannounced."""
        last: tuple | None = None

        def changed() -> None:
            nonlocal last
            with self._cond:
                stamp = allocator.health_stamp()
                if stamp == last:
                    return
                last = stamp
                self.version += 1
                self._cond.notify_all()

        allocator.listeners.append(changed)

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def wait(self, seen: int, timeout: float) -> int:
        with self._cond:
            self._cond.wait_for(lambda: self.version != seen or self.closed, timeout)
            return self.version


_Servicer: Any = pb_grpc.DevicePluginServicer  # generated at bootstrap: no static type


class DevicePlugin(_Servicer):
    def __init__(
        self,
        resource: tk.Resource,
        allocator: Allocator,
        backend: Backend,
        record: Recorder,
        watchers: Watchers,
    ) -> None:
        self.resource = resource
        self.allocator = allocator
        self.backend = backend
        self.record = record
        self.watchers = watchers
        self.listed = threading.Event()  # the kubelet has this stream's first device list

    def options(self) -> Any:
        return pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return self.options()

    def devices(self) -> list[Any]:
        rows = self.allocator.row_index()
        out = []
        for token, healthy, numa in tk.devices_of(self.resource, self.allocator.groups, rows):
            device = pb.Device(ID=token, health="Healthy" if healthy else "Unhealthy")
            if numa.isdigit() and self.resource.family != FAMILY_PARTITIONED:
                device.topology.nodes.append(pb.NUMANode(ID=int(numa)))
            out.append(device)
        return out

    def ListAndWatch(self, request: Any, context: Any) -> Iterator[Any]:
        seen = -1
        last: list[tuple[str, str]] | None = None
        last_key: tuple | None = None
        last_stamp: tuple | None = None
        while context.is_active() and not self.watchers.closed:
            version = self.watchers.version
            if version != seen:
                seen = version
                stamp = self.allocator.health_stamp()
                if stamp == last_stamp:  # no card's mode, partitions or health moved
                    self.watchers.wait(seen, 5.0)
                    continue
                last_stamp = stamp
                key = tk.health_key(self.resource, self.allocator.groups, self.allocator.row_index())
                if key == last_key:  # no card's health moved: the token list is the one sent
                    self.watchers.wait(seen, 5.0)
                    continue
                last_key = key
                devices = self.devices()
                summary = [(d.ID, d.health) for d in devices]
                if summary != last:
                    last = summary
                    yield pb.ListAndWatchResponse(devices=devices)
                    self.listed.set()
            self.watchers.wait(seen, 5.0)

    def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        start = time.perf_counter()
        response = pb.PreferredAllocationResponse()
        for want in request.container_requests:
            ids = self.allocator.preferred(
                self.resource,
                list(want.available_deviceIDs),
                list(want.must_include_deviceIDs),
                want.allocation_size,
            )
            response.container_responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=ids))
        PREFERRED_SECONDS.labels(self.resource.name).observe(time.perf_counter() - start)
        return response

    def Allocate(self, request: Any, context: Any) -> Any:
        start = time.perf_counter()
        response = pb.AllocateResponse()
        for want in request.container_requests:
            try:
                response.container_responses.append(self.allocate_one(list(want.devices_ids)))
            except Refusal as refusal:
                REFUSALS.labels(self.resource.name).inc()
                log.warning(
                    "allocation refused",
                    extra={
                        "resource": self.resource.name,
                        "devices": list(want.devices_ids),
                        "reason": str(refusal),
                    },
                )
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(refusal))
        ALLOCATE_SECONDS.labels(self.resource.name).observe(time.perf_counter() - start)
        return response

    def allocate_one(self, device_ids: list[str]) -> Any:
        held = self.allocator.allocate(self.resource, device_ids)
        try:
            injection = self.backend.inject(self.resource.family, held.grants, held.env)
            self.record(held)
        except Exception as error:
            self.allocator.give_back(held)
            raise Refusal(
                f"could not complete the allocation for {held.namespace}/{held.pod} {held.container}: {error}"
            ) from error
        ALLOCATIONS.labels(self.resource.name).inc()
        log.info(
            "allocated",
            extra={
                "resource": self.resource.name,
                "pod": f"{held.namespace}/{held.pod}",
                "container": held.container,
                "cards": [g.card.id for g in held.grants],
            },
        )
        out = pb.ContainerAllocateResponse(envs=injection.envs, annotations=injection.annotations)
        for container_path, host_path, permissions in injection.devices:
            out.devices.append(
                pb.DeviceSpec(container_path=container_path, host_path=host_path, permissions=permissions)
            )
        for container_path, host_path, read_only in injection.mounts:
            out.mounts.append(
                pb.Mount(container_path=container_path, host_path=host_path, read_only=read_only)
            )
        return out

    def PreStartContainer(self, request: Any, context: Any) -> Any:
        return pb.PreStartContainerResponse()
