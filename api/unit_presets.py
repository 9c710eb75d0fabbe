"""InstanceType unit presets: the unit CPU/RAM (and storage) a node-derived InstanceType is stamped with.

The table is data (``api/data/unit_presets.yaml``): product families mapped to VRAM tiers —
``fallback`` 4/16Gi, ``small`` (≤16 GiB) 8/32Gi, ``medium`` (≤48) 8/64Gi, ``large`` (≤96) 12/128Gi,
``xlarge`` (>96) 12/192Gi — with storage always ``100Gi`` and a CPU-only type always 1/2Gi/100Gi.
A family's tier is not always its VRAM band (it drops to what its smallest multi-accelerator hosts
provide), so the band itself is only :func:`tier_for_memory`, a reading aid; an unlisted accelerator
gets ``fallback``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

TIERS = ("fallback", "small", "medium", "large", "xlarge")


@dataclass(frozen=True, slots=True)
class UnitPreset:
    """The stamp: unit CPU and RAM, local storage, and the tier they came from."""

    tier: str
    cpu: str
    ram: str
    local_storage: str


@dataclass(frozen=True, slots=True)
class UnitPresets:
    tiers: dict[str, dict[str, Any]]
    families: dict[str, str]
    aliases: dict[str, tuple[str, ...]]
    local_storage: str
    cpu_only: UnitPreset

    def tier(self, name: str) -> UnitPreset:
        row = self.tiers[name]
        return UnitPreset(name, str(row["cpu"]), str(row["ram"]), self.local_storage)

    def family_of(self, accelerator_group: str) -> str | None:
        """The most specific family whose tokens the group's product contains, in order."""
        group = _tokens(accelerator_group)
        if not group:
            return None
        best: tuple[int, int, str] | None = None
        for family, spellings in self._spellings():
            for spelling in spellings:
                tokens = _tokens(spelling)
                if tokens[0] != group[0] or not _in_order(tokens[1:], _product(group)):
                    continue
                rank = (len(tokens), len(spelling), family)
                if best is None or rank[:2] > best[:2]:
                    best = rank
        return best[2] if best else None

    def for_accelerator(self, accelerator_group: str) -> UnitPreset:
        """The preset of an accelerated InstanceType whose acceleratorGroup is ``accelerator_group``."""
        family = self.family_of(accelerator_group)
        return self.tier(self.families[family] if family else "fallback")

    def _spellings(self) -> list[tuple[str, tuple[str, ...]]]:
        return [(f, (f, *self.aliases.get(f, ()))) for f in sorted(self.families)]


def _tokens(text: str) -> list[str]:
    return [t for t in re.split(r"[^a-z0-9]+", text.lower()) if t]


def _product(tokens: list[str]) -> list[str]:
    """The product tokens of a group key, without a repeated manufacturer word."""
    rest = tokens[1:]
    return rest[1:] if rest and rest[0] == tokens[0] else rest


def _in_order(needles: list[str], haystack: list[str]) -> bool:
    position = 0
    for needle in needles:
        try:
            position = haystack.index(needle, position) + 1
        except ValueError:
            return False
    return True


def tier_for_memory(memory_mib: int) -> str:
    """The VRAM band of a card (``fallback`` for an unknown size of 0)."""
    gib = memory_mib / 1024
    if memory_mib <= 0:
        return "fallback"
    if gib <= 16:
        return "small"
    if gib <= 48:
        return "medium"
    if gib <= 96:
        return "large"
    return "xlarge"


@cache
def load() -> UnitPresets:
    """The shipped table."""
    text = resources.files("api").joinpath("data/unit_presets.yaml").read_text()
    return parse(yaml.safe_load(text))


def parse(document: dict[str, Any]) -> UnitPresets:
    """A table from its YAML document; raises ValueError on a tier or family that does not fit."""
    tiers = dict(document["tiers"])
    missing = [t for t in TIERS if t not in tiers]
    if missing:
        raise ValueError(f"unit presets: tiers missing: {', '.join(missing)}")
    families = {str(k): str(v) for k, v in document["families"].items()}
    unknown = sorted(f for f, t in families.items() if t not in tiers)
    if unknown:
        raise ValueError(f"unit presets: families on an unknown tier: {', '.join(unknown)}")
    aliases = {str(k): tuple(str(a) for a in v) for k, v in (document.get("aliases") or {}).items()}
    stray = sorted(a for a in aliases if a not in families)
    if stray:
        raise ValueError(f"unit presets: aliases of unknown families: {', '.join(stray)}")
    cpu_only = document["cpuOnly"]
    return UnitPresets(
        tiers=tiers,
        families=families,
        aliases=aliases,
        local_storage=str(document["localStorage"]),
        cpu_only=UnitPreset(
            "cpu-only", str(cpu_only["cpu"]), str(cpu_only["ram"]), str(cpu_only["localStorage"])
        ),
    )


def for_accelerator(accelerator_group: str) -> UnitPreset:
    """The preset of an accelerated type, from the shipped table."""
    return load().for_accelerator(accelerator_group)


def cpu_only() -> UnitPreset:
    """The preset of a CPU-only type: 1 CPU, 2Gi, 100Gi."""
    return load().cpu_only
