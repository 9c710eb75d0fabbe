"""The ``worker-gateway`` command line: its flags and their checks.

The flags are the reference's (``docs/reference/commands.md``), plus ``--worker-conn-mode
kubeconfig-dir`` with ``--worker-conn-kubeconfig-dir`` (our addition: one kubeconfig per cluster
in a directory), ``--worker-conn-kubeconfig`` for loopback, ``--watch-buffer``, and the fleet
dashboard's ``--dashboard-address`` and ``--dashboard-sample-interval`` (docs/dashboard.md).
Durations are written as Go writes them (``30s``, ``5m``, ``1h``, ``1m30s``).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

DEFAULT_SOCKET = "/var/lib/gpustack/gpustack-operator-worker-gateway.sock"
MODES = ("gpustack-api", "loopback", "kubeconfig-dir")
CONTENT_TYPES = ("application/json",)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


class UsageError(ValueError):
    pass


def duration(text: str) -> float:
    """``"1m30s"`` → 90.0 seconds; a bare number is seconds."""
    value = text.strip()
    try:
        return float(value)
    except ValueError:
        pass
    parts = _DURATION.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration: write e.g. 30s, 5m, 1h or 1m30s")
    return sum(float(n) * _UNITS[u] for n, u in parts)


@dataclass(frozen=True, slots=True)
class Options:
    unix_path: str
    bind_address: str
    secure_port: int
    cert_dir: str | None
    mode: str
    gpustack_api_port: int
    gpustack_api_scheme: str
    kubeconfig: str | None
    kubeconfig_dir: str | None
    readiness_timeout: float
    resync: float
    conn_timeout: float
    qps: float
    burst: int
    watch_buffer: int
    verbosity: int
    dashboard_address: tuple[str, int] | None = None
    dashboard_sample_interval: float = 15.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    listen = parser.add_argument_group(
        "serving (HTTPS; no authentication: the socket's permissions are the boundary)"
    )
    listen.add_argument(
        "--bind-unix-path",
        default=DEFAULT_SOCKET,
        help=f"unix socket to serve on, created 0600; a stale one is replaced (default {DEFAULT_SOCKET}); "
        "empty to serve TCP on --bind-address:--secure-port",
    )
    listen.add_argument("--bind-address", default="127.0.0.1", help="TCP address (default 127.0.0.1)")
    listen.add_argument(
        "--secure-port", type=int, default=0, help="TCP port; required with an empty --bind-unix-path"
    )
    listen.add_argument(
        "--cert-dir",
        help="directory with tls.crt and tls.key (reloaded when they change); default: a certificate "
        "generated at start-up",
    )
    conn = parser.add_argument_group("reaching the clusters")
    conn.add_argument(
        "--worker-conn-mode",
        choices=MODES,
        default="gpustack-api",
        help="gpustack-api: each cluster through the GPUStack server's proxy with its token; loopback: "
        "every cluster is the one of --worker-conn-kubeconfig; kubeconfig-dir: cluster <name> is the "
        "kubeconfig <name>[.yaml|.kubeconfig] in --worker-conn-kubeconfig-dir (default gpustack-api)",
    )
    conn.add_argument(
        "--worker-conn-gpustack-api-port", type=int, default=30080, help="GPUStack API port (30080)"
    )
    conn.add_argument(
        "--worker-conn-gpustack-api-scheme",
        choices=("", "http", "https"),
        default="",
        help="scheme of the GPUStack API (default https on port 443, else http)",
    )
    conn.add_argument(
        "--worker-conn-kubeconfig", help="loopback: kubeconfig (default in-cluster, then $KUBECONFIG)"
    )
    conn.add_argument("--worker-conn-kubeconfig-dir", help="kubeconfig-dir: the directory of kubeconfigs")
    conn.add_argument(
        "--worker-readiness-check-timeout",
        type=duration,
        default=30.0,
        help="bound of one check of a cluster's operator API, 1s up to --kube-conn-timeout (30s)",
    )
    conn.add_argument(
        "--informer-cache-resync-period",
        type=duration,
        default=3600.0,
        help="informer resync, at least 5m (1h)",
    )
    conn.add_argument(
        "--kube-conn-timeout",
        type=duration,
        default=300.0,
        help="timeout of a request to a cluster, at least 10s (5m)",
    )
    conn.add_argument(
        "--kube-conn-qps", type=float, default=200.0, help="requests per second per cluster (200)"
    )
    conn.add_argument(
        "--kube-conn-burst", type=int, default=400, help="burst per cluster, above the qps (400)"
    )
    conn.add_argument(
        "--kube-content-type",
        choices=CONTENT_TYPES,
        default="application/json",
        help="content type asked of the clusters (the Python client speaks JSON only)",
    )
    parser.add_argument(
        "--watch-buffer",
        type=int,
        default=1024,
        help="changes a watcher may fall behind before its stream is closed (1024)",
    )
    page = parser.add_argument_group("the fleet dashboard (docs/dashboard.md)")
    page.add_argument(
        "--dashboard-address",
        metavar="HOST:PORT",
        help="serve the read-only fleet dashboard at https://HOST:PORT/ with the gateway's certificate "
        "(no authentication: bind a loopback address); off when absent",
    )
    page.add_argument(
        "--dashboard-sample-interval",
        type=duration,
        default=15.0,
        help="how often the dashboard samples each pool's used cards and pending Workloads for its "
        "one-hour history, 1s to 5m (15s)",
    )
    parser.add_argument(
        "--v", type=int, default=0, help="log verbosity, as -v (the GPUStack server passes --v=4)"
    )


def validate(args: argparse.Namespace) -> Options:
    """The checked options, or :class:`UsageError` naming the flag and what to give instead."""
    if args.kube_conn_timeout < 10:
        raise UsageError("--kube-conn-timeout must be at least 10s")
    if not 1 <= args.worker_readiness_check_timeout <= args.kube_conn_timeout:
        raise UsageError(
            "--worker-readiness-check-timeout must be at least 1s and at most --kube-conn-timeout"
        )
    if args.informer_cache_resync_period < 300:
        raise UsageError("--informer-cache-resync-period must be at least 5m")
    if args.kube_conn_qps <= 0 or args.kube_conn_burst <= args.kube_conn_qps:
        raise UsageError("--kube-conn-qps must be positive and --kube-conn-burst above it")
    if args.watch_buffer < 1:
        raise UsageError("--watch-buffer must be at least 1")
    if not args.bind_unix_path and not 0 < args.secure_port < 65536:
        raise UsageError("serving TCP (empty --bind-unix-path) needs --secure-port between 1 and 65535")
    if args.worker_conn_mode == "kubeconfig-dir" and not args.worker_conn_kubeconfig_dir:
        raise UsageError("--worker-conn-mode kubeconfig-dir needs --worker-conn-kubeconfig-dir DIR")
    if not 0 < args.worker_conn_gpustack_api_port < 65536:
        raise UsageError("--worker-conn-gpustack-api-port must be between 1 and 65535")
    dashboard = address(args.dashboard_address) if getattr(args, "dashboard_address", None) else None
    sample = getattr(args, "dashboard_sample_interval", 15.0)
    if not 1 <= sample <= 300:
        raise UsageError("--dashboard-sample-interval must be between 1s and 5m")
    return Options(
        unix_path=args.bind_unix_path,
        bind_address=args.bind_address,
        secure_port=args.secure_port,
        cert_dir=args.cert_dir,
        mode=args.worker_conn_mode,
        gpustack_api_port=args.worker_conn_gpustack_api_port,
        gpustack_api_scheme=args.worker_conn_gpustack_api_scheme,
        kubeconfig=args.worker_conn_kubeconfig,
        kubeconfig_dir=args.worker_conn_kubeconfig_dir,
        readiness_timeout=args.worker_readiness_check_timeout,
        resync=args.informer_cache_resync_period,
        conn_timeout=args.kube_conn_timeout,
        qps=args.kube_conn_qps,
        burst=args.kube_conn_burst,
        watch_buffer=args.watch_buffer,
        verbosity=max(args.v, getattr(args, "verbosity", 0) or 0),
        dashboard_address=dashboard,
        dashboard_sample_interval=sample,
    )


def address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as ``(host, port)``; :class:`UsageError` otherwise."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--dashboard-address {text!r} is not HOST:PORT: write e.g. 127.0.0.1:8443")
    return host, int(port)
