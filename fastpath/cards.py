"""The Devices ledger's typed classes: a demand, a card with its partition profiles, a node's and a
pool's cards, and the per-card predicates every reader of the ledger shares (devices spec §6.3).

A card joins its capability (``spec.groups``: logical slice count, partition profiles with their
empty-card placements) with its ledger row (``status.groups``: mode, remaining units out of
M = 1,600,000, hosted slices, partition profiles).  ``fastpath.ledger`` builds cards, ``fastpath.fit``
places demands on them, ``fastpath.views`` and ``fastpath.fit_labels`` project them.

Per-card predicates:

- exclusive: mode None and ``remaining == M``;
- shared: unpartitioned, mode None or Shared, ``remaining ≥ M/10``;
- sliced: unpartitioned, sliceable, mode None or Sliced, ``remaining ≥ U`` and
  ``allocatedSlices < logicalSliced.count``;
- partitioned: a free legal placement of the profile on a partitioned card.

Compiled by Cython in pure-Python mode: the classes are ``cdef`` classes with C integer fields,
declared in ``cards.pxd`` so that the other compiled modules read and charge them as C structs.
"""

from __future__ import annotations

import cython

from api.constants import FAMILY_CODES
from api.manufacturers import UNITS_PER_CARD, UNITS_PER_SHARE

if not cython.compiled:  # compiled, the codes are fastpath/codes.pxd's C enum
    from api.constants import (
        DEVICE_MODE_NONE,
        DEVICE_MODE_PARTITIONED,
        DEVICE_MODE_SHARED,
        DEVICE_MODE_SLICED,
    )

_M = cython.declare(cython.longlong, UNITS_PER_CARD)
_SHARE = cython.declare(cython.longlong, UNITS_PER_SHARE)
_UNCAPPED = cython.declare(cython.longlong, 1 << 40)
_SEARCH_BUDGET = 4096  # placement-reconstruction nodes visited per card before falling back
_EMPTY_LIST = cython.declare(list, [])


# --- Demands --------------------------------------------------------------------------------------------


@cython.final
@cython.cclass
class Demand:
    """What one Pod (or PodSet template) asks of one accelerator: ``count`` cards (exclusive,
    shared) or instances (sliced, partitioned), each needing ``units`` out of M = 1,600,000 on its
    card, and for a partition the published ``profile``."""

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
        self.code = FAMILY_CODES.get(family, 0)

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
def new_demand(
    family: str,
    code: cython.int,
    manufacturer: str,
    base: str,
    count: cython.longlong,
    units: cython.longlong,
    profile: str,
) -> Demand:
    """``Demand(family, manufacturer, base, count, units, profile)`` for a compiled caller that knows
    the family's code (``FAMILY_CODES[family]``): built in C, without parsing arguments."""
    demand: Demand = Demand.__new__(Demand)
    demand.family = family
    demand.manufacturer = manufacturer
    demand.base = base
    demand.count = count
    demand.units = units
    demand.profile = profile
    demand.code = code
    return demand


# --- Cards ------------------------------------------------------------------------------------------------


@cython.final
@cython.cclass
class Profile:
    """One hardware partition profile of a card: its published name (the resource-key spelling),
    the vendor's own name, and its empty-card legal placements as memory-slice bitmasks sorted by
    end then start (so a greedy scan counts the most disjoint placements)."""

    def __init__(
        self, name: str, vendor: str, memory_mib: cython.longlong, count: cython.int, slots: list
    ) -> None:
        # Compiled, the common case (placements already in order) has its masks made in C.
        if not (cython.compiled and _set_placements_in_order(self, slots)):
            ordered = sorted(slots, key=lambda slot: (slot[0] + slot[1], slot[0]))
            self.masks = [((1 << length) - 1) << start for start, length in ordered]
            self.starts = [start for start, _length in ordered]
        self.name = name
        self.vendor = vendor
        self.memory_mib = memory_mib
        self.count = count

    @cython.boundscheck(False)  # indices are checked against lengths just above
    @cython.wraparound(False)
    @cython.cfunc
    @cython.exceptval(check=False)
    @cython.locals(
        i=cython.Py_ssize_t,
        n=cython.Py_ssize_t,
        count=cython.longlong,
        mask=cython.ulonglong,
        taken=cython.ulonglong,
    )
    def free_count(self, occupied: cython.ulonglong) -> cython.longlong:
        """The most disjoint free placements of this profile with ``occupied`` slices taken."""
        masks: list = self.masks
        n = len(masks)
        count = 0
        taken = occupied
        for i in range(n):
            mask = masks[i]
            if (mask & taken) == 0:
                taken |= mask
                count += 1
        return count

    def __repr__(self) -> str:
        return f"Profile({self.name!r}, count={self.count}, placements={len(self.masks)})"


@cython.boundscheck(False)  # indices are checked against lengths just above
@cython.wraparound(False)
@cython.cfunc
@cython.locals(
    i=cython.Py_ssize_t,
    n=cython.Py_ssize_t,
    start=cython.longlong,
    length=cython.longlong,
    end=cython.longlong,
    last_end=cython.longlong,
    last_start=cython.longlong,
    ones=cython.ulonglong,
)
def _set_placements_in_order(profile: Profile, slots: object) -> cython.bint:
    """Compiled only: when ``slots`` is a list of ``(start, length)`` pairs of ints inside 64 memory
    slices already in (end, start) order — which sorting keeps as it is — set ``profile``'s masks
    and starts from them with C integers and return True; otherwise set nothing and return False
    (``Profile`` then sorts and computes them with Python integers)."""
    if type(slots) is not list:
        return False
    items: list = slots
    n = len(items)
    masks: list = []
    starts: list = []
    last_end = -1
    last_start = -1
    for i in range(n):
        slot = items[i]
        if type(slot) is not tuple or len(slot) != 2:
            return False
        first = cython.cast(tuple, slot)[0]
        second = cython.cast(tuple, slot)[1]
        if type(first) is not int or type(second) is not int:
            return False
        if first < 0 or first > 64 or second < 1 or second > 64:  # Python comparisons: any int
            return False
        start = first
        length = second
        end = start + length
        if end > 64 or end < last_end or (end == last_end and start < last_start):
            return False
        last_end = end
        last_start = start
        ones = ((cython.cast(cython.ulonglong, 1) << (length - 1)) << 1) - 1  # length 64: all ones
        masks.append(ones << start)
        starts.append(first)
    profile.masks = masks
    profile.starts = starts
    return True


@cython.final
@cython.cclass
class Card:
    """One accelerator: capability joined with its ledger row; mutable by placement."""

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
        mode: cython.int = DEVICE_MODE_NONE,
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

    @cython.cfunc
    def set_profiles(self, profiles: list) -> cython.void:
        """Give the card its partition profiles, none allocated, none capped (an unpartitioned
        card shares one empty list: it is never mutated)."""
        self.profiles = profiles
        if profiles:
            self.allocated_profiles = [0] * len(profiles)
            self.caps = [_UNCAPPED] * len(profiles)
        else:
            self.profiles = self.allocated_profiles = self.caps = _EMPTY_LIST

    @cython.cfunc
    @cython.exceptval(check=False)
    def assign(self, state: Card) -> cython.void:
        """Copy the mutable ledger state of ``state`` into this card (keeping its identity)."""
        self.mode = state.mode
        self.remaining = state.remaining
        self.allocated_slices = state.allocated_slices
        self.occupied = state.occupied
        self.allocated_profiles = state.allocated_profiles
        self.caps = state.caps

    # --- Predicates (§6.3) ---

    @cython.cfunc
    @cython.exceptval(check=False)
    def eligible(self, manufacturer: str) -> cython.bint:
        return self.healthy and (not manufacturer or self.manufacturer == manufacturer)

    @cython.cfunc
    @cython.exceptval(check=False)
    def exclusive_free(self) -> cython.bint:
        return not self.partitioned and self.mode == DEVICE_MODE_NONE and self.remaining == _M

    @cython.cfunc
    @cython.exceptval(check=False)
    def can_share(self) -> cython.bint:
        return (
            not self.partitioned
            and (self.mode == DEVICE_MODE_NONE or self.mode == DEVICE_MODE_SHARED)
            and self.remaining >= _SHARE
        )

    @cython.cfunc
    @cython.exceptval(check=False)
    def can_slice(self, units: cython.longlong) -> cython.bint:
        return (
            not self.partitioned
            and self.slice_count > 0
            and (self.mode == DEVICE_MODE_NONE or self.mode == DEVICE_MODE_SLICED)
            and self.remaining >= units
            and self.allocated_slices < self.slice_count
        )

    @cython.cfunc
    @cython.exceptval(check=False)
    def used_slices(self) -> cython.int:
        """How many memory slices the card's partitions occupy."""
        return _bits(self.occupied)

    @cython.cfunc
    @cython.locals(free=cython.longlong, cap=cython.longlong)
    def free_instances(self, i: cython.Py_ssize_t) -> cython.longlong:
        """Placement-aware remaining instances of profile ``i``: free placements, capped at what
        the ledger reports."""
        free = cython.cast(Profile, self.profiles[i]).free_count(self.occupied)
        cap = self.caps[i]
        return free if free < cap else cap

    def profile_remaining(self) -> dict[str, int]:
        """Placement-aware remaining instances per published profile (partitioned cards)."""
        return {self.profiles[i].name: self.free_instances(i) for i in range(len(self.profiles))}

    # --- Charges ---

    @cython.cfunc
    @cython.exceptval(check=False)
    def charge_slice(self, units: cython.longlong) -> cython.void:
        self.mode = DEVICE_MODE_SLICED
        self.remaining -= units
        self.allocated_slices += 1

    @cython.cfunc
    @cython.locals(
        q=cython.Py_ssize_t,
        nq=cython.Py_ssize_t,
        before=cython.longlong,
        after=cython.longlong,
        mask=cython.ulonglong,
    )
    def occupy(self, p: cython.Py_ssize_t, placement: cython.Py_ssize_t) -> tuple:
        """Take ``placement`` of profile ``p``: ``(start, length)`` of the memory slices held.  A
        profile capped by the ledger loses the instances the placement blocks."""
        profile: Profile = self.profiles[p]
        mask = profile.masks[placement]
        nq = len(self.profiles)
        for q in range(nq):
            if self.caps[q] == _UNCAPPED:
                continue
            before = cython.cast(Profile, self.profiles[q]).free_count(self.occupied)
            after = cython.cast(Profile, self.profiles[q]).free_count(self.occupied | mask)
            self.caps[q] = max(0, self.caps[q] - (before - after))
        self.occupied |= mask
        self.allocated_profiles[p] = self.allocated_profiles[p] + 1
        self.mode = DEVICE_MODE_PARTITIONED
        return (profile.starts[placement], _bits(mask))

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


# --- Partition geometry -------------------------------------------------------------------------------------


@cython.cfunc
@cython.exceptval(check=False)
@cython.locals(count=cython.int)
def _bits(value: cython.ulonglong) -> cython.int:
    count = 0
    while value:
        value &= value - 1
        count += 1
    return count


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
        if cython.cast(Profile, card.profiles[i]).free_count(occupied) != reported.get(i, 0):
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


def reconstruct(card: Card, allocated: dict, reported: dict | None) -> None:
    """Recover the occupied memory slices from the allocated instances (profile position → count):
    the first assignment of instances to legal placements (largest first, lowest start first) whose
    remaining counts match what the ledger reports (``reported``, or ``None`` when it reports
    none).  Without a match, keep the first legal assignment and cap each profile at its reported
    remaining; an impossible allocation (more than fits) fills the card."""
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
