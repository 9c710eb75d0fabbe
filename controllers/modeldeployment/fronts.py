"""What stands in front of a deployment's Pods: its Services and its router (model-deployment.md
§9.5), applied only when they drift from the render, pruned when they are no longer wanted, and
deleted on teardown.  Everything here is owned by the deployment (its uid in ``ownerReferences``);
nothing another writer owns is touched."""

from __future__ import annotations

from api import setting_names
from api.objects import Obj
from controllers.modeldeployment import kvevents, names, router, services
from controllers.modeldeployment import plan as planner
from controllers.modeldeployment import replicas as rp
from controllers.modeldeployment import status as st
from controllers.modeldeployment.members import INDEX_INSTANCE
from controllers.modeldeployment.render import RoleTemplate
from controllers.settings import SettingsReader
from kube.client import Client
from kube.informer import Informer
from readmodels.modeldeployment import Deployment

FIELD_MANAGER = "worker.gpustack.ai/model-deployment"
SETTING_ROUTER_IMAGE = setting_names.MODEL_DEPLOYMENT_ROUTER_IMAGE
SETTING_ROUTER_PROXY_IMAGE = setting_names.MODEL_DEPLOYMENT_ROUTER_PROXY_IMAGE


def owner_reference(obj: Obj) -> Obj:
    return {
        "apiVersion": obj.get("apiVersion", "worker.gpustack.ai/v1"),
        "kind": "ModelDeployment",
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": False,
    }


def _owned_by(obj: Obj, uid: str) -> bool:
    return any(o.get("uid") == uid for o in rp.meta(obj).get("ownerReferences") or ())


def desired_services(
    obj: Obj, md: Deployment, templates: dict[str, RoleTemplate], result: planner.Plan
) -> list[Obj]:
    """The deployment's Service, each rendered role's, and one per live or desired replica of a
    multi-member role."""
    owner = owner_reference(obj)
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


class Fronts:
    """The Service and router writes of the reconciler, over the caches of those kinds."""

    def __init__(
        self,
        client: Client,
        services: Informer,
        router_objects: dict[str, Informer],
        settings: SettingsReader,
    ) -> None:
        self.client = client
        self.services = services
        self.router_objects = router_objects
        self.settings = settings

    # Services -------------------------------------------------------------------------------------

    def converge_services(
        self, obj: Obj, md: Deployment, templates: dict[str, RoleTemplate], result: planner.Plan
    ) -> None:
        desired = desired_services(obj, md, templates, result)
        wanted = {svc["metadata"]["name"] for svc in desired}
        for svc in desired:
            if services.differs(svc, self.services.get(svc["metadata"]["name"], md.namespace)):
                self.client.apply(svc, field_manager=FIELD_MANAGER)
        for live in self.services.by_index(INDEX_INSTANCE, f"{md.namespace}/{md.name}"):
            meta = rp.meta(live)
            if (
                services.LABEL_SERVICE_KIND in (meta.get("labels") or {})
                and meta.get("name") not in wanted
                and _owned_by(live, obj["metadata"]["uid"])
            ):
                self.client.delete("Service", meta["name"], md.namespace)

    # The router -----------------------------------------------------------------------------------

    def _router_live(self, md: Deployment, kind: str) -> Obj | None:
        return self.router_objects[kind].get(names.router_name(md.name), md.namespace)

    def prune_router(self, md: Deployment, uid: str) -> None:
        """Delete the router's objects the deployment owns."""
        for kind in router.KINDS:
            live = self._router_live(md, kind)
            if live is not None and _owned_by(live, uid):
                self.client.delete(kind, names.router_name(md.name), md.namespace)

    def converge_router(
        self, obj: Obj, md: Deployment, templates: dict[str, RoleTemplate], *, converge: bool
    ) -> st.RouterState:
        """Apply the router's objects (only those whose render hash moved), prune them when
        ``spec.router`` goes, and read the router Deployment's readiness."""
        if md.router is None:
            self.prune_router(md, obj["metadata"]["uid"])
            return st.RouterState(declared=False)
        state = st.RouterState(declared=True)
        routed = [templates[r.name] for r in md.roles if r.name in templates]
        if not routed:
            state.render_error = "no role rendered: the router has nothing to target"
            return state
        if converge:
            self._apply_router(obj, md, target_port=routed[0].serving.target_port)
        self._read_router(md, templates, state)
        return state

    def _apply_router(self, obj: Obj, md: Deployment, *, target_port: int) -> None:
        desired = router.render(
            md,
            owner_reference(obj),
            target_port=target_port,
            image=self.settings.image(SETTING_ROUTER_IMAGE),
            proxy_image=self.settings.image(SETTING_ROUTER_PROXY_IMAGE),
        )
        for item in desired:
            if router.live_hash(self._router_live(md, item["kind"])) != router.live_hash(item):
                self.client.apply(item, field_manager=FIELD_MANAGER)

    def _read_router(self, md: Deployment, templates: dict[str, RoleTemplate], state: st.RouterState) -> None:
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

    # Teardown -------------------------------------------------------------------------------------

    def delete_all(self, md: Deployment, uid: str) -> None:
        """Every Service of the deployment it owns, and the router's objects (a Service whose label
        was edited away is the garbage collector's: it carries the deployment's ownerReference)."""
        for svc in self.services.by_index(INDEX_INSTANCE, f"{md.namespace}/{md.name}"):
            meta = rp.meta(svc)
            if _owned_by(svc, uid):
                self.client.delete("Service", meta["name"], md.namespace)
        self.prune_router(md, uid)
