"""Gate 1, the Pod webhooks: the fold and pins of ``mutate``, the seven rules of ``validate``."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from api.fielderrors import FORBIDDEN, INVALID, NOT_FOUND, NOT_SUPPORTED, REQUIRED
from api.manufacturers import BY_NAME, MANUFACTURERS
from webhooks import chain
from webhooks import patch as jsonpatch
from webhooks import pod as gate
from webhooks.decision import Decision
from webhooks.lookups import FileLookups, LookupFailed
from webhooks.review import request_from_review

QUEUE = "gpustack-fnv64-c4680bb149644f1c"
H100_QUEUE = "gpustack-fnv64-0000000000000h100"
PPU_QUEUE = "gpustack-fnv64-00000000000000ppu"
UNOBSERVED_QUEUE = "gpustack-fnv64-00000000000000new"
NO_PROFILES_QUEUE = "gpustack-fnv64-000000000000empty"
CPU_QUEUE = "gpustack-fnv64-0000000000000cpu1"
UNKNOWN_QUEUE = "gpustack-fnv64-ffffffffffffffff"
QUEUE_PATH = "metadata.labels[kueue.x-k8s.io/queue-name]"


def instance_type(
    name: str, entrance: str, *, group: str | None = "nvidia-a10g", detail: dict | None = None
) -> dict:
    spec: dict[str, Any] = {"acceleratable": group is not None, "os": "linux", "arch": "amd64"}
    if group:
        spec["acceleratorGroup"] = group
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "InstanceType",
        "metadata": {"name": name, "labels": {"schedule.gpustack.ai/queue-entrance": entrance}},
        "spec": spec,
        "status": {"detail": detail or {}},
    }


def profiles(*entries: tuple[str, int]) -> dict:
    return {
        "physical": {"count": 7, "profiles": [{"name": n, "count": 1, "memoryMib": m} for n, m in entries]}
    }


POOLS = [
    instance_type(
        "gpustack--nvidia-a10g-linux-amd64",
        QUEUE,
        detail={"manufacturer": "nvidia", "memory": "24Gi", "slicedDetail": {"logical": {"count": 1024}}},
    ),
    instance_type(
        "gpustack--nvidia-h100-80gb-hbm3-linux-amd64",
        H100_QUEUE,
        group="nvidia-h100-80gb-hbm3",
        detail={
            "manufacturer": "nvidia",
            "memory": "81920Mi",
            "slicedDetail": profiles(
                ("1g.10gb", 9856), ("2g.20gb", 19968), ("3g.40gb", 40192), ("7g.80gb", 80896)
            ),
        },
    ),
    instance_type(
        "gpustack--thead-ppu-linux-amd64",
        PPU_QUEUE,
        group="thead-ppu",
        detail={
            "manufacturer": "thead",
            "memory": "96Gi",
            "slicedDetail": profiles(("4g48gb", 49152), ("2g24gb", 24576)),
        },
    ),
    instance_type("gpustack--nvidia-tesla-t4-linux-amd64", UNOBSERVED_QUEUE, group="nvidia-tesla-t4"),
    instance_type(
        "gpustack--hygon-k100-linux-amd64",
        NO_PROFILES_QUEUE,
        group="hygon-k100",
        detail={"manufacturer": "hygon", "memory": "64Gi", "slicedDetail": {"physical": {}}},
    ),
    instance_type("gpustack--generic-linux-amd64", CPU_QUEUE, group=None, detail={"manufacturer": ""}),
]


class CountingLookups(FileLookups):
    def __init__(self, objects: list[dict]) -> None:
        super().__init__(objects)
        self.reads = 0

    async def get(self, kind: str, name: str, namespace: str = "", *, fresh: bool = False) -> dict | None:
        self.reads += 1
        return await super().get(kind, name, namespace, fresh=fresh)

    async def list(self, kind: str, namespace: str = "") -> list[dict]:
        self.reads += 1
        return await super().list(kind, namespace)


class FailingLookups(FileLookups):
    async def list(self, kind: str, namespace: str = "") -> list[dict]:
        raise LookupFailed("apiserver unreachable")


def container(name: str, limits: dict | None = None, requests: dict | None = None, **extra: Any) -> dict:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = dict(limits)
    if requests is not None:
        resources["requests"] = dict(requests)
    return {"name": name, "image": "ubuntu:24.04", "resources": resources, **extra}


def pod(
    *containers: dict, init: list[dict] | None = None, queue: str | None = QUEUE, affinity: dict | None = None
) -> dict:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": list(containers)}
    if init is not None:
        spec["initContainers"] = init
    if affinity is not None:
        spec["affinity"] = affinity
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gpu-workload", "namespace": "team-a", "labels": labels},
        "spec": spec,
    }


def request(obj: dict, operation: str = "CREATE"):
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0a1b2c3d",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": operation,
            "namespace": "team-a",
            "name": "",
            "object": obj,
            "oldObject": copy.deepcopy(obj) if operation == "UPDATE" else None,
        },
    }
    return request_from_review(review)


def mutate(obj: dict, lookups: FileLookups | None = None, operation: str = "CREATE") -> Decision:
    return asyncio.run(gate.mutate(request(obj, operation), lookups or FileLookups(POOLS)))


def validate(obj: dict, lookups: FileLookups | None = None) -> Decision:
    return asyncio.run(gate.validate(request(obj), lookups or FileLookups(POOLS)))


def mutated(obj: dict, lookups: FileLookups | None = None) -> dict:
    decision = mutate(obj, lookups)
    assert decision.allowed, decision.message
    return jsonpatch.apply(obj, decision.patch)


def causes(decision: Decision) -> list[tuple[str, str]]:
    assert not decision.allowed
    return [(error.path, error.reason) for error in decision.causes]


# --- mutate: the fold -------------------------------------------------------------------------------------


def test_percentage_fold_needs_no_instance_type() -> None:
    lookups = CountingLookups(POOLS)
    obj = pod(
        container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "50"})
    )
    decision = mutate(obj, lookups)
    assert decision.allowed
    assert decision.patch == [
        {
            "op": "add",
            "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu.sliced.units",
            "value": "800k",
        },
        {
            "op": "add",
            "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu.sliced.cores-percentage",
            "value": "100",
        },
    ]
    assert lookups.reads == 0
    # Even on a queue no InstanceType fronts: nothing in a percentage fold depends on the pool.
    assert mutate(pod(obj["spec"]["containers"][0], queue=UNKNOWN_QUEUE)).patch == decision.patch


def test_fold_is_mirrored_into_requests_and_keeps_an_explicit_cores_percentage() -> None:
    limits = {
        "nvidia.com/gpu.sliced": "1",
        "nvidia.com/gpu.sliced.memory-percentage": "20",
        "nvidia.com/gpu.sliced.cores-percentage": "40",
    }
    obj = pod(container("main", limits, {"cpu": "1", **limits}))
    after = mutated(obj)
    resources = after["spec"]["containers"][0]["resources"]
    assert resources["limits"]["nvidia.com/gpu.sliced.units"] == "320k"
    assert resources["requests"]["nvidia.com/gpu.sliced.units"] == "320k"
    assert resources["limits"]["nvidia.com/gpu.sliced.cores-percentage"] == "40"
    assert "nvidia.com/gpu.sliced.cores-percentage" in resources["requests"]
    assert resources["requests"]["cpu"] == "1"


def test_mib_fold_uses_the_instance_type_vram() -> None:
    obj = pod(container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "6144"}))
    after = mutated(obj)
    assert after["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu.sliced.units"] == "400k"


def test_partition_fold_uses_the_profile_memory() -> None:
    obj = pod(
        container("main", {"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-3g.40gb": "1"}),
        queue=H100_QUEUE,
    )
    decision = mutate(obj)
    assert decision.patch == [
        {
            "op": "add",
            "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu.partitioned.units",
            "value": "785k",
        }
    ]


def test_thead_profiles_match_their_vendor_spelling() -> None:
    obj = pod(
        container(
            "main",
            {"alibabacloud.com/ppu.partitioned": "1", "alibabacloud.com/ppu.partitioned.mig-4g.48gb": "1"},
        ),
        queue=PPU_QUEUE,
    )
    limits = mutated(obj)["spec"]["containers"][0]["resources"]["limits"]
    assert limits["alibabacloud.com/ppu.partitioned.units"] == "800k"  # 49152 MiB of a 98304 MiB card


def test_client_units_are_overwritten() -> None:
    obj = pod(
        container(
            "main",
            {
                "nvidia.com/gpu.sliced": "1",
                "nvidia.com/gpu.sliced.memory-percentage": "50",
                "nvidia.com/gpu.sliced.units": "1",
                "nvidia.com/gpu.sliced.cores-percentage": "100",
            },
            {"nvidia.com/gpu.sliced.units": "1"},
        )
    )
    decision = mutate(obj)
    assert decision.patch == [
        {
            "op": "add",
            "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu.sliced.units",
            "value": "800k",
        },
        {
            "op": "add",
            "path": "/spec/containers/0/resources/requests/nvidia.com~1gpu.sliced.units",
            "value": "800k",
        },
    ]


def test_a_correct_client_value_in_another_spelling_is_left_alone() -> None:
    obj = pod(
        container(
            "main",
            {
                "nvidia.com/gpu.sliced": "1",
                "nvidia.com/gpu.sliced.memory-percentage": "50",
                "nvidia.com/gpu.sliced.units": "800k",
                "nvidia.com/gpu.sliced.cores-percentage": 100,
            },
        )
    )
    assert mutate(obj).patch == []


def test_fold_in_an_init_container_and_without_limits() -> None:
    init = [
        container(
            "prep", None, {"huawei.com/npu.sliced": "1", "huawei.com/npu.sliced.memory-percentage": "25"}
        )
    ]
    obj = pod(container("main", {"cpu": "1"}), init=init)
    decision = mutate(obj)
    assert decision.patch[0] == {
        "op": "add",
        "path": "/spec/initContainers/0/resources/limits",
        "value": {"huawei.com/npu.sliced.units": "400k", "huawei.com/npu.sliced.cores-percentage": "100"},
    }
    after = jsonpatch.apply(obj, decision.patch)
    assert (
        after["spec"]["initContainers"][0]["resources"]["requests"]["huawei.com/npu.sliced.units"] == "400k"
    )


def test_invalid_budgets_are_not_folded() -> None:
    for limits in (
        {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "0"},
        {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "30000"},  # above 24 GiB
        {"nvidia.com/gpu.sliced": "1"},
    ):
        patch = mutate(pod(container("main", limits))).patch
        assert [op["path"].rsplit(".", 1)[-1] for op in patch] == ["cores-percentage"], limits


@pytest.mark.parametrize(
    "obj",
    [
        pod(
            container(
                "main",
                {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "50"},
                {"cpu": "1"},
            )
        ),
        pod(container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "6144"})),
        pod(
            container(
                "main", {"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-1g.10gb": "1"}
            ),
            queue=H100_QUEUE,
        ),
        pod(container("main", {"nvidia.com/gpu.shared": "3"})),
        pod(
            container("a", {"nvidia.com/gpu.shared": "2"}),
            container("b", {"nvidia.com/gpu.shared": "4"}),
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
                        ]
                    }
                }
            },
        ),
        pod(container("main", {"nvidia.com/gpu.shared": "2"}), affinity={"podAntiAffinity": {}}),
        pod(
            container("main", {"nvidia.com/gpu.shared": "2"}),
            affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
        ),
        pod(
            container(
                "main", None, {"huawei.com/npu.sliced": "1", "huawei.com/npu.sliced.memory-percentage": "10"}
            )
        ),
    ],
    ids=[
        "percentage",
        "mib",
        "partition",
        "shared-pin",
        "shared-pin-terms",
        "pin-other-affinity",
        "pin-preferred",
        "requests-only",
    ],
)
def test_reinvocation_is_idempotent(obj: dict) -> None:
    first = mutate(obj)
    assert first.allowed and first.patch, "the case must change something the first time"
    after = jsonpatch.apply(obj, first.patch)
    second = mutate(after)
    assert second.allowed and second.patch == []
    assert validate(after).allowed, validate(after).message


# --- mutate: the shared card-count pin --------------------------------------------------------------------


def test_shared_pin_adds_a_required_term() -> None:
    obj = pod(container("a", {"nvidia.com/gpu.shared": "2"}), container("b", {"nvidia.com/gpu.shared": "3"}))
    decision = mutate(obj)
    assert decision.patch == [
        {
            "op": "add",
            "path": "/spec/affinity",
            "value": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "acceleratable.feature.gpustack.ai/nvidia-a10g.count",
                                        "operator": "Gt",
                                        "values": ["2"],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
        }
    ]


def test_shared_pin_is_anded_into_every_required_term() -> None:
    terms = [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
    ]
    obj = pod(
        container("a", {"nvidia.com/gpu.shared": "2"}),
        affinity={
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
        },
    )
    expression = {
        "key": "acceleratable.feature.gpustack.ai/nvidia-a10g.count",
        "operator": "Gt",
        "values": ["1"],
    }
    base = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"
    assert mutate(obj).patch == [
        {"op": "add", "path": f"{base}/0/matchExpressions/1", "value": expression},
        {"op": "add", "path": f"{base}/1/matchExpressions", "value": [expression]},
    ]


def test_one_shared_card_needs_no_pin_and_no_lookup() -> None:
    lookups = CountingLookups(POOLS)
    decision = mutate(pod(container("a", {"nvidia.com/gpu.shared": "1"}), queue=UNKNOWN_QUEUE), lookups)
    assert decision.allowed and decision.patch == [] and lookups.reads == 0


def test_shared_pin_without_an_instance_type_is_refused_on_the_queue_label() -> None:
    decision = mutate(pod(container("a", {"nvidia.com/gpu.shared": "2"}), queue=UNKNOWN_QUEUE))
    assert causes(decision) == [(QUEUE_PATH, NOT_FOUND)]
    assert decision.code == 422 and not decision.retryable
    assert UNKNOWN_QUEUE in decision.message and "ENTRANCE" in decision.message


def test_shared_pin_on_a_pool_without_accelerator_group_is_refused() -> None:
    decision = mutate(pod(container("a", {"nvidia.com/gpu.shared": "2"}), queue=CPU_QUEUE))
    assert causes(decision) == [(QUEUE_PATH, INVALID)]


# --- mutate: what the fold cannot read yet -------------------------------------------------------------------


def test_unobserved_instance_type_is_a_retryable_denial() -> None:
    obj = pod(
        container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "6144"}),
        queue=UNOBSERVED_QUEUE,
    )
    decision = mutate(obj)
    assert not decision.allowed and decision.retryable and decision.code == 500
    assert "gpustack--nvidia-tesla-t4-linux-amd64" in decision.message and "retry" in decision.message


def test_partition_profiles_not_yet_observed_is_a_retryable_denial() -> None:
    obj = pod(
        container("main", {"hygon.com/dcu.partitioned": "1", "hygon.com/dcu.partitioned.mig-2g.15gb": "1"}),
        queue=NO_PROFILES_QUEUE,
    )
    decision = mutate(obj)
    assert decision.retryable and "profiles" in decision.message


def test_lookup_failure_is_a_retryable_denial() -> None:
    obj = pod(container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "6144"}))
    decision = mutate(obj, FailingLookups(POOLS))
    assert decision.retryable and "apiserver unreachable" in decision.message


def test_fold_without_an_instance_type_is_refused_on_the_queue_label() -> None:
    obj = pod(
        container("main", {"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-3g.40gb": "1"}),
        queue=UNKNOWN_QUEUE,
    )
    decision = mutate(obj)
    assert causes(decision) == [(QUEUE_PATH, NOT_FOUND)]
    assert decision.message.startswith(
        'Pod "gpu-workload" is invalid: metadata.labels[kueue.x-k8s.io/queue-name]: Not found:'
    )


def test_an_unoffered_profile_is_refused() -> None:
    obj = pod(
        container("main", {"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-4g.40gb": "1"}),
        queue=H100_QUEUE,
    )
    decision = mutate(obj)
    assert causes(decision) == [
        ("spec.containers[0].resources.limits[nvidia.com/gpu.partitioned.mig-4g.40gb]", NOT_SUPPORTED)
    ]
    assert 'supported values: "1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"' in decision.message


def test_what_needs_nothing_passes_untouched() -> None:
    lookups = CountingLookups(POOLS)
    for obj in (
        pod(container("main", {"nvidia.com/gpu": "1"}), queue=UNKNOWN_QUEUE),
        pod(container("main", {"cpu": "1", "device.gpustack.ai/rdma.shared": "1"})),
        pod(container("ssh", {"device.gpustack.ai/nvidia.visibility": "1"})),
        pod(
            container(
                "main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "50"}
            ),
            queue=None,
        ),
    ):
        decision = mutate(obj, lookups)
        assert decision.allowed and decision.patch == []
    assert lookups.reads == 0
    sliced = pod(
        container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "50"})
    )
    assert mutate(sliced, operation="UPDATE").patch == []
    assert validate(pod(container("main", {"nvidia.com/gpu": "1"}), queue=None)).allowed


# --- validate: the seven rules ----------------------------------------------------------------------------------


def test_rule1_one_family() -> None:
    assert validate(pod(container("a", {"amd.com/gpu": "1"}), container("b", {"amd.com/gpu": "2"}))).allowed
    decision = validate(
        pod(container("a", {"amd.com/gpu": "1"}), container("b", {"amd.com/gpu.shared": "1"}))
    )
    assert causes(decision) == [("spec", FORBIDDEN)]
    assert "found [exclusive shared]" in decision.message
    decision = validate(
        pod(
            container("a", {"nvidia.com/gpu": "1"}),
            container("b", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "50"}),
        )
    )
    assert ("spec", FORBIDDEN) in causes(decision) and "found [exclusive sliced]" in decision.message


def test_rule1_one_container_group() -> None:
    decision = validate(
        pod(container("main", {"nvidia.com/gpu": "1"}), init=[container("warmup", {"nvidia.com/gpu": "1"})])
    )
    assert causes(decision) == [("spec.initContainers", FORBIDDEN)]
    assert (
        "held for the Pod's whole life" in decision.message
        and "charges the Pod only once" in decision.message
    )
    # Claims in the init group only are one group.
    assert validate(
        pod(container("main", {"cpu": "1"}), init=[container("warmup", {"iluvatar.com/gpu": "1"})])
    ).allowed


def test_rule2_slice_is_exactly_one() -> None:
    assert validate(
        pod(container("a", {"huawei.com/npu.sliced": "1", "huawei.com/npu.sliced.memory-mib": "16384"}))
    ).allowed
    decision = validate(
        pod(container("a", {"huawei.com/npu.sliced": "3", "huawei.com/npu.sliced.memory-percentage": "25"}))
    )
    assert causes(decision) == [("spec.containers[0].resources.limits[huawei.com/npu.sliced]", INVALID)]
    assert 'Invalid value: "3": a logical slice request is always a single accelerator' in decision.message


def test_rule2_memory_budget() -> None:
    base = "cambricon.com/mlu.sliced"
    decision = validate(pod(container("a", {base: "1"})))
    assert causes(decision) == [("spec.containers[0].resources.limits", REQUIRED)]
    assert f"{base}.memory-percentage" in decision.message and f"{base}.memory-mib" in decision.message
    decision = validate(
        pod(container("a", {base: "1", f"{base}.memory-percentage": "10", f"{base}.memory-mib": "100"}))
    )
    assert causes(decision) == [(f"spec.containers[0].resources.limits[{base}.memory-mib]", FORBIDDEN)]
    assert "cannot set both" in decision.message
    for pct in ("0", "101", "1.5"):
        decision = validate(pod(container("a", {base: "1", f"{base}.memory-percentage": pct})))
        assert causes(decision) == [
            (f"spec.containers[0].resources.limits[{base}.memory-percentage]", INVALID)
        ], pct
    decision = validate(pod(container("a", {base: "1", f"{base}.memory-mib": "0"})))
    assert causes(decision) == [(f"spec.containers[0].resources.limits[{base}.memory-mib]", INVALID)]
    decision = validate(
        pod(container("a", {base: "1", f"{base}.memory-percentage": "10", f"{base}.cores-percentage": "150"}))
    )
    assert causes(decision) == [(f"spec.containers[0].resources.limits[{base}.cores-percentage]", INVALID)]


def test_rule2_mib_bound_uses_the_pool_vram_when_known() -> None:
    over = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "30000"}
    decision = validate(pod(container("a", over)))
    assert causes(decision) == [
        ("spec.containers[0].resources.limits[nvidia.com/gpu.sliced.memory-mib]", INVALID)
    ]
    assert "24576 MiB" in decision.message
    assert validate(pod(container("a", {**over, "nvidia.com/gpu.sliced.memory-mib": "24576"}))).allowed
    # Unknown pool (or unobserved): no bound to apply.
    assert validate(pod(container("a", over), queue=UNKNOWN_QUEUE)).allowed
    assert validate(pod(container("a", over), queue=UNOBSERVED_QUEUE)).allowed
    assert validate(pod(container("a", over)), FailingLookups(POOLS)).allowed


def test_rule2_paths_follow_where_the_value_was_read() -> None:
    decision = validate(
        pod(
            container(
                "a",
                None,
                {"metax-tech.com/gpu.sliced": "2", "metax-tech.com/gpu.sliced.memory-percentage": "10"},
            )
        )
    )
    assert causes(decision) == [("spec.containers[0].resources.requests[metax-tech.com/gpu.sliced]", INVALID)]


def test_rule2_slice_budget_without_the_token() -> None:
    decision = validate(pod(container("a", {"mthreads.com/gpu.sliced.memory-percentage": "10"})))
    assert causes(decision) == [("spec.containers[0].resources.limits[mthreads.com/gpu.sliced]", REQUIRED)]


def test_rule3_partition_is_exactly_one_and_names_a_profile() -> None:
    assert validate(
        pod(container("a", {"hygon.com/dcu.partitioned": "1", "hygon.com/dcu.partitioned.mig-2g.15gb": "1"}))
    ).allowed
    decision = validate(pod(container("a", {"hygon.com/dcu.partitioned": "1"})))
    assert causes(decision) == [("spec.containers[0].resources.limits", REQUIRED)]
    assert "must name a profile, e.g. hygon.com/dcu.partitioned.mig-<profile>" in decision.message
    decision = validate(
        pod(
            container("a", {"nvidia.com/gpu.partitioned": "2", "nvidia.com/gpu.partitioned.mig-1g.10gb": "1"})
        )
    )
    assert causes(decision) == [("spec.containers[0].resources.limits[nvidia.com/gpu.partitioned]", INVALID)]
    assert "request one Pod per instance" in decision.message
    decision = validate(pod(container("a", {"nvidia.com/gpu.partitioned.mig-1g.10gb": "1"})))
    assert causes(decision) == [("spec.containers[0].resources.limits[nvidia.com/gpu.partitioned]", REQUIRED)]


def test_rule4_one_profile_shape() -> None:
    assert validate(
        pod(
            container("a", {"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-2g.20gb": "1"})
        )
    ).allowed
    decision = validate(
        pod(
            container(
                "a",
                {
                    "nvidia.com/gpu.partitioned": "1",
                    "nvidia.com/gpu.partitioned.mig-2g.20gb": "1",
                    "nvidia.com/gpu.partitioned.mig-1g.10gb": "1",
                },
            )
        )
    )
    assert causes(decision) == [("spec", FORBIDDEN)]
    assert "found [1g.10gb 2g.20gb]" in decision.message


def test_rule5_profile_key_is_exactly_one() -> None:
    assert validate(
        pod(
            container(
                "a",
                {
                    "alibabacloud.com/ppu.partitioned": "1",
                    "alibabacloud.com/ppu.partitioned.mig-4g.48gb": "1",
                },
            )
        )
    ).allowed
    decision = validate(
        pod(
            container(
                "a",
                {
                    "alibabacloud.com/ppu.partitioned": "1",
                    "alibabacloud.com/ppu.partitioned.mig-4g.48gb": "3",
                },
            )
        )
    )
    assert causes(decision) == [
        ("spec.containers[0].resources.limits[alibabacloud.com/ppu.partitioned.mig-4g.48gb]", INVALID)
    ]
    assert "must be exactly 1 instance" in decision.message


def test_rule6_one_slicing_container() -> None:
    slice_ = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "40"}
    assert validate(
        pod(container("main", slice_), container("sshd", {"device.gpustack.ai/nvidia.visibility": "1"}))
    ).allowed
    decision = validate(pod(container("x", slice_), container("y", slice_)))
    assert causes(decision) == [("spec", FORBIDDEN)]
    assert (
        "at most one container may request a slicing family" in decision.message
        and "found 2" in decision.message
    )


def test_rule7_native_sidecar_may_not_claim() -> None:
    sidecar = container("proxy", None, restartPolicy="Always")
    assert validate(pod(container("main", {"mthreads.com/gpu": "1"}), init=[sidecar])).allowed
    claiming = container("proxy", {"mthreads.com/gpu": "1"}, restartPolicy="Always")
    decision = validate(pod(container("main", {"cpu": "1"}), init=[claiming]))
    assert causes(decision) == [("spec.initContainers[0].resources.limits", FORBIDDEN)]
    assert "move the request to an app container" in decision.message
    # A sidecar is in neither group: its claim does not make the app group's claim a rule-1 case.
    decision = validate(
        pod(container("main", {"mthreads.com/gpu": "1"}), init=[container("init", {"cpu": "1"}), claiming])
    )
    assert causes(decision) == [("spec.initContainers[1].resources.limits", FORBIDDEN)]


CAP = 1 << 62  # fastpath.requests.COUNT_CAP: whole-card counts and their sums saturate there


def test_whole_cards_summing_to_the_cap_are_refused_on_the_key_that_reaches_it() -> None:
    # Three containers of 2^62 cards: compiled, the app group's sum once wrapped a C long long (to a
    # demand of 0 cards) while the interpreted twin summed 3 × 2^62; gate 1 admitted the Pod either way.
    huge = {"nvidia.com/gpu": str(CAP)}
    for obj in (
        pod(container("a", huge), container("b", huge), container("c", huge)),
        pod(container("a", {"nvidia.com/gpu": "1e30"}), container("b", {"nvidia.com/gpu": "1"})),
    ):
        decision = validate(obj)
        assert causes(decision) == [("spec.containers[0].resources.limits[nvidia.com/gpu]", INVALID)]
        assert f"add up to 2^62 ({CAP}) or more" in decision.message
    # Below the cap alone, the key that brings the sum there is named (here read from requests).
    decision = validate(
        pod(
            container("a", {"nvidia.com/gpu": str(CAP - 1)}),
            container("b", None, {"nvidia.com/gpu": "1"}),
        )
    )
    assert causes(decision) == [("spec.containers[1].resources.requests[nvidia.com/gpu]", INVALID)]
    assert validate(
        pod(container("a", {"nvidia.com/gpu": str(CAP - 2)}), container("b", {"nvidia.com/gpu": "1"}))
    ).allowed
    # The init group sums on its own (rule 1 refuses it beside app claims; alone it is the demand).
    decision = validate(
        pod(container("main", {"cpu": "1"}), init=[container("i0", huge), container("i1", huge)])
    )
    assert causes(decision) == [("spec.initContainers[0].resources.limits[nvidia.com/gpu]", INVALID)]
    assert "init containers" in decision.message


def test_whole_cards_at_the_cap_through_the_offline_chain() -> None:
    """What ``admit`` answers: a refusal naming the key, not an admission nor an internal error."""
    huge = {"nvidia.com/gpu": str(CAP)}
    for n in (2, 3, 4):
        obj = pod(*(container(f"c{i}", huge) for i in range(n)))
        outcome = asyncio.run(chain.run(obj, FileLookups(POOLS)))
        assert not outcome.allowed and outcome.code == 422, outcome.message
        assert [(c.path, c.reason) for c in outcome.causes] == [
            ("spec.containers[0].resources.limits[nvidia.com/gpu]", INVALID)
        ]
        assert 'Invalid value: "4611686018427387904"' in outcome.message


def test_rdma_keys_accompany_any_family() -> None:
    for limits in (
        {"nvidia.com/gpu": "1", "device.gpustack.ai/rdma.shared": "1"},
        {"nvidia.com/gpu.shared": "1", "device.gpustack.ai/rdma": "2"},
        {
            "nvidia.com/gpu.partitioned": "1",
            "nvidia.com/gpu.partitioned.mig-1g.10gb": "1",
            "device.gpustack.ai/rdma.partitioned": "1",
        },
    ):
        assert validate(pod(container("main", limits))).allowed, limits


def test_every_violation_is_reported_in_one_refusal() -> None:
    decision = validate(
        pod(
            container("a", {"nvidia.com/gpu.sliced": "2"}),
            container(
                "b",
                {
                    "nvidia.com/gpu.partitioned": "1",
                    "nvidia.com/gpu.partitioned.mig-1g.10gb": "2",
                    "nvidia.com/gpu.partitioned.mig-3g.40gb": "1",
                },
            ),
            init=[container("side", {"nvidia.com/gpu": "1"}, restartPolicy="Always")],
        )
    )
    assert causes(decision) == [
        ("spec", FORBIDDEN),  # rule 1: three families
        ("spec.initContainers[0].resources.limits", FORBIDDEN),  # rule 7
        ("spec.containers[0].resources.limits[nvidia.com/gpu.sliced]", INVALID),  # rule 2
        ("spec.containers[0].resources.limits", REQUIRED),  # rule 2: no budget
        ("spec.containers[1].resources.limits[nvidia.com/gpu.partitioned.mig-1g.10gb]", INVALID),  # rule 5
        ("spec", FORBIDDEN),  # rule 4
        ("spec", FORBIDDEN),  # rule 6
    ]
    assert decision.code == 422 and decision.reason == "Invalid"
    assert decision.message.startswith('Pod "gpu-workload" is invalid: [spec: Forbidden: ')


@pytest.mark.parametrize("m", MANUFACTURERS, ids=lambda m: m.name)
def test_every_manufacturer(m) -> None:
    base = m.base
    assert validate(pod(container("a", {base: "2"}))).allowed
    assert validate(pod(container("a", {base + ".shared": "1"}))).allowed
    ok_slice = {base + ".sliced": "1", base + ".sliced.memory-percentage": "30"}
    assert validate(pod(container("a", ok_slice))).allowed
    decision = validate(pod(container("a", {**ok_slice, base + ".sliced": "2"})))
    assert causes(decision) == [(f"spec.containers[0].resources.limits[{base}.sliced]", INVALID)]
    decision = validate(pod(container("a", {base: "1"}), container("b", {base + ".shared": "1"})))
    assert causes(decision) == [("spec", FORBIDDEN)]
    sidecar = container("s", {base: "1"}, restartPolicy="Always")
    assert causes(validate(pod(container("a", {"cpu": "1"}), init=[sidecar]))) == [
        ("spec.initContainers[0].resources.limits", FORBIDDEN)
    ]
    # The fold writes this manufacturer's own units key.
    limits = mutated(pod(container("a", ok_slice)))["spec"]["containers"][0]["resources"]["limits"]
    assert limits[base + ".sliced.units"] == "480k"
    if m.partition_kind:
        key = f"{base}.partitioned.{m.partition_kind}-1g.10gb"
        assert validate(pod(container("a", {base + ".partitioned": "1", key: "1"}))).allowed
        assert causes(validate(pod(container("a", {base + ".partitioned": "1", key: "2"})))) == [
            (f"spec.containers[0].resources.limits[{key}]", INVALID)
        ]
    else:
        # No partitioning: .partitioned keys are no family, so the rules neither apply nor trip.
        assert validate(pod(container("a", {base + ".partitioned": "2"}))).allowed


def test_the_reference_examples_from_the_readme() -> None:
    whole = pod(container("worker", {"nvidia.com/gpu": "1"}))
    assert mutate(whole).patch == [] and validate(whole).allowed
    with_rdma = pod(container("worker", {"nvidia.com/gpu": "1", "device.gpustack.ai/rdma.shared": "1"}))
    assert validate(with_rdma).allowed
    assert BY_NAME["nvidia"].base == "nvidia.com/gpu"
