"""What a collection answers: raw per-cluster items, the fleet views, and watch lines.

Pure.  A raw item is the cluster's object with ``cluster`` added and ``metadata.managedFields``
removed; a watch line is one JSON object ``{type, cluster, object}`` and a newline.  An object being
deleted (``deletionTimestamp`` set) is reported as DELETED, as the reference does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from api.objects import Obj
from gateway.events import DELETED, WorkerEvent
from gateway.flavors import Catalog
from gateway.fleet import Fleet
from gateway.kinds import Kind


def clustered(cluster: str, obj: Obj) -> Obj:
    """``obj`` as the gateway serves it (a new dict: the cache's own object is never changed)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        meta = {k: v for k, v in meta.items() if k != "managedFields"}
    return {**obj, "metadata": meta, "cluster": cluster} if meta is not None else {**obj, "cluster": cluster}


def in_namespace(obj: Obj | None, kind: Kind, namespace: str) -> bool:
    if not namespace or not kind.namespaced or obj is None:
        return True
    meta = obj.get("metadata")
    return isinstance(meta, dict) and meta.get("namespace") == namespace


def raw_list(pairs: Iterable[tuple[str, Obj]], kind: Kind, namespace: str = "") -> Obj:
    return {"items": [clustered(c, obj) for c, obj in pairs if in_namespace(obj, kind, namespace)]}


def aggregated_list(pairs: list[tuple[str, Obj]], kind: Kind) -> Obj:
    if kind.kind == "InstanceType":
        return Fleet().load(pairs).to_json()
    return Catalog().load(pairs).to_json()


def line(event_type: str, cluster: str, obj: Any) -> bytes:
    """One NDJSON watch line; ``obj`` may already be JSON text (bytes)."""
    encoded = obj if isinstance(obj, bytes) else orjson.dumps(obj)
    return b"".join(
        (
            b'{"type":',
            orjson.dumps(event_type),
            b',"cluster":',
            orjson.dumps(cluster),
            b',"object":',
            encoded,
            b"}\n",
        )
    )


def raw_line(event: WorkerEvent, kind: Kind, namespace: str = "") -> bytes | None:
    """The line a raw watcher gets for ``event``, or None when its namespace filter hides it.

    A dropped cluster (DELETED with no object) is passed on as is: the watcher drops its items."""
    obj = event.object
    if obj is None:
        return line(event.type, event.cluster, None)
    if not in_namespace(obj, kind, namespace):
        return None
    meta = obj.get("metadata")
    deleting = isinstance(meta, dict) and bool(meta.get("deletionTimestamp"))
    return line(DELETED if deleting else event.type, event.cluster, clustered(event.cluster, obj))


class AggregatedWatch:
    """The fleet view a watcher holds: seeded from a snapshot, moved by each event."""

    def __init__(self, kind: Kind, pairs: list[tuple[str, Obj]]) -> None:
        self.view: Fleet | Catalog = (
            Fleet(encoded=True).load(pairs) if kind.kind == "InstanceType" else Catalog().load(pairs)
        )

    def lines(self, event: WorkerEvent) -> list[bytes]:
        return [
            line(t, event.cluster, obj) for t, obj in self.view.apply(event.type, event.cluster, event.object)
        ]
