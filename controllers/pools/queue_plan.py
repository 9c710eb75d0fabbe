"""The ClusterQueue of a pool, purely (devices spec §8, topology spec B.4).

One queue per InstanceType, same name, isolated (no cohort, no borrowing or reclaiming).  Its
resource groups cover only ``credits.gpustack.ai/<manufacturer>`` (nominal = nodes × per-node count
× M per flavor) or only ``cpu`` (cores), over the pool's live topology-aware flavors, smallest
per-node count first, at most 64.  A queue with no resource groups admits everything under
``IgnoreUndeclared``, so the stop policy is a small state machine:

- ``Hold``↔``None`` mirrors ``spec.inactive``; a stop someone else put on the queue backfills
  ``inactive=true`` (one-way): the ``applied-stop-policy`` annotation records what we last wrote;
- a queue without groups is held (``Hold``, marked ``topology.gpustack.ai/empty-plan-hold``);
- a queue whose last flavor went away is drained (``HoldAndDrain``, marked with the stop policy
  it had) until Kueue reports no reservation, then emptied, and stays drained until a flavor
  returns; the plan that brings flavors back restores the policy ``inactive`` calls for;
- dropping a flavor that is still live while Kueue reports (or may hold) reservations on it drains
  first, then swaps the plan; a flavor whose nodes left (deleted or finalizing) is dropped in place;
  a flavor retiring after a live profile change (its nodes moved to a replacement, B.4 step 7) is
  never planned but counts as live, so it drains before the swap — under the stop policy the
  Setting ``topology-profile-change-stop-policy`` names: ``HoldAndDrain`` (evict, the spec's) or
  ``Hold`` (admit nothing new, let the admitted workloads run to their end, swap once none
  reserves a dropped flavor); either is marked with the policy it saved, so it never reads as
  someone else's stop, and with ``topology.gpustack.ai/profile-change: <old> -> <new>`` (the
  profiles of the retiring flavors and of their replacements), so the InstanceType says "profile
  change in progress" rather than that no node serves it;
- a queue whose InstanceType is being deleted, or which is itself being deleted, drains.

``TopologyReady`` reports the plan: ``False`` when it is invalid (the last complete plan is kept),
``Unknown``/``AwaitingQueueStatus`` until Kueue wrote status for the current generation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from api import constants, kueue
from api.objects import Obj
from controllers.pools import render
from fastpath import quantity

STOP_NONE, STOP_HOLD, STOP_DRAIN = "None", "Hold", "HoldAndDrain"
ANNOTATION_APPLIED_STOP = constants.ANNOTATION_APPLIED_STOP_POLICY
ANNOTATION_DRAIN_HOLD = constants.ANNOTATION_DRAIN_PLAN_HOLD
ANNOTATION_PROFILE_CHANGE = constants.ANNOTATION_PROFILE_CHANGE
MAX_FLAVORS = 64
DRAIN_POLL_SECONDS = 5.0

REASON_PLAN_APPLIED = "PlanApplied"
REASON_NO_TOPOLOGY = "FlavorWithoutTopology"
REASON_TOPOLOGY_MISSING = "TopologyMissing"
REASON_SELECTOR_OVERLAP = "SelectorOverlap"
REASON_TOO_MANY_FLAVORS = "TooManyFlavors"
REASON_UNKNOWN_MANUFACTURER = "UnknownManufacturer"
REASON_QUOTA_NOT_CONSERVED = "QuotaNotConserved"


@dataclass(frozen=True, slots=True)
class QueueSettings:
    derived_from_node: bool = True
    drain_when_no_flavors: bool = True
    aware_cpu: bool = False
    profile_change_stop_policy: str = STOP_DRAIN  # HoldAndDrain or Hold


@dataclass(slots=True)
class QueuePlan:
    apply: Obj | None = None  # server-side apply body; None leaves the queue as it is
    delete: bool = False  # the queue is an orphan: drain it, then delete it
    condition: Obj | None = None  # TopologyReady, when it should be (re)written
    backfill_inactive: bool = False  # someone stopped the queue: set the InstanceType inactive
    requeue: float | None = None
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)


@dataclass(frozen=True, slots=True)
class GroupsPlan:
    valid: bool
    groups: list[Obj]
    reason: str = REASON_PLAN_APPLIED
    message: str = ""


# --- Resource groups ----------------------------------------------------------------------------------


def plan_groups(
    pool: render.Pool, flavors: Iterable[Mapping[str, Any]], topologies: Iterable[str]
) -> GroupsPlan:
    """The resource groups over a pool's live flavors, or why no complete plan exists."""
    resource = render.credits_resource(pool)
    live = sorted(
        (f for f in flavors if not render.deleting(f)),
        key=lambda f: (render.flavor_count(f), render.name_of(f)),
    )
    if resource is None:
        return GroupsPlan(
            False,
            [],
            REASON_UNKNOWN_MANUFACTURER,
            f"no manufacturer serves accelerator group {pool.accelerator_group}",
        )
    if len(live) > MAX_FLAVORS:
        return GroupsPlan(
            False,
            [],
            REASON_TOO_MANY_FLAVORS,
            f"{len(live)} flavors match this pool; a resource group holds at most {MAX_FLAVORS}",
        )
    known = set(topologies)
    for flavor in live:
        rejected = _rejected_flavor(flavor, known)
        if rejected is not None:
            return rejected
    overlap = _overlapping_flavors(live)
    if overlap is not None:
        return overlap
    if not live:
        return GroupsPlan(True, [], REASON_PLAN_APPLIED, "no flavor matches this pool yet; the queue is held")
    return GroupsPlan(
        True,
        [_resource_group(pool, resource, live)],
        REASON_PLAN_APPLIED,
        f"{len(live)} topology-aware flavor(s) cover {resource}",
    )


def _rejected_flavor(flavor: Mapping[str, Any], known: set[str]) -> GroupsPlan | None:
    """Why one flavor cannot be planned: no topology or node labels, a Topology that does not
    exist, or no whole-node count to carry the nominal quota over; None when it can."""
    spec = flavor.get("spec") or {}
    topology = spec.get("topologyName")
    if not topology or not spec.get("nodeLabels"):
        return GroupsPlan(
            False,
            [],
            REASON_NO_TOPOLOGY,
            f"flavor {render.name_of(flavor)} has no topology or node labels",
        )
    if topology not in known:
        return GroupsPlan(
            False,
            [],
            REASON_TOPOLOGY_MISSING,
            f"flavor {render.name_of(flavor)} references Topology {topology}, which does not exist",
        )
    if render.flavor_count(flavor) <= 0 or render.flavor_capacity(flavor) < render.flavor_count(flavor):
        return GroupsPlan(
            False,
            [],
            REASON_QUOTA_NOT_CONSERVED,
            f"flavor {render.name_of(flavor)} declares no per-node count or capacity of whole nodes, so "
            "its nominal quota cannot be carried over the split",
        )
    return None


def _overlapping_flavors(live: list[Mapping[str, Any]]) -> GroupsPlan | None:
    """The first two flavors whose node selectors can match one node, as an invalid plan."""
    for i, a in enumerate(live):
        for b in live[i + 1 :]:
            if _overlap(
                (a.get("spec") or {}).get("nodeLabels") or {}, (b.get("spec") or {}).get("nodeLabels") or {}
            ):
                return GroupsPlan(
                    False,
                    [],
                    REASON_SELECTOR_OVERLAP,
                    f"flavors {render.name_of(a)} and {render.name_of(b)} can select the same nodes",
                )
    return None


def _resource_group(pool: render.Pool, resource: str, live: list[Mapping[str, Any]]) -> Obj:
    """One resource group: the pool's credits (and, for an accelerated pool, Kueue's extra
    resources) over every live flavor."""
    extra = (
        kueue.accelerated_queue_extra_resources(quota_check_strategy=kueue.quota_check_strategy())
        if (pool.acceleratable)
        else []
    )
    entries = [
        {
            "name": render.name_of(f),
            "resources": [
                {
                    "name": resource,
                    "nominalQuota": str(render.nominal_quota(pool, render.flavor_capacity(f))),
                },
                *({"name": name, "nominalQuota": quota} for name, quota in extra),
            ],
        }
        for f in live
    ]
    return {"coveredResources": [resource, *(name for name, _ in extra)], "flavors": entries}


def _overlap(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    """Two node selectors can match one node unless they disagree on some key, or name two general
    (CPU) groups: a node's cores are counted under exactly one group (the ``<group>.count`` label
    its device manager writes), and every generated flavor pins one, so flavors of two groups —
    one pool's nodes with two CPU models, or a model and the generic fallback — never share a node."""
    ga, gb = render.group_keys(a, constants.PREFIX_GENERAL), render.group_keys(b, constants.PREFIX_GENERAL)
    if ga and gb and set(ga).isdisjoint(gb):
        return False
    return all(b[k] == v for k, v in a.items() if k in b)


def _quantity(value: Any) -> tuple[int, int] | Any:
    try:
        return quantity.parse(value)
    except (ValueError, TypeError):
        return value


def normal_groups(groups: Any) -> list[tuple]:
    """Resource groups in a comparable shape (quantities as exact fractions: Kueue's webhook
    re-encodes ``8000000`` as ``8M``)."""
    out = []
    for group in groups or []:
        flavors = tuple(
            (
                f.get("name"),
                tuple((r.get("name"), _quantity(r.get("nominalQuota"))) for r in f.get("resources") or []),
            )
            for f in group.get("flavors") or []
        )
        out.append((tuple(group.get("coveredResources") or []), flavors))
    return out


def _flavor_names(groups: Any) -> list[str]:
    return [f.get("name") for g in groups or [] for f in g.get("flavors") or []]


# --- Kueue's view of the queue ------------------------------------------------------------------------


def kueue_current(queue: Mapping[str, Any] | None) -> bool:
    """Kueue wrote status for the queue's current generation."""
    if not queue:
        return False
    generation = (queue.get("metadata") or {}).get("generation")
    for cond in (queue.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Active":
            return cond.get("observedGeneration") == generation
    return False


def drained(queue: Mapping[str, Any] | None) -> bool:
    if not kueue_current(queue):
        return False
    status = (queue or {}).get("status") or {}
    return int(status.get("reservingWorkloads") or 0) == 0 and int(status.get("admittedWorkloads") or 0) == 0


def flavor_reserved(queue: Mapping[str, Any] | None, flavor: str) -> bool:
    """Kueue reports a reservation on ``flavor``, or has not reported for this generation."""
    if not kueue_current(queue):
        return True
    for usage in ((queue or {}).get("status") or {}).get("flavorsReservation") or []:
        if usage.get("name") == flavor:
            for resource in usage.get("resources") or []:
                if _quantity(resource.get("total") or "0") not in ((0, 1), "0"):
                    return True
    return False


# --- Rendering and comparing --------------------------------------------------------------------------


def render_queue(
    name: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    groups: list[Obj],
    checks: list[str],
    policy: str,
) -> Obj:
    spec: Obj = {
        "namespaceSelector": {},
        "queueingStrategy": "BestEffortFIFO",
        "preemption": {
            "reclaimWithinCohort": "Never",
            "borrowWithinCohort": {"policy": "Never"},
            "withinClusterQueue": "Never",
        },
        "resourceGroups": groups,
        "stopPolicy": policy,
    }
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": n} for n in checks]}
    return {
        "apiVersion": constants.KUEUE_API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": name, "labels": dict(labels), "annotations": dict(annotations)},
        "spec": spec,
    }


_OUR_ANNOTATIONS = (
    constants.ANNOTATION_EMPTY_PLAN_HOLD,
    ANNOTATION_DRAIN_HOLD,
    ANNOTATION_APPLIED_STOP,
    ANNOTATION_PROFILE_CHANGE,
)
_OUR_LABEL_PREFIXES = (constants.PREFIX_GENERAL, constants.PREFIX_ACCELERATABLE)


def _checks_of(spec: Mapping[str, Any]) -> list[str]:
    return [r.get("name") for r in ((spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or [])]


def needs_apply(body: Obj, current: Mapping[str, Any] | None) -> bool:
    if current is None:
        return True
    meta, have_meta = body["metadata"], current.get("metadata") or {}
    have_labels = have_meta.get("labels") or {}
    if any(have_labels.get(k) != v for k, v in meta["labels"].items()):
        return True
    if any(k.startswith(_OUR_LABEL_PREFIXES) and k not in meta["labels"] for k in have_labels):
        return True
    have_ann = have_meta.get("annotations") or {}
    if any(have_ann.get(k) != meta["annotations"].get(k) for k in _OUR_ANNOTATIONS):
        return True
    spec, have = body["spec"], current.get("spec") or {}
    if normal_groups(spec["resourceGroups"]) != normal_groups(have.get("resourceGroups")):
        return True
    if (have.get("stopPolicy") or STOP_NONE) != spec["stopPolicy"]:
        return True
    if _checks_of(spec) != _checks_of(have):
        return True
    if have.get("namespaceSelector") != {} or have.get("cohortName"):
        return True
    preemption = have.get("preemption") or {}
    return any(preemption.get(k) != v for k, v in spec["preemption"].items())


def topology_condition(status: str, reason: str, message: str, generation: int) -> Obj:
    return {
        "type": constants.CONDITION_TOPOLOGY_READY,
        "status": status,
        "reason": reason,
        "message": message[:32768],
        "observedGeneration": generation,
    }


def condition_changed(queue: Mapping[str, Any], condition: Mapping[str, Any]) -> bool:
    for cond in (queue.get("status") or {}).get("conditions") or []:
        if cond.get("type") == condition["type"]:
            return any(
                cond.get(k) != condition[k] for k in ("status", "reason", "message", "observedGeneration")
            )
    return True


# --- The plan -----------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Stop:
    """The resource groups a plan applies and the stop policy it holds them under, with the
    annotations that remember why: the policy saved across a drain, the empty-plan hold, and the
    profile change a drain or hold is for."""

    groups: list[Obj]
    policy: str
    drain_saved: str | None
    empty_marker: bool
    profile_change: str | None = None


def plan_queue(
    name: str,
    instance_type: Mapping[str, Any] | None,
    queue: Mapping[str, Any] | None,
    flavors: Iterable[Mapping[str, Any]],
    topologies: Iterable[str],
    active_checks: Iterable[str],
    settings: QueueSettings,
) -> QueuePlan:
    """What to do with the ClusterQueue ``name`` given its InstanceType and the world."""
    plan = QueuePlan()
    if instance_type is None or render.deleting(instance_type) or render.deleting(queue):
        _plan_removal(plan, name, instance_type, queue)
        return plan

    pool = render.pool_of_instance_type(instance_type)
    labels = {
        **render.instance_type_schedule_labels(instance_type, settings.aware_cpu),
        constants.LABEL_RESOURCE_TYPE: constants.RESOURCE_TYPE_INSTANCE_TYPES,
    }
    inactive = _inactive(plan, instance_type, queue)
    flavors = list(flavors)
    matched = [
        f
        for f in render.pool_flavors(instance_type, flavors, aware_cpu=settings.aware_cpu)
        if not render.retiring(f)
    ]
    grouping = plan_groups(pool, matched, topologies)
    stop = _stop(plan, queue, flavors, grouping, settings, STOP_HOLD if inactive else STOP_NONE)

    checks = []
    if stop.groups:
        active = set(active_checks)
        if (
            pool.acceleratable
            and settings.derived_from_node
            and constants.ADMISSION_CHECK_NODE_DEVICES in active
        ):
            checks.append(constants.ADMISSION_CHECK_NODE_DEVICES)
        if constants.ADMISSION_CHECK_JOINT in active:
            checks.append(constants.ADMISSION_CHECK_JOINT)

    ours = {ANNOTATION_APPLIED_STOP: stop.policy}
    if stop.empty_marker and stop.policy == STOP_HOLD:
        ours[constants.ANNOTATION_EMPTY_PLAN_HOLD] = "true"
    if stop.drain_saved is not None:
        ours[ANNOTATION_DRAIN_HOLD] = stop.drain_saved
        if stop.profile_change:
            ours[ANNOTATION_PROFILE_CHANGE] = stop.profile_change
    body = render_queue(name, labels, ours, stop.groups, checks, stop.policy)
    if needs_apply(body, queue):
        plan.apply = body
    elif queue is not None:
        cond = _topology_condition_of(queue, grouping)
        if condition_changed(queue, cond):
            plan.condition = cond
    return plan


def _plan_removal(
    plan: QueuePlan, name: str, instance_type: Mapping[str, Any] | None, queue: Mapping[str, Any] | None
) -> None:
    """The InstanceType is gone or going (or the queue is): drain an owned queue, then delete it."""
    if queue is None or not render.owned_cluster_queue(queue):
        return
    qspec = queue.get("spec") or {}
    annotations = dict((queue.get("metadata") or {}).get("annotations") or {})
    labels = {
        k: v
        for k, v in ((queue.get("metadata") or {}).get("labels") or {}).items()
        if k == constants.LABEL_RESOURCE_TYPE
        or k == constants.LABEL_ACCELERATABLE
        or k.startswith(_OUR_LABEL_PREFIXES)
        or k in (constants.LABEL_OS, constants.LABEL_ARCH)
    }
    ours = {k: annotations[k] for k in _OUR_ANNOTATIONS if k in annotations}
    ours[ANNOTATION_APPLIED_STOP] = STOP_DRAIN
    groups = list(qspec.get("resourceGroups") or [])
    body = render_queue(name, labels, ours, groups, _checks_of(qspec), STOP_DRAIN)
    plan.apply = body if needs_apply(body, queue) else None
    plan.delete = instance_type is None and not render.deleting(queue)
    if (qspec.get("stopPolicy") or STOP_NONE) != STOP_DRAIN:
        plan.events.append(
            ("Normal", "Draining", "the queue is being removed: HoldAndDrain evicts its workloads")
        )


def _inactive(plan: QueuePlan, instance_type: Mapping[str, Any], queue: Mapping[str, Any] | None) -> bool:
    """Whether the type is inactive: as its spec says, or because someone else stopped the queue
    (then the plan backfills ``inactive`` on the type)."""
    inactive = bool((instance_type.get("spec") or {}).get("inactive"))
    if queue is None or inactive:
        return inactive
    policy_now = (queue.get("spec") or {}).get("stopPolicy") or STOP_NONE
    annotations = (queue.get("metadata") or {}).get("annotations") or {}
    if (
        constants.ANNOTATION_EMPTY_PLAN_HOLD not in annotations
        and annotations.get(ANNOTATION_DRAIN_HOLD) is None
        and policy_now != STOP_NONE
        and policy_now != annotations.get(ANNOTATION_APPLIED_STOP)
    ):
        plan.backfill_inactive = True
        plan.events.append(
            ("Normal", "Inactive", f"the queue was stopped ({policy_now}): the type is now inactive")
        )
        return True
    return False


def _stop(
    plan: QueuePlan,
    queue: Mapping[str, Any] | None,
    flavors: list[Mapping[str, Any]],
    grouping: GroupsPlan,
    settings: QueueSettings,
    base: str,
) -> _Stop:
    """The groups to apply and the policy to hold them under (``base``: Hold when inactive)."""
    qspec = (queue or {}).get("spec") or {}
    annotations = ((queue or {}).get("metadata") or {}).get("annotations") or {}
    current = _Stop(
        groups=list(qspec.get("resourceGroups") or []),
        policy=qspec.get("stopPolicy") or STOP_NONE,
        drain_saved=annotations.get(ANNOTATION_DRAIN_HOLD),
        empty_marker=constants.ANNOTATION_EMPTY_PLAN_HOLD in annotations,
    )
    desired_groups = grouping.groups if grouping.valid else current.groups
    if not desired_groups:
        return _stop_without_groups(plan, queue, current, grouping, settings, base)
    # A dropped flavor still live left by matching elsewhere: it may hold reservations worth a
    # drain.  One whose nodes left (deleted or finalizing) is dropped in place.
    live_all = {render.name_of(f) for f in flavors if not render.deleting(f)}
    wanted = set(_flavor_names(desired_groups))
    dropped = [n for n in _flavor_names(current.groups) if n not in wanted and n in live_all]
    risky = [n for n in dropped if flavor_reserved(queue, n)]
    if risky and not drained(queue):
        plan.requeue = DRAIN_POLL_SECONDS
        policy = _drop_policy(risky, flavors, settings)
        if current.policy != policy:
            how = (
                "holding (Hold) until their workloads end"
                if policy == STOP_HOLD
                else "draining first (HoldAndDrain evicts their workloads)"
            )
            plan.events.append(
                ("Normal", "Draining", f"flavor(s) {', '.join(risky)} leave the plan while reserved: {how}")
            )
        change = profile_change(risky, flavors, desired_groups)
        return _Stop(current.groups, policy, _saved_policy(current, base), current.empty_marker, change)
    if current.drain_saved is not None:
        plan.events.append(("Normal", "Restored", f"the new plan is in place: stop policy {base}"))
    return _Stop(desired_groups, base, None, False)


def _stop_without_groups(
    plan: QueuePlan,
    queue: Mapping[str, Any] | None,
    current: _Stop,
    grouping: GroupsPlan,
    settings: QueueSettings,
    base: str,
) -> _Stop:
    """No flavor is left in the plan: drain (or hold) what the queue still has, or hold it empty."""
    if not (current.groups and grouping.valid):
        if current.drain_saved is not None:
            return _Stop([], STOP_DRAIN, current.drain_saved, current.empty_marker)
        return _Stop([], STOP_HOLD, current.drain_saved, True)
    if not settings.drain_when_no_flavors:
        policy = current.policy if current.policy != STOP_NONE else base
        return _Stop(current.groups, policy, current.drain_saved, current.empty_marker)
    groups: list[Obj] = []
    if not drained(queue):
        groups = current.groups
        plan.requeue = DRAIN_POLL_SECONDS
    if current.policy != STOP_DRAIN:
        plan.events.append(
            ("Normal", "Draining", "no flavor is left: draining before emptying the resource groups")
        )
    return _Stop(groups, STOP_DRAIN, _saved_policy(current, base), current.empty_marker)


def _drop_policy(risky: list[str], flavors: list[Mapping[str, Any]], settings: QueueSettings) -> str:
    """The stop policy before dropping reserved flavors: the Setting's when every one of them
    retires after a live profile change, ``HoldAndDrain`` for any other drop."""
    retiring = {render.name_of(f) for f in flavors if render.retiring(f)}
    if settings.profile_change_stop_policy == STOP_HOLD and all(n in retiring for n in risky):
        return STOP_HOLD
    return STOP_DRAIN


def _profile_of(flavor: Mapping[str, Any] | None) -> str:
    return ((flavor or {}).get("spec") or {}).get("nodeLabels", {}).get(
        constants.LABEL_TOPOLOGY_PROFILE
    ) or ""


def profile_change(
    risky: list[str], flavors: list[Mapping[str, Any]], desired_groups: list[Obj]
) -> str | None:
    """``"<old> -> <new>"`` for the retiring flavors among ``risky`` and their replacements in the
    plan (same hardware, another profile), several comma-separated; None when none retires (the
    drop is no profile change)."""
    by_name = {render.name_of(f): f for f in flavors}
    wanted = [by_name[n] for n in _flavor_names(desired_groups) if n in by_name]
    moves: set[str] = set()
    for name in risky:
        flavor = by_name.get(name)
        if flavor is None or not render.retiring(flavor):
            continue
        identity = render.hardware_identity(flavor)
        new = sorted(
            {_profile_of(f) for f in wanted if render.hardware_identity(f) == identity and _profile_of(f)}
        )
        moves.add(f"{_profile_of(flavor) or '?'} -> {'/'.join(new) or '?'}")
    return ", ".join(sorted(moves)) or None


def _saved_policy(current: _Stop, base: str) -> str:
    """The policy a drain saves, to restore once the new plan is in place."""
    return current.drain_saved or (current.policy if current.policy != STOP_DRAIN else base)


def _topology_condition_of(queue: Mapping[str, Any], grouping: GroupsPlan) -> Obj:
    """``TopologyReady`` as the plan and Kueue's status say."""
    generation = int((queue.get("metadata") or {}).get("generation") or 0)
    if not grouping.valid:
        return topology_condition("False", grouping.reason, grouping.message, generation)
    if not kueue_current(queue):
        return topology_condition(
            "Unknown",
            constants.REASON_AWAITING_QUEUE_STATUS,
            "Kueue has not reported this generation yet",
            generation,
        )
    return topology_condition("True", grouping.reason, grouping.message, generation)
