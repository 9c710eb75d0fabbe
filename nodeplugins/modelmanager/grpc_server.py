"""The plugin's gRPC faces: CSI Identity and Node services on the CSI socket, and kubelet plugin
registration answered by the plugin itself (no ``node-driver-registrar`` sidecar is needed).

Sockets (spec §8 leaves the paths open; these are the conventional ones):

- CSI: ``<kubelet>/plugins/model.csi.gpustack.ai/csi.sock``
- registration: ``<kubelet>/plugins_registry/model.csi.gpustack.ai-reg.sock`` — kubelet's plugin
  watcher finds it, asks ``GetInfo`` and learns the CSI socket; the plugin re-creates it when
  kubelet removes its directory's contents on a restart.

The Node service maps :class:`~.publish.CsiError` codes to gRPC status codes; the Controller service
is not served (``attachRequired: false``, ephemeral volumes only).
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from api import OPERATOR_VERSION as __version__
from api import constants
from nodeplugins import protos
from nodeplugins.modelmanager.publish import CsiError, NodeService, PublishRequest

log = logging.getLogger("modelmanager.grpc")

csi = protos.load("csi.v1.csi_pb2")
csi_grpc = protos.load("csi.v1.csi_pb2_grpc")
reg = protos.load("kubelet.pluginregistration.v1.api_pb2")
reg_grpc = protos.load("kubelet.pluginregistration.v1.api_pb2_grpc")


def csi_socket(kubelet_dir: Path) -> Path:
    return kubelet_dir / "plugins" / constants.CSI_DRIVER_MODEL / "csi.sock"


def registration_socket(kubelet_dir: Path) -> Path:
    return kubelet_dir / "plugins_registry" / f"{constants.CSI_DRIVER_MODEL}-reg.sock"


# Generated at bootstrap: the servicer bases have no static type.
_IdentityServicer: Any = csi_grpc.IdentityServicer
_NodeServicer: Any = csi_grpc.NodeServicer
_RegistrationServicer: Any = reg_grpc.RegistrationServicer


class Identity(_IdentityServicer):
    def __init__(self, ready: Any) -> None:
        self.ready = ready

    def GetPluginInfo(self, request: Any, context: grpc.ServicerContext) -> Any:
        return csi.GetPluginInfoResponse(name=constants.CSI_DRIVER_MODEL, vendor_version=__version__)

    def GetPluginCapabilities(self, request: Any, context: grpc.ServicerContext) -> Any:
        return csi.GetPluginCapabilitiesResponse(capabilities=[])

    def Probe(self, request: Any, context: grpc.ServicerContext) -> Any:
        from google.protobuf import wrappers_pb2

        return csi.ProbeResponse(ready=wrappers_pb2.BoolValue(value=bool(self.ready())))


class Node(_NodeServicer):
    def __init__(self, service: NodeService, node_id: str) -> None:
        self.service = service
        self.node_id = node_id

    def _abort(self, context: grpc.ServicerContext, error: CsiError) -> Any:
        context.abort(getattr(grpc.StatusCode, error.code), error.message)

    def NodePublishVolume(self, request: Any, context: grpc.ServicerContext) -> Any:
        capability = request.volume_capability if request.HasField("volume_capability") else None
        publish = PublishRequest(
            volume_id=request.volume_id,
            target_path=request.target_path,
            volume_context=dict(request.volume_context),
            secrets=dict(request.secrets),
            has_capability=capability is not None,
            block=capability is not None and capability.HasField("block"),
            readonly=request.readonly,
        )
        try:
            self.service.publish(publish)
        except CsiError as error:
            return self._abort(context, error)
        return csi.NodePublishVolumeResponse()

    def NodeUnpublishVolume(self, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            self.service.unpublish(request.volume_id, request.target_path)
        except CsiError as error:
            return self._abort(context, error)
        return csi.NodeUnpublishVolumeResponse()

    def NodeGetInfo(self, request: Any, context: grpc.ServicerContext) -> Any:
        return csi.NodeGetInfoResponse(node_id=self.node_id)

    def NodeGetCapabilities(self, request: Any, context: grpc.ServicerContext) -> Any:
        return csi.NodeGetCapabilitiesResponse(capabilities=[])

    def _unimplemented(self, context: grpc.ServicerContext, what: str) -> Any:
        context.abort(
            grpc.StatusCode.UNIMPLEMENTED, f"{what} is not served: the plugin serves ephemeral volumes only"
        )

    def NodeStageVolume(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._unimplemented(context, "NodeStageVolume")

    def NodeUnstageVolume(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._unimplemented(context, "NodeUnstageVolume")

    def NodeGetVolumeStats(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._unimplemented(context, "NodeGetVolumeStats")

    def NodeExpandVolume(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._unimplemented(context, "NodeExpandVolume")


class Registration(_RegistrationServicer):
    def __init__(self, endpoint: Path) -> None:
        self.endpoint = endpoint
        self.registered = threading.Event()

    def GetInfo(self, request: Any, context: grpc.ServicerContext) -> Any:
        return reg.PluginInfo(
            type="CSIPlugin",
            name=constants.CSI_DRIVER_MODEL,
            endpoint=str(self.endpoint),
            supported_versions=["1.0.0"],
        )

    def NotifyRegistrationStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        if request.plugin_registered:
            self.registered.set()
            log.info("registered with kubelet")
        else:
            log.warning("kubelet refused the registration", extra={"error": request.error})
        return reg.RegistrationStatusResponse()


def _listen(server: grpc.Server, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_socket():
        path.unlink()
    server.add_insecure_port(f"unix://{path}")


class Servers:
    """Both gRPC servers; :meth:`watch_registration` re-creates the registration socket when gone."""

    def __init__(
        self,
        service: NodeService,
        node_id: str,
        kubelet_dir: Path,
        ready: Any,
        *,
        csi_path: Path | None = None,
    ) -> None:
        self.kubelet_dir = kubelet_dir
        self.csi_path = csi_path or csi_socket(kubelet_dir)
        self.reg_path = registration_socket(kubelet_dir)
        self.node = Node(service, node_id)
        self.identity = Identity(ready)
        self.registration = Registration(self.csi_path)
        self.csi_server = grpc.server(futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="csi"))
        csi_grpc.add_IdentityServicer_to_server(self.identity, self.csi_server)
        csi_grpc.add_NodeServicer_to_server(self.node, self.csi_server)
        self.reg_server: grpc.Server | None = None
        self._stop = threading.Event()

    def start(self, *, register: bool = True) -> None:
        _listen(self.csi_server, self.csi_path)
        self.csi_server.start()
        if register:
            self._start_registration()
            threading.Thread(target=self._watch, name="csi-registration", daemon=True).start()

    def _start_registration(self) -> None:
        if self.reg_server is not None:
            self.reg_server.stop(grace=None)
        self.reg_server = grpc.server(futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="csi-reg"))
        reg_grpc.add_RegistrationServicer_to_server(self.registration, self.reg_server)
        _listen(self.reg_server, self.reg_path)
        self.reg_server.start()

    def _watch(self) -> None:
        while not self._stop.wait(2.0):
            if not os.path.exists(self.reg_path):
                log.info("registration socket removed (kubelet restarted?): serving it again")
                self.registration.registered.clear()
                self._start_registration()

    def stop(self) -> None:
        self._stop.set()
        for server in (self.csi_server, self.reg_server):
            if server is not None:
                server.stop(grace=2)
