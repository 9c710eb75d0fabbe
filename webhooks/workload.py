"""The Workload fit pin (§6.6, extended to every family): steer Kueue's topology-aware placement
away from nodes whose cards cannot take a PodSet's accelerators, using the per-card fit labels.

For a ``kueue.x-k8s.io/v1beta2`` Workload on CREATE, or on UPDATE while the old Workload holds no
quota reservation, and only when the whole chain resolves — LocalQueue ``<ns>/<spec.queueName>`` →
its ClusterQueue labelled ``resource.gpustack.ai/type: instancetypes`` → the same-named InstanceType
naming an ``acceleratorGroup`` — and Setting ``workload-fit-affinity`` is true, each PodSet gets,
ANDed into every required node-affinity term of its template:

- a slice of ``U`` units per card: ``sliced-max-free-units.fit.gpustack.ai/<group> Gt U-1``;
- a shared request of ``N`` cards: ``shared-free-cards.fit.gpustack.ai/<group> Gt N-1``;
- ``N`` whole cards: ``exclusive-free-cards.fit.gpustack.ai/<group> Gt N-1``;
- a partition of ``profile``: ``partitioned-free-instances.fit.gpustack.ai/<group>.<profile> Gt 0``.

The spec pins slices and shares of ``N ≥ 2``; the project pins every family, because Kueue counts
a node's room per resource (a sum of units, of share tokens, of per-profile keys) while a node
serves a Pod only with cards of the right mode, so without the pin a node whose room is in other
modes is proposed again after every gate-3 ``Retry`` (docs/scheduling.md).  The expressions are
thresholds on labels the worker keeps current, so a pin never needs to change: the Workload that
loses a race is kept off the full node at its next attempt by the node's label, not by a re-pin.

It never denies: anything it cannot read or understand leaves the Workload as it is.  The pin lives
on the Workload only, never on a Pod or a job template.
"""

from __future__ import annotations

from typing import Any

from api import constants, setting_names
from api.naming import is_qualified_name
from fastpath import quantity, requests
from webhooks.decision import Decision, allow
from webhooks.lookups import Lookups
from webhooks.pod import required_affinity_ops
from webhooks.review import AdmissionRequest

KIND = "Workload"
GROUP = "kueue.x-k8s.io"
SETTING = setting_names.WORKLOAD_FIT_AFFINITY
CONDITION_QUOTA_RESERVED = "QuotaReserved"


def holds_reservation(workload: object) -> bool:
    """True when a Workload holds a quota reservation: ``status.admission`` is set, or its
    ``QuotaReserved`` condition is true."""
    if not isinstance(workload, dict):
        return False
    status = workload.get("status")
    if not isinstance(status, dict):
        return False
    if status.get("admission"):
        return True
    for condition in status.get("conditions") or ():
        if (
            isinstance(condition, dict)
            and condition.get("type") == CONDITION_QUOTA_RESERVED
            and condition.get("status") == "True"
        ):
            return True
    return False


def _threshold(key: str, floor: int) -> list[dict[str, Any]]:
    if floor <= 0 or not is_qualified_name(key):
        return []
    return [{"key": key, "operator": "Gt", "values": [str(floor - 1)]}]


def _expressions(facts: Any, vram_mib: int, group: str) -> list[dict[str, Any]]:
    """The node-affinity expressions that keep a template off nodes whose cards of ``group``
    cannot take it: one per family it asks for (rule 1 refuses a Pod with two, the pin still reads
    them), none for a family whose label key would be invalid."""
    out = _threshold(constants.label_fit_sliced_max_free_units(group), facts.slice_units(vram_mib))
    if facts.shared_max > 0:
        out += _threshold(constants.label_fit_shared_free_cards(group), facts.shared_max)
    demand = facts.demand(vram_mib)
    if demand is not None and demand.family == "exclusive":
        out += _threshold(constants.label_fit_exclusive_free_cards(group), int(demand.count))
    elif demand is not None and demand.family == "partitioned" and demand.profile:
        key = constants.label_fit_partitioned_free_instances(group, demand.profile)
        out += _threshold(key, int(demand.count))
    return out


def _wanted(
    pod_sets: list, vram_mib: int, group: str
) -> list[tuple[int, dict[str, Any], list[dict[str, Any]]]]:
    """``(index, template spec, expressions)`` for each PodSet that asks for an accelerator."""
    wanted = []
    for i, pod_set in enumerate(pod_sets):
        if not isinstance(pod_set, dict):
            continue
        template = pod_set.get("template")
        spec = template.get("spec") if isinstance(template, dict) else None
        if not isinstance(spec, dict):
            continue
        facts = requests.scan_pod(spec)
        expressions = _expressions(facts, vram_mib, group) if facts.any_accelerator else []
        if expressions:
            wanted.append((i, spec, expressions))
    return wanted


def _asks(pod_sets: list) -> bool:
    """Cheap pre-check before any lookup: some PodSet asks for an accelerator."""
    for pod_set in pod_sets:
        template = pod_set.get("template") if isinstance(pod_set, dict) else None
        spec = template.get("spec") if isinstance(template, dict) else None
        if requests.scan_pod(spec).any_accelerator:
            return True
    return False


async def mutate(request: AdmissionRequest, lookups: Lookups) -> Decision:
    """Pin each PodSet of a pool's Workload to nodes whose cards fit it; never deny."""
    try:
        return await _pin(request, lookups)
    except Exception:  # an advisory webhook: a failure must never block Kueue
        return allow()


async def _pin(request: AdmissionRequest, lookups: Lookups) -> Decision:
    if request.kind != KIND or request.group != GROUP or request.operation not in ("CREATE", "UPDATE"):
        return allow()
    workload = request.object
    if not isinstance(workload, dict):
        return allow()
    if request.operation == "UPDATE" and holds_reservation(request.old_object):
        return allow()
    spec = workload.get("spec")
    if not isinstance(spec, dict):
        return allow()
    queue = spec.get("queueName")
    pod_sets = spec.get("podSets")
    if not isinstance(queue, str) or not queue or not isinstance(pod_sets, list) or not _asks(pod_sets):
        return allow()
    namespace = request.namespace or (workload.get("metadata") or {}).get("namespace") or ""
    local_queue = await lookups.get("LocalQueue", queue, namespace)
    if local_queue is None:
        return allow()
    cluster_queue_name = (local_queue.get("spec") or {}).get("clusterQueue")
    if not isinstance(cluster_queue_name, str) or not cluster_queue_name:
        return allow()
    cluster_queue = await lookups.get("ClusterQueue", cluster_queue_name)
    labels = ((cluster_queue or {}).get("metadata") or {}).get("labels") or {}
    if labels.get(constants.LABEL_RESOURCE_TYPE) != constants.RESOURCE_TYPE_INSTANCE_TYPES:
        return allow()
    instance_type = await lookups.get("InstanceType", cluster_queue_name)
    if instance_type is None:
        return allow()
    group = (instance_type.get("spec") or {}).get("acceleratorGroup")
    if not isinstance(group, str) or not group:
        return allow()
    if not await lookups.setting_enabled(SETTING):
        return allow()
    if not all(
        is_qualified_name(key)
        for key in (
            constants.label_fit_sliced_max_free_units(group),
            constants.label_fit_shared_free_cards(group),
            constants.label_fit_exclusive_free_cards(group),
        )
    ):
        return allow(
            warnings=[
                f"InstanceType {cluster_queue_name}: spec.acceleratorGroup {group!r} makes no valid label "
                "key, so this Workload is not pinned to nodes whose cards fit it"
            ]
        )
    ops: list[dict[str, Any]] = []
    for i, template_spec, expressions in _wanted(pod_sets, _vram_mib(instance_type), group):
        ops.extend(required_affinity_ops(template_spec, f"/spec/podSets/{i}/template/spec", expressions))
    return allow(ops)


def _vram_mib(instance_type: dict[str, Any]) -> int:
    """The pool's per-card VRAM in MiB (0 when not observed), for a template's unfolded MiB budget."""
    memory = ((instance_type.get("status") or {}).get("detail") or {}).get("memory")
    if memory in (None, ""):
        return 0
    try:
        return max(0, quantity.floor_div(memory, 1 << 20))
    except ValueError:
        return 0
