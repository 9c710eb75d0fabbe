"""The ModelDeployment's side of the KV cache (model-deployment spec §7.3–§7.4, §10, §11.1), as
pure functions its controller calls.

``spec.kvCache.poolRef`` names a Binding in the deployment's namespace; :func:`resolve` reads
Binding → pool → backend into an :class:`Attachment` (or the ``DomainRegistered`` refusal),
:func:`role_connector` renders what one role's Pods carry (vLLM: the ``client-config`` annotation
projected as a file, no ConfigMap, so an endpoint change moves the Pod hash and rolls; SGLang:
environment), :func:`used_by_apply` is the server-side apply registering the deployment in the
Binding's ``status.usedBy`` (one field manager per deployment, so each adds and drops its own
entry), and :func:`kv_cache_status` / :func:`domain_registered` / :func:`cache_attached` are
``status.kvCache`` and the two conditions.  ``CacheAttached`` is derived from observed operations
only (the store's charge for the domain), never from flags.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from api import constants
from api import kvcache as kv
from api import kvcache_client as client
from api import kvcache_offer as offer
from api.objects import Obj
from controllers.conditions import FALSE, TRUE, UNKNOWN, Verdict
from controllers.kvcache.figures import to_bytes

MD_FIELD_MANAGER_PREFIX = "worker.gpustack.ai/model-deployment-kv-cache"


def _dict(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def binding_name(md: Obj) -> str:
    """``spec.kvCache.poolRef.name`` ("" when the deployment attaches no cache)."""
    ref = _dict(_dict(_dict(md.get("spec")).get("kvCache")).get("poolRef")).get("name")
    return ref if isinstance(ref, str) else ""


def has_cache(md: Obj) -> bool:
    return isinstance(_dict(md.get("spec")).get("kvCache"), dict)


@dataclass(frozen=True, slots=True)
class Attachment:
    """A resolved cache: which Binding, pool and domain, and where engines point."""

    binding: str
    pool: str
    domain: Obj  # {name, blockSize, dtype}
    target: client.ClientTarget
    offered: tuple[str, ...]  # store transports of the pool's member groups


@dataclass(frozen=True, slots=True)
class Resolution:
    attachment: Attachment | None
    registered: Verdict  # DomainRegistered
    register: bool = False  # the deployment belongs in the Binding's usedBy


def resolve(md: Obj, binding: Obj | None, pool: Obj | None, backend: Obj | None) -> Resolution:
    """Binding → pool → backend as stored (the caller reads them; ``None`` for missing)."""
    name = binding_name(md)
    t = kv.COND_DOMAIN_REGISTERED
    if not has_cache(md):
        return Resolution(None, Verdict(t, TRUE, kv.REASON_NOT_APPLICABLE, "no spec.kvCache"))
    if binding is None:
        return Resolution(
            None,
            Verdict(
                t, FALSE, kv.REASON_BINDING_NOT_FOUND, f"no KVCachePoolBinding {name!r} in this namespace"
            ),
        )
    if offer.terminating(binding):
        return Resolution(
            None,
            Verdict(t, FALSE, kv.REASON_BINDING_DELETING, f"KVCachePoolBinding {name!r} is being deleted"),
        )
    problem = _not_ready(binding, pool, backend)
    if problem:
        return Resolution(None, Verdict(t, FALSE, kv.REASON_BINDING_NOT_READY, problem), register=True)
    assert pool is not None and backend is not None
    ledger = offer.ledger(pool)
    domain = offer.domain(binding)
    offered = tuple(offer.offered_protocols(backend))
    target = client.ClientTarget(
        offer.client_endpoint(pool), offered[0], domain["name"] if ledger.tenant else ""
    )
    attachment = Attachment(name, offer.pool_name(binding), domain, target, offered)
    return Resolution(
        attachment,
        Verdict(t, TRUE, kv.REASON_REGISTERED, f"domain {domain['name']} on KVCachePool {attachment.pool}"),
        register=True,
    )


def _not_ready(binding: Obj, pool: Obj | None, backend: Obj | None) -> str:
    if pool is None:
        return f"its KVCachePool {offer.pool_name(binding)!r} does not exist"
    if backend is None:
        return f"the KVCacheBackend {offer.backend_name(pool)!r} of its pool does not exist"
    ledger = offer.ledger(pool)
    if not ledger.usable:
        return f"its pool reports QuotaLedgerAvailable {ledger.reason or 'unknown'}: {ledger.message}"
    if not offer.client_endpoint(pool):
        return "its pool has published no client endpoint yet"
    if len(offer.offered_protocols(backend)) > 1:
        return f"its pool's member groups offer several transports ({', '.join(offer.offered_protocols(backend))})"
    return ""


def kv_cache_status(resolution: Resolution) -> Obj | None:
    """``status.kvCache``; ``None`` (absent) while unresolved."""
    found = resolution.attachment
    if found is None:
        return None
    domain = {"name": found.domain["name"], "dtype": found.domain["dtype"]}
    if isinstance(found.domain.get("blockSize"), int):
        domain["blockSize"] = found.domain["blockSize"]
    return {"binding": found.binding, "pool": found.pool, "domain": domain}


@dataclass
class RoleConnector:
    """What one role's engine container and Pod carry for the store connector."""

    annotations: dict[str, str] = field(default_factory=dict)
    volumes: list[Obj] = field(default_factory=list)
    mounts: list[Obj] = field(default_factory=list)
    env: list[Obj] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    store_connector: Obj | None = None  # vLLM: the MultiConnector member when a direct leg is paired


def role_connector(
    engine: str, attachment: Attachment, *, ascend: bool, kind: str, dtype_owned: bool, paired: bool = False
) -> RoleConnector:
    """``kind`` is the role's kind (Server, Prefill, Decode).  With ``paired`` (a P/D pair with a
    router, §11.1) vLLM's ``--kv-transfer-config`` is the caller's MultiConnector, and this returns
    the store member for it instead of the flag."""
    out = RoleConnector()
    role = kind if kind in kv.POD_ROLES else ""
    if engine == "SGLang":
        out.env = client.sglang_env(attachment.target)
        out.args = [kv.ARG_HICACHE_STORAGE_BACKEND, "mooncake"]
    else:
        out.annotations[constants.ANNOTATION_KVCACHE_CLIENT_CONFIG] = client.client_config_annotation(
            attachment.target
        )
        out.volumes = [client.config_volume()]
        out.mounts = [client.config_mount()]
        out.env = client.vllm_env()
        member = {"kv_connector": client.vllm_connector(ascend=ascend), "kv_role": kv.KV_ROLE[role]}
        if paired:
            out.store_connector = member
        else:
            out.args = [kv.ARG_KV_TRANSFER_CONFIG, client.vllm_transfer_config(ascend=ascend, role=role)]
    if dtype_owned and attachment.domain.get("dtype"):
        out.args += [kv.ARG_KV_CACHE_DTYPE, str(attachment.domain["dtype"])]
    return out


def exempt_labels() -> dict[str, str]:
    """The marker every ModelDeployment Pod carries: the explicit opt-out of Pod injection (the
    renderer configures the cache itself), so the injection webhook never selects these Pods."""
    return {constants.LABEL_KVCACHE_INJECT: kv.INJECT_FALSE}


def used_by_manager(md: Obj) -> str:
    meta = _dict(md.get("metadata"))
    return f"{MD_FIELD_MANAGER_PREFIX}/{meta.get('namespace')}/{meta.get('name')}"[:128]


def used_by_apply(md: Obj, binding: str, *, registered: bool) -> Obj:
    """The status apply (subresource ``status``, field manager :func:`used_by_manager`) adding this
    deployment to Binding ``binding``'s ``usedBy``, or with ``registered=False`` dropping it."""
    meta = _dict(md.get("metadata"))
    entry = {"kind": kv.KIND_MODEL_DEPLOYMENT, "namespace": meta.get("namespace"), "name": meta.get("name")}
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": kv.KIND_BINDING,
        "metadata": {"name": binding, "namespace": meta.get("namespace")},
        "status": {"usedBy": [entry] if registered else []},
    }


def domain_registered(resolution: Resolution, *, in_used_by: bool) -> Verdict:
    """``DomainRegistered``: True/Registered only once the Binding lists the deployment."""
    verdict = resolution.registered
    if verdict.reason == kv.REASON_REGISTERED and not in_used_by:
        return Verdict(
            verdict.type,
            FALSE,
            kv.REASON_BINDING_NOT_READY,
            "registration in the Binding's usedBy is pending",
        )
    return verdict


def cache_attached(md: Obj, binding: Obj | None, *, managed_roles: int, ready_replicas: int) -> Verdict:
    """``CacheAttached`` from observed operations: the store's charge against the domain (the
    Binding's ``usage``, read from the master's ledger) is the evidence of completed writes."""
    t = kv.COND_CACHE_ATTACHED
    if not has_cache(md):
        return Verdict(t, TRUE, kv.REASON_NOT_APPLICABLE, "no spec.kvCache")
    if managed_roles == 0:
        return Verdict(
            t,
            UNKNOWN,
            kv.REASON_UNMANAGED,
            "every role takes over its command line; the connector is the user's",
        )
    if ready_replicas == 0:
        return Verdict(t, UNKNOWN, kv.REASON_NO_REPLICA_READY, "no replica is ready to use the cache")
    status = _dict(_dict(binding).get("status"))
    usage = to_bytes(status.get("usage")) if status.get("usage") is not None else None
    if usage is None:
        return Verdict(
            t,
            UNKNOWN,
            kv.REASON_NO_OBSERVATION_AVAILABLE,
            "the master's ledger has not been read for this domain",
        )
    if usage > 0:
        return Verdict(
            t, TRUE, kv.REASON_CACHE_ACTIVE, f"the store holds {status.get('usage')} written in this domain"
        )
    granted = next(
        (
            x
            for x in status.get("conditions") or []
            if isinstance(x, dict) and x.get("type") == kv.COND_QUOTA_GRANTED
        ),
        None,
    )
    if granted is not None and granted.get("status") == FALSE:
        return Verdict(
            t, FALSE, kv.REASON_CACHE_OPERATIONS_FAILING, f"writes cannot land: {granted.get('message')}"
        )
    return Verdict(t, UNKNOWN, kv.REASON_NO_OBSERVATION_AVAILABLE, "no write observed in this domain yet")
