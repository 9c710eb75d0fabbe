"""controllers.topology.source_plan: one pass of a TopologySource, purely (topology spec B.1, B.3).

Times are handed in (epoch seconds), so expiry is tested without a clock."""

from __future__ import annotations

import copy
import json

from api import constants
from api.naming import fnv1a64
from controllers.topology import source_plan as sp

ZONE, RACK = "topology.kubernetes.io/zone", "topology.gpustack.ai/rack"
G_ZONE = "topology.gpustack.ai/zone"
HOST = constants.LABEL_HOSTNAME
T0 = 1_800_000_000.0  # an arbitrary epoch second


def node(name: str, **labels: str) -> dict:
    return {"kind": "Node", "metadata": {"name": name, "labels": {HOST: name, **labels}}}


NODES = [node("a", **{ZONE: "z1"}), node("b", **{ZONE: "z1"}), node("c", **{ZONE: "z2"})]


def source(arm: str = "configMap", levels: list[str] | None = None, **extra: object) -> dict:
    spec: dict = {"nodeSelector": {}, "levels": levels or [ZONE, RACK]}
    if arm == "nodeLabels":
        spec["nodeLabels"] = {}
    elif arm == "configMap":
        spec["configMap"] = {
            "configMapRef": {"namespace": "gpustack-system", "name": "inv"},
            "key": "snapshot.yaml",
            "maxStaleness": "10m",
        }
    else:
        spec["webhook"] = {
            "url": "https://inv.example/snapshot",
            "pollInterval": "1m",
            "timeout": "10s",
            "maxStaleness": "5m",
            "bearerTokenSecretRef": {"namespace": "gpustack-system", "name": "t"},
        }
    spec.update(extra)
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "TopologySource",
        "metadata": {
            "name": f"src-{arm}",
            "uid": f"uid-{arm}",
            "generation": 3,
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": spec,
    }


def snap(nodes: dict, revision: str = "r1") -> bytes:
    return json.dumps(
        {"apiVersion": "topology.gpustack.ai/v1alpha1", "revision": revision, "nodes": nodes}
    ).encode()


GOOD = {"a": {ZONE: "z1", RACK: "r1"}, "b": {RACK: "r1"}, "c": {RACK: "r2"}}


def cond(plan: sp.SourcePlan, kind: str) -> dict:
    return next(c for c in plan.status["conditions"] if c["type"] == kind)


def stored(src: dict, plan: sp.SourcePlan) -> dict:
    """The source once the plan's status is written."""
    out = copy.deepcopy(src)
    out["status"] = plan.status
    return out


def as_features(plan: sp.SourcePlan) -> list[dict]:
    out = []
    for i, body in enumerate(plan.writes):
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = str(10 + i)
        out.append(body)
    return out


# --- nodeLabels ----------------------------------------------------------------------------------


def test_node_labels_validates_and_never_writes() -> None:
    src = source("nodeLabels")
    leftover = {
        "metadata": {
            "name": "old",
            "namespace": "gpustack-system",
            "labels": {constants.LABEL_TOPOLOGY_SOURCE_UID: "uid-nodeLabels"},
        }
    }
    plan = sp.plan_node_labels(src, NODES, [leftover], T0)
    assert plan.writes == [] and plan.deletes == ["old"]  # an earlier arm's NodeFeature goes
    status = plan.status
    assert status["sourceKind"] == "NodeLabels" and status["selectedNodes"] == 3
    assert status["lastSuccessfulRevision"].startswith("fnv64-") and status["observedGeneration"] == 3
    assert cond(plan, "Ready")["status"] == "True" and cond(plan, "Valid")["status"] == "True"
    assert cond(plan, "OwnershipConflict") == {
        **cond(plan, "OwnershipConflict"),
        "status": "False",
        "reason": "ReadOnly",
    }
    # Same labels again: same revision, nothing to rewrite.
    again = sp.plan_node_labels(stored(src, plan), NODES, [], T0 + 60)
    assert not sp.status_differs(stored(src, again), again.status)
    assert again.status["mutatedNodes"] == 0 and again.deletes == []
    assert again.status["lastSuccessfulRevision"] == status["lastSuccessfulRevision"]
    assert again.status["lastSuccessfulRefreshTime"] == status["lastSuccessfulRefreshTime"]
    # A value change moves the revision.
    moved = [node("a", **{ZONE: "z3"}), *NODES[1:]]
    assert (
        sp.plan_node_labels(stored(src, plan), moved, [], T0).status["lastSuccessfulRevision"]
        != status["lastSuccessfulRevision"]
    )


def test_node_labels_that_are_no_hierarchy_make_the_source_not_ready() -> None:
    src = source("nodeLabels", levels=[G_ZONE, RACK])
    nodes = [
        node("a", **{G_ZONE: "z1", RACK: "r1"}),
        node("b", **{G_ZONE: "z2", RACK: "r1"}),
        node("c", **{RACK: "r9"}),
    ]
    plan = sp.plan_node_labels(src, nodes, [], T0)
    ready = cond(plan, "Ready")
    assert ready["status"] == "False" and ready["reason"] == "Invalid"
    assert "node b" in ready["message"] and "node c" in ready["message"] and RACK in ready["message"]
    assert cond(plan, "Valid")["status"] == "False" and "lastSuccessfulRevision" not in plan.status


def test_node_labels_respect_the_selector() -> None:
    src = source("nodeLabels", nodeSelector={"matchLabels": {ZONE: "z2"}})
    assert sp.plan_node_labels(src, NODES, [], T0).status["selectedNodes"] == 1


# --- snapshots -----------------------------------------------------------------------------------


def test_a_valid_snapshot_is_one_node_feature_per_described_node() -> None:
    src = source()
    plan = sp.plan_snapshot(src, NODES, [], [src], sp.Read(T0, raw=snap(GOOD)), None, T0)
    assert [w["spec"]["labels"] for w in plan.writes] == [{RACK: "r1"}, {RACK: "r1"}, {RACK: "r2"}]
    first = plan.writes[0]
    meta = first["metadata"]
    assert first["apiVersion"] == "nfd.k8s-sigs.io/v1alpha1" and meta["namespace"] == "gpustack-system"
    assert meta["labels"]["nfd.node.kubernetes.io/node-name"] == "a"
    assert meta["labels"][constants.LABEL_TOPOLOGY_SOURCE_UID] == "uid-configMap"
    assert meta["ownerReferences"][0]["uid"] == "uid-configMap"
    assert ZONE not in first["spec"]["labels"]  # a standard parent is checked, never written
    status = plan.status
    assert status["sourceKind"] == "ConfigMap" and status["lastSuccessfulRevision"] == "r1"
    assert status["lastSuccessfulRefreshTime"] == sp.stamp(T0)
    assert (status["selectedNodes"], status["mutatedNodes"], status["conflictedNodes"]) == (3, 3, 0)
    assert cond(plan, "Ready")["status"] == "True" and cond(plan, "Valid")["status"] == "True"
    assert plan.memory is not None and plan.memory.revision == "r1"
    # The next pass over what was written changes nothing.
    features = as_features(plan)
    again = sp.plan_snapshot(
        stored(src, plan), NODES, features, [src], sp.Read(T0 + 5, raw=snap(GOOD)), plan.memory, T0 + 5
    )
    assert again.writes == [] and again.deletes == [] and again.status["mutatedNodes"] == 0


def test_foreign_edits_are_put_back_and_omitted_nodes_lose_theirs() -> None:
    src = source()
    first = sp.plan_snapshot(src, NODES, [], [src], sp.Read(T0, raw=snap(GOOD)), None, T0)
    features = as_features(first)
    features[0]["spec"]["labels"]["topology.gpustack.ai/extra"] = "x"  # someone edited ours
    smaller = {k: v for k, v in GOOD.items() if k != "c"}
    plan = sp.plan_snapshot(
        stored(src, first),
        NODES,
        features,
        [src],
        sp.Read(T0 + 1, raw=snap(smaller, "r2")),
        first.memory,
        T0 + 1,
    )
    assert [w["metadata"]["name"] for w in plan.writes] == [features[0]["metadata"]["name"]]
    assert (
        plan.writes[0]["spec"]["labels"] == {RACK: "r1"}
        and plan.writes[0]["metadata"]["resourceVersion"] == "10"
    )
    assert plan.deletes == [features[2]["metadata"]["name"]]
    assert plan.status["mutatedNodes"] == 2 and plan.status["lastSuccessfulRevision"] == "r2"


def test_an_invalid_snapshot_changes_nothing_and_keeps_the_last_valid_set_until_stale() -> None:
    src = source()
    first = sp.plan_snapshot(src, NODES, [], [src], sp.Read(T0, raw=snap(GOOD)), None, T0)
    features, memory, src = as_features(first), first.memory, stored(src, first)
    bad = {**GOOD, "ghost": {RACK: "r3"}, "b": {ZONE: "z9", RACK: "r1"}}
    plan = sp.plan_snapshot(
        src, NODES, features, [src], sp.Read(T0 + 60, raw=snap(bad, "r2")), memory, T0 + 60
    )
    assert plan.writes == [] and plan.deletes == []
    valid = cond(plan, "Valid")
    assert valid["status"] == "False" and valid["reason"] == "Invalid"
    assert (
        "node ghost" in valid["message"]
        and f"node b, {ZONE}" in valid["message"]
        and "'r2'" in valid["message"]
    )
    ready = cond(plan, "Ready")
    assert ready["status"] == "True" and ready["reason"] == "ServingLastValid"
    assert plan.status["lastSuccessfulRevision"] == "r1"
    # A watched ConfigMap was valid until this change: the set stays maxStaleness (10m) from now.
    assert plan.requeue == 600
    later = sp.plan_snapshot(
        stored(src, plan),
        NODES,
        features,
        [src],
        sp.Read(T0 + 659, raw=snap(bad, "r2")),
        plan.memory,
        T0 + 659,
    )
    assert later.deletes == [] and cond(later, "Ready")["status"] == "True" and later.requeue == 1
    expired = sp.plan_snapshot(
        stored(src, later),
        NODES,
        features,
        [src],
        sp.Read(T0 + 661, raw=snap(bad, "r2")),
        later.memory,
        T0 + 661,
    )
    assert sorted(expired.deletes) == sorted(f["metadata"]["name"] for f in features)
    assert cond(expired, "Ready")["reason"] == "Expired" and cond(expired, "Ready")["status"] == "False"
    assert expired.memory is None


def test_a_webhook_read_failure_keeps_the_set_until_max_staleness_after_the_last_fetch() -> None:
    src = source("webhook")
    first = sp.plan_snapshot(src, NODES, [], [src], sp.Read(T0, raw=snap(GOOD)), None, T0)
    assert first.requeue == 60  # the next poll
    features, src = as_features(first), stored(src, first)
    failed = sp.Read(T0 + 60, error="GET https://inv.example/snapshot: answered 302 (a redirect)")
    plan = sp.plan_snapshot(src, NODES, features, [src], failed, first.memory, T0 + 60)
    assert plan.writes == [] and plan.deletes == []
    assert cond(plan, "Valid")["status"] == "Unknown" and cond(plan, "Valid")["reason"] == "ReadFailed"
    assert "302" in cond(plan, "Ready")["message"] and cond(plan, "Ready")["status"] == "True"
    # Kept until T0 + 5m (the last good fetch plus maxStaleness), polled meanwhile.
    assert plan.requeue == 60
    gone = sp.plan_snapshot(
        stored(src, plan), NODES, features, [src], sp.Read(T0 + 300, error="timed out"), plan.memory, T0 + 300
    )
    assert len(gone.deletes) == 3 and cond(gone, "Ready")["reason"] == "Expired"


def test_after_a_restart_a_failed_read_leaves_the_published_set_alone() -> None:
    src = source("webhook")
    first = sp.plan_snapshot(src, NODES, [], [src], sp.Read(T0, raw=snap(GOOD)), None, T0)
    features, src = as_features(first), stored(src, first)
    features[0]["spec"]["labels"][RACK] = "edited"  # unknown to a fresh worker: not put back blind
    plan = sp.plan_snapshot(src, NODES, features, [src], sp.Read(T0 + 30, error="refused"), None, T0 + 30)
    assert plan.writes == [] and plan.deletes == [] and cond(plan, "Ready")["status"] == "True"
    late = sp.plan_snapshot(src, NODES, features, [src], sp.Read(T0 + 301, error="refused"), None, T0 + 301)
    assert len(late.deletes) == 3


def test_nothing_valid_ever_read_is_not_ready_and_writes_nothing() -> None:
    src = source()
    plan = sp.plan_snapshot(
        src, NODES, [], [src], sp.Read(T0, error="ConfigMap gpustack-system/inv does not exist"), None, T0
    )
    assert plan.writes == [] and plan.deletes == []
    ready = cond(plan, "Ready")
    assert (
        ready["status"] == "False"
        and ready["reason"] == "NoValidSnapshot"
        and "does not exist" in ready["message"]
    )


def test_a_node_another_writer_publishes_is_a_conflict() -> None:
    older = source("webhook")
    older["metadata"].update(name="older", uid="uid-older", creationTimestamp="2025-01-01T00:00:00Z")
    mine = source()
    theirs = sp.render_feature(older, "a", {RACK: "r7"})
    younger = source("webhook")
    younger["metadata"].update(name="younger", uid="uid-younger", creationTimestamp="2027-01-01T00:00:00Z")
    yielding = sp.render_feature(younger, "b", {RACK: "r1"})
    plan = sp.plan_snapshot(
        mine, NODES, [theirs, yielding], [older, mine, younger], sp.Read(T0, raw=snap(GOOD)), None, T0
    )
    assert sorted(w["metadata"]["labels"]["nfd.node.kubernetes.io/node-name"] for w in plan.writes) == [
        "b",
        "c",
    ]
    conflict = cond(plan, "OwnershipConflict")
    assert conflict["status"] == "True" and "node a" in conflict["message"] and "older" in conflict["message"]
    assert cond(plan, "Ready")["status"] == "False" and cond(plan, "Ready")["reason"] == "Conflict"
    assert plan.status["conflictedNodes"] == 1


def test_nodes_omitted_or_described_empty_get_no_node_feature() -> None:
    src = source()
    plan = sp.plan_snapshot(
        src, NODES, [], [src], sp.Read(T0, raw=snap({"a": {ZONE: "z1"}, "b": {}})), None, T0
    )
    assert plan.writes == [] and cond(plan, "Ready")["status"] == "True"


def test_feature_names_fit_an_object_name() -> None:
    assert sp.feature_name("a", "uid") == f"a-topology-{fnv1a64('uid')[:10]}"
    long = sp.feature_name("n" * 253, "uid")
    assert len(long) <= 253 and long.startswith("topology-")
