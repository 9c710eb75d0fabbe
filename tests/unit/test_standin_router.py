"""standin.router: the stand-in vllm-router reads the command line the controller renders as the
router's clap parser does, refuses what it would refuse, finds the replicas through the Kubernetes
API, and sends a request to a prefill replica (one token) and then to a decode replica."""

from __future__ import annotations

import asyncio
import http.server
import json
import re
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from api import constants
from controllers.modeldeployment import router as rendered_router
from readmodels.modeldeployment import Deployment
from standin import cli, router_cli, weights
from standin.__main__ import main as standin_main
from standin.router import DECODE, PREFILL, KubeAPI, Router, Workers, ready_workers
from standin.server import app as engine_app
from standin.server import tokens
from tests.unit.md_fixtures import deployment, pair, role

OWNER = {"apiVersion": "worker.gpustack.ai/v1", "kind": "ModelDeployment", "name": "qwen", "uid": "u",
         "controller": True}  # fmt: skip


def rendered_args(obj: dict) -> list[str]:
    objects = rendered_router.render(Deployment(obj), OWNER, target_port=8001, image="r:1", proxy_image="p:1")
    deployment_obj = next(o for o in objects if o["kind"] == "Deployment")
    container = deployment_obj["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["vllm-router"]
    return list(container["args"])


def test_the_rendered_pair_line_is_read_as_the_router_reads_it() -> None:
    obj = pair(
        router={"name": "vllm-router", "requestTimeoutSeconds": 600, "extraArgs": ["--policy", "round_robin"]}
    )
    launch = router_cli.parse(rendered_args(obj))
    assert (launch.host, launch.port, launch.prometheus_port) == ("0.0.0.0", 8000, 29000)
    assert launch.pd and launch.discovery and launch.kv_connector == "mooncake"
    assert launch.namespace == obj["metadata"]["namespace"] and launch.target_port == 8001
    assert launch.prefill_selector[constants.LABEL_ROLE_KIND] == "prefill"
    assert launch.decode_selector[constants.LABEL_ROLE_KIND] == "decode"
    assert launch.request_timeout == 600 and launch.policy == "round_robin"


def test_the_rendered_single_role_line_is_read_too() -> None:
    launch = router_cli.parse(rendered_args(deployment(role(replicas=2), router={"name": "vllm-router"})))
    assert not launch.pd and launch.selector[constants.LABEL_APP_INSTANCE] == "qwen"


BASE = ["--service-discovery", "--selector", "a=b"]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        ([*BASE, "--bogus"], "unexpected argument '--bogus' found"),
        (["stray", *BASE], "unexpected argument 'stray' found"),
        ([*BASE, "--port", "1", "--port", "2"], "cannot be used multiple times"),
        ([*BASE, "--policy", "fastest"], "invalid value 'fastest' for '--policy <POLICY>'"),
        ([*BASE, "--kv-connector", "lmcache"], "possible values: nixl, mooncake, moriio"),
        ([*BASE, "--port", "70000"], "invalid value '70000'"),
        (["--selector", "a=b", "--service-discovery=true"], "unexpected value 'true'"),
        ([*BASE, "--host"], "a value is required for '--host <HOST>'"),
        (["--vllm-pd-disaggregation"], "requires one of: --vllm-discovery-address"),
        (["--port", "8000"], "Regular mode requires --worker-urls"),
        (["--prefill", "--help"], "Invalid url --help"),
    ],
)
def test_what_the_router_refuses_is_refused_in_its_words(argv: list[str], words: str) -> None:
    with pytest.raises(router_cli.Refused, match=re.escape(words)):
        router_cli.parse(argv)


def test_spellings_clap_accepts() -> None:
    launch = router_cli.parse(["--vllm-pd-disaggregation", "--prefill", "http://p:8000", "9000", "--decode=http://d:1",
                               "--decode", "http://d:2", "--runtime", "vllm", "--request-timeout-secs=5"])  # fmt: skip
    assert launch.prefill_urls == ["http://p:8000"] and launch.decode_urls == ["http://d:1", "http://d:2"]
    assert launch.request_timeout == 5 and not launch.discovery


def test_main_exits_2_on_a_refused_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert standin_main(["vllm-router", "--selector", "a=b", "--no-such-flag"]) == 2
    assert "unexpected argument '--no-such-flag' found" in capsys.readouterr().err


# --- discovery ---------------------------------------------------------------------------------------


def pod(name: str, ip: str, *, ready: bool = True, phase: str = "Running", deleting: bool = False) -> dict:
    meta: dict = {"name": name, **({"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {})}
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {"metadata": meta, "status": {"phase": phase, "podIP": ip, "conditions": conditions}}


def test_only_running_ready_pods_with_an_address_are_workers() -> None:
    pods = [pod("a", "10.0.0.2"), pod("b", "10.0.0.3", ready=False), pod("c", "10.0.0.4", phase="Pending"),
            pod("d", "10.0.0.5", deleting=True), pod("e", ""), pod("f", "fd00::1")]  # fmt: skip
    assert ready_workers(pods, 8001) == ["http://10.0.0.2:8001", "http://[fd00::1]:8001"]


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[str, list[dict]]]:
    """A Kubernetes API answering pod lists by label selector, checking the bearer token."""
    pods = {
        "role=prefill": [pod("p0", "10.1.0.2")],
        "role=decode": [pod("d0", "10.1.0.3"), pod("d1", "10.1.0.4")],
    }
    asked: list[dict] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            selector = urllib.parse.parse_qs(url.query)["labelSelector"][0]
            asked.append({"path": url.path, "selector": selector, "auth": self.headers["Authorization"]})
            body = json.dumps({"items": pods.get(selector, [])}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (tmp_path / "token").write_text("secret-token\n")
    (tmp_path / "namespace").write_text("ns1")
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()


def test_discovery_lists_each_selector_with_the_service_account_token(api, tmp_path: Path) -> None:
    base, asked = api
    launch = router_cli.parse(["--vllm-pd-disaggregation", "--service-discovery", "--service-discovery-port", "8001",
                               "--prefill-selector", "role=prefill", "--decode-selector", "role=decode"])  # fmt: skip
    workers = Workers(launch, KubeAPI(base, account=tmp_path))
    assert not workers.ready()
    workers.discover_once()
    assert workers.urls(PREFILL) == ["http://10.1.0.2:8001"]
    assert workers.urls(DECODE) == ["http://10.1.0.3:8001", "http://10.1.0.4:8001"]
    assert workers.ready()
    # No --service-discovery-namespace: the Pod's own namespace, from the service account.
    assert {a["path"] for a in asked} == {"/api/v1/namespaces/ns1/pods"}
    assert {a["auth"] for a in asked} == {"Bearer secret-token"}
    # Round-robin among the decode replicas.
    assert [workers.pick(DECODE) for _ in range(3)] == ["http://10.1.0.3:8001", "http://10.1.0.4:8001",
                                                        "http://10.1.0.3:8001"]  # fmt: skip


# --- routing -----------------------------------------------------------------------------------------


def engine(tmp_path: Path, role_config: str) -> TestClient:
    path = tmp_path / role_config
    path.mkdir()
    (path / "config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(b"\0" * 8)
    argv = ["serve", str(path), "--served-model-name", "qwen", "--kv-transfer-config",
            json.dumps({"kv_connector": "MooncakeConnector", "kv_role": role_config})]  # fmt: skip
    return TestClient(engine_app(cli.parse(cli.VLLM, argv), weights.resolve(str(path))))


def test_a_chat_request_goes_to_a_prefill_for_one_token_then_to_a_decode(tmp_path: Path) -> None:
    engines = {
        "http://p:8001": engine(tmp_path, "kv_producer"),
        "http://d:8001": engine(tmp_path, "kv_consumer"),
    }
    seen: list[tuple[str, str, dict]] = []

    async def send(method: str, url: str, body: bytes | None, headers: dict[str, str], timeout: float):
        base, path = url[: url.index("/", 7)], url[url.index("/", 7) :]
        seen.append((base, path, json.loads(body) if body else {}))
        client = engines[base]
        answer = await asyncio.to_thread(
            lambda: client.post(path, content=body) if method == "POST" else client.get(path)
        )
        return answer.status_code, answer.content, answer.headers["content-type"]

    launch = router_cli.parse(
        ["--vllm-pd-disaggregation", "--prefill", "http://p:8001", "--decode", "http://d:8001"]
    )
    router = Router(launch, Workers(launch, None), send=send)
    client = TestClient(router.app())
    assert client.get("/health").status_code == 200 and client.get("/readiness").status_code == 200
    body = {"model": "qwen", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 4}
    answer = client.post("/v1/chat/completions", json=body)
    assert answer.status_code == 200
    assert answer.json()["choices"][0]["message"]["content"] == " ".join(tokens("qwen", "hello there", 4))
    (prefill, decode) = seen
    assert prefill[0] == "http://p:8001" and prefill[2]["max_tokens"] == 1 and prefill[2]["stream"] is False
    assert prefill[2]["kv_transfer_params"]["do_remote_decode"] is True
    assert decode[0] == "http://d:8001" and decode[2]["max_tokens"] == 4
    assert decode[2]["kv_transfer_params"] == {"do_remote_prefill": True, "remote_host": "p"}
    # Each engine counted its part: one token on the prefill, four on the decode.
    assert (
        'vllm:generation_tokens_total{model_name="qwen"} 1' in engines["http://p:8001"].get("/metrics").text
    )
    assert (
        'vllm:generation_tokens_total{model_name="qwen"} 4' in engines["http://d:8001"].get("/metrics").text
    )
    metrics = TestClient(router.metrics_app()).get("/metrics").text
    assert 'worker="http://p:8001",worker_type="prefill"} 1' in metrics
    assert 'worker="http://d:8001",worker_type="decode"} 1' in metrics
    assert client.get("/v1/models").json()["data"][0]["id"] == "qwen"


def test_a_refused_prefill_is_the_answer_and_no_decode_is_asked() -> None:
    seen: list[str] = []

    async def send(method: str, url: str, body: bytes | None, headers: dict[str, str], timeout: float):
        seen.append(url)
        return 404, b'{"error": {"message": "The model `x` does not exist."}}', "application/json"

    launch = router_cli.parse(
        ["--vllm-pd-disaggregation", "--prefill", "http://p:1", "--decode", "http://d:1"]
    )
    client = TestClient(Router(launch, Workers(launch, None), send=send).app())
    answer = client.post(
        "/v1/chat/completions", json={"model": "x", "messages": [{"role": "user", "content": "a"}]}
    )
    assert answer.status_code == 404 and seen == ["http://p:1/v1/chat/completions"]


def test_without_workers_it_is_not_ready_and_says_which_kind_is_missing() -> None:
    launch = router_cli.parse(["--vllm-pd-disaggregation", "--prefill", "http://p:1"])
    client = TestClient(Router(launch, Workers(launch, None)).app())
    assert client.get("/readiness").status_code == 503
    answer = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "a"}]})
    assert answer.status_code == 503 and "no decode worker" in answer.json()["error"]["message"]
