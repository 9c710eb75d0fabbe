"""The kubelet device-plugin server (v1beta1) of one RDMA key (C.5).

Served beside the accelerator plugins on every Linux node, registered by the same
:class:`~nodeplugins.devicemanager.kubelet.KubeletLink` (so kubelet restarts re-register it in a new
generation).  ``ListAndWatch`` re-reads the recorded interfaces whenever the watchers move and
streams the tokens with their health and NUMA hint; with no capable endpoint it streams zero
devices.  No ``GetPreferredAllocation``.  ``Allocate`` resolves the granted tokens to endpoints of
``Devices.spec.interfaces[]`` as recorded now and hands over what :mod:`.allocate` computes; a
token that names no endpoint, or an endpoint without a verbs device, is ``FAILED_PRECONDITION``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
from prometheus_client import Counter

from nodeplugins.devicemanager.plugin import Watchers, pb, pb_grpc
from nodeplugins.devicemanager.rdma import allocate, endpoints
from nodeplugins.devicemanager.rdma.endpoints import Key, Refusal
from nodeplugins.devicemanager.rdma.sysfs import Sysfs

log = logging.getLogger("devicemanager.rdma.plugin")
ALLOCATIONS = Counter("gpustack_rdma_plugin_allocations", "Containers granted RDMA endpoints", ["resource"])
REFUSALS = Counter("gpustack_rdma_plugin_refusals", "RDMA Allocate calls refused", ["resource"])

Records = Callable[[], list[dict[str, Any]]]
_Servicer: Any = pb_grpc.DevicePluginServicer  # generated at bootstrap: no static type


class RdmaPlugin(_Servicer):
    def __init__(
        self, key: Key, interfaces: Records, sysfs: Sysfs, dev_root: str | Path, watchers: Watchers
    ) -> None:
        self.resource = key  # what KubeletLink reads: .name, .socket
        self.interfaces = interfaces
        self.sysfs = sysfs
        self.dev_root = dev_root
        self.watchers = watchers
        self.listed = threading.Event()  # the kubelet has this stream's first device list

    def options(self) -> Any:
        return pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=False)

    def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return self.options()

    def devices(self) -> list[Any]:
        out = []
        for token, healthy, numa in endpoints.tokens(self.interfaces(), self.resource.family):
            device = pb.Device(ID=token, health="Healthy" if healthy else "Unhealthy")
            if numa:  # no hint rather than a wrong one
                device.topology.nodes.append(pb.NUMANode(ID=int(numa)))
            out.append(device)
        return out

    def ListAndWatch(self, request: Any, context: Any) -> Iterator[Any]:
        seen = -1
        last: list[tuple[str, str, tuple[int, ...]]] | None = None
        while context.is_active() and not self.watchers.closed:
            version = self.watchers.version
            if version != seen:
                seen = version
                devices = self.devices()
                summary = [(d.ID, d.health, tuple(n.ID for n in d.topology.nodes)) for d in devices]
                if summary != last:
                    last = summary
                    yield pb.ListAndWatchResponse(devices=devices)
                    self.listed.set()
            self.watchers.wait(seen, 5.0)

    def Allocate(self, request: Any, context: Any) -> Any:
        response = pb.AllocateResponse()
        for want in request.container_requests:
            ids = list(want.devices_ids)
            try:
                granted = endpoints.granted(self.interfaces(), self.resource.family, ids)
                handed = allocate.handover(self.sysfs, self.dev_root, granted)
            except Refusal as refusal:
                REFUSALS.labels(self.resource.name).inc()
                log.warning(
                    "RDMA allocation refused",
                    extra={"resource": self.resource.name, "devices": ids, "reason": str(refusal)},
                )
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(refusal))
            ALLOCATIONS.labels(self.resource.name).inc()
            log.info(
                "RDMA endpoints allocated",
                extra={"resource": self.resource.name, "endpoints": [e.device for e in granted]},
            )
            out = pb.ContainerAllocateResponse(envs=handed.envs)
            for container_path, host_path, permissions in handed.devices:
                out.devices.append(
                    pb.DeviceSpec(container_path=container_path, host_path=host_path, permissions=permissions)
                )
            response.container_responses.append(out)
        return response

    def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "the RDMA plugins offer no preferred allocation")

    def PreStartContainer(self, request: Any, context: Any) -> Any:
        return pb.PreStartContainerResponse()
