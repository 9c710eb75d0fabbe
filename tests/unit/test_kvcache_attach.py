"""The ModelDeployment's cache wiring (model-deployment spec §7.3–§7.4, §10)."""

from __future__ import annotations

import copy
import json

from controllers.kvcache import attach
from tests.webhooks.kvcache_objects import backend, binding, ready_pool

MD = {
    "apiVersion": "worker.gpustack.ai/v1",
    "kind": "ModelDeployment",
    "metadata": {"name": "qwen-chat", "namespace": "team-a"},
    "spec": {"engine": {"name": "vLLM"}, "kvCache": {"poolRef": {"name": "qwen-cache"}}, "roles": []},
}


def resolved(pool=None, b=None):
    return attach.resolve(MD, b or binding(), pool or ready_pool(), backend())


def test_resolution_and_status() -> None:
    found = resolved()
    assert found.registered.status == "True" and found.register
    assert attach.kv_cache_status(found) == {
        "binding": "qwen-cache",
        "pool": "shared-dram",
        "domain": {"name": "default", "dtype": "bfloat16", "blockSize": 64},
    }
    none = attach.resolve({"metadata": MD["metadata"], "spec": {}}, None, None, None)
    assert (none.registered.status, none.registered.reason) == ("True", "NotApplicable")
    missing = attach.resolve(MD, None, None, None)
    assert missing.registered.reason == "BindingNotFound" and attach.kv_cache_status(missing) is None
    gone = binding()
    gone["metadata"]["deletionTimestamp"] = "x"
    assert attach.resolve(MD, gone, ready_pool(), backend()).registered.reason == "BindingDeleting"
    fresh = ready_pool()
    del fresh["status"]["clientEndpoint"]
    waiting = attach.resolve(MD, binding(), fresh, backend())
    assert (
        waiting.registered.reason == "BindingNotReady"
        and waiting.register
        and attach.kv_cache_status(waiting) is None
    )


def test_vllm_connector_projects_the_annotation() -> None:
    found = resolved().attachment
    out = attach.role_connector("vLLM", found, ascend=False, kind="Server", dtype_owned=True)
    config = json.loads(out.annotations["kvcache.gpustack.ai/client-config"])
    assert config["master_server_address"] == "mooncake-dram-leader.gpustack-system.svc:50051"
    assert config["tenant_id"] == "default" and config["global_segment_size"] == 0
    assert (
        out.volumes[0]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"]
        == "metadata.annotations['kvcache.gpustack.ai/client-config']"
    )
    assert "configMap" not in out.volumes[0]
    assert out.args == [
        "--kv-transfer-config",
        '{"kv_connector":"MooncakeStoreConnector","kv_role":"kv_both"}',
        "--kv-cache-dtype",
        "bfloat16",
    ]
    moved = ready_pool(endpoint="elsewhere:50051")
    moved_out = attach.role_connector(
        "vLLM", resolved(pool=moved).attachment, ascend=False, kind="Server", dtype_owned=True
    )
    assert moved_out.annotations != out.annotations  # the Pod hash moves and the deployment rolls
    paired = attach.role_connector("vLLM", found, ascend=True, kind="Decode", dtype_owned=False, paired=True)
    assert paired.args == [] and paired.store_connector == {
        "kv_connector": "AscendStoreConnector",
        "kv_role": "kv_consumer",
    }


def test_sglang_connector_is_environment() -> None:
    out = attach.role_connector(
        "SGLang", resolved().attachment, ascend=False, kind="Prefill", dtype_owned=False
    )
    assert not out.annotations and not out.volumes
    names = [e["name"] for e in out.env]
    assert "MOONCAKE_TE_META_DATA_SERVER" in names and "MOONCAKE_TENANT_ID" in names
    assert out.args == ["--hicache-storage-backend", "mooncake"]


def test_used_by_registration() -> None:
    body = attach.used_by_apply(MD, "qwen-cache", registered=True)
    assert body["status"] == {
        "usedBy": [{"kind": "ModelDeployment", "namespace": "team-a", "name": "qwen-chat"}]
    }
    assert attach.used_by_apply(MD, "qwen-cache", registered=False)["status"] == {"usedBy": []}
    assert attach.used_by_manager(MD) == "worker.gpustack.ai/model-deployment-kv-cache/team-a/qwen-chat"
    assert attach.domain_registered(resolved(), in_used_by=False).status == "False"
    assert attach.domain_registered(resolved(), in_used_by=True).reason == "Registered"
    assert attach.exempt_labels() == {"kvcache.gpustack.ai/inject": "false"}


def test_cache_attached_from_observed_operations() -> None:
    b = binding()
    assert attach.cache_attached(MD, b, managed_roles=1, ready_replicas=1).reason == "NoObservationAvailable"
    assert attach.cache_attached(MD, b, managed_roles=0, ready_replicas=1).reason == "Unmanaged"
    assert attach.cache_attached(MD, b, managed_roles=1, ready_replicas=0).reason == "NoReplicaReady"
    active = copy.deepcopy(b)
    active["status"] = {"usage": "2Mi"}
    assert attach.cache_attached(MD, active, managed_roles=1, ready_replicas=1).reason == "CacheActive"
    failing = copy.deepcopy(b)
    failing["status"] = {
        "usage": "0",
        "conditions": [{"type": "QuotaGranted", "status": "False", "message": "zero grant"}],
    }
    verdict = attach.cache_attached(MD, failing, managed_roles=1, ready_replicas=1)
    assert (verdict.status, verdict.reason) == ("False", "CacheOperationsFailing")
    assert (
        attach.cache_attached({"spec": {}}, None, managed_roles=1, ready_replicas=1).reason == "NotApplicable"
    )


# --- the feature object the ModelDeployment controller calls ---------------------------------------
class _Role:
    def __init__(self, kind="Server", managed=True, extra_args=()):
        self.kind, self.managed, self.extra_args = kind, managed, list(extra_args)


class _MD:
    def __init__(self, obj, engine="vLLM", roles=()):
        self.obj, self.engine = obj, engine
        self.name, self.namespace = obj["metadata"]["name"], obj["metadata"]["namespace"]
        self.roles = list(roles) or [_Role()]


def reader_of(*objects):
    table = {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace", "")): o for o in objects}
    return lambda kind, name, namespace: table.get((kind, name, namespace))


def test_feature_resolve_and_role() -> None:
    from controllers.kvcache.md_feature import KVCacheFeature

    feature = KVCacheFeature()
    b = binding()
    read = reader_of(b, ready_pool(), backend())
    resolution = feature.resolve(_MD(MD), read)
    assert resolution.applicable and resolution.resolved and resolution.status["binding"] == "qwen-cache"
    assert [(c.type, c.status, c.reason) for c in resolution.conditions] == [
        ("DomainRegistered", "False", "BindingNotReady"),
        ("CacheAttached", "Unknown", "NoReplicaReady"),
    ]
    assert resolution.used_by["status"]["usedBy"][0]["name"] == "qwen-chat"
    b["status"] = {"usedBy": [{"kind": "ModelDeployment", "namespace": "team-a", "name": "qwen-chat"}]}
    listed = feature.resolve(_MD(MD), reader_of(b, ready_pool(), backend()))
    assert listed.conditions[0].reason == "Registered"
    assert listed.used_by is None  # already registered: nothing to send
    rc = feature.role(
        resolution, _MD(MD), _Role("Prefill"), {"status": {"detail": {"manufacturer": "nvidia"}}}
    )
    assert rc.connector == {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_producer"}
    assert rc.args == ["--kv-cache-dtype", "bfloat16"] and rc.store_protocol == "tcp"
    assert "kvcache.gpustack.ai/client-config" in rc.annotations and rc.volumes and rc.mounts
    assert feature.role(resolution, _MD(MD), _Role(managed=False), {}) is None
    sglang = _MD(MD, engine="SGLang")
    decode = feature.role(resolution, sglang, _Role("Decode"), {})
    assert (
        decode.args[-2:] == ["--disaggregation-decode-retraction-backup", "cpu_tensor"]
        and decode.connector is None
    )
    server = feature.role(resolution, sglang, _Role(extra_args=["--enable-hierarchical-cache"]), {})
    assert "--enable-hierarchical-cache" not in server.args
    off = feature.resolve(
        _MD(MD),
        reader_of(
            binding(),
            ready_pool(),
            backend(),
            {
                "kind": "Setting",
                "metadata": {"name": "model-deployment-kv-cache-dtype-owned", "namespace": "gpustack-system"},
                "spec": {"value": "false"},
            },
        ),
    )
    assert "--kv-cache-dtype" not in feature.role(off, _MD(MD), _Role(), {}).args
    missing = feature.resolve(_MD(MD), reader_of())
    assert not missing.resolved and missing.status is None and missing.used_by is None
    body, manager = feature.release(_MD(MD))
    assert body["status"] == {"usedBy": []} and manager == attach.used_by_manager(MD)
    assert feature.release(_MD({**MD, "spec": {"roles": []}})) is None


def test_feature_wakes_the_deployments_on_a_binding_pool_or_backend() -> None:
    from controllers.kvcache.md_feature import KVCacheFeature

    feature = KVCacheFeature()
    other = {**MD, "metadata": {"name": "other", "namespace": "team-b"}}
    plain = {**MD, "metadata": {"name": "plain", "namespace": "team-a"}, "spec": {"roles": []}}
    deployments = [MD, other, plain]
    read = reader_of(binding(), ready_pool(), backend())

    def woken(obj, old=None, event="MODIFIED"):
        return [m["metadata"]["name"] for m in feature.wakes(obj["kind"], event, obj, old, deployments, read)]

    assert woken(binding(), event="ADDED") == ["qwen-chat"]  # not team-b's deployment of that name
    assert woken(ready_pool(), event="ADDED") == ["qwen-chat"]
    assert woken(backend(), event="DELETED") == ["qwen-chat"]
    before = {**ready_pool(), "metadata": {"name": "shared-dram", "resourceVersion": "1"}}
    moved = ready_pool(endpoint="elsewhere:50051")
    moved["metadata"]["resourceVersion"] = "2"
    assert woken(moved, before) == ["qwen-chat"]
    figures = copy.deepcopy(before)
    figures["metadata"]["resourceVersion"] = "3"
    figures["status"]["usage"] = {"total": "1Mi"}  # nothing a deployment reads
    assert woken(figures, before) == []
    assert feature.wakes("Pod", "ADDED", {"metadata": {"name": "x"}}, None, deployments, read) == []
