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


def _common_flags() -> argparse.ArgumentParser:
    """The global flags (operations spec D.1), accepted before or after the subcommand."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-v",
        "--v",
        "--verbosity",
        dest="verbosity",
        type=int,
        default=argparse.SUPPRESS,
        help="log verbosity: 0-1 info, 2+ debug (also -v=2)",
    )
    common.add_argument(
        "--vmodule",
        default=argparse.SUPPRESS,
        help="per-logger verbosity, comma-separated pattern=N (e.g. controllers.pools=4)",
    )
    common.add_argument(
        "--logtostderr",
        type=_bool_flag,
        nargs="?",
        const=True,
        default=argparse.SUPPRESS,
        help="log to stderr (always true: logs are JSON lines on stderr)",
    )
    common.add_argument(
        "--print-cmdline",
        action="store_true",
        default=argparse.SUPPRESS,
        help="log the command line at start",
    )
    return common


def _bool_flag(text: str) -> bool:
    from api.booleans import parse_bool

    try:
        return parse_bool(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a boolean") from None


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


def _device_manager_commands(dm: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    import os

    commands = dm.add_subparsers(dest="dm_command", metavar="COMMAND")

    def usage(_args: argparse.Namespace) -> int:
        dm.print_help(sys.stderr)
        return EXIT_USAGE

    dm.set_defaults(func=usage)
    serve = commands.add_parser(
        "serve",
        parents=[common],
        help="run the node agent: detect, publish Devices and node features, serve the device plugins",
    )
    detect = commands.add_parser(
        "detect", parents=[common], help="one detection pass: print the Devices spec it would publish"
    )
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


def _cleanup(args: argparse.Namespace) -> int:
    from controllers.install.cleanup import Cleanup
    from kube.client import ApiError, Client, load_api_client

    try:
        cleanup = Cleanup(
            Client(load_api_client(args.kubeconfig, component="cleanup")),
            cert_secret=args.cert_secret,
            worker_selector=args.worker_selector,
            wait_for_workers=args.wait_for_workers,
        )
        if args.before_kueue_goes:
            deleted = cleanup.before_kueue_goes(args.before_kueue_goes)
        elif args.webhooks_only:
            deleted = cleanup.webhooks()
        else:
            deleted = cleanup.run()
    except ApiError as error:
        print(f"gpustack-operator cleanup: {error}", file=sys.stderr)
        return EXIT_FAILED
    for name in deleted:
        print(f"deleted {name}")
    return EXIT_OK


def _version(_: argparse.Namespace) -> int:
    print(f"gpustack-operator {__version__}")
    return EXIT_OK


def parser() -> argparse.ArgumentParser:
    common = _common_flags()
    top = argparse.ArgumentParser(
        prog="gpustack-operator",
        parents=[common],
        allow_abbrev=False,  # `worker-gateway --v=4` (as the GPUStack server passes it) is not --version
        description="Make GPUs and NPUs schedulable on Kubernetes and run LLM inference on them.",
    )
    top.add_argument("--version", action="version", version=f"gpustack-operator {__version__}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND")

    worker = sub.add_parser(
        "worker",
        aliases=["w"],
        parents=[common],
        help="serve the admission webhooks and run the controllers",
        description="Install what the operator needs (CRDs, webhook configurations, Settings, the "
        "NodeFeatureRule and AdmissionChecks), serve the admission webhooks over HTTPS and (unless "
        "--webhooks-only) run the controllers behind a Lease.  With --objects DIR the webhooks read "
        "cluster objects from YAML files instead of the apiserver (local development and load tests).",
    )
    from gpustack_operator import worker_flags

    worker_flags.add_arguments(worker)
    worker.set_defaults(func=_worker)

    admit = sub.add_parser(
        "admit",
        help="run the admission chain on manifests, offline",
        description="Run the exact admission chain of the server on manifests (files, directories, "
        "stdin), against cluster objects read from files or from a live cluster, and print one "
        "result per object (file, document index, kind, namespace, name, operation, decision: "
        "allowed, denied or skipped, code, message, warnings, patch and object after mutation) and "
        "the counts.  Exit 0 when none is denied, 1 when any is denied, 2 on unusable input.",
    )
    from gpustack_operator.admit_options import add_arguments as admit_arguments

    admit_arguments(admit)
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
    _device_manager_commands(dm, common)

    mm = sub.add_parser(
        "model-manager",
        aliases=["mm"],
        parents=[common],
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

    cleanup = sub.add_parser(
        "cleanup",
        parents=[common],
        help="remove what the worker created (the chart's post-delete hooks)",
        description="Delete the webhook configurations first, then the AdmissionChecks, the pools' Kueue "
        "objects, the NodeFeatureRule and NodeFeatures, the operator's finalizers and CRDs (with every "
        "object of them, Settings included), the certificate Secret and the Lease.  Run it once no worker "
        "runs: a running worker recreates its CRDs and webhook configurations.",
    )
    cleanup.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    cleanup.add_argument(
        "--cert-secret", default="gpustack-operator-worker-certs", help="the worker's certificate Secret"
    )
    cleanup.add_argument(
        "--worker-selector",
        default="",
        help="label selector of the worker Pods to wait out first (system namespace)",
    )
    cleanup.add_argument(
        "--wait-for-workers", type=float, default=120.0, help="seconds to wait for them (default 120)"
    )
    cleanup.add_argument(
        "--before-kueue-goes",
        metavar="WORKER_DEPLOYMENT",
        default="",
        help="only this: delete the worker Deployment, wait out its Pods, then the operator's Kueue objects "
        "while Kueue still runs (the pre-delete hook of a release that installed Kueue)",
    )
    cleanup.add_argument(
        "--webhooks-only",
        action="store_true",
        help="only this: wait out the worker Pods, then delete the two webhook configurations "
        "(every uninstall's post-delete hook; they fail closed and would refuse queued Pods)",
    )
    cleanup.set_defaults(func=_cleanup)

    version = sub.add_parser("version", help="print the version")
    version.set_defaults(func=_version)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not getattr(args, "func", None):
        parser().print_help(sys.stderr)
        return EXIT_USAGE
    if getattr(args, "command", "") in ("worker", "w"):
        from gpustack_operator import worker_flags

        worker_flags.finish_arguments(args, parser())
    from gpustack_operator import logs

    # worker-gateway also takes the GPUStack server's --v=N spelling of the verbosity.
    logs.configure(max(getattr(args, "verbosity", 0) or 0, getattr(args, "v", 0) or 0))
    vmodule = getattr(args, "vmodule", "")
    if vmodule:
        try:
            logs.apply_vmodule(vmodule)
        except ValueError as error:
            print(f"gpustack-operator: --vmodule: {error}", file=sys.stderr)
            return EXIT_USAGE
    if getattr(args, "print_cmdline", False):
        import logging

        logging.getLogger("cmdline").info("command line", extra={"argv": list(argv or sys.argv[1:])})
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
