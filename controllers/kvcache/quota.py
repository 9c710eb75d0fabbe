"""The tenant ledger as the pool pass sees it (kv-cache spec §5.2, §5.3, §6.2, §6.3): which Binding
holds each domain on a master, the quota policy seed rendered whole, and the pure derivations of
the Binding's and the pool's status from what the master answered.

The operator writes ceilings; the store computes grants.  Every observed figure is written only
when observed (absent, never zero, for unknown); a zero grant is an observation and still yields
``QuotaGranted=False``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from api import kvcache as kv
from api import kvcache_offer as offer
from api.objects import Obj
from controllers.conditions import FALSE, TRUE, Verdict, render
from controllers.kvcache import admin
from controllers.kvcache.figures import to_bytes, to_quantity

AVAILABLE, DISABLED, UNREACHABLE = "Available", kv.REASON_MULTI_TENANCY_DISABLED, kv.REASON_LEDGER_UNREACHABLE
USAGE_FIGURE = "usage is the master's charged_bytes: completed memory replicas plus in-flight allocations"


def _dict(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def key_of(obj: Obj) -> tuple[str, str]:
    meta = _dict(obj.get("metadata"))
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def ceiling_bytes(binding: Obj) -> int | None:
    value = to_bytes(_dict(_dict(binding.get("spec")).get("quota")).get("ceiling"))
    return value if value is not None and value > 0 else None


def holders(bindings_on_backend: list[Obj]) -> dict[str, tuple[str, str]]:
    """Domain name → the Binding holding it on this master: the oldest, then by namespace/name."""
    ordered = sorted(
        bindings_on_backend,
        key=lambda b: (str(_dict(b.get("metadata")).get("creationTimestamp") or ""), key_of(b)),
    )
    out: dict[str, tuple[str, str]] = {}
    for binding in ordered:
        out.setdefault(offer.domain(binding)["name"], key_of(binding))
    return out


def policy_document(bindings_on_backend: list[Obj]) -> str | None:
    """The seed of the master's policy file, whole: every held domain with its ceiling in bytes.
    ``None`` when a holder's ceiling cannot be rendered (keep the previous seed)."""
    held = holders(bindings_on_backend)
    by_key = {key_of(b): b for b in bindings_on_backend}
    lines = ["version: 1", "tenants:" if held else "tenants: []"]
    for domain in sorted(held):
        ceiling = ceiling_bytes(by_key[held[domain]])
        if ceiling is None:
            return None
        lines += [f'  - name: "{domain}"', f"    quota: {ceiling}"]
    return "\n".join(lines) + "\n"


def seed_configmap(backend_name: str, namespace: str, document: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": kv.policy_seed_name(backend_name),
            "namespace": namespace,
            "labels": {kv.LABEL_BACKEND: backend_name, "app.kubernetes.io/part-of": "gpustack-operator"},
            "annotations": {kv.ANNOTATION_OWNED_BY_BACKEND: backend_name},
        },
        "data": {kv.POLICY_SEED_KEY: document},
    }


@dataclass
class Ledger:
    """What the master's ledger said this pass."""

    state: str  # AVAILABLE | DISABLED | UNREACHABLE
    message: str = ""
    snapshots: dict[str, admin.TenantQuota] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # domain → why its ceiling did not converge
    writable: bool = True
    write_error: str = ""
    allocatable: int | None = None


def binding_status(
    binding: Obj, holder: tuple[str, str] | None, ledger: Ledger, backend_name: str, stamp: str
) -> Obj:
    """The Binding's figures, conditions and phase (everything but ``usedBy`` and ``Releasable``)."""
    domain = offer.domain(binding)["name"]
    mine = holder == key_of(binding)
    verdicts = [
        Verdict(
            kv.COND_DOMAIN_EXCLUSIVE,
            TRUE,
            "Held",
            f"domain {domain} is this Binding's on backend {backend_name}",
        )
        if mine
        else Verdict(
            kv.COND_DOMAIN_EXCLUSIVE,
            FALSE,
            "HeldElsewhere",
            f"domain {domain} is held on backend {backend_name} by KVCachePoolBinding {'/'.join(holder or ('?', '?'))}",
        )
    ]
    status: Obj = {}
    snapshot = ledger.snapshots.get(domain) if mine else None
    if ledger.state == DISABLED:
        verdicts += [
            Verdict(
                kv.COND_QUOTA_OBSERVED, TRUE, kv.REASON_UNENFORCED, "the master keeps no per-tenant ledger"
            ),
            Verdict(
                kv.COND_QUOTA_GRANTED,
                TRUE,
                kv.REASON_UNENFORCED,
                "no quota is enforced: the store serves one reuse domain",
            ),
        ]
        phase, message = (kv.PHASE_READY, "") if mine else (kv.PHASE_ERROR, verdicts[0].message)
    elif snapshot is not None:
        status.update(
            requestedQuota=to_quantity(snapshot.requested_bytes),
            effectiveQuota=to_quantity(snapshot.effective_bytes),
            usage=to_quantity(snapshot.charged_bytes),
            overQuota=snapshot.over_quota,
        )
        verdicts.append(Verdict(kv.COND_QUOTA_OBSERVED, TRUE, "Observed", USAGE_FIGURE))
        if snapshot.effective_bytes > 0 and not snapshot.admission_closed:
            verdicts.append(
                Verdict(kv.COND_QUOTA_GRANTED, TRUE, "Granted", f"granted {status['effectiveQuota']}")
            )
            phase, message = kv.PHASE_READY, ""
        else:
            why = (
                "admission is closed"
                if snapshot.admission_closed
                else "the master grants nothing (no capacity mounted)"
            )
            verdicts.append(Verdict(kv.COND_QUOTA_GRANTED, FALSE, "NoGrant", why))
            phase, message = kv.PHASE_ERROR, why
    else:
        why = ledger.errors.get(domain) or ledger.message or "the ledger has not been read"
        if not mine:
            why = verdicts[0].message
        verdicts.append(
            Verdict(
                kv.COND_QUOTA_OBSERVED,
                FALSE,
                ledger.state if ledger.state != AVAILABLE else "NotObserved",
                why,
            )
        )
        phase, message = kv.PHASE_ERROR, why
    status.update(phase=phase, phaseMessage=message)
    status["conditions"] = render(
        verdicts,
        _dict(binding.get("status")).get("conditions"),
        _dict(binding.get("metadata")).get("generation"),
        stamp,
    )
    return status


# --- the pass's reads and writes against the master ---------------------------------------------------
def admin_address(backend: Obj) -> str:
    """Where the operator reads: the external ``Admin`` endpoint, or the managed leader's published one."""
    spec = _dict(backend.get("spec"))
    external = _dict(_dict(spec.get("connection")).get("external"))
    source = external.get("endpoints") if external else _dict(backend.get("status")).get("endpoints")
    for endpoint in _list(source):
        if _dict(endpoint).get("name") == "Admin":
            return str(_dict(endpoint).get("address") or "")
    return ""


def declared_single_tenant(backend: Obj) -> bool:
    leader = _dict(_dict(_dict(_dict(backend.get("spec")).get("connection")).get("managed")).get("leader"))
    return leader.get("multiTenancy") is False


def read_ledger(client: admin.AdminClient | None, backend: Obj) -> Ledger:
    """The master's ledger and allocatable capacity; no request at all to a declared single-tenant store."""
    if declared_single_tenant(backend):
        return Ledger(DISABLED)
    if client is None:
        return Ledger(UNREACHABLE, "the backend has published no Admin address yet")
    try:
        ledger = Ledger(AVAILABLE, snapshots=client.tenant_quotas())
    except admin.AdminError as error:
        if error.store_error == admin.UNAVAILABLE_IN_CURRENT_MODE:
            return Ledger(DISABLED)
        return Ledger(UNREACHABLE, str(error))
    try:
        allocatable = client.metrics().get("mooncake_tenant_quota_allocatable_capacity_bytes")
        ledger.allocatable = int(allocatable) if allocatable is not None else None
    except admin.AdminError as error:
        ledger.message = f"no capacity reading: {error}"
    return ledger


def converge(client: admin.AdminClient, ledger: Ledger, wanted: dict[str, int]) -> None:
    """Write each held domain's ceiling where the master's differs; keep what it answers."""
    if ledger.state != AVAILABLE:
        return
    for domain, ceiling in sorted(wanted.items()):
        current = ledger.snapshots.get(domain)
        if current is not None and current.explicit and current.requested_bytes == ceiling:
            continue
        try:
            ledger.snapshots[domain] = client.put_quota(domain, ceiling)
        except admin.AdminError as error:
            if error.store_error == admin.PERSISTENT_FAIL:
                ledger.writable, ledger.write_error = False, str(error)
            ledger.errors[domain] = f"writing the ceiling failed: {error}"


@dataclass(frozen=True, slots=True)
class Release:
    """The outcome of releasing one domain's ledger entry."""

    done: bool
    reason: str = ""
    message: str = ""


def release(
    client: admin.AdminClient | None, backend: Obj | None, domain: str, *, leader_started: bool
) -> Release:
    """Delete ``domain``'s entry; a store without a ledger (declared single-tenant, or a leader that
    never started) releases without asking.  The store refuses while the domain holds data."""
    if backend is None or declared_single_tenant(backend) or not leader_started:
        return Release(True)
    if client is None:
        return Release(False, kv.REASON_LEDGER_REQUEST_FAILED, "the backend publishes no Admin address")
    try:
        client.delete_quota(domain)
    except admin.AdminError as error:
        if error.store_error == admin.UNAVAILABLE_IN_CURRENT_MODE:
            return Release(True)
        if error.store_error == admin.TENANT_NOT_EMPTY:
            return Release(
                False,
                kv.REASON_LEDGER_NOT_RELEASED,
                f"the store still holds data in domain {domain}; it is released once the domain's objects are evicted or removed",
            )
        return Release(False, kv.REASON_LEDGER_REQUEST_FAILED, f"releasing domain {domain} failed: {error}")
    return Release(True)
