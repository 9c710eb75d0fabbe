"""controllers.modeldeployment.services: the three Services of §7.6 and the endpoint."""

from __future__ import annotations

from api import constants
from controllers.modeldeployment import services
from controllers.modeldeployment.render import render_role
from tests.unit.md_fixtures import NS, UID, context, deployment, pair, role

OWNER = {
    "apiVersion": "worker.gpustack.ai/v1",
    "kind": "ModelDeployment",
    "name": "qwen",
    "uid": UID,
    "controller": True,
}


def facts(obj, name):
    ctx = context(obj)
    r = next(x for x in ctx.md.roles if x.name == name)
    template = render_role(ctx, r)
    return ctx.md, r, template


def test_deployment_service_selects_the_first_role_and_its_leader() -> None:
    md, first, template = facts(deployment(role("server", size=2)), "server")
    svc = services.deployment_service(md, OWNER, first, template.serving)
    assert svc["metadata"]["name"] == "qwen" and svc["metadata"]["namespace"] == NS
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["selector"] == {
        constants.LABEL_APP_NAME: "model-deployment",
        constants.LABEL_APP_INSTANCE: "qwen",
        constants.LABEL_APP_COMPONENT: "server",
        constants.LABEL_MEMBER_INDEX: "0",
    }
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": 8000, "protocol": "TCP"}]
    assert services.endpoint(md, template.serving) == "http://qwen.team-a.svc:8000"


def test_role_service_adds_event_ports_for_producers() -> None:
    md, prefill, template = facts(pair(router={"name": "llm-d-router"}), "prefill")
    svc = services.role_service(md, OWNER, prefill, template.serving, template.publishes_kv_events)
    assert svc["metadata"]["name"] == "qwen-prefill"
    assert [p["port"] for p in svc["spec"]["ports"]] == [8000, 5557, 5558]
    assert constants.LABEL_MEMBER_INDEX not in svc["spec"]["selector"]
    md, decode, template = facts(pair(router={"name": "llm-d-router"}), "decode")
    svc = services.role_service(md, OWNER, decode, template.serving, template.publishes_kv_events)
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": 8000, "protocol": "TCP"}]


def test_instance_service_is_headless_and_publishes_not_ready() -> None:
    md, r, template = facts(deployment(role(size=2, replicas=2)), "server")
    svc = services.instance_service(md, OWNER, r, 1, template.serving)
    assert svc["metadata"]["name"] == "qwen-server-r1"
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"][constants.LABEL_POD_ORDINAL] == "1"


def test_stream_port_moves_the_target_not_the_endpoint() -> None:
    md, r, template = facts(deployment(role(extraArgs=["--port", "9001"])), "server")
    svc = services.deployment_service(md, OWNER, r, template.serving)
    assert svc["spec"]["ports"][0]["port"] == 8000 and svc["spec"]["ports"][0]["targetPort"] == 9001
    assert services.endpoint(md, template.serving).endswith(":8000")
    md, r, template = facts(deployment(role(extraArgs=["--ssl-certfile", "/c"])), "server")
    assert services.endpoint(md, template.serving).startswith("https://")


def test_a_converged_service_is_not_rewritten() -> None:
    md, r, template = facts(deployment(), "server")
    desired = services.deployment_service(md, OWNER, r, template.serving)
    live = {
        "metadata": {
            **desired["metadata"],
            "resourceVersion": "3",
            "labels": {**desired["metadata"]["labels"], "x": "y"},
        },
        "spec": {**desired["spec"], "clusterIP": "10.0.0.7", "sessionAffinity": "None"},
    }
    assert not services.differs(desired, live)
    assert services.differs(desired, None)
    moved = {**live, "spec": {**live["spec"], "selector": {"other": "x"}}}
    assert services.differs(desired, moved)
