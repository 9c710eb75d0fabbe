"""``KVCachePool`` (a quota domain over one backend) and ``KVCachePoolBinding`` (one namespace's grant).

Follow ``api/worker/v1alpha1/kv_cache_pool.go`` and ``kv_cache_pool_binding.go``. The Binding's
request sits at ``spec.quota.ceiling`` (the published examples and the newer type; an older stored
revision had a flat ``quotaCeiling``), and ``spec.domain.name`` defaults to ``default`` in the schema
(kv-cache spec §2.3).

Frozen, as CEL transition rules: the pool's ``backends``; the Binding's ``poolRef`` and ``domain``.
Every observed figure in both statuses is a pointer: absent means not observed, never zero.
"""

from __future__ import annotations

from typing import ClassVar

from api.models.base import (
    AGE,
    CRD,
    Int32,
    Int64,
    ObjectName,
    PrinterColumn,
    Quantity,
    Resource,
    Rule,
    Schema,
    field,
    frozen,
)
from api.models.common import Condition, conditions_field
from api.models.kv_cache_backend import KVCacheObjectReference, used_by_field

HIT_RATE = r"^(0(\.[0-9]{1,4})?|1(\.0{1,4})?)$"


class KVCachePoolQuota(Schema):
    total: Quantity = field(required=True, doc="The ceiling this pool declares over its backend; positive.")


class KVCachePoolSpec(Schema):
    __k8s_rules__: ClassVar[tuple[Rule, ...]] = (
        frozen(
            "backends",
            "spec.backends is immutable: tenant quotas live on that backend's ledger; "
            "create another KVCachePool to draw from another backend",
            optional=False,
        ),
    )

    backends: list[ObjectName] = field(
        required=True,
        list_type="atomic",
        max_length=8,
        doc="The KVCacheBackend names; exactly one (webhook).",
    )
    quota: KVCachePoolQuota = field(required=True)


class KVCachePoolUsage(Schema):
    total: Quantity | None = field(pointer=True)


class KVCachePoolBindingReference(Schema):
    namespace: str = field(required=True, always=True)
    name: str = field(required=True, always=True)


class KVCachePoolDomain(Schema):
    """One reuse domain registered against the pool, by the Binding that declared it."""

    name: str = field(required=True, max_length=63)
    binding: KVCachePoolBindingReference = field(required=True)
    block_size: Int32 = field(alias="blockSize", required=True)
    dtype: str = field(required=True)
    blocks: Int64 | None = field(pointer=True)
    hit_rate: str | None = field(alias="hitRate", pattern=HIT_RATE)


class KVCachePoolStatus(Schema):
    phase: str | None = field(doc="Provisioning, Ready, Degraded, Error or Deleting.")
    phase_message: str | None = field(alias="phaseMessage")
    conditions: list[Condition] | None = conditions_field()
    client_endpoint: str | None = field(alias="clientEndpoint", max_length=259)
    usage: KVCachePoolUsage | None = None
    domains: list[KVCachePoolDomain] | None = field(list_type="map", map_keys=("name",))
    used_by: list[KVCacheObjectReference] | None = used_by_field()


class KVCachePool(Resource):
    """The capacity a backend publishes, and the registry of its reuse domains."""

    __crd__: ClassVar[CRD] = CRD(
        kind="KVCachePool",
        plural="kvcachepools",
        scope="Cluster",
        short_names=("kvcp",),
        columns=(
            PrinterColumn("Quota", ".spec.quota.total"),
            PrinterColumn("Usage", ".status.usage.total"),
            PrinterColumn("Phase", ".status.phase"),
            PrinterColumn("Endpoint", ".status.clientEndpoint"),
            AGE,
        ),
    )

    spec: KVCachePoolSpec = field(required=True)
    status: KVCachePoolStatus | None = None


class KVCachePoolBindingPoolReference(Schema):
    name: str = field(required=True, max_length=253)


class KVCachePoolBindingQuota(Schema):
    ceiling: Quantity = field(required=True, doc="What this namespace may hold; a request, not a grant.")


class KVCachePoolBindingDomain(Schema):
    """The reuse identity: the store's tenant and the shape of its blocks."""

    name: str | None = field(crd_default="default", max_length=63, doc="A DNS-1123 label; the tenant id.")
    block_size: Int32 = field(alias="blockSize", required=True, ge=1)
    dtype: str = field(required=True, max_length=32, doc="The engine's own spelling, e.g. bfloat16.")


class KVCachePoolBindingSpec(Schema):
    __k8s_rules__: ClassVar[tuple[Rule, ...]] = (
        frozen(
            "poolRef",
            "spec.poolRef is immutable: a grant cannot move to another pool; "
            "create another KVCachePoolBinding for that pool",
            optional=False,
        ),
        frozen(
            "domain",
            "spec.domain is immutable: a warm cache under a changed name, blockSize or dtype is corrupt; "
            "create another KVCachePoolBinding for the new domain",
            optional=False,
        ),
    )

    pool_ref: KVCachePoolBindingPoolReference = field(alias="poolRef", required=True)
    domain: KVCachePoolBindingDomain = field(required=True)
    quota: KVCachePoolBindingQuota = field(required=True)


class KVCachePoolBindingStatus(Schema):
    phase: str | None = None
    phase_message: str | None = field(alias="phaseMessage")
    conditions: list[Condition] | None = conditions_field()
    requested_quota: Quantity | None = field(alias="requestedQuota", pointer=True)
    effective_quota: Quantity | None = field(alias="effectiveQuota", pointer=True)
    usage: Quantity | None = field(pointer=True)
    over_quota: bool | None = field(alias="overQuota", pointer=True)
    blocks: Int64 | None = field(pointer=True)
    hit_rate: str | None = field(alias="hitRate", pattern=HIT_RATE)
    used_by: list[KVCacheObjectReference] | None = used_by_field()


class KVCachePoolBinding(Resource):
    """One namespace's grant on a pool, under exactly one reuse domain."""

    __crd__: ClassVar[CRD] = CRD(
        kind="KVCachePoolBinding",
        plural="kvcachepoolbindings",
        scope="Namespaced",
        short_names=("kvcpb",),
        columns=(
            PrinterColumn("Pool", ".spec.poolRef.name"),
            PrinterColumn("Domain", ".spec.domain.name"),
            PrinterColumn("Effective", ".status.effectiveQuota"),
            PrinterColumn("Usage", ".status.usage"),
            PrinterColumn("Phase", ".status.phase"),
            AGE,
        ),
    )

    spec: KVCachePoolBindingSpec = field(required=True)
    status: KVCachePoolBindingStatus | None = None
