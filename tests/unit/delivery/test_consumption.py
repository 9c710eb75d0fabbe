"""What a consuming Pod gets (§4.3) and WeightsReady (§5), pure."""

from __future__ import annotations

from typing import Any

from api import delivery as d
from controllers.delivery.consumption import (
    ENGINE_SGLANG,
    ENGINE_VLLM,
    Gate,
    HubSettings,
    WeightsPlan,
    kv_reuse_prefix,
    plan_weights,
    weights_ready,
)

DIGEST = "sha256:" + "ab" * 32
COMMIT = "c" * 40
GiB = 1 << 30
NODE = HubSettings("Node", "https://huggingface.co", csi_driver_present=True)
ENGINE = HubSettings("Engine", "https://hub.example", "http://proxy:3128", "10.0.0.0/8")


def artifact(source: dict[str, Any] | None = None, resolved: bool = True, **spec: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"type": "Resolved", "status": "True" if resolved else "False"}]}
    if resolved:
        status["resolved"] = {
            "revision": COMMIT,
            "manifestDigest": DIGEST,
            "sizeBytes": 15 * GiB,
            "digestSource": "Hub",
        }
    return {
        "metadata": {"name": "qwen", "uid": "u-1"},
        "spec": {
            "source": source
            or {"huggingFace": {"repository": "Qwen/Qwen2.5-7B", "secretRef": {"name": "hf"}}},
            **spec,
        },
        "status": status,
    }


def test_node_delivery_renders_the_csi_volume_and_nothing_else() -> None:
    plan = plan_weights(artifact(), "qwen", engine=ENGINE_VLLM, takeover=False, settings=NODE)
    assert isinstance(plan, WeightsPlan) and plan.delivery == "Node"
    assert plan.volumes == [
        {
            "name": "gpustack-model",
            "csi": {
                "driver": "model.csi.gpustack.ai",
                "readOnly": True,
                "volumeAttributes": {"artifact": "qwen", "artifactUID": "u-1", "manifestDigest": DIGEST},
                "nodePublishSecretRef": {"name": "hf"},
            },
        }
    ]
    assert plan.mounts == [
        {"name": "gpustack-model", "mountPath": "/var/lib/gpustack/model", "readOnly": True}
    ]
    assert plan.model_args == ["/var/lib/gpustack/model"]
    assert plan.env == [] and plan.env_defaults == [] and plan.ephemeral_limit_raise == 0
    assert plan.status_model == {
        "artifact": "qwen",
        "delivery": "Node",
        "revision": COMMIT,
        "manifestDigest": DIGEST,
    }


def test_node_delivery_without_a_secret_omits_the_publish_secret() -> None:
    plan = plan_weights(
        artifact({"huggingFace": {"repository": "gpt2"}}),
        "qwen",
        engine=ENGINE_SGLANG,
        takeover=False,
        settings=NODE,
    )
    assert "nodePublishSecretRef" not in plan.volumes[0]["csi"]
    assert plan.model_args == ["--model-path", "/var/lib/gpustack/model"]


def test_engine_delivery_renders_cache_env_and_raises_the_limit_only() -> None:
    plan = plan_weights(artifact(), "qwen", engine=ENGINE_VLLM, takeover=False, settings=ENGINE)
    assert plan.delivery == "Engine"
    room = 15 * GiB + (15 * GiB) // 10
    assert plan.volumes == [{"name": "gpustack-model-cache", "emptyDir": {"sizeLimit": str(room)}}]
    assert plan.ephemeral_limit_raise == room
    assert plan.model_args == ["Qwen/Qwen2.5-7B", "--revision", COMMIT]
    assert {e["name"] for e in plan.env} == {"HF_HOME", "HF_ENDPOINT", "HF_TOKEN"}
    assert next(e for e in plan.env if e["name"] == "HF_TOKEN")["valueFrom"]["secretKeyRef"] == {
        "name": "hf",
        "key": "token",
    }
    assert plan.env_defaults == [
        {"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
        {"name": "NO_PROXY", "value": "10.0.0.0/8"},
    ]
    assert "https://hub.example" in plan.fingerprint  # endpoint changes roll Engine deliveries


def test_engine_small_model_gets_at_least_a_gibibyte_of_room() -> None:
    small = artifact()
    small["status"]["resolved"]["sizeBytes"] = 100
    plan = plan_weights(small, "qwen", engine=ENGINE_SGLANG, takeover=False, settings=ENGINE)
    assert plan.ephemeral_limit_raise == 100 + GiB
    assert plan.model_args == ["--model-path", "Qwen/Qwen2.5-7B", "--revision", COMMIT]


def test_takeover_roles_get_only_the_mount() -> None:
    node = plan_weights(artifact(), "qwen", engine=ENGINE_VLLM, takeover=True, settings=NODE)
    assert node.model_args == [] and node.mounts
    engine = plan_weights(artifact(), "qwen", engine=ENGINE_VLLM, takeover=True, settings=ENGINE)
    assert engine.volumes == [] and engine.env == [] and engine.model_args == []


def test_gates() -> None:
    assert plan_weights(None, "qwen", engine=ENGINE_VLLM, takeover=False, settings=NODE) == Gate(
        "ArtifactNotFound", "ModelArtifact qwen does not exist in this namespace"
    )
    assert (
        plan_weights(
            artifact(resolved=False), "qwen", engine=ENGINE_VLLM, takeover=False, settings=NODE
        ).reason
        == "ArtifactNotResolved"
    )
    no_driver = HubSettings("Node", "https://huggingface.co", csi_driver_present=False)
    assert (
        plan_weights(artifact(), "qwen", engine=ENGINE_VLLM, takeover=False, settings=no_driver).reason
        == "NodeDeliveryUnavailable"
    )
    filtered = artifact(allowPatterns=["*.safetensors"])
    assert (
        plan_weights(filtered, "qwen", engine=ENGINE_VLLM, takeover=False, settings=ENGINE).reason
        == "FilterNeedsNodeDelivery"
    )
    assert isinstance(
        plan_weights(filtered, "qwen", engine=ENGINE_VLLM, takeover=False, settings=NODE), WeightsPlan
    )
    anchored = artifact()
    anchored["status"]["resolved"]["digestSource"] = "Expected"
    assert (
        plan_weights(anchored, "qwen", engine=ENGINE_VLLM, takeover=False, settings=ENGINE).reason
        == "AnchorNeedsNodeDelivery"
    )


def claim(phase: str = "Bound", modes: tuple[str, ...] = ("ReadOnlyMany",)) -> dict[str, Any]:
    return {"spec": {"accessModes": list(modes), "storageClassName": "local"}, "status": {"phase": phase}}


def test_claim_delivery_mounts_read_only_with_subpath_and_pins_the_volume_node() -> None:
    source = {"persistentVolumeClaim": {"claimName": "weights", "path": "qwen"}}
    pv = {
        "spec": {
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}
                            ]
                        }
                    ]
                }
            }
        }
    }
    plan = plan_weights(
        artifact(source),
        "qwen",
        engine=ENGINE_VLLM,
        takeover=False,
        settings=ENGINE,
        claim=claim(),
        volume=pv,
    )
    assert plan.delivery == "PVC"
    assert plan.volumes == [
        {"name": "gpustack-model", "persistentVolumeClaim": {"claimName": "weights", "readOnly": True}}
    ]
    assert plan.mounts[0]["subPath"] == "qwen" and plan.mounts[0]["readOnly"] is True
    assert plan.node_affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert plan.env == []


def test_claim_gates() -> None:
    source = {"persistentVolumeClaim": {"claimName": "weights"}}
    wffc = {"volumeBindingMode": "WaitForFirstConsumer", "provisioner": "rancher.io/local-path"}
    assert isinstance(
        plan_weights(
            artifact(source),
            "q",
            engine=ENGINE_VLLM,
            takeover=False,
            settings=ENGINE,
            claim=claim("Pending"),
            storage_class=wffc,
        ),
        WeightsPlan,
    )
    immediate = {"volumeBindingMode": "Immediate", "provisioner": "kubernetes.io/no-provisioner"}
    assert (
        plan_weights(
            artifact(source),
            "q",
            engine=ENGINE_VLLM,
            takeover=False,
            settings=ENGINE,
            claim=claim("Pending"),
            storage_class=immediate,
        ).reason
        == "ClaimNotBound"
    )
    assert (
        plan_weights(
            artifact(source),
            "q",
            engine=ENGINE_VLLM,
            takeover=False,
            settings=ENGINE,
            claim=claim(modes=("ReadWriteOnce",)),
            pods_on_claim=1,
        ).reason
        == "AccessModeConflict"
    )


def pod(node: str, *conditions: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"p-{node}"},
        "spec": {"nodeName": node},
        "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]},
    }


def store(*models: dict[str, Any]) -> dict[str, Any]:
    return {"status": {"models": list(models)}}


def test_weights_ready_for_node_delivery() -> None:
    plan = plan_weights(artifact(), "qwen", engine=ENGINE_VLLM, takeover=False, settings=NODE)
    downloading = weights_ready(plan, [pod("n1")], {"n1": store({"digest": DIGEST, "state": "Downloading"})})
    assert (downloading["status"], downloading["reason"]) == ("False", "Materializing")
    failed = weights_ready(
        plan,
        [pod("n1")],
        {
            "n1": store(
                {
                    "digest": DIGEST,
                    "state": "Failed",
                    "reason": "AccessDenied",
                    "message": "the hub refused",
                    "retryTime": "2026-01-01T00:01:00Z",
                }
            )
        },
    )
    assert (
        failed["reason"] == "MaterializationFailed"
        and "AccessDenied" in failed["message"]
        and "retry at" in failed["message"]
    )
    assert (
        weights_ready(plan, [pod("n1")], {"n1": store({"digest": DIGEST, "state": "Ready"})})["reason"]
        == "WeightsNotMounted"
    )
    mounted = weights_ready(
        plan, [pod("n1", "PodReadyToStartContainers")], {"n1": store({"digest": DIGEST, "state": "Ready"})}
    )
    assert (mounted["status"], mounted["reason"]) == ("True", "Mounted")


def test_weights_ready_for_engine_and_without_artifact() -> None:
    plan = plan_weights(artifact(), "qwen", engine=ENGINE_VLLM, takeover=False, settings=ENGINE)
    assert weights_ready(plan, [pod("n1", "PodReadyToStartContainers")], {})["reason"] == "Downloading"
    assert weights_ready(plan, [pod("n1", "Ready")], {})["reason"] == "Downloaded"
    assert weights_ready(None, [], {})["reason"] == "NotApplicable"
    assert weights_ready(Gate("ArtifactNotFound", "x"), [], {})["status"] == "False"


def test_kv_reuse_prefix() -> None:
    assert kv_reuse_prefix(artifact()) == "m-" + "ab" * 16
    claim_artifact = artifact({"persistentVolumeClaim": {"claimName": "w"}})
    claim_artifact["status"]["resolved"] = {}
    assert kv_reuse_prefix(claim_artifact).startswith("m-") and len(kv_reuse_prefix(claim_artifact)) == 34
    assert d.DELIVERY_NODE == "Node"
