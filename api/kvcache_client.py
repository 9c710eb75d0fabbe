"""What an engine is handed to use a KV-cache pool (kv-cache spec §4): one source for the Pod
injection webhook and the ModelDeployment renderer, so a Pod injected by label and a Pod a
ModelDeployment renders read the store the same way.

vLLM (and vLLM-Ascend) read a JSON document projected from the Pod's own
``kvcache.gpustack.ai/client-config`` annotation through a ``downwardAPI`` volume (no ConfigMap, so
an endpoint change moves the Pod's hash and rolls it); SGLang reads environment variables.  Every
key is written explicitly: absent ``global_segment_size``/``local_buffer_size`` turn an engine into a
hidden multi-GiB store member.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from api import constants
from api import kvcache as kv
from api.objects import Obj


@dataclass(frozen=True, slots=True)
class ClientTarget:
    """The store an engine is pointed at: the pool's published client endpoint, the protocol of the
    member groups it matched (store spelling), and the tenant (``""`` renders none)."""

    endpoint: str
    protocol: str
    tenant: str


def client_config(target: ClientTarget) -> Obj:
    """The vLLM-family client document (``mooncake.json``)."""
    doc: Obj = {
        "master_server_address": target.endpoint,
        "metadata_server": kv.METADATA_SERVER,
        "protocol": target.protocol,
        "device_name": "",
        "global_segment_size": 0,
        "mode": kv.CLIENT_MODE,
        "local_buffer_size": kv.CLIENT_LOCAL_BUFFER_BYTES,
    }
    if target.tenant:
        doc["tenant_id"] = target.tenant
    return doc


def client_config_annotation(target: ClientTarget) -> str:
    """The annotation value: compact, key order fixed, so equal targets hash equal."""
    return json.dumps(client_config(target), separators=(",", ":"))


def config_volume() -> Obj:
    """The ``downwardAPI`` volume projecting the client-config annotation as ``mooncake.json``."""
    return {
        "name": kv.CONFIG_VOLUME,
        "downwardAPI": {
            "items": [
                {
                    "path": kv.CONFIG_FILE_NAME,
                    "fieldRef": {
                        "fieldPath": f"metadata.annotations['{constants.ANNOTATION_KVCACHE_CLIENT_CONFIG}']"
                    },
                }
            ]
        },
    }


def config_mount() -> Obj:
    return {"name": kv.CONFIG_VOLUME, "mountPath": kv.CONFIG_MOUNT, "readOnly": True}


def vllm_connector(*, ascend: bool) -> str:
    return kv.CONNECTOR_VLLM_ASCEND if ascend else kv.CONNECTOR_VLLM


def vllm_transfer_config(*, ascend: bool, role: str) -> str:
    """``--kv-transfer-config`` for a store-only vLLM: the connector and the role's discriminator."""
    return json.dumps(
        {"kv_connector": vllm_connector(ascend=ascend), "kv_role": kv.KV_ROLE[role]}, separators=(",", ":")
    )


def vllm_env() -> list[Obj]:
    return [{"name": kv.ENV_CONFIG_PATH, "value": kv.CONFIG_FILE}]


def sglang_env(target: ClientTarget) -> list[Obj]:
    """SGLang's variables (note ``META_DATA``); never the config-path, mode or buffer variables."""
    env: list[Obj] = [
        {"name": kv.ENV_MASTER, "value": target.endpoint},
        {"name": kv.ENV_METADATA_SERVER, "value": kv.METADATA_SERVER},
        {"name": kv.ENV_PROTOCOL, "value": target.protocol},
        {"name": kv.ENV_DEVICE, "value": ""},
        {"name": kv.ENV_GLOBAL_SEGMENT_SIZE, "value": "0"},
        {"name": kv.ENV_LOCAL_HOSTNAME, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    if target.tenant:
        env.append({"name": kv.ENV_TENANT_ID, "value": target.tenant})
    return env


METRIC_DEFAULTS: tuple[Obj, ...] = (
    {"name": kv.ENV_TE_METRIC, "value": "1"},
    {"name": kv.ENV_CLIENT_METRIC_BANDWIDTH, "value": "1"},
)


def merge_env(user: list[Obj], injected: list[Obj], defaults: tuple[Obj, ...] = METRIC_DEFAULTS) -> list[Obj]:
    """User env with ``injected`` entries replacing same-named ones in place (one entry per name:
    later duplicates of an injected name are dropped), new ones appended, and ``defaults`` added
    only where the user declares no such name."""
    by_name = {entry["name"]: entry for entry in injected}
    out: list[Obj] = []
    placed: set[str] = set()
    for entry in user:
        name = entry.get("name") if isinstance(entry, dict) else None
        if isinstance(name, str) and name in by_name:
            if name not in placed:
                out.append(by_name[name])
                placed.add(name)
            continue
        out.append(entry)
    out.extend(entry for entry in injected if entry["name"] not in placed)
    declared: set[Any] = {e.get("name") for e in out if isinstance(e, dict)}
    out.extend(dict(entry) for entry in defaults if entry["name"] not in declared)
    return out


def record(
    *,
    binding: str,
    engine: str,
    vehicle: str,
    domain: str,
    tenant_injected: bool,
    program: str,
    forwarded: bool,
) -> str:
    """The ``kvcache.gpustack.ai/injected`` annotation: what was applied, not what was asked."""
    return json.dumps(
        {
            "binding": binding,
            "engine": engine,
            "vehicle": vehicle,
            "domain": domain,
            "tenantInjected": tenant_injected,
            "launchProgram": program,
            "launchArgsForwarded": forwarded,
        },
        separators=(",", ":"),
    )
