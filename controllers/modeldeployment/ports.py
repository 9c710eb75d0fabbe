"""Where a role serves: its container ports and the three probes (model-deployment.md §7.5, §11.2).

- No declared ports: one port ``http``/TCP/8000.  Declared ports are rendered in order, each named
  ``lower("<protocol>-<port>")``; the first is the serving port.  With no ports and a stream
  ``--port N`` the container port, Service targetPort, probes and router target follow N while the
  Service port and ``status.endpoint`` stay 8000.
- A managed ``Decode`` under ``llm-d-router`` is a **direct decoder**: its routing proxy takes the
  Service port and the engine moves to 8200 (bumped past the declared ports); the engine's port is
  named ``model-server``.
- Operator listeners (KV events, transfer bootstrap) merge in: the same number and name are one
  port; the same number under another name is a render error.
- Gated roles get startup, readiness and liveness ``GET /health`` on the serving port (https iff
  ``--ssl-certfile`` or ``--ssl-keyfile``): period 10 s, timeout 3 s, failure thresholds 180 / 3 / 6.
  A direct decoder is probed at ``/v1/models`` over http on the proxy port.  Ungated: take-over
  roles, a role with its own ``--host``, TLS demanding client certificates (``--ssl-cert-reqs``
  other than ``0``/``1``, its value missing included), a UDP/SCTP serving port.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from api import constants, engines
from api.objects import Obj
from fastpath import argv
from readmodels.modeldeployment import DEFAULT_SERVING_PORT, TLS_FLAGS, Deployment, Role, as_str

PORT_HTTP = "http"
PORT_MODEL_SERVER = "model-server"
HEALTH_PATH = "/health"
DIRECT_DECODER_HEALTH_PATH = "/v1/models"
PERIOD_SECONDS = 10
TIMEOUT_SECONDS = 3
STARTUP_FAILURES = 180  # 30 minutes per attempt
READINESS_FAILURES = 3
LIVENESS_FAILURES = 6
CERT_REQS_FLAG = "--ssl-cert-reqs"
CERT_REQS_GATED = frozenset({"0", "1"})


class PortError(Exception):
    """Two listeners claim one port under different names."""


@dataclass(frozen=True)
class Serving:
    """The role's serving facts, shared by the Pod, its Services and the status."""

    service_port: int  # what the role's Service and the deployment endpoint expose
    engine_port: int  # where the engine listens
    target_port: int  # the container port the Service (and a router) sends to
    protocol: str
    scheme: str  # http | https
    gated: bool
    direct_decoder: bool
    proxy_tls: bool = False  # a direct decoder fronting a TLS engine


def port_name(protocol: str, port: int) -> str:
    return f"{protocol}-{port}".lower()


def flag_value(engine: str, stream: list[Any], flag: str) -> tuple[bool, str | None]:
    """Whether ``flag`` occurs on the stream (recognised as the engine's parser would) and its last
    value (``--f=v``, or the next token unless that looks like a flag), else None."""
    found = argv.find_owned_args(engine, stream, frozenset({flag}))
    if not found:
        return False, None
    index = found[-1][0]
    resolved = argv.resolve_flag(engine, stream[index], frozenset({flag}))
    if resolved is not None and resolved[1] is not None:
        return True, resolved[1]
    nxt = stream[index + 1] if index + 1 < len(stream) else None
    if not isinstance(nxt, str) or (nxt.startswith("-") and nxt != "-"):
        return True, None
    return True, nxt


def uses_tls(engine: str, stream: list[Any]) -> bool:
    return bool(argv.find_owned_args(engine, stream, TLS_FLAGS))


def _gated(md: Deployment, role: Role, protocol: str, tls: bool) -> bool:
    if not role.managed or protocol != "TCP":
        return False
    if argv.find_owned_args(md.engine, role.stream, frozenset({engines.HOST_FLAG})):
        return False
    if tls:
        present, value = flag_value(md.engine, role.stream, CERT_REQS_FLAG)
        if present and (value is None or value.strip() not in CERT_REQS_GATED):
            return False
    return True


def _bumped(start: int, taken: set[int]) -> int:
    port = start
    while port in taken:
        port += 1
    return port


def serving(md: Deployment, role: Role) -> Serving:
    protocol = role.serving_protocol
    tls = uses_tls(md.engine, role.stream)
    direct = md.direct_decoder(role)
    service_port = role.service_port
    if direct:
        declared = {port for p in role.ports if isinstance(port := p.get("port"), int)}
        engine_port = role.port or _bumped(constants.DIRECT_DECODER_ENGINE_PORT, declared | {service_port})
        target = service_port
    else:
        engine_port = service_port if role.ports else (role.port or DEFAULT_SERVING_PORT)
        target = engine_port
    return Serving(
        service_port=service_port,
        engine_port=engine_port,
        target_port=target,
        protocol=protocol,
        scheme="https" if tls and not direct else "http",
        gated=_gated(md, role, protocol, tls),
        direct_decoder=direct,
        proxy_tls=direct and tls,
    )


def merge(ports: list[Obj], extra: list[Obj]) -> list[Obj]:
    """``ports`` plus the operator's listeners; the same (number, protocol) under another name fails."""
    out = list(ports)
    for entry in extra:
        clash = next(
            (
                p
                for p in out
                if p["containerPort"] == entry["containerPort"]
                and p.get("protocol", "TCP") == entry.get("protocol", "TCP")
            ),
            None,
        )
        if clash is None:
            out.append(entry)
        elif clash.get("name") != entry.get("name"):
            raise PortError(
                f"port {entry['containerPort']} is both {clash.get('name')!r} and {entry.get('name')!r}: "
                f"the operator opens {entry.get('name')} there; declare another port"
            )
    return out


def main_ports(role: Role, facts: Serving) -> list[Obj]:
    """The engine container's own ports (before the operator's listeners merge in)."""
    if facts.direct_decoder:
        rest = role.ports[1:]
        first = [{"name": PORT_MODEL_SERVER, "containerPort": facts.engine_port, "protocol": "TCP"}]
    elif role.ports:
        rest, first = role.ports, []
    else:
        return [{"name": PORT_HTTP, "containerPort": facts.engine_port, "protocol": "TCP"}]
    out = list(first)
    for p in rest:
        port, protocol = p.get("port"), as_str(p.get("protocol")) or "TCP"
        if isinstance(port, int):
            out.append({"name": port_name(protocol, port), "containerPort": port, "protocol": protocol})
    return out


def proxy_port(role: Role, facts: Serving) -> Obj:
    name = port_name(facts.protocol, facts.service_port) if role.ports else PORT_HTTP
    return {"name": name, "containerPort": facts.service_port, "protocol": "TCP"}


def probes(facts: Serving) -> Obj:
    """``startupProbe``, ``readinessProbe`` and ``livenessProbe`` of a gated role, else nothing."""
    if not facts.gated:
        return {}
    if facts.direct_decoder:
        get = {"path": DIRECT_DECODER_HEALTH_PATH, "port": facts.service_port, "scheme": "HTTP"}
    else:
        get = {"path": HEALTH_PATH, "port": facts.engine_port, "scheme": facts.scheme.upper()}

    def probe(failures: int) -> Obj:
        return {
            "httpGet": dict(get),
            "periodSeconds": PERIOD_SECONDS,
            "timeoutSeconds": TIMEOUT_SECONDS,
            "failureThreshold": failures,
        }

    return {
        "startupProbe": probe(STARTUP_FAILURES),
        "readinessProbe": probe(READINESS_FAILURES),
        "livenessProbe": probe(LIVENESS_FAILURES),
    }
