"""Where the features built beside the renderer plug into it: the KV cache (``spec.kvCache``),
model delivery (``spec.model.artifactRef``) and topology placement (``roles[].topology``).

Each feature is one object with the functions the renderer and the status call.  The defaults here
are the spec's behaviour when the field is **absent**; a feature package's object replaces its
default where the worker wires the controller (``controllers.registry.model_deployment_extensions``;
this module imports no feature) and owns everything it renders and reports:

- :class:`CacheFeature` — ``resolve`` once per pass (the Binding, its pool and domain: the
  ``DomainRegistered`` and ``CacheAttached`` conditions, ``status.kvCache``), then ``role`` per role:
  the store connector entry the pairing renderer composes with the direct leg, and the args, env,
  annotations (``kvcache.gpustack.ai/client-config``), volumes and mounts of the client.
- :class:`DeliveryFeature` — ``resolve`` once per pass (``WeightsReady``, ``status.model``, whether
  replacements are held), ``role`` per role: the weights' volumes, mounts, env and args.
- :class:`TopologyFeature` — ``annotations`` per role: ``kueue.x-k8s.io/podset-required-topology``
  (part of the template, so of the role hash); built: ``controllers.topology.required_level``.

Nothing here performs I/O on its own: a feature reads what it needs through the ``reader`` the
controller hands it, which answers from the informer caches of the kinds the feature lists in its
``kinds`` attribute (the controller starts those informers with its own), so the renderer stays a
pure function of its inputs.  The writes a feature needs are returned for the controller to send
(the cache's ``usedBy`` registration in :attr:`CacheResolution.used_by`, its release from
:meth:`CacheFeature.release`).  A feature with ``kinds`` may also define
``wakes(kind, event, obj, old, deployments, reader) -> list[deployment object]``: which
deployments a change of one of its objects concerns (the controller watches each kind with it).

The features installed are the registry's — the KV cache of :mod:`controllers.kvcache.md_feature`,
the delivery of :mod:`controllers.delivery.md_feature` and the placement of
:mod:`controllers.topology.required_level`; the classes below are the spec's behaviour without a
feature (:data:`NO_FEATURES`), what the controller renders with when it is given none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from api.model_deployment_status import (
    CONDITION_CACHE_ATTACHED,
    CONDITION_DOMAIN_REGISTERED,
    REASON_BINDING_NOT_READY,
    REASON_NOT_APPLICABLE,
)
from api.objects import Obj
from readmodels.modeldeployment import Deployment, Role

Reader = Callable[[str, str, str], Obj | None]
"""``reader(kind, name, namespace)``: an object from the controller's caches, or None."""


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str = ""


@dataclass
class CacheResolution:
    """What one pass learned about the deployment's cache attachment."""

    applicable: bool
    resolved: bool  # a connection resolved this pass (else outdated replicas are held, §9.3)
    conditions: list[Condition] = field(default_factory=list)
    status: Obj | None = None  # status.kvCache; absent while unresolved
    data: Any = None  # the feature's own facts, handed back to ``role``
    used_by: Obj | None = None  # a status apply the controller sends (the Binding's usedBy entry)
    used_by_manager: str = ""  # its field manager


@dataclass
class RoleCache:
    """What the cache client adds to one managed role's Pods."""

    connector: Obj | None = None  # vLLM: the store connector entry (kv_connector + its extra config)
    store_protocol: str | None = None  # the store's transport spelling (tcp, rdma, ...)
    args: list[str] = field(default_factory=list)
    env: list[Obj] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    volumes: list[Obj] = field(default_factory=list)
    mounts: list[Obj] = field(default_factory=list)
    ports: list[Obj] = field(default_factory=list)


class CacheFeature(Protocol):
    def resolve(self, md: Deployment, reader: Reader) -> CacheResolution: ...

    def role(
        self, resolution: CacheResolution, md: Deployment, role: Role, instance_type: Mapping[str, Any]
    ) -> RoleCache | None: ...

    def observe(self, resolution: CacheResolution, md: Deployment, ready_replicas: int) -> list[Condition]:
        """The conditions once the pass has counted the deployment's ready replicas."""
        ...

    def release(self, md: Deployment) -> tuple[Obj, str] | None:
        """The deployment is being deleted: the status apply (and its field manager) that releases
        its Binding registration (§9.6), for the controller to send; None when there is none."""
        ...


class NoCache:
    """The spec with no KV-cache feature installed: nothing is rendered.

    Without ``spec.kvCache`` that is exact (``DomainRegistered``/``CacheAttached`` True,
    ``NotApplicable``).  With it, the Binding cannot be resolved by this build: the roles run
    without a store connector and the status says so instead of claiming an attachment."""

    def resolve(self, md: Deployment, reader: Reader) -> CacheResolution:
        if md.kv_cache is None:
            return CacheResolution(
                applicable=False,
                resolved=True,
                conditions=[
                    Condition(CONDITION_DOMAIN_REGISTERED, "True", REASON_NOT_APPLICABLE, "no spec.kvCache"),
                    Condition(CONDITION_CACHE_ATTACHED, "True", REASON_NOT_APPLICABLE, "no spec.kvCache"),
                ],
            )
        message = (
            f"KVCachePoolBinding {md.binding_name!r} is not resolved: this worker renders no KV-cache "
            "client, so the roles run without a store connector"
        )
        return CacheResolution(
            applicable=True,
            resolved=False,
            conditions=[
                Condition(CONDITION_DOMAIN_REGISTERED, "False", REASON_BINDING_NOT_READY, message),
                Condition(CONDITION_CACHE_ATTACHED, "Unknown", "NoObservationAvailable", message),
            ],
        )

    def role(
        self, resolution: CacheResolution, md: Deployment, role: Role, instance_type: Mapping[str, Any]
    ) -> RoleCache | None:
        return None

    def observe(self, resolution: CacheResolution, md: Deployment, ready_replicas: int) -> list[Condition]:
        return list(resolution.conditions)

    def release(self, md: Deployment) -> tuple[Obj, str] | None:
        return None


@dataclass
class DeliveryResolution:
    applicable: bool
    held: bool = False  # weights blocked: outdated replicas are left in place (RolloutHeldByWeights)
    blocked: bool = False  # weights not deliverable: no Pod is created (model-delivery §3.4.1, §4.3)
    blocked_message: str = ""  # why, for the phase message
    conditions: list[Condition] = field(default_factory=list)  # WeightsReady
    status: Obj | None = None  # status.model
    data: Any = None


@dataclass
class RoleDelivery:
    args: list[str] = field(default_factory=list)
    env: list[Obj] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    volumes: list[Obj] = field(default_factory=list)
    mounts: list[Obj] = field(default_factory=list)
    model: str | None = None  # what the engine loads instead of spec.model.name (a local path)
    ephemeral_limit_raise: int = 0  # bytes added to main's ephemeral-storage limit (not the request)
    node_affinity: Obj | None = None  # set on each Pod at creation, outside the Pod fingerprint


class DeliveryFeature(Protocol):
    def resolve(self, md: Deployment, reader: Reader) -> DeliveryResolution: ...

    def role(
        self, resolution: DeliveryResolution, md: Deployment, role: Role, instance_type: Mapping[str, Any]
    ) -> RoleDelivery | None: ...

    def observe(
        self, resolution: DeliveryResolution, md: Deployment, pods: list[Obj], reader: Reader
    ) -> list[Condition]:
        """``WeightsReady`` once the pass has listed the deployment's live Pods."""
        ...


class EngineDelivery:
    """No delivery feature: the engine fetches ``spec.model.name`` through its own hub client."""

    def resolve(self, md: Deployment, reader: Reader) -> DeliveryResolution:
        return DeliveryResolution(applicable=bool(md.artifact_ref))

    def role(
        self, resolution: DeliveryResolution, md: Deployment, role: Role, instance_type: Mapping[str, Any]
    ) -> RoleDelivery | None:
        return None

    def observe(
        self, resolution: DeliveryResolution, md: Deployment, pods: list[Obj], reader: Reader
    ) -> list[Condition]:
        return list(resolution.conditions)


class TopologyFeature(Protocol):
    def annotations(self, md: Deployment, role: Role) -> dict[str, str]: ...


class NoTopology:
    """No topology feature: a role without ``topology.requiredLevel`` carries no annotation, and
    a role with one is placed without it until the topology feature renders it."""

    def annotations(self, md: Deployment, role: Role) -> dict[str, str]:
        return {}


@dataclass
class Extensions:
    cache: CacheFeature
    delivery: DeliveryFeature
    topology: TopologyFeature


NO_FEATURES = Extensions(cache=NoCache(), delivery=EngineDelivery(), topology=NoTopology())
"""The spec's behaviour with no feature package installed."""


__all__ = [
    "NO_FEATURES",
    "CacheFeature",
    "CacheResolution",
    "Condition",
    "DeliveryFeature",
    "DeliveryResolution",
    "Extensions",
    "RoleCache",
    "RoleDelivery",
    "TopologyFeature",
]
