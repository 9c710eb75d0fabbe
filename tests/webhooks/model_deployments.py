"""Builders for the ModelDeployment webhook tests: deployments, roles, the KV cache chain, and a way to
call the two handlers the way the server does (an AdmissionReview decoded into a request)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterable
from typing import Any

from api.objects import Obj
from tests.webhooks import objects
from tests.webhooks.reviews import review
from webhooks.decision import Decision
from webhooks.lookups import FileLookups, Lookups
from webhooks.review import request_from_review

NS = "team-a"
A10G = "gpustack--nvidia-a10g-linux-amd64"  # acceleratable, 8 cards, sliceable (logical 32)
H100 = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"  # 3 cards, MIG profiles 1g.10gb 3g.40gb 7g.80gb
GENERIC = "gpustack--generic-linux-amd64"  # not acceleratable
T4 = "gpustack--nvidia-t4-linux-amd64"  # acceleratable, detail not observed yet
A10G_ARM = "gpustack--nvidia-a10g-linux-arm64"  # another type of the nvidia-a10g accelerator group
BIG = "gpustack--nvidia-h20-linux-amd64"  # 16 cards in all
BINDING = "qwen-cache"
MODEL = "Qwen/Qwen2.5-7B-Instruct"


def role(name: str = "server", **fields: Any) -> Obj:
    out: Obj = {"name": name, "instanceType": A10G, "resources": {"accelerator": "1"}}
    out.update(fields)
    return {k: v for k, v in out.items() if v is not None}


def md(
    *roles: Obj, name: str = "qwen-chat", engine: str = "vLLM", version: str | None = "0.29.0", **spec: Any
) -> Obj:
    engine_block: Obj = {"name": engine}
    if version is not None:
        engine_block["version"] = version
    body: Obj = {"model": {"name": MODEL}, "engine": engine_block, "roles": list(roles) or [role()]}
    body.update(spec)
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {k: v for k, v in body.items() if v is not None},
    }


def kv_cache(binding: str = BINDING) -> Obj:
    return {"poolRef": {"name": binding}, "connector": "Mooncake"}


def pd(engine: str = "vLLM", router: str | None = "llm-d-router", **spec: Any) -> Obj:
    """A Prefill/Decode pair, routed by ``router``."""
    roles = (role("prefill", kind="Prefill"), role("decode", kind="Decode"))
    if router is not None:
        spec.setdefault("router", {"name": router})
    return md(*roles, engine=engine, **spec)


# --- The KV cache chain -------------------------------------------------------------------------------


def backend(name: str = "mooncake-dram", *groups: str | None, protocol: str | None = None) -> Obj:
    """A managed backend; each group's own ``transport.protocol`` (None: inherits the backend's)."""
    members = []
    for own in groups or (None,):
        member: Obj = {
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "medium": "DRAM",
            "capacityPerMember": "8Gi",
        }
        if own is not None:
            member["transport"] = {"protocol": own}
        members.append(member)
    spec: Obj = {"type": "Mooncake", "connection": {"managed": {"leader": {}, "members": members}}}
    if protocol is not None:
        spec["transport"] = {"protocol": protocol}
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "KVCacheBackend",
        "metadata": {"name": name},
        "spec": spec,
    }


def pool(name: str = "shared-dram", backend_name: str = "mooncake-dram") -> Obj:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "KVCachePool",
        "metadata": {"name": name},
        "spec": {"backends": [backend_name], "quota": {"total": "8Gi"}},
    }


def binding(name: str = BINDING, pool_name: str = "shared-dram", dtype: str = "bfloat16") -> Obj:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "KVCachePoolBinding",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "poolRef": {"name": pool_name},
            "quota": {"ceiling": "4Gi"},
            "domain": {"name": "qwen", "blockSize": 64, "dtype": dtype},
        },
    }


def kv(*groups: str | None, protocol: str | None = None) -> list[Obj]:
    """Binding qwen-cache -> pool shared-dram -> backend mooncake-dram with these group protocols."""
    return [backend("mooncake-dram", *groups, protocol=protocol), pool(), binding()]


def cluster(*extra: Obj, kv_groups: Iterable[str | None] = (None,)) -> list[Obj]:
    """The InstanceTypes of every shape the rules read, the KV chain (tcp by default), and ``extra``."""
    types = [
        objects.instance_type(A10G_ARM, logical=32),
        objects.instance_type(BIG, group="nvidia-h20", capacity="16"),
    ]
    return objects.cluster(*types, *kv(*kv_groups), *extra)


# --- Calling the handlers ------------------------------------------------------------------------------


def request(obj: Obj | None, *, old: Obj | None = None, operation: str | None = None):
    op = operation or ("UPDATE" if old is not None else "CREATE")
    return request_from_review(
        review(
            obj,
            old=old,
            operation=op,
            kind="ModelDeployment",
            group="worker.gpustack.ai",
            resource="modeldeployments",
        )
    )


def run(
    handler,
    obj: Obj,
    *,
    old: Obj | None = None,
    operation: str | None = None,
    lookups: Lookups | None = None,
    objects_: Iterable[Obj] | None = None,
) -> Decision:
    if lookups is None:
        lookups = FileLookups(copy.deepcopy(list(objects_)) if objects_ is not None else cluster())
    return asyncio.run(handler(request(obj, old=old, operation=operation), lookups))


def paths(decision: Decision) -> list[str]:
    return [cause.path for cause in decision.causes]


def cause(decision: Decision, path: str) -> str:
    """The message of the one cause at ``path`` (the decision must be a 422 carrying it)."""
    assert not decision.allowed and decision.code == 422, decision
    found = [c.message for c in decision.causes if c.path == path]
    assert found, f"no cause at {path}: {paths(decision)}"
    return found[0]


def merge_patch(document: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as ``kubectl patch --type=merge`` sends it: lists replace wholesale."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(document) if isinstance(document, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def deleting(obj: Obj) -> Obj:
    out = copy.deepcopy(obj)
    out["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return out
