"""Pod KV-cache injection (kv-cache spec §3.4 rules 1–13, §4) and the frozen-keys guard."""

from __future__ import annotations

import copy
import json

import pytest

from tests.webhooks.kvcache_objects import backend, binding, paths, pod, ready_pool, run, setting
from webhooks import patch
from webhooks.kvcache import frozen, inject

ENDPOINT = "mooncake-dram-leader.gpustack-system.svc:50051"
CLUSTER = [backend(), ready_pool(), binding()]
ANN = "metadata.annotations[kvcache.gpustack.ai/binding]"


def injected(obj, cluster=CLUSTER):
    decision = run(inject.mutate, obj, cluster=cluster)
    assert decision.allowed, decision.message
    return patch.apply(copy.deepcopy(obj), decision.patch)


def env_of(container):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_vllm_gets_the_projected_file() -> None:
    out = injected(pod())
    notes = out["metadata"]["annotations"]
    config = json.loads(notes["kvcache.gpustack.ai/client-config"])
    assert config == {
        "master_server_address": ENDPOINT,
        "metadata_server": "P2PHANDSHAKE",
        "protocol": "tcp",
        "device_name": "",
        "global_segment_size": 0,
        "mode": "standalone-store",
        "local_buffer_size": 134217728,
        "tenant_id": "default",
    }
    assert out["spec"]["volumes"] == [
        {
            "name": "gpustack-kvcache-config",
            "downwardAPI": {
                "items": [
                    {
                        "path": "mooncake.json",
                        "fieldRef": {
                            "fieldPath": "metadata.annotations['kvcache.gpustack.ai/client-config']"
                        },
                    }
                ]
            },
        }
    ]
    main = out["spec"]["containers"][0]
    assert main["volumeMounts"] == [
        {"name": "gpustack-kvcache-config", "mountPath": "/etc/gpustack/kvcache", "readOnly": True}
    ]
    assert env_of(main) == {
        "MOONCAKE_CONFIG_PATH": "/etc/gpustack/kvcache/mooncake.json",
        "MC_TE_METRIC": "1",
        "MC_STORE_CLIENT_METRIC_BANDWIDTH": "1",
    }
    assert main["args"][-4:] == [
        "--kv-transfer-config",
        '{"kv_connector":"MooncakeStoreConnector","kv_role":"kv_both"}',
        "--kv-cache-dtype",
        "bfloat16",
    ]
    assert json.loads(notes["kvcache.gpustack.ai/injected"]) == {
        "binding": "qwen-cache",
        "engine": "vllm",
        "vehicle": "file",
        "domain": "default",
        "tenantInjected": True,
        "launchProgram": "vllm",
        "launchArgsForwarded": False,
    }


@pytest.mark.parametrize(("role", "kv_role"), [("Prefill", "kv_producer"), ("Decode", "kv_consumer")])
def test_vllm_role_and_ascend_connector(role, kv_role) -> None:
    cann = backend(transport={"protocol": "CANN"})
    annotations = {"kvcache.gpustack.ai/role": role, "kvcache.gpustack.ai/manufacturer": "ascend"}
    out = injected(pod(annotations=annotations), [cann, ready_pool(), binding()])
    args = out["spec"]["containers"][0]["args"]
    assert json.loads(args[args.index("--kv-transfer-config") + 1]) == {
        "kv_connector": "AscendStoreConnector",
        "kv_role": kv_role,
    }
    assert (
        json.loads(out["metadata"]["annotations"]["kvcache.gpustack.ai/client-config"])["protocol"]
        == "ascend"
    )


def test_sglang_gets_environment_only() -> None:
    user = [
        {"name": "MOONCAKE_MASTER", "value": "elsewhere:1"},
        {"name": "MOONCAKE_TENANT_ID", "value": "mine"},
        {"name": "MC_TE_METRIC", "value": "0"},
        {"name": "MOONCAKE_TENANT_ID", "value": "again"},
    ]
    out = injected(pod(engine="SGLang", env=user, annotations={"kvcache.gpustack.ai/role": "Decode"}))
    main = out["spec"]["containers"][0]
    names = [e["name"] for e in main["env"]]
    assert names == [
        "MOONCAKE_MASTER",
        "MOONCAKE_TENANT_ID",
        "MC_TE_METRIC",
        "MOONCAKE_TE_META_DATA_SERVER",
        "MOONCAKE_PROTOCOL",
        "MOONCAKE_DEVICE",
        "MOONCAKE_GLOBAL_SEGMENT_SIZE",
        "MOONCAKE_LOCAL_HOSTNAME",
        "MC_STORE_CLIENT_METRIC_BANDWIDTH",
    ]
    env = env_of(main)
    assert env["MOONCAKE_MASTER"] == ENDPOINT and env["MOONCAKE_TENANT_ID"] == "default"
    assert env["MC_TE_METRIC"] == "0"  # the user's metric toggle is kept
    assert env["MOONCAKE_DEVICE"] == "" and env["MOONCAKE_GLOBAL_SEGMENT_SIZE"] == "0"
    assert env["MOONCAKE_LOCAL_HOSTNAME"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert "MOONCAKE_TE_METADATA_SERVER" not in env
    assert main["args"][-5:] == [
        "--hicache-storage-backend",
        "mooncake",
        "--enable-hierarchical-cache",
        "--kv-cache-dtype",
        "bfloat16",
    ]
    assert (
        "volumes" not in out["spec"]
        and "kvcache.gpustack.ai/client-config" not in out["metadata"]["annotations"]
    )
    assert (
        json.loads(out["metadata"]["annotations"]["kvcache.gpustack.ai/injected"])["vehicle"] == "environment"
    )


def test_sglang_hierarchical_cache_named_by_the_user_is_not_repeated() -> None:
    out = injected(pod(engine="SGLang", args=["--enable-hierarchical"]))
    assert out["spec"]["containers"][0]["args"].count("--enable-hierarchical-cache") == 0


def test_single_tenant_pool_injects_without_tenant() -> None:
    cluster = [backend(), ready_pool(ledger=("False", "MultiTenancyDisabled")), binding()]
    out = injected(pod(), cluster)
    assert "tenant_id" not in json.loads(out["metadata"]["annotations"]["kvcache.gpustack.ai/client-config"])
    assert (
        json.loads(out["metadata"]["annotations"]["kvcache.gpustack.ai/injected"])["tenantInjected"] is False
    )


def test_dtype_setting_off_renders_no_dtype() -> None:
    out = injected(
        pod(args=["serve", "--kv-cache-dtype=fp8"]),
        [*CLUSTER, setting("model-deployment-kv-cache-dtype-owned", "false")],
    )
    assert out["spec"]["containers"][0]["args"].count("--kv-cache-dtype") == 0


def test_not_opted_in_is_untouched() -> None:
    assert not run(inject.mutate, pod(label="false"), cluster=CLUSTER).patch


# --- refusals, in rule order ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("annotations", "path"),
    [
        ({"kvcache.gpustack.ai/bindng": "x"}, "metadata.annotations[kvcache.gpustack.ai/bindng]"),
        ({"kvcache.gpustack.ai/domain": "x"}, "metadata.annotations[kvcache.gpustack.ai/domain]"),
        ({"kvcache.gpustack.ai/injected": "{}"}, "metadata.annotations[kvcache.gpustack.ai/injected]"),
        ({"kvcache.gpustack.ai/binding": "team-b/chat"}, ANN),
        ({"kvcache.gpustack.ai/engine": "vllm-ascend"}, "metadata.annotations[kvcache.gpustack.ai/engine]"),
        ({"kvcache.gpustack.ai/role": "Server"}, "metadata.annotations[kvcache.gpustack.ai/role]"),
        (
            {"kvcache.gpustack.ai/manufacturer": "nvidia"},
            "metadata.annotations[kvcache.gpustack.ai/manufacturer]",
        ),
    ],
)
def test_rules_1_to_3(annotations, path) -> None:
    decision = run(inject.mutate, pod(annotations=annotations), cluster=CLUSTER)
    assert paths(decision) == [path]


def test_rule3_ascend_with_sglang() -> None:
    decision = run(
        inject.mutate,
        pod(engine="SGLang", annotations={"kvcache.gpustack.ai/manufacturer": "ascend"}),
        cluster=CLUSTER,
    )
    assert not decision.allowed


def test_rule4_binding_missing_or_terminating() -> None:
    decision = run(inject.mutate, pod(binding_name="nope"), cluster=CLUSTER)
    assert paths(decision) == [ANN] and "team-a" in decision.message and "nope" in decision.message
    gone = binding()
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert "being deleted" in run(inject.mutate, pod(), cluster=[backend(), ready_pool(), gone]).message


def test_rule5_pool_or_backend_missing() -> None:
    assert "does not exist" in run(inject.mutate, pod(), cluster=[backend(), binding()]).message
    assert "KVCacheBackend" in run(inject.mutate, pod(), cluster=[ready_pool(), binding()]).message


@pytest.mark.parametrize("ledger", [("False", "LedgerUnreachable"), ("Unknown", "Probing"), None])
def test_rule6_ledger_not_available(ledger) -> None:
    pool = ready_pool(ledger=ledger or ("True", "x"))
    if ledger is None:
        del pool["status"]["conditions"]
    decision = run(inject.mutate, pod(), cluster=[backend(), pool, binding()])
    assert paths(decision) == [ANN] and "QuotaLedgerAvailable" in decision.message
    if ledger:
        assert ledger[1] in decision.message


def test_rule7_no_endpoint() -> None:
    pool = ready_pool()
    del pool["status"]["clientEndpoint"]
    assert "client endpoint" in run(inject.mutate, pod(), cluster=[backend(), pool, binding()]).message


def test_rule8_transport() -> None:
    mixed = backend()
    mixed["spec"]["connection"]["managed"]["members"].append(
        {
            "nodeSelector": {"a": "b"},
            "medium": "VRAM",
            "capacityPerMember": "1Gi",
            "transport": {"protocol": "RDMA"},
        }
    )
    decision = run(inject.mutate, pod(), cluster=[mixed, ready_pool(), binding()])
    assert "rdma, tcp" in decision.message
    ascend = pod(annotations={"kvcache.gpustack.ai/manufacturer": "ascend"})
    decision = run(inject.mutate, ascend, cluster=CLUSTER)
    assert "CANN" in decision.message and "tcp" in decision.message


def test_rule9_target_container() -> None:
    two = pod(containers=[{"name": "sidecar", "command": ["x"]}, {"name": "server", "command": ["vllm"]}])
    decision = run(inject.mutate, two, cluster=CLUSTER)
    assert "sidecar, server" in decision.message
    named = copy.deepcopy(two)
    named["metadata"]["annotations"]["kvcache.gpustack.ai/container"] = "server"
    out = injected(named)
    assert "args" not in out["spec"]["containers"][0] and out["spec"]["containers"][1]["args"]
    init = copy.deepcopy(two)
    init["spec"]["initContainers"] = [{"name": "setup", "command": ["x"]}]
    init["metadata"]["annotations"]["kvcache.gpustack.ai/container"] = "setup"
    assert "init container" in run(inject.mutate, init, cluster=CLUSTER).message


def test_rule10_owned_keys_of_this_engine_only() -> None:
    decision = run(inject.mutate, pod(args=["serve", "--kv_transfer_config", "{}"]), cluster=CLUSTER)
    assert paths(decision) == ["spec.containers[0].args[1]"] and "--kv-transfer-config" in decision.message
    decision = run(inject.mutate, pod(env=[{"name": "MOONCAKE_CONFIG_PATH", "value": "/x"}]), cluster=CLUSTER)
    assert paths(decision) == ["spec.containers[0].env[0].name"]
    sglang_ok = pod(engine="SGLang", env=[{"name": "MOONCAKE_CONFIG_PATH", "value": "/x"}])
    assert run(inject.mutate, sglang_ok, cluster=CLUSTER).allowed
    decision = run(
        inject.mutate,
        pod(engine="SGLang", args=["--hicache-storage-backend-extra-config", "{}"]),
        cluster=CLUSTER,
    )
    assert not decision.allowed


def test_rule11_dtype_flag() -> None:
    decision = run(inject.mutate, pod(args=["serve", "--kv-cache-dtype=fp8"]), cluster=CLUSTER)
    assert paths(decision) == ["spec.containers[0].args[1]"]


def test_rule12_volume_collisions() -> None:
    obj = pod()
    obj["spec"]["containers"][0]["volumeMounts"] = [{"name": "mine", "mountPath": "/etc/gpustack/kvcache"}]
    obj["spec"]["volumes"] = [{"name": "mine", "emptyDir": {}}]
    assert paths(run(inject.mutate, obj, cluster=CLUSTER)) == ["spec.containers[0].volumeMounts[0].mountPath"]
    obj["spec"]["containers"][0]["volumeMounts"] = [{"name": "mine", "mountPath": "/models"}]
    assert run(inject.mutate, obj, cluster=CLUSTER).allowed


def test_rule13_launch_shape_and_all_refusals_together() -> None:
    decision = run(
        inject.mutate,
        pod(command=["sh", "-c", "vllm serve"], args=["--kv-cache-dtype", "x"]),
        cluster=CLUSTER,
    )
    assert paths(decision) == ["spec.containers[0].args[0]", "spec.containers[0].command"]


# --- frozen keys --------------------------------------------------------------------------------------
def test_frozen_keys() -> None:
    old = injected(pod())
    old["metadata"]["finalizers"] = ["x/y"]
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = []
    new["metadata"]["labels"]["other"] = "1"
    assert run(frozen.validate, new, old=old, operation="UPDATE").allowed
    edited = copy.deepcopy(old)
    edited["metadata"]["annotations"]["kvcache.gpustack.ai/client-config"] = "{}"
    edited["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert paths(run(frozen.validate, edited, old=old, operation="UPDATE")) == [
        "metadata.annotations[kvcache.gpustack.ai/client-config]"
    ]
    dropped = copy.deepcopy(old)
    del dropped["metadata"]["labels"]["kvcache.gpustack.ai/inject"]
    del dropped["metadata"]["annotations"]["kvcache.gpustack.ai/injected"]
    assert len(run(frozen.validate, dropped, old=old, operation="UPDATE").causes) == 2
