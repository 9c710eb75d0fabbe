"""Gate 5: settle the cards a container gets, under one per-node mutex (§6.5).

The ledger the allocator judges is the one everybody reads: the node's ``Devices`` spec joined with
the allocation records of the Pods bound to the node (``api.allocation``, exactly as gate 3 rebuilds
it) plus this process's reservations not yet recorded, turned into a ``fastpath.fit`` node ledger.
Fit, preference and refusal all go through ``fastpath.fit`` — the code gates 1 and 3 use.

``allocate(resource, tokens)``: identify the container (the kubelet's pod-resources answer first,
then the oldest serviceable pending candidate not yet reserved), check cross-mode use, reserve by
(Pod UID, container) — all under the mutex — and return the grants and the record entry; the caller
writes the Pod annotation outside the mutex.  Refusals are :class:`Refusal` (``FailedPrecondition``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from api import allocation, constants
from api.booleans import env_bool
from api.manufacturers import BY_NAME, UNITS_PER_CARD, UNITS_PER_PERCENT, UNITS_PER_SHARE
from fastpath import cards, fit, ledger, requests
from nodeplugins.devicemanager import tokens as tk
from nodeplugins.devicemanager.backends.base import (
    FAMILY_EXCLUSIVE,
    FAMILY_PARTITIONED,
    FAMILY_SHARED,
    FAMILY_SLICED,
    FAMILY_VISIBILITY,
    Grant,
)
from nodeplugins.devicemanager.inventory import Card, Inventory

log = logging.getLogger("devicemanager.allocator")

ENV_SLICED_GATE = "GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE"
ENV_IDENTIFY_BY_KUBELET = "GPUSTACK_DEVICE_PLUGIN_IDENTIFY_BY_KUBELET"
MODE_NAMES = {**dict(enumerate(constants.FAMILY_NAMES)), constants.DEVICE_MODE_NONE: "free"}
TERMINAL = ("Succeeded", "Failed")
# (namespace, pod name, container name) of containers the kubelet holds no device of the resource for.
PodResourcesLookup = Callable[[str], set[tuple[str, str, str]] | None]


def _flag(env: Mapping[str, str], name: str) -> bool:
    """A deploy-time boolean, read with the one parser every reader uses (api.booleans)."""
    return env_bool(name, True, env)


class Refusal(Exception):
    """``Allocate`` refused: the kubelet fails the Pod with ``UnexpectedAdmissionError``."""


@dataclass
class Held:
    """One container's reservation: what it took, keyed by (Pod UID, container)."""

    uid: str
    namespace: str
    pod: str
    container: str
    resource: str
    family: str
    grants: list[Grant]
    groups: list[dict[str, Any]]  # the record's groups for this container
    tokens: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Candidate:
    pod: Mapping[str, Any]
    container: str
    quantity: int
    age: tuple[str, str, str] = ("", "", "")  # creation time, namespace, name
    position: int = 0  # the container's place in allocation order


@dataclass(frozen=True, slots=True)
class _PodInfo:
    """What identification reads of one Pod, computed once per Pod event."""

    eligible: bool  # bound here, not terminal, not deleting
    age: tuple[str, str, str]
    containers: tuple[tuple[str, dict[str, int]], ...]  # allocation order, quantities by resource
    recorded: frozenset[tuple[str, int]]  # (container, mode) the Pod's record names

    @staticmethod
    def of(pod: Mapping[str, Any], node: str) -> _PodInfo:
        meta = _meta(pod)
        eligible = (
            (pod.get("spec") or {}).get("nodeName") == node
            and not meta.get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") not in TERMINAL
        )
        containers = []
        for container in _containers(pod):
            resources = container.get("resources") or {}
            quantities: dict[str, int] = {}
            for part in ("requests", "limits"):  # limits win, as the kubelet reads them
                for key, value in (resources.get(part) or {}).items():
                    try:
                        quantities[key] = int(str(value))
                    except ValueError:
                        quantities[key] = 0
            containers.append((str(container.get("name", "")), quantities))
        recorded = frozenset(
            (name, entry.get("mode"))
            for name, groups in allocation.record_of(pod).items()
            for group in groups
            for entry in group.get("accelerators") or ()
        )
        age = (
            str(meta.get("creationTimestamp") or ""),
            str(meta.get("namespace") or ""),
            str(meta.get("name") or ""),
        )
        return _PodInfo(bool(eligible), age, tuple(containers), recorded)


def _meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("metadata") or {}


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Init containers then app containers: the order the kubelet allocates them in."""
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]


def _quantity(container: Mapping[str, Any], resource: str) -> int:
    resources = container.get("resources") or {}
    for part in ("limits", "requests"):
        value = (resources.get(part) or {}).get(resource)
        if value is not None:
            try:
                return int(str(value))
            except ValueError:
                return 0
    return 0


def _env_of(container: Mapping[str, Any]) -> dict[str, str]:
    return {e["name"]: str(e.get("value", "")) for e in container.get("env") or () if isinstance(e, Mapping)}


class Allocator:
    def __init__(
        self,
        node: str,
        manufacturer: str,
        *,
        env: Mapping[str, str] | None = None,
        pod_resources: PodResourcesLookup | None = None,
        refresh_pods: Callable[[], list[dict[str, Any]]] | None = None,
    ) -> None:
        env = os.environ if env is None else env
        self.node = node
        self.manufacturer = manufacturer
        self.maker = BY_NAME[manufacturer]
        self.release_terminated = allocation.release_terminated_from_env(env)
        self.slice_gate = _flag(env, ENV_SLICED_GATE)
        self.identify_by_kubelet = _flag(env, ENV_IDENTIFY_BY_KUBELET)
        self.pod_resources = pod_resources
        self.refresh_pods = refresh_pods  # an uncached list of the node's Pods (the watch may lag)
        self.lock = threading.Lock()  # the per-node mutex
        self.inventory = Inventory(manufacturer)
        self.groups: list[dict[str, Any]] = []
        self.pods: dict[str, dict[str, Any]] = {}
        self.held: dict[tuple[str, str], Held] = {}
        self._rows: list[dict[str, Any]] | None = None  # status rows, rebuilt lazily
        self._live: cards.NodeLedger | None = None  # the fit ledger allocations commit into
        self._info: dict[str, _PodInfo] = {}  # per Pod what identification reads
        self._token_card: dict[str, str | None] = {}
        self._cards: dict[str, Card] = {}
        self._group_of: dict[str, str] = {}
        self.listeners: list[Callable[[], None]] = []

    # --- state --------------------------------------------------------------------------------------------
    def set_inventory(self, inventory: Inventory, groups: list[dict[str, Any]]) -> None:
        with self.lock:
            self.inventory = inventory
            self.groups = groups
            self._cards = {card.id: card for card in inventory.cards}
            self._group_of = {a["id"]: g["id"] for g in groups for a in g.get("accelerators") or ()}
            self._token_card = {}
            self._invalidate()
        self._changed()

    def pod_event(self, kind: str, pod: Mapping[str, Any]) -> None:
        """Keep the node's Pods (``ADDED``/``MODIFIED``/``DELETED``); a deleted Pod releases all it held."""
        uid = _meta(pod).get("uid")
        if not uid:
            return
        with self.lock:
            if kind == "DELETED":
                self.pods.pop(uid, None)
                self._info.pop(uid, None)
                for key in [k for k in self.held if k[0] == uid]:
                    del self.held[key]
            else:
                self.pods[uid] = dict(pod)
                self._info[uid] = _PodInfo.of(pod, self.node)
                self._adopt(uid, pod)
            self._invalidate()
        self._changed()

    def _adopt(self, uid: str, pod: Mapping[str, Any]) -> None:
        """Take over the containers a Pod's record names that this process holds nothing for (after
        a restart of the agent): from then on the in-process hold, not the annotation, is the truth,
        so an annotation edited by hand cannot free a card (:meth:`drifted` restores it)."""
        record = allocation.record_of(pod)
        meta = _meta(pod)
        for container, groups in record.items():
            if (uid, container) in self.held:
                continue
            family = _family_of_groups(groups)
            self.held[(uid, container)] = Held(
                uid=uid,
                namespace=str(meta.get("namespace") or ""),
                pod=str(meta.get("name") or ""),
                container=container,
                resource="",
                family=family,
                grants=self._grants_of(groups),
                groups=[dict(g) for g in groups],
            )

    def _grants_of(self, groups: Iterable[Mapping[str, Any]]) -> list[Grant]:
        grants = []
        for group in groups:
            for entry in group.get("accelerators") or ():
                card = self._cards.get(entry.get("id"))
                if card is None:
                    continue
                placements = entry.get("allocatedPhysicalPlacements") or [{}]
                grants.append(
                    Grant(
                        card,
                        int(entry.get("allocated") or 0),
                        str(entry.get("allocatedPhysicalProfile") or ""),
                        placements[0].get("start"),
                        placements[0].get("length"),
                    )
                )
        return grants

    def record_for(self, uid: str) -> allocation.Record:
        """The record the Pod should carry: every container this process holds for it."""
        with self.lock:
            return {name: held.groups for (held_uid, name), held in self.held.items() if held_uid == uid}

    def drifted(self, pod: Mapping[str, Any]) -> allocation.Record | None:
        """The record to write back when the Pod's annotation no longer says what is held (edited
        by hand, or never written); ``None`` when it agrees."""
        uid = _meta(pod).get("uid") or ""
        want = self.record_for(uid)
        if not want:
            return None
        annotations = _meta(pod).get("annotations") or {}
        have = annotations.get(allocation.ANNOTATION)
        if have == allocation.encode(want):
            return None
        try:
            if allocation.encode(allocation.decode(have)) == allocation.encode(want):
                return None
        except allocation.RecordError:
            pass
        return want

    def replace_pods(self, pods: Iterable[Mapping[str, Any]]) -> None:
        with self.lock:
            self.pods = {_meta(p)["uid"]: dict(p) for p in pods if _meta(p).get("uid")}
            for key in [k for k in self.held if k[0] not in self.pods]:
                del self.held[key]  # gone while nobody watched
            self._info = {uid: _PodInfo.of(pod, self.node) for uid, pod in self.pods.items()}
            for uid, pod in self.pods.items():
                self._adopt(uid, pod)
            self._invalidate()
        self._changed()

    def _invalidate(self) -> None:
        """Something other than an allocation moved: rebuild the ledgers on next use."""
        self._rows = None
        self._live = None

    def _changed(self) -> None:
        for listener in list(self.listeners):
            listener()

    def _devices(self) -> dict[str, Any]:
        return {"metadata": {"name": self.node}, "spec": {"groups": self.groups}}

    def _pseudo_pods(self) -> list[Mapping[str, Any]]:
        """The node's Pods with this process's unrecorded reservations folded into their records."""
        by_uid: dict[str, dict[str, Any]] = {}
        for (uid, container), held in self.held.items():
            by_uid.setdefault(uid, {})[container] = held.groups
        out: list[Mapping[str, Any]] = []
        for uid, pod in self.pods.items():
            extra = by_uid.pop(uid, None)
            if not extra:
                out.append(pod)
                continue
            record = {**allocation.record_of(pod), **extra}  # what is held wins over the annotation
            meta = dict(_meta(pod))
            meta["annotations"] = {
                **(meta.get("annotations") or {}),
                allocation.ANNOTATION: allocation.encode(record),
            }
            out.append({**pod, "metadata": meta})
        for uid, record in by_uid.items():
            out.append(
                {
                    "metadata": {
                        "uid": uid,
                        "annotations": {allocation.ANNOTATION: allocation.encode(record)},
                    },
                    "spec": {"nodeName": self.node},
                    "status": {"phase": "Pending"},
                }
            )
        return out

    def rows_locked(self) -> list[dict[str, Any]]:
        if self._rows is None:
            pods = [p for p in self._pseudo_pods() if (p.get("spec") or {}).get("nodeName") == self.node]
            self._rows = ledger.ledger_rows(self._devices(), pods, release_terminated=self.release_terminated)
        return self._rows

    def rows(self) -> list[dict[str, Any]]:
        """The ``Devices`` status groups: what is allocated now, held reservations included."""
        with self.lock:
            return self.rows_locked()

    def row_index(self) -> dict[tuple[str, str], Mapping[str, Any]]:
        with self.lock:
            return {(g["id"], r["id"]): r for g in self.rows_locked() for r in g["accelerators"]}

    def _ledger(self) -> cards.NodeLedger:
        """The live fit ledger (call under the mutex): placements commit into it."""
        if self._live is None:
            self._live = ledger.node_ledger(self._devices(), None, self.rows_locked())
        return self._live

    # --- identification -------------------------------------------------------------------------------------
    def _candidates(self, resource: tk.Resource) -> list[Candidate]:
        out = []
        mode = tk.FAMILY_MODE.get(resource.family, constants.DEVICE_MODE_VISIBILITY)
        for uid, info in self._info.items():
            if not info.eligible:
                continue
            for position, (name, quantities) in enumerate(info.containers):
                quantity = quantities.get(resource.name, 0)
                if quantity <= 0 or (uid, name) in self.held or (name, mode) in info.recorded:
                    continue
                out.append(Candidate(self.pods[uid], name, quantity, info.age, position))
        return out

    def identify(self, resource: tk.Resource, count: int) -> Candidate:
        """The container this ``Allocate`` serves (call under the mutex)."""
        candidates = self._candidates(resource)
        if self.identify_by_kubelet and self.pod_resources is not None and candidates:
            waiting = self.pod_resources(resource.name)
            if waiting is not None:
                named = [
                    cand
                    for cand in candidates
                    if (_meta(cand.pod).get("namespace"), _meta(cand.pod).get("name"), cand.container)
                    in waiting
                ]
                if len(named) == 1:
                    return named[0]
                if named:
                    candidates = named
        if not candidates:
            raise Refusal(
                f"no Pod bound to node {self.node} is waiting for {count} {resource.name}: cannot tell which "
                "container this allocation is for"
            )
        fitting = [
            cand
            for cand in candidates
            if resource.family in (FAMILY_SLICED, FAMILY_PARTITIONED) or cand.quantity == count
        ]
        pool = fitting or candidates

        return min(pool, key=lambda cand: (cand.age, cand.position))

    # --- allocation -----------------------------------------------------------------------------------------
    def allocate(self, resource: tk.Resource, token_ids: Sequence[str]) -> Held:
        """Identify, check and reserve (under the mutex); the caller records and responds."""
        with self.lock:
            cards = self._token_cards(token_ids)
            try:
                candidate = self.identify(resource, len(token_ids))
            except Refusal:
                if not self._refresh_locked():
                    raise
                candidate = self.identify(resource, len(token_ids))
            pod = candidate.pod
            uid = _meta(pod)["uid"]
            container = next(ct for ct in _containers(pod) if ct.get("name") == candidate.container)
            facts = _facts_of(pod, candidate.container)
            if resource.family == FAMILY_VISIBILITY:
                grants = self._visibility(uid, pod, candidate.container)
            else:
                grants = self._settle(resource, cards, facts)
            held = Held(
                uid=uid,
                namespace=str(_meta(pod).get("namespace") or ""),
                pod=str(_meta(pod).get("name") or ""),
                container=candidate.container,
                resource=resource.name,
                family=resource.family,
                grants=grants,
                groups=self._record_groups(resource.family, grants),
                tokens=tuple(token_ids),
                env=_env_of(container),
            )
            self.held[(uid, candidate.container)] = held
            self._rows = None  # the live fit ledger already carries the placement
        self._changed()
        return held

    def _refresh_locked(self) -> bool:
        """Read the node's Pods past the watch (a Pod bound a moment ago may not have reached it);
        True when something new was learnt."""
        if self.refresh_pods is None:
            return False
        try:
            pods = self.refresh_pods()
        except Exception as error:  # the API is unreachable: identification stays with the cache
            log.warning("could not list the node's Pods", extra={"error": str(error)})
            return False
        learnt = False
        for pod in pods:
            uid = _meta(pod).get("uid")
            known = self.pods.get(uid) if uid else None
            if uid and (
                known is None or _meta(known).get("resourceVersion") != _meta(pod).get("resourceVersion")
            ):
                self.pods[uid] = dict(pod)
                self._info[uid] = _PodInfo.of(pod, self.node)
                self._adopt(uid, pod)
                learnt = True
        if learnt:
            self._invalidate()
        return learnt

    def give_back(self, held: Held) -> None:
        """Undo a reservation whose response could not be completed."""
        with self.lock:
            if self.held.get((held.uid, held.container)) is held:
                del self.held[(held.uid, held.container)]
                self._invalidate()
        self._changed()

    def _token_cards(self, token_ids: Sequence[str]) -> list[str]:
        cards = []
        for token in token_ids:
            card = self._card_of(token)
            if card is None:
                raise Refusal(f"device {token!r} is not one this device manager advertises")
            cards.append(card)
        if not cards:
            raise Refusal("the allocation names no device")
        return cards

    def _card_of(self, token: str) -> str | None:
        try:
            return self._token_card[token]
        except KeyError:
            parsed = tk.parse_token(token)
            card = parsed[1] if parsed is not None and parsed[1] in self._cards else None
            self._token_card[token] = card
            return card

    def _settle(self, resource: tk.Resource, card_ids: list[str], facts: Any) -> list[Grant]:
        node = self._ledger()
        by_id = {card.id: card for card in node.cards}
        family = resource.family
        base = self.maker.base
        if family == FAMILY_PARTITIONED:
            profile = facts.profiles[0] if facts is not None and facts.profiles else ""
            units = int(facts.partitioned_units) if facts is not None else 0
            if not profile:
                raise Refusal(
                    f"the container asks for {resource.name} without a {base}.partitioned.<kind>-<profile> key"
                )
            grants = fit.place(node, cards.Demand(family, self.manufacturer, base, 1, units, profile))
            if grants is None:
                raise Refusal(
                    f"no partitioned card on node {self.node} has a free placement for profile {profile}"
                )
            return [self._grant(g) for g in grants]
        distinct = list(dict.fromkeys(card_ids))
        if family == FAMILY_SHARED and len(distinct) < len(card_ids):
            twice = next(cid for cid in distinct if card_ids.count(cid) > 1)
            raise Refusal(
                f"a shared grant must name distinct cards; the kubelet offered two shares of card {twice}"
            )
        chosen = cards.NodeLedger(self.node, [by_id[cid] for cid in distinct])
        if family == FAMILY_EXCLUSIVE:
            demand = cards.Demand(family, self.manufacturer, base, len(distinct), UNITS_PER_CARD)
        elif family == FAMILY_SHARED:
            demand = cards.Demand(family, self.manufacturer, base, len(distinct), UNITS_PER_SHARE)
        else:
            units = _slice_units(facts, by_id[distinct[0]].memory_mib)
            demand = cards.Demand(family, self.manufacturer, base, 1, units)
        grants = fit.place(chosen, demand)
        if grants is None:
            if family == FAMILY_SLICED and not self.slice_gate:
                log.warning("slice does not fit; allocated anyway (%s=false)", ENV_SLICED_GATE)
                self._live = None  # charged beyond what fits: rebuild from the records
                card = by_id[distinct[0]]
                return [self._grant((card.group, card.id, card.index, demand.units, "", None, None))]
            raise Refusal(self._why(family, [by_id[cid] for cid in distinct], demand.units))
        out = [self._grant(g) for g in grants]
        if family == FAMILY_SLICED and facts is not None and facts.cores_percentage:
            out = [Grant(g.card, g.units, cores_percentage=int(facts.cores_percentage)) for g in out]
        return out

    def _why(self, family: str, cards: list[Any], units: int) -> str:
        for card in cards:
            if not card.healthy:
                return f"card {card.id} is unhealthy"
            if card.partitioned:
                return (
                    f"card {card.id} is partitioned: only {self.maker.base}.partitioned requests may use it"
                )
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

    def _grant(self, grant: tuple) -> Grant:
        _group, card_id, _index, units, profile, start, length = grant
        card = self._cards[card_id]
        vendor = profile
        for p in card.profiles:
            if p.name == profile or p.name.replace(".", "") == profile.replace(".", ""):
                vendor = p.name
        return Grant(card, int(units), vendor, start, length)

    def _visibility(self, uid: str, pod: Mapping[str, Any], container: str) -> list[Grant]:
        """The owner's cards (its reservation first, its recorded entry second); fail closed."""
        for (held_uid, name), held in self.held.items():
            if held_uid == uid and name != container and held.family != FAMILY_VISIBILITY:
                return [Grant(g.card, 0, g.profile, g.start, g.length) for g in held.grants]
        for name, groups in allocation.record_of(pod).items():
            if name == container:
                continue
            grants = []
            for group in groups:
                for entry in group.get("accelerators") or ():
                    card = self._cards.get(entry.get("id"))
                    if card is not None and entry.get("mode") != constants.DEVICE_MODE_VISIBILITY:
                        placements = entry.get("allocatedPhysicalPlacements") or [{}]
                        grants.append(
                            Grant(
                                card,
                                0,
                                entry.get("allocatedPhysicalProfile") or "",
                                placements[0].get("start"),
                                placements[0].get("length"),
                            )
                        )
            if grants:
                return grants
        raise Refusal(f"container {container}: its Pod holds no card of this node to make visible")

    def _record_groups(self, family: str, grants: Sequence[Grant]) -> list[dict[str, Any]]:
        mode = tk.FAMILY_MODE.get(family, constants.DEVICE_MODE_VISIBILITY)
        groups: dict[str, dict[str, Any]] = {}
        for g in grants:
            gid = self._group_of.get(g.card.id, "")
            group = groups.setdefault(gid, {"id": gid, "manufacturer": self.manufacturer, "accelerators": []})
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

    # --- preference ------------------------------------------------------------------------------------------
    def preferred(
        self, resource: tk.Resource, available: Sequence[str], must: Sequence[str], size: int
    ) -> list[str]:
        """``GetPreferredAllocation``: only offered ids; whole cards lowest index first, shares and
        slices on the most-occupied card that fits (ties by index), partitions as offered."""
        with self.lock:
            if resource.family in (FAMILY_PARTITIONED, FAMILY_VISIBILITY):
                return _fill(list(must), available, size)
            by_card: dict[str, list[str]] = {}
            for token in available:
                card = self._card_of(token)
                if card is not None:
                    by_card.setdefault(card, []).append(token)
            node = self._ledger()
            offered = cards.NodeLedger(self.node, [card for card in node.cards if card.id in by_card])
            units = UNITS_PER_PERCENT
            if resource.family == FAMILY_SLICED:
                try:
                    cand = self.identify(resource, size)
                    facts = _facts_of(cand.pod, cand.container)
                    units = _slice_units(facts, offered.cards[0].memory_mib if offered.cards else 0)
                except Refusal:
                    pass
                demand = cards.Demand(FAMILY_SLICED, self.manufacturer, self.maker.base, size, units)
            elif resource.family == FAMILY_SHARED:
                demand = cards.Demand(
                    FAMILY_SHARED, self.manufacturer, self.maker.base, size, UNITS_PER_SHARE
                )
            else:
                demand = cards.Demand(
                    FAMILY_EXCLUSIVE, self.manufacturer, self.maker.base, size, UNITS_PER_CARD
                )
            grants = fit.choose(offered, demand) or []
        picked = list(must)
        for _group, card_id, *_rest in grants:
            for token in by_card.get(card_id, ()):
                if token not in picked:
                    picked.append(token)
                    break
        return _fill(picked, available, size)


def _fill(picked: list[str], available: Sequence[str], size: int) -> list[str]:
    for token in available:
        if len(picked) >= size:
            break
        if token not in picked:
            picked.append(token)
    return picked[:size]


def _family_of_groups(groups: Iterable[Mapping[str, Any]]) -> str:
    for group in groups:
        for entry in group.get("accelerators") or ():
            for family, mode in tk.FAMILY_MODE.items():
                if entry.get("mode") == mode:
                    return family
    return FAMILY_VISIBILITY


def _holds(group: Mapping[str, Any], resource: tk.Resource) -> bool:
    mode = tk.FAMILY_MODE.get(resource.family, constants.DEVICE_MODE_VISIBILITY)
    return any(entry.get("mode") == mode for entry in group.get("accelerators") or ())


def _facts_of(pod: Mapping[str, Any], container: str) -> Any:
    for facts in requests.scan_pod(pod.get("spec") or {}).containers:
        if facts.name == container:
            return facts
    return None


def _slice_units(facts: Any, card_vram_mib: int) -> int:
    if facts is None:
        return UNITS_PER_PERCENT
    if facts.sliced_units > 0:
        return int(facts.sliced_units)
    if facts.memory_percentage > 0:
        return requests.slice_units_for_percentage(int(facts.memory_percentage))
    if facts.memory_mib > 0 and card_vram_mib > 0:
        return requests.slice_units_for_mib(int(facts.memory_mib), card_vram_mib)
    return UNITS_PER_CARD
