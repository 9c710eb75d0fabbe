"""Cluster objects the tests, e2e cases and load tests read: InstanceTypes of several shapes (as
complete objects the apiserver accepts, status included), Nodes, Settings."""

from __future__ import annotations

import copy
from typing import Any

from api.naming import local_queue_name

EMPTY_VIEW = {"onceMaxRequest": "0", "remaining": "0", "capacity": "0"}


def profile_list(
    profiles: tuple[tuple[str, int], ...] | list[tuple[str, int]], count: int = 7
) -> list[dict[str, Any]]:
    """``(("3g.40gb", 40192), ...)`` → the slicedDetail profile entries."""
    return [{"name": name, "count": count, "memoryMib": mib} for name, mib in profiles]


def instance_type(
    name: str = "gpustack--nvidia-a10g-linux-amd64",
    *,
    group: str = "nvidia-a10g",
    acceleratable: bool = True,
    cpu: str = "8",
    ram: str = "64Gi",
    storage: str = "100Gi",
    manufacturer: str | None = "nvidia",
    memory: str = "24Gi",
    logical: int = 0,
    profiles: list[dict[str, Any]] | None = None,
    capacity: str = "8",
    cpu_view: dict[str, str] | None = None,
) -> dict[str, Any]:
    detail: dict[str, Any] = {}
    if manufacturer:
        detail = {
            "manufacturer": manufacturer,
            "memory": memory,
            "slicedDetail": {
                "logical": {"count": logical},
                "physical": {"count": sum(p["count"] for p in profiles or []), "profiles": profiles or []},
            },
        }
    spec: dict[str, Any] = {
        "acceleratable": acceleratable,
        "os": "linux",
        "arch": "amd64",
        "generalGroup": "generic",
        "unitResources": {"cpu": cpu, "ram": ram},
        "localStorage": storage,
    }
    if acceleratable:
        spec["acceleratorGroup"] = group
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "InstanceType",
        "metadata": {"name": name, "labels": {"schedule.gpustack.ai/queue-entrance": local_queue_name(name)}},
        "spec": spec,
        "status": {
            "phase": "Active",
            "entrance": local_queue_name(name),
            "detail": detail,
            "accelerator": {"onceMaxRequest": "4", "remaining": capacity, "capacity": capacity},
            "acceleratorShared": dict(EMPTY_VIEW),
            "acceleratorSliced": dict(EMPTY_VIEW),
            "acceleratorPartitioned": dict(EMPTY_VIEW),
            "cpu": cpu_view or {"onceMaxRequest": "48", "remaining": "72", "capacity": "96"},
        },
    }


A10G = instance_type(logical=32)  # 8 cards, sliceable
H100_MIG = instance_type(
    "gpustack--nvidia-h100-80gb-hbm3-linux-amd64",
    group="nvidia-h100-80gb-hbm3",
    memory="80Gi",
    cpu="12",
    ram="128Gi",
    profiles=[
        {"name": "1g.10gb", "count": 21, "memoryMib": 9856},
        {"name": "3g.40gb", "count": 6, "memoryMib": 40192},
        {"name": "7g.80gb", "count": 3, "memoryMib": 80896},
    ],
    capacity="3",
)
GENERIC = instance_type(
    "gpustack--generic-linux-amd64", acceleratable=False, cpu="1", ram="2Gi", manufacturer=None
)
UNOBSERVED = instance_type("gpustack--nvidia-t4-linux-amd64", group="nvidia-tesla-t4", manufacturer=None)


def node(name: str = "gpu-node-01") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
    }


def setting(name: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "gpustack.ai/v1",
        "kind": "Setting",
        "metadata": {"name": name, "namespace": "gpustack-system"},
        "spec": {"value": value},
    }


def cluster(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    return [copy.deepcopy(o) for o in (A10G, H100_MIG, GENERIC, UNOBSERVED, node(), *extra)]
