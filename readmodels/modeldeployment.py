"""One read of a ModelDeployment, for its admission rules and its renderer: every role parsed once.

The webhook serves every ModelDeployment write, so the submitted object is read into a
:class:`Deployment` once per request and every rule reads that view: each role's argv stream
(``command`` if non-empty, else ``extraArgs``) is parsed by the compiled reader at most once for its
degrees and once for its ``--port``, whichever rules ask first.  Nothing here copies the object.

The ModelDeployment renderer (``controllers.modeldeployment``) reads deployments through this same
view, so what admission judges (the argv stream, serving and reserved ports, the direct decoder) is
what the renderer builds.

The view is defensive about shapes: the mutating half runs before the apiserver's schema
validation, and a wrong type must never raise, so every accessor falls back to "absent".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

from api import constants, engines, kvcache
from api.objects import Obj, as_dict, as_list, as_str
from fastpath import argv, quantity
from fastpath.degrees import Degrees, parse_degrees

KIND = "ModelDeployment"
SERVER, PREFILL, DECODE = "Server", "Prefill", "Decode"
KINDS = (SERVER, PREFILL, DECODE)
DEFAULT_CONNECTOR = "Mooncake"
DEFAULT_SERVING_PORT = constants.DEFAULT_SERVING_PORT
MAX_ROLES = 10

# Ports the operator synthesizes listeners on (model-deployment.md §11.4), from api.constants so the
# renderer will use the same numbers.
KV_EVENTS_PORTS = constants.KV_EVENTS_PORTS
VLLM_MOONCAKE_BOOTSTRAP_PORT = constants.VLLM_MOONCAKE_BOOTSTRAP_PORT
SGLANG_BOOTSTRAP_PORT = constants.SGLANG_BOOTSTRAP_PORT
DIRECT_DECODER_ENGINE_PORT = constants.DIRECT_DECODER_ENGINE_PORT

# Every kind each engine has a rendering term for (§5 #11): no case is refused today.
ENGINE_KINDS: dict[str, frozenset[str]] = {
    engines.ENGINE_VLLM: frozenset({SERVER, PREFILL, DECODE}),
    engines.ENGINE_SGLANG: frozenset({SERVER, PREFILL, DECODE}),
}

# The engines each router fronts (§5 #43).
ROUTER_ENGINES: dict[str, tuple[str, ...]] = {
    engines.ROUTER_LLM_D: (engines.ENGINE_VLLM, engines.ENGINE_SGLANG),
    engines.ROUTER_VLLM: (engines.ENGINE_VLLM,),
    engines.ROUTER_SGLANG_GATEWAY: (engines.ENGINE_SGLANG,),
}

FABRIC_PROTOCOLS = ("rdma", "efa")

PORT_FLAGS = frozenset({engines.PORT_FLAG})
TLS_FLAGS = frozenset({"--ssl-certfile", "--ssl-keyfile"})
SERVED_NAME_FLAG = "--served-model-name"
SERVED_NAME_FLAGS = frozenset({SERVED_NAME_FLAG})


T = TypeVar("T")


class once(Generic[T]):
    """``functools.cached_property`` without the class-wide lock Python 3.11 takes on every first
    read (about 1.5 µs each, two or three a role on the webhook's path): the value is computed from
    the role alone, so two threads computing it at once store the same answer."""

    def __init__(self, func: Callable[[Any], T]) -> None:
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> once[T]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...

    def __get__(self, obj: object | None, owner: type | None = None) -> once[T] | T:
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.func(obj)
        return value


def as_int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def store_protocol(api_value: Any) -> str:
    """The store spelling of an API transport protocol (:func:`api.kvcache.store_protocol`); unset,
    or not a string, is ``Auto`` (tcp)."""
    if not isinstance(api_value, str) or not api_value:
        return "tcp"
    return kvcache.store_protocol(api_value)


def exact(value: Any) -> tuple[int, int] | None:
    """A quantity's exact value, or None when absent or not a quantity (the schema names that)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return quantity.parse(value)
    except ValueError:
        return None


def whole(value: Any) -> int | None:
    """A quantity as a whole number, or None (absent, fractional, or not a quantity)."""
    found = exact(value)
    if found is None or found[1] != 1:
        return None
    return found[0]


class Role:
    """One entry of ``spec.roles``, read for the rules; argv parsed lazily, once."""

    def __init__(self, index: int, raw: Any, engine: str) -> None:
        self.index = index
        self.path = f"spec.roles[{index}]"
        self.raw: Obj = as_dict(raw)
        self.engine = engine
        raw = self.raw
        self.name = as_str(raw.get("name"))
        self.kind = as_str(raw.get("kind")) or SERVER
        self.replicas = as_int(raw.get("replicas"), 1)
        self.size = as_int(raw.get("size"), 1)
        self.instance_type = as_str(raw.get("instanceType"))
        self.resources = as_dict(raw.get("resources"))
        self.command = as_list(raw.get("command"))
        self.extra_args = as_list(raw.get("extraArgs"))
        self.env = as_list(raw.get("env"))
        self.ports = [as_dict(p) for p in as_list(raw.get("ports"))]
        self.volumes = as_list(raw.get("additionalVolumes"))
        self.image = as_str(raw.get("image"))
        self.privileged = raw.get("privileged") is True
        # A take-over role: its command is the whole argv; extraArgs beside it are inert (§4.1).
        self.managed = not self.command
        self.stream = self.command if self.command else self.extra_args
        self.stream_field = "command" if self.command else "extraArgs"

    # -- argv, parsed once ----------------------------------------------------------------------

    @once
    def degrees(self) -> Degrees:
        return parse_degrees(self.engine, self.stream, self.env)

    @once
    def port(self) -> int | None:
        """The stream's ``--port`` (last wins, 1..65535), or None."""
        return argv.read_port(self.engine, self.stream)

    @once
    def port_index(self) -> int | None:
        """Where the effective ``--port`` is spelled on the stream (its last occurrence)."""
        found = argv.find_owned_args(self.engine, self.stream, PORT_FLAGS)
        return found[-1][0] if found else None

    def stream_path(self, index: int) -> str:
        return f"{self.path}.{self.stream_field}[{index}]"

    # -- resources ----------------------------------------------------------------------------------

    @property
    def accelerator(self) -> Any:
        return self.resources.get("accelerator")

    @property
    def profile(self) -> str:
        return as_str(self.resources.get("acceleratorPartitionedProfile"))

    @property
    def slicing(self) -> bool:
        """A logical slice: either percentage non-zero."""
        return bool(
            self.resources.get("acceleratorSlicedMemoryPercentage")
            or self.resources.get("acceleratorSlicedCoresPercentage")
        )

    @property
    def slice_field(self) -> str:
        if self.resources.get("acceleratorSlicedMemoryPercentage"):
            return f"{self.path}.resources.acceleratorSlicedMemoryPercentage"
        return f"{self.path}.resources.acceleratorSlicedCoresPercentage"

    @property
    def interface_count(self) -> int:
        """A positive whole interface count, else 0 (negative/fractional is refused by #29)."""
        count = whole(self.resources.get("interface"))
        return count if count and count > 0 else 0

    # -- ports --------------------------------------------------------------------------------------

    @property
    def service_port(self) -> int:
        """The port the role's Service and the deployment endpoint expose (§7.6)."""
        if self.ports and isinstance(self.ports[0].get("port"), int):
            return self.ports[0]["port"]
        return DEFAULT_SERVING_PORT

    @property
    def port_list(self) -> list[tuple[object, str]]:
        """The declared ports as stored (protocol defaulted), for comparing with a stored role."""
        return [(p.get("port"), as_str(p.get("protocol")) or "TCP") for p in self.ports]

    @property
    def serving_protocol(self) -> str:
        if self.ports:
            return as_str(self.ports[0].get("protocol")) or "TCP"
        return "TCP"

    def env_names(self) -> list[tuple[int, str]]:
        return [(j, as_str(as_dict(e).get("name"))) for j, e in enumerate(self.env)]


class Deployment:
    """A ModelDeployment as its rules read it."""

    def __init__(self, obj: Obj | None, namespace: str = "") -> None:
        obj = as_dict(obj)
        self.obj = obj
        meta = as_dict(obj.get("metadata"))
        self.name = as_str(meta.get("name"))
        self.namespace = as_str(meta.get("namespace")) or namespace
        self.deleting = bool(meta.get("deletionTimestamp"))
        spec = as_dict(obj.get("spec"))
        self.spec = spec
        self.model = as_dict(spec.get("model"))
        self.model_name = as_str(self.model.get("name"))
        self.artifact_ref = as_str(as_dict(self.model.get("artifactRef")).get("name"))
        self.engine_block = as_dict(spec.get("engine"))
        self.engine = as_str(self.engine_block.get("name"))
        self.kv_cache: Obj | None = spec["kvCache"] if isinstance(spec.get("kvCache"), dict) else None
        self.binding_name = as_str(as_dict(as_dict(self.kv_cache).get("poolRef")).get("name"))
        self.router: Obj | None = spec["router"] if isinstance(spec.get("router"), dict) else None
        self.router_name = as_str(as_dict(self.router).get("name"))
        self.kv_transfer = as_dict(spec.get("kvTransfer"))
        self.raw_roles = as_list(spec.get("roles"))
        self.roles = [Role(i, raw, self.engine) for i, raw in enumerate(self.raw_roles)]
        self.by_name: dict[str, Role] = {}
        for role in self.roles:
            self.by_name.setdefault(role.name, role)
        kinds = {role.kind for role in self.roles}
        self.has_prefill = PREFILL in kinds
        self.has_decode = DECODE in kinds

    @property
    def pair(self) -> bool:
        """Both halves of a prefill/decode pair are declared."""
        return self.has_prefill and self.has_decode

    def direct_leg(self, role: Role) -> bool:
        """The direct prefill-to-decode leg renders on ``role`` (§11.1, Ascend aside)."""
        return bool(self.router) and self.pair and role.managed and role.kind in (PREFILL, DECODE)

    def direct_decoder(self, role: Role) -> bool:
        """A managed Decode under llm-d-router: its routing proxy takes the Service port (§11.2)."""
        return self.router_name == engines.ROUTER_LLM_D and role.managed and role.kind == DECODE

    def reserved_ports(self, role: Role) -> frozenset[int]:
        """Ports the operator synthesizes listeners on for ``role`` (§11.4)."""
        if not role.managed:
            return frozenset()
        ports: set[int] = set()
        if self.engine == engines.ENGINE_VLLM:
            if self.router_name == engines.ROUTER_LLM_D and role.kind != DECODE:
                ports.update(KV_EVENTS_PORTS)
            if role.kind == PREFILL and self.pair and self.router:
                ports.add(VLLM_MOONCAKE_BOOTSTRAP_PORT)
        elif (
            self.engine == engines.ENGINE_SGLANG
            and role.kind == PREFILL
            and self.pair
            and (self.router or self.kv_cache is not None)
        ):
            ports.add(SGLANG_BOOTSTRAP_PORT)
        return frozenset(ports)

    def refused_ports(self, role: Role) -> frozenset[int]:
        """Ports ``role`` may not declare: its reserved set, plus — when a router is named — the
        transfer bootstrap port on every role of any kind, as the reference refuses it (§11.4)."""
        reserved = self.reserved_ports(role)
        if self.router:
            return reserved | {VLLM_MOONCAKE_BOOTSTRAP_PORT}
        return reserved

    def target_port(self, role: Role) -> int:
        """The container port a router sends ``role``'s requests to (§7.5, §11.2)."""
        if role.ports or self.direct_decoder(role):
            return role.service_port
        return role.port or DEFAULT_SERVING_PORT

    def reservation_owner(self) -> str:
        """Who the reserved set belongs to, for messages."""
        if self.router_name:
            return f"{self.engine} under {self.router_name}"
        return f"{self.engine} with a KV cache"
