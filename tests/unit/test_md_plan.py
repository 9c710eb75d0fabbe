"""controllers.modeldeployment.plan: scale, replacement and rollout against model-deployment.md
§9.2–§9.4 and §12.12 — one replica per role per pass, only with the whole role admitted, recreate
only an empty ordinal, the Workload deleted with the Pods, highest ordinals shed first."""

from __future__ import annotations

import copy
import itertools

from api import constants
from controllers.modeldeployment import labels, names
from controllers.modeldeployment import plan as planner
from controllers.modeldeployment.render import render_role, stamp
from tests.unit.md_fixtures import NS, context, deployment, role

_uid = itertools.count()


def inputs(obj):
    ctx = context(obj)
    out = []
    for r in ctx.md.roles:
        template = render_role(ctx, r)

        def stamped(k, m, _t=template):
            return stamp(ctx, _t, k, m)

        out.append(
            planner.RoleInput(
                name=r.name,
                desired=r.replicas,
                size=r.size,
                stamp=stamped,
                expected=lambda k, m, _s=stamped: labels.live_hash(_s(k, m)),
                group_name=lambda k, _r=r.name: names.pod_group_name(NS, "qwen", _r, k),
            )
        )
    return out


def live(pod, *, ready=True, leaving=False, phase="Running", reason=None):
    pod = copy.deepcopy(pod)
    meta = pod["metadata"]
    n = next(_uid)
    meta.setdefault("name", meta.get("generateName", "p-") + f"x{n}")
    meta["uid"] = f"uid-{n}"
    if leaving:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if reason:
        status["reason"] = reason
    pod["status"] = status
    return pod


def workload(pods, *, admitted=True, reserved=True, leaving=False):
    group = pods[0]["metadata"]["labels"][constants.KUEUE_POD_GROUP_NAME]
    meta = {
        "name": group,
        "namespace": NS,
        "ownerReferences": [
            {"kind": "Pod", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]} for p in pods
        ],
    }
    if leaving:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    conditions = [
        {"type": "QuotaReserved", "status": "True" if reserved else "False"},
        {"type": "Admitted", "status": "True" if admitted else "False"},
    ]
    return {"metadata": meta, "spec": {"active": True}, "status": {"conditions": conditions, "admission": {}}}


def replica(obj, role_name, k, size=1, **kw):
    ins = {i.name: i for i in inputs(obj)}
    pods = [live(ins[role_name].stamp(k, m), **kw) for m in range(size)]
    return pods


def test_a_fresh_deployment_creates_every_member_of_every_ordinal() -> None:
    obj = deployment(role(replicas=2, size=3))
    result = planner.plan(inputs(obj), [], [])
    assert [p["metadata"]["name"] for p in result.creates] == [
        f"qwen-server-r{k}-m{m}" for k in range(2) for m in range(3)
    ]
    assert not result.pod_deletes and not result.workload_deletes
    assert result.accounts["server"].missing == 2


def test_converged_is_no_write() -> None:
    obj = deployment(role(replicas=2, size=2))
    pods = replica(obj, "server", 0, 2) + replica(obj, "server", 1, 2)
    wls = [workload(pods[:2]), workload(pods[2:])]
    result = planner.plan(inputs(obj), pods, wls)
    assert result.writes == 0
    account = result.accounts["server"]
    assert (account.ready, account.quota_reserved, account.present, account.outdated) == (2, 2, 2, 0)


def test_scale_down_sheds_highest_ordinals_with_their_workloads() -> None:
    obj = deployment(role(replicas=3))
    groups = [replica(obj, "server", k) for k in range(3)]
    pods = [p for g in groups for p in g]
    wls = [workload(g) for g in groups]
    obj["spec"]["roles"][0]["replicas"] = 1
    result = planner.plan(inputs(obj), pods, wls)
    assert [p["metadata"]["labels"][constants.LABEL_POD_ORDINAL] for p in result.pod_deletes] == ["2", "1"]
    assert [w["metadata"]["name"] for w in result.workload_deletes] == [
        names.pod_group_name(NS, "qwen", "server", 2),
        names.pod_group_name(NS, "qwen", "server", 1),
    ]
    assert not result.creates


def test_a_deleted_pod_is_replaced_only_once_the_ordinal_is_empty() -> None:
    obj = deployment(role(replicas=2))
    gone = replica(obj, "server", 0, leaving=True, ready=False)
    kept = replica(obj, "server", 1)
    wl0, wl1 = workload(gone), workload(kept)
    first = planner.plan(inputs(obj), gone + kept, [wl0, wl1])
    assert first.workload_deletes == [wl0]  # releases Kueue's finalizer on the leaving Pod
    assert not first.creates and not first.pod_deletes  # never beside a member still listed
    second = planner.plan(inputs(obj), kept, [wl1])
    assert (
        len(second.creates) == 1
        and second.creates[0]["metadata"]["labels"][constants.LABEL_POD_ORDINAL] == "0"
    )
    assert "name" not in second.creates[0]["metadata"]  # a new generated name


def test_a_broken_instance_is_replaced_whole() -> None:
    obj = deployment(role(replicas=1, size=3))
    pods = replica(obj, "server", 0, 3)
    wl = workload(pods)
    result = planner.plan(inputs(obj), [pods[0], pods[2]], [wl])
    assert {p["metadata"]["name"] for p in result.pod_deletes} == {"qwen-server-r0-m0", "qwen-server-r0-m2"}
    assert result.workload_deletes == [wl] and not result.creates
    evicted = replica(obj, "server", 0, 3)
    evicted[1] = live(inputs(obj)[0].stamp(0, 1), phase="Failed", reason="Evicted", ready=False)
    result = planner.plan(inputs(obj), evicted, [workload(evicted)])
    assert len(result.pod_deletes) == 3


def test_a_not_ready_pod_keeps_its_ordinal() -> None:
    obj = deployment(role(replicas=1))
    pods = replica(obj, "server", 0, ready=False)
    result = planner.plan(inputs(obj), pods, [workload(pods)])
    assert result.writes == 0 and result.accounts["server"].ready == 0


def test_a_lingering_workload_of_an_empty_ordinal_goes_before_the_create() -> None:
    obj = deployment(role(replicas=1))
    wl = workload(replica(obj, "server", 0))
    result = planner.plan(inputs(obj), [], [wl])
    assert result.workload_deletes == [wl] and not result.creates


def edited(obj):
    new = copy.deepcopy(obj)
    new["spec"]["roles"][0]["extraArgs"] = ["--max-model-len", "4096"]
    return new


def test_rollout_turns_over_one_replica_per_role_per_pass() -> None:
    obj = deployment(role(replicas=3))
    groups = [replica(obj, "server", k) for k in range(3)]
    pods = [p for g in groups for p in g]
    wls = [workload(g) for g in groups]
    result = planner.plan(inputs(edited(obj)), pods, wls)
    assert (
        len(result.pod_deletes) == 1
        and result.pod_deletes[0]["metadata"]["labels"][constants.LABEL_POD_ORDINAL] == "0"
    )
    assert result.workload_deletes == [wls[0]]
    assert result.accounts["server"].outdated == 3 and result.accounts["server"].rolled


def test_rollout_waits_for_every_replica_to_hold_an_admitted_workload() -> None:
    obj = deployment(role(replicas=2))
    a, b = replica(obj, "server", 0), replica(obj, "server", 1)
    result = planner.plan(inputs(edited(obj)), a + b, [workload(a), workload(b, admitted=False)])
    assert result.writes == 0 and result.accounts["server"].outdated == 2
    missing = planner.plan(inputs(edited(obj)), a, [workload(a)])
    assert not missing.pod_deletes  # ordinal 1 is being recreated: no rollout beside it
    assert len(missing.creates) == 1


def test_rollout_is_held_by_the_features() -> None:
    obj = deployment(role(replicas=1))
    pods = replica(obj, "server", 0)
    result = planner.plan(inputs(edited(obj)), pods, [workload(pods)], hold=True)
    assert result.writes == 0 and result.accounts["server"].held == 1
    # New ordinals proceed during a hold.
    grown = edited(obj)
    grown["spec"]["roles"][0]["replicas"] = 2
    result = planner.plan(inputs(grown), pods, [workload(pods)], hold=True)
    assert len(result.creates) == 1 and not result.pod_deletes


def test_two_roles_roll_independently() -> None:
    obj = deployment(role("a", replicas=2), role("b", replicas=1))
    groups = [replica(obj, "a", 0), replica(obj, "a", 1), replica(obj, "b", 0)]
    pods = [p for g in groups for p in g]
    new = copy.deepcopy(obj)
    for r in new["spec"]["roles"]:
        r["env"] = [{"name": "X", "value": "1"}]
    result = planner.plan(inputs(new), pods, [workload(g) for g in groups])
    assert sorted(p["metadata"]["labels"][constants.LABEL_APP_COMPONENT] for p in result.pod_deletes) == [
        "a",
        "b",
    ]


def test_stray_pods_of_the_deployment_are_removed() -> None:
    obj = deployment(role(replicas=1))
    pods = replica(obj, "server", 0)
    stray = copy.deepcopy(pods[0])
    stray["metadata"]["labels"][constants.LABEL_APP_COMPONENT] = "gone"
    stray["metadata"]["uid"] = "stray"
    result = planner.plan(inputs(obj), [*pods, stray], [workload(pods)])
    assert result.pod_deletes == [stray]
