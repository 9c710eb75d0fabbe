"""``gpustack-operator worker``: the worker's start-up, the webhook server and the controllers.

Against a cluster, every replica (operations spec D.5, D.6):

1. refuses to start on an invalid ``GPUSTACK_*`` Settings seed or deploy-time variable (one line);
2. learns its own identity, creates the system namespace, takes its serving certificate from the
   Secret it manages (or from ``--cert-dir``), then applies the CRDs, the webhook configurations
   with the CA bundle and the missing Settings (``controllers.install.prepare``, steps 1-5);
3. serves the webhooks, starts the absence ensurers, and runs the controllers behind the Lease;
4. applies the NodeFeatureRule and both AdmissionChecks (steps 7-9) in the background, waiting up
   to ``--startup-crd-wait`` for NFD's and Kueue's CRDs; ``/readyz`` is 503 and names the step
   until they are done, and a CRD that never comes stops the worker with one line (exit 1).

With ``--objects DIR`` it serves the webhooks over YAML files instead (no cluster, no start-up).
Serving itself (the TLS pair, the app, ``--workers`` processes) is ``gpustack_operator.serving``;
the command's flags are ``gpustack_operator.worker_flags``; this module is the replica's start-up
against a cluster.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from gpustack_operator import serving
from gpustack_operator.serving import StartupError
from gpustack_operator.worker_flags import applications_left

log = logging.getLogger("worker")

# Deploy-time booleans the worker (and the device managers beside it) read; checked at start.
DEPLOY_BOOLEANS = (
    ("GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS", True),
    ("GPUSTACK_KUEUE_QUOTA_CHECK_STRATEGY", False),
    ("GPUSTACK_NODE_CREDITS_CAPACITY", True),
)


def _url_names(url: str) -> tuple[list[str], list[str]]:
    """The certificate names a webhook URL needs: its host, as a DNS name or an IP."""
    import ipaddress
    from urllib.parse import urlsplit

    host = urlsplit(url).hostname or ""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return ([host] if host else []), []
    return [], [host]


def check_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """Every Setting's seed (refusing an invalid one) after the deploy-time booleans."""
    from api.booleans import EnvironmentValueError, env_bool, node_devices_retry_seconds
    from api.settings import SettingError, seed_all

    source = dict(os.environ if env is None else env)
    try:
        for name, default in DEPLOY_BOOLEANS:
            env_bool(name, default, source)
        node_devices_retry_seconds(source)
    except EnvironmentValueError as error:
        raise StartupError(str(error)) from None
    try:
        return seed_all(source)
    except SettingError as error:
        raise StartupError(f"{error}; fix or unset the variable") from None


def _exit_on_signals(worker: Worker) -> dict[int, Any]:
    """SIGTERM and SIGINT end the process through ``run``'s ``finally`` (``Worker.shutdown``: the
    controllers stop and the Lease is given up), wherever the main thread is.  Without this the
    default action killed it outright: uvicorn handles the signal while it serves, then puts the
    previous handler back and raises the signal again, so a worker stopped by a rolling update left
    its Lease held and the next leader waited out the lease duration (15 s)."""

    def leave(signum: int, _frame: object) -> None:
        worker.stop.set()
        raise SystemExit(worker.exit_code)

    return {signum: signal.signal(signum, leave) for signum in (signal.SIGTERM, signal.SIGINT)}


class Worker:
    """One replica against a cluster: start-up, certificates, ensurers, controllers."""

    def __init__(self, args: argparse.Namespace, seeds: dict[str, str]) -> None:
        from api import constants
        from controllers.install import plan, prepare
        from kube.client import Client, load_api_client

        self.args = args
        self.seeds = seeds
        self.client = Client(
            load_api_client(args.kubeconfig, component="worker"), timeout=args.kube_conn_timeout
        )
        self.stop = threading.Event()
        self.exit_code = 0
        self.startup = prepare.Startup()
        self.endpoint = (
            plan.WebhookEndpoint(url=args.webhook_url)
            if args.webhook_url
            else plan.WebhookEndpoint(
                service=args.webhook_service,
                namespace=constants.SYSTEM_NAMESPACE,
                port=args.webhook_service_port,
            )
        )
        self.identity = ""
        self.keeper: Any = None
        self.manager: Any = None
        self.ensurer: Any = None
        self.prepare: prepare.Prepare | None = None
        self.tls: tuple[str, str] | None = None

    # --- start-up ---------------------------------------------------------------------------------

    def learn_identity(self) -> None:
        from gpustack_operator.identity import IdentityUnknown, learn
        from webhooks import delivery_status

        os.environ[delivery_status.ENV_MODEL_MANAGER_SA] = self.args.model_manager_service_account
        try:
            self.identity = learn(self.client)
        except IdentityUnknown as error:
            raise StartupError(f"cannot learn its own identity: {error}") from None
        os.environ[delivery_status.ENV_WORKER_IDENTITY] = self.identity
        log.info("worker identity", extra={"identity": self.identity})

    def certificates(self) -> None:
        """The serving pair this replica serves and the CA the webhook configurations carry."""
        from api import constants
        from certs import issue
        from certs.secret import Keeper

        provided = serving.provided_tls_files(self.args)
        if provided is not None:
            directory = Path(provided[0]).parent
            if not (directory / "ca.crt").is_file():
                log.warning(
                    "no ca.crt beside the provided certificate: the webhook configurations carry no "
                    "caBundle, so the apiserver must already trust the serving certificate's issuer",
                    extra={"cert": provided[0]},
                )
        else:
            runtime = Path(self.args.cert_runtime_dir or tempfile.mkdtemp(prefix="gpustack-worker-certs-"))
            directory = runtime
            provided = (str(runtime / "tls.crt"), str(runtime / "tls.key"))
        names, ips = (
            _url_names(self.args.webhook_url)
            if self.args.webhook_url
            else (
                issue.service_names(self.endpoint.service, self.endpoint.namespace),
                [],
            )
        )
        self.keeper = Keeper(
            self.client,
            directory,
            name=self.args.cert_secret,
            namespace=constants.SYSTEM_NAMESPACE,
            dns_names=names + list(self.args.cert_dns),
            ips=ips + list(self.args.cert_ip),
            rotate_before=self.args.cert_rotate_before,
            provided=self.args.cert_dir is not None or bool(self.args.tls_cert),
            interval=self.args.cert_check_interval,
            on_ca=self._ca_changed,
        )
        self._retry("serving certificate", self.keeper.check)
        self.tls = provided

    def _ca_changed(self, ca: bytes) -> None:
        if self.prepare is not None:
            self.prepare.webhook_configurations(ca)

    def _retry(self, what: str, action: Any) -> None:
        from kube.client import ApiError

        delay = 0.5
        while not self.stop.is_set():
            try:
                action()
                return
            except (ApiError, OSError) as error:
                log.warning(f"{what} not ready; retrying", extra={"error": str(error)[:300]})
            self.stop.wait(delay)
            delay = min(delay * 2, 10.0)
        raise SystemExit(0)

    def build_prepare(self) -> None:
        from controllers.install import prepare

        self.prepare = prepare.Prepare(
            self.client,
            self.startup,
            endpoint=self.endpoint,
            ca_bundle=lambda: self.keeper.ca if self.keeper is not None else b"",
            seeds=self.seeds,
            worker_identity=self.identity,
            vendor_ids=self.args.vendor_ids,
            crd_wait=self.args.startup_crd_wait,
            stop=self.stop,
        )

    def desired(self) -> dict[tuple[str, str], dict[str, Any]]:
        from controllers.install import plan, prepare

        bundle = self.keeper.ca if self.keeper is not None else b""
        return prepare.desired_absent_only(
            [
                *plan.custom_resource_definitions(),
                *plan.webhook_configurations(self.endpoint, bundle, self.identity),
            ]
        )

    def start_ensurers(self) -> None:
        from controllers.install.ensurers import AbsenceEnsurer

        self.ensurer = AbsenceEnsurer(self.client, self.desired)
        self.ensurer.start()

    def start_controllers(self) -> None:
        import uuid

        from api import constants
        from controllers.registry import CONTROLLERS
        from kube.manager import Manager

        pod = os.environ.get("KUBERNETES_POD_NAME", "")
        self.manager = Manager(
            self.client,
            leader_election=self.args.kube_leader_election,
            lease_name=self.args.kube_leader_election_id,
            lease_namespace=constants.SYSTEM_NAMESPACE,
            lease_duration=self.args.kube_leader_lease,
            renew_deadline=self.args.kube_leader_renew_timeout,
            resync=self.args.informer_cache_resync_period,
            identity=f"{pod}_{uuid.uuid4().hex[:8]}" if pod else None,  # the Lease names the Pod
        )
        for controller in CONTROLLERS:
            self.manager.add(controller)
        from controllers import metrics as state_metrics

        state_metrics.register(self.manager)  # before start: its informers start with the others
        self.manager.start(wait=False)  # the webhooks beside it serve while the caches fill
        log.info("controller manager started", extra={"controllers": [c.__name__ for c in CONTROLLERS]})

    def late_steps(self) -> None:
        """Steps 7-9; a CRD that never comes ends the process (the Pod restarts and says why)."""
        from controllers.install.prepare import StepFailed

        assert self.prepare is not None
        try:
            self.prepare.kueue_and_nfd()
        except StepFailed as error:
            if self.stop.is_set():
                return
            print(f"gpustack-operator worker: {error}", file=sys.stderr, flush=True)
            log.error("start-up failed", extra={"step": error.step, "error": str(error)})
            self.exit_code = 1
            self.stop.set()
            os.kill(os.getpid(), signal.SIGTERM)  # ends the server; run() returns exit_code

    def readiness(self) -> tuple[bool, list[str]]:
        lines = list(self.startup.report())
        ok = self.startup.ready()
        if self.ensurer is not None:
            synced = self.ensurer.synced()
            lines.append("[+]absence-ensurers watching" if synced else "[-]absence-ensurers not synced yet")
            ok = ok and synced
        return ok, lines

    def shutdown(self) -> None:
        self.stop.set()
        for part in (self.manager, self.ensurer, self.keeper):
            if part is not None:
                part.stop()


def run(args: argparse.Namespace) -> int:
    if args.objects:
        return serving.run_files(args)
    left = applications_left(args)
    if left:
        print(
            "gpustack-operator worker: installing applications from the worker (image mode) is not built; "
            f"the chart deploys {', '.join(left)}: run with --disable-applications=*",
            file=sys.stderr,
        )
        return 3
    try:
        seeds = check_environment()
        if args.insecure:
            raise StartupError(
                "--insecure serves file lookups only (with --objects); the apiserver calls over TLS"
            )
        worker = Worker(args, seeds)
    except StartupError as error:
        print(f"gpustack-operator worker: {error}", file=sys.stderr)
        return 2
    previous = _exit_on_signals(worker)
    try:
        return _run_cluster(args, worker)
    except StartupError as error:
        print(f"gpustack-operator worker: {error}", file=sys.stderr)
        return 2
    finally:
        worker.shutdown()
        for signum, handler in previous.items():  # run in-process (tests) leaves none of its own
            signal.signal(signum, handler)


def _run_cluster(args: argparse.Namespace, worker: Worker) -> int:
    from controllers.install import prepare

    worker.learn_identity()
    worker.build_prepare()
    assert worker.prepare is not None
    # The Secret lives in the system namespace: create it first, then take the certificate.
    worker._retry("system namespace", worker.prepare.namespace)
    worker.certificates()
    worker.prepare.core()
    worker.keeper.start()
    worker.start_ensurers()
    if not args.webhooks_only:
        worker.start_controllers()
    late = threading.Thread(target=worker.late_steps, name="startup-late", daemon=True)
    if args.workers > 1:
        worker.late_steps()  # the serving processes cannot see this one's readiness: finish first
    else:
        late.start()
    if args.controllers_only:
        worker.stop.wait()
        return worker.exit_code
    log.info(
        "start-up core steps done",
        extra={"webhooks": worker.endpoint.describe(), "steps": list(prepare.STEPS)},
    )
    serving.serve(args, worker.tls, worker.readiness)
    return worker.exit_code
