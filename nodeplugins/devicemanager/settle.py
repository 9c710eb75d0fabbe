"""Gate 5's decisions on cards (§6.5): what a container gets from the cards the kubelet offered,
why a request does not fit, which offered tokens to prefer, and what the SSH sidecar sees.

Pure functions over the live ``fastpath.fit`` node ledger — the fit code gates 1 and 3 use — and the
container's request facts (``fastpath.requests``).  Refusals are :class:`~.holds.Refusal` with a
message that names the card and what is wrong (``FailedPrecondition`` at the gRPC edge).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from api import allocation, constants
from api.manufacturers import UNITS_PER_CARD, UNITS_PER_PERCENT, UNITS_PER_SHARE
from fastpath import cards, fit, requests
from nodeplugins.devicemanager import tokens as tk
from nodeplugins.devicemanager.backends.base import (
    FAMILY_EXCLUSIVE,
    FAMILY_PARTITIONED,
    FAMILY_SHARED,
    FAMILY_SLICED,
    FAMILY_VISIBILITY,
    Grant,
)
from nodeplugins.devicemanager.holds import Held, Refusal, grant_of
from nodeplugins.devicemanager.inventory import Card

log = logging.getLogger("devicemanager.allocator")

ENV_SLICED_GATE = "GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE"
MODE_NAMES = {**dict(enumerate(constants.FAMILY_NAMES)), constants.DEVICE_MODE_NONE: "free"}


@dataclass(frozen=True, slots=True)
class Site:
    """The node the decisions are about."""

    node: str
    manufacturer: str
    base: str
    slice_gate: bool
    cards: Mapping[str, Card]


def facts_of(pod: Mapping[str, Any], container: str) -> Any:
    for facts in requests.scan_pod(pod.get("spec") or {}).containers:
        if facts.name == container:
            return facts
    return None


def slice_units(facts: Any, card_vram_mib: int) -> int:
    if facts is None:
        return UNITS_PER_PERCENT
    if facts.sliced_units > 0:
        return int(facts.sliced_units)
    if facts.memory_percentage > 0:
        return requests.slice_units_for_percentage(int(facts.memory_percentage))
    if facts.memory_mib > 0 and card_vram_mib > 0:
        return requests.slice_units_for_mib(int(facts.memory_mib), card_vram_mib)
    return UNITS_PER_CARD


def to_grant(site: Site, grant: tuple) -> Grant:
    """A ``fastpath.fit`` grant as the backend's :class:`Grant` (partition profile in the vendor's
    spelling: a published name may have gained a separator)."""
    _group, card_id, _index, units, profile, start, length = grant
    card = site.cards[card_id]
    vendor = profile
    for p in card.profiles:
        if p.name == profile or p.name.replace(".", "") == profile.replace(".", ""):
            vendor = p.name
    return Grant(card, int(units), vendor, start, length)


def settle(
    site: Site, node: cards.NodeLedger, family: str, card_ids: list[str], facts: Any
) -> tuple[list[Grant], bool]:
    """Place the request on the offered cards (partitions: on the card the plugin picks) and commit
    it into ``node``; the grants, and whether the live ledger no longer says what is charged (a
    slice allocated past the gate, which the caller rebuilds from the records)."""
    by_id = {card.id: card for card in node.cards}
    if family == FAMILY_PARTITIONED:
        profile = facts.profiles[0] if facts is not None and facts.profiles else ""
        units = int(facts.partitioned_units) if facts is not None else 0
        if not profile:
            raise Refusal(
                f"the container asks for {site.base}.partitioned without a {site.base}.partitioned.<kind>-<profile> key"
            )
        placed = fit.place(node, cards.Demand(family, site.manufacturer, site.base, 1, units, profile))
        if placed is None:
            raise Refusal(
                f"no partitioned card on node {site.node} has a free placement for profile {profile}"
            )
        return [to_grant(site, g) for g in placed], False
    distinct = list(dict.fromkeys(card_ids))
    if family == FAMILY_SHARED and len(distinct) < len(card_ids):
        twice = next(cid for cid in distinct if card_ids.count(cid) > 1)
        raise Refusal(
            f"a shared grant must name distinct cards; the kubelet offered two shares of card {twice}"
        )
    chosen = cards.NodeLedger(site.node, [by_id[cid] for cid in distinct])
    if family == FAMILY_EXCLUSIVE:
        demand = cards.Demand(family, site.manufacturer, site.base, len(distinct), UNITS_PER_CARD)
    elif family == FAMILY_SHARED:
        demand = cards.Demand(family, site.manufacturer, site.base, len(distinct), UNITS_PER_SHARE)
    else:
        units = slice_units(facts, by_id[distinct[0]].memory_mib)
        demand = cards.Demand(family, site.manufacturer, site.base, 1, units)
    placed = fit.place(chosen, demand)
    if placed is None:
        if family == FAMILY_SLICED and not site.slice_gate:
            log.warning("slice does not fit; allocated anyway (%s=false)", ENV_SLICED_GATE)
            card = by_id[distinct[0]]
            return [to_grant(site, (card.group, card.id, card.index, demand.units, "", None, None))], True
        raise Refusal(why(site, family, [by_id[cid] for cid in distinct], demand.units))
    out = [to_grant(site, g) for g in placed]
    if family == FAMILY_SLICED and facts is not None and facts.cores_percentage:
        out = [Grant(g.card, g.units, cores_percentage=int(facts.cores_percentage)) for g in out]
    return out, False


def why(site: Site, family: str, offered: list[Any], units: int) -> str:
    """What keeps the offered cards from taking the request, naming the card."""
    for card in offered:
        if not card.healthy:
            return f"card {card.id} is unhealthy"
        if card.partitioned:
            return f"card {card.id} is partitioned: only {site.base}.partitioned requests may use it"
        if card.mode != constants.DEVICE_MODE_NONE and (
            family == FAMILY_EXCLUSIVE or card.mode not in tk.COMPATIBLE[family]
        ):
            return f"card {card.id} is held in {MODE_NAMES.get(card.mode, card.mode)} mode; a {family} request cannot use it"
        if family == FAMILY_SLICED:
            if card.allocated_slices >= card.slice_count:
                return f"card {card.id} has no free slice slot ({card.allocated_slices}/{card.slice_count} taken)"
            return f"card {card.id} has {card.remaining} units left; the slice needs {units}"
        if family == FAMILY_SHARED:
            return f"card {card.id} has no free share ({card.remaining} units left)"
        if family == FAMILY_EXCLUSIVE and card.remaining != UNITS_PER_CARD:
            return f"card {card.id} is not whole ({card.remaining} of {UNITS_PER_CARD} units free)"
    return "the cards offered cannot take this request"


def visibility(
    uid: str, container: str, holds: Iterable[Held], record: allocation.Record, site: Site
) -> tuple[str, list[Grant]]:
    """The sidecar's grant: its owner's cards (the owner's reservation first, its recorded entry
    second), with the owner container's name; fail closed when the Pod holds none."""
    for held in holds:
        if held.uid == uid and held.container != container and held.family != FAMILY_VISIBILITY:
            return held.container, [Grant(g.card, 0, g.profile, g.start, g.length) for g in held.grants]
    for name, groups in record.items():
        if name == container:
            continue
        grants = [
            grant_of(card, entry, 0)
            for group in groups
            for entry in group.get("accelerators") or ()
            if (card := site.cards.get(entry.get("id"))) is not None
            and entry.get("mode") != constants.DEVICE_MODE_VISIBILITY
        ]
        if grants:
            return name, grants
    raise Refusal(f"container {container}: its Pod holds no card of this node to make visible")


def fill(picked: list[str], available: Sequence[str], size: int) -> list[str]:
    for token in available:
        if len(picked) >= size:
            break
        if token not in picked:
            picked.append(token)
    return picked[:size]


class Offered(Mapping[str, list[str]]):
    """The offered tokens by card, for a preference: which cards are offered is known at once (a
    C-speed pass over the tokens' cards), the tokens of one card only when asked for (the pick
    reads one or two cards of the hundreds of tokens the kubelet offers)."""

    def __init__(self, available: Sequence[str], cards_of: Sequence[str | None]) -> None:
        self._available = available
        self._cards_of = cards_of
        cards: dict[str | None, None] = dict.fromkeys(cards_of)
        cards.pop(None, None)
        self._cards = cast(dict[str, None], cards)
        self._tokens: dict[str, list[str]] = {}

    def __contains__(self, card: object) -> bool:
        return card in self._cards

    def __getitem__(self, card: str) -> list[str]:
        if card not in self._cards:
            raise KeyError(card)
        tokens = self._tokens.get(card)
        if tokens is None:
            tokens = self._tokens[card] = [
                t for t, c in zip(self._available, self._cards_of, strict=True) if c == card
            ]
        return tokens

    def __iter__(self) -> Iterator[str]:
        return iter(self._cards)

    def __len__(self) -> int:
        return len(self._cards)


def prefer(
    site: Site,
    node: cards.NodeLedger,
    family: str,
    by_card: Mapping[str, list[str]],
    available: Sequence[str],
    must: Sequence[str],
    size: int,
    units: int | None,
) -> list[str]:
    """``GetPreferredAllocation``: only offered ids; whole cards lowest index first, shares and
    slices on the most-occupied card that fits (ties by index).  A slice of unknown size (``units``
    ``None``: no waiting container could be identified) goes to the card with the most room left,
    where any size that fits at all fits."""
    offered = cards.NodeLedger(site.node, [card for card in node.cards if card.id in by_card])
    if family == FAMILY_SLICED and units is None:
        roomiest = sorted(offered.cards, key=lambda card: (-card.remaining, card.index))
        demand = cards.Demand(FAMILY_SLICED, site.manufacturer, site.base, 1, UNITS_PER_PERCENT)
        offered = next(
            (one for card in roomiest if fit.choose(one := cards.NodeLedger(site.node, [card]), demand)),
            cards.NodeLedger(site.node, []),
        )
        units = UNITS_PER_PERCENT
    if family == FAMILY_SLICED:
        demand = cards.Demand(FAMILY_SLICED, site.manufacturer, site.base, size, units)
    elif family == FAMILY_SHARED:
        demand = cards.Demand(FAMILY_SHARED, site.manufacturer, site.base, size, UNITS_PER_SHARE)
    else:
        demand = cards.Demand(FAMILY_EXCLUSIVE, site.manufacturer, site.base, size, UNITS_PER_CARD)
    picked = list(must)
    for _group, card_id, *_rest in fit.choose(offered, demand) or []:
        for token in by_card.get(card_id, ()):
            if token not in picked:
                picked.append(token)
                break
    return fill(picked, available, size)


def prefer_held(
    held: Held, by_card: Mapping[str, list[str]], available: Sequence[str], must: Sequence[str], size: int
) -> list[str]:
    """A retried container's preference: the tokens it was granted, else one per card it holds."""
    picked = list(must)
    offered = set(available)
    for token in held.tokens:
        if token in offered and token not in picked:
            picked.append(token)
    if len(picked) < size:
        for card in held.cards:
            for token in by_card.get(card, ()):
                if token not in picked:
                    picked.append(token)
                    break
    return fill(picked, available, size)
