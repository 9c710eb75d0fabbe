"""ModelDeployment validation: the object rules of §5, each row's accepted ⇢ rejected example with
its field path (owned keys, updates, lookups, defaulting and the seed examples have their own files)."""

from __future__ import annotations

import asyncio

import pytest

from tests.webhooks import objects
from tests.webhooks.model_deployments import (
    A10G,
    MODEL,
    cause,
    cluster,
    kv_cache,
    md,
    paths,
    pd,
    role,
    run,
)
from webhooks import chain, modeldeployment
from webhooks.lookups import FileLookups

validate = modeldeployment.validate


def accepted(obj, **kwargs):
    decision = run(validate, obj, **kwargs)
    assert decision.allowed, decision.message
    return decision


def refused(obj, path, *words, **kwargs):
    decision = run(validate, obj, **kwargs)
    message = cause(decision, path)
    for word in words:
        assert word in message, (word, message)
    assert decision.message.startswith('ModelDeployment "')
    return decision


# --- #1 role count, #3 duplicate names -------------------------------------------------------------------


def test_1_more_than_ten_roles():
    accepted(md(role("a"), role("b")))
    decision = refused(md(*(role(f"s{i}") for i in range(11))), "spec.roles", "11", "own shape limit")
    assert decision.causes[0].reason == "FieldValueTooMany"


def test_3_duplicate_role_names_backstop():
    decision = refused(md(role("a"), role("a")), "spec.roles[1].name", "spec.roles[0]", "collide")
    assert decision.causes[0].reason == "FieldValueDuplicate"


# --- #6–#8 derived names -------------------------------------------------------------------------------


def test_6_member_names_must_be_hostnames():
    accepted(md(role("server", size=2, replicas=10), name="qwen"))
    long_name = "q" * 55
    message = cause(run(validate, md(role("server", size=2, replicas=10), name=long_name)), "spec.roles[0]")
    assert f"{long_name}-server-r9-m1" in message and "68 characters" in message
    assert "shorten" in message and "fewer replicas" in message
    # Size 1 names its Pods by generateName: no member name to check.
    accepted(md(role("server", replicas=10), name=long_name))


def test_7_role_service_must_be_a_dns1035_label_for_new_roles_only():
    accepted(md(role("prefill"), name="chat"))
    refused(md(role("prefill"), name="team.model"), "spec.roles[0].name", "team.model-prefill", "dot")
    refused(md(role("prefill"), name="7b"), "spec.roles[0].name", "digit")
    # A role the stored object already had is exempt.
    stored = md(role("prefill"), name="team.model")
    edited = md(role("prefill", replicas=3), name="team.model")
    accepted(edited, old=stored)


def test_8_derived_service_names_collide():
    accepted(md(role("x", size=2), role("y")))
    message = cause(run(validate, md(role("x", size=2), role("x-r0"))), "spec.roles[1].name")
    assert "qwen-chat-x-r0" in message and "role 'x'" in message and "rename" in message
    message = cause(run(validate, md(role("router"), router={"name": "llm-d-router"})), "spec.roles[0].name")
    assert "qwen-chat-router" in message and "spec.router" in message
    # Checked on every request: replicas decide how many instance Services a role derives.
    stored = md(role("x", size=2, replicas=1), role("x-r1"))
    accepted(stored)
    refused(md(role("x", size=2, replicas=2), role("x-r1")), "spec.roles[1].name", old=stored)


# --- #9–#13 kinds, version, pool reference ---------------------------------------------------------------


def test_9_server_beside_another_kind():
    accepted(pd(router=None))
    refused(
        md(role("s", kind="Server"), role("p", kind="Prefill")), "spec.roles[0].kind", "whole requests alone"
    )
    # An absent kind is Server.
    refused(md(role("s"), role("p", kind="Prefill")), "spec.roles[0].kind", "Prefill")


def test_10_a_non_server_kind_twice():
    accepted(md(role("a", kind="Server"), role("b", kind="Server")))
    refused(
        md(role("a", kind="Prefill"), role("b", kind="Prefill")),
        "spec.roles[1].kind",
        "spec.roles[0]",
        "only Server repeats",
    )


def test_12_engine_version_when_a_role_synthesizes_its_image():
    accepted(md(role()))
    decision = refused(md(role(), version=None), "spec.engine.version", "'server'", "synthesized")
    assert decision.causes[0].reason == "FieldValueRequired"
    accepted(md(role(image="vllm/vllm-openai:v0.29.0"), version=None))
    # An engine-wide image synthesizes nothing either.
    obj = md(role(), version=None)
    obj["spec"]["engine"]["image"] = "gpustack/runner:cuda13.0-vllm0.29.0"
    accepted(obj)


def test_13_empty_pool_ref():
    accepted(md(role(), kvCache=kv_cache()))
    refused(md(role(), kvCache=kv_cache("")), "spec.kvCache.poolRef.name", "authorization point")


# --- #17, #18 degrees and width --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["-tp", "two"], "--tensor-parallel-size"),
        (["-tp", "-1"], "--tensor-parallel-size"),
        (["--max-model-len", "8192", "-tp"], "--tensor-parallel-size"),
        (["--data-parallel-size=0"], "--data-parallel-size"),
    ],
)
def test_17_unreadable_degree(args, flag):
    accepted(md(role(extraArgs=["-tp", "2"], resources={"accelerator": "2"})))
    message = cause(run(validate, md(role(extraArgs=args, resources={"accelerator": "2"}))), "spec.roles[0]")
    assert flag in message and "'server'" in message and "spec.roles[0].command" in message


def test_17_degrees_are_read_from_a_take_over_command_and_vllm_dp_size():
    obj = md(role(command=["vllm", "serve", "m", "-pp", "x"], extraArgs=["-tp", "2"]))
    assert "--pipeline-parallel-size" in cause(run(validate, obj), "spec.roles[0]")
    obj = md(role(env=[{"name": "VLLM_DP_SIZE", "value": "many"}]))
    assert "VLLM_DP_SIZE" in cause(run(validate, obj), "spec.roles[0]")
    # SGLang reads no underscores and no degree env.
    accepted(
        md(
            role(env=[{"name": "VLLM_DP_SIZE", "value": "many"}], extraArgs=["--tp_size", "x"]),
            engine="SGLang",
        )
    )


def test_18_width_over_the_card_request():
    accepted(md(role(extraArgs=["-tp", "2"], resources={"accelerator": "2"})))
    message = cause(
        run(validate, md(role(extraArgs=["-tp", "2"], resources={"accelerator": "1"}, size=2))),
        "spec.roles[0].resources.accelerator",
    )
    assert "--tensor-parallel-size=2" in message and "need 2" in message
    assert "per member" in message and "spec.roles[0].size" in message
    # vLLM: DP counts unless a local DP is set above 1; SGLang narrows under DP attention.
    refused(
        md(role(extraArgs=["-tp", "2", "-dp", "2"], resources={"accelerator": "2"})),
        "spec.roles[0].resources.accelerator",
        "need 4",
    )
    accepted(
        md(
            role(
                extraArgs=["--tp-size", "2", "--dp-size", "4", "--enable-dp-attention"],
                resources={"accelerator": "2"},
            ),
            engine="SGLang",
        )
    )
    # Wiring flags silence the check; a non-integer card count skips it.
    accepted(md(role(extraArgs=["-tp", "8", "--nnodes", "2"], resources={"accelerator": "1"})))
    accepted(md(role(extraArgs=["-tp", "8"], resources={"accelerator": "500m"})))


def test_18_width_overflow_says_more_than():
    obj = md(role(extraArgs=["-tp", "9223372036854775807", "-pp", "2"], resources={"accelerator": "1"}))
    assert "more than 1" in cause(run(validate, obj), "spec.roles[0].resources.accelerator")


# --- #24, #27–#29 role fields ---------------------------------------------------------------------------


def _volume(mount="/data", **source):
    return {"mountPath": mount, **(source or {"configMap": {"name": "c"}})}


def test_24_volumes():
    accepted(md(role(additionalVolumes=[{**_volume(), "subPath": "a..b"}])))
    refused(
        md(role(additionalVolumes=[{**_volume(), "subPath": "a/../b"}])),
        "spec.roles[0].additionalVolumes[0].subPath",
        "escapes",
    )
    refused(
        md(role(additionalVolumes=[{"mountPath": "/data"}])), "spec.roles[0].additionalVolumes[0]", "source"
    )
    # The refusal names the mount path of the volume without a source.
    assert "/data" in cause(
        run(validate, md(role(additionalVolumes=[{"mountPath": "/data"}]))),
        "spec.roles[0].additionalVolumes[0]",
    )
    refused(
        md(role(additionalVolumes=[_volume(), _volume(secret={"name": "s"})])),
        "spec.roles[0].additionalVolumes[1].mountPath",
        "spec.roles[0].additionalVolumes[0]",
    )


def test_27_required_level():
    accepted(md(role(topology={"requiredLevel": "topology.kubernetes.io/zone"})))
    accepted(md(role(topology={"requiredLevel": ""})))
    refused(
        md(role(topology={"requiredLevel": "kubernetes.io/hostname"})),
        "spec.roles[0].topology.requiredLevel",
        "implicit",
    )
    refused(
        md(role(topology={"requiredLevel": "a/b/c"})), "spec.roles[0].topology.requiredLevel", "qualified"
    )
    refused(md(role(topology={"requiredLevel": "-zone"})), "spec.roles[0].topology.requiredLevel")


def test_28_partition_profile_with_a_slice():
    from tests.webhooks.model_deployments import H100

    accepted(
        md(
            role(
                instanceType=H100, resources={"accelerator": "1", "acceleratorPartitionedProfile": "3g.40gb"}
            )
        )
    )
    obj = md(
        role(
            instanceType=H100,
            resources={
                "accelerator": "1",
                "acceleratorPartitionedProfile": "3g.40gb",
                "acceleratorSlicedMemoryPercentage": 50,
            },
        )
    )
    message = cause(run(validate, obj), "spec.roles[0].resources.acceleratorPartitionedProfile")
    assert "acceleratorSlicedMemoryPercentage" in message


@pytest.mark.parametrize("value", ["0.5", "-1", "500m"])
def test_29_interface_must_be_whole_and_non_negative(value):
    rdma = cluster(kv_groups=("RDMA",))
    accepted(md(role(resources={"accelerator": "1", "interface": "1"}), kvCache=kv_cache()), objects_=rdma)
    obj = md(role(resources={"accelerator": "1", "interface": value}), kvCache=kv_cache())
    refused(obj, "spec.roles[0].resources.interface", "non-negative whole number", objects_=rdma)


# --- #41–#43 router -----------------------------------------------------------------------------------


def test_41_router_owned_flags():
    accepted(_router(["--policy", "round_robin"]))
    refused(_router(["--config-file=/x"]), "spec.router.extraArgs[0]", "--config-file", "llm-d-router")
    refused(_router(["--port", "1"], name="vllm-router"), "spec.router.extraArgs[0]", "vllm-router")
    # Matched by name only: a prefix is not the flag.
    accepted(_router(["--config=/x"]))


def _router(args, name="llm-d-router", engine="vLLM"):
    obj = pd(engine=engine, router=None)
    obj["spec"]["router"] = {"name": name, "extraArgs": args}
    return obj


def test_42_disaggregation_threshold_off_llm_d():
    obj = pd()
    obj["spec"]["router"]["disaggregationThresholdTokens"] = 0
    accepted(obj)
    obj = pd(router="vllm-router")
    obj["spec"]["router"]["disaggregationThresholdTokens"] = 512
    refused(obj, "spec.router.disaggregationThresholdTokens", "llm-d-router only")


def test_43_router_engine_mismatch():
    accepted(pd(router="vllm-router"))
    accepted(pd(engine="SGLang", router="sglang-gateway"))
    accepted(pd(engine="SGLang"))
    refused(
        pd(engine="SGLang", router="vllm-router"),
        "spec.router.name",
        "SGLang",
        "llm-d-router, sglang-gateway",
    )


# --- #25, #26 host access -----------------------------------------------------------------------------------


def test_25_privileged_needs_the_setting_unless_held():
    refused(md(role(privileged=True)), "spec.roles[0].privileged", "model-deployment-privileged-allowed")
    on = cluster(objects.setting("model-deployment-privileged-allowed", "true"))
    accepted(md(role(privileged=True)), objects_=on)
    held = md(role(privileged=True))
    accepted(md(role(privileged=True, replicas=2)), old=held)
    refused(md(role(privileged=True)), "spec.roles[0].privileged", old=md(role()))


def test_26_host_path_needs_the_setting_unless_held():
    volume = {"mountPath": "/host", "hostPath": {"path": "/var/log"}}
    refused(
        md(role(additionalVolumes=[volume])),
        "spec.roles[0].additionalVolumes[0].hostPath",
        "model-deployment-host-path-volume-allowed",
    )
    on = cluster(objects.setting("model-deployment-host-path-volume-allowed", "true"))
    accepted(md(role(additionalVolumes=[volume])), objects_=on)
    held = md(role(additionalVolumes=[volume]))
    accepted(md(role(additionalVolumes=[_volume(), volume])), old=held)
    moved = {"mountPath": "/host", "hostPath": {"path": "/etc"}}
    refused(md(role(additionalVolumes=[moved])), "spec.roles[0].additionalVolumes[0].hostPath", old=held)


# --- #19–#21, #44, #45 ports ---------------------------------------------------------------------------------


def test_19_declared_port_and_stream_port_disagree():
    accepted(md(role(ports=[{"port": 9000}], extraArgs=["--port", "9000"])))
    message = cause(
        run(validate, md(role(ports=[{"port": 9000}], extraArgs=["--port=9001"]))),
        "spec.roles[0].ports[0].port",
    )
    assert "9000" in message and "9001" in message and "spec.roles[0].extraArgs[0]" in message
    # A take-over command's --port is read too.
    refused(
        md(role(ports=[{"port": 9000}], command=["vllm", "serve", "m", "--port", "9001"])),
        "spec.roles[0].ports[0].port",
    )
    # A stored role whose ports and stream did not change is exempt.
    stored = md(role(ports=[{"port": 9000}], extraArgs=["--port", "9001"]))
    accepted(md(role(ports=[{"port": 9000}], extraArgs=["--port", "9001"], replicas=3)), old=stored)
    refused(
        md(role(ports=[{"port": 9000}], extraArgs=["--port", "9002"])),
        "spec.roles[0].ports[0].port",
        old=stored,
    )
    # Compared as stored: the schema defaults the protocol.
    defaulted = md(role(ports=[{"port": 9000, "protocol": "TCP"}], extraArgs=["--port", "9001"]))
    accepted(defaulted, old=stored)


def test_19_direct_decoder_is_exempt():
    obj = pd()
    obj["spec"]["roles"][1].update(ports=[{"port": 8000}], extraArgs=["--port", "8300"])
    accepted(obj)


def test_20_declared_port_in_the_reserved_set():
    obj = pd()
    obj["spec"]["roles"][0]["ports"] = [{"port": 8000}]
    obj["spec"]["roles"][1]["ports"] = [{"port": 8000}]
    accepted(obj)
    obj["spec"]["roles"][0]["ports"] = [{"port": 5557}]
    obj["spec"]["roles"][1]["ports"] = [{"port": 5557}]
    message = cause(run(validate, obj), "spec.router")
    assert "5557" in message and "spec.roles[0].ports[0]" in message and "5558" in message
    # Without a router the path is the port itself: an SGLang prefill of a pair with a cache.
    obj = pd(engine="SGLang", router=None, kvCache=kv_cache())
    obj["spec"]["roles"][0]["ports"] = [{"port": 8998}]
    refused(obj, "spec.roles[0].ports[0].port", "8998")


def test_20_the_bootstrap_port_is_refused_on_every_role_under_a_router():
    # As the reference does: with a router named, no role of any kind may declare 8998.
    served = md(role(ports=[{"port": 8998}]), router={"name": "llm-d-router"})
    message = cause(run(validate, served), "spec.router")
    assert "8998" in message and "spec.roles[0].ports[0]" in message
    accepted(md(role(ports=[{"port": 8998}])))  # no router: 8998 is an ordinary port


def test_21_stream_port_in_the_reserved_set():
    obj = pd()
    obj["spec"]["roles"][0]["extraArgs"] = ["--port", "8001"]
    obj["spec"]["roles"][1]["extraArgs"] = ["--port", "8001"]
    assert not _reserved(run(validate, obj))
    obj["spec"]["roles"][0]["extraArgs"] = ["--port", "5558"]
    (message,) = _reserved(run(validate, obj))
    assert "5558" in message and "spec.roles[0].extraArgs[0]" in message
    assert "spec.router" in paths(run(validate, obj))
    # Take-over roles reserve nothing.
    obj["spec"]["roles"][0]["command"] = ["vllm", "serve", "m", "--port", "5558"]
    assert not _reserved(run(validate, obj))


def _reserved(decision):
    return [c.message for c in decision.causes if "reserved" in c.message]


def test_21_identical_stored_collision_is_kept_but_a_new_router_is_refused():
    obj = md(
        role("prefill", kind="Prefill", extraArgs=["--port", "5557"]),
        role("decode", kind="Decode"),
        router={"name": "llm-d-router"},
    )
    stored = obj
    edited = md(
        role("prefill", kind="Prefill", extraArgs=["--port", "5557"], replicas=2),
        role("decode", kind="Decode"),
        router={"name": "llm-d-router"},
    )
    assert not _reserved(run(validate, edited, old=stored))
    unrouted = md(
        role("prefill", kind="Prefill", extraArgs=["--port", "5557"]), role("decode", kind="Decode")
    )
    decision = run(validate, edited, old=unrouted)
    assert any("5557" in c.message and c.path == "spec.router" for c in decision.causes)
    assert len(_reserved(run(validate, edited))) == 1


def test_44_routed_roles():
    accepted(pd())
    obj = pd()
    obj["spec"]["roles"][0]["ports"] = [{"port": 8000}]
    obj["spec"]["roles"][1]["ports"] = [{"port": 9000}]
    message = cause(run(validate, obj), "spec.router")
    assert "prefill=8000" in message and "decode=9000" in message
    obj = pd()
    obj["spec"]["roles"][0]["ports"] = [{"port": 8000, "protocol": "UDP"}]
    refused(obj, "spec.roles[0].ports[0].protocol", "TCP")
    obj = pd()
    obj["spec"]["roles"][0]["extraArgs"] = ["--ssl-certfile", "/tls/crt"]
    refused(obj, "spec.roles[0].extraArgs[0]", "HTTPS")
    # Unrouted roles may serve HTTPS on any port.
    accepted(md(role(extraArgs=["--ssl-certfile", "/tls/crt"], ports=[{"port": 9000}])))


def test_45_direct_decoder_passes_the_proxy_port():
    obj = pd()
    obj["spec"]["roles"][1]["extraArgs"] = ["--port", "8100"]
    accepted(obj)
    obj["spec"]["roles"][1]["extraArgs"] = ["--max-model-len", "8192", "--port", "8000"]
    refused(obj, "spec.roles[1].extraArgs[2]", "routing proxy")


# --- #22, #23 served names and weights ----------------------------------------------------------------


def test_22_served_model_name():
    accepted(md(role()))
    accepted(md(role(extraArgs=["--served-model-name", MODEL])))
    refused(
        md(role(extraArgs=["--served-model-name", "qwen"])), "spec.roles[0].extraArgs[0]", MODEL, "omit it"
    )
    refused(
        md(role(extraArgs=["--served-model-name", MODEL, "alias"])),
        "spec.roles[0].extraArgs[0]",
        "several names",
    )
    # A take-over role's command is its own.
    accepted(md(role(command=["vllm", "serve", "m", "--served-model-name", "qwen"])))
    # A stored role with the same names, model and command presence is exempt.
    stored = md(role(extraArgs=["--served-model-name", "qwen"]))
    accepted(md(role(extraArgs=["--served-model-name", "qwen"], replicas=2)), old=stored)


def _artifact(*roles):
    obj = md(*roles)
    obj["spec"]["model"]["artifactRef"] = {"name": "qwen-7b"}
    return obj


def test_23_artifact_owned_keys_and_weight_mounts():
    accepted(
        _artifact(role(extraArgs=["--max-model-len", "8192"], env=[{"name": "HTTPS_PROXY", "value": "x"}]))
    )
    refused(
        _artifact(role(extraArgs=["--revision", "v2"])),
        "spec.roles[0].extraArgs[0]",
        "artifactRef",
        "command",
    )
    refused(_artifact(role(env=[{"name": "HF_TOKEN", "value": "x"}])), "spec.roles[0].env[0]", "artifactRef")
    refused(
        _artifact(role(additionalVolumes=[_volume("/var/lib/gpustack")])),
        "spec.roles[0].additionalVolumes[0].mountPath",
        "/var/lib/gpustack/model",
    )
    refused(
        _artifact(role(additionalVolumes=[_volume("/var/lib/gpustack/model/x")])),
        "spec.roles[0].additionalVolumes[0].mountPath",
    )
    accepted(_artifact(role(additionalVolumes=[_volume("/var/lib/gpustack/models")])))
    # Without an artifact they are plain user keys.
    accepted(md(role(extraArgs=["--revision", "v2"], env=[{"name": "HF_TOKEN", "value": "x"}])))


# --- One 422 carrying every cause ----------------------------------------------------------------------


def test_every_refusal_is_aggregated_into_one_422_in_table_order():
    obj = md(
        role("a", env=[{"name": "GPUSTACK_MEMBER_INDEX", "value": "0"}], extraArgs=["-tp", "x"]),
        role("a", privileged=True),
        version=None,
    )
    decision = run(validate, obj)
    assert decision.code == 422 and decision.reason == "Invalid"
    assert paths(decision) == [
        "spec.roles[1].name",
        "spec.engine.version",
        "spec.roles[0].env[0]",
        "spec.roles[0]",
        "spec.roles[1].privileged",
    ]
    assert decision.message.startswith('ModelDeployment "qwen-chat" is invalid: [')


# --- The schema's rows (S), through the chain admit runs -----------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda o: o["spec"].__setitem__("roles", []), "spec.roles"),  # 2
        (lambda o: o["spec"]["roles"][0].__setitem__("name", "Prefill_1"), "spec.roles[0].name"),  # 4
        (lambda o: o["spec"]["roles"][0].__setitem__("replicas", 2000), "spec.roles[0].replicas"),  # 5
        (lambda o: o["spec"]["roles"][0].__setitem__("size", 65), "spec.roles[0].size"),  # 5
        (lambda o: o["spec"]["roles"][0].__setitem__("kind", "decoder"), "spec.roles[0].kind"),  # 46
        (lambda o: o["spec"]["roles"][0].__setitem__("template", {}), "spec.roles[0].template"),  # 46
        (
            lambda o: o["spec"]["roles"][0].__setitem__("terminationGracePeriodSeconds", 5),
            "spec.roles[0].terminationGracePeriodSeconds",
        ),  # 47
    ],
)
def test_schema_rows_refused_by_the_chain(mutate, path):
    obj = md(role())
    ok = asyncio.run(chain.run(obj, FileLookups(cluster())))
    assert ok.allowed, ok.message
    mutate(obj)
    outcome = asyncio.run(chain.run(obj, FileLookups(cluster())))
    assert not outcome.allowed and outcome.code == 422
    assert path in [c.path for c in outcome.causes], outcome.message


def test_a10g_constant_is_the_objects_default():
    assert objects.A10G["metadata"]["name"] == A10G
