"""The Devices ledger, built once for every reader: gate 1's fit labels, gate 3's per-card check,
the InstanceType views and node keys, and gate 5's allocator all take their cards from here.

Two sources, one shape (devices spec §6.3):

- **Devices objects** (:func:`node_ledger`, :func:`build_ledger`): ``spec.groups`` gives each card's
  capability (logical slice count, partition profiles with their empty-card placements),
  ``status.groups`` its allocation (mode, remaining units out of M = 1,600,000, hosted slices,
  partition profiles).  A card with no status row yet is free (``remaining = M``); a row whose
  ``remaining`` is omitted holds 0.
- **Pods' allocation records** (:func:`tally_pods` — :func:`tally_records` when already decoded —,
  :func:`ledger_rows`; the record's codec is
  ``api.allocation``): per card, Σ ``allocated`` over the charging entries of the node's Pods,
  ``remaining = max(0, M − Σ)`` (0 once Exclusive), Σ slices, and for a partitioned card the
  allocated profile counts plus the placement-aware remaining count of every profile, computed from
  the recorded placements — the ``status.groups`` the device manager publishes.  A Pod charges until
  it is gone, except that a finished Pod (``Succeeded``/``Failed``) stops charging its exclusive and
  shared cards and its logical slices — not its partitions, nor MetaX/Cambricon slices, which the
  reclaimer destroys only with the Pod — unless ``release_terminated`` is false.

Gate 3 judges on the fuller of the two per card (:func:`merged_rows`: the status lags the Pod list
when a Pod is allocated, the Pod list lags nothing it holds), node by node as it needs them
(:class:`Book`).

Compiled by Cython in pure-Python mode (the cards are ``fastpath.cards``' C structs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import cython

from api import allocation
from api.manufacturers import UNITS_PER_CARD, UNITS_PER_SHARE, publish_profile
from api.objects import Obj
from fastpath import fit, requests
from fastpath.cards import Card, Ledger, NodeLedger, Profile, reconstruct

if not cython.compiled:  # compiled, the codes are fastpath/codes.pxd's C enum
    from api.constants import (
        DEVICE_MODE_EXCLUSIVE,
        DEVICE_MODE_NONE,
        DEVICE_MODE_PARTITIONED,
        DEVICE_MODE_SHARED,
        DEVICE_MODE_SLICED,
    )


TERMINAL_PHASES = ("Succeeded", "Failed")
# Slices the reclaimer destroys only with the Pod: they stay charged after it finishes.
SLICES_HELD_UNTIL_GONE = frozenset({"metax", "cambricon"})
# Which mode a card reports when (against the allocator's invariant) entries of several meet.
_PRECEDENCE = {
    DEVICE_MODE_EXCLUSIVE: 4,
    DEVICE_MODE_PARTITIONED: 3,
    DEVICE_MODE_SLICED: 2,
    DEVICE_MODE_SHARED: 1,
}

_M = cython.declare(cython.longlong, UNITS_PER_CARD)
_EMPTY_DICT = cython.declare(dict, {})
_EMPTY_LIST = cython.declare(list, [])
_PROFILE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


# --- Reading a Devices object ------------------------------------------------------------------------------


@cython.cfunc
def _int(value: Any) -> cython.longlong:
    """An integer field of a Devices object; 0 for anything else."""
    if type(value) is int:
        return value
    if value is None or isinstance(value, bool):
        return 0
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return 0


@cython.cfunc
@cython.inline
def _dict(value: object) -> dict:
    return value if type(value) is dict else _EMPTY_DICT


@cython.cfunc
@cython.inline
def _list(value: object) -> list:
    return value if type(value) is list else _EMPTY_LIST


@cython.cfunc
@cython.inline
def _str(value: object) -> str:
    return value if type(value) is str else ""


def accelerator_key(group: dict, label_keys: list | None = None) -> str:
    """The ``<aKey>`` of a Devices spec group: the longest of the Devices' own
    ``acceleratable.feature.gpustack.ai/<aKey>`` label keys that is the group id or a prefix of it
    (an id may carry a memory suffix, ``nvidia-tesla-t4-16g``), else the id itself."""
    gid = _str(group.get("id"))
    best = ""
    for key in label_keys or ():
        if len(key) > len(best) and (gid == key or gid.startswith(key + "-")):
            best = key
    return best or gid


def _label_keys(devices: dict) -> list:
    prefix = "acceleratable.feature.gpustack.ai/"
    labels = _dict(_dict(devices.get("metadata")).get("labels"))
    return [k[len(prefix) :] for k, v in labels.items() if k.startswith(prefix) and str(v) == "true"]


def group_keys(devices: dict) -> list:
    """The ``<aKey>`` of each of the Devices' spec groups, first-seen order, each once."""
    label_keys = _label_keys(devices)
    out: list = []
    for group in _list(_dict(devices.get("spec")).get("groups")):
        key = accelerator_key(_dict(group), label_keys)
        if key and key not in out:
            out.append(key)
    return out


def _profiles_of(manufacturer: str, raw: list) -> list:
    profiles = []
    for entry in raw:
        entry = _dict(entry)
        vendor = _str(entry.get("name"))
        if not vendor or not set(vendor) <= _PROFILE_CHARS:
            continue  # +me, +gfx and other names that cannot be a key segment are not inventory
        slots = []
        for placement in _list(entry.get("placements")):
            placement = _dict(placement)
            start = _int(placement.get("start")) if "start" in placement else -1
            length = _int(placement.get("length"))
            if start >= 0 and length > 0 and start + length <= 64:
                slots.append((start, length))
        if not slots:
            continue  # no legal placement: not inventory
        count = _int(entry.get("count")) or len(slots)
        profiles.append(
            Profile(publish_profile(manufacturer, vendor), vendor, _int(entry.get("memoryMib")), count, slots)
        )
    return profiles


def _index_of(accelerator: dict) -> int:
    return _int(accelerator.get("index"))


@cython.cfunc
@cython.locals(i=cython.Py_ssize_t, n=cython.Py_ssize_t, last=cython.longlong, index=cython.longlong)
def _sorted_by_index(accelerators: list) -> list:
    """The accelerator dicts by ``index`` (the list itself when already in order, as stored)."""
    n = len(accelerators)
    last = -(1 << 62)
    for i in range(n):
        accelerator = accelerators[i]
        if type(accelerator) is not dict:
            break
        index = _int(cython.cast(dict, accelerator).get("index"))
        if index < last:
            break
        last = index
    else:
        return accelerators
    ordered = [a for a in accelerators if type(a) is dict]
    ordered.sort(key=_index_of)
    return ordered


@cython.cfunc
def _rows_by_group(status_groups: object) -> dict:
    """``status.groups`` indexed: (group id, manufacturer) → card id → row."""
    rows_by_group: dict = {}
    for group in _list(status_groups):
        group = _dict(group)
        group_rows: dict = {}
        for row in _list(group.get("accelerators")):
            if type(row) is dict:
                group_rows[row.get("id")] = row
        rows_by_group[(group.get("id"), group.get("manufacturer"))] = group_rows
    return rows_by_group


@cython.cfunc
def _card(
    name: str, akey: str, manufacturer: str, memory: cython.longlong, accelerator: dict, status: dict
) -> Card:
    """A free card from its spec entry and its ``status`` (profiles are given by the caller)."""
    card: Card = Card.__new__(Card)
    card.node = name
    card.group = akey
    card.manufacturer = manufacturer
    card.id = _str(accelerator.get("id"))
    card.index = _int(accelerator.get("index"))
    card.memory_mib = memory
    card.healthy = not status.get("unhealthy")
    card.slice_count = _int(_dict(status.get("logicalSliced")).get("count"))
    card.mode = DEVICE_MODE_NONE
    card.remaining = _M
    card.allocated_slices = 0
    card.occupied = 0
    return card


@cython.ccall
def node_ledger(
    devices: dict,
    accelerator_group: object = None,
    status_groups: object = None,
    cores: cython.longlong = 0,
) -> NodeLedger:
    """The ledger of one node from its ``Devices`` object, scoped to ``accelerator_group`` (an
    ``<aKey>``) when given.  ``status_groups`` replaces ``status.groups`` (gate 3 rebuilds it from
    the node's Pods)."""
    card: Card
    name = _str(_dict(devices.get("metadata")).get("name"))
    if status_groups is None:
        status_groups = _dict(devices.get("status")).get("groups")
    rows_by_group = _rows_by_group(status_groups)
    label_keys = None
    cards: list = []
    last_raw: list | None = None
    last_profiles: list = _EMPTY_LIST
    for group in _list(_dict(devices.get("spec")).get("groups")):
        group = _dict(group)
        if label_keys is None:
            label_keys = _label_keys(devices)
        akey = accelerator_key(group, label_keys)
        if accelerator_group is not None and akey != accelerator_group:
            continue
        manufacturer = _str(group.get("manufacturer"))
        memory = _int(group.get("memory"))
        group_rows = rows_by_group.get((group.get("id"), manufacturer), _EMPTY_DICT)
        for accelerator in _sorted_by_index(_list(group.get("accelerators"))):
            status = _dict(accelerator.get("status"))
            card = _card(name, akey, manufacturer, memory, accelerator, status)
            raw_profiles = _list(_dict(status.get("physicalSliced")).get("profiles"))
            card.partitioned = len(raw_profiles) > 0
            if card.partitioned and (last_raw is None or raw_profiles != last_raw):
                # Cards of one model report the same geometry: parse it once, share the Profiles.
                last_raw = raw_profiles
                last_profiles = _profiles_of(manufacturer, raw_profiles)
            card.set_profiles(last_profiles if card.partitioned else _EMPTY_LIST)
            row = group_rows.get(card.id)
            if row is not None:
                card.mode = _int(row.get("mode"))
                card.remaining = _int(row.get("remaining"))  # omitted means 0
                card.allocated_slices = _int(row.get("allocatedSlices"))
                if card.profiles:
                    _apply_profiles(card, row)
            cards.append(card)
    return NodeLedger(name, cards, cores)


def build_ledger(
    devices_list: list,
    accelerator_group: str | None = None,
    *,
    node_cores: dict | None = None,
) -> Ledger:
    """A pool's ledger from its nodes' ``Devices`` objects (``node_cores``: node name → cores)."""
    nodes = []
    for devices in devices_list:
        if type(devices) is not dict:
            continue
        ledger: NodeLedger = node_ledger(devices, accelerator_group)
        if node_cores:
            ledger.cores = _int(node_cores.get(ledger.name))
        nodes.append(ledger)
    return Ledger(nodes)


def _apply_profiles(card: Card, row: dict) -> None:
    index = {}
    for i, profile in enumerate(card.profiles):
        index[profile.vendor] = i
        index[profile.name] = i
    allocated: dict = {}
    for entry in _list(row.get("allocatedProfiles")):
        entry = _dict(entry)
        at = index.get(entry.get("name"))
        count = _int(entry.get("count"))
        if at is not None and count > 0:
            allocated[at] = allocated.get(at, 0) + count
    reported = None
    if "remainingProfiles" in row:
        reported = {}
        for entry in _list(row.get("remainingProfiles")):
            entry = _dict(entry)
            at = index.get(entry.get("name"))
            if at is not None:
                reported[at] = _int(entry.get("count"))
    reconstruct(card, allocated, reported)


# --- The ledger rebuilt from Pods ----------------------------------------------------------------------------


def accelerator_containers(pod: Mapping[str, Any]) -> list[str]:
    """Names of the Pod's containers (init, sidecar and app) that ask for an accelerator family."""
    facts = requests.scan_pod((pod.get("spec") or {}) if isinstance(pod, Mapping) else None)
    return [container.name for container in facts.containers if container.claims()]


def is_held(pod: Mapping[str, Any], record: allocation.Record | None = None) -> bool:
    """True once the record names every container of the Pod that asks for an accelerator (a Pod
    asking for none is never held: it has nothing to hold)."""
    record = allocation.record_of(pod) if record is None else record
    wanted = accelerator_containers(pod)
    return bool(wanted) and all(record.get(name) for name in wanted)


def _charges(mode: int, manufacturer: object, finished: bool, release_terminated: bool) -> bool:
    if mode not in _PRECEDENCE:
        return False  # None, Visibility, garbage
    if not finished or not release_terminated:
        return True
    if mode == DEVICE_MODE_PARTITIONED:
        return True
    return mode == DEVICE_MODE_SLICED and manufacturer in SLICES_HELD_UNTIL_GONE


def _allocated_of(entry: Mapping[str, Any], mode: int) -> int:
    value = entry.get("allocated")
    if isinstance(value, int) and not isinstance(value, bool):
        return max(0, value)
    if mode == DEVICE_MODE_EXCLUSIVE:
        return UNITS_PER_CARD
    if mode == DEVICE_MODE_SHARED:
        return UNITS_PER_SHARE
    return 0


class Tally:
    """What the Pods' records charge one card."""

    __slots__ = ("allocated", "complete", "mode", "occupied", "profiles", "slices")

    def __init__(self) -> None:
        self.mode = DEVICE_MODE_NONE
        self.allocated = 0
        self.slices = 0
        self.profiles: dict[str, int] = {}
        self.occupied = 0  # memory-slice bitmask of the recorded partition placements
        self.complete = True  # every partition entry carried its placements

    def add(self, entry: Mapping[str, Any], mode: int) -> None:
        if _PRECEDENCE[mode] > _PRECEDENCE.get(self.mode, 0):
            self.mode = mode
        self.allocated += _allocated_of(entry, mode)
        if mode == DEVICE_MODE_SLICED:
            slices = entry.get("allocatedSlices")
            self.slices += slices if isinstance(slices, int) and slices > 0 else 1
        elif mode == DEVICE_MODE_PARTITIONED:
            profile = entry.get("allocatedPhysicalProfile")
            if isinstance(profile, str) and profile:
                self.profiles[profile] = self.profiles.get(profile, 0) + 1
            placements = entry.get("allocatedPhysicalPlacements")
            if isinstance(placements, list) and placements:
                for placement in placements:
                    start = placement.get("start") if isinstance(placement, dict) else None
                    length = placement.get("length") if isinstance(placement, dict) else None
                    if (
                        isinstance(start, int)
                        and isinstance(length, int)
                        and 0 <= start < start + length <= 64
                    ):
                        self.occupied |= ((1 << length) - 1) << start
            else:
                self.complete = False


def _free_placements(profile: Mapping[str, Any], occupied: int) -> int:
    """Most disjoint free legal placements of ``profile`` (greedy by end, then start — optimal for
    intervals, and the order ``fastpath.cards.Profile`` counts in)."""
    slots = []
    for placement in profile.get("placements") or ():
        if isinstance(placement, dict):
            start, length = placement.get("start"), placement.get("length")
            if isinstance(start, int) and isinstance(length, int) and 0 <= start < start + length <= 64:
                slots.append((start + length, start, ((1 << length) - 1) << start))
    slots.sort()
    count, taken = 0, occupied
    for _end, _start, mask in slots:
        if not mask & taken:
            taken |= mask
            count += 1
    return count


def tally_pods(pods: Iterable[Mapping[str, Any]], *, release_terminated: bool = True) -> dict[tuple, Tally]:
    """Per ``(node, group id, manufacturer, card id)`` the charges the Pods' records make (a record
    charges only the node its Pod is bound to)."""
    tallies: dict[tuple, Tally] = {}
    for pod in pods:
        record = allocation.record_of(pod)
        if record:
            node = (pod.get("spec") or {}).get("nodeName") or ""
            finished = (pod.get("status") or {}).get("phase") in TERMINAL_PHASES
            _tally_record(tallies, node, finished, record, release_terminated)
    return tallies


def tally_records(
    records: Iterable[tuple[str, bool, Mapping[str, Any]]],
    *,
    release_terminated: bool = True,
    into: dict[tuple, Tally] | None = None,
) -> dict[tuple, Tally]:
    """:func:`tally_pods` of records already decoded: ``(node, finished, record)`` per Pod (the
    device manager's reservations, which it holds decoded); ``into``: tallies to add them to."""
    tallies: dict[tuple, Tally] = {} if into is None else into
    for node, finished, record in records:
        _tally_record(tallies, node, finished, record, release_terminated)
    return tallies


def _tally_record(
    tallies: dict, node: str, finished: bool, record: Mapping[str, Any], release_terminated: bool
) -> None:
    for groups in record.values():
        for group in groups:
            gid, manufacturer = group.get("id"), group.get("manufacturer")
            for entry in group.get("accelerators") or ():
                mode = entry.get("mode")
                if not _charges(mode, manufacturer, finished, release_terminated):
                    continue
                key = (node, gid, manufacturer, entry.get("id"))
                tally = tallies.get(key)
                if tally is None:
                    tally = tallies[key] = Tally()
                tally.add(entry, mode)


def ledger_rows(
    devices: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    *,
    release_terminated: bool = True,
    tallies: Mapping[tuple, Tally] | None = None,
) -> list[Obj]:
    """The ``status.groups`` the device manager would publish for ``devices`` given the Pods bound
    to its node (``tallies``: :func:`tally_pods` of them, when already counted): one row for every
    card of ``spec.groups``, free cards included (seeded at M)."""
    if tallies is None:
        tallies = tally_pods(pods, release_terminated=release_terminated)
    node = (devices.get("metadata") or {}).get("name") or ""
    out = []
    for group in (devices.get("spec") or {}).get("groups") or ():
        gid, manufacturer = group.get("id"), group.get("manufacturer")
        rows = [
            _ledger_row(card, tallies.get((node, gid, manufacturer, card.get("id"))))
            for card in group.get("accelerators") or ()
        ]
        out.append({"id": gid, "manufacturer": manufacturer, "accelerators": rows})
    return out


def _ledger_row(card: Mapping[str, Any], tally: Tally | None) -> Obj:
    """One card's row: seeded at M, charged with its tally."""
    status = card.get("status") or {}
    profiles = [
        p for p in ((status.get("physicalSliced") or {}).get("profiles") or ()) if isinstance(p, dict)
    ]
    row: Obj = {"id": card.get("id"), "index": card.get("index", 0), "mode": DEVICE_MODE_NONE}
    if tally is None:
        row.update(allocated=0, remaining=UNITS_PER_CARD)
    else:
        allocated = UNITS_PER_CARD if tally.mode == DEVICE_MODE_EXCLUSIVE else tally.allocated
        row.update(
            mode=tally.mode,
            allocated=min(allocated, UNITS_PER_CARD),
            remaining=max(0, UNITS_PER_CARD - allocated),
        )
    if profiles:
        allocated_profiles = dict(tally.profiles) if tally is not None else {}
        row["allocatedProfiles"] = [{"name": n, "count": k} for n, k in sorted(allocated_profiles.items())]
        if tally is None or tally.complete:
            occupied = tally.occupied if tally is not None else 0
            row["remainingProfiles"] = [
                {"name": p.get("name"), "count": _free_placements(p, occupied)} for p in profiles
            ]
    else:
        row["allocatedSlices"] = tally.slices if tally is not None else 0
    return row


# --- Gate 3's merged view ----------------------------------------------------------------------------------------


def _charge_key(row: Mapping[str, Any] | None) -> tuple:
    if row is None:
        return (-1,)
    remaining = row.get("remaining")
    remaining = remaining if isinstance(remaining, int) and not isinstance(remaining, bool) else 0
    profiles = sum(
        int(p.get("count") or 0) for p in row.get("allocatedProfiles") or () if isinstance(p, Mapping)
    )
    return (
        UNITS_PER_CARD - remaining,
        int(row.get("allocatedSlices") or 0),
        profiles,
        int(row.get("mode") or 0),
    )


def merged_rows(devices: Mapping[str, Any], tallies: Mapping[tuple, Tally]) -> list[Obj]:
    """Per card the fuller of the ledger rebuilt from the Pods and the published status row."""
    rebuilt = ledger_rows(devices, (), tallies=tallies)
    published: dict[tuple, Mapping[str, Any]] = {}
    for group in (devices.get("status") or {}).get("groups") or ():
        for row in group.get("accelerators") or ():
            if isinstance(row, Mapping):
                published[(group.get("id"), group.get("manufacturer"), row.get("id"))] = row
    if not published:
        return rebuilt
    for group in rebuilt:
        rows = group["accelerators"]
        for i, row in enumerate(rows):
            other = published.get((group["id"], group["manufacturer"], row["id"]))
            if other is not None and _charge_key(other) > _charge_key(row):
                rows[i] = dict(other)
    return rebuilt


class Book:
    """Node ledgers built on first use, one per (node, model), with the inflight charges that fall
    on them applied as they are built — a pool of a thousand nodes costs only the nodes looked at
    (their Pods' records are aggregated then too)."""

    def __init__(
        self,
        devices: Mapping[str, Mapping[str, Any]],
        pods_by_node: Mapping[str, list[Mapping[str, Any]]],
        *,
        release_terminated: bool = True,
    ) -> None:
        self.devices = devices
        self.pods_by_node = pods_by_node
        self.release_terminated = release_terminated
        self._ledgers: dict[tuple[str, str], NodeLedger | None] = {}
        self._pending: dict[tuple[str, str], list[tuple[Any, int]]] = {}

    def charge_later(self, node: str, group: str, demand: Any, pods: int) -> None:
        key = (node, group)
        if key in self._ledgers:
            ledger = self._ledgers[key]
            if ledger is not None:
                _place_up_to(ledger, demand, pods)
        else:
            self._pending.setdefault(key, []).append((demand, pods))

    def ledger(self, node: str, group: str) -> NodeLedger | None:
        """The node's ledger of ``group``'s cards, or None when the node has no ``Devices``."""
        key = (node, group)
        ledger = self._ledgers.get(key)
        if ledger is None and key not in self._ledgers:
            devices = self.devices.get(node)
            if devices is not None:
                tallies = tally_pods(
                    self.pods_by_node.get(node, ()), release_terminated=self.release_terminated
                )
                ledger = node_ledger(devices, group, merged_rows(devices, tallies))
                for demand, pods in self._pending.pop(key, ()):
                    _place_up_to(ledger, demand, pods)
            self._ledgers[key] = ledger
        return ledger


def _place_up_to(ledger: NodeLedger, demand: Any, pods: int) -> int:
    """Charge up to ``pods`` copies of ``demand`` (an inflight Pod that does not fit charges
    nothing: the ledger already says the node is full)."""
    placed = 0
    for _ in range(pods):
        if fit.place(ledger, demand) is not None:
            placed += 1
    return placed
