"""A status written by server-side apply under a field manager of its own, so several writers
share one status, each owning its fields and list entries; skipped when the object already reads
so (no write, no event, no resourceVersion churn on a converged pass)."""

from __future__ import annotations

from api.objects import Obj
from kube.client import Client

DEFAULT_API_VERSION = "worker.gpustack.ai/v1"


def apply_status(
    client: Client, kind: str, obj: Obj, status: Obj, manager: str, droppable: tuple[str, ...] = ()
) -> bool:
    """Apply ``status`` under ``manager`` unless the object already reads so (and no ``droppable``
    field this manager wrote must disappear); True when written."""
    meta = obj.get("metadata") or {}
    current = obj.get("status") or {}
    if all(current.get(k) == v for k, v in status.items()) and not any(
        k in current and k not in status for k in droppable
    ):
        return False
    body: Obj = {
        "apiVersion": obj.get("apiVersion") or DEFAULT_API_VERSION,
        "kind": kind,
        "metadata": {"name": meta.get("name")},
        "status": status,
    }
    if meta.get("namespace"):
        body["metadata"]["namespace"] = meta["namespace"]
    client.apply(body, field_manager=manager, subresource="status")
    return True


def replacing(current: Obj, desired: Obj) -> Obj:
    """The top level of a merge patch that turns ``current`` into ``desired``: every key of
    ``desired``, and each key only ``current`` has as null (a merge patch never removes a key it
    does not name, so a stale one would stay)."""
    return {**{k: None for k in current if k not in desired}, **desired}
