"""controllers.modeldeployment.joint: the joint admission check's answers (model-deployment.md §7.7,
§12.18) — Ready for anything that is not a multi-group deployment, Ready only once every group holds
a reservation, Pending otherwise, never Retry, and requeued (never opened) on doubt."""

from __future__ import annotations

import pytest

from api import constants
from controllers.modeldeployment import joint, names
from tests.unit.md_fixtures import NS, deployment, pair, role


def wl(name, owners=("p0",), *, reserved=True, check=True, **status):
    conditions = [{"type": "QuotaReserved", "status": "True" if reserved else "False"}]
    conditions += [{"type": k, "status": "True"} for k, v in status.items() if v]
    body = {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": "u-" + name,
            "resourceVersion": "5",
            "ownerReferences": [{"kind": "Pod", "name": o, "uid": "x"} for o in owners],
        },
        "spec": {"active": True},
        "status": {"conditions": conditions, "admission": {"clusterQueue": "q"} if reserved else None},
    }
    if check:
        body["status"]["admissionChecks"] = [{"name": joint.CHECK, "state": "Pending"}]
    return body


def md_pod(md="qwen", group="g"):
    return {
        "metadata": {
            "name": "p0",
            "namespace": NS,
            "labels": {
                constants.LABEL_APP_NAME: "model-deployment",
                constants.LABEL_APP_INSTANCE: md,
                constants.KUEUE_POD_GROUP_NAME: group,
            },
        }
    }


def decide(workload, pods, deployments, workloads):
    return joint.decide(
        workload,
        lambda n, ns: pods.get(n),
        lambda n, ns: deployments.get(n),
        lambda n, ns: workloads.get(n),
    )


def group(role_name, k):
    return names.pod_group_name(NS, "qwen", role_name, k)


def test_what_needs_an_answer() -> None:
    assert joint.needs_answer(wl("a"))
    assert not joint.needs_answer(wl("a", reserved=False))
    assert not joint.needs_answer(wl("a", check=False))
    assert not joint.needs_answer(wl("a", Evicted=True))
    assert not joint.needs_answer(wl("a", Finished=True))
    assert not joint.needs_answer(wl("a", Admitted=True))
    inactive = wl("a")
    inactive["spec"]["active"] = False
    assert not joint.needs_answer(inactive)


def test_anything_not_a_multi_group_deployment_is_ready() -> None:
    plain = {"metadata": {"name": "p0", "namespace": NS, "labels": {}}}
    assert decide(wl("a"), {"p0": plain}, {}, {}).state == joint.READY
    one = deployment(role(replicas=1))
    assert decide(wl("a"), {"p0": md_pod()}, {"qwen": one}, {}).state == joint.READY


def test_multi_group_is_held_until_every_group_reserves() -> None:
    md = pair()  # 2 prefill + 2 decode replicas: four groups
    everyone = {group(r, k): wl(group(r, k)) for r in ("prefill", "decode") for k in range(2)}
    missing = dict(everyone)
    del missing[group("decode", 1)]
    verdict = decide(everyone[group("prefill", 0)], {"p0": md_pod()}, {"qwen": md}, missing)
    assert (
        verdict.state == joint.PENDING and "decode/r1" in verdict.message and "prefill" not in verdict.message
    )
    unreserved = dict(everyone)
    unreserved[group("decode", 1)] = wl(group("decode", 1), reserved=False)
    assert (
        decide(everyone[group("prefill", 0)], {"p0": md_pod()}, {"qwen": md}, unreserved).state
        == joint.PENDING
    )
    verdict = decide(everyone[group("prefill", 0)], {"p0": md_pod()}, {"qwen": md}, everyone)
    assert verdict.state == joint.READY


def test_doubt_requeues() -> None:
    with pytest.raises(joint.Unresolved):
        decide(wl("a"), {}, {}, {})
    with pytest.raises(joint.Unresolved):
        decide(wl("a"), {"p0": md_pod()}, {}, {})


def test_the_patch_is_written_only_on_change() -> None:
    workload = wl("a")
    body = joint.status_patch(workload, joint.Verdict(joint.READY, "ok"), "t")
    assert body is not None
    entry = body["status"]["admissionChecks"][0]
    assert entry == {"name": joint.CHECK, "state": "Ready", "message": "ok", "lastTransitionTime": "t"}
    assert body["metadata"]["resourceVersion"] == "5" and body["metadata"]["uid"] == "u-a"
    workload["status"]["admissionChecks"] = [entry]
    assert joint.status_patch(workload, joint.Verdict(joint.READY, "ok"), "later") is None


def test_a_set_held_for_half_an_hour_is_parked() -> None:
    md = pair()
    everyone = {group(r, k): wl(group(r, k)) for r in ("prefill", "decode") for k in range(2)}
    everyone[group("decode", 1)] = wl(group("decode", 1), reserved=False)
    held = everyone[group("prefill", 0)]
    verdict = decide(held, {"p0": md_pod()}, {"qwen": md}, everyone)
    assert verdict.state == joint.PENDING and verdict.complete
    held["status"]["admissionChecks"] = [
        {"name": joint.CHECK, "state": "Pending", "lastTransitionTime": "2025-01-01T00:00:00Z"}
    ]
    start = joint._seconds("2025-01-01T00:00:00Z")
    assert start is not None
    assert joint.park_in(held, verdict, start + 60) == joint.PARK_AFTER_SECONDS - 60
    assert joint.park_in(held, verdict, start + 3600) == 0.0
    # A set still missing a group's Workload is not assembled: it is held, never parked.
    del everyone[group("decode", 1)]
    incomplete = decide(held, {"p0": md_pod()}, {"qwen": md}, everyone)
    assert joint.park_in(held, incomplete, start + 3600) is None
