"""``KVCachePoolBinding`` admission (kv-cache spec §3.3, rules K1–K5).

The domain name is the store's tenant id, so uniqueness is per master: per backend object (two
external objects for one leader are not caught, spec §8.7).  K3 and K4 read the pool the Binding
names, its backend, and every other Binding with its pool; a pool that does not exist yet decides
nothing here (the Binding's status names it, and ``DomainExclusive`` catches a collision later).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from api import kvcache as kv
from api.objects import as_dict, as_str
from webhooks.decision import Decision, FieldError, allow, forbidden, invalid, reject, required
from webhooks.kvcache.values import dig, is_dns_label, positive_quantity
from webhooks.lookups import Lookups
from webhooks.review import AdmissionRequest

DEFAULT_DOMAIN = "default"
FROZEN = (
    (
        "spec.poolRef",
        ("spec", "poolRef"),
        "a grant cannot move to another pool; create another KVCachePoolBinding",
    ),
    (
        "spec.domain.name",
        ("spec", "domain", "name"),
        "it is the store's tenant id; a renamed domain is a new ledger entry: create another KVCachePoolBinding",
    ),
    (
        "spec.domain.blockSize",
        ("spec", "domain", "blockSize"),
        "blocks already written in another size would be read wrong; create another KVCachePoolBinding",
    ),
    (
        "spec.domain.dtype",
        ("spec", "domain", "dtype"),
        "blocks already written in another dtype would be read wrong; create another KVCachePoolBinding",
    ),
)


@dataclass(frozen=True, slots=True)
class Holder:
    """Another Binding's claim on a domain name, with the backend its pool draws on."""

    namespace: str
    name: str
    domain: str
    backend: str


@dataclass(frozen=True, slots=True)
class Master:
    """What admission knows about the master behind this Binding's pool."""

    backend: str
    single_tenant: bool  # pool says MultiTenancyDisabled, or the managed backend declares it


def domain_name(binding: dict[str, Any]) -> str:
    return as_str(dig(binding, "spec", "domain", "name")) or DEFAULT_DOMAIN


def object_errors(obj: dict[str, Any], old: dict[str, Any] | None, *, dtype_owned: bool) -> list[FieldError]:
    """K1, K2 and K5: the rules that need no other object."""
    found: list[FieldError] = []
    spec = as_dict(obj.get("spec"))
    if not as_str(dig(spec, "poolRef", "name")):
        found.append(required("spec.poolRef.name", "name the KVCachePool this namespace draws on"))
    ceiling = dig(spec, "quota", "ceiling")
    if not positive_quantity(ceiling):
        found.append(invalid("spec.quota.ceiling", ceiling, "must be a positive quantity, e.g. 200Gi"))
    name = dig(spec, "domain", "name")
    if name is not None and not is_dns_label(name):
        found.append(
            invalid(
                "spec.domain.name",
                name,
                "must be a DNS-1123 label (lowercase letters, digits, '-', at most 63), e.g. qwen-72b-v2: it "
                "becomes the store's tenant id verbatim",
            )
        )
    block_size = dig(spec, "domain", "blockSize")
    if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size <= 0:
        found.append(
            invalid("spec.domain.blockSize", block_size, "must be a positive integer (tokens per block)")
        )
    dtype = dig(spec, "domain", "dtype")
    if not isinstance(dtype, str) or not dtype.strip() or len(dtype) > 32 or dtype != dtype.strip():
        found.append(
            invalid("spec.domain.dtype", dtype, "must be the engines' dtype spelling, e.g. bfloat16")
        )
    elif old is None and dtype_owned and dtype == "auto":
        found.append(
            forbidden(
                "spec.domain.dtype",
                f"auto lets every engine pick its own dtype, and engines writing two dtypes into one domain read "
                f"each other's blocks wrong; name one both accept (bfloat16, fp8_e4m3, fp8_e5m2, nvfp4), or turn "
                f"off the Setting {kv.SETTING_DTYPE_OWNED}",
            )
        )
    if old is not None:
        for path, keys, why in FROZEN:
            before, after = dig(old, *keys), dig(obj, *keys)
            if path == "spec.domain.name":
                before, after = before or DEFAULT_DOMAIN, after or DEFAULT_DOMAIN
            if before != after:
                found.append(forbidden(path, f"is immutable: {why}"))
    return found


def domain_verdict(
    namespace: str, name: str, domain: str, master: Master, others: list[Holder]
) -> tuple[list[FieldError], list[str]]:
    """K3 (one holder per name per master) and K4 (a second distinct domain on a single-tenant master)."""
    mine = [h for h in others if h.backend == master.backend and (h.namespace, h.name) != (namespace, name)]
    for holder in mine:
        if holder.domain == domain:
            implicit = (
                " (both leave spec.domain.name out, which defaults to default)"
                if domain == DEFAULT_DOMAIN
                else ""
            )
            return [
                invalid(
                    "spec.domain.name",
                    domain,
                    f"is already held on backend {master.backend} by KVCachePoolBinding "
                    f"{holder.namespace}/{holder.name}{implicit}: one tenant id has one ledger entry per master; "
                    "choose another name",
                )
            ], []
    distinct = sorted({h.domain for h in mine} - {domain})
    if not distinct:
        return [], []
    if master.single_tenant:
        return [
            forbidden(
                "spec.domain.name",
                f"backend {master.backend} keeps no per-tenant ledger (multi-tenancy off), and domain "
                f"{distinct[0]} already uses it: a single-tenant store serves one reuse domain; reuse that "
                "name or use a pool over a multi-tenant backend",
            )
        ], []
    return [], [
        f"backend {master.backend} now serves {len(distinct) + 1} reuse domains: every engine image attached to it "
        "must read and forward the tenant id (vLLM from the client file, SGLang from MOONCAKE_TENANT_ID), or "
        "its writes fall back to the tenant 'default'"
    ]


def _ledger_disabled(pool: dict[str, Any]) -> bool:
    for condition in dig(pool, "status", "conditions") or []:
        condition = as_dict(condition)
        if condition.get("type") == kv.COND_QUOTA_LEDGER_AVAILABLE:
            return (
                condition.get("status") == "False"
                and condition.get("reason") == kv.REASON_MULTI_TENANCY_DISABLED
            )
    return False


def _backend_of(pool: dict[str, Any] | None) -> str:
    backends = dig(pool, "spec", "backends")
    return backends[0] if isinstance(backends, list) and backends and isinstance(backends[0], str) else ""


async def _master(lookups: Lookups, pool_name: str) -> Master | None:
    pool = await lookups.get(kv.KIND_POOL, pool_name) if pool_name else None
    backend_name = _backend_of(pool)
    if pool is None or not backend_name:
        return None
    backend = await lookups.get(kv.KIND_BACKEND, backend_name)
    declared = dig(backend, "spec", "connection", "managed", "leader", "multiTenancy") is False
    return Master(backend_name, _ledger_disabled(pool) or declared)


async def _holders(lookups: Lookups) -> list[Holder]:
    pools: dict[str, str] = {}
    holders: list[Holder] = []
    for other in await lookups.list(kv.KIND_BINDING):
        pool_name = as_str(dig(other, "spec", "poolRef", "name"))
        if pool_name not in pools:
            pools[pool_name] = _backend_of(await lookups.get(kv.KIND_POOL, pool_name)) if pool_name else ""
        meta = as_dict(other.get("metadata"))
        holders.append(
            Holder(
                as_str(meta.get("namespace")), as_str(meta.get("name")), domain_name(other), pools[pool_name]
            )
        )
    return holders


async def validate(request: AdmissionRequest, lookups: Lookups) -> Decision:
    obj = request.object or {}
    old = request.old_object if request.operation == "UPDATE" else None
    dtype_owned = await lookups.setting_enabled(kv.SETTING_DTYPE_OWNED) if old is None else False
    found = object_errors(obj, old, dtype_owned=dtype_owned)
    if found or old is not None:  # poolRef and domain are frozen: K3/K4 are decided once, at CREATE
        return reject(kv.KIND_BINDING, request.display_name, found) if found else allow()
    master = await _master(lookups, as_str(dig(obj, "spec", "poolRef", "name")))
    if master is None:
        return allow()
    errors, warnings = domain_verdict(
        request.namespace or as_str(dig(obj, "metadata", "namespace")),
        request.display_name,
        domain_name(obj),
        master,
        await _holders(lookups),
    )
    if errors:
        return reject(kv.KIND_BINDING, request.display_name, errors)
    return allow(warnings=warnings)
