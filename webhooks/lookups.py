"""How decision functions read cluster objects.

A decision function never talks to the apiserver itself: it receives a :class:`Lookups` and awaits
its reads.  Two implementations exist: :class:`FileLookups` over YAML files (``admit``, load tests,
unit tests) and ``webhooks.live.LiveLookups`` (a watch-backed cache where staleness is harmless,
direct GETs where the spec says a stale cache must not decide).

Every read returns the object as a plain dict, or ``None`` when it does not exist.  A read that
cannot be answered (apiserver unreachable, deadline passed) raises :class:`LookupFailed`; handlers
turn that into a retryable internal error, never into a field error.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from api import constants
from api.booleans import parse_bool
from api.objects import Obj
from webhooks import documents


class LookupFailed(Exception):
    """A read that could not be answered; retryable."""


class Lookups:
    """The reads admission decisions make.  Subclasses implement :meth:`get` and :meth:`list`."""

    async def get(self, kind: str, name: str, namespace: str = "", *, fresh: bool = False) -> Obj | None:
        """One object of ``kind`` (``InstanceType``, ``Node``, ``LocalQueue``...).  ``fresh`` asks
        for a direct read that bypasses any cache."""
        raise NotImplementedError

    async def list(self, kind: str, namespace: str = "") -> list[Obj]:
        raise NotImplementedError

    def synced(self) -> bool:
        """True once every cache the decisions read has been filled."""
        return True

    # Conveniences every handler uses -------------------------------------------------------------

    async def instance_type(self, name: str, *, fresh: bool = False) -> Obj | None:
        return await self.get("InstanceType", name, fresh=fresh)

    async def instance_type_by_entrance(self, queue_name: str) -> Obj | None:
        """The InstanceType whose ``schedule.gpustack.ai/queue-entrance`` label is ``queue_name``."""
        for item in await self.list("InstanceType"):
            if (item.get("metadata", {}).get("labels") or {}).get(
                constants.LABEL_QUEUE_ENTRANCE
            ) == queue_name:
                return item
        return None

    async def setting(self, name: str) -> str:
        """The value of Setting ``name``, or its registered default when none is stored."""
        obj = await self.get("Setting", name, constants.SYSTEM_NAMESPACE)
        if obj is not None:
            value = (obj.get("spec") or {}).get("value")
            if isinstance(value, str):
                return value
        from api.settings import definition

        return definition(name).default

    async def setting_enabled(self, name: str) -> bool:
        """A boolean Setting, read with the one parser controllers use too; a stored value that is
        not a boolean reads as the registered default (the Setting webhook refuses such writes)."""
        from api.settings import definition

        try:
            return parse_bool(await self.setting(name))
        except ValueError:
            return parse_bool(definition(name).default)


class FileLookups(Lookups):
    """Lookups answered from YAML documents (a directory of files, or objects given directly)."""

    def __init__(self, objects: Iterable[Obj] = ()) -> None:
        self._objects: dict[tuple[str, str, str], Obj] = {}
        self._by_kind: dict[str, list[Obj]] = {}
        for obj in objects:
            self.add(obj)

    @classmethod
    def from_directory(cls, directory: str | Path) -> FileLookups:
        """Every ``*.yaml``/``*.yml``/``*.json`` file under ``directory``, recursively."""
        root = Path(directory)
        if not root.is_dir():
            raise FileNotFoundError(f"{root}: not a directory of cluster objects")
        objects: list[Obj] = []
        for path in sorted(p for p in root.rglob("*") if p.suffix in (".yaml", ".yml", ".json")):
            objects.extend(documents.read_objects(str(path)))
        return cls(objects)

    def add(self, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        key = (obj["kind"], meta.get("namespace") or "", meta.get("name") or "")
        if key in self._objects:
            self._by_kind[obj["kind"]].remove(self._objects[key])
        self._objects[key] = obj
        self._by_kind.setdefault(obj["kind"], []).append(obj)

    async def get(self, kind: str, name: str, namespace: str = "", *, fresh: bool = False) -> Obj | None:
        return self._objects.get((kind, namespace, name))

    async def list(self, kind: str, namespace: str = "") -> list[Obj]:
        items = self._by_kind.get(kind, [])
        if namespace:
            return [i for i in items if (i.get("metadata") or {}).get("namespace") == namespace]
        return list(items)
