"""InstanceType and InstanceTypeFlavor objects as the operator's controllers write them, for the
gateway's aggregation tests and benchmark."""

from __future__ import annotations

from typing import Any

from api.objects import Obj

H100_SPEC: Obj = {
    "generalGroup": "generic",
    "acceleratorGroup": "nvidia-h100-80gb-hbm3",
    "acceleratable": True,
    "os": "linux",
    "arch": "amd64",
    "unitResources": {"cpu": "12", "ram": "128Gi"},
    "localStorage": "100Gi",
}
A10G_SPEC: Obj = {
    **H100_SPEC,
    "acceleratorGroup": "nvidia-a10g",
    "unitResources": {"cpu": "8", "ram": "32Gi"},
}
CPU_SPEC: Obj = {
    "generalGroup": "generic",
    "acceleratable": False,
    "os": "linux",
    "arch": "amd64",
    "unitResources": {"cpu": "1", "ram": "2Gi"},
    "localStorage": "100Gi",
}

H100_DETAIL: Obj = {
    "manufacturer": "nvidia",
    "product": "NVIDIA H100 80GB HBM3",
    "family": "hopper",
    "memory": "80Gi",
    "cores": "16896",
    "computeCapability": "9.0",
    "slicedDetail": {
        "logical": {"count": 10},
        "physical": {
            "count": 7,
            "profiles": [{"name": "1g.10gb", "count": 7}, {"name": "7g.80gb", "count": 1}],
        },
    },
}


def view(once: Any, remaining: Any, capacity: Any) -> Obj:
    return {"onceMaxRequest": str(once), "remaining": str(remaining), "capacity": str(capacity)}


def instance_type(
    name: str,
    spec: Obj | None = None,
    *,
    phase: str = "Active",
    ex: tuple = (1, 2, 8),
    sh: tuple = (10, 20, 80),
    sl: tuple = (100, 200, 800),
    pt: tuple = (0, 0, 0),
    cpu: tuple = (64, 128, 128),
    remaining_profiles: list[tuple[str, int]] | None = None,
    detail: Obj | None = None,
    **spec_changes: Any,
) -> Obj:
    partitioned = view(*pt)
    if remaining_profiles is not None:
        partitioned["remainingProfiles"] = [{"name": n, "count": c} for n, c in remaining_profiles]
        partitioned["allocatedProfiles"] = []
    status: Obj = {
        "phase": phase,
        "entrance": f"queue-{name}",
        "accelerator": view(*ex),
        "acceleratorShared": view(*sh),
        "acceleratorSliced": view(*sl),
        "acceleratorPartitioned": partitioned,
        "cpu": view(*cpu),
        "unitSummary": "12/128Gi/100Gi",
        "acceleratorSummary": f"{ex[0]}/{ex[1]} {sh[0]}/{sh[1]} {sl[0]}/{sl[1]} {pt[0]}/{pt[1]}",
        "cpuSummary": f"{cpu[0]}/{cpu[1]}",
    }
    if detail is not None:
        status["detail"] = detail
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "InstanceType",
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "managedFields": [{"manager": "gpustack-operator"}],
        },
        "spec": {**(spec or H100_SPEC), **spec_changes},
        "status": status,
    }


def flavor(name: str, **spec: Any) -> Obj:
    base: Obj = {
        "generalGroup": "generic",
        "acceleratorGroup": "nvidia-h100-80gb-hbm3",
        "acceleratable": True,
        "manufacturer": "nvidia",
        "product": "NVIDIA H100 80GB HBM3",
        "family": "hopper",
        "memory": "80Gi",
        "cores": "16896",
        "sliceable": True,
    }
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "InstanceTypeFlavor",
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": {**base, **spec},
    }
