"""Model delivery vocabulary: condition types, reasons, CSI volume keys (model-delivery spec §2, §4, §5).

The finalizer, the CSI driver name and the two mount paths are in :mod:`api.constants`; everything
else the artifact controller, the node plugin, the worker's NodeModelStore writer and the
ModelDeployment renderer must agree on is here, once.
"""

from __future__ import annotations

from typing import Final

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
