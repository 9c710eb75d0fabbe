"""The ModelStore and ModelStoreBinding reconcilers (model-delivery spec §2.3, §4.9): their status.

- ModelStores: one key for all of them (a store's nodes and overlap depend on every other store and
  every node), so a burst of node or store changes costs one pass; each store's status is
  :func:`.pools.store_status`, written when it changes.
- ModelStoreBindings: keyed ``(namespace, name)``; :func:`.pools.binding_status` over the
  namespace's prefetches that name the binding, their artifacts, the granted stores' nodes and the
  NodeModelStores listing the digests.

Both write status by server-side apply under their own field manager; nothing else.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Hashable
from typing import Any, cast

from api import delivery as d
from api.objects import Obj
from controllers.delivery import pools
from fastpath import quantity
from kube import changes
from kube.manager import Controller, Manager, Watch
from kube.status import apply_status

ALL = "stores"
RESYNC = 300.0


def quantity_bytes(value: Any) -> int | None:
    """A quantity in whole bytes (rounded up); ``None`` when it is not one."""
    return cast(int | None, quantity.bytes_up(value))


def _labels_or_presence(event: str, obj: Obj, old: Obj | None) -> bool:
    return (
        event in ("ADDED", "DELETED")
        or changes.resync(obj, old)
        or changes.labels_moved(obj, old, lambda _: True)
    )


def _models_moved(event: str, obj: Obj, old: Obj | None) -> bool:
    return changes.moved(event, obj, old, ("status", "models"), ("status", "capacity"), ("spec", "store"))


class ModelStoreReconciler(Controller):
    name = "model-stores"

    def __init__(self, manager: Manager, *, clock: Callable[[], dt.datetime] | None = None) -> None:
        super().__init__(manager)
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self.stores = self.informer(d.KIND_STORE)
        self.nodes = self.informer("Node")
        self.node_stores = self.informer("NodeModelStore")

    def watches(self) -> list[Watch]:
        def every(event: str, obj: Obj, old: Obj | None) -> list[str]:
            return [ALL]

        def node(event: str, obj: Obj, old: Obj | None) -> list[str]:
            return [ALL] if _labels_or_presence(event, obj, old) else []

        def node_store(event: str, obj: Obj, old: Obj | None) -> list[str]:
            return [ALL] if _models_moved(event, obj, old) else []

        return [Watch(d.KIND_STORE, every), Watch("Node", node), Watch("NodeModelStore", node_store)]

    def reconcile(self, key: Hashable) -> float | None:
        stores = self.stores.list()
        nodes = self.nodes.list()
        by_node = self.node_stores.by_name()
        now = self.clock()
        for store in stores:
            if (store.get("metadata") or {}).get("deletionTimestamp"):
                continue
            status = pools.store_status(store, stores, nodes, by_node, now)
            apply_status(self.client, d.KIND_STORE, store, status, d.FIELD_MANAGER_STORES)
        return RESYNC


def _binding_of(prefetch: Obj) -> list[str]:
    name = ((prefetch.get("spec") or {}).get("bindingRef") or {}).get("name")
    return [f"{changes.namespace_of(prefetch)}/{name}"] if name else []


def _artifact_of(prefetch: Obj) -> list[str]:
    name = ((prefetch.get("spec") or {}).get("artifactRef") or {}).get("name")
    return [f"{changes.namespace_of(prefetch)}/{name}"] if name else []


def _stores_of(binding: Obj) -> list[str]:
    return [
        str(ref.get("name"))
        for ref in (binding.get("spec") or {}).get("storeRefs") or []
        if isinstance(ref, dict)
    ]


class ModelStoreBindingReconciler(Controller):
    name = "model-store-bindings"

    def __init__(self, manager: Manager, *, clock: Callable[[], dt.datetime] | None = None) -> None:
        super().__init__(manager)
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self.bindings = manager.informer(d.KIND_BINDING, indexes={"store": _stores_of})
        self.prefetches = manager.informer(
            d.KIND_PREFETCH, indexes={"binding": _binding_of, "artifact": _artifact_of}
        )
        self.artifacts = manager.informer(d.KIND_ARTIFACT)
        self.stores = self.informer(d.KIND_STORE)
        self.nodes = self.informer("Node")
        self.node_stores = self.informer("NodeModelStore")

    def _every(self) -> list[tuple[str, str]]:
        return [(changes.namespace_of(b), changes.name_of(b)) for b in self.bindings.list()]

    def watches(self) -> list[Watch]:
        def binding(event: str, obj: Obj, old: Obj | None) -> list[tuple[str, str]]:
            return [] if event == "DELETED" else [(changes.namespace_of(obj), changes.name_of(obj))]

        def prefetch(event: str, obj: Obj, old: Obj | None) -> list[tuple[str, str]]:
            keys = {tuple(k.split("/", 1)) for o in (obj, old) if o for k in _binding_of(o)}
            return [cast(tuple[str, str], k) for k in keys]

        def artifact(event: str, obj: Obj, old: Obj | None) -> list[tuple[str, str]]:
            key = f"{changes.namespace_of(obj)}/{changes.name_of(obj)}"
            return [
                cast(tuple[str, str], tuple(k.split("/", 1)))
                for p in self.prefetches.by_index("artifact", key)
                for k in _binding_of(p)
            ]

        def store(event: str, obj: Obj, old: Obj | None) -> list[tuple[str, str]]:
            return [
                (changes.namespace_of(b), changes.name_of(b))
                for b in self.bindings.by_index("store", changes.name_of(obj))
            ]

        def node(event: str, obj: Obj, old: Obj | None) -> list[tuple[str, str]]:
            return self._every() if _labels_or_presence(event, obj, old) else []

        def node_store(event: str, obj: Obj, old: Obj | None) -> list[tuple[str, str]]:
            if not changes.moved(event, obj, old, ("status", "models")):
                return []
            return self._every()

        return [
            Watch(d.KIND_BINDING, binding),
            Watch(d.KIND_PREFETCH, prefetch),
            Watch(d.KIND_ARTIFACT, artifact),
            Watch(d.KIND_STORE, store),
            Watch("Node", node),
            Watch("NodeModelStore", node_store),
        ]

    def reconcile(self, key: Hashable) -> float | None:
        namespace, name = cast(tuple[str, str], key)
        binding = self.bindings.get(name, namespace)
        if binding is None or (binding.get("metadata") or {}).get("deletionTimestamp"):
            return None
        prefetches = self.prefetches.by_index("binding", f"{namespace}/{name}")
        artifacts: dict[str, Any] = {}
        for prefetch in prefetches:
            ref = ((prefetch.get("spec") or {}).get("artifactRef") or {}).get("name")
            if ref and ref not in artifacts:
                found = self.artifacts.get(ref, namespace)
                if found is not None:
                    artifacts[ref] = found
        stores = self.stores.by_name()
        quota = quantity_bytes(((binding.get("spec") or {}).get("quota") or {}).get("bytes"))
        status = pools.binding_status(
            binding,
            prefetches,
            artifacts,
            stores,
            self.nodes.list(),
            self.node_stores.list(),
            quota,
            self.clock(),
        )
        apply_status(
            self.client, d.KIND_BINDING, binding, status, d.FIELD_MANAGER_BINDINGS, droppable=("usedBytes",)
        )
        return None
