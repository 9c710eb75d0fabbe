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

from api.objects import Obj
from fastpath import quantity

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
    if type(entries) is not list:
        return ()
    out: list[tuple[str, int]] = []
    for entry in entries:
        if type(entry) is dict and type(entry.get("name")) is str:
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


Sliced = tuple[int, bool, int, tuple[tuple[str, int, Any], ...]]
"""A ``slicedDetail`` read once: logical count, overcommit, physical count, (profile, count, MiB)."""

NO_SLICING: Sliced = (0, False, 0, ())


def sliced(detail: Any) -> Sliced:
    """Read a ``slicedDetail`` (malformed parts count as absent)."""
    if type(detail) is not dict or not detail:
        return NO_SLICING
    logical_count, overcommit, physical_count = 0, False, 0
    profiles: list[tuple[str, int, Any]] = []
    logical = detail.get("logical")
    if type(logical) is dict:
        logical_count = _int(logical.get("count"))
        overcommit = logical_count > 0 and logical.get("coresPercentageOvercommit") is True
    physical = detail.get("physical")
    if type(physical) is dict:
        physical_count = _int(physical.get("count"))
        entries = physical.get("profiles")
        for entry in entries if type(entries) is list else ():
            if type(entry) is dict and type(entry.get("name")) is str:
                profiles.append((entry["name"], _int(entry.get("count")), entry.get("memoryMib")))
    return (logical_count, overcommit, physical_count, tuple(profiles))


class SlicedSum:
    """Σ of slicing capabilities, kept as members come and go: counts add, physical profiles add by
    name (listed by name), the logical overcommit flag is set by any logically sliceable member."""

    __slots__ = ("logical", "memory", "overcommitting", "physical", "profiles")

    def __init__(self) -> None:
        self.logical = 0
        self.overcommitting = 0  # members that overcommit
        self.physical = 0
        self.profiles: dict[str, list[int]] = {}  # name -> [Σ count, members listing it]
        self.memory: dict[str, Any] = {}

    def add(self, parts: Sliced, sign: int = 1) -> None:
        """Count one member in (``sign`` 1) or out (-1)."""
        if parts is NO_SLICING:
            return
        logical, overcommit, physical, profiles = parts
        self.logical += sign * logical
        self.overcommitting += sign if overcommit else 0
        self.physical += sign * physical
        for name, count, memory in profiles:
            entry = self.profiles.get(name)
            if entry is None:
                entry = self.profiles[name] = [0, 0]
            entry[0] += sign * count
            entry[1] += sign
            if entry[1] == 0:
                del self.profiles[name]
            elif memory is not None and sign > 0:
                self.memory.setdefault(name, memory)

    def add_sum(self, other: SlicedSum) -> None:
        self.logical += other.logical
        self.overcommitting += other.overcommitting
        self.physical += other.physical
        for name, (count, members) in other.profiles.items():
            entry = self.profiles.get(name)
            if entry is None:
                entry = self.profiles[name] = [0, 0]
            entry[0] += count
            entry[1] += members
            if name in other.memory:
                self.memory.setdefault(name, other.memory[name])

    def to_json(self) -> Obj:
        logical: Obj = {}
        if self.overcommitting:
            logical["coresPercentageOvercommit"] = True
        if self.logical:
            logical["count"] = self.logical
        physical: Obj = {}
        if self.profiles:
            physical["profiles"] = [
                {"name": n, "count": e[0], **({"memoryMib": self.memory[n]} if n in self.memory else {})}
                for n, e in sorted(self.profiles.items())
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


_KEYS: dict[tuple[bytes, tuple[str, ...]], bytes] = {}
_KEYS_LIMIT = 4096  # distinct specs remembered; a fleet has one per pool and cluster at most


def spec_key(spec: Any, blanked: tuple[str, ...] = ()) -> bytes:
    """A hashable identity of a spec: the ``blanked`` fields dropped, and an empty value (``""``,
    ``false``, ``null``, ``{}``) equal to an absent one, as Go compares the same struct."""
    if not isinstance(spec, Mapping):
        return b"{}"
    raw = (orjson.dumps(spec), blanked)
    key = _KEYS.get(raw)
    if key is None:
        kept = {k: v for k, v in spec.items() if k not in blanked}
        key = orjson.dumps(_normalized(kept), option=orjson.OPT_SORT_KEYS)
        if len(_KEYS) >= _KEYS_LIMIT:
            _KEYS.clear()
        _KEYS[raw] = key
    return key
