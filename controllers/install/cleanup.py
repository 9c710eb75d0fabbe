"""``gpustack-operator cleanup``: what ``helm uninstall`` with ``cleanupOnUninstall`` removes besides
the release (operations spec D.3, D.9; the chart's post-delete hook runs it).

Helm owns only what it rendered.  The worker created the rest at run time, so an uninstall without
cleanup leaves it behind — CRDs and every object of them (Settings included), the webhook
configurations, the NodeFeatureRule, the AdmissionChecks, the Kueue objects of the pools, the
certificate Secret and the Lease.  Cleanup removes them in an order that never locks anything:

1. wait until no worker Pod of the release is left (a terminating replica's absence ensurer would
   recreate what step 2 deletes);
2. the two webhook configurations first — they fail closed for the operator's kinds and for queued
   Pods, and nothing may be admitted against a worker that is gone;
3. the AdmissionChecks, the Kueue objects the pools made (labelled ``resource.gpustack.ai/type``,
   and the ``gpustack-*`` Topologies), the NodeFeatureRule (only while it carries the operator's
   ``part-of`` label) and the NodeFeatures of the worker and the device managers;
4. the operator's finalizers on every object of its CRDs (nothing is left to remove them), then the
   CRDs themselves, which takes every object of them along;
5. the certificate Secret and the Lease.

:func:`plan` names the steps; :func:`run` performs them, each tolerating what is already gone.
:meth:`Cleanup.webhooks` performs steps 1 and 2 alone: what every uninstall does by default.

When the release installed Kueue itself (``kueue.enabled``), Helm deletes Kueue with it — its CRDs
too — and objects still carrying Kueue's finalizers would then hold those CRDs ``Terminating`` for
good. :func:`Cleanup.before_kueue_goes` is the chart's pre-delete hook for that case: it deletes the
worker Deployment (so no replica recreates a pool's objects), waits out its Pods, then deletes the
AdmissionChecks and the pools' Kueue objects and waits while the still-running Kueue releases them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from api import constants, crds
from api.objects import Obj
from controllers.pools import render
from kube.client import JSON_PATCH, ApiError, Client

log = logging.getLogger("controllers.install.cleanup")

PART_OF = f"{constants.LABEL_PART_OF}=gpustack-operator"


@dataclass(frozen=True, slots=True)
class Deletion:
    kind: str
    name: str = ""  # empty: every object matching the selector
    namespace: str = ""
    label_selector: str = ""
    name_prefix: str = ""


WEBHOOK_STEPS = 2  # the first deletions of the plan: the two webhook configurations


def plan(*, cert_secret: str, lease: str = constants.LEADER_ELECTION_ID) -> list[Deletion]:
    """The deletions of steps 2, 3 and 5, in order (steps 1 and 4 are :func:`run`'s)."""
    return [
        Deletion("MutatingWebhookConfiguration", constants.MUTATING_CONFIGURATION),
        Deletion("ValidatingWebhookConfiguration", constants.VALIDATING_CONFIGURATION),
        Deletion("AdmissionCheck", constants.ADMISSION_CHECK_NODE_DEVICES),
        Deletion("AdmissionCheck", constants.ADMISSION_CHECK_JOINT),
        Deletion("ClusterQueue", label_selector=constants.LABEL_RESOURCE_TYPE),
        Deletion("LocalQueue", label_selector=constants.LABEL_RESOURCE_TYPE),
        Deletion("ResourceFlavor", label_selector=constants.LABEL_RESOURCE_TYPE),
        Deletion("Topology", name_prefix="gpustack-"),
        Deletion("NodeFeatureRule", constants.NODE_FEATURE_RULE_CPU, label_selector=PART_OF),
        Deletion("NodeFeature", namespace=constants.SYSTEM_NAMESPACE),
        Deletion("Secret", cert_secret, constants.SYSTEM_NAMESPACE),
        Deletion("Lease", lease, constants.SYSTEM_NAMESPACE),
    ]


KUEUE_KINDS = ("AdmissionCheck", "ClusterQueue", "LocalQueue", "ResourceFlavor", "Topology")


def kueue_plan() -> list[Deletion]:
    """The operator's Kueue objects (a subset of :func:`plan`), dependants first."""
    order = {"LocalQueue": 0, "ClusterQueue": 1, "AdmissionCheck": 2, "ResourceFlavor": 3, "Topology": 4}
    found = [d for d in plan(cert_secret="") if d.kind in KUEUE_KINDS]
    return sorted(found, key=lambda d: order[d.kind])


def our_finalizers(finalizers: list[str]) -> list[str]:
    """The finalizers only the operator removes (``gpustack.ai/…``, ``worker.gpustack.ai/…``)."""
    return [f for f in finalizers if f.split("/", 1)[0].endswith("gpustack.ai")]


def finalizer_patch(obj: Obj) -> list[dict[str, object]] | None:
    """A JSON patch keeping only foreign finalizers, guarded by a test of the current list."""
    current = list((obj.get("metadata") or {}).get("finalizers") or [])
    ours = our_finalizers(current)
    if not ours:
        return None
    return [
        {"op": "test", "path": "/metadata/finalizers", "value": current},
        {"op": "replace", "path": "/metadata/finalizers", "value": [f for f in current if f not in ours]},
    ]


def _matches(deletion: Deletion, obj: Obj) -> bool:
    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    if deletion.name and name != deletion.name:
        return False
    if deletion.name_prefix and not name.startswith(deletion.name_prefix):
        return False
    if deletion.kind == "NodeFeature":  # the worker's and the device managers', not nfd-worker's
        return name.endswith(("-gpustack-worker", "-gpustack-device-manager"))
    return True


class Cleanup:
    def __init__(
        self,
        client: Client,
        *,
        cert_secret: str,
        worker_selector: str = "",
        wait_for_workers: float = 120.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.cert_secret = cert_secret
        self.worker_selector = worker_selector
        self.wait_for_workers = wait_for_workers
        self.sleep = sleep
        self.clock = clock
        self.deleted: list[str] = []

    def _delete_one(self, kind: str, name: str, namespace: str = "") -> None:
        try:
            if not self.client.delete(kind, name, namespace):
                return
        except ApiError as error:
            if error.status == 405:
                return
            raise
        self.deleted.append(f"{kind}/{namespace + '/' if namespace else ''}{name}")

    def _list(self, kind: str, namespace: str = "", label_selector: str = "") -> list[Obj]:
        try:
            items, _ = self.client.list(kind, namespace, label_selector=label_selector)
        except ApiError as error:
            if error.status == 404:  # the kind is not served (Kueue or NFD absent): nothing to do
                return []
            raise
        return items

    def workers_gone(self) -> bool:
        if not self.worker_selector:
            return True
        deadline = self.clock() + self.wait_for_workers
        while True:
            pods = self._list("Pod", constants.SYSTEM_NAMESPACE, self.worker_selector)
            if not pods:
                return True
            if self.clock() > deadline:
                names = [(p.get("metadata") or {}).get("name") for p in pods]
                log.warning("worker Pods still present; cleaning up anyway", extra={"pods": names})
                return False
            self.sleep(1.0)

    def remove(self, deletion: Deletion) -> None:
        if deletion.name and not deletion.label_selector:
            self._delete_one(deletion.kind, deletion.name, deletion.namespace)
            return
        for obj in self._list(deletion.kind, deletion.namespace, deletion.label_selector):
            if _matches(deletion, obj):
                meta = obj.get("metadata") or {}
                self._delete_one(deletion.kind, meta.get("name", ""), meta.get("namespace", ""))

    def release_finalizers(self) -> int:
        """Step 4's first half: drop the operator's finalizers from every object of its CRDs."""
        released = 0
        for crd in crds.render_all():
            kind = crd["spec"]["names"]["kind"]
            for obj in self._list(kind):
                body = finalizer_patch(obj)
                if body is None:
                    continue
                meta = obj.get("metadata") or {}
                try:
                    self.client.patch(
                        kind, meta["name"], body, namespace=meta.get("namespace", ""), content_type=JSON_PATCH
                    )
                    released += 1
                except ApiError as error:
                    if error.status not in (404, 409, 422):
                        raise
        return released

    def before_kueue_goes(self, worker_deployment: str, timeout: float = 180.0) -> list[str]:
        """The pre-delete hook of a release that installed Kueue (module docstring). True when every
        Kueue object of the operator is gone within ``timeout``."""
        self._delete_one("Deployment", worker_deployment, constants.SYSTEM_NAMESPACE)
        self.workers_gone()
        steps = kueue_plan()
        for deletion in steps:
            self.remove(deletion)
        deadline = self.clock() + timeout
        while left := [
            f"{d.kind}/{(o.get('metadata') or {}).get('name')}"
            for d in steps
            for o in self._list(d.kind, d.namespace, d.label_selector)
            if _matches(d, o)
        ]:
            self._nudge_held_topologies()
            if self.clock() > deadline:
                log.warning("Kueue objects still present; uninstalling anyway", extra={"left": left[:10]})
                break
            self.sleep(1.0)
        log.info("Kueue objects removed before Kueue", extra={"deleted": len(self.deleted)})
        return self.deleted

    def _nudge_held_topologies(self) -> None:
        """Deleted Topologies of ours Kueue still holds with no flavor naming them (render.held_by_kueue)."""
        referenced = {(f.get("spec") or {}).get("topologyName") or "" for f in self._list("ResourceFlavor")}
        now = time.time()
        for topology in self._list(
            "Topology", "", f"{constants.LABEL_RESOURCE_TYPE}={constants.RESOURCE_TYPE_NODES}"
        ):
            if render.held_by_kueue(topology, referenced) and render.nudge_due(topology, now):
                name = (topology.get("metadata") or {}).get("name", "")
                log.info("nudging Kueue about a deleted Topology it still holds", extra={"topology": name})
                try:
                    self.client.patch("Topology", name, render.nudge_patch(now))
                except ApiError as error:
                    if not error.not_found:
                        raise

    def webhooks(self) -> list[str]:
        """A plain uninstall's cleanup (the chart's default post-delete hook): the two webhook
        configurations only, by name, once no worker is left to recreate them. They fail closed, so
        left behind they would refuse every queued Pod and operator object cluster-wide."""
        self.workers_gone()
        for deletion in plan(cert_secret=self.cert_secret)[:WEBHOOK_STEPS]:
            self.remove(deletion)
        return self.deleted

    def run(self) -> list[str]:
        self.workers_gone()
        steps = plan(cert_secret=self.cert_secret)
        for deletion in steps[:-2]:
            self.remove(deletion)
        released = self.release_finalizers()
        for crd in crds.render_all():
            self._delete_one("CustomResourceDefinition", crd["metadata"]["name"])
        for deletion in steps[-2:]:
            self.remove(deletion)
        log.info("cleanup done", extra={"deleted": len(self.deleted), "finalizers_released": released})
        return self.deleted
