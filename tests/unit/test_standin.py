"""standin: the stand-in engine reads every command line the controller renders as its engine would,
refuses what its engine would refuse, checks weights, and serves the OpenAI surface."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from controllers.modeldeployment.render import render_role, stamp
from standin import cli, weights
from standin.__main__ import main as standin_main
from standin.server import app, tokens
from tests.hub.server import HubServer
from tests.unit.md_fixtures import context, deployment, pair, role

MODEL = "Qwen/Qwen2.5-7B-Instruct"


def rendered(obj: dict, role_name: str | None = None) -> list[str]:
    ctx = context(obj)
    target = next(r for r in ctx.md.roles if role_name in (None, r.name))
    pod = stamp(ctx, render_role(ctx, target), 0, 0)
    main = next(c for c in pod["spec"]["containers"] if c["name"] == "main")
    return [*main["command"], *main.get("args", [])]


def engine_argv(line: list[str]) -> tuple[str, list[str]]:
    """The engine and its arguments, from the rendered program."""
    if line[:2] == ["vllm", "serve"]:
        return cli.VLLM, line[1:]
    assert line[:3] == ["python3", "-m", "sglang.launch_server"]
    return cli.SGLANG, line[3:]


def sglang(obj: dict) -> dict:
    obj["spec"]["engine"]["name"] = "SGLang"
    return obj


RENDERED = {
    "vllm-server": (deployment(), None, "server"),
    "vllm-server-extra-args": (
        deployment(
            role(extraArgs=["--max-model-len", "4096", "--enforce-eager", "--gpu-memory-utilization=0.8"])
        ),
        None,
        "server",
    ),
    "sglang-server": (deployment(engine="SGLang"), None, "server"),
    "vllm-llm-d-prefill": (pair(router={"name": "llm-d-router"}), "prefill", "prefill"),
    "vllm-llm-d-decode": (pair(router={"name": "llm-d-router"}), "decode", "decode"),
    "vllm-router-rdma-prefill": (
        pair(router={"name": "vllm-router"}, kvTransfer={"protocol": "RDMA"}),
        "prefill",
        "prefill",
    ),
    "sglang-gateway-prefill": (sglang(pair(router={"name": "sglang-gateway"})), "prefill", "prefill"),
    "sglang-gateway-decode": (sglang(pair(router={"name": "sglang-gateway"})), "decode", "decode"),
}


@pytest.mark.parametrize("case", sorted(RENDERED))
def test_every_rendered_line_is_accepted_by_the_engines_flag_tables(case: str) -> None:
    obj, role_name, kind = RENDERED[case]
    engine, argv = engine_argv(rendered(obj, role_name))
    launch = cli.parse(engine, argv)
    assert launch.model == MODEL and launch.names[0] == MODEL
    assert launch.host == "0.0.0.0" and launch.port == int(argv[argv.index("--port") + 1])
    assert launch.role == kind


@pytest.mark.parametrize(
    ("engine", "argv", "words"),
    [
        (cli.VLLM, ["serve", MODEL, "--not-a-vllm-flag", "3"], "unrecognized arguments: --not-a-vllm-flag 3"),
        (cli.VLLM, ["serve", MODEL, "--port", "eighty"], "argument --port: invalid int value: 'eighty'"),
        (cli.VLLM, ["serve", MODEL, "--kv-transfer-config", "{kv_role"], "argument --kv-transfer-config"),
        (cli.VLLM, ["serve"], "required: --model"),
        (cli.VLLM, ["chat", MODEL], "only `vllm serve`"),
        (cli.VLLM, ["serve", MODEL, "--enforce-eager", "stray", "other"], "unrecognized arguments: other"),
        (cli.SGLANG, ["--model-path", MODEL, "--disaggregation-mode", "both"], "invalid choice: 'both'"),
        (cli.SGLANG, ["--model-path", MODEL, "--kv-transfer-config", "{}"], "--kv-transfer-config"),
        (cli.SGLANG, ["--port", "30000"], "required: --model-path"),
        (cli.SGLANG, [MODEL], "unrecognized arguments"),
    ],
)
def test_what_the_engine_refuses_is_refused_in_its_words(engine: str, argv: list[str], words: str) -> None:
    with pytest.raises(cli.Refused, match=None) as refused:
        cli.parse(engine, argv)
    assert words in str(refused.value)


def test_vllm_spellings_its_parser_accepts() -> None:
    launch = cli.parse(
        cli.VLLM,
        ["serve", "--model=/models/x", "--max_model_len", "2048", "--no-enable-prefix-caching",
         "--compilation-config.level", "3", "-tp", "2", "--served-model-name", "a", "b"],
    )  # fmt: skip
    assert launch.model == "/models/x" and launch.names == ["a", "b"]
    assert launch.number("--tensor-parallel-size") == 2 and launch.number("--max-model-len") == 2048
    assert "--no-enable-prefix-caching" in launch.flags and "--compilation-config.level" in launch.flags


def test_sglang_alias_and_default_port() -> None:
    launch = cli.parse(cli.SGLANG, ["--model", "/m", "--tp", "2"])
    assert launch.model == "/m" and launch.port == 30000 and launch.number("--tensor-parallel-size") == 2


# --- weights ------------------------------------------------------------------------------------------


def model_dir(root: Path, **files: bytes) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (root / name).write_bytes(data)
    return root


def test_a_directory_with_a_config_and_weights_is_a_model(tmp_path: Path) -> None:
    path = model_dir(
        tmp_path / "m", **{"config.json": b'{"hidden_size": 8}', "model.safetensors": b"\0" * 9000}
    )
    model = weights.resolve(str(path))
    assert model.config == {"hidden_size": 8} and model.weight_files == 1 and model.weight_bytes == 9000


@pytest.mark.parametrize(
    ("files", "words"),
    [
        ({"model.safetensors": b"\0"}, "holds no config.json"),
        ({"config.json": b"{", "model.safetensors": b"\0"}, "cannot be read as JSON"),
        ({"config.json": b"[1]", "model.safetensors": b"\0"}, "is not a JSON object"),
        ({"config.json": b"{}", "README.md": b"# x"}, "holds no weights file"),
    ],
)
def test_a_directory_that_is_no_model_is_refused(tmp_path: Path, files: dict, words: str) -> None:
    with pytest.raises(cli.Refused) as refused:
        weights.resolve(str(model_dir(tmp_path / "m", **files)))
    assert words in str(refused.value)


def test_a_missing_path_is_refused_without_asking_the_hub(tmp_path: Path) -> None:
    with pytest.raises(cli.Refused, match="does not exist"):
        weights.resolve(str(tmp_path / "absent"))


def test_a_repository_name_is_downloaded_from_hf_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with HubServer(tmp_path / "hub") as hub:
        hub.repos.create("org/tiny")
        hub.repos.commit("org/tiny", {"config.json": b'{"a": 1}\n', "model.safetensors": b"\1" * 5000})
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        model = weights.resolve("org/tiny")
        assert model.weight_bytes == 5000 and str(model.path).startswith(str(tmp_path / "hf"))
        with pytest.raises(cli.Refused, match="could not be downloaded"):
            weights.resolve("org/absent")


# --- HTTP ---------------------------------------------------------------------------------------------


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    path = model_dir(tmp_path / "m", **{"config.json": b"{}", "model.safetensors": b"\0" * 10})
    launch = cli.parse(cli.VLLM, ["serve", str(path), "--served-model-name", "qwen-chat", "--port", "8080"])
    return TestClient(app(launch, weights.resolve(str(path))))


def test_health_and_models_name_the_served_model(client: TestClient) -> None:
    assert client.get("/health").status_code == 200
    listed = client.get("/v1/models").json()["data"]
    assert [m["id"] for m in listed] == ["qwen-chat"] and listed[0]["owned_by"] == "gpustack-standin"


def test_chat_completions_are_deterministic_and_counted(client: TestClient) -> None:
    body = {"model": "qwen-chat", "messages": [{"role": "user", "content": "say hi"}], "max_tokens": 5}
    first, second = (
        client.post("/v1/chat/completions", json=body).json(),
        client.post("/v1/chat/completions", json=body).json(),
    )
    assert first["choices"][0]["message"]["content"] == second["choices"][0]["message"]["content"]
    assert first["choices"][0]["message"]["content"] == " ".join(tokens("qwen-chat", "say hi", 5))
    assert first["usage"] == {"prompt_tokens": 2, "completion_tokens": 5, "total_tokens": 7}
    assert 'vllm:generation_tokens_total{model_name="qwen-chat"} 10' in client.get("/metrics").text


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"model": "other", "messages": [{"role": "user", "content": "x"}]}, 404, "does not exist"),
        ({"messages": []}, 400, "non-empty list"),
        ({"messages": [{"role": "user", "content": 3}]}, 400, "string content"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": "9"}, 400, "positive integer"),
        ([1, 2], 400, "JSON object"),
    ],
)
def test_bad_requests_are_refused_with_a_message(client: TestClient, body, status: int, words: str) -> None:
    answer = client.post("/v1/chat/completions", json=body)
    assert answer.status_code == status and words in answer.json()["error"]["message"]


def test_completions_and_about(client: TestClient) -> None:
    answer = client.post("/v1/completions", json={"prompt": "a b c", "max_tokens": 3}).json()
    assert answer["model"] == "qwen-chat" and len(answer["choices"][0]["text"].split()) == 3
    about = client.get("/standin").json()
    assert about["role"] == "server" and about["weights"]["files"] == 1


def test_main_exits_2_on_a_refused_line_with_the_engines_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert standin_main(["vllm", "serve", MODEL, "--bogus"]) == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err
    assert standin_main(["vllm", "serve", "/nowhere/model"]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert standin_main(["ollama"]) == 2


def test_the_flag_tables_name_their_source_version() -> None:
    for engine in (cli.VLLM, cli.SGLANG):
        header = (cli.FLAGS_DIR / f"{engine}.txt").read_text().splitlines()[0]
        assert header.startswith(f"# {engine} ") and len(cli.known_flags(engine)) > 200
