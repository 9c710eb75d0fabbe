"""Builders of KV-cache objects and Pods for the KV-cache webhook tests."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from tests.webhooks.reviews import review
from webhooks.lookups import FileLookups
from webhooks.review import request_from_review

GROUP = "worker.gpustack.ai"
PLURALS = {
    "KVCacheBackend": "kvcachebackends",
    "KVCachePool": "kvcachepools",
    "KVCachePoolBinding": "kvcachepoolbindings",
    "Pod": "pods",
}


def backend(name: str = "mooncake-dram", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "Mooncake",
        "transport": {"protocol": "Auto"},
        "connection": {
            "managed": {
                "leader": {"replicas": 1, "multiTenancy": True},
                "members": [
                    {
                        "nodeSelector": {"kubernetes.io/os": "linux"},
                        "medium": "DRAM",
                        "capacityPerMember": "8Gi",
                    }
                ],
            }
        },
    }
    body.update(spec)
    return {"apiVersion": f"{GROUP}/v1", "kind": "KVCacheBackend", "metadata": {"name": name}, "spec": body}


def external(
    name: str = "mooncake-ext", client: str = "mooncake.example:50051", admin: str = "mooncake.example:9003"
) -> dict[str, Any]:
    return backend(
        name,
        connection={
            "external": {
                "endpoints": [{"name": "Client", "address": client}, {"name": "Admin", "address": admin}]
            }
        },
    )


def pool(
    name: str = "shared-dram", backends: Any = ("mooncake-dram",), total: Any = "8Gi", **status: Any
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "KVCachePool",
        "metadata": {"name": name},
        "spec": {
            "backends": list(backends) if isinstance(backends, tuple) else backends,
            "quota": {"total": total},
        },
    }
    if status:
        obj["status"] = status
    return obj


def ready_pool(
    name: str = "shared-dram",
    backend_name: str = "mooncake-dram",
    endpoint: str = "mooncake-dram-leader.gpustack-system.svc:50051",
    ledger: tuple[str, str] = ("True", "Available"),
) -> dict[str, Any]:
    return pool(
        name,
        backends=(backend_name,),
        clientEndpoint=endpoint,
        conditions=[
            {"type": "QuotaLedgerAvailable", "status": ledger[0], "reason": ledger[1], "message": "m"}
        ],
    )


def binding(
    name: str = "qwen-cache",
    namespace: str = "team-a",
    pool_name: str = "shared-dram",
    ceiling: Any = "4Gi",
    domain_name: str = "default",
    **domain: Any,
) -> dict[str, Any]:
    dom = {"name": domain_name, "blockSize": 64, "dtype": "bfloat16"}
    dom.update(domain)
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "KVCachePoolBinding",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"poolRef": {"name": pool_name}, "quota": {"ceiling": ceiling}, "domain": dom},
    }


def pod(
    *,
    engine: str = "vLLM",
    binding_name: str = "qwen-cache",
    command: list[str] | None = None,
    args: list[str] | None = None,
    annotations: dict[str, str] | None = None,
    env: list[dict[str, Any]] | None = None,
    containers: list[dict[str, Any]] | None = None,
    label: str = "true",
) -> dict[str, Any]:
    notes = {"kvcache.gpustack.ai/binding": binding_name, "kvcache.gpustack.ai/engine": engine}
    notes.update(annotations or {})
    main: dict[str, Any] = {"name": "server", "image": "vllm/vllm-openai:v0.29.0"}
    if command is not None:
        main["command"] = command
    elif engine == "SGLang":
        main["command"] = ["python3", "-m", "sglang.launch_server"]
    else:
        main["command"] = ["vllm"]
    main["args"] = args if args is not None else ["serve", "--model", "Qwen/Qwen3-8B"]
    if env is not None:
        main["env"] = env
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "bench",
            "namespace": "team-a",
            "labels": {"kvcache.gpustack.ai/inject": label},
            "annotations": notes,
        },
        "spec": {"containers": containers if containers is not None else [main]},
    }


def run(handler, obj, *, old=None, operation: str = "CREATE", cluster=(), namespace: str = "team-a"):
    kind = (obj or old)["kind"]
    group = "" if kind == "Pod" else GROUP
    req = request_from_review(
        review(
            copy.deepcopy(obj),
            old=copy.deepcopy(old),
            operation=operation,
            kind=kind,
            group=group,
            resource=PLURALS[kind],
            namespace=namespace,
        )
    )
    return asyncio.run(handler(req, FileLookups([copy.deepcopy(o) for o in cluster])))


def setting(name: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "gpustack.ai/v1",
        "kind": "Setting",
        "metadata": {"name": name, "namespace": "gpustack-system"},
        "spec": {"value": value},
    }


def paths(decision) -> list[str]:
    return [cause.path for cause in decision.causes]
