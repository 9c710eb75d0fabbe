"""The ``gpustack-operator worker`` command's flags, and the checks that need several of them.

Apart from :mod:`gpustack_operator.worker` (the replica's start-up) because every command of the
binary builds these flags: reading them must not import the serving stack, the controllers or the
Kubernetes client (``admit``, ``certs`` and the node agents start without them).
"""

from __future__ import annotations

import argparse
import datetime as dt

from controllers.install import applications


def parse_duration(text: str) -> float:
    """Go's duration spelling (``15s``, ``5m``, ``1h30m``) or plain seconds, as seconds."""
    from api.settings import parse_duration as go_duration

    try:
        return float(text)
    except ValueError:
        pass
    try:
        return go_duration(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 15s, 5m or 1h") from None


def parse_bool_flag(text: str) -> bool:
    from api.booleans import parse_bool

    try:
        return parse_bool(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a boolean (true or false)") from None


def _words(text: str) -> list[str]:
    return [w.strip() for w in text.split(",") if w.strip()]


def add_arguments(worker: argparse.ArgumentParser) -> None:
    """The worker's flags (operations spec D.1 where they apply here, plus the install's own)."""
    from api import constants

    mode = worker.add_mutually_exclusive_group()
    mode.add_argument("--webhooks-only", action="store_true", help="serve the webhooks, run no controller")
    mode.add_argument("--controllers-only", action="store_true", help="run the controllers, serve no webhook")
    worker.add_argument("--bind-address", default="0.0.0.0", help="address to serve on (default 0.0.0.0)")
    worker.add_argument("--secure-port", type=int, default=31443, help="HTTPS port (default 31443)")
    worker.add_argument("--tls-cert", help="serving certificate (PEM); reloaded when the file changes")
    worker.add_argument("--tls-key", help="serving key (PEM); reloaded when the file changes")
    worker.add_argument(
        "--cert-dir",
        help="directory holding tls.crt, tls.key and ca.crt that someone else manages (e.g. a cert-manager "
        "Secret); without it the worker issues and rotates them in Secret --cert-secret",
    )
    worker.add_argument(
        "--cert-secret",
        default="gpustack-operator-worker-certs",
        help="the Secret (system namespace) holding the CA and serving pair the worker manages",
    )
    worker.add_argument(
        "--cert-dns", action="append", default=[], help="extra DNS name for the managed certificate"
    )
    worker.add_argument("--cert-ip", action="append", default=[], help="extra IP for the managed certificate")
    worker.add_argument(
        "--cert-rotate-before",
        type=lambda t: dt.timedelta(seconds=parse_duration(t)),
        default=dt.timedelta(hours=720),
        help="re-issue the managed serving certificate when it expires sooner (default 720h)",
    )
    worker.add_argument(
        "--cert-check-interval",
        type=parse_duration,
        default=30.0,
        help="how often every replica re-reads the certificate Secret (default 30s)",
    )
    worker.add_argument(
        "--cert-runtime-dir",
        help="where the managed pair is written for the server (default: a new temp dir)",
    )
    worker.add_argument(
        "--webhook-url",
        default="",
        help="register the webhooks at this URL (a worker outside the cluster: https://HOST:PORT); "
        "default: the Service --webhook-service",
    )
    worker.add_argument(
        "--webhook-service",
        default="gpustack-operator-worker",
        help="the worker's Service in the system namespace, which the webhook configurations name",
    )
    worker.add_argument("--webhook-service-port", type=int, default=443, help="that Service's port (443)")
    worker.add_argument(
        "--objects", metavar="DIR", help="answer lookups from YAML files in DIR, not the apiserver"
    )
    worker.add_argument(
        "--kubeconfig", help="kubeconfig for the apiserver (default: in-cluster, then ~/.kube/config)"
    )
    worker.add_argument(
        "--manufacturer",
        type=_words,
        action="extend",
        default=None,
        help="manufacturers managed (comma-separated or repeated; default all nine): their PCI vendor "
        "IDs go into the gpustack-cpu-info NodeFeatureRule",
    )
    worker.add_argument(
        "--disable-applications",
        type=_words,
        action="extend",
        default=None,
        help="applications the worker must not install: * or any of "
        + ", ".join(applications.APPLICATIONS)
        + " (default *: the chart deploys them; installing them from the worker, image mode, is not built)",
    )
    worker.add_argument(
        "--kube-leader-election",
        type=parse_bool_flag,
        default=True,
        help="reconcile only while holding the Lease (default true)",
    )
    worker.add_argument(
        "--no-leader-election",
        dest="kube_leader_election",
        action="store_false",
        help="same as --kube-leader-election=false (one replica only)",
    )
    worker.add_argument(
        "--kube-leader-election-id", default=constants.LEADER_ELECTION_ID, help="the Lease's name"
    )
    worker.add_argument(
        "--kube-leader-lease", type=parse_duration, default=15.0, help="lease duration (default 15s)"
    )
    worker.add_argument(
        "--kube-leader-renew-timeout",
        type=parse_duration,
        default=10.0,
        help="a leader that cannot renew for this long stops reconciling (default 10s)",
    )
    worker.add_argument(
        "--kube-conn-timeout",
        type=parse_duration,
        default=300.0,
        help="timeout of one apiserver request of the start-up and the controllers (default 5m)",
    )
    worker.add_argument(
        "--informer-cache-resync-period",
        type=parse_duration,
        default=3600.0,
        help="how often every cached object is reconciled again (default 1h)",
    )
    worker.add_argument(
        "--startup-crd-wait",
        type=parse_duration,
        default=300.0,
        help="how long start-up waits for NFD's and Kueue's CRDs before it gives up (default 5m)",
    )
    worker.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (default 1)")
    worker.add_argument(
        "--insecure", action="store_true", help="serve plain HTTP (with --objects: tests and benchmarks only)"
    )
    worker.add_argument(
        "--null-endpoint",
        action="store_true",
        help="also serve /null, an endpoint that decodes and allows (benchmarks)",
    )
    worker.add_argument(
        "--log-denials",
        action="store_true",
        help="log every refused admission as a JSON line (retryable ones are always logged); off by "
        "default because a line costs more than the decision, and /metrics counts denials",
    )
    worker.add_argument(
        "--metrics-auth",
        type=parse_bool_flag,
        nargs="?",
        const=True,
        default=False,
        help="serve /metrics only to callers the apiserver authenticates (TokenReview) and authorizes "
        "for get on the non-resource URL /metrics (SubjectAccessReview), as Kueue does; the chart turns "
        "it on (metrics.auth) and binds ClusterRole gpustack-operator-metrics-reader to scrapers "
        "(default false)",
    )
    worker.add_argument(
        "--max-body-bytes", type=int, default=8 * 1024 * 1024, help="largest request body accepted"
    )
    worker.add_argument(
        "--max-header-bytes",
        type=int,
        default=64 * 1024,
        help="largest request line and headers of one request; more is answered 431 (default 65536)",
    )
    worker.add_argument(
        "--max-headers",
        type=int,
        default=100,
        help="most header fields in one request; more is 431 (default 100)",
    )
    worker.add_argument(
        "--request-deadline",
        type=float,
        default=10.0,
        help="seconds a connection has to deliver a whole request (TLS handshake, headers, body), "
        "and to send its first one (default 10)",
    )
    worker.add_argument(
        "--max-connections",
        type=int,
        default=0,
        help="most open connections; beyond it the oldest idle one is closed (default: the descriptor "
        "limit, raised to its hard limit, minus 64)",
    )
    worker.add_argument(
        "--model-manager-service-account",
        default="gpustack-system/gpustack-model-manager",
        metavar="NAMESPACE/NAME",
        help="the model-manager plugin's ServiceAccount: the only writer of NodeModelStore status",
    )


def finish_arguments(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Checks that need several flags at once (argparse's ``error`` exits 2 with the usage)."""
    from api import manufacturers

    disabled = args.disable_applications if args.disable_applications is not None else ["*"]
    unknown = applications.unknown_applications(disabled)
    if unknown:
        parser.error(
            f"--disable-applications: unknown application(s) {', '.join(unknown)}; use * or "
            + ", ".join(applications.APPLICATIONS)
        )
    args.disable_applications = disabled
    names = args.manufacturer or [m.name for m in manufacturers.MANUFACTURERS]
    wrong = sorted(set(names) - set(manufacturers.BY_NAME))
    if wrong:
        parser.error(
            f"--manufacturer: unknown manufacturer(s) {', '.join(wrong)}; use any of "
            + ", ".join(manufacturers.BY_NAME)
        )
    args.manufacturer = names
    args.vendor_ids = [manufacturers.BY_NAME[n].pci_vendor_id for n in names]


def applications_left(args: argparse.Namespace) -> list[str]:
    return applications.enabled_applications(args.disable_applications)
