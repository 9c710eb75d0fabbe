"""api.unit_presets: the per-family tiers of docs/reference/instance-type-unit-resources.md."""

from __future__ import annotations

import pytest

from api import unit_presets
from api.unit_presets import UnitPreset, cpu_only, for_accelerator, load, tier_for_memory


def test_tiers() -> None:
    table = load()
    assert {name: (p.cpu, p.ram) for name in unit_presets.TIERS for p in [table.tier(name)]} == {
        "fallback": ("4", "16Gi"),
        "small": ("8", "32Gi"),
        "medium": ("8", "64Gi"),
        "large": ("12", "128Gi"),
        "xlarge": ("12", "192Gi"),
    }
    assert {table.tier(t).local_storage for t in unit_presets.TIERS} == {"100Gi"}
    assert cpu_only() == UnitPreset("cpu-only", "1", "2Gi", "100Gi")


@pytest.mark.parametrize(
    ("group", "family", "tier"),
    [
        ("nvidia-a10g", "nvidia-a10g", "medium"),
        ("nvidia-tesla-t4", "nvidia-t4", "small"),
        ("nvidia-a100-sxm4-80gb", "nvidia-a100-80gb", "large"),
        ("nvidia-a100-pcie-40gb", "nvidia-a100-40gb", "medium"),
        ("nvidia-a100-sxm4", "nvidia-a100", "medium"),
        ("nvidia-h100-80gb-hbm3", "nvidia-h100", "xlarge"),
        ("nvidia-l40", "nvidia-l40", "medium"),
        ("nvidia-l40s", "nvidia-l40s", "large"),
        ("nvidia-geforce-rtx-4090d", "nvidia-rtx-4090", "medium"),
        ("nvidia-quadro-rtx-6000", "nvidia-rtx-6000", "small"),
        ("ascend-910b4-1", "ascend-910b4", "medium"),
        ("ascend-910-9392", "ascend-910-9392", "xlarge"),
        ("hygon-k100-ai", "hygon-k100", "large"),
        ("cambricon-mlu370-x8", "cambricon-mlu370", "medium"),
        ("amd-instinct-mi300x", "amd-mi300x", "xlarge"),
        ("thead-ppu-zw810e", "thead-ppu-zw810e", "medium"),
    ],
)
def test_families(group: str, family: str, tier: str) -> None:
    assert load().family_of(group) == family
    assert for_accelerator(group).tier == tier


@pytest.mark.parametrize("group", ["nvidia-unknown-9000", "cambricon-mlu", "amd-a10g", ""])
def test_unlisted_accelerators_get_the_fallback(group: str) -> None:
    assert for_accelerator(group) == UnitPreset("fallback", "4", "16Gi", "100Gi")


def test_vram_bands() -> None:
    assert [tier_for_memory(m * 1024) for m in (0, 16, 17, 48, 49, 96, 97)] == [
        "fallback",
        "small",
        "medium",
        "medium",
        "large",
        "large",
        "xlarge",
    ]


def test_the_table_refuses_what_does_not_fit() -> None:
    document = {
        "tiers": {t: {"cpu": "1", "ram": "1Gi"} for t in unit_presets.TIERS},
        "localStorage": "100Gi",
        "cpuOnly": {"cpu": "1", "ram": "2Gi", "localStorage": "100Gi"},
        "families": {"nvidia-x": "huge"},
    }
    with pytest.raises(ValueError, match="unknown tier"):
        unit_presets.parse(document)
    document["families"] = {"nvidia-x": "small"}
    document["aliases"] = {"nvidia-y": ["nvidia-z"]}
    with pytest.raises(ValueError, match="aliases of unknown families"):
        unit_presets.parse(document)
