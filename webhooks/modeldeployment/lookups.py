"""ModelDeployment rules that read other objects (model-deployment.md §5 #30–#37).

Every read is a direct GET (``fresh=True``): a stale cache must not decide a ModelDeployment, and each
object is read once per request (memoised by name).  A read that cannot be answered raises
``LookupFailed``, which the server answers as a retryable denial; a missing object is a fact the rules
decide on (a NotFound field error for an InstanceType, no refusal for the KV objects of #37).
"""

from __future__ import annotations

from typing import Any

from api import engines, setting_names
from api.fielderrors import FieldError, forbidden, invalid, not_found
from api.manufacturers import BY_NAME, manufacturer_of_group
from readmodels.modeldeployment import (
    DECODE,
    FABRIC_PROTOCOLS,
    PREFILL,
    Deployment,
    Role,
    as_dict,
    as_list,
    as_str,
    store_protocol,
    whole,
)
from webhooks.lookups import Lookups

SETTING_DERIVED_FROM_NODE = setting_names.INSTANCE_TYPE_DERIVED_FROM_NODE
ASCEND = "ascend"


class TypeFacts:
    """What the rules read of one InstanceType."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.name = as_str(as_dict(obj.get("metadata")).get("name"))
        spec = as_dict(obj.get("spec"))
        status = as_dict(obj.get("status"))
        self.acceleratable = spec.get("acceleratable") is True
        self.group = as_str(spec.get("acceleratorGroup"))
        detail = as_dict(status.get("detail"))
        self.manufacturer = as_str(detail.get("manufacturer"))
        self.observed = bool(self.manufacturer)  # a non-empty manufacturer: the detail has converged
        sliced = as_dict(detail.get("slicedDetail"))
        count = as_dict(sliced.get("logical")).get("count")
        self.logical = count if isinstance(count, int) else 0
        physical = as_dict(sliced.get("physical"))
        self.profiles = [as_str(as_dict(p).get("name")) for p in as_list(physical.get("profiles"))]
        capacity = as_dict(status.get("accelerator")).get("capacity")
        self.capacity = whole(capacity) if capacity is not None else None

    @property
    def maker(self) -> str:
        if self.manufacturer:
            return self.manufacturer
        found = manufacturer_of_group(self.group)
        return found.name if found else ""

    @property
    def can_partition(self) -> bool:
        found = BY_NAME.get(self.maker)
        return bool(found and found.can_partition)


class Types:
    """InstanceTypes by name, read uncached, once per request."""

    def __init__(self, lookups: Lookups) -> None:
        self.lookups = lookups
        self._seen: dict[str, TypeFacts | None] = {}

    async def get(self, name: str) -> TypeFacts | None:
        if name not in self._seen:
            found = await self.lookups.get("InstanceType", name, fresh=True)
            self._seen[name] = TypeFacts(found) if isinstance(found, dict) else None
        return self._seen[name]


def type_not_found(role: Role) -> FieldError:
    return not_found(
        f"{role.path}.instanceType",
        role.instance_type,
        "no InstanceType has this name; `kubectl get instancetypes` lists them",
    )


# --- #34 the barrier ----------------------------------------------------------------------------------


async def barrier(md: Deployment, lookups: Lookups) -> list[FieldError]:
    """#34: roles on several InstanceTypes need the joint check, which only derived queues carry."""
    names = sorted({role.instance_type for role in md.roles if role.instance_type})
    if len(names) < 2 or await lookups.setting_enabled(SETTING_DERIVED_FROM_NODE):
        return []
    return [
        forbidden(
            "spec.roles",
            f"the roles name {len(names)} InstanceTypes ({', '.join(names)}), and with Setting "
            f"{SETTING_DERIVED_FROM_NODE} off no queue carries the joint admission check that admits "
            "their groups as one set; put every role on one InstanceType, or have an administrator "
            f"turn {SETTING_DERIVED_FROM_NODE} on",
        )
    ]


# --- #30–#33, #35 the type rules ----------------------------------------------------------------------


def _offered(facts: TypeFacts) -> str:
    modes = ["whole cards"]
    if facts.logical > 0:
        modes.append("logical slices")
    if facts.can_partition and facts.profiles:
        modes.append(f"partitions ({', '.join(facts.profiles)})")
    return ", ".join(modes)


def _mode(role: Role, facts: TypeFacts) -> tuple[list[FieldError], str | None]:
    """#30 (slice or partition the type does not offer) and #31 (whole cards over its capacity)."""
    errors: list[FieldError] = []
    res = f"{role.path}.resources"
    profile, slicing = role.profile, role.slicing
    if profile and slicing:
        return errors, None  # #28 already names both fields
    cards = whole(role.accelerator)
    if profile or slicing:
        mode = "a partition" if profile else "a logical slice"
        field = f"{res}.acceleratorPartitionedProfile" if profile else role.slice_field
        if not facts.acceleratable:
            errors.append(
                forbidden(field, f"InstanceType {facts.name!r} has no accelerators, so it offers no {mode}")
            )
            return errors, None
        if role.accelerator is not None and cards != 1:
            errors.append(
                invalid(
                    f"{res}.accelerator",
                    role.accelerator,
                    f"{mode} is part of one accelerator: set accelerator to 1",
                )
            )
        if not facts.observed:
            return errors, f"InstanceType {facts.name!r} has not observed its accelerators yet"
        if slicing and facts.logical <= 0:
            errors.append(
                forbidden(
                    field,
                    f"InstanceType {facts.name!r} does not offer logical slices; it offers {_offered(facts)}",
                )
            )
        elif profile and not (facts.can_partition and facts.profiles):
            errors.append(
                invalid(
                    field,
                    profile,
                    f"InstanceType {facts.name!r} does not partition its accelerators; it offers "
                    f"{_offered(facts)}",
                )
            )
        elif profile and profile not in facts.profiles:
            errors.append(
                invalid(
                    field,
                    profile,
                    f"InstanceType {facts.name!r} offers the partition profiles: {', '.join(facts.profiles)}",
                )
            )
        return errors, None
    if cards is None or cards <= 0:
        return errors, None
    if not facts.acceleratable:
        errors.append(
            invalid(
                f"{res}.accelerator",
                role.accelerator,
                f"InstanceType {facts.name!r} has no accelerators (capacity 0); drop the request or "
                "choose an acceleratable InstanceType",
            )
        )
    elif facts.capacity is not None and cards > facts.capacity:
        errors.append(
            invalid(
                f"{res}.accelerator",
                role.accelerator,
                f"the pool of InstanceType {facts.name!r} has {facts.capacity} accelerators in all "
                "(status.accelerator.capacity); request at most that many per Pod",
            )
        )
    return errors, None


async def type_rules(md: Deployment, types: Types) -> tuple[list[FieldError], str | None]:
    """#35 missing types (joined with the rest), #30–#33; a retry message when a rule needs a detail
    that has not converged."""
    errors: list[FieldError] = []
    retry: str | None = None
    facts_of: dict[int, TypeFacts] = {}
    for role in md.roles:
        if not role.instance_type:
            continue
        facts = await types.get(role.instance_type)
        if facts is None:
            errors.append(type_not_found(role))
            continue
        facts_of[role.index] = facts
        found, wait = _mode(role, facts)
        errors += found
        retry = retry or wait
    # #32: an explicit zero on an acceleratable type another role names too.
    named: dict[str, int] = {}
    for role in md.roles:
        named[role.instance_type] = named.get(role.instance_type, 0) + 1
    for role in md.roles:
        facts = facts_of.get(role.index)
        if facts is None or not facts.acceleratable or named[role.instance_type] < 2:
            continue
        if role.accelerator is not None and whole(role.accelerator) == 0:
            errors.append(
                invalid(
                    f"{role.path}.resources.accelerator",
                    role.accelerator,
                    f"InstanceType {facts.name!r} is acceleratable and named by "
                    f"{named[role.instance_type]} roles; a role asking no card on it would share the "
                    "pool's queue as a CPU-only tenant: request at least one accelerator, or move this "
                    "role to a non-acceleratable InstanceType",
                )
            )
    # #33: a Prefill and a Decode both on logical slices of one accelerator group.
    sliced = [r for r in md.roles if r.slicing and not r.profile and r.index in facts_of]
    for decode in (r for r in sliced if r.kind == DECODE):
        for prefill in (r for r in sliced if r.kind == PREFILL):
            group_p, group_d = facts_of[prefill.index].group, facts_of[decode.index].group
            if group_p and group_p == group_d:
                errors.append(
                    forbidden(
                        decode.slice_field,
                        f"Prefill role {prefill.name!r} (InstanceType {prefill.instance_type!r}) and "
                        f"Decode role {decode.name!r} (InstanceType {decode.instance_type!r}) both ask "
                        f"logical slices of accelerator group {group_p!r}, so they can land on one card "
                        "and contend for it; use another accelerator group, or whole cards or "
                        "partition profiles",
                    )
                )
    return errors, retry


# --- The KV cache chain (#36, #37, and the dtype #16 names) -------------------------------------------


class KVChain:
    """The Binding a deployment names, its pool and the pool's first backend, read once."""

    def __init__(self, md: Deployment, lookups: Lookups) -> None:
        self.md = md
        self.lookups = lookups
        self._read = False
        self.binding: dict[str, Any] | None = None
        self.pool: dict[str, Any] | None = None
        self.backend: dict[str, Any] | None = None
        self.missing = ""

    async def resolve(self) -> KVChain:
        if self._read or self.md.kv_cache is None or not self.md.binding_name:
            self._read = True
            return self
        self._read = True
        md = self.md
        self.binding = await self.lookups.get("KVCachePoolBinding", md.binding_name, md.namespace, fresh=True)
        if not isinstance(self.binding, dict):
            self.binding = None
            self.missing = f"KVCachePoolBinding {md.namespace}/{md.binding_name} does not exist"
            return self
        pool = as_str(as_dict(as_dict(self.binding.get("spec")).get("poolRef")).get("name"))
        found = await self.lookups.get("KVCachePool", pool, fresh=True) if pool else None
        self.pool = found if isinstance(found, dict) else None
        if self.pool is None:
            self.missing = f"KVCachePool {pool!r} (of Binding {md.binding_name!r}) does not exist"
            return self
        backends = as_list(as_dict(self.pool.get("spec")).get("backends"))
        backend = as_str(backends[0]) if backends else ""
        found = await self.lookups.get("KVCacheBackend", backend, fresh=True) if backend else None
        self.backend = found if isinstance(found, dict) else None
        if self.backend is None:
            self.missing = f"KVCacheBackend {backend!r} (of KVCachePool {pool!r}) does not exist"
        return self

    async def dtype(self) -> str | None:
        await self.resolve()
        dtype = as_dict(as_dict(as_dict(self.binding).get("spec")).get("domain")).get("dtype")
        return dtype if isinstance(dtype, str) and dtype else None

    def protocols(self) -> list[str]:
        """The backend's effective member-group protocols, in the store's spelling, deduplicated in
        group order (a group's own transport wins over the backend's; unset is ``Auto``, tcp)."""
        spec = as_dict(as_dict(self.backend).get("spec"))
        default = as_dict(spec.get("transport")).get("protocol")
        managed = as_dict(as_dict(spec.get("connection")).get("managed"))
        groups = as_list(managed.get("members"))
        found: list[str] = []
        if not groups:
            found.append(store_protocol(default))
        for group in groups:
            own = as_dict(as_dict(group).get("transport")).get("protocol")
            protocol = store_protocol(own or default)
            if protocol not in found:
                found.append(protocol)
        return found


# --- #36 interfaces ------------------------------------------------------------------------------------


async def _ascend(role: Role, types: Types | None) -> bool:
    if types is None or not role.instance_type:
        return False
    facts = await types.get(role.instance_type)
    return facts is not None and facts.maker == ASCEND


async def interface_rules(md: Deployment, chain: KVChain, types: Types | None) -> list[FieldError]:
    """#36: a positive ``resources.interface`` needs exactly one fabric (RDMA or EFA) among the legs the
    operator renders on the role: the store leg (the bound backend's groups) and the direct leg."""
    errors: list[FieldError] = []
    asking = [role for role in md.roles if role.interface_count > 0]
    if not asking:
        return errors
    if md.kv_cache is not None:
        await chain.resolve()
        if chain.missing:
            return [
                invalid(
                    f"{role.path}.resources.interface",
                    role.resources.get("interface"),
                    f"the KV cache must resolve before requesting interfaces: {chain.missing}",
                )
                for role in asking
            ]
    store = chain.protocols() if md.kv_cache is not None else []
    direct = store_protocol(md.kv_transfer.get("protocol"))
    for role in asking:
        path = f"{role.path}.resources.interface"
        value = role.resources.get("interface")
        legs: list[tuple[str, str]] = []
        if not role.managed:
            errors.append(
                invalid(
                    path,
                    value,
                    "a role with its own command gets no managed transfer leg, so no RDMA or EFA "
                    "interface can be allocated for it; drop the interface request",
                )
            )
            continue
        if md.kv_cache is not None:
            if len(store) > 1:
                errors.append(
                    invalid(
                        path,
                        value,
                        f"the bound cache backend's member groups use different protocols "
                        f"({', '.join(store)}), so no one interface key serves the store leg; make the "
                        "groups use one protocol, or drop the interface request",
                    )
                )
                continue
            legs.append(("the KV cache store leg", store[0]))
        if md.direct_leg(role):
            ascend = await _ascend(role, types)
            if not ascend or md.router_name == engines.ROUTER_LLM_D:
                legs.append(("the direct prefill/decode leg", ASCEND if ascend else direct))
        fabrics = sorted({protocol for _, protocol in legs if protocol in FABRIC_PROTOCOLS})
        described = "; ".join(f"{leg} is {protocol}" for leg, protocol in legs)
        if len(fabrics) > 1:
            errors.append(
                invalid(
                    path,
                    value,
                    f"the role's legs mix RDMA and EFA ({described}), and one interface count cannot "
                    "request both device kinds; use one fabric on every leg",
                )
            )
        elif not fabrics:
            why = described or "the role has no KV cache and no direct prefill/decode leg"
            errors.append(
                invalid(
                    path,
                    value,
                    f"no managed RDMA or EFA leg would use the interfaces ({why}); set an RDMA or EFA "
                    "transport on the leg, or drop the interface request",
                )
            )
    return errors


# --- #37 a new binding's transports ----------------------------------------------------------------------


def _reads_across(engine: str) -> bool:
    """Whether an engine's store client can read blocks on several transports: none can today (each
    installs the one transport it is handed, and a block on another fails NotSupportedTransport)."""
    return False


async def binding_rules(md: Deployment, chain: KVChain) -> list[FieldError]:
    """#37: a new binding to a pool whose first backend's groups use several protocols."""
    if md.kv_cache is None or _reads_across(md.engine):
        return []
    await chain.resolve()
    if chain.backend is None:
        return []  # missing objects: nothing to judge (status reports them)
    found = chain.protocols()
    if len(found) < 2:
        return []
    pool = as_str(as_dict(as_dict(as_dict(chain.binding).get("spec")).get("poolRef")).get("name"))
    return [
        invalid(
            "spec.kvCache.poolRef.name",
            md.binding_name,
            f"KVCachePool {pool!r} draws on a backend whose member groups use {', '.join(found)}; "
            f"{md.engine} installs one transport, and a block on a group using another cannot be read "
            "(NotSupportedTransport); use one protocol across the backend's groups, or bind another pool",
        )
    ]
