"""The worker's start-up (operations spec D.5): every replica applies what ``plan`` renders.

Each step is idempotent and safe against another replica, or an older version, running it at the
same moment: objects are server-side applied with one field manager (the same bytes from every
replica of a version), created only when absent (namespace, Settings: a 409 means a peer did it),
and never deleted.  A step that fails is retried with back-off and its state is kept in a
:class:`Startup` record, which the worker's ``/readyz`` reports and the logs repeat: nothing is
skipped silently.

- :meth:`Prepare.core` — steps 1-5 (namespace, CRDs, webhook configurations, Settings), retried
  until they succeed; the worker serves and reconciles only after them.
- :meth:`Prepare.kueue_and_nfd` — steps 7-9 (NodeFeatureRule, the two AdmissionChecks), retried
  for up to ``crd_wait`` seconds while their CRDs (NFD's, Kueue's) are not served, then failed:
  the worker exits and says which CRD never came.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from api import constants
from api.objects import Obj
from controllers.install import plan
from kube.client import ApiError, Client

log = logging.getLogger("controllers.install")

STEP_NAMESPACE = "system-namespace"
STEP_CRDS = "crds"
STEP_API_SERVICES = "extension-api-services"
STEP_WEBHOOKS = "webhook-configurations"
STEP_SETTINGS = "settings"
STEP_APPLICATIONS = "applications"
STEP_RULE = "node-feature-rule"
STEP_NODE_DEVICES = "admission-check-node-devices"
STEP_JOINT = "admission-check-model-deployment-joint"
STEPS = (
    STEP_NAMESPACE,
    STEP_CRDS,
    STEP_API_SERVICES,
    STEP_WEBHOOKS,
    STEP_SETTINGS,
    STEP_APPLICATIONS,
    STEP_RULE,
    STEP_NODE_DEVICES,
    STEP_JOINT,
)
CRD_WAIT = 300.0  # seconds steps 7-9 wait for their CRDs
ESTABLISHED_WAIT = 60.0


class StepFailed(RuntimeError):
    """A start-up step gave up (steps 7-9 after ``crd_wait``)."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"start-up step {step}: {message}")
        self.step = step


@dataclass
class StepState:
    name: str
    state: str = "pending"  # pending | retrying | done | skipped | failed
    detail: str = ""
    attempts: int = 0


@dataclass
class Startup:
    """Where this replica's start-up stands; thread-safe, read by ``/readyz``."""

    steps: dict[str, StepState] = field(default_factory=lambda: {n: StepState(n) for n in STEPS})
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def set(self, step: str, state: str, detail: str = "", *, attempt: bool = False) -> None:
        with self._lock:
            record = self.steps[step]
            record.state, record.detail = state, detail
            if attempt:
                record.attempts += 1

    def ready(self) -> bool:
        with self._lock:
            return all(s.state in ("done", "skipped") for s in self.steps.values())

    def done(self, *steps: str) -> bool:
        with self._lock:
            return all(self.steps[s].state in ("done", "skipped") for s in steps)

    def report(self) -> list[str]:
        """One line per step, ``[+]`` done or skipped, ``[-]`` not yet (with why), as kube's /readyz."""
        with self._lock:
            lines = []
            for s in self.steps.values():
                mark = "+" if s.state in ("done", "skipped") else "-"
                tail = f": {s.detail}" if s.detail else ""
                tries = f" (attempt {s.attempts})" if s.state in ("retrying", "failed") else ""
                lines.append(f"[{mark}]startup/{s.name} {s.state}{tail}{tries}")
            return lines


def _not_served(error: ApiError) -> bool:
    """The kind's CRD is not (yet) served: 404 on the collection, or the apiserver not ready."""
    return error.status in (404, 503) or (error.status == 0)


class Prepare:
    def __init__(
        self,
        client: Client,
        startup: Startup,
        *,
        endpoint: plan.WebhookEndpoint,
        ca_bundle: Callable[[], bytes],
        seeds: Mapping[str, str],
        worker_identity: str = "",
        vendor_ids: Iterable[str] | None = None,
        crd_wait: float = CRD_WAIT,
        stop: threading.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
        retry: float = 0.5,
        max_retry: float = 10.0,
    ) -> None:
        self.client = client
        self.startup = startup
        self.endpoint = endpoint
        self.ca_bundle = ca_bundle
        self.seeds = dict(seeds)
        self.worker_identity = worker_identity
        self.vendor_ids = list(vendor_ids) if vendor_ids is not None else None
        self.crd_wait = crd_wait
        self.stop = stop or threading.Event()
        self.clock = clock
        self.retry = retry
        self.max_retry = max_retry

    # --- the steps ------------------------------------------------------------------------------

    def namespace(self) -> None:
        if self.client.get("Namespace", constants.SYSTEM_NAMESPACE) is not None:
            return
        try:
            self.client.create(plan.system_namespace())
        except ApiError as error:
            if not error.conflict:
                raise

    def crds(self) -> None:
        wanted = plan.custom_resource_definitions()
        for crd in wanted:
            self.client.apply(crd, field_manager=plan.FIELD_MANAGER)
        deadline = self.clock() + ESTABLISHED_WAIT
        pending = [c["metadata"]["name"] for c in wanted]
        while pending:
            pending = [name for name in pending if not self._established(name)]
            if not pending:
                return
            if self.clock() > deadline or self.stop.is_set():
                raise RuntimeError(f"CRDs not Established yet: {', '.join(pending)}")
            self.stop.wait(0.2)

    def _established(self, name: str) -> bool:
        crd = self.client.get("CustomResourceDefinition", name) or {}
        return any(
            c.get("type") == "Established" and c.get("status") == "True"
            for c in (crd.get("status") or {}).get("conditions") or []
        )

    def webhook_configurations(self, ca_bundle: bytes | None = None) -> None:
        bundle = self.ca_bundle() if ca_bundle is None else ca_bundle
        for obj in plan.webhook_configurations(self.endpoint, bundle, self.worker_identity):
            self.client.apply(obj, field_manager=plan.FIELD_MANAGER)

    def settings(self) -> list[str]:
        """Create the Settings not stored yet; returns the names created by this replica."""
        items, _ = self.client.list("Setting", constants.SYSTEM_NAMESPACE)
        existing = [(i.get("metadata") or {}).get("name", "") for i in items]
        created = []
        for obj in plan.missing_settings(existing, self.seeds):
            try:
                self.client.create(obj)
                created.append(obj["metadata"]["name"])
            except ApiError as error:
                if not error.conflict:  # a peer seeded it first: its seed is the same
                    raise
        if created:
            log.info("settings seeded", extra={"settings": created})
        return created

    def node_feature_rule(self) -> None:
        from controllers.nodefeatures.reconciler import FIELD_MANAGER

        self.client.apply(plan.cpu_info_rule(self.vendor_ids), field_manager=FIELD_MANAGER)

    def admission_check(self, index: int) -> None:
        obj, manager = plan.admission_checks()[index]
        self.client.apply(obj, field_manager=manager)

    # --- running them -----------------------------------------------------------------------------

    def _until_done(self, step: str, action: Callable[[], object], *, crd_of: str = "") -> None:
        """Run ``action`` until it succeeds.  With ``crd_of`` (the CRD a kind needs) a not-served
        kind is retried for ``crd_wait`` seconds, then the step fails; other errors are retried on."""
        delay = self.retry
        started = self.clock()
        while True:
            if self.stop.is_set():
                raise StepFailed(step, "stopped")
            try:
                action()
            except ApiError as error:
                message = f"{error.status} {error.reason}: {error.message}"[:300]
                if crd_of and _not_served(error):
                    waited = self.clock() - started
                    message = (
                        f"{crd_of} is not served ({message}); waited {waited:.0f}s of {self.crd_wait:.0f}s"
                    )
                    if waited >= self.crd_wait:
                        self.startup.set(step, "failed", message, attempt=True)
                        raise StepFailed(step, message) from None
                self.startup.set(step, "retrying", message, attempt=True)
                log.warning("start-up step not done; retrying", extra={"step": step, "error": message})
            except Exception as error:  # e.g. CRDs not Established in time
                message = f"{type(error).__name__}: {error}"[:300]
                self.startup.set(step, "retrying", message, attempt=True)
                log.warning("start-up step not done; retrying", extra={"step": step, "error": message})
            else:
                self.startup.set(step, "done")
                log.info("start-up step done", extra={"step": step})
                return
            self.stop.wait(delay)
            delay = min(delay * 2, self.max_retry)

    def core(self) -> None:
        """Steps 1-5 (and the two that have nothing to do here), in order."""
        self._until_done(STEP_NAMESPACE, self.namespace)
        self._until_done(STEP_CRDS, self.crds)
        self.startup.set(STEP_API_SERVICES, "skipped", "Setting is a CRD; no aggregated API to register")
        self._until_done(STEP_WEBHOOKS, self.webhook_configurations)
        self._until_done(STEP_SETTINGS, self.settings)
        self.startup.set(STEP_APPLICATIONS, "skipped", "the chart deploys them (--disable-applications=*)")

    def kueue_and_nfd(self) -> None:
        """Steps 7-9; raises :class:`StepFailed` when a CRD is still not served after ``crd_wait``."""
        self._until_done(STEP_RULE, self.node_feature_rule, crd_of="NFD's NodeFeatureRule CRD")
        self._until_done(
            STEP_NODE_DEVICES, lambda: self.admission_check(0), crd_of="Kueue's AdmissionCheck CRD"
        )
        self._until_done(STEP_JOINT, lambda: self.admission_check(1), crd_of="Kueue's AdmissionCheck CRD")

    def all(self) -> None:
        self.core()
        self.kueue_and_nfd()


def desired_absent_only(objects: Iterable[Obj]) -> dict[tuple[str, str], Obj]:
    """The objects an absence ensurer keeps, by (kind, name)."""
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}
