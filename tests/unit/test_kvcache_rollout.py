"""RolloutComplete, and how the three refinement conditions sit in a backend's status (kv-cache spec
§6.1): they never move the phase, and TierWasEmpty is written once."""

from __future__ import annotations

import copy

from api import kvcache as kv
from controllers.conditions import FALSE, TRUE, Verdict
from controllers.kvcache import admin, backend_status
from controllers.kvcache import leader_render as lr
from controllers.kvcache import members_render as mr
from controllers.kvcache.rollout import rollout_complete
from tests.webhooks.kvcache_objects import backend

NS = "gpustack-system"
IMAGE = "gpustack/mirrored-mooncake:0.3.13.post1-cpu"


def observed(obj, **status):
    live = copy.deepcopy(obj)
    live["metadata"]["generation"] = 4
    live["status"] = {"observedGeneration": 4, **status}
    return live


def rendered(replicas=3):
    obj = backend()
    obj["spec"]["connection"]["managed"]["leader"]["replicas"] = replicas
    return lr.leader_deployment(obj, NS, IMAGE), mr.member_daemonsets(obj, NS, IMAGE)


def member_pod(ds, stale=False):
    template = ds["spec"]["template"]["metadata"]
    digest = "old" if stale else template["annotations"][kv.ANNOTATION_POD_SPEC_HASH]
    return {
        "metadata": {
            "name": "m",
            "labels": dict(template["labels"]),
            "annotations": {kv.ANNOTATION_POD_SPEC_HASH: digest},
        }
    }


def test_healthy_ha_is_complete_with_one_ready_replica() -> None:
    deployment, (ds,) = rendered()
    leader = observed(deployment, replicas=3, updatedReplicas=3, readyReplicas=1)  # 3 desired / 1 ready
    members = observed(ds, desiredNumberScheduled=2, updatedNumberScheduled=2)
    v = rollout_complete(deployment, leader, [ds], [members], [member_pod(ds), member_pod(ds)])
    assert (v.status, v.reason) == (TRUE, "Complete")


def test_replicas_pending() -> None:
    deployment, (ds,) = rendered()
    members = observed(ds, desiredNumberScheduled=2, updatedNumberScheduled=2)
    cases = {
        "not created": (None, [members], []),
        "has not observed": (dict(observed(deployment), status={"observedGeneration": 3}), [members], []),
        "2 of 3 leader replicas": (observed(deployment, replicas=4, updatedReplicas=2), [members], []),
        "older template": (
            observed(deployment, replicas=3, updatedReplicas=3),
            [members],
            [member_pod(ds, True)],
        ),
        "1 of 2 members": (
            observed(deployment, replicas=3, updatedReplicas=3),
            [observed(ds, desiredNumberScheduled=2, updatedNumberScheduled=1)],
            [],
        ),
        "members-0 is not created": (observed(deployment, replicas=3, updatedReplicas=3), [], []),
    }
    for needle, (leader, live_members, pods) in cases.items():
        v = rollout_complete(deployment, leader, [ds], live_members, pods)
        assert (v.status, v.reason) == (FALSE, "ReplicasPending") and needle in v.message, needle
    held = rollout_complete(
        deployment, observed(deployment, replicas=3, updatedReplicas=3), [ds], [members], [], "scaling waits"
    )
    assert held.status == FALSE and held.message.startswith("scaling waits")


def seen_ready():
    return backend_status.Observation(
        health=admin.Health(True, "leader"),
        metrics=admin.Metrics(
            {"master_total_capacity_bytes": float(8 << 30), "master_allocated_bytes": 0.0}, {}
        ),
        segments=[
            admin.Segment("seg-1", "cli-1", "10.0.0.5:12345", "10.0.0.5:15600", "tcp", "OK", 0, 8 << 30)
        ],
    )


def test_the_refinement_conditions_never_move_the_phase_and_the_tier_verdict_is_kept() -> None:
    obj = backend()
    obj["spec"]["connection"]["managed"]["members"][0]["localDisks"] = [{"path": "/var/lib/kvcache"}]
    extra = (
        Verdict(kv.COND_ROLLOUT_COMPLETE, FALSE, kv.REASON_REPLICAS_PENDING, "x"),
        Verdict(kv.COND_ELECTION_OBSERVED, FALSE, kv.REASON_LEASE_NOT_FOUND, "y"),
    )
    dirty = Verdict(kv.COND_TIER_WAS_EMPTY, FALSE, kv.REASON_TIER_NOT_EMPTY, "node-a (3 entries)")
    status = backend_status.derive(
        obj, seen_ready(), endpoints=[], pods=[], stamp="2026-01-01T00:00:00Z", extra=extra, tier=dirty
    )
    kinds = [c["type"] for c in status["conditions"]]
    assert kinds[-3:] == ["RolloutComplete", "ElectionObserved", "TierWasEmpty"]
    plain = backend_status.derive(obj, seen_ready(), endpoints=[], pods=[], stamp="2026-01-01T00:00:00Z")
    assert (
        (status["phase"], status["phaseMessage"]) == (plain["phase"], plain["phaseMessage"]) == ("Ready", "")
    )
    written = status["conditions"][-1]
    obj["status"] = status
    clean = Verdict(kv.COND_TIER_WAS_EMPTY, TRUE, kv.REASON_TIER_EMPTY, "all empty")
    again = backend_status.derive(
        obj, seen_ready(), endpoints=[], pods=[], stamp="2026-02-02T00:00:00Z", extra=extra, tier=clean
    )
    assert again["conditions"][-1] == written  # written once, then left alone
    assert (
        backend_status.derive(obj, seen_ready(), endpoints=[], pods=[], stamp="s")["conditions"][-1]
        == written
    )
    obj["spec"]["connection"]["managed"]["members"][0].pop("localDisks")
    gone = backend_status.derive(obj, seen_ready(), endpoints=[], pods=[], stamp="s")
    assert "TierWasEmpty" not in [c["type"] for c in gone["conditions"]]


def test_a_teardown_past_its_claims_says_what_it_does() -> None:
    obj = backend()
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status = backend_status.derive(
        obj, seen_ready(), endpoints=[], pods=[], stamp="s", deleting="emptying the tier on node-a"
    )
    assert (status["phase"], status["phaseMessage"]) == (kv.PHASE_DELETING, "emptying the tier on node-a")
