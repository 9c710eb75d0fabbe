"""What a node's cards say on the node itself: the ``<base>.partitioned`` token count and the
per-profile capacity of its node keys (§3.2), and its per-card fit labels (§6.6), computed with
the per-card predicates of ``fastpath.cards`` on a node ledger from ``fastpath.ledger``.

The spec's two labels (slices, shares) are joined by one per family, so the Workload pin can keep
Kueue's topology-aware placement off nodes that cannot take a PodSet's cards in any mode
(docs/scheduling.md): ``exclusive-free-cards`` (whole and free) and ``partitioned-free-instances``
(free placements of one profile).  A label whose key would not be a valid label key (a very long
group or profile name) is left out; the pin then leaves its Workloads unpinned, as it does for
the spec's labels.

Compiled by Cython in pure-Python mode: the cards are ``fastpath.cards``' C structs.
"""

from __future__ import annotations

import cython

from api.constants import (
    label_fit_exclusive_free_cards,
    label_fit_partitioned_free_instances,
    label_fit_shared_free_cards,
    label_fit_sliced_max_free_units,
)
from api.naming import is_qualified_name
from fastpath.cards import Card, NodeLedger, Profile

# The label keys of the groups and (group, profile) pairs seen so far: a key is spelled, and its
# validity judged, once per process rather than per node and pass (a bounded memo, dropped whole
# when full).
_KEYS_LIMIT = cython.declare(cython.Py_ssize_t, 4096)
_GROUP_KEYS = cython.declare(dict, {})  # group -> (sliced, shared, exclusive) label keys
_PROFILE_KEYS = cython.declare(dict, {})  # (group, profile) -> the label key, None when not valid


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
            rem = card.free_instances(i)
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
        if card.healthy and card.can_slice(0) and card.remaining > best:
            best = card.remaining
    return best if seen else -1


@cython.cfunc
@cython.locals(count=cython.longlong, seen=cython.bint, exclusive=cython.bint)
def _free_cards(node: NodeLedger, group: str, exclusive: cython.bint) -> cython.longlong:
    """Unpartitioned healthy cards of ``group`` that are whole and free (``exclusive``) or can still
    grant a share; -1 when the node has no unpartitioned card of ``group``."""
    card: Card
    count = 0
    seen = False
    for card in node.cards:
        if card.partitioned or card.group != group:
            continue
        seen = True
        if card.healthy and (card.exclusive_free() if exclusive else card.can_share()):
            count += 1
    return count if seen else -1


@cython.ccall
@cython.locals(i=cython.Py_ssize_t)
def partitioned_free_instances(node: NodeLedger, group: str) -> dict:
    """Free placements per profile over ``group``'s healthy partitioned cards, every published
    profile listed (0 when none is left); empty without partitioned cards of ``group``."""
    card: Card
    free: dict = {}
    for card in node.cards:
        if not card.partitioned or card.group != group:
            continue
        for i in range(len(card.profiles)):
            name = cython.cast(Profile, card.profiles[i]).name
            free[name] = free.get(name, 0) + (card.free_instances(i) if card.healthy else 0)
    return free


def exclusive_free_cards(node: NodeLedger, group: str) -> int | None:
    """How many of ``group``'s unpartitioned cards are whole and free; ``None`` without any."""
    value = _free_cards(node, group, True)
    return None if value < 0 else value


def sliced_max_free_units(node: NodeLedger, group: str) -> int | None:
    """The largest ``remaining`` over ``group``'s cards that can take a slice and have a free slot
    (0 when all are full); ``None`` when the node has no sliceable unpartitioned card of ``group``."""
    value = _sliced_max_free_units(node, group)
    return None if value < 0 else value


def shared_free_cards(node: NodeLedger, group: str) -> int | None:
    """How many of ``group``'s cards can still grant a share; ``None`` without unpartitioned cards."""
    value = _free_cards(node, group, False)
    return None if value < 0 else value


@cython.cfunc
def _group_keys(group: str) -> tuple:
    """The sliced, shared and exclusive label keys of ``group``."""
    keys = _GROUP_KEYS.get(group)
    if keys is None:
        if len(_GROUP_KEYS) >= _KEYS_LIMIT:
            _GROUP_KEYS.clear()
        keys = (
            label_fit_sliced_max_free_units(group),
            label_fit_shared_free_cards(group),
            label_fit_exclusive_free_cards(group),
        )
        _GROUP_KEYS[group] = keys
    return keys


@cython.cfunc
def _profile_key(group: str, profile: str) -> object:
    """The partitioned label key of ``profile`` in ``group``, or None when it is not a valid label key."""
    at = (group, profile)
    key = _PROFILE_KEYS.get(at, _PROFILE_KEYS)
    if key is _PROFILE_KEYS:
        if len(_PROFILE_KEYS) >= _KEYS_LIMIT:
            _PROFILE_KEYS.clear()
        key = label_fit_partitioned_free_instances(group, profile)
        if not is_qualified_name(key):
            key = None
        _PROFILE_KEYS[at] = key
    return key


@cython.ccall
@cython.locals(value=cython.longlong)
def fit_labels(node: NodeLedger) -> dict:
    """The per-card fit labels of a node (§6.6), per accelerator group; a label is absent when its
    group has no card of that population."""
    card: Card
    keys: tuple
    labels: dict = {}
    groups: list = []
    for card in node.cards:
        if card.group not in groups:
            groups.append(card.group)
    for group in groups:
        keys = _group_keys(group)
        value = _sliced_max_free_units(node, group)
        if value >= 0:
            labels[keys[0]] = str(value)
        value = _free_cards(node, group, False)
        if value >= 0:
            labels[keys[1]] = str(value)
        value = _free_cards(node, group, True)
        if value >= 0:
            labels[keys[2]] = str(value)
        for profile, free in partitioned_free_instances(node, group).items():
            key = _profile_key(group, profile)
            if key is not None:
                labels[key] = str(free)
    return labels
