"""The ``main`` container's resources, per InstanceType (model-deployment.md §7.4, §2.2).

Accelerator keys follow the role's ``resources`` and the InstanceType's manufacturer:

- whole cards ``N``: ``<base>: N`` (an explicit ``0`` asks for none);
- a logical slice (either percentage non-zero): ``<base>.sliced: 1`` with
  ``.sliced.memory-percentage`` and ``.sliced.cores-percentage`` (an unset one copies the other);
- a partition profile: ``<base>.partitioned: 1`` and ``<base>.partitioned.<kind>-<profile>: 1``;
- ``interface: N`` fabric interfaces: one RDMA interface is ``device.gpustack.ai/rdma.shared: 1``,
  more are ``device.gpustack.ai/rdma: N``; EFA uses the EFA plugin's key; 0/unset adds none.

CPU, memory and ephemeral storage are the InstanceType's unit resources (and ``localStorage``)
times the card share: whole cards ``max(N, 1)``, a slice its memory percentage, a partition its
profile's share of the card's memory (clamped to 1..100 %).  Limits are those; requests equal them
unless the Setting ``instance-general-resources-overcommit`` is on, which requests 100m CPU (800m per
whole core on a CPU-only type) and 128Mi memory per unit and an eighth of the storage, never above the
limit — the rule Instances follow.  Limits equal requests on every accelerator key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from api import units
from api.manufacturers import (
    BY_NAME,
    EFA_KEY,
    RDMA_KEYS,
    SUFFIX_PARTITIONED,
    SUFFIX_SLICED,
    SUFFIX_SLICED_CORES,
    SUFFIX_SLICED_MEMORY_PERCENT,
    Manufacturer,
    manufacturer_of_group,
)
from fastpath import quantity

RDMA_EXCLUSIVE, RDMA_SHARED = RDMA_KEYS[0], RDMA_KEYS[1]
MIB = 2**20
OVERCOMMIT_CPU_MILLI_ACCELERATED = 100
OVERCOMMIT_CPU_MILLI_GENERAL = 800
OVERCOMMIT_MEMORY_PER_UNIT = 128 * MIB
OVERCOMMIT_STORAGE_DIVISOR = 8


class ResourceError(Exception):
    """The role's request cannot be rendered on its InstanceType."""


@dataclass(frozen=True, slots=True)
class Share:
    """The fraction of one unit a Pod takes, and how many overcommit units it counts as."""

    numerator: int
    denominator: int
    units: int


def _whole(value: Any) -> int | None:
    if value is None or value == "":
        return None
    try:
        found = quantity.whole(value)
    except ValueError:
        return None
    return found if isinstance(found, int) else None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def manufacturer(instance_type: Mapping[str, Any]) -> Manufacturer | None:
    detail = (instance_type.get("status") or {}).get("detail") or {}
    found = BY_NAME.get(detail.get("manufacturer") or "")
    if found is not None:
        return found
    return manufacturer_of_group((instance_type.get("spec") or {}).get("acceleratorGroup") or "")


def _card_mib(instance_type: Mapping[str, Any]) -> int:
    memory = ((instance_type.get("status") or {}).get("detail") or {}).get("memory") or ""
    try:
        return quantity.floor_div(memory, MIB) if memory else 0
    except ValueError:
        return 0


def _profile_mib(instance_type: Mapping[str, Any], profile: str) -> int:
    detail = (instance_type.get("status") or {}).get("detail") or {}
    physical = ((detail.get("slicedDetail") or {}).get("physical") or {}).get("profiles") or ()
    for entry in physical:
        if isinstance(entry, Mapping) and entry.get("name") == profile:
            return _int(entry.get("memoryMib"))
    return 0


def accelerator_keys(
    request: Mapping[str, Any], instance_type: Mapping[str, Any]
) -> tuple[dict[str, str], Share]:
    """The accelerator keys of one Pod and the share of a unit it takes."""
    spec = instance_type.get("spec") or {}
    if not spec.get("acceleratable"):
        return {}, Share(1, 1, 1)
    maker = manufacturer(instance_type)
    type_name = (instance_type.get("metadata") or {}).get("name", "")
    if maker is None:
        raise ResourceError(f"InstanceType {type_name} names no known accelerator manufacturer")
    profile = request.get("acceleratorPartitionedProfile") or ""
    memory_pct = _int(request.get("acceleratorSlicedMemoryPercentage"))
    cores_pct = _int(request.get("acceleratorSlicedCoresPercentage"))
    if profile:
        card, mib = _card_mib(instance_type), _profile_mib(instance_type, profile)
        pct = min(max(mib * 100 // card, 1), 100) if card and mib else 100
        keys = {maker.key(SUFFIX_PARTITIONED): "1", maker.profile_key(profile): "1"}
        return keys, Share(pct, 100, 1)
    if memory_pct or cores_pct:
        memory_pct = memory_pct or cores_pct
        cores_pct = cores_pct or memory_pct
        keys = {
            maker.key(SUFFIX_SLICED): "1",
            maker.key(SUFFIX_SLICED_MEMORY_PERCENT): str(memory_pct),
            maker.key(SUFFIX_SLICED_CORES): str(cores_pct),
        }
        return keys, Share(memory_pct, 100, 1)
    count = _whole(request.get("accelerator"))
    if count is None:
        count = 1 if request.get("accelerator") in (None, "") else 0
    keys = {maker.key(): str(count)} if count > 0 else {}
    return keys, Share(max(count, 1), 1, max(count, 1))


def interface_keys(count: int, fabric: str | None) -> dict[str, str]:
    """Fabric interface keys for ``count`` interfaces on the leg's ``fabric`` (rdma | efa)."""
    if count <= 0 or fabric not in ("rdma", "efa"):
        return {}
    if fabric == "efa":
        return {EFA_KEY: str(count)}
    return {RDMA_SHARED: "1"} if count == 1 else {RDMA_EXCLUSIVE: str(count)}


def _bytes(value: Any) -> int:
    try:
        return quantity.floor_div(value, 1) if value else 0
    except ValueError:
        return 0


def _milli(value: Any) -> int:
    try:
        return quantity.milli(value) if value else 0
    except ValueError:
        return 0


def general(instance_type: Mapping[str, Any], share: Share, *, overcommit: bool) -> tuple[dict, dict]:
    """``(requests, limits)`` of cpu, memory and ephemeral-storage."""
    spec = instance_type.get("spec") or {}
    unit = spec.get("unitResources") or {}
    num, den = share.numerator, share.denominator
    cpu = _milli(unit.get("cpu")) * num // den
    memory = _bytes(unit.get("ram")) * num // den
    storage = _bytes(spec.get("localStorage")) * num // den
    limits: dict[str, str] = {}
    if cpu:
        limits["cpu"] = units.cores(cpu)
    if memory:
        limits["memory"] = units.size(memory)
    if storage:
        limits["ephemeral-storage"] = units.size(storage)
    if not overcommit:
        return dict(limits), limits
    if spec.get("acceleratable"):
        cpu_units, cpu_per_unit = share.units, OVERCOMMIT_CPU_MILLI_ACCELERATED
    else:
        cpu_units, cpu_per_unit = max(math.ceil(cpu / 1000), 1), OVERCOMMIT_CPU_MILLI_GENERAL
    requests: dict[str, str] = {}
    if cpu:
        requests["cpu"] = units.cores(min(cpu, cpu_units * cpu_per_unit))
    if memory:
        requests["memory"] = units.size(min(memory, cpu_units * OVERCOMMIT_MEMORY_PER_UNIT))
    if storage:
        requests["ephemeral-storage"] = units.size(storage // OVERCOMMIT_STORAGE_DIVISOR)
    return requests, limits


def container_resources(
    request: Mapping[str, Any],
    instance_type: Mapping[str, Any],
    *,
    overcommit: bool,
    interfaces: int = 0,
    fabric: str | None = None,
) -> dict[str, dict[str, str]]:
    """The ``resources`` block of the ``main`` container."""
    accelerators, share = accelerator_keys(request, instance_type)
    requests, limits = general(instance_type, share, overcommit=overcommit)
    extra = {**accelerators, **interface_keys(interfaces, fabric)}
    requests.update(extra)
    limits.update(extra)
    out: dict[str, dict[str, str]] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out
