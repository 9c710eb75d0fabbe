"""Serving the webhooks: the TLS pair, the app each uvicorn process builds, and ``--objects`` mode.

``gpustack-operator worker`` serves the same app against a cluster (``worker.Worker`` keeps the
certificate and adds its start-up steps to ``/readyz``) and over YAML files (``--objects``, no
cluster). With ``--workers N`` uvicorn starts N processes, each of which builds its app from the
environment this process sets (:func:`app_from_environment`), so every one serves the same.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kube import metrics as _build_info  # noqa: F401  (gpustack_build_info on /metrics)
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
ENV_METRICS_AUTH = "GPUSTACK_WORKER_METRICS_AUTH"


class StartupError(Exception):
    """A start-up refusal: printed as one line, exit status 2."""


def lookups_from(objects: str | None, kubeconfig: str | None) -> Lookups:
    if objects:
        return FileLookups.from_directory(objects)
    from webhooks.live import LiveLookups

    return LiveLookups(kubeconfig=kubeconfig)


def metrics_authorizer(enabled: bool, kubeconfig: str | None) -> Any:
    """``--metrics-auth``: the TokenReview + SubjectAccessReview guard of ``/metrics``, or None."""
    if not enabled:
        return None
    from kube.client import Client, load_api_client
    from kube.metrics_auth import MetricsAuthorizer

    return MetricsAuthorizer(Client(load_api_client(kubeconfig, component="worker"), timeout=5.0))


def app_from_environment() -> server.AdmissionPaths:
    """App factory for uvicorn (``gpustack_operator.serving:app_from_environment``)."""
    kubeconfig = os.environ.get(ENV_KUBECONFIG) or None
    return server.create_app(
        lookups_from(os.environ.get(ENV_OBJECTS) or None, kubeconfig),
        include_null=os.environ.get(ENV_NULL) == "1",
        max_body=int(os.environ.get(ENV_MAX_BODY, server.DEFAULT_MAX_BODY)),
        log_denials=os.environ.get(ENV_LOG_DENIALS) == "1",
        metrics_auth=metrics_authorizer(os.environ.get(ENV_METRICS_AUTH) == "1", kubeconfig),
    )


def provided_tls_files(args: argparse.Namespace) -> tuple[str, str] | None:
    """``--cert-dir`` / ``--tls-cert`` + ``--tls-key``: certificates someone else manages."""
    cert, key = args.tls_cert, args.tls_key
    if args.cert_dir:
        cert, key = str(Path(args.cert_dir) / "tls.crt"), str(Path(args.cert_dir) / "tls.key")
    if not cert and not key:
        return None
    if not cert or not key:
        raise StartupError("give both --tls-cert and --tls-key, or --cert-dir")
    for path in (cert, key):
        if not Path(path).is_file():
            raise StartupError(f"{path}: no such file")
    return cert, key


def serve(
    args: argparse.Namespace,
    tls: tuple[str, str] | None = None,
    readiness: Callable[[], tuple[bool, list[str]]] | None = None,
) -> None:
    """Serve the webhooks with the worker's flags (blocks until the server stops): over ``tls``
    (the pair a cluster replica keeps) or, with ``--objects``, the files the flags name; one app
    in this process, or ``--workers`` processes that each build theirs from the environment.
    ``readiness`` adds the replica's start-up steps to ``/readyz`` (one process only)."""
    cert, key = tls if tls else (None, None)
    if args.objects:
        provided = None if args.insecure else provided_tls_files(args)
        if not args.insecure and provided is None:
            raise StartupError("give --tls-cert and --tls-key, or --cert-dir (or --insecure)")
        cert, key = provided if provided else (None, None)
    if args.insecure:
        cert, key = None, None
    if args.metrics_auth and args.objects:
        raise StartupError("--metrics-auth asks the apiserver who scrapes: it needs a cluster, not --objects")
    os.environ[ENV_OBJECTS] = str(Path(args.objects).resolve()) if args.objects else ""
    os.environ[ENV_KUBECONFIG] = args.kubeconfig or ""
    os.environ[ENV_NULL] = "1" if args.null_endpoint else ""
    os.environ[ENV_MAX_BODY] = str(args.max_body_bytes)
    os.environ[ENV_LOG_DENIALS] = "1" if args.log_denials else ""
    os.environ[ENV_METRICS_AUTH] = "1" if args.metrics_auth else ""
    if args.workers > 1:
        app: Any = "gpustack_operator.serving:app_from_environment"
    else:
        app = server.create_app(
            lookups_from(os.environ[ENV_OBJECTS] or None, args.kubeconfig),
            include_null=args.null_endpoint,
            max_body=args.max_body_bytes,
            log_denials=args.log_denials,
            readiness=readiness,
            metrics_auth=metrics_authorizer(args.metrics_auth, args.kubeconfig),
        )
    log.info(
        "serving webhooks",
        extra={
            "address": args.bind_address,
            "port": args.secure_port,
            "tls": bool(cert),
            "workers": args.workers,
            "metrics_auth": args.metrics_auth,
        },
    )
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


def run_files(args: argparse.Namespace) -> int:
    """``worker --objects DIR --webhooks-only``: the webhooks over YAML files, no cluster."""
    if not args.webhooks_only:
        print(
            "gpustack-operator worker: --objects serves file lookups to the webhooks only; add --webhooks-only",
            file=sys.stderr,
        )
        return 2
    if not Path(args.objects).is_dir():
        print(f"gpustack-operator worker: --objects {args.objects}: not a directory", file=sys.stderr)
        return 2
    try:
        FileLookups.from_directory(args.objects)
        serve(args)
    except documents.DocumentError as error:
        print(f"gpustack-operator worker: --objects: {error}", file=sys.stderr)
        return 2
    except StartupError as error:
        print(f"gpustack-operator worker: {error}", file=sys.stderr)
        return 2
    return 0
