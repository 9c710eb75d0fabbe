"""``KVCachePool`` admission (kv-cache spec §3.2, rules P1–P4).

P4 reads the named backend: a managed store declared single-tenant enforces no per-tenant quota,
which is worth a warning and never a refusal.  External backends are not inspected.
"""

from __future__ import annotations

from typing import Any

from api import kvcache as kv
from api.objects import as_dict, as_list
from webhooks.decision import Decision, FieldError, allow, forbidden, invalid, reject
from webhooks.kvcache.values import dig, positive_quantity
from webhooks.lookups import Lookups
from webhooks.review import AdmissionRequest


def errors(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    """P1–P3 on ``obj`` (``old`` on UPDATE)."""
    found: list[FieldError] = []
    spec = as_dict(obj.get("spec"))
    backends = spec.get("backends")
    if (
        not isinstance(backends, list)
        or len(backends) != 1
        or not isinstance(backends[0], str)
        or not backends[0]
    ):
        found.append(
            invalid(
                "spec.backends",
                backends,
                "name exactly one KVCacheBackend: one master's quota ledger cannot account for another store's "
                "capacity; create one pool per backend",
            )
        )
    if old is not None and dig(old, "spec", "backends") != backends:
        found.append(
            forbidden(
                "spec.backends",
                "is immutable: the tenants' quotas live on that backend's ledger; create another KVCachePool to "
                "draw from another backend",
            )
        )
    total = dig(spec, "quota", "total")
    if not positive_quantity(total):
        found.append(invalid("spec.quota.total", total, "must be a positive quantity, e.g. 900Gi"))
    return found


def single_tenant_warning(pool_name: str, backend: dict[str, Any] | None) -> str | None:
    """P4: a pool over a managed backend declaring ``multiTenancy: false``."""
    managed = dig(backend, "spec", "connection", "managed")
    if not isinstance(managed, dict) or as_dict(managed.get("leader")).get("multiTenancy") is not False:
        return None
    name = dig(backend, "metadata", "name")
    return (
        f"KVCachePool {pool_name}: backend {name} declares multiTenancy: false, so its master keeps no per-tenant "
        "ledger and no Binding's quota ceiling is enforced; the pool serves one reuse domain"
    )


async def validate(request: AdmissionRequest, lookups: Lookups) -> Decision:
    obj = request.object or {}
    old = request.old_object if request.operation == "UPDATE" else None
    found = errors(obj, old)
    if found:
        return reject(kv.KIND_POOL, request.display_name, found)
    backends = as_list(dig(obj, "spec", "backends"))
    backend = await lookups.get(kv.KIND_BACKEND, backends[0]) if backends else None
    warning = single_tenant_warning(request.display_name, backend)
    return allow(warnings=[warning] if warning else None)
