"""What the Instance's containers ask for (instances spec A.7): ``main``'s accelerator keys and
general resources, and the ``sshd`` sidecar's visibility tokens.

Accelerator keys (limits = requests):

==================  ====================================================================
whole card N        ``<base>: N``
logical slice       ``<base>.sliced: 1`` + ``.sliced.memory-percentage`` + ``.sliced.cores-percentage``
partition           ``<base>.partitioned: 1`` + ``<base>.partitioned.<kind>-<profile>: 1``
SSH sidecar         ``device.gpustack.ai/<manufacturer>.visibility: <main's card count>``
==================  ====================================================================

General limits are ``cpu``, ``memory`` and ``ephemeral-storage`` from ``spec.resources``.  Requests
equal the limits unless ``instance-general-resources-overcommit`` is on; then per unit ``100m``
CPU on an accelerated type (a unit is an accelerator: the whole-card count, 1 for a slice or a
partition) or ``800m`` on a general one (a unit is a whole core, rounded up), ``128Mi`` memory per
unit, and an eighth of the storage — never above the limit.  A 1C/4Gi unit with 2 cards and 64Gi
of storage requests ``200m``/``256Mi``/``8Gi``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from api import units
from api.manufacturers import SUFFIX_PARTITIONED, SUFFIX_SLICED, Manufacturer, publish_profile
from fastpath import quantity

ACCELERATED_CPU_PER_UNIT = 100  # millicores
GENERAL_CPU_PER_UNIT = 800  # millicores
MEMORY_PER_UNIT = 128 * 2**20
STORAGE_DIVISOR = 8
GENERAL_KEYS = (("cpu", "cpu"), ("ram", "memory"), ("localStorage", "ephemeral-storage"))


@dataclass(frozen=True, slots=True)
class AcceleratorRequest:
    """``main``'s accelerator keys and the card count its sidecar's visibility resource carries."""

    keys: dict[str, str] = field(default_factory=dict)
    cards: int = 0


def _percentage(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def accelerator_request(resources: Mapping[str, Any], maker: Manufacturer | None) -> AcceleratorRequest:
    """The keys for ``spec.resources`` on a type of ``maker`` (``None``: a general type)."""
    if maker is None:
        return AcceleratorRequest()
    profile = resources.get("acceleratorPartitionedProfile") or ""
    memory = _percentage(resources.get("acceleratorSlicedMemoryPercentage"))
    cores = _percentage(resources.get("acceleratorSlicedCoresPercentage"))
    if profile:
        published = maker.profile_key(publish_profile(maker.name, profile))
        return AcceleratorRequest({maker.key(SUFFIX_PARTITIONED): "1", published: "1"}, 1)
    if memory or cores:
        return AcceleratorRequest(
            {
                maker.key(SUFFIX_SLICED): "1",
                maker.key(f"{SUFFIX_SLICED}.memory-percentage"): str(memory or cores),
                maker.key(f"{SUFFIX_SLICED}.cores-percentage"): str(cores or memory),
            },
            1,
        )
    count = quantity.whole(resources.get("accelerator") or 0) or 0
    if count <= 0:
        return AcceleratorRequest()
    return AcceleratorRequest({maker.key(): str(count)}, count)


def general_limits(resources: Mapping[str, Any]) -> dict[str, str]:
    """``cpu``/``memory``/``ephemeral-storage`` limits: the sized spec values, zero ones left out."""
    limits: dict[str, str] = {}
    for field_name, key in GENERAL_KEYS:
        value = resources.get(field_name)
        if value in (None, "") or quantity.parse(value)[0] <= 0:
            continue
        limits[key] = str(value)
    return limits


def _capped(limit: str, wanted: tuple[int, int], wanted_text: str) -> str:
    """``min(limit, wanted)``, ``wanted`` an exact fraction; the limit keeps its own spelling."""
    num, den = quantity.parse(limit)
    return limit if wanted[0] * den >= num * wanted[1] else wanted_text


def general_requests(
    limits: Mapping[str, str], *, accelerated: bool, cards: int, overcommit: bool
) -> dict[str, str]:
    """Requests for ``limits`` under the overcommit rule (equal to the limits when it is off)."""
    if not overcommit:
        return dict(limits)
    if accelerated:
        unit_count = max(cards, 1)
        millicores = unit_count * ACCELERATED_CPU_PER_UNIT
    else:
        unit_count = max(-(-quantity.milli(limits.get("cpu", "1")) // 1000), 1)
        millicores = unit_count * GENERAL_CPU_PER_UNIT
    requests: dict[str, str] = {}
    if "cpu" in limits:
        requests["cpu"] = _capped(limits["cpu"], (millicores, 1000), units.cores(millicores))
    if "memory" in limits:
        memory = unit_count * MEMORY_PER_UNIT
        requests["memory"] = _capped(limits["memory"], (memory, 1), units.size(memory))
    if "ephemeral-storage" in limits:
        num, den = quantity.parse(limits["ephemeral-storage"])
        eighth = (num, den * STORAGE_DIVISOR)
        requests["ephemeral-storage"] = _capped(
            limits["ephemeral-storage"], eighth, units.size(num // (den * STORAGE_DIVISOR))
        )
    return requests
