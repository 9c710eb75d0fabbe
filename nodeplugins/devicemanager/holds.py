"""What the allocator holds for a container, and how a hold reads as an allocation record.

A :class:`Held` is one container's reservation, keyed by (Pod UID, container) (§6.5): the cards
it took (:class:`~.backends.base.Grant`) and the record groups the Pod's
``device.gpustack.ai/accelerator.allocated`` annotation carries for it.  These functions convert
between the two; the allocator's ledger rows are tallied from the holds (``fastpath.ledger``), so a
reservation charges the moment it is made, before the annotation is written.
Pure functions: no I/O, no lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from api import allocation, constants
from nodeplugins.devicemanager import tokens as tk
from nodeplugins.devicemanager.backends.base import FAMILY_VISIBILITY, Grant
from nodeplugins.devicemanager.inventory import Card


class Refusal(Exception):
    """``Allocate`` refused: the kubelet fails the Pod with ``UnexpectedAdmissionError``."""


@dataclass
class Held:
    """One container's reservation: what it took, keyed by (Pod UID, container)."""

    uid: str
    namespace: str
    pod: str
    container: str
    resource: str  # "" when adopted from a record (after a restart of the agent)
    family: str
    grants: list[Grant]
    groups: list[dict[str, Any]]  # the record's groups for this container
    tokens: tuple[str, ...] = ()  # the device ids the kubelet named ("" when adopted)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.uid, self.container)

    @property
    def cards(self) -> list[str]:
        return sorted({g.card.id for g in self.grants})


def meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("metadata") or {}


def family_of_groups(groups: Iterable[Mapping[str, Any]]) -> str:
    for group in groups:
        for entry in group.get("accelerators") or ():
            for family, mode in tk.FAMILY_MODE.items():
                if entry.get("mode") == mode:
                    return family
    return FAMILY_VISIBILITY


def grant_of(card: Card, entry: Mapping[str, Any], units: int) -> Grant:
    placements = entry.get("allocatedPhysicalPlacements") or [{}]
    return Grant(
        card,
        units,
        str(entry.get("allocatedPhysicalProfile") or ""),
        placements[0].get("start"),
        placements[0].get("length"),
    )


def grants_of(groups: Iterable[Mapping[str, Any]], cards: Mapping[str, Card]) -> list[Grant]:
    """The grants a record's groups describe (cards this node does not have are skipped)."""
    out = []
    for group in groups:
        for entry in group.get("accelerators") or ():
            card = cards.get(entry.get("id"))
            if card is not None:
                out.append(grant_of(card, entry, int(entry.get("allocated") or 0)))
    return out


def adopted(
    uid: str,
    pod: Mapping[str, Any],
    container: str,
    groups: Sequence[Mapping[str, Any]],
    cards: Mapping[str, Card],
) -> Held:
    """The hold a Pod's record says ``container`` has (taken over after a restart of the agent)."""
    return Held(
        uid=uid,
        namespace=str(meta(pod).get("namespace") or ""),
        pod=str(meta(pod).get("name") or ""),
        container=container,
        resource="",
        family=family_of_groups(groups),
        grants=grants_of(groups, cards),
        groups=[dict(g) for g in groups],
    )


def record_groups(
    family: str, grants: Sequence[Grant], group_of: Mapping[str, str], manufacturer: str
) -> list[dict[str, Any]]:
    """The record's groups for one container's grants (one group per model it took cards of)."""
    mode = tk.FAMILY_MODE.get(family, constants.DEVICE_MODE_VISIBILITY)
    groups: dict[str, dict[str, Any]] = {}
    for g in grants:
        gid = group_of.get(g.card.id, "")
        group = groups.setdefault(gid, {"id": gid, "manufacturer": manufacturer, "accelerators": []})
        entry = allocation.accelerator_entry(
            g.card.id,
            g.card.index,
            mode,
            allocated=None if mode == constants.DEVICE_MODE_VISIBILITY else g.units,
            slices=1 if mode == constants.DEVICE_MODE_SLICED else None,
            profile=g.profile or None,
            placements=[(g.start, g.length)] if g.start is not None and g.length is not None else None,
        )
        group["accelerators"].append(entry)
    return list(groups.values())


def drift(pod: Mapping[str, Any], want: allocation.Record) -> allocation.Record | None:
    """``want`` when the Pod's annotation no longer says it (edited by hand, or never written)."""
    if not want:
        return None
    have = (meta(pod).get("annotations") or {}).get(allocation.ANNOTATION)
    if have == allocation.encode(want):
        return None
    try:
        if allocation.encode(allocation.decode(have)) == allocation.encode(want):
            return None
    except allocation.RecordError:
        pass
    return want
