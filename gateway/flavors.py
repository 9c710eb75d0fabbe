"""The fleet view of InstanceTypeFlavors: the catalog of pools, de-duplicated across clusters.

Pure.  Flavors are grouped by their whole spec (an empty value equal to an absent one); an item
carries the first-seen flavor's name, the spec, and ``spec.clusters``, the sorted clusters that have
such a flavor.  Deltas: ADDED when a spec's first cluster contributes, MODIFIED when the cluster
list changes, DELETED (name, spec and an empty cluster list) when its last cluster leaves.  Order of
a list: accelerated flavors first, then by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from api.objects import Obj
from gateway import amounts
from gateway.fleet import ADDED, DELETED, MODIFIED, Change


class Group:
    """The flavors of one spec: which names each cluster has for it."""

    __slots__ = ("members", "name", "spec")

    def __init__(self, name: str, spec: Obj) -> None:
        self.name = name
        self.spec = spec
        self.members: dict[str, set[str]] = {}

    def clusters(self) -> list[str]:
        return sorted(self.members)

    def to_json(self, clusters: list[str] | None = None) -> Obj:
        spec = {**self.spec, "clusters": self.clusters() if clusters is None else clusters}
        return {"name": self.name, "spec": spec}


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("name") or "") if isinstance(meta, Mapping) else ""


def _deleting(obj: Mapping[str, Any]) -> bool:
    meta = obj.get("metadata")
    return isinstance(meta, Mapping) and bool(meta.get("deletionTimestamp"))


class Catalog:
    """The de-duplicated flavor catalog, folded from clusters and kept current by their changes."""

    def __init__(self) -> None:
        self._groups: dict[bytes, Group] = {}
        self._where: dict[tuple[str, str], bytes] = {}

    def load(self, pairs: Iterable[tuple[str, Mapping[str, Any]]]) -> Catalog:
        for cluster, obj in pairs:
            if not _deleting(obj):
                self.upsert(cluster, obj)
        return self

    def apply(self, event_type: str, cluster: str, obj: Mapping[str, Any] | None) -> list[Change]:
        if obj is None:
            return self.drop_cluster(cluster) if event_type == DELETED else []
        if event_type == DELETED or _deleting(obj):
            return self.delete(cluster, _name(obj))
        return self.upsert(cluster, obj)

    def upsert(self, cluster: str, obj: Mapping[str, Any]) -> list[Change]:
        name = _name(obj)
        raw = obj.get("spec")
        spec: Obj = raw if isinstance(raw, dict) else {}
        key = amounts.spec_key(spec)
        changes: list[Change] = []
        previous = self._where.get((cluster, name))
        if previous == key:
            return changes
        if previous is not None:
            changes += self.delete(cluster, name)
        self._where[(cluster, name)] = key
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = Group(name, spec)
            group.members[cluster] = {name}
            return [*changes, (ADDED, group.to_json())]
        names = group.members.setdefault(cluster, set())
        joined = not names
        names.add(name)
        return [*changes, (MODIFIED, group.to_json())] if joined else changes

    def delete(self, cluster: str, name: str) -> list[Change]:
        key = self._where.pop((cluster, name), None)
        if key is None:
            return []
        group = self._groups[key]
        names = group.members[cluster]
        names.discard(name)
        if names:
            return []
        del group.members[cluster]
        return [self._settle(key, group)]

    def drop_cluster(self, cluster: str) -> list[Change]:
        keys = [key for (member, _), key in self._where.items() if member == cluster]
        for member_name in [k for k in self._where if k[0] == cluster]:
            del self._where[member_name]
        changes: list[Change] = []
        for key in dict.fromkeys(keys):
            group = self._groups[key]
            if group.members.pop(cluster, None) is not None:
                changes.append(self._settle(key, group))
        return changes

    def _settle(self, key: bytes, group: Group) -> Change:
        if group.members:
            return (MODIFIED, group.to_json())
        del self._groups[key]
        return (DELETED, group.to_json(clusters=[]))

    def groups(self) -> list[Group]:
        return [
            group
            for _, group in sorted(
                self._groups.items(),
                key=lambda kv: (not kv[1].spec.get("acceleratable"), kv[1].name, kv[0]),
            )
        ]

    def to_json(self) -> Obj:
        return {"items": [group.to_json() for group in self.groups()]}
