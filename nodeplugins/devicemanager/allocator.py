"""Gate 5: settle the cards a container gets, under one per-node mutex (§6.5).

The ledger the allocator judges is the one everybody reads: the node's ``Devices`` spec joined with
the allocation records of the Pods bound to the node (``api.allocation``, exactly as gate 3 rebuilds
it) plus this process's reservations not yet recorded, turned into a ``fastpath.fit`` node ledger.
Fit, preference and refusal all go through ``fastpath.fit`` (:mod:`.settle`).

``allocate(resource, tokens)``: ask the kubelet which containers wait for the resource, then — under
the mutex — identify the container (:mod:`.identify`), check cross-mode use and reserve by (Pod UID,
container); a container that already holds a reservation (a retried ``Allocate``) gets the same one.
No API or kubelet call is made while the mutex is held: the pod-resources answer is read before it,
and the uncached list of the node's Pods (a Pod the watch has not delivered yet) between two tries.
A partitioned grant is then materialised by :mod:`.partitions` (its card's lock, not the node's;
the allocator's side of it is :mod:`.partitioned`); the caller writes the Pod annotation.  Refusals
are :class:`Refusal` (``FailedPrecondition``).  The kubelet's answer says which of the node's Pods
it holds devices for; once it has listed a reservation's container with its devices, the
reservation is confirmed, no longer a retry candidate, and its Pod is not read from later answers.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from itertools import repeat
from typing import Any

from api import allocation, constants
from api.booleans import env_bool
from api.manufacturers import BY_NAME, UNITS_PER_PERCENT
from fastpath import cards, ledger
from nodeplugins.devicemanager import tokens as tk
from nodeplugins.devicemanager.backends.base import (
    FAMILY_PARTITIONED,
    FAMILY_SHARED,
    FAMILY_SLICED,
    FAMILY_VISIBILITY,
)
from nodeplugins.devicemanager.holds import Held, Refusal, adopted, drift, meta, record_groups
from nodeplugins.devicemanager.identify import Asked, Identifies, Pending, PodInfo, containers_of
from nodeplugins.devicemanager.inventory import Card, Inventory
from nodeplugins.devicemanager.partitioned import PartitionedGrants
from nodeplugins.devicemanager.partitions import Owner, Partitions
from nodeplugins.devicemanager.settle import (
    ENV_SLICED_GATE,
    Offered,
    Site,
    facts_of,
    fill,
    prefer,
    prefer_held,
    settle,
    slice_units,
    visibility,
)

__all__ = ["ENV_IDENTIFY_BY_KUBELET", "ENV_SLICED_GATE", "Allocator", "Held", "Refusal"]

log = logging.getLogger("devicemanager.allocator")

ENV_IDENTIFY_BY_KUBELET = "GPUSTACK_DEVICE_PLUGIN_IDENTIFY_BY_KUBELET"
DELETED_REMEMBERED = 4096  # UIDs the uncached list must not bring back
# How long a preference's kubelet answer stays good for the ``Allocate`` that follows it (the kubelet
# makes that call as soon as the preference returns: milliseconds).
FOLLOW_SECONDS = 1.0
# (namespace, pod name, container name) of containers the kubelet holds no device of the resource
# for, given the resource and the (namespace, pod) not worth reading (``kubelet.PodResources.waiting``).
PodResourcesLookup = Callable[..., set[tuple[str, str, str]] | None]
_UNSEEN = object()  # a token the card cache has not parsed yet


def _env_of(container: Mapping[str, Any]) -> dict[str, str]:
    return {e["name"]: str(e.get("value", "")) for e in container.get("env") or () if isinstance(e, Mapping)}


def _newer(listed: Mapping[str, Any], known: Mapping[str, Any]) -> bool:
    """Whether a listed Pod is newer than the one the watch delivered (resource versions are
    integers in practice; anything else counts as newer only when different)."""
    a, b = str(meta(listed).get("resourceVersion") or ""), str(meta(known).get("resourceVersion") or "")
    if a.isdigit() and b.isdigit():
        return int(a) > int(b)
    return a != b


class Allocator(Identifies, PartitionedGrants):
    def __init__(
        self,
        node: str,
        manufacturer: str,
        *,
        env: Mapping[str, str] | None = None,
        pod_resources: PodResourcesLookup | None = None,
        refresh_pods: Callable[[], list[dict[str, Any]]] | None = None,
        partitions: Partitions | None = None,
    ) -> None:
        env = os.environ if env is None else env
        self.node = node
        self.manufacturer = manufacturer
        self.maker = BY_NAME[manufacturer]
        self.release_terminated = allocation.release_terminated_from_env(env)
        self.slice_gate = env_bool(ENV_SLICED_GATE, True, env)
        self.identify_by_kubelet = env_bool(ENV_IDENTIFY_BY_KUBELET, True, env)
        self.pod_resources = pod_resources
        self._asked: Asked | None = None  # the kubelet's answers, shared by callers arriving together
        self._asked_of: Any = None
        self._unconfirmed: set[tuple[str, str]] = set()  # reservations the kubelet has not listed yet
        # Per resource: the ids the last preference returned, the kubelet's answer it asked, when.
        self._followed: dict[str, tuple[frozenset[str], set[tuple[str, str, str]], float]] = {}
        self.refresh_pods = refresh_pods  # an uncached list of the node's Pods (the watch may lag)
        self.partitions: Partitions | None = None
        self.lock = threading.Lock()  # the per-node mutex
        self.inventory = Inventory(manufacturer)
        self.groups: list[dict[str, Any]] = []
        self.pods: dict[str, dict[str, Any]] = {}
        self.held: dict[tuple[str, str], Held] = {}
        self.synced = False  # a full list of the node's Pods has been seen
        self.served = {r.name: r for r in tk.resources(manufacturer)}
        modes = {
            r.name: tk.FAMILY_MODE.get(r.family, constants.DEVICE_MODE_VISIBILITY)
            for r in self.served.values()
        }
        self._pending = Pending(modes)
        self._info: dict[str, PodInfo] = {}
        self._by_name: dict[tuple[str, str], str] = {}
        self._deleted: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._rows: list[dict[str, Any]] | None = None  # status rows, rebuilt lazily
        self._index: dict[tuple[str, str], Mapping[str, Any]] = {}  # the rows by (group, card)
        self._stamp: tuple = ()  # health_stamp() of the rows
        self._inventories = 0  # set_inventory calls: the spec groups (and card health) changed
        self._tallies: dict[tuple, Any] | None = None  # what the holds charge, per card
        self._live: cards.NodeLedger | None = None  # the fit ledger allocations commit into
        self._token_card: dict[str, str | None] = {}
        self._cards: dict[str, Card] = {}
        self._group_of: dict[str, str] = {}
        self._site = Site(node, manufacturer, self.maker.base, self.slice_gate, self._cards)
        self.listeners: list[Callable[[], None]] = []
        self.attach(partitions)

    # --- state --------------------------------------------------------------------------------------------
    def set_inventory(self, inventory: Inventory, groups: list[dict[str, Any]]) -> None:
        with self.lock:
            self.inventory = inventory
            self.groups = groups
            self._inventories += 1
            self._cards = {card.id: card for card in inventory.cards}
            self._site = replace(self._site, cards=self._cards)
            self._group_of = {a["id"]: g["id"] for g in groups for a in g.get("accelerators") or ()}
            self._token_card = {}
            self._invalidate()
        self._changed()

    def pod_event(self, kind: str, pod: Mapping[str, Any]) -> None:
        """Keep the node's Pods (``ADDED``/``MODIFIED``/``DELETED``); a deleted Pod releases all it
        held, and a Pod that ended or was deleted gives its partitions back to the hardware."""
        uid = meta(pod).get("uid")
        if not uid:
            return
        with self.lock:
            if kind == "DELETED":
                reclaim = self._forget(uid)
            else:
                self._learn(uid, pod)
                reclaim = self._partition_keys(uid) if self._info[uid].ended else []
            self._invalidate()
        self._reclaim(reclaim)
        self._changed()

    def replace_pods(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """A full list of the node's Pods (start, and every re-list of the watch)."""
        listed = {meta(p)["uid"]: p for p in pods if meta(p).get("uid")}
        with self.lock:
            reclaim = []
            for uid in [uid for uid in self.pods if uid not in listed]:
                reclaim += self._forget(uid)  # gone while nobody watched
            for uid in [uid for _k in self.held if (uid := _k[0]) not in listed and uid not in self.pods]:
                reclaim += self._forget(uid)
            for uid, pod in listed.items():
                self._learn(uid, pod)
                if self._info[uid].ended:
                    reclaim += self._partition_keys(uid)
            self.synced = True
            self._invalidate()
        self._reclaim(reclaim)
        self._changed()

    def _learn(self, uid: str, pod: Mapping[str, Any]) -> None:
        self.pods[uid] = dict(pod)
        info = PodInfo.of(pod, self.node)
        self._info[uid] = info
        self._by_name[(str(meta(pod).get("namespace") or ""), str(meta(pod).get("name") or ""))] = uid
        if not self.synced:  # the start list: what an earlier process of this agent granted
            self._adopt(uid, pod)
        self._pending.index(uid, info, lambda u, c: (u, c) in self.held)

    def _forget(self, uid: str) -> list[str]:
        pod = self.pods.pop(uid, None)
        self._info.pop(uid, None)
        if pod is not None:
            self._by_name.pop((str(meta(pod).get("namespace") or ""), str(meta(pod).get("name") or "")), None)
        self._pending.drop(uid)
        keys = self._partition_keys(uid)
        for key in [k for k in self.held if k[0] == uid]:
            del self.held[key]
            self._unconfirmed.discard(key)
        self._deleted[uid] = None
        while len(self._deleted) > DELETED_REMEMBERED:
            self._deleted.popitem(last=False)
        return keys

    def _adopt(self, uid: str, pod: Mapping[str, Any]) -> None:
        """Take over the containers a Pod's record names that this process holds nothing for, from
        the start list only (after a restart of the agent: an earlier process granted them).  From
        then on the in-process hold, not the annotation, is the truth: an annotation edited by hand
        can neither free a card nor, once the agent runs, charge one it never granted
        (:meth:`drifted` restores or removes it)."""
        for container, groups in allocation.record_of(pod).items():
            if (uid, container) not in self.held:
                self.held[(uid, container)] = adopted(uid, pod, container, groups, self._cards)
                self._unconfirmed.add((uid, container))

    def record_for(self, uid: str) -> allocation.Record:
        """The record the Pod should carry: every container this process holds for it."""
        with self.lock:
            return {name: held.groups for (held_uid, name), held in self.held.items() if held_uid == uid}

    def drifted(self, pod: Mapping[str, Any]) -> allocation.Record | None:
        """The record to write back when the Pod's annotation no longer says what is held (edited
        by hand, or never written); ``None`` when it agrees.  ``{}`` (remove it) for a record on a
        running Pod this process holds nothing for once it has listed the node's Pods: no grant of
        this agent's stands behind it, and gate 3 would charge the cards it names."""
        uid = meta(pod).get("uid") or ""
        want = self.record_for(uid)
        if not want:
            with self.lock:
                info = self._info.get(uid)
                stray = self.synced and info is not None and info.eligible
            annotations = meta(pod).get("annotations") or {}
            return {} if stray and allocation.ANNOTATION in annotations else None
        return drift(pod, want)

    def _invalidate(self) -> None:
        """Something other than an allocation moved: rebuild the ledgers on next use."""
        self._rows = None
        self._tallies = None
        self._live = None

    def _changed(self) -> None:
        for listener in list(self.listeners):
            listener()

    def _devices(self) -> dict[str, Any]:
        return {"metadata": {"name": self.node}, "spec": {"groups": self.groups}}

    def _charges(self) -> list[tuple[str, bool, allocation.Record]]:
        """What the holds charge, per Pod: ``fastpath.ledger.tally_records``' input (call under the
        mutex).  The holds are the Pods' records decoded (every recorded container is adopted) plus
        the reservations not yet written, so nothing is encoded or decoded again."""
        records: dict[str, allocation.Record] = {}
        for held in self.held.values():
            records.setdefault(held.uid, {})[held.container] = held.groups
        out = []
        for uid, record in records.items():
            info = self._info.get(uid)
            out.append((self.node, info is not None and info.ended, record))
        return out

    def rows_locked(self) -> list[dict[str, Any]]:
        """The rows ``fastpath.ledger`` rebuilds from the Pods' records (call under the mutex):
        tallied afresh after a Pod event, extended by each reservation in between."""
        if self._rows is None:
            if self._tallies is None:
                self._tallies = ledger.tally_records(
                    self._charges(), release_terminated=self.release_terminated
                )
            self._rows = ledger.ledger_rows(self._devices(), (), tallies=self._tallies)
            self._index = {(g["id"], r["id"]): r for g in self._rows for r in g["accelerators"]}
            self._stamp = (self._inventories, tk.health_stamp(self._index))
        return self._rows

    def rows(self) -> list[dict[str, Any]]:
        """The ``Devices`` status groups: what is allocated now, held reservations included."""
        with self.lock:
            return self.rows_locked()

    def health_stamp(self) -> tuple:
        """Changes whenever a token's health may have: the spec groups (card health) or what the
        ledger rows say of each card's mode and partitions (``tokens.health_stamp``)."""
        with self.lock:
            self.rows_locked()
            return self._stamp

    def row_index(self) -> dict[tuple[str, str], Mapping[str, Any]]:
        """The rows by (group id, card id)."""
        with self.lock:
            self.rows_locked()
            return self._index

    def _ledger(self) -> cards.NodeLedger:
        """The live fit ledger (call under the mutex): placements commit into it.  Partitions whose
        Pod is gone but whose instance is still being reclaimed occupy their placement here (not
        in the published rows: the node's keys free at once), so a new one is placed elsewhere."""
        if self._live is None:
            rows = self.rows_locked()
            lingering = self.partitions.lingering() if self.partitions is not None else []
            if lingering:
                charges = [*self._charges(), (self.node, False, self._lingering_record(lingering))]
                tallies = ledger.tally_records(charges, release_terminated=self.release_terminated)
                rows = ledger.ledger_rows(self._devices(), (), tallies=tallies)
            self._live = ledger.node_ledger(self._devices(), None, rows)
        return self._live

    # --- allocation -----------------------------------------------------------------------------------------
    def allocate(self, resource: tk.Resource, token_ids: Sequence[str]) -> Held:
        """Identify, check and reserve (under the mutex), materialise a partition (under its card's
        lock); the caller records and responds."""
        waiting = self._follows(resource, token_ids)
        if waiting is None:
            waiting = self._ask_kubelet(resource)
        outcome = self._reserve(resource, token_ids, waiting, retry=False)
        if outcome is None:
            self._refresh()
            outcome = self._reserve(resource, token_ids, waiting, retry=True)
        if outcome is None:
            raise Refusal(
                f"no Pod bound to node {self.node} is waiting for {len(token_ids)} {resource.name}: cannot tell "
                "which container this allocation is for"
            )
        held, fresh, owner = outcome
        self._changed()
        if self.partitions is None or owner is None:
            return held
        return self._materialise(held, fresh, owner)

    def _follows(self, resource: tk.Resource, token_ids: Sequence[str]) -> set[tuple[str, str, str]] | None:
        """The kubelet's answer the preference just before this ``Allocate`` asked, when this call
        is the one that follows it: the ids it names are the ones that preference returned, within
        ``FOLLOW_SECONDS``.  The kubelet asks for a container's preference and then allocates
        exactly the preferred ids for the same container (``devicesToAllocate``, then ``Allocate``);
        that container's Pod was listed before the preference arrived, so the answer asked then
        names it, and asking again would cost a second pod-resources call and parse per admission.
        An answer is used once; any other call asks afresh."""
        with self.lock:
            followed = self._followed.pop(resource.name, None)
        if followed is None:
            return None
        ids, answer, asked = followed
        if time.monotonic() - asked > FOLLOW_SECONDS or len(token_ids) != len(ids) or ids != set(token_ids):
            return None
        return answer

    def _reserve(
        self,
        resource: tk.Resource,
        token_ids: Sequence[str],
        waiting: set[tuple[str, str, str]] | None,
        *,
        retry: bool,
    ) -> tuple[Held, bool, Owner | None] | None:
        """Under the mutex: (the reservation, whether it is new, the owner whose partition backs
        it) or ``None`` when nobody could be identified."""
        with self.lock:
            card_ids = self._token_cards(token_ids)
            found = self._identify(resource, len(token_ids), waiting, card_ids, retry=retry)
            if found is None:
                return None
            uid, name, existing = found
            pod = self.pods[uid]
            facts = facts_of(pod, name)
            if existing is not None:
                held = self._again(existing, resource, card_ids, token_ids, facts)
                fresh = False
            else:
                container = next(ct for ct in containers_of(pod) if ct.get("name") == name)
                held = self._new(uid, pod, name, resource, card_ids, token_ids, facts, _env_of(container))
                fresh = True
            owner = self._partition_owner(held)
        return held, fresh, owner

    def _new(
        self,
        uid: str,
        pod: Mapping[str, Any],
        container: str,
        resource: tk.Resource,
        card_ids: list[str],
        token_ids: Sequence[str],
        facts: Any,
        env: dict[str, str],
    ) -> Held:
        if resource.family == FAMILY_VISIBILITY:
            _owner, grants = visibility(
                uid, container, self.held.values(), allocation.record_of(pod), self._site
            )
            overcharged = False
        else:
            grants, overcharged = settle(self._site, self._ledger(), resource.family, card_ids, facts)
        held = Held(
            uid=uid,
            namespace=str(meta(pod).get("namespace") or ""),
            pod=str(meta(pod).get("name") or ""),
            container=container,
            resource=resource.name,
            family=resource.family,
            grants=grants,
            groups=record_groups(resource.family, grants, self._group_of, self.manufacturer),
            tokens=tuple(token_ids),
            env=env,
        )
        self.held[held.key] = held
        self._unconfirmed.add(held.key)
        self._pending.take(uid, container)
        # The live fit ledger already carries the placement; the tallies take the new entries.
        self._rows = None
        if self._tallies is not None:
            charge = [(self.node, False, {container: held.groups})]
            ledger.tally_records(charge, release_terminated=self.release_terminated, into=self._tallies)
        if overcharged:
            self._live = None  # charged beyond what fits: rebuild from the records
        return held

    def _again(
        self, held: Held, resource: tk.Resource, card_ids: list[str], token_ids: Sequence[str], facts: Any
    ) -> Held:
        """A retried ``Allocate`` for a container that already holds a reservation: the same one
        (partitions and visibility whatever tokens the kubelet names, the other families while it
        names the same cards); on other cards the reservation moves there, or the old one stands."""
        same = held.cards == sorted(set(card_ids)) and not (
            resource.family == FAMILY_SHARED and len(set(card_ids)) < len(card_ids)
        )
        if resource.family in (FAMILY_PARTITIONED, FAMILY_VISIBILITY) or same:
            held.resource, held.tokens = resource.name, tuple(token_ids)
            log.info(
                "allocation retried: the same reservation",
                extra={
                    "pod": f"{held.namespace}/{held.pod}",
                    "container": held.container,
                    "cards": held.cards,
                },
            )
            return held
        del self.held[held.key]
        self._invalidate()
        try:
            pod = self.pods[held.uid]
            container = next(ct for ct in containers_of(pod) if ct.get("name") == held.container)
            moved = self._new(
                held.uid, pod, held.container, resource, card_ids, token_ids, facts, _env_of(container)
            )
        except Refusal:
            self.held[held.key] = held
            self._invalidate()
            raise
        log.info(
            "allocation retried on other cards: the reservation moved",
            extra={"pod": f"{held.namespace}/{held.pod}", "from": held.cards, "to": moved.cards},
        )
        return moved

    def _refresh(self) -> bool:
        """Read the node's Pods past the watch (a Pod bound a moment ago may not have reached it)
        — outside the mutex; True when something new was learnt."""
        if self.refresh_pods is None:
            return False
        try:
            pods = self.refresh_pods()
        except Exception as error:  # the API is unreachable: identification stays with the cache
            log.warning("could not list the node's Pods", extra={"error": str(error)})
            return False
        learnt = False
        with self.lock:
            for pod in pods:
                uid = meta(pod).get("uid")
                if not uid or uid in self._deleted:
                    continue  # a deletion the watch delivered meanwhile wins over the list
                known = self.pods.get(uid)
                if known is None or _newer(pod, known):
                    self._learn(uid, pod)
                    learnt = True
            if learnt:
                self._invalidate()
        if learnt:
            self._changed()
        return learnt

    def give_back(self, held: Held) -> None:
        """Undo a reservation whose response could not be completed."""
        with self.lock:
            if self.held.get(held.key) is not held:
                return
            del self.held[held.key]
            self._unconfirmed.discard(held.key)
            info = self._info.get(held.uid)
            if info is not None:
                self._pending.index(held.uid, info, lambda u, c: (u, c) in self.held)
            self._invalidate()
        if held.family == FAMILY_PARTITIONED:
            self._reclaim([Owner(held.uid, held.namespace, held.pod, held.container).key])
        self._changed()

    def _token_cards(self, token_ids: Sequence[str]) -> list[str]:
        out = []
        for token in token_ids:
            card = self._card_of(token)
            if card is None:
                raise Refusal(f"device {token!r} is not one this device manager advertises")
            out.append(card)
        if not out:
            raise Refusal("the allocation names no device")
        return out

    def _cards_of(self, tokens: Sequence[str]) -> list[str | None]:
        """Each token's card (``None``: not one of ours), looked up at C speed; only tokens never
        seen before are parsed."""
        seen: list[Any] = list(map(self._token_card.get, tokens, repeat(_UNSEEN)))
        if _UNSEEN in seen:
            seen = [self._card_of(t) if c is _UNSEEN else c for t, c in zip(tokens, seen, strict=True)]
        return seen

    def _card_of(self, token: str) -> str | None:
        try:
            return self._token_card[token]
        except KeyError:
            parsed = tk.parse_token(token)
            card = parsed[1] if parsed is not None and parsed[1] in self._cards else None
            self._token_card[token] = card
            return card

    # --- preference ------------------------------------------------------------------------------------------
    def preferred(
        self, resource: tk.Resource, available: Sequence[str], must: Sequence[str], size: int
    ) -> list[str]:
        """``GetPreferredAllocation``: only offered ids; a container that already holds cards (a
        retry) gets those; whole cards lowest index first, shares and slices on the most-occupied
        card that fits (ties by index), partitions as offered."""
        if resource.family in (FAMILY_PARTITIONED, FAMILY_VISIBILITY):
            with self.lock:
                self._followed.pop(resource.name, None)
            return fill(list(must), available, size)
        by_card = Offered(available, self._cards_of(available))
        sliced = resource.family == FAMILY_SLICED
        waiting = self._ask_kubelet(resource) if self._identifies(resource) else None
        with self.lock:
            found = self._identify(resource, size, waiting, None)
            if found is not None or not sliced:
                return self._follow(
                    resource, waiting, self._prefer_locked(resource, found, by_card, available, must, size)
                )
        # A slice's size is its container's: when none is known yet (a Pod bound a moment ago that
        # the watch has not delivered), read the node's Pods past the watch once, as Allocate does.
        if self._refresh():
            waiting = self._ask_kubelet(resource) if self._identifies(resource) else None
        with self.lock:
            found = self._identify(resource, size, waiting, None)
            return self._follow(
                resource, waiting, self._prefer_locked(resource, found, by_card, available, must, size)
            )

    def _follow(
        self, resource: tk.Resource, waiting: set[tuple[str, str, str]] | None, ids: list[str]
    ) -> list[str]:
        """Keep the preference's answer for the ``Allocate`` that follows (:meth:`_follows`); a
        preference that asked nothing leaves none (call under the mutex)."""
        if waiting is None:
            self._followed.pop(resource.name, None)
        else:
            self._followed[resource.name] = (frozenset(ids), waiting, time.monotonic())
        return ids

    def _prefer_locked(
        self,
        resource: tk.Resource,
        found: tuple[str, str, Held | None] | None,
        by_card: Offered,
        available: Sequence[str],
        must: Sequence[str],
        size: int,
    ) -> list[str]:
        """The preference for the identified container (call under the mutex)."""
        if found is not None and found[2] is not None:
            return prefer_held(found[2], by_card, available, must, size)
        node = self._ledger()
        units: int | None = UNITS_PER_PERCENT
        if resource.family == FAMILY_SLICED:
            units = None  # size unknown: the card with the most room
            if found is None:
                log.info(
                    "slice preference without a waiting container: the roomiest card",
                    extra={"resource": resource.name, "size": size},
                )
            else:
                facts = facts_of(self.pods[found[0]], found[1])
                first = next((c for c in node.cards if c.id in by_card), None)
                units = slice_units(facts, first.memory_mib if first is not None else 0)
        return prefer(self._site, node, resource.family, by_card, available, must, size, units)
