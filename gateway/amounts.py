"""The arithmetic of the fleet view: quantities, per-profile ledgers, slicing capability, spec keys.

Quantities arrive as the strings a cluster wrote (``"8"``, ``"1600k"``, ``"500m"``); they are added
exactly (an ``int`` for whole values, the common case, a ``Fraction`` otherwise) and written back in
the canonical form the operator's own status uses (``str`` of a whole number, ``<n>m`` for
thousandths).  A value that is not a quantity at all counts as zero: a malformed status in one
cluster must not break the view of the others.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

import orjson

from fastpath import quantity

Obj = dict[str, Any]
Num = int | Fraction
Profiles = tuple[tuple[str, int], ...]  # (profile name, count) pairs


def number(value: Any) -> Num:
    """The exact value of a quantity; ``None``, ``""`` and garbage are zero."""
    if value is None or value == "":
        return 0
    try:
        whole = quantity.whole(value)
        if whole is not None:
            return int(whole)
        num, den = quantity.parse(value)
    except (ValueError, TypeError):
        return 0
    return Fraction(num, den)


def text(value: Num) -> str:
    """A quantity string: ``"8"``, ``"1500m"``; finer than a thousandth rounds up to nanounits."""
    if isinstance(value, int):
        return str(value)
    if value.denominator == 1:
        return str(value.numerator)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    nano = -((-value.numerator * 10**9) // value.denominator)
    return f"{nano}n"


def profiles(entries: Any) -> Profiles:
    """A ``[{name, count}]`` list as pairs, in the order given; malformed entries are skipped."""
    if not isinstance(entries, list):
        return ()
    out: list[tuple[str, int]] = []
    for entry in entries:
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            count = entry.get("count") or 0
            out.append((entry["name"], count if type(count) is int else 0))
    return tuple(out)


def sum_profiles(ledgers: Iterable[Profiles]) -> Profiles:
    """Σ by profile name, ordered by name; a profile carried at zero stays listed."""
    sums: dict[str, int] = {}
    for ledger in ledgers:
        for name, count in ledger:
            sums[name] = sums.get(name, 0) + count
    return tuple(sorted(sums.items()))


def cap_at_one(ledger: Profiles) -> Profiles:
    """The once-max-request form of a ledger: can one more of each profile be built (0 or 1)."""
    return tuple((name, 1 if count > 0 else 0) for name, count in ledger)


def profiles_json(ledger: Profiles) -> list[Obj]:
    return [{"name": name, "count": count} for name, count in ledger]


class SlicedSum:
    """Σ of ``slicedDetail`` capabilities: counts add, physical profiles add by name (first-seen
    order), the logical overcommit flag is set by any logically sliceable contributor."""

    __slots__ = ("logical", "memory", "overcommit", "physical", "profiles")

    def __init__(self) -> None:
        self.logical = 0
        self.overcommit = False
        self.physical = 0
        self.profiles: dict[str, int] = {}
        self.memory: dict[str, Any] = {}

    def add(self, detail: Any) -> None:
        if not isinstance(detail, Mapping):
            return
        logical = detail.get("logical")
        if isinstance(logical, Mapping):
            count = _int(logical.get("count"))
            self.logical += count
            if count > 0 and logical.get("coresPercentageOvercommit") is True:
                self.overcommit = True
        physical = detail.get("physical")
        if isinstance(physical, Mapping):
            self.physical += _int(physical.get("count"))
            for entry in physical.get("profiles") or ():
                if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
                    continue
                name = entry["name"]
                self.profiles[name] = self.profiles.get(name, 0) + _int(entry.get("count"))
                if "memoryMib" in entry and name not in self.memory:
                    self.memory[name] = entry["memoryMib"]

    def add_sum(self, other: SlicedSum) -> None:
        self.logical += other.logical
        self.overcommit = self.overcommit or other.overcommit
        self.physical += other.physical
        for name, count in other.profiles.items():
            self.profiles[name] = self.profiles.get(name, 0) + count
        for name, memory in other.memory.items():
            self.memory.setdefault(name, memory)

    def to_json(self) -> Obj:
        logical: Obj = {}
        if self.overcommit:
            logical["coresPercentageOvercommit"] = True
        if self.logical:
            logical["count"] = self.logical
        physical: Obj = {}
        if self.profiles:
            physical["profiles"] = [
                {"name": n, "count": c, **({"memoryMib": self.memory[n]} if n in self.memory else {})}
                for n, c in self.profiles.items()
            ]
        if self.physical:
            physical["count"] = self.physical
        return {"logical": logical, "physical": physical}


def _int(value: Any) -> int:
    return value if type(value) is int else 0


def _meaningful(value: Any) -> bool:
    return value is not None and value != "" and value is not False and value != {} and value != []


def _normalized(value: Any) -> Any:
    if not isinstance(value, Mapping):
        return value
    out: Obj = {}
    for key, item in value.items():
        kept = _normalized(item)
        if _meaningful(kept):
            out[key] = kept
    return out


def spec_key(spec: Any, blanked: tuple[str, ...] = ()) -> bytes:
    """A hashable identity of a spec: the ``blanked`` fields dropped, and an empty value (``""``,
    ``false``, ``null``, ``{}``) equal to an absent one, as Go compares the same struct."""
    if not isinstance(spec, Mapping):
        return b"{}"
    kept = {k: v for k, v in spec.items() if k not in blanked}
    return orjson.dumps(_normalized(kept), option=orjson.OPT_SORT_KEYS)
