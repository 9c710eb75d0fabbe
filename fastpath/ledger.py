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
(:class:`Book`), rebuilding between decisions only the nodes whose Pods or ``Devices`` changed
(:class:`LedgerCache`, keyed by resourceVersions).

Compiled by Cython in pure-Python mode (the cards are ``fastpath.cards``' C structs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import cython

from api import allocation
from api.constants import KUEUE_WORKLOAD
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
_KUEUE_WORKLOAD = cython.declare(str, KUEUE_WORKLOAD)
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


@cython.ccall
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


@cython.cfunc
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


@cython.cfunc
@cython.locals(ch=cython.Py_UCS4)
def _profile_chars(name: str) -> cython.bint:
    """Compiled: ``set(name) <= _PROFILE_CHARS`` without building the set."""
    for ch in name:
        if not (
            ("a" <= ch <= "z")
            or ("A" <= ch <= "Z")
            or ("0" <= ch <= "9")
            or ch == "."
            or ch == "-"
            or ch == "_"
        ):
            return False
    return True


@cython.cfunc
@cython.locals(start=cython.longlong, length=cython.longlong, count=cython.longlong)
def _profiles_of(manufacturer: str, raw: list) -> list:
    entry: dict
    placement: dict
    profiles: list = []
    for item in raw:
        entry = _dict(item)
        vendor = _str(entry.get("name"))
        if not vendor or not (_profile_chars(vendor) if cython.compiled else set(vendor) <= _PROFILE_CHARS):
            continue  # +me, +gfx and other names that cannot be a key segment are not inventory
        slots: list = []
        for spot in _list(entry.get("placements")):
            placement = _dict(spot)
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
    group: dict
    rows_by_group: dict = {}
    for item in _list(status_groups):
        group = _dict(item)
        group_rows: dict = {}
        for row in _list(group.get("accelerators")):
            if type(row) is dict:
                group_rows[cython.cast(dict, row).get("id")] = row
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
    group: dict
    accelerator: dict
    status: dict
    row: dict | None
    group_rows: dict  # card id -> row (_rows_by_group)
    name = _str(_dict(devices.get("metadata")).get("name"))
    if status_groups is None:
        status_groups = _dict(devices.get("status")).get("groups")
    rows_by_group = _rows_by_group(status_groups)
    label_keys = None
    cards: list = []
    last_raw: list | None = None
    last_profiles: list = _EMPTY_LIST
    for item in _list(_dict(devices.get("spec")).get("groups")):
        group = _dict(item)
        if label_keys is None:
            label_keys = _label_keys(devices)
        akey = accelerator_key(group, label_keys)
        if accelerator_group is not None and akey != accelerator_group:
            continue
        manufacturer = _str(group.get("manufacturer"))
        memory = _int(group.get("memory"))
        group_rows = rows_by_group.get((group.get("id"), manufacturer), _EMPTY_DICT)
        for accelerator in _sorted_by_index(_list(group.get("accelerators"))):  # dicts only
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


@cython.cfunc
def _apply_profiles(card: Card, row: dict) -> cython.void:
    entry: dict
    profile: Profile
    index: dict = {}
    for i, profile in enumerate(card.profiles):
        index[profile.vendor] = i
        index[profile.name] = i
    allocated: dict = {}
    for item in _list(row.get("allocatedProfiles")):
        entry = _dict(item)
        at = index.get(entry.get("name"))
        count = _int(entry.get("count"))
        if at is not None and count > 0:
            allocated[at] = allocated.get(at, 0) + count
    reported = None
    if "remainingProfiles" in row:
        reported = {}
        for item in _list(row.get("remainingProfiles")):
            entry = _dict(item)
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


# --- Pods by node, and ledgers kept across decisions ---------------------------------------------------


@cython.cfunc
@cython.inline
def _field(obj: object, key: str) -> object:
    """``obj.get(key)`` of a dict (or any Mapping); None when ``obj`` is falsy."""
    if type(obj) is dict:
        return cython.cast(dict, obj).get(key)
    if not obj:
        return None
    mapping: Any = obj
    return mapping.get(key)


@cython.ccall
def bound_pods(pods: Iterable[Any]) -> tuple:
    """One pass over a Pod list: ``(by_node, claimed)`` — the Pods bound to a node by node name
    (list order kept), and those bound Pods Kueue tied to a Workload (annotation
    ``kueue.x-k8s.io/workload``), the only ones :func:`is_held` is asked about."""
    by_node: dict = {}
    claimed: list = []
    for pod in pods:
        node = _field(_field(pod, "spec"), "nodeName")
        if not node:
            continue
        group = by_node.get(node)
        if group is None:
            by_node[node] = [pod]
        else:
            cython.cast(list, group).append(pod)
        if _field(_field(_field(pod, "metadata"), "annotations"), _KUEUE_WORKLOAD):
            claimed.append(pod)
    return (by_node, claimed)


@cython.cfunc
def _version(obj: object) -> str:
    """``metadata.resourceVersion``, or "" (an object without one is never cached)."""
    version = _field(_field(obj, "metadata"), "resourceVersion")
    return version if type(version) is str else ""


@cython.cfunc
def _versions(pods: list) -> object:
    """The Pods' resourceVersions in order, or None when one has none."""
    out: list = []
    for pod in pods:
        version = _version(pod)
        if not version:
            return None
        out.append(version)
    return out


_MEMO_LIMIT = 64  # distinct demands remembered per cached ledger


@cython.final
@cython.cclass
class _NodePods:
    """What a :class:`LedgerCache` knows of one node: the resourceVersions of the Pods its ledgers
    were built from (list order), their tallies and the ledgers; and, for the Pod list indexed
    last, how its Pods of this node compare."""

    versions = cython.declare(object)  # list of str; None: nothing cached
    count = cython.declare(cython.Py_ssize_t)  # len(versions), -1 for None
    tallies = cython.declare(dict)
    ledgers = cython.declare(dict)  # group -> (Devices resourceVersion, NodeLedger, fits memo)
    epoch = cython.declare(cython.longlong)  # the index() the fields below describe
    cursor = cython.declare(cython.Py_ssize_t)  # listed Pods matched against versions so far
    same = cython.declare(cython.bint)  # every listed Pod so far matched
    cacheable = cython.declare(cython.bint)  # every listed Pod has a resourceVersion
    pods = cython.declare(object)  # the listed Pods, gathered when they differ (list or None)
    stale = cython.declare(cython.bint)  # its Pods may have changed since it was built (partial mode)

    def __init__(self) -> None:
        self.versions = None
        self.count = -1
        self.tallies = {}
        self.ledgers = {}
        self.epoch = -1
        self.cursor = 0
        self.same = False
        self.cacheable = True
        self.pods = None
        self.stale = True


@cython.cfunc
def _begin(state: _NodePods, epoch: cython.longlong) -> cython.void:
    state.epoch = epoch
    state.cursor = 0
    state.same = state.count >= 0
    state.cacheable = True
    state.pods = None


@cython.cfunc
def _unchanged(state: _NodePods) -> cython.bint:
    """The listed Pods are the ones the cached tallies were built from."""
    return state.same and state.cacheable and state.cursor == state.count


@cython.final
@cython.cclass
class LedgerCache:
    """Node ledgers kept across gate-3 decisions, each with the ``Devices`` resourceVersion and
    the resourceVersions of the node's Pods (in list order) it was built from.  A resourceVersion
    is etcd's revision of one write, distinct for every write of every object, so equal versions
    mean the very objects the ledger was built from; objects without one are never cached.

    Per decision, :meth:`index` reads the Pod list once — comparing each node's Pods with the
    versions its ledgers were built from, gathering the Pods only of the nodes where they differ —
    and :meth:`lookup` answers per (node, model): the ledger built before when its node's Pods and
    ``Devices`` are unchanged, else one built now (from the tallies kept when only the ``Devices``
    moved).  Each ledger remembers whether a demand fits on it (:meth:`Book.fits`), so a pool where
    nothing changed is judged without placing anything.  The cached ledgers are shared and never
    changed: :class:`Book` copies one before charging it.  One ``release_terminated`` setting (the
    other clears the cache) and one decision at a time (not thread-safe)."""

    _nodes = cython.declare(dict)  # node name -> _NodePods
    _epoch = cython.declare(cython.longlong)  # index() calls so far
    _release = cython.declare(object)  # the release_terminated the ledgers were built with
    _gathered = cython.declare(list)  # the states holding Pods of the last index()
    _pods_of = cython.declare(object)  # partial mode (:meth:`use`): node name -> its Pods; else None
    builds = cython.declare(cython.longlong, visibility="public")  # ledgers built
    hits = cython.declare(cython.longlong, visibility="public")  # lookups answered by one built before

    def __init__(self) -> None:
        self._nodes = {}
        self._epoch = 0
        self._release = None
        self._gathered = []
        self._pods_of = None
        self.builds = 0
        self.hits = 0

    def __len__(self) -> int:
        return len(self._nodes)

    def clear(self) -> None:
        self._nodes.clear()
        self._gathered = []

    def prune(self, devices: Mapping[str, Any]) -> None:
        """Forget the nodes that have no ``Devices`` any more."""
        for name in [name for name in self._nodes if name not in devices]:
            del self._nodes[name]

    def index(self, pods: Iterable[Any], devices: Mapping[str, Any], release_terminated: bool = True) -> list:
        """Read this decision's Pod list (every Pod bound to a node whose ledger may be looked up
        must be in it); returns the bound Pods Kueue tied to a Workload (as :func:`bound_pods`)."""
        state: _NodePods
        i: cython.Py_ssize_t
        self._start(None, release_terminated)
        epoch: cython.longlong = self._epoch
        nodes: dict = self._nodes
        # Until looked up against this list, a node's ledger may be older than it: a later decision
        # in partial mode (:meth:`use`) must read its Pods again.
        for found in nodes.values():
            state = found
            state.stale = True
        listed: list = pods if type(pods) is list else list(pods)
        owners: list = []
        claimed: list = []
        differ: cython.bint = False
        expected: cython.Py_ssize_t = 0  # Pods the nodes listed had when their ledgers were built
        matched: cython.Py_ssize_t = 0  # listed Pods that matched those
        for pod in listed:
            node = _field(_field(pod, "spec"), "nodeName")
            if not node:
                owners.append(None)
                continue
            meta = _field(pod, "metadata")
            if _field(_field(meta, "annotations"), _KUEUE_WORKLOAD):
                claimed.append(pod)
            found = nodes.get(node)
            if found is None:
                if node not in devices:  # never looked up: no ledger without Devices
                    owners.append(None)
                    continue
                found = nodes[node] = _NodePods()
            state = found
            if state.epoch != epoch:
                _begin(state, epoch)
                if state.same:
                    expected += state.count
            owners.append(state)
            version = _field(meta, "resourceVersion")
            if type(version) is not str or not version:
                state.cacheable = False
                state.same = False
            elif state.same:
                versions: list = state.versions
                if state.cursor < len(versions) and versions[state.cursor] == version:
                    state.cursor += 1
                    matched += 1
                else:
                    state.same = False
            if not state.same:
                differ = True
        if matched != expected:
            differ = True  # a node has fewer Pods than before (no cursor passes its versions)
        if differ:  # gather the Pods of the nodes where they differ
            for i in range(len(listed)):
                found = owners[i]
                if found is None:
                    continue
                state = found
                if _unchanged(state):
                    continue
                if state.pods is None:
                    state.pods = [listed[i]]
                    self._gathered.append(state)
                else:
                    cython.cast(list, state.pods).append(listed[i])
        return claimed

    def use(self, pods_of: Any, changed: Iterable[str], release_terminated: bool = True) -> None:
        """Partial mode, instead of :meth:`index`: a node's Pods are asked of ``pods_of(node)``
        (e.g. an informer's per-node index) only when its ledger is looked up and it is new here or
        in ``changed`` (its Pods moved since the last decision); every other node keeps the ledger
        built before.  Nothing reads the whole Pod list, so a decision costs the nodes that changed,
        not the fleet.  ``pods_of`` must answer every Pod of the node that holds cards."""
        self._start(pods_of, release_terminated)
        self.invalidate(changed)

    @cython.cfunc
    def _start(self, pods_of: object, release_terminated: object) -> cython.void:
        """A new decision: forget the last one's gathered Pods (and everything, when the
        ``release_terminated`` setting changed)."""
        state: _NodePods
        if self._release is None or self._release != bool(release_terminated):
            self._nodes.clear()
            self._release = bool(release_terminated)
        for state in self._gathered:
            state.pods = None
        self._gathered = []
        self._epoch += 1
        self._pods_of = pods_of

    def invalidate(self, changed: Iterable[str]) -> None:
        """Mark nodes whose Pods moved: partial mode reads their Pods again on their next lookup."""
        state: _NodePods
        nodes: dict = self._nodes
        for node in changed:
            found = nodes.get(node)
            if found is not None:
                state = found
                state.stale = True

    @cython.cfunc
    def _partial(self, state: _NodePods, node: str) -> cython.void:
        """Bring ``state`` up to ``pods_of(node)`` when it may differ (partial mode)."""
        if not state.stale and state.versions is not None:
            return
        pods: list = list(self._pods_of(node))
        versions = _versions(pods)
        if versions is None or state.versions is None or versions != state.versions:
            state.versions = versions
            state.count = len(pods) if versions is not None else -1
            state.tallies = tally_pods(pods, release_terminated=bool(self._release))
            state.ledgers = {}
        state.stale = False
        # What a later index() compares its list with.
        state.epoch = self._epoch
        state.cursor = state.count if state.count >= 0 else 0
        state.same = state.count >= 0
        state.cacheable = versions is not None
        state.pods = None

    @cython.ccall
    def lookup(self, node: str, group: str, devices: dict) -> tuple:
        """``(Devices resourceVersion, ledger, fits memo)`` of ``node``'s ``group`` cards for the
        Pods :meth:`index` read last (or, in partial mode, ``pods_of(node)``): the one built before
        when nothing changed, else built now.  Never change the ledger returned."""
        state: _NodePods
        found = self._nodes.get(node)
        if found is None:
            found = self._nodes[node] = _NodePods()
        state = found
        if self._pods_of is not None:
            self._partial(state, node)
        elif state.epoch != self._epoch:  # none of its Pods listed
            _begin(state, self._epoch)
        if self._pods_of is None:
            if not _unchanged(state):
                pods: list = state.pods if state.pods is not None else []
                state.versions = _versions(pods) if state.cacheable else None
                state.count = len(pods) if state.versions is not None else -1
                state.tallies = tally_pods(pods, release_terminated=bool(self._release))
                state.ledgers = {}
                if state.versions is not None:
                    state.cursor = state.count
                    state.same = True
            state.stale = False  # checked against the list just indexed
        devices_version = _version(devices)
        entry = state.ledgers.get(group)
        if entry is not None and entry[0] == devices_version:
            self.hits += 1
            return entry
        self.builds += 1
        entry = (devices_version, node_ledger(devices, group, merged_rows(devices, state.tallies)), {})
        if devices_version and state.versions is not None:
            state.ledgers[group] = entry
        else:
            state.ledgers.pop(group, None)
        return entry


@cython.cfunc
def _remember(memo: dict, key: str, fits: object) -> object:
    """Remember whether a demand fits (a ledger keeps the last few demands asked)."""
    if len(memo) >= _MEMO_LIMIT:
        memo.clear()
    memo[key] = fits
    return fits


def demand_key(demand: Any) -> str:
    """What :func:`fastpath.fit.fits` reads of a demand, as one string (a memo key whose hash is
    computed once)."""
    return repr(
        (
            demand.family,
            getattr(demand, "manufacturer", "") or "",
            getattr(demand, "base", "") or "",
            demand.count,
            demand.units,
            getattr(demand, "profile", "") or "",
        )
    )


class Book:
    """Node ledgers built on first use, one per (node, model), with the inflight charges that fall
    on them applied as they are built — a pool of a thousand nodes costs only the nodes looked at
    (their Pods' records are aggregated then too).  With a :class:`LedgerCache` (which has indexed
    this decision's Pods: ``pods_by_node`` is then not read) an unchanged node is not rebuilt: its
    cached ledger is copied when the decision charges it, and only asked whether a demand fits
    (remembered per demand) while it does not."""

    def __init__(
        self,
        devices: Mapping[str, Mapping[str, Any]],
        pods_by_node: Mapping[str, list[Mapping[str, Any]]],
        *,
        release_terminated: bool = True,
        cache: LedgerCache | None = None,
    ) -> None:
        self.devices = devices
        self.pods_by_node = pods_by_node
        self.release_terminated = release_terminated
        self.cache = cache
        self._ledgers: dict[tuple[str, str], NodeLedger | None] = {}
        self._pending: dict[tuple[str, str], list[tuple[Any, int]]] = {}
        self._bases: dict[tuple[str, str], tuple] = {}
        self._touched: set[str] = set()  # nodes with a ledger or a pending charge here
        if cache is not None and len(cache) > 2 * len(devices) + 64:
            cache.prune(devices)

    def charge_later(self, node: str, group: str, demand: Any, pods: int) -> None:
        key = (node, group)
        if key in self._ledgers:
            ledger = self._ledgers[key]
            if ledger is not None:
                _place_up_to(ledger, demand, pods)
        else:
            self._pending.setdefault(key, []).append((demand, pods))
            self._touched.add(node)

    def _base(self, node: str, group: str, devices: Mapping[str, Any]) -> tuple:
        """``(Devices resourceVersion, ledger, fits memo)`` from the cache, looked up once per
        decision."""
        key = (node, group)
        base = self._bases.get(key)
        if base is None:
            assert self.cache is not None
            base = self.cache.lookup(node, group, devices if type(devices) is dict else dict(devices))
            self._bases[key] = base
        return base

    def ledger(self, node: str, group: str) -> NodeLedger | None:
        """The node's ledger of ``group``'s cards, or None when the node has no ``Devices``; the
        decision's own copy, which it charges."""
        key = (node, group)
        ledger = self._ledgers.get(key)
        if ledger is None and key not in self._ledgers:
            devices = self.devices.get(node)
            if devices is not None:
                if self.cache is not None:
                    ledger = cython.cast(NodeLedger, self._base(node, group, devices)[1]).copy()
                else:
                    tallies = tally_pods(
                        self.pods_by_node.get(node, ()), release_terminated=self.release_terminated
                    )
                    ledger = node_ledger(devices, group, merged_rows(devices, tallies))
                for demand, pods in self._pending.pop(key, ()):
                    _place_up_to(ledger, demand, pods)
            self._ledgers[key] = ledger
            self._touched.add(node)
        return ledger

    def first_fit(self, nodes: list, start: int, group: str, demand: Any) -> int:
        """The position of the first of ``nodes`` from ``start`` on whose ``group`` cards
        ``demand`` fits now (:meth:`fits`), or -1."""
        i: cython.Py_ssize_t
        key = demand_key(demand)
        if self.cache is None or type(self.devices) is not dict:
            for i in range(start, len(nodes)):
                if self.fits(nodes[i], group, demand, key):
                    return i
            return -1
        cache: LedgerCache = self.cache
        devices: dict = self.devices
        ledgers: dict = self._ledgers
        pending: dict = self._pending
        touched: set = self._touched
        for i in range(start, len(nodes)):
            node = nodes[i]
            if node in touched and ((node, group) in ledgers or (node, group) in pending):
                if self.fits(node, group, demand, key):
                    return i
                continue
            found = devices.get(node)
            if found is None:
                continue
            base = cache.lookup(node, group, found if type(found) is dict else dict(found))
            known = cython.cast(dict, base[2]).get(key)
            if known is None:
                known = _remember(base[2], key, fit.fits(base[1], demand))
            if known:
                return i
        return -1

    def fits(self, node: str, group: str, demand: Any, key: str | None = None) -> bool:
        """Whether ``demand`` fits on the node's ``group`` cards now (:func:`fastpath.fit.fits` on
        :meth:`ledger`, which nothing is charged to); ``key``: its :func:`demand_key`, when the
        caller asks of many nodes."""
        at = (node, group)
        if self.cache is None or at in self._ledgers or at in self._pending:
            ledger = self.ledger(node, group)
            return ledger is not None and fit.fits(ledger, demand)
        devices = self.devices.get(node)
        if devices is None:
            self._ledgers[at] = None
            self._touched.add(node)
            return False
        base = self._base(node, group, devices)
        if key is None:
            key = demand_key(demand)
        known = cython.cast(dict, base[2]).get(key)
        if known is None:
            known = _remember(base[2], key, fit.fits(base[1], demand))
        return bool(known)


def _place_up_to(ledger: NodeLedger, demand: Any, pods: int) -> int:
    """Charge up to ``pods`` copies of ``demand`` (an inflight Pod that does not fit charges
    nothing: the ledger already says the node is full)."""
    placed = 0
    for _ in range(pods):
        if fit.place(ledger, demand) is not None:
            placed += 1
    return placed
