"""Running the gateway: the TLS listener (unix socket or TCP), uvicorn, and the pieces behind it.

TLS always: with ``--cert-dir`` its ``tls.crt``/``tls.key`` (reloaded when they change), otherwise a
certificate generated at start-up into a private temporary directory, removed at exit (clients skip
verification, as the GPUStack server's does).  A unix socket is created 0600 in a directory created
0700 when missing; a stale socket is replaced, one another process still serves is not.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import logging
import os
import shutil
import signal
import socket
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from certs import issue
from certs.tls import ReloadingContext
from gateway.dashboard.app import create_dashboard_app
from gateway.dashboard.service import Dashboard, DashboardSettings
from gateway.events import Bus
from gateway.manager import Manager, Settings
from gateway.options import Options, UsageError, validate
from gateway.server import Gateway, create_app
from gateway.sources import ClusterSource, Connection, GPUStackAPISource, KubeconfigDirSource, LoopbackSource

log = logging.getLogger("gateway")

SAN_NAMES = ["gpustack-operator", "localhost"]
GRACE_S = 3  # how long a stopping gateway waits for responses still being written


def source_from(options: Options) -> ClusterSource:
    connection = Connection(timeout=options.conn_timeout, qps=options.qps, burst=options.burst)
    if options.mode == "loopback":
        return LoopbackSource(options.kubeconfig, connection)
    if options.mode == "kubeconfig-dir":
        if not Path(options.kubeconfig_dir or "").is_dir():
            raise UsageError(f"--worker-conn-kubeconfig-dir {options.kubeconfig_dir}: not a directory")
        return KubeconfigDirSource(options.kubeconfig_dir or "", connection)
    return GPUStackAPISource(options.gpustack_api_port, options.gpustack_api_scheme, connection)


def tls_files(cert_dir: str | None) -> tuple[Path, Path, Path | None]:
    """``(cert, key, temporary directory to remove at exit)``."""
    if cert_dir:
        cert, key = Path(cert_dir) / "tls.crt", Path(cert_dir) / "tls.key"
        for path in (cert, key):
            if not path.is_file():
                raise UsageError(f"--cert-dir {cert_dir}: no {path.name} there")
        return cert, key, None
    scratch = Path(tempfile.mkdtemp(prefix="gpustack-gateway-tls-"))
    issue.ensure(scratch, SAN_NAMES, ["127.0.0.1"])
    paths = issue.Paths(scratch)
    return paths.cert, paths.key, scratch


def _serving(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def listen_tcp(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {error}") from None
    sock.listen(2048)
    return sock


def listen(options: Options) -> socket.socket:
    """The listening socket: the unix path (stale socket replaced), or the TCP address."""
    if not options.unix_path:
        return listen_tcp(options.bind_address, options.secure_port)
    path = Path(options.unix_path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise UsageError(
                f"--bind-unix-path {path} exists and is not a socket; remove it or choose another path"
            )
        if _serving(path):
            raise UsageError(f"--bind-unix-path {path}: another process serves on it")
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(umask)
    sock.listen(2048)
    return sock


class _Config(uvicorn.Config):
    """uvicorn's Config serving with our (reloading) TLS context."""

    tls: ReloadingContext | None = None

    def load(self) -> None:
        super().load()
        if self.tls is not None:
            self.ssl = self.tls.context


class _Server(uvicorn.Server):
    """Ends the watch and event streams first when stopping, so shutdown does not wait on them."""

    bus: Bus | None = None
    dashboard: Dashboard | None = None

    async def shutdown(self, sockets: Any = None) -> None:
        if self.dashboard is not None:
            self.dashboard.close()
        if self.bus is not None:
            self.bus.close_all()
        await super().shutdown(sockets)


def _local(sock: socket.socket) -> tuple[str, int]:
    name = sock.getsockname()
    return (str(name[0]), int(name[1]))


class BySocket:
    """One ASGI app for uvicorn's sockets: requests that came in on the dashboard's socket go to the
    dashboard, everything else (and the lifespan) to the gateway's API."""

    def __init__(self, api: Any, dashboard: Any, where: tuple[str, int]) -> None:
        self.api = api
        self.dashboard = dashboard
        self.where = where

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        server = scope.get("server")
        if scope["type"] != "lifespan" and server is not None and tuple(server[:2]) == self.where:
            await self.dashboard(scope, receive, send)
        else:
            await self.api(scope, receive, send)


@dataclass
class Served:
    """A prepared gateway: ``server.run(sockets=[sock])`` serves until ``server.should_exit``."""

    server: _Server
    sock: socket.socket
    gateway: Gateway
    where: str
    cleanup: list[Any] = field(default_factory=list)
    dashboard: Dashboard | None = None
    dashboard_sock: socket.socket | None = None
    dashboard_url: str = ""

    def run(self) -> None:
        sockets = [self.sock] if self.dashboard_sock is None else [self.sock, self.dashboard_sock]
        try:
            self.server.run(sockets=sockets)
        finally:
            self.close()

    def close(self) -> None:
        """Close the sockets and undo what the app's shutdown did not (it does, when it ran)."""
        for sock in (self.sock, self.dashboard_sock):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()
        for undo in self.cleanup:
            undo()


def prepare(options: Options, *, settings: Settings | None = None) -> Served:
    """Build everything and bind the socket; nothing is served until :meth:`Served.run`.

    ``settings`` replaces the subscription timings the options imply (tests shorten the back-off)."""
    source = source_from(options)
    cert, key, scratch = tls_files(options.cert_dir)
    cleanup: list[Any] = []
    if scratch is not None:
        cleanup.append(lambda: shutil.rmtree(scratch, ignore_errors=True))
    tls = ReloadingContext(cert, key)
    bus = Bus()
    settings = settings or Settings(readiness_timeout=options.readiness_timeout, resync=options.resync)
    gateway = Gateway(Manager(source, bus, settings), bus, watch_buffer=options.watch_buffer)
    watch_files = [tls.watch] if options.cert_dir else []  # watch() with its default interval
    dashboard_sock = None
    dashboard = None
    if options.dashboard_address is not None:
        dashboard_sock = listen_tcp(*options.dashboard_address)
        dashboard = Dashboard(
            gateway.manager, bus, DashboardSettings(sample_interval=options.dashboard_sample_interval)
        )
    try:
        sock = listen(options)
    except UsageError:
        if dashboard_sock is not None:
            dashboard_sock.close()
        raise
    if options.unix_path:
        path = Path(options.unix_path)
        cleanup.append(lambda: path.unlink(missing_ok=True))
        where = f"unix:{path}"
    else:
        where = f"https://{options.bind_address}:{options.secure_port}"
    startup = [*watch_files, *([dashboard.run] if dashboard is not None else [])]
    app: Any = create_app(gateway, on_startup=startup, on_shutdown=cleanup)
    dashboard_url = ""
    if dashboard is not None and dashboard_sock is not None:
        local = _local(dashboard_sock)
        app = BySocket(app, create_dashboard_app(dashboard), local)
        host = f"[{local[0]}]" if ":" in local[0] else local[0]
        dashboard_url = f"https://{host}:{local[1]}/"
        if not ipaddress.ip_address(local[0]).is_loopback:
            log.warning(
                "the dashboard listens beyond loopback and has no authentication: anyone who reaches "
                "it reads the fleet",
                extra={"dashboard": dashboard_url},
            )
    config = _Config(
        app,
        lifespan="on",
        log_config=None,
        access_log=False,
        server_header=False,
        date_header=False,
        timeout_keep_alive=30,
        timeout_graceful_shutdown=GRACE_S,
    )
    config.tls = tls
    server = _Server(config)
    server.bus = bus
    server.dashboard = dashboard
    log.info(
        "worker-gateway prepared",
        extra={"listen": where, "clusters": source.describe(), "dashboard": dashboard_url or "off"},
    )
    return Served(server, sock, gateway, where, cleanup, dashboard, dashboard_sock, dashboard_url)


def _stop_early(signum: int, _: Any) -> None:
    """Until uvicorn takes the signals over: stop, running the cleanups on the way out."""
    raise SystemExit(128 + signum)


def run(args: argparse.Namespace) -> int:
    previous = signal.signal(signal.SIGTERM, _stop_early)
    try:
        try:
            options = validate(args)  # the command line configured logging with --v already
            served = prepare(options)
        except UsageError as error:
            print(f"gpustack-operator worker-gateway: {error}", file=sys.stderr)
            return 2
        try:
            log.info("worker-gateway serving", extra={"listen": served.where})
            served.run()
        finally:
            served.close()
        return 0
    finally:
        # Given back: a caller in the same process (a test, an embedding) keeps its own SIGTERM.
        signal.signal(signal.SIGTERM, previous)
