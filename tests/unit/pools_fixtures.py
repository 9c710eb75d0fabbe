"""Objects the pool tests share: simulated nodes and Devices ledgers, as the device manager and
NFD would label and report them (nodeplugins.devicemanager.simulated)."""

from __future__ import annotations

import copy
from typing import Any

from api import constants
from nodeplugins.devicemanager import simulated

M = 1_600_000
A10G = simulated.PRODUCTS["NVIDIA A10G"]
H100 = simulated.PRODUCTS["NVIDIA H100 80GB HBM3"]
T4 = simulated.PRODUCTS["Tesla T4"]
HOSTNAME = simulated.HOSTNAME_PROFILE


def node(
    name: str,
    product: simulated.Product | None = None,
    count: int = 0,
    *,
    cores: int = 64,
    partitioned: bool = False,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    drop: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A Node as the cluster would hold it; ``product=None`` is a CPU-only node."""
    if product is not None:
        node_labels = simulated.node_labels(name, product, count, cpu_cores=cores)
        capacity = simulated.plugin_capacity(product, count, partitioned=partitioned)
    else:
        node_labels = {
            constants.LABEL_OS: "linux",
            constants.LABEL_ARCH: "amd64",
            constants.LABEL_HOSTNAME: name,
            constants.LABEL_MANAGED: "true",
            constants.LABEL_ACCELERATABLE: "false",
            constants.label_general_group("generic"): "true",
            f"{constants.PREFIX_GENERAL}generic.count": str(cores),
            constants.LABEL_TOPOLOGY_PROFILE: HOSTNAME,
        }
        capacity = {}
    node_labels.update(labels or {})
    for key in drop:
        node_labels.pop(key, None)
    capacity = {"cpu": str(cores), "memory": "512Gi", "pods": "250", **capacity}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels,
            "annotations": dict(annotations or {}),
            "resourceVersion": "1",
        },
        "status": {"capacity": dict(capacity), "allocatable": dict(capacity)},
    }


def devices(
    name: str, product: simulated.Product, count: int, *, partitioned: bool = False
) -> dict[str, Any]:
    return simulated.devices(name, product, count, partitioned=partitioned)


def sliced(devices_obj: dict[str, Any], percent: int, cards: range | None = None) -> dict[str, Any]:
    """``devices_obj`` with one ``percent`` % slice on each card (or on ``cards``)."""
    out = copy.deepcopy(devices_obj)
    for group in out["status"]["groups"]:
        for row in group["accelerators"]:
            if cards is not None and row["index"] not in cards:
                continue
            used = percent * M // 100
            row.update(mode=3, allocated=used, remaining=M - used, allocatedSlices=1)
    return out


def partition_example(extra_rows: list | None = None) -> dict:
    """§7: 3 partitioned H100-80GB cards, one 3g.40gb on slices 0-3 of card 0."""
    d = devices("h1", H100, 3, partitioned=True)
    rows = d["status"]["groups"][0]["accelerators"]
    rows[0].update(
        mode=4,
        allocatedProfiles=[{"name": "3g.40gb", "count": 1}],
        remainingProfiles=[
            {"name": "1g.10gb", "count": 3},
            {"name": "1g.20gb", "count": 2},
            {"name": "2g.20gb", "count": 1},
            {"name": "3g.40gb", "count": 1},
            {"name": "4g.40gb", "count": 0},
            {"name": "7g.80gb", "count": 0},
        ],
    )
    for i, row in enumerate(extra_rows or []):
        rows[i + 1].update(row)
    return d
