"""The ModelDeployment controller (model-deployment.md §9): renders the roles into Pods and
Services, scales, rolls out, reports status, and tears down on deletion.

One pass for a deployment: add the finalizer; resolve the features (cache, delivery); read each
role's InstanceType from the cache and render its template (a failure is a Warning ``RenderFailed``
naming the cause, a status saying so, and no Pod written); list the deployment's Pods **from the API
server** (a failed list raises: no status is written); plan (:mod:`~controllers.modeldeployment.plan`;
no Pod is created while the weights cannot be delivered); register the deployment in its Binding's
``status.usedBy`` when the cache asks for it; create and delete; converge the Services; record
departure events; write the status only when it changed.  A converged deployment costs one list and
no write.

The features' objects (Bindings, pools, backends; artifacts, claims, volumes, the CSIDriver, node
stores) are watched with the features' own ``wakes`` mappers, so a pool endpoint change or an
artifact resolving reaches the deployments that read it.

Deletion: phase ``Deleting``; delete Pods (default grace) and their Workloads (that releases Kueue's
finalizers), delete the Services; once no Pod lists, release the Binding registration and remove
the finalizer.

This class wakes and orders; the pieces live beside it: :mod:`~controllers.modeldeployment.passes`
(the pure pass: render, plan, status inputs), :mod:`~controllers.modeldeployment.features` (the
features' caches, watches, context, conditions and writes), :mod:`~controllers.modeldeployment.members`
(the Pod and Workload writes), :mod:`~controllers.modeldeployment.fronts` (Services and the router),
:mod:`~controllers.modeldeployment.reports` (events, once) and
:mod:`~controllers.modeldeployment.teardown` (the finalizer).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Hashable, Iterable
from typing import cast

from api import constants
from api.engines import SETTING_ENGINE_IMAGE, SETTING_OVERCOMMIT, SETTING_ROUTING_SIDECAR_IMAGE
from api.objects import Obj
from controllers.modeldeployment import passes, router, teardown
from controllers.modeldeployment import status as st
from controllers.modeldeployment.extensions import NO_FEATURES, Extensions
from controllers.modeldeployment.features import Features
from controllers.modeldeployment.fronts import Fronts
from controllers.modeldeployment.joint import INDEX_GROUP, group_index
from controllers.modeldeployment.members import (
    INDEX_INSTANCE,
    INDEX_OWNER,
    POD_SELECTOR,
    Members,
    instance_index,
    owner_index,
)
from controllers.modeldeployment.render import Facts
from controllers.modeldeployment.reports import Reports
from controllers.modeldeployment.teardown import FINALIZER
from controllers.settings import SettingsReader
from kube import changes
from kube.client import ApiError
from kube.manager import Controller, Manager, Watch
from readmodels.modeldeployment import Deployment

__all__ = ["FINALIZER", "ModelDeploymentReconciler"]

TRANSIENT_REQUEUE_SECONDS = 15.0
CACHE_WAIT_SECONDS = 1.0
"""The requeue of a pass that waits for the Pod cache to show its own writes (``Members.waiting``),
a backstop: the Pod events that bring them requeue the deployment sooner."""

Key = tuple[str, str]


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _instance_key(obj: Obj) -> list[Key]:
    meta = obj.get("metadata") or {}
    md = (meta.get("labels") or {}).get(constants.LABEL_APP_INSTANCE)
    return [(meta.get("namespace", ""), md)] if md else []


INDEX_INSTANCE_TYPE = "instance-type"


def instance_type_index(md: Obj) -> list[str]:
    """The InstanceTypes a deployment's roles name: an InstanceType's change wakes those alone."""
    roles = (md.get("spec") or {}).get("roles")
    return (
        sorted({str(r["instanceType"]) for r in roles if isinstance(r, dict) and r.get("instanceType")})
        if isinstance(roles, list)
        else []
    )


def _keys(deployments: Iterable[Obj]) -> list[Key]:
    return [(m["metadata"].get("namespace", ""), m["metadata"]["name"]) for m in deployments]


class ModelDeploymentReconciler(Controller):
    name = "model-deployment"
    workers = 4

    def __init__(self, manager: Manager, extensions: Extensions | None = None) -> None:
        super().__init__(manager)
        self.extensions = extensions or NO_FEATURES
        self.deployments = manager.informer(
            "ModelDeployment", indexes={INDEX_INSTANCE_TYPE: instance_type_index}
        )
        self.instance_types = self.informer("InstanceType")
        self.pods = manager.informer(
            "Pod",
            label_selector=POD_SELECTOR,
            indexes={INDEX_GROUP: group_index, INDEX_INSTANCE: instance_index},
        )
        self.workloads = manager.informer("Workload", indexes={INDEX_OWNER: owner_index})
        self.services = manager.informer(
            "Service", label_selector=POD_SELECTOR, indexes={INDEX_INSTANCE: instance_index}
        )
        self.runtime_classes = self.informer("RuntimeClass")
        router_objects = {
            kind: self.informer(kind, label_selector=POD_SELECTOR)
            for kind in router.KINDS
            if kind != "Service"
        }
        router_objects["Service"] = self.services
        settings = self.informer("Setting", constants.SYSTEM_NAMESPACE)
        self.settings = SettingsReader(settings)
        self.features = Features(self.extensions, self.client, self.informer, settings)
        self.feature_informers = self.features.informers
        self.members = Members(self.client, self.workloads, self.pods)
        self.fronts = Fronts(self.client, self.services, router_objects, self.settings)
        self.reports = Reports(self.recorder)
        self._kube_minor: int | None = None

    # Watches ------------------------------------------------------------------------------------

    def watches(self) -> list[Watch]:
        return [
            Watch("ModelDeployment", self._on_deployment),
            Watch("Pod", self._on_pod, label_selector=POD_SELECTOR),
            Watch("Workload", self._on_workload),
            Watch("Service", self._on_service, label_selector=POD_SELECTOR),
            Watch("Deployment", self._on_router, label_selector=POD_SELECTOR),
            Watch("InstanceType", self._on_instance_type),
            Watch("Setting", self._on_setting, namespace=constants.SYSTEM_NAMESPACE),
            *self.features.watches(self.deployments),
        ]

    def _on_deployment(self, event: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if event == "DELETED":
            self.reports.forget(key)
            return ()
        if changes.moved(
            event,
            obj,
            old,
            ("metadata", "generation"),
            ("metadata", "deletionTimestamp"),
            ("metadata", "finalizers"),
        ):
            return [key]
        return ()

    def _on_pod(self, event: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        return _instance_key(obj)

    def _on_service(self, event: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        if changes.moved(event, obj, old, ("spec",), ("metadata", "labels")):
            return _instance_key(obj)
        return ()

    def _on_router(self, event: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        if changes.moved(
            event, obj, old, ("spec",), ("status", "readyReplicas"), ("metadata", "annotations")
        ):
            return _instance_key(obj)
        return ()

    def _on_workload(self, event: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace", "")
        for pod in self.pods.by_index(INDEX_GROUP, f"{namespace}/{meta.get('name', '')}"):
            return _instance_key(pod)
        for owner in meta.get("ownerReferences") or ():
            if owner.get("kind") == "Pod":
                owned = self.pods.get(owner.get("name", ""), namespace)
                if owned is not None:
                    return _instance_key(owned)
        return ()

    def _on_instance_type(self, event: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        if not changes.moved(event, obj, old, ("spec",), ("status", "entrance"), ("status", "detail")):
            return ()
        return _keys(
            self.deployments.by_index(INDEX_INSTANCE_TYPE, (obj.get("metadata") or {}).get("name", ""))
        )

    def _on_setting(self, event: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        if changes.resync(obj, old) and event == "MODIFIED":
            return ()
        return _keys(self.deployments.list())

    # Facts ----------------------------------------------------------------------------------------

    def kube_minor(self) -> int:
        if self._kube_minor is None:
            try:
                version = self.client.version()
                self._kube_minor = int(
                    "".join(ch for ch in str(version.get("minor", "")) if ch.isdigit()) or 0
                )
            except (ApiError, ValueError):
                return 29
        return self._kube_minor

    def facts(self) -> Facts:
        return Facts(
            overcommit=self.settings.enabled(SETTING_OVERCOMMIT),
            routing_sidecar_image=self.settings.image(SETTING_ROUTING_SIDECAR_IMAGE),
            engine_image=self.settings.image(SETTING_ENGINE_IMAGE),
            kube_minor=self.kube_minor(),
            runtime_classes=frozenset(r["metadata"]["name"] for r in self.runtime_classes.list()),
        )

    # Reconcile ------------------------------------------------------------------------------------

    def reconcile(self, key: Hashable) -> float | None:
        namespace, name = cast(Key, key)
        obj = self.deployments.get(name, namespace)
        if obj is None:
            return None
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            return self.tear_down(obj)
        if self.members.waiting((namespace, name)):
            return CACHE_WAIT_SECONDS  # for its own writes to reach the Pod cache; their events come first
        obj = teardown.ensure_finalizer(self.client, obj)
        return self.converge(obj)

    def converge(self, obj: Obj) -> float | None:
        md = Deployment(obj)
        uid = obj["metadata"]["uid"]
        instance_types = {r.instance_type: self.instance_types.get(r.instance_type) for r in md.roles}
        ctx = self.features.context(md, uid, instance_types, self.facts())
        templates, errors = passes.render_roles(ctx)
        pods = self.members.list_pods(md, uid)
        now = passes.plan_pass(obj, ctx, templates, errors, pods, self.members.workloads_of(md, pods))
        self.reports.report_render(obj, md, ctx, errors)
        self.features.register(ctx)
        if not errors:
            self.members.execute(md, now.result)
            self.fronts.converge_services(obj, md, templates, now.result)
        router_state = self.fronts.converge_router(obj, md, templates, converge=not errors)
        self.reports.record_departures(obj, pods)
        feature = self.features.conditions(ctx, now.result, pods)
        inputs = passes.status_inputs(now, feature, router_state)
        self.put_status(obj, st.render_status(inputs, obj.get("status"), _now()))
        if any(e.transient for e in errors):
            return TRANSIENT_REQUEUE_SECONDS
        return None

    def put_status(self, obj: Obj, status: Obj) -> None:
        if not st.changed(obj.get("status"), status):
            return
        body = {**obj, "status": status}
        try:
            self.client.update(body, subresource="status")
        except ApiError as error:
            if error.conflict:
                self.queue.add_after((obj["metadata"].get("namespace", ""), obj["metadata"]["name"]), 0.5)
                return
            raise

    # Deletion -------------------------------------------------------------------------------------

    def tear_down(self, obj: Obj) -> float | None:
        md = Deployment(obj)
        uid = obj["metadata"]["uid"]
        if FINALIZER not in (obj["metadata"].get("finalizers") or ()):
            return None
        pods = self.members.list_pods(md, uid)
        self.members.delete_all(md, pods)
        self.fronts.delete_all(md, uid)
        status = teardown.deleting_status(obj)
        if status is not None:
            self.put_status(obj, status)
        if pods:
            return teardown.DELETION_POLL_SECONDS
        self.features.release(md)
        teardown.remove_finalizer(self.client, md.name, md.namespace)
        return None
