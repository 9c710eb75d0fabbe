"""The fleet view of InstanceTypes: one item per hardware pool, whatever cluster serves it.

Pure: a :class:`Fleet` is folded from ``(cluster, InstanceType)`` pairs and answers each later
change with the deltas a watcher sees.  The shape follows the reference's aggregated types:

- **item** — InstanceTypes grouped by their spec with ``inactive``, ``displayName`` and
  ``description`` blanked (an empty value equals an absent one).  Its name is built from the spec
  alone (:func:`item_name`), so the same pool reads the same everywhere; its ``spec`` is the first
  one seen.  ``status.detail`` is the hardware descriptor adopted from any candidate that reports
  it (a non-empty ``manufacturer``), with ``slicedDetail`` the Σ over every candidate.
- **tier** — the candidates of an item sharing one ``status.accelerator.onceMaxRequest``.
- **candidate** — one (cluster, InstanceType): cluster, name, phase, the five views as the cluster
  wrote them, and its ``acceleratorSlicedDetail``.
- **bundles** — a tier's ``onceMaxRequest`` is the whole bundle of its winning Active candidate
  (the first Active one seeds it, a later one replaces it only when larger on the primary
  dimension: accelerator when the type is acceleratable, else cpu); ``remaining`` is the Σ over
  Active candidates (others stay listed but count zero).  The item takes the bundle of its winning
  tier (a tier whose bundle is all zero cannot seed it) and the Σ of its tiers.  The partitioned
  dimension is a per-profile list: the winner's profiles capped at one in ``onceMaxRequest``, the
  Σ by profile name in ``remaining`` (a profile at zero stays listed).
- **order** — acceleratable items first, then by name; tiers ascending by the primary dimension
  of their bundle (ties by their accelerator ``onceMaxRequest``), kept sorted after every change.
- **deltas** — ADDED for a new item; MODIFIED when a candidate joins, leaves, changes or moves
  tier; DELETED (only the name) when the last candidate leaves.  A change that alters nothing a
  watcher sees (a resync, a status rewrite of the same numbers) emits nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from api.constants import PHASE_ACTIVE
from gateway import amounts
from gateway.amounts import Num, Obj, Profiles, SlicedSum

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
Change = tuple[str, Obj]  # (event type, aggregated object)

SCALARS = ("accelerator", "acceleratorShared", "acceleratorSliced", "cpu")
PARTITIONED = "acceleratorPartitioned"
VIEWS = ("accelerator", "acceleratorShared", "acceleratorSliced", PARTITIONED, "cpu")
"""The InstanceType status views every candidate carries and every bundle sums."""

CARRIED = frozenset({"phase", "detail", *VIEWS})
"""The InstanceType status fields the fleet view carries."""

NOT_CARRIED = {
    "entrance": "a LocalQueue name is per cluster; a client picks a candidate, then its entrance",
    "phaseMessage": "per-cluster prose; the candidate's phase is carried",
    "unitSummary": "a printer column string, derived from the spec the item carries",
    "acceleratorSummary": "a printer column string, derived from the views the candidates carry",
    "cpuSummary": "a printer column string, derived from the cpu view the candidates carry",
}
"""InstanceType status fields deliberately left out, and why (a new field must be put in one of
the two sets: ``tests/unit/test_gateway_mirror.py`` fails otherwise)."""

BLANKED = ("inactive", "displayName", "description")
"""Spec fields that do not split the grouping: administrative state and presentation."""


class Bundle:
    """One overview: the four scalar dimensions (in :data:`SCALARS` order) and the profiles."""

    __slots__ = ("profiles", "values")

    def __init__(self, values: tuple[Num, Num, Num, Num], profiles: Profiles = ()) -> None:
        self.values = values
        self.profiles = profiles

    def is_zero(self) -> bool:
        return not any(self.values) and not any(count for _, count in self.profiles)

    def to_json(self) -> Obj:
        a, shared, sliced, cpu = self.values
        out: Obj = {
            "accelerator": amounts.text(a),
            "acceleratorShared": amounts.text(shared),
            "acceleratorSliced": amounts.text(sliced),
        }
        if self.profiles:
            out[PARTITIONED] = amounts.profiles_json(self.profiles)
        out["cpu"] = amounts.text(cpu)
        return out


ZERO = Bundle((0, 0, 0, 0))


def _view(status: Mapping[str, Any], name: str) -> Obj:
    view = status.get(name)
    return view if isinstance(view, dict) else {}


class Candidate:
    """One cluster's InstanceType as the fleet view sees it."""

    __slots__ = (
        "active",
        "cluster",
        "json",
        "ledger",
        "name",
        "once",
        "phase",
        "remaining",
        "sliced",
        "tier",
    )

    def __init__(self, cluster: str, name: str, status: Mapping[str, Any]) -> None:
        self.cluster = cluster
        self.name = name
        phase = status.get("phase")
        self.phase = phase if isinstance(phase, str) else ""
        self.active = self.phase == PHASE_ACTIVE
        views = {view: _view(status, view) for view in VIEWS}
        number = amounts.number
        a, shared, sliced, cpu = (views[v] for v in SCALARS)
        self.once = (
            number(a.get("onceMaxRequest")),
            number(shared.get("onceMaxRequest")),
            number(sliced.get("onceMaxRequest")),
            number(cpu.get("onceMaxRequest")),
        )
        self.remaining = (
            number(a.get("remaining")),
            number(shared.get("remaining")),
            number(sliced.get("remaining")),
            number(cpu.get("remaining")),
        )
        self.tier: Num = self.once[0]
        self.ledger = amounts.profiles(views[PARTITIONED].get("remainingProfiles"))
        detail = status.get("detail")
        sliced_detail = detail.get("slicedDetail") if isinstance(detail, Mapping) else None
        self.sliced: Obj = sliced_detail if isinstance(sliced_detail, dict) else {}
        self.json: Obj = {
            "cluster": cluster,
            "name": name,
            "phase": self.phase,
            **views,
            "acceleratorSlicedDetail": self.sliced,
        }

    def same_as(self, other: Candidate) -> bool:
        return self.json == other.json


class Tier:
    """Candidates sharing one accelerator ``onceMaxRequest``, with their bundles."""

    __slots__ = ("candidates", "key", "once", "remaining", "sliced")

    def __init__(self, key: Num) -> None:
        self.key = key
        self.candidates: list[Candidate] = []
        self.once = ZERO
        self.remaining = ZERO
        self.sliced = SlicedSum()

    def recompute(self, primary: int) -> None:
        best: Candidate | None = None
        a = shared = sliced = cpu = 0
        ledgers: list[Profiles] = []
        detail = SlicedSum()
        for candidate in self.candidates:
            detail.add(candidate.sliced)  # capability: every candidate, whatever its phase
            if not candidate.active:
                continue
            if best is None or candidate.once[primary] > best.once[primary]:
                best = candidate
            r = candidate.remaining
            a += r[0]
            shared += r[1]
            sliced += r[2]
            cpu += r[3]
            if candidate.ledger:
                ledgers.append(candidate.ledger)
        self.once = ZERO if best is None else Bundle(best.once, amounts.cap_at_one(best.ledger))
        self.remaining = Bundle((a, shared, sliced, cpu), amounts.sum_profiles(ledgers))
        self.sliced = detail

    def to_json(self) -> Obj:
        return {
            "onceMaxRequest": self.once.to_json(),
            "remaining": self.remaining.to_json(),
            "candidates": [c.json for c in self.candidates],
            "acceleratorSlicedDetail": self.sliced.to_json(),
        }


def item_name(spec: Mapping[str, Any]) -> str:
    """``<general>-<accelerator>-<os>-<arch>-<cpu>c-<ram>g-<storage>g`` (CPU-only: no accelerator
    group and no cpu), ``Gi`` suffixes dropped: the same on every cluster serving the pool."""
    unit = spec.get("unitResources")
    unit = unit if isinstance(unit, Mapping) else {}
    ram = str(unit.get("ram") or "").removesuffix("Gi")
    storage = str(spec.get("localStorage") or "").removesuffix("Gi")
    general, os_, arch = (str(spec.get(k) or "") for k in ("generalGroup", "os", "arch"))
    if spec.get("acceleratable"):
        group, cpu = str(spec.get("acceleratorGroup") or ""), str(unit.get("cpu") or "")
        return f"{general}-{group}-{os_}-{arch}-{cpu}c-{ram}g-{storage}g"
    return f"{general}-{os_}-{arch}-{ram}g-{storage}g"


def _identity(detail: Any) -> Obj | None:
    """The descriptor without ``slicedDetail`` when it is ready (non-empty manufacturer)."""
    if isinstance(detail, Mapping) and detail.get("manufacturer"):
        return {k: v for k, v in detail.items() if k != "slicedDetail"}
    return None


class Item:
    """One hardware pool across the fleet."""

    __slots__ = ("acceleratable", "identity", "name", "once", "remaining", "sliced", "spec", "tiers")

    def __init__(self, spec: Obj, detail: Any) -> None:
        self.name = item_name(spec)
        self.spec = spec
        self.acceleratable = bool(spec.get("acceleratable"))
        first = detail if isinstance(detail, Mapping) else {}
        self.identity: Obj = {k: v for k, v in first.items() if k != "slicedDetail"}
        self.tiers: dict[Num, Tier] = {}
        self.once = ZERO
        self.remaining = ZERO
        self.sliced = SlicedSum()

    @property
    def primary(self) -> int:
        return 0 if self.acceleratable else 3

    def adopt(self, detail: Any) -> bool:
        """Take a ready candidate's descriptor; True when it changed what the item shows."""
        identity = _identity(detail)
        if identity is None or identity == self.identity:
            return False
        self.identity = identity
        return True

    def add(self, candidate: Candidate) -> Tier:
        tier = self.tiers.get(candidate.tier)
        if tier is None:
            tier = self.tiers[candidate.tier] = Tier(candidate.tier)
        tier.candidates.append(candidate)
        return tier

    def remove(self, candidate: Candidate) -> Tier | None:
        """Take ``candidate`` out; returns its tier, or None when the tier went with it."""
        tier = self.tiers[candidate.tier]
        tier.candidates.remove(candidate)
        if tier.candidates:
            return tier
        del self.tiers[candidate.tier]
        return None

    def recompute(self) -> None:
        """Sort the tiers and fold them into the item bundles and the slicing Σ."""
        p = self.primary
        self.tiers = dict(sorted(self.tiers.items(), key=lambda kv: (kv[1].once.values[p], kv[0])))
        best: Bundle | None = None
        a = shared = sliced = cpu = 0
        ledgers: list[Profiles] = []
        detail = SlicedSum()
        for tier in self.tiers.values():
            once = tier.once
            if not once.is_zero() and (best is None or once.values[p] > best.values[p]):
                best = once
            r = tier.remaining.values
            a += r[0]
            shared += r[1]
            sliced += r[2]
            cpu += r[3]
            if tier.remaining.profiles:
                ledgers.append(tier.remaining.profiles)
            detail.add_sum(tier.sliced)
        self.once = best or ZERO
        self.remaining = Bundle((a, shared, sliced, cpu), amounts.sum_profiles(ledgers))
        self.sliced = detail

    def to_json(self) -> Obj:
        return {
            "name": self.name,
            "spec": self.spec,
            "status": {
                "detail": {**self.identity, "slicedDetail": self.sliced.to_json()},
                "onceMaxRequest": self.once.to_json(),
                "remaining": self.remaining.to_json(),
                "tiers": [tier.to_json() for tier in self.tiers.values()],
            },
        }


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _mapping(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


class Fleet:
    """The fleet view of InstanceTypes, folded from clusters and kept current by their changes."""

    def __init__(self) -> None:
        self._items: dict[bytes, Item] = {}
        self._where: dict[tuple[str, str], tuple[bytes, Candidate]] = {}

    # Folding ------------------------------------------------------------------------------------

    def load(self, pairs: Iterable[tuple[str, Mapping[str, Any]]]) -> Fleet:
        """Fold a snapshot (no deltas), recomputing each tier and item once at the end."""
        for cluster, obj in pairs:
            if _meta(obj).get("deletionTimestamp"):
                continue
            self._place(cluster, obj)
        for item in self._items.values():
            for tier in item.tiers.values():
                tier.recompute(item.primary)
            item.recompute()
        return self

    def _place(self, cluster: str, obj: Mapping[str, Any]) -> None:
        name = str(_meta(obj).get("name") or "")
        if (cluster, name) in self._where:  # a snapshot names each object once; stay whole if not
            self.delete(cluster, name)
        spec, status = _mapping(obj.get("spec")), _mapping(obj.get("status"))
        key = amounts.spec_key(spec, BLANKED)
        item = self._items.get(key)
        if item is None:
            item = self._items[key] = Item(spec, status.get("detail"))
        item.adopt(status.get("detail"))
        candidate = Candidate(cluster, name, status)
        item.add(candidate)
        self._where[(cluster, name)] = (key, candidate)

    # Deltas -------------------------------------------------------------------------------------

    def apply(self, event_type: str, cluster: str, obj: Mapping[str, Any] | None) -> list[Change]:
        """The deltas one cluster event causes; ``obj`` None drops the whole cluster."""
        if obj is None:
            return self.drop_cluster(cluster) if event_type == DELETED else []
        if event_type == DELETED or _meta(obj).get("deletionTimestamp"):
            return self.delete(cluster, str(_meta(obj).get("name") or ""))
        return self.upsert(cluster, obj)

    def upsert(self, cluster: str, obj: Mapping[str, Any]) -> list[Change]:
        name = str(_meta(obj).get("name") or "")
        spec, status = _mapping(obj.get("spec")), _mapping(obj.get("status"))
        key = amounts.spec_key(spec, BLANKED)
        changes: list[Change] = []
        previous = self._where.get((cluster, name))
        if previous is not None and previous[0] != key:  # recreated with another spec
            changes += self.delete(cluster, name)
            previous = None
        candidate = Candidate(cluster, name, status)
        item = self._items.get(key)
        if item is None:
            item = self._items[key] = Item(spec, status.get("detail"))
            item.add(candidate).recompute(item.primary)
            item.recompute()
            self._where[(cluster, name)] = (key, candidate)
            return [*changes, (ADDED, item.to_json())]
        adopted = item.adopt(status.get("detail"))
        if previous is None:
            item.add(candidate).recompute(item.primary)
        else:
            old = previous[1]
            if old.same_as(candidate) and not adopted:
                return changes
            if old.tier == candidate.tier:
                tier = item.tiers[old.tier]
                tier.candidates[tier.candidates.index(old)] = candidate
                tier.recompute(item.primary)
            else:
                left = item.remove(old)
                if left is not None:
                    left.recompute(item.primary)
                item.add(candidate).recompute(item.primary)
        self._where[(cluster, name)] = (key, candidate)
        item.recompute()
        return [*changes, (MODIFIED, item.to_json())]

    def delete(self, cluster: str, name: str) -> list[Change]:
        previous = self._where.pop((cluster, name), None)
        if previous is None:
            return []
        key, candidate = previous
        item = self._items[key]
        left = item.remove(candidate)
        return [self._settle(key, item, [left] if left is not None else [])]

    def drop_cluster(self, cluster: str) -> list[Change]:
        """Remove every candidate of ``cluster``: one delta per item it was part of."""
        touched: dict[bytes, dict[int, Tier]] = {}
        for (member, name), (key, candidate) in list(self._where.items()):
            if member != cluster:
                continue
            del self._where[(member, name)]
            left = self._items[key].remove(candidate)
            tiers = touched.setdefault(key, {})
            if left is not None:
                tiers[id(left)] = left
        return [self._settle(key, self._items[key], list(left.values())) for key, left in touched.items()]

    def _settle(self, key: bytes, item: Item, tiers: list[Tier]) -> Change:
        if not item.tiers:
            del self._items[key]
            return (DELETED, {"name": item.name})
        for tier in tiers:
            if tier.key in item.tiers:
                tier.recompute(item.primary)
        item.recompute()
        return (MODIFIED, item.to_json())

    # Reading ------------------------------------------------------------------------------------

    def items(self) -> list[Item]:
        """Acceleratable items first, then by name (then by spec, for two specs of one name)."""
        return [
            item
            for _, item in sorted(
                self._items.items(), key=lambda kv: (not kv[1].acceleratable, kv[1].name, kv[0])
            )
        ]

    def to_json(self) -> Obj:
        return {"items": [item.to_json() for item in self.items()]}

    def __len__(self) -> int:
        return len(self._items)
