"""``KVCacheBackend``: one Mooncake store, run by the operator (managed) or somebody else (external).

Follows ``api/worker/v1alpha1/kv_cache_backend.go`` and, where the stored type is older than the
kv-cache spec (§2.1), the spec: the leader carries ``replicas`` (1..5), ``electionBackend``
(``Kubernetes`` | ``None``), ``memberAddressing`` (``Service`` | ``Lease``), ``allocationStrategy``,
``multiTenancy`` (default true, so a pointer here) and the ``extraArgs``/``extraEnv`` hatches; a
member group carries ``nodeSelector``, ``medium`` (``DRAM`` | ``VRAM``), ``capacityPerMember``,
``localBufferSize``, ``image``, its own ``transport``, ``fabricInterfaceCount``, ``extraArgs``,
``extraEnv``, ``securityContext``, ``hostPaths``, ``runtimeClassName`` and at most one
``localDisks`` tier. The older ``leader.highAvailability`` block and ``transport.deviceResourceName``
are not part of this API (the spec follows the current documentation).

The members list is atomic: a group's position is its identity, judged by the webhook.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from api.models.base import AGE, CRD, Int32, Int64, PrinterColumn, Quantity, Resource, Schema, field
from api.models.common import (
    ABSOLUTE_PATH,
    DNS_SUBDOMAIN,
    PULL_POLICY,
    Condition,
    EnvVar,
    LocalObjectReference,
    SecurityContext,
    conditions_field,
)

PROTOCOL = Literal["Auto", "TCP", "RDMA", "EFA", "CANN", "ROCM", "MUSA", "MACA"]


class KVCacheObjectReference(Schema):
    """An object of this API group consuming another; ``namespace`` is "" for the holder's own scope."""

    kind: str = field(required=True, always=True)
    namespace: str = field(required=True, always=True)
    name: str = field(required=True, always=True)


def used_by_field() -> Any:
    return field(alias="usedBy", list_type="map", map_keys=("kind", "namespace", "name"))


class KVCacheBackendEndpoint(Schema):
    """A named address: ``Client`` for engines, ``Admin`` for the operator's reads."""

    name: Literal["Client", "Admin"] = field(required=True)
    address: str = field(required=True, max_length=259, doc="host:port")


class KVCacheBackendExternal(Schema):
    endpoints: list[KVCacheBackendEndpoint] = field(
        required=True, list_type="map", map_keys=("name",), min_length=1
    )


class KVCacheBackendLeader(Schema):
    """The metadata service (the store's "master")."""

    replicas: Int32 | None = field(pointer=True, crd_default=1, ge=1, le=5)
    election_backend: Literal["Kubernetes", "None"] | None = field(
        alias="electionBackend", crd_default="Kubernetes"
    )
    member_addressing: Literal["Service", "Lease"] | None = field(
        alias="memberAddressing", crd_default="Service"
    )
    allocation_strategy: Literal["FreeRatioFirst", "Random"] | None = field(
        alias="allocationStrategy", crd_default="FreeRatioFirst"
    )
    multi_tenancy: bool | None = field(
        alias="multiTenancy",
        pointer=True,
        crd_default=True,
        doc="The per-tenant quota ledger; stores before 0.3.12 need false.",
    )
    extra_args: list[str] | None = field(
        alias="extraArgs", list_type="atomic", doc="-flag[=value], after the derived flags."
    )
    extra_env: list[EnvVar] | None = field(alias="extraEnv", list_type="map", map_keys=("name",))


class KVCacheBackendMemberTransport(Schema):
    protocol: PROTOCOL | None = field(crd_default="Auto")


class KVCacheBackendMemberHostPath(Schema):
    path: str = field(required=True, max_length=1024, pattern=ABSOLUTE_PATH)
    mount_path: str = field(alias="mountPath", required=True, max_length=1024, pattern=ABSOLUTE_PATH)
    type: (
        Literal[
            "",
            "DirectoryOrCreate",
            "Directory",
            "FileOrCreate",
            "File",
            "Socket",
            "CharDevice",
            "BlockDevice",
        ]
        | None
    ) = field(pointer=True)
    read_only: bool | None = field(alias="readOnly")


class KVCacheBackendMemberLocalDiskEvictionWatermark(Schema):
    high: Int32 = field(required=True, ge=1, le=100)
    low: Int32 = field(required=True, ge=1, le=100)


class KVCacheBackendMemberLocalDiskEviction(Schema):
    enabled: bool | None = field(pointer=True, crd_default=True)
    policy: Literal["FIFO", "LRU"] | None = None
    watermark: KVCacheBackendMemberLocalDiskEvictionWatermark | None = None


class KVCacheBackendMemberLocalDisk(Schema):
    """A local disk tier on the group's nodes."""

    path: str = field(required=True, max_length=4096)
    capacity: Quantity | None = field(pointer=True)
    key_limit: Int64 | None = field(alias="keyLimit", ge=0)
    eviction: KVCacheBackendMemberLocalDiskEviction | None = None
    clean_after_delete: bool | None = field(alias="cleanAfterDelete")


class KVCacheBackendMember(Schema):
    """One group of store members: the nodes it selects and the medium each contributes."""

    node_selector: dict[str, str] = field(alias="nodeSelector", required=True)
    medium: Literal["DRAM", "VRAM"] = field(required=True)
    capacity_per_member: Quantity = field(alias="capacityPerMember", required=True)
    local_buffer_size: Quantity | None = field(alias="localBufferSize", pointer=True)
    image: str | None = field(max_length=512)
    transport: KVCacheBackendMemberTransport | None = None
    fabric_interface_count: Int32 | None = field(alias="fabricInterfaceCount", pointer=True, ge=1)
    extra_args: list[str] | None = field(
        alias="extraArgs", list_type="atomic", doc="-key=value, rendered -D key=value."
    )
    extra_env: list[EnvVar] | None = field(alias="extraEnv", list_type="map", map_keys=("name",))
    security_context: SecurityContext | None = field(alias="securityContext")
    host_paths: list[KVCacheBackendMemberHostPath] | None = field(alias="hostPaths", max_length=32)
    runtime_class_name: str | None = field(alias="runtimeClassName", max_length=253, pattern=DNS_SUBDOMAIN)
    local_disks: list[KVCacheBackendMemberLocalDisk] | None = field(
        alias="localDisks", list_type="map", map_keys=("path",), max_length=1
    )


class KVCacheBackendScaleIn(Schema):
    grace_period_seconds: Int32 | None = field(alias="gracePeriodSeconds", ge=0, le=3600)


class KVCacheBackendManaged(Schema):
    leader: KVCacheBackendLeader = field(required=True)
    members: list[KVCacheBackendMember] = field(
        required=True, list_type="atomic", min_length=1, max_length=32
    )
    scale_in: KVCacheBackendScaleIn | None = field(alias="scaleIn")


class KVCacheBackendConnection(Schema):
    """Exactly one of ``managed`` and ``external`` (the webhook refuses both and neither)."""

    managed: KVCacheBackendManaged | None = None
    external: KVCacheBackendExternal | None = None


class KVCacheBackendTransport(Schema):
    protocol: PROTOCOL | None = field(crd_default="Auto", doc="Auto is TCP, never a probe.")


class KVCacheBackendSpec(Schema):
    type: Literal["Mooncake"] | None = field(crd_default="Mooncake")
    image: str | None = field(max_length=512, doc="Defaults to the kv-cache-backend-image Setting.")
    image_pull_policy: PULL_POLICY | None = field(alias="imagePullPolicy")
    image_pull_secrets: list[LocalObjectReference] | None = field(
        alias="imagePullSecrets", list_type="atomic", max_length=32
    )
    connection: KVCacheBackendConnection = field(required=True)
    transport: KVCacheBackendTransport | None = field(crd_default={})


class KVCacheBackendCapacity(Schema):
    """Capacity as the leader reports it; absent when not observed."""

    total: Quantity | None = field(pointer=True)
    used: Quantity | None = field(pointer=True)


class KVCacheBackendMemberStatus(Schema):
    segment_id: str = field(alias="segmentID", required=True)
    client_id: str = field(alias="clientID", required=True)
    segment_name: str = field(alias="segmentName", required=True)
    node_name: str | None = field(alias="nodeName")
    medium: str | None = None
    protocol: str | None = None
    state: str | None = None


class KVCacheBackendStatus(Schema):
    phase: str | None = field(doc="Provisioning, Ready, Degraded, Error or Deleting.")
    phase_message: str | None = field(alias="phaseMessage")
    conditions: list[Condition] | None = conditions_field()
    endpoints: list[KVCacheBackendEndpoint] | None = field(list_type="map", map_keys=("name",))
    capacity: KVCacheBackendCapacity | None = None
    members: list[KVCacheBackendMemberStatus] | None = field(list_type="map", map_keys=("segmentID",))
    used_by: list[KVCacheObjectReference] | None = used_by_field()


class KVCacheBackend(Resource):
    """One KV cache store: its leader, its member groups, and what they report."""

    __crd__: ClassVar[CRD] = CRD(
        kind="KVCacheBackend",
        plural="kvcachebackends",
        scope="Cluster",
        short_names=("kvcb",),
        columns=(
            PrinterColumn("Type", ".spec.type"),
            PrinterColumn("Phase", ".status.phase"),
            PrinterColumn("Endpoint", ".status.endpoints[?(@.name=='Client')].address"),
            PrinterColumn("Capacity", ".status.capacity.total"),
            AGE,
        ),
    )

    spec: KVCacheBackendSpec = field(required=True)
    status: KVCacheBackendStatus | None = None
