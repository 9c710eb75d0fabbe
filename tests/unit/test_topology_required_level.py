"""``roles[].topology.requiredLevel`` rendered by the ModelDeployment controller (topology spec B.5):
the Kueue annotation on every Pod of each replica group, part of the role's render hash only."""

from __future__ import annotations

from api import constants
from controllers.modeldeployment import labels
from controllers.modeldeployment.render import render_role, stamp
from tests.unit.md_fixtures import context, deployment, role

ZONE = "topology.kubernetes.io/zone"
RACK = "topology.gpustack.ai/rack"


def pods_of(obj: dict, role_name: str) -> list[dict]:
    ctx = context(obj)
    target = next(r for r in ctx.md.roles if r.name == role_name)
    template = render_role(ctx, target)
    return [stamp(ctx, template, k, m) for k in range(target.replicas) for m in range(target.size)]


def test_every_pod_of_every_group_carries_the_level() -> None:
    obj = deployment(role(replicas=3, size=2, topology={"requiredLevel": ZONE}))
    pods = pods_of(obj, "server")
    assert len(pods) == 6
    assert {p["metadata"]["annotations"][constants.KUEUE_PODSET_REQUIRED_TOPOLOGY] for p in pods} == {ZONE}
    # Three groups of two: three independent decisions, one PodSet each.
    assert len({p["metadata"]["labels"][constants.KUEUE_POD_GROUP_NAME] for p in pods}) == 3
    assert {p["metadata"]["annotations"][constants.KUEUE_POD_GROUP_TOTAL_COUNT] for p in pods} == {"2"}
    # A required level adds no preference and no node selector of its own.
    for pod in pods:
        assert constants.KUEUE_PODSET_PREFERRED_TOPOLOGY not in pod["metadata"]["annotations"]
        assert "nodeSelector" not in pod["spec"] and "affinity" not in pod["spec"]


def test_omitted_or_empty_means_no_request() -> None:
    for topology in (None, {}, {"requiredLevel": ""}):
        fields = {} if topology is None else {"topology": topology}
        (pod,) = pods_of(deployment(role(**fields)), "server")
        assert constants.KUEUE_PODSET_REQUIRED_TOPOLOGY not in pod["metadata"]["annotations"]


def test_the_level_is_part_of_its_roles_hash_only() -> None:
    def hashes(prefill_topology: dict | None) -> tuple[str, str]:
        extra = {"topology": prefill_topology} if prefill_topology is not None else {}
        obj = deployment(role("prefill", kind="Prefill", **extra), role("decode", kind="Decode"))
        return labels.live_hash(pods_of(obj, "prefill")[0]), labels.live_hash(pods_of(obj, "decode")[0])

    none, zone, rack = hashes(None), hashes({"requiredLevel": ZONE}), hashes({"requiredLevel": RACK})
    assert none[0] != zone[0] != rack[0] != none[0]  # changing or removing it replaces prefill's groups
    assert none[1] == zone[1] == rack[1]  # and leaves decode's alone
