"""ModelDeployments and InstanceTypes for the renderer and controller unit tests."""

from __future__ import annotations

import copy
from typing import Any

from controllers.modeldeployment.render import Context, Facts
from controllers.registry import model_deployment_extensions
from readmodels.modeldeployment import Deployment

NS = "team-a"
UID = "0b5e-uid"
A10G = "gpustack--nvidia-a10g-linux-amd64"
ASCEND = "gpustack--ascend-910b-linux-arm64"
CPU = "gpustack--generic-linux-amd64"
ENTRANCE = "gpustack-fnv64-c4680bb149644f1c"


def instance_type(
    name: str = A10G,
    *,
    group: str = "nvidia-a10g",
    manufacturer: str = "nvidia",
    family: str = "Ampere",
    runtime: list[str] | None = None,
    entrance: str | None = ENTRANCE,
    acceleratable: bool = True,
    memory: str = "24Gi",
) -> dict[str, Any]:
    detail: dict[str, Any] = {"manufacturer": manufacturer, "family": family, "memory": memory}
    versions = ["12.9"] if runtime is None else runtime
    if versions:
        detail["runtimeVersion"] = versions[0]
        detail["runtimeVersions"] = versions
    if not manufacturer:
        detail = {}
    status: dict[str, Any] = {"phase": "Active", "detail": detail}
    if entrance:
        status["entrance"] = entrance
    spec: dict[str, Any] = {
        "acceleratable": acceleratable,
        "os": "linux",
        "arch": "amd64",
        "unitResources": {"cpu": "8", "ram": "32Gi"},
        "localStorage": "100Gi",
    }
    if acceleratable:
        spec["acceleratorGroup"] = group
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "InstanceType",
        "metadata": {"name": name},
        "spec": spec,
        "status": status,
    }


def role(name: str = "server", **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "Server",
        "replicas": 1,
        "size": 1,
        "instanceType": A10G,
        "resources": {"accelerator": "1"},
        **fields,
    }


def deployment(
    *roles: dict[str, Any], name: str = "qwen", engine: str = "vLLM", **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": NS, "uid": UID, "generation": 1, "resourceVersion": "7"},
        "spec": {
            "model": {"name": "Qwen/Qwen2.5-7B-Instruct"},
            "engine": {"name": engine, "version": "0.29.0"},
            "roles": list(roles) or [role()],
            **spec,
        },
    }


def pair(**spec: Any) -> dict[str, Any]:
    return deployment(
        role("prefill", kind="Prefill", replicas=2),
        role("decode", kind="Decode", replicas=2),
        **spec,
    )


def context(obj: dict[str, Any], *types: dict[str, Any], facts: Facts | None = None) -> Context:
    md = Deployment(copy.deepcopy(obj))
    found = {t["metadata"]["name"]: t for t in (types or (instance_type(),))}
    ext = model_deployment_extensions()
    return Context(
        md=md,
        uid=UID,
        instance_types=found,
        facts=facts or Facts(),
        cache=ext.cache,
        cache_resolution=ext.cache.resolve(md, lambda *_: None),
        delivery=ext.delivery,
        delivery_resolution=ext.delivery.resolve(md, lambda *_: None),
        topology=ext.topology,
    )
