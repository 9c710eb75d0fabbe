"""The device-plugin resources a manufacturer registers, and their token ids (§3.2, §6.5).

One kubelet resource per family: ``<base>`` (exclusive, one token per card), ``<base>.shared``
(10 per card), ``<base>.sliced`` (the card's logical slice count), ``<base>.partitioned`` (per
partitioned card its largest profile count; fungible) and ``device.gpustack.ai/<mfr>.visibility``
(512 per card).  An unpartitioned card feeds exclusive/shared/sliced, a partitioned one only the
partition pool; visibility takes every card.

Token ids are ``<group>:<card id>:<n>``.  Health (what ``ListAndWatch`` reports): a card the driver
reports unhealthy, or held in another mode by the ledger, has Unhealthy tokens (never removed: the
kubelet checkpoints them); visibility is exempt from the mode rule.  Partition tokens are healthy
up to ``allocated + largest remaining profile`` on their card.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from api import constants
from api.manufacturers import (
    BY_NAME,
    SHARES_PER_CARD,
    SUFFIX_PARTITIONED,
    SUFFIX_SHARED,
    SUFFIX_SLICED,
    VISIBILITY_TOKENS_PER_CARD,
)
from nodeplugins.devicemanager.backends.base import (
    FAMILY_EXCLUSIVE,
    FAMILY_PARTITIONED,
    FAMILY_SHARED,
    FAMILY_SLICED,
    FAMILY_VISIBILITY,
)

MODE_NONE, MODE_EXCLUSIVE, MODE_SHARED, MODE_SLICED, MODE_PARTITIONED = (
    constants.DEVICE_MODE_NONE,
    constants.DEVICE_MODE_EXCLUSIVE,
    constants.DEVICE_MODE_SHARED,
    constants.DEVICE_MODE_SLICED,
    constants.DEVICE_MODE_PARTITIONED,
)
# The ledger modes a family may share a card with (its own, and a free card).
COMPATIBLE = {
    FAMILY_EXCLUSIVE: (MODE_NONE, MODE_EXCLUSIVE),
    FAMILY_SHARED: (MODE_NONE, MODE_SHARED),
    FAMILY_SLICED: (MODE_NONE, MODE_SLICED),
    FAMILY_PARTITIONED: (MODE_NONE, MODE_PARTITIONED),
}
FAMILY_MODE = {
    FAMILY_EXCLUSIVE: MODE_EXCLUSIVE,
    FAMILY_SHARED: MODE_SHARED,
    FAMILY_SLICED: MODE_SLICED,
    FAMILY_PARTITIONED: MODE_PARTITIONED,
}


@dataclass(frozen=True, slots=True)
class Resource:
    name: str  # the kubelet resource name
    family: str
    manufacturer: str

    @property
    def socket(self) -> str:
        """The plugin's socket file name in the kubelet's device-plugins directory."""
        return f"gpustack-{self.manufacturer}-{self.family}.sock"  # short: a unix path has ≤107 bytes


def resources(
    manufacturer: str, *, shared: bool = True, sliced: bool = True, partitioned: bool = True
) -> list[Resource]:
    maker = BY_NAME[manufacturer]
    out = [Resource(maker.base, FAMILY_EXCLUSIVE, manufacturer)]
    if shared:
        out.append(Resource(maker.base + SUFFIX_SHARED, FAMILY_SHARED, manufacturer))
    if sliced:
        out.append(Resource(maker.base + SUFFIX_SLICED, FAMILY_SLICED, manufacturer))
    if partitioned and maker.can_partition:
        out.append(Resource(maker.base + SUFFIX_PARTITIONED, FAMILY_PARTITIONED, manufacturer))
    out.append(Resource(maker.visibility_key, FAMILY_VISIBILITY, manufacturer))
    return out


def token_id(group: str, card_id: str, n: int) -> str:
    return f"{group}:{card_id}:{n}"


def parse_token(token: str) -> tuple[str, str, int] | None:
    """``(group, card id, n)`` of a token id, or ``None`` when it is not one of ours."""
    group, sep, rest = token.partition(":")
    card, sep2, n = rest.rpartition(":")
    if not (sep and sep2 and group and card and n.isdigit()):
        return None
    return group, card, int(n)


def _card_tokens(family: str, card: Mapping[str, Any]) -> int:
    status = card.get("status") or {}
    partitioned = bool((status.get("physicalSliced") or {}).get("profiles"))
    if family == FAMILY_VISIBILITY:
        return VISIBILITY_TOKENS_PER_CARD
    if family == FAMILY_PARTITIONED:
        return int((status.get("physicalSliced") or {}).get("count") or 0) if partitioned else 0
    if partitioned:
        return 0
    if family == FAMILY_EXCLUSIVE:
        return 1
    if family == FAMILY_SHARED:
        return SHARES_PER_CARD
    return int((status.get("logicalSliced") or {}).get("count") or 0)


def _cards_health(
    resource: Resource,
    groups: Iterable[Mapping[str, Any]],
    rows: Mapping[tuple[str, str], Mapping[str, Any]],
) -> list[tuple[str, str, int, bool, int, str]]:
    """Per card of ``resource``: (group id, card id, tokens, usable, healthy tokens, numa node)."""
    out = []
    for group in groups:
        if group.get("manufacturer") != resource.manufacturer:
            continue
        gid = group["id"]
        for card in group.get("accelerators") or ():
            n = _card_tokens(resource.family, card)
            if not n:
                continue
            row = rows.get((gid, card["id"])) or {}
            usable = not (card.get("status") or {}).get("unhealthy")
            healthy_count = n
            if resource.family == FAMILY_PARTITIONED:
                allocated = sum(int(p.get("count") or 0) for p in row.get("allocatedProfiles") or ())
                remaining = max(
                    (int(p.get("count") or 0) for p in row.get("remainingProfiles") or ()), default=n
                )
                healthy_count = min(n, allocated + remaining) if row else n
            elif resource.family != FAMILY_VISIBILITY:
                usable = usable and int(row.get("mode") or 0) in COMPATIBLE[resource.family]
            numa = str((card.get("topology") or {}).get("numaAffinity") or "")
            out.append((gid, card["id"], n, usable, healthy_count, numa))
    return out


def health_stamp(rows: Mapping[tuple[str, str], Mapping[str, Any]]) -> tuple:
    """What :func:`_cards_health` reads of the ledger rows, for every resource at once: each card's
    mode and its partitions' allocated and remaining counts.  The allocator computes it once per
    ledger change; a ``ListAndWatch`` stream builds its own resource's key only when it moved (a
    slice placed on a card already in slice mode moves no token's health)."""
    return tuple(
        (
            key,
            int(row.get("mode") or 0),
            tuple(int(p.get("count") or 0) for p in row.get("allocatedProfiles") or ()),
            tuple(int(p.get("count") or 0) for p in row.get("remainingProfiles") or ()),
        )
        for key, row in rows.items()
    )


def health_key(
    resource: Resource,
    groups: Iterable[Mapping[str, Any]],
    rows: Mapping[tuple[str, str], Mapping[str, Any]],
) -> tuple:
    """What :func:`devices_of` depends on, per card: equal keys, equal token lists (``ListAndWatch``
    compares this instead of building thousands of tokens after every reservation)."""
    return tuple(_cards_health(resource, groups, rows))


def devices_of(
    resource: Resource,
    groups: Iterable[Mapping[str, Any]],
    rows: Mapping[tuple[str, str], Mapping[str, Any]],
) -> list[tuple[str, bool, str]]:
    """``(token id, healthy, numa node)`` for every token of ``resource``: ``groups`` are the
    ``Devices`` spec groups, ``rows`` the ledger rows by ``(group id, card id)``."""
    out = []
    for gid, card_id, n, usable, healthy_count, numa in _cards_health(resource, groups, rows):
        for i in range(n):
            out.append((token_id(gid, card_id, i), usable and i < healthy_count, numa))
    return out
