"""How a ModelDeployment's roles serve: ports (§5 #19–#21, #44, #45), the served model name (#22) and
the weight mounts an artifact owns (#23, volumes).

A role serves on ``ports[0]`` (else 8000); with no ports and a stream ``--port N`` the container side
follows N.  The operator reserves the ports it synthesizes listeners on (§11.4).  What a stored role
already had is judged only when an edit changes it (§12.9).
"""

from __future__ import annotations

from api import constants, engines
from api.fielderrors import FieldError, forbidden, invalid
from fastpath import argv
from readmodels.modeldeployment import (
    SERVED_NAME_FLAGS,
    TLS_FLAGS,
    Deployment,
    Role,
    as_dict,
    as_str,
)

_WEIGHT_MOUNTS = (constants.MODEL_MOUNT_PATH, constants.MODEL_CACHE_MOUNT_PATH)


# --- Ports (#19–#21, #44, #45) ----------------------------------------------------------------------

_LISTENERS = {5557: "the KV-events publisher", 5558: "the KV-events replay endpoint"}


def _reserved_words(md: Deployment, role: Role, reserved: frozenset[int]) -> str:
    listed = ", ".join(
        f"{p} ({_LISTENERS.get(p, 'the transfer bootstrap server')})" for p in sorted(reserved)
    )
    return f"the operator opens {listed} on a {md.reservation_owner()} {role.kind} role"


def _stored(old: Deployment | None, role: Role) -> Role | None:
    return old.by_name.get(role.name) if old is not None else None


def ports(md: Deployment, old: Deployment | None) -> list[FieldError]:
    errors: list[FieldError] = []
    routed = md.router is not None
    for role in md.roles:
        stored = _stored(old, role)
        reserved = md.reserved_ports(role)
        declared = [p.get("port") for p in role.ports]
        # #19: a declared port and a stream --port that disagree.
        if (
            role.ports
            and role.port is not None
            and role.port != role.service_port
            and not md.direct_decoder(role)
            and not (
                stored is not None
                and stored.port_list == role.port_list
                and stored.stream == role.stream
                and stored.stream_field == role.stream_field
            )
        ):
            where = role.stream_path(role.port_index) if role.port_index is not None else role.path
            errors.append(
                invalid(
                    f"{role.path}.ports[0].port",
                    role.service_port,
                    f"the first declared port is {role.service_port} but {where} passes --port "
                    f"{role.port}; the container port, Service and probes follow ports[0]: drop the "
                    "--port or make the two equal",
                )
            )
        # #20: a declared port the operator reserves.
        refused = md.refused_ports(role)
        for k, port in enumerate(declared):
            if isinstance(port, int) and port in refused:
                errors.append(
                    invalid(
                        "spec.router" if routed else f"{role.path}.ports[{k}].port",
                        port,
                        f"{role.path}.ports[{k}] declares port {port}, which is reserved: "
                        f"{_reserved_words(md, role, refused)}; declare another port",
                    )
                )
        # #21: no declared ports and a --port the operator reserves.
        if not role.ports and role.port is not None and role.port in reserved:
            kept = (
                stored is not None
                and not stored.ports
                and stored.port == role.port
                and role.port in (old.reserved_ports(stored) if old is not None else frozenset())
            )
            if not kept:
                where = role.stream_path(role.port_index) if role.port_index is not None else role.path
                errors.append(
                    invalid(
                        "spec.router" if routed else where,
                        role.port,
                        f"{where} passes --port {role.port}, which is reserved: "
                        f"{_reserved_words(md, role, reserved)}; pass another port",
                    )
                )
        # #45: a direct decoder's engine on the port its routing proxy takes.
        if md.direct_decoder(role) and role.port is not None and role.port == role.service_port:
            where = role.stream_path(role.port_index) if role.port_index is not None else role.path
            errors.append(
                invalid(
                    where,
                    role.port,
                    f"under {engines.ROUTER_LLM_D} a Decode role's routing proxy takes the Service port "
                    f"{role.service_port} and the engine listens behind it; drop the --port, or pass "
                    "another one",
                )
            )
    if routed:
        errors += _routed(md)
    return errors


def _routed(md: Deployment) -> list[FieldError]:
    """#44: routed roles serve plaintext HTTP over TCP, all on one port."""
    errors: list[FieldError] = []
    for role in md.roles:
        if role.serving_protocol != "TCP":
            errors.append(
                invalid(
                    f"{role.path}.ports[0].protocol",
                    role.serving_protocol,
                    f"{md.router_name} sends HTTP over TCP only; serve the role on a TCP port",
                )
            )
        for index, spelled, _ in argv.find_owned_args(md.engine, role.stream, TLS_FLAGS):
            errors.append(
                forbidden(
                    role.stream_path(index),
                    f"{spelled} makes the engine serve HTTPS, and {md.router_name} sends plaintext "
                    "only; terminate TLS at the gateway in front of the deployment",
                )
            )
    targets = {role.name: md.target_port(role) for role in md.roles}
    if len(set(targets.values())) > 1:
        listed = ", ".join(f"{name}={port}" for name, port in targets.items())
        errors.append(
            invalid(
                "spec.router",
                md.router_name,
                f"a router targets every role on one port, but the roles serve on {listed}; make "
                "the roles' ports equal",
            )
        )
    return errors


# --- Served names and weights (#22, #23 volumes) --------------------------------------------------------


def _served_names(role: Role) -> tuple[int, list[str]] | None:
    found = argv.find_owned_args(role.engine, role.extra_args, SERVED_NAME_FLAGS)
    if not found:
        return None
    index = found[-1][0]
    resolved = argv.resolve_flag(role.engine, role.extra_args[index], SERVED_NAME_FLAGS)
    if resolved is not None and resolved[1] is not None:
        return index, [resolved[1]]
    names: list[str] = []
    for token in role.extra_args[index + 1 :]:
        if not isinstance(token, str) or (token.startswith("-") and token != "-"):
            break
        names.append(token)
        if role.engine != engines.ENGINE_VLLM:  # vLLM takes one or more names; SGLang one
            break
    return index, names


def served_names(md: Deployment, old: Deployment | None) -> list[FieldError]:
    """#22: a managed role's ``--served-model-name`` is ``spec.model.name`` alone, or absent."""
    errors: list[FieldError] = []
    if md.engine not in engines.ENGINES:
        return errors
    for role in md.roles:
        if not role.managed:
            continue
        read = _served_names(role)
        if read is None or not read[1] or read[1] == [md.model_name]:
            continue  # absent, equal, or without a value (the engine's own parser refuses that)
        stored = _stored(old, role)
        if (
            stored is not None
            and old is not None
            and stored.managed
            and old.model_name == md.model_name
            and (_served_names(stored) or (0, []))[1] == read[1]
        ):
            continue
        index, names = read
        several = " (several names)" if len(names) > 1 else ""
        errors.append(
            invalid(
                f"{role.path}.extraArgs[{index}]",
                names[0] if len(names) == 1 else names,
                f"--served-model-name{several} must equal spec.model.name ({md.model_name!r}): routers "
                "and metrics match on that one name; omit it, and the operator renders it",
            )
        )
    return errors


def weight_mounts(md: Deployment) -> list[FieldError]:
    """#23 (volumes): with ``artifactRef``, no role volume at, inside or around the weight mounts."""
    errors: list[FieldError] = []
    if not md.artifact_ref:
        return errors
    for role in md.roles:
        for k, raw in enumerate(role.volumes):
            mount = as_str(as_dict(raw).get("mountPath")).rstrip("/")
            if not mount:
                continue
            for weights in _WEIGHT_MOUNTS:
                if mount == weights or mount.startswith(weights + "/") or weights.startswith(mount + "/"):
                    errors.append(
                        forbidden(
                            f"{role.path}.additionalVolumes[{k}].mountPath",
                            f"overlaps {weights}, where the weights of spec.model.artifactRef "
                            f"({md.artifact_ref}) are mounted; mount it elsewhere",
                        )
                    )
                    break
    return errors
