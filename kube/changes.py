"""Event filters for watch mappers: which informer events are worth a reconcile.

A mapper sees ``(event, object, old)``.  A resync (the manager's first pass, or the informer's
periodic one) hands the same object as both, and must always pass: a filter that only reacts to
differences would leave a restarted worker with nothing to do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def resync(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> bool:
    if old is None or old is obj:
        return True
    version = (obj.get("metadata") or {}).get("resourceVersion")
    return version is not None and version == (old.get("metadata") or {}).get("resourceVersion")


def path(obj: Mapping[str, Any] | None, *keys: str) -> Any:
    value: Any = obj or {}
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def moved(event: str, obj: Mapping[str, Any], old: Mapping[str, Any] | None, *paths: tuple[str, ...]) -> bool:
    """True on ADDED/DELETED, on a resync, or when any of ``paths`` differs between the two."""
    if event in ("ADDED", "DELETED") or resync(obj, old):
        return True
    return any(path(obj, *p) != path(old, *p) for p in paths)


def labels_moved(obj: Mapping[str, Any], old: Mapping[str, Any] | None, keep: Callable[[str], bool]) -> bool:
    """Some label for which ``keep(key)`` holds was added, removed or changed."""
    new = path(obj, "metadata", "labels") or {}
    before = path(old, "metadata", "labels") or {}
    return any(new.get(k) != before.get(k) for k in set(new) | set(before) if keep(k))


def name_of(obj: Mapping[str, Any]) -> str:
    return path(obj, "metadata", "name") or ""


def namespace_of(obj: Mapping[str, Any]) -> str:
    return path(obj, "metadata", "namespace") or ""
