"""The ``KVCachePoolBinding`` reconciler (kv-cache spec §5.3): its finalizer and its deletion.

Quota figures are the pool pass's to write (one writer per master pass).  This reconciler reports a
Binding whose pool does not exist, and on deletion holds while ``status.usedBy`` names workloads
(``HeldByWorkloads``), then releases the domain's ledger entry — only when this Binding holds the
domain, so no other Binding's tenant is ever released — before removing its finalizer.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import cast

from api import kvcache as kv
from api import kvcache_offer as offer
from api.objects import Obj
from controllers.conditions import FALSE, TRUE, Verdict, find, now, render
from controllers.kvcache import admin, backend_render, quota, writes
from kube import changes
from kube.manager import Controller, Manager, Watch

HOLD_S = 15.0
RELEASE_RETRY_S = 30.0
MISSING_POOL_S = 30.0


def _pool_of(binding: Obj) -> list[str]:
    name = offer.pool_name(binding)
    return [name] if name else []


def _backend_of(pool: Obj) -> list[str]:
    name = offer.backend_name(pool)
    return [name] if name else []


def workloads(binding: Obj) -> list[str]:
    out = []
    for ref in (binding.get("status") or {}).get("usedBy") or []:
        if isinstance(ref, dict):
            where = f"{ref.get('namespace')}/" if ref.get("namespace") else ""
            out.append(f"{ref.get('kind')} {where}{ref.get('name')}")
    return out


class KVCachePoolBindingReconciler(Controller):
    name = "kv-cache-pool-bindings"

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager)
        self.bindings = manager.informer(kv.KIND_BINDING, indexes={"pool": _pool_of})
        self.pools = manager.informer(kv.KIND_POOL, indexes={"backend": _backend_of})
        self.backends = self.informer(kv.KIND_BACKEND)

    def watches(self) -> list[Watch]:
        def binding(event: str, obj: Obj, old: Obj | None) -> list[tuple[str, str]]:
            return [quota.key_of(obj)]

        def pool(event: str, obj: Obj, old: Obj | None) -> list[tuple[str, str]]:
            if event not in ("ADDED", "DELETED") and not changes.resync(obj, old):
                return []
            return [quota.key_of(b) for b in self.bindings.by_index("pool", changes.name_of(obj))]

        return [Watch(kv.KIND_BINDING, binding), Watch(kv.KIND_POOL, pool)]

    def _status(self, binding: Obj, phase: str, message: str, verdicts: list[Verdict]) -> None:
        old = (binding.get("status") or {}).get("conditions")
        status = {
            "phase": phase,
            "phaseMessage": message,
            "conditions": render(verdicts, old, (binding.get("metadata") or {}).get("generation"), now()),
        }
        writes.apply_status(self.client, kv.KIND_BINDING, binding, status, kv.FIELD_MANAGER_BINDING)

    def reconcile(self, key: Hashable) -> float | None:
        namespace, name = cast(tuple[str, str], key)
        binding = self.bindings.get(name, namespace)
        if binding is None:
            return None
        pool = self.pools.get(offer.pool_name(binding)) if offer.pool_name(binding) else None
        if (binding.get("metadata") or {}).get("deletionTimestamp"):
            return self._delete(binding, pool)
        writes.add_finalizer(self.client, kv.KIND_BINDING, binding, kv.FINALIZER_BINDING)
        if pool is None:
            message = (
                f"KVCachePool {offer.pool_name(binding)!r} does not exist; create it or fix spec.poolRef"
            )
            self._status(
                binding,
                kv.PHASE_ERROR,
                message,
                [Verdict(kv.COND_QUOTA_OBSERVED, FALSE, "PoolNotFound", message)],
            )
            return MISSING_POOL_S
        return None

    def _delete(self, binding: Obj, pool: Obj | None) -> float | None:
        if kv.FINALIZER_BINDING not in ((binding.get("metadata") or {}).get("finalizers") or []):
            return None
        held = workloads(binding)
        if held:
            message = f"in use by {', '.join(held)}; delete or detach them first"
            self._status(
                binding,
                kv.PHASE_DELETING,
                message,
                [Verdict(kv.COND_RELEASABLE, FALSE, kv.REASON_HELD_BY_WORKLOADS, message)],
            )
            return HOLD_S
        result = self._release(binding, pool)
        if not result.done:
            self._status(
                binding,
                kv.PHASE_DELETING,
                result.message,
                [Verdict(kv.COND_RELEASABLE, FALSE, result.reason, result.message)],
            )
            return RELEASE_RETRY_S
        writes.remove_finalizer(self.client, kv.KIND_BINDING, binding, kv.FINALIZER_BINDING)
        return None

    def _release(self, binding: Obj, pool: Obj | None) -> quota.Release:
        if pool is None:
            return quota.Release(True)  # never registered anywhere
        backend_name = offer.backend_name(pool)
        backend = self.backends.get(backend_name) if backend_name else None
        if backend is None:
            return quota.Release(True)
        on_backend = [
            b
            for p in self.pools.by_index("backend", backend_name)
            for b in self.bindings.by_index("pool", changes.name_of(p))
        ]
        domain = offer.domain(binding)["name"]
        if quota.holders(on_backend).get(domain) != quota.key_of(binding):
            return quota.Release(True)  # another Binding holds this tenant: its entry is not ours to release
        address = quota.admin_address(backend)
        leader = find((backend.get("status") or {}).get("conditions"), kv.COND_LEADER_AVAILABLE)
        started = not backend_render.managed(backend) or (leader is not None and leader.get("status") == TRUE)
        client = admin.AdminClient(address) if address else None
        return quota.release(client, backend, domain, leader_started=started)
