"""The ``KVCachePool`` reconciler (kv-cache spec §5.2): claims its backend, publishes the client
endpoint, renders the quota policy seed whole from every Binding on the backend, converges each
held domain's ceiling through the master's admin API, and writes the Bindings' figures and its own
status from what the master answered (one writer per master pass).

Each pool claims its backend under its own field manager, so its entry in the backend's
``status.usedBy`` is its own to add and to drop.
"""

from __future__ import annotations

from collections.abc import Hashable

from api import constants
from api import kvcache as kv
from api import kvcache_offer as offer
from api.objects import Obj
from controllers.conditions import FALSE, TRUE, Verdict, find, now, render
from controllers.kvcache import admin, backend_render, pool_status, quota, writes
from kube import changes
from kube.manager import Controller, Manager, Watch

POLL_S = 15.0
RELEASE_RETRY_S = 30.0
BINDING_FIGURES = ("requestedQuota", "effectiveQuota", "usage", "overQuota")


def claim_manager(pool: str) -> str:
    return f"{kv.FIELD_MANAGER_POOL}/{pool}"


def _pool_of(binding: Obj) -> list[str]:
    name = offer.pool_name(binding)
    return [name] if name else []


def _backend_of(pool: Obj) -> list[str]:
    name = offer.backend_name(pool)
    return [name] if name else []


class KVCachePoolReconciler(Controller):
    name = "kv-cache-pools"

    def __init__(self, manager: Manager) -> None:
        super().__init__(manager)
        self.pools = manager.informer(kv.KIND_POOL, indexes={"backend": _backend_of})
        self.backends = self.informer(kv.KIND_BACKEND)
        self.bindings = manager.informer(kv.KIND_BINDING, indexes={"pool": _pool_of})

    def watches(self) -> list[Watch]:
        def pool(event: str, obj: Obj, old: Obj | None) -> list[str]:
            return [changes.name_of(obj)]

        def siblings(event: str, obj: Obj, old: Obj | None) -> list[str]:
            """A Binding moves every pool on the same backend (the seed and DomainExclusive)."""
            names = set(_pool_of(obj)) | set(_pool_of(old or {}))
            backends = {b for n in names for b in _backend_of(self.pools.get(n) or {})}
            return sorted(
                names | {changes.name_of(p) for b in backends for p in self.pools.by_index("backend", b)}
            )

        def backend(event: str, obj: Obj, old: Obj | None) -> list[str]:
            if not changes.moved(
                event, obj, old, ("status", "endpoints"), ("status", "conditions"), ("spec",)
            ):
                return []
            return [changes.name_of(p) for p in self.pools.by_index("backend", changes.name_of(obj))]

        return [Watch(kv.KIND_POOL, pool), Watch(kv.KIND_BINDING, siblings), Watch(kv.KIND_BACKEND, backend)]

    # -- helpers ----------------------------------------------------------------------------------
    def _on_backend(self, backend_name: str) -> list[Obj]:
        return [
            b
            for p in self.pools.by_index("backend", backend_name)
            for b in self.bindings.by_index("pool", changes.name_of(p))
        ]

    def _claim(self, pool_name: str, backend: Obj, claimed: bool) -> None:
        ref = {"kind": kv.KIND_POOL, "namespace": "", "name": pool_name}
        present = ref in ((backend.get("status") or {}).get("usedBy") or [])
        if present == claimed:
            return
        body = {
            "apiVersion": writes.API_VERSION,
            "kind": kv.KIND_BACKEND,
            "metadata": {"name": changes.name_of(backend)},
            "status": {"usedBy": [ref] if claimed else []},
        }
        self.client.apply(body, field_manager=claim_manager(pool_name), subresource="status")

    @staticmethod
    def _client(backend: Obj | None) -> admin.AdminClient | None:
        address = quota.admin_address(backend) if backend else ""
        return admin.AdminClient(address) if address else None

    # -- the pass ---------------------------------------------------------------------------------
    def reconcile(self, key: Hashable) -> float | None:
        pool = self.pools.get(str(key))
        if pool is None:
            return None
        backend = self.backends.get(offer.backend_name(pool)) if offer.backend_name(pool) else None
        bindings = self.bindings.by_index("pool", str(key))
        deleting = bool((pool.get("metadata") or {}).get("deletionTimestamp"))
        if deleting and (
            not bindings or kv.FINALIZER_POOL not in (pool.get("metadata") or {}).get("finalizers", [])
        ):
            return self._delete(pool, backend)
        if not deleting:
            writes.add_finalizer(self.client, kv.KIND_POOL, pool, kv.FINALIZER_POOL)
        endpoint, ledger = "", None
        if backend is not None:
            self._claim(str(key), backend, True)
            endpoint = next(
                (
                    e.get("address", "")
                    for e in (backend.get("status") or {}).get("endpoints") or []
                    if e.get("name") == "Client"
                ),
                "",
            )
            ledger = self._ledger(pool, backend)
        stamp = now()
        held = quota.holders(self._on_backend(offer.backend_name(pool)))
        for binding in bindings:
            if (binding.get("metadata") or {}).get("deletionTimestamp") or ledger is None:
                continue
            domain = offer.domain(binding)["name"]
            status = quota.binding_status(binding, held.get(domain), ledger, offer.backend_name(pool), stamp)
            writes.apply_status(
                self.client, kv.KIND_BINDING, binding, status, kv.FIELD_MANAGER_POOL, BINDING_FIGURES
            )
        held_by: list[Verdict] = []
        if deleting:  # held while Bindings reference it; they are still served meanwhile
            holders = ", ".join(f"{ns}/{n}" for ns, n in sorted(quota.key_of(b) for b in bindings))
            message = f"KVCachePoolBindings still reference this pool: {holders}"
            held_by.append(Verdict(kv.COND_RELEASABLE, FALSE, "HeldByBindings", message))
        derived = pool_status.derive(pool, backend, endpoint, bindings, ledger, stamp, held_by)
        writes.apply_status(
            self.client, kv.KIND_POOL, pool, derived, kv.FIELD_MANAGER_POOL, ("usage", "clientEndpoint")
        )
        return POLL_S

    def _ledger(self, pool: Obj, backend: Obj) -> quota.Ledger:
        """Seed the policy (managed), read the ledger, and converge this pool's held domains."""
        backend_name = changes.name_of(backend)
        live = [
            b
            for b in self._on_backend(backend_name)
            if not (b.get("metadata") or {}).get("deletionTimestamp")
        ]
        if backend_render.managed(backend) is not None:
            document = quota.policy_document(live)
            if document is not None:
                self.client.apply(
                    quota.seed_configmap(backend_name, constants.SYSTEM_NAMESPACE, document),
                    field_manager=kv.FIELD_MANAGER_POOL,
                )
        client = self._client(backend)
        ledger = quota.read_ledger(client, backend)
        held = quota.holders(live)
        wanted = {}
        for binding in live:
            domain = offer.domain(binding)["name"]
            ceiling = quota.ceiling_bytes(binding)
            if (
                offer.pool_name(binding) == changes.name_of(pool)
                and held.get(domain) == quota.key_of(binding)
                and ceiling
            ):
                wanted[domain] = ceiling
        if client is not None:
            quota.converge(client, ledger, wanted)
        return ledger

    # -- deletion ---------------------------------------------------------------------------------
    def _delete(self, pool: Obj, backend: Obj | None) -> float | None:
        name = changes.name_of(pool)
        if kv.FINALIZER_POOL not in ((pool.get("metadata") or {}).get("finalizers") or []):
            return None
        stamp = now()
        status = pool.get("status") or {}
        live = {
            offer.domain(b)["name"]
            for b in self._on_backend(offer.backend_name(pool))
            if offer.pool_name(b) != name
        }
        leader = find((backend or {}).get("status", {}).get("conditions"), kv.COND_LEADER_AVAILABLE)
        started = backend is not None and (
            not backend_render.managed(backend) or (leader is not None and leader.get("status") == TRUE)
        )
        client = self._client(backend)
        failures = []
        for entry in status.get("domains") or []:
            domain = entry.get("name")
            if not domain or domain in live:
                continue  # another pool's Binding holds that tenant: never release it
            result = quota.release(client, backend, domain, leader_started=started)
            if not result.done:
                failures.append(result.message)
        if failures:
            verdict = Verdict(kv.COND_RELEASABLE, FALSE, kv.REASON_LEDGER_NOT_RELEASED, "; ".join(failures))
            self._releasable(pool, verdict, stamp)
            return RELEASE_RETRY_S
        if backend is not None:
            self._claim(name, backend, False)
        writes.remove_finalizer(self.client, kv.KIND_POOL, pool, kv.FINALIZER_POOL)
        return None

    def _releasable(self, pool: Obj, verdict: Verdict, stamp: str) -> None:
        """The pool with no Binding left, whose release the master refused: ``domains`` stays the
        record of what to release; the figures of a pool being deleted go."""
        old = pool.get("status") or {}
        status = {
            "phase": kv.PHASE_DELETING,
            "phaseMessage": verdict.message,
            "conditions": render(
                [verdict], old.get("conditions"), (pool.get("metadata") or {}).get("generation"), stamp
            ),
            "domains": old.get("domains") or [],
            "usedBy": [],
        }
        writes.apply_status(
            self.client, kv.KIND_POOL, pool, status, kv.FIELD_MANAGER_POOL, ("usage", "clientEndpoint")
        )
