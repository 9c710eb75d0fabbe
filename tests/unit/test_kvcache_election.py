"""The leader election of a managed KVCacheBackend (kv-cache spec §5.1 step 4, §6.1 ElectionObserved):
what it renders on the leader, the members and the accounts, the 1→N step, and how the Lease is judged."""

from __future__ import annotations

import copy

from api import kvcache as kv
from controllers.kvcache import election_render as er
from controllers.kvcache import leader_render as lr
from controllers.kvcache import members_render as mr
from tests.webhooks.kvcache_objects import backend

NS = "gpustack-system"
IMAGE = "gpustack/mirrored-mooncake:0.3.13.post1-cpu"
ELECTION = [
    "-enable_ha=true",
    "-ha_backend_type=k8s",
    "-ha_backend_connstring=gpustack-system/mooncake-dram-leader",
    "-rpc_address=$(POD_IP)",
    "-cluster_id=mooncake-dram-leader",
    "-pod_name=$(POD_NAME)",
    "-pod_namespace=$(POD_NAMESPACE)",
]


def managed(**leader):
    obj = backend()
    obj["spec"]["connection"]["managed"]["leader"] = {"replicas": 1, "multiTenancy": True, **leader}
    return obj


def leader_container(deployment):
    return deployment["spec"]["template"]["spec"]["containers"][0]


def member_env(obj):
    (ds,) = mr.member_daemonsets(obj, NS, IMAGE)
    return {e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}


def stamp(obj):
    (ds,) = mr.member_daemonsets(obj, NS, IMAGE)
    return ds["spec"]["template"]["metadata"]["annotations"][kv.ANNOTATION_POD_SPEC_HASH]


def test_the_default_elects_even_at_one_replica() -> None:
    obj = managed()  # electionBackend unset: the schema's default, Kubernetes
    deployment = lr.leader_deployment(obj, NS, IMAGE)
    leader = leader_container(deployment)
    assert leader["args"][-len(ELECTION) :] == ELECTION
    assert leader["env"] == [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "mooncake-dram-leader"
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    (ds,) = mr.member_daemonsets(obj, NS, IMAGE)
    assert ds["spec"]["template"]["spec"]["serviceAccountName"] == "mooncake-dram-member"
    assert member_env(obj)["MOONCAKE_MASTER"] == "mooncake-dram-leader.gpustack-system.svc:50051"


def test_extra_args_still_come_last() -> None:
    args = leader_container(lr.leader_deployment(managed(extraArgs=["-eviction_ratio=0.1"]), NS, IMAGE))[
        "args"
    ]
    assert args[-1] == "-eviction_ratio=0.1" and args[-1 - len(ELECTION) : -1] == ELECTION


def test_accounts_per_role() -> None:
    objects = er.accounts(managed(), NS)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("ServiceAccount", "mooncake-dram-leader"),
        ("Role", "mooncake-dram-leader"),
        ("RoleBinding", "mooncake-dram-leader"),
        ("ServiceAccount", "mooncake-dram-member"),
        ("Role", "mooncake-dram-member"),
        ("RoleBinding", "mooncake-dram-member"),
    ]
    leader_role, member_role = objects[1], objects[4]
    grants = {(r["apiGroups"][0], r["resources"][0], v) for r in leader_role["rules"] for v in r["verbs"]}
    assert grants == {
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "update"),
        ("", "pods", "patch"),
    }
    assert member_role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["mooncake-dram-leader"],
            "verbs": ["get"],
        }
    ]
    binding = objects[2]
    assert binding["roleRef"]["name"] == "mooncake-dram-leader"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "mooncake-dram-leader", "namespace": NS}
    ]
    assert all(
        o["metadata"]["annotations"] == {kv.ANNOTATION_OWNED_BY_BACKEND: "mooncake-dram"} for o in objects
    )


def test_none_renders_no_election() -> None:
    obj = managed(electionBackend="None", memberAddressing="Lease")
    assert er.accounts(obj, NS) == []
    leader = leader_container(lr.leader_deployment(obj, NS, IMAGE))
    assert not [
        a for a in leader["args"] if a.startswith(("-enable_ha", "-pod_", "-rpc_address", "-cluster_id"))
    ]
    (ds,) = mr.member_daemonsets(obj, NS, IMAGE)
    assert "serviceAccountName" not in ds["spec"]["template"]["spec"]
    # Without an election, Lease addressing renders the Service address too.
    assert member_env(obj)["MOONCAKE_MASTER"] == "mooncake-dram-leader.gpustack-system.svc:50051"


def test_lease_addressing_under_election() -> None:
    assert (
        member_env(managed(memberAddressing="Lease"))["MOONCAKE_MASTER"]
        == "k8s://gpustack-system/mooncake-dram-leader"
    )
    assert stamp(managed(memberAddressing="Lease")) != stamp(managed())  # rolls members under HA


def test_replicas_add_standbys_without_restarting_anything() -> None:
    one, three = managed(), managed(replicas=3)
    assert stamp(one) == stamp(three)
    before = lr.leader_deployment(one, NS, IMAGE)["spec"]["template"]
    after = lr.leader_deployment(three, NS, IMAGE)["spec"]["template"]
    assert before == after
    # Switching the election on or off changes both templates.
    assert stamp(managed(electionBackend="None")) != stamp(one)
    assert lr.leader_deployment(managed(electionBackend="None"), NS, IMAGE)["spec"]["template"] != before


def live(obj, replicas=None, *, generation=2, observed=2, updated=None, total=None):
    deployment = lr.leader_deployment(obj, NS, IMAGE, replicas)
    count = deployment["spec"]["replicas"]
    deployment["metadata"]["generation"] = generation
    deployment["status"] = {
        "observedGeneration": observed,
        "updatedReplicas": count if updated is None else updated,
        "replicas": count if total is None else total,
    }
    return deployment


def test_one_to_n_on_an_unelected_leader_rolls_first_then_scales() -> None:
    three = managed(replicas=3)
    assert er.leader_replicas(three, None) == (3, None)  # nothing live: one update creates it elected
    unelected = live(managed(electionBackend="None"))
    replicas, hold = er.leader_replicas(three, unelected)
    assert replicas == 1 and "without election" in (hold or "")
    rolling = live(three, 1, generation=3, observed=2)
    replicas, hold = er.leader_replicas(three, rolling)
    assert replicas == 1 and "rolling out" in (hold or "")
    old_pods_left = live(three, 1, updated=1, total=2)
    assert er.leader_replicas(three, old_pods_left)[0] == 1
    assert er.leader_replicas(three, live(three, 1)) == (3, None)
    assert er.leader_replicas(three, live(three, 3, generation=5, observed=4)) == (3, None)  # already scaled
    assert er.leader_replicas(managed(replicas=1), unelected) == (1, None)


def lease(holder="10.0.0.7:50051", renewed="2026-01-01T00:00:00.000000Z", duration=15):
    return {
        "metadata": {"name": "mooncake-dram-leader"},
        "spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": duration},
    }


EPOCH = 1767225600.0  # 2026-01-01T00:00:00Z


def test_election_observed() -> None:
    pods = [{"metadata": {"name": "mooncake-dram-leader-abc"}, "status": {"podIP": "10.0.0.7"}}]
    v = er.election_observed(None, pods, EPOCH)
    assert (v.status, v.reason) == ("False", "LeaseNotFound")
    v = er.election_observed(lease(holder=""), pods, EPOCH)
    assert (v.status, v.reason) == ("False", "NoHolder")
    v = er.election_observed(lease(), pods, EPOCH + 10)
    assert (v.status, v.reason) == ("True", "Elected") and "Pod mooncake-dram-leader-abc" in v.message
    v = er.election_observed(lease(holder="10.9.9.9:50051"), pods, EPOCH + 10)
    assert v.status == "True" and "Pod" not in v.message
    v = er.election_observed(lease(), pods, EPOCH + 16)
    assert (v.status, v.reason) == ("False", "HolderExpired") and "10.0.0.7:50051" in v.message
    unrenewed = copy.deepcopy(lease())
    del unrenewed["spec"]["renewTime"], unrenewed["spec"]["leaseDurationSeconds"]
    assert er.election_observed(unrenewed, pods, EPOCH + 10_000).status == "True"
