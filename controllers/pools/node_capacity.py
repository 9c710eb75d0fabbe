"""Node counting keys, purely (devices spec §3.2, gate 4).

The device plugin serves the token pools (``<base>``, ``.shared``, ``.sliced``, ``.partitioned``);
the worker publishes the counting keys beside them on ``Node.status.capacity``:

- while ``<base>.sliced`` capacity > 0: ``.sliced.units`` = cards × M,
  ``.sliced.cores-percentage`` = Σ slices × 100 (compute overcommit) or cards × 100,
  ``.sliced.memory-percentage`` = cards × 100, ``.sliced.memory-mib`` = Σ cards × VRAM MiB;
- while ``<base>.partitioned`` capacity > 0: ``.partitioned.units`` = partitioned cards × M and
  ``.partitioned.<kind>-<profile>`` = Σ per card (allocated + remaining) of that profile, a card
  without a ledger row counting its static ceiling.

Keys are per base, summed over the manufacturer's models on the node, gated on **capacity** (not
allocatable, which saturation zeroes), and every stale suffix or per-profile key is removed.

**Compatibility with Kueue before the fix of kubernetes-sigs/kueue#12005** (``credits=True``; off by
default): Kueue v0.17.0-v0.17.4 and v0.18.0 check a topology-aware admission's *transformed*
requests against node capacity, so a Workload whose accelerator keys became
``credits.gpustack.ai/<manufacturer>`` never fits any node.  With ``credits`` the node also
advertises ``credits.gpustack.ai/<manufacturer>`` = its cards of that manufacturer × M: no Pod
requests it (the kube-scheduler never sees it), and TAS then accounts credits per node.  That makes
those releases admit, but not fill a pool: they choose the node by the untransformed requests,
which they never count as used, so every Workload after the first node is full goes back to it
(docs/scheduling.md).  Kueue v0.17.5, v0.18.1 and later count the Pods' own requests on both sides;
there credits stay off nodes as the spec says.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from api.manufacturers import (
    MANUFACTURERS,
    SUFFIX_PARTITIONED,
    SUFFIX_PARTITIONED_UNITS,
    SUFFIX_SLICED,
    SUFFIX_SLICED_CORES,
    SUFFIX_SLICED_MEMORY_MIB,
    SUFFIX_SLICED_MEMORY_PERCENT,
    SUFFIX_SLICED_UNITS,
    UNITS_PER_CARD,
    Manufacturer,
)
from fastpath import quantity
from fastpath.cards import NodeLedger
from fastpath.fit_labels import partition_capacity
from fastpath.ledger import node_ledger

SLICED_SUFFIXES = (
    SUFFIX_SLICED_UNITS,
    SUFFIX_SLICED_CORES,
    SUFFIX_SLICED_MEMORY_PERCENT,
    SUFFIX_SLICED_MEMORY_MIB,
)


@dataclass(slots=True)
class NodeCapacity:
    """The counting keys a node should carry, and (for reading) the plugin's partition tokens."""

    keys: dict[str, str] = field(default_factory=dict)
    partition_tokens: dict[str, int] = field(default_factory=dict)  # <base>.partitioned → Σ tokens


def _positive(value: Any) -> bool:
    if value is None:
        return False
    try:
        numerator, _denominator = quantity.parse(value)
    except (TypeError, ValueError):
        return False
    return numerator > 0


def _overcommit(card: Mapping[str, Any], group: Mapping[str, Any], maker: Manufacturer) -> bool:
    logical = ((card.get("status") or {}).get("logicalSliced")) or {}
    if "coresPercentageOvercommit" in logical:
        return bool(logical["coresPercentageOvercommit"])
    detail = ((group.get("acceleratorSlicedDetail") or {}).get("logical")) or {}
    if "coresPercentageOvercommit" in detail:
        return bool(detail["coresPercentageOvercommit"])
    return bool(maker.compute_overcommit)


def _sliced_keys(maker: Manufacturer, devices: Mapping[str, Any]) -> dict[str, str]:
    cards = cores = memory = 0
    for group in (devices.get("spec") or {}).get("groups") or []:
        if group.get("manufacturer") != maker.name:
            continue
        vram = int(group.get("memory") or 0)
        for card in group.get("accelerators") or []:
            status = card.get("status") or {}
            if (status.get("physicalSliced") or {}).get("profiles"):
                continue  # a partitioned card advertises only the partition family
            slices = int((status.get("logicalSliced") or {}).get("count") or 0)
            if slices <= 0:
                continue
            cards += 1
            memory += vram
            cores += slices * 100 if _overcommit(card, group, maker) else 100
    if not cards:
        return {}
    base = maker.base
    return {
        base + SUFFIX_SLICED_UNITS: str(cards * UNITS_PER_CARD),
        base + SUFFIX_SLICED_CORES: str(cores),
        base + SUFFIX_SLICED_MEMORY_PERCENT: str(cards * 100),
        base + SUFFIX_SLICED_MEMORY_MIB: str(memory),
    }


def _partition_ledger(maker: Manufacturer, ledger: Any) -> Any:
    cards = [card for card in ledger.cards if card.manufacturer == maker.name and card.partitioned]
    return NodeLedger(ledger.name, cards) if cards else None


def _cards(maker: Manufacturer, devices: Mapping[str, Any]) -> int:
    return sum(
        len(group.get("accelerators") or [])
        for group in (devices.get("spec") or {}).get("groups") or []
        if group.get("manufacturer") == maker.name
    )


def node_capacity(
    node: Mapping[str, Any], devices: Mapping[str, Any], *, credits: bool = False
) -> NodeCapacity:
    """The counting keys of a node from its capacity (presence gate) and its Devices object; with
    ``credits``, also the Kueue v0.17 credits capacity (see the module notes)."""
    capacity = ((node.get("status") or {}).get("capacity")) or {}
    out = NodeCapacity()
    ledger = None
    for maker in MANUFACTURERS:
        base = maker.base
        if credits and (cards := _cards(maker, devices)):
            out.keys[maker.credits_key] = str(cards * UNITS_PER_CARD)
        if _positive(capacity.get(base + SUFFIX_SLICED)):
            out.keys.update(_sliced_keys(maker, devices))
        if _positive(capacity.get(base + SUFFIX_PARTITIONED)):
            if ledger is None:
                ledger = node_ledger(dict(devices))
            partitioned = _partition_ledger(maker, ledger)
            if partitioned is None:
                continue
            tokens, per_profile = partition_capacity(partitioned)
            out.partition_tokens[base + SUFFIX_PARTITIONED] = int(tokens)
            out.keys[base + SUFFIX_PARTITIONED_UNITS] = str(len(partitioned.cards) * UNITS_PER_CARD)
            for profile, count in per_profile.items():
                out.keys[maker.profile_key(profile)] = str(int(count))
    return out


def counting_key(key: str) -> bool:
    """A key this module owns (and may remove): a ``.sliced.*`` suffix, ``.partitioned.units``, a
    per-profile ``.partitioned.<kind>-<profile>`` of a known base, or a manufacturer's credits
    (compatibility); never a plugin pool itself."""
    for maker in MANUFACTURERS:
        base = maker.base
        if key == maker.credits_key:
            return True
        if not key.startswith(base + "."):
            continue
        if key in (base + s for s in SLICED_SUFFIXES) or key == base + SUFFIX_PARTITIONED_UNITS:
            return True
        prefix = base + SUFFIX_PARTITIONED + "."
        if key.startswith(prefix) and len(key) > len(prefix):
            return True
    return False


def capacity_patch(node: Mapping[str, Any], wanted: Mapping[str, str]) -> dict[str, str | None]:
    """The merge-patch of ``status.capacity`` (and ``allocatable``) that moves the node to
    ``wanted``: changed and new keys, stale counting keys as ``None``; empty when nothing changes."""
    status = node.get("status") or {}
    patch: dict[str, str | None] = {}
    for section in ("capacity", "allocatable"):
        have = status.get(section) or {}
        for key, value in wanted.items():
            if key not in have or quantity.parse(have[key]) != quantity.parse(value):
                patch[key] = value
        for key in have:
            if counting_key(key) and key not in wanted:
                patch[key] = None
    return patch
