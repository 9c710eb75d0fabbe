"""Which container an ``Allocate`` serves (§6.5, §11.16): the facts read of each Pod, and the
index of containers still waiting for each resource, and the kubelet's answer shared by the
callers that ask at once (:class:`Asked`).

The kubelet's ``Allocate`` names devices, not a container.  The allocator asks the kubelet's
pod-resources API which containers hold no device of the resource yet and picks among those; without
an answer it takes the oldest serviceable pending container not yet reserved.  Both read
:class:`Pending`, kept up to date on every Pod event and reservation, so identification costs a few
dictionary lookups rather than a scan of the node's Pods.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from api import allocation
from nodeplugins.devicemanager import tokens as tk
from nodeplugins.devicemanager.backends.base import (
    FAMILY_EXCLUSIVE,
    FAMILY_PARTITIONED,
    FAMILY_SHARED,
    FAMILY_SLICED,
    FAMILY_VISIBILITY,
)
from nodeplugins.devicemanager.holds import Held

TERMINAL = ("Succeeded", "Failed")
EXACT_COUNT = (FAMILY_EXCLUSIVE, FAMILY_SHARED, FAMILY_VISIBILITY)  # a container names how many devices


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What identification reads of one Pod, computed once per Pod event."""

    eligible: bool  # bound here, not terminal, not deleting
    phase: str
    age: tuple[str, str, str]  # creation time, namespace, name
    containers: tuple[tuple[str, dict[str, int]], ...]  # allocation order, quantities by resource
    recorded: frozenset[tuple[str, int]]  # (container, mode) the Pod's record names

    @property
    def ended(self) -> bool:
        return self.phase in TERMINAL

    @staticmethod
    def of(pod: Mapping[str, Any], node: str) -> PodInfo:
        meta = pod.get("metadata") or {}
        phase = str((pod.get("status") or {}).get("phase") or "")
        eligible = (
            (pod.get("spec") or {}).get("nodeName") == node
            and not meta.get("deletionTimestamp")
            and phase not in TERMINAL
        )
        containers = []
        for container in containers_of(pod):
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
        return PodInfo(bool(eligible), phase, age, tuple(containers), recorded)


def containers_of(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Init containers then app containers: the order the kubelet allocates them in."""
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]


Shape = tuple[tuple[str, int], ...]  # a container's quantities by resource, sorted
# (creation time, namespace, name), position, uid, container, quantity, shape: sorts oldest first
Waiting = tuple[tuple[str, str, str], int, str, str, int, Shape]


class Pending:
    """Per served resource, the containers waiting for it: bound here, asking for it, neither
    reserved by this process nor recorded on their Pod — kept sorted, oldest first."""

    def __init__(self, modes: Mapping[str, int]) -> None:
        self.modes = dict(modes)  # served resource name → the ledger mode its grants record
        self._sorted: dict[str, list[Waiting]] = {name: [] for name in modes}
        self._entries: dict[str, dict[tuple[str, str], Waiting]] = {name: {} for name in modes}
        self._by_pod: dict[str, set[tuple[str, str]]] = {}  # uid → (resource, container) indexed
        # Per resource, how many waiting containers ask for each set of quantities (a shape).
        self._shapes: dict[str, Counter[Shape]] = {name: Counter() for name in modes}

    def _remove(self, resource: str, uid: str, container: str) -> None:
        entry = self._entries[resource].pop((uid, container), None)
        if entry is not None:
            entries = self._sorted[resource]
            del entries[bisect.bisect_left(entries, entry)]
            self._by_pod.get(uid, set()).discard((resource, container))
            shapes = self._shapes[resource]
            shape = entry[5]
            shapes[shape] -= 1
            if not shapes[shape]:
                del shapes[shape]

    def drop(self, uid: str) -> None:
        for resource, container in list(self._by_pod.pop(uid, ())):
            self._remove(resource, uid, container)

    def index(self, uid: str, info: PodInfo, held: Callable[[str, str], bool]) -> None:
        """(Re)index one Pod; ``held(uid, container)``: reserved by this process."""
        self.drop(uid)
        if not info.eligible:
            return
        for position, (container, quantities) in enumerate(info.containers):
            for resource, quantity in quantities.items():
                mode = self.modes.get(resource)
                if mode is None or quantity <= 0 or (container, mode) in info.recorded:
                    continue
                if held(uid, container):
                    continue
                shape = tuple(sorted(quantities.items()))
                entry = (info.age, position, uid, container, quantity, shape)
                self._entries[resource][(uid, container)] = entry
                bisect.insort(self._sorted[resource], entry)
                self._by_pod.setdefault(uid, set()).add((resource, container))
                self._shapes[resource][shape] += 1

    def take(self, uid: str, container: str) -> None:
        """``container`` was reserved: it waits for nothing any more."""
        for resource, name in list(self._by_pod.get(uid, ())):
            if name == container:
                self._remove(resource, uid, container)

    def quantity(self, resource: str, uid: str, container: str) -> int:
        entry = self._entries.get(resource, {}).get((uid, container))
        return entry[4] if entry is not None else 0

    def entry(self, resource: str, uid: str, container: str) -> Waiting | None:
        return self._entries.get(resource, {}).get((uid, container))

    def oldest(self, resource: str, count: int, exact: bool) -> Waiting | None:
        """The oldest waiting container; with ``exact``, the oldest asking for exactly ``count``
        devices when there is one (whole cards, shares and visibility name their count)."""
        entries = self._sorted.get(resource) or []
        if not entries:
            return None
        if exact:
            for entry in entries:
                if entry[4] == count:
                    return entry
        return entries[0]

    def alike(self, resource: str) -> bool:
        """Whether every container waiting for ``resource`` asks for the same quantities of every
        resource (so whichever of them a call serves, its request reads the same)."""
        return len(self._shapes.get(resource) or ()) <= 1

    def waiting(self, resource: str) -> list[Waiting]:
        return list(self._sorted.get(resource) or ())

    def keys(self, resource: str) -> list[tuple[str, str]]:
        """(Pod UID, container) of every container waiting for ``resource``."""
        return list(self._entries.get(resource) or ())


def pick(entries: Iterable[Waiting], count: int, exact: bool) -> Waiting | None:
    """Among named waiting containers: the oldest (asking for exactly ``count`` when ``exact``)."""
    ordered = sorted(entries)
    if not ordered:
        return None
    if exact:
        for entry in ordered:
            if entry[4] == count:
                return entry
    return ordered[0]


class Asked:
    """The kubelet's answer to "which containers wait for ``resource``", shared by callers that
    arrive together: a caller gets an answer asked *after* it arrived (so it names the caller's
    container), but callers arriving while one is being asked share the next one instead of each
    asking (and parsing every Pod of the node) in turn."""

    def __init__(self, lookup: Callable[[str], set[tuple[str, str, str]] | None]) -> None:
        self.lookup = lookup
        self._cond = threading.Condition()
        self._started: dict[str, int] = {}
        self._finished: dict[str, int] = {}
        self._running: set[str] = set()
        self._latest: dict[str, set[tuple[str, str, str]] | None] = {}

    def __call__(self, resource: str) -> set[tuple[str, str, str]] | None:
        with self._cond:
            need = self._started.get(resource, 0) + 1  # the first answer asked from now on
            while self._finished.get(resource, 0) < need:
                if resource not in self._running:
                    self._running.add(resource)
                    ticket = self._started[resource] = self._started.get(resource, 0) + 1
                    break
                self._cond.wait()
            else:
                return self._latest[resource]
        answer = None  # what waiters get when the lookup raises: no answer
        try:
            answer = self.lookup(resource)
            return answer
        finally:
            with self._cond:
                self._running.discard(resource)
                self._finished[resource] = ticket
                self._latest[resource] = answer
                self._cond.notify_all()


class Identifies:
    """The allocator's identification (mixed into :class:`~.allocator.Allocator`, whose state it
    reads): ask the kubelet outside the mutex, then pick the container under it."""

    lock: threading.Lock
    held: dict[tuple[str, str], Held]
    served: dict[str, tk.Resource]
    identify_by_kubelet: bool
    pod_resources: Callable[..., set[tuple[str, str, str]] | None] | None
    _asked: Asked | None
    _asked_of: Any
    _unconfirmed: set[tuple[str, str]]
    _pending: Pending
    _info: dict[str, PodInfo]
    _by_name: dict[tuple[str, str], str]

    def _ask_kubelet(self, resource: tk.Resource) -> set[tuple[str, str, str]] | None:
        """The kubelet's containers without a device of ``resource`` (never under the mutex)."""
        if not self.identify_by_kubelet or self.pod_resources is None:
            return None
        if self._asked is None or self._asked_of is not self.pod_resources:
            self._asked, self._asked_of = Asked(self._lookup), self.pod_resources
        return self._asked(resource.name)

    def _lookup(self, name: str) -> set[tuple[str, str, str]] | None:
        """Ask the kubelet about the Pods whose containers can still be waiting for ``name``; a
        reservation the kubelet lists as having its devices is confirmed (the kubelet holds it:
        not a retry candidate any more, and its Pod need not be read again)."""
        resource = self.served[name]
        with self.lock:
            skip = self._settled(resource)
        lookup = self.pod_resources
        if lookup is None:
            return None
        answer = lookup(name, skip=skip)
        if answer is not None:
            with self.lock:
                for key in list(self._unconfirmed):
                    held = self.held.get(key)
                    if held is None or held.family != resource.family or (held.namespace, held.pod) in skip:
                        continue
                    if (held.namespace, held.pod, held.container) not in answer:
                        self._unconfirmed.discard(key)
        return answer

    def _settled(self, resource: tk.Resource) -> frozenset[tuple[str, str]]:
        """(namespace, name) of the known Pods with no container that can be waiting for
        ``resource``: none pending for it, no reservation of its family unconfirmed."""
        open_uids = {uid for uid, _c in self._pending.keys(resource.name)}
        for key in self._unconfirmed:
            held = self.held.get(key)
            if held is not None and held.family == resource.family:
                open_uids.add(held.uid)
        return frozenset(key for key, uid in self._by_name.items() if uid not in open_uids)

    def _identify(
        self,
        resource: tk.Resource,
        count: int,
        waiting: set[tuple[str, str, str]] | None,
        card_ids: Sequence[str] | None,
        *,
        retry: bool = False,
    ) -> tuple[str, str, Held | None] | None:
        """The container this call serves — (Pod UID, container, its reservation when it already
        has one: a retry) — or ``None`` when no container of a known Pod waits (call under the mutex).

        With the kubelet's answer: a named container not yet reserved, else a named one already
        reserved for this family (the kubelet lost or never got the earlier response) — once no
        named Pod is unknown, or with ``retry``.  Without it:
        the oldest pending container not yet reserved, else — with ``retry``, once the Pods have been
        re-listed past the watch — a reserved one of a still-pending Pod the kubelet offers the same
        cards for (any, for fungible partition and visibility tokens)."""
        exact = resource.family in EXACT_COUNT
        if waiting is not None:
            fresh: list[Waiting] = []
            again: list[tuple[tuple[str, str, str], int, Held]] = []
            unknown = False
            for namespace, name, container in waiting:
                uid = self._by_name.get((namespace, name))
                if uid is None:
                    unknown = True  # a Pod the watch has not delivered: it may be the one served
                    continue
                entry = self._pending.entry(resource.name, uid, container)
                if entry is not None:
                    fresh.append(entry)
                    continue
                held = self.held.get((uid, container))
                info = self._info.get(uid)
                if held is not None and held.family == resource.family and info is not None and info.eligible:
                    position = next((i for i, (c, _q) in enumerate(info.containers) if c == container), 0)
                    again.append((info.age, position, held))
            chosen = pick(fresh, count, exact)
            if chosen is not None:
                return chosen[2], chosen[3], None
            if again and (retry or not unknown):
                held = min(again, key=lambda a: (a[0], a[1]))[2]
                return held.uid, held.container, held
        oldest = self._pending.oldest(resource.name, count, exact)
        if oldest is not None:
            return oldest[2], oldest[3], None
        if card_ids is None or not retry or waiting is not None:
            return None  # the kubelet's answer named no reserved container: none is retried
        offered = sorted(set(card_ids))
        fungible = resource.family in (FAMILY_PARTITIONED, FAMILY_VISIBILITY)
        retried = [
            held
            for held in self.held.values()
            if held.family == resource.family
            and (info := self._info.get(held.uid)) is not None
            and info.eligible
            and info.phase == "Pending"
            and (fungible or held.cards == offered)
        ]
        if not retried:
            return None
        held = min(retried, key=lambda h: self._info[h.uid].age)
        return held.uid, held.container, held

    def _identifies(self, resource: tk.Resource) -> bool:
        """Whether a preference needs the kubelet's answer: for a slice's size when the containers
        waiting for slices ask for different sizes, or for a possible retry (a reservation of this
        family the kubelet has not listed yet, whose Pod has not started).  When every waiting
        container asks alike and no retry is possible, the answer could not change the preference:
        whichever container it named, the oldest pending one reads the same size."""
        with self.lock:
            if resource.family == FAMILY_SLICED and not self._pending.alike(resource.name):
                return True
            for key in self._unconfirmed:
                held = self.held.get(key)
                info = self._info.get(key[0])
                if (
                    held is not None
                    and held.family == resource.family
                    and info is not None
                    and info.phase == "Pending"
                ):
                    return True
            return False
