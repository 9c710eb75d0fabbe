"""The four accelerator views of a pool and its CPU view (InstanceType status, §7), projected from
the Devices ledger (``fastpath.ledger``) with the per-card predicates of ``fastpath.cards``.

- exclusive: whole free cards (``onceMaxRequest``: the most on one node);
- shared: shares left on cards that can grant one (``onceMaxRequest``: the most such cards on one
  node, as a share request names distinct cards);
- sliced: free percent on cards that can take a slice (``onceMaxRequest``: the largest on one card);
- partitioned: per card its largest placement-aware free profile count, and per profile the
  remaining and allocated instances.

Compiled by Cython in pure-Python mode: the cards are ``fastpath.cards``' C structs.
"""

from __future__ import annotations

import cython

from api.manufacturers import SHARES_PER_CARD, UNITS_PER_CARD, UNITS_PER_PERCENT, UNITS_PER_SHARE
from fastpath.cards import Card, Ledger, NodeLedger, Profile

if not cython.compiled:  # compiled, the codes are fastpath/codes.pxd's C enum
    from api.constants import DEVICE_MODE_NONE

_M = cython.declare(cython.longlong, UNITS_PER_CARD)
_SHARE = cython.declare(cython.longlong, UNITS_PER_SHARE)
_PERCENT = cython.declare(cython.longlong, UNITS_PER_PERCENT)


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


@cython.final
@cython.cclass
class _ProfileSums:
    """One published profile's remaining and allocated instances over the pool so far."""

    remaining = cython.declare(cython.longlong)
    allocated = cython.declare(cython.longlong)

    def __init__(self) -> None:
        self.remaining = 0
        self.allocated = 0


@cython.cfunc
@cython.locals(top=cython.int, best=cython.longlong, rem=cython.longlong, i=cython.Py_ssize_t)
def _add_partitioned(out: Views, card: Card, by_name: dict, order: list) -> cython.void:
    """A partitioned card: capacity its largest profile count, remaining its largest free count."""
    profile: Profile
    sums: _ProfileSums
    top = 0
    best = 0
    for i in range(len(card.profiles)):
        profile = card.profiles[i]
        if profile.count > top:
            top = profile.count
        name = profile.name
        found = by_name.get(name)
        if found is None:
            order.append(name)
            found = by_name[name] = _ProfileSums()
        sums = found
        rem = card.free_instances(i) if card.healthy else 0
        if rem > best:
            best = rem
        sums.remaining += rem
        sums.allocated += card.allocated_profiles[i]
    out.pt_capacity += top
    out.pt_remaining += best
    if best > 0:
        out.pt_once = 1


@cython.cfunc
@cython.locals(
    node_free=cython.longlong,
    node_share_cards=cython.longlong,
    percent=cython.longlong,
    free_cores=cython.longlong,
)
def _add_node(out: Views, node: NodeLedger, by_name: dict, order: list) -> cython.void:
    """One node's cards and cores."""
    card: Card
    node_free = 0
    node_share_cards = 0
    for card in node.cards:
        if card.partitioned:
            _add_partitioned(out, card, by_name, order)
            continue
        out.ex_capacity += 1
        out.sh_capacity += SHARES_PER_CARD
        if card.slice_count > 0:
            out.sl_capacity += 100
        if not card.healthy:
            continue
        if card.mode == DEVICE_MODE_NONE and card.remaining == _M:
            out.ex_remaining += 1
            node_free += 1
        if card.can_share():
            out.sh_remaining += card.remaining // _SHARE
            node_share_cards += 1
        if card.can_slice(0):
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


@cython.ccall
def views(ledger: Ledger) -> Views:
    """Project the ledger into the four views and the CPU view (§7)."""
    sums: _ProfileSums
    out: Views = Views()
    by_name: dict = {}  # published profile -> _ProfileSums
    order: list = []
    for node in ledger.nodes:
        _add_node(out, node, by_name, order)
    remaining: list = []
    allocated: list = []
    for name in order:
        sums = by_name[name]
        remaining.append((name, sums.remaining))
        if sums.allocated:
            allocated.append((name, sums.allocated))
    out.remaining_profiles = remaining
    out.allocated_profiles = allocated
    return out
