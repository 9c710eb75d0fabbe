"""Partitioned grants in the allocator: which owners still need their partition, what a reclaim
in progress still occupies, and backing a reservation with its instance (mixed into
:class:`~.allocator.Allocator`; the hardware side is :mod:`.partitions`).

A partition is reserved under the per-node mutex like any grant, then materialised under its card's
lock (:meth:`PartitionedGrants._materialise`); the sidecar of a partitioned owner is shown the
owner's instance, checked alive.  A Pod that ends or is deleted gives its partitions to the
reclaimer; until they are gone from the card, the fit ledger keeps their placements occupied, while
the published rows free them at once (the node's keys follow the Pods, the hardware follows later).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from api import allocation, constants
from fastpath import cards
from nodeplugins.devicemanager.backends.base import FAMILY_PARTITIONED
from nodeplugins.devicemanager.holds import Held, Refusal
from nodeplugins.devicemanager.identify import PodInfo
from nodeplugins.devicemanager.inventory import Card
from nodeplugins.devicemanager.partitions import Owner, PartitionError, Partitions


class PartitionedGrants:
    lock: threading.Lock
    held: dict[tuple[str, str], Held]
    pods: dict[str, dict[str, Any]]
    partitions: Partitions | None
    synced: bool
    manufacturer: str
    _info: dict[str, PodInfo]
    _cards: dict[str, Card]
    _group_of: dict[str, str]
    _live: cards.NodeLedger | None
    give_back: Callable[[Held], None]

    def attach(self, partitions: Partitions | None) -> None:
        """Materialise partitioned grants through ``partitions``, which asks this allocator which
        owners still need theirs (and reclaims the others once it has seen the node's Pods)."""
        self.partitions = partitions
        if partitions is not None:
            partitions.is_live = self.needs_partition
            partitions.is_synced = lambda: self.synced
            partitions.on_reclaimed = self._hardware_freed

    def _partition_keys(self, uid: str) -> list[str]:
        return [
            Owner(h.uid, h.namespace, h.pod, h.container).key
            for h in self.held.values()
            if h.uid == uid and h.family == FAMILY_PARTITIONED
        ]

    def _reclaim(self, keys: Sequence[str]) -> None:
        if self.partitions is not None and keys:
            for key in keys:
                self.partitions.release(key)
            with self.lock:
                self._live = None  # placements now lingering on their cards

    def needs_partition(self, key: str) -> bool:
        """Whether owner ``key`` (``<Pod UID>.<container>``) still needs its partition: it holds a
        partitioned reservation and its Pod has not ended."""
        uid, _, container = key.partition(".")
        with self.lock:
            held = self.held.get((uid, container))
            info = self._info.get(uid)
            return (
                held is not None
                and held.family == FAMILY_PARTITIONED
                and not (info is not None and info.ended)
            )

    def _lingering_record(self, markers: Sequence[Any]) -> allocation.Record:
        record: allocation.Record = {}
        for marker in markers:
            card = self._cards.get(marker.card)
            if card is None:
                continue
            entry = allocation.accelerator_entry(
                card.id,
                card.index,
                constants.DEVICE_MODE_PARTITIONED,
                allocated=0,
                profile=marker.profile,
                placements=[(marker.start, marker.length)],
            )
            group = {
                "id": self._group_of.get(card.id, ""),
                "manufacturer": self.manufacturer,
                "accelerators": [entry],
            }
            record[marker.owner.key] = [group]
        return record

    def _hardware_freed(self) -> None:
        with self.lock:
            self._live = None

    def _partition_owner(self, held: Held) -> Owner | None:
        """Whose partition backs ``held``: its own container's (partitioned), the owner
        container's (a sidecar of a partitioned owner); ``None`` when no partition is involved."""
        if not any(g.profile for g in held.grants):
            return None
        if held.family == FAMILY_PARTITIONED:
            return Owner(held.uid, held.namespace, held.pod, held.container)
        for other in self.held.values():
            if (
                other.uid == held.uid
                and other.container != held.container
                and other.family == FAMILY_PARTITIONED
            ):
                return Owner(other.uid, other.namespace, other.pod, other.container)
        record = allocation.record_of(self.pods.get(held.uid) or {})
        for name, groups in record.items():
            if name != held.container and any(
                e.get("mode") == constants.DEVICE_MODE_PARTITIONED
                for g in groups
                for e in g.get("accelerators") or ()
            ):
                return Owner(held.uid, held.namespace, held.pod, name)
        return None

    def _materialise(self, held: Held, fresh: bool, owner: Owner) -> Held:
        """Back ``held`` with its partition (the sidecar: with its owner's, checked alive); a new
        reservation that cannot be backed is given back (under the card's lock, not the node's)."""
        assert self.partitions is not None
        try:
            if held.family == FAMILY_PARTITIONED:
                grant = held.grants[0]
                assert grant.start is not None and grant.length is not None
                instance = self.partitions.materialize(
                    owner, grant.card.id, grant.profile, grant.start, grant.length
                )
                devices = {grant.card.id: instance.device}
            else:
                devices = {}
                for grant in held.grants:
                    offered = frozenset(p.name for p in self._cards[grant.card.id].profiles)
                    devices[grant.card.id] = self.partitions.visible(owner, grant.card.id, offered).device
        except PartitionError as error:
            if fresh:
                self.give_back(held)
            raise Refusal(str(error)) from None
        held.grants = [replace(g, device=devices.get(g.card.id, "")) for g in held.grants]
        return held
