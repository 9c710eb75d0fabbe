"""What a pool offers an engine, read from the Binding, the pool and the backend as stored: the
client endpoint, the transports its member groups speak, and whether its master keeps a tenant
ledger.  Pure; shared by the Pod injection webhook and the ModelDeployment's cache wiring.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from api import kvcache as kv
from api.objects import Obj

DEFAULT_DOMAIN = "default"


def _dict(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def condition(obj: Obj | None, kind: str) -> Obj | None:
    for entry in _dict(_dict(obj).get("status")).get("conditions") or []:
        if isinstance(entry, dict) and entry.get("type") == kind:
            return entry
    return None


def offered_protocols(backend: Obj) -> list[str]:
    """The distinct effective transports of a backend's member groups, in store spelling, sorted.
    An external backend offers its declared ``spec.transport.protocol``."""
    spec = _dict(backend.get("spec"))
    default = _str(_dict(spec.get("transport")).get("protocol")) or "Auto"
    groups = _dict(_dict(spec.get("connection")).get("managed")).get("members")
    if not isinstance(groups, list) or not groups:
        return [kv.store_protocol(default)]
    found = {
        kv.store_protocol(_str(_dict(_dict(g).get("transport")).get("protocol")) or default) for g in groups
    }
    return sorted(found)


@dataclass(frozen=True, slots=True)
class Ledger:
    """The pool's ``QuotaLedgerAvailable`` read as a verdict: ``usable`` (inject at all), ``tenant``
    (write a tenant id), and the pool's own reason and message when not usable."""

    usable: bool
    tenant: bool
    reason: str = ""
    message: str = ""


def ledger(pool: Obj) -> Ledger:
    found = condition(pool, kv.COND_QUOTA_LEDGER_AVAILABLE)
    if found is None:
        return Ledger(False, False, "", "the pool has not reported QuotaLedgerAvailable yet")
    status, reason = found.get("status"), _str(found.get("reason"))
    if status == "True":
        return Ledger(True, True)
    if status == "False" and reason == kv.REASON_MULTI_TENANCY_DISABLED:
        return Ledger(True, False, reason)
    return Ledger(False, False, reason, _str(found.get("message")))


def domain(binding: Obj) -> Obj:
    """The Binding's declared domain, with the schema's default name filled."""
    declared = _dict(_dict(binding.get("spec")).get("domain"))
    return {
        "name": _str(declared.get("name")) or DEFAULT_DOMAIN,
        "blockSize": declared.get("blockSize"),
        "dtype": _str(declared.get("dtype")),
    }


def pool_name(binding: Obj) -> str:
    return _str(_dict(_dict(binding.get("spec")).get("poolRef")).get("name"))


def backend_name(pool: Obj) -> str:
    backends = _dict(pool.get("spec")).get("backends")
    return backends[0] if isinstance(backends, list) and backends and isinstance(backends[0], str) else ""


def client_endpoint(pool: Obj) -> str:
    return _str(_dict(pool.get("status")).get("clientEndpoint"))


def terminating(obj: Obj) -> bool:
    return bool(_dict(obj.get("metadata")).get("deletionTimestamp"))
