"""controllers.modeldeployment.render: a role's Pods, field by field against model-deployment.md §7,
§11 and §12 — names, labels and annotations in render order, the hash, the Pod spec, ports and
probes, resources, the connector and the direct decoder."""

from __future__ import annotations

import hashlib
import json
import re

import orjson
import pytest

from api import constants
from controllers.modeldeployment import labels, names
from controllers.modeldeployment.render import Facts, RenderError, render_role, stamp
from tests.unit.md_fixtures import ASCEND, ENTRANCE, NS, UID, context, deployment, instance_type, pair, role

MODEL = "Qwen/Qwen2.5-7B-Instruct"


def pod_of(obj, *types, role_name=None, ordinal=0, member=0, facts=None):
    ctx = context(obj, *types, facts=facts)
    target = next(r for r in ctx.md.roles if role_name in (None, r.name))
    return stamp(ctx, render_role(ctx, target), ordinal, member)


def main(pod):
    return next(ct for ct in pod["spec"]["containers"] if ct["name"] == "main")


def env(container) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


# --- Names, labels, annotations (§7.1–§7.3) ---------------------------------------------------------


def test_size_one_replicas_are_generated_names() -> None:
    pod = pod_of(deployment())
    meta = pod["metadata"]
    assert meta["generateName"] == "qwen-server-" and "name" not in meta
    assert "hostname" not in pod["spec"] and "subdomain" not in pod["spec"]
    assert constants.LABEL_MEMBER_INDEX not in meta["labels"]
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "worker.gpustack.ai/v1",
            "kind": "ModelDeployment",
            "name": "qwen",
            "uid": UID,
            "controller": True,
            "blockOwnerDeletion": False,
        }
    ]


def test_members_above_size_one_are_named_and_wired() -> None:
    pod = pod_of(deployment(role(size=2, replicas=3)), ordinal=2, member=1)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == "qwen-server-r2-m1" and "generateName" not in meta
    assert spec["hostname"] == "qwen-server-r2-m1" and spec["subdomain"] == "qwen-server-r2"
    assert (
        meta["labels"][constants.LABEL_MEMBER_INDEX] == "1"
        and meta["labels"][constants.LABEL_POD_ORDINAL] == "2"
    )
    values = env(main(pod))
    assert values[constants.ENV_REPLICA_LEADER_ADDRESS] == "qwen-server-r2-m0.qwen-server-r2"
    assert values[constants.ENV_REPLICA_SIZE] == "2"
    assert values[constants.ENV_MEMBER_INDEX] == {
        "fieldRef": {"fieldPath": "metadata.labels['modeldeployment.gpustack.ai/member-index']"}
    }


def test_labels_are_the_selector_set_kind_queue_and_group() -> None:
    pod = pod_of(pair(), role_name="decode", ordinal=1)
    got = pod["metadata"]["labels"]
    assert got[constants.LABEL_APP_NAME] == "model-deployment"
    assert got[constants.LABEL_APP_INSTANCE] == "qwen" and got[constants.LABEL_APP_COMPONENT] == "decode"
    assert got[constants.LABEL_PART_OF] == "gpustack-operator-worker"
    assert got[constants.LABEL_ROLE_KIND] == "decode"
    assert got[constants.KUEUE_QUEUE_NAME] == ENTRANCE
    assert re.fullmatch(r"gpustack-fnv64-[0-9a-f]{16}", got[constants.KUEUE_POD_GROUP_NAME])
    assert got[constants.KUEUE_POD_GROUP_NAME] == names.pod_group_name(NS, "qwen", "decode", 1)
    assert got[constants.LABEL_POD_ORDINAL] == "1"
    assert got[constants.LABEL_KVCACHE_INJECT] == "false"  # the KV-cache injector leaves these Pods alone


def test_group_names_are_per_replica_and_always_hashed() -> None:
    groups = {names.pod_group_name(NS, "qwen", r, k) for r in ("server", "other") for k in range(3)}
    assert len(groups) == 6
    assert names.pod_group_name(NS, "qwen", "server", 0) != names.pod_group_name(
        "team-b", "qwen", "server", 0
    )


def test_group_annotations_and_no_fast_admission_nor_node_selector() -> None:
    pod = pod_of(deployment(role(size=4, replicas=2)))
    ann = pod["metadata"]["annotations"]
    assert ann[constants.KUEUE_POD_GROUP_TOTAL_COUNT] == "4"
    assert ann[constants.KUEUE_ROLE_HASH] == "server"
    assert ann[constants.KUEUE_POD_GROUP_SERVING] == "true"
    assert constants.KUEUE_POD_GROUP_FAST_ADMISSION not in ann
    assert "nodeSelector" not in pod["spec"]


def test_the_hash_is_sha256_of_the_canonical_form_written_last() -> None:
    pod = pod_of(deployment(role(size=2, replicas=2)), ordinal=1, member=1)
    meta = pod["metadata"]
    written = meta["annotations"][constants.ANNOTATION_POD_SPEC_HASH]
    body = {
        "labels": meta["labels"],
        "annotations": {
            k: v for k, v in meta["annotations"].items() if k != constants.ANNOTATION_POD_SPEC_HASH
        },
        "spec": pod["spec"],
    }
    assert written == hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()
    # It covers the stamp: another ordinal or member hashes differently.
    other = pod_of(deployment(role(size=2, replicas=2)), ordinal=0, member=1)
    assert labels.live_hash(other) != written


def test_the_hash_moves_with_what_rolls_and_not_with_replicas() -> None:
    base = labels.live_hash(pod_of(deployment()))
    assert labels.live_hash(pod_of(deployment(role(replicas=5)))) == base
    for fields in (
        {"extraArgs": ["--max-model-len", "8192"]},
        {"env": [{"name": "HF_TOKEN", "value": "x"}]},
        {"image": "example/engine:1"},
        {"ports": [{"port": 9000, "protocol": "TCP"}]},
        {"privileged": True},
        {"imagePullPolicy": "Always"},
        {"terminationGracePeriodSeconds": 45},
        {"additionalVolumes": [{"mountPath": "/data", "configMap": {"name": "cfg"}}]},
    ):
        assert labels.live_hash(pod_of(deployment(role(**fields)))) != base, fields
    obj = deployment()
    obj["spec"]["engine"]["version"] = "0.30.0"
    assert labels.live_hash(pod_of(obj)) != base


# --- The Pod spec (§7.4) -------------------------------------------------------------------------


def test_pod_spec_basics() -> None:
    spec = pod_of(deployment(role(imagePullSecrets=[{"name": "regcred"}])))["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["restartPolicy"] == "Always"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert "runtimeClassName" not in spec  # no RuntimeClass observed
    with_class = pod_of(deployment(), facts=Facts(runtime_classes=frozenset({"nvidia"})))["spec"]
    assert with_class["runtimeClassName"] == "nvidia"


def test_managed_vllm_command_line_fills_host_and_port() -> None:
    container = main(pod_of(deployment(role(extraArgs=["--max-model-len", "8192"]))))
    assert container["command"] == [
        "vllm",
        "serve",
        MODEL,
        "--max-model-len",
        "8192",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
    ]
    assert container["image"] == "gpustack/runner:cuda12.9-vllm0.29.0"
    assert "args" not in container


def test_managed_sglang_command_line() -> None:
    container = main(pod_of(deployment(engine="SGLang")))
    assert container["command"] == [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        MODEL,
        "--enable-metrics",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
    ]
    assert container["image"] == "gpustack/runner:cuda12.9-sglang0.29.0"


def test_a_stream_port_moves_the_container_side_only() -> None:
    obj = deployment(role(extraArgs=["--port=9001"]))
    pod = pod_of(obj)
    container = main(pod)
    assert container["command"][-3:] == ["--port=9001", "--host", "0.0.0.0"]
    assert container["ports"] == [{"name": "http", "containerPort": 9001, "protocol": "TCP"}]
    assert container["readinessProbe"]["httpGet"]["port"] == 9001
    ctx = context(obj)
    assert render_role(ctx, ctx.md.roles[0]).serving.service_port == 8000


def test_take_over_gets_its_argv_rank_env_and_pod_fields_only() -> None:
    obj = deployment(
        role(
            size=2,
            command=["bash", "-c", "exec vllm serve x"],
            extraArgs=["--inert"],
            env=[{"name": "HF_TOKEN", "value": "t"}],
            privileged=True,
        )
    )
    container = main(pod_of(obj))
    assert container["command"] == ["bash", "-c", "exec vllm serve x"]
    assert set(env(container)) == {"HF_TOKEN", *constants.RANK_ENV}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert probe not in container
    assert container["securityContext"] == {"privileged": True}
    pod = pod_of(obj)
    assert "terminationGracePeriodSeconds" not in pod["spec"]  # grace as given
    assert not any(k.startswith("prometheus.io/") for k in pod["metadata"]["annotations"])


def test_env_operator_first_then_user_owned_dropped_defaulted_replaced() -> None:
    user = [
        {"name": "HF_TOKEN", "value": "t"},
        {"name": "MC_TE_METRIC", "value": "0"},
        {"name": "GPUSTACK_MEMBER_INDEX", "value": "9"},
    ]
    got = main(pod_of(deployment(role(env=user))))["env"]
    assert got == [{"name": "HF_TOKEN", "value": "t"}, {"name": "MC_TE_METRIC", "value": "0"}]
    plain = main(pod_of(deployment()))["env"]
    assert plain == [{"name": "MC_TE_METRIC", "value": "1"}]


def test_whole_card_resources_with_and_without_overcommit() -> None:
    obj = deployment(role(resources={"accelerator": "2"}))
    got = main(pod_of(obj))["resources"]
    assert got["limits"] == {
        "cpu": "16",
        "memory": "64Gi",
        "ephemeral-storage": "200Gi",
        "nvidia.com/gpu": "2",
    }
    assert got["requests"] == {
        "cpu": "200m",
        "memory": "256Mi",
        "ephemeral-storage": "25Gi",
        "nvidia.com/gpu": "2",
    }
    exact = main(pod_of(obj, facts=Facts(overcommit=False)))["resources"]
    assert exact["requests"] == exact["limits"]


def test_slice_partition_and_interface_keys() -> None:
    sliced = main(
        pod_of(deployment(role(resources={"accelerator": "1", "acceleratorSlicedMemoryPercentage": 50})))
    )
    limits = sliced["resources"]["limits"]
    assert limits["nvidia.com/gpu.sliced"] == "1"
    assert limits["nvidia.com/gpu.sliced.memory-percentage"] == "50"
    assert limits["nvidia.com/gpu.sliced.cores-percentage"] == "50"
    assert "nvidia.com/gpu" not in limits and limits["cpu"] == "4" and limits["memory"] == "16Gi"
    parted = main(
        pod_of(deployment(role(resources={"accelerator": "1", "acceleratorPartitionedProfile": "1g.10gb"})))
    )
    assert parted["resources"]["limits"]["nvidia.com/gpu.partitioned"] == "1"
    assert parted["resources"]["limits"]["nvidia.com/gpu.partitioned.mig-1g.10gb"] == "1"
    zero = main(pod_of(deployment(role(resources={"accelerator": "0"}))))
    assert "nvidia.com/gpu" not in zero["resources"]["limits"]


def test_interfaces_follow_the_direct_legs_fabric() -> None:
    obj = pair(router={"name": "llm-d-router"}, kvTransfer={"protocol": "RDMA"})
    obj["spec"]["roles"][0]["resources"]["interface"] = "1"
    obj["spec"]["roles"][1]["resources"]["interface"] = "2"
    assert (
        main(pod_of(obj, role_name="prefill"))["resources"]["limits"]["device.gpustack.ai/rdma.shared"] == "1"
    )
    assert main(pod_of(obj, role_name="decode"))["resources"]["limits"]["device.gpustack.ai/rdma"] == "2"
    efa = pair(router={"name": "llm-d-router"}, kvTransfer={"protocol": "EFA"})
    efa["spec"]["roles"][0]["resources"]["interface"] = "1"
    assert main(pod_of(efa, role_name="prefill"))["resources"]["limits"]["vpc.amazonaws.com/efa"] == "1"


def test_additional_volumes_sourceless_skipped() -> None:
    volumes = [
        {"mountPath": "/cfg", "configMap": {"name": "cfg"}, "readOnly": True},
        {"mountPath": "/sec", "secret": {"name": "s"}, "subPath": "key"},
        {"mountPath": "/nothing"},
    ]
    pod = pod_of(deployment(role(additionalVolumes=volumes)))
    assert pod["spec"]["volumes"] == [
        {"name": "user-0", "configMap": {"name": "cfg"}},
        {"name": "user-1", "secret": {"secretName": "s"}},
    ]
    assert main(pod)["volumeMounts"] == [
        {"name": "user-0", "mountPath": "/cfg", "readOnly": True},
        {"name": "user-1", "mountPath": "/sec", "subPath": "key"},
    ]


# --- Ports and probes (§7.5) ---------------------------------------------------------------------


def test_three_gates_on_the_serving_port() -> None:
    container = main(pod_of(deployment()))
    assert container["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    expected = {"path": "/health", "port": 8000, "scheme": "HTTP"}
    for probe, failures in (("startupProbe", 180), ("readinessProbe", 3), ("livenessProbe", 6)):
        got = container[probe]
        assert got["httpGet"] == expected
        assert (got["periodSeconds"], got["timeoutSeconds"], got["failureThreshold"]) == (10, 3, failures)


def test_declared_ports_named_by_protocol_first_serves() -> None:
    obj = deployment(role(ports=[{"port": 9000, "protocol": "TCP"}, {"port": 9100, "protocol": "UDP"}]))
    container = main(pod_of(obj))
    assert container["ports"] == [
        {"name": "tcp-9000", "containerPort": 9000, "protocol": "TCP"},
        {"name": "udp-9100", "containerPort": 9100, "protocol": "UDP"},
    ]
    assert container["command"][-2:] == ["--port", "9000"]
    assert container["startupProbe"]["httpGet"]["port"] == 9000


@pytest.mark.parametrize(
    ("fields", "gated", "scheme"),
    [
        ({"extraArgs": ["--ssl-certfile", "/c.pem"]}, True, "HTTPS"),
        ({"extraArgs": ["--ssl-keyfile=/k.pem", "--ssl-cert-reqs", "1"]}, True, "HTTPS"),
        ({"extraArgs": ["--ssl-certfile", "/c.pem", "--ssl-cert-reqs", "2"]}, False, None),
        ({"extraArgs": ["--ssl-certfile", "/c.pem", "--ssl-cert-reqs"]}, False, None),
        ({"extraArgs": ["--host", "127.0.0.1"]}, False, None),
        ({"ports": [{"port": 8000, "protocol": "UDP"}]}, False, None),
        ({"extraArgs": ["--ssl-cert-reqs", "2"]}, True, "HTTP"),  # no certificate: plain HTTP
    ],
)
def test_ungated_shapes(fields, gated, scheme) -> None:
    container = main(pod_of(deployment(role(**fields))))
    assert ("readinessProbe" in container) is gated
    if gated:
        assert container["livenessProbe"]["httpGet"]["scheme"] == scheme


def test_own_host_is_kept_not_filled() -> None:
    container = main(pod_of(deployment(role(extraArgs=["--host", "127.0.0.1"]))))
    assert container["command"].count("--host") == 1


# --- Image (§8) ----------------------------------------------------------------------------------


def test_stated_images_win_over_the_formula() -> None:
    assert main(pod_of(deployment(role(image="example/mine:1"))))["image"] == "example/mine:1"
    obj = deployment()
    obj["spec"]["engine"]["image"] = "gpustack/runner:cuda13.0-vllm0.29.0"
    assert main(pod_of(obj))["image"] == "gpustack/runner:cuda13.0-vllm0.29.0"


def test_render_errors_name_the_cause() -> None:
    with pytest.raises(RenderError, match="entrance") as error:
        pod_of(deployment(), instance_type(entrance=None))
    assert error.value.transient
    ctx = context(deployment(role(instanceType="missing")))
    with pytest.raises(RenderError, match="not observed"):
        render_role(ctx, ctx.md.roles[0])
    with pytest.raises(RenderError, match="cambricon") as error:
        pod_of(deployment(), instance_type(manufacturer="cambricon", group="cambricon-mlu370"))
    assert not error.value.transient


# --- Prefill/decode, the direct decoder, KV events (§11) -----------------------------------------


def transfer(container) -> dict:
    line = container["command"]
    return json.loads(line[line.index("--kv-transfer-config") + 1])


def test_llm_d_vllm_pair_renders_the_leg_the_publisher_and_the_proxy() -> None:
    obj = pair(router={"name": "llm-d-router"})
    prefill = pod_of(obj, role_name="prefill")
    container = main(prefill)
    assert transfer(container) == {
        "kv_connector": "MooncakeConnector",
        "kv_role": "kv_producer",
        "kv_connector_extra_config": {"mooncake_protocol": "tcp"},
    }
    values = env(container)
    assert values["VLLM_MOONCAKE_BOOTSTRAP_PORT"] == "8998"
    assert values["MC_FORCE_TCP"] == "1" and values["MC_TE_METRIC"] == "1"
    line = container["command"]
    events = json.loads(line[line.index("--kv-events-config") + 1])
    assert events == {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": "tcp://*:5557",
        "replay_endpoint": "tcp://*:5558",
        "buffer_steps": 10000,
        "hwm": 100000,
        "max_queue_size": 100000,
        "topic": "kv@",
    }
    assert {p["containerPort"] for p in container["ports"]} == {8000, 8998, 5557, 5558}
    assert "initContainers" not in prefill["spec"]

    decode = pod_of(obj, role_name="decode")
    engine = main(decode)
    assert transfer(engine)["kv_role"] == "kv_consumer"
    assert "--kv-events-config" not in engine["command"]
    assert engine["ports"] == [{"name": "model-server", "containerPort": 8200, "protocol": "TCP"}]
    assert engine["command"][-2:] == ["--port", "8200"]
    assert engine["readinessProbe"]["httpGet"] == {"path": "/v1/models", "port": 8000, "scheme": "HTTP"}
    proxy = decode["spec"]["initContainers"][0]
    assert proxy["name"] == "routing-proxy" and proxy["restartPolicy"] == "Always"
    assert proxy["image"] == Facts().routing_sidecar_image
    assert proxy["args"] == [
        "--port=8000",
        "--model-server-port=8200",
        "--kv-connector=mooncake",
        "--mooncake-bootstrap-port=8998",
        "--secure-proxy=false",
    ]
    assert proxy["env"] == [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    assert proxy["securityContext"] == {"runAsNonRoot": True, "allowPrivilegeEscalation": False}
    assert proxy["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]


def test_old_kubernetes_runs_the_proxy_as_the_first_container() -> None:
    decode = pod_of(pair(router={"name": "llm-d-router"}), role_name="decode", facts=Facts(kube_minor=28))
    assert [ct["name"] for ct in decode["spec"]["containers"]] == ["routing-proxy", "main"]
    assert "restartPolicy" not in decode["spec"]["containers"][0]


def test_unrouted_pair_has_no_leg_and_rdma_unpins_tcp() -> None:
    container = main(pod_of(pair(), role_name="prefill"))
    assert "--kv-transfer-config" not in container["command"]
    assert set(env(container)) == {"MC_TE_METRIC"}
    rdma = main(
        pod_of(pair(router={"name": "vllm-router"}, kvTransfer={"protocol": "RDMA"}), role_name="prefill")
    )
    assert transfer(rdma)["kv_connector_extra_config"] == {"mooncake_protocol": "rdma"}
    assert "MC_FORCE_TCP" not in env(rdma)
    assert "--kv-events-config" not in rdma["command"]  # only llm-d-router consumes events


def test_sglang_pair_renders_disaggregation_arguments() -> None:
    obj = pair(router={"name": "sglang-gateway"})
    obj["spec"]["engine"]["name"] = "SGLang"
    prefill = main(pod_of(obj, role_name="prefill"))
    line = prefill["command"]
    assert line[line.index("--disaggregation-mode") + 1] == "prefill"
    assert line[line.index("--disaggregation-transfer-backend") + 1] == "mooncake_tcp"
    assert line[line.index("--disaggregation-bootstrap-port") + 1] == "8998"
    assert any(p["containerPort"] == 8998 for p in prefill["ports"])
    decode = main(pod_of(obj, role_name="decode"))
    assert decode["command"][decode["command"].index("--disaggregation-mode") + 1] == "decode"
    assert not any(p["containerPort"] == 8998 for p in decode["ports"])


def test_sglang_direct_decoder_under_llm_d() -> None:
    obj = pair(router={"name": "llm-d-router"})
    obj["spec"]["engine"]["name"] = "SGLang"
    decode = pod_of(obj, role_name="decode")
    proxy = decode["spec"]["initContainers"][0]
    assert "--kv-connector=sglang" in proxy["args"]
    assert {"name": "SGLANG_BOOTSTRAP_PORT", "value": "8998"} in proxy["env"]
    assert "--kv-events-config" not in main(pod_of(obj, role_name="prefill"))["command"]


def test_ascend_pair_under_llm_d_reads_both_roles_degrees() -> None:
    ascend = instance_type(ASCEND, group="ascend-910b", manufacturer="ascend", family="910B", runtime=["8.0"])
    obj = pair(router={"name": "llm-d-router"})
    for r in obj["spec"]["roles"]:
        r["instanceType"] = ASCEND
    obj["spec"]["roles"][0]["extraArgs"] = ["-tp", "2"]
    obj["spec"]["roles"][0]["resources"]["accelerator"] = "2"
    prefill = pod_of(obj, ascend, role_name="prefill")
    container = main(prefill)
    assert container["image"] == "gpustack/runner:cann8.0-910b-vllm0.29.0"
    assert transfer(container) == {
        "kv_connector": "MooncakeConnectorV1",
        "kv_role": "kv_producer",
        "kv_connector_extra_config": {
            "prefill": {"dp_size": 1, "tp_size": 2},
            "decode": {"dp_size": 1, "tp_size": 1},
        },
    }
    assert "MC_FORCE_TCP" not in env(container) and "--kv-events-config" not in container["command"]
    assert {"name": "ascend-driver", "mountPath": "/usr/local/Ascend/driver", "readOnly": True} in container[
        "volumeMounts"
    ]
    decode = pod_of(obj, ascend, role_name="decode")
    assert "--kv-connector=nixlv2" in decode["spec"]["initContainers"][0]["args"]
    assert transfer(main(decode))["kv_connector_extra_config"]["prefill"] == {"dp_size": 1, "tp_size": 2}
    behind_vllm_router = pair(router={"name": "vllm-router"})
    for r in behind_vllm_router["spec"]["roles"]:
        r["instanceType"] = ASCEND
    assert (
        "--kv-transfer-config" not in main(pod_of(behind_vllm_router, ascend, role_name="prefill"))["command"]
    )


def test_a_listener_on_a_declared_port_under_another_name_fails_the_render() -> None:
    obj = pair(router={"name": "llm-d-router"})
    obj["spec"]["roles"][0]["ports"] = [{"port": 8000, "protocol": "TCP"}, {"port": 5557, "protocol": "TCP"}]
    with pytest.raises(RenderError, match="5557"):
        pod_of(obj, role_name="prefill")


def test_the_engine_image_setting_replaces_every_managed_image_and_no_take_over() -> None:
    facts = Facts(engine_image="gpustack/gpustack-operator-py-engine:v0.1.0")
    named = deployment(role(image="site/vllm:custom"))
    assert main(pod_of(named, facts=facts))["image"] == "gpustack/gpustack-operator-py-engine:v0.1.0"
    assert main(pod_of(deployment(), facts=facts))["image"] == "gpustack/gpustack-operator-py-engine:v0.1.0"
    take_over = deployment(role(image="site/custom:1", command=["python3", "serve.py"]))
    assert main(pod_of(take_over, facts=facts))["image"] == "site/custom:1"
    assert main(pod_of(deployment()))["image"] == "gpustack/runner:cuda12.9-vllm0.29.0"
