"""A pool's status (kv-cache spec §5.2 steps 2, 5, 6 and §6.2), pure."""

from __future__ import annotations

from typing import Any

from api import kvcache as kv
from api import kvcache_offer as offer
from api.objects import Obj
from controllers.conditions import FALSE, TRUE, UNKNOWN, Verdict, render
from controllers.kvcache.figures import to_bytes, to_quantity
from controllers.kvcache.quota import AVAILABLE, DISABLED, Ledger, ceiling_bytes, key_of


def _dict(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def domains(bindings: list[Obj]) -> list[Obj]:
    """One entry per Binding of this pool (first holder per name; the list is keyed by name)."""
    out: dict[str, Obj] = {}
    for binding in sorted(
        bindings, key=lambda b: (str(_dict(b.get("metadata")).get("creationTimestamp") or ""), key_of(b))
    ):
        declared = offer.domain(binding)
        namespace, name = key_of(binding)
        entry: Obj = {
            "name": declared["name"],
            "binding": {"namespace": namespace, "name": name},
            "dtype": declared["dtype"],
        }
        if isinstance(declared["blockSize"], int):
            entry["blockSize"] = declared["blockSize"]
        out.setdefault(declared["name"], entry)
    return [out[name] for name in sorted(out)]


def used_by(bindings: list[Obj]) -> list[Obj]:
    return [
        {"kind": kv.KIND_BINDING, "namespace": ns, "name": name}
        for ns, name in sorted(key_of(b) for b in bindings)
    ]


def within_total(pool: Obj, bindings: list[Obj]) -> Verdict:
    total = to_bytes(_dict(_dict(_dict(pool.get("spec")).get("quota"))).get("total"))
    ceilings = [ceiling_bytes(b) or 0 for b in bindings]
    asked = sum(ceilings)
    shown = f"ceilings sum to {to_quantity(asked)} against quota.total {_dict(_dict(pool.get('spec')).get('quota')).get('total')}"
    if total is not None and asked > total:
        return Verdict(kv.COND_QUOTA_WITHIN_TOTAL, FALSE, kv.REASON_OVERSUBSCRIBED, shown)
    return Verdict(kv.COND_QUOTA_WITHIN_TOTAL, TRUE, "WithinTotal", shown)


def ledger_verdicts(ledger: Ledger | None) -> list[Verdict]:
    if ledger is None:
        return [
            Verdict(kv.COND_QUOTA_LEDGER_AVAILABLE, UNKNOWN, "NotRead", "the backend is not resolved"),
            Verdict(kv.COND_QUOTA_POLICY_WRITABLE, UNKNOWN, "NotRead", "the backend is not resolved"),
            Verdict(kv.COND_CAPACITY_ALLOCATABLE, UNKNOWN, "NotRead", "the backend is not resolved"),
        ]
    if ledger.state == AVAILABLE:
        available = Verdict(
            kv.COND_QUOTA_LEDGER_AVAILABLE, TRUE, AVAILABLE, "the master keeps a per-tenant ledger"
        )
    elif ledger.state == DISABLED:
        available = Verdict(
            kv.COND_QUOTA_LEDGER_AVAILABLE,
            FALSE,
            DISABLED,
            "the master serves one reuse domain (multi-tenancy off)",
        )
    else:
        available = Verdict(kv.COND_QUOTA_LEDGER_AVAILABLE, FALSE, ledger.state, ledger.message)
    writable = (
        Verdict(kv.COND_QUOTA_POLICY_WRITABLE, TRUE, "Writable", "ceilings reach the master's policy")
        if ledger.writable
        else Verdict(
            kv.COND_QUOTA_POLICY_WRITABLE,
            FALSE,
            "PersistFailed",
            f"ceilings no longer propagate: {ledger.write_error}",
        )
    )
    if ledger.allocatable is None:
        allocatable = Verdict(
            kv.COND_CAPACITY_ALLOCATABLE, UNKNOWN, "NotObserved", ledger.message or "no capacity reading"
        )
    elif ledger.allocatable > 0:
        allocatable = Verdict(
            kv.COND_CAPACITY_ALLOCATABLE,
            TRUE,
            "Allocatable",
            f"{to_quantity(ledger.allocatable)} allocatable",
        )
    else:
        allocatable = Verdict(
            kv.COND_CAPACITY_ALLOCATABLE,
            FALSE,
            kv.REASON_NOTHING_TO_ALLOCATE,
            "the master reports nothing allocatable (no segment mounted)",
        )
    return [available, writable, allocatable]


def _phase(pool: Obj, backend: Obj | None, endpoint: str, verdicts: list[Verdict]) -> tuple[str, str]:
    if _dict(pool.get("metadata")).get("deletionTimestamp"):
        return kv.PHASE_DELETING, "releasing the pool"
    if backend is None:
        return kv.PHASE_ERROR, f"KVCacheBackend {offer.backend_name(pool)!r} does not exist"
    by_type = {v.type: v for v in verdicts}
    ledger = by_type[kv.COND_QUOTA_LEDGER_AVAILABLE]
    if not endpoint:
        return kv.PHASE_PROVISIONING, "the backend has not published a Client endpoint yet"
    if ledger.status == FALSE and ledger.reason != DISABLED:
        return kv.PHASE_ERROR, f"{ledger.reason}: {ledger.message}"
    if ledger.status == UNKNOWN:
        return kv.PHASE_PROVISIONING, ledger.message
    allocatable = by_type[kv.COND_CAPACITY_ALLOCATABLE]
    if allocatable.status == FALSE:
        return kv.PHASE_ERROR, f"{allocatable.reason}: {allocatable.message}"
    writable = by_type[kv.COND_QUOTA_POLICY_WRITABLE]
    if writable.status == FALSE:
        return kv.PHASE_DEGRADED, writable.message
    return kv.PHASE_READY, ""


def derive(
    pool: Obj,
    backend: Obj | None,
    endpoint: str,
    bindings: list[Obj],
    ledger: Ledger | None,
    stamp: str,
    releasable: list[Verdict] | None = None,
) -> Obj:
    """Everything the pool pass writes on its status; ``releasable`` is the ``Releasable`` verdict
    of a pool held in deletion (its message becomes the phase message)."""
    verdicts = [within_total(pool, bindings), *ledger_verdicts(ledger), *(releasable or [])]
    phase, message = _phase(pool, backend, endpoint, verdicts)
    if phase == kv.PHASE_DELETING and releasable:
        message = releasable[0].message
    status: Obj = {
        "phase": phase,
        "phaseMessage": message,
        "conditions": render(
            verdicts,
            _dict(pool.get("status")).get("conditions"),
            _dict(pool.get("metadata")).get("generation"),
            stamp,
        ),
        "domains": domains(bindings),
        "usedBy": used_by(bindings),
    }
    if endpoint:
        status["clientEndpoint"] = endpoint
    if ledger is not None and ledger.state == AVAILABLE:
        charged = [
            ledger.snapshots[d["name"]].charged_bytes
            for d in status["domains"]
            if d["name"] in ledger.snapshots
        ]
        if charged or not status["domains"]:
            status["usage"] = {"total": to_quantity(sum(charged))}
    return status
