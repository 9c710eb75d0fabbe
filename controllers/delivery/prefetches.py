"""The ModelPrefetch reconciler (model-delivery spec §4.9): warm-up Pods, status and pins.

Two kinds of key:

- ``(namespace, name)``: one prefetch's pass — :func:`.prefetch_plan.plan` over what the caches
  hold (its target set through the same expansion admission uses, its grant, the target nodes'
  NodeModelStores, its warm-up Pods), then the writes: Pods created and deleted, lapse marks on
  Pods, status by server-side apply;
- :data:`PINS`: the union of every prefetch's pins per node written to ``NodeModelStore.spec.pinned``
  under this controller's own field manager — the field's single writer, so two namespaces pinning
  one node keep both digests, and a deleted, lapsed or retargeted prefetch drops only its own.

Deleting a prefetch drops its Pods (owner references) and, on the next pins pass, its pins; the
bytes go through the node's ordinary collection.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Hashable, Mapping
from typing import Any, cast

from api import constants, images
from api import delivery as d
from api import prefetch as pf
from api.objects import Obj
from controllers.delivery import prefetch_plan as pp
from controllers.settings import AWARE_CPU, SettingsReader
from kube import changes
from kube.client import ApiError
from kube.manager import Controller, Manager, Watch
from kube.status import apply_status

log = logging.getLogger("controllers.delivery.prefetches")
PINS = "pins"
RESYNC = 300.0
# Settings whose change wakes every prefetch: what a warm-up Pod runs (its image, under the
# container-* Settings) and where.
WAKING_SETTINGS = (
    d.SETTING_WARMUP_IMAGE,
    images.SETTING_CONTAINER_REGISTRY,
    images.SETTING_CONTAINER_NAMESPACE,
    AWARE_CPU,
)


def _ref(obj: Obj, field: str) -> list[str]:
    name = ((obj.get("spec") or {}).get(field) or {}).get("name")
    return [f"{changes.namespace_of(obj)}/{name}"] if name else []


def _digest(obj: Obj) -> list[str]:
    digest = (((obj.get("status") or {}).get("resolved") or {}).get("manifestDigest")) or ""
    return [digest] if digest else []


def _namespace(obj: Obj) -> list[str]:
    return [changes.namespace_of(obj)]


def _digests(store: Obj | None) -> set[str]:
    return {
        str(m.get("digest"))
        for m in ((store or {}).get("status") or {}).get("models") or []
        if isinstance(m, Mapping) and m.get("digest")
    }


class ModelPrefetchReconciler(Controller):
    name = "model-prefetches"

    def __init__(self, manager: Manager, *, clock: Callable[[], dt.datetime] | None = None) -> None:
        super().__init__(manager)
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self.prefetches = manager.informer(
            d.KIND_PREFETCH,
            indexes={
                "artifact": lambda o: _ref(o, "artifactRef"),
                "binding": lambda o: _ref(o, "bindingRef"),
                "namespace": _namespace,
            },
        )
        self.artifacts = manager.informer(d.KIND_ARTIFACT, indexes={"digest": _digest})
        self.bindings = self.informer(d.KIND_BINDING)
        self.stores = self.informer(d.KIND_STORE)
        self.nodes = self.informer("Node")
        self.node_stores = self.informer("NodeModelStore")
        self.instance_types = self.informer("InstanceType")
        self.flavors = self.informer("ResourceFlavor")
        self.deployments = manager.informer("ModelDeployment", indexes={"namespace": _namespace})
        self.pods = manager.informer(
            "Pod", label_selector=d.LABEL_PREFETCH, indexes={"owner": self._pod_owner}
        )
        self.drivers = self.informer("CSIDriver")
        self.settings = SettingsReader(self.informer("Setting", constants.SYSTEM_NAMESPACE))

    @staticmethod
    def _pod_owner(pod: Obj) -> list[str]:
        owner = pp.owner_of(pod)
        return [f"{changes.namespace_of(pod)}/{owner}"] if owner else []

    # --- watches ------------------------------------------------------------------------------------

    def _all(self) -> list[Hashable]:
        return [*((changes.namespace_of(p), changes.name_of(p)) for p in self.prefetches.list()), PINS]

    def _by(self, index: str, value: str) -> list[Hashable]:
        return [(changes.namespace_of(p), changes.name_of(p)) for p in self.prefetches.by_index(index, value)]

    def watches(self) -> list[Watch]:
        def prefetch(event: str, obj: Obj, old: Obj | None) -> list[Hashable]:
            key = (changes.namespace_of(obj), changes.name_of(obj))
            return [PINS] if event == "DELETED" else [key, PINS]

        def pod(event: str, obj: Obj, old: Obj | None) -> list[Hashable]:
            owner = pp.owner_of(obj)
            return [(changes.namespace_of(obj), owner), PINS] if owner else []

        def artifact(event: str, obj: Obj, old: Obj | None) -> list[Hashable]:
            return [*self._by("artifact", f"{changes.namespace_of(obj)}/{changes.name_of(obj)}"), PINS]

        def binding(event: str, obj: Obj, old: Obj | None) -> list[Hashable]:
            return [*self._by("binding", f"{changes.namespace_of(obj)}/{changes.name_of(obj)}"), PINS]

        def node_store(event: str, obj: Obj, old: Obj | None) -> list[Hashable]:
            if event in ("ADDED", "DELETED") or changes.resync(obj, old):
                return self._all()
            if not changes.moved(event, obj, old, ("status", "models")):
                return []
            keys: list[Hashable] = []
            for digest in _digests(obj) | _digests(old):
                for art in self.artifacts.by_index("digest", digest):
                    keys += self._by("artifact", f"{changes.namespace_of(art)}/{changes.name_of(art)}")
            return [*keys, PINS]

        def node(event: str, obj: Obj, old: Obj | None) -> list[Hashable]:
            moved = event in ("ADDED", "DELETED") or changes.labels_moved(obj, old, lambda _: True)
            return self._all() if moved or changes.resync(obj, old) else []

        def deployment(event: str, obj: Obj, old: Obj | None) -> list[Hashable]:
            if not changes.moved(event, obj, old, ("spec", "model"), ("spec", "roles")):
                return []
            return [*self._by("namespace", changes.namespace_of(obj)), PINS]

        def everything(event: str, obj: Obj, old: Obj | None) -> list[Hashable]:
            return self._all()

        def setting(event: str, obj: Obj, old: Obj | None) -> list[Hashable]:
            return self._all() if changes.name_of(obj) in WAKING_SETTINGS else []

        return [
            Watch(d.KIND_PREFETCH, prefetch),
            Watch("Pod", pod, label_selector=d.LABEL_PREFETCH),
            Watch(d.KIND_ARTIFACT, artifact),
            Watch(d.KIND_BINDING, binding),
            Watch("NodeModelStore", node_store),
            Watch("Node", node),
            Watch("ModelDeployment", deployment),
            Watch(d.KIND_STORE, everything),
            Watch("InstanceType", everything),
            Watch("ResourceFlavor", everything),
            Watch("CSIDriver", everything),
            Watch("Setting", setting, namespace=constants.SYSTEM_NAMESPACE),
        ]

    # --- the passes ---------------------------------------------------------------------------------

    def reconcile(self, key: Hashable) -> float | None:
        if key == PINS:
            self._pins()
            return None
        namespace, name = cast(tuple[str, str], key)
        prefetch = self.prefetches.get(name, namespace)
        if prefetch is None or (prefetch.get("metadata") or {}).get("deletionTimestamp"):
            return None
        result = pp.plan(self._facts(prefetch))
        self._write(prefetch, result)
        return min(result.requeue, RESYNC) if result.requeue is not None else RESYNC

    def _facts(self, prefetch: Obj) -> pp.Facts:
        namespace = changes.namespace_of(prefetch)
        spec = prefetch.get("spec") or {}
        artifact = self.artifacts.get(str((spec.get("artifactRef") or {}).get("name") or ""), namespace)
        binding = self.bindings.get(str((spec.get("bindingRef") or {}).get("name") or ""), namespace)
        nodes = self.nodes.list()
        targets = pf.target_nodes(
            prefetch,
            instance_types=self.instance_types.by_name(),
            flavors=self.flavors.list(),
            nodes=nodes,
            deployments=self.deployments.by_index("namespace", namespace),
            aware_cpu=self.settings.enabled(AWARE_CPU),
        )
        stores = self.stores.by_name()
        granted = pf.granted_nodes(binding, stores, nodes) if binding is not None else set()
        pods = {
            pp.pod_node(p): p
            for p in self.pods.by_index("owner", f"{namespace}/{changes.name_of(prefetch)}")
            if not (p.get("metadata") or {}).get("deletionTimestamp")
        }
        return pp.Facts(
            prefetch=prefetch,
            artifact=artifact,
            binding=binding,
            targets=targets,
            granted=granted,
            node_stores=self.node_stores.by_name(),
            pods=pods,
            csi_driver_present=self.drivers.get(constants.CSI_DRIVER_MODEL) is not None,
            image=self.settings.image(d.SETTING_WARMUP_IMAGE),
            now=self.clock(),
        )

    def _write(self, prefetch: Obj, result: pp.Plan) -> None:
        namespace = changes.namespace_of(prefetch)
        for pod in result.create:
            try:
                self.client.create(pod)
            except ApiError as error:
                if not error.conflict:
                    raise
        for name in result.delete:
            self.client.delete("Pod", name, namespace)
        for name, value in [(n, "true") for n in result.mark_lapsed] + [
            (n, None) for n in result.clear_lapsed
        ]:
            self.client.patch(
                "Pod",
                name,
                {"metadata": {"annotations": {d.ANNOTATION_PREFETCH_LAPSED: value}}},
                namespace=namespace,
            )
        if result.create or result.delete:
            log.info(
                "warm-up pods",
                extra={
                    "prefetch": f"{namespace}/{changes.name_of(prefetch)}",
                    "pods_created": len(result.create),
                    "pods_deleted": len(result.delete),
                },
            )
        apply_status(self.client, d.KIND_PREFETCH, prefetch, result.status, d.FIELD_MANAGER_PREFETCH)
        if result.mark_lapsed or result.clear_lapsed:
            self.queue.add(PINS)

    def _pins(self) -> None:
        plans: list[tuple[str, list[str]]] = []
        for prefetch in self.prefetches.list():
            if (prefetch.get("metadata") or {}).get("deletionTimestamp"):
                continue
            if not ((prefetch.get("spec") or {}).get("retention") or {}).get("pinned"):
                continue
            result = pp.plan(self._facts(prefetch))
            if result.digest:
                plans.append((result.digest, result.pinned_nodes))
        wanted = pp.pins(plans)
        for store in self.node_stores.list():
            node = changes.name_of(store)
            want = wanted.get(node, [])
            have = sorted((store.get("spec") or {}).get("pinned") or [])
            if have == want:
                continue
            body: dict[str, Any] = {
                "apiVersion": store.get("apiVersion") or "worker.gpustack.ai/v1",
                "kind": "NodeModelStore",
                "metadata": {"name": node},
                "spec": {"pinned": want},
            }
            self.client.apply(body, field_manager=d.FIELD_MANAGER_PINS)
            log.info("pins", extra={"node": node, "digests": len(want)})
