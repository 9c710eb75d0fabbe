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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from api import allocation

TERMINAL = ("Succeeded", "Failed")


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


# (creation time, namespace, name), position, uid, container, quantity: sorts oldest first
Waiting = tuple[tuple[str, str, str], int, str, str, int]


class Pending:
    """Per served resource, the containers waiting for it: bound here, asking for it, neither
    reserved by this process nor recorded on their Pod — kept sorted, oldest first."""

    def __init__(self, modes: Mapping[str, int]) -> None:
        self.modes = dict(modes)  # served resource name → the ledger mode its grants record
        self._sorted: dict[str, list[Waiting]] = {name: [] for name in modes}
        self._entries: dict[str, dict[tuple[str, str], Waiting]] = {name: {} for name in modes}
        self._by_pod: dict[str, set[tuple[str, str]]] = {}  # uid → (resource, container) indexed

    def _remove(self, resource: str, uid: str, container: str) -> None:
        entry = self._entries[resource].pop((uid, container), None)
        if entry is not None:
            entries = self._sorted[resource]
            del entries[bisect.bisect_left(entries, entry)]
            self._by_pod.get(uid, set()).discard((resource, container))

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
                entry = (info.age, position, uid, container, quantity)
                self._entries[resource][(uid, container)] = entry
                bisect.insort(self._sorted[resource], entry)
                self._by_pod.setdefault(uid, set()).add((resource, container))

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

    def waiting(self, resource: str) -> list[Waiting]:
        return list(self._sorted.get(resource) or ())


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
