"""Node delivery: ``NodeModelStore``, ``ModelStore``, ``ModelStoreBinding`` and ``ModelPrefetch``.

Follow ``node_model_store.go``, ``model_store.go``, ``model_store_binding.go`` and
``model_prefetch.go`` of ``api/worker/v1alpha1``. A NodeModelStore is one node's cache: the worker
writes ``spec`` (the effective configuration) and the node's plugin writes ``status`` (what the node
holds; it never names a tenant). A ModelStore is a pool's policy layer over the cluster Settings; a
ModelStoreBinding grants a namespace a byte budget on stores; a ModelPrefetch warms an artifact.

Added from the model-delivery spec (§2.2, newer than the stored types): ``NodeModelStore.spec.store``
(the winning ModelStore), ``spec.pinned`` (digests pinned by prefetches) and the ``Peer`` source.
Ours, for peer sync (§4.10, which names no carrier): ``spec.peerSync`` carries the Setting
``model-store-peer-sync`` to the plugin (which reads its configuration from its spec alone), and
``status.peerAddress`` is where a plugin serves its trees, so a cold node finds the peers that hold
a digest from the NodeModelStores it already watches.
Frozen by CEL: a ModelStoreBinding's ``storeRefs``, and ``allowPinned`` may only go false to true.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from api.models.base import (
    AGE,
    CRD,
    Duration,
    Int32,
    Int64,
    ObjectName,
    PrinterColumn,
    Quantity,
    Resource,
    Rule,
    Schema,
    Time,
    field,
    frozen,
)
from api.models.common import Condition, LabelSelector, conditions_field


class NodeModelStoreWatermarks(Schema):
    """Percentages of the cache filesystem's usage by everything on it."""

    high_percent: Int32 = field(alias="highPercent", required=True, ge=2, le=95)
    low_percent: Int32 = field(alias="lowPercent", required=True, ge=1, le=94)


class NodeModelStoreDownload(Schema):
    concurrency: Int32 = field(required=True, ge=1, le=64)
    bytes_per_second: Int64 | None = field(alias="bytesPerSecond", ge=0, doc="0 is unlimited.")


class NodeModelStoreHub(Schema):
    hugging_face_endpoint: str = field(alias="huggingFaceEndpoint", required=True, min_length=1)
    https_proxy: str | None = field(alias="httpsProxy")
    no_proxy: str | None = field(alias="noProxy")
    ca_bundle_config_map: str | None = field(alias="caBundleConfigMap")


class NodeModelStoreKubelet(Schema):
    """The kubelet thresholds the cache's cap derives from, read from configz."""

    nodefs_available: str | None = field(alias="nodefsAvailable")
    imagefs_available: str | None = field(alias="imagefsAvailable")
    image_gc_high_threshold_percent: Int32 | None = field(
        alias="imageGCHighThresholdPercent", pointer=True, ge=0, le=100
    )


class NodeModelStoreSpec(Schema):
    """The node's effective configuration, merged by the worker from Settings and ModelStores."""

    watermarks: NodeModelStoreWatermarks = field(required=True)
    download: NodeModelStoreDownload = field(required=True)
    hub: NodeModelStoreHub = field(required=True)
    kubelet: NodeModelStoreKubelet | None = None
    store: str | None = field(doc="The ModelStore whose policy applies, if any.")
    pinned: list[str] | None = field(list_type="atomic", doc="Digests pinned against collection.")
    peer_sync: bool | None = field(
        alias="peerSync",
        pointer=True,
        doc="Whether the plugin may pull published trees from other nodes' plugins before the hub "
        "(Setting model-store-peer-sync); absent reads as true.",
    )


class NodeModelStoreCapacity(Schema):
    total_bytes: Int64 = field(alias="totalBytes", required=True)
    stored_bytes: Int64 = field(alias="storedBytes", required=True)
    used_percent: Int32 = field(alias="usedPercent", required=True)


class NodeModelStoreModel(Schema):
    """One digest on the node."""

    digest: str = field(required=True)
    state: Literal["Downloading", "Ready", "Failed"] = field(required=True)
    size_bytes: Int64 | None = field(alias="sizeBytes")
    downloaded_bytes: Int64 | None = field(alias="downloadedBytes", ge=0)
    source: Literal["Hub", "Peer"] | None = None
    referenced: bool | None = None
    last_used_time: Time | None = field(alias="lastUsedTime")
    reason: str | None = None
    message: str | None = None
    retry_time: Time | None = field(alias="retryTime")


class NodeModelStoreSummary(Schema):
    """What the reference's ``v1`` view prints as columns, written by the plugin (CRDs here are
    served at ``v1`` directly, so a computed column is a status field a JSONPath column shows)."""

    models: Int32 = field(required=True, always=True, ge=0, doc="Ready models on the node.")
    downloading: str | None = field(doc='Running downloads and their mean progress, e.g. "2 (35%)".')


class NodeModelStoreStatus(Schema):
    observed_generation: Int64 | None = field(alias="observedGeneration")
    peer_address: str | None = field(
        alias="peerAddress",
        max_length=261,
        doc="host:port where this node's plugin serves its published trees to the other nodes' plugins; "
        "absent when it serves none.",
    )
    capacity: NodeModelStoreCapacity | None = None
    models: list[NodeModelStoreModel] | None = field(list_type="map", map_keys=("digest",), max_length=256)
    conditions: list[Condition] | None = conditions_field()
    summary: NodeModelStoreSummary | None = None


class NodeModelStore(Resource):
    """One node's model cache, named after the Node."""

    __crd__: ClassVar[CRD] = CRD(
        kind="NodeModelStore",
        plural="nodemodelstores",
        scope="Cluster",
        short_names=("nms",),
        columns=(
            PrinterColumn("Ready", ".status.conditions[?(@.type=='Ready')].status"),
            PrinterColumn("Used", ".status.capacity.usedPercent", "integer"),
            PrinterColumn("Models", ".status.summary.models", "integer"),
            PrinterColumn("Downloading", ".status.summary.downloading"),
            AGE,
        ),
    )

    spec: NodeModelStoreSpec = field(required=True)
    status: NodeModelStoreStatus | None = None


class ModelStoreDownload(Schema):
    """Per-field overrides; an explicit ``bytesPerSecond: 0`` means unlimited on this pool."""

    concurrency: Int32 | None = field(pointer=True, ge=1, le=64)
    bytes_per_second: Int64 | None = field(alias="bytesPerSecond", pointer=True, ge=0)


class ModelStoreSpec(Schema):
    node_selector: LabelSelector = field(alias="nodeSelector", required=True)
    watermarks: NodeModelStoreWatermarks | None = None
    download: ModelStoreDownload | None = None


class ModelStoreCapacity(Schema):
    total_bytes: Int64 = field(alias="totalBytes", required=True)
    stored_bytes: Int64 = field(alias="storedBytes", required=True)


class ModelStoreStatus(Schema):
    nodes: Int32 | None = None
    capacity: ModelStoreCapacity | None = None
    conditions: list[Condition] | None = conditions_field()


class ModelStore(Resource):
    """One node pool's cache policy, above the cluster defaults."""

    __crd__: ClassVar[CRD] = CRD(
        kind="ModelStore",
        plural="modelstores",
        scope="Cluster",
        short_names=("ms",),
        columns=(
            PrinterColumn("Nodes", ".status.nodes", "integer"),
            PrinterColumn("High", ".spec.watermarks.highPercent", "integer"),
            PrinterColumn("Low", ".spec.watermarks.lowPercent", "integer"),
            AGE,
        ),
    )

    spec: ModelStoreSpec = field(required=True)
    status: ModelStoreStatus | None = None


class ModelStoreBindingStoreReference(Schema):
    name: str = field(required=True, max_length=253)


class ModelStoreBindingQuota(Schema):
    bytes: Quantity = field(required=True, doc="May only grow.")


class ModelStoreBindingSpec(Schema):
    __k8s_rules__: ClassVar[tuple[Rule, ...]] = (
        frozen(
            "storeRefs",
            "spec.storeRefs is immutable: re-pointing a grant strands its accounting; "
            "create another ModelStoreBinding for other stores",
            optional=False,
        ),
        Rule(
            "!has(oldSelf.allowPinned) || !oldSelf.allowPinned || (has(self.allowPinned) && self.allowPinned)",
            "spec.allowPinned may only change from false to true: pins already admitted rely on it; "
            "create another ModelStoreBinding without pinning instead",
            field_path=".allowPinned",
        ),
    )

    store_refs: list[ModelStoreBindingStoreReference] = field(
        alias="storeRefs", required=True, list_type="atomic", min_length=1, max_length=8
    )
    quota: ModelStoreBindingQuota = field(required=True)
    allow_pinned: bool | None = field(alias="allowPinned", pointer=True, crd_default=False)


class ModelStoreBindingStatus(Schema):
    phase: str | None = field(doc="Ready, OverQuota or Error.")
    phase_message: str | None = field(alias="phaseMessage")
    conditions: list[Condition] | None = conditions_field()
    used_bytes: Quantity | None = field(alias="usedBytes", pointer=True)


class ModelStoreBinding(Resource):
    """A namespace's prefetch budget on named ModelStores."""

    __crd__: ClassVar[CRD] = CRD(
        kind="ModelStoreBinding",
        plural="modelstorebindings",
        scope="Namespaced",
        short_names=("msb",),
        columns=(
            PrinterColumn("Quota", ".spec.quota.bytes"),
            PrinterColumn("AllowPinned", ".spec.allowPinned", "boolean"),
            PrinterColumn("Used", ".status.usedBytes"),
            PrinterColumn("Phase", ".status.phase"),
            AGE,
        ),
    )

    spec: ModelStoreBindingSpec = field(required=True)
    status: ModelStoreBindingStatus | None = None


class NameReference(Schema):
    name: str = field(required=True, max_length=253)


class ModelPrefetchPlacement(Schema):
    """``instanceTypes`` or ``nodeSelector``; neither derives the targets from the namespace's deployments."""

    instance_types: list[ObjectName] | None = field(
        alias="instanceTypes", list_type="atomic", min_length=1, max_length=8
    )
    node_selector: LabelSelector | None = field(alias="nodeSelector")


class ModelPrefetchRetention(Schema):
    pinned: bool | None = None
    ttl_after_last_use: Duration | None = field(alias="ttlAfterLastUse")


class ModelPrefetchSpec(Schema):
    artifact_ref: NameReference = field(alias="artifactRef", required=True)
    binding_ref: NameReference = field(alias="bindingRef", required=True)
    placement: ModelPrefetchPlacement | None = None
    min_ready: Int32 | None = field(alias="minReady", crd_default=0, ge=0, doc="0 means every target node.")
    retention: ModelPrefetchRetention | None = None


class ModelPrefetchStatus(Schema):
    desired_nodes: Int32 | None = field(alias="desiredNodes")
    ready_nodes: Int32 | None = field(alias="readyNodes")
    downloading_nodes: Int32 | None = field(alias="downloadingNodes")
    conditions: list[Condition] | None = conditions_field()


class ModelPrefetch(Resource):
    """A request to keep an artifact's weights on a set of nodes before a workload mounts them."""

    __crd__: ClassVar[CRD] = CRD(
        kind="ModelPrefetch",
        plural="modelprefetches",
        scope="Namespaced",
        short_names=("mpf",),
        columns=(
            PrinterColumn("Artifact", ".spec.artifactRef.name"),
            PrinterColumn("Binding", ".spec.bindingRef.name"),
            PrinterColumn("Ready", ".status.readyNodes", "integer"),
            PrinterColumn("Desired", ".status.desiredNodes", "integer"),
            PrinterColumn("Pinned", ".spec.retention.pinned", "boolean"),
            AGE,
        ),
    )

    spec: ModelPrefetchSpec = field(required=True)
    status: ModelPrefetchStatus | None = None
