"""Accelerator manufacturers and the grammar of their Kubernetes resource keys.

Every manufacturer has a base resource ``<base>`` (``nvidia.com/gpu``).  The request families are
spelled as suffixes of it::

    <base>                               exclusive: whole cards
    <base>.shared                        shared: N distinct cards, one share each
    <base>.sliced                        logical slice (always 1)
    <base>.sliced.units                  slice units, written by the Pod webhook (fold)
    <base>.sliced.cores-percentage       (0,100], defaulted to 100
    <base>.sliced.memory-percentage      (0,100]
    <base>.sliced.memory-mib             (0, card VRAM MiB]
    <base>.partitioned                   hardware partition instance (always 1)
    <base>.partitioned.units             partition units, written by the Pod webhook
    <base>.partitioned.<kind>-<profile>  the profile, always 1
    device.gpustack.ai/<mfr>.visibility  SSH-sidecar visibility tokens (not a family)
    credits.gpustack.ai/<mfr>            Kueue credits (never requested, never on nodes)

The identity columns are overridable through ``GPUSTACK_<MFR>_*`` environment variables, read on first use.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Units per card on the ledger and credit basis: 2**9 * 5**5, so every fold stays integral.
UNITS_PER_CARD = 1_600_000
UNITS_PER_SHARE = UNITS_PER_CARD // 10  # 160,000
UNITS_PER_PERCENT = UNITS_PER_CARD // 100  # 16,000
SHARES_PER_CARD = 10
VISIBILITY_TOKENS_PER_CARD = 512

FAMILY_EXCLUSIVE = "exclusive"
FAMILY_SHARED = "shared"
FAMILY_SLICED = "sliced"
FAMILY_PARTITIONED = "partitioned"
FAMILY_VISIBILITY = "visibility"
FAMILIES = (FAMILY_EXCLUSIVE, FAMILY_SHARED, FAMILY_SLICED, FAMILY_PARTITIONED)

SUFFIX_SHARED = ".shared"
SUFFIX_SLICED = ".sliced"
SUFFIX_SLICED_UNITS = ".sliced.units"
SUFFIX_SLICED_CORES = ".sliced.cores-percentage"
SUFFIX_SLICED_MEMORY_PERCENT = ".sliced.memory-percentage"
SUFFIX_SLICED_MEMORY_MIB = ".sliced.memory-mib"
SUFFIX_PARTITIONED = ".partitioned"
SUFFIX_PARTITIONED_UNITS = ".partitioned.units"

DEVICE_DOMAIN = "device.gpustack.ai"
CREDITS_DOMAIN = "credits.gpustack.ai"
RDMA_KEYS = (
    "device.gpustack.ai/rdma",
    "device.gpustack.ai/rdma.shared",
    "device.gpustack.ai/rdma.partitioned",
)
EFA_KEY = "vpc.amazonaws.com/efa"


@dataclass(frozen=True, slots=True)
class Manufacturer:
    """One row of the manufacturer table."""

    name: str
    base: str
    pci_vendor_id: str
    runtime_class: str
    slices_per_card: int | None
    compute_overcommit: bool | None
    partition_kind: str  # "" when the manufacturer cannot partition

    @property
    def can_partition(self) -> bool:
        return bool(self.partition_kind)

    @property
    def visibility_key(self) -> str:
        return f"{DEVICE_DOMAIN}/{self.name}.visibility"

    @property
    def credits_key(self) -> str:
        return f"{CREDITS_DOMAIN}/{self.name}"

    def key(self, suffix: str = "") -> str:
        return self.base + suffix

    def profile_key(self, profile: str) -> str:
        """``<base>.partitioned.<kind>-<profile>`` for a profile such as ``3g.40gb``."""
        return f"{self.base}{SUFFIX_PARTITIONED}.{self.partition_kind or 'mig'}-{profile}"


_DEFAULTS: tuple[Manufacturer, ...] = (
    Manufacturer("nvidia", "nvidia.com/gpu", "10de", "nvidia", 128, True, "mig"),
    Manufacturer("ascend", "huawei.com/npu", "19e5", "ascend", 63, True, ""),
    Manufacturer("cambricon", "cambricon.com/mlu", "cabc", "cambricon", 16, False, ""),
    Manufacturer("hygon", "hygon.com/dcu", "1d94", "hygon", 4, False, "mig"),
    Manufacturer("mthreads", "mthreads.com/gpu", "1ed5", "mthreads", 16, False, ""),
    Manufacturer("metax", "metax-tech.com/gpu", "9999", "metax", 16, False, ""),
    Manufacturer("iluvatar", "iluvatar.com/gpu", "1e3e", "iluvatar", None, None, ""),
    Manufacturer("amd", "amd.com/gpu", "1002", "amd", None, False, ""),
    Manufacturer("thead", "alibabacloud.com/ppu", "1ded", "", None, None, "mig"),
)


def _from_environment(row: Manufacturer, env: Mapping[str, str]) -> Manufacturer:
    prefix = f"GPUSTACK_{row.name.upper()}_"
    return Manufacturer(
        name=row.name,
        base=env.get(prefix + "ACCELERATABLE_RESOURCE_NAME", row.base) or row.base,
        pci_vendor_id=env.get(prefix + "PCI_VENDOR_ID", row.pci_vendor_id) or row.pci_vendor_id,
        runtime_class=env.get(prefix + "ACCELERATABLE_RUNTIME_NAME", row.runtime_class),
        slices_per_card=row.slices_per_card,
        compute_overcommit=row.compute_overcommit,
        partition_kind=env.get(prefix + "PARTITION_KIND", row.partition_kind) if row.partition_kind else "",
    )


def table(env: Mapping[str, str] | None = None) -> tuple[Manufacturer, ...]:
    """The rows with their ``GPUSTACK_<MFR>_*`` overrides from ``env`` (the process environment)."""
    source = os.environ if env is None else env
    return tuple(_from_environment(m, source) for m in _DEFAULTS)


# MANUFACTURERS, BY_NAME, BY_BASE and BY_PCI_VENDOR are computed from the environment on first use
# (PEP 562), not when the module is imported, and then kept for the life of the process.
MANUFACTURERS: tuple[Manufacturer, ...]
BY_NAME: dict[str, Manufacturer]
BY_BASE: dict[str, Manufacturer]
BY_PCI_VENDOR: dict[str, Manufacturer]
_LAZY = ("MANUFACTURERS", "BY_NAME", "BY_BASE", "BY_PCI_VENDOR")


def _load() -> dict[str, Any]:
    rows = table()
    values: dict[str, Any] = {
        "MANUFACTURERS": rows,
        "BY_NAME": {m.name: m for m in rows},
        "BY_BASE": {m.base: m for m in rows},
        "BY_PCI_VENDOR": {m.pci_vendor_id: m for m in rows},
    }
    globals().update(values)
    return values


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return _load()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def manufacturer_of_group(accelerator_group: str) -> Manufacturer | None:
    """The manufacturer of an accelerator group key ``<manufacturer>-<product>`` (``nvidia-a10g``)."""
    name = accelerator_group.split("-", 1)[0]
    by_name: dict[str, Manufacturer] = globals().get("BY_NAME") or _load()["BY_NAME"]
    return by_name.get(name)


def publish_profile(manufacturer: str, profile: str) -> str:
    """The profile as published in resource keys: T-Head's ``4g48gb`` gains its separator."""
    if manufacturer == "thead" and "." not in profile:
        head, sep, tail = profile.partition("g")
        if sep and head.isdigit() and tail:
            return f"{head}g.{tail}"
    return profile
