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
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Hashable, Iterable
from functools import partial
from typing import Any, cast

from api import constants
from api import model_deployment_status as s
from api.objects import Obj
from controllers.modeldeployment import departures, kvevents, names, router, services
from controllers.modeldeployment import plan as planner
from controllers.modeldeployment import replicas as rp
from controllers.modeldeployment import status as st
from controllers.modeldeployment.extensions import Condition, Extensions, default_extensions
from controllers.modeldeployment.image import runtime_versions
from controllers.modeldeployment.joint import INDEX_GROUP, group_index
from controllers.modeldeployment.render import Context, Facts, RenderError, RoleTemplate, render_role, stamp
from controllers.settings import SettingsReader
from kube import changes
from kube.client import JSON_PATCH, ApiError
from kube.events import WARNING
from kube.manager import Controller, Manager, Watch
from webhooks.modeldeployment.view import Deployment

log = logging.getLogger("controllers.modeldeployment")

FIELD_MANAGER = "worker.gpustack.ai/model-deployment"
FINALIZER = constants.FINALIZER_MODEL_DEPLOYMENT
SETTING_OVERCOMMIT = "instance-general-resources-overcommit"
SETTING_ROUTING_SIDECAR = "model-deployment-routing-sidecar-image"
SETTING_ROUTER_IMAGE = "model-deployment-router-image"
SETTING_ROUTER_PROXY_IMAGE = "model-deployment-router-proxy-image"
TRANSIENT_REQUEUE_SECONDS = 15.0
DELETION_POLL_SECONDS = 2.0
POD_SELECTOR = f"{constants.LABEL_APP_NAME}={constants.APP_NAME_MODEL_DEPLOYMENT}"
INDEX_OWNER = "owner-pod"

Key = tuple[str, str]


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def owner_index(workload: Obj) -> list[str]:
    return [
        o["uid"]
        for o in (workload.get("metadata") or {}).get("ownerReferences") or ()
        if o.get("kind") == "Pod" and o.get("uid")
    ]


def _instance_key(obj: Obj) -> list[Key]:
    meta = obj.get("metadata") or {}
    md = (meta.get("labels") or {}).get(constants.LABEL_APP_INSTANCE)
    return [(meta.get("namespace", ""), md)] if md else []


class ModelDeploymentReconciler(Controller):
    name = "model-deployment"
    workers = 4

    def __init__(self, manager: Manager, extensions: Extensions | None = None) -> None:
        super().__init__(manager)
        self.extensions = extensions or default_extensions()
        self.deployments = self.informer("ModelDeployment")
        self.instance_types = self.informer("InstanceType")
        self.pods = manager.informer("Pod", label_selector=POD_SELECTOR, indexes={INDEX_GROUP: group_index})
        self.workloads = manager.informer("Workload", indexes={INDEX_OWNER: owner_index})
        self.services = self.informer("Service", label_selector=POD_SELECTOR)
        self.runtime_classes = self.informer("RuntimeClass")
        self.router_objects = {
            kind: self.informer(kind, label_selector=POD_SELECTOR)
            for kind in router.KINDS
            if kind != "Service"
        }
        self.router_objects["Service"] = self.services
        settings = self.informer("Setting", constants.SYSTEM_NAMESPACE)
        self.settings = SettingsReader(settings)
        # Features read Settings from the system namespace's cache, everything else cluster-wide.
        self.feature_informers = {
            kind: settings if kind == "Setting" else self.informer(kind)
            for feature in self._features()
            for kind in getattr(feature, "kinds", ())
        }
        self._kube_minor: int | None = None
        self._lock = threading.Lock()
        self._recorded: dict[Key, set[str]] = {}

    def _features(self) -> tuple[Any, ...]:
        return (self.extensions.cache, self.extensions.delivery, self.extensions.topology)

    # Watches ------------------------------------------------------------------------------------

    def watches(self) -> list[Watch]:
        out = [
            Watch("ModelDeployment", self._on_deployment),
            Watch("Pod", self._on_pod, label_selector=POD_SELECTOR),
            Watch("Workload", self._on_workload),
            Watch("Service", self._on_service, label_selector=POD_SELECTOR),
            Watch("Deployment", self._on_router, label_selector=POD_SELECTOR),
            Watch("InstanceType", self._on_instance_type),
            Watch("Setting", self._on_setting, namespace=constants.SYSTEM_NAMESPACE),
        ]
        for feature in self._features():
            wakes = getattr(feature, "wakes", None)
            if wakes is None:
                continue
            for kind in getattr(feature, "kinds", ()):
                if kind != "Setting":  # every Setting change wakes every deployment already
                    out.append(Watch(kind, partial(self._on_feature_object, wakes, kind)))
        return out

    def _on_feature_object(
        self, wakes: Any, kind: str, event: str, obj: Obj, old: Obj | None
    ) -> Iterable[Key]:
        woken = wakes(kind, event, obj, old, self.deployments.list(), self.read)
        return [(m["metadata"].get("namespace", ""), m["metadata"]["name"]) for m in woken]

    def _on_deployment(self, event: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if event == "DELETED":
            with self._lock:
                self._recorded.pop(key, None)
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
        name = (obj.get("metadata") or {}).get("name")
        return [
            (m["metadata"].get("namespace", ""), m["metadata"]["name"])
            for m in self.deployments.list()
            if any(r.get("instanceType") == name for r in ((m.get("spec") or {}).get("roles") or ()))
        ]

    def _on_setting(self, event: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        if changes.resync(obj, old) and event == "MODIFIED":
            return ()
        return [(m["metadata"].get("namespace", ""), m["metadata"]["name"]) for m in self.deployments.list()]

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
            routing_sidecar_image=self.settings.value(SETTING_ROUTING_SIDECAR),
            kube_minor=self.kube_minor(),
            runtime_classes=frozenset(r["metadata"]["name"] for r in self.runtime_classes.list()),
        )

    def read(self, kind: str, name: str, namespace: str = "") -> Obj | None:
        """The features' reader: the caches of the kinds they declared (``kinds``), else None."""
        informer = self.feature_informers.get(kind)
        return informer.get(name, namespace) if informer is not None else None

    # Reconcile ------------------------------------------------------------------------------------

    def reconcile(self, key: Hashable) -> float | None:
        namespace, name = cast(Key, key)
        obj = self.deployments.get(name, namespace)
        if obj is None:
            return None
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            return self.tear_down(obj)
        obj = self.ensure_finalizer(obj)
        return self.converge(obj)

    def ensure_finalizer(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        finalizers = list(meta.get("finalizers") or ())
        if FINALIZER in finalizers:
            return obj
        ops: list[Obj] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]}
        ]
        if finalizers:
            ops.append({"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER})
        else:
            ops.append({"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]})
        return self.client.patch(
            "ModelDeployment", meta["name"], ops, namespace=meta["namespace"], content_type=JSON_PATCH
        )

    def list_pods(self, md: Deployment, uid: str) -> list[Obj]:
        """The deployment's Pods, listed on the API server (raises when the list fails)."""
        pods, _ = self.client.list(
            "Pod", md.namespace, label_selector=f"{POD_SELECTOR},{constants.LABEL_APP_INSTANCE}={md.name}"
        )
        return [
            p
            for p in pods
            if any(
                o.get("uid") == uid and o.get("controller") for o in rp.meta(p).get("ownerReferences") or ()
            )
        ]

    def workloads_of(self, md: Deployment, pods: list[Obj]) -> list[Obj]:
        """The Workloads of the deployment's groups: by group name, or owned by one of its Pods."""
        found: dict[str, Obj] = {}
        wanted = {
            names.pod_group_name(md.namespace, md.name, role.name, k)
            for role in md.roles
            for k in range(max(role.replicas, 0))
        }
        wanted |= {rp.pod_labels(p).get(constants.KUEUE_POD_GROUP_NAME, "") for p in pods}
        for group in wanted:
            wl = self.workloads.get(group, md.namespace) if group else None
            if wl is not None:
                found[group] = wl
        for pod in pods:
            for wl in self.workloads.by_index(INDEX_OWNER, rp.meta(pod).get("uid", "")):
                found.setdefault(rp.meta(wl).get("name", ""), wl)
        return list(found.values())

    def render(self, md: Deployment, uid: str) -> tuple[Context, dict[str, RoleTemplate], list[RenderError]]:
        ext = self.extensions
        ctx = Context(
            md=md,
            uid=uid,
            instance_types={r.instance_type: self.instance_types.get(r.instance_type) for r in md.roles},
            facts=self.facts(),
            cache=ext.cache,
            cache_resolution=ext.cache.resolve(md, self.read),
            delivery=ext.delivery,
            delivery_resolution=ext.delivery.resolve(md, self.read),
            topology=ext.topology,
        )
        templates: dict[str, RoleTemplate] = {}
        errors: list[RenderError] = []
        for role in md.roles:
            try:
                templates[role.name] = render_role(ctx, role)
            except RenderError as error:
                errors.append(error)
        return ctx, templates, errors

    def role_inputs(self, ctx: Context, templates: dict[str, RoleTemplate]) -> list[planner.RoleInput]:
        md = ctx.md
        out = []
        for role in md.roles:
            template = templates.get(role.name)
            memo: dict[tuple[int, int], Obj] = {}

            def stamped(ordinal: int, member: int, _t=template, _m=memo) -> Obj:
                pod = _m.get((ordinal, member))
                if pod is None:
                    pod = _m[(ordinal, member)] = stamp(ctx, _t, ordinal, member)
                return pod

            def expected(ordinal: int, member: int, _s=stamped) -> str:
                return _s(ordinal, member)["metadata"]["annotations"][constants.ANNOTATION_POD_SPEC_HASH]

            out.append(
                planner.RoleInput(
                    name=role.name,
                    desired=max(role.replicas, 0),
                    size=max(role.size, 1),
                    stamp=stamped if template is not None else None,
                    expected=expected if template is not None else None,
                    group_name=partial(names.pod_group_name, md.namespace, md.name, role.name),
                )
            )
        return out

    def converge(self, obj: Obj) -> float | None:
        md = Deployment(obj)
        uid = obj["metadata"]["uid"]
        ctx, templates, errors = self.render(md, uid)
        pods = self.list_pods(md, uid)
        workloads = self.workloads_of(md, pods)
        cache, delivery = ctx.cache_resolution, ctx.delivery_resolution
        held_by_cache = bool(cache and cache.applicable and not cache.resolved)
        held_by_weights = bool(delivery and delivery.held)
        result = planner.plan(
            self.role_inputs(ctx, templates),
            pods,
            workloads,
            hold=held_by_cache or held_by_weights,
            create=not (delivery and delivery.blocked),
        )
        self.report_render(obj, md, ctx, errors)
        if cache is not None and cache.used_by is not None:
            self.send_status_apply(cache.used_by, cache.used_by_manager)
        if not errors:
            self.execute(result)
            self.converge_services(obj, md, templates, result)
        router_state = self.converge_router(obj, md, templates, converge=not errors)
        self.record_departures(obj, pods)
        self.write_status(
            obj, md, ctx, templates, result, errors, held_by_cache, held_by_weights, router_state, pods
        )
        if any(e.transient for e in errors):
            return TRANSIENT_REQUEUE_SECONDS
        return None

    # Writes ---------------------------------------------------------------------------------------

    def send_status_apply(self, body: Obj, manager: str) -> None:
        """A feature's status write on another object (the Binding's ``usedBy`` entry); an object
        deleted meanwhile has nothing left to register on or release from."""
        try:
            self.client.apply(body, field_manager=manager, subresource="status")
        except ApiError as error:
            if not error.not_found:
                raise

    def execute(self, result: planner.Plan) -> None:
        for pod in result.pod_deletes:
            meta = rp.meta(pod)
            self.client.delete("Pod", meta["name"], meta["namespace"])
        for wl in result.workload_deletes:
            meta = rp.meta(wl)
            self.client.delete("Workload", meta["name"], meta["namespace"])
        for pod in result.creates:
            self.client.create(pod)

    def desired_services(
        self, obj: Obj, md: Deployment, templates: dict[str, RoleTemplate], result: planner.Plan
    ) -> list[Obj]:
        owner = self._owner(obj)
        out: list[Obj] = []
        if md.roles and md.roles[0].name in templates:
            first = templates[md.roles[0].name]
            out.append(services.deployment_service(md, owner, md.roles[0], first.serving))
        for role in md.roles:
            template = templates.get(role.name)
            if template is None:
                continue
            out.append(services.role_service(md, owner, role, template.serving, template.publishes_kv_events))
            if role.size > 1:
                live = {k for (r, k), replica in result.replicas.items() if r == role.name and replica.pods}
                for ordinal in sorted(set(range(role.replicas)) | live):
                    out.append(services.instance_service(md, owner, role, ordinal, template.serving))
        return out

    def converge_services(
        self, obj: Obj, md: Deployment, templates: dict[str, RoleTemplate], result: planner.Plan
    ) -> None:
        desired = self.desired_services(obj, md, templates, result)
        wanted = {svc["metadata"]["name"] for svc in desired}
        for svc in desired:
            if services.differs(svc, self.services.get(svc["metadata"]["name"], md.namespace)):
                self.client.apply(svc, field_manager=FIELD_MANAGER)
        for live in self.services.list():
            meta = rp.meta(live)
            if (
                meta.get("namespace") == md.namespace
                and (meta.get("labels") or {}).get(constants.LABEL_APP_INSTANCE) == md.name
                and services.LABEL_SERVICE_KIND in (meta.get("labels") or {})
                and meta.get("name") not in wanted
                and any(o.get("uid") == obj["metadata"]["uid"] for o in meta.get("ownerReferences") or ())
            ):
                self.client.delete("Service", meta["name"], md.namespace)

    def _owner(self, obj: Obj) -> Obj:
        return {
            "apiVersion": obj.get("apiVersion", "worker.gpustack.ai/v1"),
            "kind": "ModelDeployment",
            "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": False,
        }

    def _router_live(self, md: Deployment, kind: str) -> Obj | None:
        return self.router_objects[kind].get(names.router_name(md.name), md.namespace)

    def converge_router(
        self, obj: Obj, md: Deployment, templates: dict[str, RoleTemplate], *, converge: bool
    ) -> st.RouterState:
        """Apply the router's objects (only those whose render hash moved), prune them when
        ``spec.router`` goes, and read the router Deployment's readiness."""
        uid = obj["metadata"]["uid"]
        if md.router is None:
            for kind in router.KINDS:
                live = self._router_live(md, kind)
                if live is not None and any(
                    o.get("uid") == uid for o in rp.meta(live).get("ownerReferences") or ()
                ):
                    self.client.delete(kind, names.router_name(md.name), md.namespace)
            return st.RouterState(declared=False)
        state = st.RouterState(declared=True)
        routed = [templates[r.name] for r in md.roles if r.name in templates]
        if not routed:
            state.render_error = "no role rendered: the router has nothing to target"
            return state
        target = routed[0].serving.target_port
        if converge:
            desired = router.render(
                md,
                self._owner(obj),
                target_port=target,
                image=self.settings.value(SETTING_ROUTER_IMAGE),
                proxy_image=self.settings.value(SETTING_ROUTER_PROXY_IMAGE),
            )
            for item in desired:
                if router.live_hash(self._router_live(md, item["kind"])) != router.live_hash(item):
                    self.client.apply(item, field_manager=FIELD_MANAGER)
        deployment = self._router_live(md, "Deployment")
        state.deployed = deployment is not None
        state.ready_replicas = int(((deployment or {}).get("status") or {}).get("readyReplicas") or 0)
        state.endpoint = router.endpoint(md)
        role_endpoints = {
            name: router.role_endpoint(md, t.role, t.serving.scheme, t.serving.service_port)
            for name, t in templates.items()
        }
        state.status = router.status(
            md,
            role_endpoints,
            {name: t.publishes_kv_events for name, t in templates.items()},
            {r.name: kvevents.endpoints(md, r, md.namespace) for r in md.roles},
        )
        return state

    def _record_once(self, obj: Obj, identity: str, kind: str, reason: str, message: str) -> None:
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        with self._lock:
            seen = self._recorded.setdefault(key, set())
            if identity in seen:
                return
            seen.add(identity)
        self.recorder.event(obj, kind, reason, message)

    def report_render(self, obj: Obj, md: Deployment, ctx: Context, errors: list[RenderError]) -> None:
        if not errors:
            with self._lock:
                seen = self._recorded.get((md.namespace, md.name), set())
                for identity in [i for i in seen if i.startswith("render/")]:
                    seen.discard(identity)  # a later failure is news again
        for error in errors:
            self._record_once(obj, f"render/{error.message}", WARNING, s.EVENT_RENDER_FAILED, error.message)
            log.warning(
                "render failed",
                extra={"namespace": md.namespace, "deployment": md.name, "error": error.message},
            )
        for role in md.roles:
            if role.image or md.engine_block.get("image"):
                continue
            it = ctx.instance_types.get(role.instance_type) or {}
            versions = runtime_versions(((it.get("status") or {}).get("detail")) or {})
            if versions is not None and versions.skewed:
                message = (
                    f"role {role.name}: InstanceType {role.instance_type} reports runtime versions "
                    f"{', '.join(versions.reported)}; the image takes the lowest, {versions.taken}"
                )
                self._record_once(obj, f"skew/{message}", WARNING, s.EVENT_RUNTIME_VERSION_SKEW, message)

    def record_departures(self, obj: Obj, pods: list[Obj]) -> None:
        for departure in departures.departures(pods):
            self._record_once(obj, departure.identity, WARNING, departure.reason, departure.message)

    def write_status(
        self,
        obj: Obj,
        md: Deployment,
        ctx: Context,
        templates: dict[str, RoleTemplate],
        result: planner.Plan,
        errors: list[RenderError],
        held_by_cache: bool,
        held_by_weights: bool,
        router_state: st.RouterState,
        pods: list[Obj],
    ) -> None:
        cache, delivery = ctx.cache_resolution, ctx.delivery_resolution
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
        first = templates.get(md.roles[0].name) if md.roles else None
        inputs = st.Inputs(
            md=md,
            generation=int(obj["metadata"].get("generation") or 0),
            accounts=result.accounts,
            endpoint=services.endpoint(md, first.serving) if first is not None else None,
            render_error="; ".join(e.message for e in errors) or None,
            held_by_cache=held_by_cache,
            held_by_weights=held_by_weights,
            weights_blocked=delivery.blocked_message if delivery and delivery.blocked else None,
            publishing={name: t.publishes_kv_events for name, t in templates.items()},
            feature_conditions=feature,
            kv_cache=cache.status if cache else None,
            model=delivery.status if delivery else None,
            router=router_state,
        )
        self.put_status(obj, st.render_status(inputs, obj.get("status"), _now()))

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
        pods = self.list_pods(md, uid)
        for pod in pods:
            if not rp.leaving(pod):
                self.client.delete("Pod", rp.meta(pod)["name"], md.namespace)
        for wl in self.workloads_of(md, pods):
            if not rp.leaving(wl):
                self.client.delete("Workload", rp.meta(wl)["name"], md.namespace)
        for svc in self.services.list():
            meta = rp.meta(svc)
            if meta.get("namespace") == md.namespace and any(
                o.get("uid") == uid for o in meta.get("ownerReferences") or ()
            ):
                self.client.delete("Service", meta["name"], md.namespace)
        for kind in router.KINDS:
            live = self._router_live(md, kind)
            if live is not None and any(
                o.get("uid") == uid for o in rp.meta(live).get("ownerReferences") or ()
            ):
                self.client.delete(kind, names.router_name(md.name), md.namespace)
        status = dict(obj.get("status") or {})
        if status.get("phase") != s.PHASE_DELETING:
            status.update(
                phase=s.PHASE_DELETING, phaseMessage="deleting the replicas, their Workloads and Services"
            )
            self.put_status(obj, status)
        if pods:
            return DELETION_POLL_SECONDS
        release = self.extensions.cache.release(md)
        if release is not None:
            self.send_status_apply(*release)
        fresh = self.client.get("ModelDeployment", md.name, md.namespace)
        if fresh is None:
            return None
        finalizers = list(fresh["metadata"].get("finalizers") or ())
        if FINALIZER in finalizers:
            index = finalizers.index(FINALIZER)
            self.client.patch(
                "ModelDeployment",
                md.name,
                [
                    {"op": "test", "path": f"/metadata/finalizers/{index}", "value": FINALIZER},
                    {"op": "remove", "path": f"/metadata/finalizers/{index}"},
                ],
                namespace=md.namespace,
                content_type=JSON_PATCH,
            )
        return None
