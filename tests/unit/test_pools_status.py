"""controllers.pools.instance_type_status: phase, entrance, detail and the four views of an InstanceType,
with both worked examples of the devices spec (§7)."""

from __future__ import annotations

import copy

from api import constants
from controllers.pools import render
from controllers.pools.instance_type_status import (
    NodeLedgerMemo,
    phase_of,
    pool_nodes,
    render_status,
    status_changed,
)
from controllers.pools.queue_plan import QueueSettings, plan_queue
from tests.unit.pools_fixtures import A10G, H100, HOSTNAME, T4, M, devices, node, partition_example, sliced

T4_POOL = "gpustack--nvidia-tesla-t4-linux-amd64"
H100_POOL = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"


def instance_type(name: str, group: str = "", **spec: object) -> dict:
    base = {
        "acceleratable": bool(group),
        "os": "linux",
        "arch": "amd64",
        "generalGroup": "generic",
        "unitResources": {"cpu": "8", "ram": "64Gi"},
        "localStorage": "100Gi",
    }
    if group:
        base["acceleratorGroup"] = group
    return {"metadata": {"name": name}, "spec": {**base, **spec}}


def active_queue(name: str) -> dict:
    return {"metadata": {"name": name, "annotations": {}}, "spec": {"stopPolicy": "None"}, "status": {}}


def worked_example_one() -> tuple[list, dict]:
    """§7: node A has 4 cards — c0 exclusive, c1 one 30 % slice, c2 shared by 3 holders, c3 free;
    node B has one free card."""
    a = devices("node-a", T4, 4)
    rows = a["status"]["groups"][0]["accelerators"]
    rows[0].update(mode=1, allocated=M)
    del rows[0]["remaining"]  # an omitted remaining holds 0
    rows[1].update(mode=3, allocated=480_000, remaining=1_120_000, allocatedSlices=1)
    rows[2].update(mode=2, allocated=480_000, remaining=1_120_000)
    b = devices("node-b", T4, 1)
    facts = [
        render.node_facts(node("node-a", T4, 4, cores=48)),
        render.node_facts(node("node-b", T4, 1, cores=24)),
    ]
    return facts, {"node-a": a, "node-b": b}


def test_worked_example_unpartitioned() -> None:
    facts, ledgers = worked_example_one()
    status = render_status(instance_type(T4_POOL, "nvidia-tesla-t4"), active_queue(T4_POOL), facts, ledgers)
    assert status["acceleratorSummary"] == "1/2 2/27 100/270 0/0"
    assert status["accelerator"] == {"onceMaxRequest": "1", "remaining": "2", "capacity": "5"}
    assert status["acceleratorShared"] == {"onceMaxRequest": "2", "remaining": "27", "capacity": "50"}
    assert status["acceleratorSliced"] == {"onceMaxRequest": "100", "remaining": "270", "capacity": "500"}
    assert status["cpu"] == {"onceMaxRequest": "48", "remaining": "72", "capacity": "72"}
    assert status["cpuSummary"] == "48/72"
    assert status["unitSummary"] == "8/64Gi/100Gi"
    assert status["phase"] == "Active" and "phaseMessage" not in status
    assert status["entrance"] == "gpustack-fnv64-" + render.local_queue_name(T4_POOL)[-16:]


def test_worked_example_partitioned_with_zero_profiles_kept() -> None:
    facts = [render.node_facts(node("h1", H100, 3, partitioned=True))]
    ledger = partition_example()
    status = render_status(
        instance_type(H100_POOL, "nvidia-h100-80gb-hbm3"), active_queue(H100_POOL), facts, {"h1": ledger}
    )
    assert status["acceleratorSummary"] == "0/0 0/0 0/0 1/17"
    pt = status["acceleratorPartitioned"]
    assert (pt["onceMaxRequest"], pt["remaining"], pt["capacity"]) == ("1", "17", "21")
    assert [(p["name"], p["count"]) for p in pt["remainingProfiles"]] == [
        ("1g.10gb", 17),
        ("1g.20gb", 10),
        ("2g.20gb", 7),
        ("3g.40gb", 5),
        ("4g.40gb", 2),
        ("7g.80gb", 2),
    ]
    assert pt["allocatedProfiles"] == [{"name": "3g.40gb", "count": 1}]
    # Fill cards 1 and 2 with a 4g.40gb each (slices 0-3): 4g and 7g read 0 and stay listed.
    four = {
        "mode": 4,
        "allocatedProfiles": [{"name": "4g.40gb", "count": 1}],
        "remainingProfiles": [
            {"name": "1g.10gb", "count": 3},
            {"name": "1g.20gb", "count": 2},
            {"name": "2g.20gb", "count": 1},
            {"name": "3g.40gb", "count": 1},
            {"name": "4g.40gb", "count": 0},
            {"name": "7g.80gb", "count": 0},
        ],
    }
    full = render_status(
        instance_type(H100_POOL, "nvidia-h100-80gb-hbm3"),
        active_queue(H100_POOL),
        facts,
        {"h1": partition_example([four, four])},
    )
    remaining = {p["name"]: p["count"] for p in full["acceleratorPartitioned"]["remainingProfiles"]}
    assert remaining["4g.40gb"] == 0 and remaining["7g.80gb"] == 0
    assert len(remaining) == 6
    # slicedDetail is static capability: it does not move with allocations.
    assert full["detail"]["slicedDetail"] == status["detail"]["slicedDetail"]


def test_detail_comes_from_one_devices_read() -> None:
    facts = [render.node_facts(node("a", A10G, 4))]
    status = render_status(
        instance_type("gpustack--nvidia-a10g-linux-amd64", "nvidia-a10g"),
        active_queue("x"),
        facts,
        {"a": devices("a", A10G, 4)},
    )
    detail = status["detail"]
    assert detail["manufacturer"] == "nvidia" and detail["product"] == "NVIDIA A10G"
    assert detail["memory"] == "24Gi" and detail["computeCapability"] == "8.6" and detail["cores"] == "9216"
    assert detail["slicedDetail"]["logical"]["count"] == 4 * 128
    # No ledger yet: no detail (a non-empty manufacturer means ready), zero views, still a status.
    bare = render_status(instance_type("gpustack--nvidia-a10g-linux-amd64", "nvidia-a10g"), None, facts, {})
    assert "detail" not in bare and bare["acceleratorSummary"] == "0/0 0/0 0/0 0/0"
    assert bare["phase"] == "Inactive"


def test_detail_carries_the_pools_runtime_versions_lowest_first() -> None:
    """The runner image formula reads the lowest runtime version of the pool (model-deployment §8)."""
    facts = [render.node_facts(node(n, A10G, 4)) for n in ("a", "b", "c")]
    ledgers = {n: devices(n, A10G, 4) for n in ("a", "b", "c")}
    ledgers["a"]["spec"]["groups"][0]["runtimeVersion"] = "12.10"
    ledgers["b"]["spec"]["groups"][0]["runtimeVersion"] = "12.9"
    ledgers["c"]["spec"]["groups"][0]["runtimeVersion"] = "12.9"
    detail = render_status(
        instance_type("gpustack--nvidia-a10g-linux-amd64", "nvidia-a10g"), active_queue("x"), facts, ledgers
    )["detail"]
    assert detail["runtimeVersion"] == "12.9"
    assert detail["runtimeVersions"] == ["12.9", "12.10"]
    one = render_status(
        instance_type("gpustack--nvidia-a10g-linux-amd64", "nvidia-a10g"),
        active_queue("x"),
        facts[2:],
        {"c": ledgers["c"]},
    )["detail"]
    assert one["runtimeVersion"] == "12.9" and one["runtimeVersions"] == ["12.9"]


def test_half_sliced_cards_and_a_ledger_change() -> None:
    facts = [render.node_facts(node(n, H100, 8)) for n in ("h100-a", "h100-b")]
    it = instance_type(H100_POOL, "nvidia-h100-80gb-hbm3")
    half = {n: sliced(devices(n, H100, 8), 50) for n in ("h100-a", "h100-b")}
    status = render_status(it, active_queue(H100_POOL), facts, half)
    assert status["acceleratorSummary"] == "0/0 0/0 50/800 0/0"
    assert status["accelerator"]["capacity"] == "16" and status["acceleratorSliced"]["capacity"] == "1600"
    freed = copy.deepcopy(half)
    freed["h100-a"]["status"]["groups"][0]["accelerators"][0].update(
        mode=0, allocated=0, remaining=M, allocatedSlices=0
    )
    moved = render_status(it, active_queue(H100_POOL), facts, freed)
    assert moved["acceleratorSummary"] == "1/1 1/10 100/850 0/0"
    assert status_changed(status, moved) and not status_changed(moved, copy.deepcopy(moved))


def test_cpu_pool_status() -> None:
    facts = [render.node_facts(node("a", A10G, 4, cores=64)), render.node_facts(node("c", cores=16))]
    it = instance_type("gpustack--generic-linux-amd64", unitResources={"cpu": "1", "ram": "2Gi"})
    status = render_status(it, active_queue("x"), facts, {})
    assert status["cpuSummary"] == "64/80" and status["cpu"]["capacity"] == "80"
    assert status["acceleratorSummary"] == "0/0 0/0 0/0 0/0" and status["unitSummary"] == "1/2Gi/100Gi"
    assert status["detail"]["manufacturer"] == "generic"


def test_phases() -> None:
    it = instance_type(T4_POOL, "nvidia-tesla-t4")
    assert phase_of(it, None)[0] == "Inactive"
    assert phase_of(it, active_queue(T4_POOL)) == ("Active", "")
    held = {"metadata": {"annotations": {}}, "spec": {"stopPolicy": "Hold"}}
    assert phase_of(it, held)[0] == "Inactive"
    empty = {
        "metadata": {"annotations": {constants.ANNOTATION_EMPTY_PLAN_HOLD: "true"}},
        "spec": {"stopPolicy": "Hold"},
    }
    assert "no node" in phase_of(it, empty)[1]
    draining = {"metadata": {}, "spec": {"stopPolicy": "HoldAndDrain"}, "status": {"reservingWorkloads": 2}}
    assert phase_of(it, draining)[0] == "Draining"
    drained = {"metadata": {}, "spec": {"stopPolicy": "HoldAndDrain"}, "status": {"reservingWorkloads": 0}}
    assert phase_of(it, drained)[0] == "Inactive"
    # A profile change's Hold lets the admitted workloads run: Draining, never Inactive (which
    # stops Instances), until the swap restores the saved policy; an inactive type stays Inactive.
    for reserving in (1, 0):
        ours = {
            "metadata": {"annotations": {constants.ANNOTATION_DRAIN_PLAN_HOLD: "None"}},
            "spec": {"stopPolicy": "Hold"},
            "status": {"reservingWorkloads": reserving},
        }
        assert phase_of(it, ours)[0] == "Draining"
    inactive = {
        "metadata": {"annotations": {constants.ANNOTATION_DRAIN_PLAN_HOLD: "Hold"}},
        "spec": {"stopPolicy": "Hold"},
        "status": {"reservingWorkloads": 1},
    }
    assert phase_of(it, inactive) == ("Inactive", "held: the type is inactive")
    # A profile change under HoldAndDrain or Hold says so, with the profiles, never that no node
    # serves the pool; the phases are unchanged (Inactive once drained lets the StopPolicy act).
    moves = "fnv64-aaaaaaaaaaaaaaaa -> fnv64-bbbbbbbbbbbbbbbb"
    marked = {constants.ANNOTATION_DRAIN_PLAN_HOLD: "None", constants.ANNOTATION_PROFILE_CHANGE: moves}
    for policy, reserving, phase in (
        ("HoldAndDrain", 2, "Draining"),
        ("HoldAndDrain", 0, "Inactive"),
        ("Hold", 1, "Draining"),
    ):
        swapping = {
            "metadata": {"annotations": marked},
            "spec": {"stopPolicy": policy, "resourceGroups": [{"flavors": [{"name": "old"}]}]},
            "status": {"reservingWorkloads": reserving},
        }
        got = phase_of(it, swapping)
        assert got[0] == phase, got
        assert got[1].startswith(f"profile change in progress ({moves})") and "no node" not in got[1], got
    # The last flavor going drains too, saving the policy, but without the profile-change mark:
    # while it drains, and once its groups are emptied, no node serves the pool.
    saved = {constants.ANNOTATION_DRAIN_PLAN_HOLD: "None"}
    last = {"metadata": {"annotations": saved}, "spec": {"stopPolicy": "HoldAndDrain"}, "status": {}}
    assert phase_of(it, last) == ("Inactive", "drained: no node serves this pool")
    assert "profile change" not in phase_of(it, {**last, "status": {"reservingWorkloads": 1}})[1]
    # A flavor that left some other way drains with its groups still listed: the swap is next.
    other = {**last, "spec": {"stopPolicy": "HoldAndDrain", "resourceGroups": [{"flavors": [{"name": "x"}]}]}}
    assert phase_of(it, other) == ("Inactive", "drained: the pool's plan swaps next")
    assert phase_of(it, drained) == ("Inactive", "drained: no node serves this pool")
    gone = copy.deepcopy(it)
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert phase_of(gone, active_queue(T4_POOL))[0] == "Inactive"


def test_pool_nodes_follow_the_matching_live_flavors() -> None:
    nodes = [node("a", A10G, 4), node("b", A10G, 8), node("h", H100, 8)]
    groups = render.flavor_groups(nodes)
    flavors = [render.render_flavor(g) for g in groups.values()]
    it = instance_type("gpustack--nvidia-a10g-linux-amd64", "nvidia-a10g")
    assert pool_nodes(it, groups, flavors, aware_cpu=False) == ["a", "b"]
    cpu = instance_type("gpustack--generic-linux-amd64")
    assert pool_nodes(cpu, groups, flavors, aware_cpu=False) == ["a", "b", "h"]
    # And the queue that pool gets, from the same flavors.
    queue = plan_queue(
        render.name_of(it), it, None, flavors, {f"gpustack-{HOSTNAME}"}, set(), QueueSettings()
    ).apply
    assert (
        sum(int(f["resources"][0]["nominalQuota"]) for f in queue["spec"]["resourceGroups"][0]["flavors"])
        == 12 * M
    )


def test_a_node_whose_profile_changed_still_counts_before_its_new_flavor_exists() -> None:
    """Between a node's new topology profile and the flavor for it, the pool keeps the node."""
    before = [node("a", A10G, 4), node("b", A10G, 8)]
    flavors = [render.render_flavor(g) for g in render.flavor_groups(before).values()]
    moved = node("b", A10G, 8)
    moved["metadata"]["labels"][constants.LABEL_TOPOLOGY_PROFILE] = "zoned"
    groups = render.flavor_groups([before[0], moved])
    assert any(name not in {render.name_of(f) for f in flavors} for name in groups)  # b's is new
    it = instance_type("gpustack--nvidia-a10g-linux-amd64", "nvidia-a10g")
    assert pool_nodes(it, groups, flavors, aware_cpu=False) == ["a", "b"]
    # Once created, the new flavor carries b; the old one, retiring, no longer does.
    flavors = [render.render_flavor(g) for g in groups.values()]
    assert pool_nodes(it, groups, flavors, aware_cpu=False) == ["a", "b"]


def test_kept_node_ledgers_give_the_status_built_afresh_through_ledger_changes() -> None:
    memo = NodeLedgerMemo()
    facts = [render.node_facts(node(n, H100, 8, cores=c)) for n, c in (("h100-a", 64), ("h100-b", 32))]
    it = instance_type(H100_POOL, "nvidia-h100-80gb-hbm3")
    ledgers = {n: sliced(devices(n, H100, 8), 50) for n in ("h100-a", "h100-b")}
    for n, obj in ledgers.items():
        obj["metadata"]["resourceVersion"] = f"{n}-1"

    def both() -> tuple[dict, dict]:
        return (
            render_status(it, active_queue(H100_POOL), facts, ledgers, memo),
            render_status(it, active_queue(H100_POOL), facts, ledgers),
        )

    kept, fresh = both()
    assert kept == fresh and kept["acceleratorSummary"] == "0/0 0/0 50/800 0/0"
    built = {
        n: memo.ledger(n, ledgers[n], "nvidia-h100-80gb-hbm3", f.cores)
        for n, f in zip(ledgers, facts, strict=True)
    }
    kept, fresh = both()
    assert kept == fresh  # unchanged Devices: the very ledgers kept
    assert all(
        memo.ledger(n, ledgers[n], "nvidia-h100-80gb-hbm3", f.cores) is built[n]
        for n, f in zip(ledgers, facts, strict=True)
    )

    # A card freed on one node (a new resourceVersion): that node rebuilt, the status moves.
    ledgers["h100-a"] = copy.deepcopy(ledgers["h100-a"])
    ledgers["h100-a"]["status"]["groups"][0]["accelerators"][0].update(
        mode=0, allocated=0, remaining=M, allocatedSlices=0
    )
    ledgers["h100-a"]["metadata"]["resourceVersion"] = "h100-a-2"
    kept, fresh = both()
    assert kept == fresh and kept["acceleratorSummary"] == "1/1 1/10 100/850 0/0"

    # The node's cores change (its facts): the kept ledger is not reused with the old ones.
    facts = [render.node_facts(node("h100-a", H100, 8, cores=16)), facts[1]]
    kept, fresh = both()
    assert kept == fresh and kept["cpu"]["capacity"] == "48"

    memo.keep_only(["h100-b"])
    assert len(memo) == 1
