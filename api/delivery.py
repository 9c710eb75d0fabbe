"""Model delivery vocabulary: condition types, reasons, CSI volume keys (model-delivery spec §2, §4, §5).

The finalizer, the CSI driver name and the two mount paths are in :mod:`api.constants`; everything
else the artifact controller, the node plugin, the worker's NodeModelStore writer and the
ModelDeployment renderer must agree on is here, once.
"""

from __future__ import annotations

from typing import Final

from api import setting_names
from api.constants import CSI_DRIVER_MODEL, FINALIZER_MODEL_ARTIFACT, MODEL_CACHE_MOUNT_PATH, MODEL_MOUNT_PATH

__all__ = [
    "CSI_DRIVER_MODEL",
    "FINALIZER_MODEL_ARTIFACT",
    "MODEL_CACHE_MOUNT_PATH",
    "MODEL_MOUNT_PATH",
]

# --- ModelArtifact conditions and reasons (§5) --------------------------------------------------------
RESOLVED: Final = "Resolved"
DEGRADED: Final = "Degraded"
REASON_RESOLVED: Final = "Resolved"
REASON_HEALTHY: Final = "Healthy"
REVISION_NOT_FOUND: Final = "RevisionNotFound"
ACCESS_DENIED: Final = "AccessDenied"
SOURCE_UNAVAILABLE: Final = "SourceUnavailable"
SECRET_NOT_FOUND: Final = "SecretNotFound"
CLAIM_NOT_FOUND: Final = "ClaimNotFound"
EMPTY_MANIFEST: Final = "EmptyManifest"
DIGEST_MISMATCH: Final = "DigestMismatch"
# Spec §8 leaves open the reason of a tree that cannot form a manifest (a path with '..', a hash
# that is not hex): it is a permanent property of the commit, so it gets its own reason.
INVALID_MANIFEST: Final = "InvalidManifest"
RESOLUTION_REASONS: Final = (
    REVISION_NOT_FOUND,
    ACCESS_DENIED,
    SOURCE_UNAVAILABLE,
    SECRET_NOT_FOUND,
    CLAIM_NOT_FOUND,
    EMPTY_MANIFEST,
    DIGEST_MISMATCH,
    INVALID_MANIFEST,
)
EVENT_INVALID_TOKEN: Final = "InvalidToken"
SECRET_TOKEN_KEY: Final = "token"
DIGEST_SOURCE_HUB: Final = "Hub"
DIGEST_SOURCE_EXPECTED: Final = "Expected"

# --- NodeModelStore (§2.2, §5) ----------------------------------------------------------------------
NMS_READY: Final = "Ready"
NMS_CAPACITY_LOW: Final = "CapacityLow"
REASON_SERVING: Final = "Serving"
REASON_INVALID_CONFIGURATION: Final = "InvalidConfiguration"
REASON_WITHIN_WATERMARKS: Final = "WithinWatermarks"
REASON_NOTHING_TO_REMOVE: Final = "NothingToRemove"
STATE_DOWNLOADING: Final = "Downloading"
STATE_READY: Final = "Ready"
STATE_FAILED: Final = "Failed"
MAX_STATUS_MODELS: Final = 256

# Materialization failure reasons (§4.5).
INVALID_REQUEST: Final = "InvalidRequest"
INTEGRITY_MISMATCH: Final = "IntegrityMismatch"
INSUFFICIENT_CAPACITY: Final = "InsufficientCapacity"
CANCELED: Final = "Canceled"
FAILURE_REASONS: Final = (
    INVALID_REQUEST,
    ACCESS_DENIED,
    SOURCE_UNAVAILABLE,
    INTEGRITY_MISMATCH,
    INSUFFICIENT_CAPACITY,
    CANCELED,
)

# --- The CSI volume a consumer mounts (§4.3, §4.5) ------------------------------------------------------
VOLUME_NAME: Final = "gpustack-model"
ATTR_ARTIFACT: Final = "artifact"
ATTR_ARTIFACT_UID: Final = "artifactUID"
ATTR_MANIFEST_DIGEST: Final = "manifestDigest"
CSI_EPHEMERAL: Final = "csi.storage.k8s.io/ephemeral"
CSI_POD_NAMESPACE: Final = "csi.storage.k8s.io/pod.namespace"
CSI_POD_NAME: Final = "csi.storage.k8s.io/pod.name"
CSI_POD_UID: Final = "csi.storage.k8s.io/pod.uid"

# --- ModelDeployment WeightsReady (§5) ------------------------------------------------------------------
WEIGHTS_READY: Final = "WeightsReady"
DELIVERY_PVC: Final = "PVC"
DELIVERY_ENGINE: Final = "Engine"
DELIVERY_NODE: Final = "Node"
DELIVERY_IMAGE: Final = "Image"

# --- Pools and warming: ModelStore, ModelStoreBinding, ModelPrefetch (§2.3, §3.5, §4.9, §5) ------------
KIND_ARTIFACT: Final = "ModelArtifact"
KIND_STORE: Final = "ModelStore"
KIND_BINDING: Final = "ModelStoreBinding"
KIND_PREFETCH: Final = "ModelPrefetch"
STORE_READY: Final = "Ready"
STORE_SELECTOR_OVERLAP: Final = "SelectorOverlap"
REASON_GOVERNS_NODES: Final = "GovernsNodes"
REASON_NO_NODES: Final = "NoNodes"
REASON_INVALID_SELECTOR: Final = "InvalidSelector"
REASON_OVERLAP: Final = "Overlap"
REASON_NO_OVERLAP: Final = "NoOverlap"
BINDING_OVER_QUOTA: Final = "OverQuota"
PHASE_READY: Final = "Ready"
PHASE_OVER_QUOTA: Final = "OverQuota"
PHASE_ERROR: Final = "Error"
REASON_WITHIN_QUOTA: Final = "WithinQuota"
REASON_QUOTA_EXCEEDED: Final = "QuotaExceeded"
REASON_NOT_COUNTED: Final = "NotCounted"
REASON_STORE_NOT_FOUND: Final = "StoreNotFound"
PREFETCH_PROGRESSING: Final = "Progressing"
PREFETCH_AVAILABLE: Final = "Available"
PREFETCH_DEGRADED: Final = "Degraded"
PREFETCH_LAPSED: Final = "Lapsed"
REASON_WARMING: Final = "Warming"
REASON_WARM: Final = "Warm"
REASON_BELOW_MIN_READY: Final = "BelowMinReady"
REASON_NO_TARGETS: Final = "NoTargets"
REASON_ARTIFACT_NOT_FOUND: Final = "ArtifactNotFound"
REASON_ARTIFACT_NOT_RESOLVED: Final = "ArtifactNotResolved"
REASON_NOT_NODE_DELIVERED: Final = "NotNodeDelivered"
REASON_BINDING_NOT_FOUND: Final = "BindingNotFound"
REASON_NODE_DELIVERY_UNAVAILABLE: Final = "NodeDeliveryUnavailable"
REASON_MATERIALIZATION_FAILED: Final = "MaterializationFailed"
REASON_OUTSIDE_GRANT: Final = "OutsideGrant"
REASON_HEALTHY_PREFETCH: Final = "Healthy"
REASON_TTL_EXPIRED: Final = "TTLExpired"
REASON_NOT_LAPSED: Final = "NotLapsed"
# The warm-up Pods: labelled with their prefetch (never with Kueue's queue label, §7 item 17); a
# node's copy that outlived ttlAfterLastUse is marked on that node's Pod, so it is not re-warmed.
LABEL_PREFETCH: Final = "worker.gpustack.ai/model-prefetch"
ANNOTATION_PREFETCH_NODE: Final = "worker.gpustack.ai/model-prefetch-node"
ANNOTATION_PREFETCH_LAPSED: Final = "worker.gpustack.ai/model-prefetch-lapsed"
WARMUP_CONTAINER: Final = "warmup"
SETTING_WARMUP_IMAGE: Final = setting_names.MODEL_PREFETCH_WARMUP_IMAGE
FIELD_MANAGER_PINS: Final = "gpustack-operator/model-prefetch-pins"
FIELD_MANAGER_PREFETCH: Final = "gpustack-operator/model-prefetches"
FIELD_MANAGER_STORES: Final = "gpustack-operator/model-stores"
FIELD_MANAGER_BINDINGS: Final = "gpustack-operator/model-store-bindings"

# --- Peer sync (§4.10) ------------------------------------------------------------------------------------
SETTING_PEER_SYNC: Final = setting_names.MODEL_STORE_PEER_SYNC
PEER_AUDIENCE: Final = "gpustack-model-peer"
# The plugins' ServiceAccount, the only user a peer request may authenticate as (chart default).
PEER_DEFAULT_USER: Final = "system:serviceaccount:gpustack-system:gpustack-model-manager"
PEER_TREES_PATH: Final = "/peer/v1/trees/"
SOURCE_HUB: Final = "Hub"
SOURCE_PEER: Final = "Peer"
