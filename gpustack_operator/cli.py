"""``gpustack-operator``: one binary, four roles, plus tools.

Exit codes: 0 success; 1 a denial (``admit``) or a failure at run time; 2 unusable input or usage;
3 a subcommand whose implementation has not landed yet (it says so; it never pretends to work).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gpustack_operator import __version__

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _worker(args: argparse.Namespace) -> int:
    from gpustack_operator import worker

    return worker.run(args)


def _admit(args: argparse.Namespace) -> int:
    from gpustack_operator import admit

    return admit.run(args)


def _worker_gateway(args: argparse.Namespace) -> int:
    from gateway import serve

    return serve.run(args)


def _crds(args: argparse.Namespace) -> int:
    from api import crds

    if args.write:
        for path in crds.write(args.write):
            print(path)
    else:
        sys.stdout.write(crds.render_yaml())
    return EXIT_OK


def _certs(args: argparse.Namespace) -> int:
    from certs import cli

    return cli.run(args)


def _model_manager(args: argparse.Namespace) -> int:
    from nodeplugins.modelmanager.main import run

    return run(args)


def _device_manager(args: argparse.Namespace) -> int:
    from nodeplugins.devicemanager import agent

    return agent.run(args)


def _device_manager_detect(args: argparse.Namespace) -> int:
    from nodeplugins.devicemanager import detect

    return detect.run(args)


def _device_manager_commands(dm: argparse.ArgumentParser) -> None:
    import os

    commands = dm.add_subparsers(dest="dm_command", metavar="COMMAND")

    def usage(_args: argparse.Namespace) -> int:
        dm.print_help(sys.stderr)
        return EXIT_USAGE

    dm.set_defaults(func=usage)
    serve = commands.add_parser(
        "serve",
        help="run the node agent: detect, publish Devices and node features, serve the device plugins",
    )
    detect = commands.add_parser("detect", help="one detection pass: print the Devices spec it would publish")
    for command in (serve, detect):
        command.add_argument(
            "--manufacturer", required=True, help="manufacturer served (nvidia, ascend, ...)"
        )
        command.add_argument(
            "--simulate",
            metavar="PROFILE.yaml",
            help="serve simulated cards from a node profile instead of hardware",
        )
        command.add_argument(
            "--node-name",
            default=os.environ.get("NODE_NAME", ""),
            help="this node's name (default $NODE_NAME)",
        )
        command.add_argument(
            "--sysfs-root",
            default="/sys",
            help="the sysfs tree the network interfaces and PCI paths are read from (a simulated one in tests)",
        )
        command.add_argument(
            "--netns",
            default="",
            help="read link facts (MTU, up) in this named network namespace (default: the agent's own)",
        )
    serve.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    serve.add_argument(
        "--kube-socket",
        default="/var/lib/kubelet/device-plugins/kubelet.sock",
        help="the kubelet's device-plugin registration socket; plugin sockets go beside it",
    )
    serve.add_argument(
        "--pod-resources-socket",
        help="the kubelet pod-resources socket (default: pod-resources/kubelet.sock beside device-plugins/)",
    )
    serve.add_argument(
        "--dev-root",
        default="/dev",
        help="where the host's device nodes are (the RDMA verbs devices are handed from <dev-root>/infiniband)",
    )
    serve.add_argument(
        "--no-shared",
        action="store_true",
        help="do not serve <base>.shared nor device.gpustack.ai/rdma.shared",
    )
    serve.add_argument("--no-sliced", action="store_true", help="do not serve <base>.sliced")
    serve.add_argument(
        "--no-partitioned",
        action="store_true",
        help="do not serve <base>.partitioned nor device.gpustack.ai/rdma.partitioned",
    )
    serve.add_argument(
        "--no-pci-check", action="store_true", help="accepted for compatibility; no PCI scan here"
    )
    serve.add_argument(
        "--no-fast-failed", action="store_true", help="publish an empty first detection instead of waiting"
    )
    serve.add_argument("--monitor-period", type=float, default=15.0, help="seconds between detection passes")
    serve.add_argument("--bind-address", default="0.0.0.0", help="address of the HTTPS endpoint")
    serve.add_argument("--secure-port", type=int, default=32443, help="HTTPS port: /metrics, /readyz, /livez")
    serve.add_argument("--cert-dir", help="tls.crt/tls.key (self-signed into it when absent)")
    serve.add_argument(
        "--state-dir",
        default="/var/lib/gpustack-operator/device-manager",
        help="what outlives a restart of the agent: the ownership markers of the partitions it created",
    )
    serve.add_argument("--namespace", default="gpustack-system", help="namespace of the NodeFeature")
    serve.add_argument(
        "--publish-only",
        action="store_true",
        help="publish Devices and node features but serve no device plugin (nodes without a kubelet)",
    )
    serve.set_defaults(func=_device_manager)
    detect.set_defaults(func=_device_manager_detect)


def _version(_: argparse.Namespace) -> int:
    print(f"gpustack-operator {__version__}")
    return EXIT_OK


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="gpustack-operator",
        allow_abbrev=False,  # `worker-gateway --v=4` (as the GPUStack server passes it) is not --version
        description="Make GPUs and NPUs schedulable on Kubernetes and run LLM inference on them.",
    )
    top.add_argument("--version", action="version", version=f"gpustack-operator {__version__}")
    top.add_argument("-v", "--verbosity", type=int, default=0, help="log verbosity: 0-1 info, 2+ debug")
    sub = top.add_subparsers(dest="command", metavar="COMMAND")

    worker = sub.add_parser(
        "worker",
        aliases=["w"],
        help="serve the admission webhooks and run the controllers",
        description="Serve the admission webhooks over HTTPS and (unless --webhooks-only) run the "
        "controllers behind a Lease.  With --objects DIR the webhooks read cluster objects from "
        "YAML files instead of the apiserver (local development and load tests).",
    )
    mode = worker.add_mutually_exclusive_group()
    mode.add_argument("--webhooks-only", action="store_true", help="serve the webhooks, run no controller")
    mode.add_argument("--controllers-only", action="store_true", help="run the controllers, serve no webhook")
    worker.add_argument("--bind-address", default="0.0.0.0", help="address to serve on (default 0.0.0.0)")
    worker.add_argument("--secure-port", type=int, default=31443, help="HTTPS port (default 31443)")
    worker.add_argument("--tls-cert", help="serving certificate (PEM); reloaded when the file changes")
    worker.add_argument("--tls-key", help="serving key (PEM); reloaded when the file changes")
    worker.add_argument(
        "--cert-dir", help="directory holding tls.crt and tls.key (instead of --tls-cert/--tls-key)"
    )
    worker.add_argument(
        "--objects", metavar="DIR", help="answer lookups from YAML files in DIR, not the apiserver"
    )
    worker.add_argument(
        "--kubeconfig", help="kubeconfig for the apiserver (default: in-cluster, then ~/.kube/config)"
    )
    worker.add_argument(
        "--no-leader-election",
        action="store_true",
        help="reconcile without holding the worker.gpustack.ai Lease (one replica only)",
    )
    worker.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (default 1)")
    worker.add_argument(
        "--insecure", action="store_true", help="serve plain HTTP (tests and benchmarks only)"
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
    worker.set_defaults(func=_worker)

    admit = sub.add_parser(
        "admit",
        help="run the admission chain on manifests, offline",
        description="Run the exact admission chain of the server on manifests, against cluster objects "
        "read from files, and print one JSON line per document: kind, namespace, name, operation, "
        "allowed, code, message, warnings, patch (RFC 6902) and object (after mutation).  Exit 0 when "
        "all are allowed, 1 when any is denied, 2 on unusable input.",
    )
    admit.add_argument(
        "-f", "--filename", required=True, help="YAML file of documents to admit, or - for stdin"
    )
    admit.add_argument(
        "--objects", metavar="DIR", help="directory of YAML cluster objects the decisions read"
    )
    admit.add_argument(
        "--operation", choices=["CREATE", "UPDATE"], default="CREATE", help="operation (default CREATE)"
    )
    admit.add_argument(
        "--old", metavar="OLDFILE", help="for UPDATE: the stored objects, matched by kind/namespace/name"
    )
    admit.add_argument("--namespace", "-n", default="default", help="namespace of documents that name none")
    admit.set_defaults(func=_admit)

    certs = sub.add_parser(
        "certs",
        help="issue or rotate the webhook CA and serving certificate",
        description="Issue a CA and a serving certificate for the webhook server, rotate it before "
        "expiry, and put the CA into the webhook configurations' caBundle.",
    )
    certs.add_argument("--dir", required=True, help="directory for ca.crt, ca.key, tls.crt, tls.key")
    certs.add_argument("--service", default="gpustack-operator-worker", help="webhook Service name (SAN)")
    certs.add_argument("--namespace", default="gpustack-system", help="webhook Service namespace (SAN)")
    certs.add_argument("--ip", action="append", default=[], help="extra IP SAN (default 127.0.0.1)")
    certs.add_argument("--dns", action="append", default=[], help="extra DNS SAN")
    certs.add_argument(
        "--rotate-before", default="720h", help="re-issue when the serving cert expires sooner (default 720h)"
    )
    certs.add_argument(
        "--patch-ca-bundle", action="store_true", help="write the CA into the webhook configurations"
    )
    certs.add_argument("--kubeconfig", help="kubeconfig used by --patch-ca-bundle")
    certs.set_defaults(func=_certs)

    crds = sub.add_parser(
        "crds",
        help="print the CRDs generated from the API models",
        description="Print every CustomResourceDefinition, generated from the API models.",
    )
    crds.add_argument("--write", metavar="DIR", help="write one file per CRD into DIR instead of printing")
    crds.set_defaults(func=_crds)

    dm = sub.add_parser(
        "device-manager",
        aliases=["dm"],
        help="node agent: discover accelerators, keep the Devices ledger, serve the device plugin",
        description="Discover accelerators (NVML or a simulated profile) and RDMA interfaces, write the "
        "node's Devices ledger, and serve the kubelet device-plugin gRPC API.",
    )
    _device_manager_commands(dm)

    mm = sub.add_parser(
        "model-manager",
        aliases=["mm"],
        help="node agent: the CSI plugin that caches and mounts model weights",
        description="Serve the model.csi.gpustack.ai CSI node plugin: download each model digest once per "
        "node, mount it read-only, keep NodeModelStore status, collect garbage by watermark.",
    )
    from nodeplugins.modelmanager.main import add_arguments as model_manager_arguments

    model_manager_arguments(mm)
    mm.set_defaults(func=_model_manager)

    wg = sub.add_parser(
        "worker-gateway",
        aliases=["wg"],
        help="serve the read-only fleet view over many clusters (InstanceTypes and capacity)",
        description="Subscribe clusters, watch the operator's kinds in each, and serve them back per "
        "cluster and as one fleet view, over HTTPS on a unix socket (or TCP).",
    )
    from gateway.options import add_arguments as add_gateway_arguments

    add_gateway_arguments(wg)
    wg.set_defaults(func=_worker_gateway)

    version = sub.add_parser("version", help="print the version")
    version.set_defaults(func=_version)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not getattr(args, "func", None):
        parser().print_help(sys.stderr)
        return EXIT_USAGE
    from gpustack_operator import logs

    # worker-gateway also takes the GPUStack server's --v=N spelling of the verbosity.
    logs.configure(max(args.verbosity or 0, getattr(args, "v", 0) or 0))
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
