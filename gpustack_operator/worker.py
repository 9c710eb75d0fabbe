"""``gpustack-operator worker``: the webhook server (and, once built, the controllers)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from starlette.applications import Starlette

from webhooks import documents, server
from webhooks.connections import ConnectionLimits
from webhooks.lookups import FileLookups, Lookups

log = logging.getLogger("worker")

# The app factory below reads its configuration from these, so every uvicorn worker process
# builds the same app.
ENV_OBJECTS = "GPUSTACK_WORKER_OBJECTS"
ENV_KUBECONFIG = "GPUSTACK_WORKER_KUBECONFIG"
ENV_NULL = "GPUSTACK_WORKER_NULL_ENDPOINT"
ENV_MAX_BODY = "GPUSTACK_WORKER_MAX_BODY_BYTES"
ENV_LOG_DENIALS = "GPUSTACK_WORKER_LOG_DENIALS"


def lookups_from(objects: str | None, kubeconfig: str | None) -> Lookups:
    if objects:
        return FileLookups.from_directory(objects)
    from webhooks.live import LiveLookups

    return LiveLookups(kubeconfig=kubeconfig)


def app_from_environment() -> Starlette:
    """App factory for uvicorn (``gpustack_operator.worker:app_from_environment``)."""
    return server.create_app(
        lookups_from(os.environ.get(ENV_OBJECTS) or None, os.environ.get(ENV_KUBECONFIG) or None),
        include_null=os.environ.get(ENV_NULL) == "1",
        max_body=int(os.environ.get(ENV_MAX_BODY, server.DEFAULT_MAX_BODY)),
        log_denials=os.environ.get(ENV_LOG_DENIALS) == "1",
    )


def _tls_files(args: argparse.Namespace) -> tuple[str | None, str | None]:
    if args.insecure:
        return None, None
    cert, key = args.tls_cert, args.tls_key
    if args.cert_dir:
        cert, key = str(Path(args.cert_dir) / "tls.crt"), str(Path(args.cert_dir) / "tls.key")
    if not cert or not key:
        raise SystemExit(
            "gpustack-operator worker: give --tls-cert and --tls-key, or --cert-dir (or --insecure)"
        )
    for path in (cert, key):
        if not Path(path).is_file():
            raise SystemExit(f"gpustack-operator worker: {path}: no such file")
    return cert, key


def start_controllers(kubeconfig: str | None, *, leader_election: bool = True) -> object:
    """Start every registered controller behind the Lease; returns the running manager."""
    from controllers.registry import CONTROLLERS
    from kube.client import Client, load_api_client
    from kube.manager import Manager

    manager = Manager(Client(load_api_client(kubeconfig)), leader_election=leader_election)
    for controller in CONTROLLERS:
        manager.add(controller)
    manager.start(wait=False)  # the webhooks beside it serve while the caches fill
    log.info("controller manager started", extra={"controllers": [c.__name__ for c in CONTROLLERS]})
    return manager


def _run_controllers_only(args: argparse.Namespace) -> int:
    import signal
    import threading

    manager = start_controllers(args.kubeconfig, leader_election=not args.no_leader_election)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    manager.stop()  # type: ignore[attr-defined]
    return 0


def _delivery_identities(args: argparse.Namespace) -> None:
    """Who may write ModelArtifact and NodeModelStore status, for every webhook process (§3.2)."""
    from webhooks import delivery_status

    os.environ[delivery_status.ENV_MODEL_MANAGER_SA] = getattr(
        args, "model_manager_service_account", delivery_status.DEFAULT_MODEL_MANAGER_SA
    )
    if args.objects:
        return  # no apiserver: no status write can reach these webhooks
    from gpustack_operator.identity import IdentityUnknown, learn
    from kube.client import Client, load_api_client

    try:
        os.environ[delivery_status.ENV_WORKER_IDENTITY] = learn(Client(load_api_client(args.kubeconfig)))
    except IdentityUnknown as error:
        raise SystemExit(f"gpustack-operator worker: cannot learn its own identity: {error}") from None


def run(args: argparse.Namespace) -> int:
    if args.controllers_only:
        return _run_controllers_only(args)
    manager = None
    if not args.webhooks_only:
        if args.objects:
            print(
                "gpustack-operator worker: --objects serves file lookups to the webhooks only; add --webhooks-only",
                file=sys.stderr,
            )
            return 2
        manager = start_controllers(args.kubeconfig, leader_election=not args.no_leader_election)
    cert, key = _tls_files(args)
    _delivery_identities(args)
    os.environ[ENV_OBJECTS] = str(Path(args.objects).resolve()) if args.objects else ""
    os.environ[ENV_KUBECONFIG] = args.kubeconfig or ""
    os.environ[ENV_NULL] = "1" if args.null_endpoint else ""
    os.environ[ENV_MAX_BODY] = str(args.max_body_bytes)
    os.environ[ENV_LOG_DENIALS] = "1" if args.log_denials else ""
    if args.objects and not Path(args.objects).is_dir():
        print(f"gpustack-operator worker: --objects {args.objects}: not a directory", file=sys.stderr)
        return 2
    if args.objects:
        try:
            FileLookups.from_directory(args.objects)
        except documents.DocumentError as error:
            print(f"gpustack-operator worker: --objects: {error}", file=sys.stderr)
            return 2
    app = "gpustack_operator.worker:app_from_environment" if args.workers > 1 else app_from_environment()
    log.info(
        "serving webhooks",
        extra={
            "address": args.bind_address,
            "port": args.secure_port,
            "tls": bool(cert),
            "workers": args.workers,
        },
    )
    try:
        server.serve(
            app,
            host=args.bind_address,
            port=args.secure_port,
            cert_file=cert,
            key_file=key,
            workers=args.workers,
            limits=ConnectionLimits(
                max_header_bytes=args.max_header_bytes,
                max_headers=args.max_headers,
                request_deadline=args.request_deadline,
                max_connections=args.max_connections,
            ),
        )
    finally:
        if manager is not None:
            manager.stop()  # type: ignore[attr-defined]
    return 0
