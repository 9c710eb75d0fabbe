"""Gauges of the cluster's state, read from the controllers' informer caches at scrape time.

A ``prometheus_client`` custom collector: nothing is recorded per reconcile, so nothing goes stale
and a deleted object's series disappear with it.  Every figure is one an operator reads from the
objects' status already (``kubectl get instancetypes`` and friends), turned into numbers:

- InstanceType: ``capacity`` and ``remaining`` of each view (exclusive, shared, sliced, partitioned
  accelerator views and cpu), the phase, and the Kueue Workloads pending in its queue;
- Devices: each node's cards by allocation mode, and the unhealthy ones;
- ModelDeployment: desired (``spec.roles[].replicas``) and ready replicas per role, and the phase;
- Instance: the phase;
- ModelArtifact: nodes by state and the download progress;
- KVCachePool quota and usage, KVCacheBackend capacity and usage.

Labels name objects (namespace and name), never a Pod.  A phase gauge carries every known phase of
its kind as 0 or 1 (and the current one as 1 when it is not one of them, e.g. an Instance's
``CrashLoopBackOff``).  :func:`families` is pure: the worker hands it the caches' contents
(:class:`StateCollector`), tests hand it lists of dicts.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from api import constants
from api import model_deployment_status as md_status
from api.naming import local_queue_name
from api.objects import Obj
from fastpath import quantity

# The informers the collector reads; every one is a cluster-wide cache a controller already keeps.
KINDS = (
    "InstanceType",
    "Workload",
    "Devices",
    "ModelDeployment",
    "Instance",
    "ModelArtifact",
    "KVCachePool",
    "KVCacheBackend",
)

# InstanceType status field → the ``view`` label.
VIEWS = (
    ("accelerator", "exclusive"),
    ("acceleratorShared", "shared"),
    ("acceleratorSliced", "sliced"),
    ("acceleratorPartitioned", "partitioned"),
    ("cpu", "cpu"),
)
CARD_MODES = constants.FAMILY_NAMES[: constants.DEVICE_MODE_VISIBILITY]  # none … partitioned
INSTANCE_TYPE_PHASES = (constants.PHASE_ACTIVE, constants.PHASE_INACTIVE, constants.PHASE_DRAINING)
MODEL_DEPLOYMENT_PHASES = (
    md_status.PHASE_STARTING,
    md_status.PHASE_READY,
    md_status.PHASE_DEGRADED,
    md_status.PHASE_DELETING,
)
ARTIFACT_NODE_STATES = ("ready", "downloading", "failed")

# name → (help, labels): what :func:`families` yields, and what docs/metrics.md must list.
CATALOG: dict[str, tuple[str, tuple[str, ...]]] = {
    "gpustack_instance_type_capacity": (
        "An InstanceType's capacity in one view (status.accelerator*/cpu .capacity): whole cards "
        "(exclusive), shares (shared), VRAM percent (sliced), partition instances (partitioned), cores (cpu).",
        ("instance_type", "view"),
    ),
    "gpustack_instance_type_remaining": (
        "What remains free of an InstanceType's capacity in one view (status.<view>.remaining).",
        ("instance_type", "view"),
    ),
    "gpustack_instance_type_phase": (
        "1 for the InstanceType's phase (Active, Inactive, Draining), 0 for the others.",
        ("instance_type", "phase"),
    ),
    "gpustack_instance_type_pending_workloads": (
        "Kueue Workloads in the InstanceType's queue (its entrance) without reserved quota: waiting.",
        ("instance_type",),
    ),
    "gpustack_node_cards": (
        "A node's accelerator cards (Devices spec) by the allocation mode its ledger (Devices status) "
        "shows: none (free), exclusive, shared, sliced, partitioned.",
        ("node", "manufacturer", "mode"),
    ),
    "gpustack_node_cards_unhealthy": (
        "A node's accelerator cards its device manager reports unhealthy.",
        ("node", "manufacturer"),
    ),
    "gpustack_model_deployment_replicas_desired": (
        "Replicas a ModelDeployment role asks for (spec.roles[].replicas).",
        ("namespace", "name", "role"),
    ),
    "gpustack_model_deployment_replicas_ready": (
        "Replicas of a ModelDeployment role with every member Ready (status.roles[].ready).",
        ("namespace", "name", "role"),
    ),
    "gpustack_model_deployment_phase": (
        "1 for the ModelDeployment's phase (Starting, Ready, Degraded, Deleting), 0 for the others.",
        ("namespace", "name", "phase"),
    ),
    "gpustack_instance_phase": (
        "1 for the Instance's phase, 0 for the other controller phases (Starting, Ready, Stopping, "
        "Stopped, Deleting); a Pod-derived phase (Queued, CrashLoopBackOff, ...) appears while it holds.",
        ("namespace", "name", "phase"),
    ),
    "gpustack_model_artifact_nodes": (
        "Nodes holding a ModelArtifact's content, by state: ready, downloading, failed (status.nodes).",
        ("namespace", "name", "state"),
    ),
    "gpustack_model_artifact_download_percent": (
        "Progress of a ModelArtifact's running downloads, 0-100 (status.nodes.downloadingPercent); "
        "absent when nothing downloads.",
        ("namespace", "name"),
    ),
    "gpustack_kv_cache_pool_quota_bytes": (
        "The ceiling a KVCachePool declares over its backends (spec.quota.total).",
        ("pool",),
    ),
    "gpustack_kv_cache_pool_used_bytes": (
        "What a KVCachePool's tenants hold (status.usage.total); absent until reported.",
        ("pool",),
    ),
    "gpustack_kv_cache_backend_capacity_bytes": (
        "A KVCacheBackend's capacity as its leader reports it (status.capacity.total).",
        ("backend",),
    ),
    "gpustack_kv_cache_backend_used_bytes": (
        "What a KVCacheBackend holds as its leader reports it (status.capacity.used).",
        ("backend",),
    ),
}

Lister = Callable[[str], Iterable[Obj]]


def _number(value: Any) -> float | None:
    """A quantity (``"2"``, ``"1500m"``, ``"64Gi"``, 3) as a float; None when absent or garbage."""
    if value is None or isinstance(value, bool):
        return None
    try:
        num, den = quantity.parse(value)
    except ValueError:
        return None
    return num / den


def _meta(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    status = obj.get("status")
    return status if isinstance(status, Mapping) else {}


def _family(name: str) -> GaugeMetricFamily:
    documentation, labels = CATALOG[name]
    return GaugeMetricFamily(name, documentation, labels=list(labels))


def _phases(family: GaugeMetricFamily, head: list[str], current: str, known: tuple[str, ...]) -> None:
    for phase in known:
        family.add_metric([*head, phase], 1.0 if phase == current else 0.0)
    if current and current not in known:
        family.add_metric([*head, current], 1.0)


def _pending(workload: Mapping[str, Any]) -> bool:
    """Waiting in its queue: active, not finished, no quota reserved."""
    if (workload.get("spec") or {}).get("active") is False:
        return False
    conditions = _status(workload).get("conditions") or []
    true = {c.get("type") for c in conditions if isinstance(c, Mapping) and c.get("status") == "True"}
    return "QuotaReserved" not in true and "Finished" not in true


def instance_type_families(types: Iterable[Obj], workloads: Iterable[Obj]) -> list[GaugeMetricFamily]:
    capacity = _family("gpustack_instance_type_capacity")
    remaining = _family("gpustack_instance_type_remaining")
    phase = _family("gpustack_instance_type_phase")
    pending = _family("gpustack_instance_type_pending_workloads")
    waiting = Tally(str((w.get("spec") or {}).get("queueName") or "") for w in workloads if _pending(w))
    for obj in sorted(types, key=_meta):
        _, name = _meta(obj)
        status = _status(obj)
        for field, view in VIEWS:
            figures = status.get(field) or {}
            for family, key in ((capacity, "capacity"), (remaining, "remaining")):
                value = _number(figures.get(key))
                if value is not None:
                    family.add_metric([name, view], value)
        _phases(phase, [name], str(status.get("phase") or ""), INSTANCE_TYPE_PHASES)
        pending.add_metric([name], float(waiting.get(local_queue_name(name), 0)))
    return [capacity, remaining, phase, pending]


def node_families(ledgers: Iterable[Obj]) -> list[GaugeMetricFamily]:
    cards = _family("gpustack_node_cards")
    unhealthy = _family("gpustack_node_cards_unhealthy")
    for obj in sorted(ledgers, key=_meta):
        _, node = _meta(obj)
        modes: dict[tuple[str, str], int] = {}
        for group in _status(obj).get("groups") or []:
            for card in group.get("accelerators") or []:
                modes[(str(group.get("manufacturer") or ""), str(card.get("id") or ""))] = int(
                    card.get("mode") or 0
                )
        counted: dict[str, Tally[str]] = {}
        sick: Tally[str] = Tally()
        for group in (obj.get("spec") or {}).get("groups") or []:
            manufacturer = str(group.get("manufacturer") or "")
            tally = counted.setdefault(manufacturer, Tally())
            for card in group.get("accelerators") or []:
                mode = modes.get((manufacturer, str(card.get("id") or "")), constants.DEVICE_MODE_NONE)
                tally[CARD_MODES[mode] if 0 <= mode < len(CARD_MODES) else "none"] += 1
                if (card.get("status") or {}).get("unhealthy"):
                    sick[manufacturer] += 1
        for manufacturer in sorted(counted):
            for mode_name in CARD_MODES:
                cards.add_metric([node, manufacturer, mode_name], float(counted[manufacturer][mode_name]))
            unhealthy.add_metric([node, manufacturer], float(sick[manufacturer]))
    return [cards, unhealthy]


def model_deployment_families(deployments: Iterable[Obj]) -> list[GaugeMetricFamily]:
    desired = _family("gpustack_model_deployment_replicas_desired")
    ready = _family("gpustack_model_deployment_replicas_ready")
    phase = _family("gpustack_model_deployment_phase")
    for obj in sorted(deployments, key=_meta):
        namespace, name = _meta(obj)
        status = _status(obj)
        observed = {str(r.get("name")): r for r in status.get("roles") or [] if isinstance(r, Mapping)}
        for role in (obj.get("spec") or {}).get("roles") or []:
            role_name = str(role.get("name") or "")
            replicas = role.get("replicas")
            desired.add_metric([namespace, name, role_name], float(1 if replicas is None else replicas))
            ready.add_metric(
                [namespace, name, role_name], float((observed.get(role_name) or {}).get("ready") or 0)
            )
        _phases(phase, [namespace, name], str(status.get("phase") or ""), MODEL_DEPLOYMENT_PHASES)
    return [desired, ready, phase]


def instance_families(instances: Iterable[Obj]) -> list[GaugeMetricFamily]:
    phase = _family("gpustack_instance_phase")
    for obj in sorted(instances, key=_meta):
        namespace, name = _meta(obj)
        _phases(phase, [namespace, name], str(_status(obj).get("phase") or ""), constants.INSTANCE_PHASES)
    return [phase]


def artifact_families(artifacts: Iterable[Obj]) -> list[GaugeMetricFamily]:
    nodes = _family("gpustack_model_artifact_nodes")
    percent = _family("gpustack_model_artifact_download_percent")
    for obj in sorted(artifacts, key=_meta):
        namespace, name = _meta(obj)
        counts = _status(obj).get("nodes") or {}
        for state in ARTIFACT_NODE_STATES:
            nodes.add_metric([namespace, name, state], float(counts.get(state) or 0))
        if counts.get("downloadingPercent") is not None:
            percent.add_metric([namespace, name], float(counts["downloadingPercent"]))
    return [nodes, percent]


def kv_cache_families(pools: Iterable[Obj], backends: Iterable[Obj]) -> list[GaugeMetricFamily]:
    quota = _family("gpustack_kv_cache_pool_quota_bytes")
    used = _family("gpustack_kv_cache_pool_used_bytes")
    capacity = _family("gpustack_kv_cache_backend_capacity_bytes")
    held = _family("gpustack_kv_cache_backend_used_bytes")
    for obj in sorted(pools, key=_meta):
        _, name = _meta(obj)
        for family, value in (
            (quota, ((obj.get("spec") or {}).get("quota") or {}).get("total")),
            (used, (_status(obj).get("usage") or {}).get("total")),
        ):
            number = _number(value)
            if number is not None:
                family.add_metric([name], number)
    for obj in sorted(backends, key=_meta):
        _, name = _meta(obj)
        figures = _status(obj).get("capacity") or {}
        for family, key in ((capacity, "total"), (held, "used")):
            number = _number(figures.get(key))
            if number is not None:
                family.add_metric([name], number)
    return [quota, used, capacity, held]


def families(objects: Lister) -> list[GaugeMetricFamily]:
    """Every state gauge, from ``objects(kind)`` (the cached objects of one of :data:`KINDS`)."""
    return [
        *instance_type_families(objects("InstanceType"), objects("Workload")),
        *node_families(objects("Devices")),
        *model_deployment_families(objects("ModelDeployment")),
        *instance_families(objects("Instance")),
        *artifact_families(objects("ModelArtifact")),
        *kv_cache_families(objects("KVCachePool"), objects("KVCacheBackend")),
    ]


class StateCollector(Collector):
    """The collector the worker registers: :func:`families` over the manager's informers.

    Construct it before ``Manager.start`` so its informers (the controllers' own, shared) start
    with the others.  Until a cache has synced its kind yields no series rather than zeros."""

    def __init__(self, manager: Any) -> None:
        self.informers = {kind: manager.informer(kind) for kind in KINDS}

    def _objects(self, kind: str) -> list[Obj]:
        informer = self.informers[kind]
        return informer.list() if informer.synced() else []

    def describe(self) -> Iterator[GaugeMetricFamily]:
        for name in CATALOG:
            yield _family(name)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from families(self._objects)


_REGISTERED: list[tuple[Any, StateCollector]] = []


def register(manager: Any, registry: Any = None) -> StateCollector:
    """Register a :class:`StateCollector` over ``manager`` (replacing the one registered before,
    so a second manager in one process, as in tests, does not collide)."""
    from prometheus_client import REGISTRY

    target = REGISTRY if registry is None else registry
    for previous_registry, previous in list(_REGISTERED):
        if previous_registry is target:
            target.unregister(previous)
            _REGISTERED.remove((previous_registry, previous))
    collector = StateCollector(manager)
    target.register(collector)
    _REGISTERED.append((target, collector))
    return collector
