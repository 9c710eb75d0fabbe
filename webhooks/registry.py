"""Every webhook the worker serves, declared once.

The server's routes, the Mutating/ValidatingWebhookConfiguration objects, and ``admit``'s dispatch
are all generated from :data:`WEBHOOKS`, so a webhook cannot be served without being registered,
or registered under a different path than it is served on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from api import GROUP, SETTINGS_GROUP, constants
from webhooks import (
    delivery_status,
    instance,
    instance_companions,
    instance_type,
    instance_type_flavor,
    modelartifact,
    modeldeployment,
    modelprefetch,
    modelstore,
    modelstorebinding,
    pod,
    setting,
    shapes,
    topology_source,
    workload,
)
from webhooks.decision import Decision, allow, reject
from webhooks.kvcache import backend as kv_backend
from webhooks.kvcache import binding as kv_binding
from webhooks.kvcache import frozen as kv_frozen
from webhooks.kvcache import inject as kv_inject
from webhooks.kvcache import pool as kv_pool
from webhooks.lookups import Lookups
from webhooks.review import AdmissionRequest

Handler = Callable[[AdmissionRequest, Lookups], Awaitable[Decision]]
NAME_PREFIX = "gpustack-worker"
MUTATING_CONFIGURATION = constants.MUTATING_CONFIGURATION
VALIDATING_CONFIGURATION = constants.VALIDATING_CONFIGURATION


@dataclass(frozen=True, slots=True)
class Webhook:
    """One admission webhook: what it admits, how the apiserver calls it, and its handler."""

    mutating: bool
    group: str
    version: str
    resource: str  # plural, as in rules[].resources
    kind: str
    handler: Handler
    operations: tuple[str, ...] = ("CREATE", "UPDATE")
    failure_policy: str = "Fail"
    object_selector: dict[str, Any] | None = None
    match_conditions: tuple[dict[str, str], ...] = ()
    timeout_seconds: int = 10
    reinvocation: str = "Never"  # mutating only: "IfNeeded" when another webhook may undo ours
    scope: str = "*"
    # UPDATEs of an object carrying a deletionTimestamp skip the handler unless it opts in (it
    # may then only refuse what a finalizer-only change cannot trip); see the deletion guard.
    handles_deletion: bool = False
    match_policy: str = "Equivalent"
    # Core Pod entries only: skip the operator's own namespace and kube-system, so a down worker
    # can always be restarted.  Every other entry sees every namespace (a worker.gpustack.ai
    # object in a reserved namespace must still meet its rules, e.g. A.5's refusal).
    exempts_system_namespaces: bool = False
    # Tells apart two webhooks of one kind and verb (the Pod gate and the KV-cache injection).
    feature: str = ""
    subresource: str = ""  # e.g. "status": the webhook admits writes of that subresource only
    # The worker's own writes skip this webhook (a matchCondition on its identity): the Settings it
    # seeds are validated in-process, so its start-up never waits on a webhook it serves itself.
    exempts_worker: bool = False

    @property
    def rule_resource(self) -> str:
        """``rules[].resources`` entry: ``modelartifacts`` or ``modelartifacts/status``."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    @property
    def name(self) -> str:
        group = self.group or "core"
        verb = "mutate" if self.mutating else "validate"
        prefix = f"{NAME_PREFIX}-{self.feature}" if self.feature else NAME_PREFIX
        kind = self.kind.lower() + (f"-{self.subresource}" if self.subresource else "")
        return f"{verb}.{prefix}.{group}.{self.version}.{kind}"

    @property
    def path(self) -> str:
        return "/" + self.name.replace(".", "-")

    def selects(self, request: AdmissionRequest) -> bool:
        return (
            request.kind == self.kind
            and request.group == self.group
            and request.operation in self.operations
            and request.sub_resource == self.subresource
        )

    async def __call__(self, request: AdmissionRequest, lookups: Lookups) -> Decision:
        if request.deleting and not self.handles_deletion:
            return allow()
        wrong = shapes.errors(request)
        if wrong:  # the handler is written for the shape its kind has; anything else is refused here
            return reject(self.kind, request.display_name, wrong)
        return await self.handler(request, lookups)


_QUEUED_POD = {"matchExpressions": [{"key": constants.KUEUE_QUEUE_NAME, "operator": "Exists"}]}
_KVCACHE_POD = {
    "matchExpressions": [{"key": constants.LABEL_KVCACHE_INJECT, "operator": "In", "values": ["true"]}]
}

WEBHOOKS: tuple[Webhook, ...] = (
    # Gate 1: the Pod webhook (CREATE only; the Pod handler never sees an UPDATE).
    Webhook(
        True,
        "",
        "v1",
        "pods",
        "Pod",
        pod.mutate,
        operations=("CREATE",),
        object_selector=_QUEUED_POD,
        reinvocation="IfNeeded",
        exempts_system_namespaces=True,
    ),
    # KV-cache injection (kv-cache §3.4): its own label, never reinvoked (a second pass would refuse
    # its own output), fails closed; one configuration with gate 1, after it.
    Webhook(
        True,
        "",
        "v1",
        "pods",
        "Pod",
        kv_inject.mutate,
        operations=("CREATE",),
        object_selector=_KVCACHE_POD,
        exempts_system_namespaces=True,
        feature="kvcache",
    ),
    Webhook(
        False,
        "",
        "v1",
        "pods",
        "Pod",
        pod.validate,
        operations=("CREATE",),
        object_selector=_QUEUED_POD,
        exempts_system_namespaces=True,
    ),
    # The frozen keys of an injected Pod: Ignore, and terminating Pods included, so it can never
    # block a finalizer.
    Webhook(
        False,
        "",
        "v1",
        "pods",
        "Pod",
        kv_frozen.validate,
        operations=("UPDATE",),
        failure_policy="Ignore",
        object_selector=_KVCACHE_POD,
        handles_deletion=True,
        exempts_system_namespaces=True,
        feature="kvcache",
    ),
    # The Workload fit pin: advisory, so it can never block Kueue.
    Webhook(
        True,
        "kueue.x-k8s.io",
        "v1beta2",
        "workloads",
        "Workload",
        workload.mutate,
        failure_policy="Ignore",
        match_conditions=(
            {
                "name": "gpustack-local-queue",
                "expression": "has(object.spec.queueName) && object.spec.queueName.startsWith('gpustack-fnv64-')",
            },
        ),
    ),
    Webhook(
        True,
        GROUP,
        "v1",
        "instancetypes",
        "InstanceType",
        instance_type.default,
        scope="Cluster",
        handles_deletion=True,
    ),
    Webhook(
        False,
        GROUP,
        "v1",
        "instancetypes",
        "InstanceType",
        instance_type.validate,
        scope="Cluster",
        handles_deletion=True,
    ),
    Webhook(True, GROUP, "v1", "instances", "Instance", instance.default, scope="Namespaced"),
    # ModelDeployment: both halves opt in to deletion, declining their lookup rules themselves.
    Webhook(
        True,
        GROUP,
        "v1",
        "modeldeployments",
        "ModelDeployment",
        modeldeployment.default,
        scope="Namespaced",
        handles_deletion=True,
    ),
    Webhook(
        False,
        GROUP,
        "v1",
        "modeldeployments",
        "ModelDeployment",
        modeldeployment.validate,
        scope="Namespaced",
        handles_deletion=True,
    ),
    Webhook(False, GROUP, "v1", "instances", "Instance", instance.validate, scope="Namespaced"),
    # KV cache (kv-cache §3.1-§3.3); updates during deletion pass untouched (finalizer removal).
    Webhook(False, GROUP, "v1", "kvcachebackends", "KVCacheBackend", kv_backend.validate, scope="Cluster"),
    Webhook(False, GROUP, "v1", "kvcachepools", "KVCachePool", kv_pool.validate, scope="Cluster"),
    Webhook(
        False,
        GROUP,
        "v1",
        "kvcachepoolbindings",
        "KVCachePoolBinding",
        kv_binding.validate,
        scope="Namespaced",
    ),
    # The Instance companion kinds.
    Webhook(
        False,
        GROUP,
        "v1",
        "instancesshpublickeys",
        "InstanceSSHPublicKey",
        instance_companions.validate_ssh_public_key,
        scope="Namespaced",
    ),
    Webhook(
        False,
        GROUP,
        "v1",
        "instanceimagepullsecrets",
        "InstanceImagePullSecret",
        instance_companions.validate_image_pull_secret,
        scope="Namespaced",
    ),
    Webhook(
        False,
        GROUP,
        "v1",
        "instancepersistentvolumes",
        "InstancePersistentVolume",
        instance_companions.validate_persistent_volume,
        scope="Namespaced",
    ),
    # Settings (operations spec D.8): registered names only, values by their validators, no delete.
    Webhook(
        False,
        SETTINGS_GROUP,
        "v1",
        "settings",
        "Setting",
        setting.validate,
        operations=("CREATE", "UPDATE", "DELETE"),
        scope="Namespaced",
        exempts_worker=True,
    ),
    # The InstanceTypeFlavor catalog (§2.3): read-only but to the worker, which writes it.
    Webhook(
        False,
        GROUP,
        "v1",
        "instancetypeflavors",
        "InstanceTypeFlavor",
        instance_type_flavor.guard,
        operations=("CREATE", "UPDATE", "DELETE"),
        scope="Cluster",
        exempts_worker=True,
        handles_deletion=True,
    ),
    # Topology sources (topology spec B.2): the eleven rules, CREATE and UPDATE alike.
    Webhook(
        False,
        GROUP,
        "v1",
        "topologysources",
        "TopologySource",
        topology_source.validate,
        scope="Cluster",
    ),
    # Model delivery (model-delivery spec §3.1, §3.2).
    Webhook(True, GROUP, "v1", "modelartifacts", "ModelArtifact", modelartifact.default, scope="Namespaced"),
    Webhook(
        False, GROUP, "v1", "modelartifacts", "ModelArtifact", modelartifact.validate, scope="Namespaced"
    ),
    Webhook(
        False,
        GROUP,
        "v1",
        "modelartifacts",
        "ModelArtifact",
        delivery_status.guard_artifact_status,
        operations=("UPDATE",),
        scope="Namespaced",
        handles_deletion=True,
        subresource="status",
    ),
    Webhook(
        False,
        GROUP,
        "v1",
        "nodemodelstores",
        "NodeModelStore",
        delivery_status.guard_store_status,
        operations=("UPDATE",),
        scope="Cluster",
        handles_deletion=True,
        subresource="status",
    ),
    # The pool and warming kinds (model-delivery spec §2.3, §3.5); updates during deletion pass.
    Webhook(False, GROUP, "v1", "modelstores", "ModelStore", modelstore.validate, scope="Cluster"),
    Webhook(
        False,
        GROUP,
        "v1",
        "modelstorebindings",
        "ModelStoreBinding",
        modelstorebinding.validate,
        scope="Namespaced",
    ),
    Webhook(
        False,
        GROUP,
        "v1",
        "modelprefetches",
        "ModelPrefetch",
        modelprefetch.validate,
        scope="Namespaced",
    ),
)


def by_path() -> dict[str, Webhook]:
    return {webhook.path: webhook for webhook in WEBHOOKS}


def for_request(request: AdmissionRequest, *, mutating: bool) -> list[Webhook]:
    """The webhooks the apiserver would call for ``request``, ignoring object selectors."""
    return [w for w in WEBHOOKS if w.mutating == mutating and w.selects(request)]
