"""The Kueue configuration the operator depends on, stated once: the credits transformations and,
for a Kueue without ``resources.quotaCheckStrategy`` (before v0.18), its emulation.

Credits (devices spec §5): ``<base>`` × 1,600,000, ``<base>.shared`` × 160,000, ``.sliced.units``
and ``.partitioned.units`` × 1 become ``credits.gpustack.ai/<manufacturer>`` (strategy Replace).

``quotaCheckStrategy: IgnoreUndeclared`` lets a queue ignore requests it does not declare (tokens,
percentages, profiles, visibility, RDMA, memory).  Kueue v0.17 has no such field and refuses a
Workload requesting anything its queue does not cover, so there the same effect is configured:
exact token keys are dropped by a Replace transformation with no outputs, and whole families by
``excludeResourcePrefixes`` (applied before transformations, so no prefix may cover a folded key).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api import manufacturers
from api.booleans import env_bool
from api.manufacturers import (
    CREDITS_DOMAIN,
    DEVICE_DOMAIN,
    EFA_KEY,
    SUFFIX_PARTITIONED,
    SUFFIX_PARTITIONED_UNITS,
    SUFFIX_SHARED,
    SUFFIX_SLICED,
    SUFFIX_SLICED_UNITS,
    UNITS_PER_CARD,
    UNITS_PER_SHARE,
)

ENV_QUOTA_CHECK_STRATEGY = "GPUSTACK_KUEUE_QUOTA_CHECK_STRATEGY"


def quota_check_strategy(env: Mapping[str, str] | None = None) -> bool:
    """Whether the Kueue in front of the pools knows ``resources.quotaCheckStrategy`` (v0.18 and
    later, as the v0.19.0 the project runs does; the chart sets it from ``kueue.version``).  A
    deploy-time variable, read by the caller; ``false`` selects the v0.17 emulation."""
    return env_bool(ENV_QUOTA_CHECK_STRATEGY, True, env)


CREDIT_FACTORS = {
    "": UNITS_PER_CARD,
    SUFFIX_SHARED: UNITS_PER_SHARE,
    SUFFIX_SLICED_UNITS: 1,
    SUFFIX_PARTITIONED_UNITS: 1,
}


def credit_transformations() -> list[dict[str, Any]]:
    return [
        {
            "input": maker.base + suffix,
            "strategy": "Replace",
            "outputs": {f"{CREDITS_DOMAIN}/{maker.name}": str(factor)},
        }
        for maker in manufacturers.MANUFACTURERS
        for suffix, factor in CREDIT_FACTORS.items()
    ]


def dropped_keys() -> list[str]:
    """Token keys no queue charges, dropped exactly (their names prefix folded keys)."""
    return [
        maker.base + suffix
        for maker in manufacturers.MANUFACTURERS
        for suffix in (SUFFIX_SLICED, SUFFIX_PARTITIONED)
    ]


def excluded_prefixes() -> list[str]:
    prefixes = ["memory", "ephemeral-storage", "hugepages-", f"{DEVICE_DOMAIN}/", EFA_KEY]
    for maker in manufacturers.MANUFACTURERS:
        prefixes += [f"{maker.base}{SUFFIX_SLICED}.memory-", f"{maker.base}{SUFFIX_SLICED}.cores-"]
        if maker.partition_kind:
            prefixes.append(f"{maker.base}{SUFFIX_PARTITIONED}.{maker.partition_kind}-")
    return prefixes


def resources_config(*, quota_check_strategy: bool) -> dict[str, Any]:
    """The ``resources`` block of Kueue's Configuration."""
    if quota_check_strategy:
        return {"transformations": credit_transformations(), "quotaCheckStrategy": "IgnoreUndeclared"}
    drops = [{"input": key, "strategy": "Replace", "outputs": {}} for key in dropped_keys()]
    return {
        "transformations": credit_transformations() + drops,
        "excludeResourcePrefixes": excluded_prefixes(),
    }


# On a Kueue without quotaCheckStrategy an accelerated queue must still declare ``cpu``, or every
# accelerator Pod that requests CPU is refused ("resource cpu unavailable in ClusterQueue").  It
# declares it unbounded, which is what IgnoreUndeclared means: the pool's cards are its quota.
UNBOUNDED_CPU = "1000000"


def accelerated_queue_extra_resources(*, quota_check_strategy: bool) -> list[tuple[str, str]]:
    """(resource, nominal quota) an accelerated ClusterQueue declares beside its credits."""
    return [] if quota_check_strategy else [("cpu", UNBOUNDED_CPU)]
