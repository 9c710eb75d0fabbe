"""Prefill/decode pairing: the transfer leg, the connector document and the direct decoder proxy
(model-deployment.md §11.1, §11.2, §3.4).

**The direct leg** renders on both halves iff a router is set, both halves are declared, the role is
managed, and — on Ascend — the router is ``llm-d-router``.  Without a router, P and D only get the
store connector's role discriminator (when a cache is attached) and nothing routes between them.

- vLLM: ``--kv-transfer-config`` carries ``MooncakeConnector`` (with the ``kv_transfer`` protocol);
  with a cache it is a ``MultiConnector`` of the leg and the store connector; the Prefill opens the
  Mooncake bootstrap server (``VLLM_MOONCAKE_BOOTSTRAP_PORT``).  ``MC_FORCE_TCP=1`` pins a ``tcp`` leg
  unless a store on another transport shares the process (a user value wins).
- vLLM-Ascend: ``MooncakeConnectorV1`` (+ ``AscendStoreConnector`` from the cache), protocol fixed
  ``ascend``, the tp/dp blocks of **both** roles (1/1 when undeclared), and the host's
  ``/usr/local/Ascend/driver`` mounted read-only.
- SGLang: ``--disaggregation-mode``, ``--disaggregation-transfer-backend`` (``mooncake_tcp`` for
  ``tcp``, else ``mooncake``) and ``--disaggregation-bootstrap-port``, on both halves of a pair that
  has a router or a cache.

**The direct decoder** (``llm-d-router`` + a managed ``Decode``) runs llm-d's routing proxy as
container ``routing-proxy``: a native sidecar (an init container with ``restartPolicy: Always``) on
Kubernetes ≥ 1.29, else the first regular container.  It listens on the Service port and forwards to
the engine, which moves to 8200 (see :mod:`~controllers.modeldeployment.ports`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from api import constants, engines
from api.objects import Obj
from controllers.modeldeployment.extensions import RoleCache
from controllers.modeldeployment.ports import Serving
from readmodels.modeldeployment import DECODE, PREFILL, SERVER, Deployment, Role, store_protocol

KV_TRANSFER_FLAG = "--kv-transfer-config"
KV_ROLES = {SERVER: "kv_both", PREFILL: "kv_producer", DECODE: "kv_consumer"}
VLLM_LEG = "MooncakeConnector"
ASCEND_LEG = "MooncakeConnectorV1"
MULTI = "MultiConnector"
ENV_VLLM_BOOTSTRAP = "VLLM_MOONCAKE_BOOTSTRAP_PORT"
ENV_SGLANG_BOOTSTRAP = "SGLANG_BOOTSTRAP_PORT"
ENV_FORCE_TCP = "MC_FORCE_TCP"
ENV_TE_METRIC = "MC_TE_METRIC"
BOOTSTRAP_PORT_NAME = "kv-bootstrap"
ASCEND_DRIVER = "/usr/local/Ascend/driver"
ASCEND_DRIVER_VOLUME = "ascend-driver"
PROXY_CONTAINER = "routing-proxy"
NATIVE_SIDECAR_MINOR = 29
DEFAULTED_ENV = frozenset({ENV_TE_METRIC, ENV_FORCE_TCP})
"""Operator entries a user's own value replaces, with no refusal (§3.4)."""


@dataclass
class Connector:
    """What the transfer leg and the cache client add to the engine's command line and Pod."""

    args: list[str] = field(default_factory=list)
    env: list[Obj] = field(default_factory=list)
    ports: list[Obj] = field(default_factory=list)
    volumes: list[Obj] = field(default_factory=list)
    mounts: list[Obj] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)


def direct_leg(md: Deployment, role: Role, ascend: bool) -> bool:
    """The direct prefill-to-decode leg renders on ``role``."""
    if not md.direct_leg(role):
        return False
    return not ascend or md.router_name == engines.ROUTER_LLM_D


def _degree_block(role: Role | None) -> Obj:
    if role is None:
        return {"dp_size": 1, "tp_size": 1}
    degrees = role.degrees
    if not degrees.ok:
        return {"dp_size": 1, "tp_size": 1}
    return {"dp_size": degrees.get("dp"), "tp_size": degrees.get("tp")}


def _half(md: Deployment, kind: str) -> Role | None:
    return next((r for r in md.roles if r.kind == kind), None)


def _leg_entry(md: Deployment, role: Role, ascend: bool) -> Obj:
    kv_role = KV_ROLES[role.kind]
    if ascend:
        return {
            "kv_connector": ASCEND_LEG,
            "kv_role": kv_role,
            "kv_connector_extra_config": {
                "prefill": _degree_block(_half(md, PREFILL)),
                "decode": _degree_block(_half(md, DECODE)),
            },
        }
    return {
        "kv_connector": VLLM_LEG,
        "kv_role": kv_role,
        "kv_connector_extra_config": {"mooncake_protocol": store_protocol(md.kv_transfer.get("protocol"))},
    }


def transfer_document(md: Deployment, role: Role, ascend: bool, store: Obj | None) -> Obj | None:
    """vLLM's ``--kv-transfer-config`` document for ``role``, or None when nothing is rendered."""
    kv_role = KV_ROLES.get(role.kind, "kv_both")
    leg = _leg_entry(md, role, ascend) if direct_leg(md, role, ascend) else None
    stored = {**store, "kv_role": kv_role} if store else None
    if leg and stored:
        return {
            "kv_connector": MULTI,
            "kv_role": kv_role,
            "kv_connector_extra_config": {"connectors": [leg, stored]},
        }
    return leg or stored


def _env(name: str, value: str) -> Obj:
    return {"name": name, "value": value}


def _vllm(md: Deployment, role: Role, ascend: bool, cache: RoleCache | None) -> Connector:
    out = Connector()
    document = transfer_document(md, role, ascend, cache.connector if cache else None)
    if document is not None:
        out.args += [KV_TRANSFER_FLAG, orjson.dumps(document).decode()]
    if direct_leg(md, role, ascend) and not ascend:
        port = constants.VLLM_MOONCAKE_BOOTSTRAP_PORT
        out.env.append(_env(ENV_VLLM_BOOTSTRAP, str(port)))
        if role.kind == PREFILL:
            out.ports.append({"name": BOOTSTRAP_PORT_NAME, "containerPort": port, "protocol": "TCP"})
        leg_protocol = store_protocol(md.kv_transfer.get("protocol"))
        store = cache.store_protocol if cache else None
        if leg_protocol == "tcp" and store in (None, "tcp"):
            out.env.append(_env(ENV_FORCE_TCP, "1"))
    if direct_leg(md, role, ascend) and ascend:
        out.volumes.append(
            {"name": ASCEND_DRIVER_VOLUME, "hostPath": {"path": ASCEND_DRIVER, "type": "Directory"}}
        )
        out.mounts.append({"name": ASCEND_DRIVER_VOLUME, "mountPath": ASCEND_DRIVER, "readOnly": True})
    return out


def sglang_disaggregated(md: Deployment, role: Role) -> bool:
    return (
        role.managed
        and role.kind in (PREFILL, DECODE)
        and md.pair
        and (md.router is not None or md.kv_cache is not None)
    )


def _sglang(md: Deployment, role: Role) -> Connector:
    out = Connector()
    if not sglang_disaggregated(md, role):
        return out
    protocol = store_protocol(md.kv_transfer.get("protocol"))
    port = constants.SGLANG_BOOTSTRAP_PORT
    out.args += [
        "--disaggregation-mode",
        role.kind.lower(),
        "--disaggregation-transfer-backend",
        "mooncake_tcp" if protocol == "tcp" else "mooncake",
        "--disaggregation-bootstrap-port",
        str(port),
    ]
    if role.kind == PREFILL:
        out.ports.append({"name": BOOTSTRAP_PORT_NAME, "containerPort": port, "protocol": "TCP"})
    return out


def connector(md: Deployment, role: Role, ascend: bool, cache: RoleCache | None) -> Connector:
    """The leg's and the cache client's contribution to a managed role (nothing on take-over)."""
    if not role.managed:
        return Connector()
    out = _vllm(md, role, ascend, cache) if md.engine == engines.ENGINE_VLLM else _sglang(md, role)
    if cache is not None:
        out.args += cache.args
        out.env += cache.env
        out.annotations.update(cache.annotations)
        out.volumes += cache.volumes
        out.mounts += cache.mounts
        out.ports += cache.ports
    out.env.append(_env(ENV_TE_METRIC, "1"))
    return out


def proxy_container(
    md: Deployment,
    role: Role,
    facts: Serving,
    *,
    image: str,
    ascend: bool,
    port: Obj,
    native: bool,
) -> Obj:
    """The direct decoder's ``routing-proxy`` container."""
    args = [f"--port={facts.service_port}", f"--model-server-port={facts.engine_port}"]
    env: list[Obj] = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    if ascend:
        args.append("--kv-connector=nixlv2")
    elif md.engine == engines.ENGINE_SGLANG:
        args.append("--kv-connector=sglang")
        env.append(_env(ENV_SGLANG_BOOTSTRAP, str(constants.SGLANG_BOOTSTRAP_PORT)))
    else:
        args += [
            "--kv-connector=mooncake",
            f"--mooncake-bootstrap-port={constants.VLLM_MOONCAKE_BOOTSTRAP_PORT}",
        ]
    args.append("--secure-proxy=false")
    if facts.proxy_tls:
        args += ["--enable-tls=decoder", "--tls-insecure-skip-verify=decoder"]
    container: Obj = {
        "name": PROXY_CONTAINER,
        "image": image,
        "args": args,
        "env": env,
        "ports": [port],
        "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False},
    }
    if native:
        container["restartPolicy"] = "Always"
    return container


def merge_env(operator: list[Obj], user: list[Any], owned: frozenset[str]) -> list[Obj]:
    """Operator entries, then the user's: owned names dropped, defaulted ones replacing the
    operator's entry of that name (§7.4, §3.4)."""
    users = [e for e in user if isinstance(e, Mapping) and isinstance(e.get("name"), str)]
    named = {e["name"] for e in users}
    out = [e for e in operator if not (e["name"] in DEFAULTED_ENV and e["name"] in named)]
    for entry in users:
        if entry["name"] in owned:
            continue
        rendered: Obj = {"name": entry["name"]}
        if "value" in entry:
            rendered["value"] = entry["value"]
        out.append(rendered)
    return out
