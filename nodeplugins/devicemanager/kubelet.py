"""The kubelet side: serving each plugin on its socket, registering it, and re-registering.

The kubelet deletes every file in ``device-plugins/`` when it starts, so a plugin registered before
a kubelet restart is gone afterwards.  :class:`KubeletLink` watches ``kubelet.sock`` (woken by
inotify on the directory the moment an entry changes, and polled): when it appears or is re-created
(a new inode), the plugin servers are started afresh on their sockets and registered again; a
refused or failed registration is logged and retried.  Allocations survive: they live in the
allocator and on the Pods, not in the gRPC servers.

:class:`PodResources` asks the kubelet's pod-resources API which containers hold no device of a
resource yet (the container an ``Allocate`` serves is among them).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from concurrent import futures
from pathlib import Path
from typing import Any, Protocol

import grpc

from fastpath import podresources
from nodeplugins.devicemanager.dirwatch import DirectoryEvents
from nodeplugins.devicemanager.plugin import API_VERSION, pb, pb_grpc
from nodeplugins.protos import load

log = logging.getLogger("devicemanager.kubelet")
podresources_pb = load("kubelet.podresources.v1.api_pb2")


UNIX_PATH_MAX = 100  # sun_path holds 108 bytes; gRPC refuses 107 already: keep a margin


def unix_target(path: str | Path) -> str:
    """A gRPC unix address for ``path``: absolute when it fits the 107-byte limit of a socket path,
    else relative to the working directory (:func:`work_beside` moves it next to the sockets)."""
    absolute = os.path.abspath(path)
    if len(absolute.encode()) <= UNIX_PATH_MAX:
        return f"unix://{absolute}"
    relative = os.path.relpath(absolute)
    if len(relative.encode()) > UNIX_PATH_MAX:
        raise OSError(f"{absolute}: a unix socket path has at most {UNIX_PATH_MAX} bytes, even relative")
    return f"unix:{relative}"


def work_beside(socket: str | Path) -> None:
    """Work in the kubelet's socket directory when its absolute paths are too long for sockets
    (a deep state directory in tests; /var/lib/kubelet/device-plugins in production is short)."""
    directory = Path(socket).resolve().parent
    if len(str(directory).encode()) > UNIX_PATH_MAX - 40:  # room for the longest socket name
        directory.mkdir(parents=True, exist_ok=True)
        os.chdir(directory)


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


class _Resource(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def socket(self) -> str: ...


class Served(Protocol):
    """A device-plugin servicer: an accelerator family's or an RDMA key's."""

    @property
    def resource(self) -> _Resource: ...

    def options(self) -> Any: ...

    @property
    def listed(self) -> threading.Event:
        """Set once this servicer's ListAndWatch stream has handed the kubelet its device list."""
        ...


class KubeletLink:
    def __init__(self, plugins: Sequence[Served], kubelet_socket: str | Path, *, poll: float = 1.0) -> None:
        self.plugins = plugins
        self.kubelet_socket = Path(kubelet_socket)
        self.plugin_dir = self.kubelet_socket.parent
        self.poll = poll
        self._servers: list[grpc.Server] = []
        self._registered_inode: int | None = None
        self._stop = threading.Event()
        # Woken the moment kubelet.sock or a plugin socket is created or removed (a kubelet
        # restarting): the kubelet re-admits the node's Pods within about a second of starting,
        # and a Pod whose device's plugin has not registered again by then is refused and stopped.
        self._events = DirectoryEvents(self.plugin_dir)
        self._thread: threading.Thread | None = None
        self.registrations = 0  # successful registration rounds (tests and metrics read it)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kubelet-link", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._events.wake()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._stop_servers()
        self._events.close()

    def _run(self) -> None:
        # A kubelet.sock that exists but does not accept yet (bound, not listening) fails a round:
        # the first retry comes soon, later ones back off.
        first_retry = min(self.poll, 0.2)
        backoff = first_retry
        while not self._stop.is_set():
            inode = _inode(self.kubelet_socket)
            sockets_gone = any(not (self.plugin_dir / p.resource.socket).exists() for p in self.plugins)
            if inode is not None and (inode != self._registered_inode or sockets_gone):
                if self._registered_inode is not None:
                    log.info(
                        "kubelet.sock re-created or plugin sockets removed: serving and registering again"
                    )
                try:
                    # The inode of the kubelet.sock the round registered through: a kubelet that
                    # restarted while the plugins were being served is the one registered with.
                    self._registered_inode = self._serve_and_register()
                    self.registrations += 1
                    backoff = first_retry
                except (grpc.RpcError, OSError, RuntimeError) as error:
                    log.warning(
                        "kubelet registration failed; retrying",
                        extra={"socket": str(self.kubelet_socket), "error": str(error), "retryIn": backoff},
                    )
                    self._back_off(backoff, inode)
                    backoff = min(backoff * 2, 30.0)
                    continue
            self._events.wait(self.poll)

    def _back_off(self, seconds: float, inode: int | None) -> None:
        """Wait before retrying a failed round, but no longer once a new kubelet.sock is there (the
        round's own sockets wake the directory watch too, so any event alone would not do)."""
        deadline = time.monotonic() + seconds
        while not self._stop.is_set() and (left := deadline - time.monotonic()) > 0:
            self._events.wait(left)
            if _inode(self.kubelet_socket) not in (None, inode):
                return

    def _stop_servers(self) -> None:
        for server in self._servers:
            server.stop(grace=0.5)
        self._servers = []

    def listed(self) -> bool:
        """Registered, and every resource's device list is with the kubelet: until then the kubelet
        counts the resource's devices unhealthy and refuses a Pod that asks for one
        (``UnexpectedAdmissionError``), so ``/readyz`` waits for this."""
        return self.registrations > 0 and all(p.listed.is_set() for p in self.plugins)

    def _serve_and_register(self) -> int:
        """Serve every plugin afresh and register each; the inode of the ``kubelet.sock`` they were
        registered through, read just before dialling it (the socket the round began with may have
        been replaced while the servers started: a kubelet restarting)."""
        self._stop_servers()
        for plugin in self.plugins:
            plugin.listed.clear()  # the kubelet opens a new stream after this round's Register
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        for plugin in self.plugins:
            path = self.plugin_dir / plugin.resource.socket
            if path.exists() or path.is_symlink():
                path.unlink()
            # ListAndWatch streams hold a thread each; the rest are short calls.
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="dp"))
            pb_grpc.add_DevicePluginServicer_to_server(plugin, server)
            if not server.add_insecure_port(unix_target(path)):
                raise OSError(f"cannot serve on {path}")
            server.start()
            self._servers.append(server)
        inode = _inode(self.kubelet_socket)
        if inode is None:
            raise OSError(f"{self.kubelet_socket} is gone: the kubelet is restarting")
        with grpc.insecure_channel(unix_target(self.kubelet_socket)) as channel:
            stub = pb_grpc.RegistrationStub(channel)
            for plugin in self.plugins:
                stub.Register(
                    pb.RegisterRequest(
                        version=API_VERSION,
                        endpoint=plugin.resource.socket,
                        resource_name=plugin.resource.name,
                        options=plugin.options(),
                    ),
                    timeout=10,
                )
                log.info("registered with the kubelet", extra={"resource": plugin.resource.name})
        return inode


class PodResources:
    """The kubelet pod-resources API (``pod-resources/kubelet.sock`` beside ``device-plugins/``).

    ``List`` is asked for its raw bytes and read by :func:`fastpath.podresources.waiting`, which
    reads only the fields identification needs (decoding the whole answer into messages cost
    ~0.7 ms of the interpreter's time for a node of 400 Pods, on every identification)."""

    METHOD = "/v1.PodResourcesLister/List"

    def __init__(self, socket: str | Path, *, timeout: float = 2.0) -> None:
        self.socket = Path(socket)
        self.timeout = timeout
        self._channel: grpc.Channel | None = None
        self._list: Any = None
        self._lock = threading.Lock()

    def _lister(self) -> Any:
        with self._lock:
            if self._channel is None:
                self._channel = grpc.insecure_channel(unix_target(self.socket))
                # An empty ListPodResourcesRequest is zero bytes; the answer stays bytes.
                self._list = self._channel.unary_unary(self.METHOD)
            return self._list

    def waiting(
        self, resource: str, skip: frozenset[tuple[str, str]] = frozenset()
    ) -> set[tuple[str, str, str]] | None:
        """(namespace, pod, container) of every container the kubelet lists without a device of
        ``resource``, Pods named in ``skip`` (namespace, pod) left unread; ``None`` when the
        kubelet cannot be asked or its answer does not read as one."""
        if not os.path.exists(self.socket):
            return None
        try:
            answer = self._lister()(b"", timeout=self.timeout)
        except grpc.RpcError as error:
            log.info(
                "pod-resources lookup failed; identifying from pending Pods", extra={"error": str(error)}
            )
            with self._lock:
                self._channel = None
            return None
        try:
            return podresources.waiting(answer, resource, skip)
        except ValueError as error:
            log.warning(
                "the kubelet's pod-resources answer does not read as one; identifying from pending Pods",
                extra={"error": str(error), "bytes": len(answer)},
            )
            return None
