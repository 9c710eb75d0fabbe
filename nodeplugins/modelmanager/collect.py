"""Collection by watermark (model-delivery spec §4.6), as a pure plan over what the node holds.

Candidates, oldest last use first:

- published trees no mount references, unreferenced for at least ten minutes;
- partial trees with no running attempt that no mount asked for in 24 hours;

removed until usage is at or below the low watermark (or, for a reservation, until it fits). Also,
on every run, failure records 24 hours after the last failure whose digest is neither published,
partial nor in progress. Never removed: a referenced tree, a partial being written, a pinned digest
(pinned bytes still count as usage). When usage stays above the high watermark with nothing left to
remove, the node is ``CapacityLow=True/NothingToRemove``.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field

UNREFERENCED_GRACE = 600.0
PARTIAL_IDLE = 86400.0
FAILURE_RETENTION = 86400.0


@dataclass(frozen=True, slots=True)
class Held:
    """One digest's bytes on disk: a published tree or a partial one."""

    digest: str
    kind: str  # "tree" | "partial"
    bytes: int
    last_used: float  # trees: last mount/unmount; partials: last ask


@dataclass(frozen=True, slots=True)
class Facts:
    held: tuple[Held, ...]
    referenced: Set[str]
    pinned: Set[str]
    running: Set[str]
    failures: Mapping[str, float]  # digest -> last failure
    used: int
    total: int


@dataclass
class Plan:
    remove: list[Held] = field(default_factory=list)
    forget_failures: list[str] = field(default_factory=list)
    used_after: int = 0
    nothing_to_remove: bool = False  # above high with nothing removable left


def removable(item: Held, facts: Facts, now: float, grace: float = UNREFERENCED_GRACE) -> bool:
    if item.digest in facts.pinned:
        return False
    if item.kind == "tree":
        return item.digest not in facts.referenced and now - item.last_used >= grace
    return item.digest not in facts.running and now - item.last_used >= PARTIAL_IDLE


def plan(
    facts: Facts, *, now: float, high: int, low: int, need: int = 0, grace: float = UNREFERENCED_GRACE
) -> Plan:
    """What to remove. ``need``: bytes a reservation must free (0: only the watermark trigger)."""
    result = Plan(used_after=facts.used)
    on_disk = {h.digest for h in facts.held}
    for digest, last in sorted(facts.failures.items()):
        if digest not in on_disk and digest not in facts.running and now - last >= FAILURE_RETENTION:
            result.forget_failures.append(digest)
    high_bytes = facts.total * high / 100
    low_bytes = facts.total * low / 100
    above_high = facts.used > high_bytes
    if not above_high and need <= 0:
        return result
    # Down to low; a reservation also needs its shortfall freed, whichever is more.
    target = min(low_bytes, facts.used - need) if need > 0 else low_bytes
    candidates = sorted(
        (h for h in facts.held if removable(h, facts, now, grace)), key=lambda h: (h.last_used, h.digest)
    )
    used = facts.used
    for item in candidates:
        if used <= target:
            break
        result.remove.append(item)
        used -= item.bytes
    result.used_after = used
    result.nothing_to_remove = used > high_bytes
    return result
