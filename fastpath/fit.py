"""Per-accelerator fit and the four views: the one implementation gate 1 (fit labels and pins),
gate 3 (the ``gpustack-node-devices`` AdmissionCheck) and gate 5 (the device-plugin allocator)
share, so all three agree on what fits.

The ledger is built from ``Devices`` objects: ``spec.groups`` gives each card's capability
(logical slice count, partition profiles with their empty-card placements), ``status.groups`` its
allocation (mode, remaining units out of M = 1,600,000, hosted slices, partition profiles).  A card
with no status row yet is free (``remaining = M``); a row whose ``remaining`` is omitted holds 0.

Per-card predicates (§6.3):

- exclusive: mode None and ``remaining == M``; lowest index first;
- shared: N **distinct** cards on one node, unpartitioned, mode None or Shared, ``remaining ≥ M/10``;
- sliced: a free or sliced card with ``remaining ≥ U`` and ``allocatedSlices < logicalSliced.count``,
  the **fullest** fitting card first, ties by index (two 30 % slices share a card, two 60 % do not);
- partitioned: a free legal placement of the profile on a partitioned card, packing the most occupied
  card first.  Non-partition demands never land on partitioned cards, nor partitions elsewhere.

Compiled by Cython in pure-Python mode: cards are ``cdef`` classes with C integer fields.
"""

from __future__ import annotations

import cython

from api.constants import label_fit_shared_free_cards, label_fit_sliced_max_free_units
from api.manufacturers import (
    SHARES_PER_CARD,
    UNITS_PER_CARD,
    UNITS_PER_PERCENT,
    UNITS_PER_SHARE,
    publish_profile,
)

MODE_NONE = 0
MODE_EXCLUSIVE = 1
MODE_SHARED = 2
MODE_SLICED = 3
MODE_PARTITIONED = 4

F_EXCLUSIVE = 1
F_SHARED = 2
F_SLICED = 3
F_PARTITIONED = 4
_FAMILY_CODES = {
    "exclusive": F_EXCLUSIVE,
    "shared": F_SHARED,
    "sliced": F_SLICED,
    "partitioned": F_PARTITIONED,
}

# C-level twins of the codes above, for the compiled loops (a module global is a dict lookup).
_NONE = cython.declare(cython.int, 0)
_EXCLUSIVE = cython.declare(cython.int, 1)
_SHARED = cython.declare(cython.int, 2)
_SLICED = cython.declare(cython.int, 3)
_PARTITIONED = cython.declare(cython.int, 4)
_M = cython.declare(cython.longlong, UNITS_PER_CARD)
_SHARE = cython.declare(cython.longlong, UNITS_PER_SHARE)
_PERCENT = cython.declare(cython.longlong, UNITS_PER_PERCENT)
_UNCAPPED = cython.declare(cython.longlong, 1 << 40)
_SEARCH_BUDGET = 4096  # placement-reconstruction nodes visited per card before falling back
_EMPTY_DICT = cython.declare(dict, {})
_EMPTY_LIST = cython.declare(list, [])
_PROFILE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


# --- Demands --------------------------------------------------------------------------------------------


@cython.final
@cython.cclass
class Demand:
    """What one Pod (or PodSet template) asks of one accelerator: ``count`` cards (exclusive,
    shared) or instances (sliced, partitioned), each needing ``units`` out of M = 1,600,000 on its
    card, and for a partition the published ``profile``."""

    family = cython.declare(str, visibility="readonly")
    manufacturer = cython.declare(str, visibility="readonly")
    base = cython.declare(str, visibility="readonly")
    count = cython.declare(cython.longlong, visibility="readonly")
    units = cython.declare(cython.longlong, visibility="readonly")
    profile = cython.declare(str, visibility="readonly")
    code = cython.declare(cython.int)  # the family as a C code

    def __init__(
        self,
        family: str,
        manufacturer: str = "",
        base: str = "",
        count: cython.longlong = 1,
        units: cython.longlong = 0,
        profile: str = "",
    ) -> None:
        self.family = family
        self.manufacturer = manufacturer
        self.base = base
        self.count = count
        self.units = units
        self.profile = profile
        self.code = _FAMILY_CODES.get(family, 0)

    def as_tuple(self) -> tuple:
        return (self.family, self.manufacturer, self.base, self.count, self.units, self.profile)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Demand):
            return NotImplemented
        return self.as_tuple() == other.as_tuple()

    def __hash__(self) -> int:
        return hash(self.as_tuple())

    def __repr__(self) -> str:
        return (
            f"Demand({self.family!r}, {self.manufacturer!r}, {self.base!r}, count={self.count}, "
            f"units={self.units}, profile={self.profile!r})"
        )


@cython.cfunc
def _want(demand: object) -> Demand:
    """``demand`` as this module's ``Demand`` (any object with the same attributes is accepted)."""
    if type(demand) is Demand:
        return demand
    return Demand(
        demand.family,
        getattr(demand, "manufacturer", "") or "",
        getattr(demand, "base", "") or "",
        demand.count,
        demand.units,
        getattr(demand, "profile", "") or "",
    )


# --- The ledger ---------------------------------------------------------------------------------------


@cython.final
@cython.cclass
class Profile:
    """One hardware partition profile of a card: its published name (the resource-key spelling),
    the vendor's own name, and its empty-card legal placements as memory-slice bitmasks sorted by
    end then start (so a greedy scan counts the most disjoint placements)."""

    name = cython.declare(str, visibility="readonly")
    vendor = cython.declare(str, visibility="readonly")
    memory_mib = cython.declare(cython.longlong, visibility="readonly")
    count = cython.declare(cython.int, visibility="readonly")
    masks = cython.declare(list, visibility="readonly")
    starts = cython.declare(list, visibility="readonly")

    def __init__(
        self, name: str, vendor: str, memory_mib: cython.longlong, count: cython.int, slots: list
    ) -> None:
        ordered = sorted(slots, key=lambda slot: (slot[0] + slot[1], slot[0]))
        self.name = name
        self.vendor = vendor
        self.memory_mib = memory_mib
        self.count = count
        self.masks = [((1 << length) - 1) << start for start, length in ordered]
        self.starts = [start for start, _length in ordered]

    def __repr__(self) -> str:
        return f"Profile({self.name!r}, count={self.count}, placements={len(self.masks)})"


@cython.final
@cython.cclass
class Card:
    """One accelerator: capability joined with its ledger row; mutable by placement."""

    node = cython.declare(str, visibility="readonly")
    group = cython.declare(str, visibility="readonly")
    manufacturer = cython.declare(str, visibility="readonly")
    id = cython.declare(str, visibility="readonly")
    index = cython.declare(cython.int, visibility="readonly")
    memory_mib = cython.declare(cython.longlong, visibility="readonly")
    healthy = cython.declare(cython.bint, visibility="readonly")
    partitioned = cython.declare(cython.bint, visibility="readonly")
    slice_count = cython.declare(cython.int, visibility="readonly")
    mode = cython.declare(cython.int, visibility="readonly")
    remaining = cython.declare(cython.longlong, visibility="readonly")
    allocated_slices = cython.declare(cython.int, visibility="readonly")
    profiles = cython.declare(list, visibility="readonly")  # Profile
    occupied = cython.declare(cython.ulonglong, visibility="readonly")  # memory-slice bitmask
    allocated_profiles = cython.declare(list, visibility="readonly")  # int per profile
    caps = cython.declare(list)  # ledger-reported remaining per profile, or _UNCAPPED

    def __init__(
        self,
        node: str = "",
        group: str = "",
        manufacturer: str = "",
        id: str = "",
        index: cython.int = 0,
        memory_mib: cython.longlong = 0,
        healthy: cython.bint = True,
        slice_count: cython.int = 0,
        mode: cython.int = _NONE,
        remaining: cython.longlong = UNITS_PER_CARD,
        allocated_slices: cython.int = 0,
        profiles: list | None = None,
        partitioned: cython.bint = False,
    ) -> None:
        self.node = node
        self.group = group
        self.manufacturer = manufacturer
        self.id = id
        self.index = index
        self.memory_mib = memory_mib
        self.healthy = healthy
        self.slice_count = slice_count
        self.mode = mode
        self.remaining = remaining
        self.allocated_slices = allocated_slices
        self.profiles = profiles if profiles is not None else []
        self.partitioned = partitioned or bool(self.profiles)
        self.occupied = 0
        self.allocated_profiles = [0] * len(self.profiles)
        self.caps = [_UNCAPPED] * len(self.profiles)

    @cython.ccall
    def copy(self) -> Card:
        other: Card = Card.__new__(Card)
        other.node = self.node
        other.group = self.group
        other.manufacturer = self.manufacturer
        other.id = self.id
        other.index = self.index
        other.memory_mib = self.memory_mib
        other.healthy = self.healthy
        other.partitioned = self.partitioned
        other.slice_count = self.slice_count
        other.mode = self.mode
        other.remaining = self.remaining
        other.allocated_slices = self.allocated_slices
        other.profiles = self.profiles
        other.occupied = self.occupied
        if self.profiles:
            other.allocated_profiles = list(self.allocated_profiles)
            other.caps = list(self.caps)
        else:
            other.allocated_profiles = self.allocated_profiles
            other.caps = self.caps
        return other

    def profile_remaining(self) -> dict[str, int]:
        """Placement-aware remaining instances per published profile (partitioned cards)."""
        return {self.profiles[i].name: _profile_remaining(self, i) for i in range(len(self.profiles))}

    def as_tuple(self) -> tuple:
        return (
            self.node,
            self.group,
            self.id,
            self.index,
            self.healthy,
            self.partitioned,
            self.slice_count,
            self.mode,
            self.remaining,
            self.allocated_slices,
            self.occupied,
            tuple(self.allocated_profiles),
            tuple(self.caps),
        )

    def __repr__(self) -> str:
        return (
            f"Card({self.node}/{self.group}#{self.index} mode={self.mode} remaining={self.remaining} "
            f"slices={self.allocated_slices}/{self.slice_count})"
        )


@cython.final
@cython.cclass
class NodeLedger:
    """The cards of one node (canonical order: group as listed in spec, then card index)."""

    name = cython.declare(str, visibility="readonly")
    cards = cython.declare(list, visibility="readonly")
    cores = cython.declare(cython.longlong, visibility="public")
    cores_free = cython.declare(cython.longlong, visibility="public")  # -1: unknown (all free)

    def __init__(self, name: str, cards: list | None = None, cores: cython.longlong = 0) -> None:
        self.name = name
        self.cards = cards if cards is not None else []
        self.cores = cores
        self.cores_free = -1

    @cython.ccall
    def copy(self) -> NodeLedger:
        other: NodeLedger = NodeLedger.__new__(NodeLedger)
        other.name = self.name
        other.cores = self.cores
        other.cores_free = self.cores_free
        other.cards = [cython.cast(Card, card).copy() for card in self.cards]
        return other

    def as_tuple(self) -> tuple:
        return (self.name, self.cores, tuple(cython.cast(Card, c).as_tuple() for c in self.cards))

    def __repr__(self) -> str:
        return f"NodeLedger({self.name!r}, {len(self.cards)} cards)"


@cython.final
@cython.cclass
class Ledger:
    """The cards of a pool: one ``NodeLedger`` per node, in the order the Devices were given."""

    nodes = cython.declare(list, visibility="readonly")

    def __init__(self, nodes: list | None = None) -> None:
        self.nodes = nodes if nodes is not None else []

    def node(self, name: str) -> NodeLedger | None:
        for node in self.nodes:
            if cython.cast(NodeLedger, node).name == name:
                return node
        return None

    @cython.ccall
    def copy(self) -> Ledger:
        return Ledger([cython.cast(NodeLedger, node).copy() for node in self.nodes])

    def as_tuple(self) -> tuple:
        return tuple(cython.cast(NodeLedger, n).as_tuple() for n in self.nodes)


# --- Building the ledger from Devices -------------------------------------------------------------------


@cython.cfunc
def _int(value: object) -> cython.longlong:
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
    rows_by_group: dict = {}
    for group in _list(status_groups):
        group = _dict(group)
        group_rows: dict = {}
        for row in _list(group.get("accelerators")):
            if type(row) is dict:
                group_rows[row.get("id")] = row
        rows_by_group[(group.get("id"), group.get("manufacturer"))] = group_rows
    label_keys = None
    cards: list = []
    last_raw: list = None
    last_profiles: list = None
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
        accelerators = _sorted_by_index(_list(group.get("accelerators")))
        for accelerator in accelerators:
            status = _dict(accelerator.get("status"))
            raw_profiles = _list(_dict(status.get("physicalSliced")).get("profiles"))
            card = Card.__new__(Card)
            card.node = name
            card.group = akey
            card.manufacturer = manufacturer
            card.id = _str(accelerator.get("id"))
            card.index = _int(accelerator.get("index"))
            card.memory_mib = memory
            card.healthy = not status.get("unhealthy")
            card.slice_count = _int(_dict(status.get("logicalSliced")).get("count"))
            card.mode = _NONE
            card.remaining = _M
            card.allocated_slices = 0
            card.occupied = 0
            card.partitioned = len(raw_profiles) > 0
            if card.partitioned:
                # Cards of one model report the same geometry: parse it once, share the Profiles.
                if last_raw is None or raw_profiles != last_raw:
                    last_raw = raw_profiles
                    last_profiles = _profiles_of(manufacturer, raw_profiles)
                card.profiles = last_profiles
                card.allocated_profiles = [0] * len(card.profiles)
                card.caps = [_UNCAPPED] * len(card.profiles)
            else:
                # Never mutated on an unpartitioned card: share one empty list.
                card.profiles = card.allocated_profiles = card.caps = _EMPTY_LIST
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
        i = index.get(entry.get("name"))
        count = _int(entry.get("count"))
        if i is not None and count > 0:
            allocated[i] = allocated.get(i, 0) + count
    reported = None
    if "remainingProfiles" in row:
        reported = {}
        for entry in _list(row.get("remainingProfiles")):
            entry = _dict(entry)
            i = index.get(entry.get("name"))
            if i is not None:
                reported[i] = _int(entry.get("count"))
    _reconstruct(card, allocated, reported)


# --- Partition geometry ---------------------------------------------------------------------------------


@cython.boundscheck(False)  # indices are checked against lengths just above
@cython.wraparound(False)
@cython.cfunc
@cython.locals(
    i=cython.Py_ssize_t,
    n=cython.Py_ssize_t,
    count=cython.longlong,
    mask=cython.ulonglong,
    taken=cython.ulonglong,
)
def _free_count(profile: Profile, occupied: cython.ulonglong) -> cython.longlong:
    """The most disjoint free placements of ``profile`` with ``occupied`` slices taken."""
    masks: list = profile.masks
    n = len(masks)
    count = 0
    taken = occupied
    for i in range(n):
        mask = masks[i]
        if (mask & taken) == 0:
            taken |= mask
            count += 1
    return count


@cython.cfunc
@cython.locals(free=cython.longlong, cap=cython.longlong)
def _profile_remaining(card: Card, i: cython.Py_ssize_t) -> cython.longlong:
    free = _free_count(cython.cast(Profile, card.profiles[i]), card.occupied)
    cap = card.caps[i]
    return free if free < cap else cap


@cython.final
@cython.cclass
class _Search:
    """State of one placement reconstruction."""

    budget = cython.declare(cython.int)
    has_first = cython.declare(cython.bint)
    first = cython.declare(cython.ulonglong)
    found = cython.declare(cython.ulonglong)

    def __init__(self) -> None:
        self.budget = _SEARCH_BUDGET
        self.has_first = False
        self.first = 0
        self.found = 0


@cython.cfunc
@cython.locals(i=cython.Py_ssize_t)
def _matches(card: Card, occupied: cython.ulonglong, reported: dict) -> cython.bint:
    for i in range(len(card.profiles)):
        if _free_count(cython.cast(Profile, card.profiles[i]), occupied) != reported.get(i, 0):
            return False
    return True


@cython.cfunc
@cython.locals(i=cython.Py_ssize_t, mask=cython.ulonglong)
def _search(
    card: Card,
    instances: list,
    k: cython.Py_ssize_t,
    occupied: cython.ulonglong,
    reported: object,
    state: _Search,
) -> cython.bint:
    """Depth-first: place instance ``k`` and the rest; True once an assignment matches."""
    if state.budget <= 0:
        return False
    state.budget -= 1
    if k == len(instances):
        if not state.has_first:
            state.has_first = True
            state.first = occupied
        if reported is None or _matches(card, occupied, reported):
            state.found = occupied
            return True
        return False
    masks: list = cython.cast(Profile, card.profiles[instances[k]]).masks
    for i in range(len(masks)):
        mask = masks[i]
        if (mask & occupied) == 0 and _search(card, instances, k + 1, occupied | mask, reported, state):
            return True
    return False


def _reconstruct(card: Card, allocated: dict, reported: dict | None) -> None:
    """Recover the occupied memory slices from the allocated instances: the first assignment of
    instances to legal placements (largest first, lowest start first) whose remaining counts match
    what the ledger reports.  Without a match, keep the first legal assignment and cap each profile
    at its reported remaining; an impossible allocation (more than fits) fills the card."""
    instances = []
    for i, n in sorted(allocated.items(), key=lambda item: -_bits(card.profiles[item[0]].masks[0])):
        instances.extend([i] * n)
        card.allocated_profiles[i] = n
    if not instances and reported is None:
        card.occupied = 0
        return
    state = _Search()
    if _search(card, instances, 0, 0, reported, state):
        card.occupied = state.found
        return
    if state.has_first:
        card.occupied = state.first
    else:
        full = 0
        for profile in card.profiles:
            for mask in profile.masks:
                full |= mask
        card.occupied = full
    if reported is not None:
        for i in range(len(card.profiles)):
            card.caps[i] = reported.get(i, 0)


# --- Fit -------------------------------------------------------------------------------------------------


@cython.cfunc
@cython.inline
def _eligible(card: Card, manufacturer: str) -> cython.bint:
    return card.healthy and (not manufacturer or card.manufacturer == manufacturer)


@cython.cfunc
@cython.inline
def _exclusive_free(card: Card) -> cython.bint:
    return not card.partitioned and card.mode == _NONE and card.remaining == _M


@cython.cfunc
@cython.inline
def _can_share(card: Card) -> cython.bint:
    return not card.partitioned and (card.mode == _NONE or card.mode == _SHARED) and card.remaining >= _SHARE


@cython.cfunc
@cython.inline
def _can_slice(card: Card, units: cython.longlong) -> cython.bint:
    return (
        not card.partitioned
        and card.slice_count > 0
        and (card.mode == _NONE or card.mode == _SLICED)
        and card.remaining >= units
        and card.allocated_slices < card.slice_count
    )


@cython.boundscheck(False)  # indices are checked against lengths just above
@cython.wraparound(False)
@cython.cfunc
@cython.locals(i=cython.Py_ssize_t)
def _profile_index(card: Card, profile: str) -> cython.Py_ssize_t:
    for i in range(len(card.profiles)):
        if cython.cast(Profile, card.profiles[i]).name == profile:
            return i
    return -1


@cython.boundscheck(False)  # indices are checked against lengths just above
@cython.wraparound(False)
@cython.cfunc
@cython.locals(
    n=cython.Py_ssize_t,
    i=cython.Py_ssize_t,
    best=cython.Py_ssize_t,
    best_remaining=cython.longlong,
)
def _fullest_slice_card(cards: list, manufacturer: str, units: cython.longlong) -> cython.Py_ssize_t:
    """Position of the fullest card that takes a slice of ``units`` (ties: the earlier card)."""
    n = len(cards)
    best = -1
    best_remaining = 0
    for i in range(n):
        card: Card = cards[i]
        if (
            _eligible(card, manufacturer)
            and _can_slice(card, units)
            and (best < 0 or card.remaining < best_remaining)
        ):
            best = i
            best_remaining = card.remaining
    return best


@cython.boundscheck(False)  # indices are checked against lengths just above
@cython.wraparound(False)
@cython.cfunc
@cython.locals(
    n=cython.Py_ssize_t, i=cython.Py_ssize_t, best=cython.Py_ssize_t, best_remaining=cython.longlong
)
def _fullest_share_card(cards: list, manufacturer: str, taken: list) -> cython.Py_ssize_t:
    """Position of the fullest card that can grant a share and is not in ``taken``."""
    n = len(cards)
    best = -1
    best_remaining = 0
    for i in range(n):
        card: Card = cards[i]
        if (
            _eligible(card, manufacturer)
            and _can_share(card)
            and (best < 0 or card.remaining < best_remaining)
            and i not in taken
        ):
            best = i
            best_remaining = card.remaining
    return best


@cython.boundscheck(False)  # indices are checked against lengths just above
@cython.wraparound(False)
@cython.cfunc
@cython.locals(
    n=cython.Py_ssize_t,
    i=cython.Py_ssize_t,
    j=cython.Py_ssize_t,
    p=cython.Py_ssize_t,
    best=cython.Py_ssize_t,
    best_used=cython.int,
    used=cython.int,
)
def _pack_partition_card(cards: list, manufacturer: str, profile: str) -> tuple:
    """(card position, profile position) of the most occupied partitioned card with a free legal
    placement of ``profile`` (ties: the earlier card), or (-1, -1)."""
    n = len(cards)
    best = -1
    best_used = -1
    j = -1
    for i in range(n):
        card: Card = cards[i]
        if not card.partitioned or not _eligible(card, manufacturer):
            continue
        p = _profile_index(card, profile)
        if p < 0 or _profile_remaining(card, p) <= 0:
            continue
        used = _bits(card.occupied)
        if used > best_used:
            best = i
            best_used = used
            j = p
    return (best, j)


@cython.cfunc
@cython.locals(count=cython.int)
def _bits(value: cython.ulonglong) -> cython.int:
    count = 0
    while value:
        value &= value - 1
        count += 1
    return count


@cython.cfunc
@cython.locals(
    i=cython.Py_ssize_t,
    q=cython.Py_ssize_t,
    nq=cython.Py_ssize_t,
    mask=cython.ulonglong,
    after=cython.ulonglong,
    score=cython.longlong,
    best_score=cython.longlong,
    best=cython.Py_ssize_t,
)
def _best_placement(card: Card, p: cython.Py_ssize_t) -> cython.Py_ssize_t:
    """The placement of profile ``p`` that leaves the card the most instances in total (ties: the
    lowest start): packing keeps large shapes placeable."""
    profile: Profile = card.profiles[p]
    masks: list = profile.masks
    starts: list = profile.starts
    nq = len(card.profiles)
    best = -1
    best_score = -1
    for i in range(len(masks)):
        mask = masks[i]
        if mask & card.occupied:
            continue
        after = card.occupied | mask
        score = 0
        for q in range(nq):
            score += _free_count(cython.cast(Profile, card.profiles[q]), after)
        if score > best_score or (score == best_score and starts[i] < starts[best]):
            best = i
            best_score = score
    return best


@cython.cfunc
@cython.locals(q=cython.Py_ssize_t, nq=cython.Py_ssize_t, before=cython.longlong, after=cython.longlong)
def _occupy(card: Card, p: cython.Py_ssize_t, placement: cython.Py_ssize_t) -> tuple:
    profile: Profile = card.profiles[p]
    mask: cython.ulonglong = profile.masks[placement]
    nq = len(card.profiles)
    for q in range(nq):
        if card.caps[q] == _UNCAPPED:
            continue
        before = _free_count(cython.cast(Profile, card.profiles[q]), card.occupied)
        after = _free_count(cython.cast(Profile, card.profiles[q]), card.occupied | mask)
        card.caps[q] = max(0, card.caps[q] - (before - after))
    card.occupied |= mask
    card.allocated_profiles[p] = card.allocated_profiles[p] + 1
    card.mode = _PARTITIONED
    start = profile.starts[placement]
    return (start, _bits(mask))


@cython.cfunc
def _grant(card: Card, units: cython.longlong, profile: str, start: object, length: object) -> tuple:
    return (card.group, card.id, card.index, units, profile, start, length)


@cython.cfunc
@cython.locals(
    family=cython.int,
    count=cython.longlong,
    units=cython.longlong,
    n=cython.Py_ssize_t,
    i=cython.Py_ssize_t,
    k=cython.longlong,
    pos=cython.Py_ssize_t,
    p=cython.Py_ssize_t,
    placement=cython.Py_ssize_t,
)
def _place(node: NodeLedger, demand: Demand, commit: cython.bint) -> object:
    """Place ``demand`` on ``node``: the grants, or ``None`` when it does not fit (the node is then
    left untouched).  With ``commit`` false the node is never touched."""
    family = demand.code
    count = demand.count
    units = demand.units
    manufacturer: str = demand.manufacturer
    cards: list = node.cards
    n = len(cards)
    grants: list = []
    card: Card
    if count <= 0:
        return grants
    if family == _EXCLUSIVE:
        chosen = []
        for i in range(n):
            card = cards[i]
            if _eligible(card, manufacturer) and _exclusive_free(card):
                chosen.append(card)
                if len(chosen) == count:
                    break
        if len(chosen) < count:
            return None
        for card in chosen:
            if commit:
                card.mode = _EXCLUSIVE
                card.remaining = 0
            grants.append(_grant(card, _M, "", None, None))
        return grants
    if family == _SHARED:
        # N distinct cards, the fullest first (ties: the earlier card).
        taken: list = []
        for _k in range(count):
            pos = _fullest_share_card(cards, manufacturer, taken)
            if pos < 0:
                return None
            taken.append(pos)
        for pos in taken:
            card = cards[pos]
            if commit:
                card.mode = _SHARED
                card.remaining -= _SHARE
            grants.append(_grant(card, _SHARE, "", None, None))
        return grants
    if family == _SLICED:
        if count == 1:
            # The common case: one slice, judged and charged on the cards themselves.
            pos = _fullest_slice_card(cards, manufacturer, units)
            if pos < 0:
                return None
            card = cards[pos]
            if commit:
                _charge_slice(card, units)
            grants.append(_grant(card, units, "", None, None))
            return grants
        # Several slices may stack on one card: judge them on copies of the cards they touch.
        work = list(cards)
        touched: dict = {}
        for _k in range(count):
            pos = _fullest_slice_card(work, manufacturer, units)
            if pos < 0:
                return None
            if pos not in touched:
                work[pos] = cython.cast(Card, work[pos]).copy()
                touched[pos] = True
            card = work[pos]
            _charge_slice(card, units)
            grants.append(_grant(card, units, "", None, None))
        if commit:
            for pos in touched:
                _assign(cards[pos], work[pos])
        return grants
    if family == _PARTITIONED:
        profile: str = demand.profile
        work = list(cards)
        touched = {}
        for _k in range(count):
            pos, p = _pack_partition_card(work, manufacturer, profile)
            if pos < 0:
                return None
            if pos not in touched:
                work[pos] = cython.cast(Card, work[pos]).copy()
                touched[pos] = True
            card = work[pos]
            placement = _best_placement(card, p)
            start, length = _occupy(card, p, placement)
            card.remaining = max(0, card.remaining - units)
            grants.append(_grant(card, units, profile, start, length))
        if commit:
            for pos in touched:
                _assign(cards[pos], work[pos])
        return grants
    return None


@cython.cfunc
@cython.inline
def _charge_slice(card: Card, units: cython.longlong) -> cython.void:
    card.mode = _SLICED
    card.remaining -= units
    card.allocated_slices += 1


@cython.cfunc
def _assign(card: Card, state: Card) -> cython.void:
    """Copy the mutable ledger state of ``state`` into ``card`` (keeping ``card``'s identity)."""
    card.mode = state.mode
    card.remaining = state.remaining
    card.allocated_slices = state.allocated_slices
    card.occupied = state.occupied
    card.allocated_profiles = state.allocated_profiles
    card.caps = state.caps


def fits(node: NodeLedger, demand: object) -> bool:
    """True when ``demand`` fits on ``node`` now (the node is not changed)."""
    return _place(node, _want(demand), False) is not None


def choose(node: NodeLedger, demand: object) -> list | None:
    """The grants ``place`` would make, without making them."""
    return _place(node, _want(demand), False)


def place(node: NodeLedger, demand: object) -> list | None:
    """Charge ``demand`` to ``node``'s cards.  Returns its grants — one
    ``(group, card_id, card_index, units, profile, start, length)`` per card or instance (``start``
    and ``length`` locate a partition's memory slices) — or ``None``, leaving the node unchanged,
    when it does not fit."""
    return _place(node, _want(demand), True)


def place_many(node: NodeLedger, demands: list) -> int:
    """Charge ``demands`` in order (inflight accounting); stops at the first that does not fit and
    returns how many were placed.  Earlier placements stay charged."""
    placed = 0
    for demand in demands:
        if _place(node, _want(demand), True) is None:
            break
        placed += 1
    return placed


def fits_many(node: NodeLedger, demands: list) -> bool:
    """True when all ``demands`` fit together on ``node`` (judged on a copy)."""
    scratch = node.copy()
    return place_many(scratch, demands) == len(demands)


def place_on_pool(ledger: Ledger, demand: object) -> tuple | None:
    """Charge ``demand`` to the first node of ``ledger`` that fits it: ``(node name, grants)``."""
    want: Demand = _want(demand)
    for node in ledger.nodes:
        grants = _place(node, want, True)
        if grants is not None:
            return (cython.cast(NodeLedger, node).name, grants)
    return None


# --- Views ----------------------------------------------------------------------------------------------


@cython.final
@cython.cclass
class Views:
    """The four accelerator views of a pool (§7) and its CPU view."""

    ex_once = cython.declare(cython.longlong, visibility="readonly")
    ex_remaining = cython.declare(cython.longlong, visibility="readonly")
    ex_capacity = cython.declare(cython.longlong, visibility="readonly")
    sh_once = cython.declare(cython.longlong, visibility="readonly")
    sh_remaining = cython.declare(cython.longlong, visibility="readonly")
    sh_capacity = cython.declare(cython.longlong, visibility="readonly")
    sl_once = cython.declare(cython.longlong, visibility="readonly")
    sl_remaining = cython.declare(cython.longlong, visibility="readonly")
    sl_capacity = cython.declare(cython.longlong, visibility="readonly")
    pt_once = cython.declare(cython.longlong, visibility="readonly")
    pt_remaining = cython.declare(cython.longlong, visibility="readonly")
    pt_capacity = cython.declare(cython.longlong, visibility="readonly")
    cpu_once = cython.declare(cython.longlong, visibility="readonly")
    cpu_remaining = cython.declare(cython.longlong, visibility="readonly")
    cpu_capacity = cython.declare(cython.longlong, visibility="readonly")
    remaining_profiles = cython.declare(list, visibility="readonly")  # [(name, count)], zeros kept
    allocated_profiles = cython.declare(list, visibility="readonly")  # [(name, count)], zeros omitted

    def __init__(self) -> None:
        self.ex_once = self.ex_remaining = self.ex_capacity = 0
        self.sh_once = self.sh_remaining = self.sh_capacity = 0
        self.sl_once = self.sl_remaining = self.sl_capacity = 0
        self.pt_once = self.pt_remaining = self.pt_capacity = 0
        self.cpu_once = self.cpu_remaining = self.cpu_capacity = 0
        self.remaining_profiles = []
        self.allocated_profiles = []

    def summary(self) -> str:
        """The ``ACCELERATOR(EX/SH/SL/PT)`` column: ``"1/2 2/27 100/270 0/0"``."""
        return (
            f"{self.ex_once}/{self.ex_remaining} {self.sh_once}/{self.sh_remaining} "
            f"{self.sl_once}/{self.sl_remaining} {self.pt_once}/{self.pt_remaining}"
        )

    def cpu_summary(self) -> str:
        return f"{self.cpu_once}/{self.cpu_remaining}"

    def to_status(self) -> dict:
        """The ``InstanceType.status`` fields: quantities as strings, as the API serialises them."""

        def view(once: int, remaining: int, capacity: int) -> dict:
            return {"onceMaxRequest": str(once), "remaining": str(remaining), "capacity": str(capacity)}

        partitioned = view(self.pt_once, self.pt_remaining, self.pt_capacity)
        partitioned["remainingProfiles"] = [{"name": n, "count": c} for n, c in self.remaining_profiles]
        partitioned["allocatedProfiles"] = [{"name": n, "count": c} for n, c in self.allocated_profiles]
        return {
            "accelerator": view(self.ex_once, self.ex_remaining, self.ex_capacity),
            "acceleratorShared": view(self.sh_once, self.sh_remaining, self.sh_capacity),
            "acceleratorSliced": view(self.sl_once, self.sl_remaining, self.sl_capacity),
            "acceleratorPartitioned": partitioned,
            "cpu": view(self.cpu_once, self.cpu_remaining, self.cpu_capacity),
        }

    def as_tuple(self) -> tuple:
        return (
            self.summary(),
            self.ex_capacity,
            self.sh_capacity,
            self.sl_capacity,
            self.pt_capacity,
            self.cpu_once,
            self.cpu_remaining,
            self.cpu_capacity,
            tuple(self.remaining_profiles),
            tuple(self.allocated_profiles),
        )


@cython.ccall
@cython.locals(
    node_free=cython.longlong,
    node_share_cards=cython.longlong,
    shares=cython.longlong,
    percent=cython.longlong,
    best=cython.longlong,
    rem=cython.longlong,
    top=cython.int,
    i=cython.Py_ssize_t,
    n=cython.Py_ssize_t,
    ncards=cython.Py_ssize_t,
    c=cython.Py_ssize_t,
    free_cores=cython.longlong,
)
def views(ledger: Ledger) -> Views:
    """Project the ledger into the four views and the CPU view (§7)."""
    out: Views = Views()
    remaining_by_name: dict = {}
    allocated_by_name: dict = {}
    order: list = []
    node: NodeLedger
    card: Card
    profile: Profile
    for node in ledger.nodes:
        node_free = 0
        node_share_cards = 0
        cards: list = node.cards
        ncards = len(cards)
        for c in range(ncards):
            card = cards[c]
            if card.partitioned:
                top = 0
                best = 0
                n = len(card.profiles)
                for i in range(n):
                    profile = card.profiles[i]
                    if profile.count > top:
                        top = profile.count
                    name = profile.name
                    if name not in remaining_by_name:
                        order.append(name)
                        remaining_by_name[name] = 0
                        allocated_by_name[name] = 0
                    rem = _profile_remaining(card, i) if card.healthy else 0
                    if rem > best:
                        best = rem
                    remaining_by_name[name] += rem
                    allocated_by_name[name] += card.allocated_profiles[i]
                out.pt_capacity += top
                out.pt_remaining += best
                if best > 0:
                    out.pt_once = 1
                continue
            out.ex_capacity += 1
            out.sh_capacity += SHARES_PER_CARD
            if card.slice_count > 0:
                out.sl_capacity += 100
            if not card.healthy:
                continue
            if card.mode == _NONE and card.remaining == _M:
                out.ex_remaining += 1
                node_free += 1
            if _can_share(card):
                shares = card.remaining // _SHARE
                out.sh_remaining += shares
                node_share_cards += 1
            if _can_slice(card, 0):
                percent = card.remaining // _PERCENT
                out.sl_remaining += percent
                if percent > out.sl_once:
                    out.sl_once = percent
        if node_free > out.ex_once:
            out.ex_once = node_free
        if node_share_cards > out.sh_once:
            out.sh_once = node_share_cards
        out.cpu_capacity += node.cores
        if node.cores > out.cpu_once:
            out.cpu_once = node.cores
        free_cores = node.cores if node.cores_free < 0 else node.cores_free
        if free_cores > 0:
            out.cpu_remaining += free_cores
    out.remaining_profiles = [(name, remaining_by_name[name]) for name in order]
    out.allocated_profiles = [(name, allocated_by_name[name]) for name in order if allocated_by_name[name]]
    return out


# --- Node keys and fit labels -------------------------------------------------------------------------------


@cython.ccall
@cython.locals(i=cython.Py_ssize_t, largest=cython.longlong, rem=cython.longlong, tokens=cython.longlong)
def partition_capacity(node: NodeLedger) -> tuple:
    """The node's ``<base>.partitioned`` token count — Σ per card (allocated instances + its largest
    free profile count) — and per published profile Σ (allocated + remaining) (§3.2)."""
    card: Card
    profile: Profile
    tokens = 0
    per_profile: dict = {}
    for card in node.cards:
        if not card.partitioned:
            continue
        largest = 0
        for i in range(len(card.profiles)):
            profile = card.profiles[i]
            rem = _profile_remaining(card, i)
            if rem > largest:
                largest = rem
            per_profile[profile.name] = per_profile.get(profile.name, 0) + card.allocated_profiles[i] + rem
            tokens += card.allocated_profiles[i]
        tokens += largest
    return (tokens, per_profile)


@cython.cfunc
@cython.locals(best=cython.longlong, seen=cython.bint)
def _sliced_max_free_units(node: NodeLedger, group: str) -> cython.longlong:
    card: Card
    best = 0
    seen = False
    for card in node.cards:
        if card.partitioned or card.slice_count <= 0 or card.group != group:
            continue
        seen = True
        if card.healthy and _can_slice(card, 0) and card.remaining > best:
            best = card.remaining
    return best if seen else -1


@cython.cfunc
@cython.locals(count=cython.longlong, seen=cython.bint)
def _shared_free_cards(node: NodeLedger, group: str) -> cython.longlong:
    card: Card
    count = 0
    seen = False
    for card in node.cards:
        if card.partitioned or card.group != group:
            continue
        seen = True
        if card.healthy and _can_share(card):
            count += 1
    return count if seen else -1


def sliced_max_free_units(node: NodeLedger, group: str) -> int | None:
    """The largest ``remaining`` over ``group``'s cards that can take a slice and have a free slot
    (0 when all are full); ``None`` when the node has no sliceable unpartitioned card of ``group``."""
    value = _sliced_max_free_units(node, group)
    return None if value < 0 else value


def shared_free_cards(node: NodeLedger, group: str) -> int | None:
    """How many of ``group``'s cards can still grant a share; ``None`` without unpartitioned cards."""
    value = _shared_free_cards(node, group)
    return None if value < 0 else value


@cython.ccall
@cython.locals(value=cython.longlong)
def fit_labels(node: NodeLedger) -> dict:
    """The per-card fit labels of a node (§6.6), per accelerator group; a label is absent when its
    group has no card of that population."""
    card: Card
    labels: dict = {}
    groups: list = []
    for card in node.cards:
        if card.group not in groups:
            groups.append(card.group)
    for group in groups:
        value = _sliced_max_free_units(node, group)
        if value >= 0:
            labels[label_fit_sliced_max_free_units(group)] = str(value)
        value = _shared_free_cards(node, group)
        if value >= 0:
            labels[label_fit_shared_free_cards(group)] = str(value)
    return labels
