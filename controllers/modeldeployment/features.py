"""The features (:mod:`~controllers.modeldeployment.extensions`: the KV cache, model delivery,
topology) wired into the reconciler: the caches of the kinds they declare (``kinds``; Settings from
the system namespace's cache, everything else cluster-wide), the watches that wake deployments on
their objects (``wakes``), the render context they resolve once a pass, the conditions they
observe, and the status writes they ask for on other objects (the Binding's ``usedBy`` entry)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from api import model_deployment_status as s
from api.objects import Obj
from controllers.modeldeployment import plan as planner
from controllers.modeldeployment.extensions import Condition, Extensions
from controllers.modeldeployment.render import Context, Facts
from kube.client import ApiError, Client
from kube.informer import Informer
from kube.manager import Watch
from readmodels.modeldeployment import Deployment

Key = tuple[str, str]


class Features:
    def __init__(
        self, extensions: Extensions, client: Client, informer: Callable[[str], Informer], settings: Informer
    ) -> None:
        self.extensions = extensions
        self.client = client
        self.informers = {
            kind: settings if kind == "Setting" else informer(kind)
            for feature in self.installed()
            for kind in getattr(feature, "kinds", ())
        }

    def installed(self) -> tuple[Any, ...]:
        return (self.extensions.cache, self.extensions.delivery, self.extensions.topology)

    def read(self, kind: str, name: str, namespace: str = "") -> Obj | None:
        """The features' reader: the caches of the kinds they declared (``kinds``), else None."""
        informer = self.informers.get(kind)
        return informer.get(name, namespace) if informer is not None else None

    # Watches ------------------------------------------------------------------------------------

    def watches(self, deployments: Informer) -> list[Watch]:
        out = []
        for feature in self.installed():
            wakes = getattr(feature, "wakes", None)
            if wakes is None:
                continue
            for kind in getattr(feature, "kinds", ()):
                if kind != "Setting":  # every Setting change wakes every deployment already
                    out.append(Watch(kind, partial(self._on_object, wakes, kind, deployments)))
        return out

    def _on_object(
        self, wakes: Any, kind: str, deployments: Informer, event: str, obj: Obj, old: Obj | None
    ) -> Iterable[Key]:
        woken = wakes(kind, event, obj, old, deployments.list(), self.read)
        return [(m["metadata"].get("namespace", ""), m["metadata"]["name"]) for m in woken]

    # One pass -----------------------------------------------------------------------------------

    def context(
        self, md: Deployment, uid: str, instance_types: Mapping[str, Obj | None], facts: Facts
    ) -> Context:
        """The renderer's inputs, with each feature's resolution of this pass."""
        ext = self.extensions
        return Context(
            md=md,
            uid=uid,
            instance_types=instance_types,
            facts=facts,
            cache=ext.cache,
            cache_resolution=ext.cache.resolve(md, self.read),
            delivery=ext.delivery,
            delivery_resolution=ext.delivery.resolve(md, self.read),
            topology=ext.topology,
        )

    def conditions(self, ctx: Context, result: planner.Plan, pods: list[Obj]) -> list[Condition]:
        """The features' conditions once the pass counted the ready replicas and listed the Pods."""
        md, cache, delivery = ctx.md, ctx.cache_resolution, ctx.delivery_resolution
        feature: list[Condition] = []
        if cache is not None:
            ready = sum(a.ready for a in result.accounts.values())
            feature += self.extensions.cache.observe(cache, md, ready)
        if delivery is not None:
            feature += self.extensions.delivery.observe(delivery, md, pods, self.read)
        if cache and cache.applicable and any(not r.managed for r in md.roles):
            feature = [f for f in feature if f.type != s.CONDITION_CACHE_ATTACHED]
            feature.append(
                Condition(
                    s.CONDITION_CACHE_ATTACHED,
                    "Unknown",
                    s.REASON_UNMANAGED,
                    "a role took its command line over: the operator rendered no cache client for it",
                )
            )
        return feature

    # Writes on other objects ----------------------------------------------------------------------

    def register(self, ctx: Context) -> None:
        """The cache's registration of the deployment in its Binding's ``usedBy``, when it asks."""
        cache = ctx.cache_resolution
        if cache is not None and cache.used_by is not None:
            self._send_status_apply(cache.used_by, cache.used_by_manager)

    def release(self, md: Deployment) -> None:
        """The deployment is gone: release its Binding registration."""
        release = self.extensions.cache.release(md)
        if release is not None:
            self._send_status_apply(*release)

    def _send_status_apply(self, body: Obj, manager: str) -> None:
        """A feature's status write on another object (the Binding's ``usedBy`` entry); an object
        deleted meanwhile has nothing left to register on or release from."""
        try:
            self.client.apply(body, field_manager=manager, subresource="status")
        except ApiError as error:
            if not error.not_found:
                raise
