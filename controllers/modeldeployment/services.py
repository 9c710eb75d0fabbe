"""The Services of a deployment and its endpoint (model-deployment.md §7.6).

| Service | Name | Type | Selects |
|---|---|---|---|
| deployment | ``<md>`` | ClusterIP | the **first** role (+ ``member-index: "0"`` above size 1) |
| role | ``<md>-<role>`` | ClusterIP | that role (+ the leader above size 1); KV-event producers add 5557/5558 |
| instance | ``<md>-<role>-r<k>`` (size > 1) | headless, not-ready addresses published | the role's ordinal ``k`` |

Each exposes port ``http`` = the serving port, to the role's target port.  Instance Services are kept
while members of their ordinal exist; the controller prunes the rest.

``status.endpoint`` without a router is ``<scheme>://<md>.<ns>.svc:<port>`` from the first role.
"""

from __future__ import annotations

from api import constants
from api.objects import Obj
from controllers.modeldeployment import kvevents, labels, names
from controllers.modeldeployment.ports import PORT_HTTP, Serving
from readmodels.modeldeployment import Deployment, Role

KIND_DEPLOYMENT = "deployment"
KIND_ROLE = "role"
KIND_INSTANCE = "instance"
LABEL_SERVICE_KIND = "modeldeployment.gpustack.ai/service"
"""Which of the three a Service is; the controller prunes by it."""


def _service(
    md: Deployment,
    owner: Obj,
    name: str,
    kind: str,
    role: str | None,
    selector: dict[str, str],
    ports: list[Obj],
) -> Obj:
    meta_labels = {**labels.common(md.name), LABEL_SERVICE_KIND: kind}
    if role is not None:
        meta_labels[constants.LABEL_APP_COMPONENT] = role
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": md.namespace,
            "labels": meta_labels,
            "ownerReferences": [owner],
        },
        "spec": {"type": "ClusterIP", "selector": selector, "ports": ports},
    }


def _http(facts: Serving) -> Obj:
    return {
        "name": PORT_HTTP,
        "port": facts.service_port,
        "targetPort": facts.target_port,
        "protocol": facts.protocol,
    }


def _leader(role: Role) -> dict[str, str]:
    return {constants.LABEL_MEMBER_INDEX: "0"} if role.size > 1 else {}


def deployment_service(md: Deployment, owner: Obj, first: Role, facts: Serving) -> Obj:
    selector = {**labels.selector(md.name, first.name), **_leader(first)}
    return _service(
        md, owner, names.deployment_service(md.name), KIND_DEPLOYMENT, None, selector, [_http(facts)]
    )


def role_service(md: Deployment, owner: Obj, role: Role, facts: Serving, publishes: bool) -> Obj:
    selector = {**labels.selector(md.name, role.name), **_leader(role)}
    ports = [_http(facts)]
    if publishes:
        ports += [
            {"name": kvevents.PORT_NAMES[port], "port": port, "targetPort": port, "protocol": "TCP"}
            for port in constants.KV_EVENTS_PORTS
        ]
    return _service(md, owner, names.role_service(md.name, role.name), KIND_ROLE, role.name, selector, ports)


def instance_service(md: Deployment, owner: Obj, role: Role, ordinal: int, facts: Serving) -> Obj:
    selector = {**labels.selector(md.name, role.name), constants.LABEL_POD_ORDINAL: str(ordinal)}
    name = names.instance_service(md.name, role.name, ordinal)
    svc = _service(md, owner, name, KIND_INSTANCE, role.name, selector, [_http(facts)])
    svc["spec"]["clusterIP"] = "None"
    svc["spec"]["publishNotReadyAddresses"] = True
    return svc


def endpoint(md: Deployment, facts: Serving) -> str:
    """``<scheme>://<md>.<ns>.svc:<port>`` from the first role's serving facts."""
    return f"{facts.scheme}://{names.deployment_service(md.name)}.{md.namespace}.svc:{facts.service_port}"


def differs(desired: Obj, live: Obj | None) -> bool:
    """Whether ``live`` lacks what ``desired`` states (labels, owner, type, selector, ports and the
    headless fields): a converged Service is never written again."""
    if live is None:
        return True
    meta, spec = live.get("metadata") or {}, live.get("spec") or {}
    want_meta, want = desired["metadata"], desired["spec"]
    live_labels = meta.get("labels") or {}
    if any(live_labels.get(k) != v for k, v in want_meta["labels"].items()):
        return True
    owners = {(o.get("uid"), o.get("controller")) for o in meta.get("ownerReferences") or ()}
    if (want_meta["ownerReferences"][0]["uid"], True) not in owners:
        return True
    if spec.get("selector") != want["selector"] or spec.get("type", "ClusterIP") != want["type"]:
        return True
    if want.get("clusterIP") == "None" and spec.get("clusterIP") != "None":
        return True
    if bool(spec.get("publishNotReadyAddresses")) != bool(want.get("publishNotReadyAddresses")):
        return True
    have = [
        (p.get("name"), p.get("port"), p.get("targetPort"), p.get("protocol", "TCP"))
        for p in spec.get("ports") or ()
    ]
    wanted = [(p["name"], p["port"], p["targetPort"], p["protocol"]) for p in want["ports"]]
    return have != wanted
