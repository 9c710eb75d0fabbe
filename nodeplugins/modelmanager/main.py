"""``gpustack-operator model-manager``: the CSI node plugin process.

It serves the CSI Identity and Node services and kubelet plugin registration on unix sockets under
the kubelet directory, runs the node agent (configuration, materialization, collection, status),
and answers on a side port: ``/livez``, ``/readyz``, ``/metrics`` and ``GET /model/downloads``
(node-local download progress by digest). With ``--peer-port`` it also serves its published trees
to the other nodes' plugins and pulls from them before the hub (:mod:`.peers`). The side port is HTTPS with the given certificate, or a
self-signed one made at start; ``--insecure`` serves plain HTTP (tests).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import ssl
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.delivery import PEER_DEFAULT_USER
from nodeplugins import privileges

log = logging.getLogger("modelmanager")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--node-name", default=os.environ.get("NODE_NAME", ""), help="this node's name (env NODE_NAME)"
    )
    parser.add_argument(
        "--cache-root",
        "--root-path",  # the earlier spelling, kept as an alias
        dest="root_path",
        default="/var/lib/gpustack/models",
        help="the cache directory on the node",
    )
    parser.add_argument("--kubelet-dir", default="/var/lib/kubelet", help="kubelet's root directory")
    parser.add_argument(
        "--csi-socket",
        default="",
        help="the unix socket the CSI Identity and Node services listen on, registered with the kubelet "
        "(default: <kubelet-dir>/plugins/model.csi.gpustack.ai/csi.sock)",
    )
    parser.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    parser.add_argument(
        "--secure-port", type=int, default=32444, help="side port: metrics, health, downloads"
    )
    parser.add_argument("--bind-address", default="0.0.0.0")
    parser.add_argument("--tls-cert", help="side port certificate (PEM); self-signed when absent")
    parser.add_argument("--tls-key", help="side port key (PEM)")
    parser.add_argument("--insecure", action="store_true", help="serve the side port over plain HTTP")
    parser.add_argument("--no-register", action="store_true", help="do not serve kubelet plugin registration")
    parser.add_argument(
        "--stall-timeout", type=float, default=30.0, help="seconds without progress before a range is retried"
    )
    parser.add_argument(
        "--checkpoint-mib", type=int, default=64, help="MiB between two resume checkpoints of one file"
    )
    peers = parser.add_argument_group("peer sync (model-delivery spec 4.10)")
    peers.add_argument(
        "--peer-port",
        type=int,
        default=0,
        help="TCP port the peer endpoints answer on (chart modelManager.port); 0 is off: no serving, no pulling",
    )
    peers.add_argument(
        "--peer-address",
        default=os.environ.get("POD_IP", ""),
        help="the host other nodes' plugins reach this one at (env POD_IP); advertised with --peer-port",
    )
    peers.add_argument(
        "--peer-token-file",
        default="/var/run/secrets/gpustack.ai/peer/token",
        help="the projected ServiceAccount token (audience gpustack-model-peer) presented to peers",
    )
    peers.add_argument(
        "--peer-user",
        default=PEER_DEFAULT_USER,
        help="the ServiceAccount user a peer's token must authenticate as",
    )
    peers.add_argument("--peer-ca-file", default="", help="CA that peers' certificates are verified against")
    peers.add_argument("--peer-max-serving-streams", type=int, default=8, help="file answers served at once")
    peers.add_argument("--peer-streams-per-source", type=int, default=4, help="requests at once to one peer")
    parser.add_argument(
        "--unreferenced-grace",
        type=float,
        default=600.0,
        help="seconds an unreferenced published tree is kept before collection may remove it (spec: 600)",
    )


class _Side(BaseHTTPRequestHandler):
    server: _SideServer

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _debug(self) -> None:
        """``/debug/flags/v`` and ``/debug/threads`` (loopback only; operations spec D.2)."""
        from kube import debug

        length = int(self.headers.get("Content-Length") or 0)
        status, text = debug.answer(self.command, self.path, self.client_address[0], self.rfile.read(length))
        self._send(status, text.encode(), "text/plain")

    def do_PUT(self) -> None:
        self._debug()

    def do_GET(self) -> None:
        agent = self.server.agent
        if self.path.startswith("/debug/"):
            return self._debug()
        if self.path == "/livez":
            return self._send(200, b"ok", "text/plain")
        if self.path == "/readyz":
            ready = agent.artifacts.synced() and self.server.serving.is_set()
            body = (
                b"ok"
                if ready
                else f"not ready: {self.server.blocked}".encode()
                if self.server.blocked
                else b"not ready"
            )
            return self._send(200 if ready else 503, body, "text/plain")
        if self.path == "/metrics":
            return self._send(200, generate_latest(), CONTENT_TYPE_LATEST)
        if self.path == "/model/downloads":
            return self._send(200, json.dumps({"downloads": agent.downloads()}).encode())
        self._send(404, b'{"error": "not found"}')


class _SideServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], agent: Any, serving: threading.Event) -> None:
        self.agent = agent
        self.serving = serving
        self.blocked: str | None = None  # a privilege the plugin lacks (nodeplugins.privileges)
        super().__init__(address, _Side)


def _tls_context(args: argparse.Namespace) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if args.tls_cert and args.tls_key:
        context.load_cert_chain(args.tls_cert, args.tls_key)
        return context
    from certs.issue import Paths, issue_ca, issue_serving

    directory = Path(tempfile.mkdtemp(prefix="model-manager-tls-"))
    paths = Paths(directory)
    issue_ca(paths, "gpustack-model-manager")
    issue_serving(paths, [args.node_name or "localhost"], ["127.0.0.1"])
    context.load_cert_chain(str(paths.cert), str(paths.key))
    return context


def csi_socket_path(args: argparse.Namespace) -> Path | None:
    """``--csi-socket`` as a path; None leaves the socket at its place under the kubelet directory."""
    return Path(args.csi_socket) if args.csi_socket else None


def run(args: argparse.Namespace) -> int:
    if not args.node_name:
        raise SystemExit("gpustack-operator model-manager: --node-name (or NODE_NAME) is required")
    from kube.client import Client, load_api_client
    from nodeplugins.modelmanager.agent import Agent, AgentOptions
    from nodeplugins.modelmanager.download import Tuning
    from nodeplugins.modelmanager.grpc_server import Servers
    from nodeplugins.modelmanager.peers import PeerAuth, PeerServer

    kubelet_dir = Path(args.kubelet_dir)
    root = Path(args.root_path)
    root.mkdir(parents=True, exist_ok=True)
    client = Client(load_api_client(args.kubeconfig, component="model-manager"))
    advertised = ""
    if args.peer_port:
        host = args.peer_address or "127.0.0.1"
        advertised = f"[{host}]:{args.peer_port}" if ":" in host else f"{host}:{args.peer_port}"
    tls = None if args.insecure else _tls_context(args)
    agent = Agent(
        AgentOptions(
            args.node_name,
            root,
            kubelet_dir,
            tuning=Tuning(
                stall_timeout=args.stall_timeout, checkpoint_bytes=max(args.checkpoint_mib, 1) << 20
            ),
            unreferenced_grace=args.unreferenced_grace,
            peer_address=advertised,
            peer_token_file=Path(args.peer_token_file) if args.peer_token_file else None,
            peer_tls=tls is not None,
            peer_ca_file=args.peer_ca_file,
            peer_streams_per_source=args.peer_streams_per_source,
        ),
        client,
    )
    peer_server = None
    if args.peer_port:
        peer_server = PeerServer(
            (args.bind_address, args.peer_port),
            agent.layout,
            PeerAuth.over(client, args.peer_user),
            max_streams=args.peer_max_serving_streams,
            tls=tls,
        )
        peer_server.start()
    serving = threading.Event()
    side = _SideServer((args.bind_address, args.secure_port), agent, serving)
    if tls is not None:
        side.socket = tls.wrap_socket(side.socket, server_side=True)
    threading.Thread(target=side.serve_forever, name="side-port", daemon=True).start()
    agent.start()
    servers = Servers(
        agent.service, args.node_name, kubelet_dir, agent.artifacts.synced, csi_path=csi_socket_path(args)
    )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    if not args.no_register:  # a plugin the kubelet calls must own its sockets and be able to mount
        privileges.wait_until_able(
            lambda: (
                privileges.socket_dir_problem(servers.csi_path, "CSI socket")
                or privileges.socket_dir_problem(servers.reg_path, "kubelet registration socket")
                or privileges.mount_problem()
            ),
            stop,
            lambda reason: setattr(side, "blocked", reason),
        )
    servers.start(register=not args.no_register)
    serving.set()
    log.info(
        "serving",
        extra={"node": args.node_name, "csi": str(servers.csi_path), "registration": str(servers.reg_path)},
    )
    stop.wait()
    servers.stop()
    if peer_server is not None:
        peer_server.shutdown()
    agent.stop()
    side.shutdown()
    return 0
