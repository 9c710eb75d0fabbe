"""Pod admission cases, judged the same way offline (``admit``) and through a real kube-apiserver.

Each case is a Pod manifest and what gate 1 must answer: allowed or not, the field path a refusal
names, the retryable code, and the keys the stored Pod must carry after the fold.  The InstanceTypes
behind the queues are admin-authored (``e2e-*``), so no pool controller's derived types collide.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from api.naming import local_queue_name
from fastpath import quantity
from nodeplugins.devicemanager.devices import accelerator_group
from nodeplugins.devicemanager.simulation import profile
from tests.webhooks import objects

NAMESPACE = "gate1"


def _type(
    name: str,
    group: str | None,
    manufacturer: str,
    memory: str,
    *,
    logical: int = 0,
    profiles: list[tuple[str, int, int]] = (),
    observed: bool = True,
) -> dict[str, Any]:
    return objects.instance_type(
        name,
        group=group or "",
        acceleratable=group is not None,
        cpu="8" if group else "1",
        ram="64Gi" if group else "2Gi",
        manufacturer=manufacturer if observed else None,
        memory=memory,
        logical=logical,
        profiles=[{"name": n, "count": count, "memoryMib": mib} for n, mib, count in profiles],
        capacity="8" if group else "0",
    )


def _simulated(name: str, product: str, *, logical: int = 0, partitioned: bool = False) -> dict[str, Any]:
    """A pool of simulated ``product`` cards: group, manufacturer, VRAM and partition profiles are the
    simulated hardware's (``products.yaml``), as the controllers derive them from its ``Devices``."""
    sim = profile.catalog()[product]
    return _type(
        name,
        accelerator_group(sim.manufacturer, sim.name),
        sim.manufacturer,
        f"{sim.memory_mib}Mi",
        logical=logical,
        profiles=[(p.name, p.memory_mib, p.count) for p in sim.profiles] if partitioned else [],
    )


# The hardware behind each pool: tests/e2e/test_admission_pods.py starts one kwok node of it, and the
# controllers write each type's status from what that node's device manager publishes.
HARDWARE: dict[str, tuple[str, int, bool]] = {  # type name -> (simulated product, cards, partitioned)
    "e2e-nvidia-a10g": ("NVIDIA A10G", 4, False),
    "e2e-nvidia-h100": ("NVIDIA H100 80GB HBM3", 2, True),
    "e2e-ascend-910b": ("Ascend 910B", 4, False),
    "e2e-hygon-k100": ("K100_AI", 2, True),
    "e2e-thead-ppu": ("PPU-ZW810E", 2, True),
    "e2e-amd-mi300x": ("AMD Instinct MI300X", 4, False),
    "e2e-mthreads-s4000": ("MTT S4000", 4, False),
    "e2e-cambricon-mlu370": ("MLU370-X8", 4, False),
    "e2e-metax-c500": ("MXC500", 4, False),
    "e2e-iluvatar-bi150": ("Iluvatar BI-V150", 4, False),
}
LOGICAL = {  # offline only: the logical slice count the hand-written status claims
    "e2e-nvidia-a10g": 512,
    "e2e-ascend-910b": 252,
    "e2e-amd-mi300x": 64,
    "e2e-mthreads-s4000": 64,
    "e2e-cambricon-mlu370": 64,
    "e2e-metax-c500": 64,
    "e2e-iluvatar-bi150": 64,
}
INSTANCE_TYPES = [
    *(
        _simulated(name, product, logical=LOGICAL.get(name, 0), partitioned=partitioned)
        for name, (product, _cards, partitioned) in HARDWARE.items()
    ),
    # No node carries a T4: the type is never observed, and a budget in MiB cannot be folded.
    _type("e2e-nvidia-t4", "nvidia-tesla-t4", "nvidia", "16Gi", observed=False),
]
QUEUES = {
    t["metadata"]["name"].removeprefix("e2e-"): local_queue_name(t["metadata"]["name"])
    for t in INSTANCE_TYPES
}


@dataclass(frozen=True)
class Case:
    id: str
    pod: dict[str, Any]
    allowed: bool
    path: str = ""  # a field path the refusal must name
    code: int = 0  # the denial's code when it is not 422
    stored_limits: dict[str, dict[str, str]] = field(default_factory=dict)  # container → keys it must carry
    affinity_key: str = ""  # a required node-affinity key the stored Pod must carry


def _pod(
    name: str, pool: str | None, *containers: dict[str, Any], init: list | None = None
) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": QUEUES[pool]} if pool else {}
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": list(containers)}
    if init:
        spec["initContainers"] = init
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": spec,
    }


def _c(name: str, limits: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    container = {"name": name, "image": "ubuntu:24.04", "command": ["sleep", "3600"], **extra}
    if limits is not None:
        container["resources"] = {"limits": dict(limits)}
    return container


L = "spec.containers[0].resources.limits"
CASES: list[Case] = [
    Case(
        "nvidia-whole",
        _pod("nvidia-whole", "nvidia-a10g", _c("worker", {"nvidia.com/gpu": "1"})),
        True,
        stored_limits={"worker": {"nvidia.com/gpu": "1"}},
    ),
    Case(
        "amd-two-exclusive",
        _pod("amd-two-exclusive", "amd-mi300x", _c("a", {"amd.com/gpu": "1"}), _c("b", {"amd.com/gpu": "2"})),
        True,
    ),
    Case(
        "amd-mixed-families",
        _pod(
            "amd-mixed-families",
            "amd-mi300x",
            _c("a", {"amd.com/gpu": "1"}),
            _c("b", {"amd.com/gpu.shared": "1"}),
        ),
        False,
        path="spec",
    ),
    Case(
        "nvidia-init-and-app",
        _pod(
            "nvidia-init-and-app",
            "nvidia-a10g",
            _c("app", {"nvidia.com/gpu": "1"}),
            init=[_c("prep", {"nvidia.com/gpu": "1"})],
        ),
        False,
        path="spec.initContainers",
    ),
    Case(
        "ascend-slice-mib",
        _pod(
            "ascend-slice-mib",
            "ascend-910b",
            _c("main", {"huawei.com/npu.sliced": "1", "huawei.com/npu.sliced.memory-mib": "16384"}),
        ),
        True,
        stored_limits={
            "main": {"huawei.com/npu.sliced.units": "400000", "huawei.com/npu.sliced.cores-percentage": "100"}
        },
    ),
    Case(
        "ascend-slice-three",
        _pod(
            "ascend-slice-three",
            "ascend-910b",
            _c("main", {"huawei.com/npu.sliced": "3", "huawei.com/npu.sliced.memory-percentage": "25"}),
        ),
        False,
        path=f"{L}[huawei.com/npu.sliced]",
    ),
    Case(
        "nvidia-slice-no-budget",
        _pod("nvidia-slice-no-budget", "nvidia-a10g", _c("main", {"nvidia.com/gpu.sliced": "1"})),
        False,
        path="nvidia.com/gpu.sliced.memory-percentage",
    ),
    Case(
        "nvidia-slice-two-budgets",
        _pod(
            "nvidia-slice-two-budgets",
            "nvidia-a10g",
            _c(
                "main",
                {
                    "nvidia.com/gpu.sliced": "1",
                    "nvidia.com/gpu.sliced.memory-percentage": "40",
                    "nvidia.com/gpu.sliced.memory-mib": "1024",
                },
            ),
        ),
        False,
        path="nvidia.com/gpu.sliced.memory",
    ),
    Case(
        "nvidia-slice-150-percent",
        _pod(
            "nvidia-slice-150-percent",
            "nvidia-a10g",
            _c("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "150"}),
        ),
        False,
        path=f"{L}[nvidia.com/gpu.sliced.memory-percentage]",
    ),
    Case(
        "nvidia-slice-mib-over-vram",
        _pod(
            "nvidia-slice-mib-over-vram",
            "nvidia-a10g",
            _c("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "30000"}),
        ),
        False,
        path=f"{L}[nvidia.com/gpu.sliced.memory-mib]",
    ),
    Case(
        "nvidia-slice-40-percent",
        _pod(
            "nvidia-slice-40-percent",
            "nvidia-a10g",
            _c(
                "main",
                {
                    "nvidia.com/gpu.sliced": "1",
                    "nvidia.com/gpu.sliced.memory-percentage": "40",
                    "nvidia.com/gpu.sliced.cores-percentage": "40",
                },
            ),
        ),
        True,
        stored_limits={
            "main": {"nvidia.com/gpu.sliced.units": "640000", "nvidia.com/gpu.sliced.cores-percentage": "40"}
        },
    ),
    Case(
        "nvidia-slice-forged-units",
        _pod(
            "nvidia-slice-forged-units",
            "nvidia-a10g",
            _c(
                "main",
                {
                    "nvidia.com/gpu.sliced": "1",
                    "nvidia.com/gpu.sliced.memory-percentage": "50",
                    "nvidia.com/gpu.sliced.units": "1",
                },
            ),
        ),
        True,
        stored_limits={"main": {"nvidia.com/gpu.sliced.units": "800000"}},
    ),
    Case(
        "hygon-partition-no-profile",
        _pod("hygon-partition-no-profile", "hygon-k100", _c("main", {"hygon.com/dcu.partitioned": "1"})),
        False,
        path="hygon.com/dcu.partitioned",
    ),
    Case(
        "hygon-partition",
        _pod(
            "hygon-partition",
            "hygon-k100",
            _c("main", {"hygon.com/dcu.partitioned": "1", "hygon.com/dcu.partitioned.mig-2g.15gb": "1"}),
        ),
        True,
        stored_limits={"main": {"hygon.com/dcu.partitioned.units": "375000"}},
    ),
    Case(
        "nvidia-two-profiles",
        _pod(
            "nvidia-two-profiles",
            "nvidia-h100",
            _c(
                "main",
                {
                    "nvidia.com/gpu.partitioned": "1",
                    "nvidia.com/gpu.partitioned.mig-2g.20gb": "1",
                    "nvidia.com/gpu.partitioned.mig-1g.10gb": "1",
                },
            ),
        ),
        False,
        path="spec",
    ),
    Case(
        "nvidia-mig-3g",
        _pod(
            "nvidia-mig-3g",
            "nvidia-h100",
            _c("main", {"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-3g.40gb": "1"}),
        ),
        True,
        stored_limits={"main": {"nvidia.com/gpu.partitioned.units": "785000"}},
    ),
    Case(
        "thead-profile-three",
        _pod(
            "thead-profile-three",
            "thead-ppu",
            _c(
                "main",
                {
                    "alibabacloud.com/ppu.partitioned": "1",
                    "alibabacloud.com/ppu.partitioned.mig-4g.48gb": "3",
                },
            ),
        ),
        False,
        path=f"{L}[alibabacloud.com/ppu.partitioned.mig-4g.48gb]",
    ),
    Case(
        "thead-profile",
        _pod(
            "thead-profile",
            "thead-ppu",
            _c(
                "main",
                {
                    "alibabacloud.com/ppu.partitioned": "1",
                    "alibabacloud.com/ppu.partitioned.mig-4g.48gb": "1",
                },
            ),
        ),
        True,
        stored_limits={"main": {"alibabacloud.com/ppu.partitioned.units": "800000"}},
    ),
    Case(
        "nvidia-two-slicing-containers",
        _pod(
            "nvidia-two-slicing-containers",
            "nvidia-a10g",
            _c("x", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "40"}),
            _c("y", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "40"}),
        ),
        False,
        path="spec",
    ),
    Case(
        "nvidia-slice-and-visibility",
        _pod(
            "nvidia-slice-and-visibility",
            "nvidia-a10g",
            _c("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "40"}),
            _c("sshd", {"device.gpustack.ai/nvidia.visibility": "1"}),
        ),
        True,
    ),
    Case(
        "mthreads-sidecar-claims",
        _pod(
            "mthreads-sidecar-claims",
            "mthreads-s4000",
            _c("main", {"mthreads.com/gpu": "1"}),
            init=[_c("proxy", {"mthreads.com/gpu": "1"}, restartPolicy="Always")],
        ),
        False,
        path="spec.initContainers[0].resources.limits",
    ),
    Case(
        "mthreads-sidecar-clean",
        _pod(
            "mthreads-sidecar-clean",
            "mthreads-s4000",
            _c("main", {"mthreads.com/gpu": "1"}),
            init=[_c("proxy", restartPolicy="Always")],
        ),
        True,
    ),
    Case(
        "nvidia-shared-pin",
        _pod("nvidia-shared-pin", "nvidia-a10g", _c("main", {"nvidia.com/gpu.shared": "2"})),
        True,
        affinity_key="acceleratable.feature.gpustack.ai/nvidia-a10g.count",
    ),
    Case(
        "nvidia-shared-rdma",
        _pod(
            "nvidia-shared-rdma",
            "nvidia-a10g",
            _c("main", {"nvidia.com/gpu.shared": "1", "device.gpustack.ai/rdma.shared": "1"}),
        ),
        True,
    ),
    Case(
        "cambricon-whole",
        _pod("cambricon-whole", "cambricon-mlu370", _c("main", {"cambricon.com/mlu": "2"})),
        True,
    ),
    Case(
        "metax-slice",
        _pod(
            "metax-slice",
            "metax-c500",
            _c(
                "main",
                {"metax-tech.com/gpu.sliced": "1", "metax-tech.com/gpu.sliced.memory-percentage": "25"},
            ),
        ),
        True,
        stored_limits={"main": {"metax-tech.com/gpu.sliced.units": "400000"}},
    ),
    Case(
        "iluvatar-whole",
        _pod("iluvatar-whole", "iluvatar-bi150", _c("main", {"iluvatar.com/gpu": "1"})),
        True,
    ),
    Case(
        "t4-unobserved-mib",
        _pod(
            "t4-unobserved-mib",
            "nvidia-t4",
            _c("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "4096"}),
        ),
        False,
        code=500,
    ),
]


def case_pod(case: Case) -> dict[str, Any]:
    return copy.deepcopy(case.pod)


def stored_limit_problems(case: Case, pod: dict[str, Any]) -> list[str]:
    """What a stored (or admitted) Pod lacks of what the case expects; empty when all is there."""
    problems = []
    by_name = {c["name"]: c for c in (pod.get("spec") or {}).get("containers") or []}
    for container, keys in case.stored_limits.items():
        limits = ((by_name.get(container) or {}).get("resources") or {}).get("limits") or {}
        for key, value in keys.items():
            try:
                same = key in limits and quantity.compare(limits[key], value) == 0
            except ValueError:
                same = False
            if not same:
                problems.append(f"{container}: {key}={limits.get(key)!r}, want {value!r}")
    if case.affinity_key:
        terms = (
            ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
            or {}
        ).get("nodeSelectorTerms") or []
        if not terms or not all(
            any(e.get("key") == case.affinity_key for e in t.get("matchExpressions") or []) for t in terms
        ):
            problems.append(f"no required node-affinity on {case.affinity_key}")
    return problems
