"""The plugin's Prometheus metrics (model-delivery spec §5), served on its side port. No label ever
names a tenant, an artifact, a repository or a digest."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from kube import metrics as _build_info  # noqa: F401  (gpustack_build_info on /metrics)

DOWNLOAD_BYTES = Counter(
    "gpustack_model_manager_download_bytes_total", "Verified bytes written to the cache.", ["source"]
)
MOUNTS = Counter(
    "gpustack_model_manager_mounts_total",
    "NodePublishVolume answers: hit (published already), materialized, denied, pending.",
    ["result"],
)
MATERIALIZATIONS = Counter(
    "gpustack_model_manager_materializations_total",
    "Ended attempts by result (published or a reason).",
    ["result"],
)
PUBLISH_SECONDS = Histogram(
    "gpustack_model_manager_publish_duration_seconds",
    "From the start of an attempt to its publication.",
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200),
)
GC_REMOVED_BYTES = Counter("gpustack_model_manager_gc_removed_bytes_total", "Bytes collection removed.")
STORED_BYTES = Gauge("gpustack_model_manager_stored_bytes", "Published and partial bytes in the cache.")
CAPACITY_BYTES = Gauge("gpustack_model_manager_capacity_bytes", "Size of the cache filesystem.")
PEER_SERVED_BYTES = Counter(
    "gpustack_model_manager_peer_served_bytes_total",
    "Bytes this node's plugin served to other nodes' plugins.",
)
LAST_PASS = Gauge(
    "gpustack_model_manager_last_pass_timestamp_seconds",
    "Unix time of the last maintenance pass (collection, NodeModelStore status) that ended without error.",
)
