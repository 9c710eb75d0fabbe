"""controllers.pools.queue_plan: a pool's ClusterQueue — resource groups, admission checks and the
stop-policy state machine (devices spec §8, §11.14; topology spec B.4)."""

from __future__ import annotations

import copy

from api import constants
from controllers.pools import render
from controllers.pools.instance_type_status import phase_of
from controllers.pools.queue_plan import (
    ANNOTATION_APPLIED_STOP,
    ANNOTATION_DRAIN_HOLD,
    ANNOTATION_PROFILE_CHANGE,
    MAX_FLAVORS,
    QueueSettings,
    normal_groups,
    plan_queue,
)
from controllers.settings import PROFILE_CHANGE_STOP_POLICY, SettingsReader
from tests.unit.pools_fixtures import A10G, HOSTNAME, T4, M, node

A10G_POOL = "gpustack--nvidia-a10g-linux-amd64"
T4_POOL = "gpustack--nvidia-tesla-t4-linux-amd64"
TOPOLOGIES = {f"gpustack-{HOSTNAME}"}
SETTINGS = QueueSettings()


def flavors_of(*nodes: dict) -> list[dict]:
    return [render.render_flavor(g) for g in render.flavor_groups(nodes).values()]


def instance_type(name: str = A10G_POOL, group: str = "nvidia-a10g", **spec: object) -> dict:
    base = {"acceleratable": bool(group), "os": "linux", "arch": "amd64", "generalGroup": "generic"}
    if group:
        base["acceleratorGroup"] = group
    return {"metadata": {"name": name, "resourceVersion": "1"}, "spec": {**base, **spec}}


def kueue_wrote(queue: dict, generation: int = 1, reserving: int = 0, flavors: dict | None = None) -> dict:
    """The queue as stored once Kueue reported ``generation``."""
    out = copy.deepcopy(queue)
    out["metadata"]["generation"] = generation
    out["status"] = {
        "reservingWorkloads": reserving,
        "admittedWorkloads": reserving,
        "conditions": [{"type": "Active", "status": "True", "observedGeneration": generation}],
        "flavorsReservation": [
            {"name": n, "resources": [{"name": "credits.gpustack.ai/nvidia", "total": str(t)}]}
            for n, t in (flavors or {}).items()
        ],
    }
    return out


def plan(it: dict | None, queue: dict | None, flavors: list[dict], **kw: object):
    return plan_queue(
        render.name_of(it) if it else A10G_POOL,
        it,
        queue,
        flavors,
        kw.pop("topologies", TOPOLOGIES),
        kw.pop("checks", set()),
        kw.pop("settings", SETTINGS),
    )


def test_pool_of_five_t4_cards_nominal_and_order(monkeypatch) -> None:
    # §5: a pool of 5 T4 cards (1 + 4 across two nodes) has nominal 8,000,000; smallest count first.
    monkeypatch.setenv("GPUSTACK_KUEUE_QUOTA_CHECK_STRATEGY", "false")
    flavors = flavors_of(node("t4-four", T4, 4), node("t4-one", T4, 1))
    result = plan(instance_type(T4_POOL, "nvidia-tesla-t4"), None, flavors)
    (group,) = result.apply["spec"]["resourceGroups"]
    # On a Kueue v0.17 (no quotaCheckStrategy) the queue also declares cpu, unbounded.
    assert group["coveredResources"] == ["credits.gpustack.ai/nvidia", "cpu"]
    assert {r["name"]: r["nominalQuota"] for r in group["flavors"][0]["resources"]}["cpu"] == "1000000"
    assert [(f["name"], f["resources"][0]["nominalQuota"]) for f in group["flavors"]] == [
        ("gpustack--generic--nvidia-tesla-t4-linux-amd64-1d", str(M)),
        ("gpustack--generic--nvidia-tesla-t4-linux-amd64-4d", str(4 * M)),
    ]
    assert sum(int(f["resources"][0]["nominalQuota"]) for f in group["flavors"]) == 8_000_000


def test_queue_shape_isolation_and_labels() -> None:
    result = plan(instance_type(), None, flavors_of(node("a", A10G, 4)))
    body = result.apply
    assert body["metadata"]["name"] == A10G_POOL
    assert body["metadata"]["labels"] == {
        "feature.gpustack.ai/acceleratable": "true",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "acceleratable.feature.gpustack.ai/nvidia-a10g": "true",
        "resource.gpustack.ai/type": "instancetypes",
    }
    spec = body["spec"]
    assert "cohortName" not in spec and spec["namespaceSelector"] == {}
    assert spec["preemption"] == {
        "reclaimWithinCohort": "Never",
        "borrowWithinCohort": {"policy": "Never"},
        "withinClusterQueue": "Never",
    }
    assert spec["stopPolicy"] == "None" and "admissionChecksStrategy" not in spec
    assert body["metadata"]["annotations"] == {ANNOTATION_APPLIED_STOP: "None"}


def test_cpu_queue_covers_cores() -> None:
    it = instance_type("gpustack--generic-linux-amd64", "")
    result = plan(it, None, flavors_of(node("a", A10G, 4, cores=48), node("c", cores=16)))
    (group,) = result.apply["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["cpu"]
    assert [(f["name"], f["resources"][0]["nominalQuota"]) for f in group["flavors"]] == [
        ("gpustack--generic-linux-amd64-16c", "16"),
        ("gpustack--generic-linux-amd64-48c", "48"),
    ]


def test_created_on_hold_while_no_flavor_exists_then_released() -> None:
    it = instance_type()
    first = plan(it, None, [])
    assert first.apply["spec"]["stopPolicy"] == "Hold"
    assert first.apply["spec"]["resourceGroups"] == []
    assert first.apply["metadata"]["annotations"][constants.ANNOTATION_EMPTY_PLAN_HOLD] == "true"
    queue = kueue_wrote(first.apply)
    assert plan(it, queue, []).apply is None  # held while empty, no rewrite
    filled = plan(it, queue, flavors_of(node("a", A10G, 4)))
    assert filled.apply["spec"]["stopPolicy"] == "None"
    assert constants.ANNOTATION_EMPTY_PLAN_HOLD not in filled.apply["metadata"]["annotations"]


def test_inactive_mirrors_hold_both_ways() -> None:
    flavors = flavors_of(node("a", A10G, 4))
    active = kueue_wrote(plan(instance_type(), None, flavors).apply)
    held = plan(instance_type(inactive=True), active, flavors).apply
    assert (
        held["spec"]["stopPolicy"] == "Hold"
        and held["metadata"]["annotations"][ANNOTATION_APPLIED_STOP] == "Hold"
    )
    assert not plan(instance_type(inactive=True), active, flavors).backfill_inactive
    released = plan(instance_type(inactive=False), kueue_wrote(held, 2), flavors)
    assert released.apply["spec"]["stopPolicy"] == "None" and not released.backfill_inactive


def test_a_stop_someone_else_put_on_the_queue_backfills_inactive() -> None:
    flavors = flavors_of(node("a", A10G, 4))
    queue = kueue_wrote(plan(instance_type(), None, flavors).apply)
    queue["spec"]["stopPolicy"] = "Hold"  # kubectl patch on the queue
    result = plan(instance_type(), queue, flavors)
    assert result.backfill_inactive
    assert result.apply["spec"]["stopPolicy"] == "Hold"


def test_last_flavor_gone_drains_before_emptying_and_stays_drained() -> None:
    it = instance_type()
    flavors = flavors_of(node("a", A10G, 4))
    queue = kueue_wrote(plan(it, None, flavors).apply, reserving=2)
    draining = plan(it, queue, [])
    spec = draining.apply["spec"]
    assert spec["stopPolicy"] == "HoldAndDrain"
    assert spec["resourceGroups"] == queue["spec"]["resourceGroups"]  # not emptied while reserved
    assert draining.apply["metadata"]["annotations"][ANNOTATION_DRAIN_HOLD] == "None"
    assert ANNOTATION_PROFILE_CHANGE not in draining.apply["metadata"]["annotations"]  # no profile change
    assert draining.requeue
    # Kueue has not reported the new generation yet: still not emptied.
    pending = dict(
        queue,
        spec=spec,
        metadata={**queue["metadata"], "annotations": draining.apply["metadata"]["annotations"]},
    )
    pending["metadata"]["generation"] = 2
    assert plan(it, pending, []).apply is None
    drained = kueue_wrote(draining.apply, generation=2, reserving=0)
    emptied = plan(it, drained, []).apply
    assert emptied["spec"]["resourceGroups"] == [] and emptied["spec"]["stopPolicy"] == "HoldAndDrain"
    assert phase_of(it, kueue_wrote(emptied, generation=3)) == (
        "Inactive",
        "drained: no node serves this pool",
    )
    # The emptied queue stays drained (never an admitting queue without groups) until a flavor returns.
    empty = kueue_wrote(emptied, generation=3)
    assert plan(it, empty, []).apply is None
    back = plan(it, empty, flavors).apply
    assert back["spec"]["stopPolicy"] == "None" and back["spec"]["resourceGroups"]
    assert ANNOTATION_DRAIN_HOLD not in back["metadata"]["annotations"]
    # An inactive type comes back held.
    assert plan(instance_type(inactive=True), empty, flavors).apply["spec"]["stopPolicy"] == "Hold"


def test_without_the_drain_setting_the_old_groups_stay() -> None:
    it = instance_type()
    queue = kueue_wrote(plan(it, None, flavors_of(node("a", A10G, 4))).apply, reserving=1)
    settings = QueueSettings(drain_when_no_flavors=False)
    assert plan(it, queue, [], settings=settings).apply is None


def test_a_finalizing_flavor_is_dropped_in_place() -> None:
    it = instance_type()
    flavors = flavors_of(node("a", A10G, 4), node("b", A10G, 8))
    queue = kueue_wrote(
        plan(it, None, flavors).apply, flavors={"gpustack--generic--nvidia-a10g-linux-amd64-8d": 1}
    )
    gone = copy.deepcopy(flavors)
    for f in gone:
        if render.name_of(f) == "gpustack--generic--nvidia-a10g-linux-amd64-8d":  # its nodes left
            f["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    result = plan(it, queue, gone).apply
    assert result["spec"]["stopPolicy"] == "None"
    assert [f["name"] for f in result["spec"]["resourceGroups"][0]["flavors"]] == [
        "gpustack--generic--nvidia-a10g-linux-amd64-4d"
    ]


def reserved_flavor_relabelled_away(it: dict) -> tuple[list, dict, list]:
    """Two A10G flavors, the queue Kueue reports reserving the 8-card one, and the flavors after
    that one is relabelled away from the pool (still live)."""
    flavors = flavors_of(node("a", A10G, 4), node("b", A10G, 8))
    eight = "gpustack--generic--nvidia-a10g-linux-amd64-8d"
    queue = kueue_wrote(plan(it, None, flavors).apply, reserving=1, flavors={eight: M})
    moved = copy.deepcopy(flavors)
    for f in moved:
        if render.name_of(f) == eight:
            f["metadata"]["labels"]["kubernetes.io/arch"] = "arm64"
    return flavors, queue, moved


def test_a_live_flavor_leaving_the_plan_while_reserved_drains_then_swaps() -> None:
    it = instance_type()
    _flavors, queue, moved = reserved_flavor_relabelled_away(it)
    draining = plan(it, queue, moved)
    assert draining.apply["spec"]["stopPolicy"] == "HoldAndDrain"
    assert len(draining.apply["spec"]["resourceGroups"][0]["flavors"]) == 2
    assert ANNOTATION_PROFILE_CHANGE not in draining.apply["metadata"]["annotations"]
    drained = kueue_wrote(draining.apply, generation=2, reserving=0)
    swapped = plan(it, drained, moved).apply
    assert swapped["spec"]["stopPolicy"] == "None"
    assert [f["name"] for f in swapped["spec"]["resourceGroups"][0]["flavors"]] == [
        "gpustack--generic--nvidia-a10g-linux-amd64-4d"
    ]


def test_removal_drains_and_an_orphan_is_deleted() -> None:
    flavors = flavors_of(node("a", A10G, 4))
    queue = kueue_wrote(plan(instance_type(), None, flavors).apply)
    being_deleted = instance_type()
    being_deleted["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    result = plan(being_deleted, queue, flavors)
    assert result.apply["spec"]["stopPolicy"] == "HoldAndDrain" and not result.delete
    assert result.apply["spec"]["resourceGroups"] == queue["spec"]["resourceGroups"]
    orphan = plan_queue(A10G_POOL, None, queue, flavors, TOPOLOGIES, set(), SETTINGS)
    assert orphan.delete and orphan.apply["spec"]["stopPolicy"] == "HoldAndDrain"
    # Not ours: never touched.
    foreign = copy.deepcopy(queue)
    foreign["metadata"]["labels"] = {}
    assert plan_queue(A10G_POOL, None, foreign, flavors, TOPOLOGIES, set(), SETTINGS).apply is None


def test_admission_checks_once_active() -> None:
    it = instance_type()
    flavors = flavors_of(node("a", A10G, 4))
    both = {constants.ADMISSION_CHECK_NODE_DEVICES, constants.ADMISSION_CHECK_JOINT}
    checks = plan(it, None, flavors, checks=both).apply["spec"]["admissionChecksStrategy"]["admissionChecks"]
    assert [x["name"] for x in checks] == [
        constants.ADMISSION_CHECK_NODE_DEVICES,
        constants.ADMISSION_CHECK_JOINT,
    ]
    off = QueueSettings(derived_from_node=False)
    checks = plan(it, None, flavors, checks=both, settings=off).apply["spec"]["admissionChecksStrategy"]
    assert [x["name"] for x in checks["admissionChecks"]] == [constants.ADMISSION_CHECK_JOINT]
    cpu = instance_type("gpustack--generic-linux-amd64", "")
    checks = plan(cpu, None, flavors, checks=both).apply["spec"]["admissionChecksStrategy"]["admissionChecks"]
    assert [x["name"] for x in checks] == [constants.ADMISSION_CHECK_JOINT]
    assert "admissionChecksStrategy" not in plan(it, None, flavors).apply["spec"]


def test_topology_ready_reports_the_plan() -> None:
    it = instance_type()
    flavors = flavors_of(node("a", A10G, 4))
    queue = plan(it, None, flavors).apply
    stored = copy.deepcopy(queue)
    stored["metadata"]["generation"] = 1
    awaiting = plan(it, stored, flavors).condition
    assert (awaiting["status"], awaiting["reason"]) == ("Unknown", "AwaitingQueueStatus")
    ready = plan(it, kueue_wrote(queue), flavors).condition
    assert (ready["type"], ready["status"], ready["observedGeneration"]) == ("TopologyReady", "True", 1)
    # A missing Topology refuses the plan and keeps the last complete one.
    refused = plan(it, kueue_wrote(queue), flavors + flavors_of(node("b", A10G, 8)), topologies=set())
    assert refused.apply is None
    assert (refused.condition["status"], refused.condition["reason"]) == ("False", "TopologyMissing")


def test_more_flavors_than_a_group_holds_is_refused() -> None:
    nodes = [node(f"n{i}", A10G, i + 1) for i in range(MAX_FLAVORS + 1)]
    it = instance_type()
    result = plan(it, None, flavors_of(*nodes))
    assert result.apply["spec"]["resourceGroups"] == [] and result.apply["spec"]["stopPolicy"] == "Hold"
    queue = kueue_wrote(plan(it, None, flavors_of(*nodes[:2])).apply)
    refused = plan(it, queue, flavors_of(*nodes))
    assert refused.apply is None and refused.condition["reason"] == "TooManyFlavors"


def test_overlapping_selectors_are_refused() -> None:
    flavors = flavors_of(node("a", A10G, 4))
    twin = copy.deepcopy(flavors[0] if "a10g" in render.name_of(flavors[0]) else flavors[1])
    twin["metadata"]["name"] += "-twin"
    del twin["spec"]["nodeLabels"]["acceleratable.feature.gpustack.ai/nvidia-a10g.count"]
    queue = kueue_wrote(plan(instance_type(), None, flavors).apply)
    refused = plan(instance_type(), queue, [*flavors, twin])
    assert refused.condition["reason"] == "SelectorOverlap"


def test_flavors_of_two_cpu_groups_share_one_queue() -> None:
    """One pool's nodes with two CPU models (or a model and the generic fallback): their flavors
    differ in the general group, which a node has one of, so they never overlap."""
    amd = {
        constants.label_general_group("amd-25-1"): "true",
        f"{constants.PREFIX_GENERAL}amd-25-1.count": "2",
    }
    generic_keys = (constants.label_general_group("generic"), f"{constants.PREFIX_GENERAL}generic.count")
    nodes = [node("c", cores=16), node("d", labels=amd, drop=generic_keys)]
    cpu = instance_type("gpustack--generic-linux-amd64", "")
    result = plan(cpu, None, flavors_of(*nodes))
    assert result.condition is None or result.condition["reason"] != "SelectorOverlap"
    (group,) = result.apply["spec"]["resourceGroups"]
    assert sorted(f["name"] for f in group["flavors"]) == [
        "gpustack--amd-25-1-linux-amd64-2c",
        "gpustack--generic-linux-amd64-16c",
    ]
    # The same for an accelerated pool whose nodes have two CPU models.
    a10g = [node("a", A10G, 4), node("b", A10G, 4, labels=amd, drop=generic_keys)]
    (group,) = plan(instance_type(), None, flavors_of(*a10g)).apply["spec"]["resourceGroups"]
    assert len(group["flavors"]) == 2


def test_kueue_reencoded_quantities_compare_equal() -> None:
    queue = plan(instance_type(), None, flavors_of(node("a", A10G, 4))).apply
    stored = kueue_wrote(queue)
    stored["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "6400k"
    assert normal_groups(stored["spec"]["resourceGroups"]) == normal_groups(queue["spec"]["resourceGroups"])
    assert plan(instance_type(), stored, flavors_of(node("a", A10G, 4))).apply is None


def test_with_quota_check_strategy_an_accelerated_queue_declares_credits_only(monkeypatch) -> None:
    monkeypatch.delenv("GPUSTACK_KUEUE_QUOTA_CHECK_STRATEGY", raising=False)  # the default: Kueue v0.19
    flavors = flavors_of(node("t4-four", T4, 4))
    (group,) = plan(instance_type(T4_POOL, "nvidia-tesla-t4"), None, flavors).apply["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["credits.gpustack.ai/nvidia"]


def test_a_retiring_flavor_is_never_planned_but_drains_before_the_swap() -> None:
    """B.4 step 7: the nodes moved to another profile; the old flavor stays while listed."""
    it = instance_type()
    profiled = render.topology_profile([constants.LABEL_HOSTNAME, "x"])
    before = [f for f in flavors_of(node("a", A10G, 4)) if "a10g" in render.name_of(f)]
    (old,) = [render.name_of(f) for f in before]
    queue = kueue_wrote(plan(it, None, before).apply, reserving=1, flavors={old: M})
    after = [
        f
        for f in flavors_of(node("a", A10G, 4, labels={constants.LABEL_TOPOLOGY_PROFILE: profiled}))
        if "a10g" in render.name_of(f)
    ]
    retiring = copy.deepcopy(before[0])
    retiring["metadata"]["labels"][constants.LABEL_FLAVOR_RETIRING] = "true"
    topologies = {*TOPOLOGIES, f"gpustack-{profiled}"}
    draining = plan(it, queue, [retiring, *after], topologies=topologies)
    assert draining.apply["spec"]["stopPolicy"] == "HoldAndDrain" and draining.requeue
    assert [f["name"] for f in draining.apply["spec"]["resourceGroups"][0]["flavors"]] == [old]
    # The drain is marked as the profile change it is for; the type says so, not "no node".
    moves = f"{HOSTNAME} -> {profiled}"
    assert draining.apply["metadata"]["annotations"][ANNOTATION_PROFILE_CHANGE] == moves
    busy = kueue_wrote(draining.apply, generation=2, reserving=1, flavors={old: M})
    assert phase_of(it, busy) == (
        "Draining",
        f"profile change in progress ({moves}): draining: 1 workload(s) still hold quota",
    )
    drained = kueue_wrote(draining.apply, generation=2, reserving=0)
    assert phase_of(it, drained) == (
        "Inactive",
        f"profile change in progress ({moves}): drained, the pool's plan swaps next",
    )
    swapped = plan(it, drained, [retiring, *after], topologies=topologies).apply
    assert swapped["spec"]["stopPolicy"] == "None"
    assert ANNOTATION_PROFILE_CHANGE not in swapped["metadata"]["annotations"]
    assert [f["name"] for f in swapped["spec"]["resourceGroups"][0]["flavors"]] == [render.name_of(after[0])]
    # Idle (Kueue reports no reservation on it): swapped in place, no hold.
    idle = kueue_wrote(plan(it, None, before).apply, reserving=0)
    in_place = plan(it, idle, [retiring, *after], topologies=topologies).apply
    assert in_place["spec"]["stopPolicy"] == "None"


def test_a_flavor_without_capacity_cannot_conserve_quota() -> None:
    it = instance_type()
    flavors = [f for f in flavors_of(node("a", A10G, 4)) if "a10g" in render.name_of(f)]
    queue = kueue_wrote(plan(it, None, flavors).apply)
    broken = copy.deepcopy(flavors)
    broken[0]["metadata"]["labels"]["acceleratable.feature.gpustack.ai/nvidia-a10g.capacity"] = "0"
    result = plan(it, queue, broken)
    assert result.apply is None  # the last complete plan stays
    assert result.condition["status"] == "False" and result.condition["reason"] == "QuotaNotConserved"


HOLD_ON_PROFILE_CHANGE = QueueSettings(profile_change_stop_policy="Hold")
PROFILED = render.topology_profile([constants.LABEL_HOSTNAME, "x"])
PROFILED_TOPOLOGIES = {*TOPOLOGIES, f"gpustack-{PROFILED}"}


def a10g_flavors(**labels: str) -> list[dict]:
    return [f for f in flavors_of(node("a", A10G, 4, labels=labels)) if "a10g" in render.name_of(f)]


def profile_changed() -> tuple[list[dict], list[dict]]:
    """One A10G flavor before a live profile change, and the flavors after it: the old one
    retiring, its replacement."""
    before = a10g_flavors()
    retiring = copy.deepcopy(before[0])
    retiring["metadata"]["labels"][constants.LABEL_FLAVOR_RETIRING] = "true"
    return before, [retiring, *a10g_flavors(**{constants.LABEL_TOPOLOGY_PROFILE: PROFILED})]


def held_plan(it: dict, queue: dict, flavors: list[dict]):
    return plan(it, queue, flavors, topologies=PROFILED_TOPOLOGIES, settings=HOLD_ON_PROFILE_CHANGE)


def test_with_the_hold_setting_a_profile_change_keeps_the_workloads_until_they_end() -> None:
    it = instance_type()
    before, after = profile_changed()
    old, new = render.name_of(before[0]), render.name_of(after[1])
    queue = kueue_wrote(plan(it, None, before).apply, reserving=1, flavors={old: M})
    holding = held_plan(it, queue, after)
    body = holding.apply
    assert body["spec"]["stopPolicy"] == "Hold" and holding.requeue
    assert [f["name"] for f in body["spec"]["resourceGroups"][0]["flavors"]] == [old]
    assert body["metadata"]["annotations"][ANNOTATION_DRAIN_HOLD] == "None"
    assert body["metadata"]["annotations"][ANNOTATION_APPLIED_STOP] == "Hold"
    assert body["metadata"]["annotations"][ANNOTATION_PROFILE_CHANGE] == f"{HOSTNAME} -> {PROFILED}"
    held_type = phase_of(it, kueue_wrote(body, generation=2, reserving=1, flavors={old: M}))
    assert held_type == (
        "Draining",
        f"profile change in progress ({HOSTNAME} -> {PROFILED}): held, 1 workload(s) run until they end",
    )
    ((_, reason, message),) = holding.events
    assert reason == "Draining" and "Hold" in message and "HoldAndDrain" not in message
    assert not holding.backfill_inactive
    # Kueue reported the hold and the workload still runs on the old flavor: nothing changes.
    running = kueue_wrote(body, generation=2, reserving=1, flavors={old: M})
    still = held_plan(it, running, after)
    assert still.apply is None and still.requeue and not still.backfill_inactive and not still.events
    # It ended: the plan swaps on the same queue and the saved policy comes back.
    swapped = held_plan(it, kueue_wrote(body, generation=2, reserving=0), after)
    assert swapped.apply["spec"]["stopPolicy"] == "None"
    assert [f["name"] for f in swapped.apply["spec"]["resourceGroups"][0]["flavors"]] == [new]
    assert ANNOTATION_DRAIN_HOLD not in swapped.apply["metadata"]["annotations"]
    assert [r for _, r, _ in swapped.events] == ["Restored"]


def test_our_profile_change_hold_is_not_an_admins_stop() -> None:
    it = instance_type()
    before, after = profile_changed()
    old = render.name_of(before[0])
    queue = kueue_wrote(plan(it, None, before).apply, reserving=1, flavors={old: M})
    ours = kueue_wrote(held_plan(it, queue, after).apply, generation=2, reserving=1, flavors={old: M})
    assert ours["spec"]["stopPolicy"] == "Hold"
    assert not held_plan(it, ours, after).backfill_inactive
    # The same Hold put on the queue by someone else (no drain marker, not what we applied).
    theirs = copy.deepcopy(queue)
    theirs["spec"]["stopPolicy"] = "Hold"
    stopped = plan(it, theirs, before, settings=HOLD_ON_PROFILE_CHANGE)
    assert stopped.backfill_inactive and stopped.apply["spec"]["stopPolicy"] == "Hold"
    # An inactive type held through the change saves Hold and stays held after the swap.
    inactive = instance_type(inactive=True)
    held = kueue_wrote(plan(inactive, None, before).apply, reserving=1, flavors={old: M})
    holding = held_plan(inactive, held, after).apply
    assert holding["metadata"]["annotations"][ANNOTATION_DRAIN_HOLD] == "Hold"
    swapped = held_plan(inactive, kueue_wrote(holding, generation=2, reserving=0), after).apply
    assert swapped["spec"]["stopPolicy"] == "Hold"
    assert ANNOTATION_DRAIN_HOLD not in swapped["metadata"]["annotations"]


def test_the_hold_setting_leaves_other_drains_evicting() -> None:
    """Only a profile change's retiring flavors are held with Hold: a flavor that left the pool
    otherwise, the last flavor going and a queue's removal still drain with HoldAndDrain."""
    it = instance_type()
    flavors, queue, moved = reserved_flavor_relabelled_away(it)
    hold = HOLD_ON_PROFILE_CHANGE
    assert plan(it, queue, moved, settings=hold).apply["spec"]["stopPolicy"] == "HoldAndDrain"
    assert plan(it, queue, [], settings=hold).apply["spec"]["stopPolicy"] == "HoldAndDrain"
    being_deleted = instance_type()
    being_deleted["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert plan(being_deleted, queue, flavors, settings=hold).apply["spec"]["stopPolicy"] == "HoldAndDrain"


class _Stored:
    """A Setting watch cache holding one value (None: no object)."""

    def __init__(self, value: object) -> None:
        self.value = value

    def get(self, name: str, namespace: str | None = None) -> dict | None:
        return None if self.value is None else {"spec": {"value": self.value}}


def test_the_stop_policy_setting_reads_as_hold_and_drain_unless_a_choice() -> None:
    for stored, read in [
        (None, "HoldAndDrain"),
        ("Hold", "Hold"),
        ("hold", "HoldAndDrain"),
        (1, "HoldAndDrain"),
    ]:
        reader = SettingsReader(_Stored(stored))  # type: ignore[arg-type]
        assert reader.valid(PROFILE_CHANGE_STOP_POLICY) == read, stored
