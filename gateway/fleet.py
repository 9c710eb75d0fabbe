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

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from api.constants import PHASE_ACTIVE
from api.objects import Obj
from gateway import amounts
from gateway.amounts import Num, Profiles, SlicedSum

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
Change = tuple[str, Any]  # (event type, aggregated object: a dict, or JSON text when encoded)

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

    __slots__ = ("_json", "profiles", "values")

    def __init__(self, values: tuple[Num, Num, Num, Num], profiles: Profiles = ()) -> None:
        self.values = values
        self.profiles = profiles
        self._json: Obj | None = None

    def is_zero(self) -> bool:
        return not any(self.values) and not any(count for _, count in self.profiles)

    def to_json(self) -> Obj:
        """The overview as JSON (rendered once; treat it as read-only)."""
        if self._json is None:
            self._json = self._render()
        return self._json

    def _render(self) -> Obj:
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
    return view if type(view) is dict else {}


class Candidate:
    """One cluster's InstanceType as the fleet view sees it (read once, never changed)."""

    __slots__ = (
        "_encoded",
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
        self.phase = phase if type(phase) is str else ""
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
        raw = detail.get("slicedDetail") if type(detail) is dict else None
        sliced_detail: Obj = raw if type(raw) is dict else {}
        self.sliced = amounts.sliced(sliced_detail)
        self.json: Obj = {
            "cluster": cluster,
            "name": name,
            "phase": self.phase,
            **views,
            "acceleratorSlicedDetail": sliced_detail,
        }
        self._encoded: bytes | None = None

    @property
    def encoded(self) -> bytes:
        """``json`` as JSON text, encoded once: an item is re-sent whole on every change."""
        if self._encoded is None:
            self._encoded = orjson.dumps(self.json)
        return self._encoded

    def same_as(self, other: Candidate) -> bool:
        return self.json == other.json


class Tier:
    """Candidates sharing one accelerator ``onceMaxRequest``, with their bundles.

    The Σ over Active candidates is kept as candidates come, change and go (exact: quantities are
    whole numbers or fractions), so a change costs what it touches, not the tier's size; the
    winner is found again in :meth:`settle`."""

    __slots__ = ("_bytes", "_json", "candidates", "key", "ledger", "once", "remaining", "sliced", "totals")

    def __init__(self, key: Num) -> None:
        self.key = key
        self.candidates: list[Candidate] = []
        self.totals: tuple[Num, Num, Num, Num] = (0, 0, 0, 0)
        self.ledger: dict[str, list[int]] = {}  # profile -> [Σ count, Active candidates listing it]
        self.once = ZERO
        self.remaining = ZERO
        self.sliced = SlicedSum()  # capability: every candidate, whatever its phase
        self._json: Obj | None = None
        self._bytes: bytes | None = None

    def _count(self, candidate: Candidate, sign: int) -> None:
        self._json = self._bytes = None
        self.sliced.add(candidate.sliced, sign)
        if not candidate.active:
            return
        t, r = self.totals, candidate.remaining
        if sign > 0:
            self.totals = (t[0] + r[0], t[1] + r[1], t[2] + r[2], t[3] + r[3])
        else:
            self.totals = (t[0] - r[0], t[1] - r[1], t[2] - r[2], t[3] - r[3])
        for name, count in candidate.ledger:
            entry = self.ledger.get(name)
            if entry is None:
                entry = self.ledger[name] = [0, 0]
            entry[0] += sign * count
            entry[1] += sign
            if entry[1] == 0:
                del self.ledger[name]

    def add(self, candidate: Candidate) -> None:
        self.candidates.append(candidate)
        self._count(candidate, 1)

    def remove(self, candidate: Candidate) -> None:
        self.candidates.remove(candidate)
        self._count(candidate, -1)

    def replace(self, old: Candidate, new: Candidate) -> None:
        self.candidates[self.candidates.index(old)] = new
        self._count(old, -1)
        self._count(new, 1)

    def settle(self, primary: int) -> None:
        """Find the winning bundle again and take the Σ as a bundle."""
        self._json = self._bytes = None
        self.remaining = Bundle(self.totals, tuple(sorted((name, e[0]) for name, e in self.ledger.items())))
        best: Candidate | None = None
        for candidate in self.candidates:
            if candidate.active and (best is None or candidate.once[primary] > best.once[primary]):
                best = candidate
                if primary == 0:  # one tier, one accelerator onceMaxRequest: the first Active wins
                    break
        self.once = ZERO if best is None else Bundle(best.once, amounts.cap_at_one(best.ledger))

    def to_json(self) -> Obj:
        """The tier as JSON (rendered once per change; treat it as read-only)."""
        if self._json is None:
            self._json = {
                "onceMaxRequest": self.once.to_json(),
                "remaining": self.remaining.to_json(),
                "candidates": [c.json for c in self.candidates],
                "acceleratorSlicedDetail": self.sliced.to_json(),
            }
        return self._json

    def to_bytes(self) -> bytes:
        """:meth:`to_json` as JSON text, splicing in each candidate's cached encoding."""
        if self._bytes is None:
            self._bytes = self._encode()
        return self._bytes

    def _encode(self) -> bytes:
        dumps = orjson.dumps
        return b"".join(
            (
                b'{"onceMaxRequest":',
                dumps(self.once.to_json()),
                b',"remaining":',
                dumps(self.remaining.to_json()),
                b',"candidates":[',
                b",".join([c.encoded for c in self.candidates]),
                b'],"acceleratorSlicedDetail":',
                dumps(self.sliced.to_json()),
                b"}",
            )
        )


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
    if type(detail) is dict and detail.get("manufacturer"):
        return {k: v for k, v in detail.items() if k != "slicedDetail"}
    return None


class Item:
    """One hardware pool across the fleet."""

    __slots__ = ("acceleratable", "identity", "name", "once", "remaining", "sliced", "spec", "tiers")

    def __init__(self, spec: Obj, detail: Any) -> None:
        self.name = item_name(spec)
        self.spec = spec
        self.acceleratable = bool(spec.get("acceleratable"))
        first = detail if type(detail) is dict else {}
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
        tier.add(candidate)
        return tier

    def remove(self, candidate: Candidate) -> Tier:
        """Take ``candidate`` out (its tier too, when it was the last); returns the tier."""
        tier = self.tiers[candidate.tier]
        tier.remove(candidate)
        if not tier.candidates:
            del self.tiers[candidate.tier]
        return tier

    def replace(self, old: Candidate, new: Candidate) -> list[Tier]:
        """Put ``new`` where ``old`` was, moving tiers when its accelerator once changed."""
        if old.tier == new.tier:
            tier = self.tiers[old.tier]
            tier.replace(old, new)
            return [tier]
        return [self.remove(old), self.add(new)]

    def settle(self, touched: Iterable[Tier]) -> None:
        """Settle the ``touched`` tiers, sort the tiers, fold them into the item's bundles."""
        p = self.primary
        for tier in touched:
            if self.tiers.get(tier.key) is tier:
                tier.settle(p)
        self.tiers = dict(sorted(self.tiers.items(), key=lambda kv: (kv[1].once.values[p], kv[0])))
        best: Bundle | None = None
        a: Num = 0
        shared: Num = 0
        sliced: Num = 0
        cpu: Num = 0
        ledgers: list[Profiles] = []
        detail = SlicedSum()
        for tier in self.tiers.values():
            once = tier.once
            if not once.is_zero() and (best is None or once.values[p] > best.values[p]):
                best = once
            remaining = tier.remaining
            r = remaining.values
            a += r[0]
            shared += r[1]
            sliced += r[2]
            cpu += r[3]
            if remaining.profiles:
                ledgers.append(remaining.profiles)
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

    def to_bytes(self) -> bytes:
        """:meth:`to_json` as JSON text, without re-encoding unchanged candidates."""
        dumps = orjson.dumps
        head = {
            "detail": {**self.identity, "slicedDetail": self.sliced.to_json()},
            "onceMaxRequest": self.once.to_json(),
            "remaining": self.remaining.to_json(),
        }
        return b"".join(
            (
                b'{"name":',
                dumps(self.name),
                b',"spec":',
                dumps(self.spec),
                b',"status":',
                dumps(head)[:-1],
                b',"tiers":[',
                b",".join([tier.to_bytes() for tier in self.tiers.values()]),
                b"]}}",
            )
        )


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _mapping(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


class Fleet:
    """The fleet view of InstanceTypes, folded from clusters and kept current by their changes.

    A delta carries the item as a dict, or with ``encoded=True`` as JSON text (what a watch sends;
    cheaper, because each candidate is encoded once however often its item is re-sent)."""

    def __init__(self, *, encoded: bool = False) -> None:
        self._render: Callable[[Item], Any] = Item.to_bytes if encoded else Item.to_json
        self._encoded = encoded
        self._items: dict[bytes, Item] = {}
        self._where: dict[tuple[str, str], tuple[bytes, Candidate]] = {}

    # Folding ------------------------------------------------------------------------------------

    def load(self, pairs: Iterable[tuple[str, Mapping[str, Any]]]) -> Fleet:
        """Fold a snapshot (no deltas), settling each item once at the end."""
        for cluster, obj in pairs:
            meta = _meta(obj)
            if meta.get("deletionTimestamp"):
                continue
            name = str(meta.get("name") or "")
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
        for item in self._items.values():
            item.settle(list(item.tiers.values()))
        return self

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
            item.settle([item.add(candidate)])
            self._where[(cluster, name)] = (key, candidate)
            return [*changes, (ADDED, self._render(item))]
        adopted = item.adopt(status.get("detail"))
        if previous is None:
            touched = [item.add(candidate)]
        elif previous[1].same_as(candidate) and not adopted:
            return changes
        else:
            touched = item.replace(previous[1], candidate)
        self._where[(cluster, name)] = (key, candidate)
        item.settle(touched)
        return [*changes, (MODIFIED, self._render(item))]

    def delete(self, cluster: str, name: str) -> list[Change]:
        previous = self._where.pop((cluster, name), None)
        if previous is None:
            return []
        key, candidate = previous
        item = self._items[key]
        return [self._settle(key, item, [item.remove(candidate)])]

    def drop_cluster(self, cluster: str) -> list[Change]:
        """Remove every candidate of ``cluster``: one delta per item it was part of."""
        touched: dict[bytes, dict[int, Tier]] = {}
        for (member, name), (key, candidate) in list(self._where.items()):
            if member != cluster:
                continue
            del self._where[(member, name)]
            tier = self._items[key].remove(candidate)
            touched.setdefault(key, {})[id(tier)] = tier
        return [self._settle(key, self._items[key], list(tiers.values())) for key, tiers in touched.items()]

    def _settle(self, key: bytes, item: Item, tiers: list[Tier]) -> Change:
        if not item.tiers:
            del self._items[key]
            gone = {"name": item.name}
            return (DELETED, orjson.dumps(gone) if self._encoded else gone)
        item.settle(tiers)
        return (MODIFIED, self._render(item))

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
