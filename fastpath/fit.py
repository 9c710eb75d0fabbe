"""Per-card fit: the one placement gate 1 (fit labels and pins), gate 3 (the
``gpustack-node-devices`` AdmissionCheck) and gate 5 (the device-plugin allocator) share, so all
three agree on what fits (devices spec §6.3).  The cards come from ``fastpath.ledger``.

- exclusive: whole free cards, lowest index first;
- shared: N **distinct** cards on one node that can grant a share, the fullest first;
- sliced: a card that can take the slice, the **fullest** fitting card first, ties by index (two
  30 % slices share a card, two 60 % do not);
- partitioned: a free legal placement of the profile on a partitioned card, packing the most occupied
  card first.  Non-partition demands never land on partitioned cards, nor partitions elsewhere.

A grant is ``(group, card_id, card_index, units, profile, start, length)`` per card or instance
(``start`` and ``length`` locate a partition's memory slices).

Compiled by Cython in pure-Python mode: the cards are ``fastpath.cards``' C structs.
"""

from __future__ import annotations

from typing import Any

import cython

from api.manufacturers import UNITS_PER_CARD, UNITS_PER_SHARE
from fastpath.cards import Card, Demand, Ledger, NodeLedger, Profile

if not cython.compiled:  # compiled, the codes are fastpath/codes.pxd's C enum
    from api.constants import (
        DEVICE_MODE_EXCLUSIVE,
        DEVICE_MODE_PARTITIONED,
        DEVICE_MODE_SHARED,
        DEVICE_MODE_SLICED,
    )

_M = cython.declare(cython.longlong, UNITS_PER_CARD)
_SHARE = cython.declare(cython.longlong, UNITS_PER_SHARE)


@cython.cfunc
def _want(demand: Any) -> Demand:
    """``demand`` as a ``Demand`` (any object with the same attributes is accepted)."""
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


# --- Choosing cards -------------------------------------------------------------------------------------


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
            card.eligible(manufacturer)
            and card.can_slice(units)
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
            card.eligible(manufacturer)
            and card.can_share()
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
def _pack_partition_card(
    cards: list, manufacturer: str, profile: str
) -> tuple[cython.Py_ssize_t, cython.Py_ssize_t]:  # compiled, a C struct
    """(card position, profile position) of the most occupied partitioned card with a free legal
    placement of ``profile`` (ties: the earlier card), or (-1, -1)."""
    n = len(cards)
    best = -1
    best_used = -1
    j = -1
    for i in range(n):
        card: Card = cards[i]
        if not card.partitioned or not card.eligible(manufacturer):
            continue
        p = _profile_index(card, profile)
        if p < 0 or card.free_instances(p) <= 0:
            continue
        used = card.used_slices()
        if used > best_used:
            best = i
            best_used = used
            j = p
    return (best, j)


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
            score += cython.cast(Profile, card.profiles[q]).free_count(after)
        if score > best_score or (score == best_score and starts[i] < starts[best]):
            best = i
            best_score = score
    return best


@cython.cfunc
def _grant(card: Card, units: cython.longlong, profile: str, start: object, length: object) -> tuple:
    return (card.group, card.id, card.index, units, profile, start, length)


# --- Placing one demand, per family -------------------------------------------------------------------------


@cython.cfunc
@cython.locals(count=cython.longlong, i=cython.Py_ssize_t, n=cython.Py_ssize_t)
def _place_exclusive(cards: list, demand: Demand, commit: cython.bint) -> object:
    """``count`` whole free cards, lowest index first."""
    count = demand.count
    card: Card
    chosen = []
    n = len(cards)
    for i in range(n):
        card = cards[i]
        if card.eligible(demand.manufacturer) and card.exclusive_free():
            chosen.append(card)
            if len(chosen) == count:
                break
    if len(chosen) < count:
        return None
    grants: list = []
    for card in chosen:
        if commit:
            card.mode = DEVICE_MODE_EXCLUSIVE
            card.remaining = 0
        grants.append(_grant(card, _M, "", None, None))
    return grants


@cython.cfunc
@cython.locals(pos=cython.Py_ssize_t)
def _place_shared(cards: list, demand: Demand, commit: cython.bint) -> object:
    """A share on ``count`` distinct cards, the fullest first (ties: the earlier card)."""
    card: Card
    taken: list = []
    for _k in range(demand.count):
        pos = _fullest_share_card(cards, demand.manufacturer, taken)
        if pos < 0:
            return None
        taken.append(pos)
    grants: list = []
    for pos in taken:
        card = cards[pos]
        if commit:
            card.mode = DEVICE_MODE_SHARED
            card.remaining -= _SHARE
        grants.append(_grant(card, _SHARE, "", None, None))
    return grants


@cython.cfunc
@cython.locals(units=cython.longlong, pos=cython.Py_ssize_t)
def _place_sliced(cards: list, demand: Demand, commit: cython.bint) -> object:
    """``count`` slices of ``units``, each on the fullest card that takes it."""
    units = demand.units
    card: Card
    grants: list = []
    if demand.count == 1:
        # The common case: one slice, judged and charged on the cards themselves.
        pos = _fullest_slice_card(cards, demand.manufacturer, units)
        if pos < 0:
            return None
        card = cards[pos]
        if commit:
            card.charge_slice(units)
        grants.append(_grant(card, units, "", None, None))
        return grants
    # Several slices may stack on one card: judge them on copies of the cards they touch.
    work = list(cards)
    touched: dict = {}
    for _k in range(demand.count):
        pos = _fullest_slice_card(work, demand.manufacturer, units)
        if pos < 0:
            return None
        if pos not in touched:
            work[pos] = cython.cast(Card, work[pos]).copy()
            touched[pos] = True
        card = work[pos]
        card.charge_slice(units)
        grants.append(_grant(card, units, "", None, None))
    if commit:
        _commit(cards, work, touched)
    return grants


@cython.cfunc
@cython.locals(units=cython.longlong, pos=cython.Py_ssize_t, p=cython.Py_ssize_t)
def _place_partitioned(cards: list, demand: Demand, commit: cython.bint) -> object:
    """``count`` instances of ``profile``, each packed on the most occupied card that has room."""
    units = demand.units
    profile: str = demand.profile
    card: Card
    grants: list = []
    work = list(cards)
    touched: dict = {}
    for _k in range(demand.count):
        pos, p = _pack_partition_card(work, demand.manufacturer, profile)
        if pos < 0:
            return None
        if pos not in touched:
            work[pos] = cython.cast(Card, work[pos]).copy()
            touched[pos] = True
        card = work[pos]
        start, length = card.occupy(p, _best_placement(card, p))
        card.remaining = max(0, card.remaining - units)
        grants.append(_grant(card, units, profile, start, length))
    if commit:
        _commit(cards, work, touched)
    return grants


@cython.cfunc
def _commit(cards: list, work: list, touched: dict) -> cython.void:
    """Carry the charges judged on copies (``work``) back to the touched cards."""
    for pos in touched:
        cython.cast(Card, cards[pos]).assign(work[pos])


@cython.cfunc
@cython.locals(family=cython.int)
def _place(node: NodeLedger, demand: Demand, commit: cython.bint) -> object:
    """Place ``demand`` on ``node``: the grants, or ``None`` when it does not fit (the node is then
    left untouched).  With ``commit`` false the node is never touched."""
    if demand.count <= 0:
        return []
    family = demand.code
    if family == DEVICE_MODE_EXCLUSIVE:
        return _place_exclusive(node.cards, demand, commit)
    if family == DEVICE_MODE_SHARED:
        return _place_shared(node.cards, demand, commit)
    if family == DEVICE_MODE_SLICED:
        return _place_sliced(node.cards, demand, commit)
    if family == DEVICE_MODE_PARTITIONED:
        return _place_partitioned(node.cards, demand, commit)
    return None


# --- Entry points -------------------------------------------------------------------------------------------


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
