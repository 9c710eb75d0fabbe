"""The three writes every KV-cache reconciler makes: status by server-side apply under a field
manager of its own (so several writers share one status, each owning its fields and list entries),
and adding or removing its finalizer (the first lives in kube.status)."""

from __future__ import annotations

from api.objects import Obj
from kube.client import JSON_PATCH, ApiError, Client
from kube.status import apply_status as apply_status  # the status write, shared with delivery

API_VERSION = "worker.gpustack.ai/v1"


def add_finalizer(client: Client, kind: str, obj: Obj, finalizer: str) -> None:
    meta = obj.get("metadata") or {}
    finalizers = meta.get("finalizers") or []
    if finalizer not in finalizers:
        client.patch(
            kind,
            str(meta.get("name")),
            {"metadata": {"finalizers": [*finalizers, finalizer]}},
            namespace=meta.get("namespace") or "",
        )


def remove_finalizer(client: Client, kind: str, obj: Obj, finalizer: str) -> None:
    """Remove ``finalizer`` by position, guarded by a test op (another writer's edit is not undone)."""
    meta = obj.get("metadata") or {}
    finalizers = meta.get("finalizers") or []
    if finalizer not in finalizers:
        return
    index = finalizers.index(finalizer)
    try:
        client.patch(
            kind,
            str(meta.get("name")),
            [
                {"op": "test", "path": f"/metadata/finalizers/{index}", "value": finalizer},
                {"op": "remove", "path": f"/metadata/finalizers/{index}"},
            ],
            namespace=meta.get("namespace") or "",
            content_type=JSON_PATCH,
        )
    except ApiError as error:
        if not error.not_found:
            raise
