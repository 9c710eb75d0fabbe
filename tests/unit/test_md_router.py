"""controllers.modeldeployment.router: the router's objects and its status contract (§11.3, §10)."""

from __future__ import annotations

import json

from api import constants
from controllers.modeldeployment import router
from readmodels.modeldeployment import Deployment
from tests.unit.md_fixtures import NS, UID, deployment, pair, role

OWNER = {
    "apiVersion": "worker.gpustack.ai/v1",
    "kind": "ModelDeployment",
    "name": "qwen",
    "uid": UID,
    "controller": True,
}


def objects(obj):
    md = Deployment(obj)
    out = router.render(
        md, OWNER, target_port=8000, image="gpustack/llm-router:v0.1.0", proxy_image="envoy:1"
    )
    return {o["kind"]: o for o in out}


def test_vllm_router_pair_command_line() -> None:
    got = objects(
        pair(
            router={
                "name": "vllm-router",
                "requestTimeoutSeconds": 600,
                "extraArgs": ["--policy", "round_robin"],
            }
        )
    )
    assert set(got) == {"ServiceAccount", "Role", "RoleBinding", "Deployment", "Service"}
    container = got["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert container["command"] == ["vllm-router"]
    assert args[args.index("--service-discovery-namespace") + 1] == NS
    assert args[args.index("--service-discovery-port") + 1] == "8000"
    assert "--vllm-pd-disaggregation" in args and args[args.index("--kv-connector") + 1] == "mooncake"
    assert f"{constants.LABEL_ROLE_KIND}=prefill" in args and f"{constants.LABEL_ROLE_KIND}=decode" in args
    assert args[-4:] == ["--request-timeout-secs", "600", "--policy", "round_robin"]
    assert got["Deployment"]["spec"]["replicas"] == 1
    assert got["Role"]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]
    assert got["Service"]["metadata"]["name"] == "qwen-router"


def test_the_router_pods_are_not_serving_pods() -> None:
    got = objects(deployment(role(replicas=2), router={"name": "vllm-router", "replicas": 2}))
    labels = got["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert labels[constants.LABEL_APP_NAME] != "model-deployment"
    args = got["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--selector") + 1] == f"{constants.LABEL_APP_NAME}=model-deployment"
    assert got["Deployment"]["spec"]["replicas"] == 2
    assert "--request-timeout-secs" not in args  # unset renders nothing


def test_llm_d_router_scoring_and_boundaries() -> None:
    obj = pair(router={"name": "llm-d-router", "disaggregationThresholdTokens": 512})
    got = objects(obj)
    spec = got["Deployment"]["spec"]["template"]["spec"]
    epp = next(ct for ct in spec["containers"] if ct["name"] == "epp")
    assert "--secure-serving=false" in epp["args"] and "--metrics-endpoint-auth=false" in epp["args"]
    assert f"--config-file={router.CONFIG_MOUNT}/{router.EPP_CONFIG}" in epp["args"]
    config = json.loads(got["ConfigMap"]["data"][router.EPP_CONFIG])
    handler = next(p for p in config["plugins"] if p["type"] == "pd-profile-handler")
    assert handler["parameters"] == {"threshold": 512}
    profiles = {
        p["name"]: {r["pluginRef"]: r.get("weight") for r in p["plugins"]}
        for p in config["schedulingProfiles"]
    }
    assert profiles["prefill"]["prefix-cache-scorer"] == 3
    assert "prefix-cache-scorer" not in profiles["decode"]
    assert profiles["decode"]["queue-scorer"] == 2 and profiles["decode"]["kv-cache-utilization-scorer"] == 2
    envoy = json.loads(got["ConfigMap"]["data"][router.ENVOY_CONFIG])
    assert envoy["static_resources"]["listeners"][0]["address"]["socket_address"]["port_value"] == 8000


def test_render_hash_moves_with_the_spec_only() -> None:
    a = objects(pair(router={"name": "vllm-router"}))["Deployment"]
    b = objects(pair(router={"name": "vllm-router"}))["Deployment"]
    c_ = objects(pair(router={"name": "vllm-router", "extraArgs": ["--policy", "random"]}))["Deployment"]
    assert router.live_hash(a) == router.live_hash(b) != router.live_hash(c_)


def test_status_contract() -> None:
    md = Deployment(pair(router={"name": "llm-d-router"}))
    got = router.status(
        md,
        {"prefill": "http://qwen-prefill.team-a.svc:8000"},
        {"prefill": True, "decode": False},
        {"prefill": {"endpoint": "tcp://qwen-prefill.team-a.svc:5557"}, "decode": {"endpoint": "x"}},
    )
    assert got["name"] == "llm-d-router" and got["endpoint"] == f"http://qwen-router.{NS}.svc:8000"
    roles = {r["name"]: r for r in got["roles"]}
    assert roles["prefill"]["kvEvents"] == {"endpoint": "tcp://qwen-prefill.team-a.svc:5557"}
    assert "kvEvents" not in roles["decode"]
    assert got["metrics"]["runningRequests"] == "vllm:num_requests_running"
