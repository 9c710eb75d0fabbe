"""The Workload fit pin (§6.6): advisory, idempotent, never a denial."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from webhooks import patch as jsonpatch
from webhooks import workload as pin
from webhooks.decision import Decision
from webhooks.lookups import FileLookups, LookupFailed
from webhooks.review import request_from_review

POOL = "gpustack--nvidia-a10g-linux-amd64"
QUEUE = "gpustack-fnv64-c4680bb149644f1c"
GROUP = "nvidia-a10g"
SLICED_LABEL = f"sliced-max-free-units.fit.gpustack.ai/{GROUP}"
SHARED_LABEL = f"shared-free-cards.fit.gpustack.ai/{GROUP}"
EXCLUSIVE_LABEL = f"exclusive-free-cards.fit.gpustack.ai/{GROUP}"
AFFINITY = "/affinity"


def local_queue(name: str = QUEUE, cluster_queue: str = POOL, namespace: str = "team-a") -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue},
    }


def cluster_queue(name: str = POOL, kind: str | None = "instancetypes") -> dict:
    labels = {"resource.gpustack.ai/type": kind} if kind else {}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name, "labels": labels},
    }


def instance_type(name: str = POOL, group: str | None = GROUP, memory: str = "24Gi") -> dict:
    spec: dict[str, Any] = {"acceleratable": group is not None, "os": "linux", "arch": "amd64"}
    if group:
        spec["acceleratorGroup"] = group
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "InstanceType",
        "metadata": {"name": name},
        "spec": spec,
        "status": {"detail": {"manufacturer": "nvidia", "memory": memory}},
    }


def setting(value: str) -> dict:
    return {
        "apiVersion": "gpustack.ai/v1",
        "kind": "Setting",
        "metadata": {"name": "workload-fit-affinity", "namespace": "gpustack-system"},
        "spec": {"value": value},
    }


def chain(*, enabled: str | None = "true", **overrides: dict | None) -> FileLookups:
    objects = {
        "lq": local_queue(),
        "cq": cluster_queue(),
        "it": instance_type(),
        "setting": setting(enabled) if enabled is not None else None,
    }
    objects.update(overrides)
    return FileLookups([o for o in objects.values() if o is not None])


def pod_set(name: str, limits: dict, count: int = 1, affinity: dict | None = None) -> dict:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "x", "resources": {"limits": dict(limits)}}]
    }
    if affinity is not None:
        spec["affinity"] = affinity
    return {"name": name, "count": count, "template": {"metadata": {}, "spec": spec}}


def workload(*pod_sets: dict, queue: str = QUEUE, status: dict | None = None) -> dict:
    obj: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "pod-gpu-workload-3f2a1", "namespace": "team-a"},
        "spec": {"queueName": queue, "podSets": list(pod_sets)},
    }
    if status is not None:
        obj["status"] = status
    return obj


def call(
    obj: dict,
    lookups: FileLookups,
    operation: str = "CREATE",
    old: dict | None = None,
    kind: str = "Workload",
    group: str = "kueue.x-k8s.io",
) -> Decision:
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "77",
            "kind": {"group": group, "version": "v1beta2", "kind": kind},
            "resource": {"group": group, "version": "v1beta2", "resource": "workloads"},
            "operation": operation,
            "namespace": "team-a",
            "name": obj["metadata"]["name"],
            "object": obj,
            "oldObject": old,
        },
    }
    decision = asyncio.run(pin.mutate(request_from_review(review), lookups))
    assert decision.allowed, "the Workload pin never denies"
    return decision


SLICE = {
    "nvidia.com/gpu.sliced": "1",
    "nvidia.com/gpu.sliced.memory-percentage": "30",
    "nvidia.com/gpu.sliced.units": "480000",
}


def test_slice_pin_on_create() -> None:
    decision = call(workload(pod_set("main", SLICE)), chain())
    assert decision.patch == [
        {
            "op": "add",
            "path": "/spec/podSets/0/template/spec/affinity",
            "value": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": SLICED_LABEL, "operator": "Gt", "values": ["479999"]}
                                ]
                            }
                        ]
                    }
                }
            },
        }
    ]


def test_shared_pin_and_podsets_judged_apart() -> None:
    obj = workload(
        pod_set("exclusive", {"nvidia.com/gpu": "2"}),
        pod_set("shared", {"nvidia.com/gpu.shared": "3"}),
        pod_set("one-share", {"nvidia.com/gpu.shared": "1"}),
        pod_set("slice", SLICE),
    )
    decision = call(obj, chain())
    paths = [op["path"] for op in decision.patch]
    assert paths == [f"/spec/podSets/{i}/template/spec/affinity" for i in range(4)]
    after = jsonpatch.apply(obj, decision.patch)

    def terms(i: int) -> list:
        return after["spec"]["podSets"][i]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]

    # Every family is pinned to its own label, each PodSet by its own demand (docs/scheduling.md).
    assert terms(0) == [{"matchExpressions": [{"key": EXCLUSIVE_LABEL, "operator": "Gt", "values": ["1"]}]}]
    assert terms(1) == [{"matchExpressions": [{"key": SHARED_LABEL, "operator": "Gt", "values": ["2"]}]}]
    assert terms(2) == [{"matchExpressions": [{"key": SHARED_LABEL, "operator": "Gt", "values": ["0"]}]}]
    assert terms(3)[0]["matchExpressions"][0]["key"] == SLICED_LABEL


def test_a_partition_is_pinned_to_its_profile_and_an_invalid_key_is_not_pinned() -> None:
    mig = {"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-3g.40gb": "1"}
    decision = call(workload(pod_set("main", mig)), chain())
    (op,) = decision.patch
    (term,) = op["value"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term == {
        "matchExpressions": [
            {
                "key": f"partitioned-free-instances.fit.gpustack.ai/{GROUP}.3g.40gb",
                "operator": "Gt",
                "values": ["0"],
            }
        ]
    }
    # A profile whose label key cannot exist (``+`` is no label character) stays unpinned.
    odd = {"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-1g.10gb+me": "1"}
    assert call(workload(pod_set("main", odd)), chain()).patch == []


def test_pin_is_anded_into_every_term_and_idempotent() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1", "n2"]}
                        ]
                    },
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n3"]}]},
                ]
            }
        }
    }
    both = {
        **SLICE,
        "nvidia.com/gpu.shared": "2",
    }  # two families: rule 1 refuses such a Pod, the pin still reads it
    obj = workload(pod_set("main", both, affinity=affinity))
    decision = call(obj, chain())
    base = "/spec/podSets/0/template/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"
    sliced = {"key": SLICED_LABEL, "operator": "Gt", "values": ["479999"]}
    shared = {"key": SHARED_LABEL, "operator": "Gt", "values": ["1"]}
    assert decision.patch == [
        {"op": "add", "path": f"{base}/0/matchExpressions/1", "value": sliced},
        {"op": "add", "path": f"{base}/0/matchExpressions/2", "value": shared},
        {"op": "add", "path": f"{base}/1/matchExpressions", "value": [sliced, shared]},
    ]
    after = jsonpatch.apply(obj, decision.patch)
    assert call(after, chain()).patch == []
    assert call(after, chain(), operation="UPDATE", old=copy.deepcopy(after)).patch == []


def test_unfolded_templates_use_the_same_units_as_gate_3() -> None:
    pct = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "50"}
    decision = call(workload(pod_set("main", pct)), chain())
    assert decision.patch[0]["value"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchExpressions"][0]["values"] == ["799999"]
    mib = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "6144"}
    decision = call(workload(pod_set("main", mib)), chain())
    assert decision.patch[0]["value"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchExpressions"][0]["values"] == ["399999"]
    # Without the pool's VRAM a MiB budget has no known units: no pin.
    assert call(workload(pod_set("main", mib)), chain(it=instance_type(memory=""))).patch == []


@pytest.mark.parametrize(
    "status",
    [
        {"admission": {"clusterQueue": POOL, "podSetAssignments": []}},
        {"conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"}]},
    ],
    ids=["admission", "quota-reserved"],
)
def test_update_after_reservation_is_never_pinned(status: dict) -> None:
    obj = workload(pod_set("main", SLICE))
    old = workload(pod_set("main", SLICE), status=status)
    assert call(obj, chain(), operation="UPDATE", old=old).patch == []


def test_update_before_reservation_is_pinned() -> None:
    obj = workload(pod_set("main", SLICE))
    old = workload(
        pod_set("main", SLICE), status={"conditions": [{"type": "QuotaReserved", "status": "False"}]}
    )
    assert call(obj, chain(), operation="UPDATE", old=old).patch != []
    assert call(obj, chain(), operation="UPDATE", old=workload(pod_set("main", SLICE))).patch != []


def test_setting_turns_the_pin_off() -> None:
    obj = workload(pod_set("main", SLICE))
    assert call(obj, chain(enabled="false")).patch == []
    assert call(obj, chain(enabled="true")).patch != []
    assert call(obj, chain(enabled=None)).patch != []  # registered default: true


@pytest.mark.parametrize(
    "overrides",
    [
        {"lq": None},
        {"lq": local_queue(namespace="team-b")},
        {"lq": local_queue(cluster_queue="")},
        {"cq": None},
        {"cq": cluster_queue(kind=None)},
        {"cq": cluster_queue(kind="nodes")},
        {"it": None},
        {"it": instance_type(group=None)},
    ],
    ids=[
        "no-local-queue",
        "other-namespace",
        "no-cluster-queue-name",
        "no-cluster-queue",
        "unmarked-queue",
        "other-mark",
        "no-instance-type",
        "cpu-instance-type",
    ],
)
def test_a_broken_chain_leaves_the_workload_alone(overrides: dict) -> None:
    assert call(workload(pod_set("main", SLICE)), chain(**overrides)).patch == []


def test_nothing_to_pin_reads_nothing() -> None:
    class Counting(FileLookups):
        reads = 0

        async def get(self, *args: Any, **kwargs: Any) -> dict | None:
            Counting.reads += 1
            return None

    for obj in (
        workload(pod_set("main", {"cpu": "2"})),
        workload(pod_set("main", SLICE), queue=""),
    ):
        assert call(obj, Counting()).patch == []
    assert Counting.reads == 0


class Failing(FileLookups):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    async def get(self, kind: str, name: str, namespace: str = "", *, fresh: bool = False) -> dict | None:
        raise self.error


@pytest.mark.parametrize("error", [LookupFailed("deadline passed"), RuntimeError("boom")])
def test_lookup_errors_allow_without_a_patch(error: Exception) -> None:
    decision = call(workload(pod_set("main", SLICE)), Failing(error))
    assert decision.patch == [] and not decision.warnings


def test_other_objects_pass() -> None:
    obj = workload(pod_set("main", SLICE))
    assert call(obj, chain(), kind="Pod", group="").patch == []
    assert call(obj, chain(), operation="DELETE").patch == []
    malformed = workload(pod_set("main", SLICE))
    malformed["spec"]["podSets"] = [None, {"template": None}, {"template": {"spec": []}}]
    assert call(malformed, chain()).patch == []


def test_holds_reservation() -> None:
    assert not pin.holds_reservation(None)
    assert not pin.holds_reservation({"status": {"admission": None, "conditions": []}})
    assert pin.holds_reservation({"status": {"admission": {"clusterQueue": "q"}}})
    assert pin.holds_reservation({"status": {"conditions": [{"type": "QuotaReserved", "status": "True"}]}})
    assert not pin.holds_reservation({"status": {"conditions": [{"type": "Admitted", "status": "True"}]}})


def test_an_empty_node_selector_term_stays_empty() -> None:
    # An empty term matches no node; ANDing the pin into it would make it match some.
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {},
                    {"matchExpressions": []},
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                ]
            }
        }
    }
    decision = call(workload(pod_set("main", SLICE, affinity=affinity)), chain())
    base = "/spec/podSets/0/template/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"
    assert decision.patch == [
        {
            "op": "add",
            "path": f"{base}/2/matchExpressions/1",
            "value": {"key": SLICED_LABEL, "operator": "Gt", "values": ["479999"]},
        }
    ]


def test_a_group_that_makes_no_valid_label_key_is_skipped_with_a_warning() -> None:
    bad = "nvidia-" + "x" * 80  # the fit label's name part would exceed 63 characters
    decision = call(workload(pod_set("main", SLICE)), chain(it=instance_type(group=bad)))
    assert decision.patch == []
    assert len(decision.warnings) == 1 and "makes no valid label key" in decision.warnings[0]
