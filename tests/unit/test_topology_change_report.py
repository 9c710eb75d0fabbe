"""controllers.topology.change_report: what a TopologySource's live profile change will evict or
stop, said before the swap (topology spec B.4 step 7, instances spec A.9 item 4)."""

from __future__ import annotations

import copy

from api import constants
from api.naming import topology_profile
from controllers.pools import render
from controllers.pools.queue_plan import QueueSettings, plan_queue
from controllers.topology.change_report import (
    NODE_NAME_LABEL,
    ChangeReport,
    plan_change,
    published,
    published_after,
)
from tests.unit.pools_fixtures import H100, M, node
from tests.unit.test_pools_queues import kueue_wrote

ZONE, RACK = "topology.kubernetes.io/zone", "topology.example.com/rack"
HOST = constants.LABEL_HOSTNAME
RACKED = topology_profile([ZONE, RACK, HOST])
ZONED = topology_profile([ZONE, HOST])
HOSTNAME = topology_profile([HOST])
POOL = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"
OLD = f"gpustack--generic--nvidia-h100-80gb-hbm3-linux-amd64-8d-{RACKED}"
NEW = f"gpustack--generic--nvidia-h100-80gb-hbm3-linux-amd64-8d-{ZONED}"
MARK = "topology-e2e"


def source(ready: str = "True", **arm: object) -> dict:
    return {
        "kind": "TopologySource",
        "metadata": {"name": "racks", "uid": "uid-racks", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "nodeSelector": {"matchLabels": {MARK: "x"}},
            "levels": [ZONE, RACK],
            **(arm or {"nodeLabels": {}}),
        },
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


def h100(name: str, profile: str, **labels: str) -> dict:
    return node(
        name, H100, 8, labels={MARK: "x", ZONE: "za", constants.LABEL_TOPOLOGY_PROFILE: profile, **labels}
    )


def instance_type() -> dict:
    return {
        "metadata": {"name": POOL, "resourceVersion": "1"},
        "spec": {
            "acceleratable": True,
            "acceleratorGroup": "nvidia-h100-80gb-hbm3",
            "generalGroup": "generic",
            "os": "linux",
            "arch": "amd64",
        },
    }


def flavors_of(nodes: list[dict]) -> list[dict]:
    return [render.render_flavor(g) for g in render.flavor_groups(nodes).values()]


def queue_on(flavors: list[dict], reserving: int, reserved: dict[str, int]) -> dict:
    topologies = {f"gpustack-{p}" for p in (RACKED, ZONED, HOSTNAME)}
    body = plan_queue(POOL, instance_type(), None, flavors, topologies, set(), QueueSettings()).apply
    assert body is not None
    return kueue_wrote(body, reserving=reserving, flavors=reserved)


def workload(name: str, queue: str = POOL, *pods: str, finished: bool = False, reserved: bool = True) -> dict:
    conditions = [{"type": "QuotaReserved", "status": "True" if reserved else "False"}]
    if finished:
        conditions.append({"type": "Finished", "status": "True"})
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "ownerReferences": [{"kind": "Pod", "name": p, "uid": p} for p in pods],
        },
        "status": {
            "admission": {"clusterQueue": queue, "podSetAssignments": [{"flavors": {"x": OLD}}]},
            "conditions": conditions,
        },
    }


def instance(name: str, type_: str = POOL, stop: bool = False) -> dict:
    return {"metadata": {"name": name, "namespace": "team-a"}, "spec": {"type": type_, "stop": stop}}


WORKLOADS = [
    workload("w-running", POOL, "md-0", "md-1"),
    workload("w-done", POOL, "old-pod", finished=True),  # finished: holds nothing
    workload("w-pending", POOL, reserved=False),  # waits: nothing to evict
    workload("w-elsewhere", "gpustack--generic-linux-amd64", "cpu-pod"),  # another queue
]
INSTANCES = [
    instance("sliced-demo"),
    instance("already-stopped", stop=True),
    instance("cpu-box", "gpustack--generic-linux-amd64"),
]


def racked_world(reserving: int = 1) -> tuple[list[dict], list[dict], dict]:
    nodes = [h100("n1", RACKED, **{RACK: "r1"}), h100("n2", RACKED, **{RACK: "r2"})]
    flavors = flavors_of(nodes)
    queue = queue_on(flavors, reserving, {OLD: reserving * 8 * M})
    return nodes, flavors, queue


def unracked(nodes: list[dict]) -> list[dict]:
    """The administrator removed the rack label; the nodes still carry the racked profile."""
    out = copy.deepcopy(nodes)
    for n in out:
        del n["metadata"]["labels"][RACK]
    return out


def report(src: dict, nodes: list[dict], flavors: list[dict], queue: dict, **kw: object) -> ChangeReport:
    status = kw.pop("status", src["status"])
    before = kw.pop("before", {})
    after = kw.pop("after", {})
    return plan_change(
        src,
        status,  # type: ignore[arg-type]
        nodes,
        [src],
        before,  # type: ignore[arg-type]
        after,  # type: ignore[arg-type]
        flavors=flavors,
        queues=[queue],
        workloads=kw.pop("workloads", WORKLOADS),  # type: ignore[arg-type]
        instances=kw.pop("instances", INSTANCES),  # type: ignore[arg-type]
        policy=kw.pop("policy", "HoldAndDrain"),  # type: ignore[arg-type]
    )


def test_before_the_swap_it_names_what_hold_and_drain_evicts_and_the_instances_it_stops() -> None:
    nodes, flavors, queue = racked_world()
    got = report(source(), unracked(nodes), flavors, queue)
    assert got.moves == (f"{RACKED} -> {ZONED}",) and got.nodes == ("n1", "n2")
    assert got.queues == (POOL,) and got.policy == "HoldAndDrain" and got.evicts
    assert got.workloads == ("team-a/w-running",)
    assert got.pods == ("team-a/md-0", "team-a/md-1")
    assert got.instances == ("team-a/sliced-demo",)  # not the stopped one, not another type's
    message = got.message()
    assert message == (
        f"profile {RACKED} -> {ZONED} on 2 node(s) (n1, n2); ClusterQueue(s) {POOL} drain (HoldAndDrain) "
        "before the swap: evicts 1 Workload(s) (team-a/w-running) and 2 Pod(s) (team-a/md-0, team-a/md-1); "
        "the Instance StopPolicy stops 1 Instance(s) (team-a/sliced-demo) (restart by clearing spec.stop)"
    )
    assert got.status() == {
        "profiles": [f"{RACKED} -> {ZONED}"],
        "nodes": 2,
        "stopPolicy": "HoldAndDrain",
        "clusterQueues": [POOL],
        "workloads": 1,
        "pods": 2,
        "instances": 1,
        "names": [
            "Workload team-a/w-running",
            "Pod team-a/md-0",
            "Pod team-a/md-1",
            "Instance team-a/sliced-demo",
        ],
    }


def test_with_the_hold_setting_nothing_is_evicted_or_stopped() -> None:
    nodes, flavors, queue = racked_world()
    got = report(source(), unracked(nodes), flavors, queue, policy="Hold")
    assert got.queues == (POOL,) and got.policy == "Hold" and not got.evicts
    assert got.workloads == ("team-a/w-running",) and got.instances == ()
    assert "hold (Hold) until their admitted work ends" in got.message()
    assert "no Instance is stopped" in got.message() and "evicts" not in got.message()


def test_an_idle_queue_swaps_in_place() -> None:
    nodes, flavors, queue = racked_world(reserving=0)
    got = report(source(), unracked(nodes), flavors, queue)
    assert got.queues == () and got.in_place == (POOL,) and not got.evicts
    assert got.workloads == () and got.instances == ()
    assert got.message() == (
        f"profile {RACKED} -> {ZONED} on 2 node(s) (n1, n2); the swap applies in place: nothing is evicted or stopped"
    )


def test_while_the_change_is_under_way_the_report_stands_until_the_queue_swapped() -> None:
    nodes, flavors, queue = racked_world()
    moved = unracked(nodes)
    for n in moved:
        n["metadata"]["labels"][constants.LABEL_TOPOLOGY_PROFILE] = ZONED  # the profile followed
    retiring = copy.deepcopy(flavors)
    for f in retiring:
        f["metadata"]["labels"][constants.LABEL_FLAVOR_RETIRING] = "true"
    now = [*retiring, *flavors_of(moved)]
    draining = copy.deepcopy(queue)
    draining["spec"]["stopPolicy"] = "Hold"  # held under the Setting chosen when it started
    draining["metadata"]["annotations"][constants.ANNOTATION_PROFILE_CHANGE] = f"{RACKED} -> {ZONED}"
    got = report(source(), moved, now, draining)  # the Setting reads HoldAndDrain now
    assert got.nodes == () and got.moves == (f"{RACKED} -> {ZONED}",)
    assert got.queues == (POOL,) and got.policy == "Hold"  # the queue's own hold, not the Setting's
    assert got.workloads == ("team-a/w-running",) and got.instances == ()
    # Swapped: the queue lists the replacement only, nothing is pending.
    swapped = queue_on(flavors_of(moved), 1, {NEW: 8 * M})
    done = report(source(), moved, flavors_of(moved), swapped)
    assert done.empty and done.status() is None and done.message() == "no profile change is pending"


def test_a_source_becoming_ready_or_lost_changes_the_profile_of_the_nodes_it_selects() -> None:
    hostname_only = [h100("n1", HOSTNAME, **{RACK: "r1"}), h100("n2", HOSTNAME, **{RACK: "r2"})]
    flavors = flavors_of(hostname_only)
    hostname_flavor = "gpustack--generic--nvidia-h100-80gb-hbm3-linux-amd64-8d"
    queue = queue_on(flavors, 1, {hostname_flavor: 8 * M})
    # The source is not Ready yet; this pass makes it Ready: the nodes move off hostname-only.
    pending = source(ready="False")
    got = report(pending, hostname_only, flavors, queue, status=source()["status"])
    assert got.moves == (f"{HOSTNAME} -> {RACKED}",) and got.queues == (POOL,)
    assert got.workloads == ("team-a/w-running",)
    # A pass that leaves it not Ready changes nothing.
    assert report(pending, hostname_only, flavors, queue).empty
    # A node the source does not select is never counted.
    outside = copy.deepcopy(hostname_only)
    for n in outside:
        del n["metadata"]["labels"][MARK]
    assert report(pending, outside, flavors, queue, status=source()["status"]).empty


def test_a_snapshot_pass_predicts_from_the_labels_it_publishes() -> None:
    rack = "topology.gpustack.ai/rack"
    src = source(
        configMap={"configMapRef": {"namespace": "x", "name": "inv"}, "key": "k", "maxStaleness": "1h"}
    )
    src["spec"]["levels"] = [ZONE, rack]
    racked = topology_profile([ZONE, rack, HOST])
    nodes = [h100("n1", racked, **{rack: "r1"}), h100("n2", racked, **{rack: "r2"})]
    features = [
        {
            "metadata": {
                "name": f"{n}-topology",
                "labels": {NODE_NAME_LABEL: n, constants.LABEL_TOPOLOGY_SOURCE_UID: "uid-racks"},
            },
            "spec": {"labels": {rack: r}},
        }
        for n, r in (("n1", "r1"), ("n2", "r2"))
    ]
    before = published(features, "uid-racks")
    assert before == {"n1": {rack: "r1"}, "n2": {rack: "r2"}}
    # The new snapshot omits n2 (its feature is deleted) and keeps n1 as it is.
    after = published_after(features, "uid-racks", [], ["n2-topology"])
    assert after == {"n1": {rack: "r1"}}
    flavors = flavors_of(nodes)
    old = f"gpustack--generic--nvidia-h100-80gb-hbm3-linux-amd64-8d-{racked}"
    queue = queue_on(flavors, 1, {old: 8 * M})
    got = report(src, nodes, flavors, queue, before=before, after=after)
    assert got.nodes == ("n2",) and got.moves == (f"{racked} -> {ZONED}",)
    # Only n2 moves: the racked flavor keeps n1, so the queue adds the zoned one in place.
    assert got.queues == () and got.in_place == ()
    # A write replaces a feature whole.
    rewritten = copy.deepcopy(features[1])
    rewritten["spec"]["labels"] = {rack: "r9"}
    assert published_after(features, "uid-racks", [rewritten], []) == {"n1": {rack: "r1"}, "n2": {rack: "r9"}}


def test_long_lists_are_cut_and_counted() -> None:
    nodes, flavors, queue = racked_world()
    many = [workload(f"w{i}", POOL, f"p{i}") for i in range(7)]
    got = report(source(), unracked(nodes), flavors, queue, workloads=many, instances=[])
    assert len(got.workloads) == 7
    assert (
        "7 Workload(s) (team-a/w0, team-a/w1, team-a/w2, team-a/w3, team-a/w4, … (2 more))" in got.message()
    )
    assert "no Instance" in got.message()
    assert got.status()["names"][:5] == [f"Workload team-a/w{i}" for i in range(5)]
    assert len(got.status()["names"]) == 10


def test_an_event_is_news_only_when_the_change_costs_something_it_did_not_name() -> None:
    nodes, flavors, queue = racked_world()
    first = report(source(), unracked(nodes), flavors, queue)
    assert first.told_by(first.told())
    # The nodes moved (fewer pending) and the workload ended: nothing new to tell.
    moved = unracked(nodes)
    for n in moved:
        n["metadata"]["labels"][constants.LABEL_TOPOLOGY_PROFILE] = ZONED
    later = report(source(), moved, [*flavors, *flavors_of(moved)], queue, workloads=[], instances=[])
    assert later.nodes == () and later.told_by(first.told())
    # A workload admitted since, or another policy, is news.
    more = report(
        source(), unracked(nodes), flavors, queue, workloads=[*WORKLOADS, workload("w-new", POOL, "p")]
    )
    assert not more.told_by(first.told())
    assert not report(source(), unracked(nodes), flavors, queue, policy="Hold").told_by(first.told())
