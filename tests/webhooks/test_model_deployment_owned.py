"""Operator-owned keys on a ModelDeployment (§3, §5 #14–#16): every spelling the engine's own parser
reads as an owned key, per engine; owned env on every role; the conditional ``--kv-cache-dtype``."""

from __future__ import annotations

import pytest

from tests.webhooks import objects
from tests.webhooks.model_deployments import cause, cluster, deleting, kv_cache, md, paths, role, run
from webhooks import modeldeployment

validate = modeldeployment.validate


def _args(engine, *args, **fields):
    return md(role(extraArgs=list(args), **fields), engine=engine)


# --- #14 owned args -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "key"),
    [
        ("--kv-transfer-config={}", "--kv-transfer-config"),
        ("--kv_transfer_config={}", "--kv-transfer-config"),
        ("--kv-transfer-conf", "--kv-transfer-config"),
        ("--kv-transfer-config.kv_role=x", "--kv-transfer-config"),
        ("--kv_transfer_config.kv_role=kv_both", "--kv-transfer-config"),
        ("--kv-events-config", "--kv-events-config"),
        ("--kv-events", "--kv-events-config"),
    ],
)
def test_14_vllm_owned_args_in_every_spelling(token, key):
    assert run(validate, _args("vLLM", "--max-model-len", "8192")).allowed
    message = cause(
        run(validate, _args("vLLM", "--max-model-len", "8192", token)), "spec.roles[0].extraArgs[2]"
    )
    assert key in message and "vLLM" in message and "spec.roles[0].command" in message
    assert "cannot be told apart" in message
    spelled = token.partition("=")[0]
    if spelled != key:
        assert spelled in message  # the spelling and the key it resolves to


@pytest.mark.parametrize(
    ("token", "key"),
    [
        ("--hicache-storage-backend", "--hicache-storage-backend"),
        ("--hicache-storage-backend-extra-config={}", "--hicache-storage-backend-extra-config"),
        ("--hicache-storage-backend-e", "--hicache-storage-backend-extra-config"),
        ("--disaggregation-mo", "--disaggregation-mode"),
        ("--disaggregation-transfer-backend=mooncake", "--disaggregation-transfer-backend"),
        ("--disaggregation-bootstrap-port", "--disaggregation-bootstrap-port"),
    ],
)
def test_14_sglang_owned_args_take_prefixes_only(token, key):
    message = cause(run(validate, _args("SGLang", token)), "spec.roles[0].extraArgs[0]")
    assert key in message and "SGLang" in message


@pytest.mark.parametrize(
    "token",
    [
        "--hicache_storage_backend",  # SGLang does not rewrite underscores
        "--disaggregation-mode.x=1",  # nor drop dotted members
        "--hicache-storage",  # a prefix of two owned keys resolves to neither
        "--kv-transfer-config",  # a vLLM key is a plain user key on SGLang
    ],
)
def test_14_sglang_spellings_it_does_not_read_as_owned(token):
    assert run(validate, _args("SGLang", token)).allowed


def test_14_owned_args_checked_per_entry_past_double_dash_and_in_extra_args_only():
    refused = run(validate, _args("vLLM", "--", "--kv-transfer-config", "{}"))
    assert paths(refused) == ["spec.roles[0].extraArgs[1]"]
    # A value position is checked too: the reader does not know which flags take values.
    assert paths(run(validate, _args("vLLM", "--api-key", "--kv-transfer-config"))) == [
        "spec.roles[0].extraArgs[1]"
    ]
    # Beside a command, extraArgs are inert; the command itself is the user's own.
    take_over = role(
        command=["vllm", "serve", "m", "--kv-transfer-config", "{}"], extraArgs=["--kv-events-config"]
    )
    assert run(validate, md(take_over)).allowed
    # On vLLM the SGLang keys are plain user arguments.
    assert run(validate, _args("vLLM", "--hicache-storage-backend", "mooncake")).allowed


# --- #15 owned env ----------------------------------------------------------------------------------------


def _env(engine, name, **fields):
    return md(
        role(env=[{"name": "HF_TOKEN", "value": "x"}, {"name": name, "value": "v"}], **fields), engine=engine
    )


@pytest.mark.parametrize(
    ("engine", "name"),
    [
        ("vLLM", "MOONCAKE_CONFIG_PATH"),
        ("vLLM", "VLLM_MOONCAKE_BOOTSTRAP_PORT"),
        ("SGLang", "MOONCAKE_MASTER"),
        ("SGLang", "MOONCAKE_TE_META_DATA_SERVER"),
        ("SGLang", "MOONCAKE_PROTOCOL"),
        ("SGLang", "MOONCAKE_DEVICE"),
        ("SGLang", "MOONCAKE_GLOBAL_SEGMENT_SIZE"),
        ("SGLang", "MOONCAKE_LOCAL_HOSTNAME"),
        ("SGLang", "MOONCAKE_TENANT_ID"),
        ("SGLang", "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH"),
        ("vLLM", "GPUSTACK_MEMBER_INDEX"),
        ("SGLang", "GPUSTACK_REPLICA_LEADER_ADDRESS"),
        ("vLLM", "GPUSTACK_REPLICA_SIZE"),
    ],
)
def test_15_owned_env_per_engine(engine, name):
    assert run(validate, md(role(env=[{"name": "HF_TOKEN", "value": "x"}]), engine=engine)).allowed
    message = cause(run(validate, _env(engine, name)), "spec.roles[0].env[1]")
    assert name in message and engine in message and "spec.roles[0].command" in message
    assert "operator-rendered configuration" in message


@pytest.mark.parametrize(
    ("engine", "name"),
    [
        ("SGLang", "MOONCAKE_CONFIG_PATH"),  # owned on vLLM only
        ("vLLM", "MOONCAKE_MASTER"),  # owned on SGLang only: never decided by prefix
        ("vLLM", "MOONCAKE_TENANT_ID"),
        ("vLLM", "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH"),
        ("SGLang", "MOONCAKE_EXTRA"),
        ("vLLM", "MC_TE_METRIC"),  # defaulted, not owned: the user's value wins
    ],
)
def test_15_keys_owned_on_the_other_engine_are_plain(engine, name):
    assert run(validate, _env(engine, name)).allowed


def test_15_rank_variables_reserved_at_size_one_and_on_take_over_roles():
    message = cause(run(validate, _env("vLLM", "GPUSTACK_MEMBER_INDEX", size=1)), "spec.roles[0].env[1]")
    assert "every size" in message
    take_over = _env("SGLang", "MOONCAKE_TENANT_ID", command=["python3", "-m", "sglang.launch_server"])
    message = cause(run(validate, take_over), "spec.roles[0].env[1]")
    assert "reuse domain" in message


# --- #16 --kv-cache-dtype --------------------------------------------------------------------------------


def test_16_kv_cache_dtype_is_owned_while_a_cache_is_attached():
    assert run(validate, _args("vLLM", "--kv-cache-dtype=fp8")).allowed
    obj = md(role(extraArgs=["--kv-cache-dtype=fp8"]), kvCache=kv_cache())
    message = cause(run(validate, obj), "spec.roles[0].extraArgs[0]")
    assert "'bfloat16'" in message and "KVCachePoolBinding" in message and "spec.roles[0].command" in message
    # Every spelling the engine reads as the flag.
    for token in ("--kv_cache_dtype", "--kv-cache-dt", "--kv-cache-dtype.x=1"):
        obj = md(role(extraArgs=[token, "fp8"]), kvCache=kv_cache())
        assert paths(run(validate, obj)) == ["spec.roles[0].extraArgs[0]"], token
    sglang = md(role(extraArgs=["--kv-cache-dt", "fp8_e4m3"]), kvCache=kv_cache(), engine="SGLang")
    assert paths(run(validate, sglang)) == ["spec.roles[0].extraArgs[0]"]


def test_16_not_owned_with_a_command_or_the_setting_off():
    take_over = md(role(command=["vllm", "serve", "m", "--kv-cache-dtype", "fp8"]), kvCache=kv_cache())
    assert run(validate, take_over).allowed
    off = cluster(objects.setting("model-deployment-kv-cache-dtype-owned", "false"))
    obj = md(role(extraArgs=["--kv-cache-dtype=fp8"]), kvCache=kv_cache())
    assert run(validate, obj, objects_=off).allowed


def test_16_a_stored_flag_refuses_the_next_update_but_not_the_finalizer_clearing_one():
    stored = md(role(extraArgs=["--kv-cache-dtype=fp8"]), kvCache=kv_cache())
    stored["metadata"]["finalizers"] = ["worker.gpustack.ai/model-deployment-protection"]
    scaled = md(role(extraArgs=["--kv-cache-dtype=fp8"], replicas=2), kvCache=kv_cache())
    assert paths(run(validate, scaled, old=stored)) == ["spec.roles[0].extraArgs[0]"]
    gone = deleting(stored)
    cleared = deleting(stored)
    cleared["metadata"]["finalizers"] = []
    assert run(validate, cleared, old=gone).allowed


def test_16_the_message_still_names_the_flag_when_the_binding_is_missing():
    obj = md(role(extraArgs=["--kv-cache-dtype=fp8"]), kvCache=kv_cache("absent"))
    message = cause(run(validate, obj), "spec.roles[0].extraArgs[0]")
    assert "--kv-cache-dtype" in message and "KVCachePoolBinding's dtype" in message
